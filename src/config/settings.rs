//! Every setting the three configs take, as the reference (docs/reference.md, written by
//! `make reference`) lists it. The parsers are the truth; this table is held to them field by
//! field by its tests below: the names are the ones serde accepts (its own list, read from the
//! message an unknown field gets), each default is what the parser gives when the field is left
//! out, and each refused example is refused naming the field. Pure data; uses `config` only.

/// Which config a setting belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The bootstrap extension's `extension_config`.
    Bootstrap,
    /// The HTTP filter's `filter_config`.
    HttpFilter,
    /// The network filter's `filter_config`.
    NetworkFilter,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Bootstrap, Scope::HttpFilter, Scope::NetworkFilter];

    /// How the reference names it: the object and the Envoy field carrying its JSON.
    pub fn title(self) -> &'static str {
        match self {
            Scope::Bootstrap => "bootstrap extension (`extension_config`)",
            Scope::HttpFilter => "HTTP filter (`filter_config`)",
            Scope::NetworkFilter => "network filter (`filter_config`)",
        }
    }
}

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub scope: Scope,
    pub name: &'static str,
    /// Its JSON type as an operator writes it.
    pub kind: &'static str,
    /// Its default, as JSON (`null`: unset). `None` for a removed field, refused whatever it says.
    pub default: Option<&'static str>,
    /// What it does, in at most 25 words.
    pub what: &'static str,
    /// Its bounds and what is refused, in words.
    pub bounds: &'static str,
    /// JSON values refused at start, naming the field (the tests try each).
    pub refused: &'static [&'static str],
}

const DURATION: &str = "duration string";
const DURATION_BOUNDS: &str = "0 to 3600s";

