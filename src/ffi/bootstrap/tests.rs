//! The bootstrap hooks against the fake callback table. Each scenario runs in a process of
//! its own (this test binary, re-run on one ignored test): the hooks install the process's
//! one drain engine and close the process's one gate, which no other test may share.
use super::*;
use crate::ffi::abi::{reset_fake, script, take_calls, take_calls_with_args, Arg, Call};
use crate::ffi::module_buffer;
use std::sync::atomic::AtomicUsize;

static COMPLETIONS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn completion(_ctx: *mut c_void) {
    COMPLETIONS.fetch_add(1, Ordering::SeqCst);
}

fn fake(addr: usize) -> EnvoyPtr {
    ptr::without_provenance_mut(addr)
}

fn config_new(json: &str) -> *const c_void {
    envoy_dynamic_module_on_bootstrap_extension_config_new(
        fake(0x100),
        module_buffer(b"graceful_drain"),
        module_buffer(json.as_bytes()),
    )
}

fn shutdown(bm: *const c_void) {
    envoy_dynamic_module_on_bootstrap_extension_shutdown(
        fake(0x200),
        bm,
        Some(completion),
        ptr::null_mut(),
    )
}

fn count(calls: &[&str], name: &str) -> usize {
    calls.iter().filter(|c| **c == name).count()
}

/// Envoy gives a timer and a scheduler (their fake addresses) to the config being created.
fn envoy_gives_a_timer_and_a_scheduler() {
    reset_fake();
    script(
        "envoy_dynamic_module_callback_bootstrap_extension_timer_new",
        || 0x10,
    );
    script(
        "envoy_dynamic_module_callback_bootstrap_extension_config_scheduler_new",
        || 0x20,
    );
}

/// Run `scenario` (an ignored test of this module) in a child process; it must pass.
fn in_own_process(scenario: &str) {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            &format!("ffi::bootstrap::tests::{scenario}"),
            "--ignored",
            "--test-threads=1",
        ])
        .output()
        .expect("the test binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{scenario}: {:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot start a process")]
fn bootstrap_hooks_each_in_a_process_of_their_own() {
    in_own_process("scenario_completion_is_given_exactly_once");
    in_own_process("scenario_destroy_disarms_a_hold_still_pending");
}

#[test]
#[ignore = "run by bootstrap_hooks_each_in_a_process_of_their_own"]
fn scenario_completion_is_given_exactly_once() {
    envoy_gives_a_timer_and_a_scheduler();
    // Filter mode, no request: the drain completes as soon as a scan of it (on the module's
    // stats thread, over the fake store: nothing in flight) is in.
    crate::ffi::shared().note_data_filter_loaded();
    let bm = config_new(r#"{"min_drain_duration": "0s", "quiet_period": "0s"}"#);
    assert!(!bm.is_null(), "loaded");
    let calls = take_calls();
    assert_eq!(
        count(&calls, "bootstrap_extension_config_signal_init_complete"),
        1
    );
    assert_eq!(
        count(&calls, "bootstrap_extension_register_admin_handler"),
        2
    );
    assert_eq!(
        envoy_dynamic_module_on_bootstrap_extension_new(bm, fake(0x200)),
        bm
    );

    // A second engine is refused, and the timer and scheduler Envoy gave it are deleted.
    envoy_gives_a_timer_and_a_scheduler();
    assert!(config_new("{}").is_null(), "configured twice");
    let calls = take_calls();
    assert_eq!(
        count(&calls, "bootstrap_extension_timer_delete"),
        1,
        "{calls:?}"
    );
    assert_eq!(
        count(&calls, "bootstrap_extension_config_scheduler_delete"),
        1
    );

    shutdown(bm);
    // The scan's end kicks the engine through the config scheduler, whose event the fake
    // does not deliver: delivered here until the drain completes (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while COMPLETIONS.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "not released");
        std::thread::sleep(std::time::Duration::from_millis(2));
        envoy_dynamic_module_on_bootstrap_extension_config_scheduled(fake(0x100), bm, EVENT_KICK);
    }
    assert_eq!(
        COMPLETIONS.load(Ordering::SeqCst),
        1,
        "released once the scan showed nothing in flight"
    );
    assert!(
        !crate::ffi::threads().is_open(),
        "the gate closed before the completion"
    );
    envoy_dynamic_module_on_bootstrap_extension_timer_fired(fake(0x100), bm, fake(0x10));
    envoy_dynamic_module_on_bootstrap_extension_config_scheduled(fake(0x100), bm, EVENT_KICK);
    shutdown(bm);
    assert_eq!(
        COMPLETIONS.load(Ordering::SeqCst),
        2,
        "a second SIGTERM: released at once"
    );
    // No extension (Envoy failed to create it): Envoy's exit is never held.
    shutdown(ptr::null());
    assert_eq!(COMPLETIONS.load(Ordering::SeqCst), 3);

    take_calls();
    envoy_dynamic_module_on_bootstrap_extension_destroy(bm);
    envoy_dynamic_module_on_bootstrap_extension_config_destroy(bm);
    let calls = take_calls();
    assert_eq!(
        count(&calls, "bootstrap_extension_timer_delete"),
        1,
        "{calls:?}"
    );
    assert_eq!(
        count(&calls, "bootstrap_extension_config_scheduler_delete"),
        1
    );
    assert_eq!(KICK_SCHEDULER.load(Ordering::SeqCst), 0);
    assert_eq!(
        COMPLETIONS.load(Ordering::SeqCst),
        3,
        "none from the destroy hooks"
    );
}

