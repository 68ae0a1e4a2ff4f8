//! The Kourier drop-in (`k8s/overlays/kourier`): `kubectl kustomize` renders it over the mirror
//! of Kourier's manifests; the output passes the Kubernetes schemas; the Deployment drains with
//! the module (no preStop sleep/curl, grace period above `drain_timeout`, the module's readiness
//! probe); the bootstrap keeps everything Kourier's control plane relies on and validates with
//! Envoy and the module; and a real Envoy running the rendered bootstrap, with its listeners,
//! routes and clusters from a file-based xDS source shaped like what net-kourier-controller
//! pushes, loses no request on SIGTERM. Kourier's stock bootstrap, run the same way, does.

mod common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{module_dir, pinned_envoy_version, validate_config, Envoy, Options, TempDir};
use common::json::{duration, hcm, items, module_settings, named};
use common::tools::{
    kubernetes_validate, kustomize, kustomize_with_components, temp_file, yaml, yaml_docs,
};
use common::upstream::Upstream;
use common::{eventually, free_ports, repo_root};
use serde_json::{json, Value};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const OVERLAY: &str = "k8s/overlays/kourier";
const BASE: &str = "k8s/overlays/kourier/net-kourier";
const GATEWAY: &str = "3scale-kourier-gateway";
const CONTAINER: &str = "kourier-gateway";
const BOOTSTRAP_KEY: &str = "envoy-bootstrap.yaml";

/// Drain settings the run tests put in place of the rendered ones (everything else is kept).
const MIN_DRAIN: Duration = Duration::from_millis(300);
const QUIET: Duration = Duration::from_millis(200);

struct Manifests {
    text: String,
    docs: Vec<Value>,
}

impl Manifests {
    fn get(&self, kind: &str, name: &str) -> &Value {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
    }
    fn deployment(&self) -> &Value {
        self.get("Deployment", GATEWAY)
    }
    fn container(&self) -> &Value {
        self.deployment()["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .find(|c| c["name"] == CONTAINER)
            .expect("the kourier-gateway container")
    }
    /// The Envoy bootstrap in the ConfigMap kourier-bootstrap, as JSON.
    fn bootstrap(&self) -> Value {
        let text = self.get("ConfigMap", "kourier-bootstrap")["data"][BOOTSTRAP_KEY]
            .as_str()
            .expect("envoy-bootstrap.yaml in kourier-bootstrap");
        yaml(text)
    }
}

fn render(dir: &str) -> Manifests {
    let text = kustomize(&repo_root().join(dir));
    let docs = yaml_docs(&text);
    Manifests { text, docs }
}

/// The overlay, rendered once per test binary.
fn overlay() -> &'static Manifests {
    static M: OnceLock<Manifests> = OnceLock::new();
    M.get_or_init(|| render(OVERLAY))
}

/// Kourier's stock objects (the mirror the overlay is applied over).
fn stock() -> &'static Manifests {
    static M: OnceLock<Manifests> = OnceLock::new();
    M.get_or_init(|| render(BASE))
}

fn port_of(listener: &Value) -> u64 {
    listener["address"]["socket_address"]["port_value"]
        .as_u64()
        .expect("listener port")
}

#[test]
fn overlay_renders_and_passes_the_kubernetes_schemas() {
    let m = overlay();
    let (_dir, path) = temp_file("kourier", "rendered.yaml", &m.text);
    let (ok, text) = kubernetes_validate(&path);
    assert!(ok, "{text}");
    for object in [
        "configmap/kourier-bootstrap",
        "deployment/3scale-kourier-gateway",
    ] {
        assert!(
            text.contains(&format!("passed for resource {object}")),
            "{text}"
        );
    }
    // The overlay changes two objects of a Kourier install and nothing else.
    let mut objects: Vec<String> = m
        .docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}/{}",
                d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]
            )
        })
        .collect();
    objects.sort();
    assert_eq!(
        objects,
        [
            r#""ConfigMap"/"kourier-system"/"kourier-bootstrap""#,
            r#""Deployment"/"kourier-system"/"3scale-kourier-gateway""#
        ]
    );
    // The mirror of Kourier's manifests is itself valid.
    let (_dir, path) = temp_file("kourier", "stock.yaml", &stock().text);
    let (ok, text) = kubernetes_validate(&path);
    assert!(ok, "{text}");
}

