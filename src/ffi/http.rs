//! Exported HTTP filter hooks and the [`StreamHost`] implementation over Envoy's stream callbacks.
//! Each hook: guard, convert, delegate to [`crate::http_filter`].

use super::abi::{self, Buffer, EnvoyPtr, HttpHeader};
use super::envoy::{self, Hook, HttpStream};
use super::{envoy_bytes, guard};
use crate::config::{DrainToken, FilterConfig, Role};
use crate::http_filter::{HeadersAction, Stream, StreamHost, StreamSink};
use crate::state::{Protocol, Shared};
use std::cell::{Cell, RefCell};
use std::os::raw::c_void;
use std::ptr;
use std::sync::Arc;

/// Per-config state: one per `filter_config` in the Envoy config (per listener, in practice).
/// Its stats are the bootstrap extension's (`super::stats`, through `Shared::counters`).
struct Config {
    role: Role,
    token: Option<Arc<DrainToken>>,
}

struct Filter {
    config: *const Config,
    /// Envoy's side of the stream (for [`wake_stream`], which gets only our pointer).
    fe: EnvoyPtr,
    /// A `RefCell`, not `&mut` through the raw pointer: a hook can re-enter the same filter (a
    /// local reply runs the response hooks from inside `send_response`; `continue_decoding` can
    /// run the whole rest of the stream, its end and Envoy's destroy of the filter included); the
    /// inner call then finds the stream borrowed and does not make a second `&mut`.
    stream: RefCell<Stream>,
    /// Envoy destroyed the filter inside one of its own hooks: that hook frees it on return.
    destroy_pending: Cell<bool>,
    /// A panic was contained in one of its hooks: its state may be half-updated, so it stops
    /// acting (the request goes on through Envoy, fail open); only the destroy hook still ends
    /// its request in the in-flight count.
    poisoned: Cell<bool>,
    /// Envoy is done with the stream: `stream_complete` ran (Envoy then destroys its filters:
    /// `ConnectionManagerImpl::doDeferredStreamDestroy`, ENVOY_FACTS.md §6). From here on no
    /// path but the destroy hook may reach it: on Envoy 1.40 that hook runs later in the worker's
    /// loop, after Envoy cleared the filter's callbacks, and a connection's wake in between must
    /// not call Envoy for it ([`wake_stream`]).
    envoy_done: Cell<bool>,
    /// Test-only (`cross-check`): the response ended inside one of the filter's own hooks (a
    /// response encoded from within `continue_decoding`); that hook marks it on return.
    #[cfg(feature = "cross-check")]
    xc_done_pending: Cell<bool>,
}

/// A worker's recycled filter allocations: an intrusive stack threaded through the freed memory
/// itself (a request reuses the allocation of an earlier one instead of a malloc/free pair,
/// measured at about 250 instructions per request). `Copy` and without a destructor, so the
/// thread-local holding it needs no lazy-initialisation or destructor checks on access.
#[derive(Clone, Copy)]
struct FreeFilters {
    /// Top of the stack: freed memory of a `Filter` whose first word is the next one (or null).
    head: *mut Filter,
    len: usize,
}

thread_local! {
    static FREE_FILTERS: Cell<FreeFilters> = const {
        Cell::new(FreeFilters {
            head: ptr::null_mut(),
            len: 0,
        })
    };
}

/// Allocations a worker keeps for reuse; beyond it they are freed (at most ~100 KiB per worker).
const FREE_FILTERS_MAX: usize = 1024;

/// Memory for a filter: a recycled allocation of this worker, else a new one.
fn alloc_filter() -> *mut Filter {
    let reused = FREE_FILTERS.with(|f| {
        let l = f.get();
        if !l.head.is_null() {
            // SAFETY: `head` is memory of a dropped `Filter` that `free_filter` put on this
            // worker's stack, its first word holding the next entry (see there).
            let next = unsafe { l.head.cast::<*mut Filter>().read() };
            f.set(FreeFilters {
                head: next,
                len: l.len - 1,
            });
        }
        l.head
    });
    if reused.is_null() {
        Box::into_raw(Box::<std::mem::MaybeUninit<Filter>>::new_uninit()).cast()
    } else {
        reused
    }
}

