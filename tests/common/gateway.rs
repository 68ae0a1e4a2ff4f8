//! The one harness the platform kits' suites start their gateway with (Kourier, Contour, Envoy
//! Gateway, Istio). Each suite turns its platform's own command line and bootstrap into a local
//! one, with its own checks that what it replaces is the release's (that part is the platform's
//! and stays in its suite); the rest is here, once: the private directory and the free ports, the
//! xDS files that stand in for the platform's control plane, the platform's listeners held back
//! until a test pushes them, the drain settings shortened, the control listener on loopback, and
//! the start itself ([`Launch`]: which command line, which Envoy and options, which ports the
//! guard reads, what must hold before the test begins), returning the guard that owns the Envoy
//! process ([`Gateway`]). The example gateway's suites (the modes) start through the same
//! [`Envoy`] guard with [`Options`] ([`Envoy::start`]).

use super::envoy::{Envoy, Options, TempDir};
use super::{clients, eventually, free_ports, Ports};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A running platform gateway: the Envoy guard, the platform's ports (`P`, read through this
/// guard: `gw.stats`), the module's control listener, and the platform's listeners when held back.
pub struct Gateway<P> {
    pub envoy: Envoy,
    pub ports: P,
    /// The module's control listener (none for the stock platform).
    pub control: Option<u16>,
    /// Started before the platform's control plane configured it: the listeners it pushes, held
    /// back (the LDS file Envoy reads, the listeners to move over it).
    pending: Option<(PathBuf, PathBuf)>,
}

impl<P> std::ops::Deref for Gateway<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.ports
    }
}

impl<P> Gateway<P> {
    /// The control plane's first push: its listeners, held back at the start, move over the LDS
    /// file Envoy watches.
    pub fn configure(&mut self) {
        let (lds, pushed) = self.pending.take().expect("started unconfigured");
        std::fs::rename(pushed, lds).unwrap();
    }
}

/// What tells that the module found Envoy's admin once Envoy is up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AdminFound {
    /// Not waited for (no module, or the test checks it).
    Unchecked,
    /// The module's info line (a platform logging at info).
    Log,
    /// `/drain/status`'s `admin_address_check` (a platform logging above info).
    Status,
}

/// One start of a platform's Envoy: made with its directory and reserved ports, filled by the
/// suite, then [`Launch::start`]ed.
pub struct Launch {
    dir: TempDir,
    /// Reserved until the start is over.
    reserved: Ports,
    args: Vec<String>,
    options: Options,
    /// `[ready, data, control]`: where the guard waits for `/ready`, the data port, the control
    /// port ([`Envoy::start_args`]).
    guard: [u16; 3],
    control: Option<u16>,
    control_v6: bool,
    admin_found: AdminFound,
    serving: Vec<(&'static str, u16, String, u16)>,
    pending: Option<(PathBuf, PathBuf)>,
}

impl Launch {
    /// A private directory named for the platform and `ports` free loopback ports.
    pub fn new(platform: &str, ports: usize) -> Launch {
        let reserved = free_ports(ports);
        Launch {
            dir: TempDir::new(platform),
            guard: [reserved[0], reserved[0], reserved[0]],
            reserved,
            args: Vec::new(),
            options: Options::default(),
            control: None,
            control_v6: false,
            admin_found: AdminFound::Unchecked,
            serving: Vec::new(),
            pending: None,
        }
    }

    /// The directory the gateway's files go in (kept as long as Envoy).
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// The reserved ports, in order.
    pub fn ports(&self) -> Vec<u16> {
        self.reserved.to_vec()
    }

    /// Write `{"resources": resources}` to `name` in the directory: an xDS file; its path.
    pub fn xds_file(&self, name: &str, resources: Value) -> PathBuf {
        let path = self.dir.0.join(name);
        std::fs::write(&path, json!({ "resources": resources }).to_string()).unwrap();
        path
    }

    /// Start before the control plane's first push: the listeners in `lds` are moved aside and
    /// `empty` is what Envoy reads until [`Gateway::configure`] pushes them.
    pub fn hold_back_listeners(&mut self, lds: &Path, empty: &str) {
        let pushed = self.dir.0.join("lds-pushed.json");
        std::fs::rename(lds, &pushed).unwrap();
        std::fs::write(lds, empty).unwrap();
        self.pending = Some((lds.to_path_buf(), pushed));
    }

    /// [`Launch::hold_back_listeners`] with no listener in the file (a successful, empty update).
    pub fn hold_back_listeners_unless(&mut self, configured: bool, lds: &Path) {
        if !configured {
            self.hold_back_listeners(lds, &json!({ "resources": [] }).to_string());
        }
    }

    /// The platform's command line (its `-c`, `--config-yaml`, ... as rewritten by the suite).
    pub fn args(mut self, args: Vec<String>) -> Launch {
        self.args = args;
        self
    }

