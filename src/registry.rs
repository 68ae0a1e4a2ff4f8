//! In-flight request registry ("active requests"): counts every data-plane request, remembers the
//! latest start, and keeps a waker per in-flight request so a drain can reach each one on its own
//! worker thread. Pure Rust with atomics; must not call FFI, and the request path must not lock
//! nor allocate (except when a worker's table grows past its peak, once per doubling).
//!
//! Layout: one *slab* (a *lane*) per worker thread. A request claims a slot of its worker's slab
//! from the slab's free stack and gives it back to it (a tagged compare-and-swap each way: O(1),
//! correct from any thread, no thread-local on the way). Any thread reads the slabs for scans
//! (drain wake-up, status). Slabs grow by segments of doubling size, so there is no capacity
//! cliff: memory follows the peak number of concurrent requests of each worker.
//!
//! A caller that already knows its lane (the connection a request arrives on remembers its
//! worker's, [`Registry::lane`]) starts requests with [`Registry::start_in`]: no thread-local
//! lookup at all on the request path.
//!
//! The drain protocol (model-checked by `tests/loom.rs`-style tests in this file under `--cfg loom`):
//! a request stores its waker, then a `SeqCst` fence, then reads the drain flag; a drain sets the
//! flag, then a `SeqCst` fence, then scans. Of two `SeqCst` fences one comes first, so either the
//! request sees the drain, or the scan sees the waker (or both): no request is ever missed.
//! A slot being used by a scan is marked busy (low bit), so its owner cannot free the waker while
//! the scan commits an event to it.

use crate::sync::{backoff, fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::OnceLock;

/// Slots in a worker's first segment; each further segment doubles.
pub const SEGMENT_BASE: usize = 64;
/// Segments per slab: `base * (2^MAX_SEGMENTS - 1)` slots per worker, unbounded in practice.
const MAX_SEGMENTS: usize = 24;
/// Worker threads a registry serves (Envoy's `--concurrency`; far above any real deployment).
pub const MAX_WORKERS: usize = 512;

const BUSY: usize = 1;
/// The waker word of a request that holds a slot (it is counted and aged) but is reached through
/// its connection rather than a waker of its own: scans pass it by. Non-zero with the low bits
/// clear, and never a real waker (those are aligned pointers well above it).
const NO_WAKER: usize = 4;
/// Set on a busy slot whose request ended on the scanning thread itself (Envoy destroyed the
/// filter from inside the scan's own commit): the scan frees the slot when it is done with it.
const ABANDONED: usize = 2;
const NO_SLAB: u32 = u32::MAX;
const NO_SLOT: u32 = u32::MAX;

/// A request's registration: return it to [`Registry::end`] exactly once (it is not `Clone`).
#[derive(Debug, PartialEq, Eq)]
pub struct Ticket {
    slab: u32,
    slot: u32,
    /// The slot is a connection's [`ReservedSlot`]: ended there, and not freed.
    reserved: bool,
}

impl Ticket {
    /// A ticket no request owns, to simulate a double end in tests.
    #[cfg(test)]
    pub(crate) fn forged_for_tests() -> Ticket {
        Ticket {
            slab: NO_SLAB,
            slot: NO_SLOT,
            reserved: false,
        }
    }

    /// Whether the request holds its connection's reserved slot (end it there).
    pub fn is_reserved(&self) -> bool {
        self.reserved
    }

    /// Whether the request got a slot (and so, if it has a waker, is reached by a drain's scan).
    pub fn has_slot(&self) -> bool {
        self.slot != NO_SLOT
    }
}

struct Slot {
    /// 0 = free; otherwise the waker word, with [`BUSY`] set while a scan uses it.
    waker: AtomicUsize,
    /// Start time (the clock's nanoseconds) of the request holding the slot.
    started: AtomicU64,
    /// While the slot is free: the next free slot of its slab's free stack.
    next: AtomicU32,
}

fn new_segment(len: usize) -> Box<[Slot]> {
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
fn head(tag: u64, slot: u32) -> u64 {
    tag << 32 | slot as u64
}

struct Slab {
    /// Published once each by the owner (`OnceLock`: release/acquire), read by scans.
    segments: Box<[OnceLock<Box<[Slot]>>]>,
    /// Requests started / ended. Written by the owner only (no contention); `ended` is `Release`
    /// so a reader that loads it first (`Acquire`) then `started` never sees more ends than starts.
    started: AtomicU64,
    ended: AtomicU64,
    /// Latest request start. Only ever raised: never regresses.
    last_start: AtomicU64,
    /// Free stack of slots ([`head`]).
    free: AtomicU64,
    /// Segments taken into use: raised by compare-and-swap, so one thread adds each segment's
    /// slots to the free stack.
    grown: AtomicUsize,
}

impl Slab {
    fn new() -> Self {
        Slab {
            segments: (0..MAX_SEGMENTS).map(|_| OnceLock::new()).collect(),
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            last_start: AtomicU64::new(0),
            free: AtomicU64::new(head(0, NO_SLOT)),
            grown: AtomicUsize::new(0),
        }
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.segments
            .iter()
            .map_while(|s| s.get())
            .flat_map(|s| s.iter())
    }
}

/// The owner side of a slab: lives in the owning thread's thread-local.
struct Owner {
    registry: u64,
    slab: u32,
    /// Connections this worker already sent away (a connection never leaves its worker).
    sent_away: HashSet<u64>,
}

/// A worker's slab, for [`Registry::start_in`]. Only meaningful for the registry that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(u32);

// Not `const`-initialised: loom's `thread_local!` does not take that form.
#[allow(clippy::missing_const_for_thread_local)]
mod owners {
    use super::*;
    crate::sync::thread_local! {
        pub(super) static OWNERS: RefCell<Vec<Owner>> = RefCell::new(Vec::new());
    }
}
use owners::OWNERS;

// Whether this thread is inside a drain scan (see `ABANDONED`).
#[allow(clippy::missing_const_for_thread_local)]
mod scanning {
    use std::cell::Cell;
    crate::sync::thread_local! {
        pub(super) static SCANNING: Cell<bool> = Cell::new(false);
    }
}

fn scanning_here() -> bool {
    scanning::SCANNING.try_with(|s| s.get()).unwrap_or(false)
}

/// Marks this thread as scanning for as long as it lives.
struct ScanMark;

impl ScanMark {
    fn enter() -> ScanMark {
        let _ = scanning::SCANNING.try_with(|s| s.set(true));
        ScanMark
    }
}

impl Drop for ScanMark {
    fn drop(&mut self) {
        let _ = scanning::SCANNING.try_with(|s| s.set(false));
    }
}

static NEXT_REGISTRY_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub struct Registry {
    id: u64,
    base: usize,
    slabs: Box<[OnceLock<Slab>]>,
    /// Slabs handed out so far (`SeqCst` RMW: ordered with the fences of the drain protocol).
    next_slab: AtomicUsize,
    draining: AtomicBool,
    /// Requests that could not get a slab (more threads than `MAX_WORKERS`, or a re-entrant
    /// call): still counted here, exactly, and sent away at their response instead.
    overflow_started: AtomicU64,
    overflow_ended: AtomicU64,
    /// Requests ended by [`Registry::give_back`]: counted before their ends (`begun`) and
    /// after (`done`), see there.
    given_back_begun: AtomicU64,
    given_back_done: AtomicU64,
    /// Rounds that ends spent waiting for a scan holding their waker: lets a test hold its scan
    /// until an end is really waiting for it. Test builds only (a plain std atomic, outside
    /// loom's model).
    #[cfg(test)]
    busy_waits: std::sync::atomic::AtomicUsize,
}

/// A consistent-enough reading of the counts for the drain engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Started minus ended. Negative only if the accounting is broken (a double end).
    pub active: i64,
    /// Latest start, in the clock's nanoseconds; 0 if none yet.
    pub last_start: u64,
    /// Requests started so far (wrapping).
    pub started: u64,
    /// Requests given back so far ([`Registry::give_back`]) whose ends had *completed* before
    /// `active` was read (read first): a count taken with `active` excludes all of them.
    pub given_back_before: u64,
    /// Requests given back so far whose ends had *begun* by the time the reading ended (read
    /// last): every give-back missing from `active` is in it.
    pub given_back: u64,
}

/// Table size, for the status report (memory stays bounded by the peak concurrency).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub workers: usize,
    pub slots: usize,
    pub bytes: usize,
}

