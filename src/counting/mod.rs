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
//! The drain protocol (model-checked by the loom tests in `loom_tests.rs`, `make loom`):
//! a request stores its waker, then a `SeqCst` fence, then reads the drain flag; a drain sets the
//! flag, then a `SeqCst` fence, then scans. Of two `SeqCst` fences one comes first, so either the
//! request sees the drain, or the scan sees the waker (or both): no request is ever missed.
//! A slot being used by a scan is marked busy (low bit), so its owner cannot free the waker while
//! the scan commits an event to it.
//!
//! Files: `table` (slabs, slots, free stacks, the owner thread-local), `tickets` (starting and
//! ending requests, reserved slots, sent-away marks), `scan` (drain scan, counts, diagnostics),
//! `loom_tests` (the model-checked protocol, `make loom`).

mod scan;
mod table;
mod tickets;

pub use tickets::ReservedSlot;

use table::{Slab, Slot};

use crate::runtime::sync::{
    backoff, fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
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

/// A worker's slab, for [`Registry::start_in`]. Only meaningful for the registry that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(u32);

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
            s.segments[0].get_or_init(|| table::new_segment(r.base));
        }
        r
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
