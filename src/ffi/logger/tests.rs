//! Unit tests of `ffi::logger`.

use super::*;
use crate::ffi::abi::{
    pretend_generation, reset_fake, script, take_calls, take_calls_with_args, Arg, Call,
};
use crate::host::envoy_release::EnvoyGeneration;

fn record_and_emit(threads: &Threads) -> Vec<&'static str> {
    script("envoy_dynamic_module_callback_log_enabled", || 1);
    emit_via(
        threads,
        abi::LOG_INFO,
        &log::Record::builder()
            .args(format_args!("a line"))
            .level(log::Level::Info)
            .build(),
    );
    take_calls()
}

/// A module thread's log line is a call into Envoy like any other: refused once the exit
/// was released. Envoy's own threads keep logging.
#[test]
fn a_module_thread_logs_only_while_the_gate_is_open() {
    let threads: &'static Threads = Box::leak(Box::new(Threads::default()));
    let on_module_thread = |threads: &'static Threads| {
        let (tx, rx) = std::sync::mpsc::channel();
        threads
            .spawn("log_test", move || {
                reset_fake();
                tx.send(record_and_emit(threads)).unwrap();
            })
            .unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the module thread logged")
    };
    let open = on_module_thread(threads);
    assert!(
        open.contains(&"log_v2") || open.contains(&"log"),
        "{open:?}"
    );
    // The release closes the gate (and stops the threads; a new one is refused then, so
    // the closed gate is tried from a thread spawned before).
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (tx, rx) = std::sync::mpsc::channel();
    threads
        .spawn("log_test_late", move || {
            reset_fake();
            go_rx.recv().unwrap();
            tx.send(record_and_emit(threads)).unwrap();
        })
        .unwrap();
    threads.close();
    go_tx.send(()).unwrap();
    let closed = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the late thread ran");
    assert!(closed.is_empty(), "a call after the release: {closed:?}");
    let stopped = threads.join(std::time::Duration::from_secs(5));
    assert_eq!(stopped.refused, vec![("log", 1)]);
    // Envoy's thread (this test's) is not gated.
    reset_fake();
    let envoy_thread = record_and_emit(threads);
    assert!(!envoy_thread.is_empty(), "{envoy_thread:?}");
}

/// Each Envoy gets the log call it has: 1.38 and 1.39 `log` (the level, the line), 1.40
/// `log_v2`, which adds the module's source location (Envoy prints `[:]` otherwise); a
/// module that called `log_v2` in 1.38 would log nothing there (the callback is absent).
#[test]
fn each_envoy_generation_gets_the_log_call_it_has() {
    let threads: &'static Threads = Box::leak(Box::new(Threads::default()));
    let record = log::Record::builder()
        .args(format_args!("a line"))
        .level(log::Level::Warn)
        .file(Some("src/engine/drain.rs"))
        .line(Some(42))
        .build();
    for g in [
        EnvoyGeneration::V1_38,
        EnvoyGeneration::V1_39,
        EnvoyGeneration::V1_40,
    ] {
        reset_fake();
        pretend_generation(g);
        script("envoy_dynamic_module_callback_log_enabled", || 1);
        emit_via(threads, abi::LOG_WARN, &record);
        let level = Arg::Int(abi::LOG_WARN as u64);
        let line = Arg::Bytes(b"a line".to_vec());
        let expected = if g == EnvoyGeneration::V1_40 {
            Call {
                name: "log_v2",
                args: vec![
                    level.clone(),
                    line,
                    Arg::Bytes(b"src/engine/drain.rs".to_vec()),
                    Arg::Int(42),
                ],
            }
        } else {
            Call {
                name: "log",
                args: vec![level.clone(), line],
            }
        };
        let enabled = Call {
            name: "log_enabled",
            args: vec![level],
        };
        assert_eq!(take_calls_with_args(), [enabled, expected], "{g:?}");
    }
    reset_fake();
}
