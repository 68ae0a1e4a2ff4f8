//! Every call the module makes into Envoy, each behind one wrapper (the model: proxy-wasm-rust-
//! sdk's `hostcalls.rs`). No other file calls a callback of [`super::abi`].
//!
//! An Envoy pointer is valid only in certain places: inside a hook of its object, on that
//! object's thread, until its destroy hook. So a wrapper is a method of a handle that can only be
//! made there: the handle's `unsafe fn` constructor is the one promise its maker gives (it names
//! it), and every method after it is safe. Calls that any thread may make on an object the
//! module keeps alive itself (scheduler commits) take its word and are `unsafe fn`, each with its
//! contract. Which thread may make which call, and what it may run re-entrantly, is recorded
//! with its evidence in `ENVOY_FACTS.md`.

use super::abi::{self, Buffer, EnvoyPtr};
use super::{envoy_bytes, module_buffer};
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::ptr;

const EMPTY: Buffer = Buffer {
    ptr: ptr::null(),
    len: 0,
};

/// The stack frame of a hook Envoy is running now. Handles that are valid only inside a hook
/// (`HttpStream`, `NetConnection`) are made from a borrow of it, so the compiler
/// keeps them inside the hook that made them: none can be stored, returned or sent to a thread
/// (`Hook` is neither `Send` nor `Sync`, and the borrow ends with the frame). What is left to the
/// `unsafe` constructor's caller is only that Envoy's pointer is the right one for this hook.
pub struct Hook(PhantomData<*const ()>);

impl Hook {
    /// A hook's frame: make one at the top of the hook, on its stack.
    #[inline]
    pub fn frame() -> Hook {
        Hook(PhantomData)
    }
}

// ---- HTTP filter -------------------------------------------------------------------------------

/// An HTTP stream inside one of its filter's hooks, on its worker.
#[derive(Clone, Copy)]
pub struct HttpStream<'hook> {
    fe: EnvoyPtr,
    _hook: PhantomData<&'hook ()>,
}

impl<'hook> HttpStream<'hook> {
    /// # Safety
    /// `fe` is the filter pointer Envoy passed to the hook running now, whose frame `hook` is
    /// (or a live filter's, inside its connection's scheduled hook on the same worker). The
    /// handle cannot outlive that frame.
    #[inline]
    pub unsafe fn in_hook(_hook: &'hook Hook, fe: EnvoyPtr) -> Self {
        HttpStream {
            fe,
            _hook: PhantomData,
        }
    }
}

