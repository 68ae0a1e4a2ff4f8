//! The Contour kit (`k8s/contour`): a kustomize Component that adds graceful-drain to Contour's
//! own release, checked against Contour's release files themselves (`../shared/platforms/contour`:
//! the Envoy DaemonSet of Contour's example install, and the bootstrap and SDS files `contour
//! bootstrap` writes for it as Contour's own test expects them, each checked against the
//! release). Rendered the way `kubectl apply -k` renders it: valid for the Kubernetes schemas,
//! and only the stop of Contour's Envoy pod changes; the command line kubelet gives Envoy
//! (Contour's arguments plus the kit's `--config-yaml`) over Contour's bootstrap validates with
//! the module; and the real Envoy run with that command line, its listeners shaped as Contour
//! pushes them (from files instead of Contour's xDS server), drains requests in flight and a
//! client that keeps sending on SIGTERM with 0 lost and exits once they are done, idle
//! keep-alive connections left open. Contour's own shutdown sequence, reproduced from its source,
//! never ends while such a client is connected.

use crate::common;

use common::clients::{self, status_v6, unix_request, H1Conn};
use common::envoy::{module_dir, validate_args, TempDir};
use common::gateway::{drain_also_from_ipv6_loopback, ms, path_source, short_drain, Launch};
use common::json::{config_yaml, container_args, duration, hcm, items, module_settings, named};
use common::scenario::{Drain, Idle, InFlight, Kit, Ready, Slow};
use common::tools::{
    checked_fixture_sources, kubernetes_validate, kustomize, relative, temp_file, yaml, yaml_docs,
};
use common::upstream::Upstream;
use common::{eventually, repo_root};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const KIT: &str = "k8s/contour";
const COMPONENT: &str = "k8s/contour/graceful-drain";
/// The Contour release the kit is checked against (../shared/platforms/contour/SOURCES).
const RELEASE: &str = "v1.33.6";
const NAMESPACE: &str = "projectcontour";
/// A pod name, for `$(ENVOY_POD_NAME)`.
const POD_NAME: &str = "envoy-x7k2p";
/// Contour's Envoy image at that release: distroless, Envoy 1.38 (the module loads in it).
const CONTOUR_ENVOY_IMAGE: &str = "docker.io/envoyproxy/envoy:distroless-v1.38.3";

/// Drain settings the run tests put in place of the kit's (everything else is kept).
const MIN_DRAIN: Duration = Duration::from_millis(300);
const QUIET: Duration = Duration::from_millis(200);
/// The kit's readiness_failure_delay in the run tests, below MIN_DRAIN as the module requires.
const READINESS_DELAY: Duration = Duration::from_millis(150);
const SLOW: &str = "/delay/1200";

fn fixture(name: &str) -> PathBuf {
    common::platforms().join("contour").join(RELEASE).join(name)
}

struct Manifests {
    text: String,
    docs: Vec<Value>,
}

impl Manifests {
    fn daemonset(&self) -> &Value {
        self.docs
            .iter()
            .find(|d| d["kind"] == "DaemonSet" && d["metadata"]["name"] == "envoy")
            .expect("Contour's Envoy DaemonSet")
    }
    fn pod(&self) -> &Value {
        &self.daemonset()["spec"]["template"]["spec"]
    }
    fn container(&self, name: &str) -> Option<&Value> {
        named(&self.pod()["containers"], name)
    }
    fn envoy(&self) -> &Value {
        self.container("envoy").expect("the envoy container")
    }
    fn init_container(&self) -> &Value {
        named(&self.pod()["initContainers"], "envoy-initconfig").expect("envoy-initconfig")
    }
}

/// Contour's Envoy DaemonSet (its own file, in a kustomization of its own, as the release URL
/// in k8s/contour/kustomization.yaml gives it), rendered with the kit's component, or bare.
fn render(kit: bool) -> Manifests {
    let dir = TempDir::new("contour-release");
    std::fs::copy(fixture("03-envoy.yaml"), dir.0.join("03-envoy.yaml")).unwrap();
    let mut k = String::from("resources:\n- 03-envoy.yaml\n");
    if kit {
        let component = relative(&dir.0, &repo_root().join(COMPONENT));
        k.push_str(&format!("components:\n- {component}\n"));
    }
    std::fs::write(dir.0.join("kustomization.yaml"), k).unwrap();
    let text = kustomize(&dir.0);
    let docs = yaml_docs(&text);
    Manifests { text, docs }
}

fn kit() -> &'static Manifests {
    static M: OnceLock<Manifests> = OnceLock::new();
    M.get_or_init(|| render(true))
}

fn stock() -> &'static Manifests {
    static M: OnceLock<Manifests> = OnceLock::new();
    M.get_or_init(|| render(false))
}

/// Kubelet's command line for Contour's Envoy (its env: the pod's namespace and name).
fn envoy_args(m: &Manifests) -> Vec<String> {
    container_args(
        m.envoy(),
        &[
            ("metadata.namespace", NAMESPACE),
            ("metadata.name", POD_NAME),
        ],
    )
}

/// What `contour bootstrap` writes into the pod with the example's flags (its init container's
/// arguments): `/config/envoy.json` and its two SDS files, each as JSON.
struct ContourBootstrap {
    bootstrap: Value,
    tls_certificate: Value,
    validation_context: Value,
}

