#!/usr/bin/env python3
"""graceful-drain benchmarks: request-path cost and shutdown cost, side by side in one run.

Every figure is compared with its baseline measured in the same run:
  1. CPU instructions per request (callgrind, Envoy --concurrency 1): bare Envoy vs the module,
     HTTP/1.1 and HTTP/2, serving and draining. Deterministic: the primary cost figure.
  2. Throughput and latency (wrk for HTTP/1.1, h2load for HTTP/2) at --concurrency 1 and 2, in
     interleaved rounds (A B A B ...) to cancel drift; min/median/max over the rounds.
  3. Shutdown cost under load with slow requests in flight, two gateways behind a front Envoy that
     health-checks them: the module; bare Envoy (SIGTERM); Knative Kourier's preStop
     (drain_listeners?graceful, sleep, SIGTERM); Envoy Gateway's shutdown manager
     (/healthcheck/fail, poll downstream_cx_active every second, min and max drain time).
  4. Resident memory with and without the module, idle and under load.
  5. Instructions per request proxying to an upstream (HTTP/1.1, HTTP/2, each with and without
     downstream TLS): bare Envoy, bootstrap-only, an empty C module filter (the floor), the module;
     and connection mode (the module's network filter only, without and with "track_requests")
     against an empty C network filter (its floor). 2 000 requests a run, each figure the
     median of 3 interleaved rounds (a single run's total can sit 0.5 % off).
  6. Drain cost against configuration size (0 / 5 000 / 20 000 static clusters): Envoy's main
     thread CPU, admin /ready latency and exit time, with and without the filter on the data path.
  7. 100 000 concurrent HTTP/2 streams: exact count, memory, GOAWAY on every connection.
Writes bench/out/report.md, bench/out/report.json and bench/out/shutdown.svg.
Standard library only; needs valgrind, h2load (nghttp2-client), wrk, openssl and a C compiler.
"""
import argparse
import functools
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
MODULE_DIR = os.path.join(ROOT, "target", "release")


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def envoy_bin():
    return subprocess.check_output(["bash", os.path.join(ROOT, "scripts/install-envoy.sh")], text=True).strip()


def envoy_version(binary):
    out = subprocess.check_output([binary, "--version"], text=True)
    m = re.search(r"/(\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else out.strip()


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


# ---------------------------------------------------------------------------------------------
# Config rendering: the same transformations the integration tests apply to the example.

EXAMPLE_SETTINGS = '\'{"min_drain_duration": "5s", "quiet_period": "1s", "drain_timeout": "25s", "admin_address": "127.0.0.1:9901"}\''
# The network filter's config in the example (connection mode: it follows the exchanges), and
# without "track_requests" (filter mode: the HTTP filter counts the requests).
EXAMPLE_NETWORK_CONFIG = '\'{"idle_close_grace": "2s", "idle_after": "1s", "track_requests": true}\''
UNTRACKED_NETWORK_CONFIG = '\'{"idle_close_grace": "2s", "idle_after": "1s"}\''
# Filter mode's data path: the module's HTTP filter first in the data listener's chain, as
# envoy-config/gateway.yaml has it commented out after this mark (tests/common/envoy.rs renders
# it the same way).
FILTER_MODE_MARK = "(uncomment it, and drop track_requests above):"


def add_data_http_filter(text):
    indent, out, inside, uncommented = " " * 10, [], False, 0
    for line in text.split("\n"):
        if inside:
            item = line[len(indent) + 2:]
            if line.startswith(indent + "# ") and (item.startswith("- ") or item.startswith("  ")):
                out.append(indent + item)
                uncommented += 1
                continue
            inside = False
        inside = inside or line.rstrip().endswith(FILTER_MODE_MARK)
        out.append(line)
    assert uncommented and text.count(FILTER_MODE_MARK) == 1, "no commented-out data HTTP filter in the config"
    return "\n".join(out)


def remove_list_items(text, name):
    out, skip = [], None
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip())
        if skip is not None:
            if line.strip() == "" or indent > skip:
                continue
            skip = None
        if line.strip() == "- name: " + name:
            skip = indent
            continue
        out.append(line)
    return "\n".join(out)


def render_gateway(ports, module=True, settings=None, network_filter=True, http_filter=True, track_requests=False):
    admin, data, control = ports
    y = open(os.path.join(ROOT, "envoy-config/gateway.yaml")).read()
    for old, new, n in (("port_value: 9901", admin, 1), ("port_value: 10000", data, 1), ("port_value: 10001", control, 1)):
        assert y.count(old) == n, old
        y = y.replace(old, f"port_value: {new}")
    # The drain engine reaches the admin at its address.
    assert y.count(EXAMPLE_SETTINGS) == 1
    settings = dict(json.loads(EXAMPLE_SETTINGS.strip("'")), **(settings or {}))
    settings["admin_address"] = settings["admin_address"].replace(":9901", f":{admin}")
    y = y.replace(EXAMPLE_SETTINGS, "'" + json.dumps(settings) + "'")
    # The example is connection mode (the network filter follows every exchange itself);
    # without track_requests its network filter only tells idle connections.
    assert y.count(EXAMPLE_NETWORK_CONFIG) == 1, EXAMPLE_NETWORK_CONFIG
    if not track_requests:
        y = y.replace(EXAMPLE_NETWORK_CONFIG, UNTRACKED_NETWORK_CONFIG)
    if module and http_filter:
        # Filter mode's data path (with track_requests too: both count, as in cross-check).
        y = add_data_http_filter(y)
    if not module:
        y = remove_list_items(y, "envoy.bootstrap.dynamic_modules")
        y = y.replace("bootstrap_extensions:\n", "")
        # The control listener keeps Envoy's own health_check filter on /ready (200 until
        # /healthcheck/fail), which is what stock gateways (Envoy Gateway) use for readiness.
        y = remove_list_items(y, "envoy.filters.http.dynamic_modules")
    if not module or not network_filter:
        y = remove_list_items(y, "envoy.filters.network.dynamic_modules")
    if module and not http_filter:
        # Connection mode: the network filter and the bootstrap extension, no HTTP filter.
        y = remove_list_items(y, "envoy.filters.http.dynamic_modules")
    return y


def front_yaml(admin, listen, gateways):
    eps = "".join(
        f"        - endpoint:\n            address: {{ socket_address: {{ address: 127.0.0.1, port_value: {g[1]} }} }}\n"
        f"            health_check_config: {{ port_value: {g[2]} }}\n"
        for g in gateways
    )
    return f"""admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:
  - name: front
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: front
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: gateways, timeout: 60s }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: gateways
    type: STATIC
    connect_timeout: 1s
    common_lb_config: {{ healthy_panic_threshold: {{ value: 0 }} }}
    health_checks:
    - timeout: 1s
      interval: 0.5s
      no_traffic_interval: 0.5s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {{ path: "/ready" }}
    load_assignment:
      cluster_name: gateways
      endpoints:
      - lb_endpoints:
{eps}"""


