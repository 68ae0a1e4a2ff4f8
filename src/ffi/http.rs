//! Exported HTTP filter hooks and the stream hosts ([`StreamHost`], [`Wakers`]) over Envoy's
//! stream callbacks. Each hook: lend the filter for the hook ([`super::with_object`]), make a
//! host for the stream, one call into the filter's life ([`crate::http_filter::lifecycle`],
//! which contains panics and says when to free the filter), convert the answer.

use super::abi::{self, Buffer, EnvoyPtr, HttpHeader};
use super::envoy::{self, Hook, HttpStream};
use super::{envoy_bytes, guard, with_object};
use crate::engine::shared::{Protocol, Shared, Stat};
use crate::host::extension::StatsHost;
use crate::host::stream::Wakers;
use crate::host::Hosts;
use crate::http_filter::lifecycle::{self, Filter, Hooked, StreamConfig};
use crate::http_filter::{HeadersAction, StreamHost, StreamSink, INTERNAL_ERROR};
use std::os::raw::c_void;
use std::ptr;

/// [`StreamHost`] over one Envoy stream, valid for the duration of one hook.
struct EnvoyStream<'a> {
    envoy: HttpStream<'a>,
    fm: *const c_void,
}

/// Commit an event to an HTTP filter scheduler. Thread-safe on Envoy's side.
/// `false` if the call was refused (the exit was released): the event will not be delivered.
fn commit_scheduler(waker: usize, event: u64) -> bool {
    // SAFETY: `waker` is a scheduler from HttpStream::new_scheduler that its owner has not
    // deleted: the registry and the waiter list keep it alive during this call.
    super::threads()
        .call("stream_wake", || unsafe {
            envoy::http_scheduler_commit(waker, event)
        })
        .is_some()
}

fn drop_scheduler(waker: usize) {
    // SAFETY: the owner deletes its scheduler once, after taking it out of every shared list.
    unsafe { envoy::http_scheduler_delete(waker) }
}

/// Streams' schedulers, as the shared state reaches them from any thread.
pub(crate) struct Schedulers;

