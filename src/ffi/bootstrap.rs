//! Exported bootstrap-extension hooks (all 17 are required by Envoy 1.40): each guards, lends its
//! object for the hook ([`super::with_object`]) and calls [`crate::extension::Extension`], which
//! does the work. Here: Envoy's side of it (`EnvoyExtension`, the [`ExtensionHost`]: timer,
//! main-thread hop, stats; `EnvoyCompletion`, the shutdown hook's [`ShutdownCompletion`]), the
//! stats store ([`StatsSource`]) and the RAII handles of the
//! extension's timer and scheduler. Everything runs on Envoy's main thread, except the hop to it
//! and the stats (any thread) and the stats visits (the module's scanner thread).

use super::abi::{Buffer, EnvoyPtr, HttpHeader};
use super::envoy::{self, ExtensionConfig, ExtensionStats, Scheduler, Timer};
use super::{envoy_bytes, guard, with_object};
use crate::engine::engine::{ADMIN_DRAIN_PATH, ADMIN_STATUS_PATH};
use crate::engine::shared::Stat;
use crate::envoy_stats::scan::Pass;
use crate::extension::{Env, Extension, ExtensionHost, Gauge, EVENT_KICK};
use crate::host::extension::LabelledGauge::{BuildInfo, EnvoyUntested};
use crate::host::extension::{ShutdownCompletion, ShutdownRelease, StatsHost};
use crate::host::stats::StatsSource;
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The bootstrap scheduler used to hop onto the main thread; 0 when no engine is loaded. Read
/// only inside the threads' gate: config_destroy closes the gate (waiting for a commit under way)
/// before it clears this and deletes the scheduler, so no commit can race the delete, whatever
/// thread kicks. No lock is held across the commit (it may run a destroy hook on this thread).
static KICK_SCHEDULER: AtomicUsize = AtomicUsize::new(0);

/// The extension's timer (its [`Timer`]'s word) while the config lives; 0 without one. Used on
/// the main thread only, where config_destroy clears it before the timer is deleted.
static TIMER: AtomicUsize = AtomicUsize::new(0);

/// Envoy's side of the bootstrap extension, for the whole process (the config's timer and
/// scheduler are found through the statics above, set while the config lives).
pub(crate) struct EnvoyExtension;

impl ExtensionHost for EnvoyExtension {
    fn to_main_thread(&self, event: u64) {
        super::threads().call("engine_kick", || {
            let s = KICK_SCHEDULER.load(Ordering::Acquire);
            if s != 0 {
                // SAFETY: the scheduler is alive while stored here and the gate is open (see
                // KICK_SCHEDULER).
                unsafe { envoy::extension_scheduler_commit(s, event) }
            }
        });
    }

    fn arm_timer(&self, delay: Duration) {
        // Round up so the timer never fires before the deadline (then a useless poll re-arms).
        let ms = delay.as_nanos().div_ceil(1_000_000).max(1) as u64;
        let t = TIMER.load(Ordering::Acquire);
        if t != 0 {
            // SAFETY: the live timer's word (see TIMER), on the main thread (the trait's
            // contract).
            unsafe { envoy::timer_enable(t, ms) }
        }
    }

    fn set_gauge(&self, gauge: Gauge, value: u64) {
        super::stats::set(gauge, value)
    }
}

/// The engine's and the extension's counts, on the main thread (the module threads' contained
/// panics among them); valid on any thread, see `stats::ModuleStats`.
impl StatsHost for EnvoyExtension {
    fn count(&self, stat: Stat) {
        super::stats::count(stat)
    }
}

/// Envoy's completion of the shutdown hook (ENVOY_FACTS.md §5): its callback and context, called
/// at most once (the [`ShutdownCompletion`] is consumed), on the main thread.
struct EnvoyCompletion {
    completion: extern "C" fn(*mut c_void),
    context: *mut c_void,
}

impl ShutdownCompletion for EnvoyCompletion {
    fn complete(self: Box<Self>) {
        // The gate closes first: no module thread calls into Envoy once it may tear down.
        super::threads().close();
        (self.completion)(self.context)
    }
}

/// What Envoy holds for us: the config pointer (the extension object is the same one).
struct Glue {
    envoy: ExtensionConfig,
    timer: Option<Timer>,
    scheduler: Option<Scheduler>,
    ext: Extension,
}

/// Envoy's stats store, through the threads' gate (refused once the exit was released).
impl StatsSource for ExtensionStats {
    fn visit(&self, pass: Pass, stat: &mut dyn FnMut(&[u8], u64)) -> bool {
        let gauges = pass == Pass::Gauges;
        #[cfg(feature = "panic-test")]
        if crate::runtime::faults::active("slow_stats_scan") {
            super::threads().sleep(crate::runtime::faults::SLOW_SCAN);
        }
        super::threads()
            .call("stats_scan", || self.iterate(gauges, stat))
            .is_some()
    }
}

