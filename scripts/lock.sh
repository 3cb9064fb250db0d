#!/usr/bin/env bash
# Write the lock files from pyproject.toml's compatible-release ranges:
#   requirements.lock      every runtime dependency of hetsched[all] (transitive included), exact: the images
#                          install their part of it (deploy/image/install.sh), CI installs it
#   requirements-dev.lock  the same plus the dev tools (tests, linters) and theirs, exact: scripts/env.sh
#                          installs under it, so nothing in CI floats
# Versions already locked stay as they are (the old files are the constraints); --upgrade resolves afresh.
# Run it after changing a dependency in pyproject.toml.
source "$(dirname "$0")/env.sh"
constraints=$(mktemp)
report=$(mktemp)
trap 'rm -f "$constraints" "$report"' EXIT
if [ "${1:-}" != --upgrade ]; then
  cat requirements.lock requirements-dev.lock 2>/dev/null | grep -v '^#' | sort -u > "$constraints" || true
fi
write() {  # write TARGET FILE TITLE
  .venv/bin/pip install --quiet --dry-run --ignore-installed --constraint "$constraints" --report "$report" "$1" \
    >/dev/null
  .venv/bin/python - "$report" "$3" > "$2" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"# {sys.argv[2]}, exact (scripts/lock.sh writes this file; do not edit it by hand)")
for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if name != "hetsched":
        print(f"{name}=={version}")
PY
  echo "$2: $(grep -vc '^#' "$2") packages"
}
write '.[all]' requirements.lock "hetsched[all]'s runtime dependencies"
write '.[dev]' requirements-dev.lock "hetsched[dev]'s dependencies: runtime and the dev tools"
