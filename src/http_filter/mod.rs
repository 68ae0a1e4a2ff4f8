//! HTTP filter glue: per-request behaviour for the two roles ([`Stream`]), and the filter's life
//! around it ([`lifecycle`]: poisoning, deferred destroy, recycling). It asks the shared drain
//! state what to do and applies it through [`StreamHost`] (`crate::host::stream`), a small trait
//! the FFI layer implements over Envoy's stream callbacks (and the unit tests implement with a
//! fake). The shared state is
//! passed in on every call, never reached through a global. Must not decide drain timing (that is
//! the drain state machine's job).
//!
//! Data role, per request: count it, register a waker, and if a drain is under way, send the
//! connection away (GOAWAY / `connection: close`) from the scheduled hook, the only place where
//! Envoy lets that happen without aborting the stream.

use crate::config::{DrainToken, Role};
use crate::counting::Ticket;
use crate::engine::drain::Trigger;
use crate::engine::shared::{Shared, StartResult, Wait, Waker, EVENT_DRAIN_DONE, EVENT_GO_AWAY};
use crate::http_filter::control::{route, Route};
use std::sync::Arc;

pub mod control;
pub mod lifecycle;

pub use crate::host::stream::{StreamHost, StreamSink, INTERNAL_ERROR};

/// What a headers hook returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadersAction {
    Continue,
    /// A local reply was sent or is pending.
    Stop,
}

pub enum Stream {
    Data(DataStream),
    Control(ControlStream),
    /// A data-role stream where the data path steps back (the reduced surface of an untested
    /// Envoy: `Shared::data_path_stepped_back`): every hook lets the stream go on untouched,
    /// counts nothing and calls nothing of Envoy's.
    SteppedBack,
}

impl Stream {
    /// Called when Envoy creates the filter for a new stream. Nothing is counted yet: the request
    /// starts at its headers.
    pub fn new(role: Role, token: Option<&Arc<DrainToken>>) -> Stream {
        Self::with_surface(role, token, false)
    }

    /// As [`Stream::new`]; a data-role stream of a config loaded with the data path stepped back
    /// is [`Stream::SteppedBack`].
    pub fn with_surface(role: Role, token: Option<&Arc<DrainToken>>, stepped_back: bool) -> Stream {
        match role {
            Role::Data if stepped_back => Stream::SteppedBack,
            Role::Data => Stream::Data(DataStream::default()),
            Role::Control => Stream::Control(ControlStream {
                token: token.cloned(),
                ..ControlStream::default()
            }),
        }
    }

    /// `end_of_stream`: the request has no body (its headers end it).
    pub fn on_request_headers(
        &mut self,
        host: &impl StreamHost,
        shared: &Shared,
        end_of_stream: bool,
    ) -> HeadersAction {
        match self {
            Stream::Data(s) => s.on_request_headers(host, shared, end_of_stream),
            Stream::Control(s) => s.on_request_headers(host, shared),
            Stream::SteppedBack => HeadersAction::Continue,
        }
    }

    /// Whether request body and trailers must be held back (the request is paused while its
    /// connection is being sent away).
    pub fn is_paused(&self) -> bool {
        matches!(self, Stream::Data(DataStream { paused: true, .. }))
    }

    pub fn on_response_headers(&mut self, host: &impl StreamHost, shared: &Shared) {
        if let Stream::Data(s) = self {
            s.on_response_headers(host, shared)
        }
    }

    /// Test-only (`cross-check`): the response ended (end of stream through an encode hook).
    #[cfg(feature = "cross-check")]
    pub fn cross_check_response_done(&mut self) {
        if let Stream::Data(s) = self {
            if !s.xc_response_done {
                s.xc_response_done = true;
                s.conn.cross_check_response_done(true);
            }
        }
    }

    pub fn on_scheduled(&mut self, host: &impl StreamHost, shared: &Shared, event: u64) {
        match self {
            Stream::Data(s) => s.on_scheduled(host, shared, event),
            Stream::Control(s) => s.on_scheduled(host, shared, event),
            Stream::SteppedBack => {}
        }
    }

    /// The stream ended (complete, reset, aborted). Idempotent: Envoy may call it more than once.
    pub fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        match self {
            Stream::Data(s) => s.finish(sink, shared),
            Stream::Control(s) => s.finish(sink, shared),
            Stream::SteppedBack => {}
        }
    }
}

