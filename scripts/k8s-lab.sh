#!/usr/bin/env bash
# The real components tests/real_components.rs runs the kits and the module against (issue 64):
#   - a real Kubernetes API server for custom resources (`crdserver`: k8s.io/apiextensions-apiserver
#     from Debian sid's packaged Go sources, scripts/k8s-lab/crdserver/main.go) backed by a real
#     etcd, plus the kubectl and kustomize of the same archive. No registry reachable here ships
#     kube-apiserver, a kubelet or kind's node images: this is what a machine of ours can build.
#   - podman with runc, for real containers (Debian 12's packages), with this sandbox's fixes.
# Everything built is cached OUTSIDE the checkout, in $GRACEFUL_DRAIN_K8S_LAB (default
# /var/cache/graceful-drain-k8s-lab as root, else $XDG_CACHE_HOME/graceful-drain-k8s-lab):
# about 6 minutes and 5.5 GB the first time on 2 cores, nothing the next.
#
# Usage:
#   scripts/k8s-lab.sh setup            install podman, runc, debootstrap (apt, root); build the
#                                       crdserver, etcd, kubectl, kustomize into the cache (root:
#                                       debootstrap and chroot). Idempotent; concurrent runs wait.
#   scripts/k8s-lab.sh check            exit 0 and print the cache dir if the lab is ready, else
#                                       say what is missing and the command that makes it (exit 1)
#   scripts/k8s-lab.sh start RUN [PORT...]
#                                       start etcd + crdserver on 127.0.0.1 (ports: api, etcd
#                                       client, etcd peer, etcd metrics; free ones picked when not
#                                       given), pid files and a client-cert kubeconfig in RUN/;
#                                       returns when the API server is ready (bounded wait)
#   scripts/k8s-lab.sh stop RUN         stop what `start RUN` started (its pid files), and wait
#   scripts/k8s-lab.sh env              print the environment the lab's podman needs (CONTAINERS_CONF)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [ -n "${GRACEFUL_DRAIN_K8S_LAB:-}" ]; then
  cache=$GRACEFUL_DRAIN_K8S_LAB
