# Sourced by scripts/demo, scripts/test and scripts/build-image.sh: create .venv with Python ≥ 3.11 and install
# hetsched into it with every extra and the dev tools, everything at exactly requirements-dev.lock's versions
# (its runtime part is requirements.lock's: the images'), once per change of pyproject.toml or the locks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "hetsched needs Python 3.11 or newer; $PYTHON is $("$PYTHON" --version 2>&1)" >&2; exit 1; }
stamp=.venv/.installed-$(cat pyproject.toml requirements.lock requirements-dev.lock | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet --constraint requirements-dev.lock -e '.[dev]'
  rm -f .venv/.installed-* && touch "$stamp"
fi
# the kubelet Device Plugin API's Python code, generated from its .proto (not committed)
.venv/bin/python -m hetsched.agents.deviceplugin.codegen --if-needed