impl HttpStream<'_> {
    /// `f` with a request header's value (the first, if repeated), or `None`.
    #[inline]
    pub(crate) fn request_header<R>(self, name: &str, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let mut out = EMPTY;
        // SAFETY: live stream (see `in_hook`); the buffer Envoy fills stays valid until the hook
        // returns or a header is set, and `f` runs before either.
        let found = unsafe {
            abi::envoy_dynamic_module_callback_http_get_header(
                self.fe,
                abi::HEADER_TYPE_REQUEST,
                module_buffer(name.as_bytes()),
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        // SAFETY: as above; `envoy_bytes` handles null/empty.
        f(found.then(|| unsafe { envoy_bytes(out) }))
    }

    /// Answer the request locally (Envoy copies every buffer); `details` goes to the access log.
    pub(crate) fn send_response(
        self,
        status: u32,
        headers: &[(&str, &str)],
        body: &[u8],
        details: &[u8],
    ) {
        let mut raw: Vec<abi::HttpHeader> = headers
            .iter()
            .map(|(k, v)| abi::HttpHeader {
                key_ptr: k.as_ptr().cast(),
                key_len: k.len(),
                value_ptr: v.as_ptr().cast(),
                value_len: v.len(),
            })
            .collect();
        // SAFETY: live stream; every buffer points at memory alive for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                self.fe,
                status,
                raw.as_mut_ptr(),
                raw.len(),
                module_buffer(body),
                module_buffer(details),
            )
        }
    }

    /// `f` with the request's protocol as Envoy names it (`HTTP/1.1`, `HTTP/2`...), or `None`.
    pub(crate) fn protocol<R>(self, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let mut out = EMPTY;
        // SAFETY: live stream; the buffer stays valid during the hook, and `f` runs inside it.
        let ok = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.fe,
                abi::ATTRIBUTE_REQUEST_PROTOCOL,
                &mut out,
            )
        };
        // SAFETY: as above.
        f(ok.then(|| unsafe { envoy_bytes(out) }))
    }

    #[inline]
    pub(crate) fn connection_id(self) -> Option<u64> {
        let mut id = 0u64;
        // SAFETY: live stream; `id` is a valid out pointer.
        let ok = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_get_attribute_int(
                self.fe,
                abi::ATTRIBUTE_CONNECTION_ID,
                &mut id,
            )
        };
        ok.then_some(id)
    }

    /// HTTP/2 GOAWAY (or `connection: close` on HTTP/1.1), graceful.
    ///
    /// # Safety
    /// Only from a scheduled hook of the stream (ENVOY_FACTS.md §2).
    pub(crate) unsafe fn go_away_gracefully(self) {
        // SAFETY: per the contract.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_send_go_away_and_close(self.fe, true)
        }
    }

    /// Let a request whose headers hook stopped iteration go on.
    ///
    /// # Safety
    /// Only from a scheduled hook of the stream, after its headers hook stopped iteration (it
    /// may run the rest of the stream, its destroy hook included, inside this call).
    pub(crate) unsafe fn continue_decoding(self) {
        // SAFETY: per the contract.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(self.fe) }
    }

    /// A scheduler for this stream (its word, for [`http_scheduler_commit`]), if Envoy gives one.
    pub(crate) fn new_scheduler(self) -> Option<usize> {
        // SAFETY: live stream, on its worker.
        let s = unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(self.fe) };
        (!s.is_null()).then_some(s as usize)
    }
}

/// Commit `event` to an HTTP filter scheduler. Any thread.
///
/// # Safety
/// `word` is a scheduler from [`HttpStream::new_scheduler`] not yet given to
/// [`http_scheduler_delete`] (the registry and the waiter list keep it alive during the call).
#[inline]
pub(crate) unsafe fn http_scheduler_commit(word: usize, event: u64) {
    // SAFETY: per the contract.
    unsafe {
        abi::envoy_dynamic_module_callback_http_filter_scheduler_commit(word as *mut c_void, event)
    }
}

/// # Safety
/// Called once, by the scheduler's owner, after taking it out of every shared list.
#[inline]
pub(crate) unsafe fn http_scheduler_delete(word: usize) {
    // SAFETY: per the contract.
    unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(word as *mut c_void) }
}

// ---- network filter ---------------------------------------------------------------------------

/// `envoy_dynamic_module_type_network_connection_state`: Open.
const CONNECTION_OPEN: u32 = 0;
/// `envoy_dynamic_module_type_network_connection_close_type`: FlushWrite.
const CLOSE_FLUSH_WRITE: u32 = 0;
/// `close_type` NoFlush.
const CLOSE_NO_FLUSH: u32 = 1;

/// A downstream connection inside one of its network filter's hooks, on its worker.
#[derive(Clone, Copy)]
pub(crate) struct NetConnection<'hook> {
    fe: EnvoyPtr,
    _hook: PhantomData<&'hook ()>,
}

impl<'hook> NetConnection<'hook> {
    /// # Safety
    /// `fe` is the filter pointer Envoy passed to the hook running now, whose frame `hook` is
    /// (the handle cannot outlive it). In `on_network_filter_scheduled`, only once no close
    /// event was raised (ENVOY_FACTS.md §1: the connection may be gone by then).
    pub(crate) unsafe fn in_hook(_hook: &'hook Hook, fe: EnvoyPtr) -> Self {
        NetConnection {
            fe,
            _hook: PhantomData,
        }
    }
}

