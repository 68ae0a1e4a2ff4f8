//! The connections of a process ([`Connections`], one per `Shared`): the waker table, the
//! counts, the drain flag, and the grace thread that re-checks idle connections after the drain
//! start.

use super::index::LOCAL;
use super::{
    get, ConnSettings, Counts, IdleTold, StreamMark, Wakers, CONFIRM_DELAY,
    DEFAULT_IDLE_CLOSE_GRACE, EVENT_CONFIRM_CLOSE, EVENT_DRAIN_STARTED, EVENT_GRACE_OVER, RECHECKS,
};
use crate::host::connection::ConnectionWakers;
use crate::runtime::threads::Threads;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The waker table, the counts, the drain flag and the grace. One per process, owned by the
/// module's shared state (`Shared::connections`); a test makes its own.
pub struct Connections {
    pub(super) wakers: Wakers,
    pub(super) counts: Counts,
    /// Long-lived streams' move settings and counts.
    pub(super) long_lived: super::LongLived,
    draining: AtomicBool,
    /// The shortest and longest `idle_close_grace` of the network filter configs loaded (ms;
    /// 0 for none): the re-checks run at the shortest, for as long as the longest needs.
    grace_min_ms: AtomicU64,
    grace_max_ms: AtomicU64,
    /// A network filter config was loaded: connections exist to count and tell.
    loaded: AtomicBool,
    /// The drain completed (`Shared::poll`): the grace and moves threads end.
    drained: AtomicBool,
    /// A network filter that follows exchanges (`track_requests`) is loaded: its connections'
    /// requests are in the in-flight table (connection mode).
    tracking: AtomicBool,
    /// Open connections whose tracker lost the thread: their requests are not in the table, so
    /// while any is open the drain also waits for Envoy's gauges.
    untracked_open: AtomicUsize,
    /// Followed connections whose next request's head has begun and is not complete yet.
    partial_heads: AtomicUsize,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            wakers: Wakers::default(),
            counts: Counts::default(),
            long_lived: super::LongLived::default(),
            draining: AtomicBool::new(false),
            grace_min_ms: AtomicU64::new(0),
            grace_max_ms: AtomicU64::new(0),
            loaded: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            tracking: AtomicBool::new(false),
            untracked_open: AtomicUsize::new(0),
            partial_heads: AtomicUsize::new(0),
        }
    }
}

/// Test-only: what the tests of the layers above (the network filter's, the shared state's)
/// look at in the table and the counts, which no production caller reads but through the
/// connections' own methods.
#[cfg(test)]
impl Connections {
    /// The wakers in the table.
    pub(crate) fn wakers_in_table(&self) -> usize {
        self.wakers.len()
    }

    /// The open connections' counts, which the status's idle figures read.
    pub(crate) fn counts(&self) -> &Counts {
        &self.counts
    }
}

impl Connections {
    /// Long-lived streams' move settings and counts.
    pub fn long_lived(&self) -> &super::LongLived {
        &self.long_lived
    }

    /// A connection's filter began: its waker goes into the table, where the drain's wake-ups
    /// find it, until [`Connections::remove_waker`].
    pub fn insert_waker(&self, waker: std::sync::Arc<super::Waker>) -> super::WakerSlot {
        self.wakers.insert(waker)
    }

    /// The connection's filter is destroyed: its waker leaves the table (deleted now, or by the
    /// wake-up that still holds it).
    pub fn remove_waker(&self, slot: super::WakerSlot) -> Option<std::sync::Arc<super::Waker>> {
        self.wakers.remove(slot)
    }

    /// The waker in `slot`, if it is still there.
    pub fn waker(&self, slot: super::WakerSlot) -> Option<std::sync::Arc<super::Waker>> {
        self.wakers.get(slot)
    }

    /// The moves thread is to wake the connection in `slot` at `at` (`Shared` clock nanos).
    pub fn wake_at(&self, slot: super::WakerSlot, at: u64) {
        self.wakers.wake_at(slot, at)
    }

    /// A network filter config was loaded (the network-filter glue, at its config's load).
    pub fn note_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// Whether a network filter config was loaded in this process.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// The drain completed: the grace and moves threads end at their next look.
    pub fn note_drained(&self) {
        self.drained.store(true, Ordering::SeqCst);
    }

    pub(super) fn is_drained(&self) -> bool {
        self.drained.load(Ordering::SeqCst)
    }

