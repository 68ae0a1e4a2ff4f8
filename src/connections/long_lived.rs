//! Long-lived streams at a drain (docs/contributing/long-lived-streams.md, "Connection mode: the design"):
//! the process's move settings and counts, each stream's move time, and the moves thread that
//! wakes each connection's scheduler when its move wants it. What a wake-up does to the
//! stream is the tracker's (`crate::tracking`); this only keeps time. Uses `config` and
//! `runtime::threads`.

use super::{Connections, EVENT_LONG_LIVED};
use crate::config::LongLivedSettings;
use crate::host::connection::ConnectionWakers;
use crate::runtime::clock::Clock;
use crate::runtime::threads::Threads;
use serde::Serialize;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The longest the moves thread sleeps before it looks again for wake-ups asked meanwhile.
pub const MOVES_TICK: Duration = Duration::from_millis(50);

/// The process's long-lived settings (the last network filter config loaded) and counts.
pub struct LongLived {
    enabled: AtomicBool,
    /// `move_http2_sse`.
    http2_sse: AtomicBool,
    window_ns: AtomicU64,
    close_timeout_ns: AtomicU64,
    message_wait_ns: AtomicU64,
    /// When the moves begin (`Shared` clock nanos: the drain start plus `min_drain_duration`);
    /// 0 before the drain.
    from: AtomicU64,
    /// The window in use (shortened to fit `drain_timeout`), nanos.
    window_in_use_ns: AtomicU64,
    /// Per process, random: the moves of two pods never line up.
    seed: u64,
    websockets_open: AtomicU64,
    websockets_moved: AtomicU64,
    websockets_cut: AtomicU64,
    /// Whole data messages the upstream sent after our Close, dropped (never written to the
    /// client: RFC 6455 §5.5.1), over every moved WebSocket.
    websocket_messages_dropped: AtomicU64,
    sse_open: AtomicU64,
    sse_moved: AtomicU64,
    sse_cut: AtomicU64,
    /// gRPC streams ended with `grpc-status: 14` at their move time (HTTP/2, connection mode).
    grpc_moved: AtomicU64,
    /// gRPC streams still open in the last part of `drain_timeout`, ended the same way.
    grpc_ended_at_timeout: AtomicU64,
    /// HTTP/2 SSE responses ended at an event boundary at their move time (connection mode).
    h2_sse_moved: AtomicU64,
    /// Where that last part begins (`Shared` clock nanos; 0 before the drain) and how long it is.
    final_from: AtomicU64,
    final_span_ns: AtomicU64,
    /// `grpc_resumable_prefixes` (the last network filter config loaded), read once per
    /// connection at its first byte.
    grpc_prefixes: std::sync::RwLock<std::sync::Arc<[String]>>,
}

impl Default for LongLived {
    fn default() -> Self {
        let d = LongLivedSettings::default();
        LongLived {
            enabled: AtomicBool::new(d.enabled),
            http2_sse: AtomicBool::new(d.http2_sse),
            window_ns: AtomicU64::new(d.window.as_nanos() as u64),
            close_timeout_ns: AtomicU64::new(d.close_timeout.as_nanos() as u64),
            message_wait_ns: AtomicU64::new(d.message_wait.as_nanos() as u64),
            from: AtomicU64::new(0),
            window_in_use_ns: AtomicU64::new(d.window.as_nanos() as u64),
            // std's per-process random keys (no FFI needed for a seed).
            seed: std::collections::hash_map::RandomState::new().hash_one(0x6d6f7665u64),
            websockets_open: AtomicU64::new(0),
            websockets_moved: AtomicU64::new(0),
            websockets_cut: AtomicU64::new(0),
            websocket_messages_dropped: AtomicU64::new(0),
            sse_open: AtomicU64::new(0),
            sse_moved: AtomicU64::new(0),
            sse_cut: AtomicU64::new(0),
            grpc_moved: AtomicU64::new(0),
            grpc_ended_at_timeout: AtomicU64::new(0),
            h2_sse_moved: AtomicU64::new(0),
            final_from: AtomicU64::new(0),
            final_span_ns: AtomicU64::new(0),
            grpc_prefixes: std::sync::RwLock::new(Vec::new().into()),
        }
    }
}

