#!/usr/bin/env bash
# Provision real Kubernetes components for the integration tests, the real-node tests and the live
# benchmark — the verified recipes in ../shared/reference/real-kube-apiserver.md and real-nodes.md:
# kube-apiserver, kube-scheduler, kube-controller-manager and kubelet (v1.20.2, built from Debian's source
# package with Debian's Go), etcd, containerd, runc, the CNI plugins, busybox-static, umoci and mmdebstrap
# (the last two build images without a registry: scripts/build-image.sh).
# Built once and cached under $HETSCHED_KUBE_CACHE (default /var/cache/hetsched-kube); a later run only
# builds or installs what is missing. Needs root and the Debian mirror. Prints the cache's bin path.
set -euo pipefail
CACHE=${HETSCHED_KUBE_CACHE:-/var/cache/hetsched-kube}
BIN="$CACHE/bin"
COMPONENTS=(kube-apiserver kube-scheduler kube-controller-manager kubelet)
PACKAGES=(etcd-server containerd runc containernetworking-plugins busybox-static umoci mmdebstrap)
TOOLS=(etcd containerd runc ctr umoci mmdebstrap busybox)

missing=()
for component in "${COMPONENTS[@]}"; do [ -x "$BIN/$component" ] || missing+=("$component"); done
tools_missing=0
for tool in "${TOOLS[@]}"; do command -v "$tool" >/dev/null || tools_missing=1; done
[ -x /usr/lib/cni/bridge ] || tools_missing=1
if [ ${#missing[@]} = 0 ] && [ $tools_missing = 0 ]; then
  echo "$BIN"; exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "provision-kube: building Kubernetes and installing containerd need root (apt-get); skipping" >&2; exit 1
fi
mkdir -p "$CACHE/src" "$BIN"
exec 3>&1 1>>"$CACHE/build.log" 2>&1   # the build's chatter goes to the log
echo "== $(date -u +%FT%TZ) provisioning: ${missing[*]:-} (tools missing: $tools_missing)"
MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR bookworm main" \
  > /etc/apt/sources.list.d/deb-src.list
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y golang-1.19-go golang-github-modern-go-reflect2-dev rsync make \
  "${PACKAGES[@]}"
# containerd's own service is not used: each test node starts its own containerd (real-nodes.md)
systemctl disable --now containerd >/dev/null 2>&1 || true
if [ ${#missing[@]} != 0 ]; then
  cd "$CACHE/src"
  [ -d kubernetes-1.20.5+really1.20.2 ] || apt-get source kubernetes=1.20.5+really1.20.2-1.1+deb12u1
  cd kubernetes-1.20.5+really1.20.2
  # the vendored reflect2 v1.0.1 crashes under Go >= 1.18: use Debian's v1.0.2 sources
  rm -rf vendor/github.com/modern-go/reflect2 && mkdir vendor/github.com/modern-go/reflect2
  cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s \
     vendor/github.com/modern-go/reflect2/ && rm -f vendor/github.com/modern-go/reflect2/*_test.go
  for component in "${missing[@]}"; do
    PATH=/usr/lib/go-1.19/bin:$PATH CGO_ENABLED=0 make WHAT="cmd/$component"
    cp "_output/bin/$component" "$BIN/"
  done
fi
exec 1>&3
echo "$BIN"
