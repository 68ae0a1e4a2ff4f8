//! Kubernetes, reproduced on loopback: a rolling restart of three gateway Envoys behind a real
//! front Envoy (active health checks on each gateway's `/ready`, keep-alive upstream pools, no
//! retries), under closed-loop HTTP/1.1 and HTTP/2 load with slow requests always in flight.
//! Each gateway is terminated the way kubelet does it: optional preStop `GET /drain`, SIGTERM,
//! SIGKILL after the grace period; then a replacement starts and must be healthy before the next.
//!
//! Claims: zero failed requests with the module, for HTTP/1.1 and HTTP/2 front-to-gateway
//! connections, with and without the preStop hook; no SIGKILL; each gateway's drain completes
//! within (longest request + min_drain + quiet + 1 s) as the module measures it. The same rollout
//! without the module must fail.
//!
//! With WebSocket clients that reconnect when closed (issue #46), through a front that lets
//! upgrades through, to connection-mode gateways: every close the clients see over the rollout
//! is a Close(1001) from a gateway's move, none abnormal (no cut, no failed reconnect), no
//! message lost, each gateway out well before its drain_timeout. With the move off, the same
//! rollout cuts them.

use crate::common;

use common::clients::{H1Conn, H2Conn};
use common::envoy::{Envoy, Options, Settings, TempDir, EXIT_SLACK};
use common::front::{front_yaml, Front};
use common::websocket::{self, ClientEnd};
use common::{eventually, free_ports};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GATEWAYS: usize = 3;
/// Gateway drain settings for this scenario (a health check every 200 ms needs well under 1 s
/// to take a draining gateway out of the front's rotation).
const SETTINGS: Settings = Settings::new("1s", "300ms", "8s");
const MIN_DRAIN: Duration = Duration::from_secs(1);
const QUIET: Duration = Duration::from_millis(300);
/// kubelet's terminationGracePeriodSeconds for the scenario: above drain_timeout.
const GRACE: Duration = Duration::from_secs(10);
/// The longest request the load sends.
const LONGEST_REQUEST: Duration = Duration::from_millis(2500);

/// Rollout scenarios share the machine's two cores: run them one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Default)]
struct LoadStats {
    sent: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    slow: AtomicU64,
    first_failures: Mutex<Vec<String>>,
}

impl LoadStats {
    fn record(&self, r: Result<u16, String>) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(200) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut f = self.first_failures.lock().unwrap();
                if f.len() < 10 {
                    f.push(format!("{other:?}"));
                }
            }
        }
    }
}

/// Request `i` of worker `w`: mostly 100-300 ms, one in 25 takes LONGEST_REQUEST, each worker's
/// first one early (its 2nd to 6th request), so that slow requests are in flight from the
/// first termination on, however fast the rollout goes.
fn delay_ms(w: u64, i: u64) -> u64 {
    if i % 25 == 2 + w % 5 {
        LONGEST_REQUEST.as_millis() as u64
    } else {
        100 + (i * 37 + w * 53) % 200
    }
}

const MAX_REQUESTS: u64 = 200_000;
const MAX_LOAD_TIME: Duration = Duration::from_secs(120);

