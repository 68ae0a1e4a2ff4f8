//! Real components where they can run on our machines (issue 64 item 3), from
//! `scripts/k8s-lab.sh` (`make k8s-lab`, cached outside the checkout):
//! - a real Kubernetes API server for custom resources (`k8s.io/apiextensions-apiserver` with a
//!   real etcd) with the platforms' released CRDs (Gateway API, Envoy Gateway v1.9.0, Istio
//!   1.31.0-rc.0, from `../shared/crds/`): every Envoy Gateway and Istio custom resource of every
//!   kit, as `kubectl kustomize` renders it with each of its components, is server-side applied
//!   there (structural schemas, unknown fields refused, CEL `x-kubernetes-validations`,
//!   defaulting), and resources broken on purpose are refused;
//! - a real container (podman, runc) running the official Envoy binary in a glibc-only root, the
//!   module image of `make dist` (its oci-archive, `podman load`) mounted as an image volume where
//!   Envoy looks for modules, stopped in the kubelet's order (the preStop `httpGet /drain`, bounded
//!   by the grace period, then SIGTERM, then SIGKILL at the grace period's end): no request lost,
//!   exit 0 long before the grace period.
//!
//! Not here (no registry reachable from our machines ships them): kube-apiserver's core types
//! (Deployments, Pods, Services: `tests/deploy.rs` and the kits' suites check them offline), a
//! kubelet, the platforms' controllers. A machine without the lab fails these tests, naming the
//! command that sets it up: they never pass without having run.

use crate::common;

use common::clients::{self, H2Conn};
use common::envoy::{envoy_bin, module_dir, render_gateway, Options, TempDir, FAST};
use common::image::{Dist, GlibcRoot, ENVOY_IN_ROOT, MODULES_IN_ROOT};
use common::tools::{kustomize_with_components, run, yaml_docs};
use common::{eventually, free_ports, repo_root, sha256, Ports};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The lab's cache directory (`scripts/k8s-lab.sh check`), or a failure that says what is missing
/// and how to set it up.
fn lab() -> PathBuf {
    let out = common::stdout_of(
        Command::new(repo_root().join("scripts/k8s-lab.sh")).arg("check"),
        "scripts/k8s-lab.sh check (these tests run real components and cannot run on this \
         machine as it is)",
    );
    PathBuf::from(out.trim())
}

/// The platforms' CRDs, as each project released them (`../shared/crds/`, or
/// `GRACEFUL_DRAIN_CRDS`), never kept in the repository.
fn crds() -> PathBuf {
    let dir = std::env::var_os("GRACEFUL_DRAIN_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/crds"));
    assert!(
        dir.join("README.md").is_file(),
        "the platforms' CRDs are missing: put them in {} (the shared/crds/ folder beside the \
         checkout), or point GRACEFUL_DRAIN_CRDS at them",
        dir.display()
    );
    dir
}

