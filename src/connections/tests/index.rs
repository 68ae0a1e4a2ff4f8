use super::*;

#[test]
fn streams_are_counted_through_the_index() {
    let conns = with_network_filter();
    let c = Arc::new(Conn::new(77));
    assert!(!conns.stream_started(|| Some(77)).is_set(), "unknown id");
    register(&c);
    let m1 = conns.stream_started(|| Some(77));
    let m2 = conns.stream_started(|| Some(77));
    assert!(m1.is_set());
    assert!(!conns.stream_started(|| None).is_set());
    assert_eq!(c.streams(), 2);
    stream_ended(m1, || T0);
    stream_ended(StreamMark::default(), || T0);
    assert_eq!(c.streams(), 1);
    // Another thread (a teardown elsewhere) can unregister it; the mark still holds the
    // connection's state, so its stream ends without a lookup and without harm.
    let c2 = c.clone();
    std::thread::spawn(move || unregister(&c2)).join().unwrap();
    assert!(!conns.stream_started(|| Some(77)).is_set(), "unregistered");
    stream_ended(m2, || T0);
    assert_eq!(c.streams(), 0);
    // Found only on the thread that registered it (a connection's worker).
    let d = Arc::new(Conn::new(78));
    register(&d);
    let elsewhere = std::thread::scope(|sc| {
        sc.spawn(|| conns.stream_started(|| Some(78)).is_set())
            .join()
            .unwrap()
    });
    assert!(!elsewhere);
    assert!(conns.stream_started(|| Some(78)).is_set());
    unregister(&d);
    assert!(!conns.stream_started(|| Some(78)).is_set());
}

#[test]
fn without_the_network_filter_no_stream_is_counted() {
    // No commit installed: no network filter in this process, so the HTTP filter counts
    // nothing, even for a connection id this thread knows.
    let conns = Connections::default();
    let c = Arc::new(Conn::new(79));
    register(&c);
    let asked = std::cell::Cell::new(false);
    let m = conns.stream_started(|| {
        asked.set(true);
        Some(79)
    });
    assert!(!m.is_set());
    assert!(!asked.get(), "the connection id is not even asked for");
    assert_eq!(c.streams(), 0);
    // Once a network filter installs its commit, the same connection is found.
    conns.note_loaded();
    let m = conns.stream_started(|| Some(79));
    assert!(m.is_set());
    assert_eq!(c.streams(), 1);
    stream_ended(m, || T0);
    unregister(&c);
}

#[test]
fn connections_torn_down_elsewhere_are_swept_out_of_their_workers_map() {
    let net = with_network_filter();
    let conns: Vec<_> = (1000..1000 + 3 * LOCAL_SWEEP_MIN as u64)
        .map(|id| Arc::new(Conn::new(id)))
        .collect();
    for c in &conns {
        register(c);
    }
    let elsewhere = conns.clone();
    std::thread::spawn(move || elsewhere.iter().for_each(|c| unregister(c)))
        .join()
        .unwrap();
    // Still in this thread's map (marked gone) until registrations here sweep them out.
    assert!(
        !net.stream_started(|| Some(1000)).is_set(),
        "gone connections are not found"
    );
    let all_live = || LOCAL.with(|l| l.borrow().map.values().all(|c| !get(&c.gone)));
    let mut fresh = vec![];
    for id in 5000..5000 + 6 * LOCAL_SWEEP_MIN as u64 {
        let c = Arc::new(Conn::new(id));
        register(&c);
        fresh.push(c);
        if all_live() {
            break;
        }
    }
    assert!(all_live(), "gone entries were never swept out");
    assert!(
        fresh.len() <= conns.len() + 1,
        "swept only after {} registrations",
        fresh.len()
    );
    for c in &fresh {
        unregister(c);
    }
    assert_eq!(LOCAL.with(|l| l.borrow().map.len()), 0);
}

static DESTROYED: AtomicUsize = AtomicUsize::new(0);
fn destroy(w: usize) {
    DESTROYED.fetch_add(w, Ordering::SeqCst);
}

#[test]
fn wakers_insert_remove_snapshot_and_destroy_by_the_last_holder() {
    let w = Wakers::default();
    let a = w.insert(Waker::new(0x10, destroy));
    let b = w.insert(Waker::new(0x20, destroy));
    assert_eq!(w.len(), 2);
    let snap = w.snapshot();
    assert_eq!(snap.len(), 2);
    // The owner leaves while the drain side holds the snapshot: not destroyed yet.
    drop(w.remove(a));
    assert!(w.remove(a).is_none(), "twice is harmless");
    assert_eq!(DESTROYED.load(Ordering::SeqCst) & 0x10, 0);
    drop(snap);
    assert_eq!(DESTROYED.load(Ordering::SeqCst) & 0x10, 0x10, "last holder");
    let c = w.insert(Waker::new(0x40, destroy));
    let mut seen: Vec<usize> = w.snapshot().iter().map(|x| x.word()).collect();
    seen.sort();
    assert_eq!(seen, [0x20, 0x40]);
    drop(w.remove(b));
    drop(w.remove(c));
    assert!(w.is_empty());
    // From other threads (other shards).
    let w = Arc::new(Wakers::default());
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let w = w.clone();
            std::thread::spawn(move || w.insert(Waker::new(0x100 * (i + 1), destroy)))
        })
        .collect();
    let slots: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(w.len(), 4);
    for s in slots {
        assert!(w.remove(s).is_some());
    }
    assert!(w.is_empty());
}

#[test]
fn wake_all_commits_each_live_waker_and_drain_is_marked_once() {
    static SUM: AtomicUsize = AtomicUsize::new(0);
    struct Summing;
    impl ConnectionWakers for Summing {
        fn commit(&self, w: usize, e: u64) {
            assert_eq!(e, EVENT_DRAIN_STARTED);
            SUM.fetch_add(w, Ordering::SeqCst);
        }
    }
    let c = Connections::default();
    assert_eq!(
        c.wake_all(&Summing, EVENT_DRAIN_STARTED),
        0,
        "no network filter loaded"
    );
    c.note_loaded();
    let a = c.wakers.insert(Waker::new(0x1000, |_| {}));
    let _b = c.wakers.insert(Waker::new(0x2000, |_| {}));
    drop(c.wakers.remove(a));
    assert_eq!(c.wake_all(&Summing, EVENT_DRAIN_STARTED), 1);
    assert_eq!(SUM.load(Ordering::SeqCst), 0x2000);
    assert!(c.mark_draining());
    assert!(!c.mark_draining());
    assert!(c.is_draining());
    assert_eq!(
        c.graces(),
        (DEFAULT_IDLE_CLOSE_GRACE, DEFAULT_IDLE_CLOSE_GRACE),
        "no config: the default"
    );
    c.note_config(ConnSettings {
        idle_close_grace: Duration::from_millis(1500),
        ..ConnSettings::default()
    });
    c.note_config(ConnSettings {
        idle_close_grace: Duration::from_millis(4000),
        ..ConnSettings::default()
    });
    assert_eq!(
        c.graces(),
        (Duration::from_millis(1500), Duration::from_millis(4000)),
        "two listeners: each keeps its own"
    );
}
