//! The per-request glue against a fake stream host.

use super::*;
use crate::engine::shared::Protocol;
use crate::testing::{commits, counted, fast, fixture, Fixture, HOSTS, STATS};
use std::cell::{Cell, RefCell};
use std::time::Duration;

/// A stream as the glue sees it, recording everything the glue asks of Envoy.
#[derive(Default)]
pub(crate) struct FakeHost {
    headers: Vec<(&'static str, Vec<u8>)>,
    connection: Option<u64>,
    protocol: Option<Protocol>,
    no_wakers: bool,
    /// `wake` reports every event refused (the gate closed).
    refuse_wakes: bool,
    next_waker: Cell<usize>,
    pub(crate) responses: RefCell<Vec<(u32, Vec<u8>)>>,
    pub(crate) go_aways: Cell<u32>,
    continued: Cell<u32>,
    wakes: RefCell<Vec<(Waker, u64)>>,
    dropped: RefCell<Vec<Waker>>,
    /// Names of the request headers read, in order.
    headers_read: RefCell<Vec<String>>,
}

impl FakeHost {
    pub(crate) fn get(path: &str) -> Self {
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
    pub(crate) fn on_connection(mut self, id: u64) -> Self {
        self.connection = Some(id);
        self.next_waker = Cell::new(0x1000 * (id as usize + 1));
        self
    }
    fn with_header(mut self, k: &'static str, v: &str) -> Self {
        self.headers.push((k, v.as_bytes().to_vec()));
        self
    }
    pub(crate) fn status(&self) -> Option<u32> {
        self.responses.borrow().last().map(|r| r.0)
    }
    fn body(&self) -> String {
        String::from_utf8_lossy(&self.responses.borrow().last().unwrap().1).to_string()
    }
}

impl crate::host::extension::StatsHost for FakeHost {
    fn count(&self, stat: crate::engine::shared::Stat) {
        crate::host::extension::StatsHost::count(STATS, stat)
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
    fn hosts(&self) -> crate::host::Hosts<'_> {
        HOSTS
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
    shared.start_drain(HOSTS, Trigger::Sigterm);
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
    shared.start_drain(HOSTS, Trigger::Admin);
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
    shared.start_drain(HOSTS, Trigger::Admin);
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
    shared.connections().note_loaded();
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
    shared.start_drain(HOSTS, Trigger::Sigterm);
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
    shared.start_drain(HOSTS, Trigger::Admin);
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
    shared.start_drain(HOSTS, Trigger::Admin);
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
                            let paused =
                                s.on_request_headers(&host, shared, true) == HeadersAction::Stop;
                            out.push((host.next_waker.get(), paused, s));
                        }
                        out
                    })
                })
                .collect();
            go.store(true, std::sync::atomic::Ordering::Release);
            shared.start_drain(HOSTS, Trigger::Sigterm);
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
    shared.start_drain(HOSTS, Trigger::Sigterm);
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
    shared.poll(HOSTS, crate::engine::shared::EnvoyObservation::Unused);
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
    shared.poll(HOSTS, crate::engine::shared::EnvoyObservation::Unused);
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
    shared.start_drain(HOSTS, Trigger::Admin);
    for host in [
        FakeHost::get("/healthz").with_header("user-agent", "kube-probe/1.31"),
        FakeHost::get("/healthz"),
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
    let host = FakeHost::get("/healthz").with_header("user-agent", "GoogleHC/1.0");
    assert_eq!(
        data().on_request_headers(&host, &shared, true),
        HeadersAction::Continue
    );
    assert!(host.wakes.borrow().is_empty());
}