impl NetConnection<'_> {
    pub(crate) fn id(self) -> u64 {
        // SAFETY: live filter inside a hook (see `in_hook`).
        unsafe { abi::envoy_dynamic_module_callback_network_filter_get_connection_id(self.fe) }
    }

    pub(crate) fn is_open(self) -> bool {
        // SAFETY: as above.
        let state = unsafe {
            abi::envoy_dynamic_module_callback_network_filter_get_connection_state(self.fe)
        };
        state == CONNECTION_OPEN
    }

    /// A scheduler for this filter (its word, for [`net_scheduler_commit`]), if Envoy gives one.
    pub(crate) fn new_scheduler(self) -> Option<usize> {
        // SAFETY: as above, on the filter's worker.
        let s = unsafe { abi::envoy_dynamic_module_callback_network_filter_scheduler_new(self.fe) };
        (!s.is_null()).then_some(s as usize)
    }

    /// `f` with the read buffer's slices (`None` if Envoy could not give them). Inside the read
    /// hook, where the read buffer is current.
    pub(crate) fn with_read_slices<R>(
        self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<SliceIter<'b>>) -> R,
    ) -> R {
        // SAFETY: as above; inside the read hook (the caller's promise).
        let n = unsafe {
            abi::envoy_dynamic_module_callback_network_filter_get_read_buffer_chunks_size(self.fe)
        };
        // SAFETY: as above; `out` has room for the `n` slices reported for this same buffer.
        let fill = |out: *mut Buffer| unsafe {
            abi::envoy_dynamic_module_callback_network_filter_get_read_buffer_chunks(self.fe, out)
        };
        with_slices(n, fill, f)
    }

    /// As [`NetConnection::with_read_slices`], for the bytes being written (the write buffer
    /// of this write: only its new bytes). Inside the write hook.
    pub(crate) fn with_write_slices<R>(
        self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<SliceIter<'b>>) -> R,
    ) -> R {
        // SAFETY: as above; inside the write hook (the caller's promise).
        let n = unsafe {
            abi::envoy_dynamic_module_callback_network_filter_get_write_buffer_chunks_size(self.fe)
        };
        // SAFETY: as above; `out` has room for the `n` slices reported for this same buffer.
        let fill = |out: *mut Buffer| unsafe {
            abi::envoy_dynamic_module_callback_network_filter_get_write_buffer_chunks(self.fe, out)
        };
        with_slices(n, fill, f)
    }

    /// Inside the read hook: make the read buffer `keep` (drained whole, `keep` put back at its
    /// front). Whether Envoy took it: the drain fails only without a current read buffer.
    pub(crate) fn replace_read(self, keep: &[u8]) -> bool {
        // SAFETY: inside the read hook (the current read buffer is the connection's); `keep`
        // lives for the calls, which copy it.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_drain_read_buffer(self.fe, usize::MAX)
                && (keep.is_empty()
                    || abi::envoy_dynamic_module_callback_network_filter_prepend_read_buffer(
                        self.fe,
                        module_buffer(keep),
                    ))
        }
    }

    /// Inside the write hook: replace the first `n` bytes of this write (a response head's
    /// start, copied by the caller) by `pieces`, in order. Whether Envoy took it: the drain fails
    /// only without a current write buffer (nothing changed then), and with one, prepending
    /// non-empty bytes cannot fail (ENVOY_FACTS.md §6).
    pub(crate) fn replace_write_start(self, n: usize, pieces: [&[u8]; 2]) -> bool {
        if n == 0 || pieces.iter().all(|p| p.is_empty()) {
            return false;
        }
        // SAFETY: as above, inside the write hook (the current write buffer is this write's);
        // the bytes live for the calls, which copy them.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_drain_write_buffer(self.fe, n)
                && pieces.iter().rev().filter(|p| !p.is_empty()).all(|p| {
                    abi::envoy_dynamic_module_callback_network_filter_prepend_write_buffer(
                        self.fe,
                        module_buffer(p),
                    )
                })
        }
    }

    /// Write `bytes` towards the client ahead of the filter chain's own (Envoy copies them; they
    /// do not pass this filter's write hook).
    pub(crate) fn inject_write(self, bytes: &[u8]) {
        // SAFETY: as above; the buffer lives for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_inject_write_data(
                self.fe,
                module_buffer(bytes),
                false,
            )
        }
    }

    /// Inside the write hook: add `bytes` at the end of this write (Envoy copies them).
    pub(crate) fn append_write(self, bytes: &[u8]) -> bool {
        // SAFETY: as above, inside the write hook; the bytes live for the call, which copies.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_append_write_buffer(
                self.fe,
                module_buffer(bytes),
            )
        }
    }

    /// Inside the write hook: drop this write's first `n` bytes.
    pub(crate) fn drain_write(self, n: usize) -> bool {
        // SAFETY: as above, inside the write hook.
        unsafe { abi::envoy_dynamic_module_callback_network_filter_drain_write_buffer(self.fe, n) }
    }

    /// Pass `bytes` to the read filters after this one (towards the upstream), as read data.
    pub(crate) fn inject_read(self, bytes: &[u8]) {
        // SAFETY: as above; the buffer lives for the call, which copies it.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_inject_read_data(
                self.fe,
                module_buffer(bytes),
                false,
            )
        }
    }

    /// Close without flushing (`NoFlush`).
    pub(crate) fn close_no_flush(self, details: &[u8]) {
        // SAFETY: as above; the buffer lives for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_close_with_details(
                self.fe,
                CLOSE_NO_FLUSH,
                module_buffer(details),
            )
        }
    }

    /// Close after flushing what is written; `details` goes to Envoy's access log.
    pub(crate) fn close(self, details: &[u8]) {
        // SAFETY: as above; the buffer lives for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_network_filter_close_with_details(
                self.fe,
                CLOSE_FLUSH_WRITE,
                module_buffer(details),
            )
        }
    }
}

