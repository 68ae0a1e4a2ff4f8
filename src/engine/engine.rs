//! The drain engine that runs on Envoy's main thread. It starts the drain on SIGTERM (holding
//! Envoy's exit), on Envoy's own `/drain_listeners` and on its admin endpoint, evaluates the drain
//! state machine when kicked or when its timer fires, and hands Envoy's exit back to be released
//! when the drain completes. Thin: every decision comes from [`crate::engine::drain`].
//!
//! Its caller is the bootstrap extension (`crate::extension`, a layer above). The engine reaches
//! Envoy only through the `host/` traits it is passed ([`Hosts`]: the extension's timer and
//! gauges, the streams' wakers); what the extension owns (the module's threads, the admin calls,
//! the network filters' schedulers, the stats scanner) goes in as data (Envoy's stats as an
//! [`EnvoyView`]) and comes back as data ([`Asks`]), which the extension then does: no call
//! goes from here up to the extension.

use crate::engine::drain::{Decision, Observation, Phase, Trigger, IN_FLIGHT_RECHECK};
use crate::engine::shared::{EnvoyObservation, Gauge, Hosts, Shared, Stat};
use crate::envoy_stats::scan::EnvoyView;
use crate::host::extension::ShutdownRelease;
use std::time::Instant;

/// What an evaluation asks of its caller, the bootstrap extension, which owns what the engine
/// does not (the module's threads, the admin calls, the network filters' schedulers). The
/// caller does them in this order, then gives the release.
#[must_use]
#[derive(Default)]
pub struct Asks {
    /// Tell the network filters' connections that the drain started (idle ones told now, the
    /// grace and moves threads started; `crate::connections::Connections::drain_started`).
    /// Once per drain, at its first evaluation.
    pub tell_connections: bool,
    /// Make Envoy fail its health checks (admin `/healthcheck/fail`), which makes every listener
    /// send connections away with their next response. Once, when the module's readiness fails.
    pub fail_health_checks: bool,
    /// Envoy's exit, when the drain is complete and SIGTERM is waiting on it: the caller must
    /// give it after dropping its borrow of the engine (Envoy may tear the extension down from
    /// inside it).
    pub release: Option<ShutdownRelease>,
}

pub struct Engine {
    /// The level of its lifecycle lines (`lifecycle_log_level`): the shutdown hold, the drain's
    /// start and completion, the exit's release.
    lifecycle: log::Level,
    start_reported: bool,
    completion_reported: bool,
    pending_shutdown: Option<ShutdownRelease>,
    /// Envoy's request counter (less requests that are not work) at the previous poll, and when
    /// it was last seen to move.
    last_total: Option<i64>,
    /// Envoy's health checks are still to be failed (at readiness failure).
    health_to_fail: bool,
    last_change: Option<Instant>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new(log::Level::Info)
    }
}

impl Engine {
    pub fn new(lifecycle: log::Level) -> Self {
        Engine {
            lifecycle,
            start_reported: false,
            completion_reported: false,
            pending_shutdown: None,
            last_total: None,
            health_to_fail: false,
            last_change: None,
        }
    }

    /// SIGTERM: hold Envoy's exit with `release` until the drain completes, and start the drain
    /// (if not already). The caller evaluates next ([`Engine::evaluate`]): if a drain already
    /// completed (e.g. a preStop `/drain`), that evaluation returns the release at once.
    pub fn on_shutdown(&mut self, hosts: Hosts<'_>, shared: &Shared, release: ShutdownRelease) {
        // Envoy's shutdown hook does not say why: SIGTERM, SIGINT and admin /quitquitquit all
        // come here (trigger `sigterm`).
        log::log!(
            self.lifecycle,
            "graceful_drain: Envoy is shutting down (SIGTERM, SIGINT or /quitquitquit); holding \
             its exit until the drain completes"
        );
        // Held first, so a failure below still finds it here (and the hook releases it).
        // Should Envoy ask twice, release both holds when the drain completes.
        self.pending_shutdown = Some(match self.pending_shutdown.take() {
            None => release,
            Some(earlier) => earlier.and(release),
        });
        #[cfg(feature = "panic-test")]
        if crate::runtime::faults::active("shutdown_panic") {
            panic!("test fault: shutdown_panic");
        }
        shared.start_drain(hosts, Trigger::Sigterm);
    }

