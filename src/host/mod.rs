//! How the module reaches Envoy: one host trait per Envoy object, written in Envoy's terms and
//! nothing else. The policy code ([`crate::http_filter`], [`crate::network_filter`],
//! [`crate::extension`], [`crate::engine::shared`]) is written against these traits; the FFI seam
//! implements them over Envoy's callbacks, and the unit tests implement them with fakes. May use:
//! nothing of the crate but plain types (a host trait never names the state it serves, so every
//! layer can use it).
//!
//! - [`admin`]: Envoy's admin interface (its HTTP calls, outside the ABI);
//! - [`stream`]: an HTTP stream inside one of its filter's hooks, and its waker (scheduler);
//! - [`connection`]: the downstream connection the network filter sits on, inside its hooks;
//! - [`extension`]: the bootstrap extension (its timer, the hop to the main thread, the module's
//!   stats), the completion of its shutdown hook (Envoy's permission to exit, and the
//!   `ShutdownRelease` that gives it exactly once); [`stats`]: Envoy's stats store behind it, as
//!   the scanner reads it; and
//!   [`extension::StatsHost`], the module's own stats, which every host above gives (a hook
//!   counts through its Envoy object's host).
//!
//! Each is passed into the call that needs it, the way Envoy's own Rust SDK hands a filter its
//! `&mut impl EnvoyHttpFilter`: a hook's host is a parameter of the policy code's method; what a
//! drain's start and completion reach on other threads' objects ([`Hosts`]) is a parameter of
//! `Shared::start_drain` and `Shared::poll`; the host its stats move through
//! ([`extension::StatsHost`]) is a parameter of each call that counts, and a module thread that
//! counts is handed its host when spawned. The shared state keeps none.
//!
//! Cost: the request path calls a host through a generic (static dispatch); a drain's start and
//! completion make one indirect call per waker through [`Hosts`].
//!
//! Beside them, [`envoy_release`]: which Envoy hosts the module (its ABI generation and
//! release) and what the module gives there.

pub mod admin;
pub mod connection;
pub mod envoy_release;
pub mod extension;
pub mod stats;
pub mod stream;

/// The Envoy objects a drain's start and its completion reach beyond the caller's own hook: the
/// streams' wakers (every in-flight request's HTTP filter scheduler, any thread) and the
/// bootstrap extension (the engine's kick). Passed into the call, never kept: the engine's host
/// and an HTTP stream's host each give it ([`stream::StreamHost::hosts`]).
#[derive(Clone, Copy)]
pub struct Hosts<'a> {
    pub streams: &'a dyn stream::Wakers,
    pub extension: &'a dyn extension::ExtensionHost,
}
