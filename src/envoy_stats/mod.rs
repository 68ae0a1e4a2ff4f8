//! What the module reads of Envoy itself, beside the requests it follows: Envoy's stats, read on
//! a thread of the module's own ([`scan`]), Envoy's admin interface ([`admin`]) and which Envoy
//! release is running ([`compat`]). Uses the configuration, the request table's counts
//! ([`crate::counting`]) and the runtime; knows nothing of the drain above it.

pub mod admin;
pub mod compat;
pub mod scan;