#[test]
fn rendered_deployment_drains_with_the_module() {
    let m = overlay();
    let c = m.container();
    let pod = &m.deployment()["spec"]["template"]["spec"];

    // The image built by k8s/Dockerfile, for the Envoy version the module is built for.
    assert_eq!(
        c["image"],
        format!("graceful-drain-envoy:{}", pinned_envoy_version())
    );
    // No preStop hook at all (Kourier's ran curl, absent from the image, then a fixed sleep), and
    // no Envoy drain flags: the module's settings govern the drain.
    assert!(
        c["lifecycle"].is_null(),
        "lifecycle left: {}",
        c["lifecycle"]
    );
    let spec = c.to_string();
    for word in [
        "preStop",
        "sleep",
        "curl",
        "drain-time-s",
        "drain-strategy",
        "DRAIN_TIME",
    ] {
        assert!(!spec.contains(word), "{word} left in the container: {spec}");
    }
    // The module's search path, where k8s/Dockerfile puts it.
    let env = &c["env"];
    let search = named(env, "ENVOY_DYNAMIC_MODULES_SEARCH_PATH").expect("search path set");
    let dir = search["value"].as_str().unwrap();
    let dockerfile = std::fs::read_to_string(repo_root().join("k8s/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("{dir}/libgraceful_drain.so")),
        "k8s/Dockerfile does not install the module in {dir}"
    );

    // The bootstrap Envoy reads is the ConfigMap kourier-bootstrap's envoy-bootstrap.yaml.
    let args: Vec<&str> = items(&c["args"], "args")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mount = named(&c["volumeMounts"], "config-volume").expect("config volume mounted");
    assert!(
        args.contains(
            &format!(
                "-c {}/{BOOTSTRAP_KEY}",
                mount["mountPath"].as_str().unwrap()
            )
            .as_str()
        ),
        "{args:?}"
    );
    let volume = named(&pod["volumes"], "config-volume").expect("config volume");
    assert_eq!(volume["configMap"]["name"], "kourier-bootstrap");

    // Readiness is the module's /ready on its control listener, which turns 503 at the drain
    // start; one failure is enough.
    let b = m.bootstrap();
    let control = named(
        &b["static_resources"]["listeners"],
        "graceful_drain_control",
    )
    .expect("control listener in the bootstrap");
    let filters = hcm(control)["http_filters"].to_string();
    assert!(
        filters.contains("graceful_drain") && filters.contains(r#"{\"role\": \"control\"}"#),
        "{filters}"
    );
    let probe = &c["readinessProbe"];
    assert_eq!(probe["httpGet"]["path"], "/ready");
    assert_eq!(probe["failureThreshold"], 1);
    let port_name = probe["httpGet"]["port"].as_str().expect("named probe port");
    let port = named(&c["ports"], port_name).expect("probe port declared");
    assert_eq!(port["containerPort"].as_u64(), Some(port_of(control)));

    // Kourier's own check (its controller configured the gateway) gates the start instead: the
    // module's control listener is static and would answer before Kourier's config arrives.
    assert_eq!(
        c["startupProbe"]["httpGet"],
        stock().container()["readinessProbe"]["httpGet"]
    );

    // SIGKILL comes at the grace period: it must leave drain_timeout plus Envoy's teardown.
    let timeout = duration(&module_settings(&b)["drain_timeout"]).as_secs_f64();
    let grace = pod["terminationGracePeriodSeconds"]
        .as_f64()
        .expect("grace period");
    assert!(
        grace >= timeout + 5.0,
        "grace {grace}s vs drain_timeout {timeout}s"
    );

    // Everything else is Kourier's, unchanged: identity, selector, ports, liveness, security.
    let stock_dep = stock().deployment();
    let stock_c = stock().container();
    assert_eq!(m.deployment()["metadata"], stock_dep["metadata"]);
    assert_eq!(
        m.deployment()["spec"]["selector"],
        stock_dep["spec"]["selector"]
    );
    assert_eq!(
        m.deployment()["spec"]["strategy"],
        stock_dep["spec"]["strategy"]
    );
    assert_eq!(
        pod["volumes"],
        stock_dep["spec"]["template"]["spec"]["volumes"]
    );
    for field in [
        "command",
        "livenessProbe",
        "securityContext",
        "resources",
        "volumeMounts",
    ] {
        assert_eq!(c[field], stock_c[field], "{field} changed");
    }
    for p in items(&stock_c["ports"], "ports") {
        assert!(items(&c["ports"], "ports").contains(p), "port {p} lost");
    }
    assert_eq!(
        m.deployment()["spec"]["template"]["metadata"],
        stock_dep["spec"]["template"]["metadata"]
    );
}

#[test]
fn rendered_bootstrap_keeps_what_kourier_relies_on() {
    let b = overlay().bootstrap();
    let s = stock().bootstrap();
    // Node identity (what the controller serves), ADS through xds_cluster, admin on its socket:
    // exactly as Kourier has them.
    for key in ["node", "dynamic_resources", "admin"] {
        assert_eq!(b[key], s[key], "{key} differs from Kourier's");
    }
    // Kourier's runtime layer is left out: each of its keys is a guard Envoy has removed (no
    // effect; logged as an Envoy bug at every start).
    assert!(b["layered_runtime"].is_null());
    let stock_text = stock().get("ConfigMap", "kourier-bootstrap")["data"][BOOTSTRAP_KEY]
        .as_str()
        .unwrap();
    let (ok, log) = validate_config(stock_text, module_dir());
    assert!(ok, "{log}");
    let layer = &s["layered_runtime"]["layers"][0]["static_layer"];
    for key in layer
        .as_object()
        .expect("Kourier's static runtime layer")
        .keys()
    {
        assert!(
            log.contains(&format!("Using a removed guard {key}")),
            "{key} still does something in this Envoy:\n{log}"
        );
    }
    // Every static listener (stats and /ready on 9000) and cluster (admin socket, xDS) unchanged;
    // the only addition is the module's control listener.
    for kind in ["listeners", "clusters"] {
        for x in items(&s["static_resources"][kind], kind) {
            let name = x["name"].as_str().unwrap();
            assert_eq!(
                named(&b["static_resources"][kind], name),
                Some(x),
                "{kind}: {name} changed or missing"
            );
        }
    }
    let added: Vec<&Value> = items(&b["static_resources"]["listeners"], "listeners")
        .iter()
        .filter(|l| {
            named(
                &s["static_resources"]["listeners"],
                l["name"].as_str().unwrap(),
            )
            .is_none()
        })
        .map(|l| &l["name"])
        .collect();
    assert_eq!(added, [&json!("graceful_drain_control")]);
    let added_clusters: Vec<_> = items(&b["static_resources"]["clusters"], "clusters")
        .iter()
        .filter(|c| {
            named(
                &s["static_resources"]["clusters"],
                c["name"].as_str().unwrap(),
            )
            .is_none()
        })
        .map(|c| &c["name"])
        .collect();
    assert!(
        added_clusters.is_empty(),
        "clusters added: {added_clusters:?}"
    );
    let mut keys: Vec<&String> = b.as_object().unwrap().keys().collect();
    keys.retain(|k| s.get(k.as_str()).is_none());
    assert_eq!(keys, ["bootstrap_extensions"], "new top-level sections");
    assert_eq!(b.as_object().unwrap().len(), s.as_object().unwrap().len());

    // Bootstrap-only mode: the drain fails Envoy's health checks through the admin's unix
    // socket; Kourier's xDS listeners get no filter.
    let settings = module_settings(&b);
    assert_eq!(settings["admin_address"], "/tmp/envoy.admin");
    assert_eq!(
        b["admin"]["address"]["pipe"]["path"], "/tmp/envoy.admin",
        "admin_address must be the admin's socket"
    );
    // Requests on the stats listener do not hold a drain (the control listener's are taken out
    // by the module itself, whatever its name).
    let ignored = settings["ignored_stat_prefixes"].to_string();
    for l in items(&b["static_resources"]["listeners"], "listeners") {
        if l["name"] == "graceful_drain_control" {
            continue;
        }
        let prefix = &hcm(l)["stat_prefix"];
        assert!(
            ignored.contains(&prefix.to_string()),
            "{prefix} not ignored: {ignored}"
        );
    }
}

#[test]
fn rendered_bootstrap_validates_with_envoy_and_the_module() {
    let cm = overlay().get("ConfigMap", "kourier-bootstrap");
    let text = cm["data"][BOOTSTRAP_KEY].as_str().unwrap();
    let (ok, log) = validate_config(text, module_dir());
    assert!(ok && log.contains("OK"), "{log}");
    assert!(log.contains("graceful_drain: drain engine loaded"), "{log}");
    // Nothing in it that Envoy reports as a bug (such as a removed runtime guard).
    assert!(!log.contains("envoy_bug"), "{log}");
    // It needs the module: without it Envoy refuses the bootstrap (what a gateway image without
    // the module, such as Kourier's envoyproxy/envoy, would do).
    let empty = TempDir::new("no-module");
    let (ok, log) = validate_config(text, &empty.0);
    assert!(!ok, "validated without the module:\n{log}");
}

/// The ports of a gateway started by [`start_gateway`].
struct Gateway {
    envoy: Envoy,
    /// listener_8080 (external), listener_8081 (internal), listener_8090 (probe).
    external: u16,
    internal: u16,
    probe: u16,
    /// The stats listener (9000 in the pod): the admin's /ready and /stats.
    stats: u16,
}

fn hcm_over_rds(route_config: &str, rds_file: &std::path::Path) -> Value {
    json!({
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "ingress_http",
            "codec_type": "AUTO",
            "rds": {
                "route_config_name": route_config,
                "config_source": {"resource_api_version": "V3", "path_config_source": {"path": rds_file}}
            },
            "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]
        }
    })
}

/// The xDS resources net-kourier-controller pushes for one Knative service, as files: listeners
/// `listener_<port>` for the external, internal and probe ports (one HTTP connection manager
/// each, stat_prefix ingress_http, routes over RDS), route configs external_services and
/// internal_services (with the internalkourier status host whose /ready the liveness probe
/// reads), and the revision's cluster.
fn write_kourier_xds(dir: &std::path::Path, ports: [u16; 3], upstream: u16) -> (String, String) {
    let write = |name: &str, resources: Value| {
        let path = dir.join(name);
        std::fs::write(&path, json!({ "resources": resources }).to_string()).unwrap();
        path
    };
    let cluster = "default/hello-00001";
    let route_to_revision =
        json!({"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "10s"}});
    let service = json!({"name": "default/hello", "domains": ["*"], "routes": [route_to_revision]});
    let route_type = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
    let external = write(
        "rds-external.json",
        json!([{"@type": route_type, "name": "external_services", "virtual_hosts": [service]}]),
    );
    let status_host = json!({"name": "internalkourier", "domains": ["internalkourier"], "routes": [
        {"match": {"path": "/ready"}, "direct_response": {"status": 200}}
    ]});
    let internal = write(
        "rds-internal.json",
        json!([{"@type": route_type, "name": "internal_services", "virtual_hosts": [status_host, service]}]),
    );
    let listener = |name: &str, port: u16, routes: &str, file: &std::path::Path| {
        json!({
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": name,
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [hcm_over_rds(routes, file)]}]
        })
    };
    let lds = write(
        "lds.json",
        json!([
            listener("listener_8080", ports[0], "external_services", &external),
            listener("listener_8081", ports[1], "internal_services", &internal),
            listener("listener_8090", ports[2], "external_services", &external),
        ]),
    );
    let cds = write(
        "cds.json",
        json!([{
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": cluster,
            "type": "STATIC",
            "connect_timeout": "1s",
            "load_assignment": {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": upstream}}}}
            ]}]}
        }]),
    );
    (lds.display().to_string(), cds.display().to_string())
}

