//! A large configuration (2 000 static clusters, ~200 000 stats): a drain must not cost more of
//! Envoy's main thread because of it. Envoy's admin stays responsive while draining, the drain
//! completes on time, and requests on a listener without the filter still hold it (issue 11).

use crate::common;

use common::clients::{self, H1Conn};
use common::envoy::{
    add_route_without_the_filter, push_static_clusters, remove_list_items, render_gateway, Envoy,
    Options, Settings,
};
use common::{eventually, free_ports};
use std::time::{Duration, Instant};

const CLUSTERS: usize = 2000;
const MIN_DRAIN: Duration = Duration::from_millis(1500);
const SETTINGS: Settings = Settings::new("1500ms", "200ms", "15s");

/// The example gateway plus `CLUSTERS` static clusters; without the module's filter on the data
/// listener when `filter_on_data` is false (bootstrap-only mode for the data path).
fn large_gateway(p: &[u16], filter_on_data: bool) -> String {
    let d = Options::default();
    // Without the module on the data path: neither the HTTP filter nor a tracking network
    // filter (in connection mode the tracker is the module's data path).
    let o = Options {
        settings: SETTINGS,
        track_requests: d.track_requests && filter_on_data,
        ..d
    };
    let mut y = render_gateway(p[0], p[1], p[2], &o);
    if !filter_on_data {
        let at = y.find("  - name: control\n").expect("control listener");
        let (data, rest) = y.split_at(at);
        y = remove_list_items(data, "envoy.filters.http.dynamic_modules") + rest;
    }
    push_static_clusters(&mut y, (0..CLUSTERS).map(|i| (format!("scale_{i}"), p[0])));
    y
}

async fn start(filter_on_data: bool) -> Envoy {
    let p = free_ports(3);
    let o = Options::with(SETTINGS);
    Envoy::start_yaml(&large_gateway(&p, filter_on_data), p[0], p[1], p[2], &o).await
}

/// Median latency of admin `GET /ready` sampled every 20 ms until `until` (at least 3 samples).
async fn ready_p50(admin: u16, until: Instant) -> Duration {
    let mut lat = Vec::new();
    while (Instant::now() < until || lat.len() < 3) && lat.len() < 500 {
        let t = Instant::now();
        // 200 while serving, 503 once the drain has started: only the latency matters here.
        let Ok(r) = clients::get(admin, "/ready").await else {
            break; // Envoy exited
        };
        assert!(matches!(r.status, 200 | 503), "{}", r.status);
        lat.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!lat.is_empty(), "admin /ready never answered");
    lat.sort();
    lat[lat.len() / 2]
}

fn drain_duration_ms(log: &str) -> u64 {
    let tail = log
        .split("drain completed in ")
        .nth(1)
        .unwrap_or_else(|| panic!("no completion in the log:\n{log}"));
    tail.split(' ').next().unwrap().parse().unwrap()
}