/// `graceful_drain.build_info` = 1, labelled with the module's version and the Envoy minor it
/// found, as scrapes see it (`envoy_graceful_drain_build_info{version="...",envoy="..."} 1`).
fn publish_build_info(envoy: &ExtensionConfig) {
    if let Some(id) = envoy.define_labelled_gauge(BuildInfo.name(), BuildInfo.labels()) {
        let found = super::abi::generation().minor();
        envoy.set_labelled_gauge(id, &[crate::host::envoy_release::MODULE_VERSION, found], 1);
    }
}

/// `graceful_drain.envoy_untested`: 1 when the running Envoy is not one the module was tested
/// with (newer than every tested release, or its release cannot be told), else 0; labelled with
/// the release (`unknown` when it cannot be told) and the surface the module runs with
/// (`envoy_graceful_drain_envoy_untested{release="1.41.0",surface="reduced"} 1`). The alert
/// `GracefulDrainEnvoyUntested` reads it.
fn publish_standing(envoy: &ExtensionConfig) {
    let Some(standing) = super::abi::standing() else {
        return;
    };
    if let Some(id) = envoy.define_labelled_gauge(EnvoyUntested.name(), EnvoyUntested.labels()) {
        let release = standing.release_name();
        let value = u64::from(standing.untested.is_some());
        envoy.set_labelled_gauge(id, &[&release, standing.surface.as_str()], value);
    }
}

fn register_admin(envoy: &ExtensionConfig, path: &[u8], help: &str, mutates: bool) {
    if !envoy.register_admin(path, help, mutates) {
        log::warn!(
            "graceful_drain: could not register admin handler {}",
            String::from_utf8_lossy(path)
        );
    }
}

/// Run an extension hook under the guard, then give Envoy its shutdown release (if the hook
/// returned one) with no borrow held. Returns false if the hook panicked (contained).
fn run(
    hook: &'static str,
    bcm: *const c_void,
    f: impl for<'hook> FnOnce(&'hook Glue) -> Option<ShutdownRelease>,
) -> bool {
    let mut panicked = true;
    let release = guard(hook, None, || {
        // SAFETY: Envoy passes back our config/extension pointer (they are the same object),
        // alive until config_destroy.
        let r = unsafe { with_object(bcm, f) }.flatten();
        panicked = false;
        r
    });
    if let Some(release) = release {
        guard("shutdown release", (), || release.release());
    }
    !panicked
}

