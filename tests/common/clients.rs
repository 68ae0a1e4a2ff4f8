//! Real HTTP clients on 127.0.0.1: HTTP/1.1 through hyper's connection API (so a test sees
//! `connection: close` and the server closing the socket) and HTTP/2 with prior knowledge through
//! the h2 crate (so a test sees GOAWAY). Every wait is bounded.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Upper bound for any single client operation.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn bounded<T>(what: &str, f: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::time::timeout(OP_TIMEOUT, f)
        .await
        .map_err(|_| format!("{what}: timed out after {OP_TIMEOUT:?}"))?
}

/// What a test's own server reads of a request: its head, up to and with the blank line (and
/// whatever came in the same reads after it); `None` if the connection ended first.
pub async fn read_head(tcp: &mut TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let (mut head, mut buf) = (Vec::new(), [0u8; 1024]);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => head.extend_from_slice(&buf[..k]),
        }
    }
    Some(head)
}

/// A TCP connection to 127.0.0.1:`port` (unbounded: the caller bounds it).
async fn loopback(port: u16) -> Result<TcpStream, String> {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))
}

/// One request on a fresh HTTP/1.1 connection.
pub async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Resp, String> {
    let mut c = H1Conn::connect(port).await?;
    c.send(method, path, headers).await
}

pub async fn get(port: u16, path: &str) -> Result<Resp, String> {
    request(port, "GET", path, &[]).await
}

/// One request on a fresh HTTP/1.1 connection to a unix socket (an admin bound to a `pipe`, as
/// a platform's shutdown sidecar reaches it), with `host: unix` as Go's client sends it.
pub async fn unix_request(
    socket: &std::path::Path,
    method: &str,
    path: &str,
) -> Result<Resp, String> {
    bounded("unix request", async {
        let s = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| format!("connect {}: {e}", socket.display()))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
                .await
                .map_err(|e| format!("h1 handshake: {e}"))?;
        let driver = tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "unix")
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request failed: {e}"));
        let out = match resp {
            Ok(resp) => {
                let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
                let body = resp.into_body().collect().await.map_err(|e| e.to_string());
                body.map(|b| Resp {
                    status,
                    headers,
                    body: b.to_bytes(),
                })
            }
            Err(e) => Err(e),
        };
        driver.abort();
        out
    })
    .await
}

/// An HTTP/1.1 keep-alive connection.
/// Dropping it closes the socket (aborts the connection task), like a client going away.
pub struct H1Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    driver: Option<JoinHandle<Result<(), hyper::Error>>>,
    port: u16,
}

/// Write `request` as it is on a new connection to 127.0.0.1:`port` and read the answer until the
/// server closes (bounded): for requests no client library would send, such as HTTP/1.0.
pub async fn raw_exchange(port: u16, request: &[u8]) -> Result<Vec<u8>, String> {
    raw_exchange_at("127.0.0.1", port, request).await
}

/// [`raw_exchange`] with a loopback address of either family (`"::1"`: IPv6).
pub async fn raw_exchange_at(ip: &str, port: u16, request: &[u8]) -> Result<Vec<u8>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    assert!(
        ip.parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback()),
        "loopback only: {ip}"
    );
    bounded("raw exchange", async {
        let mut tcp = TcpStream::connect((ip, port))
            .await
            .map_err(|e| format!("connect {ip} port {port}: {e}"))?;
        tcp.write_all(request).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer)
    })
    .await
}

/// The `content-length` of an HTTP/1.1 response head (0 without one).
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0)
}

/// An answer read by [`exchange_at`]: its status, head and body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Write `request` as it is on a new connection to a loopback address and read one answer,
/// ending at its `content-length` (not at the close: Envoy delays its close of a `connection:
/// close` exchange up to a second for the client's own).
pub async fn exchange_at(ip: &str, port: u16, request: &[u8]) -> Result<Answer, String> {
    assert!(
        ip.parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback()),
        "loopback only: {ip}"
    );
    let tcp = bounded("connect", async {
        TcpStream::connect((ip, port))
            .await
            .map_err(|e| format!("connect {ip} port {port}: {e}"))
    })
    .await?;
    exchange_on(tcp, request).await
}

/// [`exchange_at`] on a connection the caller made (e.g. from a test's own network namespace,
/// `common::netns`).
pub async fn exchange_on(mut tcp: TcpStream, request: &[u8]) -> Result<Answer, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    bounded("exchange", async {
        tcp.write_all(request).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&answer).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = content_length(head);
                if body.len() >= length {
                    let status = head
                        .split(' ')
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| format!("no status line in {head:?}"))?;
                    return Ok(Answer {
                        status,
                        head: head.to_string(),
                        body: body[..length].to_string(),
                    });
                }
            }
            let n = tcp.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!("closed before a whole answer: {text:?}"));
            }
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await
}

