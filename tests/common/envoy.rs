//! The Envoy guard: owns one Envoy child process with its own temp dir, free ports and dynamic
//! base id; waits for readiness with a deadline; dumps the log when a test fails; kills and reaps
//! the process on drop.

use super::{clients, eventually, free_ports, repo_root, Ports};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The Envoy under test: `$ENVOY_BIN`, or what `scripts/install-envoy.sh` installs for
/// [`expected_envoy_version`].
pub fn envoy_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("ENVOY_BIN") {
            return PathBuf::from(p);
        }
        install_envoy(&expected_envoy_version())
    })
}

/// Install (or reuse) an official Envoy of this version; its binary's path.
pub fn install_envoy(version: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/install-envoy.sh"))
        .arg(version)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/install-envoy.sh");
    assert!(
        out.status.success(),
        "scripts/install-envoy.sh {version} failed"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn install_script_value(key: &str) -> String {
    let script = std::fs::read_to_string(repo_root().join("scripts/install-envoy.sh")).unwrap();
    script
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("{key} line in install-envoy.sh"))
        .trim()
        .trim_matches('"')
        .to_string()
}

/// The pinned default version, read from the one place it is written.
pub fn pinned_envoy_version() -> String {
    install_script_value("ENVOY_VERSION=")
}

/// The newest patch of every supported Envoy minor (scripts/install-envoy.sh).
pub fn supported_envoy_versions() -> Vec<String> {
    install_script_value("SUPPORTED_ENVOY_VERSIONS=")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Every Envoy the module is loaded into by some test, oldest first: the supported ones and the
/// older patches platforms ship (scripts/install-envoy.sh).
pub fn tested_envoy_versions() -> Vec<String> {
    let mut v = supported_envoy_versions();
    v.extend(
        install_script_value("OLDER_TESTED_ENVOY_VERSIONS=")
            .split_whitespace()
            .map(str::to_string),
    );
    let key = |s: &String| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    v.sort_by_key(key);
    v
}

/// The Envoy version under test: `$ENVOY_VERSION` (set by `make test ENVOY_VERSION=...`), else
/// the pinned default.
pub fn expected_envoy_version() -> String {
    std::env::var("ENVOY_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(pinned_envoy_version)
}

/// `1.39.3` -> `1.39`.
pub fn minor_of(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// The ABI version string Envoy of this version reports as matched.
pub fn abi_version_of(version: &str) -> &'static str {
    match minor_of(version).as_str() {
        "1.38" | "1.39" => "v0.1.0",
        _ => "v0.2.0",
    }
}

/// Build the module (one build for every supported Envoy) with extra cargo features into
/// `target_dir` (default `target`); the directory that holds `libgraceful_drain.so`.
pub fn build_module(features: &[&str], target_dir: Option<&str>) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--release", "--locked", "--lib", "--quiet"]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    if let Some(t) = target_dir {
        cmd.args(["--target-dir", t]);
    }
    let status = cmd
        .current_dir(repo_root())
        .status()
        .expect("cargo build --release");
    assert!(status.success(), "building the module failed");
    let dir = repo_root()
        .join(target_dir.unwrap_or("target"))
        .join("release");
    assert!(
        dir.join("libgraceful_drain.so").exists(),
        "no libgraceful_drain.so in {dir:?}"
    );
    dir
}

/// The module directory an Envoy started with `o` loads from.
fn modules_of(o: &Options) -> &Path {
    if let Some(d) = &o.module_dir {
        d.as_path()
    } else if o.panic_test_module {
        panic_test_module_dir()
    } else {
        module_dir()
    }
}

/// `envoy --mode validate` of a whole bootstrap, with the module from `modules` (only the search
/// path: Envoy also looks in LD_LIBRARY_PATH, where cargo puts its own debug build of the module).
/// Whether it passed, and Envoy's output.
pub fn validate_config(bootstrap: &str, modules: &Path) -> (bool, String) {
    let dir = TempDir::new("validate");
    let path = dir.0.join("envoy.yaml");
    std::fs::write(&path, bootstrap).unwrap();
    validate_args(&["-c".to_string(), path.display().to_string()], modules)
}

/// `envoy --mode validate` with a platform's own arguments (its `-c`, `--config-yaml`, ...).
pub fn validate_args(args: &[String], modules: &Path) -> (bool, String) {
    let out = Command::new(envoy_bin())
        .args(["--mode", "validate"])
        .args(args)
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", modules)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run envoy --mode validate");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Directory holding `libgraceful_drain.so` (release build, made once per test binary).
pub fn module_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var("GRACEFUL_DRAIN_MODULE_DIR") {
        Ok(p) => PathBuf::from(p),
        Err(_) => build_module(&[], None),
    })
}

