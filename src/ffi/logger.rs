//! `log` crate backend that forwards to Envoy's logger (`[dynamic_modules]` logger), honouring
//! Envoy's log level (`--log-level`, `--component-log-level dynamic_modules:debug`, admin
//! `/logging`). Panics are routed here too instead of Envoy's stderr.

use super::abi;

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

impl log::Log for EnvoyLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        // SAFETY: takes a plain integer; Envoy's logger is thread-safe.
        unsafe { abi::envoy_dynamic_module_callback_log_enabled(envoy_level(metadata.level())) }
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        // The module's own source location (Envoy 1.40 prints one for every line).
        #[cfg(not(any(feature = "envoy-1-38", feature = "envoy-1-39")))]
        {
            let file = record.file().unwrap_or("graceful_drain");
            // SAFETY: the buffers point at `msg` and a static or owned string, alive for the
            // call; Envoy copies them.
            unsafe {
                abi::envoy_dynamic_module_callback_log_v2(
                    envoy_level(record.level()),
                    super::module_buffer(msg.as_bytes()),
                    super::module_buffer(file.as_bytes()),
                    record.line().unwrap_or(0),
                )
            }
        }
        #[cfg(any(feature = "envoy-1-38", feature = "envoy-1-39"))]
        // SAFETY: the buffer points at `msg`, alive for the call; Envoy copies it.
        unsafe {
            abi::envoy_dynamic_module_callback_log(
                envoy_level(record.level()),
                super::module_buffer(msg.as_bytes()),
            )
        }
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