/// Closed-loop load through the front: HTTP/1.1 keep-alive workers and HTTP/2 streams.
fn start_load(
    port: u16,
    stats: Arc<LoadStats>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let started = Instant::now();
    let keep_going = move |stats: &LoadStats, stop: &AtomicBool| {
        !stop.load(Ordering::Relaxed)
            && stats.sent.load(Ordering::Relaxed) < MAX_REQUESTS
            && started.elapsed() < MAX_LOAD_TIME
    };
    let mut tasks = Vec::new();
    // Workers 0-7 send mostly 100-300 ms requests; workers 8-11 send fast ones back to back.
    for w in 0..12u64 {
        let (stats, stop) = (stats.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn: Option<H1Conn> = None;
            let mut i = 0;
            while keep_going(&stats, &stop) {
                i += 1;
                let d = if w < 8 { delay_ms(w, i) } else { 0 };
                if d >= 1000 {
                    stats.slow.fetch_add(1, Ordering::Relaxed);
                }
                if conn.is_none() {
                    match H1Conn::connect(port).await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            stats.record(Err(e));
                            continue;
                        }
                    }
                }
                let h = [("x-envoy-fault-delay-request", d.to_string())];
                let r = conn
                    .as_mut()
                    .unwrap()
                    .send("GET", "/", &[(h[0].0, h[0].1.as_str())])
                    .await;
                if r.is_err() {
                    conn = None;
                }
                stats.record(r.map(|r| r.status));
            }
        }));
    }
    for c in 0..2u64 {
        let (stats, stop) = (stats.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let conn = Arc::new(tokio::sync::Mutex::new(
                H2Conn::connect(port).await.expect("h2 to front"),
            ));
            let mut streams = Vec::new();
            for s in 0..4u64 {
                let (stats, stop, conn) = (stats.clone(), stop.clone(), conn.clone());
                let w = 100 + c * 10 + s;
                streams.push(tokio::spawn(async move {
                    let mut i = 0;
                    while keep_going(&stats, &stop) {
                        i += 1;
                        let d = delay_ms(w, i);
                        if d >= 1000 {
                            stats.slow.fetch_add(1, Ordering::Relaxed);
                        }
                        let h = [("x-envoy-fault-delay-request", d.to_string())];
                        let fut = conn
                            .lock()
                            .await
                            .start("/", &[(h[0].0, h[0].1.as_str())])
                            .await;
                        let r = match fut {
                            Ok(f) => f.await.map(|r| r.status),
                            Err(e) => Err(format!("h2 stream not opened: {e}")),
                        };
                        stats.record(r);
                    }
                }));
            }
            for s in streams {
                let _ = s.await;
            }
        }));
    }
    tasks
}

async fn healthy_hosts(front_admin: u16) -> usize {
    match common::clients::get(front_admin, "/clusters").await {
        Ok(r) => r
            .text()
            .lines()
            .filter(|l| l.starts_with("gateways::") && l.ends_with("::health_flags::healthy"))
            .count(),
        Err(_) => 0,
    }
}

struct Termination {
    gateway: usize,
    /// From the start of the termination (preStop or SIGTERM) to the exit.
    total: Duration,
    /// From SIGTERM to the exit.
    after_sigterm: Duration,
    killed: bool,
    prestop: Option<u16>,
    /// With the module: the drain's duration as it reported it and whether the timeout ended
    /// it, and how many drains it started.
    reported: Option<(Duration, bool)>,
    drains_started: usize,
    /// The gateway's log.
    log: String,
}

/// A rollout: the gateways, the front before them, kubelet's way of terminating each.
struct Plan {
    /// Each gateway's options, its replacement's too.
    gateway: Options,
    /// The front talks HTTP/2 to the gateways (HTTP/1.1 otherwise).
    upstream_h2: bool,
    /// kubelet's preStop `GET /drain` before SIGTERM.
    prestop: bool,
    /// The front lets WebSocket upgrades through, with no route timeout.
    websocket: bool,
    /// kubelet's terminationGracePeriodSeconds: SIGKILL this long after the termination starts.
    grace: Duration,
}

