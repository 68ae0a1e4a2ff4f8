//! The drain itself: [`drain`], the pure state machine (time passed in, no I/O); [`shared`],
//! [`Shared`](shared::Shared), what every worker and the main thread share (the request table,
//! the connections, counters, the `/drain` waiters, the status report) and the one place a drain
//! starts and completes; [`engine`], the [`Engine`](engine::Engine) on Envoy's main thread that
//! holds the exit and evaluates the drain when kicked; [`gauges`], the thread that publishes the in-flight gauge. May use the
//! layers below (connections, counting, envoy_stats, exchange, config, host, runtime); never
//! the glue or the FFI above it.

pub mod drain;
pub mod gauges;
// Each file is named after the type it holds (`engine::engine::Engine`, `engine::shared::Shared`).
#[allow(clippy::module_inception)]
pub mod engine;
pub mod shared;