// ---- exported hooks --------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_new(
    bce: EnvoyPtr,
    _name: Buffer,
    config: Buffer,
) -> *const c_void {
    guard("bootstrap_config_new", None, || {
        // SAFETY: Envoy's config pointer inside its config_new, kept until its config_destroy.
        let envoy = unsafe { ExtensionConfig::new(bce) };
        #[allow(unused_mut)] // replaced by a test fault
        let (mut timer, scheduler) = (envoy.new_timer(), envoy.new_scheduler());
        #[cfg(feature = "panic-test")]
        if crate::runtime::faults::active("no_timer") {
            timer = None; // deleted by its drop
        }
        if scheduler.is_none() {
            log::error!(
                "graceful_drain: Envoy gave no scheduler: the engine cannot be woken from workers"
            );
        }
        let env = Env {
            shared: super::shared(),
            threads: super::threads(),
            envoy: &EnvoyExtension,
            admin: &crate::envoy_stats::admin::HttpAdmin,
            connections: &super::network::Schedulers,
            streams: &super::http::Schedulers,
        };
        // SAFETY: Envoy's config bytes are valid for this call.
        let ext = Extension::load(unsafe { envoy_bytes(config) }, env, timer.is_some())?;
        KICK_SCHEDULER.store(
            scheduler.as_ref().map_or(0, Scheduler::word),
            Ordering::Release,
        );
        TIMER.store(timer.as_ref().map_or(0, Timer::word), Ordering::Release);
        let help = "graceful_drain: start a graceful drain (same as SIGTERM, without exiting)";
        register_admin(&envoy, ADMIN_DRAIN_PATH, help, true);
        let help = "graceful_drain: drain status as JSON";
        register_admin(&envoy, ADMIN_STATUS_PATH, help, false);
        super::stats::define(&envoy);
        publish_build_info(&envoy);
        publish_standing(&envoy);
        envoy.signal_init_complete();
        let glue = Box::new(Glue {
            envoy,
            timer,
            scheduler,
            ext,
        });
        Some(Box::into_raw(glue) as *const c_void)
    })
    .unwrap_or(ptr::null())
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_destroy(bcm: *const c_void) {
    guard("bootstrap_config_destroy", (), || {
        if bcm.is_null() {
            return;
        }
        // SAFETY: created by Box::into_raw in config_new; destroyed once.
        let Glue {
            timer,
            scheduler,
            ext,
            ..
        } = *unsafe { Box::from_raw(bcm as *mut Glue) };
        // Disarms a pending hold, closes the gate, stops and joins the module's threads.
        ext.destroy();
        super::stats::forget();
        KICK_SCHEDULER.store(0, Ordering::Release);
        TIMER.store(0, Ordering::Release);
        if crate::runtime::threads::Threads::on_module_thread() {
            // Run inside a module thread's commit (Envoy dropped its last reference there):
            // timer_delete must run on the main thread, so both are left to the exit.
            log::warn!("graceful_drain: engine config destroyed off the main thread");
            std::mem::forget((timer, scheduler));
        }
        // Otherwise the main thread: the timer and the scheduler are deleted by their drops.
    })
}

/// The extension object is the config object: one engine per process.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_new(
    bcm: *const c_void,
    be: EnvoyPtr,
) -> *const c_void {
    guard("bootstrap_extension_new", (), || {
        // SAFETY: Envoy's extension pointer, taken back in extension_destroy.
        let stats = Arc::new(unsafe { ExtensionStats::new(be) });
        // SAFETY: `bcm` is our config from config_new.
        unsafe { with_object(bcm, |g: &Glue| g.ext.set_stats(Some(stats))) };
    });
    bcm
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_server_initialized(
    _be: EnvoyPtr,
    bm: *const c_void,
) {
    run("server_initialized", bm, |g| {
        g.ext.on_server_initialized();
        None
    });
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
        // No kick commits from here on: the extension still holds a reference to the config, so
        // no commit under way can be the last holder and run config_destroy inside itself
        // (ENVOY_FACTS.md §1); config_destroy's gate close waits for one under way.
        KICK_SCHEDULER.store(0, Ordering::Release);
        // SAFETY: `bm` is our object, alive until config_destroy.
        unsafe { with_object(bm, |g: &Glue| g.ext.set_stats(None)) };
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_drain_started(
    _be: EnvoyPtr,
    bm: *const c_void,
) {
    run("drain_started", bm, |g| g.ext.on_drain_started());
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
    guard("shutdown", (), || {
        let Some(completion) = completion else {
            log::warn!(
                "graceful_drain: shutdown without a completion callback; cannot hold the exit"
            );
            return;
        };
        let mut release = Some(ShutdownRelease::new(Box::new(EnvoyCompletion {
            completion,
            context,
        })));
        let ok = run("shutdown", bm, |g| g.ext.on_shutdown(release.take()?));
        if !ok {
            // The engine failed after taking Envoy's completion: give it back now rather than
            // hold Envoy until SIGKILL (a drain we cannot run must not turn into a hang).
            log::error!("graceful_drain: SIGTERM handling failed; letting Envoy exit now");
            // SAFETY: as in `run`.
            let pending = unsafe { with_object(bm, |g: &Glue| g.ext.take_pending_shutdown()) };
            if let Some(r) = pending.flatten() {
                guard("shutdown release", (), || r.release());
            }
        }
        // If the extension never took it (none loaded), never hold Envoy: the drop releases it.
        drop(release);
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_config_scheduled(
    _bce: EnvoyPtr,
    bcm: *const c_void,
    event_id: u64,
) {
    run("config_scheduled", bcm, |g| g.ext.on_event(event_id));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_timer_fired(
    _bce: EnvoyPtr,
    bcm: *const c_void,
    _timer: *mut c_void,
) {
    run("timer_fired", bcm, |g| g.ext.on_event(EVENT_KICK));
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_bootstrap_extension_admin_request(
    _bce: EnvoyPtr,
    bcm: *const c_void,
    method: Buffer,
    path: Buffer,
    _body: Buffer,
) -> u32 {
    let mut status = 500;
    run("admin_request", bcm, |g| {
        // SAFETY: Envoy's buffers are valid for this call.
        let (method, path) = unsafe { (envoy_bytes(method), envoy_bytes(path)) };
        let (code, body, release) = g.ext.on_admin(method, path);
        status = code;
        // SAFETY: inside admin_request.
        unsafe { g.envoy.admin_respond(body.as_bytes()) };
        release
    });
    status
}

// ---- hooks Envoy 1.40 requires but this module does not use ----------------------------------

super::unused_hooks! {
    fn envoy_dynamic_module_on_bootstrap_extension_http_callout_done(EnvoyPtr, *const c_void, u64, u32, *const HttpHeader, usize, *const Buffer, usize);
    fn envoy_dynamic_module_on_bootstrap_extension_file_changed(EnvoyPtr, *const c_void, Buffer, u32);
    fn envoy_dynamic_module_on_bootstrap_extension_cluster_add_or_update(EnvoyPtr, *const c_void, Buffer);
    fn envoy_dynamic_module_on_bootstrap_extension_cluster_removal(EnvoyPtr, *const c_void, Buffer);
    fn envoy_dynamic_module_on_bootstrap_extension_listener_add_or_update(EnvoyPtr, *const c_void, Buffer);
    fn envoy_dynamic_module_on_bootstrap_extension_listener_removal(EnvoyPtr, *const c_void, Buffer);
}

#[cfg(test)]
mod tests;
