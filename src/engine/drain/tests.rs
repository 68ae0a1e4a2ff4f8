//! Unit tests of `engine::drain`.

use super::*;

fn settings(min_ms: u64, quiet_ms: u64, timeout_ms: u64) -> DrainSettings {
    DrainSettings {
        min_drain_duration: Duration::from_millis(min_ms),
        quiet_period: Duration::from_millis(quiet_ms),
        drain_timeout: Duration::from_millis(timeout_ms),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn idle() -> Observation {
    Observation {
        active_requests: 0,
        last_request_start: None,
    }
}

fn busy(n: u64) -> Observation {
    Observation {
        active_requests: n,
        last_request_start: None,
    }
}

/// A request that started before the drain counts as starting at the drain start: the quiet
/// period runs from the start, not from the older request (killed a surviving mutant,
/// `make mutants`).
#[test]
fn a_request_from_before_the_drain_quiets_from_the_drain_start() {
    let t0 = Instant::now() + ms(1_000);
    let s = settings(100, 500, 5000);
    let mut d = Drain::new(s);
    assert_eq!(d.settings().quiet_period, s.quiet_period);
    assert_eq!(d.settings().min_drain_duration, s.min_drain_duration);
    assert!(d.start(t0, Trigger::Sigterm));
    let before = Observation {
        active_requests: 0,
        last_request_start: Some(t0 - ms(300)),
    };
    assert_eq!(d.poll(t0, before), Decision::PollAt(t0 + ms(500)));
}

#[test]
fn serving_until_started() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 5000));
    assert_eq!(d.phase(), Phase::Serving);
    assert_eq!(d.poll(t0 + ms(10_000), idle()), Decision::Idle);
    assert_eq!(d.phase().name(), "serving");
}

#[test]
fn start_is_idempotent_and_keeps_the_first_trigger() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 5000));
    assert!(d.start(t0, Trigger::ControlEndpoint));
    assert!(!d.start(t0 + ms(50), Trigger::Sigterm));
    assert_eq!(
        d.phase(),
        Phase::Draining {
            started_at: t0,
            trigger: Trigger::ControlEndpoint
        }
    );
}

#[test]
fn idle_gateway_completes_exactly_at_min_drain() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 5000));
    d.start(t0, Trigger::Sigterm);
    // Quiet period (200) is covered by min drain (300) when nothing ever arrives.
    assert_eq!(d.poll(t0, idle()), Decision::PollAt(t0 + ms(300)));
    assert_eq!(d.poll(t0 + ms(299), idle()), Decision::PollAt(t0 + ms(300)));
    let out = Outcome {
        timed_out: false,
        requests_cut: 0,
        duration: ms(300),
    };
    assert_eq!(d.poll(t0 + ms(300), idle()), Decision::Completed(out));
    assert_eq!(d.poll(t0 + ms(900), idle()), Decision::AlreadyDrained(out));
    assert_eq!(d.phase().name(), "drained");
}

#[test]
fn quiet_period_longer_than_min_drain_governs() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(100, 400, 5000));
    d.start(t0, Trigger::Sigterm);
    assert_eq!(d.poll(t0 + ms(150), idle()), Decision::PollAt(t0 + ms(400)));
    assert!(matches!(
        d.poll(t0 + ms(400), idle()),
        Decision::Completed(_)
    ));
}

#[test]
fn requests_after_drain_start_push_completion_back() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 5000));
    d.start(t0, Trigger::Sigterm);
    let late = Observation {
        active_requests: 0,
        last_request_start: Some(t0 + ms(250)),
    };
    // min drain passed at 300 but the last request started at 250: quiet until 450.
    assert_eq!(d.poll(t0 + ms(300), late), Decision::PollAt(t0 + ms(450)));
    assert!(matches!(d.poll(t0 + ms(450), late), Decision::Completed(_)));
}

#[test]
fn requests_started_before_the_drain_do_not_extend_it() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 5000));
    let early = Observation {
        active_requests: 0,
        last_request_start: Some(t0 - ms(10_000)),
    };
    d.start(t0, Trigger::Sigterm);
    assert!(matches!(
        d.poll(t0 + ms(300), early),
        Decision::Completed(_)
    ));
}

