# graceful-drain: the two commands the README starts with are `make run` and `make test`.
SHELL := /bin/bash
MODULE_DIR := $(CURDIR)/target/release

.PHONY: run test lint envoy build bench bench-smoke bench-deps

build:
	cargo build --release --lib

envoy:
	@scripts/install-envoy.sh >/dev/null

# Run the example gateway (embedded backend, no other service needed).
run: build envoy
	@ENVOY=$$(scripts/install-envoy.sh); \
	echo "graceful-drain gateway (Envoy $$($$ENVOY --version | grep -o '/1[^/]*/' | tr -d /))"; \
	echo "  data     http://127.0.0.1:10000/   (slow request: -H 'x-envoy-fault-delay-request: 3000')"; \
	echo "  control  http://127.0.0.1:10001/ready  /drain/status  /drain"; \
	echo "  admin    http://127.0.0.1:9901/    /graceful_drain/status"; \
	echo "  stop with Ctrl-C or SIGTERM: the gateway drains, then exits"; \
	exec env ENVOY_DYNAMIC_MODULES_SEARCH_PATH=$(MODULE_DIR) $$ENVOY -c envoy-config/gateway.yaml --concurrency 2

# Every test: unit tests and the integration tests against the real Envoy 1.40.
test: build envoy
	@scripts/install-tools.sh >/dev/null
	ENVOY_BIN=$$(scripts/install-envoy.sh) GRACEFUL_DRAIN_MODULE_DIR=$(MODULE_DIR) cargo test --all-targets

# Benchmarks (not tests): writes bench/out/report.md, report.json, shutdown.svg. About 15 minutes.
bench: build envoy
	python3 bench/bench.py

# A run of tiny sizes that checks the bench command still works (CI runs it).
bench-smoke: build envoy
	python3 bench/bench.py --smoke

bench-deps:
	command -v h2load >/dev/null && command -v wrk >/dev/null && command -v valgrind >/dev/null && \
	  command -v openssl >/dev/null && command -v cc >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind nghttp2-client wrk openssl gcc; }

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
