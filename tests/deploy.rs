//! Deployable artefacts kept honest: the Kubernetes manifests validate against the Kubernetes
//! schemas, the ConfigMap's bootstrap validates with the real Envoy and the module, the
//! Dockerfile lints clean, the settings agree with each other, and the gateway pod runs as the
//! manifests describe it: the official distroless Envoy image (a glibc-only root) with the module
//! from the release image mounted as an image volume.

use crate::common;

use common::envoy::{envoy_bin, module_dir, pinned_envoy_version, Envoy, Options, TempDir};
use common::image::{Dist, GlibcRoot, CONFIG_IN_ROOT, ENVOY_IN_ROOT, MODULES_IN_ROOT};
use common::json::{duration, module_settings};
use common::scenario::{sigterm_drains_in_flight_work, Slow};
use common::tools::{kubernetes_validate, run, tools_dir, yaml};
use common::upstream::Upstream;
use common::{free_ports, repo_root, sha256};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap()
}

const MANIFESTS: [&str; 6] = [
    "k8s/deployment.yaml",
    "k8s/deployment-prestop.yaml",
    "k8s/service.yaml",
    "k8s/configmap.yaml",
    "k8s/poddisruptionbudget.yaml",
    "k8s/networkpolicy.yaml",
];

#[test]
fn manifests_validate_against_kubernetes_schemas() {
    for m in MANIFESTS {
        let (ok, text) = kubernetes_validate(&repo_root().join(m));
        assert!(ok && text.contains("passed"), "{m}:\n{text}");
    }
    // The validator does reject a broken manifest (so the check above means something).
    let dir = TempDir::new("k8s");
    let bad = dir.0.join("bad.yaml");
    std::fs::write(
        &bad,
        read("k8s/deployment.yaml").replace(
            "terminationGracePeriodSeconds: 35",
            "terminationGracePeriod: 35",
        ),
    )
    .unwrap();
    let (ok, text) = kubernetes_validate(&bad);
    assert!(!ok, "a misspelt field passed validation:\n{text}");
}

/// The `envoy.yaml` block of the ConfigMap, dedented.
fn configmap_bootstrap() -> String {
    let cm = read("k8s/configmap.yaml");
    let mut lines = cm
        .lines()
        .skip_while(|l| l.trim() != "envoy.yaml: |")
        .skip(1);
    let mut out = String::new();
    for l in lines.by_ref() {
        if !l.is_empty() && !l.starts_with("    ") {
            break;
        }
        out.push_str(l.get(4..).unwrap_or(""));
        out.push('\n');
    }
    assert!(
        out.contains("bootstrap_extensions"),
        "no bootstrap in the ConfigMap"
    );
    out
}

