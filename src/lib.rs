//! graceful-drain: an Envoy 1.40 dynamic module that drains a gateway on shutdown without failing
//! a request.
//!
//! Layers, from the Envoy boundary inwards:
//! - [`ffi`]: the only unsafe code. Raw ABI declarations, exported hooks, panic guard, buffers.
//! - [`http_filter`]: per-request glue (data and control roles), written against a small host trait.
//! - [`bootstrap`]: the process-wide drain engine: SIGTERM hold, admin endpoints, the drain clock.
//! - [`state`]: the drain state shared by every worker and by the main thread (atomics, no FFI).
//! - [`connections`]: downstream connections seen by the network filter; tells idle ones at drain start.
//! - [`registry`]: lock-free table of in-flight requests (their wakers and start times).
//! - [`drain`]: the pure drain state machine; time is passed in.
//! - [`config`]: configuration parsing and validation with messages that name the field.
//! - [`control`]: routing and bodies of the control endpoints (pure).
#![deny(unsafe_code)]

pub mod bootstrap;
pub mod config;
pub mod connections;
pub mod control;
pub mod drain;
pub mod ffi;
pub mod http_filter;
pub mod registry;
pub mod state;
