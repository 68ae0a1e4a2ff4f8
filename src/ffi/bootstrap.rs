//! Exported bootstrap-extension hooks (all 17 are required by Envoy 1.40) and the [`EngineHost`]
//! implementation. Everything here runs on Envoy's main thread, except `kick_engine`, which any
//! thread may call, and the stats scans, which run on the module's scanner thread
//! ([`crate::stats_scan`]).

use super::abi::{self, Buffer, EnvoyPtr, HttpHeader};
use super::{define_metric, envoy_bytes, guard, module_buffer, DefineMetric};
use crate::admin::{self, AdminAddress, AdminCheck};
use crate::bootstrap::{
    Engine, EngineHost, EngineMetric, ShutdownRelease, ADMIN_DRAIN_PATH, ADMIN_STATUS_PATH,
};
use crate::config::BootstrapConfig;
use crate::drain::{Phase, IN_FLIGHT_RECHECK};
use crate::registry::Counts;
use crate::state::Shared;
use crate::stats_scan::{DrainTiming, EnvoyView, Pass, ScanSource, Scanner, StatSums};
use std::cell::RefCell;
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const EVENT_KICK: u64 = 1;
/// The admin_address check finished: publish its result (the gauge is set on the main thread).
const EVENT_ADMIN_CHECKED: u64 = 2;

/// The bootstrap scheduler used to hop onto the main thread; 0 when no engine is loaded. Read
/// only inside the threads' gate: config_destroy closes the gate (waiting for a commit under way)
/// before it clears this and deletes the scheduler, so no commit can race the delete, whatever
/// thread kicks. No lock is held across the commit (it may run a destroy hook on this thread).
static KICK_SCHEDULER: AtomicUsize = AtomicUsize::new(0);

/// Ask the engine to evaluate the drain now, from any thread.
pub(crate) fn kick_engine() {
    to_main_thread(EVENT_KICK)
}

/// Run `config_scheduled` with `event` on Envoy's main thread, from any thread.
fn to_main_thread(event: u64) {
    super::threads().call("engine_kick", || {
        let s = KICK_SCHEDULER.load(Ordering::Acquire);
        if s != 0 {
            // SAFETY: the scheduler is alive while stored here and the gate is open (see
            // KICK_SCHEDULER); commit itself is thread-safe (a dispatcher post).
            unsafe {
                abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(
                    s as *mut c_void,
                    event,
                )
            }
        }
    });
}

struct Metrics {
    draining: usize,
    admin_address_ok: usize,
    drains_started: usize,
    drains_completed: usize,
    drains_timed_out: usize,
}

struct Extension {
    envoy: EnvoyPtr,
    /// The stats store as the scanner reads it; its extension pointer (`be`) is set in
    /// `bootstrap_extension_new`.
    store: Arc<StatsStore>,
    admin_address: Option<AdminAddress>,
    timer: *mut c_void,
    scheduler: *mut c_void,
    metrics: Option<Metrics>,
    engine: RefCell<Engine>,
    /// Reads Envoy's stats on its own thread; started when the server has initialised.
    scanner: OnceLock<Option<Scanner>>,
}

/// The stats iterator: each stat Envoy visits goes to the [`StatSums`] behind `user_data`.
extern "C" fn add_matching_stat(name: Buffer, value: u64, user_data: *mut c_void) -> u32 {
    guard("stat iterator", 0, || {
        // SAFETY: user_data is the StatSums passed to the iterate call below, alive during it;
        // the name buffer is valid for this callback.
        let (acc, name) = unsafe { (&mut *(user_data as *mut StatSums), envoy_bytes(name)) };
        acc.add(name, value);
        0
    })
}

/// Whether a data-role HTTP filter config was ever loaded (filter mode): the module then counts
/// requests itself, exactly, and Envoy's stats are only a cross-check for other listeners.
static DATA_FILTER_LOADED: AtomicBool = AtomicBool::new(false);

/// Called by the HTTP filter's config_new for the data role.
pub(crate) fn note_data_filter_loaded() {
    DATA_FILTER_LOADED.store(true, Ordering::Relaxed);
}

/// Envoy's stats store as the scanner thread reads it. The extension pointer (`be`) is held
/// locked for the whole of a scan, and cleared under the same lock when Envoy destroys the
/// extension, so a scan never outlives the pointer.
struct StatsStore {
    extension: Mutex<usize>,
    ignored_stat_prefixes: Vec<String>,
}