/// `base` is a power of two (a shift, not a division, on every request).
fn segment_of(base: usize, idx: usize) -> (usize, usize) {
    debug_assert!(base.is_power_of_two());
    let q = (idx >> base.trailing_zeros()) + 1;
    let k = (usize::BITS - 1 - q.leading_zeros()) as usize;
    (k, idx - base * ((1 << k) - 1))
}

impl Registry {
    pub fn new() -> Self {
        Self::with_limits(SEGMENT_BASE, MAX_WORKERS)
    }

    /// A registry with a given first-segment size and worker limit (small values in tests).
    pub fn with_limits(segment_base: usize, max_workers: usize) -> Self {
        let r = Registry {
            id: NEXT_REGISTRY_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            base: segment_base.max(1).next_power_of_two(),
            slabs: (0..max_workers.max(1)).map(|_| OnceLock::new()).collect(),
            next_slab: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            overflow_started: AtomicU64::new(0),
            overflow_ended: AtomicU64::new(0),
            given_back_begun: AtomicU64::new(0),
            given_back_done: AtomicU64::new(0),
            #[cfg(test)]
            busy_waits: std::sync::atomic::AtomicUsize::new(0),
        };
        // Under loom, publish every slab and first segment before any thread starts: loom cannot
        // see a publication through std's OnceLock. The model then checks the protocol of the
        // slots themselves; the growth path is covered by the ordinary tests.
        #[cfg(loom)]
        for slab in r.slabs.iter() {
            let s = slab.get_or_init(Slab::new);
            s.segments[0].get_or_init(|| new_segment(r.base));
        }
        r
    }

    fn slab(&self, i: u32) -> Option<&Slab> {
        self.slabs.get(i as usize).and_then(|s| s.get())
    }

