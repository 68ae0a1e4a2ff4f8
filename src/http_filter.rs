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

/// Metric updates the glue asks for; the FFI layer maps them to Envoy stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    RequestStarted,
    RequestEnded,
    ServedWhileDraining,
    SentAway(Protocol),
    /// A failure of the module was contained on the data path; the request went through.
    ModuleError,
}

/// What the glue needs from Envoy that does not need a live stream (also usable in the destroy
/// hook, after the stream is gone).
pub trait StreamSink {
    /// Destroy a waker made by [`StreamHost::new_waker`]. Called once per waker.
    fn drop_waker(&self, waker: Waker);
    fn metric(&self, m: Metric);
}

/// What the glue needs from Envoy for one live stream. Called only on the stream's worker thread,
/// inside one of its hooks.
pub trait StreamHost: StreamSink {
    fn request_header(&self, name: &str) -> Option<Vec<u8>>;
    fn send_response(&self, status: u32, headers: &[(&str, &str)], body: &[u8]);
    fn protocol(&self) -> Protocol;
    fn connection_id(&self) -> Option<u64>;
    /// `send_go_away_and_close(graceful=true)`: GOAWAY for HTTP/2, `connection: close` + close
    /// after the response for HTTP/1.1. In-flight streams complete.
    fn go_away_gracefully(&self);
    /// Resume a request whose headers hook returned [`HeadersAction::Stop`].
    fn continue_decoding(&self);
    /// A waker for this stream (an Envoy scheduler), or `None` if Envoy cannot make one.
    fn new_waker(&self) -> Option<Waker>;
    /// Commit an event to a waker (any thread).
    fn wake(&self, waker: Waker, event: u64);
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

