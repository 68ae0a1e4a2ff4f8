//! Envoy's admin interface, as the drain engine calls it when a drain starts: `POST
//! /healthcheck/fail` (Envoy's health checks and `/ready` fail, and every listener drain-closes
//! with its next response) and `POST /drain_listeners?graceful&skip_exit` (Envoy's own drain
//! state starts; the listeners keep accepting). Plain HTTP/1.1 over TCP or over the admin's unix
//! socket, on a thread of the module's own, so a slow or absent admin never blocks Envoy's main
//! thread. No FFI.
//!
//! Why not Envoy's `http_callout` through a cluster that points at the admin, as earlier
//! releases did: a callout is made on Envoy's main thread, and a dynamic-module upstream filter
//! on that cluster (the guard that kept routes from reaching the admin through it) makes Envoy
//! 1.38-1.40 log an `envoy_bug` ("failed to parse worker index from name", with a stack trace)
//! and count `server.envoy_bug_failures` on every call; without the guard, any route that picks
//! its cluster from the request could reach the admin. Calling the admin directly needs neither
//! the cluster nor the guard.
//!
//! Files: this one (the calls a drain makes, and the start check that finds the admin), `wire`
//! (the minimal HTTP/1.1 client those calls use). May use: `config` (the admin's address).

mod wire;

pub use wire::{dechunk, parse_status};

pub use crate::config::{AdminAddress, AdminCheck};
pub use crate::host::admin::AdminHost;
use std::fmt;
use std::time::Duration;

/// The admin calls of a drain start, in order, each with what it means once answered 200.
pub const DRAIN_START_CALLS: [(&str, &str); 2] = [
    ("/healthcheck/fail", "Envoy's health checks now fail"),
    (
        "/drain_listeners?graceful&skip_exit",
        "Envoy's listeners now drain-close",
    ),
];

/// The admin as the module reaches it: its own minimal HTTP/1.1 client (`wire`), the one
/// [`AdminHost`] of a release (the FFI layer hands it to the extension).
pub struct HttpAdmin;

impl AdminHost for HttpAdmin {
    fn call(
        &self,
        addr: &AdminAddress,
        method: &str,
        path: &str,
        timeout: Duration,
        body: bool,
    ) -> Result<(u16, Vec<u8>), String> {
        wire::call(addr, method, path, timeout, body)
    }
}

/// `POST path` with an empty body; the status code of the answer. `timeout` bounds the whole
/// call: the connect (a unix connect only waits when the admin's accept queue is full), the
/// write, and every read up to the status line.
pub fn post(
    admin: &dyn AdminHost,
    addr: &AdminAddress,
    path: &str,
    timeout: Duration,
) -> Result<u16, String> {
    admin
        .call(addr, "POST", path, timeout, false)
        .map(|(status, _)| status)
}

/// The server states Envoy's admin `GET /ready` answers with (200 for `LIVE`, 503 otherwise).
const ENVOY_STATES: [&str; 4] = ["LIVE", "DRAINING", "PRE_INITIALIZING", "INITIALIZING"];

/// Why [`check`] did not recognise Envoy's admin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// No HTTP answer: nothing listens, the connection failed, or no answer within the timeout
    /// (worth another try: the admin may still be starting).
    NoAnswer(String),
    /// An HTTP answer, but not Envoy's admin's (its `/ready` answers with a server state).
    NotAdmin { status: u16, body: String },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::NoAnswer(e) => write!(f, "no answer: {e}"),
            CheckError::NotAdmin { status, body } => {
                write!(f, "GET /ready answered {status} {body:?}")
            }
        }
    }
}

/// Whether `addr` is an Envoy admin: `GET /ready` answered with one of Envoy's server states
/// (so not a data listener, the module's own control listener or another server). The state.
pub fn check(
    admin: &dyn AdminHost,
    addr: &AdminAddress,
    timeout: Duration,
) -> Result<String, CheckError> {
    let (status, body) = admin
        .call(addr, "GET", "/ready", timeout, true)
        .map_err(CheckError::NoAnswer)?;
    let text = String::from_utf8_lossy(&body);
    let state = text.trim_end();
    if matches!(status, 200 | 503) && ENVOY_STATES.contains(&state) {
        return Ok(state.to_string());
    }
    Err(CheckError::NotAdmin {
        status,
        body: state[..state.floor_char_boundary(40)].to_string(),
    })
}

