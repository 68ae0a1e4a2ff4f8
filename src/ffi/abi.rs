//! Raw declarations of the Envoy dynamic-module ABI subset this module uses (callbacks that Envoy
//! exports to modules), for the Envoy generation this build targets: 1.40 by default, 1.39 with
//! the cargo feature `envoy-1-39`, 1.38 with `envoy-1-38`. Hand-written from
//! `source/extensions/dynamic_modules/abi/abi.h` and checked against the symbols (and, where the
//! header changed, the disassembly) of the official 1.38.3, 1.39.3 and 1.40.0 binaries.
//!
//! Every difference between Envoy versions lives here and in `crate::compat`; the rest of the
//! module calls the same Rust functions whatever Envoy it runs in.
//!
//! Callbacks are not linked as imports: `init` looks each one up in the running Envoy (`dlsym`)
//! from `on_program_init`, after checking that this Envoy is the one the build is for. So a
//! module loaded into the wrong Envoy says which build to use, instead of dying in the dynamic
//! linker with `undefined symbol`, or, worse, loading and calling a callback whose shape differs.
//!
//! Opaque Envoy handles are plain `*mut c_void`; C enums are passed as `u32`.
// Each wrapper below has the contract of the C callback of the same name (see the ABI header).
#![allow(clippy::missing_safety_doc)]

use crate::compat;
use std::ffi::CString;
use std::os::raw::{c_char, c_void};
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
/// Not an Envoy value: the update was not sent (see [`http_filter_metric_add`]).
pub const METRICS_NOT_SENT: u32 = u32::MAX;

/// The ABI version string this build returns from `envoy_dynamic_module_on_program_init`: the one
/// of the Envoy it is built for ("v0.1.0" for 1.38 and 1.39, "v0.2.0" for 1.40).
pub const ABI_VERSION: &[u8] = compat::BUILT_FOR.abi_version_nul();

