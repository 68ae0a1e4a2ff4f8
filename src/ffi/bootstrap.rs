//! Exported bootstrap-extension hooks (all 17 are required by Envoy 1.40) and the [`EngineHost`]
//! implementation. Everything here runs on Envoy's main thread, except [`kick_engine`], which any
//! thread may call.

use super::abi::{self, Buffer, EnvoyPtr, HttpHeader};
use super::{define_metric, envoy_bytes, guard, module_buffer, module_headers, DefineMetric};
use crate::bootstrap::{
    Engine, EngineHost, EngineMetric, EnvoyRequestStats, ShutdownRelease, ADMIN_DRAIN_PATH,
    ADMIN_STATUS_PATH,
};
use crate::config::BootstrapConfig;
use crate::drain::{Phase, IN_FLIGHT_RECHECK};
use crate::http_filter::ADMIN_KEY_HEADER;
use crate::registry::Counts;
use crate::state::Shared;
use std::cell::{Cell, RefCell};
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const EVENT_KICK: u64 = 1;

/// The bootstrap scheduler used to hop onto the main thread; 0 when no engine is loaded. A lock,
/// not an atomic: a kick (rare: drain start, fallback ticks) commits while holding it, and
/// config_destroy clears it under the lock before deleting the scheduler, so no commit can race
/// the delete, whatever thread kicks.
static KICK_SCHEDULER: Mutex<usize> = Mutex::new(0);

fn kick_scheduler() -> std::sync::MutexGuard<'static, usize> {
    KICK_SCHEDULER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ask the engine to evaluate the drain now, from any thread.
pub(crate) fn kick_engine() {
    let s = kick_scheduler();
    if *s != 0 {
        // SAFETY: the scheduler is alive while it is stored here (cleared under this lock before
        // it is deleted); commit itself is thread-safe (a dispatcher post).
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(
                *s as *mut c_void,
                EVENT_KICK,
            )
        }
    }
}

struct Metrics {
    draining: usize,
    drains_started: usize,
    drains_completed: usize,
    drains_timed_out: usize,
}

struct Extension {
    envoy: EnvoyPtr,
    /// The extension pointer (`be`), needed by the stats reads; set in `bootstrap_extension_new`.
    extension: Cell<EnvoyPtr>,
    admin_cluster: String,
    ignored_stat_prefixes: Vec<String>,
    timer: *mut c_void,
    scheduler: *mut c_void,
    metrics: Option<Metrics>,
    engine: RefCell<Engine>,
    envoy_stats: RefCell<EnvoyStatsCache>,
}

/// Sums of `http.<prefix>.<suffix>` stats over HTTP connection managers not ignored, one per
/// suffix, in one pass over the store.
struct StatSum<'a> {
    suffixes: &'a [&'a str],
    ignored: &'a [String],
    sums: [u64; 2],
}

extern "C" fn add_matching_stat(name: Buffer, value: u64, user_data: *mut c_void) -> u32 {
    guard("stat iterator", 0, || {
        // SAFETY: user_data is the StatSum passed to the iterate call below, alive during it;
        // the name buffer is valid for this callback.
        let (acc, name) = unsafe { (&mut *(user_data as *mut StatSum), envoy_bytes(name)) };
        let Some(rest) = name.strip_prefix(b"http.") else {
            return 0;
        };
        for (i, suffix) in acc.suffixes.iter().enumerate() {
            let Some(prefix) = rest
                .strip_suffix(suffix.as_bytes())
                .and_then(|n| n.strip_suffix(b"."))
            else {
                continue;
            };
            if !acc.ignored.iter().any(|i| i.as_bytes() == prefix) {
                acc.sums[i] = acc.sums[i].saturating_add(value);
            }
        }
        0
    })
}

/// The share of Envoy's main thread the stats scans may take while a drain is under way, in
/// percent. The ABI has no cheap read of one stat: `iterate_*` and `get_*_value` (by name) both
/// walk the whole stats store, whose size grows with the configuration (about 100 stats per
/// cluster: one scan costs ~1.2 s at 5 000 clusters).
const SCAN_SHARE_PERCENT: u32 = 3;
/// The share allowed while the last scan saw requests on listeners without the filter: only a
/// scan can tell when they end (or that new ones stopped arriving).
const BUSY_SCAN_SHARE_PERCENT: u32 = 20;

