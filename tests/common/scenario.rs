//! Scenarios more than one suite plays against a running gateway.

use super::clients::{self, H1Conn, H2Conn, H2Result};
use super::envoy::Envoy;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// How to make a request that takes a while (800 ms, or the kit's own) on the gateway under test.
#[derive(Clone, Copy)]
pub struct Slow {
    pub path: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
}

impl Slow {
    /// The example gateway (`envoy-config/gateway.yaml`): its fault filter delays on a header.
    pub const FAULT_HEADER: Slow = Slow {
        path: "/slow",
        headers: &[("x-envoy-fault-delay-request", "800")],
    };
    /// A gateway proxying to the test upstream (`common::upstream`), which delays by path.
    pub const UPSTREAM_DELAY: Slow = Slow {
        path: "/slow/delay/800",
        headers: &[],
    };
}

/// How the scenario knows its requests are in flight before the SIGTERM.
pub enum InFlight {
    /// The module's count (`/drain/status`), exactly.
    Module,
    /// Envoy's own gauge: the first of `stats` Envoy has, from the scenario's count up to `extra`
    /// more (requests the kit's own clients may have in flight then).
    Gauge {
        stats: &'static [&'static str],
        extra: i64,
    },
}

/// What says that the gateway stopped being ready once the SIGTERM came.
pub enum Ready {
    /// The module's `/ready` on the control listener (IPv6 loopback) and the platform's own
    /// check (`/ready` on `platform`) answer 503; the liveness probe (`/drain/status`) keeps
    /// answering 200.
    Probes { control: u16, platform: u16 },
    /// The module logs that it failed Envoy's health checks (bootstrap-only, no control
    /// listener).
    HealthChecksFailLog,
    /// Not checked here (the caller does, or the gateway has no readiness to fail).
    Unchecked,
}

/// A request made after the SIGTERM on HTTP/1.1: served, and told to go (`connection: close`).
pub enum LateHttp1 {
    /// On a keep-alive connection that answered a request before the SIGTERM (without
    /// `connection: close`), then closed by the gateway.
    KeepAlive(u16),
    /// On a connection of its own.
    Fresh(u16),
}

/// Connections that answered a request, then stay idle from before the SIGTERM to the end: they
/// must not hold the exit.
pub struct Idle {
    /// An idle HTTP/1.1 connection, if any.
    pub http1: Option<u16>,
    pub http2: u16,
    /// Told at the drain start (the network filter's idle handling): the HTTP/2 one a
    /// GOAWAY(NO_ERROR) within 5 s, the HTTP/1.1 one closed within 4 s (idle_after, then the
    /// next check). Otherwise they hear nothing until Envoy exits (a kit that leaves them to
    /// stock Envoy).
    pub told: bool,
}

/// A gateway the drain scenario ([`Drain`]) runs against: where its clients go, what its
/// platform sees, the drain settings it runs with.
pub struct Kit {
    /// Named in every failure.
    pub name: &'static str,
    /// `min_drain_duration` and `quiet_period` of the gateway under test.
    pub rules: [Duration; 2],
    pub slow: Slow,
    /// Where the gateway answers any path 200 at once (`""`: everywhere): the requests before
    /// the SIGTERM go to `{prefix}/ok`, the late ones to `{prefix}/late` and `{prefix}/late-h2`.
    pub prefix: &'static str,
    /// One slow HTTP/1.1 request in flight on each of these ports.
    pub http1: Vec<u16>,
    /// Whether the in-flight HTTP/1.1 requests are answered with `connection: close`.
    pub http1_told: bool,
    /// One HTTP/2 connection to this port with `http2_streams` slow streams in flight; it gets a
    /// GOAWAY(NO_ERROR) during the drain.
    pub http2: u16,
    pub http2_streams: usize,
    /// A new stream on that connection after the SIGTERM (before its GOAWAY) is served.
    pub late_http2: bool,
    pub late_http1: Option<LateHttp1>,
    pub idle: Option<Idle>,
    pub in_flight: InFlight,
    pub ready: Ready,
}