class Envoy:
    """One Envoy process with its own temp dir; killed on close()."""

    def __init__(self, binary, yaml, admin, concurrency=1, wrapper=(), extra=(), cpus=None, ready_timeout=None,
                 module_dir=MODULE_DIR):
        self.dir = tempfile.mkdtemp(prefix="gd-bench-")
        self.admin = admin
        cfg = os.path.join(self.dir, "envoy.yaml")
        open(cfg, "w").write(yaml)
        self.log_path = os.path.join(self.dir, "envoy.log")
        cmd = list(wrapper) + [binary, "-c", cfg, "--concurrency", str(concurrency), "--use-dynamic-base-id"] + list(extra)
        if cpus:
            cmd = ["taskset", "-c", cpus] + cmd
        env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=module_dir)
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT, env=env, cwd=self.dir)
        try:
            self.wait_ready(ready_timeout or (180 if wrapper else 30))
        except BaseException:
            # Not ready (or interrupted while waiting): no caller holds it yet to close it.
            self.close()
            raise

    def wait_ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("envoy exited at startup:\n" + open(self.log_path).read()[-3000:])
            try:
                if http_get(self.admin, "/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"envoy not ready after {timeout}s")

    def stat(self, name):
        _, body = http_get(self.admin, "/stats?filter=^" + name + "$")
        for line in body.decode().splitlines():
            if line.startswith(name + ": "):
                return int(line.split(": ")[1])
        return None

    def rss_kib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def wait_exit(self, timeout):
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def http_get(port, path, method="GET", headers=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# 1. Instructions per request (callgrind)

def h2load(port, n, clients, h1, extra=()):
    cmd = ["h2load", "-n", str(n), "-c", str(clients)] + (["--h1"] if h1 else []) + list(extra) + [f"http://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    m = re.search(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded", out)
    if not m or int(m.group(2)) != n:
        raise RuntimeError("h2load did not complete every request:\n" + out)
    return out


# The request head a browser sends for a page (Chrome 131 on Linux, navigating within a site): 16
# headers, about 750 bytes with the request line and host. h2load's own heads are four lines;
# per-line work in Envoy and in the tracker grows with these.
BROWSER_HEADS = [
    "user-agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,"
    "application/signed-exchange;v=b3;q=0.7",
    "accept-language: en-US,en;q=0.9,de;q=0.8",
    "accept-encoding: gzip, deflate, br, zstd",
    "cookie: session=3f9a7c2e8b1d4a6f9e0c5b7a2d8f1e3c; _ga=GA1.1.1234567890.1733100000; prefs=theme%3Ddark%26lang%3Den",
    "referer: https://shop.example.com/catalog?page=2",
    "cache-control: max-age=0",
    'sec-ch-ua: "Google Chrome";v="131", "Chromium";v="131", "Not_A Brand";v="24"',
    "sec-ch-ua-mobile: ?0",
    'sec-ch-ua-platform: "Linux"',
    "sec-fetch-dest: document",
    "sec-fetch-mode: navigate",
    "sec-fetch-site: same-origin",
    "sec-fetch-user: ?1",
    "upgrade-insecure-requests: 1",
    "x-request-id: 0b7d0c1e-5c1a-4f7e-9a57-2d6c1b8e4f10",
]


def head_args(browser):
    return [a for h in BROWSER_HEADS for a in ("-H", h)] if browser else []


def callgrind_run(binary, module, h1, n, draining=False, one_per_connection=False, network_filter=True,
                  http_filter=True, track_requests=False, plain=False, browser=False):
    """Instructions per request (under callgrind), the module's own, and per hook. `plain`: run
    the same path without valgrind and give no figures (NaN), for a smoke run. `browser`: each
    request carries BROWSER_HEADS."""
    ports = free_ports(3)
    settings = {"min_drain_duration": "3600s", "quiet_period": "1s", "drain_timeout": "3600s"} if draining else None
    yaml = render_gateway(ports, module=module, settings=settings, network_filter=network_filter,
                          http_filter=http_filter, track_requests=track_requests)
    tmp = tempfile.mkdtemp(prefix="gd-cg-")
    out_file = os.path.join(tmp, "cg.out")
    wrapper = [] if plain else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"]
    e = Envoy(binary, yaml, ports[0], wrapper=wrapper)
    try:
        if draining:
            status, _ = http_get(ports[2], "/drain?wait=false", method="POST", timeout=60)
            assert status == 202, status
        def load(count):
            if one_per_connection:
                batch = min(100, count)
                for _ in range(count // batch):
                    h2load(ports[1], batch, batch, h1, head_args(browser))
            else:
                h2load(ports[1], count, 4, h1, head_args(browser))
        load(min(500, n))  # warm up: connection pools, caches, lazy init
        if plain:
            load(n)
            return float("nan"), 0, {}
        subprocess.run(["callgrind_control", "-z", str(e.proc.pid)], capture_output=True, check=True)
        load(n)
        subprocess.run(["callgrind_control", "-d", str(e.proc.pid)], capture_output=True, check=True)
        dumps = [f for f in os.listdir(tmp) if f.startswith("cg.out.") or f.startswith("cg.out")]
        dump = sorted((os.path.join(tmp, f) for f in dumps), key=os.path.getmtime)[-1]
        total = None
        for line in open(dump):
            if line.startswith("summary:"):
                total = int(line.split()[1])
        ours, by_hook = hook_instructions(dump, n) if module else (0, {})
        return total / n, ours, by_hook
    finally:
        e.close()
        shutil.rmtree(tmp, ignore_errors=True)


def compressed_name(table, rest):
    """A callgrind name record, `(id) name` the first time and `(id)` after (--compress-strings):
    the name, remembered in `table` (one table per kind: functions, objects)."""
    m = re.match(r"\((\d+)\)(?:\s+(.*))?", rest)
    if not m:
        return rest
    if m.group(2) is not None:
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), rest)


def callgrind_functions(dump):
    """Per-function exclusive and inclusive instructions from a callgrind dump, read directly
    (names merged across the source files of inlined code). `callgrind_annotate` splits a function
    by the file of each inlined line, and which part it prints with the object name depends on the
    working directory: summing its lines undercounted our hooks about threefold."""
    names, self_cost, call_cost = {}, {}, {}
    fn = cfn = None
    pending = False
    for line in open(dump):
        if line.startswith("fn="):
            fn = compressed_name(names, line[3:].strip())
        elif line.startswith("cfn="):
            cfn = compressed_name(names, line[4:].strip())
        elif line.startswith("calls="):
            pending = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            cost = int(parts[1]) if len(parts) > 1 else 0
            if pending:
                pending = False
                if cfn != fn:  # a recursive call's cost is already in the caller's
                    call_cost[fn] = call_cost.get(fn, 0) + cost
            elif fn is not None:
                self_cost[fn] = self_cost.get(fn, 0) + cost
    return {f: (self_cost.get(f, 0), self_cost.get(f, 0) + call_cost.get(f, 0))
            for f in set(self_cost) | set(call_cost)}


def hook_instructions(dump, n):
    """Inclusive instructions per request of each exported per-connection and per-request hook
    (HTTP and network filter) of whatever module is loaded: its own code plus the Envoy callbacks
    it makes. The rest of a module's overhead is Envoy hosting a dynamic module."""
    hooks = {f[len("envoy_dynamic_module_on_"):]: incl / n for f, (_, incl) in callgrind_functions(dump).items()
             if re.fullmatch(r"envoy_dynamic_module_on_(http|network)_filter_\w+", f)
             and "config" not in f and incl}
    return sum(hooks.values()), hooks


def bench_instructions(binary, smoke):
    n = 200 if smoke else 5000
    rows = []
    cases = [("HTTP/1.1", True)] if smoke else [("HTTP/1.1", True), ("HTTP/2", False)]
    for name, h1 in cases:
        log(f"callgrind {name}: bare Envoy, {n} requests")
        bare, _, _ = callgrind_run(binary, False, h1, n)
        log(f"callgrind {name}: with the module")
        mod, ours, by_hook = callgrind_run(binary, True, h1, n)
        rows.append({"case": f"{name} keep-alive, serving", "bare": bare, "module": mod, "module_own": ours,
                     "hooks": by_hook})
    if not smoke:
        m = 1000
        for name, h1 in cases:
            log(f"callgrind {name}: one request per connection, bare / serving / draining")
            bare, _, _ = callgrind_run(binary, False, h1, m, one_per_connection=True)
            serving, _, _ = callgrind_run(binary, True, h1, m, one_per_connection=True)
            # While draining, the hooks' inclusive cost includes work Envoy does on their behalf
            # (the go-away itself, and the rest of the filter chain run by continue_decoding), so
            # no split is reported for those rows.
            draining, _, _ = callgrind_run(binary, True, h1, m, draining=True, one_per_connection=True)
            rows.append({"case": f"{name} one request per connection, serving", "bare": bare, "module": serving, "module_own": None})
            rows.append({"case": f"{name} one request per connection, draining (go-away path on every request)",
                         "bare": bare, "module": draining, "module_own": None})
    return rows


def bench_connections(binary, smoke):
    """What the network filter (idle connections told at drain start) costs: instructions per
    new connection (one request each) and per keep-alive request, module with vs without it. A
    smoke run takes each path without valgrind (bench_instructions runs callgrind itself)."""
    rows = []
    cases = [("HTTP/1.1", True)] if smoke else [("HTTP/1.1", True), ("HTTP/2", False)]
    for name, h1 in cases:
        kinds = [("one request per connection", True, 100 if smoke else 1000, False)]
        if not smoke:  # the smoke pass only checks the command runs: one row is enough
            kinds.append(("keep-alive request", False, 5000, False))
            kinds.append(("keep-alive request, browser heads", False, 5000, True))
        for kind, per_conn, n, browser in kinds:
            run = functools.partial(callgrind_run, binary, h1=h1, n=n, one_per_connection=per_conn, browser=browser)
            log(f"callgrind {name} {kind}: module without / with the network filter")
            without, _, _ = run(True, network_filter=False, plain=smoke)
            with_nf, _, _ = run(True, network_filter=True, plain=smoke)
            row = {"case": f"{name}, {kind}", "without": without, "with": with_nf}
            # Bare Envoy and connection mode (no HTTP filter), without and with the tracker. The
            # smoke pass takes only the tracked one (its one row), so CI runs the tracker's path.
            log(f"callgrind {name} {kind}: bare Envoy / connection mode (no HTTP filter), without / with the tracker")
            if not smoke:
                row["bare"], _, _ = run(False)
                row["connection_mode"], _, _ = run(True, http_filter=False)
            row["connection_mode_tracked"], _, _ = run(True, http_filter=False, track_requests=True, plain=smoke)
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# 1b. Instructions per request on a realistic path: proxying to an upstream over keep-alive,
#     HTTP/1.1 and HTTP/2, plain and with downstream TLS; bare Envoy, bootstrap-only mode, an
#     empty dynamic-module filter (the floor: what Envoy charges for hosting any module filter)
#     and the graceful_drain filter.

# Every hook Envoy 1.40 requires of an HTTP filter and of a network filter module, each doing
# nothing: the floor.
EMPTY_FILTER_C = r"""
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
typedef struct { const char* ptr; size_t len; } buf;
static int object;
const char* envoy_dynamic_module_on_program_init(void) { return "v0.2.0"; }
const void* envoy_dynamic_module_on_http_filter_config_new(void* ce, buf name, buf config) { return &object; }
void envoy_dynamic_module_on_http_filter_config_destroy(const void* cm) {}
const void* envoy_dynamic_module_on_http_filter_new(const void* cm, void* fe) { return &object; }
uint32_t envoy_dynamic_module_on_http_filter_request_headers(void* fe, const void* fm, bool eos) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_request_body(void* fe, const void* fm, bool eos) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_request_trailers(void* fe, const void* fm) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_response_headers(void* fe, const void* fm, bool eos) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_response_body(void* fe, const void* fm, bool eos) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_response_trailers(void* fe, const void* fm) { return 0; }
void envoy_dynamic_module_on_http_filter_stream_complete(void* fe, const void* fm) {}
void envoy_dynamic_module_on_http_filter_destroy(const void* fm) {}
void envoy_dynamic_module_on_http_filter_http_callout_done(void* fe, const void* fm, uint64_t id, uint32_t r,
    void* h, size_t nh, void* b, size_t nb) {}
void envoy_dynamic_module_on_http_filter_http_stream_headers(void* fe, const void* fm, uint64_t id, void* h, size_t n, bool e) {}
void envoy_dynamic_module_on_http_filter_http_stream_data(void* fe, const void* fm, uint64_t id, const void* d, size_t n, bool e) {}
void envoy_dynamic_module_on_http_filter_http_stream_trailers(void* fe, const void* fm, uint64_t id, void* t, size_t n) {}
void envoy_dynamic_module_on_http_filter_http_stream_complete(void* fe, const void* fm, uint64_t id) {}
void envoy_dynamic_module_on_http_filter_http_stream_reset(void* fe, const void* fm, uint64_t id, uint32_t r) {}
void envoy_dynamic_module_on_http_filter_scheduled(void* fe, const void* fm, uint64_t id) {}
void envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(void* fe, const void* fm) {}
void envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(void* fe, const void* fm) {}
/* Every hook Envoy 1.40 requires of a network filter module (the ones graceful_drain exports). */
const void* envoy_dynamic_module_on_network_filter_config_new(void* ce, buf name, buf config) { return &object; }
void envoy_dynamic_module_on_network_filter_config_destroy(const void* cm) {}
const void* envoy_dynamic_module_on_network_filter_new(const void* cm, void* fe) { return &object; }
uint32_t envoy_dynamic_module_on_network_filter_new_connection(void* fe, const void* fm) { return 0; }
uint32_t envoy_dynamic_module_on_network_filter_read(void* fe, const void* fm, size_t len, bool eos) { return 0; }
uint32_t envoy_dynamic_module_on_network_filter_write(void* fe, const void* fm, size_t len, bool eos) { return 0; }
void envoy_dynamic_module_on_network_filter_event(void* fe, const void* fm, uint32_t event) {}
void envoy_dynamic_module_on_network_filter_scheduled(void* fe, const void* fm, uint64_t id) {}
void envoy_dynamic_module_on_network_filter_destroy(const void* fm) {}
"""


def build_empty_filter(tmp):
    """Compile the empty filter module into `tmp` (libempty_filter.so); returns the directory."""
    src = os.path.join(tmp, "empty_filter.c")
    open(src, "w").write(EMPTY_FILTER_C)
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        sys.exit("missing a C compiler (cc) for the empty-filter baseline")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", os.path.join(tmp, "libempty_filter.so"), src], check=True)
    return tmp


def self_signed_cert(tmp):
    """A throwaway certificate for 127.0.0.1, made now with openssl."""
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def upstream_yaml(admin, port):
    """The trivial upstream: a plain Envoy answering 200 from a direct response."""
    return f"""admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:
  - name: upstream
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: upstream
          route_config:
            virtual_hosts:
            - name: u
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200, body: {{ inline_string: "hello from upstream\\n" }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"""


PROXY_VARIANTS = ["bare", "bootstrap-only", "empty module filter", "graceful_drain",
                  "empty HTTP + network filters", "graceful_drain HTTP + network filters",
                  "empty network filter", "graceful_drain network filter", "graceful_drain network filter, tracking"]
# The variants whose module is the empty C one (the floor), those with a network filter, those
# with the network filter only (connection mode: no HTTP filter of the module) and those whose
# network filter follows every exchange itself (track_requests).
FLOOR_VARIANTS = ("empty module filter", "empty HTTP + network filters", "empty network filter")
# The variants measured with browser heads: bare Envoy, filter mode, connection mode without and
# with the tracker, and connection mode's floor.
BROWSER_VARIANTS = ["bare", "graceful_drain HTTP + network filters", "empty network filter",
                    "graceful_drain network filter", "graceful_drain network filter, tracking"]
NETWORK_ONLY_VARIANTS = ("empty network filter", "graceful_drain network filter",
                         "graceful_drain network filter, tracking")
NETWORK_VARIANTS = ("empty HTTP + network filters", "graceful_drain HTTP + network filters") + NETWORK_ONLY_VARIANTS
TRACKING_VARIANTS = ("graceful_drain network filter, tracking",)
GD_MODULE = "dynamic_module_config: { name: graceful_drain, do_not_close: true, metrics_namespace: graceful_drain }"


def proxy_yaml(admin, listen, upstream, variant, tls=None):
    """A gateway proxying every request to `upstream` (HTTP/1.1 keep-alive pool)."""
    boot = ""
    if variant == "bootstrap-only" or variant.startswith("graceful_drain"):
        settings = json.dumps({"min_drain_duration": "5s", "quiet_period": "1s", "drain_timeout": "25s",
                               "admin_address": f"127.0.0.1:{admin}"})
        boot = f"""bootstrap_extensions:
- name: envoy.bootstrap.dynamic_modules
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.bootstrap.dynamic_modules.v3.DynamicModuleBootstrapExtension
    {GD_MODULE}
    extension_name: graceful_drain
    extension_config:
      "@type": type.googleapis.com/google.protobuf.StringValue
      value: '{settings}'
"""
    filt = ""
    if variant in NETWORK_ONLY_VARIANTS:
        pass  # connection mode (and its floor): no HTTP filter of the module
    elif variant.startswith("graceful_drain"):
        filt = f"""          - name: envoy.filters.http.dynamic_modules
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              {GD_MODULE}
              filter_name: graceful_drain
              filter_config: {{ "@type": type.googleapis.com/google.protobuf.StringValue, value: '{{"role": "data"}}' }}
"""
    elif variant in FLOOR_VARIANTS:
        filt = """          - name: envoy.filters.http.dynamic_modules
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              dynamic_module_config: { name: empty_filter, do_not_close: true }
              filter_name: empty
"""
    net = ""
    if variant in NETWORK_VARIANTS:
        # As in envoy-config/gateway.yaml: the network filter first, before the connection manager.
        module = GD_MODULE if variant.startswith("graceful_drain") else \
            "dynamic_module_config: { name: empty_filter, do_not_close: true }"
        name = "graceful_drain" if variant.startswith("graceful_drain") else "empty"
        net_config = {"idle_close_grace": "2s", "idle_after": "1s"}
        if variant in TRACKING_VARIANTS:
            net_config["track_requests"] = True
        net = f"""      - name: envoy.filters.network.dynamic_modules
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.dynamic_modules.v3.DynamicModuleNetworkFilter
          {module}
          filter_name: {name}
          filter_config: {{ "@type": type.googleapis.com/google.protobuf.StringValue, value: '{json.dumps(net_config)}' }}
"""
    ts = ""
    if tls:
        ts = f"""      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            alpn_protocols: ["h2", "http/1.1"]
            tls_certificates:
            - certificate_chain: {{ filename: "{tls[0]}" }}
              private_key: {{ filename: "{tls[1]}" }}
"""
    return f"""admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
{boot}static_resources:
  listeners:
  - name: data
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen} }} }}
    filter_chains:
    - filters:
{net}      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: data
          codec_type: AUTO
          route_config:
            virtual_hosts:
            - name: proxied
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: upstream }}
          http_filters:
{filt}          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{ts}  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {upstream} }} }} }}
"""


def module_code(dump, n, lib="libgraceful_drain.so"):
    """Instructions per request executed in the module's own object file (exclusive: its code,
    with the standard library's code compiled into it), read from the dump's `ob=` lines. The
    rest of its hooks' inclusive cost is what they call outside it: Envoy's callbacks and libc."""
    objects = {}
    in_module = pending = False
    own = 0
    for line in open(dump):
        if line.startswith("ob="):
            in_module = os.path.basename(compressed_name(objects, line[3:].strip())) == lib
        elif line.startswith("cob="):
            compressed_name(objects, line[4:].strip())
        elif line.startswith("calls="):
            pending = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if pending:
                pending = False  # a call's inclusive cost, not the caller's own
            elif in_module:
                parts = line.split()
                own += int(parts[1]) if len(parts) > 1 else 0
    return own / n


def callgrind_proxy(binary, variant, h1, tls, n, upstream_port, floor_dir, smoke=False, browser=False):
    """Instructions per request of the gateway (under callgrind) proxying to the upstream. A smoke
    run checks the path end to end without valgrind (no figures: it would take minutes).
    `browser`: each request carries BROWSER_HEADS."""
    ports = free_ports(2)
    yaml = proxy_yaml(ports[0], ports[1], upstream_port, variant, tls)
    tmp = tempfile.mkdtemp(prefix="gd-cgp-")
    out_file = os.path.join(tmp, "cg.out")
    mdir = floor_dir if variant in FLOOR_VARIANTS else MODULE_DIR
    wrapper = [] if smoke else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"]
    e = Envoy(binary, yaml, ports[0], wrapper=wrapper, module_dir=mdir)
    try:
        def load(count):
            cmd = ["h2load", "-n", str(count), "-c", "4"] + (["--h1"] if h1 else []) + head_args(browser) + \
                  [f"{'https' if tls else 'http'}://127.0.0.1:{ports[1]}/"]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
            m = re.search(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded", out)
            if not m or int(m.group(2)) != count:
                raise RuntimeError(f"h2load did not complete every request ({variant}):\n" + out + open(e.log_path).read()[-2000:])
            if tls and f"Application protocol: {'http/1.1' if h1 else 'h2'}" not in out:
                raise RuntimeError(f"unexpected protocol negotiated:\n{out}")
        load(min(500, n))  # warm up: connection pools, caches, lazy init
        if smoke:
            return None, None
        subprocess.run(["callgrind_control", "-z", str(e.proc.pid)], capture_output=True, check=True)
        load(n)
        subprocess.run(["callgrind_control", "-d", str(e.proc.pid)], capture_output=True, check=True)
        dumps = [f for f in os.listdir(tmp) if f.startswith("cg.out")]
        dump = sorted((os.path.join(tmp, f) for f in dumps), key=os.path.getmtime)[-1]
        total = None
        for line in open(dump):
            if line.startswith("summary:"):
                total = int(line.split()[1])
        hooks = None
        if variant.startswith("graceful_drain"):
            hooks = hook_instructions(dump, n) + (module_code(dump, n),)
        elif variant in FLOOR_VARIANTS:
            hooks = hook_instructions(dump, n) + (None,)
        return total / n, hooks
    finally:
        e.close()
        shutil.rmtree(tmp, ignore_errors=True)


# Rounds of the proxy rows: each round runs every variant of a path once, in order, and a row
# gives each variant's median. The process totals of one run move by up to about 0.5 % when a
# run's requests batch differently (reads and writes per event-loop pass); within one run
# interleaved rounds agree to about 0.15 % (bench/results/tracker-profile.md, #48).
PROXY_ROUNDS = 3


def bench_proxy_instructions(binary, smoke):
    n = 50 if smoke else 2000
    rounds = 1 if smoke else PROXY_ROUNDS
    tmp = tempfile.mkdtemp(prefix="gd-proxy-")
    try:
        floor_dir = build_empty_filter(tmp)
        tls = self_signed_cert(tmp)
        up = free_ports(2)
        upstream = Envoy(binary, upstream_yaml(up[0], up[1]), up[0], concurrency=1)
        paths = [("HTTP/1.1", True, False, False), ("HTTP/2", False, False, False),
                 ("HTTP/1.1 + TLS", True, True, False), ("HTTP/2 + TLS", False, True, False)]
        if not smoke:
            # The same paths with a browser's request head, for the modes a user chooses between
            # (and the floor of connection mode): per-line work grows with the head.
            paths += [(name + ", browser heads", h1, with_tls, True) for name, h1, with_tls, _ in paths]
        rows = []
        try:
            for name, h1, with_tls, browser in paths:
                row = {"path": name + " proxying", "n": n, "rounds": rounds, "hooks": {}, "spread": {}}
                variants = BROWSER_VARIANTS if browser else PROXY_VARIANTS
                totals = {v: [] for v in variants}
                for r in range(rounds):
                    for variant in variants:
                        log(f"callgrind proxy {name}: {variant}, {n} requests, round {r + 1} of {rounds}")
                        per_req, hooks = callgrind_proxy(binary, variant, h1, tls if with_tls else None, n,
                                                         up[1], floor_dir, smoke, browser)
                        totals[variant].append(per_req)
                        # The hooks' figures are deterministic: one round's are the row's.
                        if hooks is not None and variant not in row["hooks"]:
                            row["hooks"][variant] = {"total": hooks[0], "by_hook": hooks[1], "own": hooks[2]}
                for variant, xs in totals.items():
                    xs = [x for x in xs if x is not None]
                    row[variant] = statistics.median(xs) if xs else None
                    if xs:
                        row["spread"][variant] = [min(xs), max(xs)]
                if "graceful_drain" in row["hooks"]:
                    row["module_own"] = row["hooks"]["graceful_drain"]["total"]
                rows.append(row)
        finally:
            upstream.close()
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# 2. Throughput and latency, interleaved rounds

def wrk_round(port, seconds, cpus):
    cmd = ["wrk", "-t1", "-c16", f"-d{seconds}s", "--latency", f"http://127.0.0.1:{port}/"]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    def pct(p):
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v
    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99)}


