//! Network namespaces of the test's own, made with `ip` (as root) and removed by their guard's
//! drop: [`OtherHost`], joined to this one by a veth pair with addresses that are not loopback (a
//! client on another host, as a pod's neighbour is, while the traffic stays on this machine); and
//! [`NoIpv6`], a namespace with only IPv4 loopback, where a program runs as on a node without
//! IPv6 (a pod's own network: nothing else in it).

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub struct OtherHost {
    ns: String,
    host_link: String,
    /// This side's address on the pair (where a listener on every address answers it).
    pub here: Ipv4Addr,
    /// The other host's own address (what Envoy sees as the client's).
    pub there: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl OtherHost {
    /// The namespace and its link, or why they cannot be made here (no `ip`, not root).
    pub fn new() -> Result<OtherHost, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{seq}", std::process::id());
        // A /30 of 10.200.0.0/16 by process and sequence, so that tests of other processes
        // running at the same time (other checkouts) use other addresses.
        let block = (std::process::id().wrapping_mul(8).wrapping_add(seq) % 16_384) * 4;
        let [_, _, a, b] = (0x0AC8_0000u32 | block).to_be_bytes();
        let (here, there) = (
            Ipv4Addr::new(10, 200, a, b + 1),
            Ipv4Addr::new(10, 200, a, b + 2),
        );
        let host = OtherHost {
            ns: format!("gd-test-{id}"),
            host_link: format!("gdt{id}a"),
            here,
            there,
        };
        let peer = format!("gdt{id}b");
        let ns = host.ns.as_str();
        ip(&["netns", "add", ns])?;
        // From here on the guard removes what was made.
        ip(&[
            "link",
            "add",
            &host.host_link,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            ns,
        ])?;
        ip(&["addr", "add", &format!("{here}/30"), "dev", &host.host_link])?;
        ip(&["link", "set", &host.host_link, "up"])?;
        let inside = |args: &[&str]| {
            let mut a = vec!["netns", "exec", ns, "ip"];
            a.extend_from_slice(args);
            ip(&a)
        };
        inside(&["addr", "add", &format!("{there}/30"), "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// A TCP connection from the other host to `port` on this side's address (bounded).
    pub async fn connect(&self, port: u16) -> Result<tokio::net::TcpStream, String> {
        let path = format!("/run/netns/{}", self.ns);
        let to = std::net::SocketAddr::from((self.here, port));
        // A thread of its own enters the namespace (not one of tokio's pool, which would stay
        // there and serve others): the socket it makes stays in the namespace; the thread ends
        // with the connection made.
        let tcp = tokio::task::spawn_blocking(move || {
            std::thread::spawn(move || {
                let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
                // SAFETY: setns(2) on a namespace file this thread opened; only this thread
                // moves.
                if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(format!("setns: {}", std::io::Error::last_os_error()));
                }
                std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5))
                    .map_err(|e| format!("connect {to} from the other host: {e}"))
            })
            .join()
            .map_err(|_| "the namespace's thread panicked".to_string())?
        })
        .await
        .map_err(|e| e.to_string())??;
        tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
        tokio::net::TcpStream::from_std(tcp).map_err(|e| e.to_string())
    }
}

impl Drop for OtherHost {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_link]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// A namespace of its own with IPv6 disabled (`net.ipv6.conf.{all,default}.disable_ipv6=1`, so
/// its loopback has 127.0.0.1 and no `::1`), for programs started by [`NoIpv6::command`].
pub struct NoIpv6 {
    ns: String,
}

