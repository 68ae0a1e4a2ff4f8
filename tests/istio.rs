//! The Istio gateway kit (`k8s/istio`): values for Istio's `gateway` Helm chart, a bootstrap
//! override ConfigMap and an EnvoyFilter, checked against Istio 1.31's own files
//! (`../shared/platforms/istio`: the bootstrap Istio's test expects pilot-agent to write, the gateway
//! chart's values schema and Deployment template, the injector's gateway template, each checked
//! against the release). The values fit the chart and the pod they make validates; the override,
//! merged as pilot-agent merges it (`--config-yaml` over Istio's bootstrap), validates with the
//! module; and stock Envoy 1.40.0, run with pilot-agent's command line over that bootstrap, its
//! gateway listener shaped as istiod pushes it with the EnvoyFilter's patch applied (from files
//! instead of istiod), goes through the kit's stop: kubelet's preStop (`pilot-agent request POST
//! graceful_drain`, the admin on loopback), then pilot-agent's own stop reproduced from its
//! source. A request longer than Istio's 5 s is served, idle keep-alive connections are told, and
//! pilot-agent ends Envoy once the drain closed everything. Without the kit, the same stop cuts
//! that request at 5 s. Nothing outside the pod can start a drain: the control listener refuses
//! `/drain` to a caller on another host.
//!
//! Not here: Istio's own proxy binary (Envoy 1.39.1-dev with Istio's filters), istiod, the
//! injector and Helm; docs/istio.md says what that leaves untested.

use crate::common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{module_dir, validate_args, Envoy};
use common::gateway::{path_source, Gateway, Launch};
use common::json::{duration, module_settings, named};
use common::tools::{
    checked_fixture_sources, json_schema_validate, kubernetes_validate, kustomize, temp_file, yaml,
    yaml_docs,
};
use common::upstream::Upstream;
use common::{eventually, repo_root};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const KIT: &str = "k8s/istio";
/// The Istio release the kit is checked against (../shared/platforms/istio/SOURCES).
const RELEASE: &str = "1.31.0-rc.0";
/// A request longer than pilot-agent's default `terminationDrainDuration` (5 s).
const SLOW: &str = "/delay/6500";
/// The kit's preStop hook: pilot-agent's client of Envoy's admin (istio/istio
/// `pilot/cmd/pilot-agent/app/request.go`: `request <method> <path>` to `localhost:15000/<path>`,
/// the admin's port, or the admin's unix socket under ISTIO_ENVOY_ADMIN_TRANSPORT=UDS; its
/// `--debug-port` takes only Istio's own ports, never the kit's control listener).
const PRE_STOP: [&str; 4] = [
    "/usr/local/bin/pilot-agent",
    "request",
    "POST",
    "graceful_drain",
];
/// Istio's own bounds for a gateway's stop: the gateway chart's `terminationGracePeriodSeconds`
/// (30, `manifests/charts/gateway/values.yaml`) and pilot-agent's `terminationDrainDuration` (5 s,
/// `pkg/config/mesh` `DefaultProxyConfig`), after which stock pilot-agent kills Envoy.
const ISTIO_GRACE: Duration = Duration::from_secs(30);
const ISTIO_TERMINATION_DRAIN: Duration = Duration::from_secs(5);
/// Istio's readiness probe on the gateway's proxy (the injector's gateway template: `timeoutSeconds:
/// 3`, the rest from `global.proxy`: `readinessInitialDelaySeconds` 0, `readinessPeriodSeconds`
/// 15, `readinessFailureThreshold` 4, `manifests/charts/istio-control/istio-discovery/values.yaml`).
/// No liveness or startup probe on a gateway.
const ISTIO_READINESS: [(&str, u64); 4] = [
    ("initialDelaySeconds", 0),
    ("periodSeconds", 15),
    ("timeoutSeconds", 3),
    ("failureThreshold", 4),
];

fn fixture(name: &str) -> PathBuf {
    common::platforms().join("istio").join(RELEASE).join(name)
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn values() -> Value {
    yaml(&read(repo_root().join(KIT).join("values.yaml")))
}

/// The kit's manifests as `kubectl apply -k` renders them: the ConfigMap and the EnvoyFilter.
fn manifests() -> (Value, Value) {
    let docs = yaml_docs(&kustomize(&repo_root().join(KIT)));
    assert_eq!(docs.len(), 2, "{docs:?}");
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
            .clone()
    };
    (find("ConfigMap"), find("EnvoyFilter"))
}

/// The bootstrap override as pilot-agent hands it to Envoy (`readBootstrapToJSON`: the file,
/// YAML or JSON, as JSON).
fn override_json() -> Value {
    let (cm, _) = manifests();
    yaml(
        cm["data"]["custom_bootstrap.json"]
            .as_str()
            .expect("the key"),
    )
}

/// The EnvoyFilter's one patch: what istiod inserts before the HTTP connection manager.
fn network_filter_patch() -> Value {
    let (_, ef) = manifests();
    let p = &ef["spec"]["configPatches"][0];
    assert_eq!(p["applyTo"], "NETWORK_FILTER");
    assert_eq!(p["match"]["context"], "GATEWAY");
    assert_eq!(
        p["match"]["listener"]["filterChain"]["filter"]["name"],
        "envoy.filters.network.http_connection_manager"
    );
    assert_eq!(p["patch"]["operation"], "INSERT_BEFORE");
    p["patch"]["value"].clone()
}