def h2load_round(port, seconds, cpus):
    cmd = ["h2load", "-c", "4", "-m", "4", "-D", str(seconds), f"http://127.0.0.1:{port}/"]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1))
    m = re.search(r"time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
    def ms(v, u):
        return float(v) / 1000 if u == "us" else float(v) * 1000 if u == "s" else float(v)
    return {"rps": rps, "mean_ms": ms(m.group(5), m.group(6))}


def bench_throughput(binary, smoke):
    rounds, seconds = (1, 1) if smoke else (5, 3)
    results = []
    combos = [(1, "HTTP/1.1")] if smoke else [(1, "HTTP/1.1"), (1, "HTTP/2"), (2, "HTTP/1.1"), (2, "HTTP/2")]
    for concurrency, proto in combos:
        envoy_cpus, load_cpus = ("0", "1") if concurrency == 1 else (None, None)
        envs = {}
        for module in (False, True):
            ports = free_ports(3)
            envs[module] = (Envoy(binary, render_gateway(ports, module=module), ports[0], concurrency=concurrency, cpus=envoy_cpus), ports[1])
        try:
            samples = {False: [], True: []}
            for r in range(rounds):
                for module in ((False, True) if r % 2 == 0 else (True, False)):
                    port = envs[module][1]
                    s = wrk_round(port, seconds, load_cpus) if proto == "HTTP/1.1" else h2load_round(port, seconds, load_cpus)
                    samples[module].append(s)
            log(f"throughput {proto} --concurrency {concurrency}: done")
            results.append({"proto": proto, "concurrency": concurrency, "pinned": concurrency == 1,
                            "bare": samples[False], "module": samples[True]})
        finally:
            for e, _ in envs.values():
                e.close()
    return results


def dso_group(dso):
    if dso == "envoy":
        return "envoy"
    if dso.startswith("[kernel"):
        return "kernel"
    if "graceful_drain" in dso or "empty_filter" in dso:
        return "module"
    return "libc, vdso, loader"


PROFILE_GROUPS = ["envoy", "kernel", "libc, vdso, loader", "module"]
PROFILE_RPS = 1500  # per connection; 4 connections


def profile_round(binary, yaml, admin, data_port, n, module_dir=MODULE_DIR):
    """CPU time per request of one gateway (every thread, by shared object) under h2load, from a
    `perf record -e cpu-clock` sampling profile: software clock sampling needs no hardware
    counters, and unlike callgrind it sees the kernel and the real cost of each instruction."""
    e = Envoy(binary, yaml, admin, concurrency=1, cpus="0", module_dir=module_dir)
    tmp = tempfile.mkdtemp(prefix="gd-perf-")
    try:
        url = f"http://127.0.0.1:{data_port}/"
        subprocess.run(["taskset", "-c", "1", "h2load", "-c4", "-m4", "-n", str(min(n, 20000)), url],
                       capture_output=True, timeout=300)
        data = os.path.join(tmp, "perf.data")
        freq = 4999
        rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(freq), "-p", str(e.proc.pid),
                                "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.3)  # perf attaches to every thread
        # A fixed rate (PROFILE_RPS per connection), below what any variant sustains: the CPU per
        # request of a saturated gateway depends on how many requests each wake-up batches, which
        # falls with its own speed, so unpaced rounds would amplify any difference.
        out = subprocess.run(["taskset", "-c", "1", "h2load", "-c4", "-m4", "--rps", str(PROFILE_RPS), "-n", str(n),
                              url], capture_output=True, text=True, timeout=600).stdout
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
        m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
        done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
        if not m or not done or int(done.group(1)) != n:
            raise RuntimeError(f"h2load did not complete {n} requests:\n{out}")
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "-n", "--sort", "dso", "--no-children",
                              "-g", "none"], capture_output=True, text=True, timeout=300)
        us = {g: 0.0 for g in PROFILE_GROUPS}
        for line in rep.stdout.splitlines():
            f = line.split()
            if len(f) >= 3 and f[0].endswith("%") and f[1].isdigit():
                us[dso_group(f[2])] += int(f[1]) / freq / n * 1e6
        if sum(us.values()) == 0:
            raise RuntimeError(f"perf recorded nothing: {err.decode(errors='replace')[-500:]} {rep.stderr[-500:]}")
        return {"rps": float(m.group(1)), "us_per_request": us}
    finally:
        e.close()
        shutil.rmtree(tmp, ignore_errors=True)


