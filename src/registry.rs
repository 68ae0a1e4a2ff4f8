//! In-flight request registry: a fixed, lock-free table with one slot per in-flight data request.
//! A slot holds the request's waker (an opaque word: the glue stores an Envoy scheduler pointer)
//! and its start time. Pure Rust with atomics; must not call FFI nor allocate per request.
//!
//! Why a table: when a drain starts, every in-flight request must be woken on its own worker
//! thread so it can send its connection away at once (HTTP/2 GOAWAY without waiting for the next
//! response). The drain side scans the table; the request side claims and releases slots with a
//! single compare-and-swap each. A slot whose waker is being used by the drain side is marked busy
//! (low bit set) so the owner cannot free the waker underneath it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Slots in the table. A request that finds no free slot is still served and counted; it only
/// misses the immediate wake-up and is sent away at its next event instead. 65 536 concurrent
/// requests per gateway process is far beyond what one Envoy pod is sized for.
pub const CAPACITY: usize = 1 << 16;

const BUSY: usize = 1;

/// Index of a claimed slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotId(usize);

struct Slot {
    /// 0 = free; otherwise the waker word, with [`BUSY`] set while the drain side uses it.
    waker: AtomicUsize,
    /// Start time of the request, in [`crate::state::now_nanos`] units; meaningful while claimed.
    started: AtomicU64,
}

pub struct Registry {
    slots: Box<[Slot]>,
    /// One past the highest slot ever claimed: scans stop here.
    high_water: AtomicUsize,
}

thread_local! {
    /// Next-fit cursor per thread: claims are amortised O(1) and workers rarely touch the same
    /// cache lines.
    static CURSOR: Cell<usize> = const { Cell::new(usize::MAX) };
}

static NEXT_THREAD_BASE: AtomicUsize = AtomicUsize::new(0);

impl Registry {
    pub fn new(capacity: usize) -> Self {
        let slots = (0..capacity)
            .map(|_| Slot {
                waker: AtomicUsize::new(0),
                started: AtomicU64::new(0),
            })
            .collect();
        Registry {
            slots,
            high_water: AtomicUsize::new(0),
        }
    }