impl NoIpv6 {
    /// The namespace, or why it cannot be made here (no `ip` or `sysctl`, not root).
    pub fn new() -> Result<NoIpv6, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let ns = NoIpv6 {
            ns: format!("gd-noipv6-{id}"),
        };
        ip(&["netns", "add", &ns.ns])?;
        ip(&["netns", "exec", &ns.ns, "ip", "link", "set", "lo", "up"])?;
        for key in [
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ] {
            let out = Command::new("ip")
                .args(["netns", "exec", &ns.ns, "sysctl", "-qw", key])
                .output()
                .map_err(|e| format!("sysctl: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "sysctl -w {key}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(ns)
    }

    /// `program` run inside the namespace. `without_inet6`: moreover, as on a kernel booted with
    /// `ipv6.disable=1`, where no IPv6 socket can be made at all (`socket(AF_INET6, ...)` fails
    /// with EAFNOSUPPORT: the kernel has no inet6 family); the sysctl alone disables IPv6 on the
    /// interfaces but still lets a program bind `::`. Done with a seccomp filter the child
    /// installs before it execs (it then holds for the program and whatever it execs).
    pub fn command(&self, program: &std::path::Path, without_inet6: bool) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        if without_inet6 {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the closure only makes two prctl(2) calls on data it
            // owns (no allocation, no lock): async-signal-safe.
            unsafe {
                c.pre_exec(refuse_inet6_sockets);
            }
        }
        c
    }

    /// `GET path` on 127.0.0.1:`port` inside the namespace (HTTP/1.1, bounded): the status and
    /// the body.
    pub fn get(&self, port: u16, path: &str) -> Result<(u16, String), String> {
        use std::io::{Read, Write};
        let ns_path = format!("/run/netns/{}", self.ns);
        let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        // A thread of its own enters the namespace (the caller's stays where it is).
        std::thread::spawn(move || {
            let f = std::fs::File::open(&ns_path).map_err(|e| format!("{ns_path}: {e}"))?;
            // SAFETY: setns(2) on a namespace file this thread opened; only this thread moves.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(format!("setns: {}", std::io::Error::last_os_error()));
            }
            let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let mut tcp = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2))
                .map_err(|e| format!("connect {to}: {e}"))?;
            tcp.set_read_timeout(Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            tcp.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
            let mut answer = String::new();
            tcp.read_to_string(&mut answer).map_err(|e| e.to_string())?;
            let status = answer
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("not an HTTP answer: {answer:?}"))?;
            let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
            Ok((status, body))
        })
        .join()
        .map_err(|_| "the namespace's thread panicked".to_string())?
    }
}

impl Drop for NoIpv6 {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// A seccomp filter: `socket(AF_INET6, ...)` fails with EAFNOSUPPORT, everything else runs.
fn refuse_inet6_sockets() -> std::io::Result<()> {
    // Classic BPF over struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low half on
    // a little-endian machine, the domain).
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let op = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    let filter = [
        op(LD_W_ABS, 4, 0, 0),
        op(JEQ_K, AUDIT_ARCH, 0, 5),
        op(LD_W_ABS, 0, 0, 0),
        op(JEQ_K, libc::SYS_socket as u32, 0, 3),
        op(LD_W_ABS, 16, 0, 0),
        op(JEQ_K, libc::AF_INET6 as u32, 0, 1),
        op(RET_K, RET_ERRNO | libc::EAFNOSUPPORT as u32, 0, 0),
        op(RET_K, RET_ALLOW, 0, 0),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl(2) with a filter program that lives until the call returns (the kernel
    // copies it).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl OtherHost {
    /// [`OtherHost::new`], or `None` once a `SKIPPED` line said why not (no `ip`, no root).
    pub fn or_skip() -> Option<OtherHost> {
        OtherHost::new()
            .map_err(|why| eprintln!("SKIPPED: cannot make a network namespace here ({why})"))
            .ok()
    }
}

/// The control listener on `here:control`, reached from `other`: each of `drain_requests`
/// (method, path) is refused with the RBAC rule's 403, the probes' paths (`/ready`,
/// `/drain/status`) answer 200, and the status still says serving (no drain started).
pub async fn assert_drain_refused_from(
    other: &OtherHost,
    control: u16,
    drain_requests: &[(&str, &str)],
) {
    let here = other.here;
    let from_there = |method: &str, path: &str| {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {here}:{control}\r\ncontent-length: 0\r\n\
             connection: close\r\n\r\n"
        );
        async move {
            let tcp = other
                .connect(control)
                .await
                .expect("connect from the other host");
            super::clients::exchange_on(tcp, req.as_bytes())
                .await
                .expect("an answer")
        }
    };
    for (method, path) in drain_requests {
        let a = from_there(method, path).await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (403, "RBAC: access denied"),
            "{method} {path} from {}",
            other.there
        );
    }
    for path in ["/ready", "/drain/status"] {
        let a = from_there("GET", path).await;
        assert_eq!(a.status, 200, "{path} from {}: open to anyone", other.there);
    }
    let a = from_there("GET", "/drain/status").await;
    assert!(
        a.body.contains("\"state\":\"serving\""),
        "no drain started: {}",
        a.body
    );
}
