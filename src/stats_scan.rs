//! Envoy's own request stats, read on a thread of the module's own, never on Envoy's main thread,
//! at a bounded cost whatever the size of the configuration. Pure Rust: the scan itself is a
//! [`ScanSource`] (Envoy's stats callbacks in the FFI layer, a fake in the tests).
//!
//! Why a thread: Envoy's ABI has no cheap read of one stat. `iterate_gauges`/`iterate_counters`
//! and `get_*_value` (by name) all walk the whole stats store (about 100 stats per cluster: a scan
//! costs ~1 s at 5 000 clusters), and a gateway without the filter on its listeners (bootstrap-only
//! mode) has no other signal. On the main thread those scans starve xDS, the admin and health-check
//! bookkeeping; here they do not. Envoy's stats store is built to be read from any thread: the
//! iteration holds the stats allocator's mutex, the lock every worker takes to create a stat, and
//! the stats themselves are atomics.
//!
//! Pacing: each scan is timed and the next waits until scans take at most [`SCAN_SHARE_PERCENT`]
//! of one CPU ([`BUSY_SCAN_SHARE_PERCENT`] while requests without the filter are seen), at most
//! every [`IN_FLIGHT_RECHECK`] (small gateways), and one scan is timed to end when the drain could
//! first complete. A scan keeps only what Envoy sees *beyond* the module's own exact counts, so
//! with the filter on every listener the engine follows the filter's live count between scans and
//! a drain completes the moment its last request ends, however old the scan.

use crate::bootstrap::EnvoyRequestStats;
use crate::drain::IN_FLIGHT_RECHECK;
use crate::registry::Counts;
use crate::state::EnvoyReading;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The share of one CPU the scans may take while a drain is under way, in percent.
pub const SCAN_SHARE_PERCENT: u32 = 3;
/// The share allowed while the last scan saw requests on listeners without the filter: only a
/// scan can tell when they end (or that new ones stopped arriving).
pub const BUSY_SCAN_SHARE_PERCENT: u32 = 20;
/// How often an idle scanner re-checks whether a drain needs it (it is also woken at once).
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// Where scans come from. Called on the scanner thread, except `own_counts` (any thread).
pub trait ScanSource: Send + Sync + 'static {
    /// One pass over Envoy's stats store; `None` once it can no longer be read (Envoy is tearing
    /// the extension down): the scanner then stops.
    fn scan(&self) -> Option<EnvoyRequestStats>;
    /// The module's own exact counts, read just before and just after each scan.
    fn own_counts(&self) -> Counts;
    /// Whether a drain is under way (scans are wanted only then).
    fn draining(&self) -> bool;
    /// A scan finished: wake the engine so it sees the result now, not at its next timer.
    fn scanned(&self);
}

/// What the drain gets from the scans: `Unused` while the filter counts every request that
/// matters (filter mode, before the first scan of a large configuration) or with no drain;
/// `Pending` while needed but not seen yet (bootstrap-only mode, first scan under way: hold the
/// drain); `Seen`: Envoy's figures beyond the module's own, plus the module's live count.
pub type EnvoyView = EnvoyReading<EnvoyRequestStats>;

/// What the pacing needs to know about the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainTiming {
    pub started: Instant,
    /// The earliest instant at which the drain may complete (minimum duration, quiet period).
    pub earliest_completion: Instant,
    /// A data-role HTTP filter is loaded (filter mode).
    pub filter_loaded: bool,
}

/// The last scan's result and when the next one is due.
#[derive(Debug, Default)]
pub struct EnvoyStatsCache {
    /// Excess in flight and excess started at the last scan; `None` before the first one.
    excess: Option<(u64, u64)>,
    next_scan_at: Option<Instant>,
    /// Cost of the scan taken when the server finished starting.
    calibration: Option<Duration>,
    /// The dearest scan of this drain.
    max_cost: Duration,
}

impl EnvoyStatsCache {
    /// When the next scan is due. With the filter loaded, the first scan of a drain waits for its
    /// share, measured on the calibration scan, so a large filter-mode gateway pays nothing at
    /// drain start.
    pub fn due_at(&mut self, d: DrainTiming) -> Instant {
        *self
            .next_scan_at
            .get_or_insert_with(|| match self.calibration {
                Some(c) if d.filter_loaded => {
                    let wait = scan_interval(c, SCAN_SHARE_PERCENT);
                    if wait > IN_FLIGHT_RECHECK {
                        d.started + wait
                    } else {
                        d.started
                    }
                }
                _ => d.started,
            })
    }