/// A data-plane request.
#[derive(Default)]
pub struct DataStream {
    /// A health check: answered as usual, but not work (not counted, holds no drain).
    health_check: bool,
    /// The stream counted against its connection (the network filter's idle tracking).
    conn: crate::connections::StreamMark,
    /// Present from the request headers until the stream ends.
    ticket: Option<Ticket>,
    waker: Option<Waker>,
    /// The waker was handed to the in-flight table (so a scan may hold it at the stream's end).
    waker_in_table: bool,
    sent_away: bool,
    paused: bool,
    /// Test-only: the response's end was seen (`Stream::cross_check_response_done`).
    #[cfg(feature = "cross-check")]
    xc_response_done: bool,
}

impl DataStream {
    fn on_request_headers(
        &mut self,
        host: &impl StreamHost,
        shared: &Shared,
        end_of_stream: bool,
    ) -> HeadersAction {
        #[cfg(feature = "panic-test")]
        if host
            .request_header("x-graceful-drain-test-panic")
            .as_deref()
            == Some(b"request")
        {
            panic!("test panic requested by x-graceful-drain-test-panic: request");
        }
        // Count the stream against its connection (the network filter's idle tracking).
        if !self.conn.is_set() {
            self.conn = shared.connections().stream_started(|| host.connection_id());
        }
        // Already counted, a health check, or a connection whose own tracker counts its
        // requests (connection mode on this listener, the HTTP filter in its chain too): it
        // tells its clients and its count is exact; a ticket here would count them twice.
        if self.ticket.is_some() || self.health_check || self.conn.counted_by_tracker() {
            return HeadersAction::Continue;
        }
        // Health checks are told from work only while a drain is under way, the only time it
        // matters: a header read costs ~460 instructions, a third of the module's cost per
        // request. While serving, a health check counts like any request; one in flight when a
        // drain starts holds it for its own few milliseconds, as any request would.
        if shared.is_draining() && is_health_check(host, shared) {
            self.health_check = true;
            shared.health_check_seen();
            return HeadersAction::Continue;
        }
        // With the network filter in front, the drain start reaches the request through its
        // connection's scheduler (`connections::Action::WakeStream`): no scheduler per request,
        // the largest part of the module's own cost per request. Without it, or once the drain
        // has started (the request is then woken at once, below), it makes one of its own.
        let by_connection = self.conn.reached_by_connection() && !shared.is_draining();
        self.waker = if by_connection {
            None
        } else {
            host.new_waker()
        };
        self.waker_in_table = self.waker.is_some();
        // Registers the request (with its waker, if any), then reads the drain flag: either this
        // request sees the drain, or the drain reaches it (its waker by the table's scan, under
        // the registry's fence protocol; otherwise through its connection, below).
        let (ticket, draining) = if by_connection {
            shared.request_started_on(&self.conn)
        } else {
            shared.request_started(self.waker)
        };
        self.ticket = Some(ticket);
        #[cfg(feature = "panic-test")]
        if host
            .request_header("x-graceful-drain-test-panic")
            .as_deref()
            == Some(b"after_start")
        {
            panic!("test panic requested by x-graceful-drain-test-panic: after_start");
        }
        if by_connection && !draining {
            // Either the connection's drain wake-up runs after this hook on this worker and finds
            // the stream attached, or it ran before, and then this hook saw the drain flag (set
            // before the wake-up was posted to the worker).
            self.conn.attach(host.stream_word());
        }
        if draining {
            shared.served_while_draining(host);
            if self.waker.is_none() {
                // The drain started between the two reads of the flag above.
                self.waker = host.new_waker();
            }
            // A request that arrives during the drain on a connection not yet sent away is held
            // for one dispatcher turn: the go-away must happen while the stream is still in
            // flight (a direct or fast response would otherwise complete first, and Envoy only
            // adds `connection: close` to responses encoded after the go-away). Only a request
            // without a body is held: holding one with a body would hand the body to the later
            // filters in one piece, which changes what they see (a buffer filter enforces its
            // limit only on what it buffers itself, so a body it answers 413 would reach the
            // upstream: tests/envoy_gateway.rs). Its body usually keeps such a stream in flight
            // past the wake-up; one answered within the turn that read it is not sent away by
            // this filter (Envoy's drain-close and the idle checks still close its connection).
            if let Some(w) = self.waker {
                // Paused only on a wake-up that will come: a refused one (the exit released, the
                // workers about to stop) would hold the request until the process ends.
                // (The wake is made with or without a body: `end_of_stream` is read after it.)
                if !shared.is_sent_away(host.connection_id())
                    && host.wake(w, EVENT_GO_AWAY)
                    && end_of_stream
                {
                    self.paused = true;
                    return HeadersAction::Stop;
                }
            }
        }
        HeadersAction::Continue
    }

