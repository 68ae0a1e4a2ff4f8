//! Unit tests of `ffi::http`.

use super::*;
use crate::ffi::abi::{reset_fake, script, take_calls};
use crate::ffi::module_buffer;
use crate::http_filter::lifecycle::{FreeList, PANIC_AFTER_GLUE};
use std::cell::Cell;

fn free_filters() -> usize {
    FreeList::len()
}

/// Give this thread's recycled allocations back (a worker keeps them for the process's life;
/// a test thread ends, and Miri counts what it kept as leaked).
fn release_free_filters() {
    FreeList::clear()
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
    wake_stream(fm as usize, crate::engine::shared::EVENT_GO_AWAY);
    let awake = take_calls();
    assert!(!awake.is_empty(), "a live stream is woken: {awake:?}");
    // Done: the same wake makes no call at all.
    let fm2 = envoy_dynamic_module_on_http_filter_new(cm, fe);
    envoy_dynamic_module_on_http_filter_request_headers(fe, fm2, true);
    envoy_dynamic_module_on_http_filter_stream_complete(fe, fm2);
    take_calls();
    wake_stream(fm2 as usize, crate::engine::shared::EVENT_GO_AWAY);
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
