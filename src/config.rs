//! Configuration layer: parses the JSON that Envoy hands over in `StringValue`s and validates it.
//! Pure Rust; must not touch FFI. Every error names the field it is about, because the message ends
//! up in Envoy's startup log and is all an operator has to fix the bootstrap.

use crate::admin::AdminAddress;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// A configuration problem, always tied to the field that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Which config object: `filter` or `bootstrap`.
    pub scope: &'static str,
    /// Field name as written in the JSON, or the Envoy field carrying the JSON (`filter_config`,
    /// `extension_config`) when the document as a whole is not a JSON object.
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid graceful_drain {} config: field `{}`: {}",
            self.scope, self.field, self.problem
        )
    }
}

impl std::error::Error for ConfigError {}

fn error(scope: &'static str, field: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        scope,
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// The Envoy config field that carries a scope's JSON: named when the JSON as a whole is wrong.
fn envelope(scope: &'static str) -> &'static str {
    match scope {
        "filter" => "filter_config",
        _ => "extension_config",
    }
}

/// Turn a serde_json error into a [`ConfigError`] that names the field at fault. Serde names
/// unknown and duplicate fields itself (in backticks); for a value of the wrong type, the
/// culprit is found by parsing each field alone. Only a document that is not a JSON object is
/// blamed on the Envoy field that carries it.
fn from_serde<T: DeserializeOwned>(
    scope: &'static str,
    raw: &[u8],
    e: serde_json::Error,
) -> ConfigError {
    let msg = e.to_string();
    if let Some(field) = named_by_serde(&msg) {
        return error(scope, field, msg.clone());
    }
    let Ok(Pairs(pairs)) = serde_json::from_slice::<Pairs>(raw) else {
        return error(
            scope,
            envelope(scope),
            format!(
                "must be a JSON object with the fields described in docs/configuration.md: {msg}"
            ),
        );
    };
    for (i, (key, value)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(k, _)| k == key) {
            return error(scope, key, format!("duplicate field `{key}`"));
        }
        let alone = serde_json::Value::Object([(key.clone(), value.clone())].into_iter().collect());
        if let Err(e) = serde_json::from_value::<T>(alone) {
            return error(scope, key, e.to_string());
        }
    }
    error(scope, envelope(scope), msg)
}

/// The field serde's message names: `` unknown field `NAME`, expected ... `` (or `, there are no
/// fields`), `` duplicate field `NAME` `` (serde_json adds ` at line L column C`). The name is
/// quoted as written, backticks and all, so it ends at the last separator, not the first
/// backtick: `` {"`quiet_period": 1} `` is about the field `` `quiet_period ``. The list after
/// `expected` is serde's own field names, which hold no such separator.
fn named_by_serde(msg: &str) -> Option<&str> {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let end = ["`, expected ", "`, there are no fields"]
            .iter()
            .filter_map(|sep| rest.rfind(sep))
            .max()?;
        return Some(&rest[..end]);
    }
    let rest = msg.strip_prefix("duplicate field `")?;
    Some(&rest[..rest.rfind('`')?])
}