/// etcd and the API server, started by `scripts/k8s-lab.sh start` on free loopback ports, stopped
/// (and waited for) on drop.
struct ApiServer {
    run: TempDir,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

impl ApiServer {
    fn start(lab: &Path) -> ApiServer {
        let run = TempDir::new("k8s-lab");
        // Reserved until the servers are up (they bind over the reservation: Go sets
        // SO_REUSEADDR on its listeners).
        let ports: Ports = free_ports(4);
        let out = Command::new(repo_root().join("scripts/k8s-lab.sh"))
            .arg("start")
            .arg(&run.0)
            .args(ports.iter().map(|p| p.to_string()))
            .output()
            .expect("run scripts/k8s-lab.sh start");
        let server = ApiServer {
            kubeconfig: run.0.join("kubeconfig"),
            kubectl: lab.join("bin/kubectl"),
            run,
        };
        assert!(
            out.status.success(),
            "the API server did not start:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(ports);
        server
    }

    fn kubectl(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig").arg(&self.kubeconfig);
        c.arg("--request-timeout=60s");
        c
    }

    /// Run kubectl with `args`: whether it succeeded, and its output.
    fn run(&self, args: &[&str]) -> (bool, String) {
        run(self.kubectl().args(args))
    }

    /// `kubectl apply --server-side` of one document (JSON), as this test's field manager.
    fn apply(&self, doc: &Value, extra: &[&str]) -> (bool, String) {
        let dir = TempDir::new("apply");
        let f = dir.0.join("doc.json");
        std::fs::write(&f, doc.to_string()).unwrap();
        run(self
            .kubectl()
            .args([
                "apply",
                "--server-side",
                "--field-manager=graceful-drain-tests",
            ])
            .args(extra)
            .arg("-f")
            .arg(&f))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.run.0.join("crdserver.log")).unwrap_or_default()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "---- the API server's log, last lines ----\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let _ = Command::new(repo_root().join("scripts/k8s-lab.sh"))
            .arg("stop")
            .arg(&self.run.0)
            .status();
    }
}

/// What the API server serves of the installed CRDs: `group` -> kinds.
fn served(api: &ApiServer) -> BTreeMap<String, BTreeSet<String>> {
    let (ok, text) = api.run(&["get", "crd", "-o", "json"]);
    assert!(ok, "kubectl get crd: {text}");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for crd in list["items"].as_array().expect("items") {
        let spec = &crd["spec"];
        out.entry(spec["group"].as_str().unwrap().to_string())
            .or_default()
            .insert(spec["names"]["kind"].as_str().unwrap().to_string());
    }
    out
}

fn group_of(doc: &Value) -> String {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    match api.split_once('/') {
        Some((g, _)) => g.to_string(),
        None => String::new(), // the core group
    }
}

/// Every kustomization of the kits that holds custom resources of the installed CRDs, with each
/// of its components on its own and the compatible ones together: (what it is, its documents).
fn renderings() -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    let eg = repo_root().join("k8s/envoy-gateway");
    for components in [
        &[][..],
        &["eg-1.8"],
        &["connection-mode"],
        &["without-image-volumes"],
        &["dual-stack"],
        &["alerts"],
        &[
            "eg-1.8",
            "connection-mode",
            "without-image-volumes",
            "dual-stack",
        ],
        &["connection-mode", "without-image-volumes", "dual-stack"],
    ] {
        let docs = yaml_docs(&kustomize_with_components(&eg, components));
        out.push((format!("k8s/envoy-gateway {components:?}"), docs));
    }
    let istio = repo_root().join("k8s/istio");
    out.push((
        "k8s/istio".to_string(),
        yaml_docs(&kustomize_with_components(&istio, &[])),
    ));
    out
}

/// The documents of every kit file (`k8s/**.yaml`) that names one of `groups` in an
/// `apiVersion:`: what the renderings must cover.
fn kit_files_docs(groups: &[&String]) -> Vec<(String, Value)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo_root().join("k8s"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let names_one = |l: &str| {
            l.trim_start().strip_prefix("apiVersion:").is_some_and(|v| {
                groups
                    .iter()
                    .any(|g| v.trim().starts_with(&format!("{g}/")))
            })
        };
        if !text.lines().any(names_one) {
            continue;
        }
        let rel = f.strip_prefix(repo_root()).unwrap().display().to_string();
        for d in yaml_docs(&text) {
            if d["apiVersion"].is_string() && d["kind"].is_string() {
                out.push((rel.clone(), d));
            }
        }
    }
    out
}

