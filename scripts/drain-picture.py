#!/usr/bin/env python3
"""A picture of a drain, from a real run: docs/drain.svg (`make drain-picture`).

Runs the example gateway (envoy-config/gateway.yaml, plus routes /events and /ws to a small
upstream this script serves: SSE and WebSocket) three ways, each under the same load, and records
what a client sees:
  1. graceful-drain: Envoy with the module, as shipped (connection mode), stopped with SIGTERM;
  2. stock Envoy: the same gateway without the module (its three entries removed), SIGTERM;
  3. a fixed preStop sleep (Knative Kourier's: POST /drain_listeners?graceful, sleep 15 s, then
     SIGTERM; Envoy run with --drain-time-s 15 --drain-strategy immediate), without the module.
The load: 4 keep-alive HTTP/1.1 clients sending short requests from 2 s before the stop until
2 s after it (the load balancer's propagation delay; then they go to other pods), 3 slow requests
(x-envoy-fault-delay-request), one SSE stream (text/event-stream, an event every 200 ms) and one
WebSocket (a message every 200 ms).
Recorded against the stop (SIGTERM, or the preStop's start): readiness (/ready on the control
listener) turning 503, connections told (a response with `connection: close`), requests in
flight, failed requests, the slow requests' and the long streams' ends (moved: the SSE's last
chunk came, the WebSocket's Close 1001; cut: the connection broke first), and Envoy's exit. Writes the SVG (hand-rolled, no plotting library)
and, beside it with --json, the recorded data.

--fast: shorter settings (min_drain_duration 1s, a 3 s sleep, slow requests of 1-4 s), for the
test that checks this command still works (tests/drain_picture.rs); the committed picture comes
from a run without it. Standard library only.
"""
import argparse
import http.client
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(f"[drain-picture {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The gateway's config, three ways.

def remove_items(text, name):
    """Drop the YAML list item `- name: <name>` and everything indented under it."""
    out, skipping = [], None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if skipping is not None:
            if not line.strip() or indent > skipping:
                continue
            skipping = None
        if line.strip() == f"- name: {name}":
            skipping = indent
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def render(ports, upstream, module, fast):
    admin, data, control = ports
    y = open(os.path.join(ROOT, "envoy-config", "gateway.yaml")).read()
    for old, new in [("port_value: 9901", f"port_value: {admin}"),
                     ("port_value: 10000", f"port_value: {data}"),
                     ("port_value: 10001", f"port_value: {control}"),
                     ("127.0.0.1:9901", f"127.0.0.1:{admin}")]:
        assert old in y, f"gateway.yaml has no {old!r}"
        y = y.replace(old, new)
    route = '              - match: { prefix: "/" }\n                direct_response:'
    assert route in y, "gateway.yaml's data route moved"
    y = y.replace(route, '              - match: { prefix: "/events" }\n'
                         '                route: { cluster: streams, timeout: 0s }\n'
                         '              - match: { prefix: "/ws" }\n'
                         '                route: { cluster: streams, timeout: 0s }\n' + route, 1)
    assert "upgrade_type: websocket" in y, "gateway.yaml no longer passes WebSocket upgrades"
    y += ("  clusters:\n  - name: streams\n    connect_timeout: 1s\n    load_assignment:\n"
          "      cluster_name: streams\n      endpoints:\n      - lb_endpoints:\n"
          "        - endpoint: { address: { socket_address: { address: 127.0.0.1, "
          f"port_value: {upstream} }} }} }}\n")
    if fast:
        settings = '"min_drain_duration": "5s", "quiet_period": "1s", "drain_timeout": "25s"'
        assert settings in y
        y = y.replace(settings, '"min_drain_duration": "1s", "quiet_period": "0.5s", "drain_timeout": "8s"')
    if not module:
        for name in ["envoy.bootstrap.dynamic_modules", "envoy.filters.network.dynamic_modules",
                     "envoy.filters.http.dynamic_modules"]:
            y = remove_items(y, name)
        y = y.replace("bootstrap_extensions:\n", "")
        assert "dynamic_modules" not in re.sub(r"#.*", "", y)
    return y


# ---------------------------------------------------------------------------------------------
# The upstream: SSE (an event every 200 ms, chunked) and WebSocket (a text message every
# 200 ms; a Close is answered with a Close), until the client goes.

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_frame(opcode, payload, mask=False):
    head = bytes([0x80 | opcode])
    n = len(payload)
    m = 0x80 if mask else 0
    head += bytes([m | n]) if n < 126 else bytes([m | 126]) + n.to_bytes(2, "big")
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def ws_read(f):
    """One frame from a file-like socket: (opcode, payload), or None at the end."""
    h = f.read(2)
    if len(h) < 2:
        return None
    n = h[1] & 0x7F
    if n == 126:
        n = int.from_bytes(f.read(2), "big")
    elif n == 127:
        n = int.from_bytes(f.read(8), "big")
    key = f.read(4) if h[1] & 0x80 else None
    data = f.read(n)
    if len(data) < n:
        return None
    if key:
        data = bytes(b ^ key[i % 4] for i, b in enumerate(data))
    return h[0] & 0x0F, data


class StreamHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/ws"):
            return self.websocket()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        n = 0
        try:
            while not self.server.stopping:
                body = f"data: {n}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                self.wfile.flush()
                n += 1
                time.sleep(0.2)
        except OSError:
            pass

    def websocket(self):
        import base64
        import hashlib
        key = self.headers.get("sec-websocket-key", "").encode()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
        self.send_response(101)
        self.send_header("upgrade", "websocket")
        self.send_header("connection", "Upgrade")
        self.send_header("sec-websocket-accept", accept)
        self.end_headers()
        self.wfile.flush()
        closed = threading.Event()
        lock = threading.Lock()

        def reader():
            while True:
                try:
                    fr = ws_read(self.rfile)
                except OSError:
                    fr = None
                if fr is None:
                    break
                if fr[0] == 8:
                    with lock:
                        try:
                            self.wfile.write(ws_frame(8, fr[1][:2]))
                            self.wfile.flush()
                        except OSError:
                            pass
                    break
            closed.set()

        threading.Thread(target=reader, daemon=True).start()
        n = 0
        while not closed.is_set() and not self.server.stopping:
            with lock:
                try:
                    self.wfile.write(ws_frame(1, f"message {n}".encode()))
                    self.wfile.flush()
                except OSError:
                    break
            n += 1
            closed.wait(0.2)
        closed.wait(10)
        self.close_connection = True


def stream_upstream(port):
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), StreamHandler)
    srv.daemon_threads = True
    srv.stopping = False
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# ---------------------------------------------------------------------------------------------
# One run.