/// Contour's own expected output for these flags (the fixtures, from Contour's test), with each
/// value its test case fills in replaced by the example's (each one checked first): the
/// namespace in the clusters' stat names, the xDS address `contour` (a name: Contour makes the
/// cluster STRICT_DNS, an IP STATIC), the resources directory and the certificate files.
fn contour_bootstrap(m: &Manifests) -> ContourBootstrap {
    let init = m.init_container();
    let args: Vec<&str> = items(&init["args"], "args")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "bootstrap",
            "/config/envoy.json",
            "--xds-address=contour",
            "--xds-port=8001",
            "--xds-resource-version=v3",
            "--resources-dir=/config/resources",
            "--envoy-cafile=/certs/ca.crt",
            "--envoy-cert-file=/certs/tls.crt",
            "--envoy-key-file=/certs/tls.key",
        ],
        "the example's bootstrap flags"
    );
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
    };
    let mut b = read("bootstrap.json");
    for c in b["static_resources"]["clusters"].as_array_mut().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let port = if name == "contour" { 8001 } else { 9001 };
        assert_eq!(c["alt_stat_name"], format!("testing-ns_{name}_{port}"));
        c["alt_stat_name"] = json!(format!("{NAMESPACE}_{name}_{port}"));
        if name == "contour" {
            assert_eq!(c["type"], "STATIC");
            c["type"] = json!("STRICT_DNS");
            let a = &mut c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
                ["address"]["socket_address"];
            assert_eq!(*a, json!({"address": "127.0.0.1", "port_value": 8001}));
            a["address"] = json!("contour");
            let tls = &mut c["transport_socket"]["typed_config"]["common_tls_context"];
            for key in [
                "/tls_certificate_sds_secret_configs/0/sds_config/path_config_source/path",
                "/validation_context_sds_secret_config/sds_config/path_config_source/path",
            ] {
                let p = tls.pointer_mut(key).expect(key);
                let rel = p.as_str().unwrap().to_string();
                assert!(rel.starts_with("resources/sds/"), "{rel}");
                *p = json!(format!("/config/{rel}"));
            }
        }
    }
    let mut tls_certificate = read("sds/xds-tls-certificate.json");
    let cert = &mut tls_certificate["resources"][0]["tls_certificate"];
    assert_eq!(cert["certificate_chain"]["filename"], "client.cert");
    assert_eq!(cert["private_key"]["filename"], "client.key");
    cert["certificate_chain"]["filename"] = json!("/certs/tls.crt");
    cert["private_key"]["filename"] = json!("/certs/tls.key");
    let mut validation_context = read("sds/xds-validation-context.json");
    let ca = &mut validation_context["resources"][0]["validation_context"]["trusted_ca"];
    assert_eq!(ca["filename"], "CA.cert");
    ca["filename"] = json!("/certs/ca.crt");
    ContourBootstrap {
        bootstrap: b,
        tls_certificate,
        validation_context,
    }
}

/// The pod's files, under `dir`: Contour's bootstrap and SDS files at the paths the pod has them
/// (under `dir`), a self-signed certificate as the envoycert Secret, and the envoy-admin
/// volume's directory. Returns the bootstrap's local path; `edit` changes the bootstrap first.
fn write_pod_files(dir: &Path, cb: &ContourBootstrap, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let local = |v: &Value| -> Value {
        let text = v.to_string();
        let mut out = text.clone();
        for prefix in ["/config/", "/certs/", "/admin/"] {
            out = out.replace(
                &format!("\"{prefix}"),
                &format!("\"{}{prefix}", dir.display()),
            );
        }
        assert_ne!(out, text, "no pod path in {text}");
        serde_json::from_str(&out).unwrap()
    };
    for d in ["config/resources/sds", "certs", "admin"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let made = rcgen::generate_simple_self_signed(vec!["contour".to_string()]).unwrap();
    for (file, text) in [
        ("ca.crt", made.cert.pem()),
        ("tls.crt", made.cert.pem()),
        ("tls.key", made.key_pair.serialize_pem()),
    ] {
        std::fs::write(dir.join("certs").join(file), text).unwrap();
    }
    for (file, v) in [
        ("xds-tls-certificate.json", &cb.tls_certificate),
        ("xds-validation-context.json", &cb.validation_context),
    ] {
        let path = dir.join("config/resources/sds").join(file);
        std::fs::write(path, local(v).to_string()).unwrap();
    }
    let mut b = local(&cb.bootstrap);
    edit(&mut b);
    let path = dir.join("config/envoy.json");
    std::fs::write(&path, b.to_string()).unwrap();
    path
}

/// Contour's arguments with `-c /config/envoy.json` pointing at `bootstrap`.
fn local_args(args: &[String], bootstrap: &Path) -> Vec<String> {
    assert_eq!(args[..2], ["-c", "/config/envoy.json"], "{args:?}");
    let mut out = args.to_vec();
    out[1] = bootstrap.display().to_string();
    out
}

/// Every fixture is the release's own: the DaemonSet's git blob id, the files taken from
/// Contour's test by their sha256 (SOURCES); the kit's base is that release's manifest, and the
/// kit holds no copy of it.
#[test]
fn the_fixtures_are_contour_s_own_release_files() {
    let dir = common::platforms().join("contour");
    let mut checked = Vec::new();
    for f in checked_fixture_sources(&dir) {
        assert_eq!(f.tag, RELEASE, "{f:?}");
        checked.push(f.fixture);
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "v1.33.6/03-envoy.yaml",
            "v1.33.6/bootstrap.json",
            "v1.33.6/sds/xds-tls-certificate.json",
            "v1.33.6/sds/xds-validation-context.json"
        ]
    );
    let k = std::fs::read_to_string(repo_root().join(KIT).join("kustomization.yaml")).unwrap();
    let url = format!(
        "https://raw.githubusercontent.com/projectcontour/contour/{RELEASE}/examples/render/contour.yaml"
    );
    assert!(
        k.lines().any(|l| l.trim() == format!("- {url}")),
        "the kit's base is not {url}:\n{k}"
    );
    let files: Vec<String> = std::fs::read_dir(repo_root().join(COMPONENT))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    for f in &files {
        let text = std::fs::read_to_string(repo_root().join(COMPONENT).join(f)).unwrap();
        assert!(
            !text.contains("ghcr.io/projectcontour/contour:"),
            "{f} copies Contour's objects"
        );
    }
}

