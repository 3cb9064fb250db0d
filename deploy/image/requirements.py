"""Print the requirements of one image: hetsched's core dependencies plus those of the extras named.

Who calls it: scripts/build-image.sh and the Dockerfile, so an image installs only what its components
import (``hetsched``: the core; ``hetsched-node``: the core with the ``agents`` and ``nvidia`` extras). The
versions come from requirements.lock, given to pip as constraints (deploy/image/install.sh). Standard
library only: it runs before anything is installed.

    python3 deploy/image/requirements.py PYPROJECT [EXTRA,...]
"""

import re
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = [e for e in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if e]
optional = project.get("optional-dependencies", {})
unknown = [e for e in extras if e not in optional]
if unknown:
    sys.exit(f"requirements.py: unknown extra(s) {', '.join(unknown)} (known: {', '.join(sorted(optional))})")
for requirement in [*project["dependencies"], *(r for e in extras for r in optional[e])]:
    if not requirement.startswith("hetsched"):
        print(re.split(r"\s*#", requirement)[0])
