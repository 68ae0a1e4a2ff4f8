//! The Envoy Gateway kit (`k8s/envoy-gateway`), checked against Envoy Gateway's releases
//! v1.8.3 and v1.9.0 without a cluster. `../shared/platforms/envoy-gateway/` holds, per release, EG's
//! own reference rendering of the proxy Deployment (the envoy container's arguments with the
//! whole bootstrap EG writes, and the shutdown-manager sidecar), byte for byte, and the
//! release's CRD schemas for the fields the kit writes. `kubectl kustomize` renders the kit; its
//! resources pass that release's schemas; EG's handling of the EnvoyProxy (volumes, env, mounts,
//! shutdown settings, the strategic-merge patch; the bootstrap Merge by EG's proto rules) turns
//! EG's Deployment into the kit's; EG's filter ordering puts the module's HTTP filter before
//! every filter EG can place ahead of it; Envoy validates the result; and a real Envoy started
//! with the envoy container's arguments as kubelet gives them (EG's `--log-level warn`
//! included), with listeners, routes and clusters from a file-based xDS source shaped as EG
//! builds them (the Gateway listener `default/eg/http` with the policy's HTTP filter
//! `disabled: true` and enabled per route, the EnvoyPatchPolicy's network filter first, EG's
//! readiness listener on 19003), drains with requests in flight and idle keep-alive connections
//! and loses none. EG's own shutdown sequence (its shutdown-manager's admin calls and connection
//! polling, reproduced below) runs against it and stops waiting for idle connections; against
//! stock EG it waits for its timeout. A mixed Gateway (one route covered by the policy, one not)
//! shows what the uncovered route gets; in connection mode (the kit's optional component) every
//! route is counted exactly.

use crate::common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{envoy_bin, expected_envoy_version, minor_of, module_dir};
use common::envoy::{Settings, TempDir};
use common::gateway::{drain_also_from_ipv6_loopback, path_source, short_drain, Launch};
use common::json::{duration, hcm, items, module_settings, named};
use common::scenario::{self, Drain, Idle, InFlight, LateHttp1, Ready, Slow};
use common::tools::{checked_fixture_sources, temp_file, yaml, yaml_docs};
use common::tools::{
    json_schema_validate, kubernetes_validate, kustomize, kustomize_with_components, run,
};
use common::upstream::Upstream;
use common::{eventually, repo_root};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const KIT: &str = "k8s/envoy-gateway";
const FIXTURES: &str = "envoy-gateway";
/// The Envoy Gateway releases the kit is checked against (`../shared/platforms/envoy-gateway/SOURCES`).
const EG_RELEASES: [&str; 2] = ["v1.8.3", "v1.9.0"];
/// Where the kit mounts the module in the pod (the module image's volume).
const POD_MODULE_DIR: &str = "/var/lib/graceful-drain";
/// EG's admin address (internal/xds/bootstrap: EnvoyAdminAddress, EnvoyAdminPort).
const EG_ADMIN: (&str, u64) = ("127.0.0.1", 19000);
/// The Gateway `default/eg` of EG's quickstart, its listener `http` (port 80; EG shifts
/// privileged ports by 10000 in the container, and names the HCM's stats `http-<port>`).
const GATEWAY_LISTENER: &str = "default/eg/http";
const HTTP_STAT_PREFIX: &str = "http-10080";
const READY_LISTENER: &str = "envoy-gateway-proxy-ready-0.0.0.0-19003";
const STATS_LISTENER: &str = "envoy-gateway-proxy-stats-0.0.0.0-19001";
const CONTROL_LISTENER: &str = "graceful-drain-control";
/// EG's infrastructure name in its reference rendering (the fixtures): the local cluster's name,
/// `--service-cluster`.
const INFRA_NAME: &str = "default";

/// Envoy's namespace for a module's stats when its config names none, as EG writes the policy's
/// HTTP filter (`internal/xds/translator/dynamicmodule.go`, v1.8.3 and v1.9.0: no
/// `metrics_namespace`). The module defines its stats in the bootstrap extension (the kit's
/// bootstrap merge names `graceful_drain`), so none of them may land here.
const EG_FILTER_STATS: &str = "dynamicmodulescustom";

const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

// ---------------------------------------------------------------------------------------------
// The kit as rendered

struct Kit {
    docs: Vec<Value>,
}

impl Kit {
    fn get(&self, kind: &str) -> &Value {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in the rendered kit"))
    }
    fn envoy_proxy(&self) -> &Value {
        self.get("EnvoyProxy")
    }
    fn policy(&self) -> &Value {
        self.get("EnvoyExtensionPolicy")
    }
    fn patch_policy(&self) -> &Value {
        self.get("EnvoyPatchPolicy")
    }
    /// The strategic-merge patch the EnvoyProxy applies to EG's Deployment: its pod spec.
    fn pod_patch(&self) -> &Value {
        let patch =
            &self.envoy_proxy()["spec"]["provider"]["kubernetes"]["envoyDeployment"]["patch"];
        assert_eq!(patch["type"], "StrategicMerge");
        &patch["value"]["spec"]["template"]["spec"]
    }
    fn envoy_container_patch(&self) -> &Value {
        named(&self.pod_patch()["containers"], "envoy").expect("a patch for the envoy container")
    }
    /// The bootstrap the EnvoyProxy merges into EG's, as JSON.
    fn bootstrap_merge(&self) -> Value {
        let b = &self.envoy_proxy()["spec"]["bootstrap"];
        assert_eq!(b["type"], "Merge");
        yaml(b["value"].as_str().expect("bootstrap value"))
    }
}

/// `kubectl kustomize k8s/envoy-gateway` as a user applies it (Envoy Gateway 1.9).
fn kit_default() -> &'static Kit {
    static K: OnceLock<Kit> = OnceLock::new();
    K.get_or_init(|| {
        let text = kustomize(&repo_root().join(KIT));
        Kit {
            docs: yaml_docs(&text),
        }
    })
}

/// The kit with `components` enabled, as a user enables them.
fn kit_with(components: &[&str]) -> Kit {
    let text = kustomize_with_components(&repo_root().join(KIT), components);
    Kit {
        docs: yaml_docs(&text),
    }
}

/// The components a user of `release` must enable.
fn components_for(release: &str) -> &'static [&'static str] {
    match release {
        "v1.8.3" => &["eg-1.8"],
        "v1.9.0" => &[],
        other => panic!("not a tested EG release: {other}"),
    }
}

/// The kit as a user of the EG release under test applies it: its two resources (filter mode).
fn kit() -> &'static Kit {
    kit_of(false)
}

/// The kit with its connection-mode component too, for the EG release under test.
fn kit_connection_mode() -> &'static Kit {
    kit_of(true)
}

/// The kit for the EG release under test, with the release's components and, if
/// `connection_mode`, the connection-mode one; rendered once per variant.
fn kit_of(connection_mode: bool) -> &'static Kit {
    static K: [OnceLock<Kit>; 2 * EG_RELEASES.len()] = [const { OnceLock::new() }; 4];
    let release = eg_release();
    let at = EG_RELEASES.iter().position(|r| *r == release).unwrap();
    K[2 * at + usize::from(connection_mode)].get_or_init(|| {
        let mut c = components_for(release).to_vec();
        if connection_mode {
            c.push(CONNECTION_MODE);
        }
        kit_with(&c)
    })
}

/// The optional component that turns the kit to connection mode.
const CONNECTION_MODE: &str = "connection-mode";

/// Remove strategic-merge directives (`$patch`) so a patch fragment is a plain object.
fn without_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_directives).collect()),
        other => other.clone(),
    }
}

/// The release's CRD schema for `kind` (cut from EG's CRD: its SOURCES says how).
fn schema(release: &str, kind: &str) -> std::path::PathBuf {
    common::platforms().join(FIXTURES).join(format!(
        "schemas/{release}/{}.json",
        kind.to_ascii_lowercase()
    ))
}

