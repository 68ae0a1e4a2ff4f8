"""gRPC peers for tests/http2_streams.rs, with grpcio (the C-core stack, another implementation than
the Rust clients): a server (the upstream behind Envoy) and a client of gRPC's standard health
service. Lines on stdout say what happened; the test reads them.

  grpc_peer.py server PORT            health service (SERVING), prints "ready"
  grpc_peer.py check PORT SECONDS MS  Check() every MS ms for SECONDS s on one channel (grpcio
                                      reconnects by itself after a GOAWAY); prints "ok" or
                                      "error CODE" per call, then "done ok=N errors=M"
"""

import sys
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


def server(port):
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    h = health.HealthServicer()
    h.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(h, s)
    s.add_insecure_port(f"127.0.0.1:{port}")
    s.start()
    print("ready", flush=True)
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
                print("ok", flush=True)
            else:
                errors += 1
                print(f"error status {r.status}", flush=True)
        except grpc.RpcError as e:
            errors += 1
            print(f"error {e.code().name} {e.details()}", flush=True)
        time.sleep(interval_ms / 1000)
    print(f"done ok={ok} errors={errors}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "server":
        server(int(sys.argv[2]))
    elif what == "check":
        check(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(f"unknown: {what}")
