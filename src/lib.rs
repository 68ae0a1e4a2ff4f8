//! graceful-drain: an Envoy dynamic module (Envoy 1.38 to 1.40) that drains a gateway on shutdown
//! without failing a request.
//!
//! Folders by concern, in layers; a layer imports only the layers below it (`tests/architecture.rs`
//! holds the table and checks every file). From the bottom:
//! - [`runtime`] (clock, loom-swappable sync, the module's threads and their gate) and [`host`]
//!   (one trait per Envoy object: stream, connection, extension; how everything above reaches
//!   Envoy, faked in tests);
//! - [`config`]: parsing and validation, errors that name the field;
//! - [`exchange`] (pure HTTP/1.1, HTTP/2, WebSocket and SSE followers) and [`counting`] (the
//!   lock-free per-worker table of requests in flight, loom-checked);
//! - [`envoy_stats`]: Envoy's own stats, its admin, its release;
//! - [`connections`]: downstream connections as the network filter sees them; tells idle ones;
//! - [`engine`]: the pure drain state machine, the shared state, the engine on the main thread;
//! - [`tracking`]: a connection's bytes turned into requests started and ended;
//! - glue, one per Envoy object: [`http_filter`], [`network_filter`], [`extension`];
//! - [`ffi`]: the only unsafe code and the only caller of Envoy; each exported hook is guard,
//!   handle, one call.
//!
//! Unit tests only: `testing` (the fake Envoy and the shared state's fixture), which test files
//! of any layer name and production code never does.
//!
//! `docs/contributing/architecture.md` draws the layers and follows a SIGTERM, a request, an idle close and a
//! stats scan through them; the facts about Envoy the code relies on are in
//! `src/ffi/ENVOY_FACTS.md`, with their evidence.
#![deny(unsafe_code)]
// The modules' docs link to crate-private modules: they are the contributors' map, built with
// the private items (`make lint`: `cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

// Public: what the integration tests (`tests/`) and `bench/tracker-loop` use. The rest is
// crate-private, so the compiler refuses any use of it from outside; `tests/architecture.rs`
// keeps this list and the layering inside the crate.
pub mod config;
pub mod connections;
pub(crate) mod counting;
pub mod engine;
pub mod envoy_stats;
pub mod exchange;
pub(crate) mod extension;
pub mod ffi;
pub mod host;
pub mod http_filter;
pub(crate) mod network_filter;
pub(crate) mod runtime;
pub(crate) mod tracking;
// Test-only: the one fake Envoy and the shared state's fixture of the unit tests.
#[cfg(test)]
pub(crate) mod testing;
