//! Drains under the configurations real gateways run, not only our example: health checkers that
//! never stop (a front Envoy's active health check, kubelet and cloud load-balancer probes),
//! listeners under other names, bootstrap-only mode, hot restart, a readiness delay, and the
//! drain start's calls to Envoy's admin. Each test is a row of docs/contributing/reliability.md's table.

use crate::common;

use common::clients::{self, H1Conn};
use common::envoy::{remove_list_items, render_gateway, test_mode, Envoy, Options, Settings};
use common::front::{front_yaml, Front};
use common::{eventually, free_ports};
use std::time::{Duration, Instant};

/// Short rules: a drain may complete 1 s after it starts; it times out at 8 s.
const RULES: Settings = Settings::new("1s", "500ms", "8s");
const MIN_DRAIN: Duration = Duration::from_secs(1);
const QUIET: Duration = Duration::from_millis(500);

fn options() -> Options {
    Options::with(RULES)
}

/// A front Envoy whose cluster actively health-checks `127.0.0.1:<port><path>` every 100 ms (user
/// agent `Envoy/HC`), as a load balancer in front of the gateway does: it never stops checking.
async fn front_health_checker(port: u16, path: &str) -> Envoy {
    let reserved = free_ports(1);
    let admin = reserved[0];
    let yaml = front_yaml(&Front {
        admin,
        listen: None,
        gateways: &[(port, port)],
        upstream_h2: false,
        health_check: Some((path, "0.1s")),
        route_timeout: "10s",
        websocket: false,
    });
    // The guard owns the process (killed on drop); it has no listeners of its own.
    let front = Envoy::start_yaml(&yaml, admin, 0, 0, &Options::default()).await;
    // Checking has begun once the front Envoy has sent a few.
    eventually(
        "front health checks running",
        Duration::from_secs(15),
        || async {
            let r = clients::get(admin, "/stats?filter=cluster.gateways.health_check.attempt")
                .await
                .ok()?;
            let n: u64 = r
                .text()
                .lines()
                .next()?
                .rsplit(' ')
                .next()?
                .trim()
                .parse()
                .ok()?;
            (n >= 3).then_some(())
        },
    )
    .await;
    front
}

