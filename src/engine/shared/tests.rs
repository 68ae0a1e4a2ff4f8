//! The shared state over a fake clock and the fake Envoy (`crate::testing`).

use super::*;
use crate::testing::{
    commits, counted, fast, fixture, fixture_ticking, DELETED, HOSTS, KICKS, STATS,
};
use std::sync::atomic::AtomicUsize;

#[test]
fn no_engine_no_drain() {
    let f = fixture(None);
    assert_eq!(
        f.shared.start_drain(HOSTS, Trigger::Admin),
        StartResult::NoEngine
    );
    assert!(!f.shared.is_draining());
    let st = f.shared.status();
    assert_eq!(st.state, "serving");
    assert!(st.settings.is_none());
}

#[test]
fn drain_wakes_registered_requests_and_completes_by_the_rules() {
    let f = fixture(Some(fast()));
    let s = &f.shared;
    assert!(
        !s.install_engine(DrainSettings::default()),
        "first install wins"
    );
    let (t, draining) = s.request_started(Some(0x80));
    assert!(!draining);
    assert_eq!(s.start_drain(HOSTS, Trigger::Sigterm), StartResult::Started);
    assert_eq!(
        s.start_drain(HOSTS, Trigger::Admin),
        StartResult::AlreadyStarted
    );
    assert!(s.is_draining());
    assert_eq!(commits(), vec![(0x80, EVENT_GO_AWAY)]);
    assert_eq!(KICKS.with(|k| k.get()), 1);
    // In flight: not complete even after the minimum.
    f.clock.advance(Duration::from_millis(100));
    assert!(matches!(
        s.poll(HOSTS, EnvoyObservation::Unused),
        Decision::PollAt(_)
    ));
    assert_eq!(s.request_ended(t), Some(0x80));
    // The request started before the drain: the quiet period runs from the drain start, and
    // both it and the minimum are over, so the drain completes at this poll.
    let d = s.poll(HOSTS, EnvoyObservation::Unused);
    assert!(matches!(d, Decision::Completed(o) if !o.timed_out), "{d:?}");
    let st = s.status();
    assert_eq!(st.state, "drained");
    assert_eq!(st.trigger, Some("sigterm"));
    assert_eq!(st.active_requests, 0);
    assert_eq!(st.outcome.as_ref().map(|o| o.duration_ms), Some(100));
}

#[test]
fn a_negative_count_holds_the_drain_until_the_timeout() {
    let f = fixture(Some(fast()));
    let s = &f.shared;
    let (t, _) = s.request_started(None);
    s.request_ended(t);
    // A forged second end of the same request (the ticket type forbids it in real code).
    s.requests.end(Ticket::forged_for_tests());
    s.start_drain(HOSTS, Trigger::Admin);
    f.clock.advance(Duration::from_millis(100));
    assert!(
        matches!(s.poll(HOSTS, EnvoyObservation::Unused), Decision::PollAt(_)),
        "not completed on a broken count"
    );
    let st = s.status();
    assert_eq!(st.active_requests, -1);
    assert!(st.accounting_error);
    f.clock.advance(Duration::from_millis(400));
    assert!(
        matches!(s.poll(HOSTS, EnvoyObservation::Unused), Decision::Completed(o) if o.timed_out)
    );
}

#[test]
fn waiters_are_answered_once_on_completion() {
    let f = fixture(Some(fast()));
    let s = &f.shared;
    s.start_drain(HOSTS, Trigger::ControlEndpoint);
    let a = s.waiters.register(0x10);
    let b = s.waiters.register(0x100);
    assert!(matches!(a, Wait::Waiting(_)));
    if let Wait::Waiting(id) = b {
        assert!(
            s.waiters.unregister(id),
            "not completing: the stream deletes its waker"
        );
    }
    f.clock.advance(Duration::from_secs(1));
    assert!(matches!(
        s.poll(HOSTS, EnvoyObservation::Unused),
        Decision::Completed(_)
    ));
    let done: Vec<_> = commits()
        .into_iter()
        .filter(|(_, e)| *e == EVENT_DRAIN_DONE)
        .collect();
    assert_eq!(
        done,
        vec![(0x10, EVENT_DRAIN_DONE)],
        "only the remaining waiter"
    );
    assert_eq!(s.waiters.register(0x20), Wait::AlreadyDone);
    assert!(
        DELETED.with(|d| d.borrow().is_empty()),
        "none left to the completion"
    );
}

