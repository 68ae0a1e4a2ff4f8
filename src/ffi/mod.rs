//! FFI seam: the only module allowed to use `unsafe`.
//! - [`abi`]: raw declarations of the callbacks, looked up in the running Envoy at load;
//! - `envoy`: one wrapper per callback used, on handles that exist only where Envoy's pointer is
//!   valid (a stream or connection inside its hook, a config until its destroy), and the RAII
//!   handles of the extension's timer and scheduler; nothing else here calls a callback;
//! - [`http`], [`network`], [`bootstrap`]: the exported hooks. Each guards against panics,
//!   lends its object for the hook ([`with_object`]), makes a handle for Envoy's side, and
//!   makes one call into safe code ([`crate::http_filter`], [`crate::connections`],
//!   [`crate::extension`]), which it reaches through the host traits of [`crate::host`].
//!   Nothing here makes drain decisions;
//! - `stats`: the module's Envoy stats, all defined by the bootstrap extension's config;
//! - here: the panic guard, buffer helpers, the clock, and the process-wide instances.
//!
//! Process globals live here only, each because Envoy's ABI leaves no other place: a hook gets
//! its own object's pointer and nothing else (an HTTP or network filter's hook cannot reach the
//! bootstrap extension, nor another listener's config), and the module's objects outlive any
//! one of them. So [`shared`] (the drain state every hook of every Envoy object meets),
//! [`threads`] (the module's threads and their gate, which must outlive the extension's
//! destroy), the active-requests gauge's thread, the bootstrap extension's scheduler, timer and
//! stats handles (`bootstrap.rs`, `stats.rs`: workers count the module's stats, whose handles
//! Envoy gives the extension alone) and the callbacks found at load (`abi.rs`). Below `ffi/`,
//! each is handed in as a parameter: `&Shared`, `&Threads`, a host of [`crate::host`].
//!
//! What Envoy's side does (which thread may call what, what a call may run re-entrantly, who
//! owns which buffer) is recorded with its evidence in `ENVOY_FACTS.md` beside this file. Every
//! call a module thread makes into Envoy passes the gate of [`crate::runtime::threads::Threads`].
#![allow(unsafe_code)]
// Exported hooks receive Envoy's own pointers by contract of the ABI; they are entry points for
// Envoy, not an API for Rust callers, so they are not `unsafe fn`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

/// Hooks Envoy requires (it refuses a module that lacks one) and this module does not use: each
/// is exported with its C signature and does nothing.
macro_rules! unused_hooks {
    ($(fn $name:ident($($ty:ty),* $(,)?);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($(_: $ty),*) {}
    )*};
}
use unused_hooks;

pub mod abi;
pub mod bootstrap;
mod envoy;
/// The frame token and a handle made from it, public only for `tests/compile_fail/`.
#[doc(hidden)]
pub use envoy::{Hook, HttpStream};
#[cfg(test)]
mod fake_envoy;
pub mod http;
mod logger;
pub mod network;
mod stats;

use crate::engine::shared::Shared;
use crate::runtime::clock::Clock;
use crate::runtime::threads::{GateFaults, Threads};
use abi::Buffer;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Instant;

/// Run `f`, turning a panic into `fallback` so it never unwinds into Envoy (which would abort the
/// process). The panic message itself is logged by the panic hook installed at program init.
pub(crate) fn guard<R>(hook: &'static str, fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            log::error!(
                "graceful_drain: panic contained in {hook}; the hook's safe fallback applies"
            );
            fallback
        }
    }
}

/// Lend the module's object behind a pointer Envoy handed back to a hook (a filter, a config)
/// to `f`, and to `f` only: the reference's lifetime is `f`'s own, not one the caller picks, so
/// it cannot be kept past the hook, nor past a free that follows the loan
/// (`tests/compile_fail/`). `None`, without calling `f`, for a null pointer. Every hook reaches
/// its object this way.
///
/// # Safety
/// `p` is null or points at a live `T` this module gave Envoy, which stays alive until `f`
/// returns, and no `&mut T` to it exists meanwhile (only shared references are ever made:
/// hooks can nest).
#[doc(hidden)]
#[inline(always)]
pub unsafe fn with_object<T, R>(
    p: *const c_void,
    f: impl for<'hook> FnOnce(&'hook T) -> R,
) -> Option<R> {
    // SAFETY: per the contract.
    unsafe { p.cast::<T>().as_ref() }.map(f)
}

/// A buffer pointing at module-owned bytes, valid while `bytes` lives.
pub(crate) fn module_buffer(bytes: &[u8]) -> Buffer {
    Buffer {
        ptr: bytes.as_ptr() as *const c_char,
        len: bytes.len(),
    }
}