elif [ "$(id -u)" = 0 ]; then
  cache=/var/cache/graceful-drain-k8s-lab
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/graceful-drain-k8s-lab
fi
bin="$cache/bin"
# What the cache was built from: a change of any of these rebuilds it.
SID_PACKAGES="golang-1.26-go golang-k8s-apiextensions-apiserver-dev etcd-server kubectl kustomize"
HOST_PACKAGES="podman runc debootstrap openssl curl"
key() {
  { echo "$SID_PACKAGES"; sha256sum "$here/k8s-lab/crdserver/main.go" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1
}

log() { printf "k8s-lab: [%ds] %s\n" "$SECONDS" "$*" >&2; }

# The two limits of this sandbox (and of some CI machines): RLIMIT_NOFILE cannot be raised above
# 20000 even by root (podman's default of 1048576 fails: "setrlimit RLIMIT_NOFILE: Operation not
# permitted"), and crun 1.8 refuses the hybrid cgroup layout: runc instead. Point CONTAINERS_CONF here.
write_containers_conf() {
  cat >"$cache/containers.conf.new" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
# No systemd here to own containers' cgroups or keep podman's events.
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  mv "$cache/containers.conf.new" "$cache/containers.conf"
}

missing_host_packages() {
  local p out=()
  for p in $HOST_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || out+=("$p"); done
  echo "${out[*]:-}"
}

check() {
  local why=()
  [ -n "$(missing_host_packages)" ] && why+=("Debian packages not installed: $(missing_host_packages)")
  [ -f "$cache/containers.conf" ] || why+=("no $cache/containers.conf")
  if [ "$(cat "$bin/.key" 2>/dev/null)" != "$(key)" ]; then
    why+=("no crdserver built for scripts/k8s-lab/crdserver/main.go in $bin")
  else
    local b
    for b in crdserver etcd kubectl kustomize; do [ -x "$bin/$b" ] || why+=("no $bin/$b"); done
  fi
  if [ ${#why[@]} -gt 0 ]; then
    printf 'the Kubernetes lab is not set up on this machine:\n' >&2
    printf '  %s\n' "${why[@]}" >&2
    printf 'run `make k8s-lab` (scripts/k8s-lab.sh setup: root, about 6 minutes and 5.5 GB the first time)\n' >&2
    return 1
  fi
  echo "$cache"
}

setup() {
  [ "$(id -u)" = 0 ] || { log "setup needs root (apt, debootstrap, chroot)"; exit 1; }
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock -n 9 || { log "waiting for another setup of $cache"; flock 9; }
  local t0=$SECONDS missing
  missing=$(missing_host_packages)
  if [ -n "$missing" ]; then
    log "installing Debian packages: $missing"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; } \
      >"$cache/apt-host.log" 2>&1 || { tail -20 "$cache/apt-host.log" >&2; exit 1; }
  fi
  write_containers_conf
  if [ "$(cat "$bin/.key" 2>/dev/null)" = "$(key)" ]; then
    log "crdserver already built in $bin"
    echo "$cache"
    return
  fi
  local r="$cache/root" mirror
  # The Debian archive this machine's apt uses (the first URIs: line of its sources).
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || { log "no Debian mirror found in this machine's apt sources"; exit 1; }
  if [ ! -e "$r/etc/debian_version" ] || [ ! -e "$r/.debootstrap-done" ]; then
    log "debootstrap of sid from $mirror into $r"
    rm -rf "$r"
    debootstrap --variant=minbase sid "$r" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
    touch "$r/.debootstrap-done"
  fi
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  # etcd-server's postinst needs /proc.
  mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
  trap 'umount "'"$r"'/proc" 2>/dev/null || true' EXIT
  log "apt in the sid root: $SID_PACKAGES"
  # The mirror may serve a frozen sid whose Release file has expired.
  chroot "$r" sh -c 'dpkg --configure -a; apt-get -q -o Acquire::Check-Valid-Until=false update &&
    DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Acquire::Check-Valid-Until=false install --no-install-recommends '"$SID_PACKAGES" \
    >"$cache/apt.log" 2>&1 || { tail -20 "$cache/apt.log" >&2; exit 1; }
  log "go build of the crdserver"
  mkdir -p "$r/build/crdserver"
  cp "$here/k8s-lab/crdserver/main.go" "$r/build/crdserver/main.go"
  chroot "$r" sh -c 'cd /build/crdserver && export PATH=/usr/lib/go-1.26/bin:$PATH GOPATH=/usr/share/gocode GO111MODULE=off \
    GOCACHE=/build/.cache CGO_ENABLED=0 GOPROXY=off GOFLAGS= V=k8s.io/component-base/version &&
    go build -ldflags "-s -w -X $V.gitVersion=v1.36.4 -X $V.gitMajor=1 -X $V.gitMinor=36" -o crdserver .' >&2
  umount "$r/proc" 2>/dev/null || true
  mkdir -p "$bin.new"
  cp "$r/build/crdserver/crdserver" "$r/usr/bin/etcd" "$r/usr/bin/kubectl" "$r/usr/bin/kustomize" "$bin.new/"
  key >"$bin.new/.key"
  rm -rf "$bin"
  mv "$bin.new" "$bin"
  log "built in $((SECONDS - t0)) s: $("$bin/etcd" --version | head -1); $("$bin/kubectl" version --client 2>/dev/null | head -1)"
  echo "$cache"
}

# A free loopback port (held by nothing when this returns: the caller binds it next).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local run=${1:?usage: scripts/k8s-lab.sh start RUN [API ETCD PEER METRICS]}
  shift
  check >/dev/null
  local api=${1:-$(free_port)} ep=${2:-$(free_port)} pp=${3:-$(free_port)} mp=${4:-$(free_port)}
  mkdir -p "$run"
  run=$(cd "$run" && pwd)
  [ ! -e "$run/crdserver.pid" ] || { log "$run already has a crdserver (stop it first)"; exit 1; }
  rm -rf "$run/pki" "$run/etcd" "$run/certs"
  mkdir -p "$run/pki"
  (
    cd "$run/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 7 -subj /CN=k8s-lab-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj /O=system:masters/CN=admin 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 7 2>/dev/null
  )
  "$bin/etcd" --data-dir "$run/etcd" --name default \
    --listen-client-urls "http://127.0.0.1:$ep" --advertise-client-urls "http://127.0.0.1:$ep" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "default=http://127.0.0.1:$pp" --listen-metrics-urls "http://127.0.0.1:$mp" \
    >"$run/etcd.log" 2>&1 </dev/null &
  echo $! >"$run/etcd.pid"
  "$bin/crdserver" --etcd-servers "http://127.0.0.1:$ep" --bind-address 127.0.0.1 --secure-port "$api" \
    --cert-dir "$run/certs" --client-ca-file "$run/pki/ca.crt" >"$run/crdserver.log" 2>&1 </dev/null &
  echo $! >"$run/crdserver.pid"
  echo "$api" >"$run/port"
  # Ready: /readyz answers 200 (etcd reached, every post-start hook done). Bounded: 60 s.
  local deadline=$((SECONDS + 60))
  until [ -s "$run/certs/apiserver.crt" ] &&
    curl -sf --max-time 2 --cacert "$run/certs/apiserver.crt" --cert "$run/pki/admin.crt" \
      --key "$run/pki/admin.key" "https://127.0.0.1:$api/readyz" >/dev/null 2>&1; do
    for p in etcd crdserver; do
      kill -0 "$(cat "$run/$p.pid")" 2>/dev/null || {
        log "$p exited while starting; its log ($run/$p.log):"; tail -30 "$run/$p.log" >&2; stop "$run"; exit 1; }
    done
    [ $SECONDS -lt $deadline ] || {
      log "the API server was not ready within 60 s; its log ($run/crdserver.log):"
      tail -30 "$run/crdserver.log" >&2; stop "$run"; exit 1; }
    sleep 0.2
  done
  local k="$run/kubeconfig" kubectl="$bin/kubectl"
  "$kubectl" config --kubeconfig="$k" set-cluster lab --server="https://127.0.0.1:$api" \
    --certificate-authority="$run/certs/apiserver.crt" --embed-certs >/dev/null
  "$kubectl" config --kubeconfig="$k" set-credentials admin --client-certificate="$run/pki/admin.crt" \
    --client-key="$run/pki/admin.key" --embed-certs >/dev/null
  "$kubectl" config --kubeconfig="$k" set-context lab --cluster=lab --user=admin >/dev/null
  "$kubectl" config --kubeconfig="$k" use-context lab >/dev/null
  echo "$k"
}

stop() {
  local run=${1:?usage: scripts/k8s-lab.sh stop RUN} p pid deadline
  for p in crdserver etcd; do
    [ -f "$run/$p.pid" ] || continue
    pid=$(cat "$run/$p.pid")
    if kill "$pid" 2>/dev/null; then
      deadline=$((SECONDS + 10))
      while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && { log "$p ($pid) still running after SIGTERM + 10 s: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; }
    fi
    rm -f "$run/$p.pid"
  done
}

case "${1:-}" in
  setup) setup ;;
  check) check ;;
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  env) echo "CONTAINERS_CONF=$cache/containers.conf" ;;
  *) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