    /// Take the pending shutdown hold (to release it when the engine failed).
    pub fn take_pending_shutdown(&mut self) -> Option<ShutdownRelease> {
        self.pending_shutdown.take()
    }

    /// Envoy's own drain (`POST /drain_listeners`, or a hot restart handing over) started. The
    /// caller evaluates next.
    pub fn on_envoy_drain_started(&mut self, hosts: Hosts<'_>, shared: &Shared) {
        shared.start_drain(hosts, Trigger::DrainListeners);
    }

    /// Evaluate the drain now and apply the decision. Called on kicks, timer expiry and events.
    /// `envoy` is what Envoy's stats say, read by the caller while a drain is under way
    /// ([`EnvoyView::Unused`] otherwise). Returns what the caller is to do ([`Asks`]), Envoy's
    /// shutdown release among it when the drain is complete and SIGTERM is waiting on it.
    pub fn evaluate(&mut self, hosts: Hosts<'_>, shared: &Shared, envoy: EnvoyView) -> Asks {
        let mut asks = Asks::default();
        let now = shared.clock().now();
        let envoy = if shared.is_draining() {
            self.observe_envoy(envoy, now)
        } else {
            EnvoyObservation::Unused
        };
        let decision = shared.poll(hosts, envoy);
        let phase = shared.phase();
        if !self.start_reported {
            if let Phase::Draining { trigger, .. } | Phase::Drained { trigger, .. } = phase {
                self.start_reported = true;
                // Envoy's own drain (drain_listeners, hot restart) already closes connections on
                // every listener; and on a hot restart the admin address belongs to the new
                // process, whose health must not be failed by the old one.
                self.health_to_fail = trigger != Trigger::DrainListeners;
                hosts.extension.set_gauge(Gauge::Draining, 1);
                asks.tell_connections = true;
                shared.count(hosts.extension, Stat::DrainsStarted);
                let s = shared.settings().unwrap_or_default();
                log::log!(
                    self.lifecycle,
                    "graceful_drain: drain started (trigger={}, active_requests={}, \
                     envoy_active_requests={}, min_drain_duration={:?}, quiet_period={:?}, \
                     drain_timeout={:?})",
                    trigger.as_str(),
                    shared.counts().active,
                    match envoy {
                        EnvoyObservation::Seen(e) => e.active_requests.to_string(),
                        _ => "unknown".to_string(),
                    },
                    s.min_drain_duration,
                    s.quiet_period,
                    s.drain_timeout
                );
            }
        }
        // Envoy's health follows the module's readiness (after `readiness_failure_delay`), so
        // the two never disagree.
        if self.health_to_fail && !shared.is_ready() {
            self.health_to_fail = false;
            asks.fail_health_checks = true;
        }
        match decision {
            Decision::Idle | Decision::AlreadyDrained(_) => {}
            Decision::PollAt(at) => {
                // Envoy's counters are only seen when polled: poll them often enough that a
                // request on a listener without the filter is noticed within the recheck time.
                let mut delay = at.saturating_duration_since(now);
                if envoy != EnvoyObservation::Unused {
                    delay = delay.min(IN_FLIGHT_RECHECK);
                }
                if self.health_to_fail {
                    if let Some(at) = shared.readiness_fails_at() {
                        delay = delay.min(at.saturating_duration_since(now));
                    }
                }
                hosts.extension.arm_timer(delay)
            }
            Decision::Completed(outcome) => {
                if !self.completion_reported {
                    self.completion_reported = true;
                    hosts.extension.set_gauge(Gauge::Draining, 0);
                    shared.count(hosts.extension, Stat::DrainsCompleted);
                    let (ws_cut, sse_cut) = shared.connections().long_lived().cut_at_completion();
                    for _ in 0..ws_cut {
                        shared.count(hosts.extension, Stat::WebsocketsCut);
                    }
                    for _ in 0..sse_cut {
                        shared.count(hosts.extension, Stat::SseResponsesCut);
                    }
                    let st = shared.status();
                    let ll = st.long_lived_streams;
                    let long_lived = format!(
                        "long-lived streams moved: websocket {}, sse {}; cut: websocket {}, sse {}; \
                         websocket messages dropped after the Close: {}; grpc streams moved: {}, \
                         ended in the last part of the timeout: {}; http/2 sse streams moved: {}",
                        ll.websocket.moved,
                        ll.sse.moved,
                        ll.websocket.cut,
                        ll.sse.cut,
                        ll.websocket_messages_dropped,
                        ll.grpc.moved,
                        ll.grpc.ended_at_timeout,
                        ll.h2_sse_moved
                    );
                    if outcome.timed_out {
                        shared.count(hosts.extension, Stat::DrainsTimedOut);
                        log::warn!(
                            "graceful_drain: drain timed out after {} ms: requests served during \
                             it: {}, requests still in flight and cut: {}; {long_lived}",
                            outcome.duration.as_millis(),
                            st.requests_served_while_draining,
                            outcome.requests_cut
                        );
                    } else {
                        log::log!(
                            self.lifecycle,
                            "graceful_drain: drain completed in {} ms: requests served during it: \
                             {}, requests cut: 0; connections sent away: http1={} http2={} \
                             other={}; idle connections told: http1={} http2={}; {long_lived}",
                            outcome.duration.as_millis(),
                            st.requests_served_while_draining,
                            st.connections_sent_away.http1,
                            st.connections_sent_away.http2,
                            st.connections_sent_away.other,
                            st.idle_connections_told.http1, // issue-14
                            st.idle_connections_told.http2
                        );
                    }
                }
            }
        }
        if matches!(shared.phase(), Phase::Drained { .. }) && self.pending_shutdown.is_some() {
            log::log!(self.lifecycle, "graceful_drain: releasing Envoy's exit");
            asks.release = self.pending_shutdown.take();
        }
        asks
    }
}