/// Every setting, in the order the reference lists them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        scope: Scope::Bootstrap,
        name: "min_drain_duration",
        kind: DURATION,
        default: Some("\"5s\""),
        what: "A drain never completes earlier: endpoint removal must reach load balancers first.",
        bounds: DURATION_BOUNDS,
        refused: &["\"5\"", "\"-1s\"", "\"3601s\""],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "quiet_period",
        kind: DURATION,
        default: Some("\"1s\""),
        what: "A drain completes only once nothing is in flight and no request started for this long.",
        bounds: DURATION_BOUNDS,
        refused: &["\"1\"", "\"1.5m\""],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "drain_timeout",
        kind: DURATION,
        default: Some("\"25s\""),
        what: "The drain completes anyway after this long; requests still in flight are cut and reported.",
        bounds: "above 0, at least `min_drain_duration` and `quiet_period`; at most 3600s",
        refused: &["\"0s\"", "\"4s\""],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "admin_address",
        kind: "string, or list of strings",
        default: Some("null"),
        what: "Envoy's admin address; a drain posts `/healthcheck/fail` and `/drain_listeners` there. Unset or `\"\"`: Envoy's health is left alone.",
        bounds: "`\"127.0.0.1:9901\"`, `\"[::1]:9901\"`, a unix socket path or `@name`; no port 0, no empty list, no duplicates",
        refused: &["[]", "\"localhost\"", "\"127.0.0.1:0\"", "[\"127.0.0.1:9901\", \"127.0.0.1:9901\"]"],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "admin_cluster",
        kind: "removed",
        default: None,
        what: "Removed: refused with what to write instead (`admin_address`).",
        bounds: "refused whatever its value",
        refused: &["null", "\"graceful_drain_admin\""],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "ignored_stat_prefixes",
        kind: "list of strings",
        default: Some("[\"admin\"]"),
        what: "HTTP connection manager `stat_prefix`es whose requests never hold a drain. Keep `\"admin\"` (metrics scrapes).",
        bounds: "each non-empty, without dots",
        refused: &["[\"\"]", "[\"http.admin\"]"],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "readiness_failure_delay",
        kind: DURATION,
        default: Some("\"0s\""),
        what: "Readiness keeps answering 200 this long after the drain starts, while connections are already sent away.",
        bounds: "0, or below `min_drain_duration`",
        refused: &["\"5s\"", "\"1\""],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "health_check_paths",
        kind: "list of strings",
        default: Some("[]"),
        what: "Exact request paths (query ignored) that are health checks: answered during a drain, never counted as work.",
        bounds: "each starts with `/`, no query",
        refused: &["[\"healthz\"]", "[\"/healthz?full\"]"],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "health_check_user_agents",
        kind: "list of strings",
        default: Some("[]"),
        what: "Narrows `health_check_paths`: a health check's `User-Agent` must start with one of these.",
        bounds: "printable, non-empty; refused without `health_check_paths`",
        refused: &["[\"kube-probe/\"]"],
    },
    Setting {
        scope: Scope::Bootstrap,
        name: "lifecycle_log_level",
        kind: "string",
        default: Some("\"info\""),
        what: "Level of the lifecycle log lines (loaded, drain started, completed, exit released). `\"warn\"` where Envoy logs at warn.",
        bounds: "`\"info\"` or `\"warn\"`",
        refused: &["\"debug\""],
    },
    Setting {
        scope: Scope::HttpFilter,
        name: "role",
        kind: "string",
        default: Some("\"data\""),
        what: "`\"data\"`: count requests, send connections away while draining. `\"control\"`: serve `/ready`, `/drain/status`, `/drain`.",
        bounds: "`\"data\"` or `\"control\"`; `\"admin_guard\"` (removed) is refused",
        refused: &["\"admin_guard\"", "\"admin\""],
    },
    Setting {
        scope: Scope::HttpFilter,
        name: "drain_token_file",
        kind: "string (path)",
        default: Some("null"),
        what: "Control role: a file holding a token; `/drain` then requires `Authorization: Bearer <token>`.",
        bounds: "readable; token printable ASCII, 1 to 4096 bytes; not with `drain_token_env`",
        refused: &["\"/nonexistent/graceful-drain-token\""],
    },
    Setting {
        scope: Scope::HttpFilter,
        name: "drain_token_env",
        kind: "string (variable name)",
        default: Some("null"),
        what: "Control role: the same token, from this environment variable.",
        bounds: "the variable set; token as above; not with `drain_token_file`",
        refused: &["\"GRACEFUL_DRAIN_NO_SUCH_VARIABLE\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "idle_close_grace",
        kind: DURATION,
        default: Some("\"2s\""),
        what: "Time between the GOAWAY to an idle HTTP/2 connection and its close.",
        bounds: DURATION_BOUNDS,
        refused: &["\"2\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "idle_after",
        kind: DURATION,
        default: Some("\"1s\""),
        what: "A connection with no request in flight for this long counts as idle, and is told at the drain start.",
        bounds: DURATION_BOUNDS,
        refused: &["\"1\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "track_requests",
        kind: "boolean",
        default: Some("false"),
        what: "`true`: the tracker follows every request from the connection's bytes (connection mode). The shipped example sets `true`.",
        bounds: "`true` or `false`",
        refused: &[],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "move_long_lived_streams",
        kind: "boolean",
        default: Some("true"),
        what: "Connection mode: after `min_drain_duration`, end WebSockets (Close 1001), SSE responses and listed gRPC methods cleanly within `long_lived_window`, other gRPC streams near `drain_timeout`.",
        bounds: "`true` or `false`",
        refused: &["\"yes\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "long_lived_window",
        kind: DURATION,
        default: Some("\"10s\""),
        what: "The long-lived streams' moves are spread over this window; shortened (and logged) to fit `drain_timeout`.",
        bounds: DURATION_BOUNDS,
        refused: &["\"10\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "close_timeout",
        kind: DURATION,
        default: Some("\"5s\""),
        what: "After a WebSocket's Close, how long the peers have to end the connection before it is closed.",
        bounds: "above 0; at most 3600s",
        refused: &["\"0s\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "message_wait",
        kind: DURATION,
        default: Some("\"1s\""),
        what: "A WebSocket inside a fragmented message gets this long to end it; then the Close goes at a frame end.",
        bounds: DURATION_BOUNDS,
        refused: &["\"1\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "move_http2_sse",
        kind: "boolean",
        default: Some("true"),
        what: "HTTP/2 SSE responses to a `GET` are moved too.",
        bounds: "`true` or `false`",
        refused: &["\"yes\""],
    },
    Setting {
        scope: Scope::NetworkFilter,
        name: "grpc_resumable_prefixes",
        kind: "list of strings",
        default: Some("[]"),
        what: "`:path` prefixes of gRPC methods whose clients resume: their streams end with `grpc-status: 14` at their move time.",
        bounds: "each starts with `/`, printable ASCII, no space",
        refused: &["[\"pkg.Watch/\"]", "[\"/\"]", "\"/pkg.Watch/\""],
    },
];

#[cfg(test)]
mod tests;
