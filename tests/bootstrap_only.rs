//! Gateways whose listeners come from a control plane: only the bootstrap extension is loaded (no
//! HTTP filter anywhere), listeners arrive over xDS (a file-based LDS source, a real xDS source),
//! and the module drains through Envoy's own machinery (fails its health checks through the admin
//! cluster, tracks Envoy's request gauges). Plus the example with its filters deleted, mixed
//! mode, and the same scenario on stock Envoy (which must lose requests).

use crate::common;

use common::clients::{self, H2Conn};
use common::envoy::{remove_list_items, render_gateway, Envoy, Options};
use common::scenario::{Drain, InFlight, Kit, LateHttp1, Ready, Slow};
use common::{eventually, free_ports};
use serde_json::json;
use std::time::{Duration, Instant};

const MIN_DRAIN: Duration = Duration::from_millis(300);
const QUIET: Duration = Duration::from_millis(200);

fn data_listener(name: &str, port: u16, with_filter: bool) -> serde_json::Value {
    let mut filters = Vec::new();
    if with_filter {
        filters.push(json!({
            "name": "envoy.filters.http.dynamic_modules",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
                "dynamic_module_config": {"name": "graceful_drain", "do_not_close": true, "metrics_namespace": "graceful_drain"},
                "filter_name": "graceful_drain",
                "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": "{\"role\": \"data\"}"}
            }
        }));
    }
    filters.push(json!({
        "name": "envoy.filters.http.fault",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault",
            "delay": {"header_delay": {}, "percentage": {"numerator": 100}}
        }
    }));
    filters.push(json!({"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}));
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": name,
                "codec_type": "AUTO",
                "drain_timeout": "5s",
                "route_config": {"virtual_hosts": [{"name": "b", "domains": ["*"], "routes": [
                    {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "hello\n"}}}
                ]}]},
                "http_filters": filters
            }
        }]}]
    })
}

/// A Kourier-like gateway: listeners from a file-based LDS source and the graceful_drain bootstrap
/// extension (unless `with_module` is false), which drains through the admin's address.
/// `filter_listener`: also serve a second LDS listener with the filter on it (mixed mode).
fn xds_gateway(
    dir: &std::path::Path,
    admin: u16,
    data: u16,
    with_module: bool,
    filter_listener: Option<u16>,
) -> String {
    let mut resources = vec![data_listener("xds_data", data, false)];
    if let Some(p) = filter_listener {
        resources.push(data_listener("xds_filtered", p, true));
    }
    let lds = dir.join("lds.json");
    std::fs::write(&lds, json!({ "resources": resources }).to_string()).unwrap();
    let ext = if with_module {
        format!(
            r#"bootstrap_extensions:
- name: envoy.bootstrap.dynamic_modules
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.bootstrap.dynamic_modules.v3.DynamicModuleBootstrapExtension
    dynamic_module_config: {{ name: graceful_drain, do_not_close: true, metrics_namespace: graceful_drain }}
    extension_name: graceful_drain
    extension_config:
      "@type": type.googleapis.com/google.protobuf.StringValue
      value: '{{"min_drain_duration": "300ms", "quiet_period": "200ms", "drain_timeout": "10s", "admin_address": "127.0.0.1:{admin}"}}'
"#
        )
    } else {
        String::new()
    };
    format!(
        r#"node: {{ id: gateway, cluster: gateway }}
admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
{ext}dynamic_resources:
  lds_config:
    resource_api_version: V3
    path_config_source: {{ path: {lds} }}
"#,
        lds = lds.display()
    )
}

async fn start_xds(with_module: bool, filter_listener: bool) -> (Envoy, Option<u16>) {
    start_xds_with(with_module, filter_listener, "").await
}

