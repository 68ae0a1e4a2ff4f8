//! The bootstrap extension's whole life, in safe code: loading its config, running the drain
//! [`Engine`] on Envoy's main thread, the stats scanner, the admin calls (on a thread of their
//! own), the fallback ticker, and the teardown that stops and joins every module thread.
//!
//! The FFI glue (`ffi::bootstrap`) only guards, converts and calls the `on_*` methods here. It
//! gives the process-wide parts as an [`Env`], Envoy's side among them (the
//! [`ExtensionHost`]: timer, main-thread hop, stats), and, once Envoy has created the extension,
//! a [`StatsSource`] (the stats store).

use crate::config::BootstrapConfig;
use crate::counting::Counts;
use crate::engine::drain::{Phase, Trigger, IN_FLIGHT_RECHECK};
use crate::engine::engine::{AdminRequest, Engine};
use crate::engine::shared::{NotWork, Shared, StartResult};
use crate::envoy_stats::admin::{self, AdminAddress, AdminCheck, AdminHost};
use crate::envoy_stats::scan::{DrainTiming, EnvoyView, Pass, ScanSource, Scanner, StatSums};
use crate::host::connection::ConnectionWakers;
use crate::host::extension::ShutdownRelease;
use crate::host::stats::StatsSource;
use crate::host::stream::Wakers;
use crate::host::Hosts;
use crate::runtime::threads::Threads;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

pub use crate::host::extension::{ExtensionHost, EVENT_ADMIN_CHECKED, EVENT_KICK};

/// How long teardown waits for the module's threads to end: longer than the one call a thread
/// cannot be interrupted in (a socket call to the admin, at most [`ADMIN_CALL_TIMEOUT`]); every
/// other wait ends at once when the module stops, and the admin threads make no further call
/// then. A thread still running past it could make no call into Envoy anyway: every one passes
/// the closed gate, log lines included (`ffi::logger`).
const THREAD_JOIN_BOUND: Duration = Duration::from_millis(2500);

/// Bounds each admin call as a whole (connect, write and reads).
const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times, one second apart, the admin_address check tries to get an answer before it
/// warns (the admin may still be coming up when the server is initialized).
const ADMIN_CHECK_ATTEMPTS: u32 = 3;

pub use crate::engine::shared::Gauge;

/// The process-wide parts the extension works with (owned by the FFI layer, alive for the
/// process).
#[derive(Clone, Copy)]
pub struct Env {
    pub shared: &'static Shared,
    pub threads: &'static Threads,
    /// Envoy's side of the extension.
    pub envoy: &'static dyn ExtensionHost,
    /// The network filters' schedulers, which the drain start commits to (any thread).
    pub connections: &'static dyn ConnectionWakers,
    /// Envoy's admin (its HTTP calls: the start-time check, the drain start's calls).
    pub admin: &'static dyn AdminHost,
    /// The HTTP filters' schedulers (streams' wakers), which the drain start and completion
    /// commit to (any thread).
    pub streams: &'static dyn Wakers,
}

impl Env {
    fn kick(&self) {
        self.envoy.kick_engine()
    }

    fn count_module_error(&self) {
        self.shared.module_error(self.envoy)
    }

    /// Count the panics the module's threads contained since the last time into
    /// `module_errors` (on Envoy's main thread: each evaluation, each admin request).
    fn count_thread_panics(&self) {
        for _ in 0..self.threads.take_panics() {
            self.count_module_error();
        }
    }
}

pub struct Extension {
    env: Env,
    /// The stats store as the scanner reads it.
    store: Arc<StatsStore>,
    /// Where Envoy's admin may be (`admin_address`), and the one the start-time check found.
    admin_address: Vec<AdminAddress>,
    admin_found: Arc<Mutex<Option<AdminAddress>>>,
    engine: RefCell<Engine>,
    /// Reads Envoy's stats on its own thread; started when the server has initialised.
    scanner: OnceLock<Option<Scanner>>,
}