/// Whether a data-role HTTP filter config was ever loaded (filter mode): the module then counts
/// requests itself, exactly, and Envoy's stats are only a cross-check for other listeners.
static DATA_FILTER_LOADED: AtomicBool = AtomicBool::new(false);

/// Called by the HTTP filter's config_new for the data role.
pub(crate) fn note_data_filter_loaded() {
    DATA_FILTER_LOADED.store(true, Ordering::Relaxed);
}

/// Envoy's request stats as the engine sees them, at a cost bounded by a share of the main
/// thread whatever the size of the configuration.
///
/// A scan keeps only what Envoy sees *beyond* the module's own exact counts: requests in flight
/// and requests started on listeners without the filter. Between scans the engine gets the
/// module's live counts plus that excess, so with the filter on every listener a drain completes
/// the moment its last request ends, however old the scan. Each scan is timed and the next waits
/// until scans take at most [`SCAN_SHARE_PERCENT`] of the main thread ([`BUSY_SCAN_SHARE_PERCENT`]
/// while requests without the filter are seen); small gateways scan every [`IN_FLIGHT_RECHECK`],
/// as before. When the filter is loaded, the first scan of a drain also waits for its share,
/// measured on the scan taken once at startup, so a large filter-mode gateway does not stall its
/// main thread at drain start. Requests on listeners without the filter are seen within one scan
/// interval, and a scan is timed to end when the drain could first complete.
#[derive(Debug, Default)]
struct EnvoyStatsCache {
    /// Excess in flight and excess started at the last scan; `None` before the first one.
    excess: Option<(u64, u64)>,
    next_scan_at: Option<Instant>,
    /// Cost of the scan taken when the server finished starting.
    calibration: Option<Duration>,
    /// The first scan of the drain was put off by one dispatcher turn (see `envoy_stats_cached`).
    deferred: bool,
}

/// What the cache needs to know about the drain.
#[derive(Debug, Clone, Copy)]
struct DrainTiming {
    started: Instant,
    /// The earliest instant at which the drain may complete (minimum duration, quiet period).
    earliest_completion: Instant,
    filter_loaded: bool,
}

impl EnvoyStatsCache {
    fn due(&mut self, now: Instant, d: DrainTiming) -> bool {
        let at = *self
            .next_scan_at
            .get_or_insert_with(|| match self.calibration {
                Some(c) if d.filter_loaded => {
                    let wait = scan_interval(c, SCAN_SHARE_PERCENT);
                    if wait > IN_FLIGHT_RECHECK {
                        d.started + wait
                    } else {
                        d.started
                    }
                }
                _ => d.started,
            });
        now >= at
    }

    /// Record a scan: Envoy's figures, the module's own counts read just before and just after it,
    /// when it ended and what it cost. Returns the interval until the next scan.
    fn record(
        &mut self,
        envoy: EnvoyRequestStats,
        own_before: Counts,
        own_after: Counts,
        ended: Instant,
        cost: Duration,
        d: DrainTiming,
    ) -> Duration {
        // A filtered request that started or ended during the scan is in one of the two readings:
        // subtract the larger, so it is not taken for a request on a listener without the filter.
        let own_active = own_before.active.max(own_after.active).max(0) as u64;
        let excess_active = envoy.active.saturating_sub(own_active);
        // Envoy counts a request before the filter sees it: the later reading is the closer one.
        let excess_total = envoy.total.wrapping_sub(own_after.started);
        let busy = excess_active > 0 || self.excess.is_some_and(|(_, t)| t != excess_total);
        self.excess = Some((excess_active, excess_total));
        let share = if busy || !d.filter_loaded {
            BUSY_SCAN_SHARE_PERCENT
        } else {
            SCAN_SHARE_PERCENT
        };
        let mut next = ended + scan_interval(cost, share);
        // Without the filter, a fresh scan matters most when the drain could first complete.
        if busy || !d.filter_loaded {
            if let Some(t) = d.earliest_completion.checked_sub(cost) {
                if t > ended {
                    next = next.min(t.max(ended + IN_FLIGHT_RECHECK));
                }
            }
        }
        self.next_scan_at = Some(next);
        next - ended
    }