    fn slot<'s>(&self, slab: &'s Slab, idx: u32) -> Option<&'s Slot> {
        let (k, off) = segment_of(self.base, idx as usize);
        slab.segments.get(k)?.get()?.get(off)
    }

    /// Run `f` with this thread's owner state, creating it (and its slab) on first use.
    /// `None` if the thread cannot have one (worker limit reached, re-entrant call, thread exit).
    fn with_owner<R>(&self, f: impl FnOnce(&mut Owner, &Slab) -> R) -> Option<R> {
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
    fn pop(&self, slab: &Slab) -> Option<u32> {
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
    fn push_chain(&self, slab: &Slab, first: u32, last: &Slot) {
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

    fn push(&self, slab: &Slab, idx: u32) {
        if let Some(s) = self.slot(slab, idx) {
            self.push_chain(slab, idx, s);
        }
    }

    /// The free stack was empty: take the next segment into use, keep its first slot and put
    /// the others on the stack. `None` only when every segment is in use (far beyond any load).
    fn grow(&self, slab: &Slab) -> Option<u32> {
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

    /// A slot of `lane` kept by a connection for the requests it carries one at a time (every
    /// HTTP/1.1 request, the first HTTP/2 stream in flight): such a request takes and leaves it
    /// with two stores, no free-stack operation, no lookup. The slot goes back to the lane's free
    /// stack when the [`ReservedSlot`] is dropped (the connection's last reference: after its
    /// last request ended, whichever thread that is on).
    pub fn reserve(&'static self, lane: Lane) -> Option<ReservedSlot> {
        let slab = self.slab(lane.0)?;
        let idx = self.pop(slab)?;
        let Some(slot) = self.slot(slab, idx) else {
            self.push(slab, idx);
            return None;
        };
        Some(ReservedSlot {
            registry: self,
            slab,
            slot,
            lane: lane.0,
            idx,
        })
    }

    /// A data-plane request started at `now` (non-zero) on this thread. With a waker (an aligned
    /// pointer) it is reached by a drain's scan; without one it is only counted and aged (its
    /// connection is woken instead). Returns its ticket and whether a drain had started: if so
    /// the caller sends the connection away itself.
    pub fn start(&self, waker: Option<usize>, now: u64) -> (Ticket, bool) {
        self.start_in(self.lane(), waker, now)
    }

    /// As [`Registry::start`], on a lane known beforehand (no thread-local lookup). Call it on
    /// the lane's own thread: the latest start is raised without a locked instruction.
    ///
    /// A request with a waker follows the drain protocol (module comment: a `SeqCst` fence
    /// before the drain flag is read). One without is reached through its connection, whose
    /// wake-up is posted to this thread after the flag is set: the plain read suffices there.
    pub fn start_in(&self, lane: Option<Lane>, waker: Option<usize>, now: u64) -> (Ticket, bool) {
        debug_assert!(waker.is_none_or(|w| w > NO_WAKER && w & (BUSY | ABANDONED) == 0));
        let ticket = match lane.and_then(|l| Some((l.0, self.slab(l.0)?))) {
            Some((i, slab)) => {
                slab.started.fetch_add(1, Ordering::Relaxed);
                if now > slab.last_start.load(Ordering::Relaxed) {
                    slab.last_start.fetch_max(now, Ordering::Relaxed);
                }
                let slot = self
                    .pop(slab)
                    .and_then(|idx| {
                        let s = self.slot(slab, idx)?;
                        s.started.store(now, Ordering::Relaxed);
                        // Release: a scan that sees the waker (Acquire) sees its start time.
                        s.waker.store(waker.unwrap_or(NO_WAKER), Ordering::Release);
                        Some(idx)
                    })
                    .unwrap_or(NO_SLOT);
                Ticket {
                    slab: i,
                    slot,
                    reserved: false,
                }
            }
            None => {
                self.overflow_started.fetch_add(1, Ordering::Relaxed);
                Ticket {
                    slab: NO_SLAB,
                    slot: NO_SLOT,
                    reserved: false,
                }
            }
        };
        if waker.is_some() {
            // The request half of the drain protocol (module comment).
            fence(Ordering::SeqCst);
        }
        (ticket, self.draining.load(Ordering::Relaxed))
    }

    /// The request ended (on any thread). Returns its waker (if it had one), which the caller
    /// may now destroy: no scan is using it and none can start using it.
    pub fn end(&self, ticket: Ticket) -> Option<usize> {
        let Some(slab) = self.slab(ticket.slab) else {
            self.overflow_ended.fetch_add(1, Ordering::Release);
            return None;
        };
        let mut waker = None;
        if ticket.reserved {
            // Its connection's slot: left to the connection (see `ReservedSlot::end`).
            if let Some(s) = self.slot(slab, ticket.slot) {
                s.waker.store(0, Ordering::Release);
            }
        } else if let Some(s) = self.slot(slab, ticket.slot) {
            let v = s.waker.load(Ordering::Acquire);
            let freed = if v == NO_WAKER {
                // No scan ever holds a slot without a waker.
                s.waker.store(0, Ordering::Release);
                true
            } else {
                // Acquire on success: the scan's use of the waker happened before we free it.
                (v & BUSY == 0
                    && s.waker
                        .compare_exchange(v, 0, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok())
                    || Self::free_busy_waker(s, || {
                        // Test builds count the wait (`busy_waits`); empty otherwise.
                        #[cfg(test)]
                        self.busy_waits
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    })
            };
            if freed {
                self.push_chain(slab, ticket.slot, s);
                waker = (v != NO_WAKER).then_some(v & !BUSY);
            }
        }
        slab.ended.fetch_add(1, Ordering::Release);
        waker
    }

    /// Take a waker out of its slot while a scan may be using it: waits for the scan, unless it
    /// is up this thread's own stack (then the slot and its waker are left to it, and false is
    /// returned). `waiting` runs at each round of the wait. Out of line: the thread-local it
    /// reads would otherwise be looked up on every end.
    #[inline(never)]
    fn free_busy_waker(s: &Slot, waiting: impl Fn()) -> bool {
        let mut round = 0;
        let mut v = s.waker.load(Ordering::Acquire);
        loop {
            if v & BUSY == 0 {
                // Acquire on success: the scan's use of the waker happened before we free it.
                match s
                    .waker
                    .compare_exchange(v, 0, Ordering::Acquire, Ordering::Acquire)
                {
                    Ok(_) => return true,
                    Err(now) => {
                        v = now;
                        continue;
                    }
                }
            }
            if scanning_here() {
                // The scan holding this slot is up our own stack (waiting for it would never
                // end): leave the slot and its waker to the scan, which frees the slot after.
                match s.waker.compare_exchange(
                    v,
                    v | ABANDONED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return false,
                    Err(now) => {
                        v = now;
                        continue;
                    }
                }
            }
            waiting();
            backoff(&mut round);
            v = s.waker.load(Ordering::Acquire);
        }
    }

    /// Set the drain flag, then call `f` with every registered waker, holding each busy so it
    /// cannot be freed while `f` runs. A waker whose request ended inside `f` on this thread was
    /// left to the scan by its owner (`ABANDONED`): once `f` is done with it, the scan frees
    /// its slot and hands it to `abandoned`, which destroys it (nobody else will). Returns how
    /// many wakers were visited.
    pub fn begin_drain(&self, f: impl FnMut(usize), abandoned: impl FnMut(usize)) -> usize {
        self.draining.store(true, Ordering::Relaxed);
        // The drain half of the protocol (module comment).
        fence(Ordering::SeqCst);
        self.for_each_waker(f, abandoned)
    }

    /// Whether [`Registry::begin_drain`] ran.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    fn slabs_in_use(&self) -> impl Iterator<Item = &Slab> {
        let n = self.next_slab.load(Ordering::SeqCst).min(self.slabs.len());
        self.slabs[..n].iter().filter_map(|s| s.get())
    }

    fn for_each_waker(&self, mut f: impl FnMut(usize), mut abandoned: impl FnMut(usize)) -> usize {
        let mut visited = 0;
        let _scanning = ScanMark::enter();
        for slab in self.slabs_in_use() {
            for (idx, slot) in slab.slots().enumerate() {
                let v = slot.waker.load(Ordering::Acquire);
                if v == 0 || v == NO_WAKER || v & BUSY != 0 {
                    continue;
                }
                // Acquire: pairs with the owner's Release store of this waker.
                if slot
                    .waker
                    .compare_exchange(v, v | BUSY, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    f(v);
                    visited += 1;
                    // Release: our use of the waker happens before the owner frees it.
                    if slot
                        .waker
                        .compare_exchange(v | BUSY, v, Ordering::Release, Ordering::Relaxed)
                        .is_err()
                    {
                        // Its request ended inside `f` on this thread (see `end`): free it now,
                        // and destroy the waker its owner left to us.
                        slot.waker.store(0, Ordering::Release);
                        self.push(slab, idx as u32);
                        abandoned(v);
                    }
                }
            }
        }
        visited
    }

    /// End `n` requests that Envoy may still be serving (`end` ends their tickets): what
    /// counts them instead, Envoy's gauges, was read with them counted here, so a reader that
    /// adds Envoy's excess to `active` must add these back until a gauge pass read after their
    /// ends ([`Counts::given_back_before`] at its start) includes them
    /// ([`crate::stats_scan::EnvoyStatsCache::view`]). Counted before and after the ends, so
    /// that neither reading can miss one: a reading whose `active` lacks one has it in
    /// `given_back`; a pass baseline (`given_back_before`) holds only ends its `active` lacks.
    pub fn give_back(&self, n: u64, end: impl FnOnce()) {
        self.given_back_begun.fetch_add(n, Ordering::SeqCst);
        end();
        self.given_back_done.fetch_add(n, Ordering::SeqCst);
    }

    /// Requests in flight and the latest start, summed over workers.
    pub fn counts(&self) -> Counts {
        // Before the sums: a give-back counted done here had ended its requests already.
        let given_back_before = self.given_back_done.load(Ordering::SeqCst);
        let mut active: i64 = 0;
        let mut last_start = 0;
        let mut total_started: u64 = 0;
        let mut add = |ended: &AtomicU64, started: &AtomicU64| {
            // Ends first (Acquire), then starts: never more ends than starts for correct use.
            let e = ended.load(Ordering::Acquire);
            let s = started.load(Ordering::Relaxed);
            active = active.wrapping_add(s.wrapping_sub(e) as i64);
            total_started = total_started.wrapping_add(s);
        };
        add(&self.overflow_ended, &self.overflow_started);
        for slab in self.slabs_in_use() {
            add(&slab.ended, &slab.started);
            last_start = last_start.max(slab.last_start.load(Ordering::Relaxed));
        }
        // After the sums (the fence keeps their loads before this one): a give-back whose end
        // the sums saw had begun before it.
        fence(Ordering::SeqCst);
        Counts {
            active,
            last_start,
            started: total_started,
            given_back_before,
            given_back: self.given_back_begun.load(Ordering::SeqCst),
        }
    }

    /// Start times of the requests holding slots.
    fn starts(&self) -> impl Iterator<Item = u64> + '_ {
        self.slabs_in_use()
            .flat_map(|s| s.slots())
            .filter(|s| s.waker.load(Ordering::Acquire) != 0)
            .map(|s| s.started.load(Ordering::Relaxed))
    }

    /// Start of the oldest request holding a slot.
    pub fn oldest_start(&self) -> Option<u64> {
        self.starts().min()
    }

    /// Requests holding slots by age at `now` (same clock as the start times): under 1 s, 1 s to
    /// 10 s, 10 s and over. Long-lived streams (WebSocket, gRPC streaming, SSE) show in the last.
    pub fn age_buckets(&self, now: u64) -> [u64; 3] {
        let mut b = [0u64; 3];
        for started in self.starts() {
            let i = match now.saturating_sub(started) {
                a if a < 1_000_000_000 => 0,
                a if a < 10_000_000_000 => 1,
                _ => 2,
            };
            b[i] += 1;
        }
        b
    }

    /// Requests holding slots with a waker of their own (diagnostics).
    pub fn own_wakers(&self) -> usize {
        self.slabs_in_use()
            .flat_map(|s| s.slots())
            .filter(|s| !matches!(s.waker.load(Ordering::Relaxed), 0 | NO_WAKER))
            .count()
    }

    /// Number of requests holding slots (diagnostics; [`Registry::counts`] is authoritative).
    pub fn occupied(&self) -> usize {
        self.starts().count()
    }

    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint {
            workers: 0,
            slots: 0,
            bytes: std::mem::size_of::<Self>()
                + self.slabs.len() * std::mem::size_of::<OnceLock<Slab>>(),
        };
        for slab in self.slabs_in_use() {
            f.workers += 1;
            let slots = slab.slots().count();
            f.slots += slots;
            f.bytes += std::mem::size_of::<Slab>()
                + MAX_SEGMENTS * std::mem::size_of::<OnceLock<Box<[Slot]>>>()
                + slots * std::mem::size_of::<Slot>();
        }
        f
    }

    /// Record that this worker sent connection `id` away. Returns false if it already had (the
    /// go-away would be redundant). Worker-local: no lock, no other thread involved. Unknown ids
    /// (and a thread without a slab) always return true: a repeated graceful go-away is harmless.
    pub fn mark_sent_away(&self, connection: Option<u64>) -> bool {
        let Some(id) = connection else { return true };
        self.with_owner(|o, _| o.sent_away.insert(id))
            .unwrap_or(true)
    }

    /// Whether this worker already sent connection `id` away.
    pub fn is_sent_away(&self, connection: Option<u64>) -> bool {
        let Some(id) = connection else { return false };
        self.with_owner(|o, _| o.sent_away.contains(&id))
            .unwrap_or(false)
    }
}

/// A connection's own slot of the in-flight table ([`Registry::reserve`]). Its requests start
/// and end on the connection's worker; a scan sees one in flight as any request without a waker
/// (counted, aged, passed by). Idle, the slot looks free to scans but is not on the free stack.
pub struct ReservedSlot {
    registry: &'static Registry,
    slab: &'static Slab,
    slot: &'static Slot,
    lane: u32,
    idx: u32,
}

impl std::fmt::Debug for ReservedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReservedSlot({}:{})", self.lane, self.idx)
    }
}

