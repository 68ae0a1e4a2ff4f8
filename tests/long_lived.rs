//! Long-lived streams at a drain (issue #46), connection mode, against the real Envoy with a
//! real WebSocket library on both ends (tokio-tungstenite): the example gateway proxies
//! `/upstream-streaming/` to a WebSocket server run by the test. After SIGTERM and
//! `min_drain_duration`, every WebSocket client gets a Close frame with 1001 (not a cut), at
//! times spread over `long_lived_window`; every message a client sent before that Close reached
//! the server; Envoy exits as soon as they are gone, well before `drain_timeout`. With
//! `move_long_lived_streams: false` they are cut at `drain_timeout` as before; a peer that does
//! not answer the Close is closed after `close_timeout` (and a client that does not answer
//! makes the module tell the upstream with a masked Close injected towards it: E4 of
//! docs/contributing/long-lived-streams.md).

use crate::common;

use common::envoy::{Envoy, Options, Settings};
use common::websocket::{self, upstream, ClientEnd, Seen, Upstream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// What one SSE client saw.
#[derive(Debug)]
struct SseEnd {
    /// The response ended with its last chunk (a clean end, not a cut).
    clean: bool,
    /// The body ended at an event boundary (a blank line), or was empty.
    at_boundary: bool,
    /// Events dispatched (complete ones), each whole.
    events: usize,
    /// When the end (or the cut) arrived.
    at: Instant,
}

/// An SSE client over a raw connection: reads the response to its end, decodes the chunked
/// body and parses the event stream (WHATWG HTML §9.2.6: an event is dispatched at a blank
/// line).
async fn sse_client(data: u16, name: String) -> SseEnd {
    sse_client_on(data, "sse", name).await
}

/// [`sse_client`] under `/upstream-streaming/{kind}/`.
async fn sse_client_on(data: u16, kind: &str, name: String) -> SseEnd {
    let mut tcp = TcpStream::connect(("127.0.0.1", data)).await.unwrap();
    let req = format!(
        "GET /upstream-streaming/{kind}/{name} HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut clean_at = None;
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
            if clean_at.is_none() && got.ends_with(b"\r\n0\r\n\r\n") {
                clean_at = Some(Instant::now());
            }
        }
    })
    .await;
    assert!(done.is_ok(), "{name}: not ended within 30 s");
    let cut_at = Instant::now();
    let (body, clean) = chunked_200_body(&got);
    // An empty body cut nothing: a stream that begins during the moves may be ended as soon as
    // its head is written, before the upstream's first event (seen once with every suite
    // running: the late stream of quiet_sse_streams_..., 0 events, a clean end).
    let at_boundary = body.is_empty() || body.ends_with("\n\n");
    let events = body
        .split("\n\n")
        .filter(|e| e.contains("data: "))
        .count()
        .saturating_sub(usize::from(!at_boundary));
    for e in body.split("\n\n").filter(|e| !e.is_empty()) {
        if at_boundary || !body.ends_with(e) {
            assert!(e.ends_with(" ends here"), "{name}: a cut event {e:?}");
        }
    }
    SseEnd {
        clean: clean && clean_at.is_some(),
        at_boundary,
        events,
        at: clean_at.unwrap_or(cut_at),
    }
}

/// A whole HTTP/1.1 200 response read from the wire: its chunked body decoded as far as it is
/// whole, and whether it ended with its last chunk (a clean end, not a cut).
fn chunked_200_body(got: &[u8]) -> (String, bool) {
    let text = String::from_utf8_lossy(got);
    let (head, mut rest) = text.split_once("\r\n\r\n").expect("a response head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 {
            return (body, after == "\r\n");
        }
        if after.len() < n + 2 {
            break;
        }
        body.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    (body, false)
}

/// A client that sends a message every 100 ms until the server closes, answers the Close as
/// tungstenite does, and reports what it saw.
async fn client(data: u16, name: String) -> ClientEnd {
    let ws = websocket::connect(data, &name).await.unwrap();
    let what = format!("{name}: no close within 30 s");
    let e = websocket::session(ws, name, tokio::time::sleep(Duration::from_secs(30))).await;
    assert!(e.code.is_some() || e.cut.is_some(), "{what}");
    e
}

