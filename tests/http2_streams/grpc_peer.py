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


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "server":
        server(int(sys.argv[2]))
    elif what == "check":
        check(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    elif what == "streams":
        streams(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(f"unknown: {what}")