/// Streams moved and cut, by kind (`/drain/status` field `long_lived_streams`).
#[derive(Default, Debug, Serialize, PartialEq, Eq, Clone, Copy)]
pub struct LongLivedReport {
    pub websocket: MovedCut,
    pub sse: MovedCut,
    /// Whole messages upstreams sent after the module's Close(1001), dropped (the client had
    /// been told to go; the upstream learns it from the client's Close answer).
    pub websocket_messages_dropped: u64,
    /// HTTP/2 gRPC streams of resumable methods ended with `grpc-status: 14`.
    pub grpc: Moved,
    /// HTTP/2 SSE responses ended with END_STREAM at an event boundary at their move time
    /// (their connection not closed; `sse` counts HTTP/1.1 ones, whose connection closes).
    pub h2_sse_moved: u64,
}

#[derive(Default, Debug, Serialize, PartialEq, Eq, Clone, Copy)]
pub struct Moved {
    /// Ended with a status their clients retry, the upstream's stream reset.
    pub moved: u64,
    /// Still open in the last part of `drain_timeout`: ended the same way, spread over it.
    pub ended_at_timeout: u64,
}

/// The last part of `drain_timeout` over which the gRPC streams still open are ended: a tenth
/// of it, at least 1 s and at most 5 s, and never before the moves begin. A tenth leaves nine
/// tenths of the timeout to streams that finish by themselves; 1 s at least spreads the
/// reconnects of a pod's clients over a second rather than the instant of a socket close; 5 s
/// at most, as the window's reconnects are spread already (the default `drain_timeout` of 25 s
/// gives 2.5 s).
pub fn final_span(min_drain: Duration, drain_timeout: Duration) -> Duration {
    (drain_timeout / 10)
        .clamp(Duration::from_secs(1), Duration::from_secs(5))
        .min(drain_timeout.saturating_sub(min_drain))
}

#[derive(Default, Debug, Serialize, PartialEq, Eq, Clone, Copy)]
pub struct MovedCut {
    /// Ended cleanly (Close 1001 or a last chunk written) and their connection closed.
    pub moved: u64,
    /// Still open when the drain completed (cut by the exit), or cut at `drain_timeout`.
    pub cut: u64,
}

/// When and how one connection's stream moves, as its scheduled hook needs it (nanos of the
/// `Shared` clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovePlan {
    /// This connection's move time.
    pub at: u64,
    /// Its time in the last part of `drain_timeout` ([`final_span`]), when every gRPC stream
    /// still open on it ends as a move would end it (`u64::MAX`: none).
    pub final_at: u64,
    pub message_wait: u64,
    pub close_timeout: u64,
}

/// splitmix64 (Steele, Lea, Flood 2014): a full-period mix, so ids in sequence spread evenly.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `u` in [0, 1) for connection `id` with `seed`: 53 bits of the mix.
pub fn unit(id: u64, seed: u64) -> f64 {
    (splitmix64(id ^ seed) >> 11) as f64 / (1u64 << 53) as f64
}

impl LongLived {
    /// A network filter config was loaded (the last one loaded sets the process's settings).
    pub fn note_settings(&self, s: LongLivedSettings) {
        let ns = |d: Duration| d.as_nanos().min(u128::from(u64::MAX / 4)) as u64;
        self.enabled.store(s.enabled, Ordering::Relaxed);
        self.http2_sse.store(s.http2_sse, Ordering::Relaxed);
        self.window_ns.store(ns(s.window), Ordering::Relaxed);
        self.window_in_use_ns.store(ns(s.window), Ordering::Relaxed);
        self.close_timeout_ns
            .store(ns(s.close_timeout), Ordering::Relaxed);
        self.message_wait_ns
            .store(ns(s.message_wait), Ordering::Relaxed);
    }

    /// A network filter config's `grpc_resumable_prefixes`.
    pub fn note_grpc_prefixes(&self, prefixes: &[String]) {
        if let Ok(mut p) = self.grpc_prefixes.write() {
            *p = prefixes.to_vec().into();
        }
    }

