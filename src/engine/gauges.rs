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
    /// [`Gauge::ActiveRequests`] to the in-flight count every [`GAUGE_PERIOD`], each call
    /// through the threads' gate.
    pub fn start(
        &'static self,
        threads: &'static Threads,
        shared: &'static Shared,
        extension: &'static dyn ExtensionHost,
    ) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let on_panic = move || {
            self.started.store(false, Ordering::Release);
            shared.counters.module_error()
        };
        let spawned = threads.spawn("graceful_drain_gauge", on_panic, move || {
            while threads.sleep(GAUGE_PERIOD) {
                let active = shared.counts().active.max(0) as u64;
                threads.call("active_requests_gauge", || {
                    extension.set_gauge(Gauge::ActiveRequests, active)
                });
            }
        });
        if let Err(e) = spawned {
            self.started.store(false, Ordering::Release);
            log::warn!("graceful_drain: no thread for the active_requests gauge ({e}); it stays 0");
        }
    }
}

impl Default for GaugePublisher {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;
    use std::sync::atomic::{AtomicU64, AtomicUsize};
    use std::time::Instant;

    static SET_TO: AtomicU64 = AtomicU64::new(u64::MAX);
    static SETS: AtomicUsize = AtomicUsize::new(0);

    struct Recorder;
    impl ExtensionHost for Recorder {
        fn to_main_thread(&self, _: u64) {}
        fn arm_timer(&self, _: Duration) {}
        fn count(&self, _: crate::engine::shared::Stat) {}
        fn set_gauge(&self, gauge: Gauge, v: u64) {
            assert_eq!(gauge, Gauge::ActiveRequests);
            SET_TO.store(v, Ordering::SeqCst);
            SETS.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One thread however many configs start it; it follows the table and ends with the module.
    #[test]
    fn one_thread_sets_the_in_flight_count_until_the_module_stops() {
        static P: GaugePublisher = GaugePublisher::new();
        let threads: &'static Threads = Box::leak(Box::new(Threads::default()));
        let shared: &'static Shared = Box::leak(Box::new(fixture(None).shared));
        P.start(threads, shared, &Recorder);
        P.start(threads, shared, &Recorder);
        let (t, _) = shared.request_started(None);
        wait("the gauge shows the request", || {
            SET_TO.load(Ordering::SeqCst) == 1
        });
        shared.request_ended(t);
        wait("the gauge shows it ended", || {
            SET_TO.load(Ordering::SeqCst) == 0
        });
        let stopped = threads.join(Duration::from_secs(5));
        assert!(
            stopped.left.is_empty() && stopped.joined == 1,
            "{stopped:?}"
        );
        let sets = SETS.load(Ordering::SeqCst);
        std::thread::sleep(GAUGE_PERIOD * 2);
        assert_eq!(SETS.load(Ordering::SeqCst), sets, "a set after the stop");
    }
}