/// One request over IPv6 loopback (`[::1]:port`), on a connection of its own: the status and the
/// body.
pub async fn request_v6(port: u16, method: &str, path: &str) -> Result<(u16, String), String> {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: [::1]:{port}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    let a = exchange_at("::1", port, req.as_bytes()).await?;
    Ok((a.status, a.body))
}

/// The status of `GET path` over IPv6 loopback ([`request_v6`]).
pub async fn status_v6(port: u16, path: &str) -> Result<u16, String> {
    request_v6(port, "GET", path).await.map(|(s, _)| s)
}

impl Drop for H1Conn {
    fn drop(&mut self) {
        if let Some(d) = &self.driver {
            d.abort();
        }
    }
}

impl H1Conn {
    pub async fn connect(port: u16) -> Result<H1Conn, String> {
        bounded("h1 connect", async {
            let io = hyper_util::rt::TokioIo::new(loopback(port).await?);
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("h1 handshake: {e}"))?;
            let driver = Some(tokio::spawn(conn));
            Ok(H1Conn {
                sender,
                driver,
                port,
            })
        })
        .await
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        let mut b = http::Request::builder().method(method).uri(path);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            b = b.header("host", format!("127.0.0.1:{}", self.port));
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
        let sender = &mut self.sender;
        bounded("h1 request", async move {
            sender
                .ready()
                .await
                .map_err(|e| format!("h1 not ready: {e}"))?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| format!("h1 request failed: {e}"))?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("h1 body: {e}"))?
                .to_bytes();
            Ok(Resp {
                status,
                headers,
                body,
            })
        })
        .await
    }

    /// Whether a pooled client would still use this connection (the server has not closed it).
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed() && self.driver.as_ref().is_some_and(|d| !d.is_finished())
    }

    /// Wait (bounded) for the server to close the connection cleanly.
    pub async fn wait_closed(mut self, timeout: Duration) -> Result<(), String> {
        let driver = self
            .driver
            .take()
            .expect("driver present until wait_closed");
        match tokio::time::timeout(timeout, driver).await {
            Err(_) => Err(format!("connection still open after {timeout:?}")),
            Ok(Err(e)) => Err(format!("driver task failed: {e}")),
            Ok(Ok(Err(e))) => Err(format!("connection ended with an error: {e}")),
            Ok(Ok(Ok(()))) => Ok(()),
        }
    }
}

/// An HTTP/2 (h2c, prior knowledge) connection.
pub struct H2Conn {
    send: h2::client::SendRequest<Bytes>,
    driver: JoinHandle<Result<(), h2::Error>>,
    port: u16,
}

/// How an HTTP/2 request went.
pub type H2Result = Result<Resp, String>;

impl H2Conn {
    pub async fn connect(port: u16) -> Result<H2Conn, String> {
        bounded("h2 connect", async {
            let (send, conn) = h2::client::handshake(loopback(port).await?)
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
            let driver = tokio::spawn(conn);
            Ok(H2Conn { send, driver, port })
        })
        .await
    }