/// As [`start_xds`], with `extra` top-level bootstrap fields.
async fn start_xds_with(
    with_module: bool,
    filter_listener: bool,
    extra: &str,
) -> (Envoy, Option<u16>) {
    let p = free_ports(4);
    let dir = common::envoy::TempDir::new("xds");
    let fl = filter_listener.then_some(p[3]);
    let yaml = xds_gateway(&dir.0, p[0], p[1], with_module, fl) + extra;
    let mut envoy = Envoy::start_yaml(&yaml, p[0], p[1], p[2], &Options::default()).await;
    // Listeners come from xDS: wait until the data listener serves.
    eventually("xDS listener serving", Duration::from_secs(10), || async {
        clients::get(p[1], "/")
            .await
            .ok()
            .filter(|r| r.status == 200)
    })
    .await;
    envoy.keep(dir);
    (envoy, fl)
}

fn slow(ms: &str) -> [(&'static str, &str); 1] {
    [("x-envoy-fault-delay-request", ms)]
}

/// SIGTERM under load with slow requests in flight, on a gateway without any filter: the drain
/// scenario every gateway passes (`common::scenario::Drain`), through Envoy's own machinery (the
/// module fails Envoy's health checks; Envoy's request gauges say what is in flight).
async fn sigterm_drains_without_the_filter(mut envoy: Envoy) {
    let port = envoy.data;
    let kit = Kit {
        name: "bootstrap-only",
        rules: [MIN_DRAIN, QUIET],
        slow: Slow {
            path: "/slow",
            headers: &[("x-envoy-fault-delay-request", "1200")],
        },
        prefix: "",
        http1: vec![port, port],
        http1_told: false,
        http2: port,
        http2_streams: 2,
        late_http2: true,
        late_http1: Some(LateHttp1::KeepAlive(port)),
        idle: None,
        in_flight: InFlight::Gauge {
            stats: &[
                "http.xds_data.downstream_rq_active",
                "http.data.downstream_rq_active",
            ],
            extra: 0,
        },
        ready: Ready::HealthChecksFailLog,
    };
    let mut drain = Drain::in_flight(&envoy, kit).await;
    drain.sigterm(&mut envoy).await;
    drain.finish(&mut envoy).await;
}

/// #44 item 3: a `stats_matcher` that keeps none of the connection manager's request stats
/// (Envoy Gateway's `telemetry.metrics.matches` builds such an inclusion list). Bootstrap-only
/// counting has nothing else to go by: the module says so once at start, and a drain holds to
/// `drain_timeout` rather than reading the missing stats as 0. On ef5a7d9 the scan summed to 0,
/// the drain completed at its minimum and the request in flight was cut (the client's connection
/// closed without a response).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stats_matcher_that_hides_the_request_stats_never_reads_as_nothing_in_flight() {
    let matcher = "stats_config:\n  stats_matcher:\n    inclusion_list:\n      patterns:\n      - prefix: \"cluster.\"\n      - prefix: \"server.\"\n";
    let (mut envoy, _) = start_xds_with(true, false, matcher).await;
    eventually(
        "the hidden stats said at start",
        Duration::from_secs(10),
        || async {
            envoy
                .log()
                .contains("Envoy keeps no http.<stat_prefix>.downstream_rq_active")
                .then_some(())
        },
    )
    .await;
    // A 2 s request (the fault filter holds it from its arrival). Whether Envoy reads it just
    // before or just after the SIGTERM below, it is in flight during the drain, which must wait
    // for it: nothing but Envoy's (hidden) stats can say when it ends.
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    let slow_request = tokio::spawn(h2.start("/slow", &slow("2000")).await.unwrap());
    let t0 = Instant::now();
    envoy.sigterm();
    let r = slow_request
        .await
        .unwrap()
        .expect("the request in flight is answered, not cut");
    drop(h2);
    assert_eq!(r.status, 200);
    // The drain holds to drain_timeout (10 s in xds_gateway's config): Envoy's real exit.
    let (status, exited) = envoy.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}");
    let after = exited - t0;
    assert!(
        after >= Duration::from_millis(9_500) && after < Duration::from_secs(14),
        "the exit came {after:?} after SIGTERM; drain_timeout is 10 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn xds_listeners_drain_with_the_bootstrap_extension_only() {
    let (envoy, _) = start_xds(true, false).await;
    assert!(
        !envoy.log().contains("filter config loaded"),
        "no filter may be loaded in this mode"
    );
    // The same stats as in the other modes, by the same names (the dashboard and alerts work
    // unchanged): the bootstrap extension defines them all.
    let scrape = clients::get(envoy.admin, "/stats/prometheus")
        .await
        .unwrap()
        .text();
    for m in common::STAT_NAMES {
        let series = format!("envoy_graceful_drain_{m}");
        assert!(
            scrape.lines().any(|l| common::series_of(l) == series),
            "{series} missing in bootstrap-only mode:\n{scrape}"
        );
    }
    sigterm_drains_without_the_filter(envoy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn example_gateway_with_its_filters_deleted_still_drains() {
    let p = free_ports(3);
    let yaml = render_gateway(p[0], p[1], p[2], &Options::default());
    let y = remove_list_items(&yaml, "envoy.filters.http.dynamic_modules");
    let y = remove_list_items(&y, "envoy.filters.network.dynamic_modules"); // issue-14
                                                                            // Outside comments (the example keeps filter mode's HTTP filter commented out).
    let live = |name: &str| {
        y.lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains(name))
    };
    assert!(
        !live("envoy.filters.http.dynamic_modules")
            && !live("envoy.filters.network.dynamic_modules")
            && live("envoy.bootstrap.dynamic_modules")
    );
    let envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &Options::default()).await;
    // Readiness comes from Envoy's health_check filter on the control listener.
    assert_eq!(
        clients::get(envoy.control, "/ready").await.unwrap().status,
        200
    );
    let control = envoy.control;
    let ready_flips = tokio::spawn(async move {
        eventually(
            "/ready 503 after SIGTERM",
            Duration::from_secs(5),
            || async { (clients::get(control, "/ready").await.ok()?.status == 503).then_some(()) },
        )
        .await
    });
    sigterm_drains_without_the_filter(envoy).await;
    ready_flips.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_mode_one_drain_no_double_counting() {
    let (mut envoy, filtered) = start_xds(true, true).await;
    let filtered = filtered.unwrap();
    let (a, b) = (envoy.data, filtered);
    let t1 = tokio::spawn(async move { clients::request(a, "GET", "/", &slow("1500")).await });
    let t2 = tokio::spawn(async move { clients::request(b, "GET", "/", &slow("1500")).await });
    eventually("2 in flight", Duration::from_secs(5), || async {
        let x = envoy.stat("http.xds_data.downstream_rq_active").await?;
        let y = envoy.stat("http.xds_filtered.downstream_rq_active").await?;
        (x == 1 && y == 1).then_some(())
    })
    .await;
    envoy.sigterm();
    let st = eventually(
        "engine saw Envoy's gauges",
        Duration::from_secs(3),
        || async {
            let st = envoy.admin_status().await?;
            st["envoy_active_requests"].is_u64().then_some(st)
        },
    )
    .await;
    assert_eq!(
        st["active_requests"], 1,
        "the filter counts its own listener: {st}"
    );
    assert_eq!(
        st["envoy_active_requests"], 2,
        "both listeners, each request once: {st}"
    );
    assert_eq!(st["state"], "draining");
    for t in [t1, t2] {
        assert_eq!(t.await.unwrap().unwrap().status, 200);
    }
    let (status, _) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn xds_gateway_without_the_module_loses_in_flight_requests() {
    let (mut envoy, _) = start_xds(false, false).await;
    let port = envoy.data;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", "/", &slow("1500")).await
        }));
    }
    envoy
        .wait_stat("http.xds_data.downstream_rq_active", 3)
        .await;
    // Before the 1.5 s requests could end: it did not wait for them (all lost, below).
    let (t0, bound) = (Instant::now(), Duration::from_millis(1500));
    envoy
        .sigterm_exits_within(t0, bound, "stock Envoy held its exit")
        .await;
    common::scenario::assert_all_lost(tasks, "stock Envoy must lose the in-flight requests").await;
}