#[test]
fn configmap_bootstrap_validates_with_envoy_and_the_module() {
    let dir = TempDir::new("cm");
    let f = dir.0.join("envoy.yaml");
    std::fs::write(&f, configmap_bootstrap()).unwrap();
    let (ok, text) = run(Command::new(envoy_bin())
        .args(["--mode", "validate", "-c"])
        .arg(&f)
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", module_dir()));
    assert!(ok && text.contains("OK"), "{text}");
    assert!(
        text.contains("graceful_drain: drain engine loaded"),
        "module not loaded:\n{text}"
    );
}

#[test]
fn grace_period_exceeds_drain_timeout_and_service_hides_control_port() {
    let bootstrap = configmap_bootstrap();
    let timeout: f64 = bootstrap
        .split(r#""drain_timeout": ""#)
        .nth(1)
        .and_then(|s| s.split("s\"").next())
        .and_then(|s| s.parse().ok())
        .expect("drain_timeout in the ConfigMap");
    for d in ["k8s/deployment.yaml", "k8s/deployment-prestop.yaml"] {
        let grace: f64 = read(d)
            .lines()
            .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("terminationGracePeriodSeconds");
        assert!(
            grace >= timeout + 5.0,
            "{d}: grace {grace}s must exceed drain_timeout {timeout}s + 5s"
        );
    }
    assert!(
        read("k8s/deployment-prestop.yaml").contains("httpGet: { path: /drain, port: control }")
    );
    let svc = read("k8s/service.yaml");
    let targets: Vec<&str> = svc
        .lines()
        .filter_map(|l| l.trim().strip_prefix("targetPort:"))
        .map(str::trim)
        .collect();
    assert_eq!(targets, ["http"], "the Service exposes the data port only");
}

#[test]
fn dockerfile_lints_clean_and_takes_the_module_from_the_release_image() {
    let df = repo_root().join("k8s/Dockerfile");
    let (ok, text) = run(Command::new(tools_dir().join("hadolint")).arg(&df));
    assert!(ok, "hadolint:\n{text}");
    // Nothing is compiled: the module comes from the module image of this version, into the
    // official (distroless, by default the pinned) Envoy image's search path.
    let text = read("k8s/Dockerfile");
    for want in [
        format!(
            "ARG MODULE_IMAGE=graceful-drain:{}",
            env!("CARGO_PKG_VERSION")
        ),
        format!(
            "ARG ENVOY_IMAGE=envoyproxy/envoy:distroless-v{}",
            pinned_envoy_version()
        ),
        "FROM ${MODULE_IMAGE} AS module".to_string(),
        "FROM ${ENVOY_IMAGE}".to_string(),
        format!("COPY --from=module /libgraceful_drain.so {MODULES_IN_ROOT}/libgraceful_drain.so"),
        format!("ENV ENVOY_DYNAMIC_MODULES_SEARCH_PATH={MODULES_IN_ROOT}"),
    ] {
        assert!(
            text.contains(&want),
            "k8s/Dockerfile lacks {want:?}:\n{text}"
        );
    }
    assert!(!text.contains("cargo"), "no build in the image: {text}");
    // hadolint does flag a bad Dockerfile.
    let dir = TempDir::new("df");
    let bad = dir.0.join("Dockerfile");
    std::fs::write(
        &bad,
        "FROM envoyproxy/envoy:latest\nRUN cd /tmp && apt-get install curl\n",
    )
    .unwrap();
    let (ok, _) = run(Command::new(tools_dir().join("hadolint")).arg(&bad));
    assert!(!ok, "hadolint accepted a bad Dockerfile");
}

/// The gateway container of a Deployment, and the volume its module comes from.
struct GatewayPod {
    container: serde_json::Value,
    volumes: serde_json::Value,
}

impl GatewayPod {
    fn of(manifest: &str) -> GatewayPod {
        let dep = yaml(&read(manifest));
        let spec = &dep["spec"]["template"]["spec"];
        GatewayPod {
            container: spec["containers"][0].clone(),
            volumes: spec["volumes"].clone(),
        }
    }

    fn volume(&self, name: &str) -> &serde_json::Value {
        self.volumes
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == name))
            .unwrap_or_else(|| panic!("no volume {name}: {}", self.volumes))
    }

    /// Where the container mounts the volume `name`.
    fn mount_of(&self, name: &str) -> String {
        self.container["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == name))
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_else(|| panic!("volume {name} is not mounted: {}", self.container))
            .to_string()
    }

    fn env(&self, name: &str) -> Option<String> {
        self.container["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)?["value"]
            .as_str()
            .map(str::to_string)
    }
}

#[test]
fn the_deployments_run_the_official_envoy_image_with_the_release_module_image() {
    for d in ["k8s/deployment.yaml", "k8s/deployment-prestop.yaml"] {
        let pod = GatewayPod::of(d);
        assert_eq!(
            pod.container["image"],
            format!("envoyproxy/envoy:distroless-v{}", pinned_envoy_version()),
            "{d}: the official image, as it is"
        );
        let module = pod.volume("graceful-drain");
        assert_eq!(
            module["image"]["reference"],
            format!("graceful-drain:{}", env!("CARGO_PKG_VERSION")),
            "{d}: the module image of this version"
        );
        let search = pod.env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH");
        assert_eq!(
            search.as_deref(),
            Some(pod.mount_of("graceful-drain").as_str()),
            "{d}: the module image is mounted where Envoy looks for modules"
        );
        assert_eq!(
            pod.mount_of("graceful-drain"),
            MODULES_IN_ROOT,
            "{d}: the path tests/common/image.rs starts Envoy with"
        );
        assert_eq!(pod.mount_of("config"), "/etc/envoy", "{d}");
        assert_eq!(pod.container["command"][0], ENVOY_IN_ROOT, "{d}");
        assert_eq!(pod.container["command"][1], "-c", "{d}");
        assert_eq!(pod.container["command"][2], CONFIG_IN_ROOT, "{d}");
    }
}

/// The pod as a container runtime assembles it from `k8s/deployment.yaml`: the distroless image's
/// glibc-only root, the ConfigMap's bootstrap at `/etc/envoy/envoy.yaml`, the module image's
/// layer as the image volume, Envoy started with the manifest's command. Only the ports (free
/// ones) and the backend's address (a local upstream, no cluster DNS here) are changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateway_pod_as_the_manifests_describe_it_drains_on_sigterm() {
    let pod = GatewayPod::of("k8s/deployment.yaml");
    let dist = Dist::build("pod");
    let volume = dist.image_volume();
    assert_eq!(
        sha256(&volume.0.join("libgraceful_drain.so")),
        sha256(&module_dir().join("libgraceful_drain.so")),
        "the image volume holds the module under test"
    );
    let upstream = Upstream::start().await;
    let p = free_ports(3);
    let bootstrap = configmap_bootstrap()
        .replace("port_value: 9901", &format!("port_value: {}", p[0]))
        .replace("127.0.0.1:9901", &format!("127.0.0.1:{}", p[0]))
        .replace("port_value: 10000", &format!("port_value: {}", p[1]))
        .replace("port_value: 10001", &format!("port_value: {}", p[2]))
        .replace(
            "{ address: backend.default.svc.cluster.local, port_value: 8080 }",
            &format!("{{ address: 127.0.0.1, port_value: {} }}", upstream.port),
        );
    assert!(bootstrap.contains(&format!("port_value: {}", upstream.port)));
    let concurrency: u32 = pod.container["command"][4]
        .as_str()
        .and_then(|c| c.parse().ok())
        .expect("--concurrency N in the manifest's command");
    let o = Options {
        root: Some(Arc::new(GlibcRoot::new())),
        module_dir: Some(volume.0.clone()),
        concurrency,
        ..Options::default()
    };
    let mut e = Envoy::start_yaml(&bootstrap, p[0], p[1], p[2], &o).await;
    e.assert_logged("loaded into Envoy");
    // The drain settings the manifest ships (its bootstrap, unchanged but for addresses).
    let s = module_settings(&yaml(&bootstrap));
    let rules = [&s["min_drain_duration"], &s["quiet_period"]].map(duration);
    sigterm_drains_in_flight_work(&mut e, Slow::UPSTREAM_DELAY, rules).await;
}

#[test]
fn module_needs_no_newer_glibc_than_the_envoy_image_has() {
    // Ubuntu 22.04 has 2.35, Debian 12 (distroless) 2.36, Ubuntu 24.04 (envoyproxy/envoy) 2.39.
    let so = module_dir().join("libgraceful_drain.so");
    let (ok, text) = run(Command::new("objdump").arg("-T").arg(&so));
    assert!(ok, "{text}");
    let max = text
        .split("GLIBC_")
        .skip(1)
        .filter_map(|s| {
            let v: String = s
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            Some((it.next()?, it.next().unwrap_or(0)))
        })
        .max()
        .expect("versioned glibc symbols");
    assert!(max <= (2, 35), "module needs GLIBC_{}.{}", max.0, max.1);
}

/// The named container ports of a Deployment's first container.
fn container_ports(deployment: &serde_json::Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("container ports")
        .iter()
        .map(|p| p["name"].as_str().expect("named port").to_string())
        .collect()
}

/// Whether every `matchLabels` entry of `selector` is a label of the Deployment's pods.
fn selects_pods(selector: &serde_json::Value, deployment: &serde_json::Value) -> bool {
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let wanted = selector["matchLabels"].as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(k, v)| &labels[k] == v)
}

