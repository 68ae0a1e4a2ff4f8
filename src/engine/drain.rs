//! Drain state machine: pure Rust, no FFI, no clock of its own. Every method takes `now`, so the
//! whole lifecycle is unit-tested without Envoy and without sleeping. The glue (bootstrap engine)
//! feeds it events and observations and applies its decisions; it must not decide anything itself.

use crate::config::DrainSettings;
use std::time::{Duration, Instant};

pub use crate::config::IN_FLIGHT_RECHECK;

/// What started the drain. Reported in status and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Envoy received SIGTERM (bootstrap `shutdown` hook).
    Sigterm,
    /// `GET`/`POST /drain` on the control listener (a Kubernetes preStop `httpGet` hook).
    ControlEndpoint,
    /// `POST /graceful_drain` on Envoy's admin interface.
    Admin,
    /// Envoy's own `POST /drain_listeners` (bootstrap `drain_started` hook).
    DrainListeners,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Sigterm => "sigterm",
            Trigger::ControlEndpoint => "drain_endpoint",
            Trigger::Admin => "admin",
            Trigger::DrainListeners => "drain_listeners",
        }
    }
}

/// How a completed drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The drain hit `drain_timeout` instead of completing by the normal rule.
    pub timed_out: bool,
    /// Requests still in flight at completion (only non-zero when `timed_out`).
    pub requests_cut: u64,
    /// From drain start to completion.
    pub duration: Duration,
}

/// Where the drain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Serving,
    Draining {
        started_at: Instant,
        trigger: Trigger,
    },
    Drained {
        started_at: Instant,
        trigger: Trigger,
        outcome: Outcome,
    },
}

impl Phase {
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Serving => "serving",
            Phase::Draining { .. } => "draining",
            Phase::Drained { .. } => "drained",
        }
    }
}

/// What the data plane looks like right now, as the glue measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Data-plane requests in flight.
    pub active_requests: u64,
    /// When the most recent data-plane request started, if known.
    pub last_request_start: Option<Instant>,
}

/// The decision of one [`Drain::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No drain has started: nothing to do.
    Idle,
    /// Still draining: poll again no later than this instant (earlier if something happens).
    PollAt(Instant),
    /// The drain completed at this poll: apply it (answer waiters, release Envoy's exit).
    Completed(Outcome),
    /// The drain had already completed earlier.
    AlreadyDrained(Outcome),
}

#[derive(Debug, Clone)]
pub struct Drain {
    settings: DrainSettings,
    phase: Phase,
}

impl Drain {
    pub fn new(settings: DrainSettings) -> Self {
        Drain {
            settings,
            phase: Phase::Serving,
        }
    }

    pub fn settings(&self) -> DrainSettings {
        self.settings
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Start draining. Idempotent: returns `false` (and changes nothing) if a drain already started.
    pub fn start(&mut self, now: Instant, trigger: Trigger) -> bool {
        if self.phase != Phase::Serving {
            return false;
        }
        self.phase = Phase::Draining {
            started_at: now,
            trigger,
        };
        true
    }

    /// The earliest instant at which the drain may complete normally, given what is observed.
    fn normal_completion_at(&self, started_at: Instant, obs: &Observation) -> Instant {
        // Requests that started before the drain count as starting at the drain start: the quiet
        // period is measured from whichever is later.
        let quiet_from = match obs.last_request_start {
            Some(t) if t > started_at => t,
            _ => started_at,
        };
        (started_at + self.settings.min_drain_duration).max(quiet_from + self.settings.quiet_period)
    }

    /// Evaluate the drain at `now`. Completes it when the rules say so:
    /// - never before `min_drain_duration`;
    /// - once nothing is in flight and no request started for `quiet_period`;
    /// - at `drain_timeout` whatever is in flight.
    pub fn poll(&mut self, now: Instant, obs: Observation) -> Decision {
        let (started_at, trigger) = match self.phase {
            Phase::Serving => return Decision::Idle,
            Phase::Drained { outcome, .. } => return Decision::AlreadyDrained(outcome),
            Phase::Draining {
                started_at,
                trigger,
            } => (started_at, trigger),
        };
        let timeout_at = started_at + self.settings.drain_timeout;
        let normal_at = self.normal_completion_at(started_at, &obs);
        let outcome = if obs.active_requests == 0 && now >= normal_at {
            Some(Outcome {
                timed_out: false,
                requests_cut: 0,
                duration: now.saturating_duration_since(started_at),
            })
        } else if now >= timeout_at {
            Some(Outcome {
                timed_out: true,
                requests_cut: obs.active_requests,
                duration: now.saturating_duration_since(started_at),
            })
        } else {
            None
        };
        if let Some(outcome) = outcome {
            self.phase = Phase::Drained {
                started_at,
                trigger,
                outcome,
            };
            return Decision::Completed(outcome);
        }
        // Not yet. With requests in flight the only thing that can change the answer is a request
        // ending, which we do not get told about: re-check soon. With none in flight, nothing can
        // make completion earlier than `normal_at` (a new request only pushes it later).
        let next = if obs.active_requests > 0 {
            now + IN_FLIGHT_RECHECK
        } else {
            normal_at
        };
        Decision::PollAt(next.min(timeout_at))
    }
}

#[cfg(test)]
mod tests {
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
}
