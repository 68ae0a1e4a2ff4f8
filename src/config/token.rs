//! What the HTTP filter is on its listener (data or control), and the bearer token `/drain`
//! requires. Uses only `config`'s error helpers.

use super::*;

/// What the HTTP filter does on the listener it is configured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Data listener: count every request as in flight and send connections away during a drain.
    #[default]
    Data,
    /// Control listener: answer `/ready`, `/drain/status` and `/drain`; nothing is counted.
    Control,
}

/// Byte comparison whose time does not depend on where the inputs differ (secrets).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u32;
    for i in 0..a.len().max(b.len()) {
        diff |= u32::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    std::hint::black_box(diff) == 0
}

/// A shared secret that `/drain` requires as `Authorization: Bearer <token>`. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct DrainToken(Vec<u8>);

impl fmt::Debug for DrainToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DrainToken(<redacted>)")
    }
}

impl DrainToken {
    /// Check an `Authorization` header value in time independent of where it differs.
    /// The scheme is case-insensitive and may be followed by several spaces (RFC 7235).
    pub fn accepts(&self, authorization: &[u8]) -> bool {
        let Some(sp) = authorization.iter().position(|&b| b == b' ') else {
            return false;
        };
        if !authorization[..sp].eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        let given = &authorization[sp..];
        let given = &given[given.iter().take_while(|&&b| b == b' ').count()..];
        constant_time_eq(given, &self.0)
    }

    #[cfg(test)]
    pub(crate) fn for_tests(token: &str) -> DrainToken {
        DrainToken(token.as_bytes().to_vec())
    }

    pub(super) fn from_text(field: &str, text: &str) -> Result<DrainToken, ConfigError> {
        let t = text.trim_end_matches(['\n', '\r']);
        if t.is_empty() {
            return Err(error("filter", field, "the token is empty"));
        }
        if t.len() > 4096 {
            return Err(error(
                "filter",
                field,
                "the token is longer than 4096 bytes",
            ));
        }
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(error(
                "filter",
                field,
                "the token must be printable ASCII without spaces (it travels in a header)",
            ));
        }
        Ok(DrainToken(t.as_bytes().to_vec()))
    }
}
