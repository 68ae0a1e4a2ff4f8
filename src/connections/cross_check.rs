//! Test-only (`cross-check` builds): the tracker's count beside the HTTP filter's, per
//! connection and process-wide.

use super::{get, set};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Test-only (`cross-check` builds): the tracker's in-flight count on one connection, compared
/// at every read ([`Conn::cross_check_at_read`]) with the HTTP filter's streams whose response
/// it has not seen end. The tracker must never count fewer: that would let a drain complete
/// early. It may count more, for reasons that only delay the exit: HTTP/1.1 requests read
/// ahead of Envoy's codec (pipelining), streams counted until the connection closes.
#[cfg(feature = "cross-check")]
#[derive(Debug, Default)]
pub(super) struct CrossCheck {
    in_flight: AtomicU32,
    /// Requests (HTTP/1.1) or streams (HTTP/2) seen to start since the connection opened: by
    /// the tracker, and by the HTTP filter (its request-headers hook).
    started: AtomicU64,
    http_started: AtomicU64,
    /// The HTTP filter's streams whose response it saw end (end of stream through its encode
    /// hooks) and that have not ended yet: their bytes may be written before the stream ends.
    pub(super) http_done: AtomicU32,
    lost: AtomicBool,
}

/// Process-wide cross-check tallies: checks made, checks with the tracker ahead, disagreements,
/// checks made at request starts (of the checks made).
#[cfg(feature = "cross-check")]
pub static CROSS_CHECKS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

#[cfg(feature = "cross-check")]
impl CrossCheck {
    pub(super) fn event(&self, started: Option<bool>) {
        match started {
            Some(true) => {
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                self.started.fetch_add(1, Ordering::Relaxed);
            }
            Some(false) => {
                let _ = self
                    .in_flight
                    .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            None => set(&self.lost, true),
        }
    }

    /// The HTTP filter saw a request start (its request-headers hook): the tracker, which reads
    /// every byte before the connection manager parses it, must have seen at least as many
    /// start. The counts in flight are not compared here: the tracker has read the whole
    /// buffer the connection manager is working through, so it may already have ended a
    /// stream the HTTP filter still holds (traced: a client's HEADERS and RST_STREAM in one
    /// read); they are compared at reads (`check`), where both have seen the same bytes.
    pub(super) fn check_start(&self, id: u64) {
        let http_started = self.http_started.fetch_add(1, Ordering::Relaxed) + 1;
        if get(&self.lost) {
            return;
        }
        let started = self.started.load(Ordering::Relaxed);
        CROSS_CHECKS[0].fetch_add(1, Ordering::Relaxed);
        CROSS_CHECKS[3].fetch_add(1, Ordering::Relaxed);
        if started < http_started {
            CROSS_CHECKS[2].fetch_add(1, Ordering::Relaxed);
            log::error!(
                "graceful_drain: cross-check disagreement on connection {id} at a request start: \
                 the tracker saw {started} requests start, the HTTP filter {http_started}"
            );
        }
    }

    /// `http`: the HTTP filter's streams in flight on the connection. Compared with those whose
    /// response it has not seen end: the tracker must count at least those.
    pub(super) fn check(&self, id: u64, at: &str, http: u32) {
        if get(&self.lost) {
            return;
        }
        let http = http.saturating_sub(self.http_done.load(Ordering::Relaxed));
        let tracker = self.in_flight.load(Ordering::Relaxed);
        CROSS_CHECKS[0].fetch_add(1, Ordering::Relaxed);
        if tracker > http {
            CROSS_CHECKS[1].fetch_add(1, Ordering::Relaxed);
        } else if tracker < http {
            CROSS_CHECKS[2].fetch_add(1, Ordering::Relaxed);
            log::error!(
                "graceful_drain: cross-check disagreement on connection {id} at a {at}: the \
                 tracker counts {tracker} in flight, the HTTP filter {http} not answered yet"
            );
        }
    }
}

/// The cross-check's tallies so far, for the log: (checks, tracker ahead, disagreements,
/// checks at request starts).
#[cfg(feature = "cross-check")]
pub fn cross_check_tallies() -> (u64, u64, u64, u64) {
    let [a, b, c, d] = &CROSS_CHECKS;
    let g = |x: &AtomicU64| x.load(Ordering::Relaxed);
    (g(a), g(b), g(c), g(d))
}
