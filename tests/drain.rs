//! Draining against the real Envoy: SIGTERM held until in-flight work is done, `/drain` for a
//! preStop hook, admin triggers, GOAWAY and `connection: close` as clients see them, the timeout,
//! and the same scenario without the module (which must lose requests).

use crate::common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{test_mode, Envoy, Options, Settings, TestMode, FAST};
use common::eventually;
use std::time::{Duration, Instant};

const MIN_DRAIN: Duration = Duration::from_millis(300);
const QUIET: Duration = Duration::from_millis(200);

fn slow(ms: u32) -> [(&'static str, String); 1] {
    [("x-envoy-fault-delay-request", ms.to_string())]
}

fn hdrs<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    h.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// Wait until `/ready` answers 503 `draining`; returns how long that took.
async fn wait_not_ready(envoy: &Envoy, since: Instant) -> Duration {
    eventually("/ready == 503", Duration::from_secs(5), || async {
        let r = clients::get(envoy.control, "/ready").await.ok()?;
        (r.status == 503 && r.text() == "draining\n").then(|| since.elapsed())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_holds_exit_until_in_flight_requests_finish() {
    let mut envoy = Envoy::start(Options::default()).await;
    let s = slow(1500);
    // Two slow HTTP/1.1 requests and three slow streams on one HTTP/2 connection.
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (port, h) = (envoy.data, s.clone());
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", "/slow-h1", &hdrs(&h)).await
        }));
    }
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    for _ in 0..3 {
        tasks.push(tokio::spawn(h2.start("/slow-h2", &hdrs(&s)).await.unwrap()));
    }
    envoy.wait_active(5).await;

    let t0 = Instant::now();
    envoy.sigterm();
    wait_not_ready(&envoy, t0).await;
    // Not ready at the drain start, not at its end: the requests holding it are still in flight.
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "/ready failed only after the in-flight requests ended"
    );
    assert!(envoy.exited().is_none(), "envoy exited at once on SIGTERM");

    // New requests during the drain are served (load balancers lag), and told to go away.
    let r = clients::get(envoy.data, "/late").await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let last_start = Instant::now();

    // The HTTP/2 client was sent GOAWAY: it can open no new stream.
    let goaway = h2.wait_goaway(Duration::from_secs(2)).await;
    assert_eq!(goaway.reason(), Some(h2::Reason::NO_ERROR));

    let mut last_done = Instant::now();
    for t in tasks {
        let r = t.await.unwrap().expect("in-flight request must complete");
        assert_eq!(r.status, 200);
        last_done = Instant::now();
    }
    let (status, exited_at) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "exit status {status}");
    let earliest = (t0 + MIN_DRAIN).max(last_start + QUIET).max(last_done);
    assert!(
        exited_at >= earliest,
        "exited {:?} before the rules allow",
        earliest - exited_at
    );
    assert!(
        exited_at <= earliest + Duration::from_millis(600),
        "exit {:?} after it was allowed",
        exited_at - earliest
    );
    envoy.assert_logged("drain started (trigger=sigterm, active_requests=5");
    let log = envoy.log();
    assert!(log.contains("drain completed in"), "{log}");
    assert!(log.contains("requests cut: 0"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http1_keepalive_gets_connection_close_then_socket_closes() {
    let envoy = Envoy::start(Options::default()).await;
    // Idle keep-alive before the drain: no close.
    let mut idle = H1Conn::connect(envoy.data).await.unwrap();
    let r = idle.send("GET", "/before", &[]).await.unwrap();
    assert_eq!((r.status, r.header("connection")), (200, None));
    // A slow request in flight on another connection when the drain starts.
    let mut busy = H1Conn::connect(envoy.data).await.unwrap();
    let s = slow(800);
    let h = s.clone();
    let in_flight = tokio::spawn(async move {
        let r = busy.send("GET", "/slow", &hdrs(&h)).await;
        (r, busy)
    });
    envoy.wait_active(1).await;

    let r = clients::request(envoy.control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["state"], "draining");
    assert_eq!(st["trigger"], "drain_endpoint");

    // The in-flight response carries connection: close and the server closes the socket.
    let (r, busy) = in_flight.await.unwrap();
    let r = r.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    busy.wait_closed(Duration::from_secs(2)).await.unwrap();

    // The first response after the drain on the idle keep-alive connection does too.
    let r = idle.send("GET", "/after", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    idle.wait_closed(Duration::from_secs(2)).await.unwrap();

    let st = envoy.drain_status().await;
    assert_eq!(st["connections_sent_away"]["http1"], 2, "{st}");
    assert_eq!(st["requests_served_while_draining"], 1, "{st}");
    assert_eq!(
        envoy
            .stat("graceful_drain.connections_sent_away_http1")
            .await,
        Some(2)
    );
}

/// Start a drain through the control endpoint with `in_flight` slow streams (1.5 s) open; the
/// HTTP/2 client gets GOAWAY(NO_ERROR) at once: while they are still in flight, not with their
/// responses (the module's count, read after the GOAWAY arrived, still has every one).
async fn drain_and_expect_goaway_at_once(envoy: &Envoy, h2: &mut H2Conn, in_flight: u64) {
    let r = clients::request(envoy.control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    let e = h2.wait_goaway(Duration::from_secs(2)).await;
    assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR));
    let st = envoy.drain_status().await;
    assert_eq!(
        st["active_requests"], in_flight,
        "GOAWAY came only as the streams in flight ended: {st}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http2_gets_goaway_at_drain_start_while_streams_complete() {
    let envoy = Envoy::start(Options::default()).await;
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    let s = slow(1500);
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(tokio::spawn(h2.start("/slow", &hdrs(&s)).await.unwrap()));
    }
    envoy.wait_active(3).await;
    // GOAWAY arrives at the drain start, not with the next response (streams take 1.5 s).
    drain_and_expect_goaway_at_once(&envoy, &mut h2, 3).await;
    for st in streams {
        let r = st
            .await
            .unwrap()
            .expect("stream in flight at GOAWAY completes");
        assert_eq!(r.status, 200);
    }
    let st = envoy.drain_status().await;
    assert_eq!(
        st["connections_sent_away"]["http2"], 1,
        "one GOAWAY per connection: {st}"
    );
    // Envoy closes the connection once its streams are done (after the HCM drain_timeout).
    h2.wait_closed(Duration::from_secs(10)).await.unwrap();
}

/// The connection hands its latest request back to the HTTP filter at drain start; when that one
/// already ended while an older one goes on, the network filter sends the GOAWAY itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http2_whose_latest_stream_ended_still_gets_goaway_at_drain_start() {
    let envoy = Envoy::start(Options {
        // Envoy's own drain-close off: only the module can send the GOAWAY early.
        bootstrap_extra: Some(r#""admin_address": """#),
        ..Options::default()
    })
    .await;
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    let s = slow(1500);
    let older = tokio::spawn(h2.start("/slow", &hdrs(&s)).await.unwrap());
    envoy.wait_active(1).await;
    let latest = h2.start("/", &[]).await.unwrap().await.unwrap();
    assert_eq!(latest.status, 200);
    envoy.wait_active(1).await;
    drain_and_expect_goaway_at_once(&envoy, &mut h2, 1).await;
    let r = older
        .await
        .unwrap()
        .expect("the stream in flight at GOAWAY completes");
    assert_eq!(r.status, 200);
    let st = envoy.drain_status().await;
    assert_eq!(
        st["connections_sent_away"]["http2"], 1,
        "counted as sent away, once: {st}"
    );
    assert_eq!(
        st["idle_connections_told"]["http2"], 0,
        "busy, not idle: {st}"
    );
    assert_eq!(
        envoy
            .stat("graceful_drain.connections_sent_away_http2")
            .await,
        Some(1),
        "Envoy's counter agrees"
    );
    // Closed once idle (the network filter's idle close; the exit would close it too).
    h2.wait_closed(Duration::from_secs(10)).await.unwrap();
}

/// `min_drain_duration` of the "at once" tests: a fresh drain cannot end sooner, so an exit
/// below it was not one (and a busy machine's teardown, over a second, stays below it).
const AT_ONCE_MIN_DRAIN: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_endpoint_answers_when_work_is_done_and_sigterm_then_exits_at_once() {
    let mut envoy = Envoy::start(Options {
        settings: Settings {
            min_drain: "3s",
            ..FAST
        },
        ..Options::default()
    })
    .await;
    let s = slow(1200);
    let (port, h) = (envoy.data, s.clone());
    let slow_req = tokio::spawn(async move {
        let r = clients::request(port, "GET", "/slow", &hdrs(&h)).await;
        (r, Instant::now())
    });
    envoy.wait_active(1).await;

    // ?wait=false answers at once: while the drain is on and the slow request still in flight.
    let r = clients::request(envoy.control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        (st["state"].as_str(), st["active_requests"].as_u64()),
        (Some("draining"), Some(1)),
        "?wait=false waited: {st}"
    );

    // A waiting /drain (what kubelet's preStop httpGet does) returns after the slow request.
    let r = clients::get(envoy.control, "/drain").await.unwrap();
    let answered = Instant::now();
    assert_eq!(r.status, 200);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["state"], "drained", "{st}");
    assert_eq!(st["outcome"]["timed_out"], false);
    assert_eq!(st["active_requests"], 0);
    let (sr, slow_done) = slow_req.await.unwrap();
    assert_eq!(sr.unwrap().status, 200);
    assert!(
        answered >= slow_done,
        "/drain answered before the slow request finished"
    );

    // A second /drain is harmless and answers at once: with the same, completed drain (no new
    // one started and waited for).
    let r = clients::request(envoy.control, "POST", "/drain", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let again: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(again["state"], "drained", "{again}");
    assert_eq!(again["outcome"], st["outcome"], "the same drain: {again}");
    assert_eq!(envoy.stat("graceful_drain.drains_started").await, Some(1));
    assert_eq!(
        clients::get(envoy.control, "/ready").await.unwrap().status,
        503
    );

    // SIGTERM after a completed drain: Envoy is released at once, without a drain of its own:
    // its exit comes before a fresh drain with these settings could end (min_drain_duration),
    // and the log has one drain started and completed.
    let log = envoy
        .sigterm_after_a_completed_drain(AT_ONCE_MIN_DRAIN, Duration::from_secs(15))
        .await;
    assert_eq!(
        log.matches("graceful_drain: drain completed in").count(),
        1,
        "{log}"
    );
}

/// A gateway with `drain_timeout` 1 s and one request in flight that outlives it.
async fn gateway_with_a_stuck_request(
    ms: u32,
) -> (
    Envoy,
    tokio::task::JoinHandle<Result<clients::Resp, String>>,
) {
    let envoy = Envoy::start(Options {
        settings: Settings {
            timeout: "1s",
            ..FAST
        },
        ..Options::default()
    })
    .await;
    let (port, h) = (envoy.data, slow(ms));
    let stuck =
        tokio::spawn(async move { clients::request(port, "GET", "/stuck", &hdrs(&h)).await });
    envoy.wait_active(1).await;
    (envoy, stuck)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_timeout_completes_on_time_and_reports_cut_requests() {
    let (mut envoy, stuck) = gateway_with_a_stuck_request(8000).await;
    let t0 = Instant::now();
    envoy.sigterm();
    // Ended by the 1 s timeout, not by the 8 s request: Envoy's exit no sooner than the timeout
    // and within a second of it (plus a busy machine's teardown, still well before the request's
    // end), and the module's own duration (its clock, free of the test's scheduling) too.
    let timeout = Duration::from_secs(1);
    envoy
        .wait_exit_between("drain_timeout 1s", t0 + timeout, t0 + 2 * timeout)
        .await;
    let (reported, timed_out) = envoy.reported_drain();
    assert!(timed_out);
    assert!(
        (Duration::from_secs(1)..Duration::from_secs(2)).contains(&reported),
        "drain timed out after {reported:?} (drain_timeout 1s)"
    );
    let log = envoy.log();
    assert!(log.contains("drain timed out after"), "{log}");
    assert!(log.contains("requests still in flight and cut: 1"), "{log}");
    // The request that outlived the timeout is indeed cut.
    assert!(stuck.await.unwrap().is_err());
}

/// Requests that keep arriving during a drain keep it open, through the real data path of the
/// mode under test (`TEST_MODE`): after SIGTERM a client starts a short request every 200 ms for
/// 2 s, each on a fresh connection, HTTP/1.1 and HTTP/2 in turn, each answered 200 (HTTP/1.1 told
/// `connection: close`). The quiet period (1 s) is the rule that binds: `min_drain_duration`
/// (300 ms) and the requests' ends are long past when it runs out. Envoy exits no earlier than
/// the last request's start plus the quiet period, and promptly after it: within a busy
/// machine's teardown, far from the 20 s timeout. Without the requests, the drain would end at
/// `min_drain_duration`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_arriving_during_the_drain_hold_it_for_the_quiet_period() {
    const QUIET: Duration = Duration::from_secs(1);
    const MIN_DRAIN: Duration = Duration::from_millis(300);
    const ARRIVING_FOR: Duration = Duration::from_secs(2);
    const EVERY: Duration = Duration::from_millis(200);
    let mut envoy = Envoy::start(Options::with(Settings::new("300ms", "1s", "20s"))).await;
    let t0 = Instant::now();
    envoy.sigterm();
    wait_not_ready(&envoy, t0).await;
    let (mut last_sent, mut last_done, mut n) = (t0, t0, 0u32);
    while last_sent < t0 + ARRIVING_FOR {
        // The workload's pace (a request every 200 ms), not a synchronisation.
        tokio::time::sleep(EVERY).await;
        assert!(
            envoy.exited().is_none(),
            "Envoy exited {:?} after SIGTERM with requests still arriving (quiet period {QUIET:?})",
            t0.elapsed()
        );
        last_sent = Instant::now();
        if n % 2 == 0 {
            let r = clients::get(envoy.data, "/during-the-drain")
                .await
                .unwrap_or_else(|e| panic!("HTTP/1.1 request {n} during the drain: {e}"));
            assert_eq!(r.status, 200, "HTTP/1.1 request {n}");
            assert_eq!(
                r.header("connection"),
                Some("close"),
                "HTTP/1.1 request {n}"
            );
        } else {
            let mut h2 = H2Conn::connect(envoy.data)
                .await
                .unwrap_or_else(|e| panic!("HTTP/2 connection {n} during the drain: {e}"));
            let r = h2
                .send("/during-the-drain", &[])
                .await
                .unwrap_or_else(|e| panic!("HTTP/2 request {n} during the drain: {e}"));
            assert_eq!(r.status, 200, "HTTP/2 request {n}");
        }
        last_done = Instant::now();
        n += 1;
    }
    // The quiet period binds: it runs out after the minimum and the last request's end.
    assert!(last_sent + QUIET > (t0 + MIN_DRAIN).max(last_done));
    // Envoy saw the last request start between `last_sent` and `last_done`.
    let at = envoy
        .wait_exit_between(
            "requests arriving during the drain",
            last_sent + QUIET,
            last_done + QUIET,
        )
        .await;
    println!(
        "{n} requests during the drain, the last {:?} after SIGTERM; exit {:?} after it",
        last_sent - t0,
        at - last_sent
    );
    // The module's own figure (from its drain start, after t0) agrees: up to the last request's
    // answer plus the quiet period and one tick of its clock.
    let (reported, timed_out) = envoy.reported_drain();
    let allowed = last_done + QUIET + Duration::from_millis(100) - t0;
    assert!(
        !timed_out && reported <= allowed,
        "drain ended after {reported:?} (timed out: {timed_out}), allowed {allowed:?}"
    );
    let log = envoy.log();
    assert!(log.contains("requests cut: 0"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_endpoint_starts_the_same_drain() {
    let envoy = Envoy::start(Options::default()).await;
    let r = clients::get(envoy.admin, "/graceful_drain/status")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["state"], "serving");

    let r = clients::request(envoy.admin, "POST", "/graceful_drain", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["state"], "draining");
    assert_eq!(st["trigger"], "admin");
    wait_not_ready(&envoy, Instant::now()).await;
    // Idempotent: a second call and a /drain report the same drain.
    let r = clients::request(envoy.admin, "POST", "/graceful_drain", &[])
        .await
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["trigger"], "admin");
    let r = clients::get(envoy.control, "/drain").await.unwrap();
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        (st["state"].as_str(), st["trigger"].as_str()),
        (Some("drained"), Some("admin"))
    );
    assert_eq!(envoy.stat("graceful_drain.drains_started").await, Some(1));
    assert_eq!(envoy.stat("graceful_drain.drains_completed").await, Some(1));
    assert_eq!(envoy.stat("graceful_drain.draining").await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn envoy_drain_listeners_starts_the_same_drain() {
    let envoy = Envoy::start(Options::default()).await;
    let r = clients::request(envoy.admin, "POST", "/drain_listeners?graceful", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let st = eventually(
        "drain started by /drain_listeners",
        Duration::from_secs(5),
        || async {
            let st = envoy.admin_status().await?;
            (st["state"] != "serving").then_some(st)
        },
    )
    .await;
    assert_eq!(st["trigger"], "drain_listeners");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_module_sigterm_loses_in_flight_requests() {
    // The contrast that shows the suite can fail: stock Envoy on the same config minus the module.
    let mut envoy = Envoy::start(Options {
        with_module: false,
        ..Options::default()
    })
    .await;
    let s = slow(1500);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (port, h) = (envoy.data, s.clone());
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", "/slow", &hdrs(&h)).await
        }));
    }
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    for _ in 0..2 {
        tasks.push(tokio::spawn(h2.start("/slow", &hdrs(&s)).await.unwrap()));
    }
    envoy.wait_stat("http.data.downstream_rq_active", 5).await;
    // Before the requests could end (1.5 s): it did not wait for them (all five lost, below).
    let t0 = Instant::now();
    let bound = Duration::from_millis(1500);
    envoy
        .sigterm_exits_within(t0, bound, "stock Envoy exits at once")
        .await;
    assert_eq!(tasks.len(), 5);
    common::scenario::assert_all_lost(tasks, "every in-flight request is lost without the module")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_endpoint_reports_a_timeout_with_200() {
    // kubelet only waits for the preStop answer: at the timeout /drain still answers 200, and the
    // summary says the timeout ended it and how many requests were still in flight.
    let (envoy, stuck) = gateway_with_a_stuck_request(5000).await;
    let t0 = Instant::now();
    let r = clients::get(envoy.control, "/drain").await.unwrap();
    let took = t0.elapsed();
    assert_eq!(r.status, 200);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["state"], "drained", "{st}");
    assert_eq!(st["outcome"]["timed_out"], true, "{st}");
    assert_eq!(st["outcome"]["requests_cut"], 1, "{st}");
    assert!(
        took >= Duration::from_secs(1),
        "answered before the timeout: {took:?}"
    );
    // Answered at the 1 s timeout, not when the 5 s request ended: the module's own duration
    // within a second of the timeout, and the request still in flight when the answer came.
    let ms = st["outcome"]["duration_ms"].as_u64().unwrap();
    assert!((1000..2000).contains(&ms), "{st}");
    assert!(
        !stuck.is_finished(),
        "/drain answered only after the request ended"
    );
    assert_eq!(envoy.stat("graceful_drain.drains_timed_out").await, Some(1));
}

/// HTTP/1.1 pipelining across a drain start: a client writes a slow request and a fast one in
/// one go. The slow one is answered with `connection: close`; the connection then ends in order
/// (this client never closes it, so Envoy does, at the connection manager's `drain_timeout` plus
/// its delayed close: about 6 s after the drain start). The pipelined request is either answered in full or never
/// processed (Envoy's request counter says so), so the client may retry it (RFC 9112 §9.3.2);
/// nothing is cut, and the count and the drain end as usual. (Envoy 1.40 answers both, each with
/// `connection: close`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_requests_across_a_drain_start_are_answered_or_never_processed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let envoy = Envoy::start(Options::default()).await;
    let before = envoy
        .stat("http.data.downstream_rq_total")
        .await
        .unwrap_or(0);
    let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", envoy.data))
        .await
        .unwrap();
    sock.write_all(
        b"GET /slow HTTP/1.1\r\nhost: x\r\nx-envoy-fault-delay-request: 1500\r\n\r\n\
          GET /pipelined HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await
    .unwrap();
    // The HTTP filter counts the request Envoy is answering; the exchange tracker (connection
    // mode) also the one read behind it, which Envoy has not started yet.
    let pipelined = match test_mode() {
        TestMode::Connection => 2,
        _ => 1,
    };
    envoy.wait_active(pipelined).await;
    let r = clients::request(envoy.control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    // Everything the server sends until it closes the connection.
    let mut wire = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), sock.read_to_end(&mut wire))
        .await
        .expect("the server closes the connection")
        .expect("a clean close, not a reset");
    let text = String::from_utf8_lossy(&wire).to_string();
    let answers = whole_answers(&text);
    assert!(
        text.starts_with("HTTP/1.1 200 "),
        "the slow request is answered:\n{text}"
    );
    assert_eq!(
        text.matches("HTTP/1.1 200 ").count(),
        answers,
        "only 200s:\n{text}"
    );
    assert!(
        text.to_ascii_lowercase().contains("connection: close\r\n"),
        "told to close:\n{text}"
    );
    envoy.wait_active(0).await;
    let processed = envoy.stat("http.data.downstream_rq_total").await.unwrap() - before;
    assert_eq!(
        processed, answers as i64,
        "a request was processed but not answered:\n{text}"
    );
    eventually("drained", Duration::from_secs(5), || async {
        (envoy.drain_status().await["state"] == "drained").then_some(())
    })
    .await;
}

/// How many HTTP/1.1 answers `wire` holds, each whole (its body as long as its
/// `content-length`, nothing left over); panics on a partial one.
fn whole_answers(wire: &str) -> usize {
    let mut rest = wire;
    let mut n = 0;
    while !rest.is_empty() {
        let (head, after) = rest
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("a partial head:\n{wire}"));
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no content-length:\n{wire}"));
        assert!(after.len() >= len, "a partial body:\n{wire}");
        rest = &after[len..];
        n += 1;
    }
    n
}

