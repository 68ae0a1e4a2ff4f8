//! Shared integration-test helpers: the Envoy process guard, config rendering, free ports,
//! bounded polling, and real HTTP/1.1 (hyper) and HTTP/2 (h2) clients on 127.0.0.1.
#![allow(dead_code)] // each test binary uses a different subset

pub mod clients;
pub mod envoy;
pub mod front;
pub mod gateway;
pub mod image;
pub mod json;
pub mod netns;
pub mod scenario;
pub mod tools;
pub mod upstream;
pub mod websocket;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Every stat the module defines, by its name under the bootstrap extension's namespace
/// (docs/configuration.md, "Stats"): a scrape has each as `envoy_graceful_drain_<name>`, from
/// the start, in every mode, on every supported Envoy. Written out here, not read from the
/// crate: it is what dashboards and alerts were built against.
pub const STAT_NAMES: [&str; 23] = [
    "active_requests",
    "draining",
    "admin_address_ok",
    "drains_started",
    "drains_completed",
    "drains_timed_out",
    "connections_sent_away_http1",
    "connections_sent_away_http2",
    "connections_sent_away_other",
    "requests_served_while_draining",
    "module_errors",
    "idle_connections_told_http1",
    "idle_connections_told_http2",
    "connections_untracked",
    "websockets_moved",
    "websockets_cut",
    "websocket_messages_dropped",
    "sse_responses_moved",
    "sse_responses_cut",
    "hpack_decoding_stopped",
    "grpc_streams_moved",
    "grpc_streams_ended_at_timeout",
    "envoy_untested",
];

/// The series name of a Prometheus sample line (`name{labels} value` or `name value`).
pub fn series_of(line: &str) -> &str {
    line.split(['{', ' ']).next().unwrap_or_default()
}

/// Run `cmd` (`what` names it in a failure) and check it succeeded; its stdout. A failure shows
/// its status, stderr and stdout.
pub fn stdout_of(cmd: &mut std::process::Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        text(&out.stderr),
        text(&out.stdout)
    );
    text(&out.stdout)
}

/// The sha256 of a file, as `sha256sum` prints it.
pub fn sha256(path: &std::path::Path) -> String {
    let mut cmd = std::process::Command::new("sha256sum");
    stdout_of(cmd.arg(path), &format!("sha256sum {path:?}"))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The platforms' release files the kits are checked against (Kourier, Contour, Envoy Gateway,
/// Istio: other projects' files, each folder's SOURCES says where from). The repository keeps no
/// copy: they are read from `../shared/platforms/` beside the checkout (CI has it there), or from
/// `GRACEFUL_DRAIN_PLATFORMS`. Panics naming where to put them when they are missing.
pub fn platforms() -> PathBuf {
    let dir = std::env::var_os("GRACEFUL_DRAIN_PLATFORMS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/platforms"));
    assert!(
        dir.join("README.md").is_file(),
        "the platforms' release files are missing: put them in {} (the shared/platforms/ folder \
         beside the checkout, with its README.md and each platform's SOURCES), or point \
         GRACEFUL_DRAIN_PLATFORMS at them",
        dir.display()
    );
    dir
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

/// Loopback ports reserved for a test: each is held by a socket bound to it (not listening,
/// with `SO_REUSEADDR`) until this guard is dropped, so no other process can take it in the gap
/// between picking it and Envoy binding it, nor while a test restarts a process on it.
///
/// Why this works on Linux: a bind conflicts with a bound socket unless both set
/// `SO_REUSEADDR` and the bound one is not listening. Envoy (every TCP listen socket, the admin's
/// included) and tokio/std listeners set it, so they bind and listen over the reservation, and
/// connections reach them only (a socket that does not listen takes none). [`free_ports`] probes
/// without `SO_REUSEADDR`, so it never hands out a port another test process holds, nor one in
/// use. (A program that binds with `SO_REUSEADDR` while nothing listens can still share a
/// reserved port; no such program picks ports in our range: see [`free_ports`].)
pub struct Ports {
    ports: Vec<u16>,
    _held: Vec<std::os::fd::OwnedFd>,
}

impl std::ops::Deref for Ports {
    type Target = [u16];
    fn deref(&self) -> &[u16] {
        &self.ports
    }
}

/// A socket bound to 127.0.0.1:`port` and then marked `SO_REUSEADDR` (the bind itself is
/// exclusive, so it fails if any socket has the port), or `None` if the port is taken.
fn reserve(port: u16) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: socket(2) with constant arguments; the fd, if valid, is owned by the OwnedFd at
    // once, which closes it on every path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket(2): {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh socket nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_in of `len` bytes that outlives the call.
    let rc = unsafe { libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len) };
    if rc != 0 {
        return None;
    }
    let on: libc::c_int = 1;
    // SAFETY: setsockopt(2) on our socket with a c_int option value that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_REUSEADDR: {}", std::io::Error::last_os_error());
    Some(sock)
}

/// Reserve `n` distinct free loopback ports (see [`Ports`]: held until the guard is dropped, so
/// keep it as long as anything is to bind them). They come from below the kernel's ephemeral
/// range, so no outgoing connection can take one either.
pub fn free_ports(n: usize) -> Ports {
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    const LOW: u32 = 15000;
    let range = if ephemeral_low > LOW + 1000 {
        LOW..ephemeral_low
    } else {
        // No room below the ephemeral range: anywhere above the privileged ports.
        1024..65536
    };
    let span = range.end - range.start;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ (std::process::id() << 12);
    let mut x = seed;
    let (mut ports, mut held) = (Vec::new(), Vec::new());
    for _ in 0..10 * span {
        if held.len() == n {
            break;
        }
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let port = (range.start + (x >> 8) % span) as u16;
        if ports.contains(&port) {
            continue;
        }
        if let Some(sock) = reserve(port) {
            ports.push(port);
            held.push(sock);
        }
    }
    assert_eq!(held.len(), n, "could not reserve {n} free ports");
    Ports { ports, _held: held }
}