/// Asks Envoy for a buffer's `n` slices with `fill` (which writes `n` descriptors) and lends
/// them to `f`. Usually one slice: a stack array avoids an allocation per call.
fn with_slices<R>(
    n: usize,
    fill: impl FnOnce(*mut Buffer) -> bool,
    f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<SliceIter<'b>>) -> R,
) -> R {
    let mut stack = [EMPTY; 4];
    let mut heap = Vec::new();
    let chunks: &mut [Buffer] = if n <= stack.len() {
        &mut stack[..n]
    } else {
        heap.resize(n, EMPTY);
        &mut heap
    };
    // An empty buffer has no slice to fill: its bytes are none (Envoy calls the write hook with
    // an empty buffer, e.g. when it proxies a response's end: the tracker must see that as no
    // bytes, not as a buffer it could not read).
    let ok = n == 0 || fill(chunks.as_mut_ptr());
    let chunks: &[Buffer] = chunks;
    f(&|| ok.then(|| SliceIter(chunks.iter())))
}

/// The slices of a read buffer, as bytes (valid inside [`NetConnection::with_read_slices`]).
pub(crate) struct SliceIter<'a>(std::slice::Iter<'a, Buffer>);

impl<'a> Iterator for SliceIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        // SAFETY: Envoy filled the slices for the read hook that is running (the iterator does
        // not outlive it); null or empty is an empty slice.
        self.0.next().map(|c| unsafe { envoy_bytes(*c) })
    }
}

/// Commit `event` to a network filter scheduler. Any thread.
///
/// # Safety
/// `word` is a scheduler from [`NetConnection::new_scheduler`] not yet given to
/// [`net_scheduler_delete`] (the caller holds a counted reference to it). In 1.40 a commit can
/// run the filter's destroy hook on this thread (ENVOY_FACTS.md §1); the scheduler itself stays
/// valid until deleted.
pub(crate) unsafe fn net_scheduler_commit(word: usize, event: u64) {
    // SAFETY: per the contract.
    unsafe {
        abi::envoy_dynamic_module_callback_network_filter_scheduler_commit(
            word as *mut c_void,
            event,
        )
    }
}

