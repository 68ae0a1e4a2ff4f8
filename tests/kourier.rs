//! The Kourier kit (`k8s/kourier`): a kustomize Component that adds graceful-drain to Kourier's
//! own release, checked against Kourier's releases themselves (`../shared/platforms/kourier`: the
//! bootstrap ConfigMap and gateway Deployment of knative-v1.23.0 and knative-v1.14.0, byte for
//! byte, checked against their git blob ids). Rendered over each the way `kubectl apply -k`
//! renders it: the output passes the Kubernetes schemas; Kourier's bootstrap is untouched and
//! every change to its Deployment is one the module needs; the command line kubelet gives Envoy
//! (Kourier's arguments plus the kit's `--config-yaml`) validates with the module; and the real
//! Envoy started with that command line, its listeners, routes and clusters from a file-based
//! xDS source shaped as net-kourier-controller builds them, drains HTTP/1.1 and HTTP/2 requests
//! in flight on SIGTERM (the kit's shutdown: no preStop) with 0 lost, without waiting for idle
//! connections. Kourier's stock gateway, run the same way, loses them.

use crate::common;

use common::clients::{self, status_v6};
use common::envoy::{module_dir, validate_args, TempDir};
use common::gateway::{ms, path_source, short_drain, Launch};
use common::json::{config_yaml, container_args, duration, hcm, items, module_settings, named};
use common::scenario::{Drain, Idle, InFlight, Kit, LateHttp1, Ready, Slow};
use common::tools::{
    checked_fixture_sources, kubernetes_validate, kustomize, relative, temp_file, yaml, yaml_docs,
};
use common::upstream::Upstream;
use common::{eventually, repo_root};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const KIT: &str = "k8s/kourier";
const COMPONENT: &str = "k8s/kourier/graceful-drain";
/// The Kourier releases the kit is checked against (../shared/platforms/kourier/SOURCES): the newest,
/// and the last one with the admin on a unix socket and no Envoy drain flags.
const NEWEST: &str = "knative-v1.23.0";
const OLDER: &str = "knative-v1.14.0";
const RELEASE_FILES: [&str; 2] = ["200-bootstrap.yaml", "300-gateway.yaml"];
const GATEWAY: &str = "3scale-kourier-gateway";
const CONTAINER: &str = "kourier-gateway";
const BOOTSTRAP_KEY: &str = "envoy-bootstrap.yaml";
/// The official Envoy image the kit moves Kourier's gateway to.
const ENVOY_IMAGE: &str = "docker.io/envoyproxy/envoy:v1.40.0";

/// Drain settings the run tests put in place of the kit's (everything else is kept).
const MIN_DRAIN: Duration = Duration::from_millis(300);
const QUIET: Duration = Duration::from_millis(200);

fn fixtures() -> PathBuf {
    common::platforms().join("kourier")
}

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
    fn pod(&self) -> &Value {
        &self.deployment()["spec"]["template"]["spec"]
    }
    fn container(&self) -> &Value {
        let c = &self.pod()["containers"][0];
        assert_eq!(c["name"], CONTAINER, "container 0 is Kourier's Envoy");
        c
    }
    /// Kourier's bootstrap, the ConfigMap kourier-bootstrap's envoy-bootstrap.yaml, as text.
    fn bootstrap_text(&self) -> &str {
        self.get("ConfigMap", "kourier-bootstrap")["data"][BOOTSTRAP_KEY]
            .as_str()
            .expect("envoy-bootstrap.yaml in kourier-bootstrap")
    }
}

/// Kourier's release `tag` (its own files, in a kustomization of their own, as the release URL
/// in k8s/kourier/kustomization.yaml gives them), rendered with the kit's component and `extra`
/// components of the kit, or bare.
fn render(tag: &str, kit: bool, extra: &[&str]) -> Manifests {
    let dir = TempDir::new("kourier-release");
    let mut k = String::from("resources:\n");
    for f in RELEASE_FILES {
        std::fs::copy(fixtures().join(tag).join(f), dir.0.join(f)).unwrap();
        k.push_str(&format!("- {f}\n"));
    }
    if kit {
        k.push_str("components:\n");
        k.push_str(&format!(
            "- {}\n",
            relative(&dir.0, &repo_root().join(COMPONENT))
        ));
        for c in extra {
            k.push_str(&format!(
                "- {}\n",
                relative(&dir.0, &repo_root().join(KIT).join(c))
            ));
        }
    }
    std::fs::write(dir.0.join("kustomization.yaml"), k).unwrap();
    let text = kustomize(&dir.0);
    let docs = yaml_docs(&text);
    Manifests { text, docs }
}

fn rendered(tag: &str, kit: bool) -> &'static Manifests {
    static M: [OnceLock<Manifests>; 4] = [const { OnceLock::new() }; 4];
    let at = match (tag, kit) {
        (NEWEST, true) => 0,
        (NEWEST, false) => 1,
        (OLDER, true) => 2,
        (OLDER, false) => 3,
        _ => panic!("not a tested release: {tag}"),
    };
    M[at].get_or_init(|| render(tag, kit, &[]))
}

/// The kit over release `tag`.
fn kit(tag: &str) -> &'static Manifests {
    rendered(tag, true)
}

/// Release `tag` as Kourier ships it.
fn stock(tag: &str) -> &'static Manifests {
    rendered(tag, false)
}

/// Kubelet's command line for Kourier's Envoy (its env holds plain values only).
fn envoy_args(c: &Value) -> Vec<String> {
    container_args(c, &[])
}

fn env_value<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    named(&c["env"], name).and_then(|v| v["value"].as_str())
}

fn port_of(listener: &Value) -> u64 {
    listener["address"]["socket_address"]["port_value"]
        .as_u64()
        .expect("listener port")
}

/// A cluster's one endpoint address, whichever way the YAML writes `endpoints` and
/// `lb_endpoints` (Kourier writes each as a single map where Envoy's schema has a list).
fn endpoint_address(cluster: &mut Value) -> &mut Value {
    let mut e = &mut cluster["load_assignment"]["endpoints"];
    if e.is_array() {
        e = &mut e[0];
    }
    let mut l = &mut e["lb_endpoints"];
    if l.is_array() {
        l = &mut l[0];
    }
    &mut l["endpoint"]["address"]
}

