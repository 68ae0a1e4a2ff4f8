//! One module file for every Envoy that can host it, against real binaries: the same
//! `libgraceful_drain.so` is loaded into every tested Envoy release (the newest patch of each
//! supported minor and the older patches platforms ship), one after another with the same config,
//! as an in-place upgrade of a gateway's Envoy would; each one says which Envoy it found and
//! drains. An Envoy it cannot host (1.37, the line Knative Kourier ships) refuses it at start with
//! status 1, after one error line naming the versions supported; never a crash, never a gateway
//! that serves half-working.

use crate::common;

use common::envoy::{
    abi_version_of, install_envoy, minor_of, module_dir, render_gateway, tested_envoy_versions,
    Envoy, Options, TempDir, FAST,
};
use common::scenario::{sigterm_drains_in_flight_work, Drain, InFlight, Kit, Ready, Slow};
use common::{clients, free_ports, sha256};
use graceful_drain::host::envoy_release::{
    read_rodata, release_in, ALLOW_UNTESTED_ENV, ON_UNTESTED_ENV, TESTED,
};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The Envoy line that has dynamic modules but no SIGTERM hook for them.
const TOO_OLD: &str = "1.37.0";
const REFUSAL: &str = "graceful_drain: refusing to load:";

/// An Envoy expected to refuse its config: owned, killed on drop.
struct Refusing {
    child: Child,
    log: PathBuf,
    _dir: TempDir,
}

impl Refusing {
    fn start(envoy: &Path, modules: &Path, yaml: &str) -> Refusing {
        Self::start_with(envoy, modules, yaml, &[])
    }

    fn start_with(envoy: &Path, modules: &Path, yaml: &str, env: &[(&str, &str)]) -> Refusing {
        let dir = TempDir::new("compat");
        let cfg = dir.0.join("envoy.yaml");
        std::fs::write(&cfg, yaml).unwrap();
        let log = dir.0.join("envoy.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(envoy)
            .arg("-c")
            .arg(&cfg)
            .args(["--use-dynamic-base-id", "--concurrency", "1"])
            .args(["--log-level", "info"])
            .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", modules)
            // cargo test puts target/*/deps (with a debug build of the module) on it; Envoy 1.37
            // falls back to a plain dlopen by name, which would find that one.
            .env_remove("LD_LIBRARY_PATH")
            .env_remove(ALLOW_UNTESTED_ENV)
            .env_remove(ON_UNTESTED_ENV)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn envoy");
        Refusing {
            child,
            log,
            _dir: dir,
        }
    }

    /// Wait (bounded) for the exit; panics with the log if Envoy is still up.
    fn exit(&mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return (st, std::fs::read_to_string(&self.log).unwrap_or_default());
            }
            assert!(
                Instant::now() < deadline,
                "envoy still running 60s after start (it should have refused):\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Refusing {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The example gateway on free ports (bootstrap extension and both filters).
fn gateway_yaml() -> String {
    let p = free_ports(3);
    render_gateway(p[0], p[1], p[2], &Options::default())
}

/// The smallest config that loads the module as an HTTP filter, in a shape Envoy 1.37 accepts
/// (no bootstrap extension, no `metrics_namespace`).
fn filter_only_yaml() -> String {
    let p = free_ports(2);
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:
  - name: data
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {data} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: data
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200 }}
          http_filters:
          - name: envoy.filters.http.dynamic_modules
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              dynamic_module_config: {{ name: graceful_drain }}
              filter_name: graceful_drain
              filter_config:
                "@type": type.googleapis.com/google.protobuf.StringValue
                value: '{{"role": "data"}}'
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#,
        admin = p[0],
        data = p[1]
    )
}

/// Envoy exited 1 at start, with exactly one refusal line from the module; returns that line.
fn assert_refused(envoy: &Path, modules: &Path, yaml: &str) -> String {
    assert_refused_with(envoy, modules, yaml, &[])
}

