//! WebSocket and SSE on both ends of a gateway, with a real WebSocket library (tokio-tungstenite):
//! an upstream server the gateway routes `/upstream-streaming/` to, and a client session that
//! exchanges messages until the server closes, the connection ends, or the test stops it.

use futures_util::{SinkExt, StreamExt};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// What the upstream server received: each client's text messages, and the Close codes it got.
#[derive(Default)]
pub struct Seen {
    pub messages: BTreeMap<String, BTreeSet<String>>,
    pub closes: Vec<Option<u16>>,
    /// Messages written by a [`Upstream::Bursty`] server (all connections), each counted once
    /// its burst was flushed to the socket.
    pub sent: u64,
}

/// How the upstream behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// Reads every message, sends a message every 100 ms, answers a Close.
    Chatty,
    /// After the handshake, reads nothing (so never answers a Close) and sends nothing.
    Deaf,
    /// As `Chatty`, but each of its messages is three fragments 40 ms apart: at a move time it
    /// is most often inside a message, so the Close goes in the write of a last fragment.
    Fragmented,
    /// Each message in two fragments, and each write the end of one message with the start of
    /// the next: between two writes it is always inside a message, and every write holds a
    /// message end followed by more bytes, so the Close is cut into the middle of a write.
    Straddling,
    /// Every 300 ms one write of [`BURST`] text messages (about 46 KB: Envoy writes them
    /// towards the client in several 16 KiB buffer slices, a frame often split between two),
    /// each write ending inside a message that the next completes (`send_burst`); reads every
    /// message, answers a Close.
    Bursty,
}

/// Messages in one [`Upstream::Bursty`] write.
pub const BURST: u64 = 300;

/// A WebSocket server on a free loopback port; the returned task runs until the test ends.
pub async fn upstream(kind: Upstream) -> (u16, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let seen = s.clone();
            tokio::spawn(async move {
                if let Some(gzip) = is_completion(&tcp).await {
                    return serve_completion(tcp, gzip).await;
                }
                if let Some(quiet) = is_sse(&tcp).await {
                    return serve_sse(tcp, quiet).await;
                }
                let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                if kind == Upstream::Deaf {
                    // Hold the socket, read nothing.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    drop(ws);
                    return;
                }
                let (mut tx, mut rx) = ws.split();
                let period = if kind == Upstream::Bursty { 300 } else { 100 };
                let mut tick = tokio::time::interval(Duration::from_millis(period));
                let mut n = 0u64;
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            n += 1;
                            if kind == Upstream::Fragmented {
                                if send_fragments(&mut tx, n).await.is_err() {
                                    break;
                                }
                            } else if kind == Upstream::Straddling {
                                if send_straddling(&mut tx, n).await.is_err() {
                                    break;
                                }
                            } else if kind == Upstream::Bursty {
                                match send_burst(&mut tx, n).await {
                                    Ok(k) => seen.lock().unwrap().sent += k,
                                    Err(()) => break,
                                }
                            } else if tx.send(Message::Text(format!("server {n}"))).await.is_err() {
                                break;
                            }
                        }
                        m = rx.next() => match m {
                            Some(Ok(Message::Text(t))) => {
                                let (client, _) = t.split_once(' ').unwrap_or(("?", ""));
                                seen.lock().unwrap().messages.entry(client.to_string())
                                    .or_default().insert(t.to_string());
                            }
                            Some(Ok(Message::Close(c))) => {
                                seen.lock().unwrap().closes.push(c.map(|c| u16::from(c.code)));
                                // tungstenite queues the answer; flush it, then close.
                                let _ = tx.close().await;
                                break;
                            }
                            Some(Ok(_)) => {}
                            _ => break,
                        }
                    }
                }
            });
        }
    });
    (port, seen)
}

/// Events in one [`serve_completion`] answer, before its `data: [DONE]`.
pub const COMPLETION_EVENTS: u64 = 30;

/// Whether the request on `tcp` (not read yet) asks for a finite event stream: `/completion/`
/// (an LLM-style completion: `Some(false)`) or `/sse-gzip/` (`Some(true)`: the same events
/// under `content-encoding: gzip`, as a compressing upstream labels them).
async fn is_completion(tcp: &TcpStream) -> Option<bool> {
    path_is(tcp, b"/completion/", b"/sse-gzip/").await
}