fn id(doc: &Value) -> String {
    format!(
        "{}/{} {}/{}",
        group_of(doc),
        doc["kind"].as_str().unwrap_or_default(),
        doc["metadata"]["namespace"].as_str().unwrap_or("default"),
        doc["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Every Envoy Gateway and Istio resource of every kit, server-side applied to a real API server
/// with the platforms' released CRDs: accepted, as the server keeps it (unknown fields would be
/// refused: kubectl's field validation is strict); and resources broken on purpose are refused,
/// by the schema and by the CRDs' CEL rules.
#[test]
fn every_platform_custom_resource_of_the_kits_is_accepted_by_a_real_api_server() {
    let lab = lab();
    let crds = crds();
    let t0 = Instant::now();
    let api = ApiServer::start(&lab);
    let started = t0.elapsed();

    // The platforms' CRDs, as released, become Established.
    for dir in ["gateway-api", "envoy-gateway-v1.9.0", "istio-1.31.0-rc.0"] {
        let path = crds.join(dir);
        let (ok, text) = api.run(&["apply", "--server-side", "-f", path.to_str().unwrap()]);
        assert!(ok, "installing the CRDs of {dir}:\n{text}");
    }
    let (ok, text) = api.run(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=120s",
    ]);
    assert!(ok, "the CRDs did not become Established:\n{text}");
    let served = served(&api);
    for (group, kind) in [
        ("gateway.envoyproxy.io", "EnvoyProxy"),
        ("gateway.envoyproxy.io", "EnvoyExtensionPolicy"),
        ("gateway.envoyproxy.io", "EnvoyPatchPolicy"),
        ("networking.istio.io", "EnvoyFilter"),
        ("gateway.networking.k8s.io", "Gateway"),
    ] {
        assert!(
            served.get(group).is_some_and(|k| k.contains(kind)),
            "{group}/{kind} is not served: {served:?}"
        );
    }
    let is_custom = |d: &Value| {
        served
            .get(&group_of(d))
            .is_some_and(|k| k.contains(d["kind"].as_str().unwrap_or_default()))
    };

    // Each rendering's custom resources, applied; another rendering of the same object replaces
    // it (one field manager).
    let mut applied: BTreeSet<String> = BTreeSet::new();
    let mut applies = 0;
    let mut kinds: BTreeSet<String> = BTreeSet::new();
    let mut not_served: BTreeSet<String> = BTreeSet::new();
    let mut namespaces: BTreeSet<String> = BTreeSet::new();
    let rendered = renderings();
    let crds_installed = t0.elapsed();
    for (what, docs) in &rendered {
        for d in docs {
            if !is_custom(d) {
                if !group_of(d).is_empty() && !group_of(d).ends_with(".k8s.io") {
                    not_served.insert(format!("{}/{}", group_of(d), d["kind"].as_str().unwrap()));
                }
                continue;
            }
            let (ok, text) = api.apply(d, &[]);
            assert!(ok, "{what}: {} refused:\n{text}", id(d));
            // What the server keeps is what was applied (nothing dropped by pruning).
            let ns = d["metadata"]["namespace"].as_str().unwrap_or("default");
            namespaces.insert(ns.to_string());
            let (ok, text) = api.run(&[
                "get",
                "-n",
                ns,
                &format!(
                    "{}.{}",
                    d["kind"].as_str().unwrap().to_lowercase(),
                    group_of(d)
                ),
                d["metadata"]["name"].as_str().unwrap(),
                "-o",
                "json",
            ]);
            assert!(ok, "{what}: reading {} back: {text}", id(d));
            let kept: Value = serde_json::from_str(&text).unwrap();
            assert_contains(&kept["spec"], &d["spec"], &format!("{what}: {}", id(d)));
            applied.insert(id(d));
            applies += 1;
            kinds.insert(d["kind"].as_str().unwrap().to_string());
        }
    }
    for kind in [
        "EnvoyProxy",
        "EnvoyExtensionPolicy",
        "EnvoyPatchPolicy",
        "EnvoyFilter",
    ] {
        assert!(kinds.contains(kind), "no {kind} applied: {applied:?}");
    }
    // Every custom resource of every kit's files (Kourier's and Contour's included) was among
    // them.
    for (file, d) in kit_files_docs(&served.keys().collect::<Vec<_>>()) {
        if is_custom(&d) {
            assert!(
                applied.contains(&id(&d)),
                "{file}: {} is in no rendering applied here ({applied:?})",
                id(&d)
            );
        }
    }
    eprintln!(
        "{applies} applies of {} custom resources of kinds {kinds:?} in namespaces {namespaces:?}; not served \
         here (no CRD among ../shared/crds): {not_served:?}; the API server ready in \
         {started:?}, the CRDs Established and the kits rendered at {crds_installed:?}, applied \
         at {:?}",
        applied.len(),
        t0.elapsed()
    );

    // Broken on purpose, each refused with the reason the CRD gives.
    let (_, eg) = &rendered[0];
    let policy = eg
        .iter()
        .find(|d| d["kind"] == "EnvoyExtensionPolicy")
        .expect("the kit's EnvoyExtensionPolicy")
        .clone();
    let proxy = eg
        .iter()
        .find(|d| d["kind"] == "EnvoyProxy")
        .expect("the kit's EnvoyProxy")
        .clone();
    let filter = rendered
        .iter()
        .flat_map(|(_, docs)| docs)
        .find(|d| d["kind"] == "EnvoyFilter")
        .expect("the Istio kit's EnvoyFilter")
        .clone();
    let mut broken = Vec::new();
    // A CEL rule (x-kubernetes-validations) of EG's EnvoyExtensionPolicy.
    let mut b = policy.clone();
    b["metadata"]["name"] = "broken-target-kind".into();
    b["spec"]["targetRefs"][0]["kind"] = "Service".into();
    broken.push((
        b,
        "this policy can only have a targetRefs[*].kind of Gateway",
    ));
    // A field the schema does not have.
    let mut b = policy.clone();
    b["metadata"]["name"] = "broken-unknown-field".into();
    b["spec"]["dynamicModule"][0]["filterNmae"] = "graceful_drain".into();
    broken.push((b, "filterNmae"));
    // A type the schema does not allow, in the EnvoyProxy.
    let mut b = proxy.clone();
    b["metadata"]["name"] = "broken-type".into();
    b["spec"]["shutdown"] = serde_json::json!({"drainTimeout": 25});
    broken.push((b, "drainTimeout"));
    // A CEL rule of Istio's EnvoyFilter: workloadSelector and targetRefs exclude each other.
    let mut b = filter.clone();
    b["metadata"]["name"] = "broken-both-selectors".into();
    b["spec"]["targetRefs"] = serde_json::json!([{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "gw"}]);
    broken.push((b, "only one of targetRefs or workloadSelector can be set"));
    for (b, why) in broken {
        let (ok, text) = api.apply(&b, &[]);
        assert!(
            !ok && text.contains(why),
            "{} was not refused for {why:?}:\n{text}",
            id(&b)
        );
    }
}

/// Every field of `want` is in `got` with the same value (`got` may have more: the server's
/// defaults).
fn assert_contains(got: &Value, want: &Value, what: &str) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, v) in w {
                let gv = g
                    .get(k)
                    .unwrap_or_else(|| panic!("{what}: field {k} was not kept: {got}"));
                assert_contains(gv, v, &format!("{what}.{k}"));
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{what}: {got} vs {want}");
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                assert_contains(gv, wv, &format!("{what}[{i}]"));
            }
        }
        _ => assert_eq!(got, want, "{what}"),
    }
}

