//! Hardening against the real Envoy: contained panics, every way a stream can end, long-lived
//! streams, control-endpoint security, hostile input, and concurrency 1/2/4.

use crate::common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{test_mode, Envoy, Options, Settings, TestMode, EXIT_SLACK, FAST};
use common::upstream::Upstream;
use common::{eventually, free_ports};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn panics_are_contained_and_envoy_keeps_serving() {
    let upstream = Upstream::start().await;
    // The HTTP filter's panics (its test header): filter mode whatever the suite's mode.
    let envoy = Envoy::start(Options {
        panic_test_module: true,
        test_upstream: Some(upstream.port),
        data_http_filter: true,
        track_requests: false,
        ..Options::default()
    })
    .await;
    // The data path fails open: a panic in the module on the request path or the response path
    // is contained, and the client's request goes through Envoy unharmed.
    let r = clients::request(
        envoy.data,
        "GET",
        "/",
        &[("x-graceful-drain-test-panic", "request")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello from the graceful-drain gateway\n");
    let r = clients::request(
        envoy.data,
        "GET",
        "/upstream/ok",
        &[("x-graceful-drain-test-panic", "response")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // A panic after the request was counted in flight: the filter is poisoned (it stops acting)
    // and its destroy still ends the request in the count (checked by wait_active(0) below).
    let r = clients::request(
        envoy.data,
        "GET",
        "/",
        &[("x-graceful-drain-test-panic", "after_start")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    // Only the module's bookkeeping degrades, and it says so: a counter and a log line each.
    assert_eq!(envoy.drain_status().await["module_errors"], 3);
    assert_eq!(envoy.stat("graceful_drain.module_errors").await, Some(3));
    // Envoy is alive and serving, and the accounting is intact.
    for _ in 0..20 {
        assert_eq!(clients::get(envoy.data, "/").await.unwrap().status, 200);
    }
    envoy.wait_active(0).await;
    let log = envoy.log();
    assert_eq!(
        log.matches("panic: test panic requested by x-graceful-drain-test-panic: request")
            .count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("panic: test panic requested by x-graceful-drain-test-panic: response")
            .count(),
        1
    );
    assert!(log.contains("panic contained in request_headers"));
    assert!(log.contains("panic contained in response_headers"));
    // The drain still works after the panics.
    let r = clients::get(envoy.control, "/drain").await.unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_config_is_refused() {
    let p = free_ports(3);
    let opts = Options {
        panic_test_module: true,
        control_config: Some("panic-test".into()),
        ..Options::default()
    };
    let yaml = common::envoy::render_gateway(p[0], p[1], p[2], &opts);
    let dir = common::envoy::TempDir::new("panic-cfg");
    let cfg = dir.0.join("envoy.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(common::envoy::envoy_bin())
            .arg("-c")
            .arg(&cfg)
            .args(["--use-dynamic-base-id", "--concurrency", "1"])
            .env(
                "ENVOY_DYNAMIC_MODULES_SEARCH_PATH",
                common::envoy::panic_test_module_dir(),
            )
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("envoy did not refuse within 30s")
    .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("panic: test panic requested in filter config"),
        "{log}"
    );
    assert!(
        log.contains("panic contained in http_filter_config_new"),
        "{log}"
    );
}

/// Envoy's own counters that tell how streams ended (see [`one_stream_end`]'s kinds): what shows
/// that each way of ending happened in Envoy, not only in the client's loop.
const ENDINGS: [&str; 8] = [
    "http.data.rq_direct_response",
    "http.data.fault.aborts_injected",
    "cluster.test_upstream.upstream_cx_destroy_remote_with_active_rq",
    "cluster.test_upstream.upstream_rq_timeout",
    "http.data.downstream_cx_destroy_remote_active_rq",
    "http.data.downstream_rq_rx_reset",
    "http.data.downstream_rq_response_before_rq_complete",
    "http.data.downstream_rq_http2_total",
];

async fn endings(envoy: &Envoy) -> [i64; 8] {
    let mut v = [0; 8];
    for (v, name) in v.iter_mut().zip(ENDINGS) {
        *v = envoy.stat(name).await.unwrap_or(0);
    }
    v
}

/// Whether Envoy's counters (`d`, grown since the start) show each kind of [`one_stream_end`]
/// run `c[kind]` times: `None` if so, else the kinds they do not show. Kinds 0-3 reach Envoy every
/// time (the client saw Envoy's answer): each by its count. The others linger a moment and go (a
/// busy machine may let one go before Envoy read it): at least half of each. Where kinds share a
/// counter, a kind's share is what is left once the others are credited with all they could
/// have added (so one kind's shortfall may name its partner too). Every client reset of an HTTP/1.1 request is one of
/// `downstream_cx_destroy_remote_active_rq` (kinds 4, 5: the client closed during the request)
/// or `downstream_rq_response_before_rq_complete` (7, 8: the gateway's direct response came
/// before the body, then the client went), so the rest of `downstream_rq_rx_reset` are HTTP/2
/// streams the client reset (6: RST_STREAM, one per run; 9: a dropped connection, two).
fn endings_missing(d: &[i64; 8], c: &[u64]) -> Option<String> {
    let c: Vec<i64> = c.iter().map(|&n| n as i64).collect();
    let [direct, aborts, upstream_reset, upstream_timeout, h1_abort, rx_reset, early_response, h2_streams] =
        *d;
    let h2_resets = rx_reset - h1_abort - early_response;
    let checks = [
        ("0: direct responses", direct >= c[0]),
        ("1: fault aborts", aborts == c[1]),
        ("2: upstream resets", upstream_reset >= c[2]),
        ("3: route timeouts", upstream_timeout >= c[3]),
        (
            "4: HTTP/1.1 gone before the response",
            2 * (h1_abort - c[5]) >= c[4],
        ),
        ("5: HTTP/1.1 gone mid-body", 2 * (h1_abort - c[4]) >= c[5]),
        (
            "6: HTTP/2 stream in Envoy",
            2 * (h2_streams - 2 * c[9]) >= c[6],
        ),
        ("6: HTTP/2 RST_STREAM", 2 * (h2_resets - 2 * c[9]) >= c[6]),
        ("7: gone mid-body", 2 * (early_response - c[8]) >= c[7]),
        (
            "8: gone before the body",
            2 * (early_response - c[7]) >= c[8],
        ),
        ("9: HTTP/2 streams in Envoy", h2_streams - c[6] >= c[9]),
        ("9: HTTP/2 streams reset", h2_resets - c[6] >= c[9]),
    ];
    let missing: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(k, _)| *k)
        .collect();
    (!missing.is_empty()).then(|| format!("{missing:?}"))
}

/// Every way a stream can end, mixed under concurrency 2 for a bounded time: each reached Envoy
/// (its own counters), the in-flight count must come back to exactly 0 and a drain must then
/// complete at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn count_survives_every_way_a_stream_can_end() {
    let upstream = Upstream::start().await;
    let envoy = Envoy::start(Options {
        test_upstream: Some(upstream.port),
        ..Options::default()
    })
    .await;
    let port = envoy.data;
    let before = endings(&envoy).await;
    let kinds: u64 = 10;
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..kinds).map(|_| AtomicU64::new(0)).collect());
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for worker in 0..20u64 {
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = worker;
            while Instant::now() < deadline {
                let kind = i % kinds;
                i += 1;
                one_stream_end(port, kind).await;
                done[kind as usize].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let counts: Vec<u64> = done.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    assert!(
        counts.iter().all(|&c| c >= 3),
        "every kind must have run: {counts:?}"
    );
    // Envoy counts an ending when it sees it (a connection's close a moment after the client's):
    // polled until every kind shows, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let d = loop {
        let now = endings(&envoy).await;
        let d: [i64; 8] = std::array::from_fn(|i| now[i] - before[i]);
        match endings_missing(&d, &counts) {
            None => break d,
            Some(missing) => assert!(
                Instant::now() < deadline,
                "after 10 s, Envoy's counters do not show every way of ending: {missing} \
                 missing\ncounters: {:?}\nruns per kind: {counts:?}",
                ENDINGS.iter().zip(d).collect::<Vec<_>>()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    envoy.wait_active(0).await;
    let st = envoy.drain_status().await;
    assert_eq!(st["active_requests"], 0, "{st}");
    envoy.wait_stat("graceful_drain.active_requests", 0).await;
    // Nothing in flight: the drain completes by its rules, not held by a leaked count until the
    // 10 s drain_timeout (which would say timed_out, with a request cut).
    let r = clients::get(envoy.control, "/drain").await.unwrap();
    assert_eq!(r.status, 200);
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["outcome"]["timed_out"], false, "{st}");
    assert_eq!(st["outcome"]["requests_cut"], 0, "{st}");
    println!(
        "stream endings exercised: {counts:?} (kinds 0-9, see one_stream_end); Envoy counted {:?}",
        ENDINGS.iter().zip(d).collect::<Vec<_>>()
    );
}

/// One request that ends in a particular way. The short sleeps in some kinds are the scenario,
/// not a synchronisation: the client lingers a moment with its request half sent (or its
/// streams open), then goes away. Should Envoy not have read the request by then (a busy
/// machine), that run is a connection dropped before its request, which the count must survive
/// as well; the assertions hold either way.
async fn one_stream_end(port: u16, kind: u64) {
    let slow = [("x-envoy-fault-delay-request", "2000")];
    match kind {
        // Normal completion.
        0 => assert_eq!(clients::get(port, "/").await.unwrap().status, 200),
        // Local reply from another filter (fault abort).
        1 => {
            let r = clients::request(port, "GET", "/", &[("x-envoy-fault-abort-request", "503")])
                .await
                .unwrap();
            assert_eq!(r.status, 503);
        }
        // Upstream resets the connection.
        2 => {
            let r = clients::get(port, "/upstream/reset").await.unwrap();
            assert!(r.status >= 500, "{}", r.status);
        }
        // Upstream never answers: route timeout, 504.
        3 => assert_eq!(
            clients::get(port, "/upstream/hang").await.unwrap().status,
            504
        ),
        // Client abort before response headers (HTTP/1.1 connection dropped).
        4 => {
            let mut c = H1Conn::connect(port).await.unwrap();
            let _ =
                tokio::time::timeout(Duration::from_millis(50), c.send("GET", "/", &slow)).await;
        }
        // Client abort after response headers: a streaming response, dropped mid-body.
        5 => {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(b"GET /upstream-streaming/stream HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 256];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("the streaming response's head within 5 s")
                .unwrap();
            assert!(
                buf[..n].starts_with(b"HTTP/1.1 200"),
                "{:?}",
                String::from_utf8_lossy(&buf[..n])
            );
        }
        // HTTP/2 RST_STREAM from the client.
        6 => {
            let mut c = H2Conn::connect(port).await.unwrap();
            let f = c.start("/", &slow).await.unwrap();
            let _ = tokio::time::timeout(Duration::from_millis(50), f).await;
        }
        // Connection dropped mid request body.
        7 => {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n0123456789")
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        // A request that announces a body and never sends it, then the client goes away.
        8 => {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n")
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        // HTTP/2 connection dropped with streams in flight.
        _ => {
            let mut c = H2Conn::connect(port).await.unwrap();
            let _f1 = c.start("/", &slow).await.unwrap();
            let _f2 = c.start("/upstream-streaming/stream", &[]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(c);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_lived_streams_hold_the_drain_until_the_timeout() {
    let upstream = Upstream::start().await;
    let mut envoy = Envoy::start(Options {
        test_upstream: Some(upstream.port),
        settings: Settings {
            timeout: "2s",
            ..FAST
        },
        // The streams as they are held without the move (connection mode moves WebSockets and
        // SSE by default: tests/long_lived.rs); filter mode holds them so in any case.
        network_extra: Some(r#""move_long_lived_streams": false"#),
        ..Options::default()
    })
    .await;
    // SSE-style chunked response over HTTP/1.1.
    let mut sse = TcpStream::connect(("127.0.0.1", envoy.data)).await.unwrap();
    sse.write_all(b"GET /upstream-streaming/stream HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = sse.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // WebSocket upgrade over HTTP/1.1: echoes.
    let mut ws = TcpStream::connect(("127.0.0.1", envoy.data)).await.unwrap();
    ws.write_all(
        b"GET /upstream-streaming/ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\
          sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .unwrap();
    let n = ws.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // A slowly streaming HTTP/2 response (gRPC server-streaming has the same shape).
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    let h2_stream = tokio::spawn(h2.start("/upstream-streaming/stream", &[]).await.unwrap());
    envoy.wait_active(3).await;

    let t0 = Instant::now();
    envoy.sigterm();
    // The HTTP/2 connection is told to go away at once; its stream keeps flowing.
    let e = h2.wait_goaway(Duration::from_secs(2)).await;
    assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR));
    // The upgraded connection cannot get `connection: close` (its response is long sent): it
    // keeps working during the drain.
    ws.write_all(b"ping").await.unwrap();
    let n = ws.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"ping");
    let n = sse.read(&mut buf).await.unwrap();
    assert!(n > 0, "SSE stream stopped during the drain");
    // Status names how many and how old.
    let st = envoy.drain_status().await;
    assert_eq!(st["state"], "draining");
    assert_eq!(st["active_requests"], 3, "{st}");
    let by_age = &st["in_flight_by_age"];
    assert_eq!(
        by_age["under_1s"].as_u64().unwrap() + by_age["1s_to_10s"].as_u64().unwrap(),
        3,
        "{st}"
    );
    // Request starts are stamped with the kernel's coarse clock (one tick, up to 4 ms, behind the
    // precise clock that stamps the drain start): compare within that resolution.
    assert!(
        st["oldest_request_age_ms"].as_u64().unwrap() + 10
            >= st["drain_elapsed_ms"].as_u64().unwrap(),
        "the oldest request started before the drain: {st}"
    );
    // They hold the drain open until drain_timeout, and the exit is on time.
    let (status, at) = envoy.wait_exit(Duration::from_secs(5)).await;
    assert!(status.success());
    let took = at - t0;
    assert!(
        took >= Duration::from_secs(2),
        "exited before the timeout: {took:?}"
    );
    // Released by the 2 s timeout (these streams never end): the module's own duration within a
    // second of it, and the exit within the 5 s wait above.
    let (reported, timed_out) = envoy.reported_drain();
    assert!(
        timed_out && (Duration::from_secs(2)..Duration::from_secs(3)).contains(&reported),
        "drain ended after {reported:?}, timed out: {timed_out} (drain_timeout 2s)"
    );
    envoy.assert_logged("requests still in flight and cut: 3");
    // The streams end with the process.
    let n = tokio::time::timeout(Duration::from_secs(2), ws.read(&mut buf))
        .await
        .unwrap();
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "websocket still open after exit"
    );
    let r = h2_stream.await.unwrap();
    assert!(
        r.is_err(),
        "the h2 stream cannot complete: it was cut at the timeout"
    );
}

const TOKEN: &str = "t0k3n-for-tests";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_needs_the_token_when_one_is_configured() {
    let envoy = Envoy::start(Options {
        control_config: Some(r#"{"role": "control", "drain_token_env": "GD_TEST_TOKEN"}"#.into()),
        env: vec![("GD_TEST_TOKEN".into(), format!("{TOKEN}\n"))],
        ..Options::default()
    })
    .await;
    // Readiness and status need no token.
    assert_eq!(
        clients::get(envoy.control, "/ready").await.unwrap().status,
        200
    );
    assert_eq!(
        clients::get(envoy.control, "/drain/status")
            .await
            .unwrap()
            .status,
        200
    );
    let r = clients::get(envoy.control, "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    for bad in [
        "Bearer nope",
        "Bearer t0k3n-for-test",
        "Bearer t0k3n-for-testsX",
        TOKEN,
        "Basic dXNlcjpwYXNz",
    ] {
        let r = clients::request(
            envoy.control,
            "POST",
            "/drain?wait=false",
            &[("authorization", bad)],
        )
        .await
        .unwrap();
        assert_eq!(r.status, 403, "{bad}");
        assert!(!r.text().contains(TOKEN));
    }
    assert_eq!(envoy.drain_status().await["state"], "serving");
    // The scheme is case-insensitive (RFC 7235).
    let auth = format!("bearer {TOKEN}");
    let r = clients::request(
        envoy.control,
        "POST",
        "/drain?wait=false",
        &[("authorization", &auth)],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 202);
    assert_eq!(
        clients::get(envoy.control, "/ready").await.unwrap().status,
        503
    );
    assert!(
        !envoy.log().contains(TOKEN),
        "the token must never be logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_paths_cannot_be_reached_through_tricks_and_a_drain_cannot_be_undone() {
    let envoy = Envoy::start(Options::default()).await;
    let tricks = [
        "/drain",
        "/drain?wait=false",
        "/DRAIN",
        "/drain/",
        "//drain",
        "/%64rain",
        "/drain%3Fwait=false",
        "/drain;x",
        "/./drain",
        "/x/../drain",
        "/ready",
        "/drain/status",
    ];
    // The data listener never answers control paths, whatever the Host or path.
    for p in tricks {
        for host in ["127.0.0.1", "localhost:10001", "control"] {
            let mut c = H1Conn::connect(envoy.data).await.unwrap();
            let r = c.send("POST", p, &[("host", host)]).await.unwrap();
            assert_eq!(
                r.text(),
                "hello from the graceful-drain gateway\n",
                "data {p} host {host}"
            );
        }
    }
    // On the control listener, only exact paths are endpoints.
    for p in tricks
        .iter()
        .filter(|p| !["/drain", "/drain?wait=false", "/ready", "/drain/status"].contains(p))
    {
        let r = clients::request(envoy.control, "POST", p, &[])
            .await
            .unwrap();
        assert!(
            r.status == 404 || r.status == 400,
            "control {p}: {}",
            r.status
        );
    }
    assert_eq!(
        envoy.drain_status().await["state"],
        "serving",
        "a trick started a drain"
    );

    // Oversized and non-UTF-8 input: refused cleanly, Envoy unharmed.
    let long = format!("/{}", "a".repeat(16 * 1024));
    let r = clients::get(envoy.control, &long).await.unwrap();
    assert_eq!(r.status, 404);
    let mut s = TcpStream::connect(("127.0.0.1", envoy.control))
        .await
        .unwrap();
    s.write_all(b"GET /dr\xffain\xfe HTTP/1.1\r\nhost: \xff\r\nx-bin: \x80\x81\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 4"), "{head}");
    let r = clients::request(envoy.data, "GET", "/", &[("x-bin", "caf\u{e9}")])
        .await
        .unwrap();
    assert_eq!(r.status, 200);

    // Start the drain; nothing undoes it.
    assert_eq!(
        clients::get(envoy.control, "/drain?wait=false")
            .await
            .unwrap()
            .status,
        202
    );
    for (m, p) in [
        ("POST", "/ready"),
        ("GET", "/undrain"),
        ("POST", "/drain/status"),
        ("GET", "/drain?wait=true"),
        ("PUT", "/drain"),
    ] {
        let _ = clients::request(envoy.control, m, p, &[]).await.unwrap();
        let r = clients::get(envoy.control, "/ready").await.unwrap();
        assert_eq!(r.status, 503, "after {m} {p}");
    }
    assert_eq!(clients::get(envoy.data, "/").await.unwrap().status, 200);
}

/// What clients saw when a drain started with requests in flight on every worker.
#[derive(Debug, Default)]
struct RaceReport {
    /// In-flight HTTP/1.1 responses (started before the drain) without `connection: close`:
    /// their connection was not sent away at drain start.
    h1_in_flight_not_told: usize,
    /// Racing keep-alive loops that never got `connection: close` (they stop at the first one).
    h1_racers_not_told: usize,
    /// HTTP/2 clients with a slow stream in flight whose GOAWAY arrived before any slow response
    /// could have been sent (the client's own state, read without sending anything).
    h2_goaway_before_responses: u64,
    /// HTTP/1.1 connections and HTTP/2 connections that carried a request.
    h1_connections: u64,
    h2_connections: u64,
    /// The module's own per-connection counts, read shortly after the drain start (before any
    /// in-flight request finished): each connection counted once.
    sent_away_http1: u64,
    sent_away_http2: u64,
}

/// How the drain start reaches the requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The network filter in front: through each connection's scheduler (the shipped config).
    ByConnection,
    /// The HTTP filter alone: each request has a scheduler of its own.
    PerRequest,
}

/// The drain start racing request starts, with requests in flight on every worker and Envoy's
/// own drain-close off (`admin_address: ""`), so only the module's wake-up can tell an in-flight
/// connection to go away. `faults` runs the test-fault build (to prove the checks can fail).
async fn race_drain_start(concurrency: u32, wake: Wake, faults: Option<&str>) -> RaceReport {
    let envoy = Envoy::start(Options {
        concurrency,
        network_filter: wake == Wake::ByConnection,
        bootstrap_extra: Some(r#""admin_address": """#),
        panic_test_module: faults.is_some(),
        env: faults
            .map(|f| vec![("GRACEFUL_DRAIN_TEST_FAULTS".to_string(), f.to_string())])
            .unwrap_or_default(),
        ..Options::default()
    })
    .await;
    let port = envoy.data;
    // Several connections per worker, each with one slow request in flight at the drain start.
    let per_proto = 3 * concurrency as usize;
    const SLOW: Duration = Duration::from_millis(1500);
    let slow = [("x-envoy-fault-delay-request", "1500")];
    // No slow response can leave Envoy before this: what a client saw earlier came at the drain
    // start, not with (or after) its response.
    let responses_possible = Instant::now() + SLOW;
    let mut h1_slow = Vec::new();
    for _ in 0..per_proto {
        let mut c = H1Conn::connect(port).await.unwrap();
        h1_slow.push(tokio::spawn(async move {
            let r = c.send("GET", "/", &slow).await;
            (r, c)
        }));
    }
    let mut h2_slow = Vec::new();
    for _ in 0..per_proto {
        let mut c = H2Conn::connect(port).await.unwrap();
        let f = c.start("/", &slow).await.unwrap();
        h2_slow.push((c, tokio::spawn(f)));
    }
    envoy.wait_active(2 * per_proto as u64).await;
    // The path under test is the one taken: no scheduler per request behind the network filter.
    let own = envoy.drain_status().await["request_table"]["own_wakers"]
        .as_u64()
        .unwrap();
    let expected = match wake {
        Wake::ByConnection => 0,
        Wake::PerRequest => 2 * per_proto as u64,
    };
    assert_eq!(
        own, expected,
        "requests with a scheduler of their own ({wake:?})"
    );
    // Racing keep-alive loops: requests start while the drain starts.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let mut racers = Vec::new();
    for _ in 0..concurrency * 2 {
        let (stop, answered) = (stop.clone(), answered.clone());
        racers.push(tokio::spawn(async move {
            let mut c = H1Conn::connect(port).await.unwrap();
            let mut first = true;
            loop {
                let r = c
                    .send("GET", "/", &[])
                    .await
                    .expect("every request succeeds");
                assert_eq!(r.status, 200);
                if std::mem::take(&mut first) {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                if r.header("connection") == Some("close") || stop.load(Ordering::Relaxed) {
                    return r.header("connection") == Some("close");
                }
            }
        }));
    }
    // The drain starts once every racing loop is going (each has had an answer).
    let racing = u64::from(concurrency * 2);
    eventually(
        "every racing loop answered",
        Duration::from_secs(10),
        || async { (answered.load(Ordering::Relaxed) == racing).then_some(()) },
    )
    .await;
    let r = clients::get(envoy.control, "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    // Before any slow response can have been sent, every HTTP/2 client must have its GOAWAY:
    // each client's own state, read without sending anything, the reading kept only if it was
    // over before `responses_possible` (a GOAWAY with the response would come after). The
    // module's counts are read alongside, until they cover every connection, from a reading taken
    // while no slow request had ended yet (a reading is valid if none had ended after it was
    // taken). With the wake-up broken that is the last reading before the first slow request
    // ends.
    let slow_ended =
        || h1_slow.iter().any(|t| t.is_finished()) || h2_slow.iter().any(|(_, t)| t.is_finished());
    let (want_h1, want_h2) = (per_proto as u64 + racing, per_proto as u64);
    let mut goaway = vec![None; h2_slow.len()];
    let mut st = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen: Vec<_> = h2_slow
            .iter()
            .map(|(c, _)| c.goaway_received().map(|e| e.reason()))
            .collect();
        if Instant::now() < responses_possible {
            for (g, s) in goaway.iter_mut().zip(seen) {
                *g = g.or(s);
            }
        }
        let reading = envoy.drain_status().await;
        if slow_ended() {
            break;
        }
        let sent = &reading["connections_sent_away"];
        let all_counted =
            sent["http1"].as_u64() >= Some(want_h1) && sent["http2"].as_u64() >= Some(want_h2);
        st = Some(reading);
        if all_counted && goaway.iter().all(Option::is_some) || Instant::now() >= responses_possible
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "slow requests neither ended nor all sent away after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "{} of {} HTTP/2 clients had GOAWAY {:?} before their responses could come",
        goaway.iter().filter(|g| g.is_some()).count(),
        goaway.len(),
        responses_possible.saturating_duration_since(Instant::now())
    );
    for g in goaway.iter().flatten() {
        assert_eq!(*g, Some(h2::Reason::NO_ERROR), "GOAWAY at the drain start");
    }
    let st = st.expect("a /drain/status reading before the first slow request ended");
    stop.store(true, Ordering::Relaxed);
    let mut report = RaceReport {
        h1_connections: per_proto as u64,
        h2_connections: per_proto as u64,
        h2_goaway_before_responses: goaway.iter().filter(|g| g.is_some()).count() as u64,
        sent_away_http1: st["connections_sent_away"]["http1"].as_u64().unwrap(),
        sent_away_http2: st["connections_sent_away"]["http2"].as_u64().unwrap(),
        ..Default::default()
    };
    for t in racers {
        let told = tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("racing loop ended")
            .unwrap();
        report.h1_connections += 1;
        if !told {
            report.h1_racers_not_told += 1;
        }
    }
    for t in h1_slow {
        let (r, _c) = t.await.unwrap();
        let r = r.expect("in-flight HTTP/1.1 request succeeds");
        assert_eq!(r.status, 200);
        if r.header("connection") != Some("close") {
            report.h1_in_flight_not_told += 1;
        }
    }
    for (_c, f) in h2_slow {
        let r = f.await.unwrap().expect("in-flight HTTP/2 stream succeeds");
        assert_eq!(r.status, 200);
    }
    envoy.wait_active(0).await;
    report
}

async fn drain_races_request_starts(concurrency: u32, wake: Wake) {
    let r = race_drain_start(concurrency, wake, None).await;
    // What each client saw: every HTTP/1.1 one `connection: close`, every HTTP/2 one its GOAWAY
    // while its stream was in flight.
    assert_eq!(r.h1_in_flight_not_told, 0, "{r:?}");
    assert_eq!(r.h1_racers_not_told, 0, "{r:?}");
    assert_eq!(
        r.h2_goaway_before_responses, r.h2_connections,
        "each HTTP/2 client's GOAWAY at the drain start: {r:?}"
    );
    // The module's counts agree: each connection counted once.
    assert_eq!(
        r.sent_away_http1, r.h1_connections,
        "each HTTP/1.1 connection once: {r:?}"
    );
    assert_eq!(
        r.sent_away_http2, r.h2_connections,
        "each HTTP/2 connection once: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_race_concurrency_1() {
    drain_races_request_starts(1, Wake::ByConnection).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_race_concurrency_2() {
    drain_races_request_starts(2, Wake::ByConnection).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_race_concurrency_4() {
    drain_races_request_starts(4, Wake::ByConnection).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_race_per_request_wakers_concurrency_2() {
    drain_races_request_starts(2, Wake::PerRequest).await
}

/// The race test can fail: with the drain's wake-up deliberately broken (test-fault build),
/// in-flight connections are not told at drain start, and the checks above see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_race_test_catches_a_lost_wake_up() {
    for wake in [Wake::ByConnection, Wake::PerRequest] {
        let r = race_drain_start(2, wake, Some("skip_wakeup")).await;
        // Where the network filter tracks the requests (connection mode; and the cross-check
        // run, whose test-fault module is not the cross-check build: its tracker counts, the HTTP
        // filter in the same chain does not), an in-flight HTTP/1.1 response gets `connection:
        // close` from the network filter's write path, which no wake-up carries: only HTTP/2
        // shows the loss.
        let connection_mode = test_mode() != TestMode::Filter && wake == Wake::ByConnection;
        let not_told = if connection_mode { 0 } else { 6 };
        assert_eq!(r.h1_in_flight_not_told, not_told, "{wake:?}: {r:?}");
        assert_eq!(r.h2_goaway_before_responses, 0, "{wake:?}: {r:?}");
        assert_eq!(r.sent_away_http2, 0, "{wake:?}: {r:?}");
        assert!(r.sent_away_http1 < r.h1_connections, "{wake:?}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_4_counts_in_flight_exactly() {
    let envoy = Envoy::start(Options {
        concurrency: 4,
        ..Options::default()
    })
    .await;
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let port = envoy.data;
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", "/", &[("x-envoy-fault-delay-request", "1000")]).await
        }));
    }
    envoy.wait_active(12).await;
    envoy.wait_stat("graceful_drain.active_requests", 12).await;
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().status, 200);
    }
    envoy.wait_active(0).await;
}

fn faults(f: &str) -> Options {
    Options {
        panic_test_module: true,
        env: vec![("GRACEFUL_DRAIN_TEST_FAULTS".to_string(), f.to_string())],
        ..Options::default()
    }
}

/// A request on a route the filter is disabled on, while every pass over Envoy's stats is slow
/// (the test fault `slow_stats_scan`, 700 ms a pass: a large configuration or a loaded
/// machine): the drain holds until a scan of it shows the request, then until it ends, and the
/// request is served in full. Before, with a data filter loaded, the drain treated Envoy's
/// figures as unused until a scan was seen and put its first scan off: it completed at
/// min_drain_duration (300 ms) and the request was cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_the_filter_does_not_see_holds_the_drain_while_the_scan_is_slow() {
    let o = faults("slow_stats_scan");
    let p = common::free_ports(3);
    let yaml = common::envoy::add_route_without_the_filter(
        &common::envoy::render_gateway(p[0], p[1], p[2], &o),
        "/no-filter/",
    );
    let mut envoy = Envoy::start_yaml(&yaml, p[0], p[1], p[2], &o).await;
    let port = envoy.data;
    let unseen = tokio::spawn(async move {
        clients::request(
            port,
            "GET",
            "/no-filter/slow",
            &[("x-envoy-fault-delay-request", "2500")],
        )
        .await
    });
    eventually("the request in flight", Duration::from_secs(5), || async {
        (envoy.stat("http.data.downstream_rq_active").await == Some(1)).then_some(())
    })
    .await;
    if common::envoy::test_mode() == common::envoy::TestMode::Filter {
        assert_eq!(
            envoy.drain_status().await["active_requests"],
            0,
            "not the filter's"
        );
    }
    envoy.sigterm();
    let r = unseen.await.unwrap().expect("served, not cut");
    let done = Instant::now();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "no filter here\n");
    let timeout = Duration::from_secs(15);
    let reported = envoy.wait_drained_after(done, timeout, "the request").await;
    assert!(
        reported >= Duration::from_millis(2000),
        "the drain lasted as long as the request: {reported:?}"
    );
}

/// If Envoy cannot give the engine a timer, the drain clock runs on a fallback thread: a SIGTERM
/// drain still waits for the in-flight request and then completes on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_timer_the_drain_still_completes() {
    let mut envoy = Envoy::start(faults("no_timer")).await;
    let port = envoy.data;
    let slow = tokio::spawn(async move {
        clients::request(port, "GET", "/", &[("x-envoy-fault-delay-request", "800")]).await
    });
    envoy.wait_active(1).await;
    let t0 = Instant::now();
    envoy.sigterm();
    let (status, at) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    let took = at - t0;
    assert!(
        took >= Duration::from_millis(700),
        "exited before the request ended: {took:?}"
    );
    // The fallback thread's ticks completed it when the request ended, not the 10 s timeout.
    let (reported, timed_out) = envoy.reported_drain();
    assert!(!timed_out, "the timeout ended the drain ({reported:?})");
    envoy.assert_logged("Envoy gave no timer");
}

/// A panic in the SIGTERM hook after it took Envoy's completion callback: Envoy is released at
/// once (exits), never left hanging until SIGKILL, nor held for a drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panic_in_the_sigterm_hook_never_hangs_envoy() {
    // A drain with these settings lasts at least min_drain_duration (3 s, so that a busy
    // machine's teardown, over a second, stays below it).
    const MIN_DRAIN: Duration = Duration::from_secs(3);
    let mut envoy = Envoy::start(Options {
        settings: Settings {
            min_drain: "3s",
            ..FAST
        },
        ..faults("shutdown_panic")
    })
    .await;
    let t0 = Instant::now();
    envoy.sigterm();
    let (_, at) = envoy.wait_exit(Duration::from_secs(15)).await;
    // Released at once: not at the end of a drain (no sooner than its minimum, at most its 10 s
    // timeout) nor never.
    assert!(
        at - t0 < MIN_DRAIN,
        "exit {:?} after SIGTERM: no sooner than a drain ({MIN_DRAIN:?})",
        at - t0
    );
    envoy.assert_logged("panic: test fault: shutdown_panic");
    envoy.assert_logged("letting Envoy exit now");
}

/// A panic on the thread that makes the drain start's admin calls is contained: it is counted in
/// the status's `module_errors` and logged, and the drain itself goes on (our `/ready` fails,
/// requests are served and told to close, SIGTERM then exits at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panic_in_the_admin_calls_is_counted_and_the_drain_goes_on() {
    let mut envoy = Envoy::start(faults("admin_panic")).await;
    assert_eq!(envoy.drain_status().await["module_errors"], 0);
    let r = clients::request(envoy.control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{}", r.text());
    eventually("module_errors == 1", Duration::from_secs(5), || async {
        (envoy.drain_status().await["module_errors"] == 1).then_some(())
    })
    .await;
    let log = envoy.log();
    assert!(log.contains("panic: test fault: admin_panic"), "{log}");
    assert!(
        log.contains("panic contained in the drain start's admin calls"),
        "{log}"
    );
    assert_eq!(
        clients::get(envoy.control, "/ready").await.unwrap().status,
        503
    );
    let r = clients::get(envoy.data, "/").await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let t0 = Instant::now();
    envoy.sigterm();
    let (status, at) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    // The drain went on to complete by its rules (not the 10 s timeout), so SIGTERM found it
    // done: an exit well inside half the timeout.
    let (reported, timed_out) = envoy.reported_drain();
    assert!(!timed_out, "the timeout ended the drain ({reported:?})");
    assert!(at - t0 < Duration::from_secs(5), "{:?}", at - t0);
}

/// The part of the module-threads summary logged at teardown that lists `which` calls
/// ("refused" or "made"), e.g. `[("engine_kick", 1), ("stats_scan", 1)]`.
fn thread_calls(log: &str, which: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains("graceful_drain: module threads stopped"))
        .unwrap_or_else(|| panic!("no module-threads summary at teardown:\n{log}"));
    let (refused, made) = line
        .split_once("; made after it: ")
        .unwrap_or_else(|| panic!("unexpected summary: {line}"));
    match which {
        "refused" => refused
            .rsplit_once("after the exit was released: ")
            .unwrap_or_else(|| panic!("unexpected summary: {line}"))
            .1
            .to_string(),
        _ => made.to_string(),
    }
}

/// One owner for the module's threads (src/runtime/threads.rs): with the test fault `hold_thread_calls`
/// every call a module thread decides to make waits until Envoy's exit is released, the widest
/// window there is between a thread's check and its call. The gate refuses each of them; with
/// `no_gate` too, the same calls come after the release (counted, not made), so the check fails
/// without the gate. Envoy exits 0 in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_module_thread_calls_into_envoy_after_the_exit_is_released() {
    // Each thread that calls into Envoy: the admin check's and the stats scanner's engine kicks,
    // the scanner's stats passes, the idle-connection re-checks, and the active_requests gauge.
    // The last one, the deletion of a connection's waker: the idle re-check's list of wakers
    // holds the last reference to the waker of a connection that closed while the re-check's
    // wake was held, so it is dropped there, after the release (#44 item 10).
    let callers = [
        "engine_kick",
        "stats_scan",
        "connection_wake",
        "active_requests_gauge",
        "connection_waker_delete",
    ];
    for (fault, gated) in [
        ("hold_thread_calls", true),
        ("hold_thread_calls,no_gate", false),
    ] {
        let mut envoy = Envoy::start(Options {
            settings: Settings {
                min_drain: "1200ms",
                quiet: "200ms",
                // The held calls keep the drain from completing, so it ends at this timeout: long
                // enough for every caller's first call (the idle re-check comes ~1 s in).
                timeout: "4s",
            },
            ..faults(fault)
        })
        .await;
        // A keep-alive connection that served a request: the re-checks look at it.
        let mut h1 = H1Conn::connect(envoy.data).await.unwrap();
        assert_eq!(h1.send("GET", "/", &[]).await.unwrap().status, 200);
        envoy.sigterm();
        // Once the re-check's wake is held, the client leaves: the connection's filter goes,
        // and the re-check's list holds its waker's last reference until after the release.
        eventually(
            "the idle re-check's wake held",
            Duration::from_secs(10),
            || async {
                envoy
                    .log()
                    .contains("graceful_drain test fault: connection_wake held until the release")
                    .then_some(())
            },
        )
        .await;
        drop(h1);
        let (status, _) = envoy.wait_exit(Duration::from_secs(40)).await;
        assert!(status.success(), "{fault}: {status:?}");
        let log = envoy.log();
        let (expected, other) = if gated {
            (thread_calls(&log, "refused"), thread_calls(&log, "made"))
        } else {
            (thread_calls(&log, "made"), thread_calls(&log, "refused"))
        };
        for caller in &callers {
            assert!(
                expected.contains(&format!("\"{caller}\"")),
                "{fault}: {caller} not {}: {expected}",
                if gated { "refused" } else { "late" }
            );
        }
        assert_eq!(other, "[]", "{fault}");
    }
}

/// #44 item 10: the start-time check of `admin_address` with several addresses where nothing
/// answers (a connection accepted, no answer: each costs the call's 2 s timeout). A SIGTERM
/// while it waits on the first: the check tries none of the others, so its thread is joined
/// within the teardown bound (2.5 s) instead of being left detached in a call, and Envoy exits
/// within the drain's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_module_stops_checking_silent_admin_addresses() {
    // Listeners the test holds and never accepts from: the kernel completes the connections.
    let silent: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let list = silent
        .iter()
        .map(|l| format!("\"{}\"", l.local_addr().unwrap()))
        .collect::<Vec<_>>()
        .join(", ");
    let extra: &'static str = Box::leak(format!(r#""admin_address": [{list}]"#).into_boxed_str());
    let mut envoy = Envoy::start(Options {
        settings: Settings::new("300ms", "100ms", "10s"),
        bootstrap_extra: Some(extra),
        ..Options::default()
    })
    .await;
    let t0 = Instant::now();
    envoy.sigterm();
    let (status, exited) = envoy.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}");
    let summary = envoy.log_line("graceful_drain: module threads stopped");
    assert!(
        !summary.contains("still in a call and left"),
        "a thread was left detached: {summary}"
    );
    // The drain's rules (300 ms) plus the one silent call under way (2 s) and Envoy's exit.
    assert!(
        exited - t0 < Duration::from_millis(300) + Duration::from_secs(2) + EXIT_SLACK,
        "exit {:?} after SIGTERM",
        exited - t0
    );
    drop(silent);
}

/// 20 SIGTERM exits of the example gateway, each with idle HTTP/1.1 and HTTP/2 keep-alive
/// connections, busy requests, and a waiting `/drain` client that goes away about when the drain
/// completes (a different moment each round): every exit is 0, every busy request answered,
/// nothing crashes or hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_exits_with_every_kind_of_client_are_clean() {
    for round in 0..20u64 {
        let mut envoy = Envoy::start(Options::default()).await;
        let mut h1 = H1Conn::connect(envoy.data).await.unwrap();
        assert_eq!(h1.send("GET", "/", &[]).await.unwrap().status, 200);
        let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
        assert_eq!(h2.send("/", &[]).await.unwrap().status, 200);
        let port = envoy.data;
        let busy: Vec<_> = (0..2)
            .map(|_| {
                tokio::spawn(async move {
                    clients::request(port, "GET", "/", &[("x-envoy-fault-delay-request", "400")])
                        .await
                })
            })
            .collect();
        envoy.wait_active(2).await;
        // The drain completes about 300-500 ms after /drain (min_drain 300 ms, quiet 200 ms,
        // the busy requests 400 ms): the waiting client leaves somewhere in that window.
        let control = envoy.control;
        let leave_after = Duration::from_millis(250 + 20 * round);
        let waiter = tokio::spawn(async move {
            tokio::time::timeout(leave_after, clients::get(control, "/drain")).await
        });
        eventually("the drain started", Duration::from_secs(5), || async {
            (envoy.drain_status().await["state"] != "serving").then_some(())
        })
        .await;
        envoy.sigterm();
        let (status, _) = envoy.wait_exit(Duration::from_secs(20)).await;
        assert!(
            status.success(),
            "round {round}: {status:?}\n{}",
            envoy.log()
        );
        for b in busy {
            let r = b.await.unwrap().expect("busy request answered");
            assert_eq!(r.status, 200, "round {round}");
        }
        let _ = waiter.await.unwrap();
        let log = envoy.log();
        assert!(
            !log.contains("Caught "),
            "round {round}: Envoy crashed:\n{log}"
        );
        drop((h1, h2));
    }
}
