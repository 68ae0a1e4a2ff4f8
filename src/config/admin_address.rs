//! Where Envoy's admin listens, as the bootstrap config names it (parsed and checked at start;
//! the admin layer makes the calls), and what the start check found there (kept in the shared
//! state, below the admin layer). Pure; uses nothing outside `std`.

use std::fmt;
use std::net::SocketAddr;

pub use crate::host::admin::AdminAddress;

impl AdminAddress {
    /// `"127.0.0.1:9901"`, `"[::1]:9901"`, `"/tmp/envoy.admin"` or `"@envoy-admin"`. What a
    /// connect would refuse later is refused here, so a mistake stops Envoy at start rather than
    /// showing at the first drain.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.starts_with('/') || text.starts_with('@') {
            if text.len() < 2
                || text.len() > MAX_UNIX_PATH
                || text.contains('\0')
                || text.trim_end() != text
            {
                return Err(format!(
                    "{text:?} is not a unix socket path (2 to {MAX_UNIX_PATH} bytes, no NUL, \
                     no trailing space)"
                ));
            }
            return Ok(AdminAddress::Unix(text.to_string()));
        }
        match text.parse::<SocketAddr>() {
            Ok(a) if a.port() == 0 => Err(format!("{text:?} has port 0")),
            Ok(a) => Ok(AdminAddress::Tcp(a)),
            Err(_) => Err(format!(
                "{text:?} is neither an IP address with a port (\"127.0.0.1:9901\", \
                 \"[::1]:9901\") nor the path of Envoy's admin unix socket \
                 (\"/tmp/envoy.admin\", \"@envoy-admin\"); write the address of the \
                 bootstrap's `admin:` section"
            )),
        }
    }
}

/// Longest unix socket path a `sockaddr_un` holds (108 bytes with the final NUL).
pub(super) const MAX_UNIX_PATH: usize = 107;

impl fmt::Display for AdminAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminAddress::Tcp(a) => write!(f, "{a}"),
            AdminAddress::Unix(p) => write!(f, "{p}"),
        }
    }
}

/// Whether `admin_address` answered as Envoy's admin when the server was initialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AdminCheck {
    /// No `admin_address` configured (or no drain engine).
    Unset = 0,
    Checking = 1,
    Recognised = 2,
    /// No HTTP answer (nothing listens there, or no answer in time).
    NotAnswering = 3,
    /// An HTTP answer, not Envoy's admin's (a data or control listener, another server).
    NotAdmin = 4,
}

impl AdminCheck {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminCheck::Unset => "unset",
            AdminCheck::Checking => "checking",
            AdminCheck::Recognised => "recognised",
            AdminCheck::NotAnswering => "not_answering",
            AdminCheck::NotAdmin => "not_admin",
        }
    }
}