/// pilot-agent's arguments to Envoy (istio/istio `pkg/envoy/proxy.go` `args`, gateway defaults:
/// ProxyConfig drainDuration 45s, IPv4 node, ENVOY_SKIP_DEPRECATED_LOGS true), with
/// `--config-yaml` when ISTIO_BOOTSTRAP_OVERRIDE names a file. Istio's `-l warning` is left to
/// the test guard's log arguments (the module's lines are read from the log).
fn pilot_agent_args(bootstrap: &str, over: Option<&Value>) -> Vec<String> {
    let mut a: Vec<String> = [
        "-c",
        bootstrap,
        "--drain-time-s",
        "45",
        "--drain-strategy",
        "immediate",
        "--local-address-ip-version",
        "v4",
        "--file-flush-interval-msec",
        "1000",
        "--disable-hot-restart",
        "--allow-unknown-static-fields",
        "--skip-deprecated-logs",
    ]
    .map(String::from)
    .to_vec();
    if let Some(o) = over {
        a.push("--config-yaml".into());
        a.push(o.to_string());
    }
    a
}

#[test]
fn the_fixtures_are_istio_s_own_release_files() {
    let sources = checked_fixture_sources(&common::platforms().join("istio"));
    assert_eq!(sources.len(), 4);
    assert!(sources.iter().all(|s| s.tag == RELEASE), "{sources:?}");
}

/// The values fit Istio's gateway chart: its schema admits them (it refuses unknown keys), its
/// Deployment template reads each, the injector turns the annotation into the mounted file
/// pilot-agent reads, and the pod they make validates against the Kubernetes schemas.
#[test]
fn the_values_fit_istio_s_gateway_chart() {
    let v = values();
    let (ok, errors) = json_schema_validate(&fixture("values.schema.json"), &v);
    assert!(ok, "the chart's schema refuses values.yaml:\n{errors}");
    let template = read(fixture("deployment.yaml"));
    for key in v.as_object().unwrap().keys() {
        assert!(
            template.contains(&format!(".Values.{key}")),
            "the chart's Deployment does not read {key}"
        );
    }
    // The injector: the annotation names the ConfigMap, mounted where ISTIO_BOOTSTRAP_OVERRIDE
    // points (its one key is the file).
    let (cm, _) = manifests();
    assert_eq!(
        v["podAnnotations"]["sidecar.istio.io/bootstrapOverride"],
        cm["metadata"]["name"]
    );
    let inject = read(fixture("gateway-injection-template.yaml"));
    for line in [
        "value: \"/etc/istio/custom-bootstrap/custom_bootstrap.json\"",
        "- mountPath: /etc/istio/custom-bootstrap",
        "name: {{ annotation .ObjectMeta `sidecar.istio.io/bootstrapOverride` \"\" }}",
    ] {
        assert!(inject.contains(line), "injector: no {line:?}");
    }
    // The preStop hook runs pilot-agent's admin client inside the container (no httpGet: it
    // would come from the node, which the control listener refuses /drain); the grace period
    // covers the drain and pilot-agent's stop after it. The injector's template leaves
    // `command` to the image (pilot-agent its entry point) and never sets a lifecycle of its own
    // on a gateway.
    let inject = read(fixture("gateway-injection-template.yaml"));
    assert!(
        inject.contains("    - proxy\n    - router\n"),
        "pilot-agent's arguments"
    );
    assert_eq!(
        v["lifecycle"]["preStop"],
        json!({"exec": {"command": PRE_STOP}})
    );
    let o = override_json();
    let s = module_settings(&o);
    let grace = Duration::from_secs(v["terminationGracePeriodSeconds"].as_u64().unwrap());
    let min_drain = duration(&v["env"]["MINIMUM_DRAIN_DURATION"]);
    let stop = min_drain + Duration::from_secs(2);
    assert!(
        duration(&s["drain_timeout"]) + stop < grace,
        "{s} {grace:?}"
    );
    // pilot-agent's wait before its first count is the module's floor: new connections that
    // kube-proxy still sends keep Envoy up as long as the module would.
    assert_eq!(min_drain, duration(&s["min_drain_duration"]));
    // The pod the chart and the injector make, as far as the kit gives it.
    let env: Vec<Value> = v["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, x)| json!({"name": k, "value": x}))
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "istio-ingressgateway-x7k2p", "namespace": "istio-ingress",
                     "annotations": v["podAnnotations"]},
        "spec": {
            "terminationGracePeriodSeconds": v["terminationGracePeriodSeconds"],
            "volumes": v["volumes"],
            "containers": [{
                "name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.31.0-rc.0",
                "env": env, "lifecycle": v["lifecycle"], "volumeMounts": v["volumeMounts"],
                "readinessProbe": v["readinessProbe"],
            }]
        }
    });
    let (_dir, path) = temp_file("istio-pod", "pod.yaml", &pod.to_string());
    let (ok, text) = kubernetes_validate(&path);
    assert!(ok, "{text}");
}