impl StatsStore {
    fn extension(&self) -> std::sync::MutexGuard<'_, usize> {
        self.extension.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Set (or, with null, forget) Envoy's extension pointer; waits for a scan under way.
    fn set_extension(&self, be: EnvoyPtr) {
        *self.extension() = be as usize;
    }

    /// `None` once the exit was released (the gate refuses calls into Envoy).
    fn sum_stats(&self, be: EnvoyPtr, pass: Pass) -> Option<StatSums<'_>> {
        let mut acc = StatSums::new(pass, &self.ignored_stat_prefixes);
        let gauges = pass == Pass::Gauges;
        let ud = &mut acc as *mut StatSums as *mut c_void;
        // SAFETY: `be` is the live extension pointer (the caller holds the lock that destroy
        // takes before it goes); the iterator only runs during the call, while `acc` is alive.
        // Envoy's iteration holds its stats allocator's mutex, so it is safe off the main thread.
        super::threads().call("stats_scan", || unsafe {
            if gauges {
                abi::envoy_dynamic_module_callback_bootstrap_extension_iterate_gauges(
                    be,
                    add_matching_stat,
                    ud,
                )
            } else {
                abi::envoy_dynamic_module_callback_bootstrap_extension_iterate_counters(
                    be,
                    add_matching_stat,
                    ud,
                )
            }
        })?;
        Some(acc)
    }
}

impl ScanSource for Arc<StatsStore> {
    fn scan(&self, pass: Pass) -> Option<u64> {
        let be = self.extension();
        if *be == 0 {
            return None;
        }
        let be_ptr = *be as EnvoyPtr;
        let sums = self.sum_stats(be_ptr, pass)?;
        drop(be);
        // Less what the module knows is not work (health checks it recognised, requests to its
        // control listeners such as a waiting /drain), taken at the same moment as the pass.
        Some(sums.total_less(super::shared().counters.not_work()))
    }

    fn own_counts(&self) -> Counts {
        super::shared().requests.counts()
    }

    fn draining(&self) -> bool {
        matches!(super::shared().phase(), Phase::Draining { .. })
    }

    fn scanned(&self) {
        kick_engine();
    }
}

impl Extension {
    /// Start the stats scanner (once; its first scan measures what a scan costs here).
    fn scanner(&self) -> Option<&Scanner> {
        self.scanner
            .get_or_init(
                || match Scanner::start(super::threads(), self.store.clone()) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        log::error!(
                            "graceful_drain: no thread for reading Envoy's stats ({e}): listeners \
                         without the filter cannot be followed; a drain without the filter then \
                         waits for drain_timeout"
                        );
                        None
                    }
                },
            )
            .as_ref()
    }

    /// What Envoy's stats say during a drain, from the scanner's last result (never scans here).
    fn envoy_view(&self) -> EnvoyView {
        let shared = super::shared();
        let Phase::Draining { started_at, .. } = shared.phase() else {
            return EnvoyView::Unused;
        };
        let d = DrainTiming::of(
            started_at,
            shared.settings().unwrap_or_default(),
            DATA_FILTER_LOADED.load(Ordering::Relaxed),
        );
        match self.scanner() {
            Some(s) => s.view(d, shared.requests.counts()),
            None if d.filter_loaded => EnvoyView::Unused,
            None => EnvoyView::Pending,
        }
    }

    /// Main thread only (the config pointer is Envoy's, alive until config_destroy).
    fn set_gauge(&self, id: usize, value: u64) {
        // SAFETY: config pointer alive until config_destroy; stats are atomic.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(
                self.envoy,
                id,
                ptr::null_mut(),
                0,
                value,
            );
        }
    }
}

impl EngineHost for Extension {
    fn envoy_request_stats(&self) -> EnvoyView {
        self.envoy_view()
    }

    fn fail_health_checks(&self) {
        let Some(addr) = self.admin_address.clone() else {
            return;
        };
        // Envoy's health checks fail (every listener then drain-closes with its next response),
        // and Envoy's own drain state starts too, so its `/ready` says DRAINING like ours.
        // `skip_exit`: the listeners keep accepting; the exit stays the engine's decision.
        // On a thread of its own: the main thread never waits for the admin.
        log::info!(
            "graceful_drain: admin POST /healthcheck/fail and /drain_listeners?graceful&skip_exit \
             to {addr}"
        );
        let if_not = "Envoy's health checks stay as they are";
        on_admin_thread("the drain start's admin calls", if_not, move || {
            #[cfg(feature = "panic-test")]
            if crate::faults::active("admin_panic") {
                panic!("test fault: admin_panic");
            }
            admin::post_drain_start_calls(&addr, ADMIN_CALL_TIMEOUT);
        });
    }