fn lock_or_recover<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Envoy's stats store as the scanner thread reads it: set when Envoy creates the extension,
/// forgotten when it destroys it. Held locked for the whole of a pass, so a pass never outlives
/// Envoy's extension. The call into Envoy made under this lock runs only the module's iterator,
/// which touches nothing but the pass's sums (`ENVOY_FACTS.md` §3a), so it cannot be re-entered.
struct StatsStore {
    source: Mutex<Option<Arc<dyn StatsSource>>>,
    /// The last pass met none of the stats it reads (a stats matcher excludes them).
    hidden: std::sync::atomic::AtomicBool,
    ignored_stat_prefixes: Vec<String>,
    env: Env,
}

impl StatsStore {
    fn source(&self) -> MutexGuard<'_, Option<Arc<dyn StatsSource>>> {
        self.source.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ScanSource for Arc<StatsStore> {
    fn scan(&self, pass: Pass) -> Option<u64> {
        let source = self.source();
        let mut sums = StatSums::new(pass, &self.ignored_stat_prefixes);
        let shared = self.env.shared;
        let before = shared.not_work_now();
        if !source
            .as_ref()?
            .visit(pass, &mut |name, value| sums.add(name, value))
        {
            return None;
        }
        drop(source);
        self.hidden
            .store(sums.saw_none(), std::sync::atomic::Ordering::Relaxed);
        // Less what the module knows is not work (health checks it recognised, requests to its
        // control listeners such as a waiting /drain) and the pass certainly counted.
        Some(sums.total_less(NotWork::within(before, shared.not_work_now())))
    }

    fn own_counts(&self) -> Counts {
        self.env.shared.counts()
    }

    fn last_pass_hidden(&self) -> bool {
        self.hidden.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn draining(&self) -> bool {
        matches!(self.env.shared.phase(), Phase::Draining { .. })
    }

    fn scanned(&self) {
        self.env.kick();
    }
}

impl Extension {
    /// `config_new`: parse and install the configuration. `None` (logged, naming the field) when
    /// Envoy must refuse it. `has_timer`: Envoy gave the extension a timer; without one the
    /// drain clock runs on a fallback thread.
    pub fn load(raw: &[u8], env: Env, has_timer: bool) -> Option<Extension> {
        let cfg = match BootstrapConfig::parse(raw) {
            Ok(c) => c,
            Err(e) => {
                log::error!("{e}");
                return None;
            }
        };
        env.shared.install_policy(cfg.requests.clone());
        if !cfg.admin_address.is_empty() && !cfg.ignored_stat_prefixes.iter().any(|p| p == "admin")
        {
            log::warn!(
                "graceful_drain: ignored_stat_prefixes does not contain \"admin\": every request to \
                 Envoy's admin (metrics scrapes) will count as traffic and can hold drains until \
                 drain_timeout"
            );
        }
        if !env.shared.install_engine(cfg.drain) {
            log::error!(
                "invalid graceful_drain bootstrap config: field `extension_name`: the graceful_drain \
                 bootstrap extension is configured twice; keep one entry"
            );
            return None;
        }
        if !has_timer {
            log::error!(
                "graceful_drain: Envoy gave no timer; the drain clock runs on a fallback thread"
            );
            start_fallback_ticker(env);
        }
        // Also at `lifecycle_log_level`, so a gateway at `--log-level warn` shows the module
        // loaded, which version, into which Envoy.
        log::log!(
            cfg.lifecycle_log_level,
            "graceful_drain: drain engine loaded (graceful_drain {}, Envoy {}; \
             min_drain_duration={:?}, quiet_period={:?}, drain_timeout={:?})",
            crate::host::envoy_release::MODULE_VERSION,
            env.shared.envoy_minor().unwrap_or("unknown"),
            cfg.drain.min_drain_duration,
            cfg.drain.quiet_period,
            cfg.drain.drain_timeout
        );
        Some(Extension {
            env,
            store: Arc::new(StatsStore {
                source: Mutex::new(None),
                hidden: Default::default(),
                ignored_stat_prefixes: cfg.ignored_stat_prefixes,
                env,
            }),
            admin_address: cfg.admin_address,
            admin_found: Arc::new(Mutex::new(None)),
            engine: RefCell::new(Engine::new(cfg.lifecycle_log_level)),
            scanner: OnceLock::new(),
        })
    }

    /// Envoy created the extension (`Some`: its stats can be read) or destroys it (`None`: they
    /// no longer can). Waits for a pass under way.
    pub fn set_stats(&self, source: Option<Arc<dyn StatsSource>>) {
        *self.store.source() = source;
    }

    /// Every static resource exists now: say what a drain cannot do without the admin, check
    /// that `admin_address` is Envoy's admin (a wrong one would only show at the first drain),
    /// and start the scanner (its first pass measures what one costs here).
    pub fn on_server_initialized(&self) {
        if !self.admin_address.is_empty() {
            let addrs = self.admin_address.clone();
            let admin_found = self.admin_found.clone();
            let (shared, threads, envoy) = (self.env.shared, self.env.threads, self.env.envoy);
            let admin_host = self.env.admin;
            shared.set_admin_check(AdminCheck::Checking);
            let if_not = "admin_address is not checked";
            self.on_admin_thread("the admin_address check", if_not, move || {
                let wait = |d| threads.sleep(d);
                let (found, addr) = admin::check_admin_address(
                    admin_host,
                    &addrs,
                    ADMIN_CALL_TIMEOUT,
                    ADMIN_CHECK_ATTEMPTS,
                    wait,
                );
                *lock_or_recover(&admin_found) = addr;
                shared.set_admin_check(found);
                if found == AdminCheck::Recognised {
                    envoy.to_main_thread(EVENT_ADMIN_CHECKED);
                }
            });
        } else {
            let why = "admin_address is not set: a drain will not fail Envoy's health checks, so \
                       listeners without the graceful_drain filter send no connection away \
                       before the exit; set admin_address to the address of the bootstrap's \
                       `admin:` section";
            if self.env.shared.data_filter_loaded() {
                log::info!("graceful_drain: {why}");
            } else {
                log::warn!("graceful_drain: {why} (no graceful_drain filter is loaded)");
            }
        }
        self.scanner();
    }

    /// Envoy's own drain (`/drain_listeners`, a hot restart handing over) started.
    #[must_use]
    pub fn on_drain_started(&self) -> Option<ShutdownRelease> {
        self.with_engine(|e, h, s| e.on_envoy_drain_started(h, s))
    }

    /// SIGTERM (or SIGINT, `/quitquitquit`): hold Envoy's exit with `release` until the drain
    /// completes. Returns the release when it may be given at once.
    #[must_use]
    pub fn on_shutdown(&self, release: ShutdownRelease) -> Option<ShutdownRelease> {
        // Engine busy (cannot be, on the main thread): the release drops and Envoy exits.
        self.with_engine(|e, h, s| e.on_shutdown(h, s, release))
    }

    /// The engine failed while holding Envoy's exit: take the hold back, to give it now.
    pub fn take_pending_shutdown(&self) -> Option<ShutdownRelease> {
        self.engine.try_borrow_mut().ok()?.take_pending_shutdown()
    }

    /// `config_scheduled` with `event` (a kick, or the admin check's result) or the timer.
    #[must_use]
    pub fn on_event(&self, event: u64) -> Option<ShutdownRelease> {
        if event == EVENT_ADMIN_CHECKED {
            self.env.count_thread_panics();
            let ok = self.env.shared.admin_check() == AdminCheck::Recognised;
            self.env
                .envoy
                .set_gauge(Gauge::AdminAddressOk, u64::from(ok));
            return None;
        }
        self.with_engine(|_, _, _| {})
    }

    /// The extension's admin endpoints: status, body, and a release to give.
    pub fn on_admin(&self, method: &[u8], path: &[u8]) -> (u32, String, Option<ShutdownRelease>) {
        self.env.count_thread_panics();
        let Ok(mut engine) = self.engine.try_borrow_mut() else {
            return (503, "graceful_drain engine busy\n".into(), None);
        };
        let shared = self.env.shared;
        match AdminRequest::of(method, path) {
            AdminRequest::StartDrain => {
                // Idempotent: a second call reports the drain already under way.
                if shared.start_drain(self.hosts(), Trigger::Admin) == StartResult::NoEngine {
                    return (503, "graceful_drain engine not installed\n".into(), None);
                }
                let release = self.evaluate(&mut engine);
                (200, shared.status().to_json() + "\n", release)
            }
            AdminRequest::Status => (200, shared.status().to_json() + "\n", None),
            AdminRequest::Refused(code, body) => (code, body.into(), None),
        }
    }

    /// `config_destroy`: disarm a hold still pending (its completion must not be called from a
    /// destroy hook), close the gate, stop and join every module thread (bounded), log it.
    pub fn destroy(self) {
        if let Some(r) = self.take_pending_shutdown() {
            log::warn!("graceful_drain: extension destroyed with Envoy's exit still held");
            r.disarm();
        }
        // No module thread calls into Envoy from here on (already closed if the exit was
        // released); then every thread is told to end and joined, bounded.
        let threads = self.env.threads;
        threads.close();
        if let Some(Some(scanner)) = self.scanner.get() {
            scanner.stop();
        }
        let stopped = threads.join(THREAD_JOIN_BOUND);
        log::info!(
            "graceful_drain: module threads stopped ({} joined{}); calls into Envoy refused \
             after the exit was released: {:?}; made after it: {:?}",
            stopped.joined,
            if stopped.left.is_empty() {
                String::new()
            } else {
                format!(", still in a call and left: {:?}", stopped.left)
            },
            stopped.refused,
            stopped.late
        );
    }

    /// Run `start` on the engine (a drain's start, or nothing), then evaluate the drain.
    fn with_engine(
        &self,
        start: impl FnOnce(&mut Engine, Hosts<'static>, &Shared),
    ) -> Option<ShutdownRelease> {
        let mut engine = self.engine.try_borrow_mut().ok()?;
        start(&mut engine, self.hosts(), self.env.shared);
        self.evaluate(&mut engine)
    }

    /// Evaluate the drain, then do what the engine asked of the extension; returns Envoy's
    /// shutdown release when the drain completed with SIGTERM waiting on it.
    fn evaluate(&self, engine: &mut Engine) -> Option<ShutdownRelease> {
        self.env.count_thread_panics();
        let shared = self.env.shared;
        // Envoy's stats are read only during a drain (the first view of one plans the scans).
        let envoy = if shared.is_draining() {
            self.envoy_view()
        } else {
            EnvoyView::Unused
        };
        let asks = engine.evaluate(self.hosts(), shared, envoy);
        if asks.tell_connections {
            self.tell_connections();
        }
        if asks.fail_health_checks {
            self.fail_health_checks();
        }
        asks.release
    }

    /// The Envoy objects the engine reaches: the extension (timer, gauges, kick), the streams'
    /// wakers.
    fn hosts(&self) -> Hosts<'static> {
        Hosts {
            streams: self.env.streams,
            extension: self.env.envoy,
        }
    }

    /// The engine asked: tell the network filters' connections that the drain started (idle
    /// ones told now, the grace and moves threads started).
    fn tell_connections(&self) {
        #[cfg(feature = "panic-test")]
        if crate::runtime::faults::active("skip_wakeup") {
            // Test-only: the lost wake-up `Shared::start_drain` plants loses this one too.
            return;
        }
        let env = self.env;
        let c = env.shared.connections();
        c.drain_started(env.threads, env.connections);
        if let Some(s) = env.shared.settings() {
            c.moves_started(
                env.threads,
                env.connections,
                env.shared.clock(),
                s.min_drain_duration,
                s.drain_timeout,
            );
        }
    }

    /// The engine asked: make Envoy fail its health checks, through its admin, on a thread of
    /// its own.
    fn fail_health_checks(&self) {
        // The address the start-time check recognised; without one (the check not done, or
        // nothing recognised), every configured one (a wrong one just fails to connect).
        let found = lock_or_recover(&self.admin_found).clone();
        let targets: Vec<AdminAddress> = match found {
            Some(a) => vec![a],
            None => self.admin_address.clone(),
        };
        if targets.is_empty() {
            return;
        }
        let addr = targets
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        // Envoy's health checks fail (every listener then drain-closes with its next response),
        // and Envoy's own drain state starts too, so its `/ready` says DRAINING like ours.
        // `skip_exit`: the listeners keep accepting; the exit stays the engine's decision.
        // On a thread of its own: the main thread never waits for the admin.
        log::info!(
            "graceful_drain: admin POST /healthcheck/fail and /drain_listeners?graceful&skip_exit \
             to {addr}"
        );
        let if_not = "Envoy's health checks stay as they are";
        let (threads, admin_host) = (self.env.threads, self.env.admin);
        self.on_admin_thread("the drain start's admin calls", if_not, move || {
            #[cfg(feature = "panic-test")]
            if crate::runtime::faults::active("admin_panic") {
                panic!("test fault: admin_panic");
            }
            for target in &targets {
                admin::post_drain_start_calls(admin_host, target, ADMIN_CALL_TIMEOUT, || {
                    !threads.is_stopping()
                });
            }
        });
    }

    /// Start the stats scanner (once; its first scan measures what a scan costs here).
    fn scanner(&self) -> Option<&Scanner> {
        self.scanner
            .get_or_init(
                || match Scanner::start(self.env.threads, self.store.clone()) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        log::error!(
                            "graceful_drain: no thread for reading Envoy's stats ({e}): listeners \
                             without the filter cannot be followed; a drain without the filter \
                             then waits for drain_timeout"
                        );
                        None
                    }
                },
            )
            .as_ref()
    }