/// [`assert_refused`] with `env` in Envoy's environment.
fn assert_refused_with(envoy: &Path, modules: &Path, yaml: &str, env: &[(&str, &str)]) -> String {
    let mut e = Refusing::start_with(envoy, modules, yaml, env);
    let (status, log) = e.exit();
    assert_eq!(
        status.code(),
        Some(1),
        "envoy must exit 1 (not crash):\n{log}"
    );
    assert!(!log.contains("Caught "), "envoy crashed:\n{log}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(REFUSAL)).collect();
    assert_eq!(lines.len(), 1, "one refusal line:\n{log}");
    // Envoy's own words: 1.38 and later "Failed to initialize dynamic module", 1.37 (which then
    // looks for the file by name in the library path) "not found in any search path".
    assert!(
        log.contains("Failed to initialize dynamic module")
            || log.contains("libgraceful_drain.so not found in any search path"),
        "Envoy reports the refusal:\n{log}"
    );
    lines[0].to_string()
}

/// The in-place upgrade: one file, one config, Envoy 1.38.2 → … → 1.40.0 on the same ports. Each
/// Envoy loads the file, matches its ABI, says in the module's load line which Envoy it found and
/// what it gives there, reports both in `/drain/status`, and drains requests in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_module_file_loads_into_every_tested_envoy_and_drains_there() {
    let module = module_dir().join("libgraceful_drain.so");
    let digest = sha256(&module);
    let ports = free_ports(3);
    let yaml = render_gateway(ports[0], ports[1], ports[2], &Options::default());
    let versions = tested_envoy_versions();
    assert!(
        versions.len() >= 6
            && versions[0].starts_with("1.38.")
            && versions.iter().any(|v| v == "1.39.0"),
        "the tested list covers 1.38, 1.39.0 and the newest patches: {versions:?}"
    );
    for v in &versions {
        let o = Options {
            envoy_bin: Some(install_envoy(v)),
            ..Options::default()
        };
        let mut e = Envoy::start_yaml(&yaml, ports[0], ports[1], ports[2], &o).await;
        let log = e.log();
        let minor = minor_of(v);
        assert!(
            log.contains(&format!(
                "Dynamic module ABI version {} matched",
                abi_version_of(v)
            )),
            "{v}:\n{log}"
        );
        let loaded = log
            .lines()
            .find(|l| l.contains("graceful_drain ") && l.contains(" loaded into Envoy "))
            .unwrap_or_else(|| panic!("{v}: no load line:\n{log}"));
        assert!(
            loaded.contains(&format!(
                "graceful_drain {} loaded into Envoy {minor}",
                env!("CARGO_PKG_VERSION")
            )),
            "{v}: {loaded}"
        );
        // What it gives, per generation (src/host/envoy_release.rs): only the log's source location differs.
        assert_eq!(
            loaded.contains(": everything (supported"),
            minor == "1.40",
            "{v}: {loaded}"
        );
        assert_eq!(
            loaded.contains("no log_v2"),
            minor != "1.40",
            "{v}: {loaded}"
        );
        let st = e.drain_status().await;
        assert_eq!(st["envoy"], minor.as_str(), "{v}: {st}");
        assert_eq!(st["module_version"], env!("CARGO_PKG_VERSION"), "{v}: {st}");
        // The version as a scrape sees it.
        let scrape = clients::get(e.admin, "/stats/prometheus")
            .await
            .unwrap()
            .text();
        let info = format!(
            "envoy_graceful_drain_build_info{{version=\"{}\",envoy=\"{minor}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(
            scrape.lines().any(|l| l == info),
            "{v}: no {info} in:\n{scrape}"
        );
        // Tested: said so in the status and the stat, with the release its binary names.
        assert_eq!(
            (&st["envoy_release"], &st["envoy_untested"], &st["surface"]),
            (&v.as_str().into(), &false.into(), &"full".into()),
            "{v}: {st}"
        );
        let standing =
            format!("envoy_graceful_drain_envoy_untested{{release=\"{v}\",surface=\"full\"}} 0");
        assert!(
            scrape.lines().any(|l| l == standing),
            "{v}: no {standing} in:\n{scrape}"
        );
        assert!(!log.contains("UNTESTED:"), "{v}:\n{log}");
        // The same stats, by the same names, on every Envoy (dashboards and alerts use them):
        // each is there from the start.
        for name in common::STAT_NAMES {
            let series = format!("envoy_graceful_drain_{name}");
            assert!(
                scrape.lines().any(|l| common::series_of(l) == series),
                "{v}: no {series} in:\n{scrape}"
            );
        }
        sigterm_drains_in_flight_work(&mut e, Slow::FAULT_HEADER, FAST.rules()).await;
        drop(e);
        assert_eq!(
            sha256(&module),
            digest,
            "the module file changed under the test"
        );
    }
}

#[test]
fn envoy_1_37_is_refused_naming_the_minimum_version() {
    let old = install_envoy(TOO_OLD);
    let line = assert_refused(&old, module_dir(), &filter_only_yaml());
    assert!(line.contains("this Envoy is 1.37 or older"), "{line}");
    assert!(line.contains("needs Envoy 1.38 or newer"), "{line}");
    assert!(
        line.contains("supported: 1.38.x, 1.39.x and 1.40.x"),
        "{line}"
    );

    // The example gateway itself does not even parse there (no bootstrap hooks, older fields):
    // Envoy refuses it before loading the module.
    let mut e = Refusing::start(&old, module_dir(), &gateway_yaml());
    let (status, log) = e.exit();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(!log.contains("Caught "), "envoy crashed:\n{log}");
}