impl Engine {
    /// Envoy's stats as an observation: its in-flight gauge, and the last time its request
    /// counter moved (requests that started, on any listener, since the previous poll). The
    /// caller's view takes out what is not work (health checks, control-listener requests such as a waiting
    /// `/drain`), whatever the listeners are called.
    fn observe_envoy(&mut self, envoy: EnvoyView, now: Instant) -> EnvoyObservation {
        envoy.map(|s| {
            let total = s.total as i64;
            // Only an increase is a request start: the two sides are read at slightly different
            // moments, so the difference may dip when a not-work request is seen by us first.
            if self.last_total.is_some_and(|t| total > t) {
                self.last_change = Some(now);
            }
            self.last_total = Some(total);
            Observation {
                active_requests: s.active,
                last_request_start: self.last_change,
            }
        })
    }
}

pub const ADMIN_DRAIN_PATH: &[u8] = b"/graceful_drain";
pub const ADMIN_STATUS_PATH: &[u8] = b"/graceful_drain/status";

/// What a request to the extension's admin endpoints asks.
#[derive(Debug, PartialEq, Eq)]
pub enum AdminRequest {
    /// `GET /graceful_drain/status`: the status report.
    Status,
    /// `POST /graceful_drain`: start a drain (idempotent), evaluate it, answer the status.
    StartDrain,
    /// Anything else: this status and body.
    Refused(u32, &'static str),
}

impl AdminRequest {
    /// The request's path, without its query.
    pub fn of(method: &[u8], path: &[u8]) -> AdminRequest {
        let path = path.split(|&b| b == b'?').next().unwrap_or(b"");
        match (method, path) {
            (b"POST", ADMIN_DRAIN_PATH) => AdminRequest::StartDrain,
            (b"GET", ADMIN_STATUS_PATH) => AdminRequest::Status,
            (_, ADMIN_DRAIN_PATH) => {
                AdminRequest::Refused(405, "use POST /graceful_drain to start a drain\n")
            }
            (_, ADMIN_STATUS_PATH) => {
                AdminRequest::Refused(405, "use GET /graceful_drain/status\n")
            }
            _ => AdminRequest::Refused(404, "unknown graceful_drain admin path\n"),
        }
    }
}

#[cfg(test)]
mod tests;
