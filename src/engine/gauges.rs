//! The `active_requests` gauge, set from the in-flight table by a module thread every
//! [`GAUGE_PERIOD`] rather than moved by each request: two calls into Envoy per request saved
//! (about 80 instructions). The gauge is the bootstrap extension's (`crate::engine::shared::Gauge`), so one
//! thread serves every listener.

use crate::engine::shared::{Gauge, Shared};
use crate::host::extension::ExtensionHost;
use crate::runtime::threads::Threads;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the gauge is set. Envoy flushes stats to sinks every 5 s by default; the status
/// endpoint's `active_requests` is always exact.
pub const GAUGE_PERIOD: Duration = Duration::from_millis(500);

/// The thread that sets the gauge, started by the first config that counts requests (a data-role
/// HTTP filter, a tracking network filter); without one the table stays empty and the gauge 0.
pub struct GaugePublisher {
    started: AtomicBool,
}

impl GaugePublisher {
    pub const fn new() -> Self {
        GaugePublisher {
            started: AtomicBool::new(false),
        }
    }

    /// Start the thread unless it runs: until the module stops, it sets the extension's
    /// [`Gauge::ActiveRequests`] to the in-flight count every [`GAUGE_PERIOD`], and counts the
    /// panics the module's threads contained since ([`Threads::take_panics`]) into
    /// `module_errors`, each call through the threads' gate.
    pub fn start(
        &'static self,
        threads: &'static Threads,
        shared: &'static Shared,
        extension: &'static dyn ExtensionHost,
    ) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = threads.spawn("graceful_drain_gauge", move || {
            // A panic ends the thread (`Threads` contains and counts it): a later start may
            // start it again.
            let _restart = RestartAfterPanic(&self.started);
            while threads.sleep(GAUGE_PERIOD) {
                let active = shared.counts().active.max(0) as u64;
                // Panics the module's threads contained, into `module_errors` within a period
                // (the extension also counts them at each evaluation: whichever comes first
                // takes them, once).
                let panics = threads.take_panics();
                threads.call("active_requests_gauge", || {
                    extension.set_gauge(Gauge::ActiveRequests, active);
                    for _ in 0..panics {
                        shared.module_error(extension);
                    }
                });
            }
        });
        if let Err(e) = spawned {
            self.started.store(false, Ordering::Release);
            log::warn!("graceful_drain: no thread for the active_requests gauge ({e}); it stays 0");
        }
    }
}

/// Clears the publisher's `started` flag when its thread unwinds from a panic.
struct RestartAfterPanic<'a>(&'a AtomicBool);

impl Drop for RestartAfterPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(false, Ordering::Release);
        }
    }
}

impl Default for GaugePublisher {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
