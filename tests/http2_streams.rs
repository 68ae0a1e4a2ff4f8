//! HTTP/2 streams in connection mode, against the real Envoy with real HTTP/2 and gRPC stacks:
//! the tracker decodes the clients' header blocks (HPACK) to tell health checks by their
//! configured `:path` (issue 63 item 5), as it does for HTTP/1.1.
//!
//! The gRPC peers are grpcio's (C-core: `tests/http2_streams/grpc_peer.py`, installed by
//! `scripts/install-tools.sh`); the other HTTP/2 client is the `h2` crate (another HPACK encoder).

mod common;

use common::envoy::{render_gateway, Envoy, Options, Settings};
use common::{eventually, free_ports};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

fn connection_mode(settings: Settings, bootstrap_extra: Option<&'static str>) -> Options {
    Options {
        settings,
        data_http_filter: false,
        track_requests: true,
        bootstrap_extra,
        ..Options::default()
    }
}

/// A grpcio process (`grpc_peer.py`), killed when dropped; its stdout lines collected.
struct Peer {
    _child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Peer {
    fn start(args: &[String]) -> Peer {
        let python = common::tools::tools_dir().join("python");
        let script = common::repo_root().join("tests/http2_streams/grpc_peer.py");
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the tools' python runs grpc_peer.py");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = lines.clone();
        tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(l)) = r.next_line().await {
                keep.lock().unwrap().push(l);
            }
        });
        Peer {
            _child: child,
            lines,
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (bounded) for a line starting with `prefix`.
    async fn wait_line(&self, prefix: &str, timeout: Duration) -> String {
        eventually(
            &format!("grpc_peer printed {prefix:?}"),
            timeout,
            || async { self.lines().into_iter().find(|l| l.starts_with(prefix)) },
        )
        .await
    }
}

/// A grpcio server on a free port, serving the health service.
async fn grpc_upstream() -> (Peer, u16) {
    let port = free_ports(1)[0];
    let peer = Peer::start(&["server".into(), port.to_string()]);
    peer.wait_line("ready", Duration::from_secs(20)).await;
    (peer, port)
}

/// The example gateway with `/grpc.` routed to an HTTP/2 cluster at `grpc_port`.
async fn start_envoy(o: Options, grpc_port: u16) -> Envoy {
    let p = free_ports(3);
    let catch_all = "              - match: { prefix: \"/\" }\n                direct_response:\n";
    let mut y = render_gateway(p[0], p[1], p[2], &o);
    assert!(y.contains(catch_all), "the example's catch-all route");
    y = y.replacen(
        catch_all,
        &format!(
            "              - match: {{ prefix: \"/grpc.\" }}\n                route: {{ cluster: grpc_upstream, timeout: 0s }}\n{catch_all}"
        ),
        1,
    );
    if !y.contains("\n  clusters:\n") {
        y.push_str("  clusters:\n");
    }
    y.push_str(&format!(
        "  - name: grpc_upstream
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: grpc_upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {grpc_port} }} }} }}
"
    ));
    Envoy::start_yaml(&y, p[0], p[1], p[2], &o).await
}

/// A POST on an HTTP/2 connection of the `h2` crate, `delay_ms` long (Envoy's fault filter).
async fn h2_post(port: u16, path: &str, delay_ms: u32) -> Result<u16, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let (send, conn) = h2::client::handshake(tcp)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "grpc-rust-test/1.0")
        .header("x-envoy-fault-delay-request", delay_ms.to_string())
        .body(())
        .unwrap();
    let mut send = send.ready().await.map_err(|e| e.to_string())?;
    let (resp, _) = send.send_request(req, true).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(Duration::from_secs(20), resp)
        .await
        .map_err(|_| "no response within 20 s".to_string())?
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        chunk.map_err(|e| format!("body: {e}"))?;
    }
    driver.abort();
    Ok(status)
}