    /// The guard's options: which Envoy (`envoy_bin`), which module, the environment.
    pub fn options(mut self, options: Options) -> Launch {
        self.options = options;
        self
    }

    /// The platform's command line sets Envoy's log level: the guard adds none.
    pub fn platform_log_level(mut self) -> Launch {
        self.options.log_args = Some(Vec::new());
        self
    }

    /// The platform runs Envoy without a base id (`--disable-hot-restart`): the guard adds none.
    pub fn no_base_id(mut self) -> Launch {
        self.options.base_args = Some(Vec::new());
        self
    }

    /// `[ready, data, control]`: where the guard waits for `/ready` (the admin or the listener
    /// standing in for it), and the ports it reports as data and control.
    pub fn guard_ports(mut self, ports: [u16; 3]) -> Launch {
        self.guard = ports;
        self
    }

    /// The module's control listener, on `[::1]` when `ipv6` (the guard's `/drain/status` goes
    /// there then).
    pub fn control(mut self, port: u16, ipv6: bool) -> Launch {
        self.control = Some(port);
        self.control_v6 = ipv6;
        self
    }

    /// Wait, once Envoy is up, for the module's log line saying it found the admin.
    pub fn admin_found_in_log(mut self) -> Launch {
        self.admin_found = AdminFound::Log;
        self
    }

    /// Wait, once Envoy is up, for `/drain/status` to say the admin was recognised (the
    /// platform's log level hides the module's info line).
    pub fn admin_found_in_status(mut self) -> Launch {
        self.admin_found = AdminFound::Status;
        self
    }

    /// Once Envoy is up (and unless the listeners are held back), wait until `GET path` on
    /// `port` answers `want`.
    pub fn serving(mut self, what: &'static str, port: u16, path: &str, want: u16) -> Launch {
        self.serving.push((what, port, path.to_string(), want));
        self
    }

    /// Start Envoy, wait for what was asked, and hand over the guard with the platform's ports.
    pub async fn start<P>(self, ports: P) -> Gateway<P> {
        let mut envoy = Envoy::start_args(&self.args, self.dir, self.guard, &self.options).await;
        if self.control_v6 {
            envoy.control_on_ipv6();
        }
        match self.admin_found {
            AdminFound::Unchecked => {}
            AdminFound::Log => {
                envoy
                    .wait_log("the admin found", "is Envoy's admin (state")
                    .await
            }
            AdminFound::Status => {
                eventually(
                    "the drain engine found the admin",
                    Duration::from_secs(10),
                    || async {
                        (envoy.drain_status().await["admin_address_check"] == "recognised")
                            .then_some(())
                    },
                )
                .await
            }
        }
        for (what, port, path, want) in self.serving.iter().filter(|_| self.pending.is_none()) {
            eventually(what, Duration::from_secs(10), || async {
                clients::get(*port, path)
                    .await
                    .ok()
                    .filter(|r| r.status == *want)
            })
            .await;
        }
        drop(self.reserved);
        Gateway {
            envoy,
            ports,
            control: self.control,
            pending: self.pending,
        }
    }
}

/// An xDS config source reading `path` (the file a [`Launch::xds_file`] wrote).
pub fn path_source(path: &Path) -> Value {
    json!({"resource_api_version": "V3", "path_config_source": {"path": path}})
}

/// The module's drain settings shortened for a test (`s`: the bootstrap extension's JSON).
pub fn short_drain(s: &mut Value, min_drain: &str, quiet: &str, timeout: &str) {
    s["min_drain_duration"] = json!(min_drain);
    s["quiet_period"] = json!(quiet);
    s["drain_timeout"] = json!(timeout);
}

/// The kits' rule that refuses `/drain` from outside the pod, given the dual-stack component's
/// `::1` beside the pod's 127.0.0.0/8 (the control listener is on `[::1]` here). A rule a test
/// narrowed is left as it is; `expect_narrowed` says what the test may have narrowed it to.
pub fn drain_also_from_ipv6_loopback(listener: &mut Value, expect_narrowed: Option<&str>) {
    let ids = &mut listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"][0]
        ["typed_config"]["rules"]["policies"]["drain-from-outside-the-pod"]["principals"][0]
        ["not_id"]["or_ids"]["ids"];
    let v4 = json!([{"direct_remote_ip": {"address_prefix": "127.0.0.0", "prefix_len": 8}}]);
    if *ids == v4 {
        ids.as_array_mut()
            .unwrap()
            .push(json!({"direct_remote_ip": {"address_prefix": "::1", "prefix_len": 128}}));
    } else if let Some(narrowed) = expect_narrowed {
        assert_eq!(
            *ids,
            json!([{"direct_remote_ip": {"address_prefix": narrowed, "prefix_len": 32}}])
        );
    }
}

/// A duration as the module's config writes it, in milliseconds (`"300ms"`).
pub fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}
