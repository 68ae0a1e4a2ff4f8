//! Envoy's own request stats, read on a thread of the module's own, never on Envoy's main thread,
//! at a bounded cost whatever the size of the configuration. Pure Rust: the scan itself is a
//! [`ScanSource`] (Envoy's stats callbacks in the FFI layer, a fake in the tests).
//!
//! Why a thread: Envoy's ABI has no cheap read of one stat. `iterate_gauges`/`iterate_counters`
//! and `get_*_value` (by name) all walk the whole stats store (about 100 stats per cluster: a scan
//! costs ~1 s at 5 000 clusters), and a gateway without the filter on its listeners (bootstrap-only
//! mode) has no other signal. On the main thread those scans starve xDS, the admin and health-check
//! bookkeeping; here they do not. Envoy's stats store may be read from any thread
//! (`src/ffi/ENVOY_FACTS.md` §3a).
//!
//! Pacing: a scan is two passes, the counters (request starts, for the quiet period) then the
//! gauges (requests in flight, what completion waits for), each walking its own kind of stat and
//! timed on its own. Scans take at most [`SCAN_SHARE_PERCENT`] of one CPU
//! ([`BUSY_SCAN_SHARE_PERCENT`] while requests without the filter are seen), at most every
//! [`IN_FLIGHT_RECHECK`] (small gateways); without the filter, the passes are planned so that a
//! gauge pass, after a counter pass, ends when the drain could first complete (see
//! [`EnvoyStatsCache`]'s plan). A scan keeps only what Envoy sees *beyond* the module's own exact
//! counts, so with the filter on every listener the engine follows the filter's live count between
//!
//! Files: `plan` (the last passes' results, the view the drain gets, when to read next),
//! `sums` (summing one pass's stats by name), `scanner` (the thread that runs the passes).
//! May use: `config`, `drain`, `registry`, `state` (the reading type), `threads`.

mod plan;
mod scanner;
mod sums;

pub use plan::EnvoyStatsCache;
pub use scanner::Scanner;
pub use sums::StatSums;

use crate::config::DrainSettings;
use crate::config::IN_FLIGHT_RECHECK;
use crate::counting::Counts;
use crate::runtime::threads::Threads;
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

pub use crate::host::stats::Pass;

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

/// What Envoy's own stats add to the module's exact counts: the scanner's raw figures
/// ([`EnvoyView`]) and the drain's observation made of them
/// (`crate::engine::shared::EnvoyObservation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvoyReading<T> {
    /// Not used: no drain, or the filter counts every request that matters.
    Unused,
    /// Needed (no filter on the listeners) but not read yet: hold the drain (its timeout still
    /// bounds it).
    Pending,
    Seen(T),
}

impl<T> EnvoyReading<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> EnvoyReading<U> {
        match self {
            EnvoyReading::Unused => EnvoyReading::Unused,
            EnvoyReading::Pending => EnvoyReading::Pending,
            EnvoyReading::Seen(t) => EnvoyReading::Seen(f(t)),
        }
    }
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

/// How many of the module's requests were in flight through a whole pass whose readings of the
/// module's counts are `before` and `after`: the ones a gauge pass surely saw in Envoy's
/// `downstream_rq_active`, so the only ones it may take off Envoy's figure as the module's own.
/// The same rule as [`crate::engine::shared::NotWork::within`], for the same reason: Envoy takes a
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

#[cfg(test)]
mod tests;