/// The module built with the test-only `panic-test` feature, in its own target directory so it
/// can never be mistaken for the release artefact.
pub fn panic_test_module_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build_module(&["panic-test"], Some("target/panic-test")))
}

/// A private temp dir removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "graceful-drain-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How long after the drain's rules release Envoy a test may first see the process ended: the
/// module's release is followed by Envoy's own teardown (listeners, workers, clusters: well under
/// half a second on an idle machine, over 1.2 s seen with both cores busy, `tests/contour.rs`),
/// then by this test's wait noticing it. Every test that bounds the real exit with it keeps the
/// behaviour it rules out (a drain held to its timeout, by idle connections, ...) further away.
pub const EXIT_SLACK: Duration = Duration::from_secs(2);

/// Drain settings written into the rendered gateway config.
#[derive(Clone, Debug)]
pub struct Settings {
    pub min_drain: &'static str,
    pub quiet: &'static str,
    pub timeout: &'static str,
}

impl Settings {
    /// `min_drain_duration`, `quiet_period` and `drain_timeout`, as the config writes them.
    pub const fn new(min_drain: &'static str, quiet: &'static str, timeout: &'static str) -> Self {
        Settings {
            min_drain,
            quiet,
            timeout,
        }
    }

    /// `min_drain_duration` and `quiet_period`: the rules a drain's exit is bounded by
    /// ([`Envoy::wait_exit_by_the_drain_rules`]).
    pub fn rules(&self) -> [Duration; 2] {
        [self.min_drain, self.quiet].map(|d| super::json::duration(&serde_json::Value::from(d)))
    }
}

/// Short settings so tests stay fast.
pub const FAST: Settings = Settings::new("300ms", "200ms", "10s");

/// How to render `envoy-config/gateway.yaml` for a test, and how to run Envoy.
#[derive(Clone, Debug)]
pub struct Options {
    pub settings: Settings,
    pub with_module: bool,
    pub concurrency: u32,
    /// JSON for the control listener's filter (default: the example's `{"role": "control"}`).
    pub control_config: Option<String>,
    /// Extra environment for Envoy.
    pub env: Vec<(String, String)>,
    /// Load the `panic-test` build of the module.
    pub panic_test_module: bool,
    /// Route `/upstream/...` on the data listener to a test server on this port.
    pub test_upstream: Option<u16>,
    /// Extra fields for the bootstrap extension's JSON, e.g. `"admin_address": ""` (which
    /// replaces the example's admin address).
    pub bootstrap_extra: Option<&'static str>,
    /// Replaces `--use-dynamic-base-id` (e.g. `--base-id N --restart-epoch E` for hot restart).
    pub base_args: Option<Vec<String>>,
    /// Replaces the log arguments (`--log-level info --component-log-level
    /// dynamic_modules:debug`), e.g. a platform's own.
    pub log_args: Option<Vec<String>>,
    /// Keep the module's HTTP filter (false: connection mode, the network filter and the
    /// bootstrap extension only; `/ready` then comes from Envoy's health_check filter).
    pub http_filter: bool,
    /// Keep the module's network filter (false: the HTTP filter reaches each request with a
    /// scheduler of its own, and idle connections are not told).
    pub network_filter: bool,
    /// Keep the data listener's HTTP filter (role `data`); the control listener keeps its own.
    /// False with `track_requests`: connection mode ([`TestMode::Connection`]).
    pub data_http_filter: bool,
    /// The network filter follows every exchange from the bytes (`"track_requests": true`).
    pub track_requests: bool,
    /// Another Envoy binary than the one under test (`envoy_bin`).
    pub envoy_bin: Option<PathBuf>,
    /// Load `libgraceful_drain.so` from this directory instead of the module under test.
    pub module_dir: Option<PathBuf>,
    /// Run Envoy inside this glibc-only root (Envoy's distroless images), not on the host.
    pub root: Option<std::sync::Arc<super::image::GlibcRoot>>,
    /// Extra fields for the network filter's JSON (connection mode), e.g.
    /// `"long_lived_window": "2s"`.
    pub network_extra: Option<&'static str>,
}