/// SIGINT (Ctrl-C) and the admin's `POST /quitquitquit` reach Envoy's shutdown as SIGTERM does:
/// the exit is held until the request in flight is answered, then Envoy exits 0 by the rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigint_and_quitquitquit_drain_like_sigterm() {
    for how in ["SIGINT", "/quitquitquit"] {
        let mut envoy = Envoy::start(Options::default()).await;
        let port = envoy.data;
        let sent = Instant::now();
        let in_flight = tokio::spawn(async move {
            let r = clients::request(port, "GET", "/", &hdrs(&slow(800))).await;
            (r, Instant::now())
        });
        envoy.wait_active(1).await;
        let t0 = Instant::now();
        if how == "SIGINT" {
            envoy.signal(libc::SIGINT);
        } else {
            let r = clients::request(envoy.admin, "POST", "/quitquitquit", &[])
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{how}");
        }
        let (r, done) = in_flight.await.unwrap();
        let r = r.unwrap();
        assert_eq!(r.status, 200, "{how}");
        assert_eq!(r.header("connection"), Some("close"), "{how}");
        // Released by the request's end (and the rules), not by the 10 s drain_timeout: Envoy's
        // exit and the module's figure.
        envoy
            .wait_exit_by_the_drain_rules(how, t0, [MIN_DRAIN, QUIET], sent, done)
            .await;
        assert!(
            envoy
                .log()
                .contains("graceful_drain: Envoy is shutting down"),
            "{how}"
        );
    }
}

