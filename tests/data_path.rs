//! The example gateway's data path against the real Envoy, in every mode (`make test
//! TEST_MODE=...`): requests counted and drained, idle and long-lived connections, hardening,
//! connection and bootstrap-only modes.
//!
//! One test binary, `data_path` (`make test TEST_ARGS="--test data_path"`; one suite of it: `--test
//! <suite>`, which scripts/test-args.sh turns into this binary and the test filter `<suite>::`).
//! The integration suites are grouped into a few binaries, each built and linked once (Cargo.toml's
//! [[test]] targets, listed there since `autotests = false`); each suite stays a file of its own in
//! tests/, a module here.

#[path = "common/mod.rs"]
mod common;

#[path = "foundation.rs"]
mod foundation;

#[path = "drain.rs"]
mod drain;

#[path = "hardening.rs"]
mod hardening;

#[path = "idle_connections.rs"]
mod idle_connections;

#[path = "connection_mode.rs"]
mod connection_mode;

#[path = "bootstrap_only.rs"]
mod bootstrap_only;

#[path = "long_lived.rs"]
mod long_lived;

#[path = "http2_streams.rs"]
mod http2_streams;