fn objects(k: &Kit) -> Vec<String> {
    k.docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Every fixture is the release's own file: its git blob id is the one recorded from it, and
/// each schema names the CRD it was cut from.
#[test]
fn the_fixtures_are_envoy_gateway_s_own_release_files() {
    let files: Vec<(String, String)> = checked_fixture_sources(&common::platforms().join(FIXTURES))
        .into_iter()
        .map(|f| (f.tag, f.fixture))
        .collect();
    for release in EG_RELEASES {
        for file in ["deployment.yaml", "ready.listeners.yaml"] {
            let fixture = format!("{release}/{file}");
            assert!(
                files.contains(&(release.to_string(), fixture.clone())),
                "{fixture} not in SOURCES"
            );
        }
    }
    assert_eq!(files.len(), 2 * EG_RELEASES.len());
    for release in EG_RELEASES {
        for kind in ["EnvoyProxy", "EnvoyExtensionPolicy", "EnvoyPatchPolicy"] {
            let s: Value =
                serde_json::from_str(&std::fs::read_to_string(schema(release, kind)).unwrap())
                    .unwrap();
            let note = s["$comment"].as_str().unwrap_or_default();
            assert!(
                note.contains(&format!("envoyproxy/gateway {release}:charts/"))
                    && note.contains("blob "),
                "{release} {kind}: {note}"
            );
        }
    }
}

#[test]
fn kit_renders_and_passes_each_release_s_schemas() {
    assert_eq!(
        objects(kit_default()),
        [
            "PodDisruptionBudget/graceful-drain-eg",
            "EnvoyExtensionPolicy/graceful-drain",
            "EnvoyProxy/graceful-drain"
        ]
    );
    let variants: [&[&str]; 4] = [
        &[],
        &[CONNECTION_MODE],
        &["without-image-volumes"],
        &[CONNECTION_MODE, "without-image-volumes"],
    ];
    for release in EG_RELEASES {
        for extra in variants {
            let mut components = components_for(release).to_vec();
            components.extend(extra);
            let k = kit_with(&components);
            for doc in &k.docs {
                let kind = doc["kind"].as_str().unwrap();
                if kind == "PodDisruptionBudget" {
                    continue; // Kubernetes' own: no_probe_is_stricter_than_eg_s_own
                }
                let (ok, errors) = json_schema_validate(&schema(release, kind), doc);
                assert!(ok, "{release} {components:?} {kind}: {errors}");
            }
        }
    }
    // Connection mode adds the network filter and removes the HTTP filter's policy.
    assert_eq!(
        objects(&kit_with(&[CONNECTION_MODE])),
        [
            "PodDisruptionBudget/graceful-drain-eg",
            "EnvoyPatchPolicy/graceful-drain-connection-mode",
            "EnvoyProxy/graceful-drain"
        ]
    );
    // The schemas can fail: EG 1.8's CRD has no csrf filter to order (why eg-1.8 exists), a
    // misspelt field and a wrong enum value are refused.
    let ep = kit_default().envoy_proxy();
    let (ok, errors) = json_schema_validate(&schema("v1.8.3", "EnvoyProxy"), ep);
    assert!(!ok && errors.contains("filterOrder"), "{errors}");
    let mut bad = ep.clone();
    bad["spec"]["dynamicModule"] = bad["spec"]["dynamicModules"].take();
    assert!(
        !json_schema_validate(&schema("v1.9.0", "EnvoyProxy"), &bad).0,
        "misspelt field accepted"
    );
    let mut bad = ep.clone();
    bad["spec"]["bootstrap"]["type"] = json!("Append");
    assert!(
        !json_schema_validate(&schema("v1.9.0", "EnvoyProxy"), &bad).0,
        "bad enum accepted"
    );
    // The Kubernetes objects the EnvoyProxy adds to EG's pod are checked in EG's Deployment
    // (kit_applied_to_eg_deployment_keeps_eg_pod_and_changes_only_the_stop).
}

#[test]
fn kit_pieces_fit_together() {
    let k = kit();
    let ep = &k.envoy_proxy()["spec"];
    let deployment = &ep["provider"]["kubernetes"]["envoyDeployment"];
    // The policy's module is allowlisted, by its path in the module volume ...
    let dm = &items(&k.policy()["spec"]["dynamicModule"], "dynamicModule")[0];
    assert_eq!(dm["filterName"], "graceful_drain");
    assert_eq!(dm["config"], json!({"role": "data"}));
    let entry = named(&ep["dynamicModules"], dm["name"].as_str().unwrap())
        .expect("the policy's module is in spec.dynamicModules");
    assert_eq!(entry["doNotClose"], true);
    assert_eq!(entry["source"]["type"], "Local");
    let path = entry["source"]["local"]["path"].as_str().unwrap();
    assert_eq!(path, format!("{POD_MODULE_DIR}/libgraceful_drain.so"));
    // ... the module image, as a volume mounted read-only where the path points.
    let volume = items(&deployment["pod"]["volumes"], "volumes")[0].clone();
    assert_eq!(
        volume["image"]["reference"],
        format!("graceful-drain:{}", env!("CARGO_PKG_VERSION")),
        "the module image `make dist` tags"
    );
    let mount = named(
        &deployment["container"]["volumeMounts"],
        volume["name"].as_str().unwrap(),
    )
    .expect("the module volume mounted in envoy");
    assert_eq!(mount["mountPath"], POD_MODULE_DIR);
    assert_eq!(mount["readOnly"], true);
    // No init container (an image volume needs none).
    assert!(deployment["initContainers"].is_null() && k.pod_patch()["initContainers"].is_null());
    // The bootstrap's module (by name, through the search path) is that same file.
    let env = named(
        &deployment["container"]["env"],
        "ENVOY_DYNAMIC_MODULES_SEARCH_PATH",
    )
    .expect("search path");
    assert_eq!(env["value"], POD_MODULE_DIR);
    let merge = k.bootstrap_merge();
    let text = merge.to_string();
    assert_eq!(
        text.matches(r#""name":"graceful_drain""#).count(),
        2,
        "{text}"
    );
    assert!(
        !text.contains("\"module\""),
        "Envoy 1.38's bootstrap extension reads only a name"
    );

    // The drain engine reaches EG's admin; requests on EG's stats and readiness listeners never
    // hold a drain.
    let settings = module_settings(&merge);
    // EG's admin with ipFamily IPv4 or DualStack (the fixtures), and with IPv6 (EG's
    // internal/xds/bootstrap/bootstrap.go: EnvoyAdminAddressV6 "::1", EnvoyAdminPort 19000).
    assert_eq!(
        settings["admin_address"],
        json!([
            format!("{}:{}", EG_ADMIN.0, EG_ADMIN.1),
            format!("[::1]:{}", EG_ADMIN.1)
        ])
    );
    // EG runs Envoy at --log-level warn: the module's lifecycle lines are written at warn.
    assert_eq!(settings["lifecycle_log_level"], "warn");
    let eg = eg_bootstrap("v1.9.0");
    assert_eq!(
        eg["admin"]["address"]["socket_address"]["port_value"],
        EG_ADMIN.1
    );
    let stats = named(&eg["static_resources"]["listeners"], STATS_LISTENER).unwrap();
    for prefix in [
        "admin",
        hcm(stats)["stat_prefix"].as_str().unwrap(),
        "eg-ready-http",
    ] {
        assert!(
            items(&settings["ignored_stat_prefixes"], "ignored").contains(&json!(prefix)),
            "{prefix}"
        );
    }

    // Shutdown: no preStop on envoy (kubelet's SIGTERM starts the drain), liveness on the control
    // listener's /drain/status (200 while draining), never /ready.
    let c = k.envoy_container_patch();
    assert_eq!(c["lifecycle"], json!({"$patch": "delete"}));
    let live = &c["livenessProbe"];
    assert_eq!(live["$patch"], "replace");
    assert_eq!(live["httpGet"]["path"], "/drain/status");
    let control = named(&merge["static_resources"]["listeners"], CONTROL_LISTENER).unwrap();
    let control_port = control["address"]["socket_address"]["port_value"]
        .as_u64()
        .unwrap();
    assert_eq!(live["httpGet"]["port"].as_u64(), Some(control_port));
    let port = named(&c["ports"], "drain-control").unwrap();
    assert_eq!(port["containerPort"].as_u64(), Some(control_port));
    assert!(!(19000..=19003).contains(&control_port), "EG's ports");
    // IPv4, as EG's own listeners by default (the dual-stack component for ipFamily IPv6 or
    // DualStack); its listener stats named so EG's shutdown-manager leaves them out of its count
    // (EG's regex `admin|19001|19003|worker`), and /drain refused from outside the pod.
    assert_eq!(
        control["address"]["socket_address"],
        json!({"address": "0.0.0.0", "port_value": 19010})
    );
    assert!(control["stat_prefix"].as_str().unwrap().contains("admin"));
    let filters = &hcm(control)["http_filters"];
    assert_eq!(filters[0]["name"], "envoy.filters.http.rbac");
    assert_eq!(filters[0]["typed_config"]["rules"]["action"], "DENY");
    // Merged over a GatewayClass-level EnvoyProxy instead of replacing it.
    assert_eq!(ep["mergeType"], "StrategicMerge");
    // EG's drainTimeout is the module's drain_timeout, and the grace period EG derives from it
    // (drainTimeout + 300s) leaves the module all of it. Only drainTimeout: the other shutdown
    // fields EG renders into the shutdown-manager's preStop command, which the kit removes.
    let sm_timeout = duration(&ep["shutdown"]["drainTimeout"]);
    let timeout = duration(&settings["drain_timeout"]);
    assert_eq!(
        ep["shutdown"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["drainTimeout"]
    );
    assert!(sm_timeout + Duration::from_secs(300) > timeout + Duration::from_secs(5));
    assert_eq!(sm_timeout, timeout);

    // Everything targets the same Gateway, whose listener the patch names.
    let gw = &k.policy()["spec"]["targetRefs"][0];
    assert_eq!(
        (gw["kind"].as_str(), gw["name"].as_str()),
        (Some("Gateway"), Some("eg"))
    );
    let cm = kit_connection_mode();
    assert_eq!(cm.envoy_proxy(), k.envoy_proxy());
    let pp = &cm.patch_policy()["spec"];
    assert_eq!(pp["targetRef"], *gw);
    assert_eq!(
        cm.patch_policy()["metadata"]["namespace"],
        k.policy()["metadata"]["namespace"]
    );
    let ns = k.policy()["metadata"]["namespace"].as_str().unwrap();
    assert_eq!(k.envoy_proxy()["metadata"]["namespace"], ns);
    let patch = &pp["jsonPatches"][0];
    assert_eq!(patch["type"], LISTENER);
    assert_eq!(
        patch["name"],
        format!("{ns}/{}/http", gw["name"].as_str().unwrap())
    );
    assert_eq!(
        patch["operation"]["path"],
        "/default_filter_chain/filters/0"
    );
    // The network filter follows the exchanges (connection mode), by the module the bootstrap
    // loads, and its stats are the module's.
    let filter = &patch["operation"]["value"]["typed_config"];
    let config: Value =
        serde_json::from_str(filter["filter_config"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(config["track_requests"], true, "{config}");
    assert_eq!(filter["dynamic_module_config"]["name"], "graceful_drain");
    assert_eq!(
        filter["dynamic_module_config"]["metrics_namespace"],
        "graceful_drain"
    );
}

// ---------------------------------------------------------------------------------------------
// EG's HTTP filter order

/// EG's default order of HTTP filter types for `release` (internal/xds/translator/httpfilters.go,
/// `newOrderedHTTPFilter`: the order numbers 0 to 310; EG 1.9 added csrf at 4).
fn eg_filter_types(release: &str) -> Vec<&'static str> {
    let mut t = vec![
        "envoy.filters.http.custom_response",
        "envoy.filters.http.health_check",
        "envoy.filters.http.fault",
        "envoy.filters.http.cors",
        "envoy.filters.http.csrf",
        "envoy.filters.http.header_mutation",
        "envoy.filters.http.ext_authz",
        "envoy.filters.http.api_key_auth",
        "envoy.filters.http.basic_auth",
        "envoy.filters.http.oauth2",
        "envoy.filters.http.jwt_authn",
        "envoy.filters.http.stateful_session",
        "envoy.filters.http.buffer",
        "envoy.filters.http.lua",
        "envoy.filters.http.ext_proc",
        "envoy.filters.http.wasm",
        "envoy.filters.http.dynamic_modules",
        "envoy.filters.http.geoip",
        "envoy.filters.http.rbac",
        "envoy.filters.http.local_ratelimit",
        "envoy.filters.http.ratelimit",
        "envoy.filters.http.bandwidth_limit",
        "envoy.filters.http.grpc_web",
        "envoy.filters.http.grpc_stats",
        "envoy.filters.http.credential_injector",
        "envoy.filters.http.compressor",
        "envoy.filters.http.dynamic_forward_proxy",
        "envoy.filters.http.router",
    ];
    if release == "v1.8.3" {
        t.retain(|f| *f != "envoy.filters.http.csrf");
    }
    t
}

/// EG's ordering of a listener's HTTP filters (`sortHTTPFilters`): by the default order of their
/// types, then each `filterOrder` entry in turn moves every filter of its type right before the
/// first filter of the `before` type, or right after the last of the `after` type; an entry
/// whose filters (or whose `before`/`after` filter) are absent changes nothing. A filter's type
/// is the prefix of its name.
fn eg_sort(release: &str, present: &[&str], filter_order: &Value) -> Vec<String> {
    let types = eg_filter_types(release);
    let type_of = |f: &str| {
        types
            .iter()
            .position(|t| f.starts_with(t))
            .expect("a known type")
    };
    let mut l: Vec<String> = present.iter().map(|f| f.to_string()).collect();
    l.sort_by_key(|f| type_of(f));
    for e in filter_order.as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap();
        let moving: Vec<String> = l.iter().filter(|f| f.starts_with(name)).cloned().collect();
        if moving.is_empty() {
            continue;
        }
        let rest: Vec<String> = l.iter().filter(|f| !f.starts_with(name)).cloned().collect();
        let at = if let Some(b) = e["before"].as_str() {
            rest.iter().position(|f| f.starts_with(b))
        } else {
            let a = e["after"].as_str().unwrap();
            rest.iter().rposition(|f| f.starts_with(a)).map(|i| i + 1)
        };
        if let Some(at) = at {
            l = rest;
            for (i, f) in moving.into_iter().enumerate() {
                l.insert(at + i, f);
            }
        }
    }
    l
}

/// EG places these filter types ahead of dynamic modules, and each can answer a request itself
/// (a 401/403, a 413, a fault's abort, a CORS preflight) or change it before the module would see
/// it; with the kit's filterOrder the module's filter runs before each of them, alone or all
/// together, in both releases. Two stay ahead where EG puts them: health_check (its answers to
/// load balancers never hold a drain) and, when there is a health_check filter, custom_response
/// (EG orders it first; it answers nothing on the way in, it only rewrites responses, health
/// checks' included, on their way out, so moving it would change what it rewrites). Without the
/// kit's filterOrder the module would run after all of them.
#[test]
fn the_module_s_filter_runs_before_every_filter_eg_places_ahead_of_it() {
    const DM: &str = "envoy.filters.http.dynamic_modules/envoyextensionpolicy/default/graceful-drain/dynamic-module/0";
    const HC: &str = "envoy.filters.http.health_check";
    for release in EG_RELEASES {
        let k = kit_with(components_for(release));
        let order = &k.envoy_proxy()["spec"]["filterOrder"];
        let types = eg_filter_types(release);
        let dm_at = types.iter().position(|t| DM.starts_with(t)).unwrap();
        let ahead: Vec<&str> = types[..dm_at].to_vec();
        let pos = |l: &[String], f: &str| l.iter().position(|x| x.starts_with(f)).unwrap();
        for x in &ahead {
            let named = format!("{x}/policy/default/p/0");
            let present = [DM, named.as_str(), "envoy.filters.http.router"];
            let sorted = eg_sort(release, &present, order);
            let unsorted = eg_sort(release, &present, &json!([]));
            assert!(
                pos(&unsorted, x) < pos(&unsorted, DM),
                "{release} {x}: EG's default"
            );
            if *x == HC {
                assert!(pos(&sorted, x) < pos(&sorted, DM), "{release}: {sorted:?}");
            } else {
                assert!(
                    pos(&sorted, DM) < pos(&sorted, x),
                    "{release} {x}: {sorted:?}"
                );
            }
        }
        // All of them at once, with the filters EG places after dynamic modules.
        const CR: &str = "envoy.filters.http.custom_response";
        let mut present: Vec<String> = types.iter().map(|t| format!("{t}/x")).collect();
        present[dm_at] = DM.to_string();
        let present: Vec<&str> = present.iter().map(String::as_str).collect();
        let sorted = eg_sort(release, &present, order);
        let dm = pos(&sorted, DM);
        for x in types.iter().filter(|t| !DM.starts_with(**t)) {
            let stays_ahead = *x == HC || *x == CR;
            assert_eq!(
                pos(&sorted, x) < dm,
                stays_ahead,
                "{release} {x}: {sorted:?}"
            );
        }
        assert_eq!(
            pos(&sorted, HC),
            dm - 1,
            "right after health_check: {sorted:?}"
        );
        assert_eq!(
            sorted.last().map(String::as_str),
            Some("envoy.filters.http.router/x")
        );
        // Every type the kit orders is in this release's filterOrder enum (the CRD refuses others).
        for e in order.as_array().unwrap() {
            for k in ["before", "after"] {
                if let Some(t) = e[k].as_str() {
                    assert!(types.contains(&t), "{release}: {t}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// EG's Deployment with the kit's EnvoyProxy applied

/// EG's proxy Deployment for `release`, as EG renders it (`../shared/platforms/envoy-gateway`).
fn eg_deployment(release: &str) -> Value {
    yaml(
        &std::fs::read_to_string(
            common::platforms()
                .join(FIXTURES)
                .join(release)
                .join("deployment.yaml"),
        )
        .unwrap(),
    )
}

/// The merge key of a list in a pod spec, for the lists the kit patches.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "initContainers" | "volumes" | "env" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// Kubernetes' strategic merge, the part the kit's patch uses: maps merge key by key; lists with
/// a merge key merge item by item (new items appended), other lists are replaced; a map holding
/// `$patch: delete` removes its field, one holding `$patch: replace` replaces it.
fn strategic_merge(dst: &mut Value, patch: &Value) {
    let (Value::Object(d), Value::Object(p)) = (dst, patch) else {
        panic!("strategic merge of a non-object");
    };
    for (k, v) in p {
        let directive = v.get("$patch").and_then(Value::as_str);
        match (v, directive) {
            (_, Some("delete")) => {
                d.remove(k);
            }
            (_, Some("replace")) => {
                d.insert(k.clone(), without_directives(v));
            }
            (Value::Object(_), _) => strategic_merge(d.entry(k.clone()).or_insert(json!({})), v),
            (Value::Array(patch_items), _) if merge_key(k).is_some() => {
                let key = merge_key(k).unwrap();
                let list = d.entry(k.clone()).or_insert(json!([]));
                let list = list.as_array_mut().expect("a list");
                for item in patch_items {
                    match list.iter_mut().find(|x| x[key] == item[key]) {
                        Some(existing) => strategic_merge(existing, item),
                        None => list.push(without_directives(item)),
                    }
                }
            }
            _ => {
                d.insert(k.clone(), v.clone());
            }
        }
    }
}

/// EG's Deployment for `release` after `kit`'s EnvoyProxy, applied as EG applies it
/// (internal/infrastructure/kubernetes/proxy/resource.go, resource_provider.go): `pod.volumes`
/// added to the pod's, `container.env` and `container.volumeMounts` to the envoy container's,
/// `initContainers` as given; the shutdown settings to Envoy's `--drain-time-s`, the
/// shutdown-manager's `--ready-timeout` (drainTimeout + 10s) and preStop flags, and the grace
/// period (drainTimeout + 300s); then the strategic-merge patch, last.
fn kit_deployment_of(release: &str, kit: &Kit) -> Value {
    let mut d = eg_deployment(release);
    let ep = &kit.envoy_proxy()["spec"];
    let k = &ep["provider"]["kubernetes"]["envoyDeployment"];
    let pod = &mut d["spec"]["template"]["spec"];
    strategic_merge(pod, &json!({"volumes": k["pod"]["volumes"]}));
    if k["initContainers"].is_array() {
        pod["initContainers"] = k["initContainers"].clone();
    }
    let drain_timeout = duration(&ep["shutdown"]["drainTimeout"]).as_secs();
    let min_drain = ep["shutdown"]
        .get("minDrainDuration")
        .map(|d| duration(d).as_secs());
    pod["terminationGracePeriodSeconds"] = json!(drain_timeout + 300);
    let containers = pod["containers"].as_array_mut().unwrap();
    let envoy = containers
        .iter_mut()
        .find(|c| c["name"] == "envoy")
        .unwrap();
    strategic_merge(
        envoy,
        &json!({"env": k["container"]["env"], "volumeMounts": k["container"]["volumeMounts"]}),
    );
    let args = envoy["args"].as_array_mut().unwrap();
    let at = args.iter().position(|a| a == "--drain-time-s").unwrap();
    args[at + 1] = json!(drain_timeout.to_string());
    // EG merges the kit's bootstrap into its own before it writes the argument.
    let at = args.iter().position(|a| a == "--config-yaml").unwrap();
    let mut b = yaml(args[at + 1].as_str().unwrap());
    proto_merge(&mut b, &kit.bootstrap_merge());
    args[at + 1] = json!(b.to_string());
    let sm = containers
        .iter_mut()
        .find(|c| c["name"] == "shutdown-manager")
        .unwrap();
    sm["args"]
        .as_array_mut()
        .unwrap()
        .push(json!(format!("--ready-timeout={}s", drain_timeout + 10)));
    let stop = sm["lifecycle"]["preStop"]["exec"]["command"]
        .as_array_mut()
        .unwrap();
    stop.push(json!(format!("--drain-timeout={drain_timeout}s")));
    if let Some(min_drain) = min_drain {
        stop.push(json!(format!("--min-drain-duration={min_drain}s")));
    }
    assert_eq!(k["patch"]["type"], "StrategicMerge");
    strategic_merge(&mut d, &k["patch"]["value"]);
    d
}

/// The kit's Deployment for the EG release under test.
fn kit_deployment() -> Value {
    kit_deployment_of(eg_release(), kit())
}

fn container<'a>(d: &'a Value, name: &str) -> &'a Value {
    named(&d["spec"]["template"]["spec"]["containers"], name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The bootstrap EG gives Envoy in Deployment `d`: the envoy container's `--config-yaml` value,
/// `$(ENVOY_SERVICE_ZONE)` expanded as kubelet would.
fn container_bootstrap(d: &Value) -> Value {
    let args = items(&container(d, "envoy")["args"], "args");
    let at = args
        .iter()
        .position(|a| a == "--config-yaml")
        .expect("--config-yaml");
    yaml(
        &args[at + 1]
            .as_str()
            .unwrap()
            .replace("$(ENVOY_SERVICE_ZONE)", "zone-a"),
    )
}

/// The envoy container's command line as kubelet gives it (EG writes each flag and its value as
/// separate arguments), with the bootstrap (`--config-yaml`'s value) replaced by `bootstrap` and
/// `$(ENVOY_POD_NAME)` expanded.
fn eg_envoy_args(d: &Value, bootstrap: &Value) -> Vec<String> {
    let c = container(d, "envoy");
    assert_eq!(c["command"], json!(["envoy"]));
    let mut out = Vec::new();
    let mut args = items(&c["args"], "args")
        .iter()
        .map(|a| a.as_str().unwrap());
    while let Some(a) = args.next() {
        out.push(a.replace("$(ENVOY_POD_NAME)", "envoy-default-37a8eec1-7d9f-abcde"));
        if a == "--config-yaml" {
            args.next().expect("the bootstrap");
            out.push(bootstrap.to_string());
        }
    }
    out
}

#[test]
fn kit_applied_to_eg_deployment_keeps_eg_pod_and_changes_only_the_stop() {
    for release in EG_RELEASES {
        let k = kit_with(components_for(release));
        let eg = eg_deployment(release);
        let d = kit_deployment_of(release, &k);
        let (_dir, path) = temp_file("eg-kit", "deployment.yaml", &d.to_string());
        let (ok, text) = kubernetes_validate(&path);
        assert!(
            ok && text.contains("passed for resource deployment/"),
            "{release}: {text}"
        );

        let (envoy, stock) = (container(&d, "envoy"), container(&eg, "envoy"));
        // No preStop hook any more (EG's waited for the shutdown-manager): SIGTERM starts the
        // drain.
        assert!(stock["lifecycle"]["preStop"].is_object());
        assert!(envoy["lifecycle"].is_null(), "{}", envoy["lifecycle"]);
        // Liveness on the control listener's /drain/status, nothing of EG's /ready left in it;
        // readiness and startup are EG's /ready on 19003 (503 from the drain start).
        assert_eq!(
            envoy["livenessProbe"],
            json!({"httpGet": {"path": "/drain/status", "port": 19010, "scheme": "HTTP"},
                   "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3, "successThreshold": 1})
        );
        for probe in ["readinessProbe", "startupProbe"] {
            assert_eq!(envoy[probe], stock[probe], "{probe}");
            assert_eq!(envoy[probe]["httpGet"]["path"], "/ready");
        }
        // The module: the module image as a volume, mounted read-only on the search path; no
        // init container.
        let pod = &d["spec"]["template"]["spec"];
        assert!(pod["initContainers"].is_null(), "{release}");
        let volume = named(&pod["volumes"], "graceful-drain-module").expect("module volume");
        assert!(volume["image"]["reference"].is_string(), "{volume}");
        for (field, key) in [
            ("env", "name"),
            ("volumeMounts", "mountPath"),
            ("ports", "containerPort"),
        ] {
            // EG's own entries stay, the kit's are added.
            for x in items(&stock[field], field) {
                assert!(
                    items(&envoy[field], field)
                        .iter()
                        .any(|y| y[key] == x[key] && y == x),
                    "{field}: {x}"
                );
            }
            assert!(
                items(&envoy[field], field).len() > items(&stock[field], field).len(),
                "{field}"
            );
        }
        // Envoy's arguments: EG's, with the drain time and the bootstrap EG derives from the
        // kit; the log level stays EG's (warn).
        let args = |c: &Value| -> Vec<String> {
            let a: Vec<String> = items(&c["args"], "args")
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            let skip = |flag: &str| a.iter().position(|x| x == flag).unwrap() + 1;
            let (t, b) = (skip("--drain-time-s"), skip("--config-yaml"));
            a.iter()
                .enumerate()
                .filter(|(i, _)| *i != t && *i != b)
                .map(|(_, x)| x.clone())
                .collect()
        };
        assert_eq!(args(envoy), args(stock), "{release}");
        let a = items(&envoy["args"], "args");
        let at = a.iter().position(|x| x == "--drain-time-s").unwrap();
        assert_eq!(a[at + 1], "60", "EG's own --drain-time-s");
        let at = a.iter().position(|x| x == "--log-level").unwrap();
        assert_eq!(a[at + 1], "warn");
        for field in ["command", "image", "resources", "securityContext", "name"] {
            assert_eq!(envoy[field], stock[field], "{field}");
        }
        // The shutdown-manager: EG's, with the `--ready-timeout` EG derives from drainTimeout,
        // and without its preStop sequence (its /healthcheck/fail would fail readiness at once,
        // before readiness_failure_delay); everything else of it is EG's.
        let (sm, stock_sm) = (
            container(&d, "shutdown-manager"),
            container(&eg, "shutdown-manager"),
        );
        assert_eq!(
            sm["args"],
            json!(["envoy", "shutdown-manager", "--ready-timeout=70s"])
        );
        assert!(stock_sm["lifecycle"]["preStop"]["exec"].is_object());
        assert!(sm["lifecycle"].is_null(), "{}", sm["lifecycle"]);
        for field in [
            "command",
            "image",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "resources",
            "securityContext",
        ] {
            assert_eq!(sm[field], stock_sm[field], "shutdown-manager {field}");
        }
        for field in [
            "metadata",
            "spec/selector",
            "spec/strategy",
            "spec/template/metadata",
        ] {
            let p = format!("/{field}");
            assert_eq!(d.pointer(&p), eg.pointer(&p), "{field}");
        }
        assert_eq!(
            pod["terminationGracePeriodSeconds"],
            eg["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            "EG's own grace period (360 s)"
        );
        for field in [
            "automountServiceAccountToken",
            "serviceAccountName",
            "securityContext",
        ] {
            assert_eq!(pod[field], eg["spec"]["template"]["spec"][field], "{field}");
        }
    }
    // The strategic merge above can fail: without `$patch: replace` EG's liveness path would
    // have survived next to the kit's fields.
    let mut merged = container(&eg_deployment("v1.9.0"), "envoy").clone();
    strategic_merge(
        &mut merged,
        &json!({"livenessProbe": {"httpGet": {"port": 19010}}}),
    );
    assert_eq!(merged["livenessProbe"]["httpGet"]["path"], "/ready");
}

/// The kit never makes EG's pod worse than stock, field by field against each release's own
/// Deployment: no probe stricter than EG's (the envoy container's startup, readiness and liveness
/// probes: the same period, timeout and thresholds, the liveness probe only moved to a path that
/// stays 200 while draining; the shutdown-manager's untouched), the drain bound and the grace
/// period at least EG's (`drainTimeout` 60 s: `--drain-time-s 60`, 360 s), and a
/// PodDisruptionBudget that selects exactly the Gateway's proxy pods and never blocks a node drain.
#[test]
fn no_probe_is_stricter_than_eg_s_own() {
    let settings = module_settings(&kit().bootstrap_merge());
    for release in EG_RELEASES {
        let k = kit_with(components_for(release));
        let (eg, d) = (eg_deployment(release), kit_deployment_of(release, &k));
        for name in ["envoy", "shutdown-manager"] {
            let (kit_c, stock_c) = (container(&d, name), container(&eg, name));
            for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                let (kp, sp) = (&kit_c[probe], &stock_c[probe]);
                assert!(sp.is_object(), "{release} {name} {probe}");
                for field in ["periodSeconds", "timeoutSeconds", "failureThreshold"] {
                    let (kv, sv) = (kp[field].as_u64(), sp[field].as_u64());
                    assert!(kv.is_some() && kv >= sv, "{release} {name} {probe} {field}");
                    assert!(
                        field != "periodSeconds" || kv == sv,
                        "{release} {name} {probe} read as often"
                    );
                }
                assert!(
                    kp["successThreshold"].as_u64() <= sp["successThreshold"].as_u64(),
                    "{release} {name} {probe} successThreshold"
                );
                assert!(
                    kp["initialDelaySeconds"].as_u64().unwrap_or(0)
                        >= sp["initialDelaySeconds"].as_u64().unwrap_or(0)
                );
                if name == "shutdown-manager" || probe != "livenessProbe" {
                    assert_eq!(kp, sp, "{release} {name} {probe} is EG's");
                }
            }
        }
        // Bounds: EG's own drain time and grace period, and the module's drain as long.
        let flag = |c: &Value, f: &str| -> String {
            let a = items(&c["args"], "args");
            let at = a.iter().position(|x| x == f).unwrap();
            a[at + 1].as_str().unwrap().to_string()
        };
        let stock_drain: u64 = flag(container(&eg, "envoy"), "--drain-time-s")
            .parse()
            .unwrap();
        assert_eq!(stock_drain, 60, "EG's default drain (proxy_args.go)");
        let kit_drain: u64 = flag(container(&d, "envoy"), "--drain-time-s")
            .parse()
            .unwrap();
        assert!(kit_drain >= stock_drain);
        assert!(duration(&settings["drain_timeout"]).as_secs() >= stock_drain);
        let grace =
            |d: &Value| d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64();
        assert!(grace(&d) >= grace(&eg), "{release}: {:?}", grace(&eg));
        assert!(grace(&d).unwrap() > duration(&settings["drain_timeout"]).as_secs() + 5);
    }
    // The budget: EG's proxy pod labels for the Gateway the kit targets, one at a time.
    let pdb = kit().get("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"].get("minAvailable").is_none(), "never blocks");
    assert_eq!(pdb["metadata"]["namespace"], "envoy-gateway-system");
    let labels = &eg_deployment(eg_release())["spec"]["template"]["metadata"]["labels"];
    let mut want = labels.clone();
    let gw = &kit().policy()["spec"]["targetRefs"][0];
    want["gateway.envoyproxy.io/owning-gateway-name"] = gw["name"].clone();
    want["gateway.envoyproxy.io/owning-gateway-namespace"] =
        kit().policy()["metadata"]["namespace"].clone();
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], want);
    let (_dir, path) = temp_file("eg-pdb", "pdb.yaml", &pdb.to_string());
    let (ok, text) = kubernetes_validate(&path);
    assert!(ok, "{text}");
}

/// Without image volumes (the `without-image-volumes` component): an emptyDir that an init
/// container, EG's own `initContainers` field, fills from the module image itself (its entry
/// point `/copy-module`, which tests/dist.rs runs from the image `make dist` writes); it runs
/// within the restricted Pod Security Standard.
#[test]
fn without_image_volumes_an_init_container_copies_the_module() {
    for release in EG_RELEASES {
        let mut components: Vec<&str> = components_for(release).to_vec();
        components.push("without-image-volumes");
        let k = kit_with(&components);
        let d = kit_deployment_of(release, &k);
        let (_dir, path) = temp_file("eg-kit", "deployment.yaml", &d.to_string());
        let (ok, text) = kubernetes_validate(&path);
        assert!(ok, "{release}: {text}");
        let pod = &d["spec"]["template"]["spec"];
        let volume = named(&pod["volumes"], "graceful-drain-module").unwrap();
        assert_eq!(volume["emptyDir"], json!({}), "{volume}");
        let init = &items(&pod["initContainers"], "initContainers")[0];
        assert_eq!(init["volumeMounts"][0]["name"], "graceful-drain-module");
        assert_eq!(init["volumeMounts"][0]["mountPath"], POD_MODULE_DIR);
        let cmd: Vec<&str> = items(&init["command"], "command")
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cmd, ["/copy-module", POD_MODULE_DIR]);
        assert_eq!(
            init["image"],
            format!("graceful-drain:{}", env!("CARGO_PKG_VERSION")),
            "the module image, the one the image volume had"
        );
        // The restricted Pod Security Standard's rules for a container.
        let sc = &init["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        // The same identity as EG's containers (the emptyDir it writes, envoy reads).
        assert_eq!(
            sc["runAsUser"],
            container(&d, "envoy")["securityContext"]["runAsUser"]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// EG's bootstrap and EG's merge

/// The EG release whose bootstrap goes with the Envoy under test: EG 1.8 ships Envoy 1.38, EG 1.9
/// ships Envoy 1.39; no EG release ships 1.40, so on 1.40 the newest (1.9) is used.
fn eg_release() -> &'static str {
    match minor_of(&expected_envoy_version()).as_str() {
        "1.38" => "v1.8.3",
        "1.39" => "v1.9.0",
        other => {
            println!("Envoy {other}: no Envoy Gateway release ships it; using EG v1.9.0's");
            "v1.9.0"
        }
    }
}

/// EG's default bootstrap for `release`, as kubelet hands it to Envoy.
fn eg_bootstrap(release: &str) -> Value {
    container_bootstrap(&eg_deployment(release))
}

/// EG's `Merge` (internal/xds/bootstrap/util.go: both sides parsed as Bootstrap protos, then Go's
/// proto.Merge): set scalars replace, messages merge field by field, repeated fields append, maps
/// merge by key. On the JSON form of the kit's bootstrap (lists of listeners and extensions,
/// messages) that is: objects merge recursively, arrays concatenate, anything else replaces.
fn proto_merge(dst: &mut Value, src: &Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                match d.get_mut(k) {
                    Some(existing) => proto_merge(existing, v),
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(d), Value::Array(s)) => d.extend(s.iter().cloned()),
        (d, s) => *d = s.clone(),
    }
}

/// EG's checks of a user bootstrap (internal/xds/bootstrap/validate.go): `dynamic_resources` and
/// the `xds_cluster`'s load assignment exactly as in EG's default.
fn eg_validate(user: &Value, default: &Value) -> Result<(), String> {
    if user["dynamic_resources"].is_null()
        || user["dynamic_resources"] != default["dynamic_resources"]
    {
        return Err("dynamic_resources cannot be modified".into());
    }
    let xds = |b: &Value| {
        named(&b["static_resources"]["clusters"], "xds_cluster")
            .map(|c| c["load_assignment"].clone())
    };
    match xds(user) {
        Some(la) if Some(&la) == xds(default).as_ref() => Ok(()),
        _ => Err("xds_cluster's loadAssignment cannot be modified".into()),
    }
}

fn merged_bootstrap(release: &str) -> Value {
    let mut b = eg_bootstrap(release);
    proto_merge(&mut b, &kit().bootstrap_merge());
    b
}

/// `envoy --mode validate` with the envoy container's own command line (EG's flags, its log
/// level warn included, and `bootstrap` as `--config-yaml`), the xDS client certificate files EG
/// mounts at /sds replaced by empty stand-ins.
fn validate(bootstrap: &Value, modules: &Path) -> (bool, String) {
    let dir = TempDir::new("eg-validate");
    let mut text = bootstrap.to_string();
    for f in ["xds-certificate.json", "xds-trusted-ca.json"] {
        let from = format!("/sds/{f}");
        assert!(text.contains(&from), "EG's bootstrap reads {from}");
        let to = dir.0.join(f);
        std::fs::write(&to, r#"{"resources": []}"#).unwrap();
        text = text.replace(&from, &to.display().to_string());
    }
    let b: Value = serde_json::from_str(&text).unwrap();
    run(Command::new(envoy_bin())
        .args(["--mode", "validate"])
        .args(eg_envoy_args(&kit_deployment(), &b))
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", modules)
        .env_remove("LD_LIBRARY_PATH"))
}

#[test]
fn merged_bootstrap_keeps_what_eg_requires_and_validates() {
    let release = eg_release();
    let default = eg_bootstrap(release);
    let merged = merged_bootstrap(release);
    // What the kit's Deployment gives Envoy.
    assert_eq!(container_bootstrap(&kit_deployment()), merged);
    // EG accepts it ...
    eg_validate(&merged, &default).unwrap();
    // ... and its checks can fail: a merge that touches xDS is refused.
    let mut bad = merged.clone();
    proto_merge(
        &mut bad,
        &json!({"dynamic_resources": {"lds_config": {"initial_fetch_timeout": "1s"}}}),
    );
    assert!(eg_validate(&bad, &default).is_err());
    // The merge only adds: EG's own sections, listeners and clusters are unchanged, and the
    // additions are the drain engine and the control listener.
    for (key, value) in default.as_object().unwrap() {
        if key != "static_resources" {
            assert_eq!(&merged[key], value, "{key} changed");
        }
    }
    for kind in ["listeners", "clusters"] {
        let mine = items(&merged["static_resources"][kind], kind);
        let eg = items(&default["static_resources"][kind], kind);
        assert_eq!(&mine[..eg.len()], &eg[..], "EG's {kind} changed");
    }
    let added: Vec<&Value> = items(&merged["static_resources"]["listeners"], "listeners")
        [items(&default["static_resources"]["listeners"], "listeners").len()..]
        .iter()
        .map(|l| &l["name"])
        .collect();
    assert_eq!(added, [&json!(CONTROL_LISTENER)]);
    let new_keys: Vec<&String> = merged
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| default.get(k.as_str()).is_none())
        .collect();
    assert_eq!(new_keys, ["bootstrap_extensions"]);

    // Envoy (the version EG ships) loads it with the module.
    let (ok, log) = validate(&merged, module_dir());
    assert!(
        ok && log.contains("OK"),
        "EG {release} bootstrap + kit:\n{log}"
    );
    // At EG's log level (warn) the module still says it loaded, which version, into which
    // Envoy (lifecycle_log_level), and Envoy itself prints nothing below warn.
    assert!(
        log.contains("][warning][dynamic_modules]")
            && log.contains("graceful_drain: drain engine loaded (graceful_drain "),
        "{log}"
    );
    assert!(!log.contains("][info]["), "{log}");
    assert!(!log.contains("envoy_bug"), "{log}");
    // EG's own bootstrap validates the same way (the stand-ins are not what makes it pass) ...
    let (ok, log) = validate(&default, module_dir());
    assert!(ok, "EG {release} bootstrap alone:\n{log}");
    // ... and the merged one needs the module: EG's stock image (no module) would refuse it.
    let empty = TempDir::new("no-module");
    let (ok, log) = validate(&merged, &empty.0);
    assert!(!ok, "validated without the module:\n{log}");
}

// ---------------------------------------------------------------------------------------------
// xDS as EG builds it, served from files

/// What the Gateway's routes look like to EG: which HTTPRoutes the EnvoyExtensionPolicy covers.
#[derive(Clone, Copy, PartialEq)]
enum Policy {
    /// No kit at all: EG's stock bootstrap and listeners.
    None,
    /// The kit's two resources, its policy targeting the Gateway: every route (filter mode).
    Gateway,
    /// The kit's two resources, its policy retargeted to the HTTPRoute `covered` only.
    CoveredRouteOnly,
    /// The kit with its connection-mode component: the EnvoyPatchPolicy's network filter follows
    /// every request; no policy, so no HTTP filter on any route.
    ConnectionMode,
}

/// The HTTP filter EG builds from the policy's `dynamicModule[0]` (internal/xds/translator/
/// dynamicmodule.go): one per policy entry in the listener's HTTP connection manager, disabled,
/// named `envoy.filters.http.dynamic_modules/envoyextensionpolicy/<ns>/<policy>/dynamic-module/<i>`,
/// the module by its allowlisted path, the config as JSON in a StringValue.
fn eg_dynamic_module_filter() -> (String, Value) {
    let policy = kit().policy();
    let dm = &policy["spec"]["dynamicModule"][0];
    let entry = named(
        &kit().envoy_proxy()["spec"]["dynamicModules"],
        dm["name"].as_str().unwrap(),
    )
    .unwrap();
    let path = entry["source"]["local"]["path"]
        .as_str()
        .unwrap()
        .replace(POD_MODULE_DIR, &module_dir().display().to_string());
    let name = format!(
        "envoy.filters.http.dynamic_modules/envoyextensionpolicy/{}/{}/dynamic-module/0",
        policy["metadata"]["namespace"].as_str().unwrap(),
        policy["metadata"]["name"].as_str().unwrap()
    );
    let filter = json!({
        "name": name,
        "disabled": true,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
            "dynamic_module_config": {"do_not_close": entry["doNotClose"], "module": {"local": {"filename": path}}},
            "filter_name": dm["filterName"],
            "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": dm["config"].to_string()}
        }
    });
    (name, filter)
}

/// Apply one EnvoyPatchPolicy operation (`add` at a JSON pointer, the kit's only one) to an xDS
/// resource, as EG does (RFC 6902 on the resource's JSON with proto field names).
fn json_patch_add(doc: &mut Value, path: &str, value: Value) {
    let (parent, last) = path.rsplit_once('/').expect("a JSON pointer");
    let target = doc
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("{parent} not in the resource"));
    match target {
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse().expect("an index")
            };
            a.insert(i, value);
        }
        Value::Object(o) => {
            o.insert(last.to_string(), value);
        }
        _ => panic!("{parent} is neither a list nor an object"),
    }
}

/// EG's readiness listener as EG's xDS translator builds it (internal/xds/translator/
/// listener_ready.go; its test's expected output, the fixture ready.listeners.yaml of the release,
/// as it is): Envoy's health_check filter (pass_through_mode false) answers /ready from Envoy's
/// health (200 while serving, 503 once /healthcheck/fail was posted), every other path 500. Only
/// its address moves: EG's test IR puts it on 0.0.0.0:19001 (19003, `EnvoyReadinessPort`, in a
/// real proxy), here a free loopback port.
fn eg_ready_listener(port: u16) -> Value {
    let file = common::platforms()
        .join(FIXTURES)
        .join(eg_release())
        .join("ready.listeners.yaml");
    let mut listeners = yaml(&std::fs::read_to_string(file).unwrap());
    let mut l = listeners[0].take();
    assert_eq!(listeners.as_array().map(Vec::len), Some(1));
    assert_eq!(l["name"], "envoy-gateway-proxy-ready-0.0.0.0-19001");
    relocate_camel(&mut l, 19001, port);
    // The name EG gives it in a real proxy (the shutdown-manager and the kit's
    // ignored_stat_prefixes go by its stat prefix, eg-ready-http, which stays).
    l["name"] = json!(READY_LISTENER);
    l["@type"] = json!(LISTENER);
    l
}

/// [`relocate`] for a listener in EG's testdata form (protobuf JSON names: `socketAddress`,
/// `portValue`).
fn relocate_camel(listener: &mut Value, pod_port: u64, port: u16) {
    let sa = &mut listener["address"]["socketAddress"];
    assert_eq!(sa["portValue"].as_u64(), Some(pod_port));
    assert_eq!(sa["address"], "0.0.0.0");
    sa["address"] = json!("127.0.0.1");
    sa["portValue"] = json!(port);
}

/// The HTTPRoutes of the test Gateway: `covered` (the policy's target in the mixed case) and
/// `uncovered`, both to the test upstream.
const ROUTES: [&str; 2] = ["covered", "uncovered"];
/// EG's buffer filter on the Gateway's listener, and its limit.
const BUFFER_FILTER: &str = "envoy.filters.http.buffer/backendtrafficpolicy/default/buffer";
const BUFFER_LIMIT: u64 = 1024;

/// A covered route's POST with a body twice EG's buffer filter's limit, on a connection of its
/// own: the answer as the client reads it.
async fn upload_over_the_buffer_limit(http: u16) -> clients::Answer {
    let big = format!(
        "POST /covered/upload HTTP/1.1\r\nhost: x\r\ncontent-length: {n}\r\n\r\n{}",
        "x".repeat(2 * BUFFER_LIMIT as usize),
        n = 2 * BUFFER_LIMIT
    );
    clients::exchange_at("127.0.0.1", http, big.as_bytes())
        .await
        .unwrap()
}

/// Write LDS, RDS, CDS and EDS files shaped as EG's translator writes its resources for the
/// Gateway `default/eg` with one HTTP listener; returns the LDS and CDS paths.
fn write_eg_xds(
    run: &Launch,
    policy: Policy,
    http: u16,
    ready: u16,
    upstream: u16,
) -> (PathBuf, PathBuf) {
    let write = |name: &str, resources: Value| run.xds_file(name, resources);
    let module_filter =
        matches!(policy, Policy::Gateway | Policy::CoveredRouteOnly).then(eg_dynamic_module_filter);
    let routes: Vec<Value> = ROUTES
        .iter()
        .map(|r| {
            let mut route = json!({
                "name": format!("httproute/default/{r}/rule/0/match/0/*"),
                "match": {"path_separated_prefix": format!("/{r}")},
                "route": {"cluster": format!("httproute/default/{r}/rule/0"), "upgrade_configs": [{"upgrade_type": "websocket"}]}
            });
            let covered = match policy {
                Policy::None | Policy::ConnectionMode => false,
                Policy::Gateway => true,
                Policy::CoveredRouteOnly => *r == "covered",
            };
            if let (true, Some((name, _))) = (covered, &module_filter) {
                // EG enables the disabled filter on each route the policy covers.
                route["typed_per_filter_config"] = json!({name: {
                    "@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "config": {}
                }});
            }
            route
        })
        .collect();
    let rds = write(
        "rds.json",
        json!([{
            "@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            "name": GATEWAY_LISTENER,
            "ignore_port_in_host_matching": true,
            "virtual_hosts": [{"name": format!("{GATEWAY_LISTENER}/*"), "domains": ["*"], "routes": routes}]
        }]),
    );
    // The policy's filter, a request buffer (a BackendTrafficPolicy's `requestBuffer`: EG's
    // buffer filter, which answers 413 to a body over its limit) and the router, in the order EG
    // gives them (with the kit's filterOrder when the kit is applied).
    let mut http_filters: Vec<Value> = module_filter.iter().map(|(_, f)| f.clone()).collect();
    http_filters.push(json!({"name": BUFFER_FILTER, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer",
        "max_request_bytes": BUFFER_LIMIT
    }}));
    http_filters.push(json!({"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER, "suppress_envoy_headers": true}}));
    let order = match policy {
        Policy::None => json!([]),
        _ => kit().envoy_proxy()["spec"]["filterOrder"].clone(),
    };
    let names: Vec<String> = http_filters
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let sorted = eg_sort(eg_release(), &names, &order);
    http_filters.sort_by_key(|f| sorted.iter().position(|n| f["name"] == n.as_str()).unwrap());
    let mut listener = json!({
        "@type": LISTENER,
        "name": GATEWAY_LISTENER,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": http}},
        "default_filter_chain": {"name": GATEWAY_LISTENER, "filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM,
                "stat_prefix": HTTP_STAT_PREFIX,
                "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
                "http2_protocol_options": {"initial_connection_window_size": 1048576, "initial_stream_window_size": 65536, "max_concurrent_streams": 100},
                "merge_slashes": true,
                "normalize_path": true,
                "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
                "server_header_transformation": "PASS_THROUGH",
                "use_remote_address": true,
                "rds": {"route_config_name": GATEWAY_LISTENER, "config_source": path_source(&rds)},
                "http_filters": http_filters
            }
        }]},
        "max_connections_to_accept_per_socket_event": 1,
        "per_connection_buffer_limit_bytes": 32768
    });
    if policy == Policy::ConnectionMode {
        // The EnvoyPatchPolicy's operations for this listener.
        let patches = &kit_connection_mode().patch_policy()["spec"]["jsonPatches"];
        for p in items(patches, "jsonPatches") {
            if p["type"] == LISTENER && p["name"] == GATEWAY_LISTENER {
                assert_eq!(p["operation"]["op"], "add");
                json_patch_add(
                    &mut listener,
                    p["operation"]["path"].as_str().unwrap(),
                    p["operation"]["value"].clone(),
                );
            }
        }
    }
    let lds = write("lds.json", json!([listener, eg_ready_listener(ready)]));
    let clusters: Vec<Value> = ROUTES
        .iter()
        .map(|r| {
            let name = format!("httproute/default/{r}/rule/0");
            json!({
                "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                "name": name,
                "type": "STATIC",
                "connect_timeout": "10s",
                "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": upstream}}}}
                ]}]}
            })
        })
        .collect();
    let cds = write("cds.json", Value::Array(clusters));
    (lds, cds)
}