/// Over Contour v1.33.6's Envoy DaemonSet: valid for the Kubernetes schemas; Contour's objects
/// stay Contour's but for the Envoy pod:
/// the shutdown-manager sidecar gone, and in the envoy container only what the module needs.
#[test]
fn the_kit_changes_only_how_contour_s_envoy_pod_stops() {
    let (m, s) = (kit(), stock());
    let (_dir, path) = temp_file("contour", "rendered.yaml", &m.text);
    let (ok, text) = kubernetes_validate(&path);
    assert!(
        ok && text.contains("passed for resource daemonset/envoy"),
        "{text}"
    );
    assert_eq!(m.docs.len(), s.docs.len(), "objects added or lost");

    // The shutdown-manager sidecar and Envoy's preStop hook that waits for it are gone.
    assert!(s.container("shutdown-manager").is_some());
    assert!(m.container("shutdown-manager").is_none());
    let (c, sc) = (m.envoy(), s.envoy());
    assert_eq!(
        sc["lifecycle"]["preStop"]["httpGet"],
        json!({"path": "/shutdown", "port": 8090, "scheme": "HTTP"})
    );
    assert!(c["lifecycle"].is_null(), "{}", c["lifecycle"]);
    // Contour's image, arguments in order, then the kit's two.
    assert_eq!(c["image"], CONTOUR_ENVOY_IMAGE);
    let (raw, stock_raw) = (items(&c["args"], "args"), items(&sc["args"], "args"));
    assert_eq!(raw[..stock_raw.len()], stock_raw[..], "Contour's args");
    assert_eq!(raw.len(), stock_raw.len() + 2);
    assert_eq!(raw[stock_raw.len()], "--config-yaml");
    let extra = config_yaml(&envoy_args(m));
    // The module from the image volume, where Envoy is told to look.
    let search = named(&c["env"], "ENVOY_DYNAMIC_MODULES_SEARCH_PATH").expect("search path");
    let mount = named(&c["volumeMounts"], "graceful-drain").expect("module mount");
    assert_eq!(mount["mountPath"], search["value"]);
    assert_eq!(mount["readOnly"], true);
    let volume = named(&m.pod()["volumes"], "graceful-drain").expect("module volume");
    assert_eq!(
        volume["image"]["reference"],
        format!("graceful-drain:{}", env!("CARGO_PKG_VERSION")),
        "the module image `make dist` tags"
    );
    // The control port, declared.
    let control = named(
        &extra["static_resources"]["listeners"],
        "graceful-drain-control",
    )
    .expect("the control listener");
    let port = named(&c["ports"], "drain-control").expect("control port declared");
    assert_eq!(
        port["containerPort"],
        control["address"]["socket_address"]["port_value"]
    );
    // Probes: Contour's own readiness check, as Contour ships it; no liveness and no startup
    // probe, as Contour has none (the_kit_s_probes_restart_or_unready_nothing_contour_s_would_not).
    assert_eq!(c["readinessProbe"], sc["readinessProbe"]);
    assert!(sc["livenessProbe"].is_null() && c["livenessProbe"].is_null());
    assert!(sc["startupProbe"].is_null() && c["startupProbe"].is_null());
    // Kubelet's SIGKILL (Contour's grace period, kept) comes after the drain's bound.
    let timeout = duration(&module_settings(&extra)["drain_timeout"]);
    let grace = m.pod()["terminationGracePeriodSeconds"].as_f64().unwrap();
    assert_eq!(
        grace,
        s.pod()["terminationGracePeriodSeconds"].as_f64().unwrap()
    );
    assert!(grace >= timeout.as_secs_f64() + 5.0, "grace {grace}s");

    // Everything else is Contour's.
    let (mut d, mut sd) = (m.daemonset().clone(), s.daemonset().clone());
    for x in [&mut d, &mut sd] {
        let pod = x["spec"]["template"]["spec"].as_object_mut().unwrap();
        pod.remove("volumes");
        let containers = pod["containers"].as_array_mut().unwrap();
        containers.retain(|c| c["name"] == "envoy");
        let c = containers[0].as_object_mut().unwrap();
        for f in ["args", "env", "ports", "lifecycle", "volumeMounts"] {
            c.remove(f);
        }
    }
    assert_eq!(d, sd, "other changes to the DaemonSet");
    for (list, what) in [
        (&c["ports"], &sc["ports"]),
        (&c["volumeMounts"], &sc["volumeMounts"]),
        (&c["env"], &sc["env"]),
        (&m.pod()["volumes"], &s.pod()["volumes"]),
    ] {
        for x in items(what, "list") {
            assert!(items(list, "list").contains(x), "lost: {x}");
        }
    }
}

/// A probe's field, or Kubernetes' default where it is unset.
fn probe_field(probe: &Value, field: &str) -> u64 {
    probe[field].as_u64().unwrap_or(match field {
        "periodSeconds" => 10,
        "failureThreshold" => 3,
        "timeoutSeconds" => 1,
        _ => 0,
    })
}

/// Issue 64: no probe restarts or unreadies Contour's Envoy where Contour's would not. Contour
/// has no liveness and no startup probe: a Contour outage leaves Envoy not ready, serving its
/// last configuration, and a startup probe (restarting Envoy with no xDS after its budget) would
/// turn it into a CrashLoopBackOff on every node. Readiness is Contour's, field by field (three
/// failures 4 s apart, not one: an xDS push that stalls the main thread must not take every
/// node out of the load balancer).
#[test]
fn the_kit_s_probes_restart_or_unready_nothing_contour_s_would_not() {
    let (c, sc) = (kit().envoy(), stock().envoy());
    for probe in ["livenessProbe", "startupProbe"] {
        assert!(sc[probe].is_null(), "Contour's {probe}: {}", sc[probe]);
        assert!(c[probe].is_null(), "the kit's {probe}: {}", c[probe]);
    }
    for f in [
        "periodSeconds",
        "failureThreshold",
        "timeoutSeconds",
        "initialDelaySeconds",
        "successThreshold",
    ] {
        assert_eq!(
            probe_field(&c["readinessProbe"], f),
            probe_field(&sc["readinessProbe"], f),
            "readiness {f}"
        );
    }
    assert_eq!(c["readinessProbe"], sc["readinessProbe"]);
}

