//! graceful-drain: an Envoy dynamic module (Envoy 1.38 to 1.40) that drains a gateway on shutdown
//! without failing a request.
//!
//! Layers, from the Envoy boundary inwards:
//! - [`ffi`]: the only unsafe code. Raw ABI declarations, exported hooks, panic guard, buffers.
//! - [`http_filter`]: per-request glue (data and control roles), written against a small host trait.
//! - [`bootstrap`]: the process-wide drain engine: SIGTERM hold, admin endpoints, the drain clock.
//! - [`state`]: the drain state shared by every worker and the main thread, split by owner.
//! - [`registry`]: lock-free per-worker table of in-flight requests (counts, wakers, start times);
//!   its drain protocol is model-checked with loom.
//! - [`clock`]: time as a trait, so every layer above is unit-tested on a fake clock.
//! - [`stats_scan`]: Envoy's own request stats, read on the module's thread at a bounded cost.
//! - [`connections`]: downstream connections seen by the network filter; tells idle ones at drain start.
//! - [`drain`]: the pure drain state machine; time is passed in.
//! - [`config`]: configuration parsing and validation with messages that name the field.
//! - [`admin`]: the drain start's calls to Envoy's admin, on a thread of the module's own.
//! - [`control`]: routing and bodies of the control endpoints (pure).
//! - [`threads`]: the one owner of every thread the module starts, and the gate every call they
//!   make into Envoy passes (closed before Envoy's exit is released).
//!
//! Only [`ffi`] is unsafe and only it calls Envoy; nothing else names it, and the modules import
//! each other without a cycle (`tests/architecture.rs`). The facts about Envoy the code relies
//! on are in `src/ffi/ENVOY_FACTS.md`, with their evidence.
#![deny(unsafe_code)]

pub mod admin;
pub mod bootstrap;
pub mod clock;
pub mod config;
pub mod connections;
pub mod control;
pub mod drain;
#[cfg(feature = "panic-test")]
pub mod faults;
pub mod ffi;
pub mod http_filter;
pub mod registry;
pub mod state;
pub mod stats_scan;
mod sync;
pub mod threads;
