//! Exported network-filter hooks (`envoy.filters.network.dynamic_modules`, placed before the HTTP
//! connection manager), and [`ConnectionHost`] over Envoy's network-filter callbacks. Each hook:
//! guard, handle, one call into [`crate::network_filter`], which owns the lifecycle and applies
//! what [`crate::connections`] decides.

use super::abi::{Buffer, EnvoyPtr};
use super::envoy::{self, Hook, NetConnection, SliceIter};
use super::{envoy_bytes, guard};
use crate::config::NetworkFilterConfig;
use crate::engine::shared::Stat;
use crate::engine::shared::EVENT_GO_AWAY;
use crate::host::connection::{ConnectionHost, ConnectionWakers};
use crate::host::extension::StatsHost;
use crate::network_filter::{NetConfig, NetFilter};
use std::os::raw::c_void;
use std::ptr;

const STATUS_CONTINUE: u32 = 0;
/// `envoy_dynamic_module_type_network_connection_event`: RemoteClose, LocalClose.
const EVENT_REMOTE_CLOSE: u32 = 0;
const EVENT_LOCAL_CLOSE: u32 = 1;

/// The network filters' schedulers from any thread: what the drain side commits to (the
/// extension is given it at load, `extension::Env`).
pub(crate) struct Schedulers;

impl ConnectionWakers for Schedulers {
    fn commit(&self, scheduler: usize, event: u64) {
        <NetConnection<'_> as ConnectionHost>::commit_scheduler(scheduler, event)
    }
}

/// The connection's hooks count on its worker thread; the call is the bootstrap extension's
/// counter update, valid on any thread (`stats::ModuleStats`).
impl StatsHost for NetConnection<'_> {
    fn count(&self, stat: Stat) {
        super::stats::count(stat)
    }
}