/// podman with a storage of its own (removed on drop, with every container and image in it),
/// runc and the lab's `containers.conf` (this sandbox's limits).
struct Podman {
    dir: TempDir,
    conf: PathBuf,
    containers: Vec<String>,
}

impl Podman {
    fn new(lab: &Path) -> Podman {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the lab's containers run as root (rootful podman)"
        );
        Podman {
            dir: TempDir::new("podman"),
            conf: lab.join("containers.conf"),
            containers: Vec::new(),
        }
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf)
            .arg("--root")
            .arg(self.dir.0.join("storage"))
            .arg("--runroot")
            .arg(self.dir.0.join("run"))
            // No overlay mounts to leave behind: the storage is plain directories.
            .args(["--storage-driver", "vfs"]);
        c
    }

    /// Run podman with `args`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().expect("run podman");
        assert!(
            out.status.success(),
            "podman {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = self
                .cmd()
                .args(["rm", "--force", "--time", "0", c])
                .output();
        }
        let _ = self.cmd().args(["rmi", "--all", "--force"]).output();
    }
}

/// The release artefacts of the module under test: `make dist`'s (target/dist/) when they hold
/// it, else written afresh by the same script (`scripts/dist.sh`) into a temp dir.
enum Artefacts {
    MakeDist(PathBuf),
    Fresh(Dist),
}

impl Artefacts {
    fn get() -> Artefacts {
        let dist = repo_root().join("target/dist");
        let module = module_dir().join("libgraceful_drain.so");
        if dist.join("libgraceful_drain.so").is_file()
            && sha256(&dist.join("libgraceful_drain.so")) == sha256(&module)
        {
            Artefacts::MakeDist(dist)
        } else {
            eprintln!("target/dist/ does not hold the module under test: writing the artefacts");
            Artefacts::Fresh(Dist::build("dist"))
        }
    }

    fn out(&self) -> PathBuf {
        match self {
            Artefacts::MakeDist(p) => p.clone(),
            Artefacts::Fresh(d) => d.out(),
        }
    }

