//! `log` crate backend that forwards to Envoy's logger (`[dynamic_modules]` logger), honouring
//! Envoy's log level (`--log-level`, `--component-log-level dynamic_modules:debug`, admin
//! `/logging`). Panics are routed here too instead of Envoy's stderr.

use super::abi;
use crate::runtime::threads::Threads;

struct EnvoyLogger;

fn envoy_level(level: log::Level) -> u32 {
    match level {
        log::Level::Error => abi::LOG_ERROR,
        log::Level::Warn => abi::LOG_WARN,
        log::Level::Info => abi::LOG_INFO,
        log::Level::Debug => abi::LOG_DEBUG,
        log::Level::Trace => abi::LOG_TRACE,
    }
}

/// Whether a line at `level` would be printed, asked of Envoy: on a module thread only while the
/// gate is open (`threads`), like every other call it makes; `false` once the exit was released.
fn enabled_via(threads: &Threads, level: u32) -> bool {
    if Threads::on_module_thread() {
        threads
            .call("log", || super::envoy::log_enabled(level))
            .unwrap_or(false)
    } else {
        super::envoy::log_enabled(level)
    }
}

/// One line to Envoy's logger. Envoy's own threads (its hooks, the main thread) may always log;
/// a module thread only through the gate: after the exit was released the line is dropped
/// (counted among the refused calls in the teardown line), so no module thread calls into a
/// tearing-down Envoy, not even to log.
fn emit_via(threads: &Threads, level: u32, record: &log::Record) {
    let send = || {
        if !super::envoy::log_enabled(level) {
            return;
        }
        let msg = record.args().to_string();
        let file = record.file().unwrap_or("graceful_drain");
        let line = record.line().unwrap_or(0);
        super::envoy::log(level, &msg, file, line);
    };
    if Threads::on_module_thread() {
        let _ = threads.call("log", send);
    } else {
        send();
    }
}

impl log::Log for EnvoyLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        enabled_via(super::threads(), envoy_level(metadata.level()))
    }

    fn log(&self, record: &log::Record) {
        emit_via(super::threads(), envoy_level(record.level()), record);
    }

    fn flush(&self) {}
}

static LOGGER: EnvoyLogger = EnvoyLogger;

pub(super) fn install() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
    // Log panics once, with message and location, through Envoy; the guard then fails closed.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload_as_str()
            .unwrap_or("(non-string panic payload)");
        match info.location() {
            Some(l) => log::error!(
                "graceful_drain: panic: {msg} (at {}:{})",
                l.file(),
                l.line()
            ),
            None => log::error!("graceful_drain: panic: {msg}"),
        }
    }));
}

#[cfg(test)]
mod tests {
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
                .spawn(
                    "log_test",
                    || {},
                    move || {
                        reset_fake();
                        tx.send(record_and_emit(threads)).unwrap();
                    },
                )
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
            .spawn(
                "log_test_late",
                || {},
                move || {
                    reset_fake();
                    go_rx.recv().unwrap();
                    tx.send(record_and_emit(threads)).unwrap();
                },
            )
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
}
