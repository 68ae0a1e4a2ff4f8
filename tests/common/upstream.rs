//! A small HTTP/1.1 upstream for tests, on 127.0.0.1, with behaviours chosen by path:
//! `/ok` answers 200; `/reset` resets the connection after reading the request; `/hang` never
//! answers; `/stream` sends response headers then a chunk every 100 ms for up to 60 s (SSE-like);
//! `.../delay/<ms>` answers 200 after that many milliseconds (at most 60 s);
//! a WebSocket upgrade gets 101 and an echo. The server task is aborted on drop.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Upstream {
    pub port: u16,
    task: JoinHandle<()>,
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
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(serve(sock));
            }
        });
        Upstream { port, task }
    }
}

async fn read_head(sock: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut byte).await.ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

async fn serve(mut sock: TcpStream) {
    // Keep-alive: serve requests until the connection ends or a behaviour ends it.
    while let Some(head) = read_head(&mut sock).await {
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        let upgrade = head.to_ascii_lowercase().contains("upgrade: websocket");
        if upgrade {
            let _ = sock
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n")
                .await;
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
