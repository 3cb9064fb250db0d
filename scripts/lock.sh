#!/usr/bin/env bash
# Write requirements.lock: every runtime dependency of hetsched (transitive included) at the exact version
# pip resolves today for pyproject.toml's requirements. CI (scripts/env.sh, as constraints) and the image
# (deploy/image/install.sh) install exactly these. Run it after changing a dependency in pyproject.toml.
source "$(dirname "$0")/env.sh"
report=$(mktemp)
trap 'rm -f "$report"' EXIT
.venv/bin/pip install --quiet --dry-run --ignore-installed --report "$report" . >/dev/null
.venv/bin/python - "$report" > requirements.lock <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print("# hetsched's runtime dependencies, exact (scripts/lock.sh writes this file; do not edit it by hand)")
for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if name != "hetsched":
        print(f"{name}=={version}")
PY
echo "requirements.lock: $(grep -vc '^#' requirements.lock) packages"