/// Whether the request line on `tcp` (peeked, not read) has `plain` (`Some(false)`) or `other`
/// (`Some(true)`) in it; `None` for neither, or no request line within a second.
async fn path_is(tcp: &TcpStream, plain: &[u8], other: &[u8]) -> Option<bool> {
    let mut buf = [0u8; 256];
    for _ in 0..100 {
        let n = tcp.peek(&mut buf).await.unwrap_or(0);
        if buf[..n].windows(2).any(|w| w == b"\r\n") {
            let has = |p: &[u8]| buf[..n].windows(p.len()).any(|w| w == p);
            return has(plain).then_some(false).or(has(other).then_some(true));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// A finite event stream, as OpenAI-style completion APIs answer a POST: the request read whole
/// (its JSON body by its Content-Length), then a chunked `text/event-stream` of
/// [`COMPLETION_EVENTS`] events 100 ms apart (each in two chunks 30 ms apart), `data: [DONE]`
/// and the last chunk. `gzip`: labelled `content-encoding: gzip` (the bytes are the test's:
/// what matters is that they reach the client exactly as written).
async fn serve_completion(mut tcp: TcpStream, gzip: bool) {
    let Some(mut got) = super::clients::read_head(&mut tcp).await else {
        return;
    };
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let body_len = end + 4 + len;
    let mut buf = [0u8; 1024];
    while got.len() < body_len {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(k) => got.extend_from_slice(&buf[..k]),
        }
    }
    let encoding = if gzip {
        "content-encoding: gzip\r\n"
    } else {
        ""
    };
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{encoding}\
         cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    if tcp.write_all(resp.as_bytes()).await.is_err() {
        return;
    }
    for n in 1..=COMPLETION_EVENTS {
        let first = format!("data: {{\"token\": {n}, ");
        if !event_in_two_chunks(&mut tcp, &first, "\"end\": true}\n\n").await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(70)).await;
    }
    let mut end = chunk("data: [DONE]\n\n");
    end.extend_from_slice(b"0\r\n\r\n");
    let _ = tcp.write_all(&end).await;
    let _ = tcp.read(&mut buf).await;
}

/// One HTTP/1.1 chunk holding `s`.
fn chunk(s: &str) -> Vec<u8> {
    format!("{:x}\r\n{s}\r\n", s.len()).into_bytes()
}

/// One event written as two chunks 30 ms apart (so a cut after the first would be inside the
/// event); false once the connection is gone.
async fn event_in_two_chunks(tcp: &mut TcpStream, first: &str, second: &str) -> bool {
    if tcp.write_all(&chunk(first)).await.is_err() {
        return false;
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    tcp.write_all(&chunk(second)).await.is_ok()
}

/// Whether the request on `tcp` (not read yet) asks for an event stream (`/sse/` in its path,
/// or `/sse-quiet/`: see [`serve_sse`]).
async fn is_sse(tcp: &TcpStream) -> Option<bool> {
    path_is(tcp, b"/sse/", b"/sse-quiet/").await
}

/// An SSE upstream: a chunked `text/event-stream` response, an event every 100 ms, each sent
/// as two chunks 30 ms apart (so a cut after the first would be inside an event), until the
/// connection goes. `quiet`: two events, then nothing (a stream with rare events, as a
/// notification feed between two notifications), until the connection goes.
async fn serve_sse(mut tcp: TcpStream, quiet: bool) {
    if super::clients::read_head(&mut tcp).await.is_none() {
        return;
    }
    let resp = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\
                 cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
    if tcp.write_all(resp).await.is_err() {
        return;
    }
    for n in 1u64.. {
        let first = format!("id: {n}\ndata: event {n}");
        if !event_in_two_chunks(&mut tcp, &first, " ends here\n\n").await {
            return;
        }
        if quiet && n == 2 {
            // Held open until the connection goes.
            let _ = tcp.read(&mut [0u8; 1024]).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(70)).await;
    }
}

/// One text message in three fragments, 40 ms apart (RFC 6455 §5.4).
async fn send_fragments<S>(tx: &mut S, n: u64) -> Result<(), ()>
where
    S: futures_util::Sink<Message> + Unpin,
{
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let parts = [
        (OpCode::Data(Data::Text), format!("server {n} ")),
        (OpCode::Data(Data::Continue), "in three ".to_string()),
        (OpCode::Data(Data::Continue), "fragments".to_string()),
    ];
    for (i, (op, text)) in parts.into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        let frame = Frame::message(text.into_bytes(), op, i == 2);
        tx.send(Message::Frame(frame)).await.map_err(|_| ())?;
    }
    Ok(())
}

/// One write: the last fragment of the message the previous write began (none for the first
/// write), [`BURST`] messages of 150 bytes each, then the first fragment of one more message
/// (`feed` each, then one flush). Between two writes the server is always inside a message, so
/// a move's Close goes into a write, after its last whole message. Returns the messages it
/// completed.
async fn send_burst<S>(tx: &mut S, n: u64) -> Result<u64, ()>
where
    S: futures_util::Sink<Message> + Unpin,
{
    if n > 1 {
        feed_fragment(tx, format!("ends burst {}", n - 1), true).await?;
    }
    for i in 0..BURST {
        let m = format!("burst {n} message {i:03} {}", "x".repeat(124));
        tx.feed(Message::Text(m)).await.map_err(|_| ())?;
    }
    feed_fragment(tx, format!("burst {n} straddling "), false).await?;
    tx.flush().await.map_err(|_| ())?;
    Ok(BURST + u64::from(n > 1))
}

/// Feed (not flush) one fragment of a text message: its first (`last` false: a Text frame
/// without FIN) or its last (`last`: a Continuation frame with FIN).
async fn feed_fragment<S>(tx: &mut S, text: String, last: bool) -> Result<(), ()>
where
    S: futures_util::Sink<Message> + Unpin,
{
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let op = OpCode::Data(if last { Data::Continue } else { Data::Text });
    let f = Frame::message(text.into_bytes(), op, last);
    tx.feed(Message::Frame(f)).await.map_err(|_| ())
}

/// One write (`feed` twice, then one flush): message `n - 1`'s last fragment (none for the first
/// message), then message `n`'s first fragment.
async fn send_straddling<S>(tx: &mut S, n: u64) -> Result<(), ()>
where
    S: futures_util::Sink<Message> + Unpin,
{
    if n > 1 {
        feed_fragment(tx, format!("ends server {}", n - 1), true).await?;
    }
    feed_fragment(tx, format!("server {n} "), false).await?;
    tx.flush().await.map_err(|_| ())
}

/// What one WebSocket client session saw.
#[derive(Debug)]
pub struct ClientEnd {
    pub name: String,
    /// The server's Close frame's code (1005: none in it); `None`: no Close came from the
    /// server (a cut, 1006, or the test stopped the session first).
    pub code: Option<u16>,
    /// The connection ended or failed without a Close from the server, or the server did not
    /// answer the client's Close at a stop: how.
    pub cut: Option<String>,
    /// When the Close (or the cut, or the stop) came.
    pub at: Instant,
    /// When the connection ended after that (the close handshake over, the TCP connection
    /// closed by the server), or when the client gave up waiting for it (10 s).
    pub ended: Instant,
    /// Messages it sent before it received the Close (each `"<name> <n>"`).
    pub sent: BTreeSet<String>,
    /// Server messages received.
    pub received: u64,
}

pub type Ws = WebSocketStream<TcpStream>;

/// Open a WebSocket through the listener on `data` to `/upstream-streaming/ws/<name>` (the
/// gateway's route to [`upstream`]): the connect and the handshake, or what failed (a refused
/// connection, a status other than 101, ...).
pub async fn connect(data: u16, name: &str) -> Result<Ws, String> {
    let tcp = TcpStream::connect(("127.0.0.1", data))
        .await
        .map_err(|e| format!("{name}: connect: {e}"))?;
    let url = format!("ws://127.0.0.1:{data}/upstream-streaming/ws/{name}");
    match tokio_tungstenite::client_async(url, tcp).await {
        Ok((ws, resp)) if resp.status() == 101 => Ok(ws),
        Ok((_, resp)) => Err(format!("{name}: handshake answered {}", resp.status())),
        Err(e) => Err(format!("{name}: handshake: {e}")),
    }
}

/// A client session on an open WebSocket: sends `"<name> <n>"` every 100 ms and reads, until
/// the server's Close (answered as tungstenite does: the handshake completed), the connection's
/// end or failure (a cut), or `stop` (then the client closes with 1000 itself).
pub async fn session(ws: Ws, name: String, stop: impl Future<Output = ()>) -> ClientEnd {
    let (mut tx, mut rx) = ws.split();
    let mut sent = BTreeSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut n = 0u64;
    let mut received = 0;
    tokio::pin!(stop);
    let (code, cut, at) = loop {
        tokio::select! {
            _ = tick.tick() => {
                n += 1;
                let m = format!("{name} {n}");
                if tx.send(Message::Text(m.clone())).await.is_ok() {
                    sent.insert(m);
                }
            }
            m = rx.next() => match m {
                Some(Ok(Message::Close(c))) => {
                    break (Some(c.map_or(1005, |c| u16::from(c.code))), None, Instant::now());
                }
                Some(Ok(_)) => received += 1,
                Some(Err(e)) => break (None, Some(format!("{name}: {e}")), Instant::now()),
                None => break (None, Some(format!("{name}: ended without a Close")), Instant::now()),
            },
            _ = &mut stop => {
                let bye = CloseFrame { code: CloseCode::Normal, reason: "".into() };
                let _ = tx.send(Message::Close(Some(bye))).await;
                break (None, None, Instant::now());
            }
        }
    };
    // Let tungstenite send its answer (or the server its own) and see the connection end.
    let stopped = code.is_none() && cut.is_none();
    let mut answered = false;
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(m)) = rx.next().await {
            answered |= matches!(m, Message::Close(_));
        }
    })
    .await;
    let ended = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(1), tx.close()).await;
    // A stopped session was alive only if the server answered its Close.
    let cut = match (stopped, answered) {
        (true, false) => Some(format!("{name}: no answer to the client's Close")),
        _ => cut,
    };
    ClientEnd {
        name,
        code,
        cut,
        at,
        ended,
        sent,
        received,
    }
}