    fn arm_timer(&self, delay: Duration) {
        // Round up so the timer never fires before the deadline (then a useless poll re-arms).
        let ms = delay.as_nanos().div_ceil(1_000_000).max(1) as u64;
        if !self.timer.is_null() {
            // SAFETY: main thread; the timer lives until config_destroy.
            unsafe {
                abi::envoy_dynamic_module_callback_bootstrap_extension_timer_enable(self.timer, ms)
            }
        }
    }

    fn set_draining_gauge(&self, value: u64) {
        if let Some(m) = &self.metrics {
            self.set_gauge(m.draining, value);
        }
    }

    fn count(&self, metric: EngineMetric) {
        if let Some(m) = &self.metrics {
            let id = match metric {
                EngineMetric::DrainStarted => m.drains_started,
                EngineMetric::DrainCompleted => m.drains_completed,
                EngineMetric::DrainTimedOut => m.drains_timed_out,
            };
            // SAFETY: as above.
            unsafe {
                abi::envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(
                    self.envoy,
                    id,
                    ptr::null_mut(),
                    0,
                    1,
                );
            }
        }
    }
}

/// How long config_destroy waits for the module's threads to end (one in a socket call to the
/// admin may take up to [`ADMIN_CALL_TIMEOUT`]; it is left behind the closed gate then).
const THREAD_JOIN_BOUND: Duration = Duration::from_secs(1);

/// Bounds each admin call as a whole (connect, write and reads).
const ADMIN_CALL_TIMEOUT: Duration = Duration::from_secs(2);

fn define_metrics(bce: EnvoyPtr) -> Option<Metrics> {
    let gauge =
        abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge as DefineMetric;
    let counter = abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_counter
        as DefineMetric;
    // SAFETY: called from config_new with Envoy's config pointer.
    let define = |name: &str, gauge_kind: bool| unsafe {
        define_metric(if gauge_kind { gauge } else { counter }, bce, name)
    };
    Some(Metrics {
        draining: define("draining", true)?,
        admin_address_ok: define("admin_address_ok", true)?,
        drains_started: define("drains_started", false)?,
        drains_completed: define("drains_completed", false)?,
        drains_timed_out: define("drains_timed_out", false)?,
    })
}

fn register_admin(bce: EnvoyPtr, path: &[u8], help: &str, mutates: bool) {
    // SAFETY: inside config_new on the main thread; buffers live for the call.
    let ok = unsafe {
        abi::envoy_dynamic_module_callback_bootstrap_extension_register_admin_handler(
            bce,
            module_buffer(path),
            module_buffer(help.as_bytes()),
            false,
            mutates,
        )
    };
    if !ok {
        log::warn!(
            "graceful_drain: could not register admin handler {}",
            String::from_utf8_lossy(path)
        );
    }
}

/// # Safety
/// `bcm` must be the pointer returned by config_new and not yet destroyed.
unsafe fn extension<'a>(bcm: *const c_void) -> Option<&'a Extension> {
    // SAFETY: per the contract.
    unsafe { (bcm as *const Extension).as_ref() }
}

/// Run an engine operation, then give Envoy its shutdown release (if the operation returned one)
/// with no borrow held. Returns false if the operation panicked (contained).
fn with_engine(
    hook: &'static str,
    bcm: *const c_void,
    f: impl FnOnce(&mut Engine, &Extension, &Shared) -> Option<ShutdownRelease>,
) -> bool {
    let mut panicked = true;
    let release = guard(hook, None, || {
        // SAFETY: Envoy passes back our config/extension pointer (they are the same object).
        let ext = unsafe { extension(bcm) };
        let r = ext.and_then(|ext| {
            let mut engine = ext.engine.try_borrow_mut().ok()?;
            f(&mut engine, ext, super::shared())
        });
        panicked = false;
        r
    });
    if let Some(release) = release {
        guard("shutdown release", (), || release.release());
    }
    !panicked
}

/// Drive the engine from a plain thread when Envoy could not give it a timer: kicks it (through
/// the thread-safe scheduler) at the in-flight recheck interval while a drain is under way.
fn start_fallback_ticker() {
    let threads = super::threads();
    let spawned = threads.spawn("graceful_drain_tick", super::count_module_error, || {
        while threads.sleep(IN_FLIGHT_RECHECK) {
            if super::shared().is_draining() {
                kick_engine();
            }
        }
    });
    if let Err(e) = spawned {
        log::error!(
            "graceful_drain: no timer and no fallback thread ({e}): drains cannot complete"
        );
    }
}