/// Every request of `tasks` failed (lost: stock Envoy's exit cut it), or this panics saying
/// `what`.
pub async fn assert_all_lost<T, E>(tasks: Vec<JoinHandle<Result<T, E>>>, what: &str) {
    let n = tasks.len();
    let mut lost = 0;
    for t in tasks {
        lost += usize::from(t.await.unwrap().is_err());
    }
    assert_eq!(lost, n, "{what}");
}

/// The drain scenario every gateway that hosts the module must pass (kubelet's stop: SIGTERM,
/// no preStop), seen by clients: requests in flight on both protocols are answered 200, late
/// requests are served and their connections told to go, idle connections hold nothing, the
/// probes say what kubelet must see, and Envoy exits 0 by the drain's rules
/// ([`Envoy::wait_exit_by_the_drain_rules`]: no earlier than `min_drain_duration` and the last
/// answer, no later than the last request's start plus `quiet_period`, the counters' polling
/// and Envoy's teardown), its log saying the drain started on SIGTERM and cut no request.
///
/// In three steps, so that a kit can add its own clients and checks between them:
/// [`Drain::in_flight`], [`Drain::sigterm`], [`Drain::finish`].
pub struct Drain {
    kit: Kit,
    tasks: Vec<JoinHandle<H2Result>>,
    http2: H2Conn,
    keepalive: Option<H1Conn>,
    idle_http1: Option<H1Conn>,
    idle_http2: Option<H2Conn>,
    /// When the SIGTERM was sent.
    pub t0: Instant,
    /// When the last request started (taken when its answer came; the ones in flight: before
    /// the SIGTERM).
    last_start: Instant,
}

impl Drain {
    /// The requests in flight, the keep-alive and idle connections open, and the count of what
    /// is in flight seen (bounded).
    pub async fn in_flight(envoy: &Envoy, kit: Kit) -> Drain {
        let name = kit.name;
        let slow = kit.slow;
        let ok = format!("{}/ok", kit.prefix);
        let mut tasks = Vec::new();
        for &port in &kit.http1 {
            tasks.push(tokio::spawn(async move {
                clients::request(port, "GET", slow.path, slow.headers).await
            }));
        }
        let mut http2 = H2Conn::connect(kit.http2).await.expect("h2 connect");
        for _ in 0..kit.http2_streams {
            tasks.push(tokio::spawn(
                http2
                    .start(slow.path, slow.headers)
                    .await
                    .expect("h2 stream"),
            ));
        }
        let keepalive = match kit.late_http1 {
            Some(LateHttp1::KeepAlive(port)) => {
                let mut c = H1Conn::connect(port).await.unwrap();
                let r = c.send("GET", &ok, &[]).await.unwrap();
                assert_eq!((r.status, r.header("connection")), (200, None), "{name}");
                Some(c)
            }
            _ => None,
        };
        let (mut idle_http1, mut idle_http2) = (None, None);
        if let Some(idle) = &kit.idle {
            if let Some(port) = idle.http1 {
                let mut c = H1Conn::connect(port).await.unwrap();
                assert_eq!(c.send("GET", &ok, &[]).await.unwrap().status, 200);
                idle_http1 = Some(c);
            }
            let mut c = H2Conn::connect(idle.http2)
                .await
                .expect("h2 connect (idle)");
            let r = c.send(&ok, &[]).await.expect("h2 request before the drain");
            assert_eq!(r.status, 200, "{name}");
            idle_http2 = Some(c);
        }
        let n = (kit.http1.len() + kit.http2_streams) as i64;
        match &kit.in_flight {
            InFlight::Module => envoy.wait_active(n as u64).await,
            InFlight::Gauge { stats, extra } => {
                super::eventually(
                    &format!("{name}: {n} in flight (Envoy's gauge)"),
                    Duration::from_secs(5),
                    || async {
                        for s in *stats {
                            if let Some(v) = envoy.stat(s).await {
                                return (n..=n + extra).contains(&v).then_some(());
                            }
                        }
                        None
                    },
                )
                .await
            }
        }
        Drain {
            kit,
            tasks,
            http2,
            keepalive,
            idle_http1,
            idle_http2,
            t0: Instant::now(),
            last_start: Instant::now(),
        }
    }

