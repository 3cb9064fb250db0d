#!/bin/sh
# Install hetsched into a container image's root file system — the one recipe both images use: the
# Dockerfile runs it (RUN), and scripts/build-image.sh runs it chrooted in a Debian bookworm root file
# system. tests/test_image.py checks that the two images are configured alike.
#
#   install.sh deps WHEELS      the virtual environment /opt/hetsched with the image's requirements
#                               (WHEELS/image-requirements.txt, from deploy/image/requirements.py) at
#                               requirements.lock's exact versions (WHEELS holds the lock and its wheels;
#                               nothing is fetched), and the user
#   install.sh hetsched WHEELS  hetsched's own wheel into it (a layer of its own: the deps layer is reused)
#
# The user: hetsched, uid and gid 65532, no home and no shell — the manifests run every component as it.
set -eu
step=$1
wheels=$2
case "$step" in
  deps)
    python3 -m venv /opt/hetsched
    /opt/hetsched/bin/pip install --quiet --no-cache-dir --no-index --find-links "$wheels" \
      --constraint "$wheels/requirements.lock" --requirement "$wheels/image-requirements.txt"
    grep -q '^hetsched:' /etc/group || echo 'hetsched:x:65532:' >> /etc/group
    grep -q '^hetsched:' /etc/passwd || echo 'hetsched:x:65532:65532:hetsched:/nonexistent:/usr/sbin/nologin' >> /etc/passwd
    ;;
  hetsched)
    /opt/hetsched/bin/pip install --quiet --no-cache-dir --no-index --no-deps "$wheels"/hetsched-*.whl
    /opt/hetsched/bin/hetsched --help > /dev/null   # it starts, or the build fails here
    ;;
  *)
    echo "install.sh: unknown step $step (deps or hetsched)" >&2; exit 2;;
esac
