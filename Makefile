# graceful-drain: the two commands the README starts with are `make run` and `make test`.
SHELL := /bin/bash
MODULE_DIR := $(CURDIR)/target/release

.PHONY: run test unit lint envoy build bench bench-smoke

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

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