    /// SIGTERM, then what clients see while the drain runs: readiness fails, late requests are
    /// served and told to go, the busy HTTP/2 connection gets a GOAWAY, idle connections are
    /// told (where the kit tells them) while the requests in flight are still being served.
    pub async fn sigterm(&mut self, envoy: &mut Envoy) {
        let name = self.kit.name;
        let prefix = self.kit.prefix;
        self.t0 = Instant::now();
        envoy.sigterm();
        match self.kit.ready {
            Ready::Probes { control, platform } => {
                clients::wait_not_ready(control, platform).await;
                assert_eq!(
                    clients::status_v6(control, "/drain/status").await,
                    Ok(200),
                    "{name}: the liveness probe passes while draining"
                );
            }
            Ready::HealthChecksFailLog => {
                super::eventually("health checks failed", Duration::from_secs(3), || async {
                    envoy
                        .log()
                        .contains("Envoy's health checks now fail")
                        .then_some(())
                })
                .await
            }
            Ready::Unchecked => {}
        }
        let late = format!("{prefix}/late");
        match (&self.kit.late_http1, self.keepalive.take()) {
            (Some(LateHttp1::KeepAlive(_)), Some(mut c)) => {
                let r = c.send("GET", &late, &[]).await.unwrap();
                assert_eq!(
                    (r.status, r.header("connection")),
                    (200, Some("close")),
                    "{name}: late HTTP/1.1 on a keep-alive connection"
                );
                self.started(Instant::now());
                c.wait_closed(Duration::from_secs(2)).await.unwrap();
            }
            (Some(LateHttp1::Fresh(port)), _) => {
                let r = clients::get(*port, &late).await.unwrap();
                assert_eq!(
                    (r.status, r.header("connection")),
                    (200, Some("close")),
                    "{name}: late HTTP/1.1"
                );
                self.started(Instant::now());
            }
            _ => {}
        }
        if self.kit.late_http2 {
            let r = self
                .http2
                .send(&format!("{prefix}/late-h2"), &[])
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{name}: late HTTP/2 stream");
            self.started(Instant::now());
        }
        let e = self.http2.wait_goaway(Duration::from_secs(3)).await;
        assert_eq!(
            e.reason(),
            Some(h2::Reason::NO_ERROR),
            "{name}: busy HTTP/2"
        );
        if self.kit.idle.as_ref().is_some_and(|i| i.told) {
            let idle = self.idle_http2.as_mut().unwrap();
            let e = idle.wait_goaway(Duration::from_secs(5)).await;
            assert_eq!(
                e.reason(),
                Some(h2::Reason::NO_ERROR),
                "{name}: idle HTTP/2"
            );
            if let Some(c) = self.idle_http1.take() {
                c.wait_closed(Duration::from_secs(4)).await.unwrap();
            }
        }
    }

    /// Envoy has not exited and some request in flight is still being served (what the kit
    /// checked so far happened during the drain, not after it).
    pub fn assert_still_serving(&self, envoy: &mut Envoy) {
        assert!(
            envoy.exited().is_none() && !self.tasks.iter().all(|t| t.is_finished()),
            "{}: checked after the requests in flight were done",
            self.kit.name
        );
    }

    /// A request the kit's own clients started during the drain (its answer came at `at`): the
    /// quiet period runs from the latest.
    pub fn started(&mut self, at: Instant) {
        self.last_start = self.last_start.max(at);
    }

