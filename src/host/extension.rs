//! The bootstrap extension as the module reaches it: its timer, the hop to Envoy's main thread
//! and the module's stats ([`ExtensionHost`], one process-wide object), and the completion of its
//! shutdown hook ([`ShutdownCompletion`], Envoy's permission to exit). Implemented by
//! `ffi::bootstrap`; faked in tests. Plain types only. (Envoy's stats store behind the extension
//! is [`super::stats::StatsSource`].)

use super::stream::Protocol;
use std::time::Duration;

/// `config_scheduled` event: evaluate the drain now.
pub const EVENT_KICK: u64 = 1;
/// `config_scheduled` event: the admin_address check finished (its gauge is set on the main
/// thread).
pub const EVENT_ADMIN_CHECKED: u64 = 2;

/// Where the module's own Envoy counters move ([`Stat`]): passed into the call that counts, as
/// Envoy's Rust SDK passes its handle into each callback (`envoy_filter.increment_counter(..)`),
/// never kept in the shared state. Every Envoy object a hook or a module thread has gives it
/// (the connection's [`super::connection::ConnectionHost`], the stream's
/// [`super::stream::StreamHost`], the extension's [`ExtensionHost`]); each counts on the same
/// counters, the bootstrap extension's (`src/ffi/stats.rs`). Generic on the request path, as the
/// hosts it comes with.
pub trait StatsHost {
    /// Add one to a counter of the module. Any thread.
    fn count(&self, stat: Stat);
}

impl<T: StatsHost + ?Sized> StatsHost for &T {
    fn count(&self, stat: Stat) {
        (**self).count(stat)
    }
}

/// The bootstrap extension's side of Envoy. One per process, alive for the process (`&'static`):
/// before the extension's config exists and after its destroy, every call does nothing. Its
/// [`StatsHost`] counts from any thread.
pub trait ExtensionHost: StatsHost + Sync {
    /// Run the extension's `config_scheduled` hook with `event` on Envoy's main thread. Any
    /// thread; refused (nothing happens) once the module's calls into Envoy are closed.
    fn to_main_thread(&self, event: u64);
    /// Ask the drain engine on the main thread to evaluate the drain now. Any thread.
    fn kick_engine(&self) {
        self.to_main_thread(EVENT_KICK)
    }
    /// (Re)arm the extension's timer. Main thread only, inside one of the extension's hooks;
    /// nothing if Envoy gave no timer (the fallback ticker runs then).
    fn arm_timer(&self, delay: Duration);
    /// Set a gauge of the module. Any thread.
    fn set_gauge(&self, gauge: Gauge, value: u64);
}

/// Envoy's permission to exit: the completion its shutdown hook hands the bootstrap extension
/// (`on_bootstrap_extension_shutdown`'s callback and its context, ENVOY_FACTS.md §5), passed in
/// with the hook as Envoy's SDK passes a handle. Wrapped in a [`ShutdownRelease`] (given exactly
/// once), which the drain engine holds as data until the drain completes and hands back to the
/// hook that gives it. Implemented by `ffi::bootstrap`, which closes the threads' gate before it
/// calls Envoy; faked in tests.
pub trait ShutdownCompletion {
    /// Let Envoy exit. Consumed: it can be given only once (a second call would be a double
    /// free in Envoy). Never from a destroy hook (ENVOY_FACTS.md §5).
    fn complete(self: Box<Self>);
}

/// Envoy's permission to exit (its [`ShutdownCompletion`]), given exactly once: by
/// [`ShutdownRelease::release`], or, if it is dropped unreleased (a panic unwinding through
/// whoever held it), by its drop, so Envoy is never left waiting for a callback that will not
/// come (ENVOY_FACTS.md §5: Envoy's main loop does not exit until it is called). Usually one
/// completion; two when Envoy asked twice ([`ShutdownRelease::and`]), given in order.
pub struct ShutdownRelease(Vec<Box<dyn ShutdownCompletion>>);

impl ShutdownRelease {
    pub fn new(completion: Box<dyn ShutdownCompletion>) -> Self {
        ShutdownRelease(vec![completion])
    }

    pub fn release(mut self) {
        self.give_all()
    }

    /// Give up the release without calling it (Envoy is destroying the extension: its
    /// completion must not be called from a destroy hook).
    pub fn disarm(mut self) {
        self.0.clear();
    }

