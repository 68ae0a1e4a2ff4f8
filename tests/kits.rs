//! The platform kits, each against its platform's own release files and a real Envoy started with
//! the platform's command line (common/gateway.rs), and the control listener's address family kit
//! by kit.
//!
//! One test binary, `kits` (`make test TEST_ARGS="--test kits"`; one suite of it: `--test <suite>`,
//! which scripts/test-args.sh turns into this binary and the test filter `<suite>::`). The
//! integration suites are grouped into a few binaries, each built and linked once (Cargo.toml's
//! [[test]] targets, listed there since `autotests = false`); each suite stays a file of its own in
//! tests/, a module here.

#[path = "common/mod.rs"]
mod common;

#[path = "kourier.rs"]
mod kourier;

#[path = "contour.rs"]
mod contour;

#[path = "envoy_gateway.rs"]
mod envoy_gateway;

#[path = "istio.rs"]
mod istio;

#[path = "ip_family.rs"]
mod ip_family;
