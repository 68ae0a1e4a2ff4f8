# graceful-drain: the two commands the README starts with are `make run` and `make test`.
SHELL := /bin/bash

# The Envoy to run and test against: `make test ENVOY_VERSION=1.39.3` (also `run`). Default: the
# version pinned in scripts/install-envoy.sh. The module is one build for every supported Envoy
# (src/host/envoy_release.rs): the version only picks the Envoy binary.
ENVOY_VERSION ?= $(shell sed -n 's/^ENVOY_VERSION=//p' scripts/install-envoy.sh)
SUPPORTED_ENVOY_VERSIONS := $(shell scripts/install-envoy.sh --supported)
minor_of = $(word 1,$(subst ., ,$(1))).$(word 2,$(subst ., ,$(1)))
ENVOY_MINOR := $(call minor_of,$(ENVOY_VERSION))
SUPPORTED_MINORS := $(foreach v,$(SUPPORTED_ENVOY_VERSIONS),$(call minor_of,$(v)))
# What `make test` runs (narrow it while developing: TEST_ARGS="--test drain"). `--test` takes a
# test binary (data_path, operations, kits, platform, checks, properties: Cargo.toml) or one
# suite of one (a file in tests/: scripts/test-args.sh turns it into its binary and a filter).
TEST_ARGS ?= --all-targets
DIST_DIR := $(CURDIR)/target/dist
# Reproducible builds: the checkout's path and cargo's home are not written into what is built
# (debug info, panic locations), so the same commit gives the same .so bytes wherever it is built
# (tests/dist.rs checks it). Every cargo command below builds with these flags, so the module the
# tests load is the one `make dist` publishes. Added once: a recursive make (`make dist` runs
# `make build`) inherits them, and flags that differ from one cargo run to the next make cargo
# rebuild every crate in the target directory (CI paid two needless release builds for it).
CARGO_HOME_DIR := $(or $(CARGO_HOME),$(HOME)/.cargo)
REMAP_FLAGS := --remap-path-prefix=$(CURDIR)=/graceful-drain --remap-path-prefix=$(CARGO_HOME_DIR)=/cargo
export RUSTFLAGS := $(strip $(filter-out $(REMAP_FLAGS),$(RUSTFLAGS)) $(REMAP_FLAGS))
# Which setup the integration tests run the example gateway in (tests/common/envoy.rs, TestMode):
# connection (the default, envoy-config/gateway.yaml's: no data-path HTTP filter, the network
# filter follows the exchanges), filter (the module's HTTP filter on the data path) or
# cross-check (both, the module built with the test-only `cross-check` feature in its own target
# directory, so it is never mistaken for the release artefact).
TEST_MODE ?= connection
ifeq ($(TEST_MODE),cross-check)
MODULE_TARGET := $(CURDIR)/target/cross-check
MODULE_FEATURES := --features cross-check
else
MODULE_TARGET := $(CURDIR)/target
MODULE_FEATURES :=
endif
MODULE_DIR := $(MODULE_TARGET)/release

.PHONY: run test test-build lint reference drain-picture loom miri mutants envoy build dist check-envoy-version bench bench-smoke bench-deps \
  k8s-lab k8s-lab-test

build:
	cargo build --release --locked --lib $(MODULE_FEATURES) --target-dir $(MODULE_TARGET)

check-envoy-version:
	@case " $(SUPPORTED_MINORS) " in *" $(ENVOY_MINOR) "*) ;; *) \
	  echo "Envoy $(ENVOY_VERSION) is not supported: graceful_drain runs in Envoy $(SUPPORTED_MINORS)" \
	       "(1.37 and older cannot hold SIGTERM for a module; see docs/compatibility.md)" >&2; exit 1;; esac

envoy: check-envoy-version
	@scripts/install-envoy.sh $(ENVOY_VERSION) >/dev/null

# The release artefacts, in target/dist/: the .so (one for every supported Envoy), an OCI image
# holding it and copy-module (k8s/copy-module/; a layout directory and the same as an oci-archive), the
# SBOM, BUILDINFO and SHA256SUMS. Needs no root: the tools come from scripts/install-tools.sh, and
# scripts/dist.sh names any that is missing.
dist:
	@$(MAKE) --no-print-directory build TEST_MODE=connection
	scripts/dist.sh target/release/libgraceful_drain.so $(DIST_DIR)

