//! Reading the table from any thread: the drain scan (the waker side of the drain protocol in
//! the module comment), counts, ages and the footprint for the status report. Uses only the
//! registry's own types, `crate::runtime::sync` and the streams' wakers (`crate::host::stream`),
//! which the drain scan is passed.

use super::*;
use crate::host::stream::Wakers;

// Whether this thread is inside a drain scan (see `ABANDONED`).
#[allow(clippy::missing_const_for_thread_local)]
mod scanning {
    use std::cell::Cell;
    crate::runtime::sync::thread_local! {
        pub(super) static SCANNING: Cell<bool> = Cell::new(false);
    }
}

/// Out of line: only an end that finds its waker busy asks, and the thread-local lookup would
/// otherwise be inlined into every end.
#[inline(never)]
pub(super) fn scanning_here() -> bool {
    scanning::SCANNING.try_with(|s| s.get()).unwrap_or(false)
}

/// Marks this thread as scanning for as long as it lives.
pub(super) struct ScanMark;

impl ScanMark {
    pub(super) fn enter() -> ScanMark {
        let _ = scanning::SCANNING.try_with(|s| s.set(true));
        ScanMark
    }
}

impl Drop for ScanMark {
    fn drop(&mut self) {
        let _ = scanning::SCANNING.try_with(|s| s.set(false));
    }
}

impl Registry {
    /// Set the drain flag, then commit `event` to every registered waker through Envoy's
    /// streams' `wakers` (the `host/` trait the caller was passed), holding each busy so it
    /// cannot be freed while the commit runs. A waker whose request ended inside its commit on
    /// this thread (Envoy may run hooks there) was left to the scan by its owner (`ABANDONED`):
    /// once the commit is done, the scan frees its slot and deletes it through `wakers` (nobody
    /// else will). Returns how many wakers were visited.
    ///
    /// The wakers are visited in place rather than returned: a waker may be used only while
    /// its slot is held busy, and its owner may free it the moment the scan lets go.
    pub fn begin_drain(&self, wakers: &dyn Wakers, event: u64) -> usize {
        self.draining.store(true, Ordering::Relaxed);
        // The drain half of the protocol (module comment).
        fence(Ordering::SeqCst);
        self.for_each_waker(
            |w| {
                wakers.commit(w, event);
            },
            |w| wakers.delete(w),
        )
    }

    /// Whether [`Registry::begin_drain`] ran.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub(super) fn slabs_in_use(&self) -> impl Iterator<Item = &Slab> {
        let n = self.next_slab.load(Ordering::SeqCst).min(self.slabs.len());
        self.slabs[..n].iter().filter_map(|s| s.get())
    }

    pub(super) fn for_each_waker(
        &self,
        mut f: impl FnMut(usize),
        mut abandoned: impl FnMut(usize),
    ) -> usize {
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
    pub(super) fn starts(&self) -> impl Iterator<Item = u64> + '_ {
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
}
