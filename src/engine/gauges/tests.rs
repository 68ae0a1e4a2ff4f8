//! Unit tests of `engine::gauges`.

use super::*;
use crate::testing::fixture;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Instant;

static SET_TO: AtomicU64 = AtomicU64::new(u64::MAX);
static SETS: AtomicUsize = AtomicUsize::new(0);

struct Recorder;
impl crate::host::extension::StatsHost for Recorder {
    fn count(&self, _: crate::engine::shared::Stat) {}
}
impl ExtensionHost for Recorder {
    fn to_main_thread(&self, _: u64) {}
    fn arm_timer(&self, _: Duration) {}
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

static ERRORS: AtomicUsize = AtomicUsize::new(0);

/// Counts `module_errors` only.
struct ErrorRecorder;
impl crate::host::extension::StatsHost for ErrorRecorder {
    fn count(&self, stat: crate::engine::shared::Stat) {
        if stat == crate::engine::shared::Stat::ModuleErrors {
            ERRORS.fetch_add(1, Ordering::SeqCst);
        }
    }
}
impl ExtensionHost for ErrorRecorder {
    fn to_main_thread(&self, _: u64) {}
    fn arm_timer(&self, _: Duration) {}
    fn set_gauge(&self, _: Gauge, _: u64) {}
}

/// A panic contained on another module thread counts in `module_errors` once, from the gauge
/// thread within a period, without any hook on Envoy's main thread.
#[test]
fn a_panic_contained_on_a_module_thread_counts_in_module_errors_within_a_period() {
    static P: GaugePublisher = GaugePublisher::new();
    let threads: &'static Threads = Box::leak(Box::new(Threads::default()));
    let shared: &'static Shared = Box::leak(Box::new(fixture(None).shared));
    P.start(threads, shared, &ErrorRecorder);
    threads
        .spawn("graceful_drain_test_panics", || panic!("a planted panic"))
        .expect("a thread");
    wait("module_errors counts the contained panic", || {
        ERRORS.load(Ordering::SeqCst) == 1
    });
    std::thread::sleep(GAUGE_PERIOD * 2);
    assert_eq!(ERRORS.load(Ordering::SeqCst), 1, "counted more than once");
    let stopped = threads.join(Duration::from_secs(5));
    assert!(stopped.left.is_empty(), "{stopped:?}");
}