    /// Open a stream now. `Err(e)` with `e.is_go_away()` means the server already sent GOAWAY.
    pub async fn start(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<impl Future<Output = H2Result> + Send + 'static, h2::Error> {
        let mut b = http::Request::builder()
            .method("GET")
            .uri(format!("http://127.0.0.1:{}{path}", self.port));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(()).expect("valid request");
        let mut ready = self.send.clone().ready().await?;
        let (resp, _) = ready.send_request(req, true)?;
        Ok(async move {
            bounded("h2 response", async move {
                let resp = resp.await.map_err(|e| format!("h2 stream failed: {e}"))?;
                let status = resp.status().as_u16();
                let headers = resp.headers().clone();
                let mut body = resp.into_body();
                let mut buf = Vec::new();
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.map_err(|e| format!("h2 body failed: {e}"))?;
                    let _ = body.flow_control().release_capacity(chunk.len());
                    buf.extend_from_slice(&chunk);
                }
                Ok(Resp {
                    status,
                    headers,
                    body: Bytes::from(buf),
                })
            })
            .await
        })
    }

    pub async fn send(&mut self, path: &str, headers: &[(&str, &str)]) -> H2Result {
        match self.start(path, headers).await {
            Ok(f) => f.await,
            Err(e) => Err(format!("h2 could not open a stream: {e}")),
        }
    }

    /// Wait (bounded) until the server has sent GOAWAY: opening a stream then fails with a
    /// GOAWAY error, which is returned. Streams opened before that are cancelled.
    pub async fn wait_goaway(&mut self, timeout: Duration) -> h2::Error {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Err(e) = self.start("/probe", &[]).await {
                if e.is_go_away() {
                    return e;
                }
                panic!("h2 stream failed without GOAWAY: {e}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no GOAWAY within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The GOAWAY this client has received, if one came, read from the connection's state without
    /// sending anything ([`H2Conn::wait_goaway`] opens a stream, which gives the server a new
    /// request to answer and so another way to send one). `None` while none came; panics if the
    /// connection failed otherwise.
    pub fn goaway_received(&self) -> Option<h2::Error> {
        let mut send = self.send.clone();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match send.poll_ready(&mut cx) {
            std::task::Poll::Ready(Err(e)) if e.is_go_away() && e.is_remote() => Some(e),
            std::task::Poll::Ready(Err(e)) => panic!("h2 connection failed without GOAWAY: {e}"),
            _ => None,
        }
    }

    /// Whether the connection task has ended (server closed after GOAWAY, or an error).
    pub fn is_closed(&self) -> bool {
        self.driver.is_finished()
    }

    /// Wait (bounded) for the connection to end; Ok if it ended without a protocol/IO error.
    pub async fn wait_closed(self, timeout: Duration) -> Result<(), String> {
        match tokio::time::timeout(timeout, self.driver).await {
            Err(_) => Err(format!("h2 connection still open after {timeout:?}")),
            Ok(Err(e)) => Err(format!("driver task failed: {e}")),
            Ok(Ok(Err(e))) if e.is_go_away() && e.reason() == Some(h2::Reason::NO_ERROR) => Ok(()),
            Ok(Ok(Err(e))) => Err(format!("h2 connection ended with an error: {e}")),
            Ok(Ok(Ok(()))) => Ok(()),
        }
    }
}

/// The module's control listener at `[::1]:control` with its RBAC rule refusing this client:
/// `/drain` gets the rule's 403, the probes' paths (`/ready`, `/drain/status`) answer 200, and no
/// drain started.
pub async fn assert_drain_refused_probes_open(control: u16) {
    let (status, body) = request_v6(control, "POST", "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (403, "RBAC: access denied"));
    for path in ["/ready", "/drain/status"] {
        assert_eq!(
            status_v6(control, path).await,
            Ok(200),
            "{path} open to anyone"
        );
    }
    let (_, st) = request_v6(control, "GET", "/drain/status").await.unwrap();
    assert!(
        st.contains("\"state\":\"serving\""),
        "no drain started: {st}"
    );
}

/// Wait (bounded) until readiness says the drain started: the module's `/ready` on the control
/// listener (`[::1]:control`) and the platform's own check (`GET /ready` on `platform`, the
/// admin's answer through a platform listener; the module failed Envoy's health checks) both
/// answer 503.
pub async fn wait_not_ready(control: u16, platform: u16) {
    super::eventually("readiness 503", Duration::from_secs(3), || async {
        (status_v6(control, "/ready").await == Ok(503)).then_some(())
    })
    .await;
    super::eventually(
        "the platform's /ready 503",
        Duration::from_secs(3),
        || async {
            (get(platform, "/ready").await.ok().map(|r| r.status) == Some(503)).then_some(())
        },
    )
    .await;
}

/// How soon a kit's readiness check must turn 503 once a drain started: well within one period
/// of kubelet's probe (2 s in the kits), so the first probe after the drain start fails.
pub const READY_503_WITHIN: Duration = Duration::from_secs(1);

/// Poll a kit's readiness check (`check`, the status of kubelet's request; `None` when no answer)
/// from the drain's start (`since`): 200 until it answers 503, never anything else (no refused
/// connection, no other status), and 503 within [`READY_503_WITHIN`]. How long after `since` the
/// first 503 came.
pub async fn readiness_turns_503<F, Fut>(
    what: &str,
    since: std::time::Instant,
    mut check: F,
) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<u16>>,
{
    loop {
        let status = check().await;
        let t = since.elapsed();
        match status {
            Some(503) => return t,
            Some(200) => {}
            other => {
                panic!("{what}: answered {other:?} {t:?} after the drain start, not 200 or 503")
            }
        }
        assert!(
            t < READY_503_WITHIN,
            "{what}: still 200 {t:?} after the drain start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