def bench_profile(binary, smoke):
    """Where the HTTP/2 throughput ratio comes from: CPU per request by shared object, in
    interleaved rounds, Envoy --concurrency 1 and h2load pinned to separate CPUs. Two setups:
    gateway.yaml's direct_response (the throughput section's), bare and with the module; and
    proxying to an upstream, bare, the empty C module's HTTP + network filters (the floor), and
    graceful_drain's, which tells Envoy's cost of hosting any module from the module's own."""
    if not shutil.which("perf"):
        log("profile: perf not installed (make bench-deps installs linux-perf): skipped")
        return {"skipped": "perf not installed"}
    rounds, n = (1, 2000) if smoke else (3, 60000)
    tmp = tempfile.mkdtemp(prefix="gd-prof-")
    setups = {"direct_response": ["bare", "graceful_drain"],
              "proxying": ["bare", "empty HTTP + network filters", "graceful_drain HTTP + network filters"]}
    result = {"n": n, "rounds": rounds, "rps_per_connection": PROFILE_RPS, "setups": {}}
    upstream = None
    try:
        floor_dir = build_empty_filter(tmp)
        up = free_ports(2)
        upstream = Envoy(binary, upstream_yaml(up[0], up[1]), up[0], concurrency=1, cpus="1")
        for setup, variants in setups.items():
            samples = {v: [] for v in variants}
            for r in range(rounds):
                for v in (variants if r % 2 == 0 else list(reversed(variants))):
                    if setup == "direct_response":
                        ports = free_ports(3)
                        yaml, admin, port, mdir = render_gateway(ports, module=v != "bare"), ports[0], ports[1], MODULE_DIR
                    else:
                        ports = free_ports(2)
                        yaml, admin, port = proxy_yaml(ports[0], ports[1], up[1], v), ports[0], ports[1]
                        mdir = floor_dir if v in FLOOR_VARIANTS else MODULE_DIR
                    samples[v].append(profile_round(binary, yaml, admin, port, n, mdir))
            result["setups"][setup] = samples
            log(f"profile {setup}: done")
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        log(f"profile: perf could not profile Envoy here ({err}): skipped")
        return {"skipped": str(err)[:300]}
    finally:
        if upstream:
            upstream.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------------------------
# 3. Shutdown cost

class Load:
    """Closed-loop HTTP/1.1 keep-alive clients through the front, with slow requests."""

    def __init__(self, port, workers=12, max_seconds=120):
        self.port, self.stop_flag = port, False
        self.lock = threading.Lock()
        self.sent = self.ok = self.failed = self.in_flight = 0
        self.timeline = []  # (t, in_flight, cumulative failures, cumulative successes)
        self.t0 = time.time()
        self.deadline = self.t0 + max_seconds
        self.threads = [threading.Thread(target=self.worker, args=(w,), daemon=True) for w in range(workers)]
        self.threads.append(threading.Thread(target=self.sampler, daemon=True))
        for t in self.threads:
            t.start()

    def worker(self, w):
        conn, i = None, 0
        while not self.stop_flag and time.time() < self.deadline:
            i += 1
            delay = 2000 if (i + w) % 20 == 0 else 100 + (i * 37 + w * 53) % 200
            with self.lock:
                self.in_flight += 1
                self.sent += 1
            ok = False
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("GET", "/", headers={"x-envoy-fault-delay-request": str(delay)})
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
                if r.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                conn = None
            with self.lock:
                self.in_flight -= 1
                if ok:
                    self.ok += 1
                else:
                    self.failed += 1

    def sampler(self):
        while not self.stop_flag and time.time() < self.deadline:
            with self.lock:
                self.timeline.append((time.time() - self.t0, self.in_flight, self.failed, self.ok))
            time.sleep(0.05)

    def stop(self):
        self.stop_flag = True
        for t in self.threads:
            t.join(40)


