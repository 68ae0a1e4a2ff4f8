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
//! Pacing: a scan is two passes, the counters (request starts, for the quiet period) then the
//! gauges (requests in flight, what completion waits for), each walking its own kind of stat and
//! timed on its own. Scans take at most [`SCAN_SHARE_PERCENT`] of one CPU
//! ([`BUSY_SCAN_SHARE_PERCENT`] while requests without the filter are seen), at most every
//! [`IN_FLIGHT_RECHECK`] (small gateways); without the filter, the passes are planned so that a
//! gauge pass, after a counter pass, ends when the drain could first complete (see
//! [`EnvoyStatsCache`]'s plan). A scan keeps only what Envoy sees *beyond* the module's own exact
//! counts, so with the filter on every listener the engine follows the filter's live count between
//! scans and a drain completes the moment its last request ends, however old the scan.

use crate::config::DrainSettings;
use crate::drain::IN_FLIGHT_RECHECK;
use crate::registry::Counts;
use crate::state::EnvoyReading;
use crate::threads::Threads;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The share of one CPU the scans may take while a drain is under way, in percent.
pub const SCAN_SHARE_PERCENT: u32 = 3;
/// The share allowed while the last scan saw requests on listeners without the filter: only a
/// scan can tell when they end (or that new ones stopped arriving).
pub const BUSY_SCAN_SHARE_PERCENT: u32 = 20;
/// Said once the server started, when Envoy keeps none of the request stats a scan reads.
pub const HIDDEN_STATS: &str =
    "graceful_drain: Envoy keeps no http.<stat_prefix>.downstream_rq_active \
    or downstream_rq_total stats (a stats_matcher excludes them, e.g. Envoy Gateway's \
    telemetry.metrics.matches), so its own count of requests in flight cannot be read: with \
    graceful_drain's filters (connection or filter mode) a drain goes by their count alone and \
    does not see requests on listeners or routes without them; without them (bootstrap-only \
    mode) every drain holds until drain_timeout. To keep them, add `downstream_rq_active`, \
    `downstream_rq_total` and `health_check.request_total` (suffix matches) or the prefix \
    `http.` to the stats_matcher's inclusion list";
/// How often an idle scanner re-checks whether a drain needs it (it is also woken at once).
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// Which of Envoy's stats a pass reads. Each kind is its own walk over its own stats, at its own
/// cost: at 20 000 clusters the store holds ~480 000 gauges and ~1 600 000 counters, so a gauge
/// pass costs about a quarter of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// `downstream_rq_total` (less what is not work): request starts, for the quiet period.
    Counters,
    /// `downstream_rq_active` (less what is not work): requests in flight, which completion waits
    /// for.
    Gauges,
}

/// Where scans come from. Called on the scanner thread, except `own_counts` (any thread).
pub trait ScanSource: Send + Sync + 'static {
    /// One pass over one kind of Envoy's stats: the sum it is after; `None` once the store can
    /// no longer be read (Envoy is tearing the extension down): the scanner then stops.
    fn scan(&self, pass: Pass) -> Option<u64>;
    /// The module's own exact counts, read just before and just after each pass.
    fn own_counts(&self) -> Counts;
    /// Whether a drain is under way (scans are wanted only then).
    fn draining(&self) -> bool;
    /// Whether the last pass found none of the stats it reads, under any prefix (not even the
    /// admin's): Envoy does not keep them (a `stats_matcher` excludes them), so its figure is
    /// no figure at all, never 0.
    fn last_pass_hidden(&self) -> bool {
        false
    }
    /// A pass finished: wake the engine so it sees the result now, not at its next timer.
    fn scanned(&self);
}

/// What the drain gets from the scans: `Unused` while the filter counts every request that
/// matters (filter mode, before the first scan of a large configuration) or with no drain;
/// `Pending` while needed but not seen yet (bootstrap-only mode, first passes under way: hold the
/// drain); `Seen`: Envoy's figures beyond the module's own, plus the module's live count.
/// Envoy's own request figures over the connection managers that are followed: requests in
/// flight (`downstream_rq_active`) and started so far (`downstream_rq_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvoyRequestStats {
    pub active: u64,
    pub total: u64,
}

pub type EnvoyView = EnvoyReading<EnvoyRequestStats>;

/// What the pacing needs to know about the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainTiming {
    pub started: Instant,
    /// The earliest instant at which the drain may complete (minimum duration, quiet period).
    pub earliest_completion: Instant,
    pub quiet_period: Duration,
    /// The module's own count holds every request it follows (`Shared::count_is_exact`: a
    /// data-role HTTP filter is loaded, or connection mode's tracker lost no connection).
    pub exact_count: bool,
}

impl DrainTiming {
    /// The timing of a drain started at `started` with `settings`.
    pub fn of(started: Instant, settings: DrainSettings, exact_count: bool) -> DrainTiming {
        DrainTiming {
            started,
            earliest_completion: started + settings.min_drain_duration.max(settings.quiet_period),
            quiet_period: settings.quiet_period,
            exact_count,
        }
    }
}

/// One pass, timed, with the module's own counts read just before and just after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassReading {
    pub value: u64,
    /// The pass found none of its stats ([`ScanSource::last_pass_hidden`]): `value` means nothing.
    pub hidden: bool,
    pub own_before: Counts,
    pub own_after: Counts,
    pub started: Instant,
    pub ended: Instant,
}

impl PassReading {
    fn cost(&self) -> Duration {
        self.ended - self.started
    }
}

