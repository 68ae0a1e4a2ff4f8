//! Reading rendered configs as JSON (bootstraps, manifests): named list items, the module's
//! settings inside a bootstrap, durations as the module and Kubernetes tools write them.

use serde_json::Value;
use std::time::Duration;

/// The item of a JSON list whose `name` is `name`.
/// A NetworkPolicy rule's `from` list for the control port: some sources, none of them
/// "everywhere" (a `/0` CIDR or a namespace selector that matches every namespace).
pub fn assert_control_sources_listed(from: &[Value]) {
    assert!(!from.is_empty(), "the control port's rule lists no source");
    for f in from {
        let cidr_everywhere = f["ipBlock"]["cidr"]
            .as_str()
            .is_some_and(|c| c.ends_with("/0"));
        let every_namespace = f["namespaceSelector"]
            .as_object()
            .is_some_and(|s| s.is_empty());
        assert!(
            !cidr_everywhere && !every_namespace,
            "control port open: {f}"
        );
    }
}

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

/// The command-line arguments kubelet gives container `c` (a Kubernetes container spec as
/// JSON): each `args` item is one argument, `$(NAME)` expanded from the container's env as
/// Kubernetes expands it. Env values from `fieldRef` take their value from `field_refs`
/// (`("metadata.namespace", "projectcontour")`); any other source fails the test.
pub fn container_args(c: &Value, field_refs: &[(&str, &str)]) -> Vec<String> {
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|v| {
                    let name = v["name"].as_str().expect("env name").to_string();
                    let value = match v["value"].as_str() {
                        Some(value) => value.to_string(),
                        None => {
                            let field = v["valueFrom"]["fieldRef"]["fieldPath"]
                                .as_str()
                                .unwrap_or_else(|| panic!("env {name}: not a value or fieldRef"));
                            let (_, value) = field_refs
                                .iter()
                                .find(|(f, _)| *f == field)
                                .unwrap_or_else(|| panic!("env {name}: no value for {field}"));
                            value.to_string()
                        }
                    };
                    (name, value)
                })
                .collect()
        })
        .unwrap_or_default();
    items(&c["args"], "args")
        .iter()
        .map(|a| {
            let mut a = a.as_str().expect("string args").to_string();
            for (name, value) in &env {
                a = a.replace(&format!("$({name})"), value);
            }
            assert!(!a.contains("$("), "unexpanded variable in {a:?}");
            a
        })
        .collect()
}

/// The value after `--config-yaml` in Envoy's arguments (what a kit adds), parsed.
pub fn config_yaml(args: &[String]) -> Value {
    let at = args
        .iter()
        .position(|a| a == "--config-yaml")
        .expect("--config-yaml in Envoy's arguments");
    super::tools::yaml(&args[at + 1])
}