/// Issue 64: the drain's bound is Contour's own: its terminationGracePeriodSeconds (300 s) kept,
/// drain_timeout using all of it but Envoy's teardown.
#[test]
fn the_drain_bound_is_contour_s_own() {
    let grace = stock().pod()["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    assert_eq!(grace, 300, "Contour's grace period");
    assert_eq!(
        kit().pod()["terminationGracePeriodSeconds"].as_u64(),
        Some(grace)
    );
    for extra in [None, Some("dual-stack")] {
        let timeout = duration(&kit_settings(extra)["drain_timeout"]);
        assert!(
            timeout >= Duration::from_secs(grace - 10) && timeout <= Duration::from_secs(grace - 5),
            "{extra:?}: drain_timeout {timeout:?} against a {grace} s grace period"
        );
    }
}

/// The module's settings in the kit's `--config-yaml`, with component `extra` or not.
fn kit_settings(extra: Option<&str>) -> Value {
    let Some(extra) = extra else {
        return module_settings(&config_yaml(&envoy_args(kit())));
    };
    let dir = TempDir::new("contour-component");
    std::fs::copy(fixture("03-envoy.yaml"), dir.0.join("03-envoy.yaml")).unwrap();
    let k = format!(
        "resources:\n- 03-envoy.yaml\ncomponents:\n- {}\n- {}\n",
        relative(&dir.0, &repo_root().join(COMPONENT)),
        relative(&dir.0, &repo_root().join(KIT).join(extra))
    );
    std::fs::write(dir.0.join("kustomization.yaml"), k).unwrap();
    let text = kustomize(&dir.0);
    let m = Manifests {
        docs: yaml_docs(&text),
        text,
    };
    module_settings(&config_yaml(&envoy_args(&m)))
}

/// The slowest default health check of a cloud load balancer in front of an
/// `externalTrafficPolicy: Local` Service that the kit covers: the AWS Load Balancer
/// Controller's NLB, 10 s x 2 (GKE's: 3 s x 2; Azure's: 5 s x 2).
const LB_DETECTION: Duration = Duration::from_secs(20);

/// Issue 64: Contour's own Service (the release's one-file manifest) is a LoadBalancer with
/// `externalTrafficPolicy: Local`: kube-proxy forwards the load balancer's traffic for a node
/// only to a pod whose readiness passes, while the load balancer goes on sending to the node
/// until its own check fails. The kit keeps readiness 200 past that (readiness_failure_delay),
/// below min_drain_duration (the module refuses it otherwise).
#[test]
fn readiness_outlasts_the_load_balancer_s_check_of_contour_s_local_service() {
    let release = std::fs::read_to_string(fixture("contour.yaml")).unwrap();
    let service = yaml_docs(&release)
        .into_iter()
        .find(|d| {
            d["kind"] == "Service"
                && d["metadata"]["namespace"] == NAMESPACE
                && d["spec"]["selector"]["app"] == "envoy"
        })
        .expect("Contour's Envoy Service");
    assert_eq!(service["spec"]["type"], "LoadBalancer");
    assert_eq!(service["spec"]["externalTrafficPolicy"], "Local");
    for extra in [None, Some("dual-stack")] {
        let s = kit_settings(extra);
        let delay = duration(&s["readiness_failure_delay"]);
        let min = duration(&s["min_drain_duration"]);
        assert!(
            delay >= LB_DETECTION + Duration::from_secs(5),
            "{extra:?}: readiness_failure_delay {delay:?}"
        );
        assert!(delay < min, "{extra:?}: {delay:?} not below {min:?}");
    }
}

/// The module's pieces Envoy adds to Contour v1.33.6's bootstrap: the drain engine with the admin where
/// Contour's bootstrap puts it (a unix socket in the volume Envoy's container mounts) and
/// Contour's own admin and stats listeners ignored; a control listener whose name and port no
/// Contour listener has, the same listener as the Kourier kit's (whose tests show its RBAC rule
/// refusing /drain from outside the pod).
#[test]
fn the_kit_s_bootstrap_pieces_fit_contour_s_bootstrap() {
    let extra = config_yaml(&envoy_args(kit()));
    let mut keys: Vec<&String> = extra.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["bootstrap_extensions", "static_resources"]);
    let settings = module_settings(&extra);
    let cb = contour_bootstrap(kit());
    let admin = &cb.bootstrap["admin"]["address"]["pipe"]["path"];
    assert_eq!(settings["admin_address"], *admin);
    let mounted = items(&kit().envoy()["volumeMounts"], "volumeMounts")
        .iter()
        .any(|v| {
            admin
                .as_str()
                .unwrap()
                .starts_with(v["mountPath"].as_str().unwrap())
        });
    assert!(mounted, "the admin socket's volume is mounted in envoy");
    // The HTTP connection managers Contour pushes besides its ingress listeners
    // (internal/envoy/v3/stats.go: stats-health, stats, health with stat prefix "stats";
    // envoy-admin), and the admin's own.
    assert_eq!(
        settings["ignored_stat_prefixes"],
        json!(["admin", "envoy-admin", "stats"])
    );
    let listeners = items(&extra["static_resources"]["listeners"], "listeners");
    assert_eq!(listeners.len(), 1);
    let control = &listeners[0];
    for contour in [
        "ingress_http",
        "ingress_https",
        "stats-health",
        "stats",
        "health",
        "envoy-admin",
    ] {
        assert_ne!(control["name"], contour);
    }
    let port = control["address"]["socket_address"]["port_value"]
        .as_u64()
        .unwrap();
    // Contour's ports: ingress 8080 and 8443, stats and health 8002, envoy-admin 9001, xDS 8001,
    // the shutdown-manager's 8090 (gone with it).
    assert!(
        ![8080, 8443, 8002, 9001, 8001, 8090].contains(&port),
        "{port}"
    );
    // The Kourier kit's IPv4 listener (its ipv4-only component: Contour binds IPv4 as that does).
    let kourier = yaml(
        &std::fs::read_to_string(repo_root().join("k8s/kourier/ipv4-only/kustomization.yaml"))
            .unwrap(),
    );
    let ops = yaml(kourier["patches"][0]["patch"].as_str().unwrap());
    // The values of its operations: the container's name, --config-yaml, then the new value.
    let kourier = config_yaml(
        &items(&ops, "ops")
            .iter()
            .map(|op| op["value"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>(),
    );
    let mut k = kourier["static_resources"]["listeners"][0].clone();
    k["name"] = control["name"].clone();
    assert_eq!(
        hcm(&k)["http_filters"],
        hcm(control)["http_filters"],
        "the control listener's filters (RBAC first) differ from the Kourier kit's"
    );
    assert_eq!(k["address"], control["address"]);
    assert_eq!(hcm(&k)["route_config"], hcm(control)["route_config"]);
}

/// Kubelet's command line for Envoy (Contour v1.33.6's arguments and the kit's) over Contour's
/// bootstrap validates with the module, and not without it.
#[test]
fn the_envoy_command_line_validates_with_the_module() {
    let dir = TempDir::new("contour-validate");
    let cb = contour_bootstrap(kit());
    let bootstrap = write_pod_files(&dir.0, &cb, |_| {});
    let args = local_args(&envoy_args(kit()), &bootstrap);
    let extra = config_yaml(&args);
    let mut s = module_settings(&extra);
    s["admin_address"] = json!(dir.0.join("admin/admin.sock").display().to_string());
    let args = with_settings(&args, &s);
    let (ok, log) = validate_args(&args, module_dir());
    assert!(ok && log.contains("OK"), "{log}");
    assert!(log.contains("graceful_drain: drain engine loaded"), "{log}");
    assert!(!log.contains("envoy_bug"), "{log}");
    let empty = TempDir::new("no-module");
    let (ok, log) = validate_args(&args, &empty.0);
    assert!(!ok, "validated without the module:\n{log}");
}

/// `args` with the module's settings in `--config-yaml` replaced by `s`.
fn with_settings(args: &[String], s: &Value) -> Vec<String> {
    let mut extra = config_yaml(args);
    extra["bootstrap_extensions"][0]["typed_config"]["extension_config"]["value"] =
        json!(s.to_string());
    let at = args.iter().position(|a| a == "--config-yaml").unwrap();
    let mut out = args.to_vec();
    out[at + 1] = extra.to_string();
    out
}

/// The ports of a gateway started by [`start_gateway`].
struct Contour {
    /// Contour's ingress_http listener (8080 in the pod).
    http: u16,
    /// Contour's stats-health listener (8002): the admin's /ready and /stats.
    stats: u16,
    /// The admin's unix socket (Contour's /admin/admin.sock).
    admin_socket: PathBuf,
}

/// The control listener is on [::1] (none for the stock pod; on 127.0.0.1 when started
/// unconfigured).
type Gateway = common::gateway::Gateway<Contour>;

/// The listeners, routes and clusters Contour pushes for one HTTPProxy, as files (Contour
/// v1.33.6 internal/envoy/v3/listener.go, stats.go, internal/xdscache/v3/listener.go): listener
/// ingress_http (one HTTP connection manager, stat prefix ingress_http, routes over RDS, Contour's
/// filters before the router), stats-health (stat prefix stats: /ready, /stats and
/// /stats/prometheus to the envoy-admin cluster, the admin's socket) and envoy-admin (127.0.0.1,
/// the admin's read-only paths), and the service's cluster.
fn write_contour_xds(run: &Launch, ports: [u16; 3], upstream: u16) -> (PathBuf, PathBuf) {
    let write = |name: &str, resources: Value| run.xds_file(name, resources);
    let cluster = "default/echo/80/da39a3ee5e";
    let router = json!({"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}});
    let rds = write(
        "rds.json",
        json!([{
            "@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            "name": "ingress_http",
            "virtual_hosts": [{"name": "*", "domains": ["*"], "routes": [
                {"match": {"prefix": "/"}, "route": {"cluster": cluster}}
            ]}]
        }]),
    );
    let ingress = json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": "ingress_http",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": ports[0]}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "ingress_http",
                "codec_type": "AUTO",
                "rds": {"route_config_name": "ingress_http", "config_source": path_source(&rds)},
                "http_filters": [
                    {"name": "envoy.filters.http.grpc_web", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb"}},
                    {"name": "envoy.filters.http.cors", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}},
                    {"name": "envoy.filters.http.local_ratelimit", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit", "stat_prefix": "http"}},
                    router
                ],
                "use_remote_address": true,
                "normalize_path": true
            }
        }]}]
    });
    let admin_routes = |paths: &[&str]| -> Value {
        let routes: Vec<Value> = paths
            .iter()
            .map(|p| {
                json!({"match": {"path": p, "headers": [{"name": ":method", "string_match": {"exact": "GET", "ignore_case": true}}]},
                       "route": {"cluster": "envoy-admin"}})
            })
            .collect();
        json!({"virtual_hosts": [{"name": "backend", "domains": ["*"], "routes": routes}]})
    };
    let static_listener = |name: &str, prefix: &str, port: u16, paths: &[&str]| {
        json!({
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": name,
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": prefix,
                    "route_config": admin_routes(paths),
                    "http_filters": [router],
                    "normalize_path": true
                }
            }]}],
            "ignore_global_conn_limit": true
        })
    };
    let lds = write(
        "lds.json",
        json!([
            ingress,
            static_listener(
                "stats-health",
                "stats",
                ports[1],
                &["/ready", "/stats", "/stats/prometheus"]
            ),
            static_listener(
                "envoy-admin",
                "envoy-admin",
                ports[2],
                &[
                    "/clusters",
                    "/listeners",
                    "/ready",
                    "/server_info",
                    "/stats",
                    "/stats/prometheus"
                ]
            ),
        ]),
    );
    let cds = write(
        "cds.json",
        json!([{
            "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "name": cluster,
            "type": "STATIC",
            "connect_timeout": "2s",
            "load_assignment": {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": upstream}}}}
            ]}]}
        }]),
    );
    (lds, cds)
}

