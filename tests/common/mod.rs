//! Shared integration-test helpers: the Envoy process guard, config rendering, free ports,
//! bounded polling, and real HTTP/1.1 (hyper) and HTTP/2 (h2) clients on 127.0.0.1.
#![allow(dead_code)] // each test binary uses a different subset

pub mod clients;
pub mod envoy;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Poll `check` until it returns `Some`, or panic with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pick `n` distinct free loopback ports (held open together so they differ).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}
