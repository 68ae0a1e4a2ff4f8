//! The HTTP filter's config (its role) and the network filter's (idle grace, idle threshold,
//! request tracking), with the defaults the connections layer uses. Uses `config`'s helpers.

use super::*;

/// How long an idle HTTP/2 client gets between the GOAWAY and the close, unless configured.
pub const DEFAULT_IDLE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How long a connection must have had no request in flight to count as idle, unless
/// configured. A keep-alive client sending back to back is "idle" for microseconds between its
/// requests; closing it then would race its next request (measured: the hardening race test lost
/// requests with no threshold). Such a connection is busy: its next response carries
/// `connection: close` instead.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilterConfig {
    pub role: Role,
    /// Control role only: `/drain` requires this bearer token.
    pub drain_token: Option<DrainToken>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFilterConfig {
    role: Option<String>,
    drain_token_file: Option<String>,
    drain_token_env: Option<String>,
}

impl FilterConfig {
    /// Parse, reading a token file or variable if the config names one.
    pub fn parse(raw: &[u8]) -> Result<Self, ConfigError> {
        Self::parse_with(
            raw,
            |var| std::env::var(var).ok(),
            |path| std::fs::read_to_string(path),
        )
    }

    /// [`FilterConfig::parse`] with the environment and file system passed in (for tests).
    pub fn parse_with(
        raw: &[u8],
        env: impl Fn(&str) -> Option<String>,
        read: impl Fn(&str) -> std::io::Result<String>,
    ) -> Result<Self, ConfigError> {
        #[cfg(feature = "panic-test")]
        if raw == b"panic-test" {
            panic!("test panic requested in filter config");
        }
        let r: RawFilterConfig = parse_json("filter", raw)?;
        let role =
            match r.role.as_deref() {
                None | Some("data") => Role::Data,
                Some("control") => Role::Control,
                Some("admin_guard") => return Err(error(
                    "filter",
                    "role",
                    "role \"admin_guard\" was removed: the drain engine now calls Envoy's admin \
                     itself (bootstrap field admin_address); delete the graceful_drain_admin \
                     cluster and this filter",
                )),
                Some(other) => {
                    return Err(error(
                        "filter",
                        "role",
                        format!("unknown role {other:?}: expected \"data\" or \"control\""),
                    ))
                }
            };
        let token = match (r.drain_token_file, r.drain_token_env) {
            (Some(_), Some(_)) => {
                return Err(error(
                    "filter",
                    "drain_token_env",
                    "set drain_token_file or drain_token_env, not both",
                ))
            }
            (Some(path), None) => {
                let text = read(&path).map_err(|e| {
                    error(
                        "filter",
                        "drain_token_file",
                        format!("cannot read {path:?}: {e}"),
                    )
                })?;
                Some(DrainToken::from_text("drain_token_file", &text)?)
            }
            (None, Some(var)) => {
                let text = env(&var).ok_or_else(|| {
                    error(
                        "filter",
                        "drain_token_env",
                        format!("environment variable {var:?} is not set"),
                    )
                })?;
                Some(DrainToken::from_text("drain_token_env", &text)?)
            }
            (None, None) => None,
        };
        if token.is_some() && role != Role::Control {
            return Err(error(
                "filter",
                "role",
                "a drain token only applies to the control role; the data role serves no \
                 control endpoint",
            ));
        }
        Ok(FilterConfig {
            role,
            drain_token: token,
        })
    }
}

/// The network filter's config (JSON in a StringValue; empty means the defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkFilterConfig {
    /// Time an idle HTTP/2 client gets between the GOAWAY and the close.
    pub idle_close_grace: Duration,
    /// No request in flight for this long makes a connection idle.
    pub idle_after: Duration,
    /// Follow every request on the connection from its bytes (the tracking layer): connection
    /// mode's exact in-flight count and idle detection, without an HTTP filter. Default `false`
    /// (beside the HTTP filter: filter mode); the shipped example sets `true` (docs/modes.md).
    pub track_requests: bool,
    /// What happens to long-lived streams (WebSocket) at a drain (connection mode).
    pub long_lived: LongLivedSettings,
    /// `grpc_resumable_prefixes`: `:path` prefixes of the gRPC methods whose HTTP/2 streams may
    /// be ended with `grpc-status: 14` at their move time (their clients resume them: watch and
    /// subscribe APIs). Empty (the default): no gRPC stream is moved.
    pub grpc_resumable_prefixes: Vec<String>,
}

/// How long-lived streams are moved to another pod at a drain (docs/contributing/long-lived-streams.md):
/// after `min_drain_duration`, each is given a time in `window`, then a WebSocket gets a
/// Close(1001) at a message end (at any frame end after `message_wait`), and its connection is
/// closed `close_timeout` after that if the close handshake did not end it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongLivedSettings {
    /// `move_long_lived_streams`: off, they are cut at `drain_timeout` as before.
    pub enabled: bool,
    /// `long_lived_window`: the moves are spread uniformly over this window.
    pub window: Duration,
    /// `close_timeout`: after the Close, how long the peers have to finish the handshake.
    pub close_timeout: Duration,
    /// `message_wait`: how long to wait for a message end before a frame end will do.
    pub message_wait: Duration,
    /// `move_http2_sse`: HTTP/2 SSE responses to a `GET` are moved too (with `enabled`). It
    /// costs decoding every HTTP/2 header block in both directions (1.5-2 % of Envoy's
    /// instructions per HTTP/2 request, docs/contributing/long-lived-streams.md), so it can be
    /// turned off alone: HTTP/1.1 moves cost nothing of the kind.
    pub http2_sse: bool,
}