/// Declares the callbacks: a table of addresses resolved once, and for each callback a wrapper
/// with the C name and signature, so call sites read like direct calls into Envoy.
macro_rules! envoy_callbacks {
    ($(
        $(#[cfg($cfg:meta)])?
        $(#[doc = $doc:literal])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        /// Addresses of the callbacks, looked up in the running Envoy by [`init`].
        #[allow(non_snake_case)]
        struct Callbacks {
            $($(#[cfg($cfg)])? $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?,)*
        }

        impl Callbacks {
            /// Looks up every callback; the first one missing is the error.
            fn resolve(find: impl Fn(&str) -> *mut c_void) -> Result<Callbacks, &'static str> {
                Ok(Callbacks {
                    $($(#[cfg($cfg)])? $name: {
                        let p = find(stringify!($name));
                        if p.is_null() {
                            return Err(stringify!($name));
                        }
                        // SAFETY: `p` is the address of the function Envoy exports under this
                        // name; its C signature in the Envoy generation this build is for (checked
                        // by `init` before the table is used) is the one declared here.
                        unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($ty),*) $(-> $ret)?,
                            >(p)
                        }
                    },)*
                })
            }
        }

        /// Stand-ins for every callback, with the same C signatures, for the FFI layer's unit
        /// tests (`install_fake`): each records its name and returns what the test scripted
        /// (zero, null or false unless told otherwise), running the scripted side effect first.
        #[cfg(test)]
        pub(crate) mod fake {
            use super::*;
            $(
                $(#[cfg($cfg)])?
                #[allow(unused_variables)]
                unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                    <ret_or_unit!($($ret)?) as FakeReturn>::from_raw(called(stringify!($name)))
                }
            )*
            /// The stand-in named `name`, or null.
            pub(crate) fn resolve(name: &str) -> *mut c_void {
                $(
                    $(#[cfg($cfg)])?
                    if name == stringify!($name) {
                        return $name as *const () as *mut c_void;
                    }
                )*
                std::ptr::null_mut()
            }
        }

        $(
            $(#[cfg($cfg)])?
            $(#[doc = $doc])*
            #[inline]
            pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                match CALLBACKS.get() {
                    // SAFETY: the caller upholds the contract of the C callback.
                    Some(c) => unsafe { (c.$name)($($arg),*) },
                    // Not reachable from Envoy: it calls no hook unless on_program_init, which
                    // fills the table, succeeded. Zero is a valid value of every return type here
                    // (bool, u32, a pointer, unit), and means "nothing done".
                    #[allow(clippy::unit_arg)]
                    None => unsafe { std::mem::zeroed() },
                }
            }
        )*
    };
}

static CALLBACKS: OnceLock<Callbacks> = OnceLock::new();

#[cfg(test)]
use super::fake_envoy::{called, ret_or_unit, FakeReturn};
#[cfg(test)]
pub(crate) use super::fake_envoy::{script, take_calls};

/// The FFI layer's unit tests run against fake callbacks: the table is filled with them once per
/// test process (no Envoy there to look callbacks up in).
#[cfg(test)]
pub(crate) fn install_fake() {
    let _ = CALLBACKS.set(Callbacks::resolve(fake::resolve).expect("a fake for every callback"));
}

/// Forget this thread's scripts and calls (a test's start).
#[cfg(test)]
pub(crate) fn reset_fake() {
    install_fake();
    super::fake_envoy::clear();
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

/// Called first in `on_program_init`: detects which Envoy this is, and when it is the one this
/// build is for, resolves every callback. Otherwise logs one error line naming both versions and
/// returns false: `on_program_init` then returns null, and Envoy refuses to start
/// (`Failed to initialize dynamic module`).
pub(crate) fn init() -> bool {
    if CALLBACKS.get().is_some() {
        return true;
    }
    let found = compat::EnvoyGeneration::detect(|name| !lookup(name).is_null());
    let resolved = Callbacks::resolve(lookup);
    let missing = resolved.as_ref().err().copied();
    match (compat::verdict(compat::BUILT_FOR, found, missing), resolved) {
        (Ok(()), Ok(table)) => {
            let _ = CALLBACKS.set(table);
            true
        }
        (Err(line), _) => {
            log_early(LOG_ERROR, &line);
            false
        }
        (Ok(()), Err(_)) => false, // verdict always refuses when a callback is missing
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

/// Which metric update [`http_filter_metric_add`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricUpdate {
    IncrementCounter,
    IncrementGauge,
    DecrementGauge,
}

/// Adds 1 to (or, for [`MetricUpdate::DecrementGauge`], takes 1 from) an unlabelled metric
/// defined in an HTTP filter's `config_new`. Envoy 1.39 and later update it through the config
/// (`config`, any thread); 1.38 only has the per-stream form, so it needs `filter`, the stream's
/// Envoy pointer inside one of its hooks. Without one (null), 1.38 sends nothing and this returns
/// [`METRICS_NOT_SENT`].
///
/// # Safety
/// `config` is the live config pointer from `config_new`; `filter` is null or the live stream of
/// the current hook, on its worker thread.
#[allow(unused_variables)] // each generation uses only one of the two pointers
pub unsafe fn http_filter_metric_add(
    config: EnvoyPtr,
    filter: EnvoyPtr,
    update: MetricUpdate,
    id: usize,
) -> u32 {
    let none = std::ptr::null_mut();
    #[cfg(not(feature = "envoy-1-38"))]
    // SAFETY: per the contract; config-level stats are atomics in Envoy.
    unsafe {
        match update {
            MetricUpdate::IncrementCounter => {
                envoy_dynamic_module_callback_http_filter_config_increment_counter(
                    config, id, none, 0, 1,
                )
            }
            MetricUpdate::IncrementGauge => {
                envoy_dynamic_module_callback_http_filter_config_increment_gauge(
                    config, id, none, 0, 1,
                )
            }
            MetricUpdate::DecrementGauge => {
                envoy_dynamic_module_callback_http_filter_config_decrement_gauge(
                    config, id, none, 0, 1,
                )
            }
        }
    }
    #[cfg(feature = "envoy-1-38")]
    {
        if filter.is_null() {
            return METRICS_NOT_SENT;
        }
        // SAFETY: per the contract: a live stream inside its hook.
        unsafe {
            match update {
                MetricUpdate::IncrementCounter => {
                    envoy_dynamic_module_callback_http_filter_increment_counter(
                        filter, id, none, 0, 1,
                    )
                }
                MetricUpdate::IncrementGauge => {
                    envoy_dynamic_module_callback_http_filter_increment_gauge(
                        filter, id, none, 0, 1,
                    )
                }
                MetricUpdate::DecrementGauge => {
                    envoy_dynamic_module_callback_http_filter_decrement_gauge(
                        filter, id, none, 0, 1,
                    )
                }
            }
        }
    }
}

envoy_callbacks! {
    // ---- common -----------------------------------------------------------------------------
    fn envoy_dynamic_module_callback_log(level: u32, message: Buffer);
    fn envoy_dynamic_module_callback_log_enabled(level: u32) -> bool;
    #[cfg(not(any(feature = "envoy-1-38", feature = "envoy-1-39")))]
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
    fn envoy_dynamic_module_callback_network_filter_config_define_counter(
        config: EnvoyPtr,
        name: Buffer,
        id: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_network_filter_config_define_gauge(
        config: EnvoyPtr,
        name: Buffer,
        id: *mut usize,
    ) -> u32;
    // Config-scope gauge set (1.39 and 1.40 binaries, disassembled: `(config, id, value)`, ids
    // from 1, the gauge's own `set`; absent from 1.38). An atomic store: any thread.
    #[cfg(not(feature = "envoy-1-38"))]
    fn envoy_dynamic_module_callback_network_filter_config_set_gauge(
        config: EnvoyPtr,
        id: usize,
        value: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_network_filter_increment_counter(
        filter: EnvoyPtr,
        id: usize,
        value: u64,
    ) -> u32;

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

    // ---- HTTP filter: config scope (metrics; define only inside config_new) --------------------
    fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    // Config-scope metric updates (1.39 and later): usable from any worker, with no stream.
    #[cfg(not(feature = "envoy-1-38"))]
    fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    #[cfg(not(feature = "envoy-1-38"))]
    fn envoy_dynamic_module_callback_http_filter_config_increment_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    #[cfg(not(feature = "envoy-1-38"))]
    fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    #[cfg(not(feature = "envoy-1-38"))]
    fn envoy_dynamic_module_callback_http_filter_config_decrement_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;

    // Stream-scope metric updates: 1.38 has no config-scope form, so the filter's own pointer is
    // used (valid only inside one of its hooks).
    #[cfg(feature = "envoy-1-38")]
    fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    #[cfg(feature = "envoy-1-38")]
    fn envoy_dynamic_module_callback_http_filter_increment_gauge(
        filter: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    #[cfg(feature = "envoy-1-38")]
    fn envoy_dynamic_module_callback_http_filter_decrement_gauge(
        filter: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;

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