impl Wakers for Schedulers {
    fn commit(&self, waker: usize, event: u64) -> bool {
        commit_scheduler(waker, event)
    }
    fn delete(&self, waker: usize) {
        drop_scheduler(waker)
    }
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

/// The stream's hooks count on its worker thread; the call is the bootstrap extension's counter
/// update, valid on any thread (`stats::ModuleStats`).
impl StatsHost for EnvoyStream<'_> {
    fn count(&self, stat: Stat) {
        super::stats::count(stat)
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

    fn send_internal_error(&self) {
        self.envoy.send_response(
            500,
            &[("content-type", "text/plain")],
            INTERNAL_ERROR,
            b"graceful_drain_internal_error",
        )
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

    fn hosts(&self) -> Hosts<'_> {
        Hosts {
            streams: &Schedulers,
            extension: &super::bootstrap::EnvoyExtension,
        }
    }
}

/// One hook of the filter `fm`: the filter lent for the hook, a host over Envoy's stream (`fe`
/// picks its word: the hook's own, or the filter's for a wake from its connection), one call,
/// then the free the call asks for. `None` when there is no filter or no stream to reach.
/// Panics are contained by the filter's life, which poisons the filter.
#[inline]
fn stream_hook<R>(
    fm: *const c_void,
    fe: impl FnOnce(&Filter) -> Option<EnvoyPtr>,
    call: impl FnOnce(&Filter, &EnvoyStream, &'static Shared) -> Hooked<R>,
) -> Option<R> {
    let frame = Hook::frame();
    let lent = |filter: &Filter| {
        let fe = fe(filter)?;
        // SAFETY: `fe` is the stream of the hook running now (or, from wake_stream, of a live
        // filter on this worker inside its connection's scheduled hook).
        let envoy = unsafe { HttpStream::in_hook(&frame, fe) };
        Some(call(filter, &EnvoyStream { envoy, fm }, super::shared()))
    };
    // SAFETY: Envoy passes back the pointer from on_http_filter_new (a connection's wake, the
    // word its stream attached: `wake_stream`), alive until its destroy hook frees it, which
    // defers to a hook holding the stream: it is freed only below, after the loan ended.
    let hooked = unsafe { with_object(fm, lent) }.flatten()?;
    if hooked.free {
        free_filter(fm);
    }
    Some(hooked.value)
}

/// Free the filter `fm` (its stream finished first), now that no hook holds it.
fn free_filter(fm: *const c_void) {
    // SAFETY: `fm` came from Box::into_raw in filter_new; the filter's life says when it is
    // freed, exactly once, and no loan of it is running.
    let filter = unsafe { Box::from_raw(fm as *mut Filter) };
    lifecycle::release(filter, &ConfigSink, super::shared())
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
        match StreamConfig::load(raw, super::shared()) {
            Some(c) => {
                if c.counts_requests() {
                    super::publish_active_requests();
                }
                Box::into_raw(Box::new(c)) as *const c_void
            }
            None => ptr::null(),
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(cm: *const c_void) {
    guard("http_filter_config_destroy", (), || {
        if !cm.is_null() {
            // SAFETY: `cm` came from Box::into_raw in config_new and is destroyed once.
            drop(unsafe { Box::from_raw(cm as *mut StreamConfig) });
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
        unsafe { with_object(cm, |c: &StreamConfig| Filter::new(c, fe as usize)) }
            .map_or(ptr::null(), |f| Box::into_raw(f) as *const c_void)
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    fe: EnvoyPtr,
    fm: *const c_void,
    end_of_stream: bool,
) -> u32 {
    let action = stream_hook(
        fm,
        |_| Some(fe),
        |f, host, shared| f.request_headers(host, shared, end_of_stream),
    );
    match action {
        Some(HeadersAction::Stop) => abi::HEADERS_STOP_ITERATION,
        Some(HeadersAction::Continue) | None => abi::HEADERS_CONTINUE,
    }
}

fn paused(hook: &'static str, fe: EnvoyPtr, fm: *const c_void) -> bool {
    stream_hook(
        fm,
        |_| Some(fe),
        |f, host, shared| f.is_paused(hook, host, shared),
    ) == Some(true)
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
    stream_hook(
        fm,
        |_| Some(fe),
        |f, host, shared| f.response_headers(host, shared),
    );
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
    stream_hook(
        fm,
        |_| Some(fe),
        |f, host, shared| f.cross_check_response_done(hook, host, shared),
    );
}

/// Envoy is done with the stream: the connection manager's stream teardown calls this hook and
/// then the filters' destroy (ENVOY_FACTS.md §6); from here no wake reaches the stream.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _fe: EnvoyPtr,
    fm: *const c_void,
) {
    // SAFETY: our filter, alive until its destroy hook, which has not run (Envoy calls this
    // hook first).
    unsafe { with_object(fm, Filter::stream_complete) };
}

/// The stream ends here (see the stream-complete hook), and the filter is freed (or, destroyed
/// inside one of its own hooks, by that hook when it returns). The guard is the filter's life's
/// (`lifecycle::release` contains a panic finishing the stream), as in `stream_hook`.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(fm: *const c_void) {
    // SAFETY: the filter is alive until this hook (or the hook it defers to) frees it.
    if unsafe { with_object(fm, Filter::destroy) } == Some(true) {
        free_filter(fm)
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    fe: EnvoyPtr,
    fm: *const c_void,
    event_id: u64,
) {
    stream_hook(
        fm,
        |_| Some(fe),
        |f, host, shared| f.scheduled("scheduled", host, shared, event_id),
    );
}

/// Run the scheduled hook's logic for the stream whose word its connection handed back at drain
/// start ([`crate::connections::Action::WakeStream`]): the network filter's scheduled hook, on
/// the same worker and in the same kind of dispatcher callback as the HTTP filter's own, so the
/// go-away is as safe here as there (src/ffi/ENVOY_FACTS.md §2), without a scheduler per request.
///
/// `word` is the pointer of a live filter of ours: a stream attaches it to its connection in its
/// request headers hook and takes it back when it ends (`DataStream::finish`, from
/// the destroy hook), all on this worker, before the filter is freed. A stream Envoy is done
/// with is left alone ([`Filter::wakeable_stream`]).
pub(crate) fn wake_stream(word: usize, event: u64) {
    stream_hook(
        word as *const c_void,
        |f| f.wakeable_stream().map(|fe| fe as EnvoyPtr),
        |f, host, shared| f.scheduled("connection_wake", host, shared, event),
    );
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
mod tests;
