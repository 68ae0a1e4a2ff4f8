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
        super::envoy::log_enabled(envoy_level(metadata.level()))
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        let file = record.file().unwrap_or("graceful_drain");
        let line = record.line().unwrap_or(0);
        super::envoy::log(envoy_level(record.level()), &msg, file, line);
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