    /// The resumable gRPC prefixes (maybe none), while long-lived streams are moved
    /// (`move_long_lived_streams`): a new connection decodes its HTTP/2 header blocks in both
    /// directions then, for its gRPC streams (those of these methods are moved at their time;
    /// every one still open in the last part of `drain_timeout` is ended there, whatever its
    /// method, rather than cut at the exit) and (with [`LongLived::http2_sse`]) its SSE
    /// responses to a `GET`.
    pub fn grpc_prefixes(&self) -> Option<std::sync::Arc<[String]>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        self.grpc_prefixes.read().ok().map(|p| p.clone())
    }

    /// `move_http2_sse` (as loaded; moves may still be off).
    pub fn http2_sse(&self) -> bool {
        self.http2_sse.load(Ordering::Relaxed)
    }

    /// The drain started (its moves are planned, or off).
    pub fn drain_started(&self) -> bool {
        self.from.load(Ordering::Relaxed) != 0
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The settings as loaded.
    pub fn settings(&self) -> LongLivedSettings {
        let d = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        LongLivedSettings {
            enabled: self.enabled(),
            window: d(&self.window_ns),
            close_timeout: d(&self.close_timeout_ns),
            message_wait: d(&self.message_wait_ns),
            http2_sse: self.http2_sse.load(Ordering::Relaxed),
        }
    }

    /// Test-only: the moves begin at `from` (`Shared` clock nanos), without the moves thread
    /// (a test wakes its connections itself).
    #[cfg(test)]
    pub(crate) fn begin_moves_at(&self, from: u64) {
        self.from.store(from.max(1), Ordering::Relaxed);
    }

    /// Connection `id`'s plan, once the moves began (`None` before).
    pub fn plan(&self, id: u64) -> Option<MovePlan> {
        let from = self.from.load(Ordering::Relaxed);
        if from == 0 || !self.enabled() {
            return None;
        }
        let window = self.window_in_use_ns.load(Ordering::Relaxed);
        let final_from = self.final_from.load(Ordering::Relaxed);
        let span = self.final_span_ns.load(Ordering::Relaxed);
        Some(MovePlan {
            at: from.saturating_add((window as f64 * unit(id, self.seed)) as u64),
            final_at: match final_from {
                0 => u64::MAX,
                f => f.saturating_add((span as f64 * unit(id, self.seed)) as u64),
            },
            message_wait: self.message_wait_ns.load(Ordering::Relaxed),
            close_timeout: self.close_timeout_ns.load(Ordering::Relaxed),
        })
    }

    pub fn report(&self) -> LongLivedReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LongLivedReport {
            websocket: MovedCut {
                moved: g(&self.websockets_moved),
                cut: g(&self.websockets_cut),
            },
            sse: MovedCut {
                moved: g(&self.sse_moved),
                cut: g(&self.sse_cut),
            },
            websocket_messages_dropped: g(&self.websocket_messages_dropped),
            grpc: Moved {
                moved: g(&self.grpc_moved),
                ended_at_timeout: g(&self.grpc_ended_at_timeout),
            },
            h2_sse_moved: g(&self.h2_sse_moved),
        }
    }

    // What the trackers saw of their connections' long-lived streams (connection mode): the
    // report's figures; the module's Envoy stats of the same names move with them, through the
    // caller's host (`Shared::count`).

    /// A WebSocket switched (counted once, at its first write after the 101): open until its
    /// connection closes.
    pub fn websocket_opened(&self) {
        self.websockets_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A switched WebSocket's connection closed: `moved` if the module's Close(1001) went, then
    /// `dropped` whole messages the upstream sent after it were dropped.
    pub fn websocket_closed(&self, moved: bool, dropped: u32) {
        let _ = self
            .websockets_open
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if moved {
            self.websockets_moved.fetch_add(1, Ordering::Relaxed);
            self.websocket_messages_dropped
                .fetch_add(u64::from(dropped), Ordering::Relaxed);
        }
    }

    /// An SSE response was in flight when the moves thread woke its connection (counted once).
    pub fn sse_opened(&self) {
        self.sse_open.fetch_add(1, Ordering::Relaxed);
    }

    /// The connection of an SSE response counted open closed; `moved` if its end was written.
    pub fn sse_closed(&self, moved: bool) {
        let _ = self
            .sse_open
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if moved {
            self.sse_moved.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A gRPC stream ended with `grpc-status: 14` at its move time, or (`at_timeout`) in the
    /// last part of `drain_timeout`.
    pub fn grpc_stream_moved(&self, at_timeout: bool) {
        match at_timeout {
            true => &self.grpc_ended_at_timeout,
            false => &self.grpc_moved,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// An HTTP/2 SSE response ended at an event boundary at its move time.
    pub fn h2_sse_response_moved(&self) {
        self.h2_sse_moved.fetch_add(1, Ordering::Relaxed);
    }

    /// Test-only: the WebSockets and SSE responses counted open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> (u64, u64) {
        (
            self.websockets_open.load(Ordering::Relaxed),
            self.sse_open.load(Ordering::Relaxed),
        )
    }

    /// The drain completed: the WebSockets and SSE responses still open are cut by the exit.
    /// Returns how many of each.
    pub fn cut_at_completion(&self) -> (u64, u64) {
        let ws = self.websockets_open.load(Ordering::Relaxed);
        self.websockets_cut.fetch_add(ws, Ordering::Relaxed);
        let sse = self.sse_open.load(Ordering::Relaxed);
        self.sse_cut.fetch_add(sse, Ordering::Relaxed);
        (ws, sse)
    }
}

impl Connections {
    /// The drain started at `now` (`Shared` clock nanos, read by `clock`): the moves begin at
    /// `now + min_drain`, over the window shortened to fit `drain_timeout` (logged). A thread
    /// owned by `threads` then sleeps until the next wake-up a connection asked for
    /// ([`super::Waker::wake_at`], at most [`MOVES_TICK`]) and commits it to that connection's
    /// scheduler through `to`. Ends once the drain completed ([`Connections::note_drained`]), or
    /// when the module stops. Nothing when no network filter is loaded.
    pub fn moves_started(
        &'static self,
        threads: &'static Threads,
        to: &'static dyn ConnectionWakers,
        clock: &'static dyn Clock,
        min_drain: Duration,
        drain_timeout: Duration,
    ) {
        let ll = &self.long_lived;
        if !self.loaded() {
            return;
        }
        // Off, the thread still runs: its first wake-up counts the streams that will be cut.
        let s = ll.settings();
        let window = match s.window_within(min_drain, drain_timeout) {
            Some(w) => {
                log::info!(
                    "graceful_drain: long_lived_window {:?} shortened to {w:?} so that \
                     min_drain_duration ({min_drain:?}) + window + close_timeout ({:?}) fits \
                     drain_timeout ({drain_timeout:?})",
                    s.window,
                    s.close_timeout
                );
                w
            }
            None => s.window,
        };
        ll.window_in_use_ns
            .store(window.as_nanos() as u64, Ordering::Relaxed);
        let start = clock.nanos();
        let from = start.saturating_add(min_drain.as_nanos() as u64).max(1);
        let span = final_span(min_drain, drain_timeout);
        let final_from = start
            .saturating_add(drain_timeout.saturating_sub(span).as_nanos() as u64)
            .max(from);
        ll.final_span_ns
            .store(span.as_nanos() as u64, Ordering::Relaxed);
        ll.final_from.store(final_from, Ordering::Relaxed);
        ll.from.store(from, Ordering::Relaxed);
        let mut begun = false;
        let spawned = threads.spawn("graceful_drain_moves", move || loop {
            let now = clock.nanos();
            let mut next = u64::MAX;
            if now >= from && !begun {
                // Every connection once: the switched ones ask for their move time.
                begun = true;
                self.wake_all(to, EVENT_LONG_LIVED);
            } else if now >= from {
                // Commit without holding a lock (see `wake_all`).
                for w in self.wakers.snapshot() {
                    match w.take_due(now) {
                        Ok(()) => to.commit(w.word(), EVENT_LONG_LIVED),
                        Err(0) => {}
                        Err(at) => next = next.min(at),
                    }
                }
            } else {
                next = from;
            }
            if self.is_drained() {
                return;
            }
            let wait = Duration::from_nanos(next.saturating_sub(now)).min(MOVES_TICK);
            if !threads.sleep(wait.max(Duration::from_millis(1))) {
                return;
            }
        });
        if let Err(e) = spawned {
            log::warn!("graceful_drain: no moves thread ({e}); long-lived streams are cut at exit");
        }
    }
}

#[cfg(test)]
mod tests;