/// Every fixture is the release's own file: its git blob id is the one recorded from the
/// release, and the kit names the newest release's manifest as its base.
#[test]
fn the_fixtures_are_kourier_s_own_release_files() {
    let mut tags = Vec::new();
    for f in checked_fixture_sources(&fixtures()) {
        assert!(f.path.starts_with("config/"), "{f:?}");
        if !tags.contains(&f.tag) {
            tags.push(f.tag);
        }
    }
    assert_eq!(tags, [NEWEST, OLDER]);
    let k = std::fs::read_to_string(repo_root().join(KIT).join("kustomization.yaml")).unwrap();
    let url = format!(
        "https://github.com/knative-extensions/net-kourier/releases/download/{NEWEST}/kourier.yaml"
    );
    assert!(
        k.lines().any(|l| l.trim() == format!("- {url}")),
        "the kit's base is not {url}:\n{k}"
    );
    assert!(
        !repo_root().join(KIT).join("net-kourier").exists(),
        "a copy of Kourier's manifests in the kit"
    );
}

/// Over each release: valid for the Kubernetes schemas, the same objects as the release, and
/// every object but the gateway Deployment (Kourier's bootstrap included) exactly Kourier's.
#[test]
fn the_kit_renders_over_each_release_and_changes_only_the_gateway_deployment() {
    for tag in [NEWEST, OLDER] {
        let (m, s) = (kit(tag), stock(tag));
        let (_dir, path) = temp_file("kourier", "rendered.yaml", &m.text);
        let (ok, text) = kubernetes_validate(&path);
        assert!(ok, "{tag}: {text}");
        assert!(
            text.contains(&format!("passed for resource deployment/{GATEWAY}")),
            "{tag}: {text}"
        );
        let ids = |m: &Manifests| -> Vec<String> {
            let mut v: Vec<String> = m
                .docs
                .iter()
                .map(|d| format!("{}/{}", d["kind"], d["metadata"]["name"]))
                .collect();
            v.sort();
            v
        };
        assert_eq!(ids(m), ids(s), "{tag}: objects added or lost");
        for d in &s.docs {
            if d["kind"] == "Deployment" && d["metadata"]["name"] == GATEWAY {
                continue;
            }
            let name = d["metadata"]["name"].as_str().unwrap();
            assert_eq!(
                m.get(d["kind"].as_str().unwrap(), name),
                d,
                "{tag}: {name} changed"
            );
        }
        assert_eq!(m.bootstrap_text(), s.bootstrap_text(), "{tag}: bootstrap");
    }
}

