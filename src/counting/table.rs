//! The table itself: a slab per worker thread, its segments of slots, the free stack of each
//! slab, and the thread-local that ties a worker thread to its slab. Uses only the registry's
//! own types and `crate::runtime::sync`.

use super::*;
use std::cell::RefCell;
use std::collections::HashSet;
pub(super) struct Slot {
    /// 0 = free; otherwise the waker word, with [`BUSY`] set while a scan uses it.
    pub(super) waker: AtomicUsize,
    /// Start time (the clock's nanoseconds) of the request holding the slot.
    pub(super) started: AtomicU64,
    /// While the slot is free: the next free slot of its slab's free stack.
    pub(super) next: AtomicU32,
}

pub(super) fn new_segment(len: usize) -> Box<[Slot]> {
    (0..len)
        .map(|_| Slot {
            waker: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            next: AtomicU32::new(NO_SLOT),
        })
        .collect()
}

/// A free-stack head: the top slot's index, tagged with a count of changes so that a pop that
/// read a stale `next` cannot succeed (the ABA problem of lock-free stacks).
pub(super) fn head(tag: u64, slot: u32) -> u64 {
    tag << 32 | slot as u64
}

pub(super) struct Slab {
    /// Published once each by the owner (`OnceLock`: release/acquire), read by scans.
    pub(super) segments: Box<[OnceLock<Box<[Slot]>>]>,
    /// Requests started / ended. Written by the owner only (no contention); `ended` is `Release`
    /// so a reader that loads it first (`Acquire`) then `started` never sees more ends than starts.
    pub(super) started: AtomicU64,
    pub(super) ended: AtomicU64,
    /// Latest request start. Only ever raised: never regresses.
    pub(super) last_start: AtomicU64,
    /// Free stack of slots ([`head`]).
    pub(super) free: AtomicU64,
    /// Segments taken into use: raised by compare-and-swap, so one thread adds each segment's
    /// slots to the free stack.
    pub(super) grown: AtomicUsize,
}

impl Slab {
    pub(super) fn new() -> Self {
        Slab {
            segments: (0..MAX_SEGMENTS).map(|_| OnceLock::new()).collect(),
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            last_start: AtomicU64::new(0),
            free: AtomicU64::new(head(0, NO_SLOT)),
            grown: AtomicUsize::new(0),
        }
    }

    pub(super) fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.segments
            .iter()
            .map_while(|s| s.get())
            .flat_map(|s| s.iter())
    }
}

/// The owner side of a slab: lives in the owning thread's thread-local.
pub(super) struct Owner {
    pub(super) registry: u64,
    pub(super) slab: u32,
    /// Connections this worker already sent away (a connection never leaves its worker).
    pub(super) sent_away: HashSet<u64>,
}

// Not `const`-initialised: loom's `thread_local!` does not take that form.
#[allow(clippy::missing_const_for_thread_local)]
mod owners {
    use super::*;
    crate::runtime::sync::thread_local! {
        pub(super) static OWNERS: RefCell<Vec<Owner>> = RefCell::new(Vec::new());
    }
}
use owners::OWNERS;

impl Registry {
    pub(super) fn slab(&self, i: u32) -> Option<&Slab> {
        self.slabs.get(i as usize).and_then(|s| s.get())
    }

    pub(super) fn slot<'s>(&self, slab: &'s Slab, idx: u32) -> Option<&'s Slot> {
        let (k, off) = segment_of(self.base, idx as usize);
        slab.segments.get(k)?.get()?.get(off)
    }

    /// Run `f` with this thread's owner state, creating it (and its slab) on first use.
    /// `None` if the thread cannot have one (worker limit reached, re-entrant call, thread exit).
    pub(super) fn with_owner<R>(&self, f: impl FnOnce(&mut Owner, &Slab) -> R) -> Option<R> {
        OWNERS
            .try_with(|owners| {
                let mut owners = owners.try_borrow_mut().ok()?;
                let pos = match owners.iter().position(|o| o.registry == self.id) {
                    Some(p) => p,
                    None => {
                        // SeqCst: see the module comment; a scan after its fence sees this slab.
                        let i = self.next_slab.fetch_add(1, Ordering::SeqCst);
                        if i >= self.slabs.len() {
                            return None;
                        }
                        self.slabs[i].get_or_init(Slab::new);
                        owners.push(Owner {
                            registry: self.id,
                            slab: i as u32,
                            sent_away: HashSet::new(),
                        });
                        owners.len() - 1
                    }
                };
                let owner = &mut owners[pos];
                let slab = self.slab(owner.slab)?;
                Some(f(owner, slab))
            })
            .ok()
            .flatten()
    }

    /// Take a free slot of `slab`: the top of its free stack, else a new segment's.
    pub(super) fn pop(&self, slab: &Slab) -> Option<u32> {
        let mut h = slab.free.load(Ordering::Acquire);
        loop {
            let top = h as u32;
            if top == NO_SLOT {
                return self.grow(slab);
            }
            let next = self.slot(slab, top)?.next.load(Ordering::Relaxed);
            // Acquire: the `next` read above was published by the push of `top` (Release).
            match slab.free.compare_exchange_weak(
                h,
                head((h >> 32).wrapping_add(1), next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(top),
                Err(now) => h = now,
            }
        }
    }

    /// Put the chain of free slots `first..=last` (linked through `next`) on the free stack.
    pub(super) fn push_chain(&self, slab: &Slab, first: u32, last: &Slot) {
        let mut h = slab.free.load(Ordering::Relaxed);
        loop {
            last.next.store(h as u32, Ordering::Relaxed);
            // Release: a pop that sees this head sees the `next` links stored before it.
            match slab.free.compare_exchange_weak(
                h,
                head((h >> 32).wrapping_add(1), first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => h = now,
            }
        }
    }

    pub(super) fn push(&self, slab: &Slab, idx: u32) {
        if let Some(s) = self.slot(slab, idx) {
            self.push_chain(slab, idx, s);
        }
    }

    /// The free stack was empty: take the next segment into use, keep its first slot and put
    /// the others on the stack. `None` only when every segment is in use (far beyond any load).
    pub(super) fn grow(&self, slab: &Slab) -> Option<u32> {
        loop {
            let k = slab.grown.load(Ordering::Acquire);
            let len = self.base << k;
            let seg = slab.segments.get(k)?.get_or_init(|| new_segment(len));
            if slab
                .grown
                .compare_exchange(k, k + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Another thread grew it meanwhile: its slots may be on the stack now.
                let h = slab.free.load(Ordering::Acquire);
                if h as u32 != NO_SLOT {
                    return self.pop(slab);
                }
                continue;
            }
            let first = (self.base * ((1 << k) - 1)) as u32;
            if len > 1 {
                for (i, s) in seg[1..len - 1].iter().enumerate() {
                    s.next.store(first + 2 + i as u32, Ordering::Relaxed);
                }
                self.push_chain(slab, first + 1, &seg[len - 1]);
            }
            return Some(first);
        }
    }

    /// This thread's lane (its slab, made on first use), for [`Registry::start_in`]; `None` if
    /// the thread cannot have one (worker limit reached, thread exiting).
    pub fn lane(&self) -> Option<Lane> {
        self.with_owner(|o, _| Lane(o.slab))
    }
}
