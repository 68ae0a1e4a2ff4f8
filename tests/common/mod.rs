//! Shared integration-test helpers: the Envoy process guard, config rendering, free ports,
//! bounded polling, and real HTTP/1.1 (hyper) and HTTP/2 (h2) clients on 127.0.0.1.
#![allow(dead_code)] // each test binary uses a different subset

pub mod clients;
pub mod envoy;
pub mod front;
pub mod json;
pub mod tools;
pub mod upstream;

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

/// Pick `n` distinct free loopback ports, held open together so they differ. They come from
/// below the kernel's ephemeral range, so no outgoing connection can take one while a test
/// restarts a process on it.
pub fn free_ports(n: usize) -> Vec<u16> {
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    const LOW: u32 = 15000;
    if ephemeral_low <= LOW + 1000 {
        let ls: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
            .collect();
        return ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
    }
    let span = ephemeral_low - LOW;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ (std::process::id() << 12);
    let mut x = seed;
    let mut held = Vec::new();
    for _ in 0..10 * span {
        if held.len() == n {
            break;
        }
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let port = (LOW + (x >> 8) % span) as u16;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    assert_eq!(held.len(), n, "could not find {n} free ports");
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}