    /// The process-wide table.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| Registry::new(CAPACITY))
    }

    /// Claim a slot for a request. `waker` must be non-zero with its low bit clear (any aligned
    /// pointer). Returns `None` when the table is full.
    pub fn claim(&self, waker: usize, started: u64) -> Option<SlotId> {
        debug_assert!(waker != 0 && waker & BUSY == 0);
        let n = self.slots.len();
        let start = CURSOR.with(|c| {
            let v = c.get();
            if v == usize::MAX {
                // Spread threads over the table so they start on different cache lines.
                NEXT_THREAD_BASE.fetch_add(n / 8 + 1, Ordering::Relaxed) % n
            } else {
                v
            }
        });
        for i in 0..n {
            let idx = (start + i) % n;
            let slot = &self.slots[idx];
            if slot.waker.load(Ordering::Relaxed) != 0 {
                continue;
            }
            slot.started.store(started, Ordering::Relaxed);
            // SeqCst: pairs with the drain side's phase store / slot scan (see state.rs).
            if slot
                .waker
                .compare_exchange(0, waker, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                self.high_water.fetch_max(idx + 1, Ordering::Relaxed);
                CURSOR.with(|c| c.set((idx + 1) % n));
                return Some(SlotId(idx));
            }
        }
        None
    }

    /// Release a slot and return its waker, which the caller may now destroy: no drain-side use of
    /// it is in progress or can start afterwards.
    pub fn release(&self, id: SlotId) -> usize {
        let slot = &self.slots[id.0];
        loop {
            let v = slot.waker.load(Ordering::Acquire);
            debug_assert!(v != 0, "released a free slot");
            if v & BUSY == 0 {
                if slot
                    .waker
                    .compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return v;
                }
            } else {
                // The drain side is committing an event to this waker: a few microseconds.
                std::hint::spin_loop();
            }
        }
    }

    /// Call `f` with every registered waker, holding each busy so it cannot be released (and
    /// destroyed) while `f` runs. Returns how many wakers were visited.
    pub fn for_each_waker(&self, mut f: impl FnMut(usize)) -> usize {
        let hw = self.high_water.load(Ordering::SeqCst).min(self.slots.len());
        let mut visited = 0;
        for slot in &self.slots[..hw] {
            let v = slot.waker.load(Ordering::SeqCst);
            if v == 0 || v & BUSY != 0 {
                continue;
            }
            if slot
                .waker
                .compare_exchange(v, v | BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                f(v);
                visited += 1;
                slot.waker.store(v, Ordering::Release);
            }
        }
        visited
    }

    /// Start times of the in-flight requests, oldest first is not guaranteed: callers reduce.
    pub fn oldest_start(&self) -> Option<u64> {
        let hw = self
            .high_water
            .load(Ordering::Acquire)
            .min(self.slots.len());
        self.slots[..hw]
            .iter()
            .filter(|s| s.waker.load(Ordering::Acquire) != 0)
            .map(|s| s.started.load(Ordering::Relaxed))
            .min()
    }

    /// In-flight requests by age at `now` (same clock as the start times): under 1 s, 1 s to
    /// 10 s, 10 s and over. Long-lived streams (WebSocket, gRPC streaming, SSE) show up in the last.
    pub fn age_buckets(&self, now: u64) -> [u64; 3] {
        let hw = self
            .high_water
            .load(Ordering::Acquire)
            .min(self.slots.len());
        let mut b = [0u64; 3];
        for s in &self.slots[..hw] {
            if s.waker.load(Ordering::Acquire) == 0 {
                continue;
            }
            let age = now.saturating_sub(s.started.load(Ordering::Relaxed));
            let i = match age {
                a if a < 1_000_000_000 => 0,
                a if a < 10_000_000_000 => 1,
                _ => 2,
            };
            b[i] += 1;
        }
        b
    }

    /// Number of occupied slots (for tests and diagnostics; the authoritative count is elsewhere).
    pub fn occupied(&self) -> usize {
        let hw = self
            .high_water
            .load(Ordering::Acquire)
            .min(self.slots.len());
        self.slots[..hw]
            .iter()
            .filter(|s| s.waker.load(Ordering::Acquire) != 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn claim_and_release_round_trip() {
        let r = Registry::new(8);
        let a = r.claim(0x10, 5).unwrap();
        let b = r.claim(0x20, 3).unwrap();
        assert_ne!(a, b);
        assert_eq!(r.occupied(), 2);
        assert_eq!(r.oldest_start(), Some(3));
        assert_eq!(r.age_buckets(3 + 500_000_000), [2, 0, 0]);
        assert_eq!(r.age_buckets(5 + 2_000_000_000), [0, 2, 0]);
        assert_eq!(r.age_buckets(4 + 10_000_000_000), [0, 1, 1]);
        let mut seen = vec![];
        assert_eq!(r.for_each_waker(|w| seen.push(w)), 2);
        seen.sort();
        assert_eq!(seen, vec![0x10, 0x20]);
        assert_eq!(r.release(b), 0x20);
        assert_eq!(r.oldest_start(), Some(5));
        assert_eq!(r.release(a), 0x10);
        assert_eq!(r.occupied(), 0);
        assert_eq!(r.oldest_start(), None);
    }

    #[test]
    fn full_table_refuses_and_recovers() {
        let r = Registry::new(4);
        let ids: Vec<_> = (1..=4).map(|i| r.claim(i * 16, 0).unwrap()).collect();
        assert_eq!(r.claim(0x100, 0), None);
        r.release(ids[2]);
        assert!(r.claim(0x100, 0).is_some());
    }

    #[test]
    fn release_waits_for_a_concurrent_wake() {
        let r = Arc::new(Registry::new(4));
        let id = r.claim(0x40, 0).unwrap();
        let in_wake = Arc::new(AtomicBool::new(false));
        let done_wake = Arc::new(AtomicBool::new(false));
        let (r2, iw, dw) = (r.clone(), in_wake.clone(), done_wake.clone());
        let waker_thread = std::thread::spawn(move || {
            r2.for_each_waker(|_| {
                iw.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(50));
                dw.store(true, Ordering::SeqCst);
            })
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !in_wake.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "waker never ran");
            std::hint::spin_loop();
        }
        assert_eq!(r.release(id), 0x40);
        // release() could only return after the wake finished using the waker.
        assert!(done_wake.load(Ordering::SeqCst));
        assert_eq!(waker_thread.join().unwrap(), 1);
    }

    #[test]
    fn concurrent_claims_and_scans_never_lose_or_duplicate() {
        let r = Arc::new(Registry::new(256));
        let stop = Arc::new(AtomicBool::new(false));
        let scanner = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut scans = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    r.for_each_waker(|w| assert!(w != 0 && w & BUSY == 0));
                    scans += 1;
                }
                scans
            })
        };
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000usize {
                        let w = ((t * 1_000_000 + i) << 4) | 0x8;
                        let id = r.claim(w, i as u64).expect("table has room");
                        assert_eq!(r.release(id), w);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(scanner.join().unwrap() > 0);
        assert_eq!(r.occupied(), 0);
    }
}