/// Run Contour's Envoy with the command line kubelet gives it (`m`'s envoy container) over
/// Contour's bootstrap, with what only a cluster provides replaced by local stand-ins, each
/// checked to be Contour's first: Contour's xDS (listeners, clusters, runtime) by files, the
/// xDS cluster's DNS name by a loopback address nobody answers on (as Contour's test has it),
/// the pod's paths by a private directory, the ports by loopback ones (the control listener's
/// `::` by `::1`), and the drain settings by short ones.
async fn start_gateway(m: &Manifests, upstream: u16) -> Gateway {
    start_gateway_as(m, upstream, true).await
}

/// [`start_gateway`], `configured` or not yet: before Contour pushed its listeners (none in the
/// LDS file Envoy reads; [`Gateway::configure`] pushes them). Unconfigured, Envoy has no
/// listener of Contour's (the admin is a unix socket): the control listener, on 127.0.0.1 then,
/// tells when it runs.
async fn start_gateway_as(m: &Manifests, upstream: u16, configured: bool) -> Gateway {
    let mut run = Launch::new("contour", 5);
    let p = run.ports();
    let (lds, cds) = write_contour_xds(&run, [p[0], p[1], p[2]], upstream);
    run.hold_back_listeners_unless(configured, &lds);
    let control_ip = if configured { "::1" } else { "127.0.0.1" };
    let cb = contour_bootstrap(m);
    let bootstrap = write_pod_files(run.dir(), &cb, |b| {
        let grpc = json!({"api_type": "GRPC", "transport_api_version": "V3",
            "grpc_services": [{"envoy_grpc": {"cluster_name": "contour", "authority": "contour"}}]});
        let d = &mut b["dynamic_resources"];
        for (key, file) in [("lds_config", &lds), ("cds_config", &cds)] {
            assert_eq!(d[key]["api_config_source"], grpc, "{key}");
            d[key] = path_source(file);
        }
        let layers = b["layered_runtime"]["layers"].as_array_mut().unwrap();
        assert_eq!(
            layers[0]["rtds_layer"]["rtds_config"]["api_config_source"],
            grpc
        );
        layers[0] = json!({"name": "dynamic", "static_layer": {}});
        let c = b["static_resources"]["clusters"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["name"] == "contour")
            .unwrap();
        c["type"] = json!("STATIC");
        c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] =
            json!({"socket_address": {"address": "127.0.0.1", "port_value": p[3]}});
    });
    let admin_socket = run.dir().join("admin/admin.sock");

    let mut control = None;
    // The control listener on loopback (else where a test bound it: its checks are the test's).
    let mut control_on_loopback = true;
    let mut args = Vec::new();
    let mut given = local_args(&envoy_args(m), &bootstrap).into_iter();
    while let Some(a) = given.next() {
        match a.as_str() {
            "--config-yaml" => {
                let mut extra = yaml(&given.next().expect("the --config-yaml value"));
                let l = &mut extra["static_resources"]["listeners"][0];
                // IPv4 in the pod, as Contour's own listeners; IPv6 loopback here (the
                // dual-stack component's family; the IPv4 bind: tests/ip_family.rs).
                // (A test may have bound it to another address of the machine: kept.)
                assert_eq!(l["address"]["socket_address"]["port_value"], json!(10001));
                let kept = l["address"]["socket_address"]["address"]
                    .as_str()
                    .unwrap()
                    .to_string();
                control_on_loopback = kept == "0.0.0.0";
                let at = if control_on_loopback {
                    control_ip.to_string()
                } else {
                    kept
                };
                l["address"] = json!({"socket_address": {"address": at, "port_value": p[4]}});
                // ... with the dual-stack component's rule: /drain from ::1 too (as shipped; or
                // narrowed by a test to an address its client does not have).
                drain_also_from_ipv6_loopback(l, Some("127.0.0.2"));
                control = Some(p[4]);
                let mut s = module_settings(&extra);
                assert_eq!(s["admin_address"], "/admin/admin.sock");
                s["admin_address"] = json!(admin_socket.display().to_string());
                short_drain(&mut s, &ms(MIN_DRAIN), &ms(QUIET), "10s");
                // The kit's readiness_failure_delay, scaled as min_drain_duration is.
                assert!(s["readiness_failure_delay"].is_string(), "{s}");
                s["readiness_failure_delay"] = json!(ms(READINESS_DELAY));
                extra["bootstrap_extensions"][0]["typed_config"]["extension_config"]["value"] =
                    json!(s.to_string());
                args.push(a);
                args.push(extra.to_string());
            }
            x if x == "-c"
                || x == bootstrap.display().to_string()
                || x == format!("--service-cluster {NAMESPACE}")
                || x == format!("--service-node {POD_NAME}")
                || x == "--log-level info" =>
            {
                args.push(a)
            }
            other => panic!("an argument the test does not know: {other:?}"),
        }
    }
    // The stats-health listener stands in for the admin (its /ready and /stats go there);
    // Contour's own --log-level.
    let ready_port = if configured { p[1] } else { p[4] };
    let mut run = run
        .args(args)
        .platform_log_level()
        .guard_ports([ready_port, p[0], p[4]]);
    if let Some(c) = control {
        run = run
            .control(c, configured && control_on_loopback)
            .admin_found_in_log();
    }
    run.serving("Contour's ingress listener serving", p[0], "/ok", 200)
        .start(Contour {
            http: p[0],
            stats: p[1],
            admin_socket,
        })
        .await
}