#[test]
#[ignore = "run by bootstrap_hooks_each_in_a_process_of_their_own"]
fn scenario_destroy_disarms_a_hold_still_pending() {
    envoy_gives_a_timer_and_a_scheduler();
    crate::ffi::shared().note_data_filter_loaded();
    let bm = config_new(r#"{"min_drain_duration": "60s", "drain_timeout": "120s"}"#);
    assert!(!bm.is_null());
    shutdown(bm);
    assert_eq!(
        COMPLETIONS.load(Ordering::SeqCst),
        0,
        "held: min_drain_duration"
    );
    // The engine's timer: armed on the timer Envoy gave it (0x10), re-checking every 20 ms
    // while what is in flight is not known yet (the first scan of Envoy's stats)...
    let delays = |calls: Vec<Call>| -> Vec<u64> {
        calls
            .iter()
            .filter(|c| c.name == "bootstrap_extension_timer_enable")
            .map(|c| match c.args[..] {
                [Arg::Ptr(0x10), Arg::Int(ms)] => ms,
                _ => panic!("timer_enable on a timer not Envoy's: {c:?}"),
            })
            .collect()
    };
    let at_sigterm = delays(take_calls_with_args());
    // ... then, once it shows nothing in flight (the scan's end kicks the engine through
    // the config scheduler, whose event the fake does not deliver: delivered here, bounded),
    // for the end of min_drain_duration (60 s after the SIGTERM), not sooner. The scanner's
    // first pass, made as it starts (at SIGTERM here), races the SIGTERM's own evaluation:
    // when it came in first, the timer is armed for that end at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let armed = if at_sigterm.iter().any(|&ms| ms > 20) {
        at_sigterm
    } else {
        assert_eq!(at_sigterm, [20], "at SIGTERM");
        loop {
            std::thread::sleep(std::time::Duration::from_millis(2));
            envoy_dynamic_module_on_bootstrap_extension_config_scheduled(
                fake(0x100),
                bm,
                EVENT_KICK,
            );
            let armed = delays(take_calls_with_args());
            if armed.iter().any(|&ms| ms > 20) {
                break armed;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "only re-checks: {armed:?}"
            );
        }
    };
    assert!(
        armed.iter().all(|&ms| (50_000..=60_000).contains(&ms)),
        "{armed:?}"
    );
    // The admin asks for the status while held: answered, still held.
    let status = envoy_dynamic_module_on_bootstrap_extension_admin_request(
        fake(0x100),
        bm,
        module_buffer(b"GET"),
        module_buffer(ADMIN_STATUS_PATH),
        module_buffer(b""),
    );
    assert_eq!(status, 200);
    assert_eq!(
        count(&take_calls(), "bootstrap_extension_admin_set_response"),
        1
    );
    envoy_dynamic_module_on_bootstrap_extension_destroy(bm);
    envoy_dynamic_module_on_bootstrap_extension_config_destroy(bm);
    assert_eq!(
        COMPLETIONS.load(Ordering::SeqCst),
        0,
        "never from a destroy hook"
    );
    assert!(
        !crate::ffi::threads().is_open(),
        "module threads stopped all the same"
    );
    let calls = take_calls();
    assert_eq!(
        count(&calls, "bootstrap_extension_timer_delete"),
        1,
        "{calls:?}"
    );
}
