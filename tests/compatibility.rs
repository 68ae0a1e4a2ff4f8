//! Every build refuses every Envoy it was not built for, against real binaries: the module under
//! test in the newest patch of each other supported Envoy minor and in 1.37.0 (the line Knative
//! Kourier ships), and the builds for the other minors in the Envoy under test. Envoy must exit
//! at start with status 1, after one error line from the module naming the Envoy it was built for
//! and the one it found; never a crash, never a gateway that serves half-working.

mod common;

use common::envoy::{
    build_module_for, envoy_bin, expected_envoy_version, install_envoy, minor_of, module_dir,
    render_gateway, supported_envoy_versions, Options, TempDir,
};
use common::{free_ports, repo_root};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
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

/// The module built for `version`'s minor: the one under test, or a build of another minor kept
/// in its own directory (never the artefact under test).
fn module_for(version: &str) -> PathBuf {
    let minor = minor_of(version);
    if minor == minor_of(&expected_envoy_version()) {
        return module_dir().to_path_buf();
    }
    // One build at a time: the copy must take the output of this build, not of another thread's.
    static BUILD: Mutex<()> = Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let built = build_module_for(version, &[], Some("target/compat"));
    let dir = repo_root().join("target/compat").join(&minor);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        built.join("libgraceful_drain.so"),
        dir.join("libgraceful_drain.so"),
    )
    .unwrap();
    dir
}

/// Envoy exited 1 at start, with exactly one refusal line from the module; returns that line.
fn assert_refused(envoy: &Path, modules: &Path, yaml: &str) -> String {
    let mut e = Refusing::start(envoy, modules, yaml);
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

fn other_supported_versions() -> Vec<String> {
    let mine = minor_of(&expected_envoy_version());
    supported_envoy_versions()
        .into_iter()
        .filter(|v| minor_of(v) != mine)
        .collect()
}

#[test]
fn this_build_refuses_every_other_supported_envoy() {
    let built = minor_of(&expected_envoy_version());
    for v in other_supported_versions() {
        let line = assert_refused(&install_envoy(&v), module_dir(), &gateway_yaml());
        assert!(
            line.contains(&format!("this build is for Envoy {built}.x")),
            "{v}: {line}"
        );
        assert!(
            line.contains(&format!("but this Envoy is {}", minor_of(&v))),
            "{v}: {line}"
        );
        assert!(
            line.contains(&format!("libgraceful_drain-envoy-{}.so", minor_of(&v))),
            "{v}: {line}"
        );
    }
}

#[test]
fn builds_for_other_envoys_refuse_the_envoy_under_test() {
    let found = minor_of(&expected_envoy_version());
    for v in other_supported_versions() {
        let line = assert_refused(envoy_bin(), &module_for(&v), &gateway_yaml());
        assert!(
            line.contains(&format!("this build is for Envoy {}.x", minor_of(&v))),
            "{v} build: {line}"
        );
        assert!(
            line.contains(&format!("but this Envoy is {found}")),
            "{v} build: {line}"
        );
    }
}

#[test]
fn envoy_1_37_is_refused_naming_the_minimum_version() {
    let old = install_envoy(TOO_OLD);
    let line = assert_refused(&old, module_dir(), &filter_only_yaml());
    assert!(line.contains("this Envoy is 1.37 or older"), "{line}");
    assert!(line.contains("needs Envoy 1.38 or newer"), "{line}");

    // The example gateway itself does not even parse there (no bootstrap hooks, older fields):
    // Envoy refuses it before loading the module.
    let mut e = Refusing::start(&old, module_dir(), &gateway_yaml());
    let (status, log) = e.exit();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(!log.contains("Caught "), "envoy crashed:\n{log}");
}
