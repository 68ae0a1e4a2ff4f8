//! Envoy's admin interface as the module calls it ([`AdminHost`]): one HTTP/1.1 request with an
//! empty body to the admin at an [`AdminAddress`], its status and the start of its body. Envoy's
//! ABI has no call for it (the module's own HTTP client does it: `envoy_stats::admin`'s
//! `HttpAdmin`, over TCP or the admin's unix socket, on a thread of the module's own); tests may
//! fake it. Plain types only (the address's parsing is `crate::config`'s).

use std::net::SocketAddr;
use std::time::Duration;

/// Where Envoy's admin listens: the `admin.address` of the bootstrap (parsed by
/// `crate::config::admin_address`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAddress {
    /// `socket_address`: an IP address and a port.
    Tcp(SocketAddr),
    /// `pipe.path`: a file system path, or an abstract socket name written `@name` (as Envoy
    /// writes it).
    Unix(String),
}

/// Envoy's admin, as a drain start and the start-time check call it (any module thread: a call
/// may wait up to its timeout).
pub trait AdminHost: Sync {
    /// `method path` with an empty body to the admin at `addr`, within `timeout` (connect,
    /// write, and every read up to the status line); the status code, and with `body` the start
    /// of the body. `Err`: no answer, said in words naming the address.
    fn call(
        &self,
        addr: &AdminAddress,
        method: &str,
        path: &str,
        timeout: Duration,
        body: bool,
    ) -> Result<(u16, Vec<u8>), String>;
}