// ---- exported hooks --------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_new(
    bce: EnvoyPtr,
    _name: Buffer,
    config: Buffer,
) -> *const c_void {
    guard("bootstrap_config_new", ptr::null(), || {
        // SAFETY: config bytes are valid for this call.
        let raw = unsafe { envoy_bytes(config) };
        let cfg = match BootstrapConfig::parse(raw) {
            Ok(c) => c,
            Err(e) => {
                log::error!("{e}");
                return ptr::null();
            }
        };
        let shared = super::shared();
        shared.install_policy(cfg.requests.clone());
        if cfg.admin_address.is_some() && !cfg.ignored_stat_prefixes.iter().any(|p| p == "admin") {
            log::warn!(
                "graceful_drain: ignored_stat_prefixes does not contain \"admin\": every request to \
                 Envoy's admin (metrics scrapes) will count as traffic and can hold drains until \
                 drain_timeout"
            );
        }
        if !shared.install_engine(cfg.drain) {
            log::error!(
                "invalid graceful_drain bootstrap config: field `extension_name`: the graceful_drain \
                 bootstrap extension is configured twice; keep one entry"
            );
            return ptr::null();
        }
        // SAFETY: main thread, inside config_new with Envoy's config pointer.
        #[allow(unused_mut)] // reassigned by a test fault
        let (mut timer, scheduler) = unsafe {
            (
                abi::envoy_dynamic_module_callback_bootstrap_extension_timer_new(bce),
                abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new(bce),
            )
        };
        #[cfg(feature = "panic-test")]
        if crate::faults::active("no_timer") && !timer.is_null() {
            // SAFETY: main thread; the timer was just created and is deleted once.
            unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_timer_delete(timer) };
            timer = ptr::null_mut();
        }
        if scheduler.is_null() {
            log::error!(
                "graceful_drain: Envoy gave no scheduler: the engine cannot be woken from workers"
            );
        }
        let ext = Box::new(Extension {
            envoy: bce,
            store: Arc::new(StatsStore {
                extension: Mutex::new(0),
                ignored_stat_prefixes: cfg.ignored_stat_prefixes.clone(),
            }),
            admin_address: cfg.admin_address.clone(),
            timer,
            scheduler,
            metrics: define_metrics(bce),
            engine: RefCell::new(Engine::default()),
            scanner: OnceLock::new(),
        });
        KICK_SCHEDULER.store(scheduler as usize, Ordering::Release);
        if timer.is_null() {
            log::error!(
                "graceful_drain: Envoy gave no timer; the drain clock runs on a fallback thread"
            );
            start_fallback_ticker();
        }
        register_admin(
            bce,
            ADMIN_DRAIN_PATH,
            "graceful_drain: start a graceful drain (same as SIGTERM, without exiting)",
            true,
        );
        register_admin(
            bce,
            ADMIN_STATUS_PATH,
            "graceful_drain: drain status as JSON",
            false,
        );
        log::info!(
            "graceful_drain: drain engine loaded (min_drain_duration={:?}, quiet_period={:?}, \
             drain_timeout={:?})",
            cfg.drain.min_drain_duration,
            cfg.drain.quiet_period,
            cfg.drain.drain_timeout
        );
        // Without this Envoy stays INITIALIZING and binds no listener.
        // SAFETY: main thread, valid config pointer.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(bce)
        };
        Box::into_raw(ext) as *const c_void
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_destroy(bcm: *const c_void) {
    guard("bootstrap_config_destroy", (), || {
        if bcm.is_null() {
            return;
        }
        // SAFETY: created by Box::into_raw in config_new; destroyed once, on the main thread.
        let ext = unsafe { Box::from_raw(bcm as *mut Extension) };
        // A hold still pending is disarmed: Envoy is destroying the extension, so its
        // completion must not be called from in here.
        if let Some(r) = ext
            .engine
            .try_borrow_mut()
            .ok()
            .and_then(|mut e| e.take_pending_shutdown())
        {
            log::warn!("graceful_drain: extension destroyed with Envoy's exit still held");
            r.disarm();
        }
        // No module thread calls into Envoy from here on (already closed if the exit was
        // released); then every thread is told to end and joined, bounded.
        let threads = super::threads();
        threads.close();
        if let Some(Some(scanner)) = ext.scanner.get() {
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
        KICK_SCHEDULER.store(0, Ordering::Release);
        if crate::threads::Threads::on_module_thread() {
            // Run inside a module thread's commit (Envoy dropped its last reference there):
            // timer_delete must run on the main thread, so both are left to the exit.
            log::warn!("graceful_drain: engine config destroyed off the main thread");
            return;
        }
        // SAFETY: main thread (timer_delete asserts it); each deleted once.
        unsafe {
            if !ext.timer.is_null() {
                abi::envoy_dynamic_module_callback_bootstrap_extension_timer_delete(ext.timer);
            }
            if !ext.scheduler.is_null() {
                abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete(
                    ext.scheduler,
                );
            }
        }
    })
}

/// The extension object is the config object: one engine per process.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_new(
    bcm: *const c_void,
    be: EnvoyPtr,
) -> *const c_void {
    guard("bootstrap_extension_new", (), || {
        // SAFETY: `bcm` is our config from config_new.
        if let Some(ext) = unsafe { extension(bcm) } {
            ext.store.set_extension(be);
        }
    });
    bcm
}

/// Run `calls` on a thread of its own (Envoy's main thread never waits for the admin). A panic
/// there is contained, counted in `module_errors` and logged; a thread that cannot be made is
/// logged with `if_not`, what that means.
fn on_admin_thread(
    what: &'static str,
    if_not: &'static str,
    calls: impl FnOnce() + Send + 'static,
) {
    // Guarded here too, so the log names what panicked.
    let body = move || {
        if !super::guard(what, false, || {
            calls();
            true
        }) {
            super::count_module_error();
        }
    };
    let spawned = super::threads().spawn("graceful_admin", super::count_module_error, body);
    if let Err(e) = spawned {
        log::warn!("graceful_drain: no thread for {what} ({e}); {if_not}");
    }
}

/// Every static resource exists now: say what a drain cannot do without the admin, and check
/// that `admin_address` is Envoy's admin (a wrong address would only show at the first drain).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_server_initialized(
    _be: EnvoyPtr,
    bm: *const c_void,
) {
    guard("server_initialized", (), || {
        // SAFETY: `bm` is our object from config_new.
        let Some(ext) = (unsafe { extension(bm) }) else {
            return;
        };
        if let Some(addr) = ext.admin_address.clone() {
            super::shared()
                .counters
                .set_admin_check(AdminCheck::Checking);
            let if_not = "admin_address is not checked";
            on_admin_thread("the admin_address check", if_not, move || {
                check_admin(&addr)
            });
        } else {
            let why = "admin_address is not set: a drain will not fail Envoy's health checks, so \
                       listeners without the graceful_drain filter send no connection away \
                       before the exit; set admin_address to the address of the bootstrap's \
                       `admin:` section";
            if DATA_FILTER_LOADED.load(Ordering::Relaxed) {
                log::info!("graceful_drain: {why}");
            } else {
                log::warn!("graceful_drain: {why} (no graceful_drain filter is loaded)");
            }
        }
        // Off the main thread from here on: the first scan measures what one costs.
        ext.scanner();
    })
}

