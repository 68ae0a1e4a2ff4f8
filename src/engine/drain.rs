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
mod tests;
