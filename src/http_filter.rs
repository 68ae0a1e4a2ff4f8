//! HTTP filter glue: per-request behaviour for the two roles. It asks the shared drain state what
//! to do and applies it through [`StreamHost`], a small trait the FFI layer implements over
//! Envoy's stream callbacks. Must not decide drain timing (that is the drain state machine's job).
//!
//! Data role, per request: count it, register a waker, and if a drain is under way, send the
//! connection away (GOAWAY / `connection: close`) from the scheduled hook, the only place where
//! Envoy lets that happen without aborting the stream.

use crate::config::{DrainToken, Role};
use crate::control::{route, Route};
use crate::drain::Trigger;
use crate::registry::SlotId;
use crate::state::{
    now_nanos, Protocol, Shared, StartResult, Wait, EVENT_DRAIN_DONE, EVENT_GO_AWAY,
};
use std::sync::Arc;
use std::time::Instant;

/// Metric updates the glue asks for; the FFI layer maps them to Envoy stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    RequestStarted,
    RequestEnded,
    ServedWhileDraining,
    SentAway(Protocol),
}

/// What the glue needs from Envoy for one stream. Called only on the stream's worker thread,
/// inside one of its hooks.
pub trait StreamHost {
    fn request_header(&self, name: &str) -> Option<Vec<u8>>;
    fn send_response(&self, status: u32, headers: &[(&str, &str)], body: &[u8]);
    fn protocol(&self) -> Protocol;
    fn connection_id(&self) -> Option<u64>;
    /// `send_go_away_and_close(graceful=true)`: GOAWAY for HTTP/2, `connection: close` + close
    /// after the response for HTTP/1.1. In-flight streams complete.
    fn go_away_gracefully(&self);
    /// Resume a request whose headers hook returned [`HeadersAction::Stop`].
    fn continue_decoding(&self);
    /// A waker for this stream: an opaque non-zero word (an Envoy scheduler) or `None`.
    fn new_waker(&self) -> Option<usize>;
    fn drop_waker(&self, waker: usize);
    /// Commit an event to a waker (any thread).
    fn wake(&self, waker: usize, event: u64);
    fn metric(&self, m: Metric);
}

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
}

impl Stream {
    /// Called when Envoy creates the filter for a new stream.
    pub fn new(
        role: Role,
        token: Option<&Arc<DrainToken>>,
        host_metric: impl FnOnce(Metric),
    ) -> Stream {
        match role {
            Role::Data => Stream::Data(DataStream::start(host_metric)),
            Role::Control => Stream::Control(ControlStream {
                token: token.cloned(),
                ..ControlStream::default()
            }),
        }
    }

    pub fn on_request_headers(&mut self, host: &impl StreamHost) -> HeadersAction {
        match self {
            Stream::Data(s) => s.on_request_headers(host),
            Stream::Control(s) => s.on_request_headers(host),
        }
    }

    /// Whether request body and trailers must be held back (the request is paused while its
    /// connection is being sent away).
    pub fn is_paused(&self) -> bool {
        matches!(self, Stream::Data(DataStream { paused: true, .. }))
    }

    pub fn on_response_headers(&mut self, host: &impl StreamHost) {
        if let Stream::Data(s) = self {
            s.on_response_headers(host)
        }
    }

    pub fn on_scheduled(&mut self, host: &impl StreamHost, event: u64) {
        match self {
            Stream::Data(s) => s.on_scheduled(host, event),
            Stream::Control(s) => s.on_scheduled(host, event),
        }
    }

    /// The stream ended (complete, reset, aborted). Idempotent: Envoy may call it more than once.
    pub fn finish(&mut self, host_drop_waker: impl Fn(usize), host_metric: impl Fn(Metric)) {
        match self {
            Stream::Data(s) => s.finish(host_drop_waker, host_metric),
            Stream::Control(s) => s.finish(host_drop_waker),
        }
    }
}

/// A data-plane request in flight.
pub struct DataStream {
    started: u64,
    counted: bool,
    slot: Option<SlotId>,
    waker: usize,
    sent_away: bool,
    paused: bool,
    /// issue-14: this stream counted against its connection (network filter's idle tracking).
    conn: crate::connections::StreamMark,
}

impl DataStream {
    fn start(metric: impl FnOnce(Metric)) -> Self {
        let started = now_nanos();
        Shared::global().request_started(started);
        metric(Metric::RequestStarted);
        DataStream {
            started,
            counted: true,
            slot: None,
            waker: 0,
            sent_away: false,
            paused: false,
            conn: Default::default(),
        }
    }

    fn on_request_headers(&mut self, host: &impl StreamHost) -> HeadersAction {
        #[cfg(feature = "panic-test")]
        if host
            .request_header("x-graceful-drain-test-panic")
            .as_deref()
            == Some(b"request")
        {
            panic!("test panic requested by x-graceful-drain-test-panic: request");
        }
        let shared = Shared::global();
        // issue-14: count the stream against its connection (idle tracking of the network filter).
        if !self.conn.is_set() {
            self.conn = crate::connections::stream_started(|| host.connection_id());
        }
        if self.waker == 0 {
            if let Some(w) = host.new_waker() {
                self.waker = w;
                self.slot = shared.registry.claim(w, self.started);
            }
        }
        // After the claim: either this request sees the drain, or the drain's scan sees the slot.
        if shared.is_draining() {
            shared.request_served_while_draining();
            host.metric(Metric::ServedWhileDraining);
            // A request that arrives during the drain on a connection not yet sent away is held
            // for one dispatcher turn: the go-away must happen while the stream is still in
            // flight (a direct or fast response would otherwise complete first, and Envoy only
            // adds `connection: close` to responses encoded after the go-away).
            if self.waker != 0 && !shared.is_sent_away(host.connection_id()) {
                self.paused = true;
                host.wake(self.waker, EVENT_GO_AWAY);
                return HeadersAction::Stop;
            }
        }
        HeadersAction::Continue
    }

