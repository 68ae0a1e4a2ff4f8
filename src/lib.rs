//! graceful-drain: an Envoy dynamic module (Envoy 1.38 to 1.40) that drains a gateway on shutdown
//! without failing a request.
//!
//! Layers, from the Envoy boundary inwards (each owns what it names; no other part touches it):
//! - [`ffi`]: the only unsafe code and the only caller of Envoy. Raw ABI declarations, the
//!   exported hooks (guard, convert, delegate), RAII handles for Envoy's timer and schedulers,
//!   the loan of a hook's object (`ffi::with_object`), the panic guard, buffers and the logger. Owns the process-wide
//!   instances: [`state::Shared`] and [`threads::Threads`].
//! - [`extension`]: the bootstrap extension's life (load, engine hooks, scanner, admin calls,
//!   fallback ticker, teardown), over a host trait the FFI implements.
//! - [`http_filter`]: per-request glue (data and control roles) and the filter's life
//!   (poisoning, deferred destroy, recycling), over a host trait.
//! - [`host`]: one host trait per Envoy object (HTTP stream, connection, bootstrap extension): how the
//!   layers below `ffi` reach Envoy; the FFI implements them, tests fake them.
//! - [`network_filter`]: the network filter's lifecycle, over a host trait.
//! - [`connections`]: downstream connections seen by the network filter; tells idle ones.
//! - [`exchange`]: pure HTTP/1.1 and HTTP/2 framing follower for the network filter.
//! - [`bootstrap`]: the drain engine on Envoy's main thread: SIGTERM hold, admin endpoints.
//! - [`threads`]: owner of every thread the module starts and the gate their calls into Envoy
//!   pass (closed before Envoy's exit is released); [`gauges`] and [`stats_scan`] run on them.
//! - [`state`]: the drain state shared by every worker and the main thread, split by owner.
//! - [`registry`]: lock-free per-worker table of in-flight requests (loom-checked).
//! - [`drain`]: the pure drain state machine; time is passed in ([`clock`]).
//! - [`config`], [`control`], [`admin`], [`compat`]: configuration, control endpoints, calls to
//!   Envoy's admin, the Envoy-version check. Pure or plain std.
//!
//! Only [`ffi`] is unsafe and only it calls Envoy; nothing else names it, and the modules import
//! each other without a cycle (`tests/architecture.rs`). The facts about Envoy the code relies
//! on are in `src/ffi/ENVOY_FACTS.md`, with their evidence.
#![deny(unsafe_code)]

pub mod config;
pub mod connections;
pub mod counting;
pub mod engine;
pub mod envoy_stats;
pub mod exchange;
pub mod extension;
pub mod ffi;
pub mod host;
pub mod http_filter;
pub mod network_filter;
pub mod runtime;
pub mod tracking;
