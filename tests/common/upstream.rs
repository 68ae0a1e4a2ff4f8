//! A small HTTP/1.1 upstream for tests, on 127.0.0.1, with behaviours chosen by path:
//! `/ok` answers 200; `/reset` resets the connection after reading the request; `/hang` never
//! answers; `/stream` sends response headers then a chunk every 100 ms for up to 60 s (SSE-like);
//! `.../delay/<ms>` answers 200 after that many milliseconds (at most 60 s);
//! a WebSocket upgrade gets 101 and an echo. A request's `content-length` body is read before it
//! is answered, and every request line read is recorded ([`Upstream::received`]: what the
//! upstream processed). The server task is aborted on drop.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Upstream {
    pub port: u16,
    task: JoinHandle<()>,
    received: Arc<Mutex<Vec<String>>>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub async fn start() -> Upstream {
        let reserved = super::free_ports(1);
        let port = reserved[0];
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind upstream");
        drop(reserved); // the listener holds the port now
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(serve(sock, log.clone()));
            }
        });
        Upstream {
            port,
            task,
            received,
        }
    }

    /// The request lines read so far (`POST /upstream/ok?id=2`), in the order they were read.
    pub fn received(&self) -> Vec<String> {
        self.received.lock().unwrap().clone()
    }
}

/// A request head, read after the bytes `buf` already holds; with the bytes read past it.
async fn read_head_after(sock: &mut TcpStream, mut buf: Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut byte = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let after = buf.split_off(end + 4);
            return Some((String::from_utf8_lossy(&buf).into_owned(), after));
        }
        let n = sock.read(&mut byte).await.ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
}

async fn serve(mut sock: TcpStream, received: Arc<Mutex<Vec<String>>>) {
    // Keep-alive: serve requests until the connection ends or a behaviour ends it.
    let mut rest = Vec::new();
    while let Some((head, body_start)) = read_head_after(&mut sock, std::mem::take(&mut rest)).await
    {
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        let line = head.lines().next().unwrap_or_default().to_string();
        // The body, by content-length (what follows it is the next request's).
        let want = super::clients::content_length(&head);
        let mut body = body_start;
        while body.len() < want {
            let mut buf = [0u8; 4096];
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
        }
        rest = body.split_off(want.min(body.len()));
        received.lock().unwrap().push(line);
        let upgrade = head.to_ascii_lowercase().contains("upgrade: websocket");
        if upgrade {
            let _ = sock
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n")
                .await;
            // Bytes the client sent behind its upgrade request are the echo's first.
            let _ = sock.write_all(&std::mem::take(&mut rest)).await;
            let (mut r, mut w) = sock.into_split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
            return;
        }
        if path.ends_with("/reset") {
            // Linger 0 makes the close a RST, which is the point; with 0 the drop does not block.
            #[allow(deprecated)]
            let _ = sock.set_linger(Some(Duration::ZERO));
            return; // dropped with linger 0: RST
        }
        if let Some(ms) = path
            .rsplit_once("/delay/")
            .and_then(|(_, ms)| ms.parse().ok())
        {
            tokio::time::sleep(Duration::from_millis(ms).min(Duration::from_secs(60))).await;
        }
        if path.ends_with("/hang") {
            tokio::time::sleep(Duration::from_secs(60)).await;
            return;
        }
        if path.ends_with("/stream") {
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            for i in 0..600 {
                let data = format!("data: {i}\n\n");
                let chunk = format!("{:x}\r\n{data}\r\n", data.len());
                if sock.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = sock.write_all(b"0\r\n\r\n").await;
            return;
        }
        if sock
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
            .await
            .is_err()
        {
            return;
        }
    }
}