/// The last passes' results and what to read next, when.
#[derive(Debug, Default)]
pub struct EnvoyStatsCache {
    /// Excess in flight at the last gauge pass, when that pass started, and the requests given
    /// back before it started ([`Counts::given_back_before`]: its reading includes them).
    gauges: Option<(u64, Instant, u64)>,
    /// Excess started at the last counter pass, and when it ended.
    counters: Option<(u64, Instant)>,
    /// Counter passes of this drain.
    counter_passes: u32,
    /// The last counter pass saw the excess total move (requests without the filter starting),
    /// and when the last one that did ended.
    moving: bool,
    moved_at: Option<Instant>,
    next: Option<(Pass, Instant)>,
    /// Costs of the passes taken when the server finished starting (counters, gauges).
    calibration: Option<(Duration, Duration)>,
    /// The last pass of each kind (counters, gauges) found none of the stats it reads: Envoy
    /// does not keep them.
    hidden: [bool; 2],
    /// The dearest pass of each kind (the calibration's included).
    counter_cost: Duration,
    gauge_cost: Duration,
}

impl EnvoyStatsCache {
    /// The next pass and when it is due. Until a gauge pass of this drain is seen, nothing says
    /// that every request Envoy serves passes the filter (a route can disable it, a listener
    /// can lack it), so the drain holds ([`Scanner::view`]).
    ///
    /// Without the filter the first scan starts at the drain start, counters first. With an
    /// exact count of its own (a filter on every connection followed) the module needs Envoy's
    /// figures only to confirm, when the drain may first complete, that Envoy serves nothing
    /// beyond that count: the drain's first pass is a gauge pass timed to end then (the dearest
    /// gauge pass seen and a quarter of it to spare), and counters are read only once Envoy shows
    /// requests beyond the count. At 20 000 clusters that is one 0.2 s pass in a 5 s drain,
    /// where counters then gauges from the drain start (as before) took over half a CPU.
    pub fn due(&mut self, d: DrainTiming) -> (Pass, Instant) {
        let g = self.gauge_cost;
        let first = if d.exact_count {
            let at = d
                .earliest_completion
                .checked_sub(g + g / 4)
                .unwrap_or(d.started);
            (Pass::Gauges, at.max(d.started))
        } else {
            (Pass::Counters, d.started)
        };
        *self.next.get_or_insert(first)
    }

    /// Record the calibration passes' costs (they also plan a drain's first passes).
    /// Whether Envoy's stats lack what the passes read ([`ScanSource::last_pass_hidden`]).
    pub fn hidden(&self) -> bool {
        self.hidden[0] || self.hidden[1]
    }

    pub fn calibrate(&mut self, counters: Duration, gauges: Duration) {
        self.calibration = Some((counters, gauges));
        self.counter_cost = self.counter_cost.max(counters);
        self.gauge_cost = self.gauge_cost.max(gauges);
    }

    /// Record a pass and plan the next one. Returns the next pass and when it is due.
    pub fn record(&mut self, pass: Pass, r: PassReading, d: DrainTiming) -> (Pass, Instant) {
        self.hidden[pass as usize] = r.hidden;
        if self.hidden() {
            // No figure to record, and none will come (a stats matcher is set at start): look
            // again at the quiet share, in case the store changes (a hot restart's new one).
            let next = (
                Pass::Counters,
                r.ended + scan_interval(self.counter_cost + self.gauge_cost, SCAN_SHARE_PERCENT),
            );
            self.next = Some(next);
            return next;
        }
        match pass {
            Pass::Counters => {
                // Envoy counts a request before the filter sees it: the later reading is the
                // closer one.
                let excess = r.value.wrapping_sub(r.own_after.started);
                self.moving = self.counters.is_some_and(|(t, _)| t != excess);
                if self.moving {
                    self.moved_at = Some(r.ended);
                }
                self.counters = Some((excess, r.ended));
                self.counter_passes += 1;
                self.counter_cost = self.counter_cost.max(r.cost());
            }
            Pass::Gauges => {
                self.gauges = Some((
                    r.value
                        .saturating_sub(in_flight_through(r.own_before, r.own_after)),
                    r.started,
                    r.own_before.given_back_before,
                ));
                self.gauge_cost = self.gauge_cost.max(r.cost());
            }
        }
        let next = self.plan(pass, r.ended, d);
        self.next = Some(next);
        next
    }