    /// Every request in flight answered 200, then Envoy's exit by the drain's rules. Returns
    /// the exit time.
    pub async fn finish(self, envoy: &mut Envoy) -> Instant {
        let name = self.kit.name;
        let mut last_done = self.t0;
        let http1 = self.kit.http1.len();
        for (i, t) in self.tasks.into_iter().enumerate() {
            let r = t
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{name}: a request in flight was lost: {e}"));
            assert_eq!(r.status, 200, "{name}: in flight");
            // The HTTP/1.1 requests come first.
            if i < http1 && self.kit.http1_told {
                assert_eq!(
                    r.header("connection"),
                    Some("close"),
                    "{name}: HTTP/1.1 told"
                );
            }
            last_done = Instant::now();
        }
        // By the drain's rules: the idle connections held nothing.
        let at = envoy
            .wait_exit_by_the_drain_rules(name, self.t0, self.kit.rules, self.last_start, last_done)
            .await;
        let log = envoy.log();
        for line in ["drain started (trigger=sigterm", "requests cut: 0"] {
            assert!(log.contains(line), "{name}: no {line:?} in the log:\n{log}");
        }
        drop((self.idle_http1, self.idle_http2, self.http2));
        at
    }
}

/// [`Drain`] on a gateway run from `envoy-config/gateway.yaml` or a manifest's copy of it, with
/// drain settings `rules`: an HTTP/1.1 request and an HTTP/2 stream in flight finish with 200
/// (the HTTP/1.1 one with `connection: close`), an idle HTTP/2 connection is sent
/// GOAWAY(NO_ERROR), and Envoy exits 0 by the drain's rules, reporting no request cut.
pub async fn sigterm_drains_in_flight_work(envoy: &mut Envoy, slow: Slow, rules: [Duration; 2]) {
    let data = envoy.data;
    let kit = Kit {
        name: "the example gateway",
        rules,
        slow,
        prefix: "",
        http1: vec![data],
        http1_told: true,
        http2: data,
        http2_streams: 1,
        late_http2: false,
        late_http1: None,
        idle: Some(Idle {
            http1: None,
            http2: data,
            told: true,
        }),
        in_flight: InFlight::Module,
        ready: Ready::Unchecked,
    };
    let mut drain = Drain::in_flight(envoy, kit).await;
    drain.sigterm(envoy).await;
    drain.finish(envoy).await;
}

/// A request head on its way during a drain (#44 item 6): a connection to the data listener
/// that sent `GET /slow-head` and some headers, but not the blank line that ends the head, before
/// or during the drain started at `t0`. Envoy stays up until `watch_until` (past what the drain
/// would take without the request), answers the request 200 with `connection: close` once its
/// head completes, and the module completes the drain within `prompt` after that, by its own
/// clock (`Envoy::reported_drain`: Envoy's teardown after the release does not count). Envoy
/// exits 0 after the head completed and within `prompt` + `teardown` of it: the teardown of a
/// large configuration on a loaded machine is Envoy's own, and seconds long (`tests/scale.rs`).
pub async fn a_head_on_its_way_holds_the_drain(
    envoy: &mut Envoy,
    mut head: TcpStream,
    t0: Instant,
    watch_until: Instant,
    [prompt, teardown]: [Duration; 2],
) {
    while Instant::now() < watch_until {
        assert!(
            envoy.exited().is_none(),
            "Envoy exited {:?} after SIGTERM with a request head on its way",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let completed = Instant::now();
    head.write_all(b"\r\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), head.read_to_end(&mut got))
        .await
        .expect("answered, then closed")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let (status, exited) = envoy
        .wait_exit(prompt + teardown + Duration::from_secs(5))
        .await;
    assert!(status.success(), "{status:?}");
    // The module's release: its drain (from its start, at or after `t0`) completed within
    // `prompt` of the head's completion.
    let (reported, timed_out) = envoy.reported_drain();
    assert!(
        !timed_out && reported < (completed - t0) + prompt,
        "the drain completes promptly once the request is answered: it took {reported:?} \
         (timed out: {timed_out}), the head completed {:?} after SIGTERM, allowed {prompt:?} more",
        completed - t0
    );
    assert!(
        exited > completed && exited - completed < prompt + teardown,
        "Envoy exits once the request is answered and Envoy tore down: {:?} after the head \
         completed, allowed {prompt:?} + {teardown:?} of teardown",
        exited.checked_duration_since(completed)
    );
}

/// A connection to `port` that sent the start of a request head (see
/// [`a_head_on_its_way_holds_the_drain`]).
pub async fn a_head_begun(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"GET /slow-head HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    s
}