/// What the kit changes in Kourier's gateway Deployment, release by release, and that nothing
/// else changes: Kourier's arguments are all still there, in order, with `--config-yaml` and the
/// module's pieces after them.
#[test]
fn the_kit_changes_in_the_gateway_only_what_the_module_needs() {
    for tag in [NEWEST, OLDER] {
        let (m, s) = (kit(tag), stock(tag));
        let (c, sc) = (m.container(), s.container());
        // An official Envoy image the module runs in, in place of Kourier's (1.37 at 1.23.0).
        assert!(
            sc["image"]
                .as_str()
                .unwrap()
                .starts_with("docker.io/envoyproxy/envoy:"),
            "{tag}: {}",
            sc["image"]
        );
        assert_eq!(c["image"], ENVOY_IMAGE, "{tag}");
        // Kourier's arguments, then the kit's two.
        let (args, stock_args) = (envoy_args(c), envoy_args(sc));
        assert_eq!(args[..stock_args.len()].len(), stock_args.len());
        let raw: Vec<&Value> = items(&c["args"], "args").iter().collect();
        let stock_raw: Vec<&Value> = items(&sc["args"], "args").iter().collect();
        assert_eq!(
            raw[..stock_raw.len()],
            stock_raw[..],
            "{tag}: Kourier's args"
        );
        assert_eq!(raw.len(), stock_raw.len() + 2, "{tag}");
        assert_eq!(raw[stock_raw.len()], "--config-yaml", "{tag}");
        let extra = config_yaml(&args);
        // Envoy's drain flags, where Kourier sets them, let listeners accept for the whole drain.
        let timeout = duration(&module_settings(&extra)["drain_timeout"]);
        if stock_raw
            .iter()
            .any(|a| a.as_str().unwrap().contains("--drain-time-s"))
        {
            let t: u64 = env_value(c, "DRAIN_TIME_SECONDS").unwrap().parse().unwrap();
            assert!(
                Duration::from_secs(t) > timeout,
                "{tag}: --drain-time-s {t}"
            );
        }
        // The module from the image volume, where Envoy is told to look.
        let dir = env_value(c, "ENVOY_DYNAMIC_MODULES_SEARCH_PATH").expect("search path");
        let mount = named(&c["volumeMounts"], "graceful-drain").expect("module mount");
        assert_eq!(
            (mount["mountPath"].as_str(), &mount["readOnly"]),
            (Some(dir), &json!(true))
        );
        let volume = named(&m.pod()["volumes"], "graceful-drain").expect("module volume");
        let reference = volume["image"]["reference"]
            .as_str()
            .expect("an image volume");
        assert_eq!(
            reference,
            format!("graceful-drain:{}", env!("CARGO_PKG_VERSION")),
            "{tag}: the module image `make dist` tags"
        );
        // No preStop (Kourier's runs curl, absent from the image, and sleeps).
        assert!(c["lifecycle"].is_null(), "{tag}: {}", c["lifecycle"]);
        assert!(
            sc["lifecycle"]["preStop"].is_object(),
            "{tag}: Kourier's preStop"
        );
        // The control port, declared.
        let control = named(
            &extra["static_resources"]["listeners"],
            "graceful_drain_control",
        )
        .expect("the control listener");
        let port = named(&c["ports"], "drain-control").expect("control port declared");
        assert_eq!(port["containerPort"].as_u64(), Some(port_of(control)));
        // Readiness: Kourier's own check, as Kourier ships it (its controller configured the
        // gateway; 503 once Envoy's health checks fail). The startup probe is the same check.
        assert_eq!(c["readinessProbe"], sc["readinessProbe"], "{tag}");
        // Each probe is a request the drain counts (ingress_http): below quiet_period, probes
        // would hold every drain to drain_timeout (the readiness test shows both sides).
        let quiet = duration(&module_settings(&extra)["quiet_period"]);
        for probe in ["readinessProbe", "startupProbe"] {
            let period = Duration::from_secs(probe_field(&c[probe], "periodSeconds"));
            assert!(
                period > quiet,
                "{tag}: {probe} every {period:?}, quiet_period {quiet:?}"
            );
        }
        assert_eq!(
            c["startupProbe"]["httpGet"], sc["readinessProbe"]["httpGet"],
            "{tag}"
        );
        // Liveness: /drain/status, which a drain does not fail (Kourier's reads the admin's
        // /ready, which does).
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/drain/status");
        assert_eq!(c["livenessProbe"]["httpGet"]["port"], "drain-control");
        // SIGKILL comes at the grace period: it leaves drain_timeout plus Envoy's teardown.
        let grace = m.pod()["terminationGracePeriodSeconds"].as_f64().unwrap();
        assert!(
            grace >= timeout.as_secs_f64() + 5.0,
            "{tag}: grace {grace}s"
        );

        // Everything else is Kourier's.
        let (mut d, mut sd) = (m.deployment().clone(), s.deployment().clone());
        for x in [&mut d, &mut sd] {
            let pod = &mut x["spec"]["template"]["spec"];
            for f in ["terminationGracePeriodSeconds", "volumes"] {
                pod.as_object_mut().unwrap().remove(f);
            }
            let c = pod["containers"][0].as_object_mut().unwrap();
            for f in [
                "image",
                "args",
                "env",
                "ports",
                "lifecycle",
                "readinessProbe",
                "livenessProbe",
                "startupProbe",
                "volumeMounts",
            ] {
                c.remove(f);
            }
        }
        assert_eq!(d, sd, "{tag}: other changes to the Deployment");
        for (list, key) in [("ports", "name"), ("volumeMounts", "name")] {
            for x in items(&sc[list], list) {
                assert!(
                    named(&c[list], x[key].as_str().unwrap()) == Some(x),
                    "{tag}: {list} {x}"
                );
            }
        }
        for v in items(&s.pod()["volumes"], "volumes") {
            assert_eq!(
                named(&m.pod()["volumes"], v["name"].as_str().unwrap()),
                Some(v)
            );
        }
        for e in sc["env"].as_array().into_iter().flatten() {
            if e["name"] != "DRAIN_TIME_SECONDS" {
                assert!(items(&c["env"], "env").contains(e), "{tag}: env {e}");
            }
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

/// How long a probe that starts failing takes before kubelet acts on it (restart or unready):
/// its period times its failure threshold, plus its initial delay if `from_start`.
fn probe_budget(probe: &Value, from_start: bool) -> u64 {
    let delay = if from_start {
        probe_field(probe, "initialDelaySeconds")
    } else {
        0
    };
    delay + probe_field(probe, "periodSeconds") * probe_field(probe, "failureThreshold")
}

/// `kit` acts (restarts or unreadies) on nothing `stock` would not: as many failures, each
/// allowed as long, over at least as long a time (from the container's start if `from_start`).
fn no_stricter(what: &str, kit: &Value, stock: &Value, from_start: bool) {
    for f in ["failureThreshold", "timeoutSeconds"] {
        assert!(
            probe_field(kit, f) >= probe_field(stock, f),
            "{what}: {f} {} against stock's {}",
            probe_field(kit, f),
            probe_field(stock, f)
        );
    }
    assert!(
        probe_budget(kit, from_start) >= probe_budget(stock, from_start),
        "{what}: acts after {} s, stock after {} s",
        probe_budget(kit, from_start),
        probe_budget(stock, from_start)
    );
}

/// Issue 64: no probe restarts or unreadies Kourier's gateway where Kourier's own would not.
/// Readiness is Kourier's, unchanged (a large xDS push that stalls Envoy's main thread a few
/// seconds must not take gateways out of their Services); liveness is no stricter than
/// Kourier's; the startup probe (whose failure restarts Envoy) gives an unconfigured gateway at
/// least as long as Kourier's own liveness check does.
#[test]
fn the_kit_s_probes_restart_or_unready_nothing_kourier_s_would_not() {
    for tag in [NEWEST, OLDER] {
        let (c, sc) = (kit(tag).container(), stock(tag).container());
        assert_eq!(
            c["readinessProbe"], sc["readinessProbe"],
            "{tag}: readiness"
        );
        assert!(sc["livenessProbe"].is_object(), "{tag}: Kourier's liveness");
        // Once running: liveness. At the start the kit's startup probe gates it (below, against
        // Kourier's liveness with its initial delay).
        no_stricter(
            &format!("{tag}: liveness"),
            &c["livenessProbe"],
            &sc["livenessProbe"],
            false,
        );
        assert!(
            sc["startupProbe"].is_null(),
            "{tag}: Kourier has no startup probe"
        );
        no_stricter(
            &format!("{tag}: startup (restarts like liveness)"),
            &c["startupProbe"],
            &sc["livenessProbe"],
            true,
        );
    }
}

/// Knative Serving's default revision timeout (`revision-timeout-seconds` in its
/// config-defaults, 300 s): a request may take that long. Serving's ConfigMap is not part of
/// Kourier's release, so the kit cannot read it; this is its default.
const KNATIVE_REVISION_TIMEOUT: Duration = Duration::from_secs(300);

/// Issue 64: the drain's bound is at least Knative's own request bound, and kubelet's SIGKILL
/// and Envoy's `--drain-time-s` come after it.
#[test]
fn the_drain_bound_covers_knative_s_revision_timeout() {
    for tag in [NEWEST, OLDER] {
        for extra in [&[][..], &["ipv4-only"][..]] {
            let m = render(tag, true, extra);
            let c = m.container();
            let s = module_settings(&config_yaml(&envoy_args(c)));
            let timeout = duration(&s["drain_timeout"]);
            assert!(
                timeout >= KNATIVE_REVISION_TIMEOUT,
                "{tag} {extra:?}: drain_timeout {timeout:?}"
            );
            let grace = m.pod()["terminationGracePeriodSeconds"].as_u64().unwrap();
            assert!(
                Duration::from_secs(grace) >= timeout + Duration::from_secs(5),
                "{tag}: grace {grace}s"
            );
            let drain_time: u64 = env_value(c, "DRAIN_TIME_SECONDS").unwrap().parse().unwrap();
            assert!(
                Duration::from_secs(drain_time) > timeout,
                "{tag}: {drain_time}"
            );
        }
    }
}

/// Issue 64: where a Service in front of the gateway is `externalTrafficPolicy: Local`,
/// readiness must outlast the load balancer's own health check (the module's
/// `readiness_failure_delay`); Kourier's Services are not (`Cluster`, unset), and the kit then
/// fails readiness at the drain start.
#[test]
fn readiness_waits_for_load_balancers_only_where_kourier_s_service_is_local() {
    for tag in [NEWEST, OLDER] {
        let s = stock(tag);
        let services: Vec<&Value> = s
            .docs
            .iter()
            .filter(|d| {
                d["kind"] == "Service" && d["spec"]["selector"]["app"] == "3scale-kourier-gateway"
            })
            .collect();
        assert!(
            services.iter().any(|x| x["spec"]["type"] == "LoadBalancer"),
            "{tag}: Kourier's LoadBalancer Service"
        );
        let local = services
            .iter()
            .any(|x| x["spec"]["externalTrafficPolicy"] == "Local");
        assert!(
            !local,
            "{tag}: Kourier's Service turned Local: set readiness_failure_delay"
        );
        let settings = module_settings(&config_yaml(&envoy_args(kit(tag).container())));
        assert!(
            settings["readiness_failure_delay"].is_null(),
            "{tag}: {}",
            settings["readiness_failure_delay"]
        );
    }
}

/// Issue 64: node drains and cluster upgrades evict Kourier's gateways under Kourier's own
/// PodDisruptionBudget, which the kit keeps as it is and which selects the gateway's pods.
#[test]
fn kourier_s_disruption_budget_covers_the_gateway() {
    for tag in [NEWEST, OLDER] {
        let (m, s) = (kit(tag), stock(tag));
        let pdb = m.get("PodDisruptionBudget", "3scale-kourier-gateway-pdb");
        assert_eq!(
            pdb,
            s.get("PodDisruptionBudget", "3scale-kourier-gateway-pdb"),
            "{tag}"
        );
        let labels = &m.deployment()["spec"]["template"]["metadata"]["labels"];
        for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(
                &labels[k], v,
                "{tag}: the budget selects the gateway's pods"
            );
        }
        assert!(
            pdb["spec"]["minAvailable"].is_string() || pdb["spec"]["maxUnavailable"].is_string(),
            "{tag}: {pdb}"
        );
    }
}

/// The module's pieces Envoy adds to Kourier's bootstrap: the drain engine, with the admin where
/// either release has it and Kourier's stats listener ignored, and a dual-stack control listener
/// whose /drain only the pod itself may call.
#[test]
fn the_kit_s_bootstrap_pieces_fit_every_release() {
    for tag in [NEWEST, OLDER] {
        let extra = config_yaml(&envoy_args(kit(tag).container()));
        let mut keys: Vec<&String> = extra.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["admin", "bootstrap_extensions", "static_resources"]);
        let mut keys: Vec<&String> = extra["static_resources"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        keys.sort();
        assert_eq!(keys, ["clusters", "listeners"]);
        let b = yaml(kit(tag).bootstrap_text());
        let settings = module_settings(&extra);
        // The admin moves to its socket (Kourier's own place for it up to 1.14), which the
        // module calls; where Kourier's service_stats cluster reaches the admin over TCP, the
        // kit's read-only guard listens instead.
        assert_eq!(
            extra["admin"]["address"],
            json!({"pipe": {"path": "/tmp/envoy.admin"}})
        );
        assert_eq!(settings["admin_address"], "/tmp/envoy.admin", "{tag}");
        let guard = named(
            &extra["static_resources"]["listeners"],
            "graceful_drain_admin_guard",
        )
        .expect("the admin guard");
        let guard_at = json!({"socket_address": guard["address"]["socket_address"].clone()});
        let stats_cluster = named(&b["static_resources"]["clusters"], "service_stats").unwrap();
        let reached =
            &stats_cluster["load_assignment"]["endpoints"]["lb_endpoints"]["endpoint"]["address"];
        assert!(
            *reached == guard_at || *reached == extra["admin"]["address"],
            "{tag}: service_stats reaches {reached}, neither the guard nor the admin's socket"
        );
        let admin_cluster = named(
            &extra["static_resources"]["clusters"],
            "graceful_drain_admin",
        )
        .expect("the guard's cluster");
        assert_eq!(
            admin_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
                ["address"],
            extra["admin"]["address"]
        );
        assert!(
            items(&settings["ignored_stat_prefixes"], "ignored_stat_prefixes")
                .contains(&hcm(guard)["stat_prefix"]),
            "{tag}: the guard's requests (scrapes, probes) must not hold a drain"
        );
        for l in items(&b["static_resources"]["listeners"], "listeners") {
            let prefix = hcm(l)["stat_prefix"].as_str().unwrap();
            assert!(
                items(&settings["ignored_stat_prefixes"], "ignored_stat_prefixes")
                    .contains(&json!(prefix)),
                "{tag}: {prefix} not ignored"
            );
            assert!(named(
                &extra["static_resources"]["listeners"],
                l["name"].as_str().unwrap()
            )
            .is_none());
        }
        let control = named(
            &extra["static_resources"]["listeners"],
            "graceful_drain_control",
        )
        .unwrap();
        assert_eq!(
            control["address"]["socket_address"],
            json!({"address": "::", "port_value": 10001, "ipv4_compat": true}),
            "IPv4 and IPv6 pods"
        );
        assert!(
            b["bootstrap_extensions"].is_null(),
            "{tag}: Kourier's own bootstrap extensions"
        );
    }
}

/// kubelet's command line for the gateway, Kourier's bootstrap and the kit's `--config-yaml`,
/// validates with the module (and not without it: the image's Envoy alone refuses it).
#[test]
fn the_gateway_s_command_line_validates_with_the_module() {
    for tag in [NEWEST, OLDER] {
        let m = kit(tag);
        let dir = TempDir::new("kourier-validate");
        let args = local_paths(&envoy_args(m.container()), m, &dir.0, m.bootstrap_text());
        let (ok, log) = validate_args(&args, module_dir());
        assert!(ok && log.contains("OK"), "{tag}: {log}");
        assert!(
            log.contains("graceful_drain: drain engine loaded"),
            "{tag}: {log}"
        );
        assert!(!log.contains("envoy_bug"), "{tag}: {log}");
        let empty = TempDir::new("no-module");
        let (ok, log) = validate_args(&args, &empty.0);
        assert!(!ok, "{tag}: validated without the module:\n{log}");
    }
}

/// Kourier's arguments with the bootstrap path (`-c /tmp/config/...`, the ConfigMap's mount)
/// pointing at `bootstrap` written to `dir`.
fn local_paths(args: &[String], m: &Manifests, dir: &Path, bootstrap: &str) -> Vec<String> {
    let mount = named(&m.container()["volumeMounts"], "config-volume").expect("config volume");
    let pod_path = format!("{}/{BOOTSTRAP_KEY}", mount["mountPath"].as_str().unwrap());
    let local = dir.join(BOOTSTRAP_KEY);
    std::fs::write(&local, bootstrap).unwrap();
    let mut found = false;
    let out = args
        .iter()
        .map(|a| {
            if *a == format!("-c {pod_path}") {
                found = true;
                format!("-c {}", local.display())
            } else {
                a.clone()
            }
        })
        .collect();
    assert!(found, "no `-c {pod_path}` in {args:?}");
    out
}

/// The ports of a gateway started by [`start_gateway`].
struct Kourier {
    /// listener_8080 (external), listener_8081 (internal), listener_8090 (probe).
    external: u16,
    internal: u16,
    probe: u16,
    /// The stats listener (9000 in the pod): the admin's /ready and /stats.
    stats: u16,
}

type Gateway = common::gateway::Gateway<Kourier>;

fn hcm_over_rds(route_config: &str, rds_file: &Path) -> Value {
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

/// The xDS resources net-kourier-controller pushes for one Knative service, as files
/// (net-kourier knative-v1.23.0 `pkg/generator/caches.go`, `status_vhost.go`,
/// `pkg/envoy/api/http_connection_manager.go`): listeners `listener_<port>` for the external,
/// internal and probe ports (one HTTP connection manager each, stat_prefix ingress_http, routes
/// over RDS), route configs external_services and internal_services (the latter with the status
/// host internalkourier, whose /ready goes to the static cluster service_stats, the admin), and
/// the revision's cluster.
fn write_kourier_xds(run: &Launch, ports: [u16; 3], upstream: u16) -> (PathBuf, PathBuf) {
    let write = |name: &str, resources: Value| run.xds_file(name, resources);
    let cluster = "default/hello-00001";
    let route_to_revision = json!({"match": {"prefix": "/"}, "route": {
        "weighted_clusters": {"clusters": [{"name": cluster, "weight": 100}]}, "timeout": "0s"
    }});
    let service = json!({"name": "(default/hello).Domain[*]", "domains": ["*"], "routes": [route_to_revision]});
    let route_type = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
    let external = write(
        "rds-external.json",
        json!([{"@type": route_type, "name": "external_services", "virtual_hosts": [service]}]),
    );
    let status_host = json!({"name": "internalkourier", "domains": ["internalkourier"], "routes": [
        {"name": "gateway_ready", "match": {"prefix": "/ready"}, "route": {
            "weighted_clusters": {"clusters": [{"name": "service_stats", "weight": 100}]}, "timeout": "1s"
        }}
    ]});
    let internal = write(
        "rds-internal.json",
        json!([{"@type": route_type, "name": "internal_services", "virtual_hosts": [status_host, service]}]),
    );
    let listener = |name: &str, port: u16, routes: &str, file: &Path| {
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
            "connect_timeout": "5s",
            "load_assignment": {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": upstream, "ipv4_compat": true}}}}
            ]}]}
        }]),
    );
    (lds, cds)
}

