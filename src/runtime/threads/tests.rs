//! Unit tests of `runtime::threads`.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[test]
fn calls_pass_while_open_and_are_refused_after_close() {
    let t = Threads::default();
    assert_eq!(t.call("a", || 7), Some(7));
    t.close();
    assert!(!t.is_open());
    assert_eq!(t.call("a", || 7), None);
    assert_eq!(t.call("a", || 7), None);
    assert_eq!(t.call("b", || 7), None);
    t.close(); // idempotent
    let s = t.join(Duration::from_secs(1));
    assert_eq!(s.refused, vec![("a", 2), ("b", 1)]);
    assert!(s.late.is_empty());
}

#[test]
fn close_waits_for_a_call_under_way() {
    let t = Arc::new(Threads::default());
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (finish_tx, finish_rx) = std::sync::mpsc::channel::<()>();
    let done = Arc::new(AtomicBool::new(false));
    let (t2, done2) = (t.clone(), done.clone());
    let caller = std::thread::spawn(move || {
        t2.call("slow", || {
            entered_tx.send(()).unwrap();
            finish_rx.recv().unwrap();
            done2.store(true, Ordering::SeqCst);
        })
    });
    entered_rx.recv().unwrap();
    let (t3, done3) = (t.clone(), done.clone());
    let closer = std::thread::spawn(move || {
        t3.close();
        done3.load(Ordering::SeqCst)
    });
    // The closer is waiting at the gate (closed, one call still inside).
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.is_open() {
        assert!(Instant::now() < deadline, "close never reached the gate");
        std::thread::yield_now();
    }
    assert!(!closer.is_finished(), "close returned with a call inside");
    finish_tx.send(()).unwrap();
    assert!(
        closer.join().unwrap(),
        "close returned before the call ended"
    );
    assert_eq!(caller.join().unwrap(), Some(()));
    assert_eq!(t.call("after", || ()), None);
}

/// A call that closes the gate from inside (a destroy hook run by the call) does not wait
/// for itself.
#[test]
fn a_call_may_close_the_gate_from_inside() {
    let t = Threads::default();
    assert_eq!(t.call("outer", || t.close()), Some(()));
    assert!(!t.is_open());
    assert_eq!(t.call("after", || ()), None);
}

#[test]
fn sleeping_threads_end_at_once_on_close_and_are_joined() {
    let t = Arc::new(Threads::default());
    let t2 = t.clone();
    t.spawn(
        "sleeper",
        move || {
            while t2.sleep(Duration::from_secs(60)) {}
        },
    )
    .unwrap();
    let started = Instant::now();
    t.close();
    let s = t.join(Duration::from_secs(10));
    assert_eq!(s.joined, 1);
    assert!(s.left.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the sleeper was not woken"
    );
    assert!(
        t.spawn("late", || {}).is_err(),
        "no thread starts once stopping"
    );
}

#[test]
fn a_thread_that_does_not_end_is_left_after_the_bound() {
    let t = Threads::default();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    t.spawn("stuck", move || {
        let _ = rx.recv();
    })
    .unwrap();
    let s = t.join(Duration::from_millis(50));
    assert_eq!((s.joined, s.left), (0, vec!["stuck"]));
    drop(tx);
}

#[test]
fn a_panic_on_a_module_thread_is_contained_and_counted() {
    let t = Threads::default();
    assert_eq!(t.take_panics(), 0);
    t.spawn("boom", || panic!("test panic")).unwrap();
    t.spawn("fine", || {}).unwrap();
    // Both ended (the first may have been joined already, by the second spawn).
    assert!(t.join(Duration::from_secs(10)).left.is_empty());
    assert_eq!(t.take_panics(), 1, "the panic, once");
    assert_eq!(t.take_panics(), 0, "taken");
}

/// The test fault's two halves: a module thread's call held past the release is refused by
/// the gate, and without the gate it is counted as late (what the gate prevents).
#[test]
fn held_calls_are_refused_with_the_gate_and_late_without() {
    for no_gate in [false, true] {
        let t = Arc::new(Threads::new(GateFaults {
            hold_calls_until_release: true,
            no_gate,
        }));
        let made = Arc::new(AtomicU64::new(0));
        // Not held on a thread that is not the module's (the main thread must never wait).
        assert_eq!(t.call("host", || 1), Some(1));
        let (t2, made2) = (t.clone(), made.clone());
        t.spawn("held", move || {
            t2.call("held", || made2.fetch_add(1, Ordering::SeqCst));
        })
        .unwrap();
        t.close();
        let s = t.join(Duration::from_secs(10));
        assert_eq!(s.joined, 1);
        assert_eq!(made.load(Ordering::SeqCst), 0, "no call after the release");
        if no_gate {
            assert_eq!((s.refused, s.late), (vec![], vec![("held", 1)]));
        } else {
            assert_eq!((s.refused, s.late), (vec![("held", 1)], vec![]));
        }
    }
}
