//! The control listener's address family, kit by kit: each kit binds it where its platform binds
//! its own listeners (EG and Contour: `0.0.0.0`; Kourier 1.23: `::` with ipv4_compat, as its stats
//! listener), and a component gives the other family (EG and Contour: `dual-stack`; Kourier before
//! 1.23: `ipv4-only`). Each variant's listener and bootstrap extension, as the kit renders them,
//! run on the real Envoy with the module inside a network namespace with IPv6 disabled: with the
//! sysctl alone (`net.ipv6.conf.all.disable_ipv6=1`) every variant starts and serves `/ready` over
//! IPv4 (Linux still lets a program bind `::`); on a node booted with `ipv6.disable=1` (no IPv6
//! socket at all; reproduced with a seccomp filter) the IPv4 ones start and the `::` ones stop
//! Envoy from starting: `malformed IP address: ::` in its log, as such clusters report it
//! (kgateway-dev/kgateway#11175). Needs `ip`, `sysctl` and root (CI runs as root); skipped with
//! a message otherwise.

use crate::common;

use common::envoy::{envoy_bin, module_dir, TempDir};
use common::json::{config_yaml, module_settings, named};
use common::netns::NoIpv6;
use common::repo_root;
use common::tools::{kustomize, relative, yaml, yaml_docs};
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The test's Envoy admin, inside the namespace (every port there is free).
const ADMIN: u16 = 9901;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kit {
    Kourier,
    Contour,
    EnvoyGateway,
}

impl Kit {
    fn dir(self) -> &'static str {
        match self {
            Kit::Kourier => "k8s/kourier",
            Kit::Contour => "k8s/contour",
            Kit::EnvoyGateway => "k8s/envoy-gateway",
        }
    }
    /// The component that gives the other family.
    fn other_family(self) -> &'static str {
        match self {
            Kit::Kourier => "ipv4-only",
            _ => "dual-stack",
        }
    }
}

