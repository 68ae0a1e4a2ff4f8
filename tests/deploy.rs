//! Deployable artefacts kept honest: the Kubernetes manifests validate against the Kubernetes
//! schemas, the ConfigMap's bootstrap validates with the real Envoy and the module, the
//! Dockerfile lints clean, and the settings agree with each other.

mod common;

use common::envoy::{envoy_bin, module_dir, pinned_envoy_version, TempDir};
use common::repo_root;
use common::tools::{kubernetes_validate, run, tools_dir, yaml};
use std::process::Command;

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
fn dockerfile_lints_clean_and_uses_the_pinned_envoy() {
    let df = repo_root().join("k8s/Dockerfile");
    let (ok, text) = run(Command::new(tools_dir().join("hadolint")).arg(&df));
    assert!(ok, "hadolint:\n{text}");
    // The Envoy version is a build argument (the module is built for it); its default is the pin.
    let text = read("k8s/Dockerfile");
    assert!(
        text.contains(&format!("ARG ENVOY_VERSION={}", pinned_envoy_version()))
            && text.contains("FROM envoyproxy/envoy:v${ENVOY_VERSION}"),
        "Dockerfile must default to the pinned Envoy version"
    );
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
    assert!(!from.is_empty());
    for f in from {
        let open_cidr = f["ipBlock"]["cidr"]
            .as_str()
            .is_some_and(|c| c.ends_with("/0"));
        let all_namespaces = f["namespaceSelector"]
            .as_object()
            .is_some_and(|s| s.is_empty());
        assert!(!open_cidr && !all_namespaces, "control port open: {f}");
    }
}