/// A waiter's stream ending inside the completion's own commit (Envoy may run a destructor
/// in a commit, on the committing thread): the lock is not held there, so its unregister
/// does not deadlock, and its waker, left to the completion, is deleted once, after the
/// commit. Before, the completion committed under the lock: this unregister deadlocked.
#[test]
fn a_waiter_ending_inside_the_completion_s_commit_is_deleted_once_after_it() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let w = Waiters::default();
        let Wait::Waiting(a) = w.register(0x10) else {
            panic!("registered");
        };
        let Wait::Waiting(_) = w.register(0x20) else {
            panic!("registered");
        };
        let mut woken = Vec::new();
        let mut deleted = Vec::new();
        let mut left_to_completion = None;
        w.complete(
            |waker| {
                woken.push(waker);
                if waker == 0x10 {
                    left_to_completion = Some(w.unregister(a));
                }
            },
            |waker| deleted.push(waker),
        );
        tx.send((woken, deleted, left_to_completion, w.unregister(a)))
            .unwrap();
    });
    let (woken, deleted, left, after) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the completion deadlocked on its own lock");
    assert_eq!(woken, vec![0x10, 0x20]);
    assert_eq!(
        left,
        Some(false),
        "the completion holds it: the stream must not delete it"
    );
    assert_eq!(deleted, vec![0x10], "deleted once, by the completion");
    assert!(after, "after the completion, nothing holds it");
}

#[test]
fn envoy_observations_merge_by_maximum() {
    let f = fixture(Some(fast()));
    let s = &f.shared;
    let (t, _) = s.request_started(None);
    s.start_drain(HOSTS, Trigger::Admin);
    f.clock.advance(Duration::from_millis(100));
    let envoy = Observation {
        active_requests: 1,
        last_request_start: None,
    };
    s.request_ended(t);
    assert!(matches!(
        s.poll(HOSTS, EnvoyObservation::Seen(envoy)),
        Decision::PollAt(_)
    ));
    assert_eq!(s.status().envoy_active_requests, Some(1));
    let idle = Observation {
        active_requests: 0,
        last_request_start: None,
    };
    assert!(matches!(
        s.poll(HOSTS, EnvoyObservation::Seen(idle)),
        Decision::Completed(_)
    ));
}

#[test]
fn protocol_labels_are_the_same_in_stats_and_status() {
    let f = fixture(None);
    let s = &f.shared;
    s.count(STATS, Stat::SentAway(Protocol::Http2));
    s.count(STATS, Stat::SentAway(Protocol::Http1));
    s.count(STATS, Stat::SentAway(Protocol::from_envoy(b"HTTP/3")));
    assert_eq!(
        s.status().connections_sent_away,
        SentAway {
            http1: 1,
            http2: 1,
            other: 1
        }
    );
    assert_eq!(
        counted(),
        [
            Stat::SentAway(Protocol::Http2),
            Stat::SentAway(Protocol::Http1),
            Stat::SentAway(Protocol::Other)
        ],
        "Envoy's stats move with the report"
    );
    assert_eq!(Protocol::from_envoy(b"HTTP/1.0"), Protocol::Http1);
    assert_eq!(Protocol::from_envoy(b"HTTP/2"), Protocol::Http2);
}

/// Every stat has its own name, and the names a scrape sees are the documented ones.
#[test]
fn each_stat_has_its_own_documented_name() {
    let mut names: Vec<&str> = Stat::ALL.iter().map(|s| s.name()).collect();
    names.extend(Gauge::ALL.iter().map(|g| g.name()));
    let docs = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md"));
    for n in &names {
        assert!(
            docs.contains(&format!("`{n}`")),
            "{n} is not in docs/reference.md"
        );
    }
    let all = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all, "two stats share a name");
    let f = fixture(None);
    f.shared.count(STATS, Stat::IdleTold(Protocol::Http1));
    f.shared.module_error(STATS);
    assert_eq!(
        counted(),
        [Stat::IdleTold(Protocol::Http1), Stat::ModuleErrors]
    );
    assert_eq!(f.shared.status().module_errors, 1);
}

#[test]
fn status_reports_the_idle_connections_of_its_own_state() {
    use crate::connections::IdleTold;
    let f = fixture(None);
    assert_eq!(f.shared.status().idle_connections_told, IdleTold::default());
    let counts = f.shared.connections().counts();
    counts.http1.fetch_add(2, Ordering::Relaxed);
    counts.http2.fetch_add(1, Ordering::Relaxed);
    assert_eq!(
        f.shared.status().idle_connections_told,
        IdleTold { http1: 2, http2: 1 }
    );
    let other = fixture(None);
    assert_eq!(
        other.shared.status().idle_connections_told,
        IdleTold::default(),
        "another state has connections of its own"
    );
}