/// The kit never makes Istio's stop worse: its bounds are at least Istio's own (the grace period,
/// terminationDrainDuration), its probes are no stricter than the injector's field by field
/// (and it adds none), and nothing outside the pod can start a drain: the preStop hook is an exec
/// of pilot-agent to the admin on loopback, and the control listener refuses `/drain` to every
/// address but loopback (run: [`only_the_pod_itself_may_start_a_drain_on_istio_s_gateway`]).
#[test]
fn the_kit_is_never_worse_than_stock_istio() {
    let v = values();
    let s = module_settings(&override_json());
    let grace = Duration::from_secs(v["terminationGracePeriodSeconds"].as_u64().unwrap());
    assert!(grace >= ISTIO_GRACE, "{grace:?}");
    assert!(duration(&s["drain_timeout"]) >= ISTIO_TERMINATION_DRAIN);
    assert!(duration(&s["min_drain_duration"]) >= ISTIO_TERMINATION_DRAIN);
    let probe = &v["readinessProbe"];
    for (field, stock) in ISTIO_READINESS {
        let kit = probe[field].as_u64().unwrap_or(0);
        match field {
            // Sooner is not stricter: the same failures, seen sooner.
            "initialDelaySeconds" | "periodSeconds" => assert!(kit <= stock, "{field} {kit}"),
            _ => assert!(
                kit >= stock,
                "{field}: {kit}, stricter than Istio's {stock}"
            ),
        }
    }
    assert!(probe["successThreshold"].as_u64().unwrap_or(1) <= 1);
    for key in ["livenessProbe", "startupProbe"] {
        assert!(v.get(key).is_none(), "the kit adds no {key}");
    }
    // No way in from outside the pod: the hook reaches the admin (loopback) and the only drain
    // path on the control listener is denied to every address but loopback.
    assert_eq!(
        v["lifecycle"]["preStop"]["exec"]["command"],
        json!(PRE_STOP)
    );
    assert!(v["lifecycle"]["preStop"].get("httpGet").is_none());
    let o = override_json();
    assert_eq!(
        o.get("admin"),
        None,
        "the override leaves Istio's admin (loopback) as it is"
    );
    let control = named(
        &o["static_resources"]["listeners"],
        "graceful-drain-control",
    )
    .unwrap();
    let filters = &control["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
    assert_eq!(
        filters[0]["name"], "envoy.filters.http.rbac",
        "the rule first"
    );
    assert_eq!(filters[1]["name"], "envoy.filters.http.dynamic_modules");
    let rules = &filters[0]["typed_config"]["rules"];
    assert_eq!(rules["action"], "DENY");
    let policy = &rules["policies"]["drain-from-outside-the-pod"];
    assert_eq!(
        policy["permissions"],
        json!([{"url_path": {"path": {"exact": "/drain"}}}])
    );
    assert_eq!(
        policy["principals"],
        json!([{"not_id": {"or_ids": {"ids": [
            {"direct_remote_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}}
        ]}}}])
    );
}

/// `kubectl kustomize k8s/istio`: the ConfigMap validates; the EnvoyFilter patches the gateway's
/// HTTP chains with the module's network filter in connection mode, in a TypedStruct istiod
/// passes on without knowing the filter's proto.
#[test]
fn the_kit_renders_a_valid_configmap_and_envoyfilter() {
    let (cm, ef) = manifests();
    let (_dir, path) = temp_file("istio-cm", "cm.yaml", &cm.to_string());
    let (ok, text) = kubernetes_validate(&path);
    assert!(ok, "{text}");
    assert_eq!(ef["apiVersion"], "networking.istio.io/v1alpha3");
    assert_eq!(
        ef["spec"]["workloadSelector"]["labels"]["istio"],
        "ingressgateway"
    );
    assert_eq!(cm["metadata"]["namespace"], ef["metadata"]["namespace"]);
    let f = network_filter_patch();
    assert_eq!(
        f["typed_config"]["@type"],
        "type.googleapis.com/udpa.type.v1.TypedStruct"
    );
    let cfg: Value = serde_json::from_str(
        f["typed_config"]["value"]["filter_config"]["value"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["track_requests"], true);
}

/// Istio's own bootstrap with the override as pilot-agent passes it: Envoy 1.40.0 loads both
/// with the module.
#[test]
fn the_override_over_istio_s_bootstrap_validates_with_the_module() {
    let golden = fixture("default_golden.json").display().to_string();
    let (ok, text) = validate_args(
        &pilot_agent_args(&golden, Some(&override_json())),
        module_dir(),
    );
    assert!(ok, "{text}");
}

/// Ports of one gateway run.
struct Ports {
    admin: u16,
    gateway: u16,
    prometheus: u16,
    status: u16,
    /// pilot-agent's status server (15020): nobody answers unless a test serves it.
    agent: u16,
    control: u16,
    /// The kit's readiness listener (10002).
    ready: u16,
}

/// Istio's bootstrap (the golden file) with what only a pod provides replaced by local
/// stand-ins, each checked to be Istio's first: istiod's ADS by files holding the gateway
/// listener (the EnvoyFilter's patch applied when `kit`) and its cluster, Istio's ports by
/// loopback ones (0.0.0.0 by 127.0.0.1), and pilot-agent's status server (15020) by a port
/// nobody answers on. The override's control listener and admin address follow.
async fn start_gateway(kit: bool, upstream: u16) -> (Envoy, Ports) {
    let gw = start_gateway_as(kit, upstream, true, "127.0.0.1").await;
    (gw.envoy, gw.ports)
}

/// [`start_gateway`], `configured` or not yet: before istiod's first listeners (the LDS file
/// Envoy reads is empty, so Envoy counts no successful listener update, as before istiod's first
/// push; [`Gateway::configure`] pushes them). The kit's control listener on `control_on` (the
/// pod's `0.0.0.0`, loopback by default).
async fn start_gateway_as(
    kit: bool,
    upstream: u16,
    configured: bool,
    control_on: &str,
) -> Gateway<Ports> {
    let mut run = Launch::new("istio", 7);
    let p = run.ports();
    let ports = Ports {
        admin: p[0],
        gateway: p[1],
        prometheus: p[2],
        status: p[3],
        agent: p[4],
        control: p[5],
        ready: p[6],
    };
    let mut b: Value = serde_json::from_str(&read(fixture("default_golden.json"))).unwrap();
    let remap = |v: &mut Value| {
        remap_ports(
            v,
            &[(15000, p[0]), (15090, p[2]), (15021, p[3]), (15020, p[4])],
        )
    };
    remap(&mut b["admin"]);
    remap(&mut b["static_resources"]);
    if kit {
        // What pilot-agent adds to its bootstrap under the kit's EXIT_ON_ZERO_ACTIVE_CONNECTIONS
        // (istio/istio pkg/bootstrap/config.go: requiredEnvoyStatsMatcherInclusionSuffixes, "Needed
        // for draining"): the golden file was written without it.
        let patterns = &mut b["stats_config"]["stats_matcher"]["inclusion_list"]["patterns"];
        assert!(!patterns.to_string().contains("downstream_cx_active"));
        patterns
            .as_array_mut()
            .unwrap()
            .push(json!({"suffix": "downstream_cx_active"}));
    }
    let d = &mut b["dynamic_resources"];
    assert_eq!(d["ads_config"]["api_type"], "DELTA_GRPC");
    let write = |name: &str, resources: Value| run.xds_file(name, resources);
    let cluster = "outbound|80||echo.default.svc.cluster.local";
    let mut chain = json!({"filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "outbound_0.0.0.0_8080",
            "codec_type": "AUTO",
            "route_config": {"name": "http.8080", "virtual_hosts": [{"name": "*:80", "domains": ["*"],
                "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}]}]},
            "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
            "use_remote_address": true
        }
    }]});
    if kit {
        // INSERT_BEFORE the filter the patch matches.
        let filters = chain["filters"].as_array_mut().unwrap();
        let at = filters
            .iter()
            .position(|f| f["name"] == "envoy.filters.network.http_connection_manager")
            .unwrap();
        filters.insert(at, network_filter_patch());
    }
    let lds = write(
        "lds.json",
        json!([{
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": "0.0.0.0_8080",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": p[1]}},
            "filter_chains": [chain],
        }]),
    );
    let cds = write(
        "cds.json",
        json!([{
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": cluster, "type": "STATIC", "connect_timeout": "2s",
            "load_assignment": {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": upstream}}}}]}]}
        }]),
    );
    if !configured {
        run.hold_back_listeners(&lds, "");
    }
    *d = json!({"lds_config": path_source(&lds), "cds_config": path_source(&cds)});
    let bootstrap = run.dir().join("envoy-rev.json");
    std::fs::write(&bootstrap, b.to_string()).unwrap();

    let over = kit.then(|| {
        let mut o = override_json();
        let l = &mut o["static_resources"]["listeners"][0];
        assert_eq!(l["address"]["socket_address"]["address"], "0.0.0.0");
        l["address"]["socket_address"] = json!({"address": control_on, "port_value": p[5]});
        let r = &mut o["static_resources"]["listeners"][1];
        assert_eq!(r["name"], "graceful-drain-ready");
        assert_eq!(
            r["address"]["socket_address"],
            json!({"address": "0.0.0.0", "port_value": 10002})
        );
        r["address"]["socket_address"] = json!({"address": "127.0.0.1", "port_value": p[6]});
        let mut s = module_settings(&o);
        assert_eq!(s["admin_address"][0], "127.0.0.1:15000");
        s["admin_address"] = json!(format!("127.0.0.1:{}", p[0]));
        o["bootstrap_extensions"][0]["typed_config"]["extension_config"]["value"] =
            json!(s.to_string());
        o
    });
    let args = pilot_agent_args(&bootstrap.display().to_string(), over.as_ref());
    // --disable-hot-restart: no base id.
    let mut run = run.args(args).no_base_id().guard_ports([p[0], p[1], p[5]]);
    if kit {
        run = run.control(p[5], false).admin_found_in_log();
    }
    run.serving("the gateway listener serving", p[1], "/ok", 200)
        .start(ports)
        .await
}

/// pilot-agent's status server, as far as kubelet's readiness probe reads it: `GET
/// /healthz/ready`, reproduced from istio/istio 1.31.0-rc.0 `pilot/cmd/pilot-agent/status/ready/
/// probe.go` (`Check`: first that Envoy counted a successful CDS and LDS update, remembered once
/// seen; then that `server.state` is LIVE (0) and `listener_manager.workers_started` is 1,
/// remembered once seen) and `status/util/stats.go` (the admin's `/stats?usedonly&filter=`
/// with Istio's regexes); `server.go` answers 200, or 503 with the reason. Served on 127.0.0.1
/// until dropped.
struct PilotAgentStatus(tokio::task::JoinHandle<()>);

impl Drop for PilotAgentStatus {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PilotAgentStatus {
    async fn start(port: u16, admin: u16) -> PilotAgentStatus {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind pilot-agent's status port");
        // probe.go's receivedFirstUpdate and atleastOnceReady.
        let cached = std::sync::Arc::new(std::sync::Mutex::new((false, false)));
        PilotAgentStatus(tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let cached = cached.clone();
                tokio::spawn(async move {
                    let Some(head) = clients::read_head(&mut sock).await else {
                        return;
                    };
                    let answer = if head.starts_with(b"GET /healthz/ready ") {
                        pilot_agent_ready(admin, &cached).await
                    } else {
                        Err("not found".to_string())
                    };
                    let (status, body) = match answer {
                        Ok(()) => ("200 OK", String::new()),
                        Err(e) => ("503 Service Unavailable", e),
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                });
            }
        }))
    }
}

/// One of Envoy's stats in an admin `/stats` text answer (0 when absent).
fn stat_value(text: &str, name: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// probe.go `Check` over Envoy's admin on `admin`; `cached`: (receivedFirstUpdate,
/// atleastOnceReady).
async fn pilot_agent_ready(
    admin: u16,
    cached: &std::sync::Mutex<(bool, bool)>,
) -> Result<(), String> {
    let stats = |filter: &'static str| async move {
        let path = format!("/stats?usedonly&filter={filter}");
        clients::get(admin, &path).await.map(|r| r.text())
    };
    if !cached.lock().unwrap().0 {
        let text = stats(
            r"^(cluster_manager\.cds|listener_manager\.lds)\.(update_success|update_rejected)$",
        )
        .await?;
        let (cds, lds) = (
            stat_value(&text, "cluster_manager.cds.update_success"),
            stat_value(&text, "listener_manager.lds.update_success"),
        );
        if cds == 0 || lds == 0 {
            return Err(format!(
                "config not (fully) received from XDS server: {text}"
            ));
        }
        cached.lock().unwrap().0 = true;
    }
    if !cached.lock().unwrap().1 {
        let text = stats(r"^(server\.state|listener_manager\.workers_started)").await?;
        if !text.contains("server.state") || !text.contains("listener_manager.workers_started") {
            return Err(format!("readiness stats not yet updated: {text}"));
        }
        if stat_value(&text, "server.state") != 0 {
            return Err(format!("server is not live: {text}"));
        }
        if stat_value(&text, "listener_manager.workers_started") != 1 {
            return Err("workers have not yet started".to_string());
        }
        cached.lock().unwrap().1 = true;
    }
    Ok(())
}

/// Every `socket_address` port of `v` found in `map` replaced, its 0.0.0.0 by 127.0.0.1.
fn remap_ports(v: &mut Value, map: &[(u64, u16)]) {
    match v {
        Value::Object(o) => {
            if let Some(sa) = o.get_mut("socket_address") {
                if let Some(&(_, to)) = map.iter().find(|(from, _)| sa["port_value"] == *from) {
                    sa["port_value"] = json!(to);
                    if sa["address"] == "0.0.0.0" {
                        sa["address"] = json!("127.0.0.1");
                    }
                }
            }
            o.values_mut().for_each(|x| remap_ports(x, map));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| remap_ports(x, map)),
        _ => {}
    }
}

/// How pilot-agent's stop ended Envoy.
#[derive(Debug, PartialEq)]
enum End {
    /// Envoy exited by itself during the wait.
    Exited,
    /// pilot-agent killed it (`cmd.Process.Kill()`: SIGKILL) after reading the connection
    /// count this many times; `counted`: because the count was 0 (not because the stats were
    /// missing or could not be read, which ends the wait at once too).
    Killed { looks: u32, counted: bool },
}

/// pilot-agent's stop on SIGTERM, reproduced from istio/istio 1.31.0-rc.0: `pkg/envoy/agent.go`
/// `terminate` (no `/drain` on the agent, so no skipDrain) and `pkg/envoy/proxy.go` `Run` (the
/// abort kills Envoy). It posts `drain_listeners?graceful` to the admin (`DrainListeners`, not
/// inbound-only on a gateway); then either waits `termination_drain` (5 s by default) or, with
/// EXIT_ON_ZERO_ACTIVE_CONNECTIONS, sleeps `min_drain` (MINIMUM_DRAIN_DURATION) and each second
/// reads `downstream_cx_active` (`activeProxyConnections`: listener stats only, no per-worker
/// ones, no internal listeners, not Istio's own status and Prometheus listeners nor the admin's),
/// killing Envoy once it is 0 (or the stats are missing, or five reads in a row failed). Envoy
/// exiting by itself ends the wait.
async fn pilot_agent_stop(
    envoy: &mut Envoy,
    p: &Ports,
    exit_on_zero: Option<Duration>,
    termination_drain: Duration,
) -> (End, Instant) {
    let _ = clients::request(p.admin, "POST", "/drain_listeners?graceful", &[]).await;
    let kill = |envoy: &mut Envoy, looks: u32, counted: bool| {
        envoy.signal(libc::SIGKILL);
        (End::Killed { looks, counted }, Instant::now())
    };
    let Some(min_drain) = exit_on_zero else {
        let until = Instant::now() + termination_drain;
        while Instant::now() < until {
            if let Some((_, at)) = envoy.exited() {
                return (End::Exited, at);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        return kill(envoy, 0, false);
    };
    tokio::time::sleep(min_drain).await;
    // Istio's known listeners, by the stat names Envoy gives their (remapped) addresses.
    let known = [
        format!("listener.127.0.0.1_{}.downstream_cx_active", p.status),
        format!("listener.127.0.0.1_{}.downstream_cx_active", p.prometheus),
        "listener.admin.downstream_cx_active".to_string(),
        "listener.admin.main_thread.downstream_cx_active".to_string(),
    ];
    let (mut failures, mut looks) = (0, 0);
    loop {
        looks += 1;
        tokio::time::sleep(Duration::from_secs(1)).await; // the ticker
        let stats = clients::get(p.admin, "/stats?usedonly&filter=downstream_cx_active$").await;
        if let Some((_, at)) = envoy.exited() {
            return (End::Exited, at);
        }
        let Ok(stats) = stats else {
            failures += 1;
            if failures > 4 {
                return kill(envoy, looks, false);
            }
            continue;
        };
        failures = 0;
        let text = stats.text();
        if text.is_empty() {
            return kill(envoy, looks, false);
        }
        let active: u64 = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(name, _)| {
                name.starts_with("listener.")
                    && !name.contains("worker_")
                    && !name.starts_with("listener.envoy_internal_")
                    && !known.iter().any(|k| k == name)
            })
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .sum();
        if active == 0 {
            return kill(envoy, looks, true);
        }
    }
}

/// The kit's preStop hook as kubelet runs it inside the container: `pilot-agent request POST
/// graceful_drain`, i.e. `POST http://localhost:15000/graceful_drain` (Istio's admin, here at its
/// test port), answered at once with the drain's status.
async fn pre_stop(p: &Ports) -> Value {
    assert_eq!(PRE_STOP[2], "POST");
    let r = clients::request(p.admin, PRE_STOP[2], &format!("/{}", PRE_STOP[3]), &[])
        .await
        .expect("the admin answers the preStop hook");
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_str(&r.text()).expect("the drain's status")
}

/// The kit's stop, as kubelet and pilot-agent run it: the preStop hook starts the drain through
/// the admin and returns; then SIGTERM, which reaches pilot-agent only (Envoy is its child), and
/// pilot-agent's stop with the kit's EXIT_ON_ZERO_ACTIVE_CONNECTIONS and MINIMUM_DRAIN_DURATION.
/// Clients see: a request longer than 5 s on each protocol answered 200 (the HTTP/1.1 one with
/// `connection: close`), readiness 503 at once, the idle keep-alive connections told at the
/// drain start (HTTP/2 GOAWAY(NO_ERROR), HTTP/1.1 closed), and Envoy ended by pilot-agent once
/// the drain closed every connection, not before the module's floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kit_drains_istio_s_gateway_through_pilot_agent_s_stop() {
    let upstream = Upstream::start().await;
    let (mut envoy, p) = start_gateway(true, upstream.port).await;
    let v = values();
    let min_drain = duration(&v["env"]["MINIMUM_DRAIN_DURATION"]);
    assert_eq!(v["env"]["EXIT_ON_ZERO_ACTIVE_CONNECTIONS"], "true");

    let slow_h1 = tokio::spawn(clients::get(p.gateway, SLOW));
    let mut h2 = H2Conn::connect(p.gateway).await.unwrap();
    let slow_h2 = tokio::spawn(h2.start(SLOW, &[]).await.unwrap());
    // The slow requests' answers cannot come before this (6.5 s after the later one was sent).
    let slow_sent = Instant::now();
    let mut idle_h1 = H1Conn::connect(p.gateway).await.unwrap();
    let r = idle_h1.send("GET", "/ok", &[]).await.unwrap();
    assert_eq!((r.status, r.header("connection")), (200, None));
    let mut idle_h2 = H2Conn::connect(p.gateway).await.unwrap();
    assert_eq!(idle_h2.send("/ok", &[]).await.unwrap().status, 200);
    envoy.wait_active(2).await;
    // Istio's stats inclusion list, with the override's entries: the module's series are
    // exported and Envoy's request stats are there for it to read.
    let prom = clients::get(p.admin, "/stats/prometheus")
        .await
        .unwrap()
        .text();
    assert!(
        prom.contains("envoy_graceful_drain_active_requests"),
        "{prom}"
    );
    assert!(!envoy.log().contains("Envoy keeps no"), "{}", envoy.log());
    assert_eq!(
        envoy
            .stat("http.outbound_0.0.0.0_8080.downstream_rq_active")
            .await,
        Some(2)
    );

    // Kubelet: the preStop hook, answered at once.
    let st = pre_stop(&p).await;
    assert_eq!(st["trigger"], "admin", "{st}");
    assert_eq!(st["state"], "draining", "{st}");
    // Kubelet: SIGTERM to pilot-agent, right after the hook.
    let sigterm = Instant::now();
    let stop = pilot_agent_stop(&mut envoy, &p, Some(min_drain), Duration::ZERO);
    let clients = async {
        eventually("readiness 503", Duration::from_secs(3), || async {
            (clients::get(p.ready, "/healthz/ready").await.ok()?.status == 503).then_some(())
        })
        .await;
        let e = idle_h2.wait_goaway(Duration::from_secs(5)).await;
        assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR), "idle HTTP/2");
        idle_h1
            .wait_closed(Duration::from_secs(4))
            .await
            .expect("idle HTTP/1.1 closed");
        let e = h2.wait_goaway(Duration::from_secs(3)).await;
        assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR), "busy HTTP/2");
        assert!(!slow_h1.is_finished(), "told during the drain");
        let r = slow_h1
            .await
            .unwrap()
            .expect("the HTTP/1.1 request in flight");
        assert_eq!((r.status, r.header("connection")), (200, Some("close")));
        let r = slow_h2.await.unwrap().expect("the HTTP/2 stream in flight");
        assert_eq!(r.status, 200);
        Instant::now()
    };
    let ((end, at), answered) = tokio::join!(stop, clients);
    assert!(
        matches!(end, End::Killed { counted: true, .. }),
        "pilot-agent ends Envoy once nothing is open: {end:?}"
    );
    // Not before the slow requests were answered, nor before the module's floor; soon after.
    assert!(answered - slow_sent >= Duration::from_millis(6400));
    assert!(at >= answered, "{:?}", answered - at);
    assert!(at - sigterm >= min_drain, "{:?}", at - sigterm);
    assert!(
        at - answered < Duration::from_secs(3),
        "pilot-agent's next read after the last answer: {:?}",
        at - answered
    );
    envoy.wait_exit(Duration::from_secs(5)).await;
    let log = envoy.log();
    assert!(log.contains("drain started (trigger=admin"), "{log}");
}