# Run the example gateway (embedded backend, no other service needed).
run: build envoy
	@ENVOY=$$(scripts/install-envoy.sh $(ENVOY_VERSION)); \
	echo "graceful-drain gateway (Envoy $$($$ENVOY --version | grep -o '/1[^/]*/' | tr -d /))"; \
	echo "  data     http://127.0.0.1:10000/   (slow request: -H 'x-envoy-fault-delay-request: 3000')"; \
	echo "  control  http://127.0.0.1:10001/ready  /drain/status  /drain"; \
	echo "  admin    http://127.0.0.1:9901/    /graceful_drain/status"; \
	echo "  stop with Ctrl-C or SIGTERM: the gateway drains, then exits"; \
	exec env ENVOY_DYNAMIC_MODULES_SEARCH_PATH=$(MODULE_DIR) $$ENVOY -c envoy-config/gateway.yaml --concurrency 2

# Every test: unit tests and the integration tests against the real Envoy (ENVOY_VERSION).
test: build envoy
	@scripts/install-tools.sh >/dev/null
	@# Every test includes the real components' (tests/real_components.rs): the lab is set up
	@# once (cached outside the checkout; nothing to do after), so `make test` works on a fresh
	@# machine as it is.
	@case " $(TEST_ARGS) " in *" --all-targets "*|*real_components*|*" platform "*) scripts/k8s-lab.sh setup >/dev/null;; esac
	ENVOY_VERSION=$(ENVOY_VERSION) ENVOY_BIN=$$(scripts/install-envoy.sh $(ENVOY_VERSION)) \
	  GRACEFUL_DRAIN_MODULE_DIR=$(MODULE_DIR) GRACEFUL_DRAIN_TEST_MODE=$(TEST_MODE) \
	  cargo test $$(scripts/test-args.sh $(TEST_ARGS))

# The real components tests/real_components.rs runs (docs/contributing/testing.md): a
# real Kubernetes API server for custom resources with the platforms' CRDs, and podman + runc for
# a real container holding the module image. `make k8s-lab` builds and sets them up, cached outside
# the checkout (scripts/k8s-lab.sh: root; about 6 minutes and 5.5 GB the first time, nothing after).
# `make test` (all targets) sets the lab up first, once; the tests fail naming this target on a
# machine where it is missing (a narrower TEST_ARGS run without it).
k8s-lab:
	scripts/k8s-lab.sh setup >/dev/null

# Those tests alone, with the module image of `make dist`.
k8s-lab-test: k8s-lab dist
	@$(MAKE) --no-print-directory test TEST_ARGS="--test real_components"

# What `make test` builds and installs, without running anything (CI builds once, then runs
# suites side by side): the module for TEST_MODE, the test binaries, and the module the
# fault-injection tests load (built by tests/common/envoy.rs's panic_test_module_dir otherwise).
test-build: build envoy
	@scripts/install-tools.sh >/dev/null
	cargo build --release --locked --lib --features panic-test --target-dir target/panic-test
	cargo test --no-run --locked $$(scripts/test-args.sh $(TEST_ARGS))

# docs/reference.md, written from the code (every setting, stat, /drain/status field and log
# line); tests/reference.rs fails when the committed page differs.
reference:
	GRACEFUL_DRAIN_WRITE_REFERENCE=1 cargo test --locked --test checks reference::the_reference_page_is_what_the_code_says

# docs/drain.svg, the picture of a drain on the README, from a real run: the example gateway with
# the module, stock Envoy and a fixed preStop sleep, each stopped under the same load (about a
# minute; scripts/drain-picture.py says what it records). tests/drain_picture.rs runs it --fast.
drain-picture: build envoy
	python3 scripts/drain-picture.py --envoy $$(scripts/install-envoy.sh $(ENVOY_VERSION)) --module-dir $(MODULE_DIR)

