//! Raw declarations of the Envoy dynamic-module ABI subset this module uses (callbacks that Envoy
//! exports to modules), for every supported Envoy generation (1.38, 1.39, 1.40). Hand-written from
//! `source/extensions/dynamic_modules/abi/abi.h` and checked against the symbols (and, where the
//! header changed, the disassembly) of the official 1.38.3, 1.39.3 and 1.40.0 binaries.
//!
//! Every difference between Envoy versions lives here and in `crate::host::envoy_release`; the rest of the
//! module calls the same Rust functions whatever Envoy it runs in.
//!
//! Callbacks are not linked as imports: `init` looks each one up in the running Envoy (`dlsym`)
//! from `on_program_init`, after telling which generation this Envoy is. A callback marked
//! `#[since(G)]` was added in generation `G`: it is looked up only in `G` and later (and required
//! there), and left out before; its wrapper then does nothing and returns zero, so callers ask
//! `gives()` first. So one `.so` loads into each supported Envoy, and an Envoy that lacks a
//! callback it should have is refused with one line naming it, instead of dying in the dynamic
//! linker with `undefined symbol`.
//!
//! Opaque Envoy handles are plain `*mut c_void`; C enums are passed as `u32`.
// Each wrapper below has the contract of the C callback of the same name (see the ABI header).
#![allow(clippy::missing_safety_doc)]

use crate::host::envoy_release as compat;
use std::ffi::CString;
use std::os::raw::{c_char, c_void};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// A borrowed byte range: `envoy_dynamic_module_type_{envoy,module}_buffer`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Buffer {
    pub ptr: *const c_char,
    pub len: usize,
}

/// `envoy_dynamic_module_type_{envoy,module}_http_header`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HttpHeader {
    pub key_ptr: *const c_char,
    pub key_len: usize,
    pub value_ptr: *const c_char,
    pub value_len: usize,
}

pub type EnvoyPtr = *mut c_void;

/// `envoy_dynamic_module_type_{counter,gauge}_iterator_fn`: name, value, user data; the return
/// value (continue/stop) is ignored by Envoy 1.38-1.40.
pub type StatIterator = extern "C" fn(name: Buffer, value: u64, user_data: *mut c_void) -> u32;

// enum envoy_dynamic_module_type_on_http_filter_request_headers_status (and response)
pub const HEADERS_CONTINUE: u32 = 0;
pub const HEADERS_STOP_ITERATION: u32 = 1;
// body and trailers status
pub const BODY_CONTINUE: u32 = 0;
pub const BODY_STOP_ITERATION_AND_WATERMARK: u32 = 2;
pub const TRAILERS_CONTINUE: u32 = 0;
pub const TRAILERS_STOP_ITERATION: u32 = 1;
// envoy_dynamic_module_type_http_filter_stream_reset_reason
pub const RESET_LOCAL: u32 = 0;
// envoy_dynamic_module_type_http_header_type
pub const HEADER_TYPE_REQUEST: u32 = 0;
// envoy_dynamic_module_type_attribute_id (same values in 1.38, 1.39 and 1.40)
pub const ATTRIBUTE_REQUEST_PROTOCOL: u32 = 10;
pub const ATTRIBUTE_CONNECTION_ID: u32 = 28;
// envoy_dynamic_module_type_log_level
pub const LOG_TRACE: u32 = 0;
pub const LOG_DEBUG: u32 = 1;
pub const LOG_INFO: u32 = 2;
pub const LOG_WARN: u32 = 3;
pub const LOG_ERROR: u32 = 4;
// envoy_dynamic_module_type_metrics_result
pub const METRICS_SUCCESS: u32 = 0;

/// The table's field for one callback: its address, or for one a generation added (`#[since]`)
/// an `Option` of it (so the callbacks every generation has cost no check per call).
macro_rules! callback_field {
    (; $f:ty) => { $f };
    ($since:ident; $f:ty) => { Option<$f> };
}

/// A resolved address `$p` (non-null) as the table's field.
macro_rules! callback_found {
    (; $p:expr) => {
        $p
    };
    ($since:ident; $p:expr) => {
        Some($p)
    };
}

/// The table's field when the running generation is older than the callback: `None` for a
/// `#[since]` one; for one every supported generation has, the Envoy cannot host the module.
macro_rules! callback_absent {
    (; $name:ident) => {
        return Err(stringify!($name))
    };
    ($since:ident; $name:ident) => {
        None
    };
}