    /// A network filter config with these settings was loaded (any listener).
    pub fn note_config(&self, settings: ConnSettings) {
        let ms = (settings.idle_close_grace.as_millis() as u64).max(1);
        let _ = self
            .grace_min_ms
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m == 0 || ms < m).then_some(ms)
            });
        self.grace_max_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The shortest and longest `idle_close_grace` of the configs loaded (the default if none).
    pub fn graces(&self) -> (Duration, Duration) {
        let ms = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => DEFAULT_IDLE_CLOSE_GRACE,
            v => Duration::from_millis(v),
        };
        (ms(&self.grace_min_ms), ms(&self.grace_max_ms))
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// A network filter that follows exchanges was loaded (its config's `track_requests`).
    pub fn note_tracking(&self) {
        self.tracking.store(true, Ordering::Relaxed);
    }

    /// Whether the in-flight table holds every request of the connections this module follows:
    /// a tracking network filter is loaded and none of its open connections lost the thread.
    pub fn tracking_is_exact(&self) -> bool {
        self.tracking.load(Ordering::Relaxed) && self.untracked_open.load(Ordering::Relaxed) == 0
    }

    /// A followed connection lost the thread (`opened`) or one that had closed (`!opened`).
    pub fn note_untracked(&self, opened: bool) {
        if opened {
            self.untracked_open.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = self
                .untracked_open
                .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// A followed connection's request head began (`true`) or completed, or the connection
    /// stopped being followed (`false`). Envoy's connection manager makes a stream at a head's
    /// first byte (counted in its gauge from then), the tracker takes a ticket at the head's end:
    /// in between, the drain counts the head here (`Shared::poll`).
    pub fn note_partial_head(&self, began: bool) {
        if began {
            self.partial_heads.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = self
                .partial_heads
                .try_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    /// Followed connections with a request head on its way.
    pub fn partial_heads(&self) -> usize {
        self.partial_heads.load(Ordering::SeqCst)
    }

    /// Open connections whose tracker lost the thread.
    pub fn untracked_open(&self) -> usize {
        self.untracked_open.load(Ordering::Relaxed)
    }

    /// Wake every connection with `event`, through Envoy's schedulers `to`. Returns how many
    /// were woken.
    pub fn wake_all(&self, to: &dyn ConnectionWakers, event: u64) -> usize {
        if !self.loaded() {
            return 0;
        }
        // Commit without holding any lock: a commit may run a connection's destroy hook on
        // this thread (module doc), which takes the table's lock to leave it.
        let all = self.wakers.snapshot();
        for w in &all {
            to.commit(w.word(), event);
        }
        all.len()
    }

    /// Mark the drain started (once). Returns false if it already was.
    pub fn mark_draining(&self) -> bool {
        !self.draining.swap(true, Ordering::SeqCst)
    }

    /// The HTTP filter saw a stream start on the connection `id()` names (its ConnectionId
    /// attribute, only asked for when a network filter is loaded). Returns the mark to pass to
    /// [`stream_ended`](super::stream_ended); none if the connection has no network filter.
    pub fn stream_started(&self, id: impl FnOnce() -> Option<u64>) -> StreamMark {
        if !self.loaded() {
            return StreamMark::default(); // no network filter in this process: nothing to count
        }
        let Some(id) = id() else {
            return StreamMark::default();
        };
        let conn = LOCAL
            .try_with(|l| {
                let l = l.try_borrow().ok()?;
                l.map.get(&id).filter(|c| !get(&c.gone)).cloned()
            })
            .ok()
            .flatten();
        if let Some(c) = &conn {
            c.stream_started();
            #[cfg(feature = "cross-check")]
            c.xc.check_start(c.id);
        }
        StreamMark { conn, attached: 0 }
    }

    /// Idle connections told so far (status JSON, drain-complete log line).
    pub fn idle_told(&self) -> IdleTold {
        self.counts.snapshot()
    }

    /// The drain started (the engine's first evaluation of it, on Envoy's main thread): wake
    /// every connection now through Envoy's schedulers `to` so idle ones are told, and once more
    /// after the grace so they are closed. Idempotent. The re-checks run on a thread owned by
    /// `threads`, whose gate keeps their commits out of Envoy once the exit is released; the
    /// drain's completion ([`Connections::note_drained`]) ends them early.
    pub fn drain_started(
        &'static self,
        threads: &'static Threads,
        to: &'static dyn ConnectionWakers,
    ) {
        if !self.mark_draining() || !self.loaded() {
            return; // already started, or no network filter loaded
        }
        let n = self.wake_all(to, EVENT_DRAIN_STARTED);
        let (shortest, longest) = self.graces();
        log::info!(
            "graceful_drain: telling idle connections about the drain ({n} open connections; idle \
             HTTP/2 get GOAWAY now and a close after their listener's idle_close_grace \
             ({shortest:?}{}), idle HTTP/1.1 a close)",
            if longest > shortest {
                format!(" to {longest:?}")
            } else {
                String::new()
            }
        );
        let grace = shortest.max(Duration::from_millis(10));
        // Enough rounds at the shortest grace for the longest to pass, then RECHECKS more.
        let rounds = RECHECKS + (longest.as_millis() / grace.as_millis().max(1)) as u32;
        // One timer thread per process: network filters have no timer of their own, and the
        // scheduler commit is thread-safe. It ends after its rounds, or when the module stops.
        let spawned = threads.spawn("graceful_drain_idle_grace", move || {
            for round in 0..=rounds {
                if round > 0 {
                    if !threads.sleep(grace.saturating_sub(CONFIRM_DELAY)) || self.is_drained() {
                        return;
                    }
                    self.wake_all(to, EVENT_GRACE_OVER);
                }
                if !threads.sleep(CONFIRM_DELAY) || self.is_drained() {
                    return;
                }
                self.wake_all(to, EVENT_CONFIRM_CLOSE);
            }
        });
        if let Err(e) = spawned {
            log::warn!("graceful_drain: no grace timer thread ({e}); idle HTTP/2 closed at exit");
        }
    }
}