    pub fn on_request_headers(&mut self, host: &impl StreamHost, shared: &Shared) -> HeadersAction {
        match self {
            Stream::Data(s) => s.on_request_headers(host, shared),
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
    /// Present from the request headers until the stream ends.
    ticket: Option<Ticket>,
    waker: Option<Waker>,
    sent_away: bool,
    paused: bool,
}

impl DataStream {
    fn on_request_headers(&mut self, host: &impl StreamHost, shared: &Shared) -> HeadersAction {
        #[cfg(feature = "panic-test")]
        if host
            .request_header("x-graceful-drain-test-panic")
            .as_deref()
            == Some(b"request")
        {
            panic!("test panic requested by x-graceful-drain-test-panic: request");
        }
        if self.ticket.is_some() {
            return HeadersAction::Continue;
        }
        self.waker = host.new_waker();
        // Registers the waker, then reads the drain flag: either this request sees the drain, or
        // the drain's scan sees its waker (registry module comment).
        let (ticket, draining) = shared.request_started(self.waker);
        self.ticket = Some(ticket);
        host.metric(Metric::RequestStarted);
        if draining {
            shared.counters.served_while_draining();
            host.metric(Metric::ServedWhileDraining);
            // A request that arrives during the drain on a connection not yet sent away is held
            // for one dispatcher turn: the go-away must happen while the stream is still in
            // flight (a direct or fast response would otherwise complete first, and Envoy only
            // adds `connection: close` to responses encoded after the go-away).
            if let Some(w) = self.waker {
                if !shared.requests.is_sent_away(host.connection_id()) {
                    self.paused = true;
                    host.wake(w, EVENT_GO_AWAY);
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
                host.wake(w, EVENT_GO_AWAY);
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
            if shared.requests.mark_sent_away(host.connection_id()) {
                let protocol = host.protocol();
                shared.counters.sent_away(protocol);
                host.metric(Metric::SentAway(protocol));
                host.go_away_gracefully();
            }
        }
        if std::mem::replace(&mut self.paused, false) {
            host.continue_decoding();
        }
    }

    fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        if let Some(ticket) = self.ticket.take() {
            // First out of the table (after this no scan can use the waker), then destroyed.
            shared.request_ended(ticket);
            sink.metric(Metric::RequestEnded);
        }
        if let Some(w) = self.waker.take() {
            sink.drop_waker(w);
        }
    }
}

/// A request on the control listener.
#[derive(Default)]
pub struct ControlStream {
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
        let method = host.request_header(":method").unwrap_or_default();
        let path = host.request_header(":path").unwrap_or_default();
        match route(&method, &path) {
            Route::Ready => {
                if shared.is_draining() {
                    host.send_response(503, &[TEXT], b"draining\n")
                } else {
                    host.send_response(200, &[TEXT], b"ready\n")
                }
            }
            Route::Status => host.send_response(200, &[JSON], &status_body(shared)),
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
                    host.send_response(202, &[JSON], &status_body(shared))
                }
                StartResult::Started | StartResult::AlreadyStarted => {
                    let Some(waker) = host.new_waker() else {
                        host.send_response(500, &[JSON], &error_body("cannot wait: no scheduler"));
                        return HeadersAction::Stop;
                    };
                    self.waker = Some(waker);
                    match shared.waiters.register(waker) {
                        Wait::AlreadyDone => host.send_response(200, &[JSON], &status_body(shared)),
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

    fn on_scheduled(&mut self, host: &impl StreamHost, shared: &Shared, event: u64) {
        if event == EVENT_DRAIN_DONE && self.waiter.take().is_some() {
            host.send_response(200, &[JSON], &status_body(shared));
        }
    }

    fn finish(&mut self, sink: &impl StreamSink, shared: &Shared) {
        if let Some(id) = self.waiter.take() {
            // After this the completion never commits to our waker: safe to destroy it.
            shared.waiters.unregister(id);
        }
        if let Some(w) = self.waker.take() {
            sink.drop_waker(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::{commits, fast, fixture, Fixture};
    use std::cell::{Cell, RefCell};
    use std::time::Duration;

    /// A stream as the glue sees it, recording everything the glue asks of Envoy.
    #[derive(Default)]
    struct FakeHost {
        headers: Vec<(&'static str, Vec<u8>)>,
        connection: Option<u64>,
        protocol: Option<Protocol>,
        no_wakers: bool,
        next_waker: Cell<usize>,
        responses: RefCell<Vec<(u32, Vec<u8>)>>,
        go_aways: Cell<u32>,
        continued: Cell<u32>,
        wakes: RefCell<Vec<(Waker, u64)>>,
        dropped: RefCell<Vec<Waker>>,
        metrics: RefCell<Vec<Metric>>,
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
        fn metric(&self, m: Metric) {
            self.metrics.borrow_mut().push(m);
        }
    }

    impl StreamHost for FakeHost {
        fn request_header(&self, name: &str) -> Option<Vec<u8>> {
            self.headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
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
        fn new_waker(&self) -> Option<Waker> {
            if self.no_wakers {
                return None;
            }
            let w = self.next_waker.get() + 0x10;
            self.next_waker.set(w);
            Some(w)
        }
        fn wake(&self, waker: Waker, event: u64) {
            self.wakes.borrow_mut().push((waker, event));
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
            s.on_request_headers(&host, &shared),
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
        assert_eq!(
            *host.metrics.borrow(),
            vec![Metric::RequestStarted, Metric::RequestEnded]
        );
        assert_eq!(host.go_aways.get(), 0);
    }

    #[test]
    fn an_in_flight_request_is_woken_at_drain_start_and_sends_its_connection_away_once() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/").on_connection(7);
        let (mut a, mut b) = (data(), data());
        a.on_request_headers(&host, &shared);
        b.on_request_headers(&host, &shared);
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
        assert_eq!(s.on_request_headers(&host, &shared), HeadersAction::Stop);
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
            next.on_request_headers(&host, &shared),
            HeadersAction::Continue
        );
        next.finish(&host, &shared);
        assert_eq!(shared.status().active_requests, 0);
    }

    #[test]
    fn an_event_after_the_stream_ended_touches_nothing() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        let host = FakeHost::get("/");
        let mut s = data();
        s.on_request_headers(&host, &shared);
        s.finish(&host, &shared);
        s.on_scheduled(&host, &shared, EVENT_GO_AWAY);
        assert_eq!(host.go_aways.get(), 0);
    }

    #[test]
    fn without_a_waker_a_request_is_still_counted_and_never_paused() {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.start_drain(Trigger::Admin);
        let mut host = FakeHost::get("/");
        host.no_wakers = true;
        let mut s = data();
        assert_eq!(
            s.on_request_headers(&host, &shared),
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
                                let paused =
                                    s.on_request_headers(&host, shared) == HeadersAction::Stop;
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
        control(None).on_request_headers(&host, &shared);
        assert_eq!(host.status(), Some(200));
        shared.start_drain(Trigger::Sigterm);
        let host = FakeHost::get("/ready");
        assert_eq!(
            control(None).on_request_headers(&host, &shared),
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
        s.on_request_headers(&host, &shared);
        assert!(host.responses.borrow().is_empty(), "waits");
        assert!(shared.is_draining());
        clock.advance(Duration::from_secs(1));
        shared.poll(None);
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
        control(None).on_request_headers(&late, &shared);
        assert_eq!(late.status(), Some(200));
    }

    #[test]
    fn a_client_giving_up_on_drain_unregisters_before_its_waker_is_destroyed() {
        let Fixture { shared, clock } = fixture(Some(fast()));
        let host = FakeHost::get("/drain");
        let mut s = control(None);
        s.on_request_headers(&host, &shared);
        s.finish(&host, &shared);
        clock.advance(Duration::from_secs(1));
        shared.poll(None);
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
        control(None).on_request_headers(&host, &shared);
        assert_eq!(host.status(), Some(202));
        let Fixture { shared, .. } = fixture(None);
        let host = FakeHost::request("POST", "/drain");
        control(None).on_request_headers(&host, &shared);
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
            control(Some("s3cret")).on_request_headers(&host, &shared);
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
            control(None).on_request_headers(&host, &shared);
            assert_eq!(host.status(), Some(want), "{method} {path}");
            assert!(host.body().contains(says), "{}", host.body());
        }
        assert!(!shared.is_draining());
    }
}