    fn on_response_headers(&mut self, host: &impl StreamHost) {
        #[cfg(feature = "panic-test")]
        if host
            .request_header("x-graceful-drain-test-panic")
            .as_deref()
            == Some(b"response")
        {
            panic!("test panic requested by x-graceful-drain-test-panic: response");
        }
        // Fallback for a request that got no registry slot (table full): the drain scan could not
        // reach it, so send its connection away now that it has something to say.
        if self.slot.is_none()
            && !self.sent_away
            && self.waker != 0
            && Shared::global().is_draining()
        {
            host.wake(self.waker, EVENT_GO_AWAY);
        }
    }

    fn on_scheduled(&mut self, host: &impl StreamHost, event: u64) {
        // After the stream ended its connection may already be gone: leave it alone.
        if event != EVENT_GO_AWAY || !self.counted {
            return;
        }
        if !self.sent_away {
            self.sent_away = true;
            let protocol = host.protocol();
            if Shared::global().mark_sent_away(host.connection_id(), protocol) {
                host.metric(Metric::SentAway(protocol));
                host.go_away_gracefully();
            }
        }
        if std::mem::replace(&mut self.paused, false) {
            host.continue_decoding();
        }
    }

    fn finish(&mut self, drop_waker: impl Fn(usize), metric: impl Fn(Metric)) {
        let shared = Shared::global();
        if let Some(slot) = self.slot.take() {
            shared.registry.release(slot);
        }
        if self.waker != 0 {
            drop_waker(std::mem::replace(&mut self.waker, 0));
        }
        crate::connections::stream_ended(std::mem::take(&mut self.conn)); // issue-14
        if std::mem::replace(&mut self.counted, false) {
            shared.request_ended();
            metric(Metric::RequestEnded);
        }
    }
}

/// A request on the control listener.
#[derive(Default)]
pub struct ControlStream {
    waiter: Option<u64>,
    waker: usize,
    token: Option<Arc<DrainToken>>,
}

const TEXT: (&str, &str) = ("content-type", "text/plain; charset=utf-8");
const JSON: (&str, &str) = ("content-type", "application/json");

fn status_body() -> Vec<u8> {
    let mut b = Shared::global()
        .status(Instant::now())
        .to_json()
        .into_bytes();
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
    fn on_request_headers(&mut self, host: &impl StreamHost) -> HeadersAction {
        let method = host.request_header(":method").unwrap_or_default();
        let path = host.request_header(":path").unwrap_or_default();
        let shared = Shared::global();
        match route(&method, &path) {
            Route::Ready => {
                if shared.is_draining() {
                    host.send_response(503, &[TEXT], b"draining\n")
                } else {
                    host.send_response(200, &[TEXT], b"ready\n")
                }
            }
            Route::Status => host.send_response(200, &[JSON], &status_body()),
            Route::Drain { .. } if !self.authorized(host) => {}
            Route::Drain { wait } => match shared.start_drain(Trigger::ControlEndpoint) {
                StartResult::NoEngine => host.send_response(
                    503,
                    &[JSON],
                    &error_body(
                        "the graceful_drain bootstrap extension is not loaded: add it to \
                         bootstrap_extensions to enable draining",
                    ),
                ),
                StartResult::Started | StartResult::AlreadyStarted if !wait => {
                    host.send_response(202, &[JSON], &status_body())
                }
                StartResult::Started | StartResult::AlreadyStarted => {
                    let Some(waker) = host.new_waker() else {
                        host.send_response(500, &[JSON], &error_body("cannot wait: no scheduler"));
                        return HeadersAction::Stop;
                    };
                    self.waker = waker;
                    match shared.register_waiter(waker) {
                        Wait::AlreadyDone => host.send_response(200, &[JSON], &status_body()),
                        Wait::Waiting(id) => self.waiter = Some(id),
                    }
                }
            },
            Route::MethodNotAllowed { allow } => host.send_response(
                405,
                &[TEXT, ("allow", allow)],
                format!("method not allowed; allowed: {allow}\n").as_bytes(),
            ),
            Route::BadRequest(reason) => {
                host.send_response(400, &[TEXT], format!("{reason}\n").as_bytes())
            }
            Route::NotFound => host.send_response(
                404,
                &[TEXT],
                b"not found; control endpoints: /ready, /drain/status, /drain\n",
            ),
        }
        HeadersAction::Stop
    }

    /// With a drain token configured, `/drain` needs `Authorization: Bearer <token>`. Answers
    /// 401/403 itself when the check fails. The token is never echoed or logged.
    fn authorized(&self, host: &impl StreamHost) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        match host.request_header("authorization") {
            None => {
                host.send_response(
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
                host.send_response(403, &[TEXT], b"wrong drain token\n");
                false
            }
        }
    }

    fn on_scheduled(&mut self, host: &impl StreamHost, event: u64) {
        if event == EVENT_DRAIN_DONE && self.waiter.take().is_some() {
            host.send_response(200, &[JSON], &status_body());
        }
    }

    fn finish(&mut self, drop_waker: impl Fn(usize)) {
        if let Some(id) = self.waiter.take() {
            Shared::global().unregister_waiter(id);
        }
        if self.waker != 0 {
            drop_waker(std::mem::replace(&mut self.waker, 0));
        }
    }
}