    /// What the engine sees between scans.
    fn view(&self, own_now: Counts) -> Option<EnvoyRequestStats> {
        let (excess_active, excess_total) = self.excess?;
        Some(EnvoyRequestStats {
            active: (own_now.active.max(0) as u64).saturating_add(excess_active),
            total: excess_total,
        })
    }
}

/// Time between the end of a scan that cost `cost` and the start of the next, so that scans take
/// at most `share` percent of the main thread.
fn scan_interval(cost: Duration, share: u32) -> Duration {
    let share = share.clamp(1, 100);
    IN_FLIGHT_RECHECK.max(cost * (100 - share) / share)
}

impl Extension {
    /// One scan of Envoy's stats store: (stats, cost).
    fn scan(&self) -> Option<(EnvoyRequestStats, Duration)> {
        let start = Instant::now();
        let [active, _] = self.sum_stats(true, &["downstream_rq_active"])?;
        // Requests answered by Envoy's own health_check filter are not work.
        let [total, health_checks] = self.sum_stats(
            false,
            &["downstream_rq_total", "health_check.request_total"],
        )?;
        // Nor what the module knows is not work (health checks it recognised, requests to its
        // control listeners such as a waiting /drain), taken out at the same moment as the scan.
        let (not_work_started, not_work_active) = super::shared().counters.not_work();
        let stats = EnvoyRequestStats {
            active: active.saturating_sub(not_work_active),
            total: total
                .saturating_sub(health_checks)
                .saturating_sub(not_work_started),
        };
        Some((stats, start.elapsed()))
    }

    /// Once, when the server has started: learn what a scan costs on this configuration.
    fn calibrate(&self) {
        let Some((_, cost)) = self.scan() else { return };
        if let Ok(mut cache) = self.envoy_stats.try_borrow_mut() {
            cache.calibration = Some(cost);
        }
        let interval = scan_interval(cost, SCAN_SHARE_PERCENT);
        if interval > IN_FLIGHT_RECHECK {
            log::info!(
                "graceful_drain: a scan of Envoy's stats takes {} ms on this configuration: while \
                 draining, Envoy's request stats are read every {} ms (at most \
                 {SCAN_SHARE_PERCENT}% of the main thread; {BUSY_SCAN_SHARE_PERCENT}% while \
                 requests without the filter are seen); with the filter on every listener the \
                 drain does not depend on them",
                cost.as_millis(),
                interval.as_millis()
            );
        }
    }

    /// Envoy's request stats through the cache: scans the stats store only when one is due.
    fn envoy_stats_cached(&self) -> Option<EnvoyRequestStats> {
        let shared = super::shared();
        let Phase::Draining { started_at, .. } = shared.phase() else {
            return None;
        };
        let settings = shared.settings().unwrap_or_default();
        let d = DrainTiming {
            started: started_at,
            earliest_completion: started_at
                + settings.min_drain_duration.max(settings.quiet_period),
            filter_loaded: DATA_FILTER_LOADED.load(Ordering::Relaxed),
        };
        let mut cache = self.envoy_stats.try_borrow_mut().ok()?;
        let now = shared.clock.now();
        if cache.due(now, d) {
            // The drain cannot complete yet: put the first scan off by one dispatcher turn, so
            // what the drain start does first (failing health checks) is not held up by it.
            if cache.excess.is_none()
                && !cache.deferred
                && now < d.earliest_completion
                && *kick_scheduler() != 0
            {
                cache.deferred = true;
                kick_engine();
                return None;
            }
            let own_before = shared.requests.counts();
            let (envoy, cost) = self.scan()?;
            let own_after = shared.requests.counts();
            cache.record(envoy, own_before, own_after, shared.clock.now(), cost, d);
        }
        cache.view(shared.requests.counts())
    }

    fn sum_stats(&self, gauges: bool, suffixes: &[&str]) -> Option<[u64; 2]> {
        let be = self.extension.get();
        if be.is_null() {
            return None;
        }
        let mut acc = StatSum {
            suffixes,
            ignored: &self.ignored_stat_prefixes,
            sums: [0; 2],
        };
        let ud = &mut acc as *mut StatSum as *mut c_void;
        // SAFETY: main thread; `be` is the live extension pointer; the iterator only runs during
        // the call, while `acc` is alive.
        unsafe {
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
        }
        Some(acc.sums)
    }
}