#[test]
fn disruption_budget_and_network_policy_fit_the_gateway_pods() {
    let pdb = yaml(&read("k8s/poddisruptionbudget.yaml"));
    let np = yaml(&read("k8s/networkpolicy.yaml"));
    // A budget that lets one pod at a time go (it drains) and never blocks a node drain.
    assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{pdb}");
    assert!(pdb["spec"]["minAvailable"].is_null(), "{pdb}");
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let rules = np["spec"]["ingress"].as_array().expect("ingress rules");
    let rule_for = |port: &str| -> Vec<&serde_json::Value> {
        rules
            .iter()
            .filter(|r| {
                r["ports"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["port"] == port))
            })
            .collect()
    };
    for d in ["k8s/deployment.yaml", "k8s/deployment-prestop.yaml"] {
        let dep = yaml(&read(d));
        assert!(selects_pods(&pdb["spec"]["selector"], &dep), "PDB vs {d}");
        assert!(
            selects_pods(&np["spec"]["podSelector"], &dep),
            "policy vs {d}"
        );
        let readiness_port =
            &dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"];
        assert_eq!(
            readiness_port, "control",
            "{d}: readiness on the control port"
        );
        // Every port of the pod has a rule: the policy isolates the pod, so a port without one
        // would be cut off.
        for port in container_ports(&dep) {
            assert!(
                !rule_for(&port).is_empty(),
                "{d}: no rule admits port {port}"
            );
        }
    }
    // The data port is open to every source; the control port only to listed sources, none of
    // them "everywhere".
    for r in rule_for("http") {
        assert!(r["from"].is_null(), "data port must be open: {r}");
    }
    let control = rule_for("control");
    assert_eq!(control.len(), 1, "{np}");
    let from = control[0]["from"]
        .as_array()
        .expect("control port has sources");
    common::json::assert_control_sources_listed(from);
}