/// Move a listener of the bootstrap from its pod port to a loopback test port.
fn relocate_listener(b: &mut Value, name: &str, pod_port: u64, port: u16) -> bool {
    let Some(l) = b["static_resources"]["listeners"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|l| l["name"] == name)
    else {
        return false;
    };
    assert_eq!(port_of(l), pod_port, "{name} port");
    l["address"]["socket_address"] = json!({"address": "127.0.0.1", "port_value": port});
    true
}

/// Run a Kourier bootstrap as the pod would, with what only a cluster provides replaced by local
/// stand-ins: ADS by xDS files, the pod ports by free loopback ports, the admin socket by one in
/// a private directory, and (if the module is loaded) the drain settings by short ones. Every
/// replaced value is checked to be Kourier's first.
async fn start_gateway(mut b: Value, upstream: u16) -> Gateway {
    let dir = TempDir::new("kourier");
    let p = free_ports(6);
    let (lds, cds) = write_kourier_xds(&dir.0, [p[0], p[1], p[2]], upstream);
    let ads = &b["dynamic_resources"];
    assert_eq!(
        ads["ads_config"]["grpc_services"][0]["envoy_grpc"]["cluster_name"],
        "xds_cluster"
    );
    assert!(ads["lds_config"]["ads"].is_object() && ads["cds_config"]["ads"].is_object());
    b["dynamic_resources"] = json!({
        "lds_config": {"resource_api_version": "V3", "path_config_source": {"path": lds}},
        "cds_config": {"resource_api_version": "V3", "path_config_source": {"path": cds}}
    });
    let socket = dir.0.join("envoy.admin").display().to_string();
    assert_eq!(b["admin"]["address"]["pipe"]["path"], "/tmp/envoy.admin");
    b["admin"]["address"]["pipe"]["path"] = json!(socket);
    for c in b["static_resources"]["clusters"].as_array_mut().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let endpoint = &mut c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
        match name.as_str() {
            "service_stats" => {
                assert_eq!(endpoint["address"]["pipe"]["path"], "/tmp/envoy.admin");
                endpoint["address"]["pipe"]["path"] = json!(socket);
            }
            "xds_cluster" => {
                // Unused once ADS is replaced; a loopback address instead of a cluster DNS name.
                endpoint["address"]["socket_address"] =
                    json!({"address": "127.0.0.1", "port_value": p[5]});
            }
            other => panic!("unexpected cluster {other}"),
        }
    }
    assert!(relocate_listener(&mut b, "stats_listener", 9000, p[3]));
    let control = relocate_listener(&mut b, "graceful_drain_control", 10001, p[4]);
    if b.get("bootstrap_extensions").is_some() {
        let mut settings = module_settings(&b);
        settings["min_drain_duration"] = json!(format!("{}ms", MIN_DRAIN.as_millis()));
        settings["quiet_period"] = json!(format!("{}ms", QUIET.as_millis()));
        settings["drain_timeout"] = json!("10s");
        assert_eq!(settings["admin_address"], "/tmp/envoy.admin");
        settings["admin_address"] = json!(socket);
        b["bootstrap_extensions"][0]["typed_config"]["extension_config"]["value"] =
            json!(settings.to_string());
    }
    let control_port = if control { p[4] } else { p[3] };
    let mut envoy = Envoy::start_yaml(
        &b.to_string(),
        p[3],
        p[0],
        control_port,
        &Options::default(),
    )
    .await;
    envoy.keep(dir);
    if b.get("bootstrap_extensions").is_some() {
        // The module found Envoy's admin at its unix socket.
        let line = format!("admin_address {socket} is Envoy's admin");
        envoy.wait_log("the admin socket checked", &line).await;
    }
    for port in [p[0], p[1], p[2]] {
        eventually(
            "Kourier's listeners serving",
            Duration::from_secs(10),
            || async {
                clients::get(port, "/ok")
                    .await
                    .ok()
                    .filter(|r| r.status == 200)
            },
        )
        .await;
    }
    Gateway {
        envoy,
        external: p[0],
        internal: p[1],
        probe: p[2],
        stats: p[3],
    }
}