/// Drop the filter at `p` and keep its memory for reuse (or free it).
///
/// # Safety
/// `p` came from [`alloc_filter`], holds a live `Filter`, and nothing uses it afterwards.
unsafe fn free_filter(p: *mut Filter) {
    // SAFETY: per the contract, a live filter nobody uses any more.
    unsafe { ptr::drop_in_place(p) };
    let kept = FREE_FILTERS.try_with(|f| {
        let l = f.get();
        if l.len >= FREE_FILTERS_MAX {
            return false;
        }
        // SAFETY: the memory is ours and holds no value any more; a `Filter` is pointer-aligned
        // and larger than a pointer, so its first word can link the stack.
        unsafe { p.cast::<*mut Filter>().write(l.head) };
        f.set(FreeFilters {
            head: p,
            len: l.len + 1,
        });
        true
    });
    if kept != Ok(true) {
        // SAFETY: allocated by `alloc_filter` as a `Box<MaybeUninit<Filter>>`; dropped above.
        drop(unsafe { Box::from_raw(p.cast::<std::mem::MaybeUninit<Filter>>()) });
    }
}

/// [`StreamHost`] over one Envoy stream, valid for the duration of one hook.
struct EnvoyStream<'a> {
    envoy: HttpStream<'a>,
    fm: *const c_void,
}

/// Commit an event to an HTTP filter scheduler. Thread-safe on Envoy's side.
/// `false` if the call was refused (the exit was released): the event will not be delivered.
pub(crate) fn commit_scheduler(waker: usize, event: u64) -> bool {
    // SAFETY: `waker` is a scheduler from HttpStream::new_scheduler that its owner has not
    // deleted: the registry and the waiter list keep it alive during this call.
    super::threads()
        .call("stream_wake", || unsafe {
            envoy::http_scheduler_commit(waker, event)
        })
        .is_some()
}

/// The part of a host that needs no live stream (usable from the destroy hook).
struct ConfigSink;

impl StreamSink for ConfigSink {
    fn drop_waker(&self, waker: usize) {
        drop_scheduler(waker)
    }
    fn now_nanos(&self) -> u64 {
        super::coarse_monotonic_nanos()
    }
}

impl StreamSink for EnvoyStream<'_> {
    fn drop_waker(&self, waker: usize) {
        drop_scheduler(waker)
    }
    fn now_nanos(&self) -> u64 {
        super::coarse_monotonic_nanos()
    }
}

impl StreamHost for EnvoyStream<'_> {
    fn with_request_header<R>(&self, name: &str, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        self.envoy.request_header(name, f)
    }

    fn send_response(&self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        self.envoy
            .send_response(status, headers, body, b"graceful_drain_control")
    }

    fn protocol(&self) -> Protocol {
        self.envoy
            .protocol(|p| p.map_or(Protocol::Other, Protocol::from_envoy))
    }

    fn connection_id(&self) -> Option<u64> {
        self.envoy.connection_id()
    }

    fn go_away_gracefully(&self) {
        // SAFETY: only ever called from on_http_filter_scheduled (StreamHost's contract).
        unsafe { self.envoy.go_away_gracefully() }
    }

    fn continue_decoding(&self) {
        // SAFETY: inside on_http_filter_scheduled, after our headers hook stopped (StreamHost's
        // contract).
        unsafe { self.envoy.continue_decoding() }
    }

    fn stream_word(&self) -> usize {
        self.fm as usize
    }

    fn new_waker(&self) -> Option<usize> {
        self.envoy.new_scheduler()
    }

    fn wake(&self, waker: usize, event: u64) -> bool {
        commit_scheduler(waker, event)
    }
}

pub(crate) fn drop_scheduler(waker: usize) {
    // SAFETY: the owner deletes its scheduler once, after taking it out of every shared list.
    unsafe { envoy::http_scheduler_delete(waker) }
}

/// # Safety
/// `fm` must be a pointer returned by `on_http_filter_new` and not yet destroyed.
unsafe fn filter<'a>(fm: *const c_void) -> Option<&'a Filter> {
    // SAFETY: per the contract. Only shared references are made: mutation goes through the
    // filter's RefCell, so re-entrant hooks cannot alias a `&mut`.
    unsafe { (fm as *const Filter).as_ref() }
}