/// Stock Istio, the same clients and pilot-agent's default stop (no preStop; SIGTERM, then
/// `terminationDrainDuration` 5 s and a kill): the request longer than 5 s is cut, and the idle
/// keep-alive HTTP/1.1 connection hears nothing before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_istio_cuts_a_request_longer_than_its_termination_drain_duration() {
    let upstream = Upstream::start().await;
    let (mut envoy, p) = start_gateway(false, upstream.port).await;
    let slow_h1 = tokio::spawn(clients::get(p.gateway, SLOW));
    let mut idle_h1 = H1Conn::connect(p.gateway).await.unwrap();
    assert_eq!(idle_h1.send("GET", "/ok", &[]).await.unwrap().status, 200);
    // Istio's stats inclusion list leaves out the HTTP connection manager's gauges: the
    // upstream says the request reached it.
    eventually("the request in flight", Duration::from_secs(5), || async {
        upstream
            .received()
            .iter()
            .any(|l| l.contains(SLOW))
            .then_some(())
    })
    .await;
    let sigterm = Instant::now();
    let ((end, at), open) = tokio::join!(
        pilot_agent_stop(&mut envoy, &p, None, Duration::from_secs(5)),
        async {
            tokio::time::sleep(Duration::from_millis(4800)).await;
            idle_h1.is_open()
        }
    );
    assert_eq!(
        end,
        End::Killed {
            looks: 0,
            counted: false
        }
    );
    assert!(at - sigterm >= Duration::from_secs(5));
    assert!(open, "the idle connection was told nothing before the kill");
    let r = slow_h1.await.unwrap();
    assert!(r.is_err(), "cut at the kill: {:?}", r.map(|r| r.status));
}

