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
mod tests;
