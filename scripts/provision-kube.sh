#!/usr/bin/env bash
# Provision a real kube-apiserver, kube-scheduler (v1.20.2, built from Debian's source package) and etcd
# for the Kubernetes integration tests and the live benchmark — the verified recipe in
# ../shared/reference/real-kube-apiserver.md. Built once and cached under $HETSCHED_KUBE_CACHE
# (default /var/cache/hetsched-kube); later runs only check the cache. Needs root and the Debian mirror.
# Prints the cache directory's bin path on success.
set -euo pipefail
CACHE=${HETSCHED_KUBE_CACHE:-/var/cache/hetsched-kube}
BIN="$CACHE/bin"
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-scheduler" ] && command -v etcd >/dev/null; then
  echo "$BIN"; exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "provision-kube: building kube-apiserver needs root (apt-get); skipping" >&2; exit 1
fi
mkdir -p "$CACHE/src" "$BIN"
exec 3>&1 1>"$CACHE/build.log" 2>&1   # the build's chatter goes to the log
MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR bookworm main" \
  > /etc/apt/sources.list.d/deb-src.list
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y golang-1.19-go golang-github-modern-go-reflect2-dev rsync \
  etcd-server make
cd "$CACHE/src"
[ -d kubernetes-1.20.5+really1.20.2 ] || apt-get source kubernetes=1.20.5+really1.20.2-1.1+deb12u1
cd kubernetes-1.20.5+really1.20.2
# the vendored reflect2 v1.0.1 crashes under Go >= 1.18: use Debian's v1.0.2 sources
rm -rf vendor/github.com/modern-go/reflect2 && mkdir vendor/github.com/modern-go/reflect2
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s \
   vendor/github.com/modern-go/reflect2/ && rm -f vendor/github.com/modern-go/reflect2/*_test.go
PATH=/usr/lib/go-1.19/bin:$PATH CGO_ENABLED=0 make WHAT=cmd/kube-apiserver
PATH=/usr/lib/go-1.19/bin:$PATH CGO_ENABLED=0 make WHAT=cmd/kube-scheduler
cp _output/bin/kube-apiserver _output/bin/kube-scheduler "$BIN/"
exec 1>&3
echo "$BIN"
