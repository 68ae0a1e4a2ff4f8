#!/usr/bin/env bash
# Makes a root directory that holds what Envoy's distroless images hold of shared libraries:
# Debian 12's glibc (the `libc6` package) and nothing else. Envoy's `distroless-vX.Y.Z` images
# are built FROM gcr.io/distroless/base-nossl-debian12 (Envoy's distribution/docker/Dockerfile-envoy,
# stage envoy-distroless): glibc from Debian 12, no libgcc_s, no libstdc++. tests/images.rs starts
# the real Envoy in such a root (chroot, in a private mount namespace with /proc and /dev, as a
# container runtime gives them) with the module loaded.
# Usage: scripts/glibc-root.sh <directory>   (the directory is created; it must not exist)
# Prints the libc6 version it used. The package comes from this machine's apt sources, which must
# be Debian 12 (bookworm), the distroless base's release; it is cached in target/glibc-root/.
set -euo pipefail
dest=${1:?usage: scripts/glibc-root.sh <directory>}
root=$(cd "$(dirname "$0")/.." && pwd)
[ ! -e "$dest" ] || { echo "$dest exists" >&2; exit 1; }
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ "$codename" = bookworm ] || {
  echo "this machine's apt sources are Debian '$codename', not bookworm (Debian 12, the distroless base)" >&2
  exit 1
}
cache="$root/target/glibc-root"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
deb=$(ls "$cache"/libc6_*_amd64.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
  echo "downloading Debian 12's libc6 package" >&2
  # apt's sandbox user cannot write here; the download itself is checked by apt (signed index).
  (cd "$cache" && apt-get download -qq libc6 2>/dev/null) || {
    apt-get update -qq >&2 && (cd "$cache" && apt-get download -qq libc6 2>/dev/null)
  }
  deb=$(ls "$cache"/libc6_*_amd64.deb | head -1)
fi
mkdir -p "$dest"
dpkg-deb -x "$deb" "$dest"
# What a container runtime provides (mount points and a writable /tmp), and the distroless
# layout's /usr/local/bin for Envoy.
mkdir -p "$dest/proc" "$dest/dev" "$dest/tmp" "$dest/etc/envoy" "$dest/usr/local/bin" \
  "$dest/usr/local/lib/envoy/modules"
chmod 1777 "$dest/tmp"
dpkg-deb -f "$deb" Version
