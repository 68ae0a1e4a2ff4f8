//! Idle keep-alive connections at drain start, against the real Envoy 1.40 with the module's
//! network filter in front of the connection manager (issue 14): an idle HTTP/2 connection gets
//! GOAWAY(2^31-1, NO_ERROR) and then a clean close; an idle HTTP/1.1 connection is closed cleanly;
//! busy connections keep the HTTP filter's behaviour; clients that resume after the drain started
//! see no failure; the exit time does not wait for idle connections; counts are reported.

use crate::common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{Envoy, Options, Settings};
use common::eventually;
use common::front::{front_yaml, Front};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The drain lasts long enough to watch it (grace of the example config: 2s).
const LONG: Settings = Settings::new("6s", "200ms", "20s");
const GRACE: Duration = Duration::from_secs(2);
/// The example's `idle_after`: a connection counts as idle after this long without a request.
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Hold the connections idle (the scenario itself, not a synchronisation): long enough that the
/// network filter counts them as idle, not as keep-alive clients between two requests.
async fn stay_idle() {
    tokio::time::sleep(IDLE_AFTER + Duration::from_millis(200)).await;
}

async fn start_drain(envoy: &Envoy) -> Instant {
    let r = clients::request(envoy.admin, "POST", "/graceful_drain", &[])
        .await
        .expect("POST /graceful_drain");
    assert_eq!(r.status, 200, "{}", r.text());
    Instant::now()
}

// ---- a raw HTTP/2 client: sees every frame, sends nothing it is not told to -------------------

/// A byte stream the raw client runs over: plain TCP or TLS.
trait Transport: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Transport for T {}

struct RawH2 {
    tcp: Box<dyn Transport>,
    buf: Vec<u8>,
    tls: bool,
}

#[derive(Debug)]
enum Frame {
    GoAway { last_stream: u32, error: u32 },
    Other { kind: u8, flags: u8, stream: u32 },
}

/// HPACK, no Huffman: `:method GET`, `:scheme http` or `https`, `:path /` (static indexes) and a
/// literal `:authority` (name index 1, without indexing).
fn get_headers_block(authority: &str, tls: bool) -> Vec<u8> {
    let scheme = if tls { 0x87 } else { 0x86 };
    let mut b = vec![0x82, scheme, 0x84, 0x01, authority.len() as u8];
    b.extend_from_slice(authority.as_bytes());
    b
}

impl RawH2 {
    async fn connect(port: u16) -> RawH2 {
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        RawH2::over(Box::new(tcp), false).await
    }

    /// Over TLS (ALPN h2), trusting only `cert`, the listener's self-signed certificate.
    async fn connect_tls(
        port: u16,
        cert: tokio_rustls::rustls::pki_types::CertificateDer<'static>,
    ) -> RawH2 {
        use tokio_rustls::rustls::{self, pki_types};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let name = pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS handshake with the gateway");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "ALPN h2");
        RawH2::over(Box::new(tls), true).await
    }

    async fn over(mut tcp: Box<dyn Transport>, tls: bool) -> RawH2 {
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap(); // empty SETTINGS
        RawH2 {
            tcp,
            buf: Vec::new(),
            tls,
        }
    }