#[test]
fn status_json_has_the_documented_fields() {
    let f = fixture(Some(DrainSettings::default()));
    let v: serde_json::Value = serde_json::from_str(&f.shared.status().to_json()).unwrap();
    for key in [
        "module_version",
        "envoy",
        "state",
        "active_requests",
        "accounting_error",
        "in_flight_by_age",
        "drain_elapsed_ms",
        "since_last_request_start_ms",
        "oldest_request_age_ms",
        "connections_sent_away",
        "idle_connections_told",
        "requests_served_while_draining",
        "module_errors",
        "health_checks_seen",
        "not_work_requests",
        "ready",
        "request_table",
        "settings",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["settings"]["drain_timeout"], "25s");
    assert_eq!(v["module_version"], env!("CARGO_PKG_VERSION"));
    assert!(v["envoy"].is_null(), "no Envoy here: {v}");
    f.shared
        .set_envoy(crate::host::envoy_release::EnvoyGeneration::V1_38);
    let v: serde_json::Value = serde_json::from_str(&f.shared.status().to_json()).unwrap();
    assert_eq!(v["envoy"], "1.38");
    assert_eq!(
        (&v["envoy_release"], &v["envoy_untested"], &v["surface"]),
        (&serde_json::Value::Null, &false.into(), &"full".into()),
        "no Envoy here: {v}"
    );
}

/// Where the module stands in the running Envoy, as `/drain/status` says it (issue 63 item 6):
/// the release read from its binary (`null` when it could not be), whether it is untested, and
/// the surface.
#[test]
fn the_status_says_the_release_whether_it_is_untested_and_the_surface() {
    use crate::host::envoy_release::{release_verdict, EnvoyRelease, OnUntested};
    let release = |minor| {
        Some(EnvoyRelease {
            minor,
            patch: 0,
            dev: false,
        })
    };
    for (found, policy, want) in [
        (
            release(40),
            OnUntested::Reduced,
            ("1.40.0".into(), false, "full"),
        ),
        (
            release(41),
            OnUntested::Reduced,
            ("1.41.0".into(), true, "reduced"),
        ),
        (
            release(41),
            OnUntested::Full,
            ("1.41.0".into(), true, "full"),
        ),
        (
            None,
            OnUntested::Reduced,
            (serde_json::Value::Null, true, "reduced"),
        ),
    ] {
        let f = fixture(Some(fast()));
        f.shared
            .set_standing(release_verdict(found, policy, "unreadable").unwrap());
        let v: serde_json::Value = serde_json::from_str(&f.shared.status().to_json()).unwrap();
        assert_eq!(
            (&v["envoy_release"], &v["envoy_untested"], &v["surface"]),
            (&want.0, &want.1.into(), &want.2.into()),
            "{found:?} {policy:?}: {v}"
        );
    }
}

/// The delay is measured on the precise clock: with the request path's coarse clock (4 ms
/// ticks) readiness failed up to one tick early (seen: 799.8 ms of an 800 ms delay).
#[test]
fn readiness_never_fails_early_on_a_coarse_tick() {
    let f = fixture_ticking(Some(fast()), 4_000_000);
    f.shared.install_policy(RequestPolicy {
        readiness_failure_delay: Duration::from_millis(20),
        ..RequestPolicy::default()
    });
    // The drain starts just before a tick; 16.6 ms later the coarse clock has moved 20 ms.
    f.clock.advance(Duration::from_micros(3_900));
    f.shared.start_drain(HOSTS, Trigger::Sigterm);
    f.clock.advance(Duration::from_micros(16_600));
    assert!(f.shared.is_ready(), "failed 3.4 ms early");
    f.clock.advance(Duration::from_micros(3_400));
    assert!(!f.shared.is_ready());
}

#[test]
fn readiness_fails_after_the_configured_delay() {
    let f = fixture(Some(fast()));
    f.shared.install_policy(RequestPolicy {
        readiness_failure_delay: Duration::from_millis(20),
        ..RequestPolicy::default()
    });
    assert!(f.shared.is_ready());
    f.shared.start_drain(HOSTS, Trigger::Sigterm);
    assert!(f.shared.is_ready(), "still ready during the delay");
    assert!(f.shared.is_draining());
    f.clock.advance(Duration::from_millis(19));
    assert!(f.shared.is_ready());
    f.clock.advance(Duration::from_millis(1));
    assert!(!f.shared.is_ready());
    assert!(!f.shared.status().ready);
    let g = fixture(Some(fast()));
    g.shared.start_drain(HOSTS, Trigger::Sigterm);
    assert!(!g.shared.is_ready(), "no delay: fails at once");
}

#[test]
fn concurrent_requests_count_back_to_zero() {
    let f = fixture(None);
    let shared = &f.shared;
    let n = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for t in 0..4usize {
            let n = &n;
            sc.spawn(move || {
                for i in 0..2000usize {
                    let (tk, _) = shared.request_started(Some(((t << 16) | (i + 1)) << 4));
                    n.fetch_add(1, Ordering::Relaxed);
                    shared.request_ended(tk);
                }
            });
        }
    });
    assert_eq!(n.load(Ordering::Relaxed), 8000);
    assert_eq!(shared.status().active_requests, 0);
}