/// #63 item 5 (c): a health check is what the operator configures (`health_check_paths`),
/// never what a client's `User-Agent` says. During a drain a configured probe is recognised
/// (answered, not work), and a 1.5 s request sent with kubelet's `User-Agent` on another path
/// is work: it holds the drain, is served in full, and Envoy exits after it. Before, any
/// request whose `User-Agent` began `kube-probe/` was a health check, however long, and the
/// exit at `min_drain_duration` cut it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checker_s_user_agent_alone_never_lets_the_drain_cut_a_request() {
    let mut envoy = Envoy::start(Options {
        settings: FAST,
        bootstrap_extra: Some(r#""health_check_paths": ["/healthz"]"#),
        ..Options::default()
    })
    .await;
    let t0 = Instant::now();
    envoy.sigterm();
    wait_not_ready(&envoy, t0).await;
    let probe = clients::request(
        envoy.data,
        "GET",
        "/healthz",
        &[("user-agent", "kube-probe/1.31")],
    )
    .await
    .expect("the configured probe is answered");
    assert_eq!(probe.status, 200);
    let st = envoy.drain_status().await;
    assert_eq!(st["health_checks_seen"], 1, "the configured path: {st}");
    let port = envoy.data;
    let long = tokio::spawn(async move {
        let r = clients::request(
            port,
            "GET",
            "/report",
            &[
                ("user-agent", "kube-probe/1.31"),
                ("x-envoy-fault-delay-request", "1500"),
            ],
        )
        .await;
        (r, Instant::now())
    });
    envoy.wait_active(1).await;
    let (r, done) = long.await.unwrap();
    let r = r.expect("served in full, not cut by the exit");
    assert_eq!(r.status, 200);
    envoy
        .wait_drained_after(done, Duration::from_secs(10), "the request")
        .await;
    envoy.assert_logged("requests cut: 0");
}