/// Each tested Envoy binary names its release where the module reads it (`compat::release_in`
/// over the binary's `.rodata`), and the module's list of tested releases is the install
/// script's.
#[test]
fn every_tested_envoy_names_its_release_to_the_module() {
    let versions = tested_envoy_versions();
    for v in &versions {
        let rodata = read_rodata(&install_envoy(v)).unwrap();
        let found = release_in(&rodata).map(|r| r.to_string());
        assert_eq!(found.as_deref(), Some(v.as_str()), "Envoy {v}");
    }
    let (last, rest) = versions.split_last().unwrap();
    assert_eq!(
        TESTED,
        format!("{} and {last}", rest.join(", ")),
        "compat::TESTED follows scripts/install-envoy.sh --tested"
    );
}

/// A copy of Envoy 1.40.0 in `dir` whose binary is changed by `edit` (it runs as 1.40.0 does).
fn edited_envoy(dir: &TempDir, name: &str, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let path = dir.0.join(name);
    let mut bytes = std::fs::read(install_envoy("1.40.0")).unwrap();
    edit(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// An Envoy newer than every tested release: 1.40.0 whose release string says 1.41.0 (its
/// callbacks are 1.40's, so the callback check alone, as on ef5a7d9, took it for 1.40).
fn newer_envoy(dir: &TempDir) -> PathBuf {
    edited_envoy(dir, "envoy-1.41.0", |bytes| {
        let (from, to) = (b"\x001.40.0\x00", b"\x001.41.0\x00");
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("1.40.0's release string");
        bytes[at..at + to.len()].copy_from_slice(to);
    })
}

/// An Envoy whose release the module cannot read: 1.40.0 without its section headers (as a
/// stripped or packed binary may be; the loader needs only the program headers), so
/// `compat::read_rodata` finds no `.rodata`.
fn envoy_without_section_headers(dir: &TempDir) -> PathBuf {
    edited_envoy(dir, "envoy-no-sections", |bytes| {
        // e_shoff (8 bytes at 0x28), e_shnum and e_shstrndx (2 bytes each at 0x3c, 0x3e).
        bytes[0x28..0x30].fill(0);
        bytes[0x3c..0x40].fill(0);
    })
}

/// The module's load line: exactly one, and at Envoy's `warning` level when it says UNTESTED.
fn load_line(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("graceful_drain ") && l.contains(" loaded into Envoy "))
        .collect();
    assert_eq!(lines.len(), 1, "one load line:\n{log}");
    assert_eq!(
        log.matches("UNTESTED:").count(),
        usize::from(lines[0].contains("UNTESTED:")),
        "said once:\n{log}"
    );
    lines[0].to_string()
}

/// The module's own series in a scrape of `e`'s admin.
async fn scrape(e: &Envoy) -> String {
    clients::get(e.admin, "/stats/prometheus")
        .await
        .unwrap()
        .text()
}

/// Issue 63 item 6: the day Envoy is upgraded past every tested release, the gateway starts and
/// drains instead of crash-looping. The module runs with the reduced surface: it says so once
/// (a warning line with the release and the surface), in `/drain/status` and in the stat the
/// alert reads; its filters step back (they count nothing and tell no connection: the status's
/// figures stay 0 through a drain), and the drain goes by Envoy's own gauges: an HTTP/1.1
/// request and HTTP/2 streams in flight are answered 200, the busy HTTP/2 connection gets
/// Envoy's own GOAWAY, and Envoy exits 0 by the drain's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_envoy_newer_than_tested_starts_with_the_reduced_surface_and_drains_by_its_stats() {
    let dir = TempDir::new("newer-envoy");
    let o = Options {
        envoy_bin: Some(newer_envoy(&dir)),
        ..Options::default()
    };
    let mut e = Envoy::start(o.clone()).await;
    let line = load_line(&e.log());
    assert!(line.contains("[warning]"), "{line}");
    assert!(
        line.contains("UNTESTED: release 1.41.0, newer than every release"),
        "{line}"
    );
    assert!(line.contains("the reduced surface"), "{line}");
    assert!(
        line.contains(&format!("{ON_UNTESTED_ENV}=reduced, the default")),
        "{line}"
    );
    let st = e.drain_status().await;
    assert_eq!(
        (&st["envoy_release"], &st["envoy_untested"], &st["surface"]),
        (&"1.41.0".into(), &true.into(), &"reduced".into()),
        "{st}"
    );
    let want = r#"envoy_graceful_drain_envoy_untested{release="1.41.0",surface="reduced"} 1"#;
    let scraped = scrape(&e).await;
    assert!(
        scraped.lines().any(|l| l == want),
        "no {want} in:\n{scraped}"
    );

    let kit = Kit {
        name: "an untested Envoy, reduced surface",
        rules: FAST.rules(),
        slow: Slow::FAULT_HEADER,
        prefix: "",
        http1: vec![e.data],
        // Envoy's drain-close, not the module, tells HTTP/1.1 clients (with a later response).
        http1_told: false,
        http2: e.data,
        http2_streams: 2,
        late_http2: false,
        late_http1: None,
        idle: None,
        in_flight: InFlight::Gauge {
            stats: &["http.data.downstream_rq_active"],
            extra: 0,
        },
        ready: Ready::Unchecked,
    };
    let mut drain = Drain::in_flight(&e, kit).await;
    let before = e.drain_status().await;
    assert_eq!(
        before["active_requests"], 0,
        "the stepped-back filters count nothing: {before}"
    );
    drain.sigterm(&mut e).await;
    drain.assert_still_serving(&mut e);
    let during = e.drain_status().await;
    assert_eq!(during["state"], "draining", "{during}");
    assert!(
        during["envoy_active_requests"].as_u64() >= Some(1),
        "the drain goes by Envoy's gauges: {during}"
    );
    for told in [
        &during["connections_sent_away"]["http1"],
        &during["connections_sent_away"]["http2"],
        &during["idle_connections_told"]["http1"],
        &during["idle_connections_told"]["http2"],
        &during["requests_served_while_draining"],
    ] {
        assert_eq!(*told, 0, "the module touched no connection: {during}");
    }
    drain.finish(&mut e).await;
}