/// Start the gateways and the front, then the load (`start_load` gets the front's port and
/// returns once the load is flowing, with its tasks), then terminate and replace each gateway
/// in turn; then `stop` the load, wait for its tasks, and return how each gateway ended.
async fn rollout<F, Fut>(plan: Plan, stop: &AtomicBool, start_load: F) -> Vec<Termination>
where
    F: FnOnce(u16) -> Fut,
    Fut: Future<Output = Vec<tokio::task::JoinHandle<()>>>,
{
    let _serial = SERIAL.lock().await;
    let opts = plan.gateway;
    let with_module = opts.with_module;
    // Reserved for the whole rollout: each replacement binds its predecessor's ports.
    let reserved: Vec<_> = (0..GATEWAYS).map(|_| free_ports(3)).collect();
    let ports: Vec<[u16; 3]> = reserved.iter().map(|p| [p[0], p[1], p[2]]).collect();
    let mut gateways = Vec::new();
    for p in &ports {
        gateways.push(Some(Envoy::start_on(*p, opts.clone()).await));
    }
    let fp = free_ports(2);
    // With the module, health is the gateway's readiness endpoint on its control port; stock
    // Envoy has none, so its users health-check the data port.
    let endpoints: Vec<(u16, u16)> = ports
        .iter()
        .map(|g| (g[1], if with_module { g[2] } else { g[1] }))
        .collect();
    let front_cfg = front_yaml(&Front {
        admin: fp[0],
        listen: Some(fp[1]),
        gateways: &endpoints,
        upstream_h2: plan.upstream_h2,
        health_check: Some((if with_module { "/ready" } else { "/" }, "0.2s")),
        route_timeout: if plan.websocket { "0s" } else { "30s" },
        websocket: plan.websocket,
    });
    let _front_dir = TempDir::new("front");
    let front_opts = Options {
        concurrency: 2,
        ..Options::default()
    };
    let front = Envoy::start_yaml(&front_cfg, fp[0], fp[1], fp[1], &front_opts).await;
    eventually(
        "all gateways healthy at the front",
        Duration::from_secs(15),
        || async { (healthy_hosts(front.admin).await == GATEWAYS).then_some(()) },
    )
    .await;

    let load = start_load(front.data).await;

    let mut terms = Vec::new();
    for (i, slot) in gateways.iter_mut().enumerate() {
        let mut gw = slot.take().unwrap();
        let t0 = Instant::now();
        let mut prestop_status = None;
        if plan.prestop {
            // kubelet's preStop httpGet: waits for the answer (bounded by the grace period).
            let r =
                tokio::time::timeout(plan.grace, common::clients::get(gw.control, "/drain")).await;
            prestop_status = Some(r.ok().and_then(|r| r.ok()).map_or(0, |r| r.status));
        }
        let t_sigterm = Instant::now();
        gw.sigterm();
        let remaining = plan.grace.saturating_sub(t0.elapsed());
        let exited = gw.wait_exit_or_kill(remaining).await;
        let exit_at = exited.unwrap_or_else(Instant::now);
        let log = gw.log();
        terms.push(Termination {
            reported: (with_module && exited.is_some()).then(|| gw.reported_drain()),
            drains_started: log.matches("graceful_drain: drain started").count(),
            gateway: i,
            total: exit_at - t0,
            after_sigterm: exit_at.saturating_duration_since(t_sigterm),
            killed: exited.is_none(),
            prestop: prestop_status,
            log,
        });
        drop(gw);
        // The replacement pod, and kubelet/LB waiting for it to be ready before the next one.
        let replacement = Envoy::start_on(ports[i], opts.clone()).await;
        eventually(
            "replacement healthy at the front",
            Duration::from_secs(15),
            || async { (healthy_hosts(front.admin).await == GATEWAYS).then_some(()) },
        )
        .await;
        *slot = Some(replacement);
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        let _ = tokio::time::timeout(Duration::from_secs(40), t).await;
    }
    terms
}

