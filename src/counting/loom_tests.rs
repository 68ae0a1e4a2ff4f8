//! Model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test --lib --release registry::loom`
//! (`make loom`). Each test explores every interleaving (and every weak-memory outcome loom
//! models) of a small scenario of the drain protocol (see the registry's module comment).

use super::*;
use crate::testing::visit;
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
            &visit(
                |w| {
                    assert_eq!(w, 0x10);
                    seen = true;
                },
                |w| panic!("{w:#x} abandoned"),
            ),
            1,
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
            &visit(
                |w| {
                    if w == 0x20 {
                        assert!(
                            !freed.load(Ordering::Acquire),
                            "used a waker after it was freed"
                        );
                    }
                },
                |w| panic!("{w:#x} abandoned"),
            ),
            1,
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