/// View an Envoy buffer as bytes. Null or empty becomes an empty slice; nothing is assumed about
/// the encoding.
///
/// # Safety
/// `buf.ptr` must be null or point at `buf.len` readable bytes that stay valid for `'a`.
pub(crate) unsafe fn envoy_bytes<'a>(buf: Buffer) -> &'a [u8] {
    if buf.ptr.is_null() || buf.len == 0 {
        &[]
    } else {
        // SAFETY: non-null, and the caller guarantees `len` readable bytes for 'a.
        unsafe { std::slice::from_raw_parts(buf.ptr as *const u8, buf.len) }
    }
}

/// Four bytes from `getrandom(2)` (the kernel's CSPRNG; a WebSocket masking key, RFC 6455
/// §5.3). Should it fail (it does not block once the pool is initialised, long before Envoy
/// serves), the bytes fall back to the clock's: a mask only needs to be unpredictable to the
/// page that could otherwise steer the bytes on the wire, and this Close carries fixed bytes.
pub(crate) fn random_bytes() -> [u8; 4] {
    let mut b = [0u8; 4];
    // SAFETY: `b` is a valid, writable 4-byte buffer for the call.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        b = (coarse_monotonic_nanos() as u32).to_le_bytes();
    }
    b
}

/// Monotonic nanoseconds from the kernel's coarse clock (a few instructions through the vDSO, with
/// the granularity of the scheduler tick, 1-4 ms). Used for per-request timestamps.
pub(crate) fn coarse_monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; CLOCK_MONOTONIC_COARSE exists on every Linux Envoy
    // supports. On failure `ts` stays zeroed, which only makes timestamps look old.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    // Exact without overflow checks: seconds since boot times 10^9 fit in a u64 for 584 years
    // (checked arithmetic cost about ten instructions per request, counted with callgrind).
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The real clock: `Instant` for the drain logic, the coarse clock for request timestamps, both
/// counted from one epoch.
struct SystemClock {
    epoch: Instant,
    coarse_epoch: u64,
}

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn nanos(&self) -> u64 {
        // Never below the epoch (a monotonic clock) but for a failed read; the +1 cannot overflow.
        coarse_monotonic_nanos()
            .saturating_sub(self.coarse_epoch)
            .wrapping_add(1)
    }
    fn epoch(&self) -> Instant {
        self.epoch
    }
}

/// The owner of the module's threads and the gate of their calls into Envoy ([`Threads`]).
pub(crate) fn threads() -> &'static Threads {
    static THREADS: OnceLock<Threads> = OnceLock::new();
    THREADS.get_or_init(|| {
        #[allow(unused_mut)]
        let mut faults = GateFaults::default();
        #[cfg(feature = "panic-test")]
        {
            faults.hold_calls_until_release = crate::runtime::faults::active("hold_thread_calls");
            faults.no_gate = crate::runtime::faults::active("no_gate");
        }
        Threads::new(faults)
    })
}

/// Start setting the `active_requests` gauge (a config that counts requests was loaded).
pub(crate) fn publish_active_requests() {
    static PUBLISHER: crate::engine::gauges::GaugePublisher =
        crate::engine::gauges::GaugePublisher::new();
    PUBLISHER.start(threads(), shared(), &bootstrap::EnvoyExtension);
}

/// The process-wide drain state, wired to Envoy. The logic layers receive it as a parameter
/// from the hooks.
pub(crate) fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        Shared::new(Box::new(SystemClock {
            epoch: Instant::now(),
            coarse_epoch: coarse_monotonic_nanos(),
        }))
    })
}

/// `envoy_dynamic_module_on_program_init`: called once when Envoy loads the `.so`.
/// Returns the ABI version string of the Envoy found; Envoy compares it with its own and logs
/// the result. Returns null (Envoy refuses to start) when this Envoy cannot host the module.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    guard("on_program_init", std::ptr::null(), || {
        let Some(abi_version) = abi::init() else {
            return std::ptr::null();
        };
        logger::install();
        // Set by init whenever it returns the ABI version.
        let Some(standing) = abi::standing() else {
            return std::ptr::null();
        };
        let line = crate::host::envoy_release::loaded_line(abi::generation(), standing);
        // The one line that says an untested Envoy (with its release and the surface); the
        // status, the stat `envoy_untested` and an alert say it too.
        if standing.untested.is_some() {
            log::warn!("{line}");
        } else {
            log::info!("{line}");
        }
        shared().set_envoy(abi::generation());
        shared().set_standing(standing.clone());
        abi_version.as_ptr() as *const c_char
    })
}
