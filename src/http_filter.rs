//! HTTP filter glue: per-request behaviour for the two roles. It asks the shared drain state what
//! to do and applies it through [`StreamHost`], a small trait the FFI layer implements over
//! Envoy's stream callbacks (and the unit tests below implement with a fake). The shared state is
//! passed in on every call, never reached through a global. Must not decide drain timing (that is
//! the drain state machine's job).
//!
//! Data role, per request: count it, register a waker, and if a drain is under way, send the
//! connection away (GOAWAY / `connection: close`) from the scheduled hook, the only place where
//! Envoy lets that happen without aborting the stream.

use crate::config::{DrainToken, Role};
use crate::control::{route, Route};
use crate::drain::Trigger;
use crate::registry::Ticket;
use crate::state::{Protocol, Shared, StartResult, Wait, Waker, EVENT_DRAIN_DONE, EVENT_GO_AWAY};
use std::sync::Arc;

/// What the glue needs from Envoy that does not need a live stream (also usable in the destroy
/// hook, after the stream is gone).
pub trait StreamSink {
    /// Destroy a waker made by [`StreamHost::new_waker`]. Called once per waker.
    fn drop_waker(&self, waker: Waker);
    /// The request path's coarse monotonic time in nanoseconds, the clock the network filter's
    /// idle checks read too (a direct call: a stream's end pays no virtual call for it).
    fn now_nanos(&self) -> u64;
}

/// What the glue needs from Envoy for one live stream. Called only on the stream's worker thread,
/// inside one of its hooks.
pub trait StreamHost: StreamSink {
    /// Look at a request header without copying it (the request path must not allocate).
    fn with_request_header<R>(&self, name: &str, f: impl FnOnce(Option<&[u8]>) -> R) -> R;
    /// A copy of a request header (control paths).
    fn request_header(&self, name: &str) -> Option<Vec<u8>> {
        self.with_request_header(name, |v| v.map(<[u8]>::to_vec))
    }
    fn send_response(&self, status: u32, headers: &[(&str, &str)], body: &[u8]);
    fn protocol(&self) -> Protocol;
    fn connection_id(&self) -> Option<u64>;
    /// `send_go_away_and_close(graceful=true)`: GOAWAY for HTTP/2, `connection: close` + close
    /// after the response for HTTP/1.1. In-flight streams complete.
    fn go_away_gracefully(&self);
    /// Resume a request whose headers hook returned [`HeadersAction::Stop`].
    fn continue_decoding(&self);
    /// Identifies this stream to its connection (non-zero), for the connection to hand it back
    /// at drain start ([`crate::connections::StreamMark::attach`]).
    fn stream_word(&self) -> usize;
    /// A waker for this stream (an Envoy scheduler), or `None` if Envoy cannot make one.
    fn new_waker(&self) -> Option<Waker>;
    /// Commit an event to a waker (any thread). `false` if it was refused (the module's calls
    /// into Envoy are closed once the exit was released): the event will never be delivered.
    fn wake(&self, waker: Waker, event: u64) -> bool;
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
    /// Called when Envoy creates the filter for a new stream. Nothing is counted yet: the request
    /// starts at its headers.
    pub fn new(role: Role, token: Option<&Arc<DrainToken>>) -> Stream {
        match role {
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
        }
    }

