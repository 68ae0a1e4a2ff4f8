//! Scenarios more than one suite plays against a running gateway.

use super::clients::{self, H2Conn};
use super::envoy::Envoy;
use std::time::Duration;

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
