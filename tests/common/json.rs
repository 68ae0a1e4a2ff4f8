//! Reading rendered configs as JSON (bootstraps, manifests): named list items, the module's
//! settings inside a bootstrap, durations as the module and Kubernetes tools write them.

use serde_json::Value;
use std::time::Duration;

/// The item of a JSON list whose `name` is `name`.
pub fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|x| x["name"] == name)
}

/// A JSON list, or a panic naming what is not one.
pub fn items<'a>(v: &'a Value, what: &str) -> &'a Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what} is not a list"))
}

/// The graceful_drain bootstrap extension's settings in a bootstrap, parsed from their
/// StringValue (the extension loads the module by the name `graceful_drain`).
pub fn module_settings(b: &Value) -> Value {
    let ext = named(
        &b["bootstrap_extensions"],
        "envoy.bootstrap.dynamic_modules",
    )
    .expect("the dynamic-modules bootstrap extension");
    assert_eq!(
        ext["typed_config"]["dynamic_module_config"]["name"],
        "graceful_drain"
    );
    serde_json::from_str(
        ext["typed_config"]["extension_config"]["value"]
            .as_str()
            .expect("extension_config value"),
    )
    .expect("settings are JSON")
}

/// `"25s"`, `"1.5s"`, `"300ms"`.
pub fn duration(v: &Value) -> Duration {
    let s = v.as_str().expect("a duration string");
    match s.strip_suffix("ms") {
        Some(ms) => Duration::from_millis(ms.parse().expect("duration")),
        None => Duration::from_secs_f64(
            s.strip_suffix('s')
                .and_then(|v| v.parse().ok())
                .expect("duration"),
        ),
    }
}

/// The HTTP connection manager of a listener's first filter chain.
pub fn hcm(listener: &Value) -> &Value {
    &listener["filter_chains"][0]["filters"][0]["typed_config"]
}