/// Check, when the server is initialized, which of `addrs` is Envoy's admin: up to `attempts`
/// rounds while nothing answers (the admin may still be starting), each trying every address in
/// order, `wait` between them (`false`: the module is stopping; the check ends as `Checking`;
/// it is also asked, with a zero duration, before each address).
/// Logs what it found, naming the field. The recognised address, if any, with the outcome.
pub fn check_admin_address(
    admin: &dyn AdminHost,
    addrs: &[AdminAddress],
    timeout: Duration,
    attempts: u32,
    wait: impl Fn(Duration) -> bool,
) -> (AdminCheck, Option<AdminAddress>) {
    const FIX: &str = "a drain cannot fail Envoy's health checks through it; set admin_address \
                       to the address of the bootstrap's `admin:` section";
    let listed = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    for attempt in 1..=attempts {
        let mut not_admin = Vec::new();
        let mut no_answer = None;
        for addr in addrs {
            // Each silent address costs up to `timeout`: a stopping module tries no more of
            // them, so its thread ends within one call's timeout, inside the teardown bound.
            if !wait(Duration::ZERO) {
                return (AdminCheck::Checking, None);
            }
            match check(admin, addr, timeout) {
                Ok(state) => {
                    log::info!(
                        "graceful_drain: admin_address {addr} is Envoy's admin (state {state})"
                    );
                    return (AdminCheck::Recognised, Some(addr.clone()));
                }
                Err(CheckError::NoAnswer(e)) => no_answer = Some(e),
                Err(e @ CheckError::NotAdmin { .. }) => not_admin.push((addr, e.to_string())),
            }
        }
        let each = || {
            not_admin
                .iter()
                .map(|(a, e)| format!("{a}: {e}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        if !not_admin.is_empty() && no_answer.is_none() {
            match not_admin.as_slice() {
                [(one, why)] if addrs.len() == 1 => log::warn!(
                    "graceful_drain: admin_address {one} is not Envoy's admin ({why}): {FIX}"
                ),
                _ => log::warn!(
                    "graceful_drain: admin_address: none of {listed} is Envoy's admin ({}): {FIX}",
                    each()
                ),
            }
            return (AdminCheck::NotAdmin, None);
        }
        if attempt == attempts {
            let e = no_answer.unwrap_or_default();
            log::warn!(
                "graceful_drain: admin_address did not answer ({listed}: {e}; {attempt} tries){}: \
                 unless Envoy's admin is only slow to start, {FIX}",
                if not_admin.is_empty() {
                    String::new()
                } else {
                    format!("; not Envoy's admin: {}", each())
                }
            );
            return (
                if not_admin.is_empty() {
                    AdminCheck::NotAnswering
                } else {
                    AdminCheck::NotAdmin
                },
                None,
            );
        }
        if !wait(Duration::from_secs(1)) {
            return (AdminCheck::Checking, None);
        }
    }
    (AdminCheck::NotAnswering, None)
}

/// The drain start's calls ([`DRAIN_START_CALLS`]), in order, each answer logged.
pub fn post_drain_start_calls(
    admin: &dyn AdminHost,
    addr: &AdminAddress,
    timeout: Duration,
    go_on: impl Fn() -> bool,
) {
    for (path, meaning) in DRAIN_START_CALLS {
        if !go_on() {
            return; // the module is stopping: no further call
        }
        match post(admin, addr, path, timeout) {
            Ok(200) => log::info!("graceful_drain: {meaning} (admin answered 200)"),
            Ok(status) => {
                log::warn!("graceful_drain: admin POST {path} to {addr} answered {status}")
            }
            Err(e) => log::warn!("graceful_drain: admin POST {path} failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
