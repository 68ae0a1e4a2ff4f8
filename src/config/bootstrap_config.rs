//! The bootstrap extension's config: the drain timing rules, which requests are not work,
//! where the admin is, the drain token and the lifecycle log level. Uses `config`'s helpers.

use super::*;

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

/// True for a field that is present, whatever its value (`null` included).
pub(super) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// A field that takes one string or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBootstrapConfig {
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
///
/// What a health check is, is the operator's to say, never the client's: a request is one only
/// when its path is one of [`RequestPolicy::health_check_paths`], and, if
/// [`RequestPolicy::health_check_user_agents`] is set, its `User-Agent` also starts with one of
/// them. A `User-Agent` alone never makes one (any client can send `kube-probe/1.31` on a
/// request that takes minutes; it was then cut at the drain's completion). The HTTP filter and
/// connection mode's tracker ask this one predicate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestPolicy {
    /// `User-Agent` prefixes that narrow [`RequestPolicy::health_check_paths`] (empty: any).
    pub health_check_user_agents: Vec<String>,
    /// Exact request paths (without query) that are health checks, e.g. `/healthz`,
    /// `/grpc.health.v1.Health/Check`.
    pub health_check_paths: Vec<String>,
    /// Readiness keeps answering 200 this long after the drain starts (0 = fail at once).
    pub readiness_failure_delay: Duration,
}

impl RequestPolicy {
    /// Whether any request can be a health check (some path configured): else nothing of the
    /// request need be read.
    pub fn has_health_checks(&self) -> bool {
        !self.health_check_paths.is_empty()
    }

    /// Whether the configured health checks are narrowed by `User-Agent`.
    pub fn checks_user_agent(&self) -> bool {
        !self.health_check_user_agents.is_empty()
    }

    /// Whether a request with this path is a health check by its path (query ignored). Bytes
    /// from the network: compared as bytes, never assumed UTF-8.
    pub fn is_health_check_path(&self, path: Option<&[u8]>) -> bool {
        let Some(p) = path else {
            return false;
        };
        let bare = p.split(|&b| b == b'?').next().unwrap_or(p);
        self.health_check_paths.iter().any(|h| h.as_bytes() == bare)
    }

    /// Whether a `User-Agent` passes the configured narrowing (any, when none is configured).
    pub fn is_health_check_user_agent(&self, user_agent: Option<&[u8]>) -> bool {
        if !self.checks_user_agent() {
            return true;
        }
        let Some(ua) = user_agent else {
            return false;
        };
        self.health_check_user_agents
            .iter()
            .any(|p| ua.starts_with(p.as_bytes()))
    }

    /// Whether a request with this path and `User-Agent` is a health check: its path is a
    /// configured one, and its `User-Agent` passes the configured narrowing, if any.
    pub fn is_health_check(&self, user_agent: Option<&[u8]>, path: Option<&[u8]>) -> bool {
        self.is_health_check_path(path) && self.is_health_check_user_agent(user_agent)
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
        if requests.checks_user_agent() && !requests.has_health_checks() {
            return Err(error(
                S,
                "health_check_user_agents",
                "only narrows health_check_paths, which is empty: a User-Agent alone is chosen by \
                 the client and never makes a request a health check (any request could then \
                 escape the drain); list the paths your health checkers call in \
                 health_check_paths (e.g. [\"/healthz\"]), or remove health_check_user_agents",
            ));
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
