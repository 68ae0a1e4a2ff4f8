//! Raw declarations of the Envoy 1.40 dynamic-module ABI subset this module uses (callbacks that
//! Envoy exports to modules). Hand-written from `source/extensions/dynamic_modules/abi/abi.h` and
//! checked against the symbols of the official 1.40.0 binary. rustc links the cdylib with
//! BIND_NOW, so a symbol missing from the running Envoy fails loudly at load time.
//!
//! Opaque Envoy handles are plain `*mut c_void`; C enums are passed as `u32`.

use std::os::raw::{c_char, c_void};

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
/// value (continue/stop) is ignored by Envoy 1.40.
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
// envoy_dynamic_module_type_attribute_id
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

/// The ABI version string Envoy 1.40 expects from `envoy_dynamic_module_on_program_init`.
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

extern "C" {
    // ---- common -----------------------------------------------------------------------------
    pub fn envoy_dynamic_module_callback_log(level: u32, message: Buffer);
    pub fn envoy_dynamic_module_callback_log_enabled(level: u32) -> bool;

    // ---- HTTP filter: stream scope (worker thread, inside a hook) ----------------------------
    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: EnvoyPtr,
        header_type: u32,
        key: Buffer,
        result: *mut Buffer,
        index: usize,
        optional_count: *mut usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: EnvoyPtr,
        status_code: u32,
        headers: *mut HttpHeader,
        headers_len: usize,
        body: Buffer,
        details: Buffer,
    );
    pub fn envoy_dynamic_module_callback_http_filter_send_go_away_and_close(
        filter: EnvoyPtr,
        graceful: bool,
    );
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: EnvoyPtr);
    pub fn envoy_dynamic_module_callback_http_filter_reset_stream(
        filter: EnvoyPtr,
        reason: u32,
        details: Buffer,
    );
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: EnvoyPtr,
        attribute_id: u32,
        result: *mut Buffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: EnvoyPtr,
        attribute_id: u32,
        result: *mut u64,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(filter: EnvoyPtr)
        -> *mut c_void;
    /// Thread-safe: posts to the stream's dispatcher; a no-op once the filter is gone.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);

    // ---- HTTP filter: config scope (metrics; define only inside config_new) --------------------
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_decrement_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;

    // ---- bootstrap extension (main thread unless noted) -------------------------------------
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_signal_init_complete(
        config: EnvoyPtr,
    );
    pub fn envoy_dynamic_module_callback_bootstrap_extension_register_admin_handler(
        config: EnvoyPtr,
        path_prefix: Buffer,
        help_text: Buffer,
        removable: bool,
        mutates_server_state: bool,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_admin_set_response(
        config: EnvoyPtr,
        body: Buffer,
    );
    pub fn envoy_dynamic_module_callback_bootstrap_extension_timer_new(
        config: EnvoyPtr,
    ) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_timer_enable(
        timer: *mut c_void,
        delay_ms: u64,
    );
    pub fn envoy_dynamic_module_callback_bootstrap_extension_timer_delete(timer: *mut c_void);
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new(
        config: EnvoyPtr,
    ) -> *mut c_void;
    /// Thread-safe: posts to the main dispatcher.
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_delete(
        scheduler: *mut c_void,
    );
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_define_counter(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_define_gauge(
        config: EnvoyPtr,
        name: Buffer,
        label_names: *mut Buffer,
        label_names_len: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_increment_counter(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
    /// Visit every gauge of the stats store (main thread; a full scan: call rarely).
    pub fn envoy_dynamic_module_callback_bootstrap_extension_iterate_gauges(
        extension: EnvoyPtr,
        iterator: StatIterator,
        user_data: *mut c_void,
    );
    pub fn envoy_dynamic_module_callback_bootstrap_extension_iterate_counters(
        extension: EnvoyPtr,
        iterator: StatIterator,
        user_data: *mut c_void,
    );
    /// HTTP request to a cluster; the answer arrives in `on_bootstrap_extension_http_callout_done`.
    pub fn envoy_dynamic_module_callback_bootstrap_extension_http_callout(
        config: EnvoyPtr,
        callout_id: *mut u64,
        cluster: Buffer,
        headers: *mut HttpHeader,
        headers_len: usize,
        body: Buffer,
        timeout_ms: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_bootstrap_extension_config_set_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut Buffer,
        label_values_len: usize,
        value: u64,
    ) -> u32;
}