/// The kit when kubelet's preStop hook failed (the control listener unreachable): SIGTERM goes
/// straight to pilot-agent, whose `drain_listeners` starts the module's drain, and its
/// EXIT_ON_ZERO_ACTIVE_CONNECTIONS wait keeps Envoy until the request longer than 5 s is
/// answered and its connection closed (the idle one was told at once); then it ends Envoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_pre_stop_pilot_agent_s_stop_still_waits_for_the_kit_s_drain() {
    let min_drain = duration(&values()["env"]["MINIMUM_DRAIN_DURATION"]);
    let upstream = Upstream::start().await;
    let (mut envoy, p) = start_gateway(true, upstream.port).await;
    let slow_h1 = tokio::spawn(clients::get(p.gateway, SLOW));
    let mut idle_h1 = H1Conn::connect(p.gateway).await.unwrap();
    assert_eq!(idle_h1.send("GET", "/ok", &[]).await.unwrap().status, 200);
    envoy.wait_active(1).await;
    let sigterm = Instant::now();
    let ((end, at), told) = tokio::join!(
        pilot_agent_stop(&mut envoy, &p, Some(min_drain), Duration::ZERO),
        idle_h1.wait_closed(Duration::from_secs(4))
    );
    told.expect("the idle connection told at the drain start");
    assert!(matches!(end, End::Killed { counted: true, .. }), "{end:?}");
    let r = slow_h1.await.unwrap().expect("the request in flight");
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(
        at - sigterm >= Duration::from_millis(6000),
        "ended only after the request: {:?}",
        at - sigterm
    );
    envoy.assert_logged("drain started (trigger=drain_listeners");
}