    /// What Envoy's stats say during a drain, from the scanner's last result (never scans here).
    fn envoy_view(&self) -> EnvoyView {
        let shared = self.env.shared;
        let Phase::Draining { started_at, .. } = shared.phase() else {
            return EnvoyView::Unused;
        };
        let d = DrainTiming::of(
            started_at,
            shared.settings().unwrap_or_default(),
            shared.count_is_exact(),
        );
        match self.scanner() {
            Some(s) => s.view(d, shared.counts()),
            // No thread to read them: nothing shows what the filter does not see; hold until
            // drain_timeout (logged when the thread could not be made).
            None => EnvoyView::Pending,
        }
    }

    /// Run `calls` on a thread of its own (Envoy's main thread never waits for the admin). A
    /// panic there is contained, counted in `module_errors` and logged; a thread that cannot be
    /// made is logged with `if_not`, what that means.
    fn on_admin_thread(
        &self,
        what: &'static str,
        if_not: &'static str,
        calls: impl FnOnce() + Send + 'static,
    ) {
        let env = self.env;
        let body = move || {
            // Contained here too, so the log names what panicked.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(calls)).is_err() {
                log::error!("graceful_drain: panic contained in {what}");
                env.count_module_error();
            }
        };
        let spawned = self.env.threads.spawn("graceful_admin", body);
        if let Err(e) = spawned {
            log::warn!("graceful_drain: no thread for {what} ({e}); {if_not}");
        }
    }
}

/// Drive the engine from a plain thread when Envoy could not give it a timer: kicks it (through
/// the thread-safe scheduler) at the in-flight recheck interval while a drain is under way.
fn start_fallback_ticker(env: Env) {
    let threads = env.threads;
    let spawned = threads.spawn("graceful_drain_tick", move || {
        while threads.sleep(IN_FLIGHT_RECHECK) {
            if env.shared.is_draining() {
                env.kick();
            }
        }
    });
    if let Err(e) = spawned {
        log::error!(
            "graceful_drain: no timer and no fallback thread ({e}): drains cannot complete"
        );
    }
}

#[cfg(test)]
mod tests;