/// Probes with the user agents of kubelet and cloud load balancers, every 100 ms, on `path`,
/// until dropped. Their answers are recorded (they must still be answered).
fn probe_loop(port: u16, path: &'static str) -> tokio::task::JoinHandle<Vec<u16>> {
    tokio::spawn(async move {
        let mut statuses = vec![];
        let deadline = Instant::now() + Duration::from_secs(20);
        for ua in ["kube-probe/1.31", "ELB-HealthChecker/2.0", "GoogleHC/1.0"]
            .iter()
            .cycle()
        {
            if Instant::now() > deadline {
                break;
            }
            match clients::request(port, "GET", path, &[("user-agent", ua)]).await {
                Ok(r) => statuses.push(r.status),
                Err(_) => break, // the gateway exited
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        statuses
    })
}

/// SIGTERM with one 1.5 s request in flight: Envoy's exit follows that request by the rules (the
/// quiet period from its start is over by then, `min_drain_duration` 1 s too), far below the 8 s
/// timeout that health checks holding the drain (each would restart the quiet period) would have
/// it end at; the module's figure says the same. The request is answered 200.
/// One request in flight on a keep-alive connection of `envoy`, held `delay_ms` by the fault
/// filter: its answer, once the module counts it.
async fn one_in_flight(
    envoy: &Envoy,
    delay_ms: &'static str,
) -> tokio::task::JoinHandle<Result<clients::Resp, String>> {
    let mut c = H1Conn::connect(envoy.data).await.unwrap();
    let in_flight = tokio::spawn(async move {
        c.send("GET", "/", &[("x-envoy-fault-delay-request", delay_ms)])
            .await
    });
    envoy.wait_active(1).await;
    in_flight
}

async fn sigterm_with_one_request_exits_by_the_rules(envoy: &mut Envoy, what: &str) {
    let port = envoy.data;
    let sent = Instant::now();
    let slow = tokio::spawn(async move {
        let r =
            clients::request(port, "GET", "/", &[("x-envoy-fault-delay-request", "1500")]).await;
        (r, Instant::now())
    });
    eventually("request in flight", Duration::from_secs(5), || async {
        (envoy.stat("http.data.downstream_rq_active").await? >= 1).then_some(())
    })
    .await;
    let t0 = Instant::now();
    envoy.sigterm();
    let (r, done) = slow.await.unwrap();
    assert_eq!(r.unwrap().status, 200, "{what}");
    let at = envoy
        .wait_exit_by_the_drain_rules(what, t0, [MIN_DRAIN, QUIET], sent, done)
        .await;
    println!("{what}: exited {:?} after SIGTERM", at - t0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_checks_on_the_data_listener_never_hold_a_drain() {
    // What a health check is, is the operator's to say: the path the checkers call.
    let mut envoy = Envoy::start(Options {
        bootstrap_extra: Some(r#""health_check_paths": ["/healthz"]"#),
        ..options()
    })
    .await;
    let _front = front_health_checker(envoy.data, "/healthz").await;
    let probes = probe_loop(envoy.data, "/healthz");
    let what = format!("{:?} mode, data-port health checks", test_mode());
    sigterm_with_one_request_exits_by_the_rules(&mut envoy, &what).await;
    let answered = probes.await.unwrap();
    assert!(
        answered.len() >= 5 && answered.iter().all(|s| *s == 200),
        "{answered:?}"
    );
    envoy.assert_logged("drain completed");
}

/// Bootstrap-only mode (no filter): a load balancer checks a path answered by Envoy's own
/// health_check filter on the data listener; Envoy's health-check stats take those requests out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bootstrap_only_health_checks_never_hold_a_drain() {
    let p = free_ports(3);
    let yaml = render_gateway(p[0], p[1], p[2], &options());
    // Bootstrap-only: neither of the module's filters (in connection mode the network filter
    // would follow the requests itself, and count as work what no `health_check_paths` names).
    let mut y = remove_list_items(&yaml, "envoy.filters.http.dynamic_modules");
    y = remove_list_items(&y, "envoy.filters.network.dynamic_modules");
    // Envoy's health_check filter on the data listener, answering /healthz.
    let data_hc = "          - name: envoy.filters.http.fault\n";
    assert_eq!(y.matches(data_hc).count(), 1);
    y = y.replacen(
        data_hc,
        "          - name: envoy.filters.http.health_check\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck\n              pass_through_mode: false\n              headers:\n              - name: \":path\"\n                string_match: { exact: \"/healthz\" }\n          - name: envoy.filters.http.fault\n",
        1,
    );
    let mut envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &options()).await;
    assert_eq!(
        clients::get(envoy.data, "/healthz").await.unwrap().status,
        200
    );
    let _front = front_health_checker(envoy.data, "/healthz").await;
    sigterm_with_one_request_exits_by_the_rules(
        &mut envoy,
        "bootstrap-only mode, data-port health checks",
    )
    .await;
}

/// The control listener under another stat prefix (`readiness`), health-checked by a front
/// Envoy: a waiting `GET /drain` (preStop) never waits for itself, and the SIGTERM after it exits
/// at once: sooner than a drain of its own could end (`min_drain_duration` 3 s here, so that a
/// busy machine's teardown is told apart from a fresh drain).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_control_listener_under_any_name_drains_by_the_rules() {
    const MIN_DRAIN: Duration = Duration::from_secs(3);
    let o = Options {
        settings: Settings {
            min_drain: "3s",
            ..RULES
        },
        ..options()
    };
    let p = free_ports(3);
    let yaml = render_gateway(p[0], p[1], p[2], &o);
    let y = yaml.replacen("stat_prefix: control", "stat_prefix: readiness", 1);
    assert!(!y.contains("stat_prefix: control"));
    let mut envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &o).await;
    let _front = front_health_checker(envoy.control, "/ready").await;
    // preStop: GET /drain waits for the drain, which completes at min_drain_duration (nothing in
    // flight), not at the timeout.
    let t0 = Instant::now();
    let r = clients::get(envoy.control, "/drain").await.unwrap();
    let took = t0.elapsed();
    println!("control listener `readiness`: /drain answered after {took:?}");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"timed_out\":false"), "{}", r.text());
    assert!(took >= MIN_DRAIN - Duration::from_millis(100), "{took:?}");
    // The SIGTERM that follows is released at once, without a drain of its own: Envoy's exit
    // comes before a fresh drain with these settings could have ended.
    let timeout = MIN_DRAIN + Duration::from_secs(5);
    envoy
        .sigterm_after_a_completed_drain(MIN_DRAIN, timeout)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_control_listener_under_any_name_lets_sigterm_drain_by_the_rules() {
    let p = free_ports(3);
    let yaml = render_gateway(p[0], p[1], p[2], &options());
    let y = yaml.replacen("stat_prefix: control", "stat_prefix: readiness", 1);
    let mut envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &options()).await;
    let _front = front_health_checker(envoy.control, "/ready").await;
    sigterm_with_one_request_exits_by_the_rules(&mut envoy, "control listener `readiness`").await;
}