def terminate(strategy, gw, binary_version_args):
    """Apply a shutdown strategy to one gateway; returns (termination start, exit time, killed)."""
    name, params = strategy
    t0 = time.time()
    grace = params.get("grace", 90)
    if name == "kourier":
        http_get(gw.admin, "/drain_listeners?graceful", method="POST")
        time.sleep(params["sleep"])
    elif name == "envoy-gateway":
        http_get(gw.admin, "/healthcheck/fail", method="POST")
        start = time.time()
        while True:
            elapsed = time.time() - start
            cx = gw.stat("http.data.downstream_cx_active") or 0
            if (elapsed >= params["min"] and cx <= 0) or elapsed >= params["max"]:
                break
            time.sleep(1)
    gw.proc.send_signal(signal.SIGTERM)
    exited = gw.wait_exit(max(1, grace - (time.time() - t0)))
    if not exited:
        gw.proc.kill()
        gw.proc.wait()
    return t0, time.time(), not exited


STRATEGIES = [
    ("graceful-drain module (SIGTERM)", ("module", {}), True),
    ("bare Envoy (SIGTERM)", ("bare", {}), False),
    ("Kourier preStop, default (sleep 15 s)", ("kourier", {"sleep": 15}), False),
    ("Kourier preStop, short (sleep 3 s)", ("kourier", {"sleep": 3}), False),
    ("Envoy Gateway manager, default (min 10 s, max 60 s)", ("envoy-gateway", {"min": 10, "max": 60}), False),
    ("Envoy Gateway manager, short (min 2 s, max 10 s)", ("envoy-gateway", {"min": 2, "max": 10}), False),
]


def bench_shutdown(binary, smoke):
    results = []
    strategies = [s for s in STRATEGIES if "short" in s[0] or s[1][0] in ("module", "bare")] if smoke else STRATEGIES
    for label, strategy, module in strategies:
        settings = {"min_drain_duration": "2s", "quiet_period": "500ms", "drain_timeout": "25s"}
        extra = ["--drain-time-s", str(strategy[1]["sleep"]), "--drain-strategy", "immediate"] if strategy[0] == "kourier" else []
        gws = []
        for _ in range(2):
            p = free_ports(3)
            gws.append((Envoy(binary, render_gateway(p, module=module, settings=settings), p[0], extra=extra), p))
        fp = free_ports(2)
        front = Envoy(binary, front_yaml(fp[0], fp[1], [p for _, p in gws]), fp[0], concurrency=2)
        try:
            deadline = time.time() + 20
            while time.time() < deadline:
                _, body = http_get(front.admin, "/clusters")
                if body.decode().count("::health_flags::healthy") == 2:
                    break
                time.sleep(0.1)
            load = Load(fp[1])
            time.sleep(3)  # slow requests in flight everywhere
            t_start = time.time() - load.t0
            t0, t_exit, killed = terminate(strategy, gws[0][0], None)
            time.sleep(1.5)  # let the other gateway absorb; failures after the exit still count
            load.stop()
            results.append({"strategy": label, "exit_s": t_exit - t0, "killed": killed, "sent": load.sent,
                            "failed": load.failed, "timeline": load.timeline,
                            "termination_at": t_start, "exit_at": t_exit - load.t0})
            log(f"shutdown {label}: exit after {t_exit - t0:.2f}s, failed {load.failed}/{load.sent}")
        finally:
            front.close()
            for e, _ in gws:
                e.close()
    return results


# ---------------------------------------------------------------------------------------------
# 4. Memory

def bench_memory(binary, smoke):
    res = {}
    for module in (False, True):
        p = free_ports(3)
        e = Envoy(binary, render_gateway(p, module=module), p[0], concurrency=2)
        try:
            time.sleep(1)
            idle = e.rss_kib()
            out = subprocess.Popen(["h2load", "-c", "32", "-m", "8", "-D", "2" if smoke else "5", f"http://127.0.0.1:{p[1]}/"],
                                   stdout=subprocess.DEVNULL)
            peak = 0
            while out.poll() is None:
                peak = max(peak, e.rss_kib())
                time.sleep(0.1)
            res["module" if module else "bare"] = {"idle_kib": idle, "load_peak_kib": peak}
        finally:
            e.close()
    return res


# ---------------------------------------------------------------------------------------------
# 5. Drain cost against configuration size (issue 11): Envoy's main thread and admin while draining

SCALE_MODES = ("filter", "connection", "bootstrap-only")


def render_scale(ports, clusters, module=True, mode="filter", settings=None):
    """The example gateway plus `clusters` static clusters (one loopback endpoint each, never used:
    the size of the stats store is what matters), in `mode` (SCALE_MODES): filter mode (the data
    HTTP filter), connection mode (the network filter follows the exchanges, no HTTP filter), or
    bootstrap-only on the data path (the filter mode example without its data HTTP filter)."""
    if mode == "connection":
        y = render_gateway(ports, module=module, settings=settings, http_filter=False, track_requests=True)
    else:
        y = render_gateway(ports, module=module, settings=settings)
    if module and mode == "bootstrap-only":
        head, sep, rest = y.partition("  - name: control\n")
        head = remove_list_items(head, "envoy.filters.http.dynamic_modules")
        y = head + sep + rest
    extra = "".join(
        f"  - name: scale_{i}\n    type: STATIC\n    connect_timeout: 1s\n"
        f"    load_assignment:\n      cluster_name: scale_{i}\n      endpoints:\n"
        f"      - lb_endpoints:\n        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {ports[0]} }} }} }}\n"
        for i in range(clusters))
    if "\n  clusters:\n" not in y:
        extra = "  clusters:\n" + extra
    return y.rstrip("\n") + "\n" + extra


def thread_ticks(pid, comm):
    """utime + stime (clock ticks) of the process's threads named `comm` ("envoy" is Envoy's main
    thread, "graceful_stats" the module's stats scanner); None if none is found."""
    total, found = 0, False
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{tid}/comm").read().strip() == comm:
                f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                total, found = total + int(f[11]) + int(f[12]), True
        except OSError:
            continue
    return total if found else None


def main_thread_ticks(pid):
    return thread_ticks(pid, "envoy")


