//! The scans' pacing and what the drain sees of them: the last passes' results, the excess of
//! Envoy's figures over the module's own, and which pass to run next, when. Pure (time passed
//! in). May use what `stats_scan` may.

use super::*;

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
    pub(super) calibration: Option<(Duration, Duration)>,
    /// The last pass of each kind (counters, gauges) found none of the stats it reads: Envoy
    /// does not keep them.
    hidden: [bool; 2],
    /// The dearest pass of each kind (the calibration's included).
    counter_cost: Duration,
    gauge_cost: Duration,
    /// When the last gauge pass ended (the confirming pass's spacing).
    gauges_ended: Option<Instant>,
    /// Since when the module's own count is seen at zero ([`EnvoyStatsCache::observe_own`]),
    /// with the starts counted then (a start since means it left zero and came back).
    own_zero_since: Option<(Instant, u64)>,
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
                self.gauges_ended = Some(r.ended);
            }
        }
        let next = self.plan(pass, r.ended, d);
        self.next = Some(next);
        next
    }

    /// The drain's timing changed: the module's count stopped (or started again) being exact,
    /// as when connection mode's tracker loses a connection mid-drain. Planned with an exact
    /// count, the passes read only the gauges, and the view of an inexact count needs the
    /// counters too (requests on the lost connection are Envoy's to count): without them the
    /// drain held until `drain_timeout`, whatever Envoy served. Losing exactness replans from a
    /// counter pass at once, as a drain without the filter starts.
    pub fn timing_changed(&mut self, d: DrainTiming) {
        if !d.exact_count {
            self.next = None;
        }
    }

    /// The module's own count as the engine reads it at `now`. Envoy's gauges were last read
    /// while the count was still above zero, maybe long before (paced at a small share with an
    /// exact count): a request that began since on a listener or route without the filter is in
    /// none of them. So once the count is at zero, completion waits for a gauge pass that
    /// started after it got there ([`EnvoyStatsCache::view`] holds until then), due at once, or
    /// when the drain may first complete if later, and never sooner after the last gauge pass
    /// than the busy share allows (at most one such pass per [`BUSY_SCAN_SHARE_PERCENT`]
    /// interval, however often the count comes back to zero). Returns whether the next pass was
    /// moved earlier (the scanner thread must look again).
    pub fn observe_own(&mut self, own: Counts, now: Instant, d: DrainTiming) -> bool {
        if own.active != 0 || self.hidden() {
            // Hidden stats: no pass can confirm anything (the view is not this cache's then).
            self.own_zero_since = None;
            return false;
        }
        // The drain's first passes as planned (the one below is only ever earlier).
        self.due(d);
        let since = match self.own_zero_since {
            Some((at, started)) if started == own.started => at,
            _ => {
                self.own_zero_since = Some((now, own.started));
                now
            }
        };
        if self.confirmed(since) {
            return false;
        }
        let g = self.gauge_cost;
        let spaced = self
            .gauges_ended
            .map_or(now, |e| e + scan_interval(g, BUSY_SCAN_SHARE_PERCENT));
        let first = self.target(d).checked_sub(g + g / 4).unwrap_or(now);
        let at = now.max(spaced).max(first);
        match self.next {
            Some((_, planned)) if planned <= at => false,
            _ => {
                self.next = Some((Pass::Gauges, at));
                true
            }
        }
    }

    /// No pass will come (the store can no longer be read): nothing to wait for.
    pub fn no_more_passes(&mut self) {
        self.own_zero_since = None;
    }

    /// Whether the last gauge pass started at or after `since`.
    fn confirmed(&self, since: Instant) -> bool {
        self.gauges.is_some_and(|(_, started, _)| started >= since)
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
    pub(super) fn plan(&self, pass: Pass, now: Instant, d: DrainTiming) -> (Pass, Instant) {
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
    pub(super) fn target(&self, d: DrainTiming) -> Instant {
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
    /// tracker lost: [`crate::counting::Registry::give_back`]) count as in flight until a gauge
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
        // The module's count reached zero after the last gauge pass started: until a pass that
        // started after that, Envoy may serve what none has seen (`observe_own`).
        if own_now.active == 0
            && self
                .own_zero_since
                .is_some_and(|(since, _)| !self.confirmed(since))
        {
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
