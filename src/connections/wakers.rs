//! The scheduler table shared with the drain side: every live connection's waker, sharded per
//! worker; the last holder of a waker destroys it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const SHARDS: usize = 64;

/// Lock a mutex even if poisoned: the slabs hold plain words whose invariants a panic cannot
/// break halfway, and refusing to drain would be worse.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection's waker (an opaque word: the glue stores a scheduler pointer) and how to destroy
/// it. Shared by the table and, briefly, by the drain side while it commits: the last holder
/// destroys it, so a commit never meets a deleted scheduler.
#[derive(Debug)]
pub struct Waker {
    word: usize,
    destroy: fn(usize),
    /// When the connection's long-lived stream wants its next wake-up (`Shared` clock nanos;
    /// 0: none): read by the moves thread (`Connections::moves_started`).
    wake_at: AtomicU64,
}

impl Waker {
    pub fn new(word: usize, destroy: fn(usize)) -> Arc<Waker> {
        Arc::new(Waker {
            word,
            destroy,
            wake_at: AtomicU64::new(0),
        })
    }

    /// Ask the moves thread for a wake-up at `at` (any earlier request is replaced).
    pub fn wake_at(&self, at: u64) {
        self.wake_at.store(at, Ordering::Relaxed);
    }

    /// The wake-up asked for, if it is due at `now` (then taken: asked again to come again);
    /// else the time asked for (0: none).
    pub fn take_due(&self, now: u64) -> Result<(), u64> {
        let at = self.wake_at.load(Ordering::Relaxed);
        if at == 0 || at > now {
            return Err(at);
        }
        match self
            .wake_at
            .compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(again) => Err(again),
        }
    }

    pub fn word(&self) -> usize {
        self.word
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        (self.destroy)(self.word)
    }
}

#[derive(Default)]
struct Slab {
    entries: Vec<Option<Arc<Waker>>>,
    free: Vec<usize>,
}

/// Where a connection's waker sits in [`Wakers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakerSlot {
    shard: usize,
    index: usize,
}

/// Every live connection's waker, sharded per worker thread so registering a connection takes
/// an uncontended lock.
pub struct Wakers {
    shards: Box<[Mutex<Slab>]>,
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl Default for Wakers {
    fn default() -> Self {
        Wakers {
            shards: (0..SHARDS).map(|_| Mutex::new(Slab::default())).collect(),
        }
    }
}

impl Wakers {
    fn my_shard() -> usize {
        SHARD
            .try_with(|s| {
                if s.get() == usize::MAX {
                    s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
                }
                s.get()
            })
            .unwrap_or(0)
    }

    pub fn insert(&self, waker: Arc<Waker>) -> WakerSlot {
        let shard = Self::my_shard();
        let mut s = lock(&self.shards[shard]);
        let index = match s.free.pop() {
            Some(i) => {
                s.entries[i] = Some(waker);
                i
            }
            None => {
                s.entries.push(Some(waker));
                s.entries.len() - 1
            }
        };
        WakerSlot { shard, index }
    }

    /// Take the waker out of the table. Dropping the result destroys it unless the drain side
    /// is committing to it right now (then that commit's end destroys it).
    pub fn remove(&self, slot: WakerSlot) -> Option<Arc<Waker>> {
        let mut s = lock(&self.shards[slot.shard]);
        let w = s.entries.get_mut(slot.index)?.take();
        if w.is_some() {
            s.free.push(slot.index);
        }
        w
    }

    /// Ask the moves thread to wake the connection at `slot` at `at` (its worker, once per
    /// step of a long-lived stream's move: not on the request path).
    pub fn wake_at(&self, slot: WakerSlot, at: u64) {
        let s = lock(&self.shards[slot.shard]);
        if let Some(Some(w)) = s.entries.get(slot.index) {
            w.wake_at(at);
        }
    }

    /// A counted reference to the waker at `slot`, if it is still there.
    pub fn get(&self, slot: WakerSlot) -> Option<Arc<Waker>> {
        lock(&self.shards[slot.shard])
            .entries
            .get(slot.index)
            .cloned()
            .flatten()
    }

    /// Counted references to every live waker; no lock is held once this returns.
    pub fn snapshot(&self) -> Vec<Arc<Waker>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let s = lock(shard);
            all.extend(s.entries.iter().flatten().cloned());
        }
        all
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).entries.iter().flatten().count())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