/// The ports of a running EG proxy under test (the pod's ports moved to free loopback ones).
struct Eg {
    admin: u16,
    /// The Gateway listener `default/eg/http` (10080 in the pod).
    http: u16,
    /// EG's readiness listener (19003 in the pod).
    ready: u16,
    /// EG's stats listener (19001 in the pod).
    stats: u16,
}

/// The kit's control listener (19010 in the pod) is there when the kit is applied.
type Gateway = common::gateway::Gateway<Eg>;

fn relocate(listener_or_endpoint: &mut Value, pod_port: u64, port: u16) {
    let sa = &mut listener_or_endpoint["address"]["socket_address"];
    assert_eq!(sa["port_value"].as_u64(), Some(pod_port));
    sa["address"] = json!("127.0.0.1");
    sa["port_value"] = json!(port);
}

/// Run EG's bootstrap (with the kit's merge unless `policy` is `None`) as EG's pod would, with
/// what only a cluster provides replaced by local stand-ins, each checked to be EG's first: ADS
/// from EG by xDS files, the pod's ports by free loopback ports, the xDS cluster (unused without
/// ADS) by a loopback address without its TLS certificates, and (with the kit) the drain settings
/// by `settings` when given.
async fn start_gateway(policy: Policy, settings: Option<Settings>, upstream: u16) -> Gateway {
    start_gateway_with(policy, settings, upstream, |_| {}).await
}

