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

/// One field of the status JSON as the reference (docs/reference.md, `make reference`) lists it:
/// its path (`outcome.timed_out`), its JSON type, and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldDoc {
    pub path: &'static str,
    /// `string`, `integer`, `boolean`, `object`; `... or null` where it can be `null`.
    pub kind: &'static str,
    pub meaning: &'static str,
}

const fn field(path: &'static str, kind: &'static str, meaning: &'static str) -> FieldDoc {
    FieldDoc {
        path,
        kind,
        meaning,
    }
}

/// Every field of [`Status`] as it serialises, objects and their members, in its order.
/// tests/reference.rs holds it to a serialised [`Status`] path by path and type by type.
pub const STATUS_FIELDS: &[FieldDoc] = &[
    field("module_version", "string", "The module's version."),
    field("envoy", "string or null", "The Envoy minor the module found itself in (`1.38`, `1.39`, `1.40`)."),
    field("envoy_release", "string or null", "The release Envoy's binary names (`1.40.0`); `null` when it cannot be read."),
    field("envoy_untested", "boolean", "The Envoy is newer than every tested release, or its release cannot be told."),
    field("surface", "string", "`full`, or `reduced`: on an untested Envoy the data path's filters step back."),
    field("state", "string", "`serving`, `draining` or `drained`."),
    field("ready", "boolean", "What `/ready` answers now (`false`: 503)."),
    field("trigger", "string or null", "What started the drain: `sigterm` (also SIGINT, `/quitquitquit`), `drain_endpoint`, `admin`, `drain_listeners`."),
    field("active_requests", "integer", "Requests in flight by the module's own count (0 in bootstrap-only mode). Negative would mean broken accounting."),
    field("accounting_error", "boolean", "The count went negative once: the drain no longer trusts it and waits for `drain_timeout`."),
    field("envoy_active_requests", "integer or null", "Envoy's own in-flight gauges summed (not-work requests taken out), as the drain last read them; `null` before a drain."),
    field("in_flight_by_age", "object", "The module's in-flight requests by age."),
    field("in_flight_by_age.under_1s", "integer", "Younger than 1 s."),
    field("in_flight_by_age.1s_to_10s", "integer", "1 s to 10 s old."),
    field("in_flight_by_age.over_10s", "integer", "Older than 10 s."),
    field("drain_elapsed_ms", "integer or null", "Milliseconds since the drain started; `null` while serving."),
    field("since_last_request_start_ms", "integer or null", "Milliseconds since the last request started; `null` before any."),
    field("oldest_request_age_ms", "integer or null", "Age of the oldest request in flight; `null` when none."),
    field("requests_served_while_draining", "integer", "Requests that started during the drain."),
    field("connections_sent_away", "object", "Connections told to go away while draining, by protocol."),
    field("connections_sent_away.http1", "integer", "HTTP/1.1, told `connection: close`."),
    field("connections_sent_away.http2", "integer", "HTTP/2, sent GOAWAY."),
    field("connections_sent_away.other", "integer", "Other protocols (HTTP/3)."),
    field("module_errors", "integer", "Failures contained on the data path or a module thread; each request went through."),
    field("admin_address_check", "string", "What the start-time check of `admin_address` found: `unset`, `checking`, `recognised`, `not_answering`, `not_admin`."),
    field("health_checks_seen", "integer", "Health checks recognised on data listeners (answered, never work)."),
    field("not_work_requests", "integer", "Requests not counted as work: those health checks plus control-listener requests."),
    field("request_table", "object", "The in-flight table's size; grows with peak concurrency, never shrinks."),
    field("request_table.workers", "integer", "Worker threads with a row."),
    field("request_table.slots", "integer", "Slots, all rows together."),
    field("request_table.bytes", "integer", "Memory the table holds."),
    field("request_table.own_wakers", "integer", "Requests in flight with a scheduler of their own."),
    field("idle_connections_told", "object", "Idle keep-alive connections the network filter told at the drain start."),
    field("idle_connections_told.http1", "integer", "HTTP/1.1, closed."),
    field("idle_connections_told.http2", "integer", "HTTP/2, sent GOAWAY and closed after `idle_close_grace`."),
    field("long_lived_streams", "object", "Long-lived streams at the drain; connection mode only, zeros elsewhere."),
    field("long_lived_streams.websocket", "object", "WebSockets."),
    field("long_lived_streams.websocket.moved", "integer", "Sent Close(1001), then their connection closed."),
    field("long_lived_streams.websocket.cut", "integer", "Still open when the drain completed or timed out."),
    field("long_lived_streams.sse", "object", "HTTP/1.1 SSE responses."),
    field("long_lived_streams.sse.moved", "integer", "Ended with their last chunk at an event boundary, then closed."),
    field("long_lived_streams.sse.cut", "integer", "Still open when the drain completed or timed out."),
    field("long_lived_streams.websocket_messages_dropped", "integer", "Whole messages an upstream sent after the module's Close(1001): dropped."),
    field("long_lived_streams.grpc", "object", "HTTP/2 gRPC streams (connection mode, `move_long_lived_streams`)."),
    field("long_lived_streams.grpc.moved", "integer", "Under `grpc_resumable_prefixes`: ended with `grpc-status: 14` at their move time, upstream reset."),
    field("long_lived_streams.grpc.ended_at_timeout", "integer", "Still open in the last part of `drain_timeout`: ended the same way."),
    field("long_lived_streams.h2_sse_moved", "integer", "HTTP/2 SSE responses ended at an event boundary."),
    field("outcome", "object or null", "How the drain ended; `null` until it has."),
    field("outcome.timed_out", "boolean", "`drain_timeout` ended it (requests in flight, or new ones never stopped for `quiet_period`)."),
    field("outcome.requests_cut", "integer", "Requests still in flight at the end (cut by the exit)."),
    field("outcome.duration_ms", "integer", "How long the drain took."),
    field("settings", "object or null", "The drain settings in force; `null` without the bootstrap extension."),
    field("settings.min_drain_duration", "string", "`min_drain_duration`."),
    field("settings.quiet_period", "string", "`quiet_period`."),
    field("settings.drain_timeout", "string", "`drain_timeout`."),
];