/// The kit's readiness probe (values.yaml: `/healthz/ready` on the override's readiness
/// listener, 10002), run as kubelet runs it, with pilot-agent's status server reproduced from
/// its source: before istiod's first listeners it is not Ready (pilot-agent's 503, passed on,
/// while the module's static control listener would already answer 200); once they arrived, 200;
/// from the drain start (kubelet's preStop, through the admin: the module fails Envoy's health
/// checks) 503 at once, never a refused connection, while Istio's own 15021 still answers 200
/// (pilot-agent caches its first success).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kit_s_readiness_probe_follows_istiod_and_the_drain() {
    let v = values();
    let o = override_json();
    let listener = named(&o["static_resources"]["listeners"], "graceful-drain-ready").unwrap();
    assert_eq!(
        v["readinessProbe"]["httpGet"],
        json!({"path": "/healthz/ready", "port": listener["address"]["socket_address"]["port_value"]})
    );
    let upstream = Upstream::start().await;
    let mut gw = start_gateway_as(true, upstream.port, false, "127.0.0.1").await;
    let p = &gw.ports;
    let _agent = PilotAgentStatus::start(p.agent, p.admin).await;
    let status = |port: u16, path: &'static str| async move {
        clients::get(port, path).await.ok().map(|r| r.status)
    };
    // (a) Envoy runs (LIVE, the control listener answers), before istiod's listeners.
    assert_eq!(status(p.admin, "/ready").await, Some(200), "Envoy LIVE");
    assert_eq!(status(p.control, "/ready").await, Some(200));
    let before = clients::get(p.ready, "/healthz/ready").await.unwrap();
    assert_eq!(
        (
            before.status,
            before.text().contains("config not (fully) received")
        ),
        (503, true),
        "Ready before istiod configured Envoy: {}",
        before.text()
    );
    assert_eq!(status(p.status, "/healthz/ready").await, Some(503), "15021");
    // (b) istiod's first listeners.
    gw.configure();
    let p = &gw.ports;
    eventually("the kit's probe 200", Duration::from_secs(10), || async {
        (status(p.ready, "/healthz/ready").await == Some(200)).then_some(())
    })
    .await;
    assert_eq!(status(p.status, "/healthz/ready").await, Some(200), "15021");
    // (c) The drain start: kubelet's preStop.
    let started = Instant::now();
    pre_stop(p).await;
    let after =
        clients::readiness_turns_503("Istio", started, || status(p.ready, "/healthz/ready")).await;
    eprintln!("the kit's readiness probe 503 {after:?} after the preStop started the drain");
    assert_eq!(
        status(p.status, "/healthz/ready").await,
        Some(200),
        "Istio's 15021 during the drain (why the kit does not probe it)"
    );
    drop(gw);
}

