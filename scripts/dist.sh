#!/usr/bin/env bash
# Writes the release artefacts for one built module into a directory (`make dist`: target/dist/):
#   libgraceful_drain.so             the module, one file for every supported Envoy
#   oci/                             an OCI image layout, tag <version>: one layer holding
#                                    /libgraceful_drain.so (Kubernetes image volumes, COPY --from)
#                                    and /copy-module, its entry point (k8s/copy-module/: copies the module
#                                    into a directory, for an init container where a cluster has no
#                                    image volumes); os/architecture those of the module's ELF
#   graceful-drain-<version>.oci.tar the same image as an oci-archive (one file to attach or copy)
#   graceful-drain-<version>.cdx.json the SBOM (CycloneDX 1.5, cargo-cyclonedx): the module's crate
#                                    and every crate it is built from, with versions, licenses and
#                                    crates.io checksums, and copy-module
#   BUILDINFO                        what the build is made of (version, commit, toolchain, inputs)
#   SHA256SUMS                       sha256 of each of the above files
# Usage: scripts/dist.sh <path of libgraceful_drain.so> <output directory>
#        (COPY_MODULE=<path of copy-module>: one built for the module's architecture, see below)
#
# Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the commit time of HEAD), owners
# are 0:0, modes fixed, umoci writes no time of its own (`--created`, `--history.created`), and
# the SBOM's checkout path is written as /graceful-drain (as the Makefile's --remap-path-prefix
# does for the .so), so the same .so from the same commit gives the same image digest and SBOM.
# Needs no root, no daemon, no network, no registry: the tools it uses are installed beforehand
# (scripts/install-tools.sh; .ci/run's package list), and it stops naming any that is missing.
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

# The tools, each checked before anything is written: what is missing is named with where it
# comes from (installing is scripts/install-tools.sh's job, which may need root; this never does).
cyclonedx_version=$(sed -n 's/^CARGO_CYCLONEDX_VERSION=//p' "$root/scripts/install-tools.sh")
missing=()
command -v umoci >/dev/null || missing+=("umoci (Debian package umoci)")
command -v python3 >/dev/null || missing+=("python3 (Debian package python3)")
command -v od >/dev/null || missing+=("od (Debian package coreutils)")
have_cdx=$(cargo cyclonedx --version 2>/dev/null || true)
[[ "$have_cdx" == cargo-cyclonedx* && "${have_cdx##* }" == "$cyclonedx_version" ]] ||
  missing+=("cargo-cyclonedx $cyclonedx_version (crates.io; found: ${have_cdx:-none})")
if [ ${#missing[@]} -gt 0 ]; then
  echo "scripts/dist.sh: missing tools:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  echo "install them with scripts/install-tools.sh (Debian packages need root: apt-get install)" >&2
  exit 1
fi

# The image's os/architecture: the ELF's own (its header's class, byte order and e_machine), never
# assumed. Only what the OCI image spec names for Linux; anything else stops the build.
elf_arch() {
  local f=$1 magic class data machine
  magic=$(od -An -tx1 -N4 "$f" | tr -d ' \n')
  [ "$magic" = 7f454c46 ] || { echo "$f is not an ELF file" >&2; return 1; }
  class=$(od -An -tu1 -j4 -N1 "$f" | tr -d ' ')
  data=$(od -An -tu1 -j5 -N1 "$f" | tr -d ' ')
  [ "$data" = 1 ] || { echo "$f: big-endian ELF, not supported here" >&2; return 1; }
  machine=$(od -An -tu2 --endian=little -j18 -N2 "$f" | tr -d ' ')
  case "$class:$machine" in
    2:62) echo amd64 ;;
    2:183) echo arm64 ;;
    2:243) echo riscv64 ;;
    2:21) echo ppc64le ;;
    1:3) echo 386 ;;
    1:40) echo arm ;;
    *) echo "$f: ELF class $class, e_machine $machine: no OCI architecture for it" >&2; return 1 ;;
  esac
}
arch=$(elf_arch "$so")

# copy-module (k8s/copy-module/), built here: static (the image has no libc), with the checkout and cargo's
# home kept out of it as the Makefile does for the module, in its own target directory. A module
# built for another architecture needs a copy-module of that one: COPY_MODULE=<its path>.
copier_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/k8s/copy-module/Cargo.toml" | head -1)
[ "$copier_version" = "$version" ] || {
  echo "k8s/copy-module/Cargo.toml's version ($copier_version) is not the module's ($version): set both" >&2
  exit 1
}
copier=${COPY_MODULE:-}
if [ -z "$copier" ]; then
  cargo_home=${CARGO_HOME:-$HOME/.cargo}
  RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=$root=/graceful-drain --remap-path-prefix=$cargo_home=/cargo" \
    cargo build --release --locked --quiet --manifest-path "$root/k8s/copy-module/Cargo.toml" \
    --target-dir "$root/target/copier"
  copier="$root/target/copier/release/copy-module"