/// [`start_gateway`] with the merged bootstrap changed by `edit` first (a test's variation).
async fn start_gateway_with(
    policy: Policy,
    settings: Option<Settings>,
    upstream: u16,
    edit: impl FnOnce(&mut Value),
) -> Gateway {
    start_gateway_as(policy, settings, upstream, edit, true).await
}

/// [`start_gateway_with`], `configured` or not yet: before EG pushed its listeners (none in the
/// LDS file Envoy reads; [`Gateway::configure`] pushes them).
async fn start_gateway_as(
    policy: Policy,
    settings: Option<Settings>,
    upstream: u16,
    edit: impl FnOnce(&mut Value),
    configured: bool,
) -> Gateway {
    let release = eg_release();
    let mut b = if policy == Policy::None {
        eg_bootstrap(release)
    } else {
        merged_bootstrap(release)
    };
    edit(&mut b);
    let mut run = Launch::new("eg", 6);
    let p = run.ports();
    let (admin, stats, ready, http, control, unused) = (p[0], p[1], p[2], p[3], p[4], p[5]);
    let (lds, cds) = write_eg_xds(&run, policy, http, ready, upstream);
    run.hold_back_listeners_unless(configured, &lds);
    let ads = &b["dynamic_resources"];
    assert_eq!(
        ads["ads_config"]["grpc_services"][0]["envoy_grpc"]["cluster_name"],
        "xds_cluster"
    );
    assert!(ads["lds_config"]["ads"].is_object() && ads["cds_config"]["ads"].is_object());
    b["dynamic_resources"] =
        json!({"lds_config": path_source(&lds), "cds_config": path_source(&cds)});
    let admin_sa = &b["admin"]["address"]["socket_address"];
    assert_eq!(
        (
            admin_sa["address"].as_str(),
            admin_sa["port_value"].as_u64()
        ),
        (Some(EG_ADMIN.0), Some(EG_ADMIN.1))
    );
    b["admin"]["address"]["socket_address"]["port_value"] = json!(admin);
    let eds = run.dir().join("eds.json");
    std::fs::write(
        &eds,
        json!({"resources": [{"@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", "cluster_name": INFRA_NAME, "endpoints": []}]}).to_string(),
    )
    .unwrap();
    for c in b["static_resources"]["clusters"].as_array_mut().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        match name.as_str() {
            "prometheus_stats" => relocate(
                &mut c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"],
                EG_ADMIN.1,
                admin,
            ),
            "xds_cluster" => {
                let ep = &mut c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
                ep["address"]["socket_address"] =
                    json!({"address": "127.0.0.1", "port_value": unused});
                assert!(c
                    .as_object_mut()
                    .unwrap()
                    .remove("transport_socket")
                    .is_some());
            }
            INFRA_NAME => {
                assert!(
                    c["eds_config"].is_null()
                        && c["eds_cluster_config"]["eds_config"]["ads"].is_object()
                );
                c["eds_cluster_config"]["eds_config"] = path_source(&eds);
            }
            other => panic!("unexpected cluster {other} in EG's bootstrap"),
        }
    }
    let mut has_control = false;
    // The control listener on `[::1]` (else where a test's `edit` bound it: the harness's own
    // checks through it are the test's then).
    let mut control_on_loopback = true;
    for l in b["static_resources"]["listeners"].as_array_mut().unwrap() {
        match l["name"].as_str().unwrap() {
            STATS_LISTENER => relocate(l, 19001, stats),
            CONTROL_LISTENER => {
                // IPv4 in the pod; IPv6 loopback here (the dual-stack component's family; the
                // IPv4 bind: tests/ip_family.rs).
                // (A test's `edit` may have bound it to another address of the machine: kept.)
                let sa = &mut l["address"]["socket_address"];
                assert_eq!(sa["port_value"], json!(19010));
                let kept = sa["address"].as_str().unwrap().to_string();
                control_on_loopback = kept == "0.0.0.0";
                let at = if control_on_loopback {
                    "::1".to_string()
                } else {
                    kept
                };
                *sa = json!({"address": at, "port_value": control});
                // ... with the dual-stack component's rule, /drain from ::1 too (unless the
                // test narrowed the kit's rule).
                drain_also_from_ipv6_loopback(l, None);
                has_control = true;
            }
            other => panic!("unexpected static listener {other}"),
        }
    }
    if b.get("bootstrap_extensions").is_some() {
        let mut s = module_settings(&b);
        if let Some(t) = &settings {
            short_drain(&mut s, t.min_drain, t.quiet, t.timeout);
            // Below the short min_drain_duration; the kit's own delay is run by
            // `readiness_waits_for_the_load_balancer_then_follows_the_drain`.
            s["readiness_failure_delay"] = json!("0s");
        }
        assert_eq!(
            s["admin_address"],
            json!(["127.0.0.1:19000", "[::1]:19000"])
        );
        s["admin_address"] = json!([format!("127.0.0.1:{admin}"), format!("[::1]:{admin}")]);
        b["bootstrap_extensions"][0]["typed_config"]["extension_config"]["value"] =
            json!(s.to_string());
    }
    // The envoy container's own command line (EG's flags, --log-level warn included), with this
    // bootstrap as its --config-yaml.
    let deployment = if policy == Policy::None {
        eg_deployment(eg_release())
    } else {
        kit_deployment()
    };
    let args = eg_envoy_args(&deployment, &b);
    let ports = [admin, http, if has_control { control } else { ready }];
    let mut run = run.args(args).platform_log_level().guard_ports(ports);
    if has_control {
        run = run.control(control, control_on_loopback);
        if control_on_loopback {
            // The start-time check found EG's admin (its log line is info: below EG's level).
            run = run.admin_found_in_status();
        }
    }
    run.serving("EG's xDS listeners serving", http, "/covered/ok", 200)
        .serving("EG's xDS listeners serving", http, "/uncovered/ok", 200)
        .serving("EG's xDS listeners serving", ready, "/ready", 200)
        .start(Eg {
            admin,
            http,
            ready,
            stats,
        })
        .await
}