class Run:
    def __init__(self, data_port, control_port):
        self.data, self.control = data_port, control_port
        self.lock = threading.Lock()
        self.inflight = 0
        self.samples = []          # (t, requests in flight)
        self.failed = []           # t of each failed short request
        self.told = []             # t of each response with connection: close
        self.served = 0
        self.slow = []             # {"start", "end", "ok", "delay"}
        self.streams = {"sse": {}, "websocket": {}}   # each {"start", "end", "moved", "events"}
        self.ready_503 = None
        self.t0 = None             # the stop, in time.monotonic()
        self.send_until = None     # clients stop sending here (the load balancer moved on)
        self.done = threading.Event()

    def now(self):
        return time.monotonic() - self.t0 if self.t0 else None

    def add(self, d):
        with self.lock:
            self.inflight += d

    def short_client(self):
        conn = None
        while not self.done.is_set():
            t = time.monotonic()
            if self.send_until is not None and t > self.send_until:
                return
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.data, timeout=30)
            self.add(1)
            try:
                conn.request("GET", "/")
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
                close = (r.getheader("connection") or "").lower() == "close"
            except (OSError, http.client.HTTPException):
                ok, close = False, True
            self.add(-1)
            with self.lock:
                if ok:
                    self.served += 1
                else:
                    self.failed.append(time.monotonic())
                if ok and close:
                    self.told.append(time.monotonic())
            if close:
                conn.close()
                conn = None
            time.sleep(0.02)
        if conn:
            conn.close()

    def slow_request(self, delay_ms):
        rec = {"start": time.monotonic(), "delay": delay_ms / 1000}
        self.slow.append(rec)
        self.add(1)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.data, timeout=120)
            conn.request("GET", "/", headers={"x-envoy-fault-delay-request": str(delay_ms)})
            r = conn.getresponse()
            r.read()
            rec["ok"] = r.status == 200
            if (r.getheader("connection") or "").lower() == "close":
                with self.lock:
                    self.told.append(time.monotonic())
        except (OSError, http.client.HTTPException):
            rec["ok"] = False
        rec["end"] = time.monotonic()
        self.add(-1)

    def sse_stream(self):
        """An SSE client on a raw socket, so that the chunked body's end is seen as it is:
        moved = its last chunk (`0\\r\\n\\r\\n`) came; cut = the connection ended first."""
        rec = self.streams["sse"]
        rec.update(start=time.monotonic(), events=0)
        self.add(1)
        moved = False
        try:
            sock = socket.create_connection(("127.0.0.1", self.data), timeout=120)
            sock.sendall(b"GET /events HTTP/1.1\r\nhost: gateway\r\naccept: text/event-stream\r\n\r\n")
            buf = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                rec["events"] = buf.count(b"data:")
                if b"\r\n0\r\n\r\n" in buf:
                    moved = True
                    break
            sock.close()
        except OSError:
            moved = False
        rec["end"] = time.monotonic()
        rec["moved"] = moved
        self.add(-1)

    def websocket(self):
        """A WebSocket client on a raw socket: moved = a Close with 1001 (going away) came, and
        was answered; cut = the connection ended first."""
        rec = self.streams["websocket"]
        rec.update(start=time.monotonic(), events=0)
        self.add(1)
        moved = False
        try:
            sock = socket.create_connection(("127.0.0.1", self.data), timeout=120)
            sock.sendall(b"GET /ws HTTP/1.1\r\nhost: gateway\r\nupgrade: websocket\r\n"
                         b"connection: Upgrade\r\nsec-websocket-version: 13\r\n"
                         b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
            f = sock.makefile("rb")
            status = f.readline()
            assert b" 101 " in status, f"WebSocket upgrade answered {status!r}"
            while f.readline() not in (b"\r\n", b""):
                pass
            while True:
                fr = ws_read(f)
                if fr is None:
                    break
                if fr[0] == 1:
                    rec["events"] += 1
                elif fr[0] == 8:
                    moved = fr[1][:2] == (1001).to_bytes(2, "big")
                    sock.sendall(ws_frame(8, fr[1][:2], mask=True))
                    break
            sock.close()
        except OSError:
            moved = False
        rec["end"] = time.monotonic()
        rec["moved"] = moved
        self.add(-1)

    def sampler(self):
        while not self.done.is_set():
            with self.lock:
                self.samples.append((time.monotonic(), self.inflight))
            time.sleep(0.025)

    def readiness(self):
        while not self.done.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.control, timeout=2)
                c.request("GET", "/ready")
                st = c.getresponse().status
                c.close()
            except (OSError, http.client.HTTPException):
                st = None
            if st != 200 and self.t0 is not None and time.monotonic() > self.t0:
                self.ready_503 = time.monotonic()
                return
            time.sleep(0.025)