impl ReservedSlot {
    /// A request started at `now` on the slot's worker, if the slot is free (else `None`: take a
    /// slot of the lane with [`Registry::start_in`]). Counted like any start; returns whether a
    /// drain had started. No fence: the request is reached through its connection (see
    /// [`Registry::start_in`]).
    pub fn start(&self, now: u64) -> Option<(Ticket, bool)> {
        if self.slot.waker.load(Ordering::Relaxed) != 0 {
            return None;
        }
        self.slab.started.fetch_add(1, Ordering::Relaxed);
        if now > self.slab.last_start.load(Ordering::Relaxed) {
            self.slab.last_start.fetch_max(now, Ordering::Relaxed);
        }
        self.slot.started.store(now, Ordering::Relaxed);
        // Release: a reader that sees the request (Acquire) sees its start time.
        self.slot.waker.store(NO_WAKER, Ordering::Release);
        let ticket = Ticket {
            slab: self.lane,
            slot: self.idx,
            reserved: true,
        };
        Some((ticket, self.registry.draining.load(Ordering::Relaxed)))
    }

    /// The request holding the slot ended. A ticket of another slot is ended in the table.
    pub fn end(&self, ticket: Ticket) {
        if !(ticket.reserved && ticket.slab == self.lane && ticket.slot == self.idx) {
            self.registry.end(ticket);
            return;
        }
        self.slot.waker.store(0, Ordering::Release);
        self.slab.ended.fetch_add(1, Ordering::Release);
    }
}

