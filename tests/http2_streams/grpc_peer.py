"""gRPC peers for tests/http2_streams.rs, with grpcio (the C-core stack, another implementation than
the Rust clients): a server (the upstream behind Envoy) and a client of gRPC's standard health
service. Lines on stdout say what happened; the test reads them.

  grpc_peer.py server PORT            health service (SERVING), prints "ready"
  grpc_peer.py check PORT SECONDS MS  Check() every MS ms for SECONDS s on one channel (grpcio
                                      reconnects by itself after a GOAWAY); prints "ok" or
                                      "error CODE" per call, then "done ok=N errors=M"
  grpc_peer.py streams PORT SPEC      streams on one channel (one HTTP/2 connection), SPEC a
                                      comma list of KIND:COUNT[:N]: "watch" (/test.Watch/Sub,
                                      endless), "finite" (/test.Finite/Sub, N messages), "chat"
                                      (/test.Watch/Chat, bidi, endless); prints "started" once
                                      each stream had a message, then per stream
                                      "end KIND-I CODE MESSAGES DETAILS"

  grpc_peer.py watchers PORTS N SECS  N watch streams (/test.Watch/Sub) for SECS s, spread over
                                      the gateways at PORTS (comma list), each subscribing again
                                      at once after an UNAVAILABLE, on the next gateway (as a
                                      watch client whose resolver dropped the draining pod);
                                      prints "started", each UNAVAILABLE
                                      ("retry DETAILS"), any other error ("error CODE DETAILS"),
                                      then per watcher "watcher I MESSAGES SECONDS_SINCE_LAST"

The server's streams send a message every 100 ms: b"KIND-I:SEQ", padded to 64 bytes, so that a
message cut short cannot decode as a whole one.
"""

import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


_out = threading.Lock()


def say(line):
    """One whole line on stdout (threads print at once)."""
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def drain_requests(requests):
    try:
        for _ in requests:
            pass
    except Exception:  # the call ended: nothing more to read
        pass


def message(seq):
    return (b"seq:%d:" % seq).ljust(64, b".")


def sub(request, context):
    seq = 0
    while context.is_active():
        yield message(seq)
        seq += 1
        time.sleep(0.1)


def finite(request, context):
    for seq in range(int(request or b"30")):
        if not context.is_active():
            return
        yield message(seq)
        time.sleep(0.1)


def chat(requests, context):
    threading.Thread(target=drain_requests, args=(requests,), daemon=True).start()
    seq = 0
    while context.is_active():
        yield message(seq)
        seq += 1
        time.sleep(0.1)


def server(port):
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    h = health.HealthServicer()
    h.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(h, s)
    s.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("test.Watch", {
            "Sub": grpc.unary_stream_rpc_method_handler(sub),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        }),
        grpc.method_handlers_generic_handler("test.Finite", {
            "Sub": grpc.unary_stream_rpc_method_handler(finite),
        }),
    ))
    s.add_insecure_port(f"127.0.0.1:{port}")
    s.start()
    say("ready")
    s.wait_for_termination()


def check(port, seconds, interval_ms):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)
    end = time.monotonic() + seconds
    ok = errors = 0
    while time.monotonic() < end:
        try:
            r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            if r.status == health_pb2.HealthCheckResponse.SERVING:
                ok += 1
                say("ok")
            else:
                errors += 1
                say(f"error status {r.status}")
        except grpc.RpcError as e:
            errors += 1
            say(f"error {e.code().name} {e.details()}")
        time.sleep(interval_ms / 1000)
    say(f"done ok={ok} errors={errors}")


def streams(port, spec):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    calls = []
    for part in spec.split(","):
        kind, count, *n = part.split(":")
        for i in range(int(count)):
            calls.append((f"{kind}-{i}", kind, n[0].encode() if n else b""))
    first = threading.Barrier(len(calls) + 1)
    stop = threading.Event()

    def ticks():
        while not stop.is_set():
            yield b"tick"
            time.sleep(0.2)

    def run(name, kind, arg):
        if kind == "watch":
            call = channel.unary_stream("/test.Watch/Sub")(b"")
        elif kind == "finite":
            call = channel.unary_stream("/test.Finite/Sub")(arg)
        else:
            call = channel.stream_stream("/test.Watch/Chat")(ticks())
        n = 0
        try:
            for m in call:
                if not m.startswith(b"seq:%d:" % n) or len(m) != 64:
                    say(f"end {name} BAD_MESSAGE {n} {m[:20]!r}")
                    return
                n += 1
                if n == 1:
                    first.wait()
            say(f"end {name} OK {n} -")
        except grpc.RpcError as e:
            say(f"end {name} {e.code().name} {n} {e.details()}")
        except threading.BrokenBarrierError:
            say(f"end {name} NO_FIRST {n} -")

    threads = [threading.Thread(target=run, args=c) for c in calls]
    for t in threads:
        t.start()
    try:
        first.wait(timeout=20)
        say("started")
    except threading.BrokenBarrierError:
        say("not started")
    for t in threads:
        t.join()
    stop.set()
    say("done")


def watchers(ports, count, seconds):
    # One channel per gateway; watcher I starts on gateway I % 2 and, after an UNAVAILABLE,
    # subscribes again on the other one: as a client whose resolver no longer lists the pod
    # that is draining (Kubernetes removes it from the endpoints at once).
    channels = [grpc.insecure_channel(f"127.0.0.1:{p}") for p in ports.split(",")]
    end = time.monotonic() + seconds
    first = threading.Barrier(count + 1)
    stats = [[0, time.monotonic()] for _ in range(count)]

    def run(i):
        started = False
        at = i % len(channels)
        while time.monotonic() < end:
            left = max(0.1, end - time.monotonic())
            call = channels[at].unary_stream("/test.Watch/Sub")(b"", timeout=left)
            try:
                for _ in call:
                    stats[i][0] += 1
                    stats[i][1] = time.monotonic()
                    if not started:
                        started = True
                        first.wait()
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() >= end - 0.2:
                    return
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    say(f"retry {e.details()}")
                    at = (at + 1) % len(channels)
                else:
                    say(f"error {e.code().name} {e.details()}")
            except threading.BrokenBarrierError:
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    try:
        first.wait(timeout=20)
        say("started")
    except threading.BrokenBarrierError:
        say("not started")
    for t in threads:
        t.join()
    now = time.monotonic()
    for i, (n, last) in enumerate(stats):
        say(f"watcher {i} {n} {now - last:.2f}")
    say("done")


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "server":
        server(int(sys.argv[2]))
    elif what == "check":
        check(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    elif what == "streams":
        streams(int(sys.argv[2]), sys.argv[3])
    elif what == "watchers":
        watchers(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(f"unknown: {what}")