/// The kit (`component`: one of its optional components, or none) rendered over its platform's
/// release fixture (EG's kit is self-contained): the bootstrap pieces it gives Envoy.
fn pieces(kit: Kit, component: Option<&str>) -> Value {
    let dir = TempDir::new("ip-family");
    let root = repo_root();
    let mut k = String::from("resources:\n");
    let mut components = Vec::new();
    match kit {
        Kit::Kourier | Kit::Contour => {
            let (fixtures, files): (&str, &[&str]) = if kit == Kit::Kourier {
                (
                    "kourier/knative-v1.23.0",
                    &["200-bootstrap.yaml", "300-gateway.yaml"],
                )
            } else {
                ("contour/v1.33.6", &["03-envoy.yaml"])
            };
            for f in files {
                std::fs::copy(common::platforms().join(fixtures).join(f), dir.0.join(f)).unwrap();
                k.push_str(&format!("- {f}\n"));
            }
            components.push(format!("{}/graceful-drain", kit.dir()));
        }
        Kit::EnvoyGateway => {
            k.push_str(&format!("- {}\n", relative(&dir.0, &root.join(kit.dir()))));
        }
    }
    if let Some(c) = component {
        components.push(format!("{}/{c}", kit.dir()));
    }
    if !components.is_empty() {
        k.push_str("components:\n");
        for c in components {
            k.push_str(&format!("- {}\n", relative(&dir.0, &root.join(c))));
        }
    }
    std::fs::write(dir.0.join("kustomization.yaml"), k).unwrap();
    let docs = yaml_docs(&kustomize(&dir.0));
    match kit {
        Kit::EnvoyGateway => {
            let ep = docs.iter().find(|d| d["kind"] == "EnvoyProxy").unwrap();
            yaml(ep["spec"]["bootstrap"]["value"].as_str().unwrap())
        }
        _ => {
            let w = docs
                .iter()
                .find(|d| d["kind"] == "Deployment" || d["kind"] == "DaemonSet")
                .unwrap();
            let c = w["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "kourier-gateway" || c["name"] == "envoy")
                .unwrap();
            let args: Vec<String> = c["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            config_yaml(&args)
        }
    }
}

/// The control listener of a kit's bootstrap pieces (the one whose port kubelet probes), first
/// of its listeners (the Kourier kit's other one, its admin guard, binds loopback only).
fn control(pieces: &Value) -> &Value {
    let listeners = pieces["static_resources"]["listeners"].as_array().unwrap();
    let first = &listeners[0];
    assert!(
        first["name"].as_str().unwrap().contains("control"),
        "the control listener first: {}",
        first["name"]
    );
    for other in &listeners[1..] {
        assert_eq!(
            other["address"]["socket_address"]["address"], "127.0.0.1",
            "{}: loopback, the same on every family",
            other["name"]
        );
    }
    first
}

/// The sources the control listener's RBAC rule admits to `/drain`.
fn drain_rule_ids(pieces: &Value) -> &Value {
    &control(pieces)["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0]
        ["typed_config"]["rules"]["policies"]["drain-from-outside-the-pod"]["principals"][0]
        ["not_id"]["or_ids"]["ids"]
}

fn drain_rule_ids_mut(pieces: &mut Value) -> &mut Value {
    &mut pieces["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"]["http_filters"][0]["typed_config"]["rules"]["policies"]
        ["drain-from-outside-the-pod"]["principals"][0]["not_id"]["or_ids"]["ids"]
}

/// The pod's loopback ranges, IPv4 and (`v6`) IPv6.
fn loopback(v6: bool) -> Value {
    let mut ids =
        vec![json!({"direct_remote_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}})];
    if v6 {
        ids.push(json!({"direct_remote_ip": {"address_prefix": "::1", "prefix_len": 128}}));
    }
    Value::Array(ids)
}

fn address(pieces: &Value) -> Value {
    control(pieces)["address"]["socket_address"].clone()
}

/// Each kit's default follows its platform, and its component changes nothing but the control
/// listener's address.
#[test]
fn each_kit_binds_its_platform_s_family_and_its_component_the_other() {
    let v4 = |port: u16| json!({"address": "0.0.0.0", "port_value": port});
    let dual = |port: u16| json!({"address": "::", "port_value": port, "ipv4_compat": true});
    for (kit, default, other) in [
        (Kit::Kourier, dual(10001), v4(10001)),
        (Kit::Contour, v4(10001), dual(10001)),
        (Kit::EnvoyGateway, v4(19010), dual(19010)),
    ] {
        let base = pieces(kit, None);
        let variant = pieces(kit, Some(kit.other_family()));
        assert_eq!(address(&base), default, "{kit:?}");
        assert_eq!(address(&variant), other, "{kit:?} {}", kit.other_family());
        // `/drain` only from the pod's loopback: 127.0.0.0/8, and ::1 where the listener is
        // dual-stack (an IPv6 range in an IPv4 listener's rule would stop Envoy on a node
        // without IPv6 as the `::` address does: `malformed IP address`).
        for p in [&base, &variant] {
            let want = if address(p)["address"] == "::" {
                loopback(true)
            } else {
                loopback(false)
            };
            assert_eq!(*drain_rule_ids(p), want, "{kit:?}");
        }
        let mut same = base.clone();
        same["static_resources"]["listeners"][0]["address"]["socket_address"] = other;
        *drain_rule_ids_mut(&mut same) = drain_rule_ids(&variant).clone();
        assert_eq!(
            same,
            variant,
            "{kit:?}: {} changes more than the address (change both together)",
            kit.other_family()
        );
    }
    // The platforms' own, where a fixture holds them: Kourier 1.23's stats listener is `::`
    // with ipv4_compat, 1.14's 0.0.0.0; EG's default bootstrap binds its stats on 0.0.0.0.
    for (fixture, want) in [
        ("kourier/knative-v1.23.0/200-bootstrap.yaml", "::"),
        ("kourier/knative-v1.14.0/200-bootstrap.yaml", "0.0.0.0"),
    ] {
        let cm = yaml_docs(&std::fs::read_to_string(common::platforms().join(fixture)).unwrap());
        let b = yaml(cm[0]["data"]["envoy-bootstrap.yaml"].as_str().unwrap());
        let stats = named(&b["static_resources"]["listeners"], "stats_listener").unwrap();
        assert_eq!(
            stats["address"]["socket_address"]["address"], want,
            "{fixture}"
        );
    }
    let eg =
        std::fs::read_to_string(common::platforms().join("envoy-gateway/v1.9.0/deployment.yaml"))
            .unwrap();
    assert!(eg.contains("name: envoy-gateway-proxy-stats-0.0.0.0-19001"));
}

/// An Envoy with the module and a kit's pieces (its bootstrap extension and control listener,
/// as rendered; only the module's admin_address points at this Envoy's admin) in `ns`: whether
/// it started and served the control listener's `/ready`, with its log.
fn run(ns: &NoIpv6, pieces: &Value, without_inet6: bool) -> (Result<(), String>, String) {
    let dir = TempDir::new("ip-family-envoy");
    let mut b = pieces.clone();
    let mut s = module_settings(&b);
    s["admin_address"] = json!(format!("127.0.0.1:{ADMIN}"));
    b["bootstrap_extensions"][0]["typed_config"]["extension_config"]["value"] =
        json!(s.to_string());
    b["admin"] =
        json!({"address": {"socket_address": {"address": "127.0.0.1", "port_value": ADMIN}}});
    // The control listener alone: the family is what is under test.
    b["static_resources"] = json!({"listeners": [control(pieces).clone()]});
    let cfg = dir.0.join("envoy.json");
    std::fs::write(&cfg, b.to_string()).unwrap();
    let log_path = dir.0.join("envoy.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = ns
        .command(envoy_bin(), without_inet6)
        .arg("-c")
        .arg(&cfg)
        .args([
            "--use-dynamic-base-id",
            "--concurrency",
            "1",
            "--log-level",
            "info",
        ])
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", module_dir())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn envoy in the namespace");
    let port = control(pieces)["address"]["socket_address"]["port_value"]
        .as_u64()
        .unwrap() as u16;
    let deadline = Instant::now() + Duration::from_secs(20);
    let outcome = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Err(format!("Envoy exited at start-up ({status})"));
        }
        match ns.get(port, "/ready") {
            Ok((200, _)) => break Ok(()),
            _ if Instant::now() > deadline => break Err("not serving /ready after 20 s".into()),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    (
        outcome,
        std::fs::read_to_string(&log_path).unwrap_or_default(),
    )
}

#[test]
fn on_a_node_without_ipv6_the_ipv4_listeners_start_and_the_dual_stack_ones_do_not() {
    let ns = match NoIpv6::new() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("SKIPPED: cannot make a network namespace here ({why})");
            return;
        }
    };
    for kit in [Kit::Kourier, Kit::Contour, Kit::EnvoyGateway] {
        for component in [None, Some(kit.other_family())] {
            let p = pieces(kit, component);
            let what = format!("{kit:?} {}", component.unwrap_or("(default)"));
            let dual = address(&p)["address"] == "::";
            // IPv6 disabled by the sysctl only: Linux still binds `::`; every variant serves
            // kubelet's IPv4 probe.
            let (outcome, log) = run(&ns, &p, false);
            assert_eq!(outcome, Ok(()), "{what}, sysctl only:\n{log}");
            assert!(log.contains("drain engine loaded"), "{what}:\n{log}");
            // A kernel without IPv6 (`ipv6.disable=1`): a `::` listener stops Envoy's start.
            let (outcome, log) = run(&ns, &p, true);
            if dual {
                assert!(outcome.is_err(), "{what}: started without IPv6:\n{log}");
                assert!(
                    log.contains("error `malformed IP address: ::` initializing config"),
                    "{what}: Envoy's error:\n{log}"
                );
            } else {
                assert_eq!(outcome, Ok(()), "{what}, no IPv6 in the kernel:\n{log}");
            }
        }
    }
}