    /// Record a scan: Envoy's figures, the module's own counts read just before and just after it,
    /// when it ended and what it cost. Returns the interval until the next scan.
    pub fn record(
        &mut self,
        envoy: EnvoyRequestStats,
        own_before: Counts,
        own_after: Counts,
        ended: Instant,
        cost: Duration,
        d: DrainTiming,
    ) -> Duration {
        // A filtered request that started or ended during the scan is in one of the two readings:
        // subtract the larger, so it is not taken for a request on a listener without the filter.
        let own_active = own_before.active.max(own_after.active).max(0) as u64;
        let excess_active = envoy.active.saturating_sub(own_active);
        // Envoy counts a request before the filter sees it: the later reading is the closer one.
        let excess_total = envoy.total.wrapping_sub(own_after.started);
        let busy = excess_active > 0 || self.excess.is_some_and(|(_, t)| t != excess_total);
        self.excess = Some((excess_active, excess_total));
        let share = if busy || !d.filter_loaded {
            BUSY_SCAN_SHARE_PERCENT
        } else {
            SCAN_SHARE_PERCENT
        };
        let mut next = ended + scan_interval(cost, share);
        // Without the filter, a fresh scan matters most when the drain could first complete: time
        // one to end then. Scan costs vary (a scan waits for Envoy's own stats flush, which holds
        // the same lock), and a scan that ends late makes the exit late by as much: plan with the
        // dearest scan of this drain and a quarter of it to spare, and if that start has passed
        // while the drain cannot complete yet, scan again at once (a scan that ended too early is
        // followed by one that ends at or just after the earliest completion, never by a wait of
        // the busy share's interval).
        self.max_cost = self.max_cost.max(cost);
        if (busy || !d.filter_loaded) && ended < d.earliest_completion {
            let plan = self.max_cost + self.max_cost / 4;
            let start = d.earliest_completion.checked_sub(plan).unwrap_or(ended);
            next = next.min(start.max(ended + IN_FLIGHT_RECHECK));
        }
        self.next_scan_at = Some(next);
        next - ended
    }

    /// What the engine sees between scans.
    pub fn view(&self, own_now: Counts) -> Option<EnvoyRequestStats> {
        let (excess_active, excess_total) = self.excess?;
        Some(EnvoyRequestStats {
            active: (own_now.active.max(0) as u64).saturating_add(excess_active),
            total: excess_total,
        })
    }
}

/// Time between the end of a scan that cost `cost` and the start of the next, so that scans take
/// at most `share` percent of a CPU.
pub fn scan_interval(cost: Duration, share: u32) -> Duration {
    let share = share.clamp(1, 100);
    IN_FLIGHT_RECHECK.max(cost * (100 - share) / share)
}

#[derive(Default)]
struct State {
    cache: EnvoyStatsCache,
    /// Set by the engine when it first asks during a drain.
    timing: Option<DrainTiming>,
    stop: bool,
    /// The thread has ended (stopped, or the store became unreadable).
    ended: bool,
}

