//! The drain status as operators read it (`/drain/status`, the admin status, the `/drain`
//! answer): plain serialisable structs, filled by `Shared::status`.

use crate::config::{format_duration, DrainSettings};
use crate::engine::drain::Outcome;
use serde::Serialize;

/// Size of the in-flight table (it grows with the peak concurrency and never shrinks).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TableReport {
    pub workers: u64,
    pub slots: u64,
    pub bytes: u64,
    /// Requests in flight with a scheduler of their own; the others are reached through their
    /// connection's (the network filter in front).
    pub own_wakers: u64,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SentAway {
    pub http1: u64,
    pub http2: u64,
    pub other: u64,
}

/// In-flight requests by age (requests registered for wake-up; see the registry).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct AgeBuckets {
    pub under_1s: u64,
    #[serde(rename = "1s_to_10s")]
    pub from_1s_to_10s: u64,
    pub over_10s: u64,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct OutcomeReport {
    pub timed_out: bool,
    pub requests_cut: u64,
    pub duration_ms: u64,
}

impl From<Outcome> for OutcomeReport {
    fn from(o: Outcome) -> Self {
        OutcomeReport {
            timed_out: o.timed_out,
            requests_cut: o.requests_cut,
            duration_ms: o.duration.as_millis() as u64,
        }
    }
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SettingsReport {
    pub min_drain_duration: String,
    pub quiet_period: String,
    pub drain_timeout: String,
}

impl From<DrainSettings> for SettingsReport {
    fn from(s: DrainSettings) -> Self {
        SettingsReport {
            min_drain_duration: format_duration(s.min_drain_duration),
            quiet_period: format_duration(s.quiet_period),
            drain_timeout: format_duration(s.drain_timeout),
        }
    }
}

/// Drain status as reported to operators.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Status {
    /// The module's version (`compat::MODULE_VERSION`).
    pub module_version: &'static str,
    /// The Envoy minor the module found itself in (`1.40` also for a later one with 1.40's
    /// callbacks); `null` outside Envoy.
    pub envoy: Option<&'static str>,
    /// The Envoy release named in its binary (`1.40.0`, `1.39.1-dev`); `null` when it cannot be
    /// told (the binary unreadable or naming none) or outside Envoy.
    pub envoy_release: Option<String>,
    /// The running Envoy is not one the module was tested with: newer than every tested
    /// release, or its release cannot be told (`docs/compatibility.md`).
    pub envoy_untested: bool,
    /// What the module does there: `full`, or `reduced` (the data path's filters step back and
    /// pass every byte untouched; the drain hold, readiness and the control endpoints remain).
    pub surface: &'static str,
    pub state: &'static str,
    /// What the readiness endpoint answers now (see `readiness_failure_delay`).
    pub ready: bool,
    pub trigger: Option<&'static str>,
    /// Signed on purpose: a negative value would expose broken accounting instead of hiding it.
    pub active_requests: i64,
    /// The count went negative at some point: the drain no longer trusts it (waits for timeout).
    pub accounting_error: bool,
    /// Requests in flight by Envoy's own gauges (`http.*.downstream_rq_active` minus ignored
    /// prefixes), as the drain engine last saw them; covers listeners without the filter.
    /// `null` until a drain has polled them.
    pub envoy_active_requests: Option<u64>,
    pub in_flight_by_age: AgeBuckets,
    pub drain_elapsed_ms: Option<u64>,
    pub since_last_request_start_ms: Option<u64>,
    pub oldest_request_age_ms: Option<u64>,
    pub requests_served_while_draining: u64,
    pub connections_sent_away: SentAway,
    /// Failures contained on the data path (each request went through unharmed) and on the
    /// admin-call threads.
    pub module_errors: u64,
    /// Whether `admin_address` answered as Envoy's admin at start: `unset`, `checking`,
    /// `recognised`, `not_answering`, `not_admin`.
    pub admin_address_check: &'static str,
    /// Health checks recognised on data listeners (answered, never counted as work).
    pub health_checks_seen: u64,
    /// Requests not counted as work: those health checks plus control-listener requests.
    pub not_work_requests: u64,
    pub request_table: TableReport,
    /// Idle keep-alive connections told by the network filter at drain start (HTTP/1.1 closed,
    /// HTTP/2 sent GOAWAY); zeros without the network filter.
    pub idle_connections_told: crate::connections::IdleTold,
    /// Long-lived streams moved (clean end written, connection closed) and cut, by kind
    /// (`websocket`, `sse`); connection mode only, zeros elsewhere.
    pub long_lived_streams: crate::connections::LongLivedReport,
    pub outcome: Option<OutcomeReport>,
    /// `null` when the bootstrap extension (the drain clock) is not loaded.
    pub settings: Option<SettingsReport>,
}

impl Status {
    pub fn to_json(&self) -> String {
        // Serialising plain structs of numbers and static strings cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}