    /// What to read next after a pass that ended at `now`.
    ///
    /// Without the filter, or while requests without it are seen, the passes are planned around
    /// the earliest moment the known figures let the drain complete (the target: the drain's
    /// earliest completion, or the quiet period after the last start seen). What decides it is a
    /// gauge pass, so the last pass before it is a gauge pass timed to end then, after a counter
    /// pass timed to end before it starts (read last, the gauges see in flight any request the
    /// counters saw start). The counters are read at the drain start and once more before that
    /// gauge pass, unless two counter passes already showed no start. A pass that ends before the
    /// target does not make another one follow at once: reading more before the target cannot
    /// change the outcome. Rounds (a counter pass, then a gauge pass) before the final passes run
    /// at the busy share only when they end before those begin (a cheap store), or while
    /// requests are seen starting (each start moves the target).
    /// After the target (requests still in flight), and with the filter while nothing is seen,
    /// rounds follow at their share of a CPU; their counter pass only while starts are seen or
    /// when due at its own share: only the gauges can show the last request end.
    fn plan(&self, pass: Pass, now: Instant, d: DrainTiming) -> (Pass, Instant) {
        let busy = self.gauges.is_none_or(|(a, _, _)| a > 0) || self.moving;
        let share = if busy || !d.exact_count {
            BUSY_SCAN_SHARE_PERCENT
        } else {
            SCAN_SHARE_PERCENT
        };
        let (c, g) = (self.counter_cost, self.gauge_cost);
        let target = self.target(d);
        // Pass costs vary (a pass waits for Envoy's own stats flush, which holds the same lock, and
        // for other threads' CPU: 1.4 s then 2.1 s for the same counters in one drain), and a late
        // pass makes the exit late by as much: the gauge pass is planned with the dearest seen and
        // a quarter of it to spare, the counter pass with twice the dearest. One that ends early
        // is not followed by another before the target.
        let g_at = target.checked_sub(g + g / 4).unwrap_or(now);
        let c_at = g_at.checked_sub(2 * c).unwrap_or(now);
        let planned = (busy || !d.exact_count) && now < target;
        if pass == Pass::Counters {
            if !planned || now + g <= c_at {
                return (Pass::Gauges, now);
            }
            if self.counter_passes < 2 {
                // The drain's first counter pass, with no time for a gauge pass before the
                // counter pass that comes before the final gauge pass: that one first.
                return (Pass::Counters, c_at.max(now));
            }
            return (Pass::Gauges, g_at.max(now));
        }
        let round = c + g;
        let next_round = now + scan_interval(round, share);
        if planned && now < g_at {
            let counters_needed = self.counter_passes < 2 || self.moving;
            let final_at = if counters_needed { c_at } else { g_at };
            if next_round + round <= final_at {
                return (Pass::Counters, next_round);
            }
            if counters_needed {
                // Too late for the planned counter pass: at once, or, while starts are seen (each
                // moves the target on), at the busy share.
                let at = if c_at > now || !self.moving {
                    c_at.max(now)
                } else {
                    next_round
                };
                return (Pass::Counters, at);
            }
            return (Pass::Gauges, g_at.max(now));
        }
        // Each kind at its share: the gauges' pacing does not wait for counter passes, which only
        // run with them while starts are seen.
        let paced = if self.moving { c + g } else { g };
        let at = now + scan_interval(paced, share);
        // With an exact count and nothing beyond it, only the gauges confirm (see `due`).
        let counters_due = self.moving
            || ((busy || !d.exact_count)
                && self
                    .counters
                    .is_none_or(|(_, ended)| ended + scan_interval(c, share) <= at));
        (
            if counters_due {
                Pass::Counters
            } else {
                Pass::Gauges
            },
            at,
        )
    }

    /// The earliest completion the known figures allow.
    fn target(&self, d: DrainTiming) -> Instant {
        match self.moved_at {
            Some(m) => d.earliest_completion.max(m + d.quiet_period),
            None => d.earliest_completion,
        }
    }

    /// What the engine sees between passes: nothing until both kinds were read. Only passes of
    /// this drain are recorded here (the thread scans once the engine asked, during a drain; the
    /// calibration passes give costs only), so a view is always made of this drain's scans. A
    /// request the counters saw start counts as in flight until a gauge pass that started after
    /// them says otherwise, so a gauge pass read before it started never declares the drain done.
    /// Requests the module stopped counting while Envoy may still serve them (a connection its
    /// tracker lost: [`crate::registry::Registry::give_back`]) count as in flight until a gauge
    /// pass that started after they were given back was recorded: the last pass subtracted them
    /// as the module's own, so without them here the view would undercount until the next.
    ///
    /// `exact`: the module counts every request it follows ([`DrainTiming::exact_count`]):
    /// the gauges alone then make a view, the counters are read only once they show requests
    /// beyond that count (see [`EnvoyStatsCache::due`]).
    pub fn view(&self, own_now: Counts, exact: bool) -> Option<EnvoyRequestStats> {
        let (mut excess_active, gauges_started, given_back_before) = self.gauges?;
        let excess_total = match self.counters {
            Some((t, _)) => t,
            None if exact => 0,
            None => return None,
        };
        if self.moved_at.is_some_and(|m| gauges_started < m) {
            excess_active = excess_active.max(1);
        }
        let given_back_since = own_now.given_back.saturating_sub(given_back_before);
        Some(EnvoyRequestStats {
            active: (own_now.active.max(0) as u64)
                .saturating_add(excess_active)
                .saturating_add(given_back_since),
            total: excess_total,
        })
    }
}

/// How many of the module's requests were in flight through a whole pass whose readings of the
/// module's counts are `before` and `after`: the ones a gauge pass surely saw in Envoy's
/// `downstream_rq_active`, so the only ones it may take off Envoy's figure as the module's own.
/// The same rule as [`crate::state::NotWork::within`], for the same reason: Envoy takes a
/// request off its gauge before the module hears it end (`src/ffi/ENVOY_FACTS.md` §6), so a
/// request that ended during the pass may be missing from what the walk read while still in
/// `before`; one that started during it may or may not be in it. Neither is taken off: the
/// excess errs on the side that holds the drain (until the next gauge pass), never on the side
/// that completes it with a request only Envoy still counts. Subtracting the larger of the two
/// readings instead took such an ended request for the module's own and could hide a request on
/// a listener without the filter for as long as the walk lasted.
/// Ends are counted as starts less the in-flight figure; a request given back during the pass
/// (its ticket ended, Envoy still serving it) counts as ended, so it is not taken off either.
pub fn in_flight_through(before: Counts, after: Counts) -> u64 {
    let ended = |c: Counts| c.started.wrapping_sub(c.active as u64);
    let ended_during = ended(after).wrapping_sub(ended(before));
    // Ends only grow; a difference that went below zero (readings broken by a double end)
    // takes nothing off.
    if (ended_during as i64) < 0 {
        return 0;
    }
    (before.active.max(0) as u64).saturating_sub(ended_during)
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

/// One pass's sums of `http.<prefix>.<suffix>` stats over the HTTP connection managers whose
/// stat prefix is not ignored, fed the stats one by one as Envoy's iteration visits them.
pub struct StatSums<'a> {
    suffixes: &'static [&'static str],
    ignored: &'a [String],
    sums: [u64; 2],
    /// Stats of the first suffix met, under any prefix.
    seen: u64,
}