/// What [`steady_client`] saw.
struct Steady {
    answers: Vec<clients::Resp>,
    /// The first request that failed (none: every one was answered).
    error: Option<String>,
    /// When it sent its last request.
    last_sent: Instant,
}

/// A keep-alive HTTP/1.1 client that sends a request every 100 ms (bounded: 30 s, 300
/// requests) until the server closes its connection or a request fails: a client that never
/// goes idle, which a count of open connections never sees reach 0.
fn steady_client(port: u16) -> tokio::task::JoinHandle<Steady> {
    tokio::spawn(async move {
        let mut out = Steady {
            answers: Vec::new(),
            error: None,
            last_sent: Instant::now(),
        };
        let mut c = match H1Conn::connect(port).await {
            Ok(c) => c,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end && out.answers.len() < 300 {
            out.last_sent = Instant::now();
            match c.send("GET", "/steady", &[]).await {
                Ok(r) => {
                    let close = r.header("connection") == Some("close");
                    out.answers.push(r);
                    if close {
                        if let Err(e) = c.wait_closed(Duration::from_secs(3)).await {
                            out.error = Some(e);
                        }
                        break;
                    }
                }
                Err(e) => {
                    out.error = Some(e);
                    break;
                }
            }
            // The client's pace: the behaviour under test, not a synchronisation.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        out
    })
}

/// Contour v1.33.6's Envoy with the kit. SIGTERM (kubelet's stop: the kit leaves no preStop)
/// with HTTP/1.1 and HTTP/2 requests in flight, a client that keeps sending, late requests and idle keep-alive connections: every
/// request is answered, the busy connections are told to go, the probes say what kubelet must
/// see, and Envoy exits by the drain's rules, not waiting for the idle connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kit_drains_contour_s_envoy_without_losing_a_request() {
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        ports: Contour { http, stats, .. },
        control,
        ..
    } = start_gateway(kit(), upstream.port).await;
    let control = control.unwrap();
    assert_eq!(status_v6(control, "/ready").await, Ok(200), "readiness");
    assert_eq!(status_v6(control, "/drain/status").await, Ok(200));
    let startup = clients::get(stats, "/ready").await.unwrap();
    assert_eq!(startup.status, 200, "startup: Contour's /ready");
    let metrics = clients::get(stats, "/stats/prometheus")
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("envoy_graceful_drain_draining"),
        "{metrics}"
    );

    // A client that keeps sending (one of its requests may be in flight too).
    let steady = steady_client(http);
    let kit = Kit {
        name: "contour",
        rules: [MIN_DRAIN, QUIET],
        slow: Slow {
            path: SLOW,
            headers: &[],
        },
        prefix: "",
        http1: vec![http, http],
        http1_told: false,
        http2: http,
        http2_streams: 2,
        late_http2: true,
        late_http1: None,
        // Idle from before the SIGTERM to the end: they must not hold the exit.
        idle: Some(Idle {
            http1: Some(http),
            http2: http,
            told: false,
        }),
        in_flight: InFlight::Gauge {
            stats: &["http.ingress_http.downstream_rq_active"],
            extra: 1,
        },
        // The drain failed Envoy's health checks through the admin's socket: Contour's own
        // readiness check fails too; the liveness probe passes.
        ready: Ready::Probes {
            control,
            platform: stats,
        },
    };
    let mut drain = Drain::in_flight(&envoy, kit).await;
    drain.sigterm(&mut envoy).await;
    // The steady client: every request answered, the last one after the drain start with
    // `connection: close`, then the connection closed (it reconnects elsewhere).
    let steady = steady.await.unwrap();
    assert_eq!(steady.error, None, "the steady client lost a request");
    assert!(steady.answers.iter().all(|r| r.status == 200));
    assert_eq!(
        steady.answers.last().unwrap().header("connection"),
        Some("close"),
        "the steady client was not told to go"
    );
    drain.started(steady.last_sent);
    drain.finish(&mut envoy).await;
}