impl EngineHost for Extension {
    fn envoy_request_stats(&self) -> Option<EnvoyRequestStats> {
        self.envoy_stats_cached()
    }

    fn fail_health_checks(&self) {
        if self.admin_cluster.is_empty() {
            return;
        }
        // Envoy's health checks fail (every listener then drain-closes with its next response),
        // and Envoy's own drain state starts too, so its `/ready` says DRAINING like ours.
        // `skip_exit`: the listeners keep accepting; the exit stays the engine's decision.
        for path in ["/healthcheck/fail", "/drain_listeners?graceful&skip_exit"] {
            self.admin_call(path);
        }
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
            // SAFETY: config pointer alive until config_destroy; stats are atomic.
            unsafe {
                abi::envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(
                    self.envoy,
                    m.draining,
                    ptr::null_mut(),
                    0,
                    value,
                );
            }
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

impl Extension {
    /// POST to Envoy's admin through the admin cluster, with this process's admin key (the
    /// cluster's guard lets nothing else through). The answer is logged by `http_callout_done`.
    fn admin_call(&self, path: &str) {
        let key = super::shared().admin_key().unwrap_or("");
        let headers = [
            (":method", "POST"),
            (":path", path),
            ("host", "envoy-admin"),
            (ADMIN_KEY_HEADER, key),
        ];
        let mut raw = module_headers(&headers);
        let mut id = 0u64;
        // SAFETY: main thread, live config pointer; every buffer outlives the call (Envoy copies).
        let r = unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_http_callout(
                self.envoy,
                &mut id,
                module_buffer(self.admin_cluster.as_bytes()),
                raw.as_mut_ptr(),
                raw.len(),
                module_buffer(b""),
                2000,
            )
        };
        match r {
            0 => log::info!(
                "graceful_drain: admin POST {path} through cluster {} (every listener now sends \
                 its connections away)",
                self.admin_cluster
            ),
            2 => log::warn!(
                "graceful_drain: no cluster {:?}: listeners without the graceful_drain filter will \
                 not be told to close connections (add the admin cluster of the README, or set \
                 admin_cluster to \"\" to silence this)",
                self.admin_cluster
            ),
            other => log::warn!("graceful_drain: admin call {path} not started (result {other})"),
        }
    }
}

/// Admin guard filters configured (upstream filters with role `admin_guard`).
pub(crate) static ADMIN_GUARDS: AtomicUsize = AtomicUsize::new(0);

/// A per-process secret for the engine's admin calls, from the kernel's random source.
fn new_admin_key() -> Option<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

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
    let spawned = std::thread::Builder::new()
        .name("graceful_drain_tick".into())
        .spawn(|| loop {
            std::thread::sleep(IN_FLIGHT_RECHECK);
            if *kick_scheduler() == 0 {
                return;
            }
            if super::shared().is_draining() {
                kick_engine();
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
        if let Some(key) = new_admin_key() {
            shared.set_admin_key(key);
        } else {
            log::error!(
                "graceful_drain: no random source for the admin key; admin calls will be refused"
            );
        }
        shared.install_policy(cfg.requests.clone());
        if !cfg.admin_cluster.is_empty() && !cfg.ignored_stat_prefixes.iter().any(|p| p == "admin")
        {
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
            extension: Cell::new(ptr::null_mut()),
            admin_cluster: cfg.admin_cluster.clone(),
            ignored_stat_prefixes: cfg.ignored_stat_prefixes.clone(),
            timer,
            scheduler,
            metrics: define_metrics(bce),
            engine: RefCell::new(Engine::default()),
            envoy_stats: RefCell::new(EnvoyStatsCache::default()),
        });
        *kick_scheduler() = scheduler as usize;
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
        *kick_scheduler() = 0;
        // SAFETY: created by Box::into_raw in config_new; destroyed once, on the main thread.
        let ext = unsafe { Box::from_raw(bcm as *mut Extension) };
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
            ext.extension.set(be);
        }
    });
    bcm
}