#[test]
fn in_flight_requests_hold_the_drain_and_are_rechecked_quickly() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 5000));
    d.start(t0, Trigger::Sigterm);
    for at in [0u64, 300, 1000, 4000] {
        match d.poll(t0 + ms(at), busy(2)) {
            Decision::PollAt(next) => {
                assert!(next > t0 + ms(at), "{at}");
                assert!(next <= t0 + ms(at) + IN_FLIGHT_RECHECK, "{at}");
            }
            other => panic!("at {at}ms: {other:?}"),
        }
    }
    // The last request ends at 4000 ms: completion at the next poll, not a second later.
    assert!(matches!(
        d.poll(t0 + ms(4000) + IN_FLIGHT_RECHECK, idle()),
        Decision::Completed(Outcome {
            timed_out: false,
            ..
        })
    ));
}

#[test]
fn timeout_completes_and_reports_what_was_cut() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 1000));
    d.start(t0, Trigger::Admin);
    assert_eq!(
        d.poll(t0 + ms(990), busy(3)),
        Decision::PollAt(t0 + ms(1000))
    );
    assert_eq!(
        d.poll(t0 + ms(1000), busy(3)),
        Decision::Completed(Outcome {
            timed_out: true,
            requests_cut: 3,
            duration: ms(1000)
        })
    );
}

#[test]
fn timeout_with_traffic_that_never_goes_quiet() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(300, 200, 1000));
    d.start(t0, Trigger::Sigterm);
    let chatty = |at: u64| Observation {
        active_requests: 0,
        last_request_start: Some(t0 + ms(at)),
    };
    assert_eq!(
        d.poll(t0 + ms(950), chatty(900)),
        Decision::PollAt(t0 + ms(1000))
    );
    assert_eq!(
        d.poll(t0 + ms(1000), chatty(990)),
        Decision::Completed(Outcome {
            timed_out: true,
            requests_cut: 0,
            duration: ms(1000)
        })
    );
}

#[test]
fn poll_deadline_never_exceeds_timeout() {
    let t0 = Instant::now();
    let mut d = Drain::new(settings(1000, 1000, 1000));
    d.start(t0, Trigger::Sigterm);
    let obs = Observation {
        active_requests: 0,
        last_request_start: Some(t0 + ms(900)),
    };
    assert_eq!(d.poll(t0 + ms(950), obs), Decision::PollAt(t0 + ms(1000)));
}

#[test]
fn exhaustive_small_grid_respects_every_rule() {
    // Step a drain through every combination of small settings and traffic patterns and check
    // the three rules at every millisecond-ish step.
    let t0 = Instant::now();
    for min in [0u64, 50, 100] {
        for quiet in [0u64, 30, 100] {
            for timeout in [100u64, 150, 300] {
                for busy_until in [0u64, 60, 200, 400] {
                    for last_start in [None, Some(20u64), Some(120)] {
                        let s = settings(min, quiet, timeout);
                        let mut d = Drain::new(s);
                        d.start(t0, Trigger::Sigterm);
                        let mut done = None;
                        for step in 0..=400u64 {
                            let now = t0 + ms(step);
                            let ls = last_start.filter(|&l| l <= step).map(|l| t0 + ms(l));
                            let obs = Observation {
                                active_requests: u64::from(step < busy_until),
                                last_request_start: ls,
                            };
                            match d.poll(now, obs) {
                                Decision::Completed(o) => {
                                    done = Some((step, o, obs));
                                    break;
                                }
                                Decision::PollAt(next) => {
                                    assert!(next > now || next == t0 + ms(timeout))
                                }
                                other => panic!("{other:?}"),
                            }
                        }
                        let (at, o, obs) = done.expect("must complete by the timeout");
                        let ctx = format!("min={min} quiet={quiet} timeout={timeout} busy_until={busy_until} last={last_start:?} at={at} {o:?}");
                        assert!(at <= timeout, "{ctx}");
                        assert_eq!(o.duration, ms(at), "{ctx}");
                        if o.timed_out {
                            assert_eq!(at, timeout, "{ctx}");
                            assert_eq!(o.requests_cut, obs.active_requests, "{ctx}");
                        } else {
                            assert!(at >= min, "{ctx}");
                            assert_eq!(obs.active_requests, 0, "{ctx}");
                            let quiet_from = last_start.filter(|&l| l <= at).unwrap_or(0);
                            assert!(at >= quiet_from + quiet, "{ctx}");
                            // And not later than needed: one step earlier the rules were not met
                            // or it is the very first moment they are.
                            let earliest = min.max(quiet_from + quiet).max(busy_until);
                            assert_eq!(at, earliest, "{ctx}");
                        }
                    }
                }
            }
        }
    }
}