async fn status(port: u16, path: &str) -> Option<u16> {
    clients::get(port, path).await.ok().map(|r| r.status)
}

/// [`status`] on the control listener, which is on `[::1]` here.
async fn status6(port: u16, path: &str) -> Option<u16> {
    clients::status_v6(port, path).await.ok()
}

/// An HTTP/1.1 and an HTTP/2 connection, each idle in keep-alive after one request.
async fn idle_connections(port: u16) -> (H1Conn, H2Conn) {
    let mut h1 = H1Conn::connect(port).await.unwrap();
    assert_eq!(
        h1.send("GET", "/covered/ok", &[]).await.unwrap().status,
        200
    );
    let mut h2 = H2Conn::connect(port).await.unwrap();
    assert_eq!(h2.send("/covered/ok", &[]).await.unwrap().status, 200);
    (h1, h2)
}

// ---------------------------------------------------------------------------------------------
// EG's shutdown-manager, reproduced

/// Envoy Gateway's shutdown sequence as its shutdown-manager sidecar runs it from its preStop hook
/// (`envoy-gateway envoy shutdown`; envoyproxy/gateway internal/cmd/envoy/shutdown_manager.go,
/// `Shutdown`), written here from that source: POST `/healthcheck/fail` to the admin (EG 1.9 with
/// `healthCheckFailureDelay`: POST `/drain_listeners?graceful&skip_exit` first and
/// `/healthcheck/fail` once the delay has passed), then every second read the admin's
/// `listener.*.downstream_cx_active` gauges, summed without the admin's, the stats and readiness
/// listeners' and the per-worker ones (EG's regex `admin|19001|19003|worker`); done once
/// `minDrainDuration` has passed and the sum is at most `exitAtConnections` (0), or at
/// `drainTimeout`.
struct EgShutdownManager {
    admin: u16,
    min_drain_duration: Duration,
    drain_timeout: Duration,
    health_check_failure_delay: Option<Duration>,
    /// EG's exclusions with the test's ports for 19001 and 19003.
    excluded: [String; 4],
}