/// #63 item 5: during a drain, grpcio's health checks (`grpc.health.v1.Health/Check` over
/// HTTP/2, every 50 ms, on the path the operator listed in `health_check_paths`) are answered
/// and are not work: the drain completes at `min_drain_duration` + `quiet_period` while they
/// go on. With no path configured the same checks are requests like any: they keep starting,
/// so the quiet period never passes while they run (the drain ends only after them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grpc_health_checks_over_http2_are_told_by_their_configured_path() {
    for configured in [true, false] {
        let (_upstream, grpc_port) = grpc_upstream().await;
        let extra =
            configured.then_some(r#""health_check_paths": ["/grpc.health.v1.Health/Check"]"#);
        let settings = Settings {
            min_drain: "1500ms",
            quiet: "400ms",
            timeout: "20s",
        };
        let mut envoy = start_envoy(connection_mode(settings, extra), grpc_port).await;
        // The checker's connection is open, and its first check done, before the drain.
        let checker = Peer::start(&[
            "check".into(),
            envoy.data.to_string(),
            "6".into(),
            "50".into(),
        ]);
        checker.wait_line("ok", Duration::from_secs(10)).await;
        let t0 = Instant::now();
        envoy.sigterm();
        if configured {
            let seen = eventually("a health check seen", Duration::from_secs(2), || async {
                let st = envoy.drain_status().await;
                (st["health_checks_seen"].as_u64() > Some(0)).then_some(st)
            })
            .await;
            assert_eq!(
                seen["active_requests"], 0,
                "health checks are not work: {seen}"
            );
            assert_eq!(
                envoy.stat("graceful_drain.hpack_decoding_stopped").await,
                Some(0)
            );
        }
        let (status, exited) = envoy.wait_exit(Duration::from_secs(15)).await;
        assert!(status.success(), "{status}");
        let took = exited - t0;
        if configured {
            assert!(
                took < Duration::from_secs(4),
                "health checks held the drain: exit after {took:?}"
            );
            assert!(envoy.log().contains("requests cut: 0"), "{}", envoy.log());
        } else {
            assert!(
                took > Duration::from_millis(4500),
                "unconfigured, the checks are requests and keep the drain open: exit after \
                 {took:?}"
            );
        }
        let lines = checker.lines();
        let ok = lines.iter().filter(|l| *l == "ok").count();
        assert!(ok >= 10, "checks answered: {lines:?}");
        assert!(
            !envoy.log().contains("no longer decoded"),
            "the decoder stopped:\n{}",
            envoy.log()
        );
    }
}

/// The opposite: with health checks configured, an HTTP/2 request on another path is work.
/// A 2.5 s gRPC-shaped POST (the `h2` crate's encoder) sent during the drain holds it, is
/// answered in full, and Envoy exits after it; a check sent beside it on a configured path
/// (the same headers) is told a health check, not work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_http2_request_on_another_path_is_held_to_its_end() {
    let (_upstream, grpc_port) = grpc_upstream().await;
    let settings = Settings {
        min_drain: "500ms",
        quiet: "200ms",
        timeout: "20s",
    };
    let paths = r#""health_check_paths": ["/grpc.health.v1.Health/Check", "/pkg.Probe/Check"]"#;
    let mut envoy = start_envoy(connection_mode(settings, Some(paths)), grpc_port).await;
    let port = envoy.data;
    envoy.sigterm();
    let work = tokio::spawn(async move {
        let r = h2_post(port, "/pkg.Svc/Call", 2500).await;
        (r, Instant::now())
    });
    envoy.wait_active(1).await;
    let probe = h2_post(port, "/pkg.Probe/Check", 300).await;
    assert_eq!(probe, Ok(200), "the check is answered during the drain");
    let st = envoy.drain_status().await;
    assert_eq!(st["health_checks_seen"], 1, "the configured path: {st}");
    assert_eq!(st["active_requests"], 1, "the other request is work: {st}");
    let (r, done) = work.await.unwrap();
    assert_eq!(r, Ok(200), "served in full");
    let (status, exited) = envoy.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}");
    assert!(exited >= done, "Envoy exited before the request ended");
    assert!(envoy.log().contains("requests cut: 0"), "{}", envoy.log());
}
