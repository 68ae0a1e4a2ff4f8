//! How gateways are run: real gateway configurations, a rolling restart behind a real front, a
//! large configuration, every Envoy release the module loads into.
//!
//! One test binary, `operations` (`make test TEST_ARGS="--test operations"`; one suite of it:
//! `--test <suite>`, which scripts/test-args.sh turns into this binary and the test filter
//! `<suite>::`). The integration suites are grouped into a few binaries, each built and linked once
//! (Cargo.toml's [[test]] targets, listed there since `autotests = false`); each suite stays a file
//! of its own in tests/, a module here.

#[path = "common/mod.rs"]
mod common;

#[path = "real_configs.rs"]
mod real_configs;

#[path = "rollout.rs"]
mod rollout;

#[path = "scale.rs"]
mod scale;

#[path = "compatibility.rs"]
mod compatibility;

#[path = "quickstart.rs"]
mod quickstart;