// ---------------------------------------------------------------------------------------------
// One `images:` entry pins the module image in every kit

/// The registry and digest a user pins the module to (any: kustomize does not pull).
const PIN_NAME: &str = "registry.example.com/platform/graceful-drain";
const PIN_DIGEST: &str = "sha256:5f0e1c2d3b4a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// A kit as a user takes it: its directory in k8s/, and for the platform kits the release files
/// the tests keep in place of the release URL its kustomization.yaml names.
struct KitUnderTest {
    dir: &'static str,
    url_prefix: Option<&'static str>,
    release: &'static [&'static str],
}

const KITS: [KitUnderTest; 5] = [
    KitUnderTest {
        dir: "k8s",
        url_prefix: None,
        release: &[],
    },
    KitUnderTest {
        dir: "k8s/kourier",
        url_prefix: Some("https://github.com/knative-extensions/net-kourier/"),
        release: &[
            "kourier/knative-v1.23.0/200-bootstrap.yaml",
            "kourier/knative-v1.23.0/300-gateway.yaml",
        ],
    },
    KitUnderTest {
        dir: "k8s/kourier",
        url_prefix: Some("https://github.com/knative-extensions/net-kourier/"),
        release: &[
            "kourier/knative-v1.14.0/200-bootstrap.yaml",
            "kourier/knative-v1.14.0/300-gateway.yaml",
        ],
    },
    KitUnderTest {
        dir: "k8s/contour",
        url_prefix: Some("https://raw.githubusercontent.com/projectcontour/contour/"),
        release: &["contour/v1.33.6/03-envoy.yaml"],
    },
    KitUnderTest {
        dir: "k8s/envoy-gateway",
        url_prefix: None,
        release: &[],
    },
];

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Replace `from` by `to` in `text`, where it must be exactly once.
fn edit_once(text: &str, from: &str, to: &str, what: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "{what}: {from:?} in:\n{text}"
    );
    text.replacen(from, to, 1)
}