# Benchmarks (not tests): writes bench/out/report.md, report.json, shutdown.svg. About two hours on the
# 2-core CI machine (docs/contributing/performance.md); one section: python3 bench/bench.py --only <section>.
bench: build envoy
	python3 bench/bench.py

# A run of tiny sizes that checks the bench command still works (CI runs it), and every case of
# the tracker's loop outside Envoy (bench/tracker-loop) run natively, small: it asserts that each
# exchange started and ended once, so a tracker change that breaks the harness shows here rather
# than the next time someone measures with it.
TRACKER_LOOP_CASES := "http1 h2load" "http1 browser" "httparse h2load" "httparse browser" "httparse-bare h2load" "http2 h2load"
bench-smoke: build envoy
	python3 bench/bench.py --smoke
	cargo build --release --locked --quiet --manifest-path bench/tracker-loop/Cargo.toml --target-dir target/tracker-loop
	@for c in $(TRACKER_LOOP_CASES); do \
	  printf 'tracker-loop %s: ' "$$c"; target/tracker-loop/release/tracker-loop $$c 200 || exit 1; done

bench-deps:
	command -v h2load >/dev/null && command -v wrk >/dev/null && command -v valgrind >/dev/null && \
	  command -v openssl >/dev/null && command -v cc >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind nghttp2-client wrk openssl gcc; }
	# perf (the CPU profile section) is optional: that section is skipped where it is missing.
	command -v perf >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf || true

lint:
	cargo fmt --check
	cargo fmt --check --manifest-path k8s/copy-module/Cargo.toml
	cargo fmt --check --manifest-path bench/tracker-loop/Cargo.toml
	cargo clippy --all-targets -- -D warnings
	cargo clippy --locked --manifest-path k8s/copy-module/Cargo.toml --target-dir target/copier -- -D warnings
	cargo clippy --locked --manifest-path bench/tracker-loop/Cargo.toml --target-dir target/tracker-loop -- -D warnings
	@# Private items too: most modules are crate-private (src/lib.rs), and their docs are the
	@# contributors' map.
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --document-private-items --quiet

# The in-flight table's drain protocol under the loom model checker (its own target dir: the cfg
# changes every dependency's build).
loom:
	RUSTFLAGS="--cfg loom" cargo test --lib --release --target-dir target/loom counting::loom

# The pure layers' unit tests under Miri (undefined behaviour, data races). Needs a nightly
# toolchain with the miri component (rustup); about 5 minutes, so not part of CI. The heaviest
# registry stress tests are left to `make test` and `make loom`.
MIRI_SKIP := --skip counting::tests::the_table_grows --skip counting::tests::a_thread_beyond   --skip counting::tests::a_slot_released --skip counting::tests::end_waits   --skip counting::tests::concurrent_starts
miri:
	cargo +nightly miri test --lib --target-dir target/miri -- $(MIRI_SKIP)

# Mutation testing of the pure core (issue #50): cargo-mutants over the drain state machine, the
# exchange followers, the in-flight table and the configuration parser, against the lib's unit
# tests and tests/properties.rs (the followers' and the parser's property tests). About 1 600
# mutants; `-C` builds only those two test binaries for each (not the Envoy suites), so about 3 s
# a mutant at two jobs, some 80 minutes on 2 cores: not in CI. Narrow it with e.g.
# MUTANTS_FILES="-f src/engine/drain.rs"; shard it with MUTANTS_ARGS="--shard 1/4". Survivors
# land in target/mutants/mutants.out/missed.txt; the reviewed list is bench/results/mutants.md.
# The reference models (`model.rs`), loom's tests and the unit tests themselves are test code.
MUTANTS_FILES ?= -f src/engine/drain.rs -f 'src/exchange/**' -f 'src/counting/**' -f 'src/config/**'
MUTANTS_ARGS ?=
mutants:
	scripts/install-tools.sh mutants >/dev/null
	mkdir -p target/mutants
	CARGO_PROFILE_DEV_DEBUG=0 cargo mutants -j 2 -C --lib -C --test=properties $(MUTANTS_FILES) \
	  -e '**/model.rs' -e '**/loom_tests.rs' -e '**/tests.rs' -e '**/tests/**' \
	  --output target/mutants $(MUTANTS_ARGS)
