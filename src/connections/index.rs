//! Live connections of a worker by id (a thread-local map, no lock), and the mark a stream of
//! the HTTP filter holds on its connection ([`StreamMark`]).

use super::{get, set, Conn};
use crate::counting::{Lane, ReservedSlot};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Connection ids are small sequential integers: a multiplicative hash spreads them at a fraction
/// of SipHash's cost (this lookup is on every request).
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type ConnMap = HashMap<u64, Arc<Conn>, BuildHasherDefault<IdHasher>>;

/// Live connections of this worker thread by id. A connection's network filter and every HTTP
/// stream on it run on one worker, so the HTTP filter finds its connection here without a lock.
/// A connection torn down on another thread (module doc) cannot be removed from its worker's
/// map from there: it is only marked `gone`, and the worker sweeps such entries out as its map
/// grows (amortised: at most about twice the live connections stay in it).
pub(super) struct Local {
    pub(super) map: ConnMap,
    sweep_at: usize,
}

pub(super) const LOCAL_SWEEP_MIN: usize = 64;

thread_local! {
    pub(super) static LOCAL: std::cell::RefCell<Local> = std::cell::RefCell::new(Local {
        map: ConnMap::default(),
        sweep_at: LOCAL_SWEEP_MIN,
    });
}

/// Make a connection findable by id from its worker (network filter, new connection).
pub fn register(conn: &Arc<Conn>) {
    let _ = LOCAL.try_with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else {
            return;
        };
        if l.map.len() >= l.sweep_at {
            l.map.retain(|_, c| !get(&c.gone));
            l.sweep_at = (2 * l.map.len()).max(LOCAL_SWEEP_MIN);
        }
        l.map.insert(conn.id, conn.clone());
    });
}

/// Forget a connection (network filter destroyed; any thread: on another one it is only marked,
/// and its worker sweeps it out later).
pub fn unregister(conn: &Conn) {
    set(&conn.gone, true);
    let _ = LOCAL.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            if l.map
                .get(&conn.id)
                .is_some_and(|c| std::ptr::eq(&**c, conn))
            {
                l.map.remove(&conn.id);
            }
        }
    });
}

/// A stream counted against a connection
/// ([`Connections::stream_started`](super::Connections::stream_started)); hand it back to
/// [`stream_ended`]. `Default` is "none".
/// It holds the connection itself, so the end of the stream takes no lock and no lookup (the
/// connection's state outlives its network filter while a stream still holds it: harmless).
#[derive(Debug, Default)]
pub struct StreamMark {
    pub(super) conn: Option<Arc<Conn>>,
    /// The word attached to the connection (0: none).
    pub(super) attached: usize,
}

impl StreamMark {
    pub fn is_set(&self) -> bool {
        self.conn.is_some()
    }

    /// Whether a drain start reaches this stream through its connection (a network filter with
    /// a scheduler in front): the stream then needs no scheduler of its own.
    pub fn reached_by_connection(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| get(&c.wakeable))
    }

    /// Whether the connection's exchange tracker counts its requests (its listener's network
    /// filter has `track_requests`): the HTTP filter, in the same chain, then counts none of
    /// them again. Decided per connection, by its own listener.
    pub fn counted_by_tracker(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| get(&c.followed))
    }

    /// The in-flight table lane of the connection's worker, if known.
    pub fn lane(&self) -> Option<Lane> {
        self.conn.as_ref().and_then(|c| c.lane)
    }

    /// The connection's own slot of the in-flight table, if it has one.
    pub fn reserved(&self) -> Option<&ReservedSlot> {
        self.conn.as_ref().and_then(|c| c.reserved.as_ref())
    }

    /// Test-only (`cross-check`): the HTTP filter saw this stream's response end (`true`), or
    /// the stream that had ends now (`false`).
    #[cfg(feature = "cross-check")]
    pub fn cross_check_response_done(&self, done: bool) {
        if let Some(c) = &self.conn {
            if done {
                c.xc.http_done.fetch_add(1, Ordering::Relaxed);
            } else {
                let _ =
                    c.xc.http_done
                        .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
        }
    }

    /// Make this stream the one its connection hands back at drain start
    /// ([`Action::WakeStream`](super::Action::WakeStream)) until it ends. `word` identifies the
    /// stream to the glue (non-zero). On the stream's worker.
    pub fn attach(&mut self, word: usize) {
        if let Some(c) = &self.conn {
            c.stream.store(word, Ordering::Relaxed);
            self.attached = word;
        }
    }
}

/// The stream behind `mark` ended at `now()` (`StreamSink::now_nanos`, read only for a set mark;
/// idempotent for a default mark). After this its connection no longer hands it back.
pub fn stream_ended(mark: StreamMark, now: impl FnOnce() -> u64) {
    if let Some(c) = mark.conn {
        if mark.attached != 0 {
            // A later stream may have attached itself since: only take back our own word.
            let _ =
                c.stream
                    .compare_exchange(mark.attached, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
        c.stream_ended(now());
    }
}