/// A JSON object's members in document order, duplicates kept (a map would silently merge them).
struct Pairs(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Pairs, A::Error> {
                let mut v = Vec::new();
                while let Some(kv) = m.next_entry()? {
                    v.push(kv);
                }
                Ok(Pairs(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// Empty or blank config means "all defaults", so a bootstrap can say `value: ""`.
fn parse_json<T: DeserializeOwned + Default>(
    scope: &'static str,
    raw: &[u8],
) -> Result<T, ConfigError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(raw).map_err(|e| from_serde::<T>(scope, raw, e))
}

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

    fn from_text(field: &str, text: &str) -> Result<DrainToken, ConfigError> {
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

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilterConfig {
    pub role: Role,
    /// Control role only: `/drain` requires this bearer token.
    pub drain_token: Option<DrainToken>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFilterConfig {
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

/// The drain timing rules. Why the defaults are what they are:
/// docs/configuration.md#when-a-drain-completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSettings {
    /// Never complete a drain earlier than this after it started (endpoint removal must propagate).
    pub min_drain_duration: Duration,
    /// Complete only once nothing is in flight and no request started for this long.
    pub quiet_period: Duration,
    /// Complete anyway after this long, reporting what was still in flight.
    pub drain_timeout: Duration,
}

impl Default for DrainSettings {
    fn default() -> Self {
        DrainSettings {
            min_drain_duration: Duration::from_secs(5),
            quiet_period: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(25),
        }
    }
}

/// Longest accepted duration: a drain longer than an hour is a configuration mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// True for a field that is present, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// A field that takes one string or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBootstrapConfig {
    min_drain_duration: Option<String>,
    quiet_period: Option<String>,
    drain_timeout: Option<String>,
    admin_address: Option<OneOrMany>,
    /// Removed; kept to refuse it (whatever its value, `null` included) with a message that
    /// says what replaced it.
    #[serde(default, deserialize_with = "present")]
    admin_cluster: bool,
    ignored_stat_prefixes: Option<Vec<String>>,
    readiness_failure_delay: Option<String>,
    health_check_user_agents: Option<Vec<String>>,
    health_check_paths: Option<Vec<String>>,
    lifecycle_log_level: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapConfig {
    pub drain: DrainSettings,
    /// Envoy's admin, which a drain start calls to fail Envoy's health checks and start Envoy's
    /// drain, so listeners without the filter also close HTTP/1.1 connections and send HTTP/2
    /// GOAWAY with their next response. Several: where the admin may be (a kit for a platform
    /// whose releases put it in different places); the one the start-time check recognises is
    /// used. Empty: Envoy's health-check state is left alone.
    pub admin_address: Vec<AdminAddress>,
    /// HTTP connection manager stat prefixes whose requests do not hold the drain (Envoy's admin:
    /// metrics scrapes and our own calls). Control listeners need no entry: the module subtracts
    /// the requests it answers itself, whatever the listener is called.
    pub ignored_stat_prefixes: Vec<String>,
    pub requests: RequestPolicy,
    /// The level of the lines that say what the module does over a gateway's life (loaded, drain
    /// started, drain completed, exit released): `info`, or `warn` where Envoy runs at
    /// `--log-level warn` (Envoy Gateway's default) and would print none of them. Problems are
    /// logged at `warn` or `error` whatever this says.
    pub lifecycle_log_level: log::Level,
}

/// Which requests are not work: health checks are answered but neither hold a drain nor count as
/// traffic for the quiet period; readiness may keep answering "ready" for a while after the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPolicy {
    /// `User-Agent` prefixes of health checkers (built-in list plus the configured ones).
    pub health_check_user_agents: Vec<String>,
    /// Exact request paths (without query) that are health checks.
    pub health_check_paths: Vec<String>,
    /// Readiness keeps answering 200 this long after the drain starts (0 = fail at once).
    pub readiness_failure_delay: Duration,
}

/// Health checkers recognised by their `User-Agent`: Envoy's active health checks, kubelet
/// probes, AWS and Google Cloud load balancers.
pub const BUILTIN_HEALTH_CHECK_USER_AGENTS: [&str; 4] =
    ["Envoy/HC", "kube-probe/", "ELB-HealthChecker/", "GoogleHC/"];

impl Default for RequestPolicy {
    fn default() -> Self {
        RequestPolicy {
            health_check_user_agents: BUILTIN_HEALTH_CHECK_USER_AGENTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            health_check_paths: Vec::new(),
            readiness_failure_delay: Duration::ZERO,
        }
    }
}

impl RequestPolicy {
    /// Whether a request with these headers is a health check. Bytes from the network: compared
    /// as bytes, never assumed UTF-8.
    pub fn is_health_check(&self, user_agent: Option<&[u8]>, path: Option<&[u8]>) -> bool {
        if let Some(ua) = user_agent {
            // The first byte first: on ordinary traffic it settles every prefix without a
            // `memcmp` call (this runs on every request).
            if self.health_check_user_agents.iter().any(|p| {
                let p = p.as_bytes();
                ua.first() == p.first() && ua.starts_with(p)
            }) {
                return true;
            }
        }
        match path {
            Some(p) if !self.health_check_paths.is_empty() => {
                let bare = p.split(|&b| b == b'?').next().unwrap_or(p);
                self.health_check_paths.iter().any(|h| h.as_bytes() == bare)
            }
            _ => false,
        }
    }
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            drain: DrainSettings::default(),
            admin_address: Vec::new(),
            ignored_stat_prefixes: vec!["admin".to_string()],
            requests: RequestPolicy::default(),
            lifecycle_log_level: log::Level::Info,
        }
    }
}

impl BootstrapConfig {
    pub fn parse(raw: &[u8]) -> Result<Self, ConfigError> {
        const S: &str = "bootstrap";
        let r: RawBootstrapConfig = parse_json(S, raw)?;
        if r.admin_cluster {
            return Err(error(
                S,
                "admin_cluster",
                "admin_cluster was removed: the drain engine now calls Envoy's admin itself; set \
                 admin_address to the address of the bootstrap's `admin:` section (e.g. \
                 \"127.0.0.1:9901\" or \"/tmp/envoy.admin\"), and delete the graceful_drain_admin \
                 cluster and its admin_guard filter",
            ));
        }
        let texts = match r.admin_address {
            None => Vec::new(),
            Some(OneOrMany::One(t)) if t.is_empty() => Vec::new(),
            Some(OneOrMany::One(t)) => vec![t],
            Some(OneOrMany::Many(list)) if list.is_empty() => {
                return Err(error(
                    S,
                    "admin_address",
                    "an empty list: give one address, several, or \"\" for none",
                ))
            }
            Some(OneOrMany::Many(list)) => list,
        };
        let mut admin_address = Vec::new();
        for text in &texts {
            let a = AdminAddress::parse(text).map_err(|why| error(S, "admin_address", why))?;
            if admin_address.contains(&a) {
                return Err(error(S, "admin_address", format!("{text} is listed twice")));
            }
            admin_address.push(a);
        }
        let d = DrainSettings::default();
        let field = |name: &str, v: Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(text) => parse_duration(&text).map_err(|p| error(S, name, p)),
        };
        let drain = DrainSettings {
            min_drain_duration: field(
                "min_drain_duration",
                r.min_drain_duration,
                d.min_drain_duration,
            )?,
            quiet_period: field("quiet_period", r.quiet_period, d.quiet_period)?,
            drain_timeout: field("drain_timeout", r.drain_timeout, d.drain_timeout)?,
        };
        if drain.drain_timeout.is_zero() {
            return Err(error(S, "drain_timeout", "must be greater than 0"));
        }
        if drain.drain_timeout < drain.min_drain_duration {
            return Err(error(
                S,
                "drain_timeout",
                format!(
                    "{} is below min_drain_duration {}: the drain could never complete normally",
                    format_duration(drain.drain_timeout),
                    format_duration(drain.min_drain_duration)
                ),
            ));
        }
        if drain.drain_timeout < drain.quiet_period {
            return Err(error(
                S,
                "drain_timeout",
                format!(
                    "{} is below quiet_period {}: the drain could never complete normally",
                    format_duration(drain.drain_timeout),
                    format_duration(drain.quiet_period)
                ),
            ));
        }
        let d = BootstrapConfig::default();
        let ignored = r.ignored_stat_prefixes.unwrap_or(d.ignored_stat_prefixes);
        if let Some(bad) = ignored.iter().find(|p| p.is_empty() || p.contains('.')) {
            return Err(error(
                S,
                "ignored_stat_prefixes",
                format!(
                    "{bad:?} is not an HTTP connection manager stat_prefix (non-empty, no dots)"
                ),
            ));
        }
        let readiness_failure_delay = field(
            "readiness_failure_delay",
            r.readiness_failure_delay,
            Duration::ZERO,
        )?;
        if !readiness_failure_delay.is_zero() && readiness_failure_delay >= drain.min_drain_duration
        {
            return Err(error(
                S,
                "readiness_failure_delay",
                format!(
                    "{} is not below min_drain_duration {}: readiness would still say ready when \
                     the drain may complete (keep it below the minimum, e.g. half of it)",
                    format_duration(readiness_failure_delay),
                    format_duration(drain.min_drain_duration)
                ),
            ));
        }
        let mut requests = RequestPolicy {
            readiness_failure_delay,
            ..RequestPolicy::default()
        };
        for ua in r.health_check_user_agents.unwrap_or_default() {
            if ua.is_empty() || !ua.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                return Err(error(
                    S,
                    "health_check_user_agents",
                    format!("{ua:?} is not a non-empty printable User-Agent prefix"),
                ));
            }
            requests.health_check_user_agents.push(ua);
        }
        for p in r.health_check_paths.unwrap_or_default() {
            if !p.starts_with('/') || p.contains('?') {
                return Err(error(
                    S,
                    "health_check_paths",
                    format!("{p:?} is not a request path (starts with /, no query)"),
                ));
            }
            requests.health_check_paths.push(p);
        }
        let lifecycle_log_level = match r.lifecycle_log_level.as_deref() {
            None | Some("info") => log::Level::Info,
            Some("warn") => log::Level::Warn,
            Some(other) => {
                return Err(error(
                    S,
                    "lifecycle_log_level",
                    format!(
                        "{other:?} is not \"info\" or \"warn\" (use \"warn\" where Envoy runs at \
                         --log-level warn, as Envoy Gateway does)"
                    ),
                ))
            }
        };
        Ok(BootstrapConfig {
            drain,
            admin_address,
            ignored_stat_prefixes: ignored,
            requests,
            lifecycle_log_level,
        })
    }
}