/// Call the callback `$name` through the table, or give zero ("nothing done") where there is none.
macro_rules! callback_call {
    (; $name:ident($($arg:ident),*)) => {
        match CALLBACKS.get() {
            // SAFETY: the caller upholds the contract of the C callback.
            Some(c) => unsafe { (c.$name)($($arg),*) },
            // Not reachable from Envoy: it calls no hook unless on_program_init, which fills
            // the table, succeeded. Zero is a valid value of every return type here (bool, u32,
            // a pointer, unit).
            #[allow(clippy::unit_arg)]
            None => unsafe { std::mem::zeroed() },
        }
    };
    ($since:ident; $name:ident($($arg:ident),*)) => {
        match CALLBACKS.get().and_then(|c| c.$name) {
            // SAFETY: the caller upholds the contract of the C callback.
            Some(f) => unsafe { f($($arg),*) },
            // The running Envoy lacks it: callers check `gives` first.
            #[allow(clippy::unit_arg)]
            None => unsafe { std::mem::zeroed() },
        }
    };
}

/// Declares the callbacks: a table of addresses resolved once, and for each callback a wrapper
/// with the C name and signature, so call sites read like direct calls into Envoy.
macro_rules! envoy_callbacks {
    ($(
        $(#[since($since:ident)])?
        $(#[doc = $doc:literal])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        /// Addresses of the callbacks, looked up in the running Envoy by [`init`]; a `#[since]`
        /// one is `None` where the running generation does not have it.
        #[allow(non_snake_case)]
        struct Callbacks {
            $($name: callback_field!($($since)?; unsafe extern "C" fn($($ty),*) $(-> $ret)?),)*
        }

        impl Callbacks {
            /// Looks up every callback `found` has; the first one missing is the error.
            fn resolve(
                found: compat::EnvoyGeneration,
                find: impl Fn(&str) -> *mut c_void,
            ) -> Result<Callbacks, &'static str> {
                Ok(Callbacks {
                    $($name: {
                        let since = compat::EnvoyGeneration::V1_38
                            $(.max(compat::EnvoyGeneration::$since))?;
                        if found < since {
                            callback_absent!($($since)?; $name)
                        } else {
                            let p = find(stringify!($name));
                            if p.is_null() {
                                return Err(stringify!($name));
                            }
                            // SAFETY: `p` is the address of the function Envoy exports under
                            // this name; its C signature in every generation that has it (the
                            // ones from `since` on) is the one declared here.
                            callback_found!($($since)?; unsafe {
                                std::mem::transmute::<
                                    *mut c_void,
                                    unsafe extern "C" fn($($ty),*) $(-> $ret)?,
                                >(p)
                            })
                        }
                    },)*
                })
            }
        }

        /// Stand-ins for every callback, with the same C signatures, for the FFI layer's unit
        /// tests (`install_fake`): each records its name and arguments and returns what the
        /// test scripted (zero, null or false unless told otherwise), running the scripted side
        /// effect first; in a generation the test pretends to run in that lacks it, nothing.
        #[cfg(test)]
        pub(crate) mod fake {
            use super::*;
            $(
                unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                    let since = compat::EnvoyGeneration::V1_38
                        $(.max(compat::EnvoyGeneration::$since))?;
                    let args = vec![$(FakeArg::record(&$arg)),*];
                    <ret_or_unit!($($ret)?) as FakeReturn>::from_raw(
                        called(stringify!($name), since, args),
                    )
                }
            )*
            /// The stand-in named `name`, or null.
            pub(crate) fn resolve(name: &str) -> *mut c_void {
                $(
                    if name == stringify!($name) {
                        return $name as *const () as *mut c_void;
                    }
                )*
                std::ptr::null_mut()
            }
        }

        $(
            $(#[doc = $doc])*
            #[inline]
            pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                callback_call!($($since)?; $name($($arg),*))
            }
        )*
    };
}

static CALLBACKS: OnceLock<Callbacks> = OnceLock::new();

/// The FFI layer's unit tests' side of the table, in one place: the fake callbacks
/// (`fake_envoy.rs`) and their installation.
#[cfg(test)]
pub(crate) use fake_table::*;
#[cfg(test)]
mod fake_table {
    pub(crate) use super::super::fake_envoy::{
        called, pretend_generation, ret_or_unit, script, script_with_args, take_calls,
        take_calls_with_args, Arg, Call, FakeArg, FakeReturn,
    };
    use super::*;

    /// The Envoy generation the FFI layer's unit tests run in unless a test thread pretends to
    /// run in another (`pretend_generation`).
    const FAKE_GENERATION: compat::EnvoyGeneration = compat::EnvoyGeneration::V1_40;

    /// The FFI layer's unit tests run against fake callbacks: the table is filled with them once
    /// per test process (no Envoy there to look callbacks up in), as in a 1.40 Envoy (every
    /// callback); a test thread that pretends to run in an older one finds those it lacks absent.
    pub(crate) fn install_fake() {
        FOUND.store(FAKE_GENERATION as u8, Ordering::Relaxed);
        let _ = CALLBACKS.set(
            Callbacks::resolve(FAKE_GENERATION, fake::resolve).expect("a fake for every callback"),
        );
    }

    /// Forget this thread's scripts and calls (a test's start).
    pub(crate) fn reset_fake() {
        install_fake();
        super::super::fake_envoy::clear();
    }
}

/// A symbol of the running Envoy, or null.
fn lookup(name: &str) -> *mut c_void {
    let Ok(name) = CString::new(name) else {
        return std::ptr::null_mut();
    };
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope, which holds the
    // Envoy executable's exported dynamic symbols (the module itself is loaded RTLD_LOCAL).
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// The generation of the Envoy the module was loaded into (set once by [`init`], before Envoy
/// calls any hook; a relaxed load on the request path).
static FOUND: AtomicU8 = AtomicU8::new(compat::EnvoyGeneration::V1_40 as u8);

/// The running Envoy's generation; 1.40 before [`init`] ran (nothing calls Envoy then).
pub(crate) fn generation() -> compat::EnvoyGeneration {
    #[cfg(test)]
    if let Some(g) = super::fake_envoy::pretended_generation() {
        return g;
    }
    compat::EnvoyGeneration::from_u8(FOUND.load(Ordering::Relaxed))
}

/// What the module does differently in the running Envoy (`compat::Gives`).
#[inline]
pub(crate) fn gives() -> compat::Gives {
    generation().gives()
}

/// Where the module stands in the running Envoy (set once by [`init`], with the generation).
static STANDING: OnceLock<compat::Standing> = OnceLock::new();

/// Where the module stands in the running Envoy: its release, tested or not, its surface. `None`
/// before [`init`] succeeded (nothing calls Envoy then; unit tests: a tested Envoy).
pub(crate) fn standing() -> Option<&'static compat::Standing> {
    STANDING.get()
}

/// Called first in `on_program_init`: detects which Envoy this is and, when it can host the
/// module, resolves every callback it has and tells where the module stands there
/// ([`standing`]: an Envoy newer than the tested ones, or whose release cannot be told, gets the
/// surface the operator chose, reduced by default). Otherwise logs one error line (the versions
/// supported, the missing callback, or the operator's `refuse`) and returns `None`:
/// `on_program_init` then returns null, and Envoy refuses to start (`Failed to initialize
/// dynamic module`). `Some`: the ABI version string for this Envoy.
pub(crate) fn init() -> Option<&'static [u8]> {
    if CALLBACKS.get().is_some() {
        return Some(generation().abi_version_nul());
    }
    let found = compat::EnvoyGeneration::detect(|name| !lookup(name).is_null());
    let resolved = Callbacks::resolve(found, lookup);
    let missing = resolved.as_ref().err().copied();
    match (compat::verdict(found, missing), resolved) {
        (Ok(()), Ok(table)) => {
            // The callbacks fit; the release decides whether they were tested (compat). Read
            // every time: an unreadable binary is said (untested), never skipped.
            let policy = compat::on_untested(
                std::env::var_os(compat::ON_UNTESTED_ENV).as_deref(),
                std::env::var_os(compat::ALLOW_UNTESTED_ENV).as_deref(),
            );
            let (release, why_unknown) = match compat::read_rodata("/proc/self/exe".as_ref()) {
                Ok(rodata) => (
                    compat::release_in(&rodata),
                    "no release string in its binary".to_string(),
                ),
                Err(e) => (None, format!("its binary cannot be read: {e}")),
            };
            let standing = policy.and_then(|p| compat::release_verdict(release, p, &why_unknown));
            match standing {
                Ok(standing) => {
                    let _ = STANDING.set(standing);
                }
                Err(line) => {
                    log_early(LOG_ERROR, &line);
                    return None;
                }
            }
            FOUND.store(found as u8, Ordering::Relaxed);
            let _ = CALLBACKS.set(table);
            Some(found.abi_version_nul())
        }
        (Err(line), _) => {
            log_early(LOG_ERROR, &line);
            None
        }
        (Ok(()), Err(_)) => None, // verdict always refuses when a callback is missing
    }
}

