//! The module against the real Envoy: loading, ABI match, request accounting across workers,
//! control endpoints, configuration errors, stats, and example configs.

use crate::common;

use common::clients::{self, H1Conn, H2Conn};
use common::envoy::{
    abi_version_of, add_data_http_filter, envoy_bin, expected_envoy_version, module_dir,
    render_gateway, test_mode, validate_config, Envoy, Options, TempDir, TestMode,
};
use common::{eventually, free_ports, repo_root};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn module_loads_into_the_envoy_under_test_and_abi_matches() {
    let expected = expected_envoy_version();
    let out = Command::new(envoy_bin()).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.contains(&format!("/{expected}/")),
        "unexpected envoy (want {expected}): {version}"
    );
    let envoy = Envoy::start(Options::default()).await;
    let log = envoy.log();
    let matched = format!(
        "Dynamic module ABI version {} matched",
        abi_version_of(&expected)
    );
    assert!(log.contains(&matched), "{log}");
    assert!(!log.contains("is deprecated"), "{log}");
    assert!(log.contains("graceful_drain: drain engine loaded"), "{log}");
    // The data listener's HTTP filter, except in connection mode (none on the data path).
    assert_eq!(
        log.contains("filter config loaded (role=Data)"),
        test_mode() != TestMode::Connection,
        "{log}"
    );
    assert!(log.contains("filter config loaded (role=Control)"), "{log}");
    // No module line carries an empty source location (`[:]`); 1.40 prints the module's own.
    for line in log.lines().filter(|l| l.contains("graceful_drain:")) {
        assert!(!line.contains("[:]"), "{line}");
        if expected.starts_with("1.40.") {
            assert!(line.contains("] [src/"), "{line}");
        }
    }
    let r = clients::get(envoy.data, "/").await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello from the graceful-drain gateway\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_endpoints_answer_and_are_not_counted() {
    let envoy = Envoy::start(Options::default()).await;
    let r = clients::get(envoy.control, "/ready").await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "ready\n"));

    let st = envoy.drain_status().await;
    assert_eq!(st["state"], "serving");
    assert_eq!(st["active_requests"], 0);
    assert_eq!(st["settings"]["min_drain_duration"], "0.3s");
    assert_eq!(st["settings"]["quiet_period"], "0.2s");
    assert_eq!(st["settings"]["drain_timeout"], "10s");

    let r = clients::get(envoy.control, "/nope").await.unwrap();
    assert_eq!(r.status, 404);
    let r = clients::request(envoy.control, "POST", "/ready", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    let r = clients::request(envoy.control, "DELETE", "/drain", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, POST"));
    let r = clients::get(envoy.control, "/drain?wait=maybe")
        .await
        .unwrap();
    assert_eq!(r.status, 400);
    assert!(r.text().contains("wait"), "{}", r.text());

    // The control listener never counts as in flight; the data listener does not serve control.
    for _ in 0..20 {
        clients::get(envoy.control, "/drain/status").await.unwrap();
    }
    assert_eq!(envoy.drain_status().await["active_requests"], 0);
    let r = clients::get(envoy.data, "/ready").await.unwrap();
    assert_eq!(
        r.text(),
        "hello from the graceful-drain gateway\n",
        "data listener is not control"
    );
    // A 400 did not start a drain.
    assert_eq!(envoy.drain_status().await["state"], "serving");
}

async fn counts_are_exact_under_load(concurrency: u32) {
    let envoy = Envoy::start(Options {
        concurrency,
        ..Options::default()
    })
    .await;
    let slow = [("x-envoy-fault-delay-request", "1500")];
    // 4 slow HTTP/1.1 requests and 4 slow HTTP/2 streams on one connection.
    let mut slow_tasks = Vec::new();
    for _ in 0..4 {
        let port = envoy.data;
        slow_tasks.push(tokio::spawn(async move {
            clients::request(port, "GET", "/slow", &slow).await
        }));
    }
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    for _ in 0..4 {
        let f = h2.start("/slow", &slow).await.unwrap();
        slow_tasks.push(tokio::spawn(f));
    }
    envoy.wait_active(8).await;
    envoy.wait_stat("graceful_drain.active_requests", 8).await;

    // Meanwhile a burst of fast requests over 8 keep-alive HTTP/1.1 connections and 2 HTTP/2 ones.
    let mut burst = Vec::new();
    for _ in 0..8 {
        let port = envoy.data;
        burst.push(tokio::spawn(async move {
            let mut c = H1Conn::connect(port).await?;
            for _ in 0..50 {
                let r = c.send("GET", "/fast", &[]).await?;
                if r.status != 200 {
                    return Err(format!("status {}", r.status));
                }
            }
            Ok::<_, String>(50)
        }));
    }
    for _ in 0..2 {
        let port = envoy.data;
        burst.push(tokio::spawn(async move {
            let mut c = H2Conn::connect(port).await?;
            let mut n = 0;
            for _ in 0..10 {
                let fs: Vec<_> = futures_start(&mut c, 10).await?;
                for f in fs {
                    let r = f.await?;
                    if r.status != 200 {
                        return Err(format!("status {}", r.status));
                    }
                    n += 1;
                }
            }
            Ok::<_, String>(n)
        }));
    }
    let mut fast_total = 0;
    for b in burst {
        fast_total += b.await.unwrap().unwrap();
    }
    assert_eq!(fast_total, 8 * 50 + 2 * 100);
    // The slow ones are still in flight: exactly 8.
    assert_eq!(envoy.drain_status().await["active_requests"], 8);
    for t in slow_tasks {
        assert_eq!(t.await.unwrap().unwrap().status, 200);
    }
    envoy.wait_active(0).await;
    envoy.wait_stat("graceful_drain.active_requests", 0).await;
}

async fn futures_start(
    c: &mut H2Conn,
    n: usize,
) -> Result<Vec<impl std::future::Future<Output = clients::H2Result>>, String> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(c.start("/fast", &[]).await.map_err(|e| e.to_string())?);
    }
    Ok(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_are_exact_with_one_worker() {
    counts_are_exact_under_load(1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_are_exact_with_two_workers() {
    counts_are_exact_under_load(2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_aborts_mid_request_do_not_leak() {
    let envoy = Envoy::start(Options::default()).await;
    // Far longer than every wait below: a request the abort did not end is still in flight.
    let slow = [("x-envoy-fault-delay-request", "60000")];
    // HTTP/1.1: connections dropped while their request waits.
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut c = H1Conn::connect(envoy.data).await.unwrap();
        let t = tokio::spawn(async move { c.send("GET", "/slow", &slow).await });
        conns.push(t);
    }
    // HTTP/2: streams reset by the client (dropping the response sends RST_STREAM).
    let mut h2 = H2Conn::connect(envoy.data).await.unwrap();
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(tokio::spawn(h2.start("/slow", &slow).await.unwrap()));
    }
    envoy.wait_active(6).await;
    for t in conns {
        t.abort();
    }
    for s in streams {
        s.abort();
    }
    // The aborted tasks dropped their connections/streams: Envoy sees resets and closes (its own
    // counters say so: the aborts reached it, the requests did not end any other way), and the
    // count is back to 0 long before the requests could have ended.
    eventually("Envoy saw the aborts", Duration::from_secs(10), || async {
        let closed = envoy
            .stat("http.data.downstream_cx_destroy_remote_active_rq")
            .await?;
        let reset = envoy.stat("http.data.downstream_rq_rx_reset").await?;
        (closed >= 3 && reset >= 3).then_some(())
    })
    .await;
    envoy.wait_active(0).await;
    assert_eq!(
        envoy.stat("http.data.downstream_rq_completed").await,
        Some(0),
        "no aborted request was answered"
    );
    drop(h2);
    envoy.wait_stat("graceful_drain.active_requests", 0).await;
    // Still serving normally afterwards.
    assert_eq!(clients::get(envoy.data, "/").await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stats_are_visible_in_prometheus() {
    let envoy = Envoy::start(Options::default()).await;
    clients::get(envoy.data, "/").await.unwrap();
    let r = clients::get(envoy.admin, "/stats/prometheus")
        .await
        .unwrap();
    let text = r.text();
    for m in common::STAT_NAMES {
        let series = format!("envoy_graceful_drain_{m}");
        assert!(
            text.lines().any(|l| common::series_of(l) == series),
            "{series} missing from /stats/prometheus:\n{text}"
        );
    }
}

/// Run Envoy on a config that must be refused; returns its log.
async fn refused(yaml: &str) -> String {
    let dir = TempDir::new("bad");
    let cfg = dir.0.join("envoy.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let mut child = Command::new(envoy_bin())
        .arg("-c")
        .arg(&cfg)
        .args(["--use-dynamic-base-id", "--concurrency", "1"])
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", module_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("envoy did not refuse the config within 20s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let out = child.wait_with_output().unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "envoy accepted a bad config:\n{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_config_makes_envoy_refuse_to_start_naming_the_field() {
    let p = free_ports(3);
    // Filter mode in every test mode: the data listener's HTTP filter config is among the ones
    // made bad.
    let filter_mode = Options::default().filter_mode();
    let good = render_gateway(p[0], p[1], p[2], &filter_mode);
    let cases = [
        (
            good.replace(r#""drain_timeout": "10s""#, r#""drain_timeout": "10x""#),
            "invalid graceful_drain bootstrap config: field `drain_timeout`: invalid duration \"10x\"",
        ),
        (
            good.replace(r#""drain_timeout": "10s""#, r#""drain_timeout": "0.1s""#),
            "field `drain_timeout`: 0.1s is below min_drain_duration 0.3s",
        ),
        (
            good.replace(r#""quiet_period""#, r#""quiet_periods""#),
            "field `quiet_periods`: unknown field",
        ),
        (
            good.replace(r#"'{"role": "data"}'"#, r#"'{"role": "both"}'"#),
            "invalid graceful_drain filter config: field `role`: unknown role \"both\"",
        ),
        (
            good.replace(r#"'{"role": "control"}'"#, r#"'{"role": "control", "x": 1}'"#),
            "invalid graceful_drain filter config: field `x`: unknown field",
        ),
        (
            good.replace(
                &format!(r#""admin_address": "127.0.0.1:{}""#, p[0]),
                &format!(r#""admin_address": "localhost:{}""#, p[0]),
            ),
            "invalid graceful_drain bootstrap config: field `admin_address`: \"localhost:",
        ),
        // Configs written for the releases that reached the admin through a cluster.
        (
            good.replace(
                &format!(r#""admin_address": "127.0.0.1:{}""#, p[0]),
                r#""admin_cluster": "graceful_drain_admin""#,
            ),
            "field `admin_cluster`: admin_cluster was removed",
        ),
        (
            good.replace(r#"'{"role": "data"}'"#, r#"'{"role": "admin_guard"}'"#),
            "field `role`: role \"admin_guard\" was removed",
        ),
    ];
    for (yaml, expected) in cases {
        assert_ne!(yaml, good, "case did not change the config: {expected}");
        let log = refused(&yaml).await;
        assert!(log.contains(expected), "expected {expected:?} in:\n{log}");
    }
}

#[test]
fn every_example_config_validates() {
    let mut files = Vec::new();
    let mut stack = vec![repo_root().join("envoy-config")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml")
                && !p.to_string_lossy().ends_with(".k8s.yaml")
            {
                files.push(p);
            }
        }
    }
    assert!(!files.is_empty());
    for f in files {
        let out = Command::new(envoy_bin())
            .args(["--mode", "validate", "-c"])
            .arg(&f)
            .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", module_dir())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("OK"),
            "{f:?} does not validate:\n{text}"
        );
    }
}

/// Filter mode's data path as the example's comment gives it (the module's HTTP filter
/// uncommented first in the data listener's chain): what the test harness and `bench/bench.py`
/// run as filter mode (with `track_requests` dropped besides). Both render the same text from `envoy-config/gateway.yaml`, and Envoy
/// accepts it with the module loaded.
#[test]
fn filter_mode_is_the_example_with_its_commented_filter() {
    let example = std::fs::read_to_string(repo_root().join("envoy-config/gateway.yaml")).unwrap();
    let rendered = add_data_http_filter(&example);
    let data = rendered
        .split("http_filters:\n")
        .nth(1)
        .expect("the data listener's http_filters");
    assert!(
        data.starts_with("          # Filter mode")
            && data.contains("\n          - name: envoy.filters.http.dynamic_modules\n")
            && data.find("value: '{\"role\": \"data\"}'") < data.find("envoy.filters.http.fault"),
        "the data HTTP filter is not first:\n{data}"
    );
    let bench = Command::new("python3")
        .current_dir(repo_root().join("bench"))
        .args([
            "-c",
            "import sys, bench; sys.stdout.write(bench.add_data_http_filter(sys.stdin.read()))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(example.as_bytes())?;
            c.wait_with_output()
        })
        .expect("run python3 bench/bench.py's renderer");
    assert!(bench.status.success());
    assert_eq!(String::from_utf8_lossy(&bench.stdout), rendered);
    let (ok, text) = validate_config(&rendered, module_dir());
    assert!(ok && text.contains("OK"), "{text}");
}