impl<'a> StatSums<'a> {
    pub fn new(pass: Pass, ignored: &'a [String]) -> Self {
        StatSums {
            suffixes: match pass {
                Pass::Gauges => &["downstream_rq_active"],
                // Requests answered by Envoy's own health_check filter are not work.
                Pass::Counters => &["downstream_rq_total", "health_check.request_total"],
            },
            ignored,
            sums: [0; 2],
            seen: 0,
        }
    }

    /// Whether the pass met no stat of the kind it sums, under any prefix (ignored ones too):
    /// Envoy keeps none of them.
    pub fn saw_none(&self) -> bool {
        self.seen == 0
    }

    /// One stat: added to its suffix's sum if it is `http.<prefix>.<suffix>` with a prefix not
    /// ignored.
    pub fn add(&mut self, name: &[u8], value: u64) {
        let Some(rest) = name.strip_prefix(b"http.") else {
            return;
        };
        for (i, suffix) in self.suffixes.iter().enumerate() {
            let Some(prefix) = rest
                .strip_suffix(suffix.as_bytes())
                .and_then(|n| n.strip_suffix(b"."))
            else {
                continue;
            };
            if i == 0 {
                self.seen += 1;
            }
            if !self.ignored.iter().any(|i| i.as_bytes() == prefix) {
                self.sums[i] = self.sums[i].saturating_add(value);
            }
        }
    }

    /// The pass's figure (requests in flight, or started less Envoy's health checks), less the
    /// requests the module knows are not work: `(started so far, in flight now)`.
    pub fn total_less(&self, (not_work_started, not_work_active): (u64, u64)) -> u64 {
        if self.suffixes.len() == 1 {
            self.sums[0].saturating_sub(not_work_active)
        } else {
            self.sums[0]
                .saturating_sub(self.sums[1])
                .saturating_sub(not_work_started)
        }
    }
}

/// The scanner thread and the engine's window on its results.
pub struct Scanner {
    inner: Arc<Inner>,
}