    /// One release that gives both.
    pub(crate) fn and(mut self, mut other: ShutdownRelease) -> Self {
        self.0.append(&mut other.0);
        self
    }

    /// Each completion once, in order; one taken out before it is given, so a drop after a
    /// panic in it gives only the ones left.
    fn give_all(&mut self) {
        while !self.0.is_empty() {
            self.0.remove(0).complete();
        }
    }
}

impl Drop for ShutdownRelease {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            log::warn!("graceful_drain: Envoy's exit released early by an internal failure");
            self.give_all()
        }
    }
}

/// A counter the module reports through Envoy's stats, `<metrics_namespace>.<name>` (every one
/// defined by the bootstrap extension's config, so by one namespace whichever filters are
/// loaded). The status report's figures of the same names are counted by
/// [`crate::engine::shared::Shared::count`] at the same moment, through the caller's
/// [`StatsHost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    DrainsStarted,
    DrainsCompleted,
    DrainsTimedOut,
    /// A connection told to go away (GOAWAY or `connection: close`) while draining, once per
    /// connection whoever told it.
    SentAway(Protocol),
    /// A request that started during a drain.
    ServedWhileDraining,
    /// A failure of the module contained on the data path or on a module thread.
    ModuleErrors,
    /// An idle keep-alive connection told at the drain start (HTTP/1.1 closed, HTTP/2 GOAWAY).
    IdleTold(Protocol),
    /// A connection whose bytes the exchange tracker could not follow (connection mode).
    ConnectionsUntracked,
    /// A WebSocket sent Close(1001) at a drain and closed (connection mode).
    WebsocketsMoved,
    /// A WebSocket still open when the drain completed or timed out (cut by the exit).
    WebsocketsCut,
    /// A whole data message an upstream sent after the module's Close(1001) to its client:
    /// dropped, never written (RFC 6455 §5.5.1), counted at the connection's close.
    WebsocketMessagesDropped,
    /// A chunked SSE response ended with its last chunk at an event boundary at a drain, and its
    /// connection closed (connection mode).
    SseResponsesMoved,
    /// An SSE response still open when the drain completed or timed out (cut by the exit).
    SseResponsesCut,
    /// A connection whose HTTP/2 header blocks the module stopped decoding (HPACK: a decode
    /// error or a size limit); still followed, its streams counted, none told a health check.
    HpackDecodingStopped,
    /// A gRPC stream ended with `grpc-status: 14` at its move time, its upstream reset
    /// (HTTP/2, connection mode, `grpc_resumable_prefixes`).
    GrpcStreamsMoved,
    /// A gRPC stream still open in the last part of `drain_timeout`, ended the same way.
    GrpcStreamsEndedAtTimeout,
    /// An HTTP/2 SSE response (200 to a `GET`, no `content-encoding`) ended with END_STREAM at
    /// an event boundary at its move time, its upstream reset; its connection stays open
    /// (connection mode).
    H2SseResponsesMoved,
}

impl Stat {
    /// Every counter, in the order they are defined.
    pub const ALL: [Stat; 20] = [
        Stat::DrainsStarted,
        Stat::DrainsCompleted,
        Stat::DrainsTimedOut,
        Stat::SentAway(Protocol::Http1),
        Stat::SentAway(Protocol::Http2),
        Stat::SentAway(Protocol::Other),
        Stat::ServedWhileDraining,
        Stat::ModuleErrors,
        Stat::IdleTold(Protocol::Http1),
        Stat::IdleTold(Protocol::Http2),
        Stat::ConnectionsUntracked,
        Stat::WebsocketsMoved,
        Stat::WebsocketsCut,
        Stat::WebsocketMessagesDropped,
        Stat::SseResponsesMoved,
        Stat::SseResponsesCut,
        Stat::HpackDecodingStopped,
        Stat::GrpcStreamsMoved,
        Stat::GrpcStreamsEndedAtTimeout,
        Stat::H2SseResponsesMoved,
    ];