/// # Safety
/// Called once, by the last holder of the scheduler; no commit on it runs or follows.
pub(crate) unsafe fn net_scheduler_delete(word: usize) {
    // SAFETY: per the contract.
    unsafe {
        abi::envoy_dynamic_module_callback_network_filter_scheduler_delete(word as *mut c_void)
    }
}

// ---- bootstrap extension ---------------------------------------------------------------------

/// The bootstrap extension's config (Envoy's `bce`), alive from its `config_new` to its
/// `config_destroy`. Main thread, unless a method says otherwise.
pub(crate) struct ExtensionConfig(EnvoyPtr);

impl ExtensionConfig {
    /// # Safety
    /// `bce` is the config pointer Envoy passed to `config_new`, and the handle is used on the
    /// main thread until `config_destroy` (the one that holds it is dropped there).
    pub(crate) unsafe fn new(bce: EnvoyPtr) -> Self {
        ExtensionConfig(bce)
    }

    pub(crate) fn new_timer(&self) -> Option<Timer> {
        // SAFETY: main thread, live config.
        let t = unsafe { abi::envoy_dynamic_module_callback_bootstrap_extension_timer_new(self.0) };
        std::ptr::NonNull::new(t).map(Timer)
    }

    pub(crate) fn new_scheduler(&self) -> Option<Scheduler> {
        // SAFETY: main thread, live config.
        let s = unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new(self.0)
        };
        std::ptr::NonNull::new(s).map(Scheduler)
    }

    /// Define an unlabelled gauge (or counter); `None` (logged) if Envoy refuses it, as it does
    /// outside `config_new`.
    pub(crate) fn define(&self, name: &str, gauge: bool) -> Option<usize> {
        let define: DefineMetric = if gauge {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge
        } else {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_counter
        };
        // SAFETY: the live extension config, the kind `define` takes.
        unsafe { define_metric(define, self.0, name) }
    }

    /// The config's unlabelled stats, for updates from any thread ([`ExtensionMetrics`]).
    ///
    /// # Safety
    /// The handle (and any made again from its word) is used only until this config's
    /// `config_destroy`.
    pub(crate) unsafe fn metrics(&self) -> ExtensionMetrics {
        ExtensionMetrics(self.0)
    }

    /// Define a gauge with labels (inside `config_new` only); `None` (logged) if Envoy refuses it.
    pub(crate) fn define_labelled_gauge(&self, name: &str, labels: &[&str]) -> Option<usize> {
        let mut names: Vec<Buffer> = labels.iter().map(|l| module_buffer(l.as_bytes())).collect();
        let mut id = 0usize;
        // SAFETY: main thread, inside config_new; the buffers live for the call (Envoy copies).
        let r = unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge(
                self.0,
                module_buffer(name.as_bytes()),
                names.as_mut_ptr(),
                names.len(),
                &mut id,
            )
        };
        metric_defined(name, r, id)
    }

    /// Set a labelled gauge. Main thread only: Envoy interns the label values in a pool that is
    /// not thread-safe (ENVOY_FACTS.md §3b).
    pub(crate) fn set_labelled_gauge(&self, id: usize, values: &[&str], value: u64) {
        let mut v: Vec<Buffer> = values.iter().map(|l| module_buffer(l.as_bytes())).collect();
        // SAFETY: main thread, live config; `id` from define_labelled_gauge with as many labels.
        let r = unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(
                self.0,
                id,
                v.as_mut_ptr(),
                v.len(),
                value,
            )
        };
        if r != abi::METRICS_SUCCESS {
            log::warn!("graceful_drain: could not set a labelled gauge (result {r})");
        }
    }

    /// Add an admin endpoint handled by `on_bootstrap_extension_admin_request`; false if Envoy
    /// refused it.
    pub(crate) fn register_admin(&self, path: &[u8], help: &str, mutates: bool) -> bool {
        // SAFETY: main thread, live config; the buffers live for the call (Envoy copies).
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_register_admin_handler(
                self.0,
                module_buffer(path),
                module_buffer(help.as_bytes()),
                false,
                mutates,
            )
        }
    }

    /// Without it Envoy stays INITIALIZING and binds no listener.
    pub(crate) fn signal_init_complete(&self) {
        // SAFETY: main thread, live config.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(
                self.0,
            )
        }
    }

    /// The answer's body, inside `on_bootstrap_extension_admin_request` only.
    ///
    /// # Safety
    /// Called from inside that hook (Envoy copies the body: ENVOY_FACTS.md §4).
    pub(crate) unsafe fn admin_respond(&self, body: &[u8]) {
        // SAFETY: per the contract.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_admin_set_response(
                self.0,
                module_buffer(body),
            )
        }
    }
}

