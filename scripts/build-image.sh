#!/usr/bin/env bash
# Build container images without any registry, from Debian packages and PyPI only (real-nodes.md):
#
#   scripts/build-image.sh [hetsched]   hetsched's image: a Debian bookworm root file system (mmdebstrap) with
#                                       Python 3.11 and deploy/image/install.sh's virtual environment (the
#                                       core dependencies only), as an OCI image (umoci) in
#                                       $CACHE/hetsched-VERSION.oci.tar, named hetsched:VERSION (the manifests'
#                                       image for the scheduler, the controller and the webhook)
#   scripts/build-image.sh hetsched-node  the same with the agents and nvidia extras (gRPC, NVML) as
#                                       hetsched-node:VERSION (the node agents' and device plugins' image)
#   scripts/build-image.sh test-images  busybox (Debian's busybox-static) as docker.io/local/busybox:1.35 and
#                                       a sandbox ("pause") image docker.io/local/busybox:pause, for the
#                                       real-node tests, in $CACHE/busybox.oci.tar
#
# Import into a node's containerd:  ctr -n k8s.io images import --base-name NAME TAR  (the name printed).
# Cached under $HETSCHED_IMAGE_CACHE (default /var/cache/hetsched-image): the Debian root file system with
# the locked dependencies is one layer, rebuilt only when requirements.lock or install.sh change; hetsched's
# wheel is a second layer, built every time. Needs root (chroot, mknod) and scripts/provision-kube.sh's
# umoci and mmdebstrap. Prints "NAME TAR" on success; progress goes to $CACHE/build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-hetsched}
CACHE=${HETSCHED_IMAGE_CACHE:-/var/cache/hetsched-image}
mkdir -p "$CACHE"
for tool in umoci mmdebstrap chroot; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool not found (scripts/provision-kube.sh installs it)" >&2; exit 1; }
done
exec 3>&1 1>>"$CACHE/build.log" 2>&1
echo "== $(date -u +%FT%TZ) build-image $target"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export_tag() {  # export_tag LAYOUT TAG TAR [AS]: one image of a layout as an OCI archive holding only it (tagged AS)
  local copy="$work/export"
  rm -rf "$copy" && cp -a "$1" "$copy"
  for other in $(umoci ls --layout "$copy"); do
    [ "$other" = "$2" ] || umoci rm --image "$copy:$other"
  done
  if [ -n "${4:-}" ] && [ "$4" != "$2" ]; then
    umoci tag --image "$copy:$2" "$4" && umoci rm --image "$copy:$2"
  fi
  umoci gc --layout "$copy"
  tar -C "$copy" -cf "$3.part" . && mv "$3.part" "$3"
}

if [ "$target" = test-images ]; then
  layout="$work/busybox"
  umoci init --layout "$layout"
  umoci new --image "$layout:1.35"
  umoci unpack --image "$layout:1.35" "$work/bundle"
  mkdir -p "$work/bundle/rootfs/bin" "$work/bundle/rootfs/tmp" "$work/bundle/rootfs/dev" "$work/bundle/rootfs/proc"
  cp /bin/busybox "$work/bundle/rootfs/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$work/bundle/rootfs/bin/$applet"
  done
  umoci repack --image "$layout:1.35" "$work/bundle"
  umoci config --image "$layout:1.35" --config.cmd /bin/sh --config.env PATH=/bin
  umoci config --image "$layout:1.35" --tag pause --config.cmd /bin/sleep --config.cmd 2147483647
  tar -C "$layout" -cf "$CACHE/busybox.oci.tar.part" . && mv "$CACHE/busybox.oci.tar.part" "$CACHE/busybox.oci.tar"
  echo "docker.io/local/busybox $CACHE/busybox.oci.tar" >&3
  exit 0
fi
case "$target" in
  hetsched) extras="" ;;
  hetsched-node) extras="agents,nvidia" ;;
  *) echo "build-image: unknown target $target (hetsched, hetsched-node or test-images)" >&3; exit 2 ;;
esac

source scripts/env.sh   # .venv: pip builds the wheel and downloads the locked ones
version=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("hetsched"))')
requirements=$(.venv/bin/python deploy/image/requirements.py pyproject.toml "$extras")
key=$( (echo "$requirements"; cat requirements.lock deploy/image/install.sh) | sha256sum | cut -c1-16)
layout="$CACHE/oci"
[ -d "$layout" ] || umoci init --layout "$layout"
if ! umoci ls --layout "$layout" | grep -qx "base-$key"; then
  # the base layer: Debian bookworm + python3 + the locked dependencies, nothing fetched at install time
  wheels="$work/wheels"
  .venv/bin/pip download --quiet --only-binary=:all: --no-deps --dest "$wheels" --requirement requirements.lock
  cp requirements.lock "$wheels/"
  echo "$requirements" > "$wheels/image-requirements.txt"
  MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    --customize-hook="mkdir -p \"\$1/tmp/wheels\" && cp -a $wheels/. \"\$1/tmp/wheels/\"" \
    --customize-hook="cp deploy/image/install.sh \"\$1/tmp/install.sh\"" \
    --customize-hook='chroot "$1" sh /tmp/install.sh deps /tmp/wheels' \
    --customize-hook='rm -rf "$1/tmp/wheels" "$1/tmp/install.sh" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/*' \
    bookworm "$work/rootfs.tar" "$MIRROR"
  umoci new --image "$layout:base-$key"
  umoci unpack --image "$layout:base-$key" "$work/bundle"
  tar -C "$work/bundle/rootfs" -xf "$work/rootfs.tar"
  umoci repack --image "$layout:base-$key" "$work/bundle"
  rm -rf "$work/bundle" "$work/rootfs.tar"
fi
# hetsched's layer
.venv/bin/pip wheel --quiet --no-deps --wheel-dir "$work/dist" .
umoci unpack --image "$layout:base-$key" "$work/bundle"
root="$work/bundle/rootfs"
mkdir -p "$root/tmp/dist" && cp "$work"/dist/hetsched-*.whl "$root/tmp/dist/" && cp deploy/image/install.sh "$root/tmp/"
chroot "$root" sh /tmp/install.sh hetsched /tmp/dist
rm -rf "$root/tmp/dist" "$root/tmp/install.sh"
tag="$target-$version"
umoci rm --image "$layout:$version" 2>/dev/null || true  # the tag one image had before there were two
umoci repack --image "$layout:$tag" "$work/bundle"
umoci config --image "$layout:$tag" --clear=config.cmd --config.entrypoint /opt/hetsched/bin/hetsched \
  --config.user 65532:65532 --config.workingdir / \
  --config.env PATH=/opt/hetsched/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONUNBUFFERED=1 --author hetsched
umoci gc --layout "$layout"
out="$CACHE/$target-$version.oci.tar"
export_tag "$layout" "$tag" "$out" "$version"
echo "docker.io/library/$target $out" >&3