/// How the suites run the example gateway, from `GRACEFUL_DRAIN_TEST_MODE` (`make test
/// TEST_MODE=...`): the same tests against each setup a user may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestMode {
    /// The HTTP filter counts the requests; the network filter tells idle connections.
    Filter,
    /// No data-path HTTP filter: the network filter follows the exchanges (`track_requests`).
    /// The example gateway's own setup, so the default.
    Connection,
    /// Both, with the module built with `cross-check`: the tracker's count is compared with the
    /// HTTP filter's at every request start and end; a disagreement fails the test (its log).
    CrossCheck,
}

pub fn test_mode() -> TestMode {
    match std::env::var("GRACEFUL_DRAIN_TEST_MODE").as_deref() {
        Ok("") | Ok("connection") | Err(_) => TestMode::Connection,
        Ok("cross-check") => TestMode::CrossCheck,
        Ok("filter") => TestMode::Filter,
        Ok(other) => {
            panic!("GRACEFUL_DRAIN_TEST_MODE={other:?}: expected filter, connection or cross-check")
        }
    }
}

/// The network filter's config in `envoy-config/gateway.yaml` (connection mode: it follows the
/// exchanges), and as filter mode has it (the HTTP filter counts the requests).
const EXAMPLE_NETWORK_CONFIG: &str =
    r#"'{"idle_close_grace": "2s", "idle_after": "1s", "track_requests": true}'"#;
const FILTER_MODE_NETWORK_CONFIG: &str = r#"'{"idle_close_grace": "2s", "idle_after": "1s"}'"#;

/// Filter mode's data path: the module's HTTP filter first in the data listener's chain (every
/// request counted from its start), as `envoy-config/gateway.yaml` has it commented out after
/// [`FILTER_MODE_MARK`]: the lines after the mark that are a commented-out YAML list item,
/// uncommented. `bench/bench.py` renders filter mode the same way.
pub fn add_data_http_filter(text: &str) -> String {
    const INDENT: &str = "          ";
    let mut out = String::with_capacity(text.len());
    let (mut inside, mut uncommented) = (false, 0);
    for line in text.split_inclusive('\n') {
        if inside {
            let item = line
                .strip_prefix(INDENT)
                .and_then(|l| l.strip_prefix("# "))
                .filter(|l| l.starts_with("- ") || l.starts_with("  "));
            if let Some(item) = item {
                out.push_str(INDENT);
                out.push_str(item);
                uncommented += 1;
                continue;
            }
            inside = false;
        }
        inside |= line.trim_end().ends_with(FILTER_MODE_MARK);
        out.push_str(line);
    }
    assert!(
        uncommented > 0 && text.matches(FILTER_MODE_MARK).count() == 1,
        "no commented-out data HTTP filter after {FILTER_MODE_MARK:?} in the config"
    );
    out
}

/// The comment in `envoy-config/gateway.yaml` after which filter mode's HTTP filter is.
pub const FILTER_MODE_MARK: &str = "(uncomment it, and drop track_requests above):";

impl Options {
    /// These options in filter mode whatever the test mode: the data listener's HTTP filter
    /// counts the requests, the network filter does not follow the exchanges.
    pub fn filter_mode(self) -> Options {
        Options {
            data_http_filter: true,
            track_requests: false,
            ..self
        }
    }

    /// The default options with these drain settings.
    pub fn with(settings: Settings) -> Options {
        Options {
            settings,
            ..Options::default()
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            settings: FAST,
            with_module: true,
            concurrency: 2,
            control_config: None,
            env: Vec::new(),
            panic_test_module: false,
            test_upstream: None,
            bootstrap_extra: None,
            base_args: None,
            log_args: None,
            http_filter: true,
            network_filter: true,
            data_http_filter: test_mode() != TestMode::Connection,
            track_requests: test_mode() != TestMode::Filter,
            envoy_bin: None,
            module_dir: None,
            root: None,
            network_extra: None,
        }
    }
}

const EXAMPLE_SETTINGS: &str = r#"'{"min_drain_duration": "5s", "quiet_period": "1s", "drain_timeout": "25s", "admin_address": "127.0.0.1:9901"}'"#;

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "envoy-config/gateway.yaml must contain {from:?} exactly once (tests render it)"
    );
    text.replacen(from, to, 1)
}