    /// Its name under the namespace (documented in docs/configuration.md; dashboards and alerts
    /// use them: k8s/monitoring/).
    pub fn name(self) -> &'static str {
        match self {
            Stat::DrainsStarted => "drains_started",
            Stat::DrainsCompleted => "drains_completed",
            Stat::DrainsTimedOut => "drains_timed_out",
            Stat::SentAway(Protocol::Http1) => "connections_sent_away_http1",
            Stat::SentAway(Protocol::Http2) => "connections_sent_away_http2",
            Stat::SentAway(Protocol::Other) => "connections_sent_away_other",
            Stat::ServedWhileDraining => "requests_served_while_draining",
            Stat::ModuleErrors => "module_errors",
            Stat::IdleTold(Protocol::Http1) => "idle_connections_told_http1",
            // Idle connections have no third protocol: the network filter tells HTTP/1.1 and
            // HTTP/2 ones only.
            Stat::IdleTold(_) => "idle_connections_told_http2",
            Stat::ConnectionsUntracked => "connections_untracked",
            Stat::WebsocketsMoved => "websockets_moved",
            Stat::WebsocketsCut => "websockets_cut",
            Stat::WebsocketMessagesDropped => "websocket_messages_dropped",
            Stat::SseResponsesMoved => "sse_responses_moved",
            Stat::SseResponsesCut => "sse_responses_cut",
            Stat::HpackDecodingStopped => "hpack_decoding_stopped",
            Stat::GrpcStreamsMoved => "grpc_streams_moved",
            Stat::GrpcStreamsEndedAtTimeout => "grpc_streams_ended_at_timeout",
            Stat::H2SseResponsesMoved => "h2_sse_responses_moved",
        }
    }
}

/// What the reference (docs/reference.md, written from these by `make reference`) says of a stat:
/// one entry per stat, from an exhaustive `match`, so a new stat cannot go undocumented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatDoc {
    /// What one unit is (`drains`, `connections`, `requests`, `0 or 1`).
    pub unit: &'static str,
    /// The modes in which it moves (docs/modes.md): `every mode`, or the ones named.
    pub modes: &'static str,
    /// What it counts or says, in at most 25 words.
    pub what: &'static str,
}

const fn doc(unit: &'static str, modes: &'static str, what: &'static str) -> StatDoc {
    StatDoc { unit, modes, what }
}

const EVERY: &str = "every mode";
const FILTERS: &str = "filter, connection";
const CONNECTION: &str = "connection";

impl Stat {
    /// Its line in the reference.
    pub fn doc(self) -> StatDoc {
        match self {
            Stat::DrainsStarted => doc("drains", EVERY, "Drains started (at most one per process)."),
            Stat::DrainsCompleted => doc(
                "drains",
                EVERY,
                "Drains completed, on time or at `drain_timeout`.",
            ),
            Stat::DrainsTimedOut => doc(
                "drains",
                EVERY,
                "Drains ended by `drain_timeout`: requests still in flight were cut, or new ones never \
                 stopped for `quiet_period`.",
            ),
            Stat::SentAway(Protocol::Http1) => doc(
                "connections",
                FILTERS,
                "HTTP/1.1 connections told `connection: close` while draining, once per connection.",
            ),
            Stat::SentAway(Protocol::Http2) => doc(
                "connections",
                FILTERS,
                "HTTP/2 connections sent GOAWAY while draining, once per connection.",
            ),
            Stat::SentAway(Protocol::Other) => doc(
                "connections",
                FILTERS,
                "Other (HTTP/3) connections told to go away while draining.",
            ),
            Stat::ServedWhileDraining => doc(
                "requests",
                FILTERS,
                "Requests that started during the drain and were served.",
            ),
            Stat::ModuleErrors => doc(
                "errors",
                EVERY,
                "Failures of the module contained on the data path or a module thread; the request \
                 went through. Each is also logged.",
            ),
            Stat::IdleTold(Protocol::Http1) => doc(
                "connections",
                FILTERS,
                "Idle HTTP/1.1 keep-alive connections closed by the network filter at the drain start.",
            ),
            Stat::IdleTold(_) => doc(
                "connections",
                FILTERS,
                "Idle HTTP/2 connections sent GOAWAY by the network filter at the drain start.",
            ),
            Stat::ConnectionsUntracked => doc(
                "connections",
                CONNECTION,
                "Connections whose bytes the tracker could not follow; their requests pass untouched \
                 and are counted from Envoy's stats.",
            ),
            Stat::WebsocketsMoved => doc(
                "streams",
                CONNECTION,
                "WebSockets sent Close(1001) at a drain whose connection then closed.",
            ),
            Stat::WebsocketsCut => doc(
                "streams",
                CONNECTION,
                "WebSockets still open when the drain completed or timed out: cut by the exit.",
            ),
            Stat::WebsocketMessagesDropped => doc(
                "messages",
                CONNECTION,
                "Whole messages an upstream sent after the module's Close(1001) to its client: \
                 dropped, never written.",
            ),
            Stat::SseResponsesMoved => doc(
                "streams",
                CONNECTION,
                "SSE responses ended with their last chunk at an event boundary at a drain, then closed.",
            ),
            Stat::SseResponsesCut => doc(
                "streams",
                CONNECTION,
                "SSE responses still open when the drain completed or timed out: cut by the exit.",
            ),
            Stat::HpackDecodingStopped => doc(
                "connections",
                CONNECTION,
                "HTTP/2 connections whose header blocks the module stopped decoding (a decode error \
                 or size limit): their streams count as requests.",
            ),
            Stat::GrpcStreamsMoved => doc(
                "streams",
                CONNECTION,
                "gRPC streams under `grpc_resumable_prefixes` ended with `grpc-status: 14` at their \
                 move time, upstream reset.",
            ),
            Stat::GrpcStreamsEndedAtTimeout => doc(
                "streams",
                CONNECTION,
                "gRPC streams still open in the last part of `drain_timeout`, ended with \
                 `grpc-status: 14` at a message boundary.",
            ),
            Stat::H2SseResponsesMoved => doc(
                "streams",
                CONNECTION,
                "HTTP/2 SSE responses ended at an event boundary, their connection kept.",
            ),
        }
    }
}