    /// The stream ended (complete, reset, aborted). Idempotent: Envoy may call it more than once.
    pub fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        match self {
            Stream::Data(s) => s.finish(sink, shared),
            Stream::Control(s) => s.finish(sink, shared),
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
            self.conn = shared.connections.stream_started(|| host.connection_id());
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
            shared.counters.health_check();
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
            shared.counters.served_while_draining();
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
                if !shared.requests.is_sent_away(host.connection_id())
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
                .send_away_once(host.connection_id(), || host.protocol())
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

/// Whether the request is a health check by the configured policy (User-Agent prefix or path).
fn is_health_check(host: &impl StreamHost, shared: &Shared) -> bool {
    let policy = shared.policy();
    if host.with_request_header("user-agent", |ua| policy.is_health_check(ua, None)) {
        return true;
    }
    !policy.health_check_paths.is_empty()
        && host.with_request_header(":path", |p| policy.is_health_check(None, p))
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
            shared.counters.control_started();
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
            Route::Drain { wait } => match shared.start_drain(Trigger::ControlEndpoint) {
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
                    match shared.waiters.register(waker) {
                        Wait::AlreadyDone => {
                            self.respond(host, shared, 200, &[JSON], &status_body(shared))
                        }
                        Wait::Waiting(id) => self.waiter = Some(id),
                    }
                }
            },
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
    /// `crate::state::NotWork::within`).
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
            shared.counters.control_ended();
        }
    }

    fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        self.uncount(shared);
        let mut ours = true;
        if let Some(id) = self.waiter.take() {
            // After this the completion never commits to our waker (safe to destroy it), unless
            // it is committing to it right now: then it destroys it after.
            ours = shared.waiters.unregister(id);
        }
        if let Some(w) = self.waker.take().filter(|_| ours) {
            sink.drop_waker(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::{commits, counted, fast, fixture, Fixture};
    use std::cell::{Cell, RefCell};
    use std::time::Duration;

    /// A stream as the glue sees it, recording everything the glue asks of Envoy.
    #[derive(Default)]
    struct FakeHost {
        headers: Vec<(&'static str, Vec<u8>)>,
        connection: Option<u64>,
        protocol: Option<Protocol>,
        no_wakers: bool,
        /// `wake` reports every event refused (the gate closed).
        refuse_wakes: bool,
        next_waker: Cell<usize>,
        responses: RefCell<Vec<(u32, Vec<u8>)>>,
        go_aways: Cell<u32>,
        continued: Cell<u32>,
        wakes: RefCell<Vec<(Waker, u64)>>,
        dropped: RefCell<Vec<Waker>>,
        /// Names of the request headers read, in order.
        headers_read: RefCell<Vec<String>>,
    }

    impl FakeHost {
        fn get(path: &str) -> Self {
            Self::request("GET", path)
        }
        fn request(method: &str, path: &str) -> Self {
            FakeHost {
                headers: vec![
                    (":method", method.as_bytes().to_vec()),
                    (":path", path.as_bytes().to_vec()),
                ],
                connection: Some(1),
                protocol: Some(Protocol::Http2),
                next_waker: Cell::new(0x1000),
                ..Default::default()
            }
        }
        fn on_connection(mut self, id: u64) -> Self {
            self.connection = Some(id);
            self.next_waker = Cell::new(0x1000 * (id as usize + 1));
            self
        }
        fn with_header(mut self, k: &'static str, v: &str) -> Self {
            self.headers.push((k, v.as_bytes().to_vec()));
            self
        }
        fn status(&self) -> Option<u32> {
            self.responses.borrow().last().map(|r| r.0)
        }
        fn body(&self) -> String {
            String::from_utf8_lossy(&self.responses.borrow().last().unwrap().1).to_string()
        }
    }

    impl StreamSink for FakeHost {
        fn drop_waker(&self, waker: Waker) {
            self.dropped.borrow_mut().push(waker);
        }
        fn now_nanos(&self) -> u64 {
            FAKE_NOW
        }
    }

    /// The fake hosts' coarse time (the idle checks below read the same).
    const FAKE_NOW: u64 = 1_000_000_000;

    impl StreamHost for FakeHost {
        fn with_request_header<R>(&self, name: &str, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
            self.headers_read.borrow_mut().push(name.to_string());
            f(self
                .headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_slice()))
        }
        fn send_response(&self, status: u32, _headers: &[(&str, &str)], body: &[u8]) {
            self.responses.borrow_mut().push((status, body.to_vec()));
        }
        fn protocol(&self) -> Protocol {
            self.protocol.unwrap_or(Protocol::Other)
        }
        fn connection_id(&self) -> Option<u64> {
            self.connection
        }
        fn go_away_gracefully(&self) {
            self.go_aways.set(self.go_aways.get() + 1);
        }
        fn continue_decoding(&self) {
            self.continued.set(self.continued.get() + 1);
        }
        fn stream_word(&self) -> usize {
            self as *const FakeHost as usize
        }
        fn new_waker(&self) -> Option<Waker> {
            if self.no_wakers {
                return None;
            }
            let w = self.next_waker.get() + 0x10;
            self.next_waker.set(w);
            Some(w)
        }
        fn wake(&self, waker: Waker, event: u64) -> bool {
            if self.refuse_wakes {
                return false;
            }
            self.wakes.borrow_mut().push((waker, event));
            true
        }
    }

    fn data() -> Stream {
        Stream::new(Role::Data, None)
    }

    fn control(token: Option<&str>) -> Stream {
        let t = token.map(|t| Arc::new(DrainToken::for_tests(t)));
        Stream::new(Role::Control, t.as_ref())
    }

    #[test]
    fn a_data_request_while_serving_is_counted_and_released() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/");
        let mut s = data();
        assert_eq!(
            shared.status().active_requests,
            0,
            "nothing counted before the headers"
        );
        assert_eq!(
            s.on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        assert_eq!(shared.status().active_requests, 1);
        s.on_response_headers(&host, &shared);
        assert!(host.wakes.borrow().is_empty());
        s.finish(&host, &shared);
        s.finish(&host, &shared); // Envoy may end a stream twice: counted once.
        assert_eq!(shared.status().active_requests, 0);
        assert_eq!(
            *host.dropped.borrow(),
            vec![0x1010],
            "waker destroyed exactly once"
        );
        assert_eq!(counted(), [], "no stat moves for a request while serving");
        assert_eq!(host.go_aways.get(), 0);
    }

    #[test]
    fn an_in_flight_request_is_woken_at_drain_start_and_sends_its_connection_away_once() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/").on_connection(7);
        let (mut a, mut b) = (data(), data());
        a.on_request_headers(&host, &shared, true);
        b.on_request_headers(&host, &shared, true);
        shared.start_drain(Trigger::Sigterm);
        let woken: Vec<_> = commits();
        assert_eq!(woken.len(), 2, "both in-flight requests woken: {woken:?}");
        // Envoy delivers the events on the worker: both streams share connection 7.
        a.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        b.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        assert_eq!(host.go_aways.get(), 1, "one go-away per connection");
        assert_eq!(shared.status().connections_sent_away.http2, 1);
        assert_eq!(
            host.continued.get(),
            0,
            "in-flight requests were not paused"
        );
        a.finish(&host, &shared);
        b.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
    }

    #[test]
    fn a_request_during_the_drain_is_paused_until_its_connection_is_sent_away() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.start_drain(Trigger::Admin);
        let mut host = FakeHost::get("/").on_connection(3);
        host.protocol = Some(Protocol::Http1);
        let mut s = data();
        assert_eq!(
            s.on_request_headers(&host, &shared, true),
            HeadersAction::Stop
        );
        assert!(s.is_paused());
        assert_eq!(*host.wakes.borrow(), vec![(0x4010, EVENT_GO_AWAY)]);
        s.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        assert!(!s.is_paused());
        assert_eq!((host.go_aways.get(), host.continued.get()), (1, 1));
        let st = shared.status();
        assert_eq!(st.requests_served_while_draining, 1);
        assert_eq!(st.connections_sent_away.http1, 1);
        s.finish(&host, &shared);
        // The next request on the same connection goes straight through.
        let mut next = data();
        assert_eq!(
            next.on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        next.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
    }

    /// One with a body goes on at once (its body reaches the later filters as it arrives) and
    /// its connection is sent away from the wake-up all the same.
    #[test]
    fn a_request_with_a_body_during_the_drain_is_not_held_but_still_sends_its_connection_away() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.start_drain(Trigger::Admin);
        let mut host = FakeHost::get("/").on_connection(3);
        host.protocol = Some(Protocol::Http1);
        let mut s = data();
        assert_eq!(
            s.on_request_headers(&host, &shared, false),
            HeadersAction::Continue
        );
        assert!(!s.is_paused());
        assert_eq!(*host.wakes.borrow(), vec![(0x4010, EVENT_GO_AWAY)]);
        s.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        assert_eq!((host.go_aways.get(), host.continued.get()), (1, 0));
        assert_eq!(shared.status().connections_sent_away.http1, 1);
        s.finish(&host, &shared);
    }

    #[test]
    fn behind_the_network_filter_a_request_is_reached_through_its_connection() {
        use crate::connections::{self, Action, Conn};
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.connections.install_commit(|_, _| {});
        let conn = Arc::new(Conn::new(41));
        conn.set_wakeable();
        connections::register(&conn);
        let host = FakeHost::get("/").on_connection(41);
        let first_waker = host.next_waker.get();
        let mut s = data();
        assert_eq!(
            s.on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        assert_eq!(
            host.next_waker.get(),
            first_waker,
            "no scheduler of its own"
        );
        assert_eq!(shared.status().active_requests, 1);
        shared.start_drain(Trigger::Sigterm);
        assert!(commits().is_empty(), "nothing for the table's scan to wake");
        // The connection's wake-up hands the stream back; the glue runs its scheduled logic.
        let counts = connections::Counts::default();
        let action = conn.on_drain_started(&counts, FAKE_NOW, Duration::ZERO);
        assert_eq!(action, Action::WakeStream(host.stream_word()));
        s.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        assert_eq!(host.go_aways.get(), 1);
        assert_eq!(shared.status().connections_sent_away.http2, 1);
        // A request arriving during the drain makes its own waker and is held for its go-away
        // (here the connection was already sent away: it goes straight through).
        let mut late = data();
        assert_eq!(
            late.on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        assert_ne!(host.next_waker.get(), first_waker, "a waker of its own");
        late.finish(&host, &shared);
        s.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
        assert_eq!(
            host.dropped.borrow().len(),
            1,
            "only the late request's waker"
        );
        assert_eq!(conn.streams(), 0);
        assert_eq!(
            conn.on_drain_started(&counts, FAKE_NOW, Duration::from_secs(60)),
            Action::Nothing,
            "ended: no longer handed back"
        );
        connections::unregister(&conn);
    }

    #[test]
    fn an_event_after_the_stream_ended_touches_nothing() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/");
        let mut s = data();
        s.on_request_headers(&host, &shared, true);
        s.finish(&host, &shared);
        s.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        assert_eq!(host.go_aways.get(), 0);
    }

    /// #44 item 8: a wake-up refused (the exit released before the workers stop) must not
    /// leave the request paused: nothing would ever resume it.
    #[test]
    fn a_request_whose_wake_is_refused_goes_on_unpaused() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.start_drain(Trigger::Admin);
        let mut host = FakeHost::get("/").on_connection(3);
        host.protocol = Some(Protocol::Http1);
        host.refuse_wakes = true;
        let mut s = data();
        assert_eq!(
            s.on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        assert!(!s.is_paused());
        assert_eq!(shared.status().requests_served_while_draining, 1);
        s.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
    }

    #[test]
    fn without_a_waker_a_request_is_still_counted_and_never_paused() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.start_drain(Trigger::Admin);
        let mut host = FakeHost::get("/");
        host.no_wakers = true;
        let mut s = data();
        assert_eq!(
            s.on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        assert_eq!(shared.status().active_requests, 1);
        s.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
        assert!(host.dropped.borrow().is_empty());
    }

    /// Drain start racing request starts on real threads: every request either saw the drain
    /// (and sent its connection away itself) or was woken by the drain; never neither.
    #[test]
    fn drain_start_racing_requests_wakes_every_one() {
        for _ in 0..20 {
            let Fixture { shared, .. } = fixture(Some(fast()));
            let go = std::sync::atomic::AtomicBool::new(false);
            let outcome = std::thread::scope(|sc| {
                let workers: Vec<_> = (0..3u64)
                    .map(|t| {
                        let (shared, go) = (&shared, &go);
                        sc.spawn(move || {
                            while !go.load(std::sync::atomic::Ordering::Acquire) {
                                std::hint::spin_loop();
                            }
                            let mut out = vec![];
                            for i in 0..50u64 {
                                let host = FakeHost::get("/").on_connection(t * 1000 + i);
                                let mut s = data();
                                let paused = s.on_request_headers(&host, shared, true)
                                    == HeadersAction::Stop;
                                out.push((host.next_waker.get(), paused, s));
                            }
                            out
                        })
                    })
                    .collect();
                go.store(true, std::sync::atomic::Ordering::Release);
                shared.start_drain(Trigger::Sigterm);
                let woken: std::collections::HashSet<usize> =
                    commits().into_iter().map(|(w, _)| w).collect();
                let mut all = vec![];
                for w in workers {
                    all.extend(w.join().unwrap());
                }
                (woken, all)
            });
            let (woken, all) = outcome;
            for (waker, paused, _) in &all {
                assert!(
                    *paused || woken.contains(waker),
                    "request with waker {waker:#x} neither saw the drain nor was woken"
                );
            }
        }
    }

    #[test]
    fn ready_flips_to_503_when_the_drain_starts() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/ready");
        control(None).on_request_headers(&host, &shared, true);
        assert_eq!(host.status(), Some(200));
        shared.start_drain(Trigger::Sigterm);
        let host = FakeHost::get("/ready");
        assert_eq!(
            control(None).on_request_headers(&host, &shared, true),
            HeadersAction::Stop
        );
        assert_eq!(host.status(), Some(503));
        assert_eq!(
            shared.status().active_requests,
            0,
            "control requests are never counted"
        );
    }

    #[test]
    fn a_waiting_drain_is_answered_at_completion() {
        let Fixture { shared, clock } = fixture(Some(fast()));
        let host = FakeHost::get("/drain");
        let mut s = control(None);
        s.on_request_headers(&host, &shared, true);
        assert!(host.responses.borrow().is_empty(), "waits");
        assert!(shared.is_draining());
        clock.advance(Duration::from_secs(1));
        shared.poll(crate::state::EnvoyObservation::Unused);
        assert!(commits().contains(&(0x1010, EVENT_DRAIN_DONE)));
        s.on_scheduled(&host, &shared, EVENT_DRAIN_DONE);
        assert_eq!(host.status(), Some(200));
        assert!(
            host.body().contains("\"state\":\"drained\""),
            "{}",
            host.body()
        );
        s.finish(&host, &shared);
        assert_eq!(*host.dropped.borrow(), vec![0x1010]);
        // After completion a new /drain answers at once.
        let late = FakeHost::get("/drain");
        control(None).on_request_headers(&late, &shared, true);
        assert_eq!(late.status(), Some(200));
    }

    #[test]
    fn a_client_giving_up_on_drain_unregisters_before_its_waker_is_destroyed() {
        let Fixture { shared, clock } = fixture(Some(fast()));
        let host = FakeHost::get("/drain");
        let mut s = control(None);
        s.on_request_headers(&host, &shared, true);
        s.finish(&host, &shared);
        clock.advance(Duration::from_secs(1));
        shared.poll(crate::state::EnvoyObservation::Unused);
        assert!(
            commits().iter().all(|(_, e)| *e != EVENT_DRAIN_DONE),
            "a destroyed waker was woken: {:?}",
            commits()
        );
    }

    #[test]
    fn drain_without_waiting_and_without_an_engine() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/drain?wait=false");
        control(None).on_request_headers(&host, &shared, true);
        assert_eq!(host.status(), Some(202));
        let Fixture { shared, .. } = fixture(None);
        let host = FakeHost::request("POST", "/drain");
        control(None).on_request_headers(&host, &shared, true);
        assert_eq!(host.status(), Some(503));
        assert!(host.body().contains("bootstrap extension"));
    }

    #[test]
    fn the_drain_token_is_required_when_configured_and_its_scheme_is_case_insensitive() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let cases = [
            (None, 401),
            (Some("Bearer wrong"), 403),
            (Some("Basic s3cret"), 403),
            (Some("bearer s3cret"), 202),
            (Some("BEARER  s3cret"), 202),
            (Some("Bearer s3cret"), 202),
        ];
        for (auth, want) in cases {
            let mut host = FakeHost::get("/drain?wait=false");
            if let Some(a) = auth {
                host = host.with_header("authorization", a);
            }
            control(Some("s3cret")).on_request_headers(&host, &shared, true);
            assert_eq!(host.status(), Some(want), "{auth:?}");
        }
    }

    #[test]
    fn bad_control_requests_get_a_4xx_with_a_reason() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        for (method, path, want, says) in [
            ("POST", "/ready", 405, "allowed: GET, HEAD"),
            ("GET", "/drain?wait=maybe", 400, "wait"),
            ("GET", "/nope", 404, "control endpoints"),
        ] {
            let host = FakeHost::request(method, path);
            control(None).on_request_headers(&host, &shared, true);
            assert_eq!(host.status(), Some(want), "{method} {path}");
            assert!(host.body().contains(says), "{}", host.body());
        }
        assert!(!shared.is_draining());
    }

    #[test]
    fn health_checks_are_answered_but_never_work() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.install_policy(crate::config::RequestPolicy {
            health_check_paths: vec!["/healthz".into()],
            ..Default::default()
        });
        // Told apart during a drain (while serving they count like any request, see below).
        shared.start_drain(Trigger::Admin);
        for host in [
            FakeHost::get("/").with_header("user-agent", "kube-probe/1.31"),
            FakeHost::get("/").with_header("user-agent", "Envoy/HC"),
            FakeHost::get("/healthz?x=1").with_header("user-agent", "curl/8"),
        ] {
            let mut s = data();
            assert_eq!(
                s.on_request_headers(&host, &shared, true),
                HeadersAction::Continue
            );
            assert_eq!(shared.status().active_requests, 0, "not in flight");
            s.finish(&host, &shared);
            assert_eq!(counted(), [], "not served while draining");
        }
        let st = shared.status();
        assert_eq!(st.health_checks_seen, 3);
        assert_eq!(
            st.since_last_request_start_ms, None,
            "not a request start either"
        );
        // During a drain they are still answered (passed on), never paused.
        let host = FakeHost::get("/").with_header("user-agent", "GoogleHC/1.0");
        assert_eq!(
            data().on_request_headers(&host, &shared, true),
            HeadersAction::Continue
        );
        assert!(host.wakes.borrow().is_empty());
    }

    #[test]
    fn while_serving_health_checks_are_not_told_apart() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/").with_header("user-agent", "kube-probe/1.31");
        let mut s = data();
        s.on_request_headers(&host, &shared, true);
        assert_eq!(
            host.headers_read
                .borrow()
                .iter()
                .filter(|h| *h == "user-agent")
                .count(),
            0,
            "no header read for classification while serving"
        );
        assert_eq!(
            shared.status().active_requests,
            1,
            "counted like any request"
        );
        s.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
        assert_eq!(shared.status().health_checks_seen, 0);
    }

    #[test]
    fn control_requests_are_counted_as_not_work_until_they_end() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/drain");
        let mut waiting = control(None);
        waiting.on_request_headers(&host, &shared, true);
        let ready = FakeHost::get("/ready");
        let mut r = control(None);
        r.on_request_headers(&ready, &shared, true);
        r.finish(&ready, &shared);
        assert_eq!(
            shared.counters.not_work(),
            (2, 1),
            "one waiting /drain in flight"
        );
        waiting.finish(&host, &shared);
        waiting.finish(&host, &shared);
        assert_eq!(shared.counters.not_work(), (2, 0));
    }

    #[test]
    fn readiness_keeps_answering_ready_during_the_configured_delay() {
        let Fixture { shared, clock } = fixture(Some(fast()));
        shared.install_policy(crate::config::RequestPolicy {
            readiness_failure_delay: Duration::from_millis(20),
            ..Default::default()
        });
        // A request in flight at the drain start is sent away at once, delay or not.
        let h = FakeHost::get("/");
        let mut s = data();
        s.on_request_headers(&h, &shared, true);
        shared.start_drain(Trigger::Sigterm);
        assert_eq!(commits().len(), 1, "connections are sent away at once");
        let ready = FakeHost::get("/ready");
        control(None).on_request_headers(&ready, &shared, true);
        assert_eq!(ready.status(), Some(200));
        clock.advance(Duration::from_millis(20));
        let ready = FakeHost::get("/ready");
        control(None).on_request_headers(&ready, &shared, true);
        assert_eq!(ready.status(), Some(503));
        s.finish(&h, &shared);
    }
}