async fn status(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<u16> {
    clients::request(port, "GET", path, headers)
        .await
        .ok()
        .map(|r| r.status)
}

const LIVENESS: [(&str, &str); 1] = [("host", "internalkourier")];
const SLOW: &str = "/delay/1200";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rendered_bootstrap_drains_kourier_listeners_without_losing_a_request() {
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        external,
        internal,
        probe,
        stats,
    } = start_gateway(overlay().bootstrap(), upstream.port).await;
    let control = envoy.control;
    assert_eq!(
        status(control, "/ready", &[]).await,
        Some(200),
        "readiness probe"
    );
    assert_eq!(
        status(stats, "/ready", &[]).await,
        Some(200),
        "Kourier's /ready on 9000"
    );
    assert_eq!(
        status(internal, "/ready", &LIVENESS).await,
        Some(200),
        "liveness probe"
    );
    // The module's stats are in Kourier's Prometheus endpoint.
    let metrics = clients::get(stats, "/stats/prometheus")
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("envoy_graceful_drain_draining"),
        "{metrics}"
    );

    // In flight at SIGTERM: HTTP/1.1 on every Kourier listener, HTTP/2 streams on the external
    // one; plus an idle keep-alive connection.
    let mut tasks = Vec::new();
    for port in [external, external, internal, probe] {
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", SLOW, &[]).await
        }));
    }
    let mut h2 = H2Conn::connect(external).await.unwrap();
    for _ in 0..2 {
        tasks.push(tokio::spawn(h2.start(SLOW, &[]).await.unwrap()));
    }
    let mut keepalive = H1Conn::connect(external).await.unwrap();
    let r = keepalive.send("GET", "/ok", &[]).await.unwrap();
    assert_eq!((r.status, r.header("connection")), (200, None));
    eventually(
        "6 in flight (Envoy's gauge)",
        Duration::from_secs(5),
        || async {
            (envoy.stat("http.ingress_http.downstream_rq_active").await == Some(6)).then_some(())
        },
    )
    .await;

    let t0 = Instant::now();
    envoy.sigterm();
    // The module's readiness turns 503, and so does Kourier's /ready on 9000 (the drain failed
    // Envoy's health checks through the admin socket).
    eventually("readiness probe 503", Duration::from_secs(3), || async {
        (status(control, "/ready", &[]).await == Some(503)).then_some(())
    })
    .await;
    eventually("Kourier's /ready 503", Duration::from_secs(3), || async {
        (status(stats, "/ready", &[]).await == Some(503)).then_some(())
    })
    .await;
    // The liveness probe still passes: a draining gateway is not restarted.
    assert_eq!(status(internal, "/ready", &LIVENESS).await, Some(200));
    // Late requests are served, and told to go away.
    let r = keepalive.send("GET", "/late", &[]).await.unwrap();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    keepalive.wait_closed(Duration::from_secs(2)).await.unwrap();
    assert_eq!(h2.send("/late-h2", &[]).await.unwrap().status, 200);
    let e = h2.wait_goaway(Duration::from_secs(3)).await;
    assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR));
    let last_start = Instant::now();
    // Not one request lost.
    let mut last_done = t0;
    for t in tasks {
        let r = t.await.unwrap().expect("in-flight request completes");
        assert_eq!(r.status, 200);
        last_done = Instant::now();
    }
    let (exit, at) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit}");
    let earliest = (t0 + MIN_DRAIN).max(last_done);
    assert!(at >= earliest, "exited {:?} early", earliest - at);
    // Not late: the drain ended by its rules (the quiet period after the last request, plus
    // polling slack of Envoy's counters), as the module measured it from its start (at or after
    // t0) on its own clock; this test's scheduling only makes the bound later.
    let latest = earliest.max(last_start + QUIET) + Duration::from_millis(700);
    let (reported, timed_out) = envoy.reported_drain();
    assert!(
        !timed_out && reported <= latest - t0,
        "drain ended after {reported:?} (timed out: {timed_out}), allowed {:?}",
        latest - t0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_kourier_bootstrap_loses_in_flight_requests_on_sigterm() {
    // What the overlay replaces, run the same way: without the module (and with Kourier's
    // preStop unable to run curl), SIGTERM ends Envoy at once.
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        external,
        internal,
        ..
    } = start_gateway(stock().bootstrap(), upstream.port).await;
    // Kourier's runtime layer sets a guard Envoy has removed, which Envoy reports as a bug (the
    // overlay leaves that layer out).
    envoy.expect_envoy_bug("override_request_timeout_by_gateway_timeout");
    let mut tasks = Vec::new();
    for port in [external, external, internal] {
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", SLOW, &[]).await
        }));
    }
    eventually("3 in flight", Duration::from_secs(5), || async {
        (envoy.stat("http.ingress_http.downstream_rq_active").await == Some(3)).then_some(())
    })
    .await;
    let t0 = Instant::now();
    envoy.sigterm();
    let (_, at) = envoy.wait_exit(Duration::from_secs(5)).await;
    // Before the 1.2 s requests could end: it did not wait for them (all lost, below).
    assert!(
        at - t0 < Duration::from_millis(1200),
        "stock Envoy held its exit: {:?}",
        at - t0
    );
    for t in tasks {
        assert!(
            t.await.unwrap().is_err(),
            "stock Kourier must lose the in-flight request"
        );
    }
}