/// How a hook ran.
enum Ran<R> {
    Done(R),
    /// The pointers were null: nothing was done.
    Skipped,
    /// The filter is already inside one of its hooks (re-entered): nothing was done.
    Busy,
    /// A panic was contained (logged by the panic hook). What the fallback may know, read
    /// before the filter could be freed: the filter's role, and whether Envoy destroyed the
    /// stream during the hook (then nothing may be done with it).
    Panicked {
        role: Option<Role>,
        stream_gone: bool,
    },
}

/// Run `f` with the filter's stream (borrowed mutably through its RefCell) and a host for it.
fn with_stream<R>(
    hook: &'static str,
    fe: EnvoyPtr,
    fm: *const c_void,
    f: impl FnOnce(&mut Stream, &EnvoyStream, &Shared) -> R,
) -> Ran<R> {
    let mut outermost = false;
    let ran = guard(hook, None, || {
        // SAFETY: Envoy passes back the pointer we returned from on_http_filter_new.
        let Some(filter) = (unsafe { filter(fm) }) else {
            return Some(Ran::Skipped);
        };
        if filter.poisoned.get() {
            return Some(Ran::Skipped);
        }
        let Ok(mut stream) = filter.stream.try_borrow_mut() else {
            return Some(Ran::Busy);
        };
        outermost = true;
        let hook = Hook::frame();
        // SAFETY: `fe` is the stream of the hook running now (or, from wake_stream, of a live
        // filter on this worker inside its connection's scheduled hook).
        let envoy = unsafe { HttpStream::in_hook(&hook, fe) };
        let host = EnvoyStream { envoy, fm };
        let shared = super::shared();
        let r = f(&mut stream, &host, shared);
        #[cfg(test)]
        if PANIC_AFTER_GLUE.take() {
            panic!("test: a panic after the hook's glue");
        }
        #[cfg(feature = "cross-check")]
        if filter.xc_done_pending.take() {
            stream.cross_check_response_done();
        }
        Some(Ran::Done(r))
    });
    // Two loads on the common path; what may panic (counting a failure, a deferred destroy)
    // runs in a guard of its own.
    // SAFETY: the filter is alive until freed here or by the destroy hook, which defers to us
    // (sets destroy_pending) while we held its stream.
    let alive = unsafe { filter(fm) };
    match ran {
        Some(r) => {
            if outermost && alive.is_some_and(|f| f.destroy_pending.get()) {
                destroy_filter(fm);
            }
            r
        }
        None => {
            let (mut role, mut stream_gone) = (None, false);
            guard(hook, (), || {
                if let Some(f) = alive {
                    f.poisoned.set(true);
                    stream_gone = f.destroy_pending.get();
                    // SAFETY: the config outlives its filters; read to count the failure.
                    if let Some(config) = unsafe { f.config.as_ref() } {
                        role = Some(config.role);
                        if config.role == Role::Data {
                            super::shared().counters.module_error();
                        }
                    }
                }
                if outermost && stream_gone {
                    destroy_filter(fm);
                }
            });
            // The filter may be freed now: only what was read above is known.
            Ran::Panicked { role, stream_gone }
        }
    }
}

#[cfg(test)]
std::thread_local! {
    /// Test-only: the next hook run by [`with_stream`] on this thread panics after its glue
    /// (a panic from a fake callback would abort: they are `extern "C"`).
    static PANIC_AFTER_GLUE: Cell<bool> = const { Cell::new(false) };
}