struct Inner {
    state: Mutex<State>,
    wake: Condvar,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The scanner thread and the engine's window on its results.
pub struct Scanner {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scanner {
    /// Start the thread. Its first scan measures what a scan costs on this configuration (the
    /// pacing of filter-mode drains needs it before the drain starts).
    pub fn start(source: impl ScanSource) -> std::io::Result<Scanner> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let for_thread = inner.clone();
        let thread = std::thread::Builder::new()
            .name("graceful_stats".into())
            .spawn(move || {
                run(&for_thread, &source);
                lock(&for_thread.state).ended = true;
            })?;
        Ok(Scanner {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The engine's question, during a drain: what do Envoy's stats say now? Never blocks on a
    /// scan (the state lock is held only to copy figures).
    pub fn view(&self, d: DrainTiming, own_now: Counts) -> EnvoyView {
        let mut st = lock(&self.inner.state);
        if st.timing.is_none() {
            st.timing = Some(d);
            self.inner.wake.notify_all();
        }
        match st.cache.view(own_now) {
            Some(v) => EnvoyView::Seen(v),
            None if d.filter_loaded => EnvoyView::Unused,
            // The store can no longer be read: nothing will come; the filter's counts are all
            // there is (Envoy is tearing down anyway).
            None if st.ended => EnvoyView::Unused,
            None => EnvoyView::Pending,
        }
    }

    /// The calibration scan's cost, once taken.
    pub fn calibration(&self) -> Option<Duration> {
        lock(&self.inner.state).cache.calibration
    }

    /// Stop the thread and wait for it (at most the scan under way).
    pub fn stop(&self) {
        {
            let mut st = lock(&self.inner.state);
            st.stop = true;
            self.inner.wake.notify_all();
        }
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One scan, timed, with the module's counts around it: (figures, before, after, ended, cost).
fn timed_scan(
    source: &dyn ScanSource,
) -> Option<(EnvoyRequestStats, Counts, Counts, Instant, Duration)> {
    let before = source.own_counts();
    let start = Instant::now();
    let envoy = source.scan()?;
    let ended = Instant::now();
    let after = source.own_counts();
    Some((envoy, before, after, ended, ended - start))
}

fn run(inner: &Inner, source: &dyn ScanSource) {
    let Some((_, _, _, _, cost)) = timed_scan(source) else {
        return;
    };
    lock(&inner.state).cache.calibration = Some(cost);
    let interval = scan_interval(cost, SCAN_SHARE_PERCENT);
    if interval > IN_FLIGHT_RECHECK {
        log::info!(
            "graceful_drain: a scan of Envoy's stats takes {} ms on this configuration: while \
             draining, Envoy's request stats are read every {} ms on the module's own thread (at \
             most {SCAN_SHARE_PERCENT}% of a CPU; {BUSY_SCAN_SHARE_PERCENT}% while requests without \
             the filter are seen); with the filter on every listener the drain does not depend on \
             them",
            cost.as_millis(),
            interval.as_millis()
        );
    }
    let mut st = lock(&inner.state);
    loop {
        if st.stop {
            return;
        }
        let Some(d) = st.timing.filter(|_| source.draining()) else {
            st = inner
                .wake
                .wait_timeout(st, IDLE_RECHECK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        };
        let now = Instant::now();
        let at = st.cache.due_at(d);
        if now < at {
            st = inner
                .wake
                .wait_timeout(st, at - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        drop(st);
        let Some((envoy, before, after, ended, cost)) = timed_scan(source) else {
            return;
        };
        lock(&inner.state)
            .cache
            .record(envoy, before, after, ended, cost, d);
        source.scanned();
        st = lock(&inner.state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    const MS: Duration = Duration::from_millis(1);

    fn counts(active: i64, started: u64) -> Counts {
        Counts {
            active,
            last_start: 0,
            started,
        }
    }

    fn timing(t0: Instant, filter_loaded: bool) -> DrainTiming {
        DrainTiming {
            started: t0,
            earliest_completion: t0 + 5000 * MS,
            filter_loaded,
        }
    }

    fn envoy(active: u64, total: u64) -> EnvoyRequestStats {
        EnvoyRequestStats { active, total }
    }

    #[test]
    fn scans_take_a_bounded_share_of_a_cpu() {
        assert_eq!(
            scan_interval(Duration::from_micros(50), 3),
            IN_FLIGHT_RECHECK
        );
        assert_eq!(
            scan_interval(1000 * MS, 3),
            32_333 * MS + Duration::from_nanos(333_333)
        );
        assert_eq!(scan_interval(1000 * MS, 20), 4000 * MS);
        for cost_ms in [1u32, 10, 100, 1000, 5000] {
            let cost = cost_ms * MS;
            let share = cost.as_secs_f64() / (cost + scan_interval(cost, 3)).as_secs_f64();
            assert!(share <= 0.0301, "{cost_ms} ms: {share}");
        }
    }

    #[test]
    fn filtered_requests_are_not_excess_and_the_view_follows_the_live_count() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        assert_eq!(
            c.due_at(d),
            t0,
            "small configuration: first scan at drain start"
        );
        assert_eq!(c.view(counts(1, 10)), None, "nothing before the first scan");
        // Envoy sees the module's one request, plus 2 requests counted before the filter loaded.
        let cheap = Duration::from_micros(100);
        c.record(
            envoy(1, 12),
            counts(1, 10),
            counts(1, 10),
            t0 + MS,
            cheap,
            d,
        );
        assert_eq!(c.view(counts(1, 10)), Some(envoy(1, 2)));
        // The filtered request ends: the view drops at once, without a scan.
        assert_eq!(c.view(counts(0, 10)), Some(envoy(0, 2)));
        assert_eq!(c.due_at(d), t0 + MS + IN_FLIGHT_RECHECK);
    }

    #[test]
    fn a_request_starting_or_ending_during_the_scan_is_not_taken_for_an_unfiltered_one() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        // Ended during the scan after Envoy's gauge was read: Envoy 1, own 1 then 0.
        c.record(envoy(1, 5), counts(1, 5), counts(0, 5), t0, MS, d);
        assert_eq!(c.view(counts(0, 5)), Some(envoy(0, 0)));
        // Started during the scan: Envoy 1, own 0 then 1.
        c.record(envoy(1, 6), counts(0, 5), counts(1, 6), t0, MS, d);
        assert_eq!(c.view(counts(1, 6)), Some(envoy(1, 0)));
    }

    #[test]
    fn unfiltered_requests_hold_the_view_until_a_scan_sees_them_end() {
        let t0 = Instant::now();
        let d = timing(t0, false);
        let mut c = EnvoyStatsCache::default();
        let cost = 1000 * MS;
        // Bootstrap-only: Envoy sees 2 requests, the module none.
        let next = c.record(envoy(2, 7), counts(0, 0), counts(0, 0), t0 + cost, cost, d);
        assert_eq!(c.view(counts(0, 0)), Some(envoy(2, 7)));
        // Busy: the next scan is timed to end when the drain could first complete (5 s), planned
        // with the dearest scan so far and a quarter of it to spare.
        assert_eq!(next, 2750 * MS);
        assert_eq!(c.due_at(d), t0 + 3750 * MS);
        // A dearer scan seen before plans the later ones.
        let mut c2 = EnvoyStatsCache {
            max_cost: 2000 * MS,
            ..EnvoyStatsCache::default()
        };
        c2.record(envoy(2, 7), counts(0, 0), counts(0, 0), t0 + cost, cost, d);
        assert_eq!(c2.due_at(d), t0 + 2500 * MS);
        // The planned start has passed and the drain cannot complete yet: again at once, not
        // after the busy share's interval (4 s here).
        let mut c3 = EnvoyStatsCache::default();
        let late = t0 + 4000 * MS;
        c3.record(envoy(1, 7), counts(0, 0), counts(0, 0), late, 2000 * MS, d);
        assert_eq!(c3.due_at(d), late + IN_FLIGHT_RECHECK);
        // Past the earliest completion, still busy: the busy share again.
        let after = t0 + 6000 * MS;
        c3.record(envoy(1, 7), counts(0, 0), counts(0, 0), after, 1000 * MS, d);
        assert_eq!(c3.due_at(d), after + 4000 * MS);
        c.record(
            envoy(0, 7),
            counts(0, 0),
            counts(0, 0),
            t0 + 5000 * MS,
            cost,
            d,
        );
        assert_eq!(c.view(counts(0, 0)), Some(envoy(0, 7)));
    }

    #[test]
    fn with_the_filter_a_large_configuration_is_first_scanned_after_its_share() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let calibrated = |c: Duration| EnvoyStatsCache {
            calibration: Some(c),
            ..EnvoyStatsCache::default()
        };
        let wait = scan_interval(400 * MS, SCAN_SHARE_PERCENT);
        assert_eq!(calibrated(400 * MS).due_at(d), t0 + wait);
        // Without the filter the stats are the only signal: scanned at drain start.
        assert_eq!(calibrated(400 * MS).due_at(timing(t0, false)), t0);
        // With the filter and a cheap scan, as before: at drain start.
        assert_eq!(calibrated(Duration::from_micros(100)).due_at(d), t0);
    }

    #[test]
    fn new_requests_without_the_filter_move_the_total_the_engine_watches() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        c.record(envoy(0, 100), counts(0, 100), counts(0, 100), t0, MS, d);
        let first = c.view(counts(0, 100)).unwrap().total;
        // 5 filtered requests since: the excess total does not move.
        c.record(envoy(0, 105), counts(0, 105), counts(0, 105), t0, MS, d);
        assert_eq!(c.view(counts(0, 105)).unwrap().total, first);
        // 1 unfiltered one: it moves, and the scans get the busy share.
        let next = c.record(envoy(0, 106), counts(0, 105), counts(0, 105), t0, MS, d);
        assert_ne!(c.view(counts(0, 105)).unwrap().total, first);
        assert_eq!(next, IN_FLIGHT_RECHECK);
    }

    /// A stats store whose figures the test sets; counts scans and which thread ran them.
    #[derive(Default)]
    struct FakeStore {
        active: AtomicU64,
        scans: AtomicUsize,
        scanned_off_caller: AtomicBool,
        draining: AtomicBool,
        readable: AtomicBool,
        wakeups: AtomicUsize,
        caller: Mutex<Option<std::thread::ThreadId>>,
    }

    struct Source(Arc<FakeStore>);

    impl ScanSource for Source {
        fn scan(&self) -> Option<EnvoyRequestStats> {
            let s = &self.0;
            if !s.readable.load(Ordering::SeqCst) {
                return None;
            }
            if *s.caller.lock().unwrap() != Some(std::thread::current().id()) {
                s.scanned_off_caller.store(true, Ordering::SeqCst);
            }
            s.scans.fetch_add(1, Ordering::SeqCst);
            Some(envoy(s.active.load(Ordering::SeqCst), 0))
        }
        fn own_counts(&self) -> Counts {
            counts(0, 0)
        }
        fn draining(&self) -> bool {
            self.0.draining.load(Ordering::SeqCst)
        }
        fn scanned(&self) {
            self.0.wakeups.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn store() -> Arc<FakeStore> {
        let s = Arc::new(FakeStore::default());
        s.readable.store(true, Ordering::SeqCst);
        *s.caller.lock().unwrap() = Some(std::thread::current().id());
        s
    }

    /// Poll `cond` for up to 5 s (the scanner runs on its own thread).
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_scanner_calibrates_then_scans_only_during_a_drain_on_its_own_thread() {
        let s = store();
        let scanner = Scanner::start(Source(s.clone())).unwrap();
        eventually("the calibration scan", || scanner.calibration().is_some());
        assert_eq!(s.scans.load(Ordering::SeqCst), 1);
        assert!(s.scanned_off_caller.load(Ordering::SeqCst));
        // A drain in bootstrap-only mode: the engine holds until the first drain scan is in.
        s.active.store(3, Ordering::SeqCst);
        s.draining.store(true, Ordering::SeqCst);
        let d = timing(Instant::now(), false);
        let first = scanner.view(d, counts(0, 0));
        assert!(
            matches!(first, EnvoyView::Pending | EnvoyView::Seen(_)),
            "{first:?}"
        );
        eventually("a drain scan", || {
            scanner.view(d, counts(0, 0)) == EnvoyView::Seen(envoy(3, 0))
        });
        assert!(s.wakeups.load(Ordering::SeqCst) >= 1, "the engine is woken");
        // The requests end: a later scan shows it.
        s.active.store(0, Ordering::SeqCst);
        eventually("the scan that sees them end", || {
            scanner.view(d, counts(0, 0)) == EnvoyView::Seen(envoy(0, 0))
        });
        // The drain is over: no more scans.
        s.draining.store(false, Ordering::SeqCst);
        let settled = s.scans.load(Ordering::SeqCst);
        std::thread::sleep(4 * IN_FLIGHT_RECHECK);
        assert!(s.scans.load(Ordering::SeqCst) <= settled + 1);
        let t = Instant::now();
        scanner.stop();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "stop does not wait out the idle recheck"
        );
    }

    #[test]
    fn in_filter_mode_nothing_is_pending() {
        let s = store();
        let scanner = Scanner::start(Source(s.clone())).unwrap();
        eventually("the calibration scan", || scanner.calibration().is_some());
        let d = timing(Instant::now() + Duration::from_secs(3600), true);
        s.draining.store(true, Ordering::SeqCst);
        assert_eq!(scanner.view(d, counts(1, 1)), EnvoyView::Unused);
    }

    #[test]
    fn an_unreadable_store_ends_the_thread_and_releases_the_hold() {
        let s = store();
        s.readable.store(false, Ordering::SeqCst);
        let scanner = Scanner::start(Source(s.clone())).unwrap();
        s.draining.store(true, Ordering::SeqCst);
        let d = timing(Instant::now(), false);
        eventually("the thread to end", || {
            scanner.view(d, counts(0, 0)) == EnvoyView::Unused
        });
        assert_eq!(s.scans.load(Ordering::SeqCst), 0);
    }
}