impl ConnectionHost for NetConnection<'_> {
    type Slices<'b> = SliceIter<'b>;

    fn id(&self) -> u64 {
        NetConnection::id(*self)
    }

    fn is_open(&self) -> bool {
        NetConnection::is_open(*self)
    }

    fn new_scheduler(&self) -> Option<usize> {
        NetConnection::new_scheduler(*self)
    }

    fn commit_scheduler(waker: usize, event: u64) {
        // SAFETY: `waker` is a live scheduler: the caller holds a counted reference to it
        // (`connections::Waker`), and only the last reference deletes it.
        super::threads().call("connection_wake", || unsafe {
            envoy::net_scheduler_commit(waker, event)
        });
    }

    fn delete_scheduler(waker: usize) {
        // SAFETY: called once, by the last holder of the scheduler (see `Waker`).
        let delete = || unsafe { envoy::net_scheduler_delete(waker) };
        if crate::runtime::threads::Threads::on_module_thread() {
            // The last holder can be the idle-grace thread (`Connections::wake_all` drops its
            // snapshot there): a module thread reaches Envoy only through the gate, closed once
            // the exit was released (#44 item 10).
            super::threads().call("connection_waker_delete", delete);
        } else {
            // Envoy's own threads (a filter's destroy hook, the drain start on the main thread).
            delete()
        }
    }

    #[inline]
    fn with_read_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<SliceIter<'b>>) -> R,
    ) -> R {
        NetConnection::with_read_slices(*self, f)
    }

    #[inline]
    fn with_write_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<SliceIter<'b>>) -> R,
    ) -> R {
        NetConnection::with_write_slices(*self, f)
    }

    fn replace_read(&self, keep: &[u8]) -> bool {
        NetConnection::replace_read(*self, keep)
    }

    fn replace_write_start(&self, n: usize, pieces: [&[u8]; 2]) -> bool {
        NetConnection::replace_write_start(*self, n, pieces)
    }

    fn inject_write(&self, bytes: &[u8]) {
        NetConnection::inject_write(*self, bytes)
    }

    fn append_write(&self, bytes: &[u8]) -> bool {
        NetConnection::append_write(*self, bytes)
    }

    fn drain_write(&self, n: usize) -> bool {
        NetConnection::drain_write(*self, n)
    }

    fn inject_read(&self, bytes: &[u8]) {
        NetConnection::inject_read(*self, bytes)
    }

    type Stats = super::stats::ModuleStats;
    fn stats() -> Self::Stats {
        super::stats::ModuleStats
    }

    fn mask_key() -> [u8; 4] {
        super::random_bytes()
    }

    fn close(&self, details: &[u8]) {
        NetConnection::close(*self, details)
    }

    fn close_no_flush(&self, details: &[u8]) {
        NetConnection::close_no_flush(*self, details)
    }

    fn wake_stream(&self, word: usize) {
        super::http::wake_stream(word, EVENT_GO_AWAY)
    }

    #[inline]
    fn now_nanos() -> u64 {
        super::coarse_monotonic_nanos()
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_config_new(
    _ce: EnvoyPtr,
    _name: Buffer,
    config: Buffer,
) -> *const c_void {
    guard("network_filter_config_new", ptr::null(), || {
        // SAFETY: Envoy's config bytes are valid for the duration of this call.
        let raw = unsafe { envoy_bytes(config) };
        match NetworkFilterConfig::parse(raw) {
            Ok(c) => {
                let config = NetConfig::load(c, super::shared());
                if config.counts_requests() {
                    super::publish_active_requests();
                }
                Box::into_raw(Box::new(config)) as *const c_void
            }
            Err(e) => {
                log::error!("{e}");
                ptr::null()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_config_destroy(cm: *const c_void) {
    guard("network_filter_config_destroy", (), || {
        // SAFETY: from Box::into_raw in config_new; Envoy destroys it once, after its filters.
        let config = (!cm.is_null()).then(|| unsafe { Box::from_raw(cm as *mut NetConfig) });
        NetConfig::unload(config)
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_new(
    cm: *const c_void,
    _fe: EnvoyPtr,
) -> *const c_void {
    guard("network_filter_new", ptr::null(), || {
        // SAFETY: the config outlives its filters.
        let config = unsafe { (cm as *const NetConfig).as_ref() };
        Box::into_raw(Box::new(NetFilter::new(config, super::shared()))) as *const c_void
    })
}

/// Lend the filter `fm` to `f` for the hook's duration only ([`super::with_object`]: the
/// reference cannot outlive the call, `tests/compile_fail/`).
///
/// # Safety
/// `fm` must be a pointer returned by `on_network_filter_new` and not yet destroyed; a shared
/// reference only (hooks may nest: see NetFilter), on the filter's worker.
unsafe fn with_net_filter<R>(
    fm: *const c_void,
    f: impl for<'hook> FnOnce(&'hook NetFilter) -> R,
) -> Option<R> {
    // SAFETY: per the contract.
    unsafe { super::with_object(fm, f) }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_new_connection(
    fe: EnvoyPtr,
    fm: *const c_void,
) -> u32 {
    guard("network_filter_new_connection", STATUS_CONTINUE, || {
        let run = |f: &NetFilter| {
            let hook = Hook::frame();
            // SAFETY: the filter's own pointer inside its hook; callbacks are set by now.
            let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
            f.on_new_connection(&envoy, super::shared());
        };
        // SAFETY: our own filter pointer.
        unsafe { with_net_filter(fm, run) };
        STATUS_CONTINUE
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_read(
    fe: EnvoyPtr,
    fm: *const c_void,
    data_len: usize,
    _end_stream: bool,
) -> u32 {
    guard("network_filter_read", STATUS_CONTINUE, || {
        let run = |f: &NetFilter| {
            let hook = Hook::frame();
            // SAFETY: the filter's own pointer inside its read hook.
            let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
            f.on_read(&envoy, data_len, super::shared);
        };
        // SAFETY: our own filter pointer.
        unsafe { with_net_filter(fm, run) };
        STATUS_CONTINUE
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_write(
    fe: EnvoyPtr,
    fm: *const c_void,
    data_len: usize,
    _end_stream: bool,
) -> u32 {
    guard("network_filter_write", STATUS_CONTINUE, || {
        let run = |f: &NetFilter| {
            let hook = Hook::frame();
            // SAFETY: the filter's own pointer inside its write hook.
            let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
            f.on_write(&envoy, data_len, super::shared);
        };
        // SAFETY: our own filter pointer.
        unsafe { with_net_filter(fm, run) };
        STATUS_CONTINUE
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_event(
    _fe: EnvoyPtr,
    fm: *const c_void,
    event: u32,
) {
    guard("network_filter_event", (), || {
        let run = |f: &NetFilter| {
            f.on_event(matches!(event, EVENT_REMOTE_CLOSE | EVENT_LOCAL_CLOSE));
        };
        // SAFETY: our own filter pointer.
        unsafe { with_net_filter(fm, run) };
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_scheduled(
    fe: EnvoyPtr,
    fm: *const c_void,
    event_id: u64,
) {
    guard("network_filter_scheduled", (), || {
        let run = |f: &NetFilter| {
            if !f.may_reach_envoy() {
                return;
            }
            let hook = Hook::frame();
            // SAFETY: the filter's own pointer inside its hook, no close event raised yet.
            let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
            f.on_scheduled(&envoy, event_id, super::shared());
        };
        // SAFETY: our own filter pointer.
        unsafe { with_net_filter(fm, run) };
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_destroy(fm: *const c_void) {
    guard("network_filter_destroy", (), || {
        if fm.is_null() {
            return;
        }
        // SAFETY: from Box::into_raw in filter_new; Envoy destroys it exactly once.
        let f = unsafe { Box::from_raw(fm as *mut NetFilter) };
        f.on_destroy(super::shared(), &super::stats::ModuleStats);
    })
}

#[cfg(test)]
mod tests;
