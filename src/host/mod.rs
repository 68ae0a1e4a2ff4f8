//! How the module reaches Envoy: one host trait per Envoy object, written in Envoy's terms and
//! nothing else. The policy code ([`crate::http_filter`], [`crate::network_filter`],
//! [`crate::extension`], [`crate::engine::shared`]) is written against these traits; the FFI seam
//! implements them over Envoy's callbacks, and the unit tests implement them with fakes. May use:
//! nothing of the crate but plain types (a host trait never names the state it serves, so every
//! layer can use it).
//!
//! - [`stream`]: an HTTP stream inside one of its filter's hooks, and its waker (scheduler);
//! - [`connection`]: the downstream connection the network filter sits on, inside its hooks;
//! - [`extension`]: the bootstrap extension (its timer, the hop to the main thread, the module's
//!   stats) and the stats store behind it.
//!
//! Cost: the request path calls a host through a generic (static dispatch); what the shared state
//! keeps is a `&'static dyn` host, one indirect call as the fn pointers it replaced.

pub mod connection;
pub mod envoy_release;
pub mod extension;
pub mod stream;