#[derive(Debug)]
struct EgShutdownOutcome {
    /// false: it gave up at `drainTimeout`.
    completed: bool,
    elapsed: Duration,
    /// Each poll's connection count (`None`: the admin did not answer).
    counts: Vec<Option<i64>>,
}

impl EgShutdownManager {
    fn new(gw: &Gateway, min_drain_duration: Duration, drain_timeout: Duration) -> Self {
        EgShutdownManager {
            admin: gw.admin,
            min_drain_duration,
            drain_timeout,
            health_check_failure_delay: None,
            excluded: [
                "admin".into(),
                gw.stats.to_string(),
                gw.ready.to_string(),
                "worker".into(),
            ],
        }
    }

    async fn post(&self, path: &str) {
        // EG logs a failed call and goes on; so does this.
        let r = clients::request(self.admin, "POST", path, &[]).await;
        if !matches!(&r, Ok(r) if r.status == 200) {
            eprintln!("shutdown manager: POST {path}: {r:?}");
        }
    }

    async fn total_connections(&self) -> Option<i64> {
        let filter = "%5Elistener%5C..%2A%5C.downstream_cx_active%24";
        let r = clients::get(self.admin, &format!("/stats?filter={filter}&format=json"))
            .await
            .ok()?;
        let stats: Value = serde_json::from_slice(&r.body).ok()?;
        let stats = stats["stats"].as_array().filter(|s| !s.is_empty())?;
        Some(
            stats
                .iter()
                .filter(|s| {
                    let name = s["name"].as_str().unwrap_or_default();
                    !self.excluded.iter().any(|e| name.contains(e.as_str()))
                })
                .map(|s| s["value"].as_i64().unwrap_or(0))
                .sum(),
        )
    }

