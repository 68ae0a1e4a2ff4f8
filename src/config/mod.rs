//! Configuration layer: parses the JSON that Envoy hands over in `StringValue`s and validates it.
//! Pure Rust; must not touch FFI. Every error names the field it is about, because the message ends
//! up in Envoy's startup log and is all an operator has to fix the bootstrap.
//!
//! Files: `token` (the filter's role and the drain token), `filter` (the HTTP and network
//! filters' configs, with the connections' idle defaults), `bootstrap_config` (the bootstrap
//! extension's config: drain timing, request policy), `duration` (durations as Envoy writes
//! them), `admin_address` (where Envoy's admin listens), `settings` (every setting as the
//! reference lists it, held to the parsers by its tests). Bottom layer: uses no other module of
//! the crate; the layers above take their defaults from here.

mod admin_address;
mod bootstrap_config;
mod duration;
mod filter;
pub mod settings;
mod token;

pub use admin_address::{AdminAddress, AdminCheck};
pub use bootstrap_config::{BootstrapConfig, DrainSettings, RequestPolicy};
pub use duration::{format_duration, parse_duration, MAX_DURATION};
pub use filter::{
    FilterConfig, LongLivedSettings, NetworkFilterConfig, DEFAULT_IDLE_AFTER,
    DEFAULT_IDLE_CLOSE_GRACE,
};
pub use token::{constant_time_eq, DrainToken, Role};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// While requests are in flight, the drain engine re-checks this often, so completion follows
/// the moment the last request ends by at most this much (the requirement is 100 ms). Fixed, not
/// configurable; here because the drain ([`crate::engine`]) and the stats scan's pacing
/// ([`crate::envoy_stats`]) both follow it.
pub const IN_FLIGHT_RECHECK: Duration = Duration::from_millis(20);

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

#[cfg(test)]
mod tests;