impl Scanner {
    /// Start the thread. Its first scan measures what a scan costs on this configuration (the
    /// pacing of filter-mode drains needs it before the drain starts).
    pub fn start(threads: &Threads, source: impl ScanSource) -> std::io::Result<Scanner> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let for_thread = inner.clone();
        threads.spawn(
            "graceful_stats",
            || {},
            move || {
                run(&for_thread, &source);
                lock(&for_thread.state).ended = true;
            },
        )?;
        Ok(Scanner { inner })
    }

    /// The engine's question, during a drain: what do Envoy's stats say now? Never blocks on a
    /// scan (the state lock is held only to copy figures).
    pub fn view(&self, d: DrainTiming, own_now: Counts) -> EnvoyView {
        let mut st = lock(&self.inner.state);
        if st.timing.is_none() {
            st.timing = Some(d);
            self.inner.wake.notify_all();
        }
        if st.cache.hidden() {
            // Envoy keeps none of the request stats (a stats matcher): never read as 0. With an
            // exact count of its own the module goes by it; without one, nothing shows the
            // requests in flight, so the drain holds (drain_timeout bounds it). Said at load.
            return if d.exact_count {
                EnvoyView::Unused
            } else {
                EnvoyView::Pending
            };
        }
        match st.cache.view(own_now, d.exact_count) {
            Some(v) => EnvoyView::Seen(v),
            // The store can no longer be read: nothing will come; the filter's counts are all
            // there is (Envoy is tearing down anyway).
            None if st.ended => EnvoyView::Unused,
            // Not seen yet in this drain, the filter loaded or not: hold (drain_timeout bounds
            // it). A filter on every listener does not mean every request: a route can disable
            // it, and only Envoy's figures show what it does not see.
            None => EnvoyView::Pending,
        }
    }

    /// The calibration passes' costs (counters, gauges), once taken.
    pub fn calibration(&self) -> Option<(Duration, Duration)> {
        lock(&self.inner.state).cache.calibration
    }

    /// Tell the thread to stop (its owner, [`Threads`], joins it).
    pub fn stop(&self) {
        let mut st = lock(&self.inner.state);
        st.stop = true;
        self.inner.wake.notify_all();
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One pass, timed, with the module's counts around it.
fn timed_pass(source: &dyn ScanSource, pass: Pass) -> Option<PassReading> {
    let own_before = source.own_counts();
    let started = Instant::now();
    let value = source.scan(pass)?;
    let ended = Instant::now();
    let own_after = source.own_counts();
    Some(PassReading {
        value,
        hidden: source.last_pass_hidden(),
        own_before,
        own_after,
        started,
        ended,
    })
}

fn run(inner: &Inner, source: &dyn ScanSource) {
    let Some(counters) = timed_pass(source, Pass::Counters) else {
        return;
    };
    let Some(gauges) = timed_pass(source, Pass::Gauges) else {
        return;
    };
    let (c, g) = (counters.cost(), gauges.cost());
    lock(&inner.state).cache.calibrate(c, g);
    if counters.hidden || gauges.hidden {
        log::warn!("{HIDDEN_STATS}");
    }
    let interval = scan_interval(c + g, SCAN_SHARE_PERCENT);
    if interval > IN_FLIGHT_RECHECK {
        log::info!(
            "graceful_drain: a scan of Envoy's stats takes {} ms on this configuration ({} ms for \
             the gauges): while draining, Envoy's request stats are read on the module's own \
             thread, every {} ms with the filter on every listener (at most \
             {SCAN_SHARE_PERCENT}% of a CPU; the drain does not depend on them), else around the \
             moment the drain may first complete, and at up to {BUSY_SCAN_SHARE_PERCENT}% of a \
             CPU while requests without the filter are seen",
            (c + g).as_millis(),
            g.as_millis(),
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
        let (pass, at) = st.cache.due(d);
        if now < at {
            st = inner
                .wake
                .wait_timeout(st, at - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        drop(st);
        let Some(reading) = timed_pass(source, pass) else {
            return;
        };
        lock(&inner.state).cache.record(pass, reading, d);
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
            ..Counts::default()
        }
    }

    fn timing(t0: Instant, exact_count: bool) -> DrainTiming {
        DrainTiming {
            started: t0,
            earliest_completion: t0 + 5000 * MS,
            quiet_period: 1000 * MS,
            exact_count,
        }
    }

    fn envoy(active: u64, total: u64) -> EnvoyRequestStats {
        EnvoyRequestStats { active, total }
    }

    /// A pass from `from` to `to` ms after `t0`, the module's counts the same before and after.
    fn reading(value: u64, own: Counts, t0: Instant, from: u32, to: u32) -> PassReading {
        PassReading {
            value,
            hidden: false,
            own_before: own,
            own_after: own,
            started: t0 + from * MS,
            ended: t0 + to * MS,
        }
    }

    /// Ms after `t0` of a planned pass.
    fn at(t0: Instant, next: (Pass, Instant)) -> (Pass, u128) {
        (next.0, (next.1 - t0).as_millis())
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
            c.due(d),
            (Pass::Gauges, d.earliest_completion),
            "an exact count: one gauge pass, ending when the drain may first complete"
        );
        assert_eq!(
            c.view(counts(1, 10), d.exact_count),
            None,
            "nothing before the first scan"
        );
        // Envoy sees the module's one request, nothing beyond it.
        let next = c.record(Pass::Gauges, reading(1, counts(1, 10), t0, 5000, 5000), d);
        assert_eq!(c.view(counts(1, 10), d.exact_count), Some(envoy(1, 0)));
        // The filtered request ends: the view drops at once, without a scan.
        assert_eq!(c.view(counts(0, 10), d.exact_count), Some(envoy(0, 0)));
        assert_eq!(
            at(t0, next),
            (Pass::Gauges, (5000 * MS + IN_FLIGHT_RECHECK).as_millis()),
            "nothing beyond the count: gauges only, at their share"
        );
        // Without an exact count the counters are needed for a view.
        assert_eq!(c.view(counts(0, 10), false), None);
    }

    /// An exact count's confirming pass finds requests beyond it (a route without the filter):
    /// from then on the counters are read too, as without the filter.
    #[test]
    fn with_an_exact_count_requests_beyond_it_bring_the_counters_back() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        c.calibrate(400 * MS, 100 * MS);
        assert_eq!(at(t0, c.due(d)), (Pass::Gauges, 4875));
        let next = c.record(Pass::Gauges, reading(2, counts(1, 3), t0, 4875, 4975), d);
        assert_eq!(c.view(counts(1, 3), true), Some(envoy(2, 0)));
        assert_eq!(next.0, Pass::Counters, "busy: the counters follow");
    }

    /// #44's scenario: an upload on a route without the filter is in flight; the last filtered
    /// request ends during a gauge pass, before the walk reaches its gauge (Envoy has taken it
    /// off already). Envoy's figure holds the upload only. Taking the module's larger reading off
    /// it (as ef5a7d9 did) read 0 + 0, and the next poll completed the drain, cutting the upload.
    #[test]
    fn a_filtered_request_ending_during_a_pass_never_hides_an_unfiltered_one() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        c.record(Pass::Counters, reading(6, counts(1, 5), t0, 0, 0), d);
        // Envoy 1 (the upload), own 1 before the pass and 0 after it.
        let mut r = reading(1, counts(1, 5), t0, 0, 1);
        r.own_after = counts(0, 5);
        c.record(Pass::Gauges, r, d);
        assert_eq!(
            c.view(counts(0, 5), d.exact_count),
            Some(envoy(1, 1)),
            "the upload stays in flight in the view"
        );
        // The next pass, nothing of the module's in flight: still the upload.
        c.record(Pass::Gauges, reading(1, counts(0, 5), t0, 2, 3), d);
        assert_eq!(c.view(counts(0, 5), d.exact_count), Some(envoy(1, 1)));
        // The upload ends: only a pass can say so.
        c.record(Pass::Gauges, reading(0, counts(0, 5), t0, 4, 5), d);
        assert_eq!(c.view(counts(0, 5), d.exact_count), Some(envoy(0, 1)));
    }

    /// A filtered request that starts or ends during a pass may or may not be in what the walk
    /// read: it is not taken off, so the view errs on the side that holds the drain until the
    /// next gauge pass, which reads it settled.
    #[test]
    fn a_request_starting_or_ending_during_a_pass_holds_the_view_until_the_next_pass() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        c.record(Pass::Counters, reading(5, counts(1, 5), t0, 0, 0), d);
        // Ended during the gauge pass after Envoy's gauge was read: Envoy 1, own 1 then 0.
        let mut r = reading(1, counts(1, 5), t0, 0, 1);
        r.own_after = counts(0, 5);
        c.record(Pass::Gauges, r, d);
        assert_eq!(c.view(counts(0, 5), d.exact_count), Some(envoy(1, 0)));
        c.record(Pass::Gauges, reading(0, counts(0, 5), t0, 2, 3), d);
        assert_eq!(c.view(counts(0, 5), d.exact_count), Some(envoy(0, 0)));
        // Started during a gauge pass and seen by it: Envoy 1, own 0 then 1.
        let mut r = reading(1, counts(0, 5), t0, 4, 5);
        r.own_after = counts(1, 6);
        c.record(Pass::Gauges, r, d);
        assert_eq!(c.view(counts(1, 6), d.exact_count), Some(envoy(2, 0)));
        // Settled: the next pass takes it off as the module's own.
        c.record(Pass::Gauges, reading(1, counts(1, 6), t0, 6, 7), d);
        assert_eq!(c.view(counts(1, 6), d.exact_count), Some(envoy(1, 0)));
        // A request in flight through the whole pass, another ended and a third started during
        // it: only the first is taken off.
        let mut r = reading(2, counts(2, 6), t0, 8, 9);
        r.own_after = counts(2, 7);
        c.record(Pass::Gauges, r, d);
        assert_eq!(c.view(counts(2, 7), d.exact_count), Some(envoy(3, 0)));
    }

    #[test]
    fn in_flight_through_a_pass_counts_only_requests_present_at_both_ends() {
        let c = |active: i64, started: u64| counts(active, started);
        assert_eq!(in_flight_through(c(3, 10), c(3, 10)), 3, "nothing moved");
        assert_eq!(in_flight_through(c(3, 10), c(2, 10)), 2, "one ended");
        assert_eq!(in_flight_through(c(3, 10), c(4, 11)), 3, "one started");
        assert_eq!(
            in_flight_through(c(3, 10), c(3, 11)),
            2,
            "one started and one ended: the ended one may have been an old one"
        );
        assert_eq!(
            in_flight_through(c(1, 10), c(0, 12)),
            0,
            "more ends than were in flight"
        );
        assert_eq!(in_flight_through(c(0, 10), c(0, 10)), 0);
        assert_eq!(
            in_flight_through(c(2, 10), c(5, 10)),
            0,
            "readings broken by a double end take nothing off"
        );
        assert_eq!(in_flight_through(c(-1, 10), c(-1, 10)), 0, "a broken count");
        // Wrapping starts: the difference still counts right.
        assert_eq!(in_flight_through(c(2, u64::MAX), c(2, 1)), 0);
        assert_eq!(in_flight_through(c(2, u64::MAX), c(3, 0)), 2);
    }

    /// Costs as measured at 20 000 clusters: the counters ~2 s, the gauges ~0.5 s.
    #[test]
    fn without_the_filter_a_dear_store_ends_a_gauge_pass_at_the_earliest_completion() {
        let t0 = Instant::now();
        let d = timing(t0, false);
        let mut c = EnvoyStatsCache::default();
        c.calibrate(1400 * MS, 400 * MS);
        let idle = counts(0, 0);
        assert_eq!(at(t0, c.due(d)), (Pass::Counters, 0));
        // No time for a gauge pass before the counter pass that comes before the final gauge
        // pass (it starts 2 counter costs before it): that counter pass at once.
        let next = c.record(Pass::Counters, reading(7, idle, t0, 0, 2000), d);
        assert_eq!(at(t0, next), (Pass::Counters, 2000));
        assert_eq!(
            c.view(idle, d.exact_count),
            None,
            "no gauges read yet: the drain holds"
        );
        // Then the gauge pass, planned with the dearest seen and a quarter to spare, to end at 5 s.
        let next = c.record(Pass::Counters, reading(7, idle, t0, 2000, 4100), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 4500));
        assert_eq!(c.view(idle, d.exact_count), None);
        // Ends early with a request still in flight: no rescan before the earliest completion.
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 4500, 4800), d);
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(1, 7)));
        assert!(next.1 >= t0 + 5000 * MS, "{:?}", at(t0, next));
        // After it, requests in flight and no start seen: gauge passes at the busy share of what
        // the gauges cost, the counters at theirs (4 x 2.1 s after the last).
        assert_eq!(at(t0, next), (Pass::Gauges, 4800 + 4 * 400));
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 6400, 6800), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 6800 + 1600));
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 8400, 8800), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 8800 + 1600));
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 10400, 10800), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 10800 + 1600));
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 12400, 12800), d);
        assert_eq!(
            at(t0, next),
            (Pass::Counters, 12800 + 1600),
            "4100 + 4 x 2100 passed"
        );
        // The request ends: the gauges show it.
        let next = c.record(Pass::Counters, reading(7, idle, t0, 14400, 16400), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 16400));
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(1, 7)));
        c.record(Pass::Gauges, reading(0, idle, t0, 16400, 16800), d);
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(0, 7)));
    }

    /// Costs as measured at 5 000 clusters: the counters ~0.3 s, the gauges ~0.1 s.
    #[test]
    fn without_the_filter_a_cheaper_store_reads_at_the_busy_share_then_once_at_the_end() {
        let t0 = Instant::now();
        let d = timing(t0, false);
        let mut c = EnvoyStatsCache::default();
        c.calibrate(300 * MS, 100 * MS);
        let idle = counts(0, 0);
        c.due(d);
        let next = c.record(Pass::Counters, reading(7, idle, t0, 0, 300), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 300), "time for an early view");
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 300, 400), d);
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(1, 7)));
        // A round (0.4 s) at the busy share: the next one 1.6 s later.
        assert_eq!(at(t0, next), (Pass::Counters, 2000));
        let next = c.record(Pass::Counters, reading(7, idle, t0, 2000, 2300), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 2300));
        let next = c.record(Pass::Gauges, reading(1, idle, t0, 2300, 2400), d);
        // One more round fits before the final gauge pass; after its counter pass, no time for
        // another round: that gauge pass, planned to end at 5 s.
        assert_eq!(at(t0, next), (Pass::Counters, 4000));
        let next = c.record(Pass::Counters, reading(7, idle, t0, 4000, 4300), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 4875));
        let next = c.record(Pass::Gauges, reading(0, idle, t0, 4875, 4970), d);
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(0, 7)));
        assert!(next.1 > t0 + 5000 * MS, "no rescan: {:?}", at(t0, next));
    }

    #[test]
    fn a_start_the_counters_see_holds_until_later_gauges_and_moves_the_plan() {
        let t0 = Instant::now();
        let d = timing(t0, false);
        let mut c = EnvoyStatsCache::default();
        c.calibrate(300 * MS, 100 * MS);
        let idle = counts(0, 0);
        c.due(d);
        c.record(Pass::Counters, reading(7, idle, t0, 0, 300), d);
        c.record(Pass::Gauges, reading(0, idle, t0, 300, 400), d);
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(0, 7)));
        // A request starts (and may still run): the counters see it before the gauges are read
        // again, and the gauges read before it started do not say it is over.
        let next = c.record(Pass::Counters, reading(8, idle, t0, 4200, 4500), d);
        assert_eq!(
            c.view(idle, d.exact_count),
            Some(envoy(1, 8)),
            "held until the gauges are read again"
        );
        assert_eq!(at(t0, next), (Pass::Gauges, 4500));
        // Gauges that started after: it has ended.
        let next = c.record(Pass::Gauges, reading(0, idle, t0, 4500, 4600), d);
        assert_eq!(c.view(idle, d.exact_count), Some(envoy(0, 8)));
        // The quiet period now runs to 5.5 s: the counters again, then a gauge pass planned to
        // end then (less a quarter of its cost).
        assert_eq!(at(t0, next), (Pass::Counters, 5375 - 600));
        let next = c.record(Pass::Counters, reading(8, idle, t0, 4775, 5075), d);
        assert_eq!(at(t0, next), (Pass::Gauges, 5375));
        let later = timing(t0, false);
        let mut c2 = EnvoyStatsCache::default();
        c2.calibrate(300 * MS, 100 * MS);
        c2.due(later);
        c2.record(Pass::Counters, reading(7, idle, t0, 0, 300), later);
        c2.record(Pass::Gauges, reading(0, idle, t0, 300, 400), later);
        c2.record(Pass::Counters, reading(8, idle, t0, 3000, 3300), later);
        let next = c2.record(Pass::Gauges, reading(0, idle, t0, 3300, 3400), later);
        // Counters again, 2 counter costs before the final gauge pass (ending at 5 s).
        assert_eq!(at(t0, next), (Pass::Counters, 4875 - 600));
    }

    /// Without the filter a drain is first scanned at its start, counters first. With an
    /// exact count its first pass is a gauge pass timed to end when the drain may first complete
    /// (#44 item 11: one pass in the drain, not counters then gauges from its start), never
    /// before the drain started. (Before d6ab91a, a large filter-mode gateway's first scan waited
    /// for its share, 32 times the calibration's cost: the drain could complete before any scan.)
    #[test]
    fn a_drain_s_first_pass_ends_when_it_may_first_complete_with_an_exact_count() {
        let t0 = Instant::now();
        let calibrated = |c: Duration| {
            let mut cache = EnvoyStatsCache::default();
            cache.calibrate(c * 3 / 4, c / 4);
            cache
        };
        for cost in [Duration::from_micros(100), 400 * MS, 3000 * MS, 40_000 * MS] {
            assert_eq!(
                calibrated(cost).due(timing(t0, false)),
                (Pass::Counters, t0),
                "without the filter, a scan costing {cost:?}"
            );
            let g = cost / 4;
            let d = timing(t0, true);
            let want = d
                .earliest_completion
                .checked_sub(g + g / 4)
                .unwrap_or(t0)
                .max(t0);
            assert_eq!(
                calibrated(cost).due(d),
                (Pass::Gauges, want),
                "an exact count, a scan costing {cost:?}"
            );
        }
        assert_eq!(
            at(t0, calibrated(400 * MS).due(timing(t0, true))),
            (Pass::Gauges, 4875)
        );
        assert_eq!(
            calibrated(40_000 * MS).due(timing(t0, true)),
            (Pass::Gauges, t0),
            "a pass dearer than the drain's minimum starts at once"
        );
    }

    #[test]
    fn new_requests_without_the_filter_move_the_total_the_engine_watches() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        let scan = |c: &mut EnvoyStatsCache, total: u64, own: Counts| {
            c.record(Pass::Counters, reading(total, own, t0, 0, 0), d);
            c.record(Pass::Gauges, reading(0, own, t0, 0, 0), d)
        };
        scan(&mut c, 100, counts(0, 100));
        let first = c.view(counts(0, 100), d.exact_count).unwrap().total;
        // 5 filtered requests since: the excess total does not move.
        scan(&mut c, 105, counts(0, 105));
        assert_eq!(c.view(counts(0, 105), d.exact_count).unwrap().total, first);
        // 1 unfiltered one: it moves, and the scans get the busy share.
        let next = scan(&mut c, 106, counts(0, 105));
        assert_ne!(c.view(counts(0, 105), d.exact_count).unwrap().total, first);
        assert_eq!(next, (Pass::Counters, t0 + IN_FLIGHT_RECHECK));
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
        /// A pass waits while this is set (and says so in `held`): a slow scan.
        hold: AtomicBool,
        held: AtomicBool,
    }

    struct Source(Arc<FakeStore>);

    impl ScanSource for Source {
        fn scan(&self, pass: Pass) -> Option<u64> {
            let s = &self.0;
            if !s.readable.load(Ordering::SeqCst) {
                return None;
            }
            if *s.caller.lock().unwrap() != Some(std::thread::current().id()) {
                s.scanned_off_caller.store(true, Ordering::SeqCst);
            }
            s.scans.fetch_add(1, Ordering::SeqCst);
            while s.hold.load(Ordering::SeqCst) {
                s.held.store(true, Ordering::SeqCst);
                std::thread::yield_now();
            }
            Some(match pass {
                Pass::Gauges => s.active.load(Ordering::SeqCst),
                Pass::Counters => 0,
            })
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
        let threads = Threads::default();
        let scanner = Scanner::start(&threads, Source(s.clone())).unwrap();
        eventually("the calibration scan", || scanner.calibration().is_some());
        assert_eq!(s.scans.load(Ordering::SeqCst), 2, "counters, then gauges");
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
        scanner.stop();
        let stopped = threads.join(Duration::from_secs(30));
        assert_eq!(
            (stopped.joined, stopped.left),
            (1, vec![]),
            "the thread ends"
        );
    }

    /// The engine's view, filter loaded, while the drain's first scan is slow (held here until
    /// released): `Pending` (the drain holds), never `Unused` (which let a filter-mode drain
    /// complete at min_drain_duration with a request the filter did not see in flight); `Seen`,
    /// with that request, once the scan is in.
    #[test]
    fn in_filter_mode_the_drain_holds_until_a_scan_of_it_is_seen() {
        let s = store();
        let threads = Threads::default();
        let scanner = Scanner::start(&threads, Source(s.clone())).unwrap();
        eventually("the calibration scan", || scanner.calibration().is_some());
        s.hold.store(true, Ordering::SeqCst);
        s.active.store(1, Ordering::SeqCst); // a request on a route without the filter
        s.draining.store(true, Ordering::SeqCst);
        // The drain may complete at once (its minimum is over): its confirming pass is due now.
        let now = Instant::now();
        let d = DrainTiming {
            earliest_completion: now,
            ..timing(now, true)
        };
        assert_eq!(scanner.view(d, counts(0, 0)), EnvoyView::Pending);
        eventually("the drain's first pass under way", || {
            s.held.load(Ordering::SeqCst)
        });
        for _ in 0..10 {
            assert_eq!(
                scanner.view(d, counts(0, 0)),
                EnvoyView::Pending,
                "no scan of this drain seen: hold"
            );
            std::thread::sleep(IN_FLIGHT_RECHECK);
        }
        s.hold.store(false, Ordering::SeqCst);
        eventually("the scan that sees the request", || {
            scanner.view(d, counts(0, 0)) == EnvoyView::Seen(envoy(1, 0))
        });
        scanner.stop();
        threads.join(Duration::from_secs(30));
    }

    #[test]
    fn an_unreadable_store_ends_the_thread_and_releases_the_hold() {
        let s = store();
        s.readable.store(false, Ordering::SeqCst);
        let threads = Threads::default();
        let scanner = Scanner::start(&threads, Source(s.clone())).unwrap();
        s.draining.store(true, Ordering::SeqCst);
        let d = timing(Instant::now(), false);
        eventually("the thread to end", || {
            scanner.view(d, counts(0, 0)) == EnvoyView::Unused
        });
        assert_eq!(s.scans.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn stat_sums_follow_connection_managers_not_ignored() {
        let ignored = vec!["admin".to_string()];
        let mut g = StatSums::new(Pass::Gauges, &ignored);
        for (name, v) in [
            (&b"http.data.downstream_rq_active"[..], 3),
            (b"http.ingress_http.downstream_rq_active", 2),
            (b"http.admin.downstream_rq_active", 100),
            (b"http.data.extra_downstream_rq_active", 50),
            (b"cluster.x.downstream_rq_active", 7),
            (b"http.data.downstream_rq_total", 9),
        ] {
            g.add(name, v);
        }
        assert_eq!(g.total_less((0, 0)), 5);
        assert_eq!(g.total_less((10, 1)), 4, "a waiting /drain is not work");
        assert_eq!(g.total_less((0, 9)), 0, "never below zero");
        let mut c = StatSums::new(Pass::Counters, &ignored);
        for (name, v) in [
            (&b"http.data.downstream_rq_total"[..], 40),
            (b"http.data.health_check.request_total", 6),
            (b"http.admin.downstream_rq_total", 1000),
        ] {
            c.add(name, v);
        }
        assert_eq!(c.total_less((4, 0)), 30, "less health checks and not-work");
    }
}