/// The kit rendered as a user renders it after editing its kustomization.yaml as its comments
/// say: the `images:` entry's commented newName and digest lines uncommented (newTag dropped),
/// and, with `without_image_volumes`, that component's line. A copy of the kit's directory, so the
/// kit's own relative paths hold; a platform's release URL becomes the kept release files.
/// `pin: false` leaves the entry as shipped.
fn render_pinned(kit: &KitUnderTest, without_image_volumes: bool, pin: bool) -> String {
    let tmp = TempDir::new("pin");
    let dir = tmp.0.join("kit");
    copy_tree(&repo_root().join(kit.dir), &dir);
    let path = dir.join("kustomization.yaml");
    let mut k = std::fs::read_to_string(&path).unwrap();
    if let Some(prefix) = kit.url_prefix {
        let line = k
            .lines()
            .find(|l| l.starts_with(&format!("- {prefix}")))
            .expect("the release URL")
            .to_string();
        let mut files = String::new();
        for f in kit.release {
            let name = Path::new(f).file_name().unwrap();
            std::fs::copy(common::platforms().join(f), dir.join(name)).unwrap();
            files.push_str(&format!("- {}\n", name.to_string_lossy()));
        }
        k = edit_once(&k, &format!("{line}\n"), &files, kit.dir);
    }
    if pin {
        let tag = format!("  newTag: {}\n", env!("CARGO_PKG_VERSION"));
        k = edit_once(&k, &tag, "", kit.dir);
        k = edit_once(
            &k,
            "  # newName: registry.example.com/graceful-drain\n",
            &format!("  newName: {PIN_NAME}\n"),
            kit.dir,
        );
        k = edit_once(
            &k,
            "  # digest: sha256:<image_manifest>\n",
            &format!("  digest: {PIN_DIGEST}\n"),
            kit.dir,
        );
    }
    if without_image_volumes {
        if k.contains("\n# components:\n") {
            k = edit_once(&k, "\n# components:\n", "\ncomponents:\n", kit.dir);
        }
        k = edit_once(
            &k,
            "\n# - without-image-volumes\n",
            "\n- without-image-volumes\n",
            kit.dir,
        );
    }
    std::fs::write(&path, k).unwrap();
    common::tools::kustomize(&dir)
}

/// Every image reference in `v` (a string under a field `image` or `reference`) that names the
/// module image (its repository's last part is `graceful-drain`), with where it is:
/// `a/b/name=<list item's name>/c`.
fn module_image_references(v: &serde_json::Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                module_image_references(x, &format!("{at}/{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let key = x["name"]
                    .as_str()
                    .map_or(i.to_string(), |n| format!("name={n}"));
                module_image_references(x, &format!("{at}/{key}"), out);
            }
        }
        serde_json::Value::String(s) if at.ends_with("/image") || at.ends_with("/reference") => {
            let repo = s.split('@').next().unwrap();
            let last = repo.rsplit('/').next().unwrap();
            if last.split(':').next() == Some("graceful-drain") {
                out.push((at.to_string(), s.clone()));
            }
        }
        _ => {}
    }
}

fn references_in(rendered: &str) -> Vec<(String, String)> {
    let mut refs = Vec::new();
    for d in common::tools::yaml_docs(rendered) {
        let id = format!(
            "{}/{}",
            d["kind"].as_str().unwrap(),
            d["metadata"]["name"].as_str().unwrap()
        );
        module_image_references(&d, &id, &mut refs);
    }
    refs
}