/// Remove a YAML list item `- name: <name>` (and everything indented below it).
pub fn remove_list_items(text: &str, name: &str) -> String {
    let mut out = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(i) = skipping {
            if line.trim().is_empty() || indent > i {
                continue;
            }
            skipping = None;
        }
        if line.trim_start() == format!("- name: {name}") {
            skipping = Some(indent);
            continue;
        }
        out.push(line);
    }
    out.join("\n") + "\n"
}

/// Remove the HTTP filter item whose config is the data role (the control listener's stays).
pub fn remove_data_http_filter(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut removed = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        if line.trim_start() == "- name: envoy.filters.http.dynamic_modules" {
            let end = (i + 1..lines.len())
                .find(|&j| {
                    let l = lines[j];
                    !l.trim().is_empty() && l.len() - l.trim_start().len() <= indent
                })
                .unwrap_or(lines.len());
            if lines[i..end]
                .iter()
                .any(|l| l.contains(r#"'{"role": "data"}'"#))
            {
                removed += 1;
                i = end;
                continue;
            }
        }
        out.push(line);
        i += 1;
    }
    assert_eq!(
        removed, 1,
        "one data-role HTTP filter in the rendered gateway"
    );
    out.join("\n") + "\n"
}

/// Add a route on the data listener, ahead of the catch-all one, on which the module's HTTP
/// filter is disabled (`typed_per_filter_config`): requests under `prefix` (the embedded backend,
/// the fault filter's delay header honoured) are seen by Envoy's stats only.
pub fn add_route_without_the_filter(yaml: &str, prefix: &str) -> String {
    let catch_all = "              - match: { prefix: \"/\" }\n                direct_response:\n                  status: 200";
    replace_once(
        yaml,
        catch_all,
        &format!(
            "              - match: {{ prefix: \"{prefix}\" }}\n                direct_response:\n                  status: 200\n                  body: {{ inline_string: \"no filter here\\n\" }}\n                typed_per_filter_config:\n                  envoy.filters.http.dynamic_modules:\n                    \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n                    disabled: true\n{catch_all}"
        ),
    )
}

/// Append static clusters, each `(name, port)` with one endpoint 127.0.0.1:`port`, to a rendered
/// gateway (whose last section is static_resources), opening its `clusters:` list if it has none.
pub fn push_static_clusters(y: &mut String, clusters: impl IntoIterator<Item = (String, u16)>) {
    if !y.contains("\n  clusters:\n") {
        y.push_str("  clusters:\n");
    }
    for (name, port) in clusters {
        y.push_str(&format!(
            "  - name: {name}\n    type: STATIC\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: {name}\n      endpoints:\n      - lb_endpoints:\n        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n"
        ));
    }
}

/// Render the example gateway with the given ports and options.
pub fn render_gateway(admin: u16, data: u16, control: u16, o: &Options) -> String {
    let src = std::fs::read_to_string(repo_root().join("envoy-config/gateway.yaml")).unwrap();
    let mut y = replace_once(&src, "port_value: 9901", &format!("port_value: {admin}"));
    y = replace_once(&y, "port_value: 10000", &format!("port_value: {data}"));
    y = replace_once(&y, "port_value: 10001", &format!("port_value: {control}"));
    let s = &o.settings;
    // The drain engine reaches the admin at its address (unless the test sets its own).
    let extra = match o.bootstrap_extra {
        Some(e) if e.contains("\"admin_address\"") => format!(", {e}"),
        Some(e) => format!(r#", "admin_address": "127.0.0.1:{admin}", {e}"#),
        None => format!(r#", "admin_address": "127.0.0.1:{admin}""#),
    };
    y = replace_once(
        &y,
        EXAMPLE_SETTINGS,
        &format!(
            r#"'{{"min_drain_duration": "{}", "quiet_period": "{}", "drain_timeout": "{}"{extra}}}'"#,
            s.min_drain, s.quiet, s.timeout,
        ),
    );
    if let Some(c) = &o.control_config {
        y = replace_once(&y, r#"'{"role": "control"}'"#, &format!("'{c}'"));
    }
    if let Some(port) = o.test_upstream {
        // A route to a test server (with a short timeout) ahead of the embedded backend, and its
        // cluster appended to static_resources (the listeners are the file's last section).
        y = replace_once(
            &y,
            "              - match: { prefix: \"/\" }\n                direct_response:\n                  status: 200",
            "              - match: { prefix: \"/upstream/\" }\n                route: { cluster: test_upstream, timeout: 0.5s }\n              - match: { prefix: \"/upstream-streaming/\" }\n                route: { cluster: test_upstream, timeout: 0s }\n              - match: { prefix: \"/\" }\n                direct_response:\n                  status: 200",
        );
        push_static_clusters(&mut y, [("test_upstream".to_string(), port)]);
    }
    // The file is connection mode. Connection mode needs the tracking network filter: a test
    // without it gets filter mode's data path.
    let connection_mode = !o.data_http_filter && o.network_filter && o.track_requests;
    if !o.http_filter {
        y = remove_list_items(&y, "envoy.filters.http.dynamic_modules");
    } else if !connection_mode {
        y = add_data_http_filter(&y);
    }
    if !o.track_requests && o.network_filter {
        y = replace_once(&y, EXAMPLE_NETWORK_CONFIG, FILTER_MODE_NETWORK_CONFIG);
    } else if let Some(extra) = o.network_extra {
        let with = EXAMPLE_NETWORK_CONFIG.replace("}'", &format!(", {extra}}}'"));
        y = replace_once(&y, EXAMPLE_NETWORK_CONFIG, &with);
    }
    if !o.network_filter {
        y = remove_list_items(&y, "envoy.filters.network.dynamic_modules");
    }
    if !o.with_module {
        y = remove_list_items(&y, "envoy.bootstrap.dynamic_modules");
        y = remove_list_items(&y, "envoy.filters.http.dynamic_modules");
        y = remove_list_items(&y, "envoy.filters.network.dynamic_modules");
        y = y.replace("bootstrap_extensions:\n", "");
    }
    y
}

pub struct Envoy {
    child: Child,
    pub admin: u16,
    pub data: u16,
    pub control: u16,
    pub dir: TempDir,
    log_path: PathBuf,
    exit: Option<(ExitStatus, Instant)>,
    kept: Vec<TempDir>,
    /// The ports [`Envoy::start`] reserved for this Envoy (released with it).
    reserved: Option<Ports>,
    /// Envoy bugs this test expects (a substring of each `envoy bug failure` line), from a
    /// configuration that is not ours; any other one fails the test.
    expected_bugs: Vec<&'static str>,
    /// The control listener is on `[::1]` ([`Envoy::control_on_ipv6`]).
    control_v6: bool,
}

impl Envoy {
    /// Start the example gateway and wait until it serves (admin `/ready` is LIVE).
    pub async fn start(o: Options) -> Envoy {
        let p = free_ports(3);
        let mut e = Envoy::start_on([p[0], p[1], p[2]], o).await;
        e.reserved = Some(p);
        e
    }

    /// Start the example gateway on given `[admin, data, control]` ports (a replacement "pod").
    /// The caller keeps the ports reserved ([`free_ports`]) until this returns.
    pub async fn start_on(p: [u16; 3], o: Options) -> Envoy {
        let yaml = render_gateway(p[0], p[1], p[2], &o);
        Envoy::start_yaml(&yaml, p[0], p[1], p[2], &o).await
    }

    pub async fn start_yaml(yaml: &str, admin: u16, data: u16, control: u16, o: &Options) -> Envoy {
        let dir = TempDir::new("envoy");
        let cfg = dir.0.join("envoy.yaml");
        std::fs::write(&cfg, yaml).unwrap();
        let modules = modules_of(o);
        let bin = o.envoy_bin.as_deref().unwrap_or(envoy_bin());
        let cmd = match &o.root {
            Some(root) => root.envoy_command(bin, &cfg, &modules.join("libgraceful_drain.so")),
            None => {
                let mut c = Command::new(bin);
                c.arg("-c")
                    .arg(&cfg)
                    .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", modules);
                c
            }
        };
        Envoy::spawn(cmd, dir, [admin, data, control], o).await
    }

    /// Run Envoy with `args` as its whole command line but for the guard's own (base id unless
    /// `o.base_args`, concurrency, log arguments unless `o.log_args`): a platform's arguments as
    /// its manifest gives them (`-c`, `--config-yaml`, ...). `dir` is kept as long as Envoy.
    pub async fn start_args(args: &[String], dir: TempDir, ports: [u16; 3], o: &Options) -> Envoy {
        assert!(o.root.is_none(), "start_args runs on the host");
        let mut c = Command::new(o.envoy_bin.as_deref().unwrap_or(envoy_bin()));
        c.args(args)
            .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", modules_of(o));
        Envoy::spawn(c, dir, ports, o).await
    }

    async fn spawn(mut cmd: Command, dir: TempDir, ports: [u16; 3], o: &Options) -> Envoy {
        let log_path = dir.0.join("envoy.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = cmd
            .args(
                o.base_args
                    .clone()
                    .unwrap_or_else(|| vec!["--use-dynamic-base-id".to_string()]),
            )
            .args(["--concurrency", &o.concurrency.to_string()])
            .args(o.log_args.clone().unwrap_or_else(|| {
                [
                    "--log-level",
                    "info",
                    "--component-log-level",
                    "dynamic_modules:debug",
                ]
                .map(String::from)
                .to_vec()
            }))
            .envs(o.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn envoy");
        let [admin, data, control] = ports;
        let mut e = Envoy {
            child,
            admin,
            data,
            control,
            dir,
            log_path,
            exit: None,
            kept: Vec::new(),
            reserved: None,
            expected_bugs: Vec::new(),
            control_v6: false,
        };
        e.wait_ready().await;
        e
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("envoy exited during startup ({status}):\n{}", self.log());
            }
            if let Ok(r) = clients::get(self.admin, "/ready").await {
                if r.status == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "envoy not ready after 30s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Keep a directory (e.g. xDS files) alive as long as this Envoy.
    pub fn keep(&mut self, dir: TempDir) {
        self.kept.push(dir);
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child's pid, which we have not reaped yet.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid());
    }

    pub fn sigterm(&self) {
        self.signal(libc::SIGTERM)
    }

    /// Has the process exited? Records the first time we saw it.
    pub fn exited(&mut self) -> Option<(ExitStatus, Instant)> {
        if self.exit.is_none() {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.exit = Some((st, Instant::now()));
            }
        }
        self.exit
    }

    /// Wait (bounded) for the process to exit; returns its status and when it was seen exiting.
    pub async fn wait_exit(&mut self, timeout: Duration) -> (ExitStatus, Instant) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.exited() {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "envoy still running {timeout:?} later:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Kubelet's last step: wait up to `grace` for the exit, then SIGKILL. Returns the exit time,
    /// or `None` if SIGKILL was needed.
    pub async fn wait_exit_or_kill(&mut self, grace: Duration) -> Option<Instant> {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some((_, at)) = self.exited() {
                return Some(at);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        None
    }

    /// Wait (bounded by `timeout`) for a clean exit (status 0) no earlier than `done`, when the
    /// request the drain had to wait for ended; `what` names that request in a failure. Returns
    /// the exit time.
    pub async fn wait_clean_exit_after(
        &mut self,
        done: Instant,
        timeout: Duration,
        what: &str,
    ) -> Instant {
        let (status, at) = self.wait_exit(timeout).await;
        assert!(status.success(), "{status:?}");
        assert!(at >= done, "exited {:?} before {what} ended", done - at);
        at
    }

    /// [`Envoy::wait_clean_exit_after`], and the drain was not ended by its timeout; the drain's
    /// duration as the module reported it.
    pub async fn wait_drained_after(
        &mut self,
        done: Instant,
        timeout: Duration,
        what: &str,
    ) -> Duration {
        self.wait_clean_exit_after(done, timeout, what).await;
        let (reported, timed_out) = self.reported_drain();
        assert!(!timed_out, "the timeout ended the drain ({reported:?})");
        reported
    }

    /// SIGTERM after a drain that completed (`/drain`): Envoy is released at once, without a
    /// drain of its own: a clean exit (waited for up to `timeout`) sooner than `fresh_drain` (the
    /// least a fresh drain with these settings would take), and one drain started in the log.
    /// Returns the log.
    pub async fn sigterm_after_a_completed_drain(
        &mut self,
        fresh_drain: Duration,
        timeout: Duration,
    ) -> String {
        let t1 = Instant::now();
        self.sigterm();
        let (status, at) = self.wait_exit(timeout).await;
        assert!(status.success(), "{status:?}");
        assert!(
            at - t1 < fresh_drain,
            "SIGTERM after the completed drain: exit {:?} later, no sooner than a fresh drain \
             ({fresh_drain:?})",
            at - t1
        );
        let log = self.log();
        assert!(log.contains("releasing Envoy's exit"), "{log}");
        let started = log.matches("graceful_drain: drain started").count();
        assert_eq!(started, 1, "{log}");
        log
    }

    /// SIGTERM to an Envoy the module does not hold (stock Envoy, or nothing to wait for): it
    /// exits less than `bound` after `since` (a time taken before the signal), or this panics
    /// saying `what`. Returns the exit time.
    pub async fn sigterm_exits_within(
        &mut self,
        since: Instant,
        bound: Duration,
        what: &str,
    ) -> Instant {
        self.sigterm();
        let (_, at) = self.wait_exit(Duration::from_secs(5)).await;
        assert!(at - since < bound, "{what}: {:?}", at - since);
        at
    }

    /// Accept an Envoy bug report containing `substring` (a configuration that is not ours).
    pub fn expect_envoy_bug(&mut self, substring: &'static str) {
        self.expected_bugs.push(substring);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The first line of Envoy's log that has `text` (panics with the log if there is none).
    pub fn log_line(&self, text: &str) -> String {
        let log = self.log();
        match log.lines().find(|l| l.contains(text)) {
            Some(l) => l.to_string(),
            None => panic!("no {text:?} line in Envoy's log:\n{log}"),
        }
    }

    /// Assert that Envoy's log has `text` (the whole log in the failure).
    pub fn assert_logged(&self, text: &str) {
        let log = self.log();
        assert!(log.contains(text), "no {text:?} in Envoy's log:\n{log}");
    }

    /// A stat from the admin interface (`/stats?filter=^name$`), if present.
    pub async fn stat(&self, name: &str) -> Option<i64> {
        let r = clients::get(self.admin, &format!("/stats?filter=%5E{name}%24"))
            .await
            .ok()?;
        let body = String::from_utf8_lossy(&r.body).to_string();
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Wait (bounded) for Envoy's exit and check the process itself ended cleanly (status 0) no
    /// earlier than `earliest` and no later than `latest` plus [`EXIT_SLACK`] (Envoy's teardown
    /// once released, and this test seeing it). `earliest` must be a moment this test knows Envoy
    /// could not have been released before (the rules measured from a time taken before the
    /// event), `latest` one by which the rules release it (measured from a time taken after).
    /// Returns the exit time.
    pub async fn wait_exit_between(
        &mut self,
        what: &str,
        earliest: Instant,
        latest: Instant,
    ) -> Instant {
        let latest = latest + EXIT_SLACK;
        // Wait past the bound, so that a late exit is reported with how late it came.
        let wait = latest.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        let (status, at) = self.wait_exit(wait).await;
        assert!(status.success(), "{what}: {status}\n{}", self.log());
        assert!(
            at >= earliest,
            "{what}: Envoy exited {:?} before the rules allow",
            earliest - at
        );
        assert!(
            at <= latest,
            "{what}: Envoy exited {:?} after the rules allow (allowed: {EXIT_SLACK:?} of teardown)",
            at - (latest - EXIT_SLACK)
        );
        at
    }

    /// Wait for the exit of a drain that started at `t0`, and check that Envoy exited by the
    /// drain's rules: a clean exit, not before `min_drain` nor before the last request ended
    /// (`last_done`), and not later than `quiet` after the last request started (`last_start`,
    /// taken when its answer came) plus the polling slack of Envoy's counters (700 ms: a drain
    /// without the HTTP filter, bootstrap-only, sees requests through them) and Envoy's teardown
    /// ([`Envoy::wait_exit_between`]). The module's own figure (its clock, from the drain start to
    /// the completion) must be inside the same rules. Returns the exit time.
    pub async fn wait_exit_by_the_drain_rules(
        &mut self,
        what: &str,
        t0: Instant,
        [min_drain, quiet]: [Duration; 2],
        last_start: Instant,
        last_done: Instant,
    ) -> Instant {
        let earliest = (t0 + min_drain).max(last_done);
        let latest = earliest.max(last_start + quiet) + Duration::from_millis(700);
        let at = self.wait_exit_between(what, earliest, latest).await;
        let (reported, timed_out) = self.reported_drain();
        assert!(
            !timed_out && reported <= latest - t0,
            "{what}: drain ended after {reported:?} (timed out: {timed_out}), allowed {:?}",
            latest - t0
        );
        at
    }

    /// The drain's duration as the module logged it at completion (its own clock, from the drain
    /// start to the completion: neither the test's nor the process's scheduling delays count),
    /// and whether the timeout ended it. Panics if the log has no completion.
    pub fn reported_drain(&self) -> (Duration, bool) {
        let log = self.log();
        let (tail, timed_out) = match log.split_once("drain completed in ") {
            Some((_, t)) => (t, false),
            None => match log.split_once("drain timed out after ") {
                Some((_, t)) => (t, true),
                None => panic!("no drain completion in the log:\n{log}"),
            },
        };
        let ms: u64 = tail
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unreadable drain completion in the log:\n{log}"));
        (Duration::from_millis(ms), timed_out)
    }

    /// The module's status on Envoy's admin (`/graceful_drain/status`) as JSON, if it answers.
    pub async fn admin_status(&self) -> Option<serde_json::Value> {
        let r = clients::get(self.admin, "/graceful_drain/status")
            .await
            .ok()?;
        serde_json::from_slice(&r.body).ok()
    }

    /// `/drain/status` of the control listener as JSON.
    pub async fn drain_status(&self) -> serde_json::Value {
        if self.control_v6 {
            let (status, body) = clients::request_v6(self.control, "GET", "/drain/status")
                .await
                .expect("GET /drain/status");
            assert_eq!(status, 200);
            return serde_json::from_str(&body).expect("status is JSON");
        }
        let r = clients::get(self.control, "/drain/status")
            .await
            .expect("GET /drain/status");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("status is JSON")
    }

    /// The control listener is on `[::1]` (a platform's dual-stack `::`, on loopback):
    /// [`Envoy::drain_status`] and what uses it go there over IPv6.
    pub fn control_on_ipv6(&mut self) {
        self.control_v6 = true;
    }

    /// Wait until Envoy's stat `name` reads `want` (gauges the module sets periodically follow
    /// the in-flight count within `GAUGE_PERIOD`, 500 ms).
    pub async fn wait_stat(&self, name: &str, want: i64) {
        eventually(
            &format!("{name} == {want}"),
            Duration::from_secs(5),
            || async { (self.stat(name).await == Some(want)).then_some(()) },
        )
        .await
    }

    /// Wait until Envoy's log has `line`.
    pub async fn wait_log(&self, what: &str, line: &str) {
        eventually(what, Duration::from_secs(10), || async {
            self.log().contains(line).then_some(())
        })
        .await
    }

    /// Wait until the module reports this many in-flight data requests.
    pub async fn wait_active(&self, n: u64) {
        eventually(
            &format!("active_requests == {n}"),
            Duration::from_secs(10),
            || async { (self.drain_status().await["active_requests"] == n).then_some(()) },
        )
        .await
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let log = self.log();
        if std::thread::panicking() {
            let tail: Vec<&str> = log.lines().rev().take(80).collect();
            eprintln!(
                "---- envoy log (last {} lines) ----\n{}",
                tail.len(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
            return;
        }
        // Whatever the test asserted, Envoy must not have flagged a bug of its own
        // (`ENVOY_BUG`: logged, counted in `server.envoy_bug_failures`, fatal in debug builds).
        // Each report is an `envoy bug failure` line followed by its stack trace.
        let bugs: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("][envoy_bug]") && l.contains("envoy bug failure"))
            .filter(|l| !self.expected_bugs.iter().any(|e| l.contains(e)))
            .take(20)
            .collect();
        assert!(
            bugs.is_empty(),
            "Envoy reported a bug during this test:\n{}",
            bugs.join("\n")
        );
        // The cross-check build logs every disagreement between its two counts.
        let disagreements: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("graceful_drain: cross-check disagreement"))
            .take(20)
            .collect();
        if !disagreements.is_empty()
            && std::env::var_os("GRACEFUL_DRAIN_CROSS_CHECK_TRACE").is_some()
        {
            for l in log
                .lines()
                .filter(|l| l.contains("cross-check") || l.contains("GOAWAY"))
            {
                eprintln!("{l}");
            }
        }
        assert!(
            disagreements.is_empty(),
            "the exchange tracker and the HTTP filter disagreed:\n{}",
            disagreements.join("\n")
        );
    }
}
