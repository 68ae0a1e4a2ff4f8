//! What the module reads of Envoy itself, beside the requests it follows: Envoy's stats, read on
//! a thread of the module's own ([`scan`]) and Envoy's admin interface ([`admin`]) (which Envoy
//! release is running is [`crate::host::envoy_release`], beside the ABI seam it serves). Uses the configuration, the request table's counts
//! ([`crate::counting`]) and the runtime; knows nothing of the drain above it.

pub mod admin;
pub mod scan;