/// One `images:` entry, `graceful-drain` in each kit's kustomization.yaml, pins the module image
/// everywhere the kit references it: the image volume (kustomize's `images:` alone does not reach
/// `volumes[].image.reference`: each kit's `configurations:` names the field) and, with the
/// without-image-volumes component, the init container (the same image: its entry point copies
/// the module). Rendered with `kubectl kustomize`, every kit, both ways: every reference is the
/// pinned digest, and the rendered text names no other module image.
#[test]
fn one_images_entry_pins_the_module_image_everywhere_in_every_kit() {
    let pinned = format!("{PIN_NAME}@{PIN_DIGEST}");
    for kit in &KITS {
        for without_image_volumes in [false, true] {
            let what = format!(
                "{} (without-image-volumes: {without_image_volumes})",
                kit.dir
            );
            // As shipped: the version's tag, in the same places.
            let shipped = references_in(&render_pinned(kit, without_image_volumes, false));
            let text = render_pinned(kit, without_image_volumes, true);
            let refs = references_in(&text);
            let places: Vec<&str> = refs.iter().map(|(at, _)| at.as_str()).collect();
            let shipped_places: Vec<&str> = shipped.iter().map(|(at, _)| at.as_str()).collect();
            assert_eq!(places, shipped_places, "{what}");
            for (at, r) in &shipped {
                assert_eq!(
                    r,
                    &format!("graceful-drain:{}", env!("CARGO_PKG_VERSION")),
                    "{what}: {at}"
                );
            }
            for (at, r) in &refs {
                assert_eq!(r, &pinned, "{what}: {at} is not pinned");
            }
            // Where: the image volume, or (without image volumes) the init container and no
            // image volume at all.
            let volumes = places
                .iter()
                .filter(|p| p.ends_with("/image/reference"))
                .count();
            let inits = places
                .iter()
                .filter(|p| p.contains("/initContainers/") && p.ends_with("/image"))
                .count();
            if without_image_volumes {
                assert_eq!((volumes, inits), (0, 1), "{what}: {places:?}");
            } else {
                assert_eq!((volumes, inits), (1, 0), "{what}: {places:?}");
            }
            // Valid for the Kubernetes schemas (EG's EnvoyProxy: tests/envoy_gateway.rs checks it
            // against EG's CRDs).
            if kit.dir != "k8s/envoy-gateway" {
                let (_d, path) = common::tools::temp_file("pin", "rendered.yaml", &text);
                let (ok, out) = kubernetes_validate(&path);
                assert!(ok, "{what}:\n{out}");
            }
            assert!(
                !text.contains("graceful-drain:"),
                "{what}: an unpinned reference:\n{text}"
            );
        }
    }
}

/// Why the kits carry `configurations:`: without it, the same `images:` entry leaves the image
/// volume's reference as it was (`graceful-drain:0.2.0`, which a node resolves to Docker Hub's
/// library namespace), so the check above would see it.
#[test]
fn without_the_image_field_configuration_the_image_volume_stays_unpinned() {
    let tmp = TempDir::new("unpinned");
    let dir = tmp.0.join("kit");
    copy_tree(&repo_root().join("k8s"), &dir);
    let path = dir.join("kustomization.yaml");
    let k = std::fs::read_to_string(&path).unwrap();
    let k = edit_once(&k, "configurations:\n- module-image.yaml\n", "", "k8s");
    let k = edit_once(
        &k,
        "  # digest: sha256:<image_manifest>\n",
        &format!("  digest: {PIN_DIGEST}\n"),
        "k8s",
    );
    std::fs::write(&path, k).unwrap();
    let refs = references_in(&common::tools::kustomize(&dir));
    assert_eq!(
        refs,
        [(
            "Deployment/gateway/spec/template/spec/volumes/name=graceful-drain/image/reference"
                .to_string(),
            format!("graceful-drain:{}", env!("CARGO_PKG_VERSION"))
        )]
    );
}
