#!/usr/bin/env bash
# Writes the release artefacts for one built module into a directory (`make dist`: target/dist/):
#   libgraceful_drain.so             the module, one file for every supported Envoy
#   oci/                             an OCI image layout, tag <version>: one layer holding only
#                                    /libgraceful_drain.so (Kubernetes image volumes, COPY --from)
#   graceful-drain-<version>.oci.tar the same image as an oci-archive (one file to attach or copy)
#   BUILDINFO                        what the build is made of (version, commit, toolchain, inputs)
#   SHA256SUMS                       sha256 of each of the above files
# Usage: scripts/dist.sh <path of libgraceful_drain.so> <output directory>
#
# Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the commit time of HEAD), owners
# are 0:0, modes fixed, and umoci writes no time of its own (`--created`, `--history.created`), so
# the same .so from the same commit gives the same image digest. The OCI tool is umoci (Debian's
# package, installed here when missing): no daemon, no network, no registry.
set -euo pipefail
so=${1:?usage: scripts/dist.sh <libgraceful_drain.so> <output dir>}
out=${2:?usage: scripts/dist.sh <libgraceful_drain.so> <output dir>}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$so" ] || { echo "no module at $so (run make build)" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "no semver version in Cargo.toml" >&2; exit 1; }
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

if ! command -v umoci >/dev/null; then
  echo "installing umoci (Debian package)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends umoci; } >&2
fi

rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

install -m 0644 "$so" "$out/libgraceful_drain.so"
touch -d "@$epoch" "$out/libgraceful_drain.so"

# The image: an empty base, its config, then one layer from a rootfs that holds only the module.
# (umoci repack, not umoci insert: 0.4.7's insert writes a tar stream without its end blocks.)
layout="$out/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci config --no-history --image "$layout:$version" --created "$created" \
  --os linux --architecture amd64 \
  --config.label "org.opencontainers.image.title=graceful-drain" \
  --config.label "org.opencontainers.image.description=Envoy dynamic module libgraceful_drain.so (Envoy $("$root/scripts/install-envoy.sh" --supported | tr ' ' ','))" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$commit" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0"
umoci unpack --image "$layout:$version" "$work/bundle" >/dev/null
install -m 0644 "$so" "$work/bundle/rootfs/libgraceful_drain.so"
chmod 0755 "$work/bundle/rootfs"
touch -h -d "@$epoch" "$work/bundle/rootfs/libgraceful_drain.so" "$work/bundle/rootfs"
umoci repack --image "$layout:$version" --history.created "$created" \
  --history.created_by "make dist (graceful-drain $version)" "$work/bundle" >/dev/null
umoci gc --layout "$layout"
# File times of the layout itself (they reach the archive below).
find "$layout" -exec touch -h -d "@$epoch" {} +

# The oci-archive: the layout as one tar, sorted, with fixed owners and times.
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$layout" -cf "$out/graceful-drain-$version.oci.tar" .

lock_sum=$(sha256sum "$root/Cargo.lock" | cut -d' ' -f1)
unwinder=$(cc -print-file-name=libgcc_eh.a 2>/dev/null || true)
if [ -f "$unwinder" ]; then
  unwinder="libgcc_eh.a sha256 $(sha256sum "$unwinder" | cut -d' ' -f1), $(cc --version | head -1)"
else
  unwinder="libgcc_eh.a not found"
fi
{
  echo "graceful-drain $version"
  echo "commit $commit"
  echo "source_date_epoch $epoch"
  echo "rustc $(rustc --version)"
  echo "cargo $(cargo --version)"
  echo "cargo_lock_sha256 $lock_sum"
  echo "static_unwinder $unwinder"
  echo "envoy $("$root/scripts/install-envoy.sh" --supported)"
  echo "image_manifest $(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json")"
} > "$out/BUILDINFO"
touch -d "@$epoch" "$out/BUILDINFO" "$out/graceful-drain-$version.oci.tar"

(cd "$out" && sha256sum libgraceful_drain.so "graceful-drain-$version.oci.tar" BUILDINFO > SHA256SUMS)
touch -d "@$epoch" "$out/SHA256SUMS"
cat "$out/SHA256SUMS"
echo "image $layout:$version $(sed -n 's/^image_manifest //p' "$out/BUILDINFO")"