/// The operator's choices in an untested Envoy (docs/compatibility.md): `refuse` refuses it at
/// start with one line; the old opt-in means `full` (everything, still said untested); a value
/// that is none of the three refuses on every Envoy, a tested one too, naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusing_an_untested_envoy_or_running_everything_there_is_the_operators_choice() {
    let dir = TempDir::new("newer-envoy");
    let newer = newer_envoy(&dir);
    let line = assert_refused_with(
        &newer,
        module_dir(),
        &gateway_yaml(),
        &[(ON_UNTESTED_ENV, "refuse")],
    );
    assert!(
        line.contains("this Envoy is untested: release 1.41.0, newer than every release"),
        "{line}"
    );
    assert!(line.contains(TESTED), "{line}");
    assert!(
        line.contains(&format!("{ON_UNTESTED_ENV}=refuse")),
        "{line}"
    );

    let line = assert_refused_with(
        &install_envoy("1.40.0"),
        module_dir(),
        &gateway_yaml(),
        &[(ON_UNTESTED_ENV, "ful")],
    );
    assert!(
        line.contains(&format!(
            "{ON_UNTESTED_ENV}=\"ful\" is none of refuse, reduced"
        )),
        "{line}"
    );

    for env in [(ALLOW_UNTESTED_ENV, "1"), (ON_UNTESTED_ENV, "full")] {
        let o = Options {
            envoy_bin: Some(newer.clone()),
            env: vec![(env.0.to_string(), env.1.to_string())],
            ..Options::default()
        };
        let e = Envoy::start(o.clone()).await;
        let line = load_line(&e.log());
        assert!(
            line.contains("[warning]")
                && line.contains("UNTESTED: release 1.41.0")
                && line.contains(": everything, untested there"),
            "{env:?}: {line}"
        );
        let st = e.drain_status().await;
        assert_eq!(
            (&st["envoy_untested"], &st["surface"]),
            (&true.into(), &"full".into()),
            "{env:?}: {st}"
        );
        let want = r#"envoy_graceful_drain_envoy_untested{release="1.41.0",surface="full"} 1"#;
        let scraped = scrape(&e).await;
        assert!(
            scraped.lines().any(|l| l == want),
            "{env:?}: no {want} in:\n{scraped}"
        );
    }
}

/// An Envoy whose binary the module cannot read its release from is not skipped silently: it is
/// untested, said the same three ways with the reason, and runs with the reduced surface.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_envoy_whose_release_cannot_be_read_is_said_untested_and_runs_reduced() {
    let dir = TempDir::new("unreadable-envoy");
    let o = Options {
        envoy_bin: Some(envoy_without_section_headers(&dir)),
        ..Options::default()
    };
    let e = Envoy::start(o.clone()).await;
    let line = load_line(&e.log());
    assert!(line.contains("[warning]"), "{line}");
    assert!(
        line.contains("UNTESTED: release unknown (its binary cannot be read: no section headers"),
        "{line}"
    );
    assert!(line.contains("the reduced surface"), "{line}");
    let st = e.drain_status().await;
    assert_eq!(
        (&st["envoy_release"], &st["envoy_untested"], &st["surface"]),
        (&serde_json::Value::Null, &true.into(), &"reduced".into()),
        "{st}"
    );
    let want = r#"envoy_graceful_drain_envoy_untested{release="unknown",surface="reduced"} 1"#;
    let scraped = scrape(&e).await;
    assert!(
        scraped.lines().any(|l| l == want),
        "no {want} in:\n{scraped}"
    );
}