/// `/drain` on the kit's control listener, bound as shipped (`0.0.0.0`), from another host (a
/// network namespace of the test's own joined by a veth pair: its address, 10.200.x.2, is not
/// loopback): 403 `RBAC: access denied`, no drain (the module's readiness stays 200, the log has
/// no drain start), while `/ready` and `/drain/status` answer it. From inside the pod (loopback) the same
/// request starts a drain. Needs `ip` and root (CI runs as root); skipped with a message
/// otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_pod_itself_may_start_a_drain_on_istio_s_gateway() {
    let Some(other) = common::netns::OtherHost::or_skip() else {
        return;
    };
    let upstream = Upstream::start().await;
    let Gateway {
        envoy, ports: p, ..
    } = start_gateway_as(true, upstream.port, true, "0.0.0.0").await;
    let control = p.control;
    common::netns::assert_drain_refused_from(
        &other,
        control,
        &[
            ("GET", "/drain"),
            ("POST", "/drain"),
            ("POST", "/drain?wait=false"),
        ],
    )
    .await;
    assert_eq!(
        clients::get(control, "/ready").await.unwrap().status,
        200,
        "still ready (the module's own answer, from inside the pod)"
    );
    assert!(!envoy.log().contains("drain started"), "{}", envoy.log());
    // From inside the pod: loopback is admitted.
    let r = clients::request(control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{}", r.text());
    envoy
        .wait_log(
            "the drain from loopback",
            "drain started (trigger=drain_endpoint",
        )
        .await;
}