    fn on_response_headers(&mut self, host: &impl StreamHost, shared: &Shared) {
        #[cfg(feature = "panic-test")]
        if host
            .request_header("x-graceful-drain-test-panic")
            .as_deref()
            == Some(b"response")
        {
            panic!("test panic requested by x-graceful-drain-test-panic: response");
        }
        // A request without a table slot (a thread beyond the worker limit) is not reached by the
        // drain's scan: send its connection away now that it has something to say.
        let unreachable = self.ticket.as_ref().is_some_and(|t| !t.has_slot());
        if unreachable && !self.sent_away && shared.is_draining() {
            if let Some(w) = self.waker {
                // Refused only once the exit was released: nothing is left to tell.
                let _ = host.wake(w, EVENT_GO_AWAY);
            }
        }
    }

    fn on_scheduled(&mut self, host: &impl StreamHost, shared: &Shared, event: u64) {
        // After the stream ended its connection may already be gone: leave it alone.
        if event != EVENT_GO_AWAY || self.ticket.is_none() {
            return;
        }
        if !self.sent_away {
            self.sent_away = true;
            if shared
                .send_away_once(host, host.connection_id(), || host.protocol())
                .is_some()
            {
                host.go_away_gracefully();
            }
        }
        if std::mem::replace(&mut self.paused, false) {
            host.continue_decoding();
        }
    }

    fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        if let Some(ticket) = self.ticket.take() {
            if ticket.is_reserved() {
                // Its connection's own slot: ended there (the connection is still held here).
                shared.request_ended_on(&self.conn, ticket);
            } else {
                self.end_in_table(ticket, shared);
            }
        }
        #[cfg(feature = "cross-check")]
        if std::mem::take(&mut self.xc_response_done) {
            self.conn.cross_check_response_done(false);
        }
        // The connection no longer hands this stream back (its filter may be freed after this).
        crate::connections::stream_ended(std::mem::take(&mut self.conn), || sink.now_nanos());
        if let Some(w) = self.waker.take() {
            sink.drop_waker(w);
        }
    }

    fn end_in_table(&mut self, ticket: Ticket, shared: &Shared) {
        // First out of the table (after this no scan can use the waker), then destroyed (by
        // `finish`); unless the scan using it is up this very stack: it is then left to the scan.
        let slotted = ticket.has_slot();
        if shared.request_ended(ticket).is_none() && slotted && self.waker_in_table {
            self.waker = None;
        }
    }
}

/// Whether the request is a health check by the configured policy
/// ([`crate::config::RequestPolicy::is_health_check`]: a configured path, and a configured
/// `User-Agent` prefix if any are set). Reads nothing when no path is configured, and the
/// `User-Agent` only for a health-check path. HTTP/2 too (gRPC's `/grpc.health.v1.Health/Check`
/// is a path like any other).
fn is_health_check(host: &impl StreamHost, shared: &Shared) -> bool {
    let policy = shared.policy();
    policy.has_health_checks()
        && host.with_request_header(":path", |p| policy.is_health_check_path(p))
        && (!policy.checks_user_agent()
            || host.with_request_header("user-agent", |ua| policy.is_health_check_user_agent(ua)))
}

/// A request on the control listener.
#[derive(Default)]
pub struct ControlStream {
    /// Counted as a control request (not work) from its headers until it ends.
    counted: bool,
    waiter: Option<u64>,
    waker: Option<Waker>,
    token: Option<Arc<DrainToken>>,
}

const TEXT: (&str, &str) = ("content-type", "text/plain; charset=utf-8");
const JSON: (&str, &str) = ("content-type", "application/json");

fn status_body(shared: &Shared) -> Vec<u8> {
    let mut b = shared.status().to_json().into_bytes();
    b.push(b'\n');
    b
}

fn error_body(reason: &str) -> Vec<u8> {
    let mut b = serde_json::json!({ "error": reason })
        .to_string()
        .into_bytes();
    b.push(b'\n');
    b
}