    async fn send_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        self.tcp.write_all(&f).await.unwrap();
    }

    /// The next frame, `None` on a clean EOF; panics on a reset or after `timeout`.
    async fn next_frame(&mut self, timeout: Duration) -> Option<Frame> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let h: Vec<u8> = self.buf.drain(..9 + len).collect();
                    let (kind, flags) = (h[3], h[4]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    let p = &h[9..];
                    if kind == 4 && flags & 1 == 0 {
                        self.send_frame(4, 1, 0, &[]).await; // SETTINGS ack
                    }
                    return Some(if kind == 7 {
                        Frame::GoAway {
                            last_stream: u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff,
                            error: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
                        }
                    } else {
                        Frame::Other {
                            kind,
                            flags,
                            stream,
                        }
                    });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout(left, self.tcp.read(&mut chunk)).await {
                Err(_) => panic!("no frame within {timeout:?} (buffered {:?})", self.buf),
                Ok(Ok(0)) => {
                    assert!(self.buf.is_empty(), "EOF inside a frame: {:?}", self.buf);
                    return None;
                }
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => panic!("connection failed instead of a clean close: {e}"),
            }
        }
    }

    /// One GET on stream `id`; returns once its END_STREAM arrived.
    async fn get(&mut self, id: u32, authority: &str) {
        self.send_frame(1, 0x4 | 0x1, id, &get_headers_block(authority, self.tls))
            .await;
        loop {
            match self.next_frame(Duration::from_secs(5)).await {
                Some(Frame::Other { stream, flags, .. }) if stream == id && flags & 1 == 1 => {
                    return
                }
                Some(Frame::GoAway { .. }) => panic!("GOAWAY before the response"),
                None => panic!("closed before the response"),
                Some(_) => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_http2_gets_goaway_no_error_then_a_clean_close() {
    let envoy = Envoy::start(Options::with(LONG)).await;
    let mut raw = RawH2::connect(envoy.data).await;
    raw.get(1, &format!("127.0.0.1:{}", envoy.data)).await;
    idle_http2_is_told_and_closed(&envoy, raw).await;
}

/// A connection that never carried a stream (the preface and SETTINGS only, as pools that
/// pre-connect leave them): told and closed after the grace like one that served a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http2_that_never_carried_a_stream_gets_goaway_then_a_clean_close() {
    let envoy = Envoy::start(Options::with(LONG)).await;
    let mut raw = RawH2::connect(envoy.data).await;
    // The server's preface (SETTINGS) has been written: the GOAWAY may follow it.
    match raw.next_frame(Duration::from_secs(5)).await {
        Some(Frame::Other { kind: 4, .. }) => {}
        other => panic!("expected the server's SETTINGS first, got {other:?}"),
    }
    idle_http2_is_told_and_closed(&envoy, raw).await;
    assert_eq!(
        envoy.stat("http.data.downstream_rq_total").await,
        Some(0),
        "the connection carried no request"
    );
}

/// The same over downstream TLS: the injected GOAWAY goes through the transport socket, so the
/// client reads it as a valid frame of the encrypted stream, then a clean TLS close.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_http2_over_tls_gets_goaway_then_a_clean_close() {
    let dir = common::envoy::TempDir::new("tls");
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
        .expect("a self-signed certificate for 127.0.0.1");
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
    let p = common::free_ports(3);
    let o = Options::with(LONG);
    let yaml = common::envoy::render_gateway(p[0], p[1], p[2], &o);
    let (head, data) = yaml.split_at(yaml.find("  - name: data\n").expect("data listener"));
    let tls = format!(
        "    filter_chains:\n    - transport_socket:\n        name: envoy.transport_sockets.tls\n        \
         typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext\n          \
         common_tls_context:\n            alpn_protocols: [\"h2\", \"http/1.1\"]\n            \
         tls_certificates:\n            - certificate_chain: {{ filename: \"{}\" }}\n              \
         private_key: {{ filename: \"{}\" }}\n      filters:\n",
        cert.display(),
        key.display()
    );
    let data = data.replacen("    filter_chains:\n    - filters:\n", &tls, 1);
    assert!(
        data.contains("DownstreamTlsContext"),
        "TLS put on the data listener"
    );
    let envoy = Envoy::start_yaml(&(head.to_string() + &data), p[0], p[1], p[2], &o).await;
    let mut raw = RawH2::connect_tls(envoy.data, made.cert.der().clone()).await;
    raw.get(1, &format!("127.0.0.1:{}", envoy.data)).await;
    idle_http2_is_told_and_closed(&envoy, raw).await;
}

/// `raw` is idle (no stream in flight): the drain start sends it GOAWAY(2^31-1, NO_ERROR) at
/// once, and it is closed cleanly after the grace.
async fn idle_http2_is_told_and_closed(envoy: &Envoy, mut raw: RawH2) {
    let t0 = start_drain(envoy).await;
    let goaway_at;
    loop {
        match raw.next_frame(Duration::from_secs(3)).await {
            Some(Frame::GoAway { last_stream, error }) => {
                goaway_at = t0.elapsed();
                assert_eq!(
                    last_stream,
                    (1 << 31) - 1,
                    "first GOAWAY spares every stream"
                );
                assert_eq!(error, 0, "NO_ERROR");
                break;
            }
            // Only connection-level control frames may precede it on an idle connection.
            Some(Frame::Other { kind, stream, .. }) => {
                assert!(
                    matches!(kind, 4 | 6 | 8) && stream == 0,
                    "frame {kind} on {stream}"
                )
            }
            None => panic!("closed without GOAWAY"),
        }
    }
    // At the drain start, not at the close after the grace.
    assert!(
        goaway_at < GRACE,
        "GOAWAY {goaway_at:?} after the drain start (grace {GRACE:?})"
    );
    // Then the close: clean EOF (no RST), after the grace, nothing else in between but frames
    // the codec may legitimately send.
    loop {
        match raw.next_frame(GRACE + Duration::from_secs(3)).await {
            None => break,
            Some(Frame::GoAway { error, .. }) => assert_eq!(error, 0, "any later GOAWAY"),
            Some(Frame::Other { kind, stream, .. }) => {
                assert!(
                    matches!(kind, 4 | 6 | 8) && stream == 0,
                    "frame {kind} on {stream}"
                )
            }
        }
    }
    // Closed by the grace, not at the exit (min_drain_duration 6 s).
    let closed_at = t0.elapsed();
    assert!(
        closed_at >= GRACE - Duration::from_millis(100) && closed_at < Duration::from_secs(6),
        "closed {closed_at:?} after the drain start (grace {GRACE:?}, exit after 6s)"
    );
    let st = envoy.drain_status().await;
    assert_eq!(st["idle_connections_told"]["http2"], 1, "{st}");
    assert_eq!(st["idle_connections_told"]["http1"], 0, "{st}");
    assert_eq!(told(envoy, "http2").await, Some(1));
}

/// The module's count of idle connections told at the drain start, for `protocol` (its stat).
async fn told(envoy: &Envoy, protocol: &str) -> Option<i64> {
    let stat = format!("graceful_drain.idle_connections_told_{protocol}");
    envoy.stat(&stat).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_http1_keep_alive_is_closed_cleanly_at_drain_start() {
    let envoy = Envoy::start(Options::with(LONG)).await;
    let mut c = H1Conn::connect(envoy.data).await.unwrap();
    let r = c.send("GET", "/before", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), None, "keep-alive before the drain");
    stay_idle().await;

    let t0 = start_drain(&envoy).await;
    c.wait_closed(Duration::from_secs(2))
        .await
        .expect("idle keep-alive connection closed cleanly");
    // At the drain start: before even an HTTP/2 connection's grace, long before the exit (6 s).
    let closed_after = t0.elapsed();
    assert!(
        closed_after < GRACE,
        "closed {closed_after:?} after the drain start"
    );
    let st = envoy.drain_status().await;
    assert_eq!(st["idle_connections_told"]["http1"], 1, "{st}");
    assert_eq!(told(&envoy, "http1").await, Some(1));
}

/// A request whose first bytes were read before the drain started and whose rest arrives after:
/// the connection is not closed under it; it gets its response (with `connection: close`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http1_request_half_read_at_drain_start_gets_its_response() {
    // One worker, so the witness connection's close shows the drain event has been handled on
    // the worker that also holds the half-read connection.
    let envoy = Envoy::start(Options {
        settings: LONG,
        concurrency: 1,
        ..Options::default()
    })
    .await;
    let mut witness = H1Conn::connect(envoy.data).await.unwrap();
    assert_eq!(witness.send("GET", "/", &[]).await.unwrap().status, 200);
    stay_idle().await;
    let (mut tcp, host, req) = http1_after_one_request(envoy.data).await;
    // Half of the next request: read by Envoy, but no stream yet (headers incomplete).
    tcp.write_all(b"GET /two HTTP/1.1\r\nho").await.unwrap();
    eventually("the half request read", Duration::from_secs(5), || async {
        let n = envoy.stat("http.data.downstream_cx_rx_bytes_total").await?;
        (n as usize >= req.len() + 21).then_some(())
    })
    .await;

    start_drain(&envoy).await;
    witness
        .wait_closed(Duration::from_secs(2))
        .await
        .expect("the idle witness is closed");
    tcp.write_all(format!("st: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let second = read_http1_response(&mut tcp).await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(
        second.to_ascii_lowercase().contains("connection: close"),
        "{second}"
    );
    let st = envoy.drain_status().await;
    assert_eq!(
        st["idle_connections_told"]["http1"], 1,
        "only the witness: {st}"
    );
}

/// A request written in the moment between the idle check that marks its connection and the
/// close that would follow: the close is called off (the bytes were read), the request is served.
/// The moment is pinned by an idle HTTP/2 witness on the same (single) worker, told by the same
/// check: its GOAWAY arrives, then the request is written at once. A run where the client was too
/// slow to land in the window (on a loaded machine) proves nothing and is repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http1_request_arriving_between_the_idle_check_and_the_close_is_served() {
    // Well inside connections::CONFIRM_DELAY (50 ms) after the check.
    const IN_WINDOW: Duration = Duration::from_millis(25);
    for attempt in 1..=3 {
        let envoy = Envoy::start(Options {
            settings: LONG,
            concurrency: 1,
            ..Options::default()
        })
        .await;
        let host = format!("127.0.0.1:{}", envoy.data);
        let mut witness = RawH2::connect(envoy.data).await;
        witness.get(1, &host).await;
        let (mut tcp, _, _) = http1_after_one_request(envoy.data).await;
        stay_idle().await;

        start_drain(&envoy).await;
        loop {
            match witness.next_frame(Duration::from_secs(3)).await {
                Some(Frame::GoAway { .. }) => break,
                Some(Frame::Other { .. }) => {}
                None => panic!("witness closed without GOAWAY"),
            }
        }
        let told = Instant::now();
        let req = format!("GET /two HTTP/1.1\r\nhost: {host}\r\n\r\n");
        let written = tcp.write_all(req.as_bytes()).await;
        let late = told.elapsed();
        let second = match written {
            Ok(()) => try_read_http1_response(&mut tcp).await,
            Err(e) => Err(format!("write: {e}")),
        };
        if late > IN_WINDOW {
            eprintln!("attempt {attempt}: request written {late:?} after the check, too late");
            continue;
        }
        let second = second.unwrap_or_else(|e| {
            panic!("the request written {late:?} after the idle check was cut: {e}")
        });
        assert!(second.starts_with("HTTP/1.1 200"), "{second}");
        assert!(
            second.to_ascii_lowercase().contains("connection: close"),
            "{second}"
        );
        let st = envoy.drain_status().await;
        assert_eq!(st["idle_connections_told"]["http1"], 0, "{st}");
        return;
    }
    panic!("the client never wrote within {IN_WINDOW:?} of the check in 3 attempts");
}