impl Drop for ReservedSlot {
    fn drop(&mut self) {
        // Only the connection's requests used it, and they all ended (each held the connection).
        self.slot.waker.store(0, Ordering::Release);
        self.registry.push_chain(self.slab, self.idx, self.slot);
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn segment_index_maps_to_doubling_segments() {
        assert_eq!(segment_of(4, 0), (0, 0));
        assert_eq!(segment_of(4, 3), (0, 3));
        assert_eq!(segment_of(4, 4), (1, 0));
        assert_eq!(segment_of(4, 11), (1, 7));
        assert_eq!(segment_of(4, 12), (2, 0));
        assert_eq!(segment_of(1, 0), (0, 0));
        assert_eq!(segment_of(1, 1), (1, 0));
        assert_eq!(segment_of(1, 2), (1, 1));
        assert_eq!(segment_of(1, 3), (2, 0));
    }

    #[test]
    fn start_and_end_round_trip() {
        let r = Registry::with_limits(8, 4);
        let (a, d) = r.start(Some(0x10), 5);
        assert!(!d);
        let (b, _) = r.start(Some(0x20), 3);
        // Reached through its connection: counted and aged like the others, but no waker.
        let (c, _) = r.start(None, 9);
        assert!(a.has_slot() && b.has_slot() && c.has_slot());
        assert_eq!(
            r.counts(),
            Counts {
                active: 3,
                last_start: 9,
                started: 3,
                ..Counts::default()
            }
        );
        assert_eq!(r.occupied(), 3);
        assert_eq!(r.oldest_start(), Some(3));
        assert_eq!(r.age_buckets(9 + 500_000_000), [3, 0, 0]);
        assert_eq!(r.age_buckets(5 + 2_000_000_000), [0, 3, 0]);
        assert_eq!(r.age_buckets(4 + 10_000_000_000), [0, 2, 1]);
        assert_eq!(r.end(b), Some(0x20));
        assert_eq!(r.oldest_start(), Some(5));
        assert_eq!(r.end(c), None, "no waker to destroy");
        assert_eq!(r.end(a), Some(0x10));
        assert_eq!(
            r.counts(),
            Counts {
                active: 0,
                last_start: 9,
                started: 3,
                ..Counts::default()
            }
        );
        assert_eq!(r.occupied(), 0);
        assert_eq!(r.oldest_start(), None);
    }

    /// A give-back is counted before its ends and after them: every reading taken around them
    /// either still has a request in `active` or has it in `given_back` (so a view that adds
    /// back what was given back since a pass never misses it), and a reading's
    /// `given_back_before` (a pass's baseline) holds only requests its `active` lacks.
    #[test]
    fn a_give_back_is_seen_by_every_reading_around_its_ends() {
        let r = Registry::with_limits(8, 4);
        let (a, _) = r.start(None, 1);
        let (b, _) = r.start(Some(0x10), 2);
        let before = r.counts();
        let mut readings = vec![before];
        r.give_back(2, || {
            readings.push(r.counts());
            r.end(a);
            readings.push(r.counts());
            r.end(b);
            readings.push(r.counts());
        });
        readings.push(r.counts());
        for (i, c) in readings.iter().enumerate() {
            let seen = c.active as u64 + c.given_back - before.given_back_before;
            assert!(seen >= 2, "reading {i}: {c:?}");
            assert!(
                c.active as u64 + c.given_back_before <= 2,
                "reading {i}: {c:?}"
            );
        }
        let last = readings[readings.len() - 1];
        assert_eq!(
            (last.active, last.given_back, last.given_back_before),
            (0, 2, 2)
        );
    }

    #[test]
    fn a_drain_scan_passes_by_requests_without_a_waker() {
        let r = Registry::with_limits(2, 4);
        let (a, _) = r.start(None, 1);
        let (b, _) = r.start(Some(0x40), 2);
        let (c, _) = r.start(None, 3);
        let mut seen = vec![];
        assert_eq!(
            r.begin_drain(|w| seen.push(w), |w| panic!("{w:#x} abandoned")),
            1
        );
        assert_eq!(seen, vec![0x40]);
        assert_eq!((r.occupied(), r.own_wakers()), (3, 1));
        for t in [a, c] {
            assert_eq!(r.end(t), None);
        }
        assert_eq!(r.end(b), Some(0x40));
        // Their slots were freed: reused without growing.
        let before = r.footprint().slots;
        let again: Vec<_> = (0..3).map(|i| r.start(None, 4 + i).0).collect();
        assert_eq!(r.footprint().slots, before);
        assert_eq!(r.counts().active, 3);
        for t in again {
            assert_eq!(r.end(t), None);
        }
    }

    #[test]
    fn drain_visits_every_waker_and_later_starts_see_the_drain() {
        let r = Registry::with_limits(2, 4);
        let tickets: Vec<_> = (1..=5).map(|i| r.start(Some(i * 16), 1).0).collect();
        let mut seen = vec![];
        assert_eq!(
            r.begin_drain(|w| seen.push(w), |w| panic!("{w:#x} abandoned")),
            5
        );
        seen.sort();
        assert_eq!(seen, vec![16, 32, 48, 64, 80]);
        assert!(r.is_draining());
        let (late, draining) = r.start(Some(0x100), 2);
        assert!(draining, "a start after the drain sees it");
        for t in tickets.into_iter().chain([late]) {
            assert!(r.end(t).is_some());
        }
        assert_eq!(r.counts().active, 0);
    }

    /// No capacity cliff: a tiny first segment grows to thousands of slots, every request keeps
    /// a slot (so the drain reaches it), and the memory follows the peak.
    #[test]
    fn the_table_grows_without_a_cliff_and_reuses_freed_slots() {
        let r = Registry::with_limits(1, 2);
        let tickets: Vec<_> = (1..=5000usize)
            .map(|i| r.start(Some(i << 4), 1).0)
            .collect();
        assert!(tickets.iter().all(Ticket::has_slot));
        assert_eq!(r.counts().active, 5000);
        assert_eq!(r.begin_drain(|_| {}, |w| panic!("{w:#x} abandoned")), 5000);
        let peak = r.footprint();
        assert_eq!(peak.workers, 1);
        assert!(peak.slots >= 5000 && peak.slots < 2 * 5000 + 2, "{peak:?}");
        for t in tickets {
            assert!(r.end(t).is_some());
        }
        // Freed slots are reused: no growth for the same load again.
        let again: Vec<_> = (1..=5000usize)
            .map(|i| r.start(Some(i << 4), 2).0)
            .collect();
        assert_eq!(r.footprint(), peak);
        for t in again {
            r.end(t);
        }
        assert_eq!(r.counts().active, 0);
    }

    #[test]
    fn a_thread_beyond_the_worker_limit_is_still_counted_exactly() {
        let r = Arc::new(Registry::with_limits(4, 1));
        let (mine, _) = r.start(Some(0x10), 1);
        let r2 = r.clone();
        let (t, drained) = std::thread::spawn(move || r2.start(Some(0x20), 2))
            .join()
            .unwrap();
        assert!(!drained);
        assert!(!t.has_slot(), "no slab left for a second worker");
        assert_eq!(r.counts().active, 2);
        assert_eq!(r.end(t), None);
        assert_eq!(r.end(mine), Some(0x10));
        assert_eq!(r.counts().active, 0);
    }

    #[test]
    fn a_slot_released_on_another_thread_is_reclaimed_by_its_owner() {
        let r = Arc::new(Registry::with_limits(1, 4));
        let (t, _) = r.start(Some(0x10), 1);
        let r2 = r.clone();
        assert_eq!(
            std::thread::spawn(move || r2.end(t)).join().unwrap(),
            Some(0x10)
        );
        let before = r.footprint().slots;
        let (again, _) = r.start(Some(0x20), 2);
        assert_eq!(
            r.footprint().slots,
            before,
            "the slot freed on the other thread was reused"
        );
        r.end(again);
        assert_eq!(r.counts().active, 0);
    }

    /// A request on a lane known beforehand (its connection's worker) is counted and aged as
    /// any, without this thread's own slab; its slot goes back to that lane's free stack.
    #[test]
    fn a_known_lane_is_used_without_a_slab_of_this_thread() {
        let r = Arc::new(Registry::with_limits(2, 4));
        let lane = r.lane().expect("a lane for this thread");
        let r2 = r.clone();
        let (t, draining) = std::thread::spawn(move || r2.start_in(Some(lane), None, 7))
            .join()
            .unwrap();
        assert!(!draining && t.has_slot());
        assert_eq!(r.footprint().workers, 1, "the other thread made no slab");
        assert_eq!(
            r.counts(),
            Counts {
                active: 1,
                last_start: 7,
                started: 1,
                ..Counts::default()
            }
        );
        assert_eq!(r.oldest_start(), Some(7));
        assert_eq!(r.end(t), None);
        let slots = r.footprint().slots;
        let (again, _) = r.start_in(Some(lane), Some(0x40), 8);
        assert_eq!(r.footprint().slots, slots, "the freed slot is reused");
        assert_eq!(r.end(again), Some(0x40));
        assert_eq!(r.counts().active, 0);
        // An unknown lane is still counted exactly (without a slot).
        let (lost, _) = r.start_in(Some(Lane(3)), None, 9);
        assert!(!lost.has_slot());
        assert_eq!(r.counts().active, 1);
        r.end(lost);
        assert_eq!(r.counts().active, 0);
    }

    /// A connection's own slot: its requests are counted and aged like any, one at a time; a
    /// second concurrent request falls back to the lane; the slot returns to the free stack when
    /// the connection lets it go, and is reused.
    #[test]
    fn a_reserved_slot_serves_one_request_at_a_time_and_returns_when_dropped() {
        // `reserve` wants a registry that lives forever, as the process's does: a static (not a
        // leaked box, which Miri would report).
        static R: OnceLock<Registry> = OnceLock::new();
        let r = R.get_or_init(|| Registry::with_limits(2, 2));
        let lane = r.lane().unwrap();
        let conn = r.reserve(lane).expect("a slot for the connection");
        let slots = r.footprint().slots;
        assert_eq!(r.occupied(), 0, "an idle reserved slot holds no request");
        let (a, draining) = conn.start(5).expect("the slot is free");
        assert!(a.is_reserved() && a.has_slot() && !draining);
        assert!(conn.start(6).is_none(), "one request at a time");
        let (b, _) = r.start_in(Some(lane), None, 6);
        assert!(!b.is_reserved());
        assert_eq!(
            r.counts(),
            Counts {
                active: 2,
                last_start: 6,
                started: 2,
                ..Counts::default()
            }
        );
        assert_eq!((r.occupied(), r.oldest_start()), (2, Some(5)));
        assert_eq!(r.begin_drain(|_| panic!("no waker to visit"), |_| {}), 0);
        conn.end(a);
        conn.end(b); // not its slot: ended in the table
        assert_eq!((r.counts().active, r.occupied()), (0, 0));
        let (c, draining) = conn.start(7).expect("free again");
        assert!(draining, "a start after the drain sees it");
        conn.end(c);
        assert_eq!(r.footprint().slots, slots, "no growth");
        drop(conn);
        // Back on the free stack: the next connection gets a slot without growth.
        let again = r.reserve(lane).unwrap();
        assert_eq!(r.footprint().slots, slots);
        drop(again);
        assert_eq!(r.counts().active, 0);
    }

    /// The free stack is lock-free and safe from any thread: four threads claiming and freeing
    /// slots of one lane at once never hold the same slot twice, and every slot comes back.
    #[test]
    fn one_lane_shared_by_racing_threads_never_hands_out_a_slot_twice() {
        let r = Arc::new(Registry::with_limits(4, 2));
        let lane = r.lane().unwrap();
        let held: Arc<Vec<AtomicBool>> =
            Arc::new((0..4096).map(|_| AtomicBool::new(false)).collect());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (r, held) = (r.clone(), held.clone());
                std::thread::spawn(move || {
                    // Miri interprets every atomic step: a few rounds still race there.
                    let rounds = if cfg!(miri) { 40 } else { 2000u64 };
                    for round in 0..rounds {
                        let mut mine = vec![];
                        for _ in 0..(round % 7 + 1) {
                            let (t, _) = r.start_in(Some(lane), None, round + 1);
                            assert!(t.has_slot());
                            assert!(
                                !held[t.slot as usize].swap(true, Ordering::SeqCst),
                                "slot {} handed out twice",
                                t.slot
                            );
                            mine.push(t);
                        }
                        for t in mine {
                            held[t.slot as usize].store(false, Ordering::SeqCst);
                            r.end(t);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(r.counts().active, 0);
        assert_eq!(r.occupied(), 0);
        // At most 4 threads × 7 held at once: the lane grew to fit that, not more.
        assert!(r.footprint().slots <= 64, "{:?}", r.footprint());
        // Every slot is back on the stack: as many claims as slots, without growth.
        let slots = r.footprint().slots;
        let all: Vec<_> = (0..slots)
            .map(|_| r.start_in(Some(lane), None, 1).0)
            .collect();
        assert_eq!(r.footprint().slots, slots);
        for t in all {
            r.end(t);
        }
    }

    /// Envoy may destroy a filter from inside the scan's own commit (its last reference dropped
    /// there): the request ends on the scanning thread while the scan holds its slot. That must
    /// neither deadlock nor free the waker under the scan; the slot is freed after, and reused.
    #[test]
    fn a_request_ending_inside_the_scan_on_the_same_thread_never_deadlocks() {
        let r = Registry::with_limits(1, 2);
        let (t, _) = r.start(Some(0x40), 1);
        let mut ticket = Some(t);
        let mut inside = None;
        let mut destroyed = Vec::new();
        assert_eq!(
            r.begin_drain(
                |w| {
                    assert_eq!(w, 0x40);
                    inside = Some(r.end(ticket.take().unwrap()));
                },
                |w| destroyed.push(w)
            ),
            1
        );
        assert_eq!(
            destroyed,
            [0x40],
            "the waker left to the scan is destroyed by it, not leaked (#44 item 9)"
        );
        assert_eq!(
            inside,
            Some(None),
            "the waker stays with the scan (not destroyed under it)"
        );
        assert_eq!(
            r.busy_waits.load(Ordering::SeqCst),
            0,
            "left to the scan up its own stack, without waiting for it"
        );
        assert_eq!(r.counts().active, 0);
        assert_eq!(r.occupied(), 0, "the scan freed the slot");
        let before = r.footprint().slots;
        let (again, draining) = r.start(Some(0x50), 2);
        assert!(draining);
        assert_eq!(r.footprint().slots, before, "the slot is reused");
        assert_eq!(r.end(again), Some(0x50));
    }

    #[test]
    fn connections_are_sent_away_once_per_worker() {
        let r = Registry::with_limits(4, 4);
        assert!(!r.is_sent_away(Some(7)));
        assert!(r.mark_sent_away(Some(7)));
        assert!(!r.mark_sent_away(Some(7)));
        assert!(r.is_sent_away(Some(7)));
        assert!(r.mark_sent_away(None) && r.mark_sent_away(None));
        assert!(!r.is_sent_away(None));
    }

    /// An end racing a scan that holds its waker: it waits for the scan to let go, and only
    /// then returns the waker (to be destroyed). The scan holds the waker until the end is seen
    /// waiting for it (`busy_waits`), so the race happens on every run, however the two
    /// threads are scheduled.
    #[test]
    fn end_waits_for_a_concurrent_wake() {
        use std::time::{Duration, Instant};
        let r = Arc::new(Registry::with_limits(4, 4));
        let (t, _) = r.start(Some(0x40), 0);
        let in_wake = Arc::new(AtomicBool::new(false));
        let done_wake = Arc::new(AtomicBool::new(false));
        let end_seen = Arc::new(AtomicBool::new(false));
        let (r2, iw, dw, seen) = (
            r.clone(),
            in_wake.clone(),
            done_wake.clone(),
            end_seen.clone(),
        );
        let waker_thread = std::thread::spawn(move || {
            r2.begin_drain(
                |_| {
                    iw.store(true, Ordering::SeqCst);
                    // Hold the waker busy until the owner's end waits for it. No panic in here:
                    // the slot would stay busy and the owner's end would wait forever; a timeout is
                    // reported by the owner instead.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while Instant::now() < deadline {
                        if r2.busy_waits.load(Ordering::SeqCst) > 0 {
                            seen.store(true, Ordering::SeqCst);
                            break;
                        }
                        std::thread::yield_now();
                    }
                    dw.store(true, Ordering::SeqCst);
                },
                |w| panic!("{w:#x} abandoned"),
            )
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !in_wake.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the scan never reached the waker"
            );
            std::thread::yield_now();
        }
        assert_eq!(r.busy_waits.load(Ordering::SeqCst), 0, "nothing waited yet");
        assert_eq!(r.end(t), Some(0x40));
        assert!(
            done_wake.load(Ordering::SeqCst),
            "end returned while the scan used the waker"
        );
        assert!(
            end_seen.load(Ordering::SeqCst),
            "the scan held the waker for 10 s and the end never waited for it"
        );
        assert_eq!(waker_thread.join().unwrap(), 1);
    }

    /// Stress on real threads: every request that did not see the drain is visited by the scan
    /// (nothing lost), none is visited twice, and the counts come back to zero. Each worker
    /// starts half its requests, waits until the drain is about to start and goes on with the
    /// rest: the drain lands in the middle of every worker's run, however the threads are
    /// scheduled (which start meets the drain's fence is up to the scheduler; loom's
    /// `a_start_racing_a_drain_is_never_lost` covers every interleaving of that).
    #[test]
    fn concurrent_starts_racing_a_drain_lose_nothing() {
        use std::sync::atomic::AtomicUsize;
        use std::time::{Duration, Instant};
        const WORKERS: usize = 4;
        const HALF: usize = 200;
        let mut rounds_seen_both_sides = 0;
        for round in 0..20 {
            let r = Arc::new(Registry::with_limits(2, 8));
            let halfway = Arc::new(AtomicUsize::new(0));
            let drain_now = Arc::new(AtomicBool::new(false));
            let workers: Vec<_> = (0..WORKERS)
                .map(|t| {
                    let (r, halfway, drain_now) = (r.clone(), halfway.clone(), drain_now.clone());
                    std::thread::spawn(move || {
                        let mut held = vec![];
                        for i in 0..2 * HALF {
                            if i == HALF {
                                halfway.fetch_add(1, Ordering::Release);
                                // Bounded: the main thread reports a timeout itself.
                                let deadline = Instant::now() + Duration::from_secs(10);
                                while !drain_now.load(Ordering::Acquire)
                                    && Instant::now() < deadline
                                {
                                    std::thread::yield_now();
                                }
                            }
                            let w = ((t << 20) | (i + 1)) << 4;
                            let (ticket, saw_drain) = r.start(Some(w), 1);
                            held.push((w, ticket, saw_drain));
                        }
                        held
                    })
                })
                .collect();
            let deadline = Instant::now() + Duration::from_secs(10);
            while halfway.load(Ordering::Acquire) < WORKERS {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: workers never all reached half their requests"
                );
                std::thread::yield_now();
            }
            drain_now.store(true, Ordering::Release);
            let mut visited = HashSet::new();
            r.begin_drain(
                |w| assert!(visited.insert(w), "visited twice: {w:#x}"),
                |w| panic!("{w:#x} abandoned"),
            );
            let (mut missed, mut saw) = (0, 0);
            for w in workers {
                for (waker, ticket, saw_drain) in w.join().unwrap() {
                    if !saw_drain && !visited.contains(&waker) {
                        missed += 1;
                    }
                    saw += usize::from(saw_drain);
                    assert_eq!(r.end(ticket), Some(waker));
                }
            }
            assert_eq!(missed, 0, "round {round}: requests missed by both sides");
            assert!(
                visited.len() >= WORKERS * HALF,
                "round {round}: the first halves started before the drain"
            );
            assert_eq!(r.counts().active, 0);
            rounds_seen_both_sides += usize::from(saw > 0);
        }
        // Some requests were reached by the scan and some saw the drain themselves, in the same
        // round: the drain did start while the workers were starting requests.
        assert!(
            rounds_seen_both_sides > 0,
            "no round had a request start after the drain began: nothing raced"
        );
    }
}

/// Model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test --lib --release registry::loom`
/// (`make loom`). Each test explores every interleaving (and every weak-memory outcome loom
/// models) of a small scenario.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// A request starting while a drain starts: it sees the drain, or the scan sees its waker.
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    #[test]
    fn a_start_racing_a_drain_is_never_lost() {
        model(|| {
            let r = Arc::new(Registry::with_limits(1, 2));
            let r2 = r.clone();
            let req = loom::thread::spawn(move || {
                let (t, saw) = r2.start(Some(0x10), 1);
                (t, saw)
            });
            let mut seen = false;
            r.begin_drain(
                |w| {
                    assert_eq!(w, 0x10);
                    seen = true;
                },
                |w| panic!("{w:#x} abandoned"),
            );
            let (t, saw) = req.join().unwrap();
            assert!(saw || seen, "the go-away was lost");
            // The ticket is released on the owner thread in Envoy; here on ours (any thread may).
            assert_eq!(r.end(t), Some(0x10));
        });
    }

    /// A release racing a scan: the scan never uses a waker after `end` returned it, and the slot
    /// is freed exactly once.
    #[test]
    fn a_release_never_races_a_scan_using_the_waker() {
        model(|| {
            let r = Arc::new(Registry::with_limits(1, 2));
            let freed = Arc::new(AtomicBool::new(false));
            let (r2, f2) = (r.clone(), freed.clone());
            let owner = loom::thread::spawn(move || {
                let (t, _) = r2.start(Some(0x20), 1);
                let w = r2.end(t);
                f2.store(true, Ordering::Release);
                assert_eq!(w, Some(0x20));
                // Reuse the slot: a second request takes it again, then leaves.
                let (t2, _) = r2.start(Some(0x30), 2);
                assert_eq!(r2.end(t2), Some(0x30));
            });
            r.begin_drain(
                |w| {
                    if w == 0x20 {
                        assert!(
                            !freed.load(Ordering::Acquire),
                            "used a waker after it was freed"
                        );
                    }
                },
                |w| panic!("{w:#x} abandoned"),
            );
            owner.join().unwrap();
            assert_eq!(r.counts().active, 0);
        });
    }

    /// Two claims racing each other and a free on one lane: the free stack never hands one slot
    /// to two requests, and the freed slot is found again.
    #[test]
    fn claims_racing_a_free_on_one_lane_never_share_a_slot() {
        model(|| {
            let r = Arc::new(Registry::with_limits(2, 2));
            let lane = r.lane();
            let (first, _) = r.start_in(lane, None, 1);
            let claimers: Vec<_> = (0..2)
                .map(|_| {
                    let r = r.clone();
                    loom::thread::spawn(move || r.start_in(lane, None, 2).0)
                })
                .collect();
            r.end(first);
            let mut held: Vec<Ticket> = claimers.into_iter().map(|c| c.join().unwrap()).collect();
            held.push(r.start_in(lane, None, 3).0);
            let mut slots: Vec<u32> = held.iter().map(|t| t.slot).collect();
            assert!(slots.iter().all(|&s| s != NO_SLOT));
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), 3, "one slot held by two requests");
            assert_eq!(r.counts().active, 3);
            for t in held {
                r.end(t);
            }
            assert_eq!(r.counts().active, 0);
        });
    }

    /// The latest start never goes backwards, whatever order two workers' starts land in.
    #[test]
    fn the_latest_start_never_regresses() {
        model(|| {
            let r = Arc::new(Registry::with_limits(1, 3));
            let (a, b) = (r.clone(), r.clone());
            let ta = loom::thread::spawn(move || {
                let (t, _) = a.start(None, 10);
                a.end(t);
            });
            let tb = loom::thread::spawn(move || {
                let (t, _) = b.start(None, 20);
                b.end(t);
            });
            let first = r.counts().last_start;
            let second = r.counts().last_start;
            assert!(second >= first);
            ta.join().unwrap();
            tb.join().unwrap();
            let c = r.counts();
            assert_eq!(
                c,
                Counts {
                    active: 0,
                    last_start: 20,
                    started: 2,
                    ..Counts::default()
                }
            );
        });
    }
}