    fn archive(&self) -> PathBuf {
        self.out().join(format!(
            "graceful-drain-{}.oci.tar",
            env!("CARGO_PKG_VERSION")
        ))
    }
}

/// The pod of `k8s/deployment-prestop.yaml` on a real container: the official Envoy binary in a
/// glibc-only root (Envoy's distroless images), the module image from `make dist`'s oci-archive
/// mounted as an image volume at the manifests' search path, the example gateway's bootstrap;
/// stopped as the kubelet stops it: the preStop `httpGet /drain` (answered when the drain is
/// complete), then `podman stop` with the seconds left of the grace period (SIGTERM, then SIGKILL
/// at the end). Requests in flight on HTTP/1.1 and HTTP/2, and requests made during the drain,
/// are all answered; Envoy exits 0 on the SIGTERM, long before the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_module_image_mounted_into_a_real_container_drains_in_the_kubelets_order() {
    let lab = lab();
    let artefacts = Artefacts::get();
    let mut podman = Podman::new(&lab);

    // The module image, loaded from the oci-archive and named as the manifests name it.
    let loaded = podman.ok(&["load", "--input", artefacts.archive().to_str().unwrap()]);
    let loaded = loaded
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .unwrap_or_else(|| panic!("podman load said: {loaded}"))
        .trim()
        .to_string();
    let image = format!("graceful-drain:{}", env!("CARGO_PKG_VERSION"));
    podman.ok(&["tag", &loaded, &image]);

    // The container's root: glibc and the official Envoy binary, nothing else.
    let root = GlibcRoot::new();
    let envoy_in_root = root.path().join(ENVOY_IN_ROOT.trim_start_matches('/'));
    if std::fs::hard_link(envoy_bin(), &envoy_in_root).is_err() {
        std::fs::copy(envoy_bin(), &envoy_in_root).expect("copy Envoy into the root");
    }

    // The example gateway on free loopback ports (the host's network: loopback only).
    let ports = free_ports(3);
    let (admin, data, control) = (ports[0], ports[1], ports[2]);
    let o = Options::default();
    let settings = FAST;
    let cfg_dir = TempDir::new("container-config");
    std::fs::write(
        cfg_dir.0.join("envoy.yaml"),
        render_gateway(admin, data, control, &o),
    )
    .unwrap();
    let log = podman.dir.0.join("envoy.log");
    let name = format!("graceful-drain-lab-{}", std::process::id());
    let id = podman.ok(&[
        "run",
        "--detach",
        "--name",
        &name,
        "--network",
        "host",
        "--mount",
        &format!("type=image,source={image},destination={MODULES_IN_ROOT}"),
        "--volume",
        &format!("{}:/etc/envoy:ro", cfg_dir.0.display()),
        "--env",
        &format!("ENVOY_DYNAMIC_MODULES_SEARCH_PATH={MODULES_IN_ROOT}"),
        "--log-driver",
        "k8s-file",
        "--log-opt",
        &format!("path={}", log.display()),
        "--rootfs",
        root.path().to_str().unwrap(),
        ENVOY_IN_ROOT,
        "-c",
        "/etc/envoy/envoy.yaml",
        "--concurrency",
        "2",
        "--use-dynamic-base-id",
        "--log-level",
        "info",
        "--component-log-level",
        "dynamic_modules:debug",
    ]);
    podman.containers.push(name.clone());
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let dump = |what: &str| format!("{what}\n---- the container's log ----\n{}", read_log());

    let state = |field: &str| podman.ok(&["inspect", &id, "--format", field]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match clients::get(control, "/ready").await {
            Ok(r) if r.status == 200 => break,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            dump(&format!(
                "the container did not serve in 30 s (status {})",
                state("{{.State.Status}}")
            ))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(ports);
    // The module Envoy loaded is the image's, at the mount: its bytes are the module under test.
    let pid = state("{{.State.Pid}}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("Envoy's maps");
    let loaded_from = format!("{MODULES_IN_ROOT}/libgraceful_drain.so");
    assert!(
        maps.contains(&loaded_from),
        "Envoy has not mapped {loaded_from}"
    );
    assert_eq!(
        sha256(Path::new(&format!("/proc/{pid}/root{loaded_from}"))),
        sha256(&module_dir().join("libgraceful_drain.so")),
        "the image volume holds another module than the one under test"
    );
    assert!(
        read_log().contains("loaded into Envoy"),
        "{}",
        dump("no load line")
    );

    // Work in flight: slow requests on HTTP/1.1 connections and HTTP/2 streams.
    const SLOW: (&str, &str) = ("x-envoy-fault-delay-request", "2000");
    let mut sent = 0;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(async move {
            clients::request(data, "GET", "/slow", &[SLOW]).await
        }));
        sent += 1;
    }
    let mut h2 = H2Conn::connect(data).await.expect("h2 connection");
    for _ in 0..4 {
        let f = h2.start("/slow-h2", &[SLOW]).await.expect("h2 stream");
        tasks.push(tokio::spawn(f));
        sent += 1;
    }
    // Seen in flight by the module before the stop starts.
    eventually("8 requests in flight", Duration::from_secs(10), || async {
        let r = clients::get(control, "/drain/status").await.ok()?;
        let s: Value = serde_json::from_slice(&r.body).ok()?;
        (s["active_requests"].as_i64()? >= 8).then_some(())
    })
    .await;

    // The kubelet's order. terminationGracePeriodSeconds: more than drain_timeout, as the
    // manifests have it.
    let grace = Duration::from_secs(20);
    let t0 = Instant::now();
    let prestop = tokio::spawn(async move {
        tokio::time::timeout(grace, clients::request(control, "GET", "/drain", &[])).await
    });
    // While the preStop waits: the probes turn, and new requests (clients that have not yet seen
    // the endpoint go) are still served.
    eventually(
        "readiness 503 once the drain started",
        Duration::from_secs(5),
        || async {
            let r = clients::get(control, "/ready").await.ok()?;
            (r.status == 503).then_some(())
        },
    )
    .await;
    for i in 0..3 {
        let path = format!("/late-{i}");
        tasks.push(tokio::spawn(async move {
            clients::request(data, "GET", &path, &[]).await
        }));
        sent += 1;
    }
    let answer = prestop.await.unwrap();
    let answered = t0.elapsed();
    let answer = answer
        .unwrap_or_else(|_| panic!("{}", dump("the preStop hook ran into the grace period")))
        .unwrap_or_else(|e| panic!("{}", dump(&format!("the preStop hook failed: {e}"))));
    assert_eq!(answer.status, 200, "{}", dump(&answer.text()));
    let status: Value = serde_json::from_slice(&answer.body).expect("/drain answers JSON");
    assert_eq!(status["state"], "drained", "{status}");
    assert_eq!(status["outcome"]["requests_cut"], 0, "{status}");

    // Then SIGTERM, and SIGKILL when the grace period is over (podman stop -t: whole seconds,
    // at least 2 as the kubelet gives).
    let left = grace.saturating_sub(answered).as_secs().max(2);
    let stop_started = Instant::now();
    podman.ok(&["stop", "--time", &left.to_string(), &id]);
    let stopped = stop_started.elapsed();
    let total = t0.elapsed();
    let exit = state("{{.State.ExitCode}}");
    assert_eq!(
        exit,
        "0",
        "{}",
        dump(&format!(
            "Envoy's exit code after the stop (137: SIGKILLed at the grace period's end), {stopped:?} after SIGTERM"
        ))
    );
    assert!(
        stopped < Duration::from_secs(left),
        "Envoy ran to the SIGKILL: {stopped:?} of {left} s"
    );
    assert!(
        total < grace / 2,
        "the stop took {total:?} of the grace period {grace:?}"
    );

    // No request lost: every one answered 200.
    let mut lost = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) if r.status == 200 => {}
            other => lost.push(format!("{other:?}")),
        }
    }
    assert!(
        lost.is_empty(),
        "{}",
        dump(&format!("{} of {sent} requests lost: {lost:?}", lost.len()))
    );
    let l = read_log();
    assert!(l.contains("requests cut: 0"), "{}", dump("no drain report"));
    eprintln!(
        "{sent} requests answered; preStop answered after {answered:?}, exit 0 {stopped:?} after \
         SIGTERM ({total:?} of the {grace:?} grace period; min_drain_duration {})",
        settings.min_drain
    );
}