/// Logs before (or instead of) the callback table: through Envoy's `log` callback, whose shape
/// (level, pointer, length) is the same in every Envoy that has dynamic modules, else stderr.
fn log_early(level: u32, message: &str) {
    let p = lookup("envoy_dynamic_module_callback_log");
    if p.is_null() {
        eprintln!("{message}");
        return;
    }
    // SAFETY: Envoy's exported log callback; the buffer points at `message`, alive for the call.
    unsafe {
        let log = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u32, Buffer)>(p);
        log(
            level,
            Buffer {
                ptr: message.as_ptr().cast(),
                len: message.len(),
            },
        )
    }
}

envoy_callbacks! {
    // ---- common -----------------------------------------------------------------------------
    fn envoy_dynamic_module_callback_log(level: u32, message: Buffer);
    fn envoy_dynamic_module_callback_log_enabled(level: u32) -> bool;
    #[since(V1_40)]
    /// 1.40: `log` with the source location Envoy prints (`log` prints an empty `[:]` there).
    fn envoy_dynamic_module_callback_log_v2(
        level: u32,
        message: Buffer,
        source_file: Buffer,
        source_line: u32,
    );

    // ---- network filter (signatures checked against the 1.40.0 binary by disassembly: the
    // network-filter metric calls take no label arguments, unlike the HTTP ones) -----------------
    fn envoy_dynamic_module_callback_network_filter_get_connection_id(filter: EnvoyPtr) -> u64;
    /// 0 Open, 1 Closing, 2 Closed.
    fn envoy_dynamic_module_callback_network_filter_get_connection_state(filter: EnvoyPtr) -> u32;
    fn envoy_dynamic_module_callback_network_filter_get_read_buffer_chunks_size(
        filter: EnvoyPtr,
    ) -> usize;
    fn envoy_dynamic_module_callback_network_filter_get_read_buffer_chunks(
        filter: EnvoyPtr,
        out: *mut Buffer,
    ) -> bool;
    /// The write hook's buffer (this write's bytes only); the same shapes as the read buffer's.
    fn envoy_dynamic_module_callback_network_filter_get_write_buffer_chunks_size(
        filter: EnvoyPtr,
    ) -> usize;
    fn envoy_dynamic_module_callback_network_filter_get_write_buffer_chunks(
        filter: EnvoyPtr,
        out: *mut Buffer,
    ) -> bool;
    /// The write hook's buffer (this write's bytes): drain its first `len` bytes (clamped to
    /// its length), and prepend bytes (copied). Both false without a current write buffer.
    /// The read hook's buffer (the connection's read buffer), as the two below for the write
    /// hook's: `drain(min(len, length()))`, `prepend` a copy; false without a buffer (or, to
    /// prepend, without bytes). Beside the write ones in Envoy's `abi_impl.cc` since they were
    /// added; bound by rustc with BIND_NOW, so a binary without them refuses the module at load
    /// (`tests/connection_mode.rs` holds pipelined requests back through them on 1.40.0).
    fn envoy_dynamic_module_callback_network_filter_drain_read_buffer(
        filter: EnvoyPtr,
        len: usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_network_filter_prepend_read_buffer(
        filter: EnvoyPtr,
        data: Buffer,
    ) -> bool;
    /// Binaries 1.38.3-1.40.0, disassembled: the current write buffer's `drain(min(len,
    /// length()))` and `prepend(ptr, len)`.
    fn envoy_dynamic_module_callback_network_filter_drain_write_buffer(
        filter: EnvoyPtr,
        len: usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_network_filter_prepend_write_buffer(
        filter: EnvoyPtr,
        data: Buffer,
    ) -> bool;
    /// The write hook's buffer: add `data` (copied) at its end; false without one. Present in
    /// 1.38.3, 1.39.3 and 1.40.0 (docs/contributing/long-lived-streams.md E1, E6).
    fn envoy_dynamic_module_callback_network_filter_append_write_buffer(
        filter: EnvoyPtr,
        data: Buffer,
    ) -> bool;
    /// Copies `data` and passes it to the read filters after this one
    /// (`injectReadDataToFilterChain`, docs/contributing/long-lived-streams.md E2-E4).
    fn envoy_dynamic_module_callback_network_filter_inject_read_data(
        filter: EnvoyPtr,
        data: Buffer,
        end_stream: bool,
    );
    /// Passes `data` down the write filter chain after this filter, then to the socket.
    fn envoy_dynamic_module_callback_network_filter_inject_write_data(
        filter: EnvoyPtr,
        data: Buffer,
        end_stream: bool,
    );
    /// close_type: 0 FlushWrite, 1 NoFlush, 2 FlushWriteAndDelay, 3 Abort, 4 AbortReset.
    fn envoy_dynamic_module_callback_network_filter_close_with_details(
        filter: EnvoyPtr,
        close_type: u32,
        details: Buffer,
    );
    fn envoy_dynamic_module_callback_network_filter_scheduler_new(filter: EnvoyPtr) -> *mut c_void;
    /// Thread-safe: posts to the connection's dispatcher; a no-op once the filter is gone.
    fn envoy_dynamic_module_callback_network_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_network_filter_scheduler_delete(scheduler: *mut c_void);

    // ---- HTTP filter: stream scope (worker thread, inside a hook) ----------------------------
    fn envoy_dynamic_module_callback_http_get_header(
        filter: EnvoyPtr,
        header_type: u32,
        key: Buffer,
        result: *mut Buffer,
        index: usize,
        optional_count: *mut usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_send_response(
        filter: EnvoyPtr,
        status_code: u32,
        headers: *mut HttpHeader,
        headers_len: usize,
        body: Buffer,
        details: Buffer,
    );
    fn envoy_dynamic_module_callback_http_filter_send_go_away_and_close(
        filter: EnvoyPtr,
        graceful: bool,
    );
    fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: EnvoyPtr);
    fn envoy_dynamic_module_callback_http_filter_reset_stream(
        filter: EnvoyPtr,
        reason: u32,
        details: Buffer,
    );
    fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: EnvoyPtr,
        attribute_id: u32,
        result: *mut Buffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: EnvoyPtr,
        attribute_id: u32,
        result: *mut u64,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_scheduler_new(filter: EnvoyPtr)
        -> *mut c_void;
    /// Thread-safe: posts to the stream's dispatcher; a no-op once the filter is gone.
    fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);

    // ---- bootstrap extension (main thread unless noted) -------------------------------------
    fn envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(
        config: EnvoyPtr,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_register_admin_handler(
        config: EnvoyPtr,
        path_prefix: Buffer,
        help_text: Buffer,
        removable: bool,
        mutates_server_state: bool,
    ) -> bool;
    fn envoy_dynamic_module_callback_bootstrap_extension_admin_set_response(
        config: EnvoyPtr,
        body: Buffer,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_timer_new(
        config: EnvoyPtr,
    ) -> *mut c_void;
    fn envoy_dynamic_module_callback_bootstrap_extension_timer_enable(
        timer: *mut c_void,
        delay_ms: u64,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_timer_delete(timer: *mut c_void);
    fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new(
        config: EnvoyPtr,
    ) -> *mut c_void;
    /// Thread-safe: posts to the main dispatcher.
    fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete(
        scheduler: *mut c_void,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_config_define_counter(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    /// Visit every gauge of the stats store (any thread while the extension lives; a full walk:
    /// call rarely; see ENVOY_FACTS.md §3a).
    fn envoy_dynamic_module_callback_bootstrap_extension_iterate_gauges(
        extension: EnvoyPtr,
        iterator: StatIterator,
        user_data: *mut c_void,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_iterate_counters(
        extension: EnvoyPtr,
        iterator: StatIterator,
        user_data: *mut c_void,
    );
    fn envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
}