impl ControlStream {
    fn on_request_headers(&mut self, host: &impl StreamHost, shared: &Shared) -> HeadersAction {
        if !std::mem::replace(&mut self.counted, true) {
            shared.control_started();
        }
        let method = host.request_header(":method").unwrap_or_default();
        let path = host.request_header(":path").unwrap_or_default();
        match route(&method, &path) {
            Route::Ready => {
                if !shared.is_ready() {
                    self.respond(host, shared, 503, &[TEXT], b"draining\n")
                } else {
                    self.respond(host, shared, 200, &[TEXT], b"ready\n")
                }
            }
            Route::Status => self.respond(host, shared, 200, &[JSON], &status_body(shared)),
            Route::Drain { .. } if !self.authorized(host, shared) => {}
            Route::Drain { wait } => {
                match shared.start_drain(host.hosts(), Trigger::ControlEndpoint) {
                    StartResult::NoEngine => self.respond(
                        host,
                        shared,
                        503,
                        &[JSON],
                        &error_body(
                            "the graceful_drain bootstrap extension is not loaded: add it to \
                         bootstrap_extensions to enable draining",
                        ),
                    ),
                    StartResult::Started | StartResult::AlreadyStarted if !wait => {
                        self.respond(host, shared, 202, &[JSON], &status_body(shared))
                    }
                    StartResult::Started | StartResult::AlreadyStarted => {
                        let Some(waker) = host.new_waker() else {
                            self.respond(
                                host,
                                shared,
                                500,
                                &[JSON],
                                &error_body("cannot wait: no scheduler"),
                            );
                            return HeadersAction::Stop;
                        };
                        self.waker = Some(waker);
                        match shared.wait_for_completion(waker) {
                            Wait::AlreadyDone => {
                                self.respond(host, shared, 200, &[JSON], &status_body(shared))
                            }
                            Wait::Waiting(id) => self.waiter = Some(id),
                        }
                    }
                }
            }
            Route::MethodNotAllowed { allow } => self.respond(
                host,
                shared,
                405,
                &[TEXT, ("allow", allow)],
                format!("method not allowed; allowed: {allow}\n").as_bytes(),
            ),
            Route::BadRequest(reason) => {
                self.respond(host, shared, 400, &[TEXT], format!("{reason}\n").as_bytes())
            }
            Route::NotFound => self.respond(
                host,
                shared,
                404,
                &[TEXT],
                b"not found; control endpoints: /ready, /drain/status, /drain\n",
            ),
        }
        HeadersAction::Stop
    }

    /// With a drain token configured, `/drain` needs `Authorization: Bearer <token>`. Answers
    /// 401/403 itself when the check fails. The token is never echoed or logged.
    fn authorized(&mut self, host: &impl StreamHost, shared: &Shared) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        match host.request_header("authorization") {
            None => {
                self.respond(
                    host,
                    shared,
                    401,
                    &[
                        TEXT,
                        ("www-authenticate", "Bearer realm=\"graceful_drain\""),
                    ],
                    b"/drain requires Authorization: Bearer <token>\n",
                );
                false
            }
            Some(v) if token.accepts(&v) => true,
            Some(_) => {
                log::warn!("graceful_drain: /drain refused: wrong token");
                self.respond(host, shared, 403, &[TEXT], b"wrong drain token\n");
                false
            }
        }
    }

    fn on_scheduled(&mut self, host: &impl StreamHost, shared: &Shared, event: u64) {
        if event == EVENT_DRAIN_DONE && self.waiter.take().is_some() {
            self.respond(host, shared, 200, &[JSON], &status_body(shared));
        }
    }

    /// Answer the request: its count as not work ends first, so it always ends inside Envoy's
    /// own count of the stream (which Envoy ends when the stream completes, before the filters
    /// hear of it: a stats pass must never take off a request Envoy no longer counts;
    /// `crate::engine::shared::NotWork::within`).
    fn respond(
        &mut self,
        host: &impl StreamHost,
        shared: &Shared,
        status: u32,
        headers: &[(&str, &str)],
        body: &[u8],
    ) {
        self.uncount(shared);
        host.send_response(status, headers, body)
    }

    fn uncount(&mut self, shared: &Shared) {
        if std::mem::replace(&mut self.counted, false) {
            shared.control_ended();
        }
    }

    fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        self.uncount(shared);
        let mut ours = true;
        if let Some(id) = self.waiter.take() {
            // After this the completion never commits to our waker (safe to destroy it), unless
            // it is committing to it right now: then it destroys it after.
            ours = shared.stop_waiting(id);
        }
        if let Some(w) = self.waker.take().filter(|_| ours) {
            sink.drop_waker(w);
        }
    }
}

#[cfg(test)]
mod tests;