/// The bootstrap extension config's unlabelled stats, updated from any thread: a bounds-checked
/// atomic in Envoy (ENVOY_FACTS.md §3b). Valid while the config lives (`ExtensionConfig::metrics`).
#[derive(Clone, Copy)]
pub(crate) struct ExtensionMetrics(EnvoyPtr);

impl ExtensionMetrics {
    /// The handle's word, to keep in an atomic.
    pub(crate) fn word(self) -> usize {
        self.0 as usize
    }

    /// # Safety
    /// `word` is from [`ExtensionMetrics::word`] of a config that is still alive.
    pub(crate) unsafe fn from_word(word: usize) -> Self {
        ExtensionMetrics(word as EnvoyPtr)
    }

    /// Set an unlabelled gauge (an atomic store in Envoy: any thread, ENVOY_FACTS.md §3b).
    pub(crate) fn set_gauge(self, id: usize, value: u64) {
        // SAFETY: live config (the maker's promise); `id` from `ExtensionConfig::define`; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(
                self.0,
                id,
                ptr::null_mut(),
                0,
                value,
            );
        }
    }

    /// Add one to an unlabelled counter (any thread, as `set_gauge`).
    pub(crate) fn increment_counter(self, id: usize) {
        // SAFETY: as `set_gauge`.
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(
                self.0,
                id,
                ptr::null_mut(),
                0,
                1,
            );
        }
    }
}

/// The extension's timer; deleted on drop (main thread only: `timer_delete` asserts it). Its
/// word goes to [`timer_enable`].
pub(crate) struct Timer(std::ptr::NonNull<c_void>);

impl Timer {
    pub(crate) fn word(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

/// Fire `on_bootstrap_extension_timer_fired` in `ms` milliseconds (re-arms). Main thread.
///
/// # Safety
/// `word` is a live [`Timer`]'s, and this runs on the main thread (where its owner drops it).
pub(crate) unsafe fn timer_enable(word: usize, ms: u64) {
    // SAFETY: per the contract.
    unsafe {
        abi::envoy_dynamic_module_callback_bootstrap_extension_timer_enable(word as *mut c_void, ms)
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: created by timer_new, deleted once, here; its owner drops it on the main
        // thread (config_destroy forgets it when it runs elsewhere).
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_timer_delete(self.0.as_ptr())
        }
    }
}

/// The extension's scheduler; deleted on drop. Its word goes to [`extension_scheduler_commit`].
pub(crate) struct Scheduler(std::ptr::NonNull<c_void>);

impl Scheduler {
    pub(crate) fn word(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: created by config_scheduler_new, deleted once, here; its owner makes sure no
        // commit uses it any more (config_destroy, behind the closed gate).
        unsafe {
            abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete(
                self.0.as_ptr(),
            )
        }
    }
}

/// Run `on_bootstrap_extension_config_scheduled` with `event` on the main thread. Any thread
/// (a dispatcher post).
///
/// # Safety
/// `word` is a live [`Scheduler`]'s, not dropped before this returns.
pub(crate) unsafe fn extension_scheduler_commit(word: usize, event: u64) {
    // SAFETY: per the contract.
    unsafe {
        abi::envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(
            word as *mut c_void,
            event,
        )
    }
}

/// Envoy's stats store behind the extension pointer (`be`).
pub(crate) struct ExtensionStats(usize);

impl ExtensionStats {
    /// # Safety
    /// `be` is the extension pointer Envoy passed to `on_bootstrap_extension_new`, and the handle
    /// is used only until `on_bootstrap_extension_destroy` (which takes it back out, waiting for
    /// a visit under way).
    pub(crate) unsafe fn new(be: EnvoyPtr) -> Self {
        ExtensionStats(be as usize)
    }