/// The measured case of a partly covered gateway (Envoy Gateway's, with a policy on some
/// routes): 8 000 clusters, the default drain settings, a request longer than
/// min_drain_duration on a route the filter is disabled on. It is served in full and Envoy exits
/// after it. Before, the first scan of a filter-mode drain was put off by about 32 times the
/// calibration scan's cost (more than 5 s at this size) and Envoy's figures were not looked at
/// until then: the drain completed at 5.00 s and the request was cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_filter_a_request_on_a_route_without_it_holds_a_large_gateway_s_drain() {
    let p = free_ports(3);
    let o = Options::with(Settings::new("5s", "1s", "25s"));
    let mut y = add_route_without_the_filter(&render_gateway(p[0], p[1], p[2], &o), "/no-filter/");
    push_static_clusters(&mut y, (0..8000).map(|i| (format!("scale_{i}"), p[0])));
    let mut envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &o).await;
    let port = envoy.data;
    // Past min_drain_duration (5 s) by more than the admin's answer below can take: the
    // filtered /stats walks 8 000 clusters' stats, and under CI's three lanes the request was
    // seen in flight 1.5 s or more after it was sent (2026-12-07), so a 6.5 s request did not
    // outlive the minimum counted from the SIGTERM.
    let request = 10_000;
    let unseen = tokio::spawn(async move {
        clients::request(
            port,
            "GET",
            "/no-filter/long",
            &[("x-envoy-fault-delay-request", &request.to_string())],
        )
        .await
    });
    eventually("the request in flight", Duration::from_secs(10), || async {
        (envoy.stat("http.data.downstream_rq_active").await == Some(1)).then_some(())
    })
    .await;
    let t0 = Instant::now();
    envoy.sigterm();
    let r = unseen.await.unwrap().expect("served in full, not cut");
    let done = Instant::now();
    assert_eq!(r.status, 200);
    let timeout = Duration::from_secs(30);
    envoy.wait_drained_after(done, timeout, "the request").await;
    assert!(
        done - t0 > Duration::from_secs(5),
        "the request outlived min_drain_duration"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_filter_a_large_gateway_drains_on_time_and_its_admin_stays_responsive() {
    let mut envoy = start(true).await;
    let serving = ready_p50(envoy.admin, Instant::now() + Duration::from_millis(600)).await;
    let mut conn = H1Conn::connect(envoy.data).await.unwrap();
    let slow = tokio::spawn(async move {
        conn.send("GET", "/", &[("x-envoy-fault-delay-request", "800")])
            .await
    });
    eventually(
        "the slow request is in flight",
        Duration::from_secs(5),
        || async {
            let r = clients::get(envoy.control, "/drain/status").await.ok()?;
            let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            (v["active_requests"] == 1).then_some(())
        },
    )
    .await;
    let pid = envoy.pid();
    let main_before = thread_ticks(pid, "envoy");
    let t0 = Instant::now();
    envoy.sigterm();
    let draining = ready_p50(envoy.admin, t0 + MIN_DRAIN - Duration::from_millis(100)).await;
    let main_after = thread_ticks(pid, "envoy");
    let elapsed = t0.elapsed();
    let r = slow.await.unwrap().expect("the slow request is answered");
    assert_eq!(r.status, 200);
    envoy.wait_exit(Duration::from_secs(20)).await;
    let log = envoy.log();
    // Before issue 11 a full scan of the stats store ran every 20 ms on the main thread: at
    // 2 000 clusters the admin's median answer took a good part of a scan (100s of ms). What
    // tells that apart on a busy machine is the main thread's CPU time, not its latency (which
    // the load changes; `make bench` measures it): a main thread that scans is busy all the
    // time, one that serves the admin is not.
    println!("admin /ready p50 {draining:?} while draining vs {serving:?} serving");
    assert_main_thread_mostly_idle(main_after - main_before, elapsed, &log);
    let took = drain_duration_ms(&log);
    let min = MIN_DRAIN.as_millis() as u64;
    assert!(
        (min..min + 150).contains(&took),
        "drain took {took} ms, allowed from {min} ms"
    );
    assert!(log.contains("requests cut: 0"), "{log}");
    assert!(
        log.contains("a scan of Envoy's stats takes"),
        "the configuration is large enough for the scan budget to matter:\n{log}"
    );
}

/// CPU time (clock ticks) of the process's threads named `comm`.
fn thread_ticks(pid: i32, comm: &str) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("Envoy's threads");
    let mut ticks = 0;
    for t in tasks.flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if name.trim_end() != comm {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is 3rd, utime 14th, stime 15th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 12 {
            ticks += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    ticks
}

/// Envoy's main thread used under a tenth of a CPU over `elapsed` (`ticks` of CPU time): the
/// scans of its stats did not run there. Load on the machine can only lower the share.
fn assert_main_thread_mostly_idle(ticks: u64, elapsed: Duration, log: &str) {
    // Linux reports thread CPU time in USER_HZ ticks, 100 per second.
    let main_share = ticks as f64 / 100.0 / elapsed.as_secs_f64();
    println!(
        "Envoy's main thread: {:.1} % of a CPU while draining",
        main_share * 100.0
    );
    assert!(
        main_share < 0.10,
        "Envoy's main thread used {:.0} % of a CPU while draining (the scans must not run \
         there)\n{log}",
        main_share * 100.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_filter_a_request_still_holds_the_drain_until_it_ends() {
    let mut envoy = start(false).await;
    let serving = ready_p50(envoy.admin, Instant::now() + Duration::from_millis(600)).await;
    let mut conn = H1Conn::connect(envoy.data).await.unwrap();
    // Outlives the minimum drain duration: only a rescan of Envoy's stats can see it end.
    let slow_ms = 2500u64;
    // The request cannot be answered before `slow_ms` after this.
    let sent = Instant::now();
    let slow = tokio::spawn(async move {
        let r = conn
            .send("GET", "/", &[("x-envoy-fault-delay-request", "2500")])
            .await;
        (r, Instant::now())
    });
    eventually(
        "Envoy counts the slow request",
        Duration::from_secs(5),
        || async {
            let r = clients::get(
                envoy.admin,
                "/stats?filter=^http.data.downstream_rq_active$",
            )
            .await
            .ok()?;
            r.text().contains(": 1").then_some(())
        },
    )
    .await;
    let pid = envoy.pid();
    let (main_before, scanner_before) = (
        thread_ticks(pid, "envoy"),
        thread_ticks(pid, "graceful_stats"),
    );
    let t0 = Instant::now();
    envoy.sigterm();
    // Envoy's stats are the only signal here, and they are read all through the drain: on the
    // module's own thread, never on Envoy's main thread, which stays free for the admin.
    // Sampled while Envoy surely runs: up to 2.3 s into the drain, and ending 200 ms before the
    // slow request can end (the drain may complete then, and Envoy exit: a loaded machine can
    // take long to see the request counted, so the SIGTERM comes later after it).
    let window_end =
        (t0 + Duration::from_millis(2300)).min(sent + Duration::from_millis(slow_ms - 200));
    assert!(
        window_end >= t0 + Duration::from_millis(500),
        "the slow request was counted only {:?} after it was sent: too late to watch its drain",
        t0 - sent
    );
    let draining = ready_p50(envoy.admin, window_end).await;
    let (main_after, scanner_after) = (
        thread_ticks(pid, "envoy"),
        thread_ticks(pid, "graceful_stats"),
    );
    let elapsed = t0.elapsed();
    let (r, ended) = slow.await.unwrap();
    assert_eq!(r.expect("the slow request is answered").status, 200);
    let (_, exited) = envoy.wait_exit(Duration::from_secs(20)).await;
    let log = envoy.log();
    println!("admin /ready p50 {draining:?} while draining vs {serving:?} serving");
    assert_main_thread_mostly_idle(main_after - main_before, elapsed, &log);
    assert!(
        scanner_after > scanner_before,
        "the scans ran on the module's thread (graceful_stats: {scanner_before} -> {scanner_after} \
         ticks)\n{log}"
    );
    assert!(log.contains("requests cut: 0"), "{log}");
    assert!(
        exited >= ended,
        "Envoy exited before the request without the filter ended"
    );
    // Seen within one busy-share scan interval (4 scans' cost), not at the drain timeout.
    let took = drain_duration_ms(&log);
    assert!(
        took < slow_ms + 5000,
        "drain took {took} ms for a {slow_ms} ms request (started {:?} ago)",
        t0.elapsed()
    );
}

/// Hundreds of concurrent HTTP/2 streams: more than the first segments of the per-worker request
/// table hold (64 slots each, doubling), so it grows while they start. Every stream is counted
/// exactly, every connection gets GOAWAY at drain start (not with its stream's end), and every
/// stream still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_streams_grow_the_table_and_every_connection_is_sent_away() {
    const CONNS: usize = 6;
    const PER_CONN: usize = 60;
    const STREAMS: usize = CONNS * PER_CONN;
    let envoy = Envoy::start(Options::default()).await;
    let mut conns = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..CONNS {
        let mut c = common::clients::H2Conn::connect(envoy.data).await.unwrap();
        for _ in 0..PER_CONN {
            let f = c
                .start("/", &[("x-envoy-fault-delay-request", "3000")])
                .await
                .expect("open a stream");
            streams.push(tokio::spawn(f));
        }
        conns.push(c);
    }
    let status = || async {
        let r = clients::get(envoy.control, "/drain/status").await.ok()?;
        serde_json::from_slice::<serde_json::Value>(&r.body).ok()
    };
    let st = eventually("every stream counted", Duration::from_secs(10), || async {
        let v = status().await?;
        (v["active_requests"] == STREAMS).then_some(v)
    })
    .await;
    let slots = st["request_table"]["slots"].as_u64().unwrap();
    let workers = st["request_table"]["workers"].as_u64().unwrap();
    assert!(
        slots >= STREAMS as u64 && slots > 64 * workers,
        "the table grew past its first segments: {st}"
    );
    let t0 = Instant::now();
    let r = clients::request(envoy.control, "POST", "/drain?wait=false", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{}", r.text());
    for c in conns.iter_mut() {
        let e = c.wait_goaway(Duration::from_secs(2)).await;
        assert_eq!(e.reason(), Some(h2::Reason::NO_ERROR));
    }
    // GOAWAY at the drain start, not with the streams' end: read after every GOAWAY arrived,
    // the module still counts every stream in flight.
    let st = status().await.expect("/drain/status");
    assert_eq!(
        st["active_requests"],
        STREAMS,
        "GOAWAY came only as streams ended ({:?} after the drain start): {st}",
        t0.elapsed()
    );
    for s in streams {
        let r = s.await.unwrap().expect("a stream in flight completes");
        assert_eq!(r.status, 200);
    }
    let st = eventually("the drain completes", Duration::from_secs(10), || async {
        let v = status().await?;
        (v["state"] == "drained").then_some(v)
    })
    .await;
    assert_eq!(st["connections_sent_away"]["http2"], CONNS, "{st}");
    assert_eq!(st["active_requests"], 0, "{st}");
}

/// #44 item 6 where it matters: a large gateway in connection mode. With its count exact, a
/// drain reads Envoy's gauges once when it may first complete, then at a small share of a CPU
/// (seconds between gauge passes at 8 000 clusters). A slow request keeps this drain going past
/// that pass; a request head begun after it is in Envoy's gauge from its first byte but in no
/// pass when the slow request ends. The module counts the head from that byte, so the drain
/// waits for it, answers it and releases the exit by its count, before drain_timeout. (Whether
/// ef5a7d9's module cuts the head here depends on where its passes fall: it does when the slow
/// request ends before the pass after the head began, which this run's timing does not force.
/// `tracking`'s unit test `a_head_on_its_way_holds_the_drain_from_its_first_byte` is the
/// deterministic one, and fails on ef5a7d9.)
/// Wait (up to `timeout`) for the drain's confirming pass over Envoy's gauges (its figure in
/// `/drain/status`).
async fn confirming_pass(envoy: &Envoy, timeout: Duration) {
    eventually(
        "the drain's confirming pass over Envoy's gauges",
        timeout,
        || async {
            envoy.drain_status().await["envoy_active_requests"]
                .is_u64()
                .then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_head_arriving_between_paced_scans_holds_the_drain() {
    let p = free_ports(3);
    let o = Options {
        settings: SETTINGS,
        data_http_filter: false,
        track_requests: true,
        ..Options::default()
    };
    let mut y = render_gateway(p[0], p[1], p[2], &o);
    push_static_clusters(&mut y, (0..8000).map(|i| (format!("scale_{i}"), p[0])));
    let mut envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &o).await;
    // Slow: past the drain's minimum (1.5 s) by two and a half seconds.
    let port = envoy.data;
    let slow = tokio::spawn(async move {
        clients::request(
            port,
            "GET",
            "/slow",
            &[("x-envoy-fault-delay-request", "4000")],
        )
        .await
    });
    envoy.wait_active(1).await;
    let t0 = Instant::now();
    envoy.sigterm();
    confirming_pass(&envoy, Duration::from_secs(20)).await;
    let head = common::scenario::a_head_begun(envoy.data).await;
    let r = slow.await.unwrap().expect("the slow request is served");
    assert_eq!(r.status, 200);
    // The slow request is over: without the head the drain would end a quiet period later.
    let watch_until = Instant::now() + Duration::from_secs(1);
    common::scenario::a_head_on_its_way_holds_the_drain(
        &mut envoy,
        head,
        t0,
        watch_until,
        // Released by the count, before drain_timeout (15 s from the SIGTERM; the head completes
        // about 5 s in): a timed-out drain fails. How soon after the head depends on the gauge
        // passes' pace, not on the head: when the slow request ends during the confirming gauge
        // pass, that pass may have read it in Envoy's gauge while the module no longer counts it,
        // an excess the module keeps (never taken for its own) until the next gauge pass, due at
        // the busy share (20 % of a CPU: four pass lengths later). With 1 s gauge passes (CI's
        // three lanes beside a spinning core) that was 7.5 s after the head (2026-12-07); a quiet
        // period and a scan when the request ends between passes. Then Envoy tears down 8 000 clusters: 3.3 s on 1.38.3 on a loaded
        // 2-core machine (CI, 2026-12-05), 5.7 s on 1.40.0 under CI's three lanes (2026-12-07:
        // release to exit; the module's threads were joined, none left).
        [Duration::from_secs(15), Duration::from_secs(10)],
    )
    .await;
}

/// A copy of the rendered gateway's data listener, named `bare` on `port`, with none of the
/// module's filters (stat prefix `bare`): a listener the module does not follow, in a gateway
/// whose own count is exact on its data listener.
fn add_listener_without_the_module(y: &str, port: u16) -> String {
    let from = y.find("  - name: data\n").expect("data listener");
    let to = y.find("  - name: control\n").expect("control listener");
    let data = &y[from..to];
    let bare = data
        .replacen("  - name: data\n", "  - name: bare\n", 1)
        .replacen("stat_prefix: data", "stat_prefix: bare", 1);
    let at = bare.find("port_value: ").expect("the data port") + "port_value: ".len();
    let end = at + bare[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    let bare = format!("{}{port}{}", &bare[..at], &bare[end..]);
    let bare = remove_list_items(&bare, "envoy.filters.network.dynamic_modules");
    let bare = remove_list_items(&bare, "envoy.filters.http.dynamic_modules");
    assert!(
        !bare
            .lines()
            .any(|l| l.contains("dynamic_modules") && !l.trim_start().starts_with('#')),
        "{bare}"
    );
    format!("{}{bare}{}", &y[..to], &y[to..])
}

/// #63 item 5 (b): a gateway whose own count is exact (the module on its data listener) and a
/// listener without the module, 4 000 clusters. The drain's confirming gauge pass comes when it
/// may first complete, with a request of the module's still in flight; a request then starts
/// on the other listener. Gauge passes were then paced at 3 % of a CPU (32 pass lengths, a few
/// seconds here), so when the module's request ended none had seen the other one: the drain
/// completed a quiet period later and cut it. Completion now waits for a gauge pass begun once
/// the module's count is at zero: the other request is served in full, and the drain completes
/// after it (by the count, not the timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_listener_without_the_module_is_never_in_flight_at_completion() {
    let p = free_ports(4);
    let o = Options::with(Settings::new("1s", "200ms", "25s"));
    let mut y = add_listener_without_the_module(&render_gateway(p[0], p[1], p[2], &o), p[3]);
    push_static_clusters(&mut y, (0..4000).map(|i| (format!("scale_{i}"), p[0])));
    let mut envoy = Envoy::start_yaml(&y, p[0], p[1], p[2], &o).await;
    // The module's request: in flight past the confirming pass (1 s in), ending 2.5 s in.
    let port = envoy.data;
    let followed = tokio::spawn(async move {
        clients::request(port, "GET", "/", &[("x-envoy-fault-delay-request", "2500")]).await
    });
    envoy.wait_active(1).await;
    let t0 = Instant::now();
    envoy.sigterm();
    confirming_pass(&envoy, Duration::from_secs(10)).await;
    // The other listener's request: outlives the module's by 2 s.
    let bare = p[3];
    let sent = Instant::now();
    let unfollowed = tokio::spawn(async move {
        let r =
            clients::request(bare, "GET", "/", &[("x-envoy-fault-delay-request", "4000")]).await;
        (r, Instant::now())
    });
    eventually(
        "Envoy counts the request on the listener without the module",
        Duration::from_secs(5),
        || async { (envoy.stat("http.bare.downstream_rq_active").await == Some(1)).then_some(()) },
    )
    .await;
    let r = followed
        .await
        .unwrap()
        .expect("the module's request is served");
    assert_eq!(r.status, 200);
    assert!(
        Instant::now() < sent + Duration::from_millis(3500),
        "the module's request must end well before the other one (machine too slow?)"
    );
    let (r, done) = unfollowed.await.unwrap();
    let r = r.expect("the request without the module is served in full, not cut");
    assert_eq!(r.status, 200);
    let reported = envoy
        .wait_drained_after(done, Duration::from_secs(30), "the request")
        .await;
    let log = envoy.log();
    assert!(log.contains("requests cut: 0"), "{log}");
    let cost = log
        .lines()
        .find(|l| l.contains("a scan of Envoy's stats takes"))
        .unwrap_or("(no scan cost logged)");
    println!(
        "drain {reported:?}; the other request ended {:?} after SIGTERM; {cost}",
        done - t0
    );
}