/// The rollout under the HTTP load ([`start_load`]), slow requests in flight from the start.
async fn http_rollout(
    upstream_h2: bool,
    prestop: bool,
    with_module: bool,
    http_filter: bool,
) -> (Arc<LoadStats>, Vec<Termination>) {
    let mut opts = Options {
        settings: SETTINGS,
        with_module,
        http_filter,
        concurrency: 1,
        ..Options::default()
    };
    if !http_filter {
        // Connection mode whatever the lane (`TEST_MODE`): the network filter follows the
        // exchanges; without `track_requests` (filter mode's network config) no module filter
        // would count a request at all.
        opts.track_requests = true;
        opts.data_http_filter = false;
    }
    let plan = Plan {
        gateway: opts,
        upstream_h2,
        prestop,
        websocket: false,
        grace: GRACE,
    };
    let stats = Arc::new(LoadStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let terms = rollout(plan, &stop, |port| {
        let (stats, stop) = (stats.clone(), stop.clone());
        async move {
            let load = start_load(port, stats.clone(), stop);
            // Let slow requests get in flight everywhere before the first termination.
            eventually("load flowing", Duration::from_secs(10), || async {
                (stats.ok.load(Ordering::Relaxed) >= 50).then_some(())
            })
            .await;
            // Every worker's first slow request sent (each lasts LONGEST_REQUEST): in flight now.
            eventually(
                "slow requests in flight",
                Duration::from_secs(10),
                || async { (stats.slow.load(Ordering::Relaxed) >= 16).then_some(()) },
            )
            .await;
            load
        }
    })
    .await;
    (stats, terms)
}

fn report(name: &str, stats: &LoadStats, terms: &[Termination]) {
    println!(
        "rollout [{name}]: sent={} ok={} failed={} (slow requests: {})",
        stats.sent.load(Ordering::Relaxed),
        stats.ok.load(Ordering::Relaxed),
        stats.failed.load(Ordering::Relaxed),
        stats.slow.load(Ordering::Relaxed)
    );
    for t in terms {
        println!(
            "  gateway {}: preStop={:?} exit {:.2}s after termination start, {:.3}s after SIGTERM; \
             reported drain {:?}{}",
            t.gateway,
            t.prestop,
            t.total.as_secs_f64(),
            t.after_sigterm.as_secs_f64(),
            t.reported,
            if t.killed { " (SIGKILL)" } else { "" }
        );
    }
    for f in stats.first_failures.lock().unwrap().iter() {
        println!("  failure: {f}");
    }
}

async fn assert_zero_failures(upstream_h2: bool, prestop: bool) {
    assert_zero_failures_in(upstream_h2, prestop, true).await
}

/// `http_filter: false` is connection mode (issue 14) in every lane, whatever `TEST_MODE` says:
/// the tracking network filter and the bootstrap extension only, no HTTP filter on any listener;
/// SIGTERM only (`/drain` is the HTTP filter's).
async fn assert_zero_failures_in(upstream_h2: bool, prestop: bool, http_filter: bool) {
    let name = format!(
        "module{}, {} front->gateway, {}",
        if http_filter {
            ""
        } else {
            " (connection mode)"
        },
        if upstream_h2 { "HTTP/2" } else { "HTTP/1.1" },
        if prestop {
            "preStop /drain + SIGTERM"
        } else {
            "SIGTERM only"
        }
    );
    let (stats, terms) = http_rollout(upstream_h2, prestop, true, http_filter).await;
    report(&name, &stats, &terms);
    assert!(
        stats.ok.load(Ordering::Relaxed) > 200,
        "too little load to prove anything"
    );
    assert!(
        stats.slow.load(Ordering::Relaxed) > 5,
        "no slow requests were sent"
    );
    assert_eq!(
        stats.failed.load(Ordering::Relaxed),
        0,
        "[{name}] failed requests"
    );
    // The drain ends by its rules, not by the 8 s timeout: Envoy's exit, from the termination's
    // start, within the longest request plus min_drain and quiet (and a second), plus a busy
    // machine's teardown (EXIT_SLACK), which is still below the timeout; the module's own
    // figure (its clock, free of this busy test's scheduling) within the rules themselves; and
    // the exit came before kubelet's SIGKILL.
    let bound = LONGEST_REQUEST + MIN_DRAIN + QUIET + Duration::from_secs(1);
    assert!(
        bound + EXIT_SLACK < Duration::from_secs(8),
        "the bound must tell a drain by the rules from one the 8 s timeout ended"
    );
    for t in &terms {
        assert!(!t.killed, "[{name}] gateway {} reached SIGKILL", t.gateway);
        assert!(
            t.total <= bound + EXIT_SLACK,
            "[{name}] gateway {} exited {:?} after its termination started (allowed {:?})",
            t.gateway,
            t.total,
            bound + EXIT_SLACK
        );
        let (reported, timed_out) = t.reported.expect("the module reported its drain");
        assert!(
            !timed_out && reported <= bound,
            "[{name}] gateway {} drained in {reported:?} (timed out: {timed_out}) > {bound:?}",
            t.gateway
        );
        if prestop {
            assert_eq!(t.prestop, Some(200), "[{name}] preStop /drain answer");
            // SIGTERM after the completed /drain starts no drain of its own: one drain in the
            // log, and the exit sooner than a new one could end (min_drain_duration).
            assert_eq!(t.drains_started, 1, "[{name}] gateway {}", t.gateway);
            assert!(
                t.after_sigterm < MIN_DRAIN,
                "[{name}] SIGTERM after a completed /drain took {:?}",
                t.after_sigterm
            );
        } else {
            // Never earlier than the minimum: endpoint removal must have time to propagate.
            assert!(
                t.total >= MIN_DRAIN,
                "[{name}] gateway {} exited after {:?}",
                t.gateway,
                t.total
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_http1_sigterm_only_loses_nothing() {
    assert_zero_failures(false, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_http2_sigterm_only_loses_nothing() {
    assert_zero_failures(true, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_http1_prestop_drain_loses_nothing() {
    assert_zero_failures(false, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_http2_prestop_drain_loses_nothing() {
    assert_zero_failures(true, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_http1_connection_mode_loses_nothing() {
    assert_zero_failures_in(false, false, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_http2_connection_mode_loses_nothing() {
    assert_zero_failures_in(true, false, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_without_the_module_fails_requests() {
    for upstream_h2 in [false, true] {
        let name = format!(
            "stock Envoy, {}",
            if upstream_h2 { "HTTP/2" } else { "HTTP/1.1" }
        );
        let (stats, terms) = http_rollout(upstream_h2, false, false, true).await;
        report(&name, &stats, &terms);
        assert!(stats.ok.load(Ordering::Relaxed) > 100, "too little load");
        assert!(
            stats.failed.load(Ordering::Relaxed) > 0,
            "[{name}] the same rollout without the module must show failures"
        );
    }
}

/// WebSocket clients through the front during a rollout, each a loop for the whole of it.
const WS_CLIENTS: usize = 18;
/// The gateways' `min_drain_duration` (`"1s"` in [`websocket_rollout`]'s settings).
const WS_MIN_DRAIN: Duration = Duration::from_secs(1);
/// `long_lived_window` (`"2s"` in the test's network filter config): the moves of a gateway's
/// WebSockets are spread over it.
const WS_WINDOW: Duration = Duration::from_secs(2);
/// Consecutive failed connects after which a client gives up (each one is already a failure).
const WS_CONNECT_RETRIES: u32 = 5;

/// What the WebSocket clients saw over a rollout.
#[derive(Default)]
struct WsStats {
    /// Every session that opened, as it ended.
    ends: Mutex<Vec<ClientEnd>>,
    /// Everything that was not a clean Close: failed connects (refused, 5xx) and cuts.
    abnormal: Mutex<Vec<String>>,
}

/// A client that reconnects when closed: opens a session (`c<i>-<n>`), exchanges until the
/// server's Close (answered; once the connection has ended, as a browser's `onclose` fires, a
/// new session at once) or `stop` (the client closes itself); a connect that fails, or a
/// session that ends without a Close, is abnormal (then it reconnects too, a bounded number of
/// times in a row).
async fn ws_client(port: u16, i: usize, stats: Arc<WsStats>, stop: Arc<AtomicBool>) {
    let started = Instant::now();
    let stopped = move || stop.load(Ordering::Relaxed) || started.elapsed() > MAX_LOAD_TIME;
    let mut failed_in_a_row = 0;
    for n in 1.. {
        if stopped() || failed_in_a_row >= WS_CONNECT_RETRIES {
            return;
        }
        let name = format!("c{i}-{n}");
        let ws = match websocket::connect(port, &name).await {
            Ok(ws) => ws,
            Err(e) => {
                stats.abnormal.lock().unwrap().push(e);
                failed_in_a_row += 1;
                continue;
            }
        };
        failed_in_a_row = 0;
        let stopped = stopped.clone();
        let stop_asked = async move {
            while !stopped() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let end = websocket::session(ws, name, stop_asked).await;
        if let Some(cut) = &end.cut {
            stats.abnormal.lock().unwrap().push(cut.clone());
        }
        stats.ends.lock().unwrap().push(end);
    }
}

/// A rollout of connection-mode gateways that route `/upstream-streaming/` to a chatty
/// WebSocket server, with [`WS_CLIENTS`] reconnecting clients through the front. Returns what
/// the clients saw, what the server received, and how each gateway ended.
async fn websocket_rollout(
    network_extra: &'static str,
    drain_timeout: &'static str,
    grace: Duration,
) -> (Arc<WsStats>, Arc<Mutex<websocket::Seen>>, Vec<Termination>) {
    let (upstream_port, seen) = websocket::upstream(websocket::Upstream::Chatty).await;
    let plan = Plan {
        gateway: Options {
            settings: Settings {
                min_drain: "1s",
                quiet: "300ms",
                timeout: drain_timeout,
            },
            concurrency: 1,
            data_http_filter: false,
            track_requests: true,
            test_upstream: Some(upstream_port),
            network_extra: Some(network_extra),
            ..Options::default()
        },
        upstream_h2: false,
        prestop: false,
        websocket: true,
        grace,
    };
    let stats = Arc::new(WsStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let terms = rollout(plan, &stop, |port| {
        let (stats, stop, seen) = (stats.clone(), stop.clone(), seen.clone());
        async move {
            let clients = (0..WS_CLIENTS)
                .map(|i| tokio::spawn(ws_client(port, i, stats.clone(), stop.clone())))
                .collect();
            // Every client's first session open and exchanging (a few messages at the server).
            eventually(
                "every WebSocket client exchanging through the front",
                Duration::from_secs(10),
                || {
                    let ok = seen
                        .lock()
                        .unwrap()
                        .messages
                        .iter()
                        .filter(|(name, got)| name.ends_with("-1") && got.len() >= 3)
                        .count()
                        == WS_CLIENTS;
                    async move { ok.then_some(()) }
                },
            )
            .await;
            clients
        }
    })
    .await;
    (stats, seen, terms)
}

/// `long-lived streams moved: websocket N, ...` (the drain's last line): N, and how many were
/// cut at the timeout.
fn websockets_moved_and_cut(log: &str) -> (u64, u64) {
    let number_after = |what: &str| -> u64 {
        log.rsplit_once(what)
            .and_then(|(_, t)| t.split([',', ' ', ';']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} in the gateway's log"))
    };
    (
        number_after("long-lived streams moved: websocket "),
        number_after("; cut: websocket "),
    )
}

fn report_websockets(name: &str, stats: &WsStats, terms: &[Termination]) -> BTreeMap<u16, u64> {
    let ends = stats.ends.lock().unwrap();
    let mut codes = BTreeMap::new();
    for c in ends.iter().filter_map(|e| e.code) {
        *codes.entry(c).or_insert(0u64) += 1;
    }
    let abnormal = stats.abnormal.lock().unwrap();
    println!(
        "websocket rollout [{name}]: {} sessions, server Close codes {codes:?}, {} abnormal, \
         {} client messages sent, {} server messages received",
        ends.len(),
        abnormal.len(),
        ends.iter().map(|e| e.sent.len()).sum::<usize>(),
        ends.iter().map(|e| e.received).sum::<u64>(),
    );
    // From each Close(1001) to its connection's end: the close handshake through the front.
    let mut lags: Vec<Duration> = ends
        .iter()
        .filter(|e| e.code == Some(1001))
        .map(|e| e.ended - e.at)
        .collect();
    lags.sort();
    if let (Some(first), Some(last)) = (lags.first(), lags.last()) {
        println!(
            "  Close(1001) to connection end: {first:?} .. {last:?} (median {:?})",
            lags[lags.len() / 2]
        );
    }
    for t in terms {
        println!(
            "  gateway {}: exit {:.3}s after SIGTERM, reported drain {:?}{}; {:?} (moved, cut)",
            t.gateway,
            t.after_sigterm.as_secs_f64(),
            t.reported,
            if t.killed { " (SIGKILL)" } else { "" },
            websockets_moved_and_cut(&t.log),
        );
    }
    for a in abnormal.iter() {
        println!("  abnormal: {a}");
    }
    codes
}

/// Issue #46: WebSocket clients that reconnect on a Close see no abnormal close over a whole
/// rolling restart. Each gateway, at its drain, sends its WebSockets a Close(1001) spread over
/// `long_lived_window` after `min_drain_duration`; the clients answer, reconnect through the
/// front (which has taken the draining gateway out of rotation) and carry on; no message a
/// client sent before its Close is lost; each gateway exits once its streams are gone, far
/// from `drain_timeout` (15 s: a cut would be a late exit).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_websocket_clients_that_reconnect_see_no_abnormal_close() {
    let name = "connection mode, WebSocket, move on";
    let (stats, seen, terms) = websocket_rollout(
        r#""long_lived_window": "2s""#,
        "15s",
        Duration::from_secs(20),
    )
    .await;
    let codes = report_websockets(name, &stats, &terms);
    let abnormal = stats.abnormal.lock().unwrap().clone();
    assert!(abnormal.is_empty(), "[{name}] abnormal: {abnormal:#?}");
    assert!(
        codes.keys().all(|c| *c == 1001),
        "[{name}] server Close codes other than 1001: {codes:?}"
    );
    let seen_1001 = codes.get(&1001).copied().unwrap_or(0);
    let mut moved_total = 0;
    let bound = WS_MIN_DRAIN + WS_WINDOW + Duration::from_secs(3);
    for t in &terms {
        let (moved, cut) = websockets_moved_and_cut(&t.log);
        assert!(
            moved > 0 && cut == 0,
            "[{name}] gateway {}: moved {moved}, cut {cut}",
            t.gateway
        );
        moved_total += moved;
        assert!(!t.killed, "[{name}] gateway {} reached SIGKILL", t.gateway);
        assert!(
            t.after_sigterm < bound,
            "[{name}] gateway {} exited {:?} after SIGTERM (allowed {bound:?})",
            t.gateway,
            t.after_sigterm
        );
        let (reported, timed_out) = t.reported.expect("the module reported its drain");
        assert!(
            !timed_out && reported < bound,
            "[{name}] gateway {}: drain of {reported:?} (timed out: {timed_out})",
            t.gateway
        );
    }
    // Every move the gateways made is a Close(1001) a client got, and there were moves.
    assert!(seen_1001 >= GATEWAYS as u64, "[{name}] {codes:?}");
    assert_eq!(seen_1001, moved_total, "[{name}] Closes seen vs moves made");
    // No loss: every message a client sent before its session's end reached the server.
    let seen = seen.lock().unwrap();
    for e in stats.ends.lock().unwrap().iter() {
        let got = seen.messages.get(&e.name).cloned().unwrap_or_default();
        let lost: Vec<_> = e.sent.difference(&got).collect();
        assert!(lost.is_empty(), "[{name}] {}: lost {lost:?}", e.name);
    }
}

/// The same rollout with the move off and a 3 s drain_timeout: the WebSockets are cut when
/// each gateway's drain times out, and the clients see it (what the test above rules out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_with_the_move_off_cuts_websockets() {
    let name = "connection mode, WebSocket, move off";
    let (stats, _seen, terms) = websocket_rollout(
        r#""move_long_lived_streams": false"#,
        "3s",
        Duration::from_secs(5),
    )
    .await;
    let codes = report_websockets(name, &stats, &terms);
    assert!(
        !stats.abnormal.lock().unwrap().is_empty(),
        "[{name}] the move off must show cuts"
    );
    assert!(!codes.contains_key(&1001), "[{name}] {codes:?}");
    for t in &terms {
        let (_, timed_out) = t.reported.expect("the module reported its drain");
        assert!(timed_out, "[{name}] gateway {}", t.gateway);
    }
}