    /// Visit every gauge (or counter), name and value. Any thread: Envoy's iteration holds its
    /// stats allocator's mutex or works on a snapshot (ENVOY_FACTS.md §3a); `stat` must not
    /// create, define or drop a stat.
    pub(crate) fn iterate(&self, gauges: bool, mut stat: &mut dyn FnMut(&[u8], u64)) {
        let (be, ud) = (self.0 as EnvoyPtr, &mut stat as *mut _ as *mut c_void);
        let iterate = if gauges {
            abi::envoy_dynamic_module_callback_bootstrap_extension_iterate_gauges
        } else {
            abi::envoy_dynamic_module_callback_bootstrap_extension_iterate_counters
        };
        // SAFETY: `be` is live (see `new`); the iterator runs only during the call, while `stat`
        // is alive.
        unsafe { iterate(be, visit_stat, ud) }
    }
}

/// The stats iterator: each stat Envoy visits goes to the closure behind `user_data`.
extern "C" fn visit_stat(name: Buffer, value: u64, user_data: *mut c_void) -> u32 {
    super::guard("stat iterator", 0, || {
        // SAFETY: user_data is the closure passed to the iterate call above, alive during it;
        // the name buffer is valid for this callback.
        let (visit, name) = unsafe {
            (
                &mut *(user_data as *mut &mut dyn FnMut(&[u8], u64)),
                envoy_bytes(name),
            )
        };
        visit(name, value);
        0
    })
}

// ---- logging ---------------------------------------------------------------------------------

/// Whether Envoy's `dynamic_modules` logger would print at `level`. Any thread.
pub(crate) fn log_enabled(level: u32) -> bool {
    // SAFETY: takes a plain integer; Envoy's logger is thread-safe.
    unsafe { abi::envoy_dynamic_module_callback_log_enabled(level) }
}

/// One line to Envoy's `dynamic_modules` logger, with the module's own source location where
/// Envoy prints one (1.40). Any thread; Envoy copies the buffers.
pub(crate) fn log(level: u32, msg: &str, file: &str, line: u32) {
    if abi::gives().log_source_location {
        // SAFETY: the buffers point at `msg` and `file`, alive for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_log_v2(
                level,
                module_buffer(msg.as_bytes()),
                module_buffer(file.as_bytes()),
                line,
            )
        }
    } else {
        // SAFETY: the buffer points at `msg`, alive for the call.
        unsafe { abi::envoy_dynamic_module_callback_log(level, module_buffer(msg.as_bytes())) }
    }
}

// ---- shared ----------------------------------------------------------------------------------

/// The shape of the bootstrap extension's `config_define_{counter,gauge}` callbacks: config, name,
/// label names, their count, the id out.
type DefineMetric = unsafe extern "C" fn(EnvoyPtr, Buffer, *mut Buffer, usize, *mut usize) -> u32;

/// Define one unlabelled metric with `define`; `None` (logged) if Envoy refuses it.
///
/// # Safety
/// `config` is a live config of the kind `define` takes.
unsafe fn define_metric(define: DefineMetric, config: EnvoyPtr, name: &str) -> Option<usize> {
    let mut id = 0usize;
    // SAFETY: per the contract; the name lives for the call; no labels.
    let r = unsafe {
        define(
            config,
            module_buffer(name.as_bytes()),
            ptr::null_mut(),
            0,
            &mut id,
        )
    };
    metric_defined(name, r, id)
}

/// A metric definition's answer: its id, or `None` (logged) if Envoy refused it.
fn metric_defined(name: &str, result: u32, id: usize) -> Option<usize> {
    if result != abi::METRICS_SUCCESS {
        log::warn!("graceful_drain: could not define metric {name} (result {result})");
        return None;
    }
    Some(id)
}