/// Module readiness, Envoy's `/ready` and Envoy's health-check state agree in every state:
/// serving, during `readiness_failure_delay` (connections already sent away), draining, drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_and_health_agree_and_readiness_can_be_delayed() {
    let envoy = Envoy::start(Options {
        settings: Settings::new("2s", "200ms", "8s"),
        bootstrap_extra: Some(r#""readiness_failure_delay": "800ms""#),
        ..Options::default()
    })
    .await;
    let view = || async {
        let module = clients::get(envoy.control, "/ready").await.unwrap().status;
        let envoy_ready = clients::get(envoy.admin, "/ready").await.unwrap();
        let live = envoy.stat("server.live").await.unwrap();
        (module, envoy_ready.status, live)
    };
    assert_eq!(view().await, (200, 200, 1), "serving");
    // A request in flight when the drain starts.
    let in_flight = one_in_flight(&envoy, "400").await;
    let t0 = Instant::now();
    let r = clients::request(envoy.admin, "POST", "/graceful_drain", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // During the delay: still ready everywhere, but the connection was sent away at once. (A
    // view taken only after the delay, on a machine too busy for three GETs in 800 ms, proves
    // nothing either way: then only the lower bound below holds the delay to account.)
    let within = view().await;
    let viewed_after = t0.elapsed();
    if viewed_after < Duration::from_millis(800) {
        assert_eq!(within, (200, 200, 1), "within readiness_failure_delay");
    } else {
        eprintln!("the view within the delay came {viewed_after:?} after the drain start: skipped");
    }
    let r = in_flight.await.unwrap().unwrap();
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "sent away at drain start"
    );
    // After the delay: not ready everywhere.
    let draining = eventually(
        "readiness fails after the delay",
        Duration::from_secs(3),
        || async {
            let v = view().await;
            (v.0 == 503).then_some((v, t0.elapsed()))
        },
    )
    .await;
    assert!(draining.1 >= Duration::from_millis(800), "{:?}", draining.1);
    let agreed = eventually("Envoy follows", Duration::from_secs(2), || async {
        let v = view().await;
        (v == (503, 503, 0)).then_some(v)
    })
    .await;
    assert_eq!(agreed, (503, 503, 0));
    let admin_ready = clients::get(envoy.admin, "/ready").await.unwrap();
    assert!(
        admin_ready.text().contains("DRAINING"),
        "{}",
        admin_ready.text()
    );
    // Drained: still not ready anywhere.
    eventually("drained", Duration::from_secs(5), || async {
        (envoy.drain_status().await["state"] == "drained").then_some(())
    })
    .await;
    assert_eq!(view().await, (503, 503, 0), "drained");
}

/// The drain start fails Envoy's health checks and starts Envoy's drain through the admin
/// address, from the module's own thread: Envoy's health turns, and Envoy reports no bug (the
/// releases that went through an admin cluster with a module upstream filter on it made Envoy log
/// `envoy_bug` and count `server.envoy_bug_failures` on every drain). An admin that does not
/// answer delays nothing: the drain completes on its own rules, and the log says why Envoy's
/// health is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_drain_start_calls_the_admin_and_envoy_reports_no_bug() {
    let envoy = Envoy::start(options()).await;
    assert_eq!(envoy.stat("server.live").await, Some(1));
    let r = clients::get(envoy.control, "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    eventually(
        "Envoy's health failed through the admin",
        Duration::from_secs(3),
        || async { (envoy.stat("server.live").await == Some(0)).then_some(()) },
    )
    .await;
    eventually(
        "both admin calls answered",
        Duration::from_secs(3),
        || async {
            let log = envoy.log();
            (log.contains("Envoy's health checks now fail (admin answered 200)")
                && log.contains("Envoy's listeners now drain-close (admin answered 200)"))
            .then_some(())
        },
    )
    .await;
    assert_eq!(envoy.stat("server.envoy_bug_failures").await, Some(0));
    assert!(!envoy.log().contains("envoy_bug"), "{}", envoy.log());

    // Nothing listens at the configured admin address.
    let nobody = no_admin_socket("drain");
    let lost = start_with_admin_address(&nobody.display().to_string(), &free_ports(3)).await;
    let r = clients::get(lost.control, "/drain?wait=false")
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    eventually("the drain completes", Duration::from_secs(5), || async {
        (lost.drain_status().await["state"] == "drained").then_some(())
    })
    .await;
    // The rules allow the end at 1 s (min_drain_duration, nothing in flight): it ended by them,
    // not by the 8 s timeout.
    let st = lost.drain_status().await;
    assert_eq!(st["outcome"]["timed_out"], false, "{st}");
    lost.assert_logged("admin POST /healthcheck/fail failed");
    assert_eq!(lost.stat("server.live").await, Some(1), "health untouched");
}