/// The network filter's config (JSON in a StringValue; empty means the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkFilterConfig {
    /// Time an idle HTTP/2 client gets between the GOAWAY and the close.
    pub idle_close_grace: Duration,
    /// No request in flight for this long makes a connection idle.
    pub idle_after: Duration,
    /// Follow every request on the connection from its bytes (`crate::tracking`): connection
    /// mode's exact in-flight count and idle detection, without an HTTP filter. Default `false`
    /// (beside the HTTP filter: filter mode); the shipped example sets `true` (docs/modes.md).
    pub track_requests: bool,
}

impl NetworkFilterConfig {
    pub fn parse(raw: &[u8]) -> Result<Self, ConfigError> {
        #[derive(Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            idle_close_grace: Option<String>,
            idle_after: Option<String>,
            track_requests: Option<bool>,
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
        Ok(NetworkFilterConfig {
            idle_close_grace: field(
                "idle_close_grace",
                c.idle_close_grace,
                crate::connections::DEFAULT_IDLE_CLOSE_GRACE,
            )?,
            idle_after: field(
                "idle_after",
                c.idle_after,
                crate::connections::DEFAULT_IDLE_AFTER,
            )?,
            track_requests: c.track_requests.unwrap_or(false),
        })
    }
}

/// Parse a duration in Envoy's JSON style: `"5s"`, `"1.5s"`, `"0.250s"`, plus `"250ms"`.
/// Non-negative, at most nanosecond precision, at most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| {
        format!("invalid duration {text:?}: {why} (expected e.g. \"5s\", \"1.5s\" or \"250ms\")")
    };
    let (number, scale_nanos): (&str, u128) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        return Err(bad("missing unit `s` or `ms`"));
    };
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() || !int_part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("not a non-negative decimal number"));
    }
    if number.contains('.')
        && (frac_part.is_empty() || !frac_part.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad("not a non-negative decimal number"));
    }
    if frac_part.len() > 9 {
        return Err(bad("more than 9 fractional digits"));
    }
    if int_part.len() > 12 {
        return Err(bad("too large"));
    }
    let int: u128 = int_part.parse().map_err(|_| bad("not a number"))?;
    let mut frac_nanos: u128 = 0;
    if !frac_part.is_empty() {
        let digits: u128 = frac_part.parse().map_err(|_| bad("not a number"))?;
        frac_nanos = digits * 10u128.pow(9 - frac_part.len() as u32);
    }
    // frac_nanos is in units of 1e-9 of the unit; scale to nanoseconds.
    let total = int * scale_nanos + frac_nanos * scale_nanos / 1_000_000_000;
    if total > MAX_DURATION.as_nanos() {
        return Err(bad("longer than the 3600s maximum"));
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Render a duration the way the config accepts it (`"5s"`, `"1.5s"`, `"0.25s"`).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        return format!("{}s", d.as_secs());
    }
    let frac = format!("{nanos:09}");
    format!("{}.{}s", d.as_secs(), frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_envoy_style_parse() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.250s"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0.5ms"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse_duration("3600s"), Ok(MAX_DURATION));
    }

    #[test]
    fn bad_durations_are_refused_with_a_reason() {
        for bad in [
            "",
            "5",
            "s",
            "-1s",
            "1.s",
            ".5s",
            "1e3s",
            "5m",
            "1h",
            " 5s",
            "5s ",
            "1.0000000001s",
            "3601s",
            "99999999999999999999s",
            "five s",
            "1,5s",
            "+1s",
            "5 s",
            "ms",
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains("invalid duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_round_trip_through_format() {
        for ms in [0u64, 1, 250, 1000, 1500, 25_000, 3_600_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{ms}ms");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn empty_bootstrap_config_means_defaults() {
        let c = BootstrapConfig::parse(b"").unwrap();
        assert_eq!(c.drain, DrainSettings::default());
        assert_eq!(BootstrapConfig::parse(b"  {} ").unwrap(), c);
        assert_eq!(c.drain.min_drain_duration, Duration::from_secs(5));
        assert_eq!(c.drain.quiet_period, Duration::from_secs(1));
        assert_eq!(c.drain.drain_timeout, Duration::from_secs(25));
        assert_eq!(c.lifecycle_log_level, log::Level::Info);
        let warn = BootstrapConfig::parse(br#"{"lifecycle_log_level":"warn"}"#).unwrap();
        assert_eq!(warn.lifecycle_log_level, log::Level::Warn);
    }

    #[test]
    fn bootstrap_only_fields() {
        let d = BootstrapConfig::parse(b"").unwrap();
        assert_eq!(d.admin_address, []);
        assert_eq!(d.ignored_stat_prefixes, ["admin"]);
        assert_eq!(d.requests, RequestPolicy::default());
        let c = BootstrapConfig::parse(
            br#"{"admin_address":"","ignored_stat_prefixes":["admin","ops"]}"#,
        )
        .unwrap();
        assert_eq!(c.admin_address, []);
        assert_eq!(c.ignored_stat_prefixes, ["admin", "ops"]);
        let a = |t: &str| AdminAddress::parse(t).unwrap();
        let c = BootstrapConfig::parse(br#"{"admin_address":"127.0.0.1:9901"}"#).unwrap();
        assert_eq!(c.admin_address, [a("127.0.0.1:9901")]);
        let c = BootstrapConfig::parse(br#"{"admin_address":"/tmp/envoy.admin"}"#).unwrap();
        assert_eq!(c.admin_address, [a("/tmp/envoy.admin")]);
        // Several places the admin may be (a platform's releases differ): tried in order.
        let c =
            BootstrapConfig::parse(br#"{"admin_address":["127.0.0.1:9901","/tmp/envoy.admin"]}"#)
                .unwrap();
        assert_eq!(
            c.admin_address,
            [a("127.0.0.1:9901"), a("/tmp/envoy.admin")]
        );
        let e = BootstrapConfig::parse(br#"{"admin_address":"localhost:9901"}"#).unwrap_err();
        assert_eq!(e.field, "admin_address");
        assert!(e.problem.contains("\"localhost:9901\""), "{e}");
        for bad in [
            &br#"{"admin_address":[]}"#[..],
            br#"{"admin_address":["127.0.0.1:9901","127.0.0.1:9901"]}"#,
            br#"{"admin_address":["127.0.0.1:9901","localhost:1"]}"#,
            br#"{"admin_address":9901}"#,
        ] {
            let e = BootstrapConfig::parse(bad).unwrap_err();
            assert_eq!(e.field, "admin_address", "{e}");
        }
        // Configs written for the releases that called the admin through a cluster are refused
        // with what to do instead, whatever the value.
        for old in [
            &br#"{"admin_cluster":"graceful_drain_admin"}"#[..],
            br#"{"admin_cluster":""}"#,
            br#"{"admin_cluster":null}"#,
        ] {
            let e = BootstrapConfig::parse(old).unwrap_err();
            assert_eq!(e.field, "admin_cluster");
            assert!(e.problem.contains("admin_address"), "{e}");
        }
        let e = BootstrapConfig::parse(br#"{"ignored_stat_prefixes":["http.admin"]}"#).unwrap_err();
        assert_eq!(e.field, "ignored_stat_prefixes");
    }

    #[test]
    fn bootstrap_config_fields_parse() {
        let c = BootstrapConfig::parse(
            br#"{"min_drain_duration":"300ms","quiet_period":"0.2s","drain_timeout":"10s"}"#,
        )
        .unwrap();
        assert_eq!(c.drain.min_drain_duration, Duration::from_millis(300));
        assert_eq!(c.drain.quiet_period, Duration::from_millis(200));
        assert_eq!(c.drain.drain_timeout, Duration::from_secs(10));
    }

    #[test]
    fn bootstrap_errors_name_the_field() {
        let cases: &[(&[u8], &str)] = &[
            (br#"{"min_drain_duration":"5x"}"#, "min_drain_duration"),
            (br#"{"quiet_period":"-1s"}"#, "quiet_period"),
            (br#"{"drain_timeout":"0s"}"#, "drain_timeout"),
            (br#"{"drain_timeout":"3s"}"#, "drain_timeout"), // below default min 5s
            (
                br#"{"min_drain_duration":"1s","quiet_period":"30s"}"#,
                "drain_timeout",
            ),
            (br#"{"drain_timout":"3s"}"#, "drain_timout"),
            (br#"{"drain_timeout":5}"#, "drain_timeout"),
            (
                br#"{"quiet_period":"1s","min_drain_duration":["5s"]}"#,
                "min_drain_duration",
            ),
            (
                br#"{"quiet_period":"1s","quiet_period":"2s"}"#,
                "quiet_period",
            ),
            (
                br#"{"ignored_stat_prefixes":"admin"}"#,
                "ignored_stat_prefixes",
            ),
            (br#"{"lifecycle_log_level":"debug"}"#, "lifecycle_log_level"),
            (br#"{"lifecycle_log_level":"WARN"}"#, "lifecycle_log_level"),
            (b"{not json", "extension_config"),
            (b"[1, 2]", "extension_config"),
        ];
        for (raw, field) in cases {
            let e = BootstrapConfig::parse(raw).expect_err(std::str::from_utf8(raw).unwrap());
            assert_eq!(e.field, *field, "{e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    #[test]
    fn timeout_below_minimum_says_why() {
        let e = BootstrapConfig::parse(br#"{"min_drain_duration":"10s","drain_timeout":"3s"}"#)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid graceful_drain bootstrap config: field `drain_timeout`: 3s is below \
             min_drain_duration 10s: the drain could never complete normally"
        );
    }

    #[test]
    fn drain_token_from_file_or_env() {
        let env = |v: &str| (v == "TOKEN").then(|| "s3cret\n".to_string());
        let read = |p: &str| {
            if p == "/t" {
                Ok("from-file\n".to_string())
            } else {
                Err(std::io::Error::from(std::io::ErrorKind::NotFound))
            }
        };
        let c = FilterConfig::parse_with(
            br#"{"role":"control","drain_token_env":"TOKEN"}"#,
            env,
            read,
        )
        .unwrap();
        let t = c.drain_token.unwrap();
        assert!(t.accepts(b"Bearer s3cret"));
        assert!(!t.accepts(b"Bearer s3cre"));
        assert!(!t.accepts(b"Bearer s3cretX"));
        assert!(
            t.accepts(b"bearer s3cret"),
            "the scheme is case-insensitive (RFC 7235)"
        );
        assert!(!t.accepts(b"Bearers3cret"));
        assert!(!t.accepts(b"Bearer S3CRET"), "the token is not");
        assert!(!t.accepts(b"s3cret"));
        assert!(!t.accepts(b""));
        assert_eq!(format!("{t:?}"), "DrainToken(<redacted>)");
        let c =
            FilterConfig::parse_with(br#"{"role":"control","drain_token_file":"/t"}"#, env, read)
                .unwrap();
        assert!(c.drain_token.unwrap().accepts(b"Bearer from-file"));

        let cases: &[(&[u8], &str, &str)] = &[
            (
                br#"{"role":"control","drain_token_file":"/missing"}"#,
                "drain_token_file",
                "cannot read",
            ),
            (
                br#"{"role":"control","drain_token_env":"NOPE"}"#,
                "drain_token_env",
                "not set",
            ),
            (
                br#"{"role":"control","drain_token_env":"TOKEN","drain_token_file":"/t"}"#,
                "drain_token_env",
                "not both",
            ),
            (
                br#"{"role":"data","drain_token_env":"TOKEN"}"#,
                "role",
                "only applies",
            ),
        ];
        for (raw, field, problem) in cases {
            let e = FilterConfig::parse_with(raw, env, read).unwrap_err();
            assert_eq!(e.field, *field, "{e}");
            assert!(e.problem.contains(problem), "{e}");
            assert!(!e.to_string().contains("s3cret"), "token leaked into {e}");
        }
        let bad = |v: &str| Some(v.to_string());
        for (value, problem) in [("", "empty"), ("two words", "printable"), ("\n", "empty")] {
            let env = |_: &str| bad(value);
            let e =
                FilterConfig::parse_with(br#"{"role":"control","drain_token_env":"X"}"#, env, read)
                    .unwrap_err();
            assert!(e.problem.contains(problem), "{value:?}: {e}");
        }
    }

    #[test]
    fn filter_config_roles() {
        assert_eq!(FilterConfig::parse(b"").unwrap().role, Role::Data);
        assert_eq!(FilterConfig::parse(b"{}").unwrap().role, Role::Data);
        assert_eq!(
            FilterConfig::parse(br#"{"role":"data"}"#).unwrap().role,
            Role::Data
        );
        assert_eq!(
            FilterConfig::parse(br#"{"role":"control"}"#).unwrap().role,
            Role::Control
        );
        let e = FilterConfig::parse(br#"{"role":"admin"}"#).unwrap_err();
        assert_eq!(e.field, "role");
        assert!(e.problem.contains("\"admin\""), "{e}");
        let e = FilterConfig::parse(br#"{"role":"admin_guard"}"#).unwrap_err();
        assert_eq!(e.field, "role");
        assert!(e.problem.contains("admin_address"), "{e}");
        let e = FilterConfig::parse(br#"{"rol":"data"}"#).unwrap_err();
        assert_eq!(e.field, "rol");
        let e = FilterConfig::parse(&[0xff, 0xfe]).unwrap_err();
        assert_eq!(e.field, "filter_config");
        let e = FilterConfig::parse(br#"{"role":"data","role":"data"}"#).unwrap_err();
        assert_eq!(e.field, "role");
        let e = FilterConfig::parse(br#"{"role":7}"#).unwrap_err();
        assert_eq!(e.field, "role");
    }

    /// Serde quotes the name of an unknown field in backticks; a name that holds backticks
    /// itself is still named as written (it was named `` (empty) when the name was read up to
    /// the first backtick).
    #[test]
    fn an_unknown_field_with_backticks_is_named_as_written() {
        for key in [
            "`quiet_period",
            "quiet`period",
            "a`, expected `b`",
            "``",
            "x`",
        ] {
            let raw = serde_json::json!({ key: 1 }).to_string();
            let e = BootstrapConfig::parse(raw.as_bytes()).unwrap_err();
            assert_eq!(e.field, key, "{e}");
            assert!(e.problem.starts_with("unknown field `"), "{e}");
            let e = FilterConfig::parse(raw.as_bytes()).unwrap_err();
            assert_eq!(e.field, key, "{e}");
        }
        assert_eq!(
            named_by_serde("unknown field `a`b`, there are no fields at line 1 column 9"),
            Some("a`b")
        );
        assert_eq!(
            named_by_serde("duplicate field `role` at line 1 column 20"),
            Some("role")
        );
        assert_eq!(named_by_serde("invalid type: integer `1`"), None);
    }

    #[test]
    fn health_checks_are_recognised_by_user_agent_and_path() {
        let c = BootstrapConfig::parse(
            br#"{"health_check_user_agents":["Pingdom"],"health_check_paths":["/healthz"]}"#,
        )
        .unwrap();
        let p = &c.requests;
        for ua in [
            "Envoy/HC",
            "kube-probe/1.31",
            "ELB-HealthChecker/2.0",
            "GoogleHC/1.0",
            "Pingdom.com_bot_version_1.4",
        ] {
            assert!(p.is_health_check(Some(ua.as_bytes()), Some(b"/")), "{ua}");
        }
        assert!(!p.is_health_check(Some(b"curl/8.0"), Some(b"/")));
        assert!(
            !p.is_health_check(Some(b"my kube-probe/1"), None),
            "prefix, not substring"
        );
        assert!(p.is_health_check(None, Some(b"/healthz")));
        assert!(p.is_health_check(None, Some(b"/healthz?full=1")));
        assert!(!p.is_health_check(None, Some(b"/healthz/deep")));
        assert!(!RequestPolicy::default().is_health_check(None, Some(b"/healthz")));
    }

    #[test]
    fn readiness_failure_delay_must_stay_below_the_minimum() {
        let ok = BootstrapConfig::parse(br#"{"readiness_failure_delay":"2s"}"#).unwrap();
        assert_eq!(ok.requests.readiness_failure_delay, Duration::from_secs(2));
        for bad in [
            &br#"{"readiness_failure_delay":"5s"}"#[..],
            br#"{"readiness_failure_delay":"3s","min_drain_duration":"2s","drain_timeout":"9s"}"#,
            br#"{"readiness_failure_delay":"soon"}"#,
        ] {
            let e = BootstrapConfig::parse(bad).unwrap_err();
            assert_eq!(e.field, "readiness_failure_delay", "{e}");
        }
        for (bad, field) in [
            (
                &br#"{"health_check_paths":["healthz"]}"#[..],
                "health_check_paths",
            ),
            (
                br#"{"health_check_user_agents":[""]}"#,
                "health_check_user_agents",
            ),
        ] {
            assert_eq!(BootstrapConfig::parse(bad).unwrap_err().field, field);
        }
    }

    #[test]
    fn network_filter_config_defaults_and_errors_name_the_field() {
        let parse = |raw: &[u8]| {
            NetworkFilterConfig::parse(raw).map(|c| (c.idle_close_grace, c.idle_after))
        };
        let defaults = (Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(parse(b"").unwrap(), defaults);
        assert_eq!(parse(b"{}").unwrap(), defaults);
        assert_eq!(
            parse(br#"{"idle_close_grace": "500ms", "idle_after": "0s"}"#).unwrap(),
            (Duration::from_millis(500), Duration::ZERO)
        );
        for (raw, field) in [
            (&br#"{"idle_after": "1"}"#[..], "idle_after"),
            (br#"{"idle_close_grace": "soon"}"#, "idle_close_grace"),
            (br#"{"grace": "1s"}"#, "grace"),
        ] {
            let e = NetworkFilterConfig::parse(raw).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
            assert!(
                e.starts_with("invalid graceful_drain network filter config"),
                "{e}"
            );
        }
    }
}