/// Run the gateway's Envoy with the command line kubelet gives it (`m`'s container), with what
/// only a cluster provides replaced by local stand-ins, each checked to be the release's first:
/// ADS by xDS files, the pod's ports by loopback ones (the control listener's `::` by `::1`),
/// the admin's address by a test port or a socket in a private directory (in Kourier's bootstrap
/// and in the kit's `admin_address` list alike), Kourier's `--base-id 1` by a dynamic one, and
/// the drain settings by short ones.
async fn start_gateway(m: &Manifests, upstream: u16) -> Gateway {
    start_gateway_with_control_on(m, upstream, "::1").await
}

/// [`start_gateway`] with the control listener on `control_ip` (in place of the pod's `::`).
async fn start_gateway_with_control_on(m: &Manifests, upstream: u16, control_ip: &str) -> Gateway {
    start_gateway_as(m, upstream, control_ip, true).await
}

/// [`start_gateway`], `configured` or not yet: before Kourier's controller pushed its listeners
/// (none in the LDS file Envoy reads; [`Gateway::configure`] pushes them).
async fn start_gateway_as(
    m: &Manifests,
    upstream: u16,
    control_ip: &str,
    configured: bool,
) -> Gateway {
    let mut run = Launch::new("kourier", 6);
    let p = run.ports();
    let (lds, cds) = write_kourier_xds(&run, [p[0], p[1], p[2]], upstream);
    run.hold_back_listeners_unless(configured, &lds);
    let socket = run.dir().join("envoy.admin").display().to_string();

    let mut b = yaml(m.bootstrap_text());
    let ads = &b["dynamic_resources"];
    assert_eq!(
        ads["ads_config"]["grpc_services"][0]["envoy_grpc"]["cluster_name"],
        "xds_cluster"
    );
    assert!(ads["lds_config"]["ads"].is_object() && ads["cds_config"]["ads"].is_object());
    b["dynamic_resources"] =
        json!({"lds_config": path_source(&lds), "cds_config": path_source(&cds)});
    // The admin, and the static cluster that reaches it, both where the release has it.
    let local_admin = |a: &Value| -> Value {
        if a["pipe"].is_object() {
            assert_eq!(a["pipe"]["path"], "/tmp/envoy.admin");
            json!({"pipe": {"path": socket}})
        } else {
            assert_eq!(
                a["socket_address"],
                json!({"address": "127.0.0.1", "port_value": 9901})
            );
            json!({"socket_address": {"address": "127.0.0.1", "port_value": p[5]}})
        }
    };
    b["admin"]["address"] = local_admin(&b["admin"]["address"]);
    for c in b["static_resources"]["clusters"].as_array_mut().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let address = endpoint_address(c);
        match name.as_str() {
            "service_stats" => *address = local_admin(address),
            // Unused once ADS is replaced: a loopback address instead of a cluster DNS name.
            "xds_cluster" => {
                *address = json!({"socket_address": {"address": "127.0.0.1", "port_value": p[4]}})
            }
            other => panic!("unexpected cluster {other}"),
        }
    }
    let stats = b["static_resources"]["listeners"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|l| l["name"] == "stats_listener")
        .expect("Kourier's stats listener");
    assert_eq!(port_of(stats), 9000);
    stats["address"] = json!({"socket_address": {"address": "127.0.0.1", "port_value": p[3]}});

    // The command line, argument by argument.
    let mut control = None;
    let mut args = Vec::new();
    let mut given =
        local_paths(&envoy_args(m.container()), m, run.dir(), &b.to_string()).into_iter();
    while let Some(a) = given.next() {
        match a.as_str() {
            "--base-id 1" => {} // the guard's --use-dynamic-base-id instead
            "--config-yaml" => {
                let mut extra = yaml(&given.next().expect("the --config-yaml value"));
                // The admin's socket and the guard, where the test has them.
                assert_eq!(
                    extra["admin"]["address"],
                    json!({"pipe": {"path": "/tmp/envoy.admin"}})
                );
                extra["admin"]["address"] = json!({"pipe": {"path": socket}});
                let cluster = &mut extra["static_resources"]["clusters"][0];
                assert_eq!(cluster["name"], "graceful_drain_admin");
                cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
                    ["address"] = json!({"pipe": {"path": socket}});
                let g = &mut extra["static_resources"]["listeners"][1];
                assert_eq!(g["name"], "graceful_drain_admin_guard");
                assert_eq!(
                    g["address"]["socket_address"],
                    json!({"address": "127.0.0.1", "port_value": 9901})
                );
                g["address"] =
                    json!({"socket_address": {"address": "127.0.0.1", "port_value": p[5]}});
                let l = &mut extra["static_resources"]["listeners"][0];
                assert_eq!(l["name"], "graceful_drain_control");
                assert_eq!(l["address"]["socket_address"]["address"], "::");
                l["address"] =
                    json!({"socket_address": {"address": control_ip, "port_value": p[4]}});
                control = Some(p[4]);
                let ext = &mut extra["bootstrap_extensions"][0]["typed_config"]["extension_config"];
                let mut s: Value = serde_json::from_str(ext["value"].as_str().unwrap()).unwrap();
                assert_eq!(s["admin_address"], "/tmp/envoy.admin");
                s["admin_address"] = json!(socket);
                short_drain(&mut s, &ms(MIN_DRAIN), &ms(QUIET), "10s");
                ext["value"] = json!(s.to_string());
                args.push(a);
                args.push(extra.to_string());
            }
            x if x.starts_with("-c ")
                || x.starts_with("--log-level ")
                || x.starts_with("--drain-time-s ")
                || x == "--drain-strategy immediate" =>
            {
                args.push(a)
            }
            other => panic!("an argument the test does not know: {other:?}"),
        }
    }
    // The stats listener stands in for the admin (its /ready and /stats routes go there);
    // Kourier's own --log-level.
    let mut run = run
        .args(args)
        .platform_log_level()
        .guard_ports([p[3], p[0], p[4]]);
    if let Some(c) = control {
        run = run.control(c, false).admin_found_in_log();
    }
    for port in [p[0], p[1], p[2]] {
        run = run.serving("Kourier's listeners serving", port, "/ok", 200);
    }
    run.start(Kourier {
        external: p[0],
        internal: p[1],
        probe: p[2],
        stats: p[3],
    })
    .await
}