/// How many times, one second apart, the admin_address check tries to get an answer before it
/// warns (the admin may still be coming up when the server is initialized).
const ADMIN_CHECK_ATTEMPTS: u32 = 3;

fn check_admin(addr: &AdminAddress) {
    let wait = |d| super::threads().sleep(d);
    let found = admin::check_admin_address(addr, ADMIN_CALL_TIMEOUT, ADMIN_CHECK_ATTEMPTS, wait);
    super::shared().counters.set_admin_check(found);
    if found == AdminCheck::Recognised {
        to_main_thread(EVENT_ADMIN_CHECKED);
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_worker_thread_initialized(
    _be: EnvoyPtr,
    _bm: *const c_void,
) {
}

/// The object itself is freed in config_destroy (the extension and config are one object); from
/// here on Envoy's extension pointer is gone, so forget it (stats reads then report nothing).
/// Taking the store's lock waits for a scan under way on the scanner thread.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_destroy(bm: *const c_void) {
    guard("bootstrap_extension_destroy", (), || {
        // No kick commits from here on: the extension still holds a reference to the config, so
        // no commit under way can be the last holder and run config_destroy inside itself
        // (ENVOY_FACTS.md §1); config_destroy's gate close waits for one under way.
        KICK_SCHEDULER.store(0, Ordering::Release);
        // SAFETY: `bm` is our object, alive until config_destroy.
        if let Some(ext) = unsafe { extension(bm) } {
            ext.store.set_extension(ptr::null_mut());
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_drain_started(
    _be: EnvoyPtr,
    bm: *const c_void,
) {
    with_engine("drain_started", bm, |engine, ext, shared| {
        engine.on_envoy_drain_started(ext, shared)
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_shutdown(
    _be: EnvoyPtr,
    bm: *const c_void,
    completion: Option<extern "C" fn(*mut c_void)>,
    context: *mut c_void,
) {
    // Every line guarded: a panic anywhere drops the release during the unwind, and its drop
    // gives Envoy its exit (never a hang until SIGKILL).
    guard("shutdown", (), || shutdown(bm, completion, context))
}

fn shutdown(
    bm: *const c_void,
    completion: Option<extern "C" fn(*mut c_void)>,
    context: *mut c_void,
) {
    let Some(completion) = completion else {
        log::warn!("graceful_drain: shutdown without a completion callback; cannot hold the exit");
        return;
    };
    // The gate closes first: no module thread calls into Envoy once it may tear down.
    let release = ShutdownRelease::new(move || {
        super::threads().close();
        completion(context)
    });
    let mut release_slot = Some(release);
    let ok = with_engine("shutdown", bm, |engine, ext, shared| {
        let release = release_slot.take()?;
        engine.on_shutdown(ext, shared, release)
    });
    if !ok {
        // The engine failed after taking Envoy's completion: give it back now rather than hold
        // Envoy until SIGKILL (a drain we cannot run must not turn into a hang).
        log::error!("graceful_drain: SIGTERM handling failed; letting Envoy exit now");
        // SAFETY: as in with_engine.
        if let Some(ext) = unsafe { extension(bm) } {
            if let Some(r) = ext
                .engine
                .try_borrow_mut()
                .ok()
                .and_then(|mut e| e.take_pending_shutdown())
            {
                guard("shutdown release", (), || r.release());
            }
        }
    }
    // If the engine never took it (no extension), never hold Envoy: the drop releases it.
    drop(release_slot);
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_scheduled(
    _bce: EnvoyPtr,
    bcm: *const c_void,
    event_id: u64,
) {
    with_engine("config_scheduled", bcm, |engine, ext, shared| {
        if event_id == EVENT_ADMIN_CHECKED {
            if let Some(m) = &ext.metrics {
                let ok = shared.counters.admin_check() == AdminCheck::Recognised;
                ext.set_gauge(m.admin_address_ok, u64::from(ok));
            }
            return None;
        }
        engine.evaluate(ext, shared)
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_timer_fired(
    _bce: EnvoyPtr,
    bcm: *const c_void,
    _timer: *mut c_void,
) {
    with_engine("timer_fired", bcm, |engine, ext, shared| {
        engine.evaluate(ext, shared)
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_admin_request(
    bce: EnvoyPtr,
    bcm: *const c_void,
    method: Buffer,
    path: Buffer,
    _body: Buffer,
) -> u32 {
    let mut status = 500;
    with_engine("admin_request", bcm, |engine, ext, shared| {
        // SAFETY: Envoy's buffers are valid for this call.
        let (method, path) = unsafe { (envoy_bytes(method), envoy_bytes(path)) };
        let (code, body, release) = engine.on_admin(ext, shared, method, path);
        status = code;
        // SAFETY: inside admin_request; Envoy copies the body.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_admin_set_response(
                bce,
                module_buffer(body.as_bytes()),
            )
        };
        release
    });
    status
}

// ---- hooks Envoy 1.40 requires but this module does not use ----------------------------------

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_http_callout_done(
    _bce: EnvoyPtr,
    _bcm: *const c_void,
    _callout_id: u64,
    _result: u32,
    _headers: *const HttpHeader,
    _headers_len: usize,
    _body: *const Buffer,
    _body_len: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_file_changed(
    _bce: EnvoyPtr,
    _bcm: *const c_void,
    _path: Buffer,
    _events: u32,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_cluster_add_or_update(
    _bce: EnvoyPtr,
    _bcm: *const c_void,
    _name: Buffer,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_cluster_removal(
    _bce: EnvoyPtr,
    _bcm: *const c_void,
    _name: Buffer,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_listener_add_or_update(
    _bce: EnvoyPtr,
    _bcm: *const c_void,
    _name: Buffer,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_listener_removal(
    _bce: EnvoyPtr,
    _bcm: *const c_void,
    _name: Buffer,
) {
}
