//! Unit tests of the in-flight table: slots, growth, reservations, the drain scan, counts, and
//! threads racing each other (the heaviest are skipped under Miri, see the Makefile).

use super::*;
use crate::testing::visit;
use std::collections::HashSet;
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
        r.begin_drain(&visit(|w| seen.push(w), |w| panic!("{w:#x} abandoned")), 1),
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
        r.begin_drain(&visit(|w| seen.push(w), |w| panic!("{w:#x} abandoned")), 1),
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
    assert_eq!(
        r.begin_drain(&visit(|_| {}, |w| panic!("{w:#x} abandoned")), 1),
        5000
    );
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
    assert_eq!(
        r.begin_drain(&visit(|_| panic!("no waker to visit"), |_| {}), 1),
        0
    );
    conn.end(a);
    conn.end(b); // not its slot: ended in the table
    assert_eq!((r.counts().active, r.occupied()), (0, 0));
    let (c, draining) = conn.start(7).expect("free again");
    assert!(draining, "a start after the drain sees it");
    conn.end(c);
    assert_eq!(r.footprint().slots, slots, "no growth");
    let name = format!("{conn:?}");
    assert!(
        name.starts_with("ReservedSlot(") && name.ends_with(')'),
        "{name}"
    );
    drop(conn);
    // Back on the free stack (on top): the next connection gets that very slot, no growth.
    let again = r.reserve(lane).unwrap();
    assert_eq!(
        format!("{again:?}"),
        name,
        "the dropped slot is reused first"
    );
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
    let held: Arc<Vec<AtomicBool>> = Arc::new((0..4096).map(|_| AtomicBool::new(false)).collect());
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
            &visit(
                |w| {
                    assert_eq!(w, 0x40);
                    inside = Some(r.end(ticket.take().unwrap()));
                },
                |w| destroyed.push(w)
            ),
            1
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
            &visit(
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
            ),
            1,
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
                            while !drain_now.load(Ordering::Acquire) && Instant::now() < deadline {
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
            &visit(
                |w| assert!(visited.insert(w), "visited twice: {w:#x}"),
                |w| panic!("{w:#x} abandoned"),
            ),
            1,
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

/// The thread-local mark that lets an end inside a scan leave its slot to the scan is set only
/// while the scan runs: after it, an end on this thread waits for a scan again.
#[test]
fn a_scan_marks_its_thread_only_while_it_runs() {
    let r = Registry::with_limits(2, 2);
    let (t, _) = r.start(Some(0x10), 1);
    assert!(!scan::scanning_here());
    let mut inside = false;
    r.begin_drain(&visit(|_| inside = scan::scanning_here(), |_| {}), 1);
    assert!(inside, "marked during the scan");
    assert!(!scan::scanning_here(), "unmarked after it");
    assert_eq!(r.end(t), Some(0x10));
}

/// The status report's age buckets: under 1 s, 1 s to under 10 s, 10 s and over.
#[test]
fn age_buckets_start_at_one_and_ten_seconds_exactly() {
    let r = Registry::with_limits(4, 2);
    let t: Vec<_> = [0, 1, 2]
        .into_iter()
        .map(|_| r.start(None, 100).0)
        .collect();
    assert_eq!(r.age_buckets(100 + 999_999_999), [3, 0, 0]);
    assert_eq!(r.age_buckets(100 + 1_000_000_000), [0, 3, 0]);
    assert_eq!(r.age_buckets(100 + 9_999_999_999), [0, 3, 0]);
    assert_eq!(r.age_buckets(100 + 10_000_000_000), [0, 0, 3]);
    assert_eq!(
        r.age_buckets(50),
        [3, 0, 0],
        "a clock behind a start is age 0"
    );
    for t in t {
        r.end(t);
    }
}

#[test]
fn own_wakers_counts_requests_with_a_waker_of_their_own() {
    let r = Registry::with_limits(4, 2);
    assert_eq!(r.own_wakers(), 0);
    let a = r.start(Some(0x10), 1).0;
    let b = r.start(None, 1).0;
    let c = r.start(Some(0x20), 1).0;
    assert_eq!((r.own_wakers(), r.occupied()), (2, 3));
    r.end(a);
    assert_eq!(r.own_wakers(), 1);
    r.end(b);
    r.end(c);
    assert_eq!(r.own_wakers(), 0);
}

/// The footprint counts the registry and its slab table once, each worker's slab and segment
/// table once, and each slot once: what the status report shows as memory.
#[test]
fn the_footprint_counts_each_part_once() {
    use std::mem::size_of;
    let r = Registry::with_limits(2, 3);
    let empty = r.footprint();
    assert_eq!(
        empty,
        Footprint {
            workers: 0,
            slots: 0,
            bytes: size_of::<Registry>() + 3 * size_of::<OnceLock<Slab>>(),
        }
    );
    let a = r.start(None, 1).0;
    let one = r.footprint();
    assert_eq!((one.workers, one.slots), (1, 2));
    let slab = size_of::<Slab>() + MAX_SEGMENTS * size_of::<OnceLock<Box<[Slot]>>>();
    assert_eq!(one.bytes - empty.bytes, slab + 2 * size_of::<Slot>());
    // Three more requests: the second segment (4 slots) is taken into use.
    let more: Vec<_> = (0..3).map(|_| r.start(None, 1).0).collect();
    let grown = r.footprint();
    assert_eq!((grown.workers, grown.slots), (1, 6));
    assert_eq!(grown.bytes - one.bytes, 4 * size_of::<Slot>());
    for t in more.into_iter().chain([a]) {
        r.end(t);
    }
}

/// The free stack's head carries a count of its changes beside the top slot, so a pop that read
/// a stale head fails even when the same slot is on top again (ABA).
#[test]
fn every_change_of_a_free_stack_raises_its_tag() {
    let r = Registry::with_limits(4, 2);
    let t = r.start(None, 1).0;
    let slab = r.slab(0).expect("this thread's slab");
    let tag = |h: u64| h >> 32;
    let before = slab.free.load(Ordering::SeqCst);
    for round in 1..=3u64 {
        let idx = r.pop(slab).expect("a free slot");
        r.push(slab, idx);
        let now = slab.free.load(Ordering::SeqCst);
        assert_eq!(now as u32, before as u32, "the same slot on top again");
        assert_eq!(
            tag(now),
            tag(before) + 2 * round,
            "one pop and one push a round"
        );
    }
    assert_eq!(table::head(7, 9) >> 32, 7);
    r.end(t);
}

/// A request on a connection's reserved slot raises the latest start like any other.
#[test]
fn a_reserved_slot_start_raises_the_latest_start() {
    static R: OnceLock<Registry> = OnceLock::new();
    let r = R.get_or_init(|| Registry::with_limits(2, 2));
    let lane = r.lane().unwrap();
    let conn = r.reserve(lane).unwrap();
    let (a, _) = r.start_in(Some(lane), None, 5);
    let (b, _) = conn.start(9).unwrap();
    assert_eq!(r.counts().last_start, 9);
    conn.end(b);
    let (c, _) = conn.start(7).unwrap();
    assert_eq!(r.counts().last_start, 9, "never lowered");
    conn.end(c);
    r.end(a);
}

/// A connection's slot ends only its own request: another connection's reserved ticket, on the
/// same lane or another lane's slot of the same index, is ended in the table, where it belongs.
#[test]
fn a_reserved_slot_ends_another_slots_ticket_in_the_table() {
    static R: OnceLock<Registry> = OnceLock::new();
    let r = R.get_or_init(|| Registry::with_limits(2, 4));
    let here = r.lane().unwrap();
    let there = std::thread::spawn(|| R.get().unwrap().lane().unwrap())
        .join()
        .unwrap();
    assert_ne!(here, there);
    let a = r.reserve(here).unwrap();
    let b = r.reserve(here).unwrap();
    let c = r.reserve(there).unwrap();
    assert_eq!(
        format!("{a:?}").rsplit(':').next(),
        format!("{c:?}").rsplit(':').next(),
        "the same index on two lanes"
    );
    for other in [&b, &c] {
        let (t, _) = other.start(3).unwrap();
        let (mine, _) = a.start(4).unwrap();
        a.end(t);
        let (again, _) = other.start(5).expect("the other slot was freed");
        other.end(again);
        assert!(a.start(6).is_none(), "{a:?} still holds its own request");
        a.end(mine);
        assert_eq!(r.counts().active, 0);
    }
}
