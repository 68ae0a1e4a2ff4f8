//! Scenarios more than one suite plays against a running gateway.

use super::clients::{self, H2Conn};
use super::envoy::Envoy;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How to make a request that takes 800 ms on the gateway under test.
#[derive(Clone, Copy)]
pub struct Slow {
    pub path: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
}

impl Slow {
    /// The example gateway (`envoy-config/gateway.yaml`): its fault filter delays on a header.
    pub const FAULT_HEADER: Slow = Slow {
        path: "/slow",
        headers: &[("x-envoy-fault-delay-request", "800")],
    };
    /// A gateway proxying to the test upstream (`common::upstream`), which delays by path.
    pub const UPSTREAM_DELAY: Slow = Slow {
        path: "/slow/delay/800",
        headers: &[],
    };
}

/// What every Envoy that hosts the module must do on SIGTERM (kubelet's stop), seen by clients:
/// an HTTP/1.1 request and an HTTP/2 stream in flight finish with 200 (the HTTP/1.1 one with
/// `connection: close`), an idle HTTP/2 connection is sent GOAWAY(NO_ERROR), and Envoy exits 0
/// once they are done, reporting no request cut.
pub async fn sigterm_drains_in_flight_work(envoy: &mut Envoy, slow: Slow) {
    let data = envoy.data;
    let h1 =
        tokio::spawn(async move { clients::request(data, "GET", slow.path, slow.headers).await });
    let mut busy = H2Conn::connect(envoy.data).await.expect("h2 connect");
    let h2 = tokio::spawn(
        busy.start(slow.path, slow.headers)
            .await
            .expect("h2 stream"),
    );
    let mut idle = H2Conn::connect(envoy.data)
        .await
        .expect("h2 connect (idle)");
    let r = idle
        .send("/before", &[])
        .await
        .expect("h2 request before the drain");
    assert_eq!(r.status, 200);
    envoy.wait_active(2).await;

    envoy.sigterm();
    let goaway = idle.wait_goaway(Duration::from_secs(5)).await;
    assert_eq!(goaway.reason(), Some(h2::Reason::NO_ERROR), "idle HTTP/2");
    let r = h1
        .await
        .unwrap()
        .expect("in-flight HTTP/1.1 request completes");
    assert_eq!(r.status, 200, "HTTP/1.1 in flight");
    assert_eq!(r.header("connection"), Some("close"), "HTTP/1.1 told to go");
    let r = h2
        .await
        .unwrap()
        .expect("in-flight HTTP/2 stream completes");
    assert_eq!(r.status, 200, "HTTP/2 in flight");
    let (status, _) = envoy.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "exit status {status}:\n{}", envoy.log());
    let log = envoy.log();
    assert!(log.contains("drain started (trigger=sigterm"), "{log}");
    assert!(log.contains("requests cut: 0"), "{log}");
}

/// A request head on its way during a drain (#44 item 6): a connection to the data listener
/// that sent `GET /slow-head` and some headers, but not the blank line that ends the head, before
/// or during the drain started at `t0`. Envoy stays up until `watch_until` (past what the drain
/// would take without the request), answers the request 200 with `connection: close` once its
/// head completes, and exits 0 within `prompt` after that.
pub async fn a_head_on_its_way_holds_the_drain(
    envoy: &mut Envoy,
    mut head: TcpStream,
    t0: Instant,
    watch_until: Instant,
    prompt: Duration,
) {
    while Instant::now() < watch_until {
        assert!(
            envoy.exited().is_none(),
            "Envoy exited {:?} after SIGTERM with a request head on its way",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let completed = Instant::now();
    head.write_all(b"\r\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), head.read_to_end(&mut got))
        .await
        .expect("answered, then closed")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let (status, exited) = envoy.wait_exit(prompt + Duration::from_secs(5)).await;
    assert!(status.success(), "{status:?}");
    assert!(
        exited > completed && exited - completed < prompt,
        "Envoy exits promptly once the request is answered: {:?} after the head completed",
        exited.checked_duration_since(completed)
    );
}

/// A connection to `port` that sent the start of a request head (see
/// [`a_head_on_its_way_holds_the_drain`]).
pub async fn a_head_begun(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"GET /slow-head HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    s
}