/// A raw HTTP/1.1 connection that has had one full request answered, so the HTTP filter knows it.
/// Returns it, its `host` and that request's bytes.
async fn http1_after_one_request(port: u16) -> (TcpStream, String, String) {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let host = format!("127.0.0.1:{port}");
    let req = format!("GET /one HTTP/1.1\r\nhost: {host}\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let first = read_http1_response(&mut tcp).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    (tcp, host, req)
}

/// Read one HTTP/1.1 response with a content-length body (bounded).
async fn read_http1_response(tcp: &mut TcpStream) -> String {
    try_read_http1_response(tcp).await.unwrap()
}

/// Read one HTTP/1.1 response with a content-length body (bounded); an error if the connection
/// ends first.
async fn try_read_http1_response(tcp: &mut TcpStream) -> Result<String, String> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = clients::content_length(&text[..end]);
            if buf.len() >= end + 4 + len {
                return Ok(text);
            }
        }
        let mut chunk = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, tcp.read(&mut chunk))
            .await
            .map_err(|_| format!("no full response within 5s: {text:?}"))?
            .map_err(|e| format!("read: {e} after {text:?}"))?;
        if n == 0 {
            return Err(format!("closed before a full response: {text:?}"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Busy connections keep the HTTP filter's behaviour; only the idle ones are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn busy_connections_complete_their_requests_and_are_not_counted() {
    let envoy = Envoy::start(Options::with(LONG)).await;
    // One idle connection of each kind.
    let mut h1_idle = H1Conn::connect(envoy.data).await.unwrap();
    assert_eq!(h1_idle.send("GET", "/", &[]).await.unwrap().status, 200);
    let mut h2_idle = H2Conn::connect(envoy.data).await.unwrap();
    assert_eq!(h2_idle.send("/", &[]).await.unwrap().status, 200);
    stay_idle().await;
    let slow = [("x-envoy-fault-delay-request", "1500")];
    let port = envoy.data;
    let h1_busy = tokio::spawn(async move {
        let mut c = H1Conn::connect(port).await.unwrap();
        c.send("GET", "/slow", &slow).await
    });
    let mut h2_busy = H2Conn::connect(envoy.data).await.unwrap();
    let h2_stream = tokio::spawn(h2_busy.start("/slow", &slow).await.unwrap());
    envoy.wait_active(2).await;

    start_drain(&envoy).await;
    let r = h1_busy
        .await
        .unwrap()
        .expect("busy HTTP/1.1 request completes");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let r = h2_stream
        .await
        .unwrap()
        .expect("busy HTTP/2 stream completes");
    assert_eq!(r.status, 200);
    h1_idle
        .wait_closed(Duration::from_secs(2))
        .await
        .expect("idle HTTP/1.1 closed");
    h2_idle
        .wait_closed(GRACE + Duration::from_secs(2))
        .await
        .expect("idle HTTP/2 ends cleanly");
    let st = envoy.drain_status().await;
    assert_eq!(st["idle_connections_told"]["http1"], 1, "{st}");
    assert_eq!(st["idle_connections_told"]["http2"], 1, "{st}");
    assert_eq!(st["connections_sent_away"]["http1"], 1, "{st}");
    assert_eq!(st["connections_sent_away"]["http2"], 1, "{st}");
}

/// Clients holding idle connections across the drain start, then sending again, as a pooled
/// client does: pick the pooled connection if it is still usable, else connect anew. Every
/// request that was sent must succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_resuming_after_the_drain_start_see_no_failure() {
    let envoy = Envoy::start(Options::with(LONG)).await;
    let mut h1s = Vec::new();
    let mut h2s = Vec::new();
    for _ in 0..4 {
        let mut c = H1Conn::connect(envoy.data).await.unwrap();
        assert_eq!(c.send("GET", "/", &[]).await.unwrap().status, 200);
        h1s.push(c);
        let mut c = H2Conn::connect(envoy.data).await.unwrap();
        assert_eq!(c.send("/", &[]).await.unwrap().status, 200);
        h2s.push(c);
    }
    stay_idle().await;
    start_drain(&envoy).await;
    // Resume at staggered moments: at once, during the HTTP/2 grace, and after it.
    let mut tasks = Vec::new();
    for (i, (h1, h2)) in h1s.into_iter().zip(h2s).enumerate() {
        let port = envoy.data;
        let wait = Duration::from_millis([0, 300, 1200, 2600][i]);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let mut failures = Vec::new();
            let mut reconnects = 0;
            let mut h1 = Some(h1);
            let mut h2 = Some(h2);
            for round in 0..3 {
                // HTTP/1.1: a pooled connection the server closed is discarded before use.
                let mut c = match h1.take() {
                    Some(c) if c.is_open() => c,
                    _ => {
                        reconnects += 1;
                        H1Conn::connect(port).await.unwrap()
                    }
                };
                match c.send("GET", "/resume-h1", &[]).await {
                    Ok(r) if r.status == 200 => {}
                    other => failures.push(format!("h1 round {round}: {other:?}")),
                }
                h1 = Some(c);
                // HTTP/2: a connection that got GOAWAY refuses new streams locally (nothing was
                // sent); the client then opens a new connection.
                let mut c = h2.take().unwrap();
                let fut = match c.start("/resume-h2", &[]).await {
                    Ok(f) => f,
                    Err(e) => {
                        assert!(e.is_go_away() || c.is_closed(), "unexpected: {e}");
                        reconnects += 1;
                        c = H2Conn::connect(port).await.unwrap();
                        c.start("/resume-h2", &[]).await.expect("fresh connection")
                    }
                };
                match fut.await {
                    Ok(r) if r.status == 200 => {}
                    other => failures.push(format!("h2 round {round}: {other:?}")),
                }
                h2 = Some(c);
            }
            (failures, reconnects)
        }));
    }
    let mut reconnects = 0;
    for t in tasks {
        let (failures, r) = t.await.unwrap();
        assert!(failures.is_empty(), "failed requests: {failures:?}");
        reconnects += r;
    }
    assert!(
        reconnects >= 8,
        "idle connections were told: {reconnects} reconnects"
    );
    let st = envoy.drain_status().await;
    // The client resuming at the drain start itself may beat the close (which waits
    // CONFIRM_DELAY for such a request): it is then served with `connection: close` instead.
    let h1_told = st["idle_connections_told"]["http1"].as_u64().unwrap();
    assert!((3..=4).contains(&h1_told), "{st}");
    assert_eq!(st["idle_connections_told"]["http2"], 4, "{st}");
}