def wait_ready(port, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"Envoy exited at start ({proc.returncode})")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/ready")
            if c.getresponse().status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    raise SystemExit(f"Envoy not ready on {port} after {timeout} s")


def run_lane(kind, args, ports, tmp):
    """kind: module, stock, sleep. Returns the lane's events, in seconds from the stop."""
    admin, data, control, upstream = ports
    fast = args.fast
    module = kind == "module"
    cfg = os.path.join(tmp, f"{kind}.yaml")
    open(cfg, "w").write(render((admin, data, control), upstream, module, fast))
    sleep_s = 3 if fast else 15
    cmd = [args.envoy, "-c", cfg, "--concurrency", "2", "--use-dynamic-base-id",
           "--log-level", "info"]
    if kind == "sleep":
        cmd += ["--drain-time-s", str(sleep_s), "--drain-strategy", "immediate"]
    env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=args.module_dir)
    logf = open(os.path.join(tmp, f"{kind}.log"), "w")
    srv = stream_upstream(upstream)
    # In this script's process group: whoever stops the script as a group (the test's guard,
    # Ctrl-C) stops Envoy with it.
    proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_ready(control, proc)
        r = Run(data, control)
        lead = 1.0 if fast else 2.0
        delays = [1000, 2000, 4000] if fast else [3000, 6000, 18000]
        threads = [threading.Thread(target=r.sampler, daemon=True),
                   threading.Thread(target=r.readiness, daemon=True)]
        threads += [threading.Thread(target=r.short_client, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        longs = [threading.Thread(target=r.sse_stream, daemon=True),
                 threading.Thread(target=r.websocket, daemon=True)]
        for t in longs:
            t.start()
        time.sleep(lead / 2)
        slows = [threading.Thread(target=r.slow_request, args=(d,), daemon=True) for d in delays]
        for t in slows:
            t.start()
            time.sleep(0.05)
        time.sleep(lead / 2)
        r.t0 = time.monotonic()
        r.send_until = r.t0 + lead
        sigterm = 0.0
        if kind == "sleep":
            c = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
            c.request("POST", "/drain_listeners?graceful")
            c.getresponse().read()
            time.sleep(sleep_s - (time.monotonic() - r.t0))
            sigterm = time.monotonic() - r.t0
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{kind}: Envoy did not exit within 120 s of SIGTERM")
        exit_at = time.monotonic() - r.t0
        for t in slows + longs:
            t.join(timeout=10)
        # The clients go on sending until the load balancer moves on, whether Envoy is there or not.
        time.sleep(max(r.send_until - time.monotonic(), 0) + 0.2)
        r.done.set()
        for t in threads:
            t.join(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.stopping = True
        srv.shutdown()
        srv.server_close()
        logf.close()
    rel = lambda t: None if t is None else round(t - r.t0, 3)
    return {
        "kind": kind,
        "sigterm": round(sigterm, 3),
        "prestop": kind == "sleep",
        "sleep_s": sleep_s,
        "exit": round(exit_at, 3),
        "lb_moved_on": round(r.send_until - r.t0, 3),
        "exit_code": proc.returncode,
        "ready_503": rel(r.ready_503),
        "inflight": [(rel(t), n) for t, n in r.samples],
        "failed": [rel(t) for t in r.failed],
        "told": [rel(t) for t in r.told],
        "served": r.served,
        "slow": [{"start": rel(s["start"]), "end": rel(s.get("end")), "ok": s.get("ok", False),
                  "delay": s["delay"]} for s in r.slow],
        "streams": {k: {"start": rel(v.get("start")), "end": rel(v.get("end")),
                        "moved": v.get("moved", False), "events": v.get("events", 0)}
                    for k, v in r.streams.items()},
    }


# ---------------------------------------------------------------------------------------------
# The SVG.

def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


TITLES = {
    "module": "graceful-drain: Envoy {v} with the module, SIGTERM",
    "stock": "stock Envoy {v}, SIGTERM",
    "sleep": "fixed preStop sleep (Kourier's): drain_listeners?graceful, sleep {s} s, SIGTERM",
}
GREEN, RED, BLUE, ORANGE, GREY = "#2ca02c", "#d62728", "#1f77b4", "#ff7f0e", "#888"


def svg(lanes, version):
    w, left, right = 980, 150, 30
    lane_h, top = 225, 76
    h = top + lane_h * len(lanes) + 40
    tmin = min(min([s["start"] for s in l["slow"]] + [v["start"] for v in l["streams"].values()])
               for l in lanes) - 0.3
    tmax = max(l["exit"] for l in lanes) + 2.5
    x = lambda t: left + (w - left - right) * (t - tmin) / (tmax - tmin)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="10" y="22" font-size="15" font-weight="bold">A drain, recorded: one gateway '
         f'stopped under load, three ways</text>',
         f'<text x="10" y="40" fill="#444">Load: 4 keep-alive clients sending short requests until '
         f'the load balancer moves on, 3 slow requests, an SSE stream, a WebSocket. Seconds from the stop.</text>',
         f'<text x="10" y="56" fill="#444">Bars: green answered 200, red cut. Ticks: '
         f'<tspan fill="{GREEN}">green, a connection told to close</tspan>; '
         f'<tspan fill="{RED}">red, a failed request</tspan>.</text>']
    for i, l in enumerate(lanes):
        y0 = top + i * lane_h
        title = TITLES[l["kind"]].format(s=l["sleep_s"], v=version)
        o.append(f'<line x1="10" y1="{y0}" x2="{w - 10}" y2="{y0}" stroke="#ccc"/>')
        o.append(f'<text x="10" y="{y0 + 18}" font-weight="bold">{esc(title)}</text>')
        rows = {"slow": y0 + 80, "sse": y0 + 116, "websocket": y0 + 138, "inflight": y0 + 192,
                "events": y0 + 212}
        o.append(f'<text x="10" y="{rows["slow"] + 4}">slow requests</text>')
        o.append(f'<text x="10" y="{rows["sse"] + 4}">SSE stream</text>')
        o.append(f'<text x="10" y="{rows["websocket"] + 4}">WebSocket</text>')
        o.append(f'<text x="10" y="{rows["inflight"] - 12}">requests in flight</text>')
        o.append(f'<text x="10" y="{rows["events"] + 4}">connections told</text>')
        # Markers across the lane: the stop, readiness, SIGTERM, the exit.
        marks = []
        if l["prestop"]:
            marks.append((0.0, "preStop", "#000", "4,3"))
            marks.append((l["sigterm"], "SIGTERM", "#000", "4,3"))
        else:
            marks.append((0.0, "SIGTERM", "#000", "4,3"))
        if l["ready_503"] is not None and l["ready_503"] < l["exit"] - 0.05:
            marks.append((l["ready_503"], "readiness 503", ORANGE, "2,2"))
        marks.append((l["lb_moved_on"], "load balancer moved on", GREY, "1,3"))
        marks.append((l["exit"], f"exit ({l['exit']:.1f} s)", "#000", ""))
        marks.sort(key=lambda m: m[0])
        for j, (t, label, c, dash) in enumerate(marks):
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            o.append(f'<line x1="{x(t):.1f}" y1="{y0 + 42}" x2="{x(t):.1f}" y2="{y0 + lane_h - 8}" '
                     f'stroke="{c}"{dash_attr}/>')
            ly = y0 + 52 + 12 * (j % 2)
            o.append(f'<text x="{x(t) + 3:.1f}" y="{ly}" fill="{c}" font-size="11">{esc(label)}</text>')
        # Slow requests: one bar each, ending in 200 or cut.
        for k, s in enumerate(l["slow"]):
            yy = rows["slow"] - 8 + k * 9
            end = s["end"] if s["end"] is not None else l["exit"]
            c = GREEN if s["ok"] else RED
            o.append(f'<rect x="{x(s["start"]):.1f}" y="{yy}" width="{max(x(end) - x(s["start"]), 1):.1f}" '
                     f'height="6" fill="{c}" fill-opacity="0.75"/>')
            o.append(f'<text x="{x(end) + 3:.1f}" y="{yy + 6}" font-size="9" fill="{c}">'
                     f'{"200" if s["ok"] else "cut"} ({s["delay"]:.0f} s request)</text>')
        # The long streams.
        moved_as = {"sse": "moved: its last chunk, then a clean close",
                    "websocket": "moved: Close 1001 (going away), answered, closed"}
        for kind, st in l["streams"].items():
            end = st["end"] if st["end"] is not None else l["exit"]
            c = GREEN if st["moved"] else RED
            o.append(f'<rect x="{x(st["start"]):.1f}" y="{rows[kind] - 6}" '
                     f'width="{max(x(end) - x(st["start"]), 1):.1f}" height="10" fill="{BLUE}" '
                     f'fill-opacity="0.5"/>')
            label = moved_as[kind] if st["moved"] else "cut"
            # At the bar's end, or inside it where the text would run off the picture.
            inside = x(end) + 7 * len(label) > w - 10
            anchor = f'x="{x(end) - 4:.1f}" text-anchor="end"' if inside else f'x="{x(end) + 3:.1f}"'
            o.append(f'<text {anchor} y="{rows[kind] + 4}" fill="{c}">{label}</text>')
        # Requests in flight: a step line.
        top_n = max([n for _, n in l["inflight"]] + [1])
        ih = 34
        pts, last = [], None
        for t, n in l["inflight"]:
            if tmin <= t <= tmax and n != last:
                y = rows["inflight"] - ih * n / top_n
                if last is not None:
                    pts.append(f'{x(t):.1f},{rows["inflight"] - ih * last / top_n:.1f}')
                pts.append(f'{x(t):.1f},{y:.1f}')
                last = n
        if l["inflight"]:
            pts.append(f'{x(min(l["inflight"][-1][0], tmax)):.1f},{rows["inflight"] - ih * (last or 0) / top_n:.1f}')
        o.append(f'<polyline fill="none" stroke="{BLUE}" stroke-width="1.5" points="{" ".join(pts)}"/>')
        o.append(f'<text x="{left - 8}" y="{rows["inflight"] - ih + 4:.1f}" text-anchor="end" '
                 f'font-size="10" fill="{GREY}">{top_n}</text>')
        o.append(f'<text x="{left - 8}" y="{rows["inflight"] + 3}" text-anchor="end" font-size="10" '
                 f'fill="{GREY}">0</text>')
        # Connections told and failures: ticks.
        told = [t for t in l["told"] if t >= 0]
        for ts, y, c in [(told, rows["events"] - 6, GREEN), (l["failed"], rows["inflight"] - 10, RED)]:
            xs = sorted({round(x(t), 1) for t in ts})
            if xs:
                d = "".join(f"M{v},{y}V{y + 10}" for v in xs)
                o.append(f'<path d="{d}" stroke="{c}" fill="none"/>')
        ok = sum(1 for s in l["slow"] if s["ok"])
        failed = len(l["failed"])
        moved = sum(1 for v in l["streams"].values() if v["moved"])
        summary = (f'{failed} short requests failed; {ok} of {len(l["slow"])} slow requests '
                   f'answered 200; {moved} of {len(l["streams"])} long streams moved, '
                   f'{len(l["streams"]) - moved} cut; {len(told)} connections told')
        c = GREEN if failed == 0 and ok == len(l["slow"]) and moved == len(l["streams"]) else RED
        o.append(f'<text x="10" y="{y0 + 34}" fill="{c}">{esc(summary)}</text>')
    # The time axis.
    ya = top + lane_h * len(lanes) + 5
    o.append(f'<line x1="{left}" y1="{ya}" x2="{w - right}" y2="{ya}" stroke="#000"/>')
    t = int(tmin)
    step = 2 if tmax - tmin > 12 else 1
    while t <= tmax:
        if t >= tmin:
            o.append(f'<line x1="{x(t):.1f}" y1="{ya}" x2="{x(t):.1f}" y2="{ya + 5}" stroke="#000"/>')
            o.append(f'<text x="{x(t):.1f}" y="{ya + 18}" text-anchor="middle" font-size="11">{t} s</text>')
        t += step
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "drain.svg"))
    ap.add_argument("--json", help="also write the recorded data here")
    ap.add_argument("--envoy", help="the Envoy binary (default: scripts/install-envoy.sh's)")
    ap.add_argument("--module-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--ports", help="four free loopback ports: admin,data,control,upstream")
    ap.add_argument("--fast", action="store_true", help="short settings, for the test")
    ap.add_argument("--lanes", default="module,stock,sleep")
    args = ap.parse_args()
    if not args.envoy:
        args.envoy = subprocess.check_output([os.path.join(ROOT, "scripts", "install-envoy.sh")],
                                             text=True).strip()
    if args.ports:
        ports = [int(p) for p in args.ports.split(",")]
    else:
        socks = []
        for _ in range(4):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        ports = [s.getsockname()[1] for s in socks]
        for s in socks:
            s.close()
    assert len(ports) == 4
    lanes = []
    with tempfile.TemporaryDirectory(prefix="drain-picture-") as tmp:
        for kind in args.lanes.split(","):
            log(f"{kind}: running")
            lane = run_lane(kind, args, ports, tmp)
            log(f"{kind}: exit at {lane['exit']:.2f} s, {len(lane['failed'])} failed, "
                f"{sum(1 for s in lane['slow'] if s['ok'])}/{len(lane['slow'])} slow ok, "
                f"streams moved: {[k for k, v in lane['streams'].items() if v['moved']]}, "
                f"{len(lane['told'])} told")
            lanes.append(lane)
    out = subprocess.run([args.envoy, "--version"], capture_output=True, text=True).stdout
    version = (re.findall(r"/(\d+\.\d+\.\d+)/", out) or ["?"])[0]
    open(args.out, "w").write(svg(lanes, version))
    if args.json:
        open(args.json, "w").write(json.dumps(lanes, indent=1))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