/// #63 item 5 (c): a checker's `User-Agent` on a path nobody configured is work: it holds the
/// drain like any request (before, it was a health check and cut at completion however long).
/// With no path configured no header is read at all; gRPC's health check is a configured path
/// like any other (HTTP/2's `:path`).
#[test]
fn a_checker_s_user_agent_alone_is_work() {
    let Fixture { shared, .. } = fixture(Some(fast()));
    shared.start_drain(HOSTS, Trigger::Admin);
    let host = FakeHost::get("/upload").with_header("user-agent", "kube-probe/1.31");
    let mut s = data();
    s.on_request_headers(&host, &shared, true);
    assert_eq!(shared.status().active_requests, 1, "work");
    assert_eq!(shared.status().health_checks_seen, 0);
    assert!(
        host.headers_read.borrow().is_empty(),
        "nothing configured: nothing read to classify it"
    );
    s.finish(&host, &shared);
    let Fixture { shared, .. } = fixture(Some(fast()));
    shared.install_policy(crate::config::RequestPolicy {
        health_check_paths: vec!["/grpc.health.v1.Health/Check".into()],
        health_check_user_agents: vec!["grpc-health-probe/".into()],
        ..Default::default()
    });
    shared.start_drain(HOSTS, Trigger::Admin);
    for (path, ua, check) in [
        (
            "/grpc.health.v1.Health/Check",
            "grpc-health-probe/0.4",
            true,
        ),
        ("/grpc.health.v1.Health/Check", "grpc-go/1.60", false),
        ("/pkg.Service/Method", "grpc-health-probe/0.4", false),
    ] {
        let host = FakeHost::get(path).with_header("user-agent", ua);
        let mut s = data();
        s.on_request_headers(&host, &shared, true);
        assert_eq!(
            shared.status().active_requests,
            i64::from(!check),
            "{path} {ua}"
        );
        s.finish(&host, &shared);
    }
    assert_eq!(shared.status().health_checks_seen, 1);
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
    let n = shared.not_work_now();
    assert_eq!(
        (n.started, n.active),
        (2, 1),
        "one waiting /drain in flight"
    );
    waiting.finish(&host, &shared);
    waiting.finish(&host, &shared);
    let n = shared.not_work_now();
    assert_eq!((n.started, n.active), (2, 0));
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
    shared.start_drain(HOSTS, Trigger::Sigterm);
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

/// The reduced surface of an untested Envoy (issue 63 item 6): a data config loaded with the data
/// path stepped back does not count requests (the drain goes by Envoy's own stats), and its
/// streams ask nothing of Envoy, during a drain too: no header read, no waker, no go-away, no
/// pause. The control endpoints still answer. The same steps on the full surface do act.
#[test]
fn stepped_back_data_streams_ask_nothing_of_envoy_and_the_control_endpoints_still_answer() {
    use crate::host::envoy_release::{release_verdict, OnUntested};
    use crate::http_filter::lifecycle::{release, Filter, FreeList, StreamConfig};
    for (policy, stepped_back) in [(OnUntested::Reduced, true), (OnUntested::Full, false)] {
        let Fixture { shared, .. } = fixture(Some(fast()));
        shared.set_standing(release_verdict(None, policy, "unreadable").unwrap());
        let config = StreamConfig::load(br#"{"role": "data"}"#, &shared).expect("accepted");
        assert_eq!(
            (config.counts_requests(), shared.data_filter_loaded()),
            (!stepped_back, !stepped_back),
            "{policy:?}"
        );
        let serving = FakeHost::get("/").on_connection(5);
        let f = Filter::new(&config, 0x10);
        assert_eq!(
            f.request_headers(&serving, &shared, true).value,
            HeadersAction::Continue
        );
        assert_eq!(shared.status().active_requests, i64::from(!stepped_back));
        shared.start_drain(HOSTS, Trigger::Sigterm);
        let late = FakeHost::get("/").on_connection(6);
        let g = Filter::new(&config, 0x20);
        let action = g.request_headers(&late, &shared, true).value;
        let _ = f.scheduled("scheduled", &serving, &shared, EVENT_GO_AWAY);
        let _ = g.scheduled("scheduled", &late, &shared, EVENT_GO_AWAY);
        let asked = serving.go_aways.get()
            + late.go_aways.get()
            + (serving.wakes.borrow().len() + late.wakes.borrow().len()) as u32
            + (serving.headers_read.borrow().len() + late.headers_read.borrow().len()) as u32;
        if stepped_back {
            assert_eq!(action, HeadersAction::Continue);
            assert_eq!(asked, 0, "{policy:?}: nothing asked of Envoy");
            assert_eq!(serving.next_waker.get(), 0x1000 * 6, "no waker made");
            assert!(
                counted().iter().all(|s| !matches!(
                    s,
                    crate::engine::shared::Stat::SentAway(_)
                        | crate::engine::shared::Stat::ServedWhileDraining
                )),
                "nothing counted: {:?}",
                counted()
            );
            assert_eq!(shared.status().connections_sent_away.http2, 0);
        } else {
            assert!(asked > 0, "{policy:?}: the full surface acts");
            assert_eq!(shared.status().connections_sent_away.http2, 2);
        }
        assert_eq!(
            shared.status().surface,
            if stepped_back { "reduced" } else { "full" }
        );
        assert!(shared.status().envoy_untested);
        // The control endpoints answer on either surface.
        let ready = FakeHost::get("/ready");
        control(None).on_request_headers(&ready, &shared, true);
        assert_eq!(ready.status(), Some(503), "{policy:?}");
        for (filter, host) in [(f, &serving), (g, &late)] {
            assert!(filter.destroy());
            release(filter, host, &shared);
        }
        FreeList::clear();
    }
}
