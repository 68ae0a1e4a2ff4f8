//! Bootstrap extension glue: the drain engine that runs on Envoy's main thread. It starts the drain
//! on SIGTERM (holding Envoy's exit), on Envoy's own `/drain_listeners` and on its admin endpoint,
//! evaluates the drain state machine when kicked or when its timer fires, and releases Envoy's exit
//! when the drain completes. Thin: every decision comes from [`crate::drain`].

use crate::drain::{Decision, Observation, Phase, Trigger, IN_FLIGHT_RECHECK};
use crate::state::{Shared, StartResult};
use std::time::{Duration, Instant};

/// What the engine needs from Envoy. Main thread only.
pub trait EngineHost {
    /// (Re)arm the engine's single timer.
    fn arm_timer(&self, delay: Duration);
    fn set_draining_gauge(&self, value: u64);
    fn count(&self, metric: EngineMetric);
    /// Envoy's own view of data-plane requests, summed over HTTP connection managers (minus
    /// ignored stat prefixes): requests in flight and requests started so far. `None` if
    /// unavailable.
    fn envoy_request_stats(&self) -> Option<EnvoyRequestStats>;
    /// Make Envoy fail its health checks (admin `/healthcheck/fail`), which makes every listener
    /// send connections away with their next response. Called once, when a drain starts.
    fn fail_health_checks(&self);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvoyRequestStats {
    pub active: u64,
    pub total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineMetric {
    DrainStarted,
    DrainCompleted,
    DrainTimedOut,
}

/// Callback that lets Envoy's shutdown proceed.
pub type ShutdownRelease = Box<dyn FnOnce()>;

#[derive(Default)]
pub struct Engine {
    start_reported: bool,
    completion_reported: bool,
    pending_shutdown: Option<ShutdownRelease>,
    /// Envoy's request counter at the previous poll, and when it was last seen to move.
    last_total: Option<u64>,
    last_change: Option<Instant>,
}

impl Engine {
    /// SIGTERM: start the drain (if not already) and hold Envoy's exit until it completes. If a
    /// drain already completed (e.g. a preStop `/drain`), the exit is released at once.
    ///
    /// Like [`Engine::evaluate`], returns the release to call once the engine is no longer
    /// borrowed (Envoy may tear the extension down from inside it).
    #[must_use]
    pub fn on_shutdown(
        &mut self,
        host: &impl EngineHost,
        release: ShutdownRelease,
    ) -> Option<ShutdownRelease> {
        log::info!(
            "graceful_drain: SIGTERM received; holding Envoy's exit until the drain completes"
        );
        Shared::global().start_drain(Trigger::Sigterm);
        // Should Envoy ask twice, release both holds when the drain completes.
        self.pending_shutdown = Some(match self.pending_shutdown.take() {
            None => release,
            Some(earlier) => Box::new(move || {
                earlier();
                release();
            }),
        });
        self.evaluate(host)
    }

    /// Envoy's own drain (`POST /drain_listeners`) started.
    #[must_use]
    pub fn on_envoy_drain_started(&mut self, host: &impl EngineHost) -> Option<ShutdownRelease> {
        Shared::global().start_drain(Trigger::DrainListeners);
        self.evaluate(host)
    }

    /// Admin endpoints registered by the extension. Returns (status, body) and, as
    /// [`Engine::evaluate`], a shutdown release the caller must call.
    pub fn on_admin(
        &mut self,
        host: &impl EngineHost,
        method: &[u8],
        path: &[u8],
    ) -> (u32, String, Option<ShutdownRelease>) {
        let path = path.split(|&b| b == b'?').next().unwrap_or(b"");
        let shared = Shared::global();
        match (method, path) {
            (b"POST", ADMIN_DRAIN_PATH) => {
                // Idempotent: a second call reports the drain already under way.
                if shared.start_drain(Trigger::Admin) == StartResult::NoEngine {
                    return (503, "graceful_drain engine not installed\n".into(), None);
                }
                let release = self.evaluate(host);
                (200, shared.status(Instant::now()).to_json() + "\n", release)
            }
            (b"GET", ADMIN_STATUS_PATH) => {
                (200, shared.status(Instant::now()).to_json() + "\n", None)
            }
            (_, ADMIN_DRAIN_PATH) => (
                405,
                "use POST /graceful_drain to start a drain\n".into(),
                None,
            ),
            (_, ADMIN_STATUS_PATH) => (405, "use GET /graceful_drain/status\n".into(), None),
            _ => (404, "unknown graceful_drain admin path\n".into(), None),
        }
    }

    /// Evaluate the drain now and apply the decision. Called on kicks, timer expiry and events.
    /// Returns Envoy's shutdown release when the drain is complete and SIGTERM is waiting on it:
    /// the caller must call it after dropping its borrow of the engine.
    #[must_use]
    pub fn evaluate(&mut self, host: &impl EngineHost) -> Option<ShutdownRelease> {
        let shared = Shared::global();
        let now = Instant::now();
        let envoy = if shared.is_draining() {
            self.observe_envoy(host, now)
        } else {
            None
        };
        let decision = shared.poll(now, envoy);
        let phase = shared.phase();
        if !self.start_reported {
            if let Phase::Draining { trigger, .. } | Phase::Drained { trigger, .. } = phase {
                self.start_reported = true;
                host.fail_health_checks();
                host.set_draining_gauge(1);
                host.count(EngineMetric::DrainStarted);
                let s = shared.settings().unwrap_or_default();
                log::info!(
                    "graceful_drain: drain started (trigger={}, active_requests={}, \
                     envoy_active_requests={}, min_drain_duration={:?}, quiet_period={:?}, \
                     drain_timeout={:?})",
                    trigger.as_str(),
                    shared.active_requests(),
                    envoy.map_or("unknown".to_string(), |e| e.active_requests.to_string()),
                    s.min_drain_duration,
                    s.quiet_period,
                    s.drain_timeout
                );
            }
        }
        match decision {
            Decision::Idle | Decision::AlreadyDrained(_) => {}
            Decision::PollAt(at) => {
                // Envoy's counters are only seen when polled: poll them often enough that a
                // request on a listener without the filter is noticed within the recheck time.
                let mut delay = at.saturating_duration_since(now);
                if envoy.is_some() {
                    delay = delay.min(IN_FLIGHT_RECHECK);
                }
                host.arm_timer(delay)
            }
            Decision::Completed(outcome) => {
                if !self.completion_reported {
                    self.completion_reported = true;
                    host.set_draining_gauge(0);
                    host.count(EngineMetric::DrainCompleted);
                    let st = shared.status(now);
                    if outcome.timed_out {
                        host.count(EngineMetric::DrainTimedOut);
                        log::warn!(
                            "graceful_drain: drain timed out after {} ms: {} requests served during \
                             it, {} requests still in flight are cut",
                            outcome.duration.as_millis(),
                            st.requests_served_while_draining,
                            outcome.requests_cut
                        );
                    } else {
                        log::info!(
                            "graceful_drain: drain completed in {} ms: {} requests served during \
                             it, 0 requests cut; connections sent away: http1={} http2={}; \
                             idle connections told: http1={} http2={}",
                            outcome.duration.as_millis(),
                            st.requests_served_while_draining,
                            st.connections_sent_away.http1,
                            st.connections_sent_away.http2,
                            st.idle_connections_told.http1, // issue-14
                            st.idle_connections_told.http2
                        );
                    }
                }
            }
        }
        if matches!(shared.phase(), Phase::Drained { .. }) && self.pending_shutdown.is_some() {
            log::info!("graceful_drain: releasing Envoy's exit");
            return self.pending_shutdown.take();
        }
        None
    }
}

impl Engine {
    /// Envoy's stats as an observation: its in-flight gauge, and the last time its request
    /// counter moved (requests that started, on any listener, since the previous poll).
    fn observe_envoy(&mut self, host: &impl EngineHost, now: Instant) -> Option<Observation> {
        let s = host.envoy_request_stats()?;
        if self.last_total.is_some_and(|t| t != s.total) {
            self.last_change = Some(now);
        }
        self.last_total = Some(s.total);
        Some(Observation {
            active_requests: s.active,
            last_request_start: self.last_change,
        })
    }
}

pub const ADMIN_DRAIN_PATH: &[u8] = b"/graceful_drain";
pub const ADMIN_STATUS_PATH: &[u8] = b"/graceful_drain/status";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DrainSettings;
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    #[derive(Default)]
    struct FakeHost {
        timers: RefCell<Vec<Duration>>,
        draining: Cell<Option<u64>>,
        metrics: RefCell<Vec<EngineMetric>>,
        failed_health_checks: Cell<u32>,
    }

    impl EngineHost for FakeHost {
        fn arm_timer(&self, delay: Duration) {
            self.timers.borrow_mut().push(delay);
        }
        fn set_draining_gauge(&self, value: u64) {
            self.draining.set(Some(value));
        }
        fn count(&self, metric: EngineMetric) {
            self.metrics.borrow_mut().push(metric);
        }
        fn envoy_request_stats(&self) -> Option<EnvoyRequestStats> {
            Some(EnvoyRequestStats {
                active: 0,
                total: 7,
            })
        }
        fn fail_health_checks(&self) {
            self.failed_health_checks
                .set(self.failed_health_checks.get() + 1);
        }
    }

    /// The only unit test that touches the process-wide state (the engine works on it).
    #[test]
    fn sigterm_holds_then_releases_and_a_later_sigterm_releases_at_once() {
        let shared = Shared::global();
        assert!(shared.install_engine(DrainSettings {
            min_drain_duration: Duration::from_millis(50),
            quiet_period: Duration::ZERO,
            drain_timeout: Duration::from_secs(5),
        }));
        let host = FakeHost::default();
        let mut engine = Engine::default();
        let released = Rc::new(Cell::new(0));
        let r = released.clone();
        let pending = engine.on_shutdown(&host, Box::new(move || r.set(r.get() + 1)));
        assert!(pending.is_none(), "held until min_drain_duration");
        assert_eq!(host.draining.get(), Some(1));
        assert_eq!(host.failed_health_checks.get(), 1);
        let delay = *host.timers.borrow().last().expect("timer armed");
        assert!(delay <= IN_FLIGHT_RECHECK, "{delay:?}");
        // Timer ticks until the minimum has passed.
        let deadline = Instant::now() + Duration::from_secs(2);
        let release = loop {
            if let Some(r) = engine.evaluate(&host) {
                break r;
            }
            assert!(Instant::now() < deadline, "drain never completed");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            released.get(),
            0,
            "the engine returns the release, the caller calls it"
        );
        release();
        assert_eq!(released.get(), 1);
        assert_eq!(host.draining.get(), Some(0));
        assert_eq!(
            *host.metrics.borrow(),
            [EngineMetric::DrainStarted, EngineMetric::DrainCompleted]
        );
        // SIGTERM after a completed drain: released at once; health checks not failed again.
        let r = released.clone();
        let again = engine.on_shutdown(&host, Box::new(move || r.set(r.get() + 1)));
        again.expect("released at once")();
        assert_eq!(released.get(), 2);
        assert_eq!(host.failed_health_checks.get(), 1);
    }
}