def process_ticks(pid):
    """utime + stime (clock ticks) of the whole process, every thread."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


class AdminProbe:
    """GET /ready on the admin port every 50 ms (each on a new connection); latencies in ms."""

    def __init__(self, port, max_seconds=120):
        self.port, self.stop_flag, self.samples = port, False, []
        self.deadline = time.time() + max_seconds
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_flag and time.time() < self.deadline:
            t = time.time()
            try:
                http_get(self.port, "/ready", timeout=10)
            except OSError:
                if time.time() - t < 9:
                    time.sleep(0.05)
                    continue  # refused: Envoy is gone
            # A probe that timed out counts, with its wait: a stalled main thread must show.
            self.samples.append((t, (time.time() - t) * 1000))
            time.sleep(0.05)

    def stop(self):
        self.stop_flag = True
        self.thread.join(15)
        return self.samples


def p50(xs):
    return statistics.median(xs) if xs else float("nan")


def scale_run(binary, clusters, mode, smoke):
    """Serve 3 s, then SIGTERM with one 4 s request in flight; measure until Envoy exits."""
    p = free_ports(3)
    settings = {"min_drain_duration": "5s", "quiet_period": "1s", "drain_timeout": "25s"}
    allowed = 5.0  # min_drain_duration; the 4 s request ends before it, no request starts later
    if smoke:
        settings = {"min_drain_duration": "1s", "quiet_period": "200ms", "drain_timeout": "10s"}
        allowed = 1.0
    e = Envoy(binary, render_scale(p, clusters, mode=mode, settings=settings), p[0], concurrency=2,
              ready_timeout=600)
    try:
        hz = os.sysconf("SC_CLK_TCK")
        time.sleep(1)
        probe = AdminProbe(p[0])
        c0, t0 = main_thread_ticks(e.proc.pid), time.time()
        time.sleep(1 if smoke else 5)
        c1, t1 = main_thread_ticks(e.proc.pid), time.time()
        serving_cpu = (c1 - c0) / hz / (t1 - t0)
        delay_ms = int(allowed * 800)
        slow = {}
        def slow_request():
            try:
                slow["status"] = http_get(p[1], "/", headers={"x-envoy-fault-delay-request": str(delay_ms)}, timeout=60)[0]
            except OSError as err:
                slow["status"] = str(err)
        th = threading.Thread(target=slow_request, daemon=True)
        th.start()
        deadline = time.time() + 10
        while (e.stat("http.data.downstream_rq_active") or 0) < 1 and time.time() < deadline:
            time.sleep(0.02)
        c2, t2 = main_thread_ticks(e.proc.pid), time.time()
        s2, p2 = thread_ticks(e.proc.pid, "graceful_stats") or 0, process_ticks(e.proc.pid)
        e.proc.send_signal(signal.SIGTERM)
        # Main-thread CPU over the drain itself (SIGTERM to just before the earliest allowed exit),
        # not Envoy's teardown after it, which takes longer with more clusters with or without us.
        window_end = t2 + allowed - 0.1
        c_end = None
        while e.proc.poll() is None and time.time() < t2 + 60:
            if c_end is None and time.time() >= window_end:
                c_end, t_end = main_thread_ticks(e.proc.pid), time.time()
                s_end, p_end = thread_ticks(e.proc.pid, "graceful_stats") or 0, process_ticks(e.proc.pid)
            time.sleep(0.01)
        exited = e.wait_exit(1)
        t3 = time.time()
        draining_cpu = (c_end - c2) / hz / (t_end - t2) if c_end is not None else float("nan")
        scanner_cpu = (s_end - s2) / hz / (t_end - t2) if c_end is not None else float("nan")
        process_cpu = (p_end - p2) / hz / (t_end - t2) if c_end is not None else float("nan")
        samples = probe.stop()
        th.join(10)
        serving = [ms for t, ms in samples if t < t2]
        draining = [ms for t, ms in samples if t2 <= t < window_end]
        released = None
        stamps = {}
        for line in open(e.log_path, errors="replace"):
            for key, text in (("sigterm", "drain started (trigger=sigterm"), ("release", "releasing Envoy's exit")):
                if text in line and key not in stamps:
                    m = re.match(r"\[(\d+-\d+-\d+ \d+:\d+:\d+\.\d+)\]", line)
                    if m:
                        stamps[key] = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + float("0" + m.group(1)[19:])
        if "sigterm" in stamps and "release" in stamps:
            released = stamps["release"] - stamps["sigterm"]
        r = {"clusters": clusters, "mode": mode,
             "cpu_serving": serving_cpu, "cpu_draining": draining_cpu,
             "scanner_cpu_draining": scanner_cpu, "process_cpu_draining": process_cpu,
             "ready_p50_serving_ms": p50(serving), "ready_p50_draining_ms": p50(draining),
             "ready_max_draining_ms": max(draining) if draining else float("nan"),
             "released_s": released, "exit_s": t3 - t2, "allowed_s": allowed, "exited": exited,
             "slow_request": slow.get("status")}
        log(f"scale {clusters} clusters ({r['mode']}): main thread {serving_cpu:.1%} -> {draining_cpu:.1%} "
            f"(scanner thread {scanner_cpu:.1%}, whole process {process_cpu:.1%}), "
            f"/ready p50 {r['ready_p50_serving_ms']:.2f} -> {r['ready_p50_draining_ms']:.2f} ms "
            f"(max {r['ready_max_draining_ms']:.0f}), exit released {released if released is None else round(released, 3)} s, "
            f"process exit {r['exit_s']:.2f} s")
        return r
    finally:
        e.close()


SCALE_LABELS = {"filter": "filter mode", "connection": "connection mode",
                "bootstrap-only": "bootstrap-only (no filter on the data listener)"}


def bench_scale(binary, smoke):
    sizes = [0, 200] if smoke else [0, 5000, 20000]
    rows = []
    for n in sizes:
        for mode in SCALE_MODES:
            rows.append(scale_run(binary, n, mode, smoke))
    return rows


# ---------------------------------------------------------------------------------------------
# 6. Many concurrent HTTP/2 streams (issue 11): the in-flight table grows without a cliff, memory
#    stays bounded, and a drain sends every connection away.

def drain_status(port):
    return json.loads(http_get(port, "/drain/status")[1])


def streams_run(binary, module, streams, conns, hold_ms, smoke):
    p = free_ports(3)
    settings = {"min_drain_duration": "1s", "quiet_period": "200ms", "drain_timeout": "120s"}
    e = Envoy(binary, render_gateway(p, module=module, settings=settings), p[0], concurrency=2)
    client = None
    try:
        time.sleep(0.5)
        idle = e.rss_kib()
        per_conn = streams // conns
        # Each stream is a slow request (the fault filter holds it `hold_ms`): they pile up.
        client = subprocess.Popen(["h2load", "-c", str(conns), "-m", str(per_conn), "-n", str(per_conn * conns),
                                   "-H", f"x-envoy-fault-delay-request: {hold_ms}",
                                   f"http://127.0.0.1:{p[1]}/"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.time()
        deadline = t0 + hold_ms / 1000 * 0.6
        peak, seen = 0, 0
        while time.time() < deadline:
            seen = e.stat("http.data.downstream_rq_active") or 0
            peak = max(peak, e.rss_kib())
            if seen >= per_conn * conns:
                break
            time.sleep(0.2)
        ramp = time.time() - t0
        time.sleep(0.5)
        envoy_active = e.stat("http.data.downstream_rq_active") or 0
        r = {"module": module, "streams_wanted": per_conn * conns, "connections": conns,
             "envoy_active": envoy_active, "ramp_s": ramp, "rss_idle_kib": idle, "rss_kib": max(peak, e.rss_kib())}
        if module:
            st = drain_status(p[2])
            r["module_active"] = st["active_requests"]
            r["request_table"] = st["request_table"]
            # Drain: every connection carrying one of those streams must get its GOAWAY now.
            t1 = time.time()
            status, _ = http_get(p[2], "/drain?wait=false", method="POST", timeout=60)
            assert status == 202, status
            sent = 0
            while time.time() < t1 + 30:
                sent = drain_status(p[2])["connections_sent_away"]["http2"]
                if sent >= conns:
                    break
                time.sleep(0.05)
            r["sent_away_http2"] = sent
            r["sent_away_s"] = time.time() - t1
            r["active_after_goaway"] = drain_status(p[2])["active_requests"]
        log(f"streams ({'module' if module else 'bare'}): {r}")
        return r
    finally:
        if client and client.poll() is None:
            client.kill()
            client.wait()
        e.close()


def bench_streams(binary, smoke):
    streams, conns, hold = (2000, 20, 15000) if smoke else (100000, 200, 90000)
    return [streams_run(binary, m, streams, conns, hold, smoke) for m in (False, True)]


# ---------------------------------------------------------------------------------------------
# Report

def ratio(a, b):
    return a / b if b else float("nan")


def svg_plot(shutdown, path):
    """Successful responses per second (solid) and cumulative failures (dashed) over time."""
    series = [s for s in shutdown if s["strategy"].startswith(("graceful-drain", "bare"))]
    if not series:
        return
    def rates(tl):
        out = []
        for (t0, _, _, ok0), (t1, _, f1, ok1) in zip(tl, tl[1:]):
            out.append((t1, (ok1 - ok0) / max(t1 - t0, 1e-3), f1))
        return out
    data = [(s, rates(s["timeline"])) for s in series]
    w, h, pad = 760, 320, 55
    tmax = max(t for _, r in data for t, _, _ in r) or 1
    rmax = max(v for _, r in data for _, v, _ in r) or 1
    fmax = max([f for _, r in data for _, _, f in r] + [1])
    colors = ["#1f77b4", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{pad}" y="18">One of two gateways shut down under load (dotted line: termination start)</text>',
             f'<text x="{pad}" y="34">solid: successful responses/s (left axis, max {rmax:.0f}); dashed: cumulative failed requests (right axis, max {fmax})</text>',
             f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
             f'<line x1="{w-pad}" y1="{pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
             f'<text x="{w/2 - 80}" y="{h-20}">seconds since load start (0 to {tmax:.1f})</text>']
    for i, (s, r) in enumerate(data):
        c = colors[i % 2]
        def x(t):
            return pad + (w - 2 * pad) * t / tmax
        pts = " ".join("%.1f,%.1f" % (x(t), h - pad - (h - 2 * pad) * v / rmax) for t, v, _ in r)
        fpts = " ".join("%.1f,%.1f" % (x(t), h - pad - (h - 2 * pad) * f / fmax) for t, _, f in r)
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-opacity="0.7" points="{pts}"/>')
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" stroke-dasharray="5,3" points="{fpts}"/>')
        parts.append(f'<line x1="{x(s["termination_at"]):.1f}" y1="{pad}" x2="{x(s["termination_at"]):.1f}" y2="{h-pad}" stroke="{c}" stroke-dasharray="1,3"/>')
        parts.append(f'<text x="{w-pad-290}" y="{pad + 15 * (i + 1)}" fill="{c}">{s["strategy"]}: {s["failed"]} failed</text>')
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts))


def fmt_spread(vals, key):
    xs = [v[key] for v in vals]
    return min(xs), statistics.median(xs), max(xs)


TRACKED_PROXY = "graceful_drain network filter, tracking"


def tracker_table(data):
    """Connection mode with the tracker (the network filter follows every exchange from the bytes,
    no HTTP filter of the module) against bare Envoy, filter mode and connection mode without it:
    every direct_response row of `connections` and every proxy row. Empty for reports made
    before the tracker was measured."""
    conns = [r for r in data.get("connections") or [] if "connection_mode_tracked" in r]
    proxy = [r for r in data.get("proxy") or [] if TRACKED_PROXY in r]
    if not conns and not proxy:
        return []

    def num(v):
        return "-" if v is None else f"{v:.0f}"

    def with_ratio(v, b):
        return ["-", "-"] if v is None else [f"{v:.0f}", "-" if not b else f"{ratio(v, b):.4f}"]

    rows, notes, spreads, budgets = [], [], [], []
    for r in conns:
        per_conn = "one request per connection" in r["case"]
        rows.append((f"direct_response {r['case']}", r.get("bare"), r.get("with"), r.get("connection_mode"),
                     r.get("connection_mode_tracked"), None, per_conn, None))
    for r in proxy:
        h = r.get("hooks", {})
        hook_diff = None
        if TRACKED_PROXY in h and "graceful_drain network filter" in h:
            hook_diff = h[TRACKED_PROXY]["total"] - h["graceful_drain network filter"]["total"]
        rows.append((r["path"], r.get("bare"), r.get("graceful_drain HTTP + network filters"),
                     r.get("graceful_drain network filter"), r.get(TRACKED_PROXY), r.get("empty network filter"),
                     False, hook_diff))
        own = h.get(TRACKED_PROXY, {}).get("own")
        b, t = r.get("bare"), r.get(TRACKED_PROXY)
        if own is not None and b and t:
            # What the module's own code could spend for the row to reach each target, everything
            # else (the floor, Envoy's callbacks, Envoy hosting the filter) as measured.
            rest = t - b - own
            budgets.append(f"- {r['path']}: the tracked row spends {t - b:.0f} over bare, {own:.0f} of it in the "
                           f"module's own code ({h[TRACKED_PROXY]['total'] - own:.0f} in what its hooks call, "
                           f"Envoy's callbacks and libc); the rest, {rest:.0f}, is not the module's code. At 1.013× "
                           f"that code could spend {0.013 * b - rest:.0f}, at 1.010× {0.010 * b - rest:.0f}.")
        spread = r.get("spread", {})
        if r.get("rounds", 1) > 1 and spread:
            parts = [f"{v} {100 * (hi - lo) / r[v]:.2f} %" for v, (lo, hi) in spread.items() if r.get(v)]
            spreads.append(f"- {r['path']}: {r['rounds']} rounds, each variant's spread (max - min) / median: "
                           + "; ".join(parts))
    L = ["## Connection mode with the tracker, per request (callgrind)", "",
         "Filter mode: graceful_drain's HTTP and network filters (envoy-config/gateway.yaml). Connection mode: its "
         "bootstrap extension and network filter only, without the tracker (`track_requests` false) and with it "
         "(`\"track_requests\": true`: the network filter follows every HTTP/1.1 and HTTP/2 exchange from the bytes). "
         "Proxy rows also give the floor for connection mode: the empty C module as network filter only. Ratios "
         "are to bare Envoy.", "",
         "| case | bare Envoy | filter mode | ratio | connection mode | ratio | connection mode + tracker | ratio "
         "| empty network filter (floor) | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for case, b, filt, untracked, tracked, floor, per_conn, hook_diff in rows:
        if b is None and filt is None and untracked is None and tracked is None:
            L.append(f"| {case} | (smoke run: path checked, not measured) | | | | | | | | |")
            continue
        L.append(f"| {case} | {num(b)} | " + " | ".join(with_ratio(filt, b) + with_ratio(untracked, b) +
                                                        with_ratio(tracked, b) + with_ratio(floor, b)) + " |")
        what = "per connection (one request each)" if per_conn else "per request"
        diff = "-" if tracked is None or untracked is None else f"{tracked - untracked:+.0f} instructions"
        note = f"- {case}: tracker's cost {what} = tracked − untracked connection mode = {diff}"
        if hook_diff is not None:
            note += f" (the module's hooks: {hook_diff:+.0f})"
        notes.append(note)
    L += [""] + notes + [""] if notes else [""]
    if spreads:
        L += spreads + [""]
    if budgets:
        L += ["What the module's own code (exclusive instructions in libgraceful_drain.so, read from the dump's "
              "objects) could spend for connection mode with the tracker to reach 1.013× and 1.010× bare, all else "
              "as measured (#48 item 4):", ""] + budgets + [""]
    for r in proxy:
        by = r.get("hooks", {}).get(TRACKED_PROXY, {}).get("by_hook")
        if by:
            L.append(f"- {r['path']}, graceful_drain's hooks per request with the tracker: " +
                     ", ".join(f"{k} {v:.0f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
    if any(r.get("hooks", {}).get(TRACKED_PROXY, {}).get("by_hook") for r in proxy):
        L.append("")
    return L


def write_report(data):
    os.makedirs(OUT, exist_ok=True)
    json.dump(data, open(os.path.join(OUT, "report.json"), "w"), indent=1)
    L = [f"# graceful-drain benchmark report", "",
         f"Machine: {data['machine']}. Envoy {data['envoy']}. {'SMOKE RUN (tiny sizes, not figures)' if data['smoke'] else ''}", ""]
    runs = data.get("runs") or {}
    if len(set(runs.values())) > 1 or (runs and len(runs) < len(SECTIONS)):
        # A report merged from partial runs (`--only`) says which run made each section.
        L += ["Sections by run: " + "; ".join(f"{k}: {runs.get(k, 'an earlier run')}" for k in SECTIONS) + ".", ""]
    L += ["## Instructions per request (callgrind, Envoy --concurrency 1)", "",
          "| case | bare Envoy | with module | ratio | module's own hooks | Envoy hosting the module |", "|---|---|---|---|---|---|"]
    for r in data["instructions"]:
        own = r["module_own"]
        host = (r["module"] - r["bare"] - own) if own is not None else None
        L.append(f"| {r['case']} | {r['bare']:.0f} | {r['module']:.0f} | {ratio(r['module'], r['bare']):.4f} | "
                 f"{'%.0f' % own if own is not None else '-'} | {'%.0f' % host if host is not None else '-'} |")
    L += ["", "'module's own hooks' is the inclusive cost of the exported `on_http_filter_*` and `on_network_filter_*` "
          "hooks (our code and the Envoy callbacks it makes); the rest of the difference is Envoy's dynamic-module "
          "filter machinery, paid by any module.", ""]
    for r in data["instructions"]:
        if r.get("hooks"):
            L.append(f"- {r['case']}, hooks per request: " +
                     ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["hooks"].items(), key=lambda kv: -kv[1])))
    L.append("")
    if data.get("connections"):
        L += ["## Network filter for idle connections (callgrind, Envoy --concurrency 1)", "",
              "| case | module without network filter | with it | added instructions | ratio |", "|---|---|---|---|---|"]
        for r in data["connections"]:
            L.append(f"| {r['case']} | {r['without']:.0f} | {r['with']:.0f} | {r['with'] - r['without']:.0f} | {ratio(r['with'], r['without']):.4f} |")
        L += ["", "One request per connection: the added instructions are the network filter's cost per new connection "
              "(registration, scheduler, protocol sniffing, teardown). Keep-alive: its cost per request (read/write "
              "hooks and the HTTP filter's per-connection stream count).", ""]
        if any("connection_mode" in r for r in data["connections"]):
            L += ["### Filter mode vs connection mode (no HTTP filter), per request", "",
                  "| case | bare Envoy | filter mode (HTTP + network filter) | ratio | connection mode (network filter only) | ratio |",
                  "|---|---|---|---|---|---|"]
            for r in data["connections"]:
                if "connection_mode" in r:
                    L.append(f"| {r['case']} | {r['bare']:.0f} | {r['with']:.0f} | {ratio(r['with'], r['bare']):.4f} | "
                             f"{r['connection_mode']:.0f} | {ratio(r['connection_mode'], r['bare']):.4f} |")
            L += [""]
    if data.get("proxy"):
        rounds = max((r.get("rounds", 1) for r in data["proxy"]), default=1)
        L += ["## Instructions per request proxying to an upstream over keep-alive (callgrind, --concurrency 1)", "",
              *([f"Each process total is the median of {rounds} interleaved rounds (every variant of a path once "
                 "per round); the spreads are under the connection-mode table below.", ""] if rounds > 1 else []),
              "HTTP filter only: graceful_drain's HTTP filter against an empty module HTTP filter (the floor).", "",
              "| path | bare Envoy | bootstrap-only | empty module filter (the floor) | graceful_drain filter | "
              "difference to the floor | graceful_drain's hooks | the floor's hooks | own cost above the floor |",
              "|---|---|---|---|---|---|---|---|---|"]

        def hooks(r, v):
            return r.get("hooks", {}).get(v, {}).get("total")

        def own_cols(r, b, floor, gd):
            f, g = r.get(floor), r.get(gd)
            hf, hg = hooks(r, floor), hooks(r, gd)
            cols = [f"{100 * (g - f) / b:+.2f} %" if f and g else "-",
                    f"{hg:.0f}" if hg is not None else "-", f"{hf:.0f}" if hf is not None else "-",
                    f"{hg - hf:.0f} ({100 * (hg - hf) / b:.2f} %)" if hg is not None and hf is not None else "-"]
            return cols

        for r in data["proxy"]:
            if r.get("bare") is None:
                L.append(f"| {r['path']} | (smoke run: path checked, not measured) | | | | | | | |")
                continue
            if "empty module filter" not in r:  # browser heads: only the modes' variants
                continue
            b, f, g = r["bare"], r["empty module filter"], r["graceful_drain"]
            L.append(f"| {r['path']} | {b / 1000:.1f} k | {ratio(r['bootstrap-only'], b):.4f}× | {ratio(f, b):.4f}× | "
                     f"{ratio(g, b):.4f}× | " + " | ".join(own_cols(r, b, "empty module filter", "graceful_drain")) + " |")
        if any(r.get("graceful_drain HTTP + network filters") for r in data["proxy"]):
            L += ["", "HTTP and network filter (as in envoy-config/gateway.yaml): graceful_drain's two filters against "
                  "an empty module HTTP filter plus an empty module network filter (the floor).", "",
                  "| path | bare Envoy | empty HTTP + network filters (the floor) | graceful_drain HTTP + network filters | "
                  "difference to the floor | graceful_drain's hooks | the floor's hooks | own cost above the floor |",
                  "|---|---|---|---|---|---|---|---|"]
            for r in data["proxy"]:
                if r.get("graceful_drain HTTP + network filters") is None or "empty HTTP + network filters" not in r:
                    continue
                b = r["bare"]
                fl, gd = "empty HTTP + network filters", "graceful_drain HTTP + network filters"
                L.append(f"| {r['path']} | {b / 1000:.1f} k | {ratio(r[fl], b):.4f}× | {ratio(r[gd], b):.4f}× | "
                         + " | ".join(own_cols(r, b, fl, gd)) + " |")
        L += ["", "Ratios are to bare Envoy. The floor is a C module whose hooks all return Continue (built by the "
              "benchmark): what Envoy charges for hosting any dynamic-module filter. 'Difference to the floor' is "
              "(graceful_drain - floor) / bare from the process totals, which move by a few tenths of a percent "
              "from run to run on these paths; 'hooks' is the inclusive cost per request of the exported filter "
              "hooks (the module's code and the Envoy callbacks it makes), deterministic; 'own cost above the "
              "floor' is graceful_drain's hooks minus the floor's, and its share of bare Envoy's cost.", ""]
        for r in data["proxy"]:
            by = r.get("hooks", {}).get("graceful_drain HTTP + network filters", {}).get("by_hook")
            if by:
                L.append(f"- {r['path']}, graceful_drain's hooks per request: " +
                         ", ".join(f"{k} {v:.0f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
        L.append("")
    L += tracker_table(data)
    L += ["## Throughput and latency (interleaved rounds, min / median / max)", "",
          "| protocol | concurrency | bare req/s | module req/s | median ratio | latency bare | latency module |", "|---|---|---|---|---|---|---|"]
    for r in data["throughput"]:
        b, m = fmt_spread(r["bare"], "rps"), fmt_spread(r["module"], "rps")
        key = "p99_ms" if r["proto"] == "HTTP/1.1" else "mean_ms"
        lb, lm = fmt_spread(r["bare"], key), fmt_spread(r["module"], key)
        lat = "p99" if key == "p99_ms" else "mean"
        L.append(f"| {r['proto']} | {r['concurrency']}{' (pinned)' if r['pinned'] else ''} | {b[0]:.0f} / {b[1]:.0f} / {b[2]:.0f} | "
                 f"{m[0]:.0f} / {m[1]:.0f} / {m[2]:.0f} | {ratio(m[1], b[1]):.3f} | {lat} {lb[1]:.2f} ms | {lat} {lm[1]:.2f} ms |")
    prof = data.get("profile") or {}
    if prof.get("setups"):
        L += ["", f"## CPU per request by shared object (perf cpu-clock profile, HTTP/2 h2load -c4 -m4 at "
              f"{4 * prof.get('rps_per_connection', PROFILE_RPS)} req/s, {prof['n']} requests, {prof['rounds']} "
              f"interleaved rounds, median µs per request)", ""]
        for setup, samples in prof["setups"].items():
            L += [f"{setup}:", "", "| | " + " | ".join(PROFILE_GROUPS) + " | total | req/s |",
                  "|---|" + "---|" * (len(PROFILE_GROUPS) + 2)]
            med = {}
            for v, rows in samples.items():
                med[v] = {g: statistics.median(r["us_per_request"][g] for r in rows) for g in PROFILE_GROUPS}
                med[v]["total"] = statistics.median(sum(r["us_per_request"].values()) for r in rows)
                rps = statistics.median(r["rps"] for r in rows)
                L.append(f"| {v} | " + " | ".join(f"{med[v][g]:.2f}" for g in PROFILE_GROUPS) +
                         f" | {med[v]['total']:.2f} | {rps:.0f} |")
            names = list(samples)
            for a_, b_ in zip(names[1:], names[:-1]):
                L.append(f"| {a_} − {b_} | " + " | ".join(f"{med[a_][g] - med[b_][g]:+.2f}" for g in PROFILE_GROUPS) +
                         f" | {med[a_]['total'] - med[b_]['total']:+.2f} | |")
            L.append("")
        L += ["Every thread of the gateway is sampled (the worker does nearly all of it). 'module' is the loaded "
              "module's own code (graceful_drain, or the empty floor); what Envoy runs to host it is in 'envoy'. "
              "Callgrind counts user-space instructions only; this profile also sees the kernel and each "
              "instruction's real cost.", ""]
    elif prof.get("skipped"):
        L += ["", f"## CPU profile: skipped ({prof['skipped']})", ""]
    L += ["", "## Shutdown cost (one of two gateways behind a health-checking front Envoy, under load)", "",
          "| strategy | termination start → exit | failed / sent | SIGKILL |", "|---|---|---|---|"]
    for r in data["shutdown"]:
        L.append(f"| {r['strategy']} | {r['exit_s']:.2f} s | {r['failed']} / {r['sent']} | {'yes' if r['killed'] else 'no'} |")
    L += ["", "![in-flight requests and failures during a shutdown](shutdown.svg)", "",
          "## Resident memory (KiB, --concurrency 2)", "", "| | idle | peak under load |", "|---|---|---|"]
    for k, v in data["memory"].items():
        L.append(f"| {k} | {v['idle_kib']} | {v['load_peak_kib']} |")
    b, m = data["memory"].get("bare"), data["memory"].get("module")
    if b and m:
        L.append(f"| ratio | {ratio(m['idle_kib'], b['idle_kib']):.3f} | {ratio(m['load_peak_kib'], b['load_peak_kib']):.3f} |")
    if data.get("scale"):
        L += ["", "## Drain cost against configuration size (gateway.yaml + N static clusters, --concurrency 2, "
              "SIGTERM with one slow request in flight)", "",
              "| N clusters | data listener | main thread CPU serving → draining | stats scanner thread, draining "
              "| whole process, draining | admin `GET /ready` p50 serving → draining (max) "
              "| exit released / allowed | process exit |", "|---|---|---|---|---|---|---|---|"]
        for r in data["scale"]:
            rel = r.get("released_s")
            L.append(f"| {r['clusters']} | {SCALE_LABELS.get(r['mode'], r['mode'])} | "
                     f"{100 * r['cpu_serving']:.1f} % → {100 * r['cpu_draining']:.1f} % | "
                     f"{100 * r.get('scanner_cpu_draining', float('nan')):.1f} % | "
                     f"{100 * r.get('process_cpu_draining', float('nan')):.1f} % | "
                     f"{r['ready_p50_serving_ms']:.2f} → {r['ready_p50_draining_ms']:.2f} ms ({r['ready_max_draining_ms']:.0f} ms) | "
                     f"{'-' if rel is None else '%.3f s' % rel} / {r['allowed_s']:.1f} s | {r['exit_s']:.2f} s |")
        L += ["", "CPU is per thread (the main thread is the one named `envoy`, the module's stats scanner "
              "`graceful_stats`) and for the whole process (workers, the one slow request, the admin probes), from SIGTERM "
              "to 100 ms before the earliest allowed exit, in % of one CPU; 'exit released' is when the module let Envoy exit (its log), 'process exit' adds Envoy's own "
              "teardown, which grows with the number of clusters with or without the module.", ""]
    if data.get("streams"):
        L += ["## Concurrent HTTP/2 streams (slow requests held open, --concurrency 2)", "",
              "| | streams wanted / connections | in flight (Envoy) | in flight (module) | RSS idle → loaded | request table | drain: connections sent away | in flight after the go-aways |",
              "|---|---|---|---|---|---|---|---|"]
        for r in data["streams"]:
            t = r.get("request_table")
            L.append(f"| {'graceful_drain' if r['module'] else 'bare Envoy'} | {r['streams_wanted']} / {r['connections']} | "
                     f"{r['envoy_active']} | {r.get('module_active', '-')} | {r['rss_idle_kib'] // 1024} → {r['rss_kib'] // 1024} MiB | "
                     f"{'-' if not t else '%d slots, %d workers, %.1f MiB' % (t['slots'], t['workers'], t['bytes'] / 2**20)} | "
                     f"{'-' if 'sent_away_http2' not in r else '%d in %.2f s' % (r['sent_away_http2'], r['sent_away_s'])} | "
                     f"{r.get('active_after_goaway', '-')} |")
        L.append("")
    open(os.path.join(OUT, "report.md"), "w").write("\n".join(L) + "\n")
    svg_plot(data["shutdown"], os.path.join(OUT, "shutdown.svg"))
    print("\n".join(L))


SECTIONS = ["instructions", "connections", "proxy", "throughput", "profile", "shutdown", "memory", "scale", "streams"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the bench runs, gives no figures")
    ap.add_argument("--only", choices=SECTIONS, action="append")
    ap.add_argument("--report-only", action="store_true", help="re-render report.md/svg from report.json")
    ap.add_argument("--no-build", action="store_true",
                    help="skip `cargo build --release --lib`: use the module already in target/release")
    args = ap.parse_args()
    if args.report_only:
        write_report(json.load(open(os.path.join(OUT, "report.json"))))
        return
    for tool in ("valgrind", "callgrind_control", "h2load", "wrk", "taskset", "openssl", "cc"):
        if not shutil.which(tool):
            sys.exit(f"missing {tool}: run `make bench-deps` (apt-get install valgrind nghttp2-client wrk openssl gcc)")
    if args.no_build:
        if not os.path.exists(os.path.join(MODULE_DIR, "libgraceful_drain.so")):
            sys.exit(f"--no-build: no libgraceful_drain.so in {MODULE_DIR}")
    else:
        subprocess.run(["cargo", "build", "--release", "--lib", "--quiet"], cwd=ROOT, check=True)
    binary = envoy_bin()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    data = {"machine": f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}",
            "envoy": envoy_version(binary), "smoke": args.smoke,
            "instructions": [], "connections": [], "proxy": [], "throughput": [], "profile": {}, "shutdown": [], "memory": {},
            "scale": [], "streams": []}
    only = args.only or SECTIONS
    previous = os.path.join(OUT, "report.json")
    data["runs"] = {}
    if args.only and os.path.exists(previous):
        # Partial run: keep the other sections of the last report, and say when they were made.
        old = json.load(open(previous))
        for k in SECTIONS:
            if k not in only:
                data[k] = old.get(k, data[k])
                if k in old.get("runs", {}):
                    data["runs"][k] = old["runs"][k]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown commit"
    for k in only:
        data["runs"][k] = f"{time.strftime('%Y-%m-%d')} at {commit}"
    if args.only and os.path.exists(previous) and old.get("machine") != data["machine"]:
        # Sections from different machines: each says its own (figures compare within a run).
        for k in SECTIONS:
            run = data["runs"].get(k)
            if run and " on " not in run:
                data["runs"][k] = f"{run} on {data['machine'] if k in only else old.get('machine')}"
        data["machine"] = "several, see the sections by run"
    if "instructions" in only:
        data["instructions"] = bench_instructions(binary, args.smoke)
    if "connections" in only:
        data["connections"] = bench_connections(binary, args.smoke)
    if "proxy" in only:
        data["proxy"] = bench_proxy_instructions(binary, args.smoke)
    if "throughput" in only:
        data["throughput"] = bench_throughput(binary, args.smoke)
    if "profile" in only:
        data["profile"] = bench_profile(binary, args.smoke)
    if "shutdown" in only:
        data["shutdown"] = bench_shutdown(binary, args.smoke)
    if "memory" in only:
        data["memory"] = bench_memory(binary, args.smoke)
    if "scale" in only:
        data["scale"] = bench_scale(binary, args.smoke)
    if "streams" in only:
        data["streams"] = bench_streams(binary, args.smoke)
    write_report(data)
    # A smoke run must at least show the module draining without failures and bare Envoy failing.
    for r in data["shutdown"]:
        if r["strategy"].startswith("graceful-drain") and (r["failed"] or r["killed"]):
            sys.exit(f"module shutdown failed requests: {r['failed']}")
    for r in data["scale"]:
        if not r["exited"] or r["slow_request"] != 200:
            sys.exit(f"scale run failed: {r}")
    for r in data["streams"]:
        if r["module"] and (r["module_active"] != r["streams_wanted"] or r["sent_away_http2"] != r["connections"]):
            sys.exit(f"streams run: count or go-aways wrong: {r}")


if __name__ == "__main__":
    main()