async fn status(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<u16> {
    clients::request(port, "GET", path, headers)
        .await
        .ok()
        .map(|r| r.status)
}

/// Kourier's readiness check (the kit's startup probe).
const KOURIER_READY: [(&str, &str); 1] = [("host", "internalkourier")];
const SLOW: &str = "/delay/1200";

/// SIGTERM (kubelet's stop: the kit leaves no preStop) with HTTP/1.1 requests in flight on every
/// Kourier listener, HTTP/2 streams, late requests and idle keep-alive connections: every
/// request is answered, connections are told to go, the probes say what kubelet must see, and
/// Envoy exits by the drain's rules, not waiting for the idle connections.
async fn the_kit_drains_without_losing_a_request(tag: &'static str) {
    let upstream = Upstream::start().await;
    let gw = start_gateway(kit(tag), upstream.port).await;
    let Gateway {
        mut envoy,
        ports:
            Kourier {
                external,
                internal,
                probe,
                stats,
            },
        control,
        ..
    } = gw;
    let control = control.unwrap();
    assert_eq!(
        status_v6(control, "/ready").await,
        Ok(200),
        "{tag}: readiness (IPv6)"
    );
    assert_eq!(
        status_v6(control, "/drain/status").await,
        Ok(200),
        "{tag}: liveness"
    );
    assert_eq!(
        status(internal, "/ready", &KOURIER_READY).await,
        Some(200),
        "{tag}: startup"
    );
    let metrics = clients::get(stats, "/stats/prometheus")
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("envoy_graceful_drain_draining"),
        "{tag}: {metrics}"
    );

    let kit = Kit {
        name: tag,
        rules: [MIN_DRAIN, QUIET],
        slow: Slow {
            path: SLOW,
            headers: &[],
        },
        prefix: "",
        http1: vec![external, external, internal, probe],
        http1_told: false,
        http2: external,
        http2_streams: 2,
        late_http2: true,
        late_http1: Some(LateHttp1::KeepAlive(external)),
        // Idle from before the SIGTERM to the end: they must not hold the exit.
        idle: Some(Idle {
            http1: Some(internal),
            http2: external,
            told: false,
        }),
        in_flight: InFlight::Gauge {
            stats: &["http.ingress_http.downstream_rq_active"],
            extra: 0,
        },
        // The drain failed Envoy's health through the admin the list found: Kourier's own check
        // (the admin's /ready through its stats listener) fails too; the liveness probe passes.
        ready: Ready::Probes {
            control,
            platform: stats,
        },
    };
    let mut drain = Drain::in_flight(&envoy, kit).await;
    drain.sigterm(&mut envoy).await;
    drain.finish(&mut envoy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kit_over_kourier_1_23_drains_without_losing_a_request() {
    the_kit_drains_without_losing_a_request(NEWEST).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kit_over_kourier_1_14_drains_without_losing_a_request() {
    the_kit_drains_without_losing_a_request(OLDER).await
}

/// The readiness check the kit leaves in place (Kourier's own: `/ready` with Host internalkourier on
/// 8081, a listener Kourier's controller pushes, routed to the admin's /ready), run as kubelet
/// runs it: before the controller configured the gateway it is not Ready (no listener on 8081,
/// while the module's static control listener would already answer 200); once the controller
/// pushed its listeners, 200; at the drain start (SIGTERM: the module fails Envoy's health
/// checks), 503 at once, never a refused connection.
async fn kourier_s_readiness_check_follows_the_controller_and_the_drain(tag: &'static str) {
    let m = kit(tag);
    let probe = &m.container()["readinessProbe"]["httpGet"];
    assert_eq!(
        probe,
        &json!({"path": "/ready", "port": 8081, "scheme": "HTTP",
                "httpHeaders": [{"name": "Host", "value": "internalkourier"}]}),
        "{tag}: Kourier's check on listener_8081 (the gateway's `internal` port here)"
    );
    let upstream = Upstream::start().await;
    let mut gw = start_gateway_as(m, upstream.port, "::1", false).await;
    // (a) Envoy runs (the admin is LIVE, the module's control listener answers), unconfigured.
    assert_eq!(
        status(gw.stats, "/ready", &[]).await,
        Some(200),
        "{tag}: Envoy LIVE"
    );
    assert_eq!(status_v6(gw.control.unwrap(), "/ready").await, Ok(200));
    let before = status(gw.internal, "/ready", &KOURIER_READY).await;
    assert!(
        !before.is_some_and(|s| (200..300).contains(&s)),
        "{tag}: Ready before the controller configured the gateway: {before:?}"
    );
    // (b) The controller's push.
    gw.configure();
    eventually("Kourier's check 200", Duration::from_secs(10), || async {
        (status(gw.internal, "/ready", &KOURIER_READY).await == Some(200)).then_some(())
    })
    .await;
    // (c) The drain start.
    let sigterm = Instant::now();
    gw.envoy.sigterm();
    let after = clients::readiness_turns_503(tag, sigterm, || {
        status(gw.internal, "/ready", &KOURIER_READY)
    })
    .await;
    eprintln!("{tag}: Kourier's readiness check 503 {after:?} after the SIGTERM");
    assert_eq!(
        status_v6(gw.control.unwrap(), "/drain/status").await,
        Ok(200)
    );
    // The check is a request on listener_8081 (ingress_http), which the drain counts: kubelet
    // keeps probing during the drain, at the kit's ratio of probe period to quiet_period (2 s to
    // 1 s), and the drain still ends by its rules, not at drain_timeout (10 s here).
    let period = 2 * QUIET;
    let internal = gw.internal;
    let prober = tokio::spawn(async move {
        while status(internal, "/ready", &KOURIER_READY).await == Some(503) {
            tokio::time::sleep(period).await;
        }
    });
    gw.envoy.wait_exit(Duration::from_secs(15)).await;
    prober.abort();
    let (reported, timed_out) = gw.envoy.reported_drain();
    assert!(
        !timed_out && reported < MIN_DRAIN + 3 * period,
        "{tag}: drain of {reported:?} (timed out: {timed_out}) while kubelet probed"
    );
    eprintln!("{tag}: drain of {reported:?} with the probe every {period:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kourier_1_23_s_readiness_check_follows_the_controller_and_the_drain() {
    kourier_s_readiness_check_follows_the_controller_and_the_drain(NEWEST).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kourier_1_14_s_readiness_check_follows_the_controller_and_the_drain() {
    kourier_s_readiness_check_follows_the_controller_and_the_drain(OLDER).await
}

/// Kourier's stock gateway (knative-v1.23.0) run the same way, on an Envoy that can run it: its
/// preStop cannot run (no curl in the image) and only sleeps, then SIGTERM ends Envoy at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_kourier_loses_in_flight_requests_on_sigterm() {
    let upstream = Upstream::start().await;
    let Gateway {
        mut envoy,
        ports: Kourier {
            external, internal, ..
        },
        control,
        ..
    } = start_gateway(stock(NEWEST), upstream.port).await;
    assert!(control.is_none());
    let mut tasks = Vec::new();
    for port in [external, external, internal] {
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", SLOW, &[]).await
        }));
    }
    envoy
        .wait_stat("http.ingress_http.downstream_rq_active", 3)
        .await;
    let since = Instant::now();
    envoy
        .sigterm_exits_within(
            since,
            Duration::from_millis(1200),
            "stock Envoy held its exit",
        )
        .await;
    common::scenario::assert_all_lost(tasks, "stock Kourier must lose the in-flight requests")
        .await;
}

/// Issue 64: Kourier's stats listener (9000, open to the pod network) routes
/// `POST /drain_listeners` to Envoy's admin (knative-v1.23.0's bootstrap), which would start
/// Envoy's drain and the module's for any caller in the cluster. With the kit the admin sits on
/// its socket and Kourier's route reaches the kit's read-only guard: 403, no drain, while the
/// route's reads (metrics, Kourier's /ready on 8081) still reach the admin. Stock Kourier, run
/// the same way, takes the call (the test can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kourier_s_drain_listeners_route_starts_no_drain_from_other_pods() {
    assert!(
        kit(NEWEST).bootstrap_text().contains("'/drain_listeners'"),
        "knative-v1.23.0 routes /drain_listeners on its stats listener"
    );
    let upstream = Upstream::start().await;
    let gw = start_gateway(kit(NEWEST), upstream.port).await;
    let control = gw.control.unwrap();
    for path in [
        "/drain_listeners",
        "/drain_listeners?graceful",
        "/drain_listeners?inboundonly",
    ] {
        let r = clients::request(gw.stats, "POST", path, &[]).await.unwrap();
        assert_eq!(r.status, 403, "POST {path} on Kourier's 9000: {:?}", r.body);
    }
    // No drain started, in the module or in Envoy.
    let (code, body) = clients::request_v6(control, "GET", "/drain/status")
        .await
        .unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("\"state\":\"serving\""), "{body}");
    assert_eq!(status_v6(control, "/ready").await, Ok(200));
    assert_eq!(
        status(gw.internal, "/ready", &KOURIER_READY).await,
        Some(200),
        "Kourier's readiness check, through the guard"
    );
    let metrics = clients::get(gw.stats, "/stats/prometheus").await.unwrap();
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines()
            .any(|l| l.starts_with("envoy_graceful_drain_draining") && l.ends_with(" 0")),
        "metrics through the guard:\n{text}"
    );
    drop(gw);

    // Stock Kourier: the same call reaches the admin and starts Envoy's drain.
    let gw = start_gateway(stock(NEWEST), upstream.port).await;
    let r = clients::request(gw.stats, "POST", "/drain_listeners?graceful", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200, "stock Kourier's route: {:?}", r.body);
}