/// Every static resource exists now: check that the admin cluster is guarded.
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
        if !ext.admin_cluster.is_empty() && ADMIN_GUARDS.load(Ordering::Relaxed) == 0 {
            log::error!(
                "graceful_drain: admin cluster {:?} has no admin_guard filter: any route that picks \
                 its cluster from a request (cluster_header, a cluster specifier plugin) could \
                 reach Envoy's admin through it; add the guard of the README's example to the \
                 cluster, or set admin_cluster to \"\"",
                ext.admin_cluster
            );
        }
        ext.calibrate();
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_worker_thread_initialized(
    _be: EnvoyPtr,
    _bm: *const c_void,
) {
}

/// The object itself is freed in config_destroy (the extension and config are one object); from
/// here on Envoy's extension pointer is gone, so forget it (stats reads then report nothing).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_destroy(bm: *const c_void) {
    guard("bootstrap_extension_destroy", (), || {
        // SAFETY: `bm` is our object, alive until config_destroy.
        if let Some(ext) = unsafe { extension(bm) } {
            ext.extension.set(ptr::null_mut());
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
    let Some(completion) = completion else {
        log::warn!("graceful_drain: shutdown without a completion callback; cannot hold the exit");
        return;
    };
    let release = ShutdownRelease::new(move || completion(context));
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
    _event_id: u64,
) {
    with_engine("config_scheduled", bcm, |engine, ext, shared| {
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
    result: u32,
    headers: *const HttpHeader,
    headers_len: usize,
    _body: *const Buffer,
    _body_len: usize,
) {
    guard("http_callout_done", (), || {
        let mut status: &[u8] = b"?";
        if !headers.is_null() && headers_len > 0 && headers_len < 1024 {
            // SAFETY: Envoy passes `headers_len` valid headers, alive for this call.
            let hs = unsafe { std::slice::from_raw_parts(headers, headers_len) };
            for h in hs {
                // SAFETY: each header's buffers are valid for this call.
                let (k, v) = unsafe {
                    (
                        envoy_bytes(Buffer {
                            ptr: h.key_ptr,
                            len: h.key_len,
                        }),
                        envoy_bytes(Buffer {
                            ptr: h.value_ptr,
                            len: h.value_len,
                        }),
                    )
                };
                if k == b":status" {
                    status = v;
                }
            }
        }
        let status = String::from_utf8_lossy(status);
        if result == 0 && status == "200" {
            log::info!("graceful_drain: Envoy's health checks now fail (admin answered 200)");
        } else {
            log::warn!(
                "graceful_drain: /healthcheck/fail callout: result {result}, status {status}"
            );
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn counts(active: i64, started: u64) -> Counts {
        Counts {
            active,
            last_start: 0,
            started,
        }
    }

    fn timing(t0: Instant, filter_loaded: bool) -> DrainTiming {
        DrainTiming {
            started: t0,
            earliest_completion: t0 + 5000 * MS,
            filter_loaded,
        }
    }

    fn envoy(active: u64, total: u64) -> EnvoyRequestStats {
        EnvoyRequestStats { active, total }
    }

    #[test]
    fn scans_take_a_bounded_share_of_the_main_thread() {
        assert_eq!(
            scan_interval(Duration::from_micros(50), 3),
            IN_FLIGHT_RECHECK
        );
        assert_eq!(
            scan_interval(1000 * MS, 3),
            32_333 * MS + Duration::from_nanos(333_333)
        );
        assert_eq!(scan_interval(1000 * MS, 20), 4000 * MS);
        for cost_ms in [1u32, 10, 100, 1000, 5000] {
            let cost = cost_ms * MS;
            let share = cost.as_secs_f64() / (cost + scan_interval(cost, 3)).as_secs_f64();
            assert!(share <= 0.0301, "{cost_ms} ms: {share}");
        }
    }

    #[test]
    fn filtered_requests_are_not_excess_and_the_view_follows_the_live_count() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        assert!(
            c.due(t0, d),
            "small configuration: first scan at drain start"
        );
        assert_eq!(c.view(counts(1, 10)), None, "nothing before the first scan");
        // Envoy sees the module's one request, plus 2 requests counted before the filter loaded.
        let cheap = Duration::from_micros(100);
        c.record(
            envoy(1, 12),
            counts(1, 10),
            counts(1, 10),
            t0 + MS,
            cheap,
            d,
        );
        assert_eq!(c.view(counts(1, 10)), Some(envoy(1, 2)));
        // The filtered request ends: the view drops at once, without a scan.
        assert_eq!(c.view(counts(0, 10)), Some(envoy(0, 2)));
        assert!(!c.due(t0 + 2 * MS, d));
        assert!(c.due(t0 + MS + IN_FLIGHT_RECHECK, d));
    }

    #[test]
    fn a_request_starting_or_ending_during_the_scan_is_not_taken_for_an_unfiltered_one() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        // Ended during the scan after Envoy's gauge was read: Envoy 1, own 1 then 0.
        c.record(envoy(1, 5), counts(1, 5), counts(0, 5), t0, MS, d);
        assert_eq!(c.view(counts(0, 5)), Some(envoy(0, 0)));
        // Started during the scan: Envoy 1, own 0 then 1.
        c.record(envoy(1, 6), counts(0, 5), counts(1, 6), t0, MS, d);
        assert_eq!(c.view(counts(1, 6)), Some(envoy(1, 0)));
    }

    #[test]
    fn unfiltered_requests_hold_the_view_until_a_scan_sees_them_end() {
        let t0 = Instant::now();
        let d = timing(t0, false);
        let mut c = EnvoyStatsCache::default();
        let cost = 1000 * MS;
        // Bootstrap-only: Envoy sees 2 requests, the module none.
        let next = c.record(envoy(2, 7), counts(0, 0), counts(0, 0), t0 + cost, cost, d);
        assert_eq!(c.view(counts(0, 0)), Some(envoy(2, 7)));
        // Busy: the next scan is timed to end when the drain could first complete (5 s).
        assert_eq!(next, 3000 * MS);
        assert!(!c.due(t0 + 3999 * MS, d));
        assert!(c.due(t0 + 4000 * MS, d));
        c.record(
            envoy(0, 7),
            counts(0, 0),
            counts(0, 0),
            t0 + 5000 * MS,
            cost,
            d,
        );
        assert_eq!(c.view(counts(0, 0)), Some(envoy(0, 7)));
    }

    #[test]
    fn with_the_filter_a_large_configuration_is_first_scanned_after_its_share() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache {
            calibration: Some(400 * MS),
            ..EnvoyStatsCache::default()
        };
        let wait = scan_interval(400 * MS, SCAN_SHARE_PERCENT);
        assert!(!c.due(t0, d));
        assert!(!c.due(t0 + wait - MS, d));
        assert!(c.due(t0 + wait, d));
        // Without the filter the stats are the only signal: scanned at drain start.
        let mut c = EnvoyStatsCache {
            calibration: Some(400 * MS),
            ..EnvoyStatsCache::default()
        };
        assert!(c.due(t0, timing(t0, false)));
        // With the filter and a cheap scan, as before: at drain start.
        let mut c = EnvoyStatsCache {
            calibration: Some(Duration::from_micros(100)),
            ..EnvoyStatsCache::default()
        };
        assert!(c.due(t0, d));
    }

    #[test]
    fn new_requests_without_the_filter_move_the_total_the_engine_watches() {
        let t0 = Instant::now();
        let d = timing(t0, true);
        let mut c = EnvoyStatsCache::default();
        c.record(envoy(0, 100), counts(0, 100), counts(0, 100), t0, MS, d);
        let first = c.view(counts(0, 100)).unwrap().total;
        // 5 filtered requests since: the excess total does not move.
        c.record(envoy(0, 105), counts(0, 105), counts(0, 105), t0, MS, d);
        assert_eq!(c.view(counts(0, 105)).unwrap().total, first);
        // 1 unfiltered one: it moves, and the scans get the busy share.
        let next = c.record(envoy(0, 106), counts(0, 105), counts(0, 105), t0, MS, d);
        assert_ne!(c.view(counts(0, 105)).unwrap().total, first);
        assert_eq!(next, IN_FLIGHT_RECHECK);
    }
}
