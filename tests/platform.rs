//! What is deployed and published: the Kubernetes manifests, the release artefacts, the official
//! images, the real components (API server, container runtime), the alert rules.
//!
//! One test binary, `platform` (`make test TEST_ARGS="--test platform"`; one suite of it: `--test
//! <suite>`, which scripts/test-args.sh turns into this binary and the test filter `<suite>::`).
//! The integration suites are grouped into a few binaries, each built and linked once (Cargo.toml's
//! [[test]] targets, listed there since `autotests = false`); each suite stays a file of its own in
//! tests/, a module here.

#[path = "common/mod.rs"]
mod common;

#[path = "deploy.rs"]
mod deploy;

#[path = "dist.rs"]
mod dist;

#[path = "images.rs"]
mod images;

#[path = "real_components.rs"]
mod real_components;

#[path = "monitoring.rs"]
mod monitoring;
