//! A network namespace of the test's own, joined to this one by a veth pair with addresses that
//! are not loopback: a client on another host, as a pod's neighbour is, while the traffic stays
//! on this machine. Made with `ip` (as root); everything is removed by the guard's drop.

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