/// A unix socket path no process listens on (a free TCP port could be taken meanwhile by another
/// test's Envoy, whose health a drain would then fail).
fn no_admin_socket(tag: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("gd-no-admin-{tag}-{}.sock", std::process::id()));
    assert!(!path.exists());
    path
}

/// The gateway on ports `p` (admin, data, control) with `admin_address` set to `address`.
async fn start_with_admin_address(address: &str, p: &[u16]) -> Envoy {
    let extra: &'static str =
        Box::leak(format!(r#""admin_address": "{address}""#).into_boxed_str());
    let o = Options {
        bootstrap_extra: Some(extra),
        ..options()
    };
    Envoy::start_on([p[0], p[1], p[2]], o).await
}

/// `admin_address` is checked when the server is initialized, so a wrong one shows at deploy
/// time and not at the first drain, in the log, the status (`admin_address_check`) and the gauge
/// `graceful_drain.admin_address_ok`: Envoy's own admin is recognised (its `/ready` answers with
/// a server state); a socket nobody listens on (after three tries) and the module's control
/// listener (which also serves `/ready`, but is not the admin) are reported with a warning that
/// names the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_address_is_checked_at_start() {
    let right = Envoy::start(options()).await;
    let line = format!(
        "admin_address 127.0.0.1:{} is Envoy's admin (state LIVE)",
        right.admin
    );
    right.wait_log("the admin recognised", &line).await;
    assert_eq!(
        right.drain_status().await["admin_address_check"],
        "recognised"
    );
    right.wait_stat("graceful_drain.admin_address_ok", 1).await;
    assert!(
        !right.log().contains("admin_address did not"),
        "{}",
        right.log()
    );
    drop(right);

    let nobody = no_admin_socket("check");
    let absent = start_with_admin_address(&nobody.display().to_string(), &free_ports(3)).await;
    let line = format!("admin_address did not answer ({}: ", nobody.display());
    absent.wait_log("the absent admin reported", &line).await;
    assert!(absent
        .log()
        .contains("; 3 tries): unless Envoy's admin is only slow to start"));
    assert_eq!(
        absent.drain_status().await["admin_address_check"],
        "not_answering"
    );
    assert_eq!(
        absent.stat("graceful_drain.admin_address_ok").await,
        Some(0)
    );
    // Reported, not fatal: the gateway serves.
    assert_eq!(clients::get(absent.data, "/").await.unwrap().status, 200);
    drop(absent);

    let p = free_ports(3);
    let control = start_with_admin_address(&format!("127.0.0.1:{}", p[2]), &p).await;
    let line = format!(
        "admin_address 127.0.0.1:{} is not Envoy's admin (GET /ready answered 200 \"ready\"): \
         a drain cannot fail Envoy's health checks through it; set admin_address",
        p[2]
    );
    control
        .wait_log("the control listener reported", &line)
        .await;
    assert_eq!(
        control.drain_status().await["admin_address_check"],
        "not_admin"
    );
    // One answer is enough to tell: no retry.
    assert_eq!(control.log().matches("is not Envoy's admin").count(), 1);
}

/// Envoy Gateway runs Envoy at `--log-level warn` (its `EnvoyProxy` default): there the module's
/// lifecycle lines (loaded, drain started, drain completed, exit released) show only with
/// `lifecycle_log_level: "warn"`, and Envoy itself prints nothing below warn either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lifecycle_shows_at_log_level_warn_when_asked() {
    const LIFECYCLE: [&str; 4] = [
        "graceful_drain: drain engine loaded (graceful_drain ",
        "graceful_drain: drain started (trigger=sigterm",
        "graceful_drain: drain completed in ",
        "graceful_drain: releasing Envoy's exit",
    ];
    for (extra, shown) in [
        (None, false),
        (Some(r#""lifecycle_log_level": "warn""#), true),
    ] {
        let o = Options {
            log_args: Some(vec!["--log-level".into(), "warn".into()]),
            bootstrap_extra: extra,
            ..options()
        };
        let mut envoy = Envoy::start(o).await;
        let data = envoy.data;
        let slow = tokio::spawn(async move {
            clients::request(data, "GET", "/", &[("x-envoy-fault-delay-request", "400")]).await
        });
        envoy.wait_active(1).await;
        envoy.sigterm();
        assert_eq!(slow.await.unwrap().unwrap().status, 200);
        let (status, _) = envoy.wait_exit(Duration::from_secs(15)).await;
        assert!(status.success(), "{status:?}");
        let log = envoy.log();
        for line in LIFECYCLE {
            assert_eq!(log.contains(line), shown, "{extra:?}: {line:?} in:\n{log}");
        }
        if shown {
            assert!(
                log.contains(&format!(
                    "(graceful_drain {}, Envoy {};",
                    env!("CARGO_PKG_VERSION"),
                    common::envoy::minor_of(&common::envoy::expected_envoy_version())
                )),
                "the load line names the module and the Envoy:\n{log}"
            );
        }
        assert!(
            !log.contains("][info]["),
            "Envoy at warn printed info lines:\n{log}"
        );
    }
}

/// Hot restart: the new process serves normally (never put into a failed health state by the old
/// one), while the old one drains its own connections and exits on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_restart_drains_the_old_process_and_leaves_the_new_one_serving() {
    let p = free_ports(3);
    // A base id of our own: hot restart needs both processes on the same one.
    let base_id = 20_000 + (std::process::id() % 10_000);
    let epoch = |e: u32| Options {
        base_args: Some(
            [
                "--base-id",
                &base_id.to_string(),
                "--restart-epoch",
                &e.to_string(),
                "--drain-time-s",
                "2",
                "--parent-shutdown-time-s",
                "4",
            ]
            .map(String::from)
            .to_vec(),
        ),
        ..options()
    };
    let mut old = Envoy::start_on([p[0], p[1], p[2]], epoch(0)).await;
    // A request in flight across the restart, on a connection of the old process.
    let in_flight = one_in_flight(&old, "1500").await;
    let t0 = Instant::now();
    let new = Envoy::start_on([p[0], p[1], p[2]], epoch(1)).await;
    // The admin address now belongs to the new process: it is LIVE and its health not failed.
    let info = eventually(
        "the new epoch answers admin",
        Duration::from_secs(10),
        || async {
            let info = clients::get(new.admin, "/server_info").await.ok()?.text();
            info.contains("\"restart_epoch\": 1").then_some(info)
        },
    )
    .await;
    assert!(info.contains("\"state\": \"LIVE\""), "{info}");
    let line = format!("admin_address 127.0.0.1:{} is Envoy's admin", p[0]);
    new.wait_log("the new epoch's admin checked", &line).await;
    // The old process drained: its request completes, told to close its connection.
    let r = in_flight.await.unwrap().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    // It exits on time (Envoy terminates the parent after --parent-shutdown-time-s, 4 s): its
    // drain ended by the rules, not held to the 8 s drain_timeout, which started after t0.
    let (status, at) = old.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    let (reported, timed_out) = old.reported_drain();
    assert!(
        !timed_out,
        "the old process's drain timed out after {reported:?}"
    );
    assert!(
        at - t0 < Duration::from_secs(8),
        "old process exited after {:?}",
        at - t0
    );
    old.assert_logged("drain started (trigger=drain_listeners");
    let old_log = old.log();
    assert!(
        !old_log.contains("admin POST /healthcheck/fail"),
        "{old_log}"
    );
    // The new process serves normally: no connection: close, ready everywhere, health intact.
    for _ in 0..5 {
        let r = clients::get(new.data, "/").await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("connection"),
            None,
            "new process sends connections away"
        );
    }
    assert_eq!(
        clients::get(new.control, "/ready").await.unwrap().status,
        200
    );
    assert_eq!(clients::get(new.admin, "/ready").await.unwrap().status, 200);
    assert_eq!(new.stat("server.live").await, Some(1));
    assert_eq!(new.drain_status().await["state"], "serving");
}