/// Default `long_lived_window`: N reconnects arrive at N/10 per second at the remaining pods.
pub const DEFAULT_LONG_LIVED_WINDOW: Duration = Duration::from_secs(10);
/// Default `close_timeout`: a close handshake takes one round trip; 5 s covers a slow peer.
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `message_wait`: a server in the middle of a fragmented message gets this long.
pub const DEFAULT_MESSAGE_WAIT: Duration = Duration::from_secs(1);

impl Default for LongLivedSettings {
    fn default() -> Self {
        LongLivedSettings {
            enabled: true,
            window: DEFAULT_LONG_LIVED_WINDOW,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
            message_wait: DEFAULT_MESSAGE_WAIT,
            http2_sse: true,
        }
    }
}

impl LongLivedSettings {
    /// The window to use with these drain settings: shortened so that `min_drain_duration +
    /// window + close_timeout` fits `drain_timeout` (`None`: it fits as configured).
    pub fn window_within(&self, min_drain: Duration, drain_timeout: Duration) -> Option<Duration> {
        let room = drain_timeout
            .saturating_sub(min_drain)
            .saturating_sub(self.close_timeout);
        (self.window > room).then_some(room)
    }
}

impl NetworkFilterConfig {
    pub fn parse(raw: &[u8]) -> Result<Self, ConfigError> {
        #[derive(Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            idle_close_grace: Option<String>,
            idle_after: Option<String>,
            track_requests: Option<bool>,
            move_long_lived_streams: Option<serde_json::Value>,
            long_lived_window: Option<String>,
            close_timeout: Option<String>,
            message_wait: Option<String>,
            move_http2_sse: Option<serde_json::Value>,
            grpc_resumable_prefixes: Option<serde_json::Value>,
        }
        const SCOPE: &str = "network filter";
        let c: Raw = if raw.iter().all(u8::is_ascii_whitespace) {
            Raw::default()
        } else {
            serde_json::from_slice(raw).map_err(|e| error(SCOPE, "filter_config", e.to_string()))?
        };
        let field = |name: &str, v: Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(s) => parse_duration(&s).map_err(|e| error(SCOPE, name, e)),
        };
        let grpc_resumable_prefixes: Vec<String> = match c.grpc_resumable_prefixes {
            None => Vec::new(),
            Some(v) => serde_json::from_value(v).map_err(|e| {
                error(
                    SCOPE,
                    "grpc_resumable_prefixes",
                    format!("expected a list of strings ({e})"),
                )
            })?,
        };
        if let Some(bad) = grpc_resumable_prefixes.iter().find(|p| {
            !p.starts_with('/') || p.len() < 2 || p.bytes().any(|b| !b.is_ascii_graphic())
        }) {
            return Err(error(
                SCOPE,
                "grpc_resumable_prefixes",
                format!(
                    "{bad:?} is not a gRPC path prefix: each starts with \"/\" and names a \
                     package, service or method (\"/pkg.Watch/\"), printable ASCII, no space"
                ),
            ));
        }
        Ok(NetworkFilterConfig {
            grpc_resumable_prefixes,
            idle_close_grace: field(
                "idle_close_grace",
                c.idle_close_grace,
                DEFAULT_IDLE_CLOSE_GRACE,
            )?,
            idle_after: field("idle_after", c.idle_after, DEFAULT_IDLE_AFTER)?,
            track_requests: c.track_requests.unwrap_or(false),
            long_lived: LongLivedSettings {
                enabled: match c.move_long_lived_streams {
                    None => true,
                    Some(serde_json::Value::Bool(b)) => b,
                    Some(other) => {
                        return Err(error(
                            SCOPE,
                            "move_long_lived_streams",
                            format!("expected true or false, not {other}"),
                        ))
                    }
                },
                window: field(
                    "long_lived_window",
                    c.long_lived_window,
                    DEFAULT_LONG_LIVED_WINDOW,
                )?,
                close_timeout: match field("close_timeout", c.close_timeout, DEFAULT_CLOSE_TIMEOUT)?
                {
                    d if d.is_zero() => {
                        return Err(error(
                            SCOPE,
                            "close_timeout",
                            "must be more than 0s: the peers need time to answer the Close",
                        ))
                    }
                    d => d,
                },
                message_wait: field("message_wait", c.message_wait, DEFAULT_MESSAGE_WAIT)?,
                http2_sse: match c.move_http2_sse {
                    None => true,
                    Some(serde_json::Value::Bool(b)) => b,
                    Some(other) => {
                        return Err(error(
                            SCOPE,
                            "move_http2_sse",
                            format!("expected true or false, not {other}"),
                        ))
                    }
                },
            },
        })
    }
}
