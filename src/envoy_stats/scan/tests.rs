//! Unit tests of the stats scan: pacing, the view the drain gets, and the scanner thread against
//! a fake store.

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

/// #63 item 5 (a): a drain planned with an exact count reads only the gauges; the tracker then
/// loses a connection, and the view of an inexact count needs the counters too. Before, the
/// plan kept the drain's first timing: no counter pass ever came, the view stayed `None` and
/// the drain held until `drain_timeout` with nothing in flight. Now a counter pass follows at
/// once, then the gauges, and the view is in.
#[test]
fn a_count_that_stops_being_exact_mid_drain_reads_the_counters_at_once() {
    let t0 = Instant::now();
    let exact = timing(t0, true);
    let mut c = EnvoyStatsCache::default();
    c.calibrate(400 * MS, 100 * MS);
    let idle = counts(0, 3);
    assert_eq!(at(t0, c.due(exact)), (Pass::Gauges, 4875));
    let next = c.record(Pass::Gauges, reading(0, idle, t0, 4875, 4975), exact);
    assert_eq!(
        next.0,
        Pass::Gauges,
        "exact and nothing beyond: gauges only"
    );
    assert_eq!(c.view(idle, true), Some(envoy(0, 0)));
    // The tracker lost a connection at 6 s: the count is no longer exact.
    let lost = timing(t0, false);
    assert_eq!(c.view(idle, false), None, "no counters read yet");
    c.timing_changed(lost);
    let due = c.due(lost);
    assert_eq!(due.0, Pass::Counters);
    assert!(due.1 <= t0 + 6000 * MS, "at once: {:?}", at(t0, due));
    let next = c.record(Pass::Counters, reading(3, idle, t0, 6000, 6400), lost);
    assert_eq!(at(t0, next), (Pass::Gauges, 6400), "then the gauges");
    c.record(Pass::Gauges, reading(0, idle, t0, 6400, 6500), lost);
    assert_eq!(c.view(idle, false), Some(envoy(0, 0)), "the view is in");
    // Exact again (the lost connection closed): nothing to replan.
    c.timing_changed(exact);
    assert_eq!(c.view(idle, true), Some(envoy(0, 0)));
}

/// #63 item 5 (b): with an exact count the confirming gauge pass ends when the drain may first
/// complete; a request of the module's outlives it, and gauge passes then come at 3 % of a CPU
/// (32 pass lengths apart). A request that began meanwhile on a listener without the filter is
/// in no pass when the module's count reaches zero. Completion now waits for a gauge pass that
/// started after the count got to zero: due at once (or after the busy share's spacing), and
/// the view holds until it is in.
#[test]
fn with_an_exact_count_completion_waits_for_a_gauge_pass_begun_at_zero() {
    let t0 = Instant::now();
    let d = timing(t0, true);
    let mut c = EnvoyStatsCache::default();
    c.calibrate(400 * MS, 100 * MS);
    let busy = counts(1, 1);
    let ms = |m: u32| t0 + m * MS;
    assert!(!c.observe_own(busy, ms(10), d));
    assert_eq!(at(t0, c.due(d)), (Pass::Gauges, 4875));
    // The confirming pass: Envoy's one request is the module's own.
    let next = c.record(Pass::Gauges, reading(1, busy, t0, 4875, 4975), d);
    assert_eq!(at(t0, next), (Pass::Gauges, 4975 + 3233), "paced at 3 %");
    assert!(!c.observe_own(busy, ms(5000), d));
    assert_eq!(c.view(busy, true), Some(envoy(1, 0)));
    // A request without the filter starts at 5.5 s; the module's ends at 6 s.
    let zero = counts(0, 1);
    assert!(
        c.observe_own(zero, ms(6000), d),
        "the next pass moves earlier"
    );
    assert_eq!(at(t0, c.due(d)), (Pass::Gauges, 6000), "at once");
    assert_eq!(
        c.view(zero, true),
        Some(envoy(1, 0)),
        "held: the last gauge pass began before the count got to zero"
    );
    assert!(!c.observe_own(zero, ms(6020), d), "asked once");
    // That pass sees the other request: the drain waits for it.
    let next = c.record(Pass::Gauges, reading(1, zero, t0, 6020, 6120), d);
    assert_eq!(c.view(zero, true), Some(envoy(1, 0)));
    assert_eq!(next.0, Pass::Counters, "busy: the counters follow");
    c.record(Pass::Gauges, reading(0, zero, t0, 7000, 7100), d);
    assert!(!c.observe_own(zero, ms(7200), d));
    assert_eq!(c.view(zero, true), Some(envoy(0, 0)), "then it completes");
    // The count leaves zero and comes back (a request started and ended between two looks):
    // another pass, not sooner than the busy share after the last one (4 x 100 ms).
    let again = counts(0, 2);
    assert!(c.observe_own(again, ms(7150), d));
    assert_eq!(at(t0, c.due(d)), (Pass::Gauges, 7500));
    assert_eq!(c.view(again, true), Some(envoy(1, 0)));
}

/// The common case costs nothing: the module's count is at zero before the drain's confirming
/// pass starts, which is then the pass that confirms; no other pass is asked for.
#[test]
fn a_count_at_zero_before_the_confirming_pass_needs_no_other_pass() {
    let t0 = Instant::now();
    let d = timing(t0, true);
    let mut c = EnvoyStatsCache::default();
    c.calibrate(400 * MS, 100 * MS);
    let zero = counts(0, 5);
    assert!(!c.observe_own(zero, t0 + 100 * MS, d));
    assert_eq!(at(t0, c.due(d)), (Pass::Gauges, 4875));
    c.record(Pass::Gauges, reading(0, zero, t0, 4875, 4975), d);
    assert!(!c.observe_own(zero, t0 + 5000 * MS, d));
    assert_eq!(c.view(zero, true), Some(envoy(0, 0)));
    // Without the filter (the count always 0) the first passes are unchanged too.
    let d = timing(t0, false);
    let mut c = EnvoyStatsCache::default();
    c.calibrate(400 * MS, 100 * MS);
    assert!(!c.observe_own(counts(0, 0), t0, d));
    assert_eq!(at(t0, c.due(d)), (Pass::Counters, 0));
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

/// The scanner follows the drain as the engine describes it at each question: a count that
/// was exact at the drain's first question and is no longer (a connection lost) gets the
/// counters read, and a view (`Seen`), not `Pending` until `drain_timeout`.
#[test]
fn the_scanner_replans_when_the_count_stops_being_exact() {
    let s = store();
    let threads = Threads::default();
    let scanner = Scanner::start(&threads, Source(s.clone())).unwrap();
    eventually("the calibration scan", || scanner.calibration().is_some());
    s.draining.store(true, Ordering::SeqCst);
    let now = Instant::now();
    let exact = DrainTiming {
        earliest_completion: now,
        ..timing(now, true)
    };
    eventually("the confirming pass", || {
        scanner.view(exact, counts(0, 0)) == EnvoyView::Seen(envoy(0, 0))
    });
    let lost = DrainTiming {
        exact_count: false,
        ..exact
    };
    eventually("a view without an exact count", || {
        scanner.view(lost, counts(0, 0)) == EnvoyView::Seen(envoy(0, 0))
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