fi
copier_arch=$(elf_arch "$copier")
[ "$copier_arch" = "$arch" ] || { echo "copy-module is $copier_arch, the module $arch" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

install -m 0644 "$so" "$out/libgraceful_drain.so"
touch -d "@$epoch" "$out/libgraceful_drain.so"

# The image: an empty base, its config, then one layer from a rootfs that holds the module and
# copy-module.
# (umoci repack, not umoci insert: 0.4.7's insert writes a tar stream without its end blocks.)
layout="$out/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci config --no-history --image "$layout:$version" --created "$created" \
  --os linux --architecture "$arch" \
  --config.entrypoint /copy-module \
  --config.label "org.opencontainers.image.title=graceful-drain" \
  --config.label "org.opencontainers.image.description=Envoy dynamic module libgraceful_drain.so (Envoy $("$root/scripts/install-envoy.sh" --supported | tr ' ' ','))" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$commit" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0"
umoci unpack --image "$layout:$version" "$work/bundle" >/dev/null
install -m 0644 "$so" "$work/bundle/rootfs/libgraceful_drain.so"
install -m 0755 "$copier" "$work/bundle/rootfs/copy-module"
chmod 0755 "$work/bundle/rootfs"
touch -h -d "@$epoch" "$work/bundle/rootfs/libgraceful_drain.so" "$work/bundle/rootfs/copy-module" \
  "$work/bundle/rootfs"
umoci repack --image "$layout:$version" --history.created "$created" \
  --history.created_by "make dist (graceful-drain $version)" "$work/bundle" >/dev/null
umoci gc --layout "$layout"
# File times of the layout itself (they reach the archive below).
find "$layout" -exec touch -h -d "@$epoch" {} +

# The oci-archive: the layout as one tar, sorted, with fixed owners and times.
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$layout" -cf "$out/graceful-drain-$version.oci.tar" .

# The SBOM: cargo-cyclonedx's for the module's crate (its runtime dependencies, for the host
# target `make build` builds for; dev-dependencies are not in the .so) and for copy-module's, the second joined to the
# first as one of its components. cargo-cyclonedx writes next to each Cargo.toml, under a name
# of this run's (ignored by git), moved out at once.
sbom="graceful-drain-$version.cdx.json"
host=$(rustc -vV | sed -n 's/^host: //p')
tag=".dist-sbom-$$"
for m in "$root" "$root/k8s/copy-module"; do
  SOURCE_DATE_EPOCH=$epoch cargo cyclonedx --quiet --manifest-path "$m/Cargo.toml" --format json \
    --spec-version 1.5 --target "$host" --no-build-deps --override-filename "$tag"
done
mv "$root/$tag.json" "$work/module.cdx.json"
mv "$root/k8s/copy-module/$tag.json" "$work/copier.cdx.json"
python3 - "$work/module.cdx.json" "$work/copier.cdx.json" "$root" "$out/$sbom" <<'PY'
import json, sys
module_path, copier_path, root, out = sys.argv[1:]
def load(p):
    # The checkout's path, in bom-refs, written as the Makefile's remap writes it into the .so.
    return json.loads(open(p).read().replace("file://" + root, "file:///graceful-drain"))
bom, copier = load(module_path), load(copier_path)
c = copier["metadata"]["component"]
c["type"] = "application"
bom["components"].append(c)
bom["dependencies"].append({"ref": c["bom-ref"]})
with open(out, "w") as f:
    json.dump(bom, f, indent=2, sort_keys=True)
    f.write("\n")
PY
touch -d "@$epoch" "$out/$sbom"

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
  echo "image_architecture linux/$arch"
  echo "sbom $sbom (cargo-cyclonedx ${have_cdx##* })"
  echo "image_manifest $(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json")"
} > "$out/BUILDINFO"
touch -d "@$epoch" "$out/BUILDINFO" "$out/graceful-drain-$version.oci.tar"

(cd "$out" && sha256sum libgraceful_drain.so "graceful-drain-$version.oci.tar" "$sbom" BUILDINFO > SHA256SUMS)
touch -d "@$epoch" "$out/SHA256SUMS"
cat "$out/SHA256SUMS"
echo "image $layout:$version $(sed -n 's/^image_manifest //p' "$out/BUILDINFO")"