/// Contour's shutdown sequence, written here from its source (cmd/contour/shutdownmanager.go at
/// v1.33.6): the shutdown-manager's preStop (`contour envoy shutdown`) POSTs
/// `/healthcheck/fail` to the admin's socket, then every `check-interval` (5 s by default; 1 s
/// here) reads `/stats/prometheus?filter=^http\..*\.downstream_cx_active$` and sums
/// `envoy_http_downstream_cx_active` but for the labels admin, envoy-admin, stats, health and
/// stats-health; at most `min-open-connections` (0) writes /admin/ok, which Envoy's own preStop
/// (`/shutdown` on the shutdown-manager) waits for before kubelet sends SIGTERM. It has no
/// bound of its own: the pod's grace period (300 s) ends it.
async fn contour_open_connections(admin: &Path) -> Option<i64> {
    let r = unix_request(
        admin,
        "GET",
        "/stats/prometheus?filter=%5Ehttp%5C..%2A%5C.downstream_cx_active%24",
    )
    .await
    .ok()?;
    let mut open = 0;
    for line in r.text().lines() {
        let Some(rest) = line.strip_prefix("envoy_http_downstream_cx_active{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ")?;
        let label = labels.split_once("=\"")?.1.trim_end_matches('"');
        if !["admin", "envoy-admin", "stats", "health", "stats-health"].contains(&label) {
            open += value.trim().parse::<i64>().ok()?;
        }
    }
    Some(open)
}

/// How long kubelet keeps a pod whose readiness check fails counted as Ready, at most: the
/// probe's period times its failure threshold (Kubernetes' default 3 where unset).
fn readiness_detection(c: &Value) -> Duration {
    let p = &c["readinessProbe"];
    let period = p["periodSeconds"].as_u64().unwrap_or(10);
    let threshold = p["failureThreshold"].as_u64().unwrap_or(3);
    Duration::from_secs(period * threshold)
}

/// The readiness check the kit leaves in place (Contour's own: `/ready` on 8002, its stats-health
/// listener, which Contour pushes, routed to the admin's /ready), run as kubelet runs it: before
/// Contour configured Envoy it is not Ready (no listener on 8002, while the module's static
/// control listener would already answer 200); once Contour pushed its listeners, 200; at the
/// drain start (SIGTERM: the module fails Envoy's health checks), 503 at once, never a refused
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contour_s_readiness_check_follows_contour_and_the_drain() {
    let m = kit();
    let probe = &m.container("envoy").unwrap()["readinessProbe"]["httpGet"];
    assert_eq!(
        (&probe["path"], &probe["port"]),
        (&json!("/ready"), &json!(8002)),
        "Contour's check on its stats-health listener (the gateway's `stats` port here)"
    );
    let upstream = Upstream::start().await;
    let mut gw = start_gateway_as(m, upstream.port, false).await;
    let control = gw.control.unwrap();
    let get = |port: u16, path: &'static str| async move {
        clients::get(port, path).await.ok().map(|r| r.status)
    };
    // (a) Envoy runs (the module's control listener answers), unconfigured.
    assert_eq!(get(control, "/ready").await, Some(200));
    let before = get(gw.stats, "/ready").await;
    assert!(
        !before.is_some_and(|s| (200..300).contains(&s)),
        "Ready before Contour configured Envoy: {before:?}"
    );
    // (b) Contour's push.
    gw.configure();
    eventually("Contour's check 200", Duration::from_secs(10), || async {
        (get(gw.stats, "/ready").await == Some(200)).then_some(())
    })
    .await;
    // (c) The drain start.
    let sigterm = Instant::now();
    gw.envoy.sigterm();
    let after = clients::readiness_turns_503("Contour", sigterm, || get(gw.stats, "/ready")).await;
    eprintln!("Contour's readiness check 503 {after:?} after the SIGTERM");
    // Not before readiness_failure_delay: the load balancer's own check moves first.
    assert!(
        after >= READINESS_DELAY,
        "503 {after:?} after the SIGTERM, before readiness_failure_delay"
    );
    assert_eq!(get(control, "/drain/status").await, Some(200));
    gw.envoy.wait_exit(Duration::from_secs(15)).await;
}