/// `/drain` starts a drain, so the control listener admits it only from inside the pod
/// (loopback); the probes' paths answer anyone. The loopback call is shown on the kit as it is;
/// the refusal with the kit's rule narrowed to an address the test's client does not have
/// (every test connection is loopback), the rule otherwise unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_pod_itself_may_start_a_drain_through_the_control_listener() {
    let upstream = Upstream::start().await;
    let gw = start_gateway(kit(NEWEST), upstream.port).await;
    let control = gw.control.unwrap();
    let (status, body) = clients::request_v6(control, "POST", "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(status, 202, "from inside the pod: {body}");
    drop(gw);

    // The same kit with the rule's allowed sources narrowed to 127.0.0.2.
    let mut m = render(NEWEST, true, &[]);
    let c = m
        .docs
        .iter_mut()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let args = c["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap();
    let last = args.last_mut().unwrap();
    let mut extra = yaml(last.as_str().unwrap());
    assert_eq!(rbac_action(&extra), "DENY");
    let filters = &mut extra["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"]["http_filters"];
    let rbac = &mut filters[0];
    assert_eq!(
        rbac["name"], "envoy.filters.http.rbac",
        "the rule runs before the module"
    );
    let policy = &mut rbac["typed_config"]["rules"]["policies"]["drain-from-outside-the-pod"];
    let ids = &mut policy["principals"][0]["not_id"]["or_ids"]["ids"];
    assert_eq!(
        *ids,
        json!([
            {"direct_remote_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}},
            {"direct_remote_ip": {"address_prefix": "::1", "prefix_len": 128}}
        ])
    );
    *ids = json!([{"direct_remote_ip": {"address_prefix": "127.0.0.2", "prefix_len": 32}}]);
    *last = json!(extra.to_string());
    let gw = start_gateway(&m, upstream.port).await;
    clients::assert_drain_refused_probes_open(gw.control.unwrap()).await;
}

/// The kit's rule as shipped, unchanged: a caller from another host is refused `/drain`, while
/// the probes' paths answer it. The other host is a network namespace of the test's own, joined
/// by a veth pair (its address, 10.200.x.2, is not loopback, as every other test's client is);
/// the control listener is on this side's address of the pair (the pod's `::` would be every
/// address of the machine). The rule's admitting the pod itself is shown by
/// [`only_the_pod_itself_may_start_a_drain_through_the_control_listener`]. Needs `ip` and root
/// (CI runs as root); skipped with a message otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shipped_rule_refuses_a_drain_from_another_host() {
    let Some(other) = common::netns::OtherHost::or_skip() else {
        return;
    };
    let upstream = Upstream::start().await;
    let here = other.here.to_string();
    let gw = start_gateway_with_control_on(kit(NEWEST), upstream.port, &here).await;
    let control = gw.control.unwrap();
    common::netns::assert_drain_refused_from(
        &other,
        control,
        &[("POST", "/drain?wait=false"), ("GET", "/drain?wait=false")],
    )
    .await;
    assert!(
        !gw.envoy.log().contains("drain started"),
        "{}",
        gw.envoy.log()
    );
}

fn rbac_action(extra: &Value) -> &str {
    extra["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"][0]["typed_config"]["rules"]["action"]
        .as_str()
        .unwrap()
}

#[test]
fn opt_in_network_policy_keeps_kourier_open_and_restricts_the_control_port() {
    // The kit with the restrict-control-port component enabled, as a user would.
    let m = render(NEWEST, true, &["restrict-control-port"]);
    let (_d, path) = temp_file("kourier", "rendered.yaml", &m.text);
    let (ok, log) = kubernetes_validate(&path);
    assert!(
        ok && log.contains("passed for resource networkpolicy/"),
        "{log}"
    );
    let np = m
        .docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .expect("the policy");
    let dep = m.deployment();
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
    let c = m.container();
    let control = named(&c["ports"], "drain-control").unwrap()["containerPort"]
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
        assert!(
            rules_for(port).iter().any(|r| r["from"].is_null()),
            "port {port} not open: {np}"
        );
    }
    let rs = rules_for(control);
    assert!(!rs.is_empty());
    for r in rs {
        common::json::assert_control_sources_listed(items(&r["from"], "from"));
    }
}
