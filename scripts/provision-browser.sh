#!/usr/bin/env bash
# Provision Debian's headless Chromium for the report test (tests/test_report.py opens the simulation
# report in it). Needs root and the Debian mirror; does nothing when /usr/bin/chromium is there already.
set -euo pipefail
if command -v chromium >/dev/null; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "provision-browser: installing chromium needs root (apt-get); skipping" >&2; exit 1
fi
apt-get update >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium
