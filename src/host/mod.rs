//! One host trait per Envoy object the module works with, written against by the policy code
//! and faked in its tests; `crate::ffi` implements each over Envoy's callbacks. Traits only: no
//! state, no policy.

pub mod connection;