/// Issue 64: `/drain` starts a drain, so the kit's control listener admits it only from inside
/// the pod (loopback), while the probes' paths answer anyone: shown on the kit as it is (a
/// loopback call is accepted), then with the rule's allowed sources narrowed to 127.0.0.2, an
/// address the test's client does not have (every test connection is loopback), the rule
/// otherwise unchanged: 403 and no drain. (A caller from another host, with the rule as shipped:
/// tests/kourier.rs, the same rule.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_pod_itself_may_start_a_drain_through_the_control_listener() {
    let upstream = Upstream::start().await;
    let gw = start_gateway(kit(), upstream.port).await;
    let (status, body) = clients::request_v6(gw.control.unwrap(), "POST", "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(status, 202, "from inside the pod: {body}");
    drop(gw);

    let mut m = render(true);
    edit_config_yaml(&mut m, |extra| {
        let rbac = &mut extra["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
            ["typed_config"]["http_filters"][0];
        assert_eq!(
            rbac["name"], "envoy.filters.http.rbac",
            "the rule runs before the module"
        );
        assert_eq!(rbac["typed_config"]["rules"]["action"], "DENY");
        let ids = &mut rbac["typed_config"]["rules"]["policies"]["drain-from-outside-the-pod"]
            ["principals"][0]["not_id"]["or_ids"]["ids"];
        assert_eq!(
            *ids,
            json!([{"direct_remote_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}}])
        );
        *ids = json!([{"direct_remote_ip": {"address_prefix": "127.0.0.2", "prefix_len": 32}}]);
    });
    let gw = start_gateway(&m, upstream.port).await;
    clients::assert_drain_refused_probes_open(gw.control.unwrap()).await;
}

/// Edits the kit's `--config-yaml` (the Envoy DaemonSet's last argument: the control listener
/// and the bootstrap extension) in rendered manifests.
fn edit_config_yaml(m: &mut Manifests, edit: impl FnOnce(&mut Value)) {
    let d = m
        .docs
        .iter_mut()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap();
    let envoy = d["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == "envoy")
        .unwrap();
    let last = envoy["args"].as_array_mut().unwrap().last_mut().unwrap();
    let mut extra = yaml(last.as_str().unwrap());
    edit(&mut extra);
    *last = json!(extra.to_string());
}

/// The kit's rule as shipped, from a real other host: a network namespace of the test's own
/// joined by a veth pair (its address, 10.200.x.2, is not loopback); the control listener bound
/// to this side's address of the pair (in the pod it is `0.0.0.0`, every address). `/drain` gets
/// the rule's 403 and starts no drain; the probes' paths answer. Needs `ip` and root (CI runs as
/// root); skipped with a message otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shipped_rule_refuses_a_drain_from_another_host() {
    let Some(other) = common::netns::OtherHost::or_skip() else {
        return;
    };
    let upstream = Upstream::start().await;
    let mut m = render(true);
    edit_config_yaml(&mut m, |extra| {
        extra["static_resources"]["listeners"][0]["address"]["socket_address"]["address"] =
            json!(other.here.to_string());
    });
    let gw = start_gateway(&m, upstream.port).await;
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

/// Contour v1.33.6's stock pod (the shutdown-manager, and Envoy's preStop waiting for it) run the same
/// way, its sequence reproduced from Contour's source: an idle keep-alive connection holds it
/// (failing health checks tells only connections that send a request; Envoy closes an idle one
/// at its idle timeout, which Contour leaves at Envoy's default, 1 h: in practice the pod's
/// 300 s grace period ends the wait), and once no connection is open it lets kubelet stop Envoy within a
/// second, while kubelet still counts the pod Ready (its readiness check, failing since the
/// health checks failed, needs three failures 4 s apart): a client arriving then is refused.
/// The kit keeps serving for min_drain_duration, longer than its own readiness check needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_contour_stops_envoy_while_kubelet_still_counts_the_pod_ready() {
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        ports: Contour {
            http, admin_socket, ..
        },
        control,
        ..
    } = start_gateway(stock(), upstream.port).await;
    assert!(control.is_none());
    let mut idle = H1Conn::connect(http).await.unwrap();
    assert_eq!(idle.send("GET", "/ok", &[]).await.unwrap().status, 200);
    eventually(
        "the idle connection counted",
        Duration::from_secs(5),
        || async { (contour_open_connections(&admin_socket).await == Some(1)).then_some(()) },
    )
    .await;
    // The stop starts: Contour's preStop fails Envoy's health checks, then polls.
    let t0 = Instant::now();
    let r = unix_request(&admin_socket, "POST", "/healthcheck/fail")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let mut counts = Vec::new();
    for _ in 0..4 {
        counts.push(contour_open_connections(&admin_socket).await);
        // Contour's check interval (1 s here, 5 s by default): the behaviour under test.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        counts.iter().all(|c| *c == Some(1)),
        "the idle connection did not hold Contour's sequence: {counts:?}"
    );
    assert!(idle.is_open(), "the idle connection was told to go");
    // The client leaves (or Envoy's idle timeout closes it): the next poll finds 0, Contour
    // writes /admin/ok, Envoy's preStop returns at its next check of the file (every second),
    // and kubelet sends SIGTERM.
    drop(idle);
    let done = eventually("Contour's count at 0", Duration::from_secs(5), || async {
        (contour_open_connections(&admin_socket).await == Some(0)).then(Instant::now)
    })
    .await;
    // Stock Envoy exits at once on SIGTERM: its teardown only (well under a second on an idle
    // machine; the bound leaves room for a machine with both cores busy, where it took over
    // 1.2 s), against the seconds the module would hold it.
    let bound = Duration::from_secs(3);
    let exited = envoy
        .sigterm_exits_within(done, bound, "stock Envoy held its exit")
        .await;
    // Kubelet counts the pod Ready until its readiness check has failed enough times.
    let ready_until = t0 + readiness_detection(stock().envoy());
    assert!(
        exited + Duration::from_secs(2) < ready_until,
        "Envoy exited {:?} after the stop, kubelet counts the pod Ready for {:?}",
        exited - t0,
        ready_until - t0
    );
    let refused = clients::get(http, "/ok").await;
    assert!(
        refused.is_err(),
        "a client still routed to the pod: {refused:?}"
    );
    // With the kit, the drain serves at least min_drain_duration: past its own readiness check's
    // detection, with room for the endpoint's removal to reach the load balancer.
    let min_drain =
        duration(&module_settings(&config_yaml(&envoy_args(kit())))["min_drain_duration"]);
    assert!(
        min_drain >= readiness_detection(kit().envoy()) + Duration::from_secs(10),
        "min_drain_duration {min_drain:?}"
    );
}