/// The module's completion log line says `want` (e.g. "long-lived streams moved: websocket 0,
/// sse 5; cut: websocket 0, sse 0").
fn assert_completion_line(log: &str, want: &str) {
    assert!(
        log.contains(want),
        "completion line: {}",
        log.lines()
            .filter(|l| l.contains("drain completed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A WebSocket client got Close(1001), and every message it sent before reached the upstream.
fn assert_moved_without_loss(e: &ClientEnd, seen: &Arc<Mutex<Seen>>) {
    assert_eq!(e.code, Some(1001), "{e:?}");
    let got = seen
        .lock()
        .unwrap()
        .messages
        .get(&e.name)
        .cloned()
        .unwrap_or_default();
    assert!(
        e.sent.is_subset(&got),
        "{}: lost {:?}",
        e.name,
        e.sent.difference(&got)
    );
}

fn options(timeout: &'static str, network_extra: &'static str, port: u16) -> Options {
    Options {
        settings: Settings {
            min_drain: "1s",
            quiet: "200ms",
            timeout,
        },
        data_http_filter: false,
        track_requests: true,
        test_upstream: Some(port),
        network_extra: Some(network_extra),
        ..Options::default()
    }
}

/// Clients connected (the tracker counts their upgrades as requests in flight) and, when the
/// upstream records what it reads (`seen`), exchanging: each one's first two messages reached
/// it.
async fn connect_clients(
    envoy: &Envoy,
    n: usize,
    seen: Option<&Arc<Mutex<Seen>>>,
) -> Vec<tokio::task::JoinHandle<ClientEnd>> {
    let clients: Vec<_> = (0..n)
        .map(|i| tokio::spawn(client(envoy.data, format!("c{i}"))))
        .collect();
    envoy.wait_active(n as u64).await;
    if let Some(seen) = seen {
        exchanging(seen, n).await;
    }
    clients
}

/// Waits until the upstream read at least two messages from each of clients `c0..c{n-1}`.
async fn exchanging(seen: &Arc<Mutex<Seen>>, n: usize) {
    common::eventually(
        "every WebSocket client's first two messages to reach the upstream",
        Duration::from_secs(10),
        || {
            let m = &seen.lock().unwrap().messages;
            let all = (0..n).all(|i| m.get(&format!("c{i}")).is_some_and(|s| s.len() >= 2));
            async move { all.then_some(()) }
        },
    )
    .await;
}

/// `sse` SSE clients, then `ws` WebSocket clients, each counted in flight before the next kind
/// opens, and the WebSocket clients exchanging (see [`connect_clients`]) before the caller's
/// SIGTERM.
async fn open_streams(
    envoy: &Envoy,
    seen: &Arc<Mutex<Seen>>,
    sse: usize,
    ws: usize,
) -> (
    Vec<tokio::task::JoinHandle<SseEnd>>,
    Vec<tokio::task::JoinHandle<ClientEnd>>,
) {
    let sse_clients: Vec<_> = (0..sse)
        .map(|i| tokio::spawn(sse_client(envoy.data, format!("s{i}"))))
        .collect();
    envoy.wait_active(sse as u64).await;
    let clients: Vec<_> = (0..ws)
        .map(|i| tokio::spawn(client(envoy.data, format!("c{i}"))))
        .collect();
    envoy.wait_active((sse + ws) as u64).await;
    exchanging(seen, ws).await;
    (sse_clients, clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn websockets_get_close_1001_sse_ends_cleanly_spread_over_the_window_and_the_exit_follows() {
    let (port, seen) = upstream(Upstream::Chatty).await;
    let mut envoy = Envoy::start(options("8s", r#""long_lived_window": "2s""#, port)).await;
    let (sse, clients) = open_streams(&envoy, &seen, 10, 20).await;
    let t0 = Instant::now();
    envoy.sigterm();
    let mut ends = Vec::new();
    for c in clients {
        ends.push(c.await.unwrap());
    }
    let mut sse_ends = Vec::new();
    for c in sse {
        sse_ends.push(c.await.unwrap());
    }
    for e in &sse_ends {
        assert!(e.clean && e.at_boundary, "{e:?}");
        assert!(e.events >= 10, "{e:?}");
    }
    let (status, exited) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}");
    for e in &ends {
        assert_eq!(e.code, Some(1001), "{}: {e:?}", e.name);
        assert!(e.received > 0, "{e:?}");
    }
    // Every message a client sent before it got the Close reached the server.
    {
        let seen = seen.lock().unwrap();
        for e in &ends {
            let got = seen.messages.get(&e.name).cloned().unwrap_or_default();
            let lost: Vec<_> = e.sent.difference(&got).collect();
            assert!(lost.is_empty(), "{}: lost {lost:?}", e.name);
        }
        // The server saw its clients' Close answers (1001 echoed), not cuts.
        assert_eq!(seen.closes.len(), 20, "{:?}", seen.closes);
        assert!(
            seen.closes.iter().all(|c| *c == Some(1001)),
            "{:?}",
            seen.closes
        );
    }
    let at: Vec<Duration> = ends
        .iter()
        .map(|e| e.at - t0)
        .chain(sse_ends.iter().map(|e| e.at - t0))
        .collect();
    let first = *at.iter().min().unwrap();
    let last = *at.iter().max().unwrap();
    eprintln!(
        "closes from {first:?} to {last:?} after SIGTERM; exit at {:?}",
        exited - t0
    );
    // Not before min_drain_duration, within the window (2 s) after it, spread over it.
    assert!(
        first >= Duration::from_millis(950),
        "first close at {first:?}"
    );
    assert!(
        last <= Duration::from_millis(3300),
        "last close at {last:?}"
    );
    assert!(
        last - first >= Duration::from_millis(900),
        "{first:?}..{last:?}"
    );
    // The exit follows the last close handshake, not drain_timeout (8 s).
    let took = exited - t0;
    assert!(
        took < last + common::envoy::EXIT_SLACK,
        "exited after {took:?}"
    );
    let (drained_in, timed_out) = envoy.reported_drain();
    eprintln!("drain completed in {drained_in:?} (the module's line), process exit {took:?}");
    assert!(!timed_out, "the drain must complete, not time out");
    let log = envoy.log();
    eprintln!(
        "WebSocket handshakes over: {} closed while open, {} in Envoy's delayed close",
        log.matches("close handshake over on connection").count()
            - log.matches("in Envoy's delayed close").count(),
        log.matches("in Envoy's delayed close").count()
    );
    assert_completion_line(
        &log,
        "long-lived streams moved: websocket 20, sse 10; cut: websocket 0, sse 0",
    );
}

/// The server is inside a fragmented message at most move times: the Close waits for its last
/// fragment and goes into that write (the write-hook path), never between two fragments, and
/// every client reads whole messages then Close(1001).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_inside_a_fragmented_message_gets_the_close_after_its_last_fragment() {
    let (port, seen) = upstream(Upstream::Fragmented).await;
    let mut envoy = Envoy::start(options("8s", r#""long_lived_window": "1s""#, port)).await;
    let clients = connect_clients(&envoy, 8, Some(&seen)).await;
    envoy.sigterm();
    for c in clients {
        let e = c.await.unwrap();
        assert_moved_without_loss(&e, &seen);
    }
    let (status, _) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success());
    let (_, timed_out) = envoy.reported_drain();
    assert!(!timed_out);
    let log = envoy.log();
    let in_writes = log.matches("Close(1001) after a write").count()
        + log.matches("Close(1001) cut into a write").count();
    let injected = log
        .matches("Close(1001) to the client of connection")
        .count();
    eprintln!("Close put in a write: {in_writes}, injected at a wake-up: {injected}");
    assert_eq!(in_writes + injected, 8, "{log}");
    assert!(in_writes > 0, "the write-hook path was not taken: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_move_off_websockets_are_cut_at_the_drain_timeout_as_before() {
    let (port, seen) = upstream(Upstream::Chatty).await;
    let mut envoy = Envoy::start(options("4s", r#""move_long_lived_streams": false"#, port)).await;
    let (sse, clients) = open_streams(&envoy, &seen, 2, 3).await;
    let t0 = Instant::now();
    envoy.sigterm();
    let mut ends = Vec::new();
    for c in clients {
        ends.push(c.await.unwrap());
    }
    for c in sse {
        let e = c.await.unwrap();
        assert!(!e.clean, "cut, not ended: {e:?}");
        assert!(e.at - t0 >= Duration::from_millis(3800), "{e:?}");
    }
    let (_, exited) = envoy.wait_exit(Duration::from_secs(10)).await;
    for e in &ends {
        assert_ne!(e.code, Some(1001), "{e:?}");
        assert!(
            e.at - t0 >= Duration::from_millis(3800),
            "{e:?} at {:?}",
            e.at - t0
        );
    }
    let (_, timed_out) = envoy.reported_drain();
    assert!(timed_out, "cut at drain_timeout");
    assert!(exited - t0 >= Duration::from_millis(3800));
    envoy.assert_logged("cut: websocket 3, sse 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstream_that_never_answers_the_close_is_closed_after_close_timeout() {
    let (port, _seen) = upstream(Upstream::Deaf).await;
    let mut envoy = Envoy::start(options(
        "8s",
        r#""long_lived_window": "200ms", "close_timeout": "1s""#,
        port,
    ))
    .await;
    let clients = connect_clients(&envoy, 2, None).await;
    let t0 = Instant::now();
    envoy.sigterm();
    for c in clients {
        let e = c.await.unwrap();
        assert_eq!(e.code, Some(1001), "{e:?}");
    }
    let (_, exited) = envoy.wait_exit(Duration::from_secs(10)).await;
    let took = exited - t0;
    eprintln!("exit at {took:?}");
    // 1 s hold + at most 0.2 s window + 1 s close_timeout, then the exit.
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert!(
        took < Duration::from_millis(2200) + common::envoy::EXIT_SLACK,
        "{took:?}"
    );
    let (_, timed_out) = envoy.reported_drain();
    assert!(!timed_out);
}

/// A client that completes the handshake by hand and then never answers our Close: after
/// `close_timeout` the module sends a masked Close(1001) towards the upstream with
/// `inject_read_data` (E4: it reaches the upstream through the connection manager's tunnel)
/// and closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_never_answers_gets_its_upstream_told_by_a_masked_close() {
    let (port, seen) = upstream(Upstream::Chatty).await;
    let mut envoy = Envoy::start(options(
        "8s",
        r#""long_lived_window": "200ms", "close_timeout": "1s""#,
        port,
    ))
    .await;
    let mut tcp = TcpStream::connect(("127.0.0.1", envoy.data)).await.unwrap();
    tcp.write_all(
        b"GET /upstream-streaming/ws/raw HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n\
          connection: upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
          sec-websocket-version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    envoy.wait_active(1).await;
    let t0 = Instant::now();
    envoy.sigterm();
    // Read everything until the connection closes; never answer.
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(8), async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection was not closed");
    let closed = t0.elapsed();
    // Our Close(1001) to the client: 0x88, length, 0x03 0xE9.
    assert!(
        got.windows(4)
            .any(|w| w[0] == 0x88 && w[2] == 0x03 && w[3] == 0xE9),
        "no Close(1001) in {} bytes",
        got.len()
    );
    assert!(closed >= Duration::from_millis(1900), "{closed:?}");
    common::eventually(
        "the upstream saw a Close(1001)",
        Duration::from_secs(3),
        || {
            let ok = seen.lock().unwrap().closes.contains(&Some(1001));
            async move { ok.then_some(()) }
        },
    )
    .await;
    let (status, _) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success());
    let _ = CloseCode::Away;
}

/// SSE streams with rare events (two, then silence: a notification feed) are ended at their
/// move time, between two events (the tracker follows an SSE body's events, so it knows the
/// bytes so far end at a blank line), not cut at `drain_timeout`; an SSE response that begins
/// after the moves began (a client still routed here) is ended too, not left to be cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quiet_sse_streams_and_one_opened_during_the_moves_end_cleanly_before_the_timeout() {
    let (port, _seen) = upstream(Upstream::Chatty).await;
    let mut envoy = Envoy::start(options("10s", r#""long_lived_window": "2s""#, port)).await;
    let early: Vec<_> = (0..6)
        .map(|i| tokio::spawn(sse_client_on(envoy.data, "sse-quiet", format!("q{i}"))))
        .collect();
    envoy.wait_active(6).await;
    let t0 = Instant::now();
    envoy.sigterm();
    // Once a quiet stream ended the moves have begun: a late client then opens its stream.
    common::eventually(
        "a quiet stream to end (the moves began)",
        Duration::from_secs(5),
        || {
            let done = early.iter().any(|h| h.is_finished());
            async move { done.then_some(()) }
        },
    )
    .await;
    let late = tokio::spawn(sse_client_on(envoy.data, "sse", "late".to_string()));
    let mut ends = Vec::new();
    for c in early {
        ends.push(c.await.unwrap());
    }
    let late = late.await.unwrap();
    let (status, exited) = envoy.wait_exit(Duration::from_secs(12)).await;
    assert!(status.success(), "{status}");
    for e in ends.iter().chain([&late]) {
        assert!(e.clean && e.at_boundary, "{e:?}");
    }
    for e in &ends {
        assert_eq!(e.events, 2, "{e:?}");
        let at = e.at - t0;
        assert!(
            at >= Duration::from_millis(950) && at <= Duration::from_millis(3_300),
            "a quiet stream ended at {at:?}: its move time is within the window after 1 s"
        );
    }
    let took = exited - t0;
    eprintln!(
        "quiet streams ended {:?}..{:?}, late one at {:?}, exit at {took:?}",
        ends.iter().map(|e| e.at - t0).min().unwrap(),
        ends.iter().map(|e| e.at - t0).max().unwrap(),
        late.at - t0
    );
    // Not the drain_timeout (10 s): the window's end and the exit slack.
    assert!(
        took < Duration::from_millis(3_300) + common::envoy::EXIT_SLACK,
        "exited after {took:?}"
    );
    let (_, timed_out) = envoy.reported_drain();
    assert!(!timed_out, "the drain must complete, not time out");
    assert_completion_line(
        &envoy.log(),
        "long-lived streams moved: websocket 0, sse 7; cut: websocket 0, sse 0",
    );
}

/// What a close-delimited SSE client saw: the body up to the close, and how it ended.
#[derive(Debug)]
struct UntilCloseEnd {
    /// The connection ended with a FIN (a read of 0), not a reset.
    fin: bool,
    body: String,
    at: Instant,
}

/// An HTTP/1.0 SSE client: Envoy answers it without chunks, the body running until the close
/// (RFC 9112 §6.3; Envoy's HTTP/1 codec does not chunk for HTTP/1.0).
async fn sse_client_http10(data: u16, name: String) -> UntilCloseEnd {
    let mut tcp = TcpStream::connect(("127.0.0.1", data)).await.unwrap();
    let req = format!("GET /upstream-streaming/sse/{name} HTTP/1.0\r\nhost: x\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let fin = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) => return true,
                Err(_) => return false,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name}: not ended within 30 s"));
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    // Envoy answers an HTTP/1.0 request in HTTP/1.0.
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding"),
        "Envoy chunked an HTTP/1.0 response: {head}"
    );
    UntilCloseEnd {
        fin,
        body: body.to_string(),
        at: Instant::now(),
    }
}

/// A close-delimited SSE response (to an HTTP/1.0 client, `accept_http_10`) ends with the
/// close right after an event's blank line, never inside an event (the upstream sends each
/// event in two parts 30 ms apart), at its move time, and the exit follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_delimited_sse_response_is_closed_just_after_an_event() {
    let (port, _seen) = upstream(Upstream::Chatty).await;
    let o = options("8s", r#""long_lived_window": "1s""#, port);
    let p = common::free_ports(3);
    let yaml = common::envoy::render_gateway(p[0], p[1], p[2], &o).replacen(
        "codec_type: AUTO\n",
        "codec_type: AUTO\n          http_protocol_options: { accept_http_10: true }\n",
        1,
    );
    let mut envoy = Envoy::start_yaml(&yaml, p[0], p[1], p[2], &o).await;
    let clients: Vec<_> = (0..5)
        .map(|i| tokio::spawn(sse_client_http10(envoy.data, format!("h{i}"))))
        .collect();
    envoy.wait_active(5).await;
    let t0 = Instant::now();
    envoy.sigterm();
    let mut ends = Vec::new();
    for c in clients {
        ends.push(c.await.unwrap());
    }
    let (status, exited) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}");
    for e in &ends {
        assert!(e.fin, "a reset, not a close: {e:?}");
        assert!(e.body.ends_with("\n\n"), "ended inside an event: {e:?}");
        let events: Vec<_> = e.body.split("\n\n").filter(|x| !x.is_empty()).collect();
        assert!(events.len() >= 5, "{e:?}");
        for ev in events {
            assert!(ev.ends_with(" ends here"), "a cut event {ev:?}");
        }
        let at = e.at - t0;
        assert!(
            at >= Duration::from_millis(950) && at <= Duration::from_millis(2_500),
            "closed at {at:?}"
        );
    }
    let took = exited - t0;
    eprintln!("exit at {took:?}");
    assert!(
        took < Duration::from_millis(2_500) + common::envoy::EXIT_SLACK,
        "exited after {took:?}"
    );
    assert_completion_line(
        &envoy.log(),
        "long-lived streams moved: websocket 0, sse 5; cut: websocket 0, sse 0",
    );
}

/// Every write of the upstream holds a message end followed by the next message's start: the
/// Close goes into the middle of a write (the write is drained, and its bytes up to the message
/// end are put back with the Close after them). Every client reads whole messages, then a
/// Close(1001), with no protocol error (a Close cut into a frame would fail tungstenite's read).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_cut_into_the_middle_of_a_write_lands_after_a_whole_message() {
    let (port, seen) = upstream(Upstream::Straddling).await;
    let mut envoy = Envoy::start(options("8s", r#""long_lived_window": "1s""#, port)).await;
    let clients = connect_clients(&envoy, 8, Some(&seen)).await;
    envoy.sigterm();
    for c in clients {
        let e = c.await.unwrap();
        assert!(e.received > 0, "{e:?}");
        assert_moved_without_loss(&e, &seen);
    }
    let (status, _) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success());
    let log = envoy.log();
    let inside = log.matches("Close(1001) cut into a write").count();
    eprintln!("Close cut into a write: {inside} of 8");
    assert_eq!(inside, 8, "{log}");
}

/// The upstream writes bursts of 300 messages (about 46 KB, several 16 KiB slices in Envoy's
/// write, a frame often split between two): the Close goes after the last whole message of the
/// whole write, never after the first slice's (issue 63: 194 whole messages a connection were
/// dropped, uncounted). Every message the upstream wrote before its Close answer either reached
/// its client or is counted as dropped, exactly, in the completion line and `/drain/status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_spread_over_many_slices_keeps_every_whole_message_or_counts_it() {
    let (port, seen) = upstream(Upstream::Bursty).await;
    let mut envoy = Envoy::start(options("10s", r#""long_lived_window": "2s""#, port)).await;
    let clients = connect_clients(&envoy, 10, Some(&seen)).await;
    // Bursts are flowing to every client before the drain.
    common::eventually(
        "a few bursts written by the upstream",
        Duration::from_secs(10),
        || {
            let sent = seen.lock().unwrap().sent;
            async move { (sent >= 30 * websocket::BURST).then_some(()) }
        },
    )
    .await;
    envoy.sigterm();
    let mut received = 0;
    for c in clients {
        let e = c.await.unwrap();
        assert_eq!(e.code, Some(1001), "{e:?}");
        assert!(e.received > 0, "{e:?}");
        // Whole writes only: the first write completes BURST messages, each later one BURST + 1
        // (the message the write before began). A Close after any other message end cut a
        // write's whole messages off.
        assert_eq!(
            (e.received + 1) % (websocket::BURST + 1),
            0,
            "{}: {} messages read: the Close did not follow the last whole message of a write",
            e.name,
            e.received
        );
        received += e.received;
    }
    let (status, _) = envoy.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "{status}");
    let line = envoy.log_line("drain completed");
    let log = envoy.log();
    let dropped: u64 = line
        .split("websocket messages dropped after the Close: ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no dropped count in {line}"));
    assert_completion_line(&log, "long-lived streams moved: websocket 10, sse 0");
    let sent = seen.lock().unwrap().sent;
    eprintln!("upstream wrote {sent}, clients read {received}, dropped and counted {dropped}");
    assert_eq!(
        received + dropped,
        sent,
        "a message neither delivered nor counted"
    );
}

/// What a completion client read: the decoded body, whether it ended with its last chunk, and
/// when.
#[derive(Debug)]
struct Completion {
    body: String,
    clean: bool,
    at: Instant,
}

/// `method` (POST with a JSON body, as an OpenAI-style client; or GET) to
/// `/upstream-streaming/{path}`: the whole chunked answer, decoded.
async fn completion_client(data: u16, method: &'static str, path: String) -> Completion {
    let mut tcp = TcpStream::connect(("127.0.0.1", data)).await.unwrap();
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let req = if method == "POST" {
        format!(
            "POST /upstream-streaming/{path} HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    } else {
        format!("GET /upstream-streaming/{path} HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\naccept-encoding: gzip\r\n\r\n")
    };
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
            if got.ends_with(b"\r\n0\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "{path}: not ended within 30 s");
    let at = Instant::now();
    let (body, clean) = chunked_200_body(&got);
    Completion { body, clean, at }
}

/// The body every finite stream of the upstream writes (`serve_completion`).
fn whole_completion() -> String {
    let mut s: String = (1..=websocket::COMPLETION_EVENTS)
        .map(|n| format!("data: {{\"token\": {n}, \"end\": true}}\n\n"))
        .collect();
    s.push_str("data: [DONE]\n\n");
    s
}

/// Issue 63: LLM-shaped completions (a POST answered with an event stream, which no client
/// resumes) and content-encoded event streams are held like any request and arrive whole, every
/// event and `[DONE]`, long after the moves; the GET subscriptions beside them (what
/// `EventSource` reconnects by itself) are still moved over the window; the exit follows the
/// last completion, well before `drain_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn post_completions_and_compressed_streams_arrive_whole_while_get_subscriptions_move() {
    let (port, _) = upstream(Upstream::Chatty).await;
    let mut envoy = Envoy::start(options("12s", r#""long_lived_window": "1s""#, port)).await;
    let completions: Vec<_> = (0..4)
        .map(|i| {
            tokio::spawn(completion_client(
                envoy.data,
                "POST",
                format!("completion/c{i}"),
            ))
        })
        .collect();
    let compressed: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(completion_client(
                envoy.data,
                "GET",
                format!("sse-gzip/g{i}"),
            ))
        })
        .collect();
    let subscriptions: Vec<_> = (0..4)
        .map(|i| tokio::spawn(sse_client(envoy.data, format!("s{i}"))))
        .collect();
    envoy.wait_active(10).await;
    let t0 = Instant::now();
    envoy.sigterm();
    let want = whole_completion();
    let mut last = Duration::ZERO;
    for c in completions.into_iter().chain(compressed) {
        let c = c.await.unwrap();
        assert!(c.clean, "not ended by its last chunk: {c:?}");
        assert_eq!(c.body, want, "a completion truncated or changed");
        last = last.max(c.at - t0);
    }
    for s in subscriptions {
        let e = s.await.unwrap();
        assert!(e.clean && e.at_boundary, "{e:?}");
        let at = e.at - t0;
        // Moved: after min_drain_duration (1 s), within the window (1 s), before the
        // completions' natural end.
        assert!(
            at >= Duration::from_millis(950) && at <= Duration::from_millis(2_500),
            "subscription ended at {at:?}"
        );
    }
    // The completions ran their whole course (30 events, 100 ms apart, from before SIGTERM).
    assert!(
        last >= Duration::from_millis(2_000),
        "last completion at {last:?}"
    );
    let (status, exited) = envoy.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "{status}");
    let took = exited - t0;
    assert!(
        took < last + common::envoy::EXIT_SLACK,
        "exited after {took:?}"
    );
    let (_, timed_out) = envoy.reported_drain();
    assert!(!timed_out, "the drain must complete, not time out");
    assert_completion_line(
        &envoy.log(),
        "long-lived streams moved: websocket 0, sse 4; cut: websocket 0, sse 0",
    );
}