    async fn run(&self) -> EgShutdownOutcome {
        let start = Instant::now();
        let mut health_failed = false;
        match self.health_check_failure_delay {
            None => {
                self.post("/healthcheck/fail").await;
                health_failed = true;
            }
            Some(_) => self.post("/drain_listeners?graceful&skip_exit").await,
        }
        let mut counts = Vec::new();
        let mut allowed_to_exit = false;
        loop {
            let elapsed = start.elapsed();
            if let Some(delay) = self.health_check_failure_delay {
                if !health_failed && elapsed >= delay {
                    self.post("/healthcheck/fail").await;
                    health_failed = true;
                }
            }
            let count = self.total_connections().await;
            counts.push(count);
            if elapsed > self.min_drain_duration {
                allowed_to_exit = true;
            }
            if elapsed > self.drain_timeout {
                return EgShutdownOutcome {
                    completed: false,
                    elapsed,
                    counts,
                };
            }
            if allowed_to_exit && count.is_some_and(|c| c <= 0) {
                return EgShutdownOutcome {
                    completed: true,
                    elapsed,
                    counts,
                };
            }
            // EG's own poll interval: the behaviour under test, not a synchronisation.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Drains

/// Drain settings the run tests put in place of the kit's (everything else is the kit's).
const FAST: Settings = Settings::new("300ms", "200ms", "20s");
/// Longer than the network filter needs to close an HTTP/1.1 connection that was busy just before
/// the drain started (idle_after, then the next check idle_close_grace later).
const SLOW: &str = "/covered/delay/4000";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kit_drains_an_eg_gateway_without_losing_a_request() {
    kit_drains_an_eg_gateway(Policy::ConnectionMode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kit_in_filter_mode_drains_an_eg_gateway_without_losing_a_request() {
    kit_drains_an_eg_gateway(Policy::Gateway).await;
}

/// The readiness check the kit leaves in place (EG's own: `/ready` on 19003, EG's readiness
/// listener, which EG pushes, answered by Envoy's health_check filter), run as kubelet runs it
/// on the kit's Envoy: before EG configured it, not Ready (no listener on 19003, while the kit's
/// static control listener would already answer 200); once EG pushed its listeners, 200; at the
/// drain start (SIGTERM: the module fails Envoy's health checks), 503 at once, never a refused
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eg_s_readiness_check_follows_eg_and_the_drain() {
    let (kit, stock) = (kit_deployment(), eg_deployment(eg_release()));
    let probe = &container(&kit, "envoy")["readinessProbe"];
    assert_eq!(probe, &container(&stock, "envoy")["readinessProbe"]);
    assert_eq!(
        (&probe["httpGet"]["path"], &probe["httpGet"]["port"]),
        (&json!("/ready"), &json!(19003)),
        "EG's check on its readiness listener (the gateway's `ready` port here)"
    );
    let upstream = Upstream::start().await;
    let mut gw = start_gateway_as(Policy::Gateway, Some(FAST), upstream.port, |_| {}, false).await;
    let control = gw.control.unwrap();
    // (a) Envoy runs (the admin LIVE, the control listener answers), unconfigured.
    assert_eq!(status(gw.admin, "/ready").await, Some(200), "Envoy LIVE");
    assert_eq!(status6(control, "/ready").await, Some(200));
    let before = status(gw.ready, "/ready").await;
    assert!(
        !before.is_some_and(|s| (200..300).contains(&s)),
        "Ready before EG configured Envoy: {before:?}"
    );
    // (b) EG's push.
    gw.configure();
    eventually("EG's check 200", Duration::from_secs(10), || async {
        (status(gw.ready, "/ready").await == Some(200)).then_some(())
    })
    .await;
    // (c) The drain start.
    let sigterm = Instant::now();
    gw.envoy.sigterm();
    let after = clients::readiness_turns_503("EG", sigterm, || status(gw.ready, "/ready")).await;
    eprintln!("EG's readiness check 503 {after:?} after the SIGTERM");
    assert_eq!(status6(control, "/drain/status").await, Some(200));
    gw.envoy.wait_exit(Duration::from_secs(15)).await;
}

/// The kit's pod stopped with requests in flight on both protocols and late requests during the
/// drain: in connection mode (the network filter follows every request; idle keep-alive
/// connections are told too) or with the kit's two resources alone (the policy's HTTP filter on
/// every route; idle connections hear nothing until Envoy exits, see docs/envoy-gateway.md).
async fn kit_drains_an_eg_gateway(policy: Policy) {
    let connection_mode = policy == Policy::ConnectionMode;
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        ports: Eg { http, ready, .. },
        control,
        ..
    } = start_gateway(policy, Some(FAST), upstream.port).await;
    let control = control.unwrap();
    assert_eq!(status6(control, "/ready").await, Some(200));
    assert_eq!(
        status(ready, "/ready").await,
        Some(200),
        "EG's readiness probe"
    );

    // In flight at the SIGTERM: two HTTP/1.1 requests and two HTTP/2 streams on the Gateway's
    // route; plus (connection mode) an HTTP/1.1 and an HTTP/2 connection idle in keep-alive,
    // told while Envoy still serves the requests in flight (the EnvoyPatchPolicy's network
    // filter: HTTP/2 GOAWAY at once, HTTP/1.1 a clean close at the first check where it has been
    // idle for idle_after; stock Envoy closes them only at exit). Counted by the network filter
    // from the bytes, or by the policy's filter (disabled in the HCM, enabled on the route).
    let kit = scenario::Kit {
        name: if connection_mode {
            "EG, connection mode"
        } else {
            "EG, the policy's filter"
        },
        rules: FAST.rules(),
        slow: Slow {
            path: SLOW,
            headers: &[],
        },
        prefix: "/covered",
        http1: vec![http, http],
        http1_told: false,
        http2: http,
        http2_streams: 2,
        // The busy connection has its GOAWAY at the drain start (the module's, not Envoy's with
        // a response): no new stream on it.
        late_http2: false,
        // A late request (a load balancer not yet updated) is served and told to go.
        late_http1: Some(LateHttp1::Fresh(http)),
        idle: connection_mode.then_some(Idle {
            http1: Some(http),
            http2: http,
            told: true,
        }),
        in_flight: InFlight::Module,
        // EG's readiness listener turns 503 too: the drain engine failed Envoy's health checks.
        // The liveness probe keeps passing: a draining Envoy is not restarted.
        ready: Ready::Probes {
            control,
            platform: ready,
        },
    };
    let mut drain = Drain::in_flight(&envoy, kit).await;

    // EG's buffer filter answers an over-limit body 413 itself.
    let a = upload_over_the_buffer_limit(http).await;
    assert_eq!(a.status, 413, "{}", a.head);
    // Kubelet: no preStop hook on the envoy container any more, so SIGTERM at once.
    drain.sigterm(&mut envoy).await;
    // A late request EG's buffer filter answers itself (413: its body is over the limit) is seen
    // by the module too: the network filter sees every exchange, the HTTP filter runs first (the
    // kit's filterOrder).
    let served = envoy
        .stat("graceful_drain.requests_served_while_draining")
        .await
        .unwrap();
    let a = upload_over_the_buffer_limit(http).await;
    assert_eq!(a.status, 413, "{}", a.head);
    assert!(
        a.head.to_ascii_lowercase().contains("connection: close"),
        "{}",
        a.head
    );
    drain.started(Instant::now());
    assert_eq!(
        envoy
            .stat("graceful_drain.requests_served_while_draining")
            .await,
        Some(served + 1),
        "the 413 was not seen by the module"
    );
    // Stats: every one is the bootstrap extension's, under graceful_drain.* (what the kit's
    // dashboard and alerts read), though EG writes the policy's filter without a namespace.
    assert_eq!(envoy.stat("graceful_drain.drains_started").await, Some(1));
    eventually("the sent-away counters", Duration::from_secs(3), || async {
        let h1 = envoy
            .stat("graceful_drain.connections_sent_away_http1")
            .await;
        let h2 = envoy
            .stat("graceful_drain.connections_sent_away_http2")
            .await;
        (h1 >= Some(2) && h2 == Some(1)).then_some(())
    })
    .await;
    let scrape = clients::get(envoy.admin, "/stats/prometheus")
        .await
        .unwrap()
        .text();
    assert!(
        !scrape.contains(&format!("envoy_{EG_FILTER_STATS}_")),
        "a stat outside graceful_drain.*:\n{scrape}"
    );
    if connection_mode {
        assert_eq!(
            envoy
                .stat("graceful_drain.idle_connections_told_http2")
                .await,
            Some(1)
        );
    }
    drain.assert_still_serving(&mut envoy);
    // Not one request lost; the exit follows the work, well before drain_timeout (20s).
    drain.finish(&mut envoy).await;
    // At EG's log level (warn): the drain's start and outcome are in the log
    // (lifecycle_log_level), and nothing of Envoy's below warn.
    let log = envoy.log();
    for line in [
        "graceful_drain: drain started (trigger=sigterm",
        "graceful_drain: drain completed in ",
    ] {
        assert!(log.contains(line), "{line} not in:\n{log}");
    }
    assert!(!log.contains("][info]["), "{log}");
}

/// The kit's pod stopping with its own drain settings, as kubelet stops it (SIGTERM to envoy; no
/// preStop hook on either container, so EG's shutdown-manager posts nothing): connections are
/// told to go away at once (the idle ones closed / sent GOAWAY, the busy one's answer carries
/// `connection: close`), while readiness, EG's `/ready` (the probe) and the control listener's,
/// stays 200 for `readiness_failure_delay`, so that a load balancer behind EG's `Local` Service
/// is still served while its health check notices (what EG 1.9's `healthCheckFailureDelay` is
/// for); then 503 within [`clients::READY_503_WITHIN`]; Envoy exits by the module's rules, at
/// least `min_drain_duration`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_waits_for_the_load_balancer_then_follows_the_drain() {
    let settings = module_settings(&kit().bootstrap_merge());
    let delay = duration(&settings["readiness_failure_delay"]);
    let min_drain = duration(&settings["min_drain_duration"]);
    assert!(
        delay >= Duration::from_secs(5) && delay < min_drain,
        "{settings}"
    );
    let d = kit_deployment();
    let sm = container(&d, "shutdown-manager");
    assert!(
        sm["lifecycle"].is_null(),
        "nothing else fails health checks"
    );
    let upstream = Upstream::start().await;
    let gw = start_gateway(Policy::ConnectionMode, None, upstream.port).await;
    let (idle_h1, mut idle_h2) = idle_connections(gw.http).await;
    let http = gw.http;
    let busy = tokio::spawn(async move { clients::get(http, "/covered/delay/1500").await });
    gw.envoy.wait_active(1).await;
    let Gateway {
        mut envoy,
        ports: Eg { ready, .. },
        control,
        ..
    } = gw;
    let control = control.unwrap();
    let t0 = Instant::now();
    envoy.sigterm();
    // Told at once, long before readiness fails.
    idle_h1.wait_closed(Duration::from_secs(3)).await.unwrap();
    let e = idle_h2.wait_goaway(Duration::from_secs(3)).await;
    assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR));
    let r = busy.await.unwrap().unwrap();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    // Still ready until the delay (polled up to 300 ms before it).
    let mut looks = 0;
    while t0.elapsed() + Duration::from_millis(300) < delay {
        assert_eq!(
            status(ready, "/ready").await,
            Some(200),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(status6(control, "/ready").await, Some(200));
        looks += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(looks > 10, "{looks}");
    let after = clients::readiness_turns_503("EG", t0 + delay, || status(ready, "/ready")).await;
    assert!(t0.elapsed() >= delay, "503 before readiness_failure_delay");
    eprintln!("EG's readiness 503 {after:?} after readiness_failure_delay");
    assert_eq!(
        status6(control, "/drain/status").await,
        Some(200),
        "liveness"
    );
    let (exit, at) = envoy.wait_exit(Duration::from_secs(30)).await;
    assert!(exit.success(), "{exit}");
    assert!(at >= t0 + min_drain, "{:?}", at - t0);
    assert!(
        envoy.log().contains("drain started (trigger=sigterm"),
        "{}",
        envoy.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_eg_shutdown_sequence_waits_for_idle_connections() {
    // What the kit changes, run the same way: EG's stock bootstrap and listeners, the same idle
    // connections, EG's sequence with a short minDrainDuration and drainTimeout (EG's defaults
    // are 10s and 60s). It never sees zero connections and gives up at its timeout.
    let upstream = Upstream::start().await;
    let gw = start_gateway(Policy::None, None, upstream.port).await;
    let (idle_h1, _idle_h2) = idle_connections(gw.http).await;
    let sm = EgShutdownManager::new(&gw, Duration::from_secs(1), Duration::from_secs(4));
    let outcome = sm.run().await;
    println!("EG's shutdown sequence, stock: {outcome:?}");
    assert!(!outcome.completed, "{outcome:?}");
    assert!(outcome.elapsed > sm.drain_timeout);
    assert!(
        outcome.counts.iter().all(|c| c.is_some_and(|c| c >= 2)),
        "{outcome:?}"
    );
    assert!(idle_h1.is_open(), "stock Envoy closed an idle connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_gateway_a_route_the_policy_does_not_cover_still_holds_the_drain() {
    two_routes_drain(Policy::CoveredRouteOnly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_connection_mode_every_route_is_counted_exactly() {
    two_routes_drain(Policy::ConnectionMode).await;
}

/// A long request on the route `uncovered`, a short one on `covered`, then SIGTERM. With the
/// policy retargeted to `covered` (`CoveredRouteOnly`), only the short one has the HTTP filter and
/// the long one is seen through Envoy's gauges; in connection mode no route has the HTTP filter
/// and the network filter counts both, whatever their route.
async fn two_routes_drain(policy: Policy) {
    let connection_mode = policy == Policy::ConnectionMode;
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        ports: Eg { http, .. },
        ..
    } = start_gateway(policy, Some(FAST), upstream.port).await;
    let covered = tokio::spawn(async move { clients::get(http, "/covered/delay/300").await });
    let uncovered = tokio::spawn(async move { clients::get(http, "/uncovered/delay/1500").await });
    // Envoy's own gauge has both; the module counts both in connection mode, else only the
    // covered one.
    let rq_active = format!("http.{HTTP_STAT_PREFIX}.downstream_rq_active");
    eventually("both in flight", Duration::from_secs(5), || async {
        (envoy.stat(&rq_active).await == Some(2)).then_some(())
    })
    .await;
    let counted = if connection_mode { 2 } else { 1 };
    envoy.wait_active(counted).await;

    let t0 = Instant::now();
    envoy.sigterm();
    // Covered: its connection is sent away on the response in flight.
    let r = covered.await.unwrap().unwrap();
    let covered_done = Instant::now();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    // After it: in connection mode the module's count is exact, the uncovered request alone;
    // else the filter's count is 0, but the drain engine still sees the uncovered request in
    // Envoy's gauges (bootstrap-only mode) and keeps the drain going.
    let s = eventually(
        "the uncovered request still counted",
        Duration::from_secs(3),
        || async {
            let s = envoy.drain_status().await;
            let seen = if connection_mode {
                s["active_requests"] == 1
            } else {
                s["active_requests"] == 0 && s["envoy_active_requests"] == 1
            };
            seen.then_some(s)
        },
    )
    .await;
    assert_eq!(s["state"], "draining", "{s}");
    if connection_mode {
        assert_eq!(
            envoy.stat("graceful_drain.connections_untracked").await,
            Some(0)
        );
    }
    // Uncovered: served in full; its connection is closed after it (the network filter's
    // `connection: close`, or Envoy's drain-close, which the drain start turned on through the
    // admin).
    let r = uncovered.await.unwrap().unwrap();
    let done = Instant::now();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    // Envoy waited for the uncovered request: counting only the HTTP filter's requests, the
    // drain would have completed at min_drain_duration or a quiet period after the covered
    // request, about a second before the uncovered one ended, cutting it.
    envoy
        .wait_clean_exit_after(done, Duration::from_secs(25), "the uncovered request")
        .await;
    let filter_only =
        (t0 + duration(&json!(FAST.min_drain))).max(covered_done + duration(&json!(FAST.quiet)));
    assert!(done > filter_only + Duration::from_millis(500));
}

/// `/drain` starts a drain, so the control listener admits it only from inside the pod
/// (loopback); the probes' paths answer anyone. The loopback call is shown on the kit as it is,
/// the refusal with the kit's rule narrowed to an address the test's client does not have (every
/// test connection is loopback), the rule otherwise unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_pod_itself_may_start_a_drain_through_the_control_listener() {
    let upstream = Upstream::start().await;
    let gw = start_gateway(Policy::Gateway, Some(FAST), upstream.port).await;
    let (status, body) = clients::request_v6(gw.control.unwrap(), "POST", "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(status, 202, "from inside the pod: {body}");
    drop(gw);

    let narrow = |b: &mut Value| {
        let control = b["static_resources"]["listeners"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|l| l["name"] == CONTROL_LISTENER)
            .unwrap();
        let rbac =
            &mut control["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0];
        assert_eq!(rbac["name"], "envoy.filters.http.rbac");
        let ids = &mut rbac["typed_config"]["rules"]["policies"]["drain-from-outside-the-pod"]
            ["principals"][0]["not_id"]["or_ids"]["ids"];
        assert_eq!(
            *ids,
            json!([{"direct_remote_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}}])
        );
        *ids = json!([{"direct_remote_ip": {"address_prefix": "127.0.0.2", "prefix_len": 32}}]);
    };
    let gw = start_gateway_with(Policy::Gateway, Some(FAST), upstream.port, narrow).await;
    clients::assert_drain_refused_probes_open(gw.control.unwrap()).await;
}

/// The kit's rule as shipped, from a real other host: a network namespace of the test's own
/// joined by a veth pair (its address, 10.200.x.2, is not loopback); the control listener is
/// bound to this side's address of the pair (in the pod it is `0.0.0.0`, every address). `/drain`
/// gets the rule's 403 and starts no drain; the probes' paths answer. Needs `ip` and root (CI
/// runs as root); skipped with a message otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shipped_rule_refuses_a_drain_from_another_host() {
    let Some(other) = common::netns::OtherHost::or_skip() else {
        return;
    };
    let upstream = Upstream::start().await;
    let here = other.here.to_string();
    let bind_here = |b: &mut Value| {
        let control = b["static_resources"]["listeners"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|l| l["name"] == CONTROL_LISTENER)
            .unwrap();
        control["address"]["socket_address"]["address"] = json!(here);
    };
    let gw = start_gateway_with(Policy::Gateway, Some(FAST), upstream.port, bind_here).await;
    common::netns::assert_drain_refused_from(
        &other,
        gw.control.unwrap(),
        &[
            ("POST", "/drain?wait=false"),
            ("GET", "/drain"),
            ("POST", "/drain"),
        ],
    )
    .await;
    assert!(
        !gw.envoy.log().contains("drain started"),
        "{}",
        gw.envoy.log()
    );
}