/// A gauge the module reports through Envoy's stats (as [`Stat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gauge {
    /// 1 from the drain's start.
    Draining,
    /// 1 once the start-time check recognised Envoy's admin at `admin_address`.
    AdminAddressOk,
    /// The in-flight table's count, set every [`crate::engine::gauges::GAUGE_PERIOD`].
    ActiveRequests,
}

impl Gauge {
    pub const ALL: [Gauge; 3] = [
        Gauge::Draining,
        Gauge::AdminAddressOk,
        Gauge::ActiveRequests,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Gauge::Draining => "draining",
            Gauge::AdminAddressOk => "admin_address_ok",
            Gauge::ActiveRequests => "active_requests",
        }
    }

    /// Its line in the reference.
    pub fn doc(self) -> StatDoc {
        match self {
            Gauge::Draining => doc("0 or 1", EVERY, "1 from the drain's start."),
            Gauge::AdminAddressOk => doc(
                "0 or 1",
                EVERY,
                "1 once the start-time check recognised Envoy's admin at `admin_address`. Alert on 0.",
            ),
            Gauge::ActiveRequests => doc(
                "requests",
                FILTERS,
                "The module's own in-flight count, set every 500 ms (0 in bootstrap-only mode).",
            ),
        }
    }
}

/// A gauge with labels, set once when the bootstrap extension's config is made (`ffi::bootstrap`
/// defines and sets them; Prometheus shows `envoy_graceful_drain_<name>{<labels>}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelledGauge {
    /// 1, labelled with the module's version and the Envoy minor it found.
    BuildInfo,
    /// 1 when the running Envoy is not one the module was tested with, else 0.
    EnvoyUntested,
}

impl LabelledGauge {
    pub const ALL: [LabelledGauge; 2] = [LabelledGauge::BuildInfo, LabelledGauge::EnvoyUntested];

    pub fn name(self) -> &'static str {
        match self {
            LabelledGauge::BuildInfo => "build_info",
            LabelledGauge::EnvoyUntested => "envoy_untested",
        }
    }

    pub fn labels(self) -> &'static [&'static str] {
        match self {
            LabelledGauge::BuildInfo => &["version", "envoy"],
            LabelledGauge::EnvoyUntested => &["release", "surface"],
        }
    }

    /// Its line in the reference.
    pub fn doc(self) -> StatDoc {
        match self {
            LabelledGauge::BuildInfo => doc(
                "always 1",
                EVERY,
                "The module's version and the Envoy minor it runs in, as labels.",
            ),
            LabelledGauge::EnvoyUntested => doc(
                "0 or 1",
                EVERY,
                "1 in an Envoy the module was not tested with; labels: its release and the surface \
                 (`full` or `reduced`).",
            ),
        }
    }
}