/// SIGTERM with idle connections open: Envoy's exit comes when the drain rules allow, not later,
/// and the drain-complete log line reports the idle connections told. The connections' close
/// grace is 8 s here (the example's is 2 s), so that a drain the idle connections held (until
/// their close, or until the 20 s timeout) is told apart from one by the rules (1 s) plus a busy
/// machine's teardown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_time_does_not_wait_for_idle_connections() {
    const MIN_DRAIN: Duration = Duration::from_secs(1);
    const QUIET: Duration = Duration::from_millis(200);
    const CLOSE_GRACE: Duration = Duration::from_secs(8);
    let o = Options::with(Settings::new("1s", "200ms", "20s"));
    let p = common::free_ports(3);
    let yaml = common::envoy::render_gateway(p[0], p[1], p[2], &o);
    let grace = r#""idle_close_grace": "2s""#;
    assert_eq!(yaml.matches(grace).count(), 1, "{yaml}");
    let yaml = yaml.replacen(grace, r#""idle_close_grace": "8s""#, 1);
    let mut envoy = Envoy::start_yaml(&yaml, p[0], p[1], p[2], &o).await;
    let mut h1 = H1Conn::connect(envoy.data).await.unwrap();
    assert_eq!(h1.send("GET", "/", &[]).await.unwrap().status, 200);
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    assert_eq!(h2.send("/", &[]).await.unwrap().status, 200);
    let last_request = Instant::now();
    // A connection that never sent a byte, and one that only sent the HTTP/2 preface.
    let _silent = TcpStream::connect(("127.0.0.1", envoy.data)).await.unwrap();
    let _preface_only = RawH2::connect(envoy.data).await;
    stay_idle().await;

    let t0 = Instant::now();
    envoy.sigterm();
    // By the rules (min_drain_duration; the last request is long over): the real exit, and the
    // module's figure, far below the idle connections' close and the timeout.
    let exited_at = envoy
        .wait_exit_by_the_drain_rules(
            "idle connections open",
            t0,
            [MIN_DRAIN, QUIET],
            last_request,
            last_request,
        )
        .await;
    assert!(
        exited_at - t0 < CLOSE_GRACE,
        "held by the idle connections: {:?}",
        exited_at - t0
    );
    let log = envoy.log();
    assert!(
        log.contains("idle connections told: http1=1 http2="),
        "drain-complete log line: {}",
        log.lines()
            .filter(|l| l.contains("drain completed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    h1.wait_closed(Duration::from_secs(1))
        .await
        .expect("closed before the exit");
}

/// Pooled idle upstream connections of a front Envoy (no retries) across the gateway's drain
/// start: the pool learns (close or GOAWAY) and every later request succeeds.
async fn front_pool_resumes_without_failures(upstream_h2: bool) {
    let gateway = Envoy::start(Options::with(LONG)).await;
    let fp = common::free_ports(2);
    let front_opts = Options {
        with_module: false,
        ..Options::default()
    };
    let front = Envoy::start_yaml(
        &front_yaml(&Front {
            admin: fp[0],
            listen: Some(fp[1]),
            gateways: &[(gateway.data, gateway.data)],
            upstream_h2,
            health_check: None,
            route_timeout: "10s",
            websocket: false,
        }),
        fp[0],
        fp[1],
        fp[1],
        &front_opts,
    )
    .await;
    // Warm the pool: concurrent slow requests open several upstream connections.
    let burst = |n: usize, path: &'static str, delay: &'static str| {
        let port = front.data;
        async move {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    tokio::spawn(async move {
                        clients::request(
                            port,
                            "GET",
                            path,
                            &[("x-envoy-fault-delay-request", delay)],
                        )
                        .await
                    })
                })
                .collect();
            let mut failures = Vec::new();
            for t in tasks {
                match t.await.unwrap() {
                    Ok(r) if r.status == 200 => {}
                    other => failures.push(format!("{path}: {other:?}")),
                }
            }
            failures
        }
    };
    assert!(burst(6, "/warm", "300").await.is_empty());
    let pooled = front
        .stat("cluster.gateways.upstream_cx_active")
        .await
        .unwrap_or(0);
    assert!(pooled >= 1, "the front holds pooled upstream connections");
    gateway.wait_active(0).await;
    stay_idle().await;

    let t0 = start_drain(&gateway).await;
    let mut failures = Vec::new();
    for at in [300u64, 1000, 2600, 3500] {
        tokio::time::sleep(
            (t0 + Duration::from_millis(at)).saturating_duration_since(Instant::now()),
        )
        .await;
        failures.extend(burst(6, "/resume", "50").await);
    }
    assert!(
        failures.is_empty(),
        "failed through the front: {failures:?}"
    );
    let st = gateway.drain_status().await;
    let told = if upstream_h2 {
        &st["idle_connections_told"]["http2"]
    } else {
        &st["idle_connections_told"]["http1"]
    };
    assert!(
        told.as_u64().unwrap_or(0) >= 1,
        "the pooled idle connections were told: {st}"
    );
    assert_eq!(
        front
            .stat("cluster.gateways.upstream_rq_retry")
            .await
            .unwrap_or(0),
        0
    );
    eprintln!(
        "front pool ({}): {pooled} pooled upstream connections; gateway status {st}",
        if upstream_h2 { "h2" } else { "h1" }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn front_envoy_http1_pool_across_the_drain_start_loses_nothing() {
    front_pool_resumes_without_failures(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn front_envoy_http2_pool_across_the_drain_start_loses_nothing() {
    front_pool_resumes_without_failures(true).await
}

/// The network filter without the HTTP filter (listeners where only a network filter can be
/// added): it cannot tell idle from busy, so it sends GOAWAY to every HTTP/2 connection (safe on
/// busy ones: their streams complete) and closes nothing; HTTP/1.1 is left to Envoy's drain-close.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn network_filter_without_the_http_filter_sends_goaway_and_closes_nothing() {
    let p = common::free_ports(3);
    // The network filter alone, without following the exchanges (`track_requests` off).
    let o = Options::with(LONG).filter_mode();
    let yaml = common::envoy::render_gateway(p[0], p[1], p[2], &o);
    let yaml = common::envoy::remove_list_items(&yaml, "envoy.filters.http.dynamic_modules");
    assert!(yaml.contains("envoy.filters.network.dynamic_modules"));
    let envoy = Envoy::start_yaml(&yaml, p[0], p[1], p[2], &o).await;

    let mut busy = H2Conn::connect(envoy.data).await.unwrap();
    let stream = tokio::spawn(
        busy.start("/slow", &[("x-envoy-fault-delay-request", "1500")])
            .await
            .unwrap(),
    );
    let mut raw = RawH2::connect(envoy.data).await;
    raw.get(1, &format!("127.0.0.1:{}", envoy.data)).await;
    let mut h1 = H1Conn::connect(envoy.data).await.unwrap();
    assert_eq!(h1.send("GET", "/", &[]).await.unwrap().status, 200);
    eventually(
        "the slow stream in flight",
        Duration::from_secs(5),
        || async { (envoy.stat("http.data.downstream_rq_active").await? == 1).then_some(()) },
    )
    .await;

    let t0 = start_drain(&envoy).await;
    // The idle HTTP/2 connection: GOAWAY at once.
    loop {
        match raw.next_frame(Duration::from_secs(3)).await {
            Some(Frame::GoAway { last_stream, error }) => {
                assert_eq!((last_stream, error), ((1 << 31) - 1, 0));
                break;
            }
            Some(_) => {}
            None => panic!("closed without GOAWAY"),
        }
    }
    // At the drain start, not after the grace.
    assert!(t0.elapsed() < GRACE, "{:?}", t0.elapsed());
    // The busy one: GOAWAY too (no new stream), and its stream completes.
    let e = busy.wait_goaway(Duration::from_secs(1)).await;
    assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR));
    assert_eq!(stream.await.unwrap().expect("in-flight stream").status, 200);
    // HTTP/1.1 keep-alive: not closed by the filter; Envoy's drain-close answers with close.
    assert!(
        h1.is_open(),
        "HTTP/1.1 must not be closed without the HTTP filter"
    );
    let r = h1.send("GET", "/late", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    let r = clients::get(envoy.admin, "/graceful_drain/status")
        .await
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(st["idle_connections_told"]["http2"], 2, "{st}");
    assert_eq!(st["idle_connections_told"]["http1"], 0, "{st}");
}

/// h2load (nghttp2) as the HTTP/2 client: its connections are idle between requests paced by a
/// timing script when the drain starts; the injected GOAWAY must leave every connection valid:
/// every request h2load started succeeds. h2load does not reconnect after a GOAWAY, so it does not
/// start the later requests, and counts those as failed/errored (its accounting, nothing sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2load_connections_stay_valid_across_the_injected_goaway() {
    let h2load = std::process::Command::new("h2load")
        .arg("--version")
        .output();
    assert!(
        h2load.is_ok(),
        "h2load not found: install nghttp2-client (`make bench-deps`)"
    );
    let envoy = Envoy::start(Options::with(LONG)).await;
    let dir = common::envoy::TempDir::new("h2load");
    let script = dir.0.join("timing");
    // Per client: a request at once, one at 1.5 s, one at 3 s: idle in between.
    let uri = format!("http://127.0.0.1:{}", envoy.data);
    std::fs::write(
        &script,
        format!("0.0\t{uri}/a\n1500.0\t{uri}/b\n3000.0\t{uri}/c\n"),
    )
    .unwrap();
    let mut child = tokio::process::Command::new("h2load")
        .args(["-c", "2", "--timing-script-file"])
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("h2load");
    eventually(
        "h2load's first two rounds (the drain starts before the third)",
        Duration::from_secs(5),
        || async { (envoy.stat("http.data.downstream_rq_total").await? >= 4).then_some(()) },
    )
    .await;
    envoy.wait_active(0).await;
    start_drain(&envoy).await;
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    tokio::time::timeout(Duration::from_secs(20), stdout.read_to_string(&mut out))
        .await
        .expect("h2load finishes")
        .unwrap();
    let status = child.wait().await.unwrap();
    let line = out
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no summary from h2load ({status}):\n{out}"));
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|p| {
                p.trim()
                    .strip_suffix(name)?
                    .trim()
                    .rsplit(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no `{name}` in {line:?}"))
    };
    assert_eq!(
        field("succeeded"),
        field("started"),
        "a started request failed: {out}"
    );
    assert_eq!(field("started"), 4, "GOAWAY stops new requests: {out}");
    assert_eq!(field("timeout"), 0, "{out}");
    assert!(out.contains("status codes: 4 2xx"), "{out}");
    let st = envoy.drain_status().await;
    assert_eq!(st["idle_connections_told"]["http2"], 2, "{st}");
}

/// HTTP/1.1 keep-alive clients pausing about `idle_after` between requests (0.95-1.15 s; one in
/// twenty 1.6-1.9 s), across the drain start and the re-checks: a connection the filter finds idle may get the client's next
/// request in that very moment. The close waits CONFIRM_DELAY and is dropped if a request came
/// (measured before that: 1-2 of 150 such clients lost a request at the drain start).
///
/// What remains is the race every server-side keep-alive close has: a request the client writes
/// while the close is under way, before Envoy has read a byte of it. RFC 9112 section 9.3.1.1 lets
/// clients retry it (idempotent, reused connection, no response byte), and they do (curl, Go,
/// browsers). So the clients here do that too, and the test counts those retries: at most one
/// per run (seen in about one run of twenty), never a request Envoy had read (Envoy's own
/// `downstream_cx_destroy_local_active_rq` stays 0), never a failure after the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_pausing_about_idle_after_lose_nothing() {
    let envoy = Envoy::start(Options::with(Settings::new("8s", "200ms", "20s"))).await;
    let port = envoy.data;
    // The drain starts once every client has been answered and some of the slow ones are well
    // into a pause (idle for 1.2 s: past idle_after, with 0.4 s or more to go), so idle
    // connections are there at the drain start's check however the machine schedules the
    // clients; the fast ones are at every phase of idle_after. The clients run on until 5 s into
    // the drain.
    const CLIENTS: usize = 120;
    let stop_at: Arc<OnceLock<Instant>> = Arc::default();
    // Per client: 0 while not yet answered or while a request is out, else 1 + the ms since
    // `start` at its last answer.
    let idle_since: Arc<Vec<AtomicU64>> =
        Arc::new((0..CLIENTS).map(|_| AtomicU64::new(0)).collect());
    let answered = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS as u64 {
        let (stop_at, idle_since, answered) =
            (stop_at.clone(), idle_since.clone(), answered.clone());
        let idle_since_mine = move |v: u64| idle_since[i as usize].store(v, Ordering::Relaxed);
        tasks.push(tokio::spawn(async move {
            let mut c = H1Conn::connect(port).await.unwrap();
            let (mut ok, mut failures, mut retried) = (0u64, Vec::new(), Vec::new());
            // Requests answered on the current connection (a retry needs a reused one).
            let mut answered_here = 0u32;
            let mut x = i * 7919 + 13;
            for _ in 0..20 {
                if stop_at.get().is_some_and(|&t| Instant::now() >= t) {
                    break;
                }
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                // One client in twenty pauses well beyond idle_after (1.6-1.9 s): idle at some
                // check in every run, so the close path is always exercised (with only the
                // others, the count idle at a check is small, about 4, and was 0 in one CI run).
                let pause = if i % 20 == 0 {
                    1600 + (x >> 33) % 300
                } else {
                    950 + (x >> 33) % 200
                };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                idle_since_mine(0);
                if !c.is_open() {
                    c = H1Conn::connect(port).await.unwrap();
                    answered_here = 0;
                }
                let mut r = c.send("GET", "/", &[]).await;
                if let Err(e) = &r {
                    // No status at all (closed under the request) on a reused connection: the
                    // retry RFC 9112 allows, once, on a new connection.
                    if answered_here > 0 {
                        retried.push(format!("{e} at {:?}", start.elapsed()));
                        c = H1Conn::connect(port).await.unwrap();
                        answered_here = 0;
                        r = c.send("GET", "/", &[]).await;
                    }
                }
                match r {
                    Ok(r) if r.status == 200 => {
                        ok += 1;
                        answered_here += 1;
                        if ok == 1 {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        idle_since_mine(1 + start.elapsed().as_millis() as u64);
                    }
                    other => {
                        failures.push(format!("{other:?} at {:?}", start.elapsed()));
                        c = H1Conn::connect(port).await.unwrap();
                        answered_here = 0;
                    }
                }
            }
            (ok, failures, retried)
        }));
    }
    eventually(
        "every client answered, and two idle for 1.2 s",
        Duration::from_secs(20),
        || async {
            let now = start.elapsed().as_millis() as u64;
            let idle = idle_since
                .iter()
                .map(|t| t.load(Ordering::Relaxed))
                .filter(|&t| t > 0 && now + 1 >= t + 1200)
                .count();
            (answered.load(Ordering::Relaxed) == CLIENTS as u64 && idle >= 2).then_some(())
        },
    )
    .await;
    let drain_start = start_drain(&envoy).await;
    stop_at.set(drain_start + Duration::from_secs(5)).unwrap();
    let (mut ok, mut failures, mut retried) = (0, Vec::new(), Vec::new());
    for t in tasks {
        let (o, f, r) = t.await.unwrap();
        ok += o;
        failures.extend(f);
        retried.extend(r);
    }
    let st = envoy.drain_status().await;
    let cut = envoy
        .stat("http.data.downstream_cx_destroy_local_active_rq")
        .await;
    eprintln!(
        "pausing clients: {ok} requests ok, {} failed, {} retried {retried:?}; idle told {}; \
         connections Envoy closed with a request in flight: {cut:?}",
        failures.len(),
        retried.len(),
        st["idle_connections_told"]
    );
    assert!(ok > 500, "too little load: {ok}");
    assert!(failures.is_empty(), "lost requests: {failures:?}");
    assert_eq!(
        cut,
        Some(0),
        "Envoy closed a connection with a request it had read"
    );
    assert!(
        retried.len() <= 1,
        "more than the close race's rare retry (no request must be in the socket at the close): \
         {retried:?}"
    );
    assert!(
        st["idle_connections_told"]["http1"].as_u64().unwrap() >= 1,
        "some connections were idle at a check: {st}"
    );
}