// ---- exported hooks --------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    _ce: EnvoyPtr,
    _name: Buffer,
    config: Buffer,
) -> *const c_void {
    guard("http_filter_config_new", ptr::null(), || {
        // SAFETY: Envoy's config bytes are valid for the duration of this call.
        let raw = unsafe { envoy_bytes(config) };
        match FilterConfig::parse(raw) {
            Ok(c) => {
                if c.role == Role::Data {
                    super::shared().note_data_filter_loaded();
                    super::publish_active_requests();
                }
                log::info!(
                    "graceful_drain: filter config loaded (role={:?}{})",
                    c.role,
                    if c.drain_token.is_some() {
                        ", /drain needs a token"
                    } else {
                        ""
                    }
                );
                Box::into_raw(Box::new(Config {
                    role: c.role,
                    token: c.drain_token.map(Arc::new),
                })) as *const c_void
            }
            Err(e) => {
                log::error!("{e}");
                ptr::null()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(cm: *const c_void) {
    guard("http_filter_config_destroy", (), || {
        if !cm.is_null() {
            // SAFETY: `cm` came from Box::into_raw in config_new and is destroyed once.
            drop(unsafe { Box::from_raw(cm as *mut Config) });
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    cm: *const c_void,
    fe: EnvoyPtr,
) -> *const c_void {
    guard("http_filter_new", ptr::null(), || {
        // SAFETY: `cm` is our config, alive while Envoy creates filters from it.
        let Some(config) = (unsafe { (cm as *const Config).as_ref() }) else {
            return ptr::null();
        };
        let p = alloc_filter();
        // SAFETY: `p` is memory for a `Filter` that holds no value (fresh or recycled).
        unsafe {
            p.write(Filter {
                config: cm as *const Config,
                fe,
                stream: RefCell::new(Stream::new(config.role, config.token.as_ref())),
                destroy_pending: Cell::new(false),
                poisoned: Cell::new(false),
                envoy_done: Cell::new(false),
                #[cfg(feature = "cross-check")]
                xc_done_pending: Cell::new(false),
            })
        };
        p as *const c_void
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    fe: EnvoyPtr,
    fm: *const c_void,
    end_of_stream: bool,
) -> u32 {
    let r = with_stream("request_headers", fe, fm, |s, host, shared| {
        (
            s.on_request_headers(host, shared, end_of_stream),
            matches!(s, Stream::Control(_)),
        )
    });
    match r {
        Ran::Done((HeadersAction::Continue, _)) | Ran::Skipped | Ran::Busy => abi::HEADERS_CONTINUE,
        Ran::Done((HeadersAction::Stop, _)) => abi::HEADERS_STOP_ITERATION,
        // Fail open: the request goes on through Envoy unharmed; only our bookkeeping for it
        // is lost (counted in module_errors, logged by the guard). And a stream Envoy
        // destroyed during the hook has no one left to answer.
        Ran::Panicked {
            role: Some(Role::Data),
            ..
        }
        | Ran::Panicked {
            stream_gone: true, ..
        } => abi::HEADERS_CONTINUE,
        Ran::Panicked { .. } => {
            // A control endpoint may fail: answer 500 with a reason.
            guard("request_headers fallback", (), || {
                let hook = Hook::frame();
                // SAFETY: the stream of the hook running now (not destroyed: see above).
                unsafe { HttpStream::in_hook(&hook, fe) }.send_response(
                    500,
                    &[("content-type", "text/plain")],
                    b"graceful_drain: internal error\n",
                    b"graceful_drain_internal_error",
                )
            });
            abi::HEADERS_STOP_ITERATION
        }
    }
}

fn paused(hook: &'static str, fe: EnvoyPtr, fm: *const c_void) -> bool {
    matches!(
        with_stream(hook, fe, fm, |s, _, _| s.is_paused()),
        Ran::Done(true)
    )
}

/// While a request is paused for its go-away, body and trailers wait (with back-pressure, not
/// unbounded buffering); `continue_decoding` releases them.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    fe: EnvoyPtr,
    fm: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    if paused("request_body", fe, fm) {
        abi::BODY_STOP_ITERATION_AND_WATERMARK
    } else {
        abi::BODY_CONTINUE
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    fe: EnvoyPtr,
    fm: *const c_void,
) -> u32 {
    if paused("request_trailers", fe, fm) {
        abi::TRAILERS_STOP_ITERATION
    } else {
        abi::TRAILERS_CONTINUE
    }
}

/// Fails open: whatever happens in our bookkeeping, the response goes on.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    fe: EnvoyPtr,
    fm: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    #[cfg(feature = "cross-check")]
    if _end_of_stream {
        cross_check_response_done("response_headers", fe, fm);
    }
    // Only a drain gives this hook anything to do (`DataStream::on_response_headers`): while
    // serving, skip the glue (out of line, so this test is all a request pays).
    #[cfg(not(feature = "panic-test"))]
    if !super::shared().is_draining() {
        return abi::HEADERS_CONTINUE;
    }
    response_headers_glue(fe, fm);
    abi::HEADERS_CONTINUE
}

#[inline(never)]
fn response_headers_glue(fe: EnvoyPtr, fm: *const c_void) {
    let _ = with_stream("response_headers", fe, fm, |s, host, shared| {
        s.on_response_headers(host, shared)
    });
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _fe: EnvoyPtr,
    _fm: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    #[cfg(feature = "cross-check")]
    if _end_of_stream {
        cross_check_response_done("response_body", _fe, _fm);
    }
    abi::BODY_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _fe: EnvoyPtr,
    _fm: *const c_void,
) -> u32 {
    #[cfg(feature = "cross-check")]
    cross_check_response_done("response_trailers", _fe, _fm);
    abi::TRAILERS_CONTINUE
}

/// Test-only (`cross-check`): the stream's response ended.
#[cfg(feature = "cross-check")]
fn cross_check_response_done(hook: &'static str, fe: EnvoyPtr, fm: *const c_void) {
    if let Ran::Busy = with_stream(hook, fe, fm, |s, _, _| s.cross_check_response_done()) {
        // SAFETY: our own filter pointer, inside its hook.
        if let Some(f) = unsafe { filter(fm) } {
            f.xc_done_pending.set(true);
        }
    }
}

/// Envoy is done with the stream: the connection manager's stream teardown calls this hook and
/// then the filters' destroy (`ConnectionManagerImpl::doDeferredStreamDestroy`: onStreamComplete,
/// log, destroyFilters). 1.39 runs our destroy hook inside it; 1.40 queues it for later in the
/// worker's loop, after clearing the filter's callbacks, so from here the stream is marked done
/// and no wake reaches it (`wake_stream`). The stream itself is finished by the destroy hook
/// (called for every filter, also one whose stream never completed).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _fe: EnvoyPtr,
    fm: *const c_void,
) {
    // SAFETY: our filter, alive until its destroy hook, which has not run (Envoy calls this
    // hook first).
    if let Some(f) = unsafe { filter(fm) } {
        f.envoy_done.set(true);
    }
}

/// Finish the stream (if not already) and free the filter.
fn destroy_filter(fm: *const c_void) {
    guard("http_filter_destroy", (), || finish_and_free(fm))
}

/// # Panics
/// Only through the glue it runs; call it inside a guard.
fn finish_and_free(fm: *const c_void) {
    let p = fm as *mut Filter;
    {
        // SAFETY: `fm` came from filter_new; it is freed exactly once, here, when no hook of it
        // is running (the destroy hook defers to a running one).
        let filter = unsafe { &*p };
        if let Ok(mut stream) = filter.stream.try_borrow_mut() {
            stream.finish(&ConfigSink, super::shared());
        }
    }
    // SAFETY: as above; nothing uses the filter after this.
    unsafe { free_filter(p) };
}

/// The stream ends here (see the stream-complete hook), and the filter is freed.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(fm: *const c_void) {
    guard("http_filter_destroy", (), || {
        // SAFETY: the filter is alive until this hook (or the hook it defers to) frees it.
        let Some(f) = (unsafe { filter(fm) }) else {
            return;
        };
        if f.stream.try_borrow().is_err() {
            // Destroyed from inside one of its own hooks (e.g. continue_decoding ran the stream to
            // its end): the running hook frees it when it returns.
            f.destroy_pending.set(true);
            return;
        }
        finish_and_free(fm)
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    fe: EnvoyPtr,
    fm: *const c_void,
    event_id: u64,
) {
    let _ = with_stream("scheduled", fe, fm, |s, host, shared| {
        s.on_scheduled(host, shared, event_id)
    });
}

/// Run the scheduled hook's logic for the stream whose word its connection handed back at drain
/// start ([`crate::connections::Action::WakeStream`]): the network filter's scheduled hook, on
/// the same worker and in the same kind of dispatcher callback as the HTTP filter's own, so the
/// go-away is as safe here as there (src/ffi/ENVOY_FACTS.md §2), without a scheduler per request.
///
/// `word` is the pointer of a live filter of ours: a stream attaches it to its connection in its
/// request headers hook and takes it back when it ends (`DataStream::finish`, from
/// the destroy hook), all on this worker, before the filter is freed.
/// A stream Envoy is done with ([`Filter::envoy_done`]) is left alone: on 1.40 its word is still
/// attached until the destroy hook runs later in the loop, while Envoy has already cleared the
/// filter's callbacks.
pub(crate) fn wake_stream(word: usize, event: u64) {
    let fm = word as *const c_void;
    // SAFETY: per the contract above, `fm` is a live filter of ours on this thread.
    let Some(fe) = (unsafe { filter(fm) })
        .filter(|f| !f.envoy_done.get())
        .map(|f| f.fe)
    else {
        return;
    };
    let _ = with_stream("connection_wake", fe, fm, |s, host, shared| {
        s.on_scheduled(host, shared, event)
    });
}

// ---- hooks Envoy 1.40 requires but this module does not use ----------------------------------

super::unused_hooks! {
    fn envoy_dynamic_module_on_http_filter_http_callout_done(EnvoyPtr, *const c_void, u64, u32, *mut HttpHeader, usize, *mut Buffer, usize);
    fn envoy_dynamic_module_on_http_filter_http_stream_headers(EnvoyPtr, *const c_void, u64, *mut HttpHeader, usize, bool);
    fn envoy_dynamic_module_on_http_filter_http_stream_data(EnvoyPtr, *const c_void, u64, *const Buffer, usize, bool);
    fn envoy_dynamic_module_on_http_filter_http_stream_trailers(EnvoyPtr, *const c_void, u64, *mut HttpHeader, usize);
    fn envoy_dynamic_module_on_http_filter_http_stream_complete(EnvoyPtr, *const c_void, u64);
    fn envoy_dynamic_module_on_http_filter_http_stream_reset(EnvoyPtr, *const c_void, u64, u32);
    fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(EnvoyPtr, *const c_void);
    fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(EnvoyPtr, *const c_void);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::abi::{reset_fake, script, take_calls};
    use crate::ffi::module_buffer;

    fn free_filters() -> usize {
        FREE_FILTERS.with(|f| f.get().len)
    }

    /// Give this thread's recycled allocations back (a worker keeps them for the process's life;
    /// a test thread ends, and Miri counts what it kept as leaked).
    fn release_free_filters() {
        while free_filters() > 0 {
            let p = alloc_filter();
            // SAFETY: memory from the free list holds no value; it was a Box<MaybeUninit<Filter>>.
            drop(unsafe { Box::from_raw(p.cast::<std::mem::MaybeUninit<Filter>>()) });
        }
    }

    /// Against the fake callback table: Envoy destroys the filter from inside one of its own
    /// hooks (here while the control stream answers): the destroy is deferred to the end of that
    /// hook, the memory goes to the worker's free list once, and the next filter reuses it.
    #[test]
    fn a_filter_destroyed_inside_its_own_hook_is_freed_once_when_the_hook_returns() {
        reset_fake();
        let ce: EnvoyPtr = ptr::without_provenance_mut(0x300);
        let cm = envoy_dynamic_module_on_http_filter_config_new(
            ce,
            module_buffer(b"graceful_drain"),
            module_buffer(br#"{"role": "control"}"#),
        );
        assert!(!cm.is_null(), "the control config is accepted");
        let fe: EnvoyPtr = ptr::without_provenance_mut(0x400);
        let fm = envoy_dynamic_module_on_http_filter_new(cm, fe);
        assert!(!fm.is_null());
        let free_before = free_filters();
        let answered = std::rc::Rc::new(Cell::new(0));
        let seen = answered.clone();
        script(
            "envoy_dynamic_module_callback_http_send_response",
            move || {
                seen.set(seen.get() + 1);
                envoy_dynamic_module_on_http_filter_destroy(fm);
                0
            },
        );
        let status = envoy_dynamic_module_on_http_filter_request_headers(fe, fm, true);
        assert_eq!(answered.get(), 1, "the control stream answered");
        assert_eq!(status, abi::HEADERS_STOP_ITERATION, "{:?}", take_calls());
        assert_eq!(
            free_filters(),
            free_before + 1,
            "freed exactly once, when the hook returned"
        );
        let again = envoy_dynamic_module_on_http_filter_new(cm, fe);
        assert_eq!(again, fm, "the free list hands the memory out again");
        assert_eq!(free_filters(), free_before);
        envoy_dynamic_module_on_http_filter_destroy(again);
        assert_eq!(free_filters(), free_before + 1);
        envoy_dynamic_module_on_http_filter_config_destroy(cm);
        release_free_filters();
    }

    fn config(role_json: &[u8]) -> *const c_void {
        let ce: EnvoyPtr = ptr::without_provenance_mut(0x300);
        let cm = envoy_dynamic_module_on_http_filter_config_new(
            ce,
            module_buffer(b"graceful_drain"),
            module_buffer(role_json),
        );
        assert!(!cm.is_null(), "config accepted");
        cm
    }

    /// Envoy destroys the filter inside a hook (here while the control stream answers), and the
    /// hook then panics: the fallback must not read the freed filter nor answer on the destroyed
    /// stream. Before, it read the role from the freed memory and sent a second response.
    #[test]
    fn a_panic_after_envoy_destroyed_the_filter_in_the_hook_touches_neither() {
        reset_fake();
        let cm = config(br#"{"role": "control"}"#);
        let fe: EnvoyPtr = ptr::without_provenance_mut(0x400);
        let fm = envoy_dynamic_module_on_http_filter_new(cm, fe);
        let free_before = free_filters();
        script(
            "envoy_dynamic_module_callback_http_send_response",
            move || {
                envoy_dynamic_module_on_http_filter_destroy(fm);
                PANIC_AFTER_GLUE.set(true);
                0
            },
        );
        let status = envoy_dynamic_module_on_http_filter_request_headers(fe, fm, true);
        let calls = take_calls();
        assert_eq!(
            calls.iter().filter(|c| **c == "http_send_response").count(),
            1,
            "one answer, from the glue; none from the fallback: {calls:?}"
        );
        assert_eq!(
            status,
            abi::HEADERS_CONTINUE,
            "nothing to stop: the stream is gone"
        );
        assert_eq!(free_filters(), free_before + 1, "freed once, by the hook");
        envoy_dynamic_module_on_http_filter_config_destroy(cm);
        release_free_filters();
    }

    /// Envoy 1.40 clears a filter's callbacks after `stream_complete` and runs the destroy hook
    /// later in the loop: a connection's wake in between (the drain start handing the stream back
    /// through its connection) must make no call into Envoy for it.
    #[test]
    fn a_stream_envoy_is_done_with_is_not_reached_by_a_wake() {
        reset_fake();
        let cm = config(br#"{"role": "data"}"#);
        let fe: EnvoyPtr = ptr::without_provenance_mut(0x500);
        let fm = envoy_dynamic_module_on_http_filter_new(cm, fe);
        assert_eq!(
            envoy_dynamic_module_on_http_filter_request_headers(fe, fm, true),
            abi::HEADERS_CONTINUE
        );
        // In flight: a wake reaches it (it asks Envoy about its connection and protocol).
        take_calls();
        wake_stream(fm as usize, crate::state::EVENT_GO_AWAY);
        let awake = take_calls();
        assert!(!awake.is_empty(), "a live stream is woken: {awake:?}");
        // Done: the same wake makes no call at all.
        let fm2 = envoy_dynamic_module_on_http_filter_new(cm, fe);
        envoy_dynamic_module_on_http_filter_request_headers(fe, fm2, true);
        envoy_dynamic_module_on_http_filter_stream_complete(fe, fm2);
        take_calls();
        wake_stream(fm2 as usize, crate::state::EVENT_GO_AWAY);
        assert_eq!(
            take_calls(),
            Vec::<&str>::new(),
            "no call for a finished stream"
        );
        envoy_dynamic_module_on_http_filter_destroy(fm);
        envoy_dynamic_module_on_http_filter_destroy(fm2);
        envoy_dynamic_module_on_http_filter_config_destroy(cm);
        release_free_filters();
    }
}
