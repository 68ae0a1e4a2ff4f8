//! A request's life in the table: starting it (with or without a waker, on a known lane or a
//! connection's reserved slot), ending it, giving it back, and the per-worker sent-away marks.
//! Uses only the registry's own types and `crate::runtime::sync`.

use super::scan::scanning_here;
use super::*;

impl Registry {
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
                Self::free_waker(s, || {
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

    /// Take a waker out of its slot: at once unless a scan is using it, else
    /// wait for the scan, unless it is up this thread's own stack (then the slot and its waker
    /// are left to it, and false is returned). `waiting` runs at each round of the wait.
    pub(super) fn free_waker(s: &Slot, waiting: impl Fn()) -> bool {
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

    /// End `n` requests that Envoy may still be serving (`end` ends their tickets): what
    /// counts them instead, Envoy's gauges, was read with them counted here, so a reader that
    /// adds Envoy's excess to `active` must add these back until a gauge pass read after their
    /// ends ([`Counts::given_back_before`] at its start) includes them
    /// (the stats scan's `EnvoyStatsCache::view`). Counted before and after the ends, so
    /// that neither reading can miss one: a reading whose `active` lacks one has it in
    /// `given_back`; a pass baseline (`given_back_before`) holds only ends its `active` lacks.
    pub fn give_back(&self, n: u64, end: impl FnOnce()) {
        self.given_back_begun.fetch_add(n, Ordering::SeqCst);
        end();
        self.given_back_done.fetch_add(n, Ordering::SeqCst);
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