#[test]
fn opt_in_network_policy_keeps_kourier_open_and_restricts_the_control_port() {
    // The overlay with the restrict-control-port component enabled, as a user would.
    let text = kustomize_with_components(&repo_root().join(OVERLAY), &["restrict-control-port"]);
    let (_d, path) = temp_file("kourier", "rendered.yaml", &text);
    let (ok, log) = kubernetes_validate(&path);
    assert!(
        ok && log.contains("passed for resource networkpolicy/"),
        "{log}"
    );
    let docs = yaml_docs(&text);
    let np = docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .expect("the policy");
    let dep = overlay().deployment();
    assert_eq!(np["metadata"]["namespace"], dep["metadata"]["namespace"]);
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    let selector = np["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap();
    assert!(!selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v));

    let rules = items(&np["spec"]["ingress"], "ingress");
    let rules_for = |port: u64| -> Vec<&Value> {
        rules
            .iter()
            .filter(|r| {
                items(&r["ports"], "ports")
                    .iter()
                    .any(|p| p["port"] == port)
            })
            .collect()
    };
    let c = overlay().container();
    let control = named(
        &c["ports"],
        c["readinessProbe"]["httpGet"]["port"].as_str().unwrap(),
    )
    .unwrap()["containerPort"]
        .as_u64()
        .unwrap();
    // Every other port of the pod, and Kourier's cluster-local TLS port (8444, a Service target
    // that is not declared as a container port), stays open to every source.
    let mut open: Vec<u64> = items(&c["ports"], "ports")
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .filter(|p| *p != control)
        .collect();
    open.push(8444);
    for port in open {
        let rs = rules_for(port);
        assert!(
            rs.iter().any(|r| r["from"].is_null()),
            "port {port} not open: {np}"
        );
    }
    // The control port: only listed sources, none of them "everywhere".
    let rs = rules_for(control);
    assert!(!rs.is_empty());
    for r in rs {
        let from = items(&r["from"], "from");
        assert!(!from.is_empty());
        for f in from {
            let open_cidr = f["ipBlock"]["cidr"]
                .as_str()
                .is_some_and(|c| c.ends_with("/0"));
            let any_namespace = f["namespaceSelector"]
                .as_object()
                .is_some_and(|s| s.is_empty());
            assert!(!open_cidr && !any_namespace, "control port open: {f}");
        }
    }
}
