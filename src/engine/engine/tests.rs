//! Unit tests of `engine::engine`.

use super::*;
use crate::config::DrainSettings;
use crate::envoy_stats::scan::EnvoyRequestStats;
use crate::runtime::clock::Clock;
use crate::testing::{counted, counting_release, fixture};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

#[derive(Default)]
struct FakeHost {
    timers: RefCell<Vec<Duration>>,
    draining: Cell<Option<u64>>,
    failed_health_checks: Cell<u32>,
    told_connections: Cell<u32>,
    /// What Envoy's stats say; `None`: idle figures.
    envoy: Cell<Option<EnvoyView>>,
}

impl EngineHost for FakeHost {
    fn arm_timer(&self, delay: Duration) {
        self.timers.borrow_mut().push(delay);
    }
    fn set_draining_gauge(&self, value: u64) {
        self.draining.set(Some(value));
    }
    fn envoy_request_stats(&self) -> EnvoyView {
        self.envoy
            .get()
            .unwrap_or(EnvoyView::Seen(EnvoyRequestStats {
                active: 0,
                total: 7,
            }))
    }
    fn fail_health_checks(&self) {
        self.failed_health_checks
            .set(self.failed_health_checks.get() + 1);
    }
    fn tell_connections(&self) {
        self.told_connections.set(self.told_connections.get() + 1);
    }
    fn hosts(&self) -> Hosts<'_> {
        crate::testing::HOSTS
    }
}

#[test]
fn sigterm_holds_then_releases_and_a_later_sigterm_releases_at_once() {
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::from_millis(50),
        quiet_period: Duration::ZERO,
        drain_timeout: Duration::from_secs(5),
    }));
    let host = FakeHost::default();
    let mut engine = Engine::default();
    let released = Rc::new(Cell::new(0));
    let pending = engine.on_shutdown(&host, &f.shared, counting_release(&released));
    assert!(pending.is_none(), "held until min_drain_duration");
    assert_eq!(host.draining.get(), Some(1));
    assert_eq!(host.failed_health_checks.get(), 1);
    assert_eq!(host.told_connections.get(), 1, "connections told at once");
    let delay = *host.timers.borrow().last().expect("timer armed");
    assert!(delay <= IN_FLIGHT_RECHECK, "{delay:?}");
    // Timer ticks on the fake clock until the minimum has passed.
    let mut ticks = 0;
    let release = loop {
        f.clock.advance(*host.timers.borrow().last().unwrap());
        if let Some(r) = engine.evaluate(&host, &f.shared) {
            break r;
        }
        ticks += 1;
        assert!(ticks < 10, "drain never completed");
    };
    assert_eq!(
        f.shared.clock().now() - f.clock.epoch(),
        Duration::from_millis(50)
    );
    assert_eq!(
        released.get(),
        0,
        "the engine returns the release, the caller calls it"
    );
    release.release();
    assert_eq!(released.get(), 1);
    assert_eq!(host.draining.get(), Some(0));
    assert_eq!(counted(), [Stat::DrainsStarted, Stat::DrainsCompleted]);
    // SIGTERM after a completed drain: released at once; health checks not failed again.
    let again = engine.on_shutdown(&host, &f.shared, counting_release(&released));
    again.expect("released at once").release();
    assert_eq!(released.get(), 2);
    assert_eq!(host.failed_health_checks.get(), 1);
    assert_eq!(host.told_connections.get(), 1, "told once per drain");
}

#[test]
fn a_release_dropped_unreleased_still_lets_envoy_exit_exactly_once() {
    let n = Rc::new(Cell::new(0));
    drop(counting_release(&n));
    assert_eq!(n.get(), 1);
    counting_release(&n).release();
    assert_eq!(n.get(), 2);
    counting_release(&n).and(counting_release(&n)).release();
    assert_eq!(n.get(), 4);
    // A panic while the engine holds it: the hook takes it back and releases it.
    let f = fixture(Some(DrainSettings::default()));
    let mut engine = Engine::default();
    let host = FakeHost::default();
    assert!(engine
        .on_shutdown(&host, &f.shared, counting_release(&n))
        .is_none());
    engine.take_pending_shutdown().unwrap().release();
    assert_eq!(n.get(), 5);
    drop(engine);
    assert_eq!(n.get(), 5, "nothing left to release twice");
}

#[test]
fn envoys_own_drain_does_not_fail_health_checks_and_requests_hold_it() {
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::from_millis(100),
        quiet_period: Duration::from_millis(100),
        drain_timeout: Duration::from_secs(5),
    }));
    let host = FakeHost::default();
    let mut engine = Engine::default();
    let (t, _) = f.shared.request_started(None);
    assert!(engine.on_envoy_drain_started(&host, &f.shared).is_none());
    assert_eq!(
        host.failed_health_checks.get(),
        0,
        "hot restart: the admin is not ours"
    );
    f.clock.advance(Duration::from_secs(1));
    let _ = engine.evaluate(&host, &f.shared);
    assert!(
        matches!(f.shared.phase(), Phase::Draining { .. }),
        "a request is in flight"
    );
    f.shared.request_ended(t);
    let _ = engine.evaluate(&host, &f.shared);
    assert!(matches!(f.shared.phase(), Phase::Drained { .. }));
}

#[test]
fn without_the_filter_the_drain_waits_for_envoys_figures() {
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::from_millis(50),
        quiet_period: Duration::ZERO,
        drain_timeout: Duration::from_secs(5),
    }));
    let host = FakeHost::default();
    host.envoy.set(Some(EnvoyView::Pending));
    let mut engine = Engine::default();
    let released = Rc::new(Cell::new(0));
    assert!(engine
        .on_shutdown(&host, &f.shared, counting_release(&released))
        .is_none());
    // Long past the minimum, the first scan is still under way: the drain holds.
    f.clock.advance(Duration::from_secs(2));
    assert!(engine.evaluate(&host, &f.shared).is_none());
    assert!(matches!(f.shared.phase(), Phase::Draining { .. }));
    assert_eq!(
        f.shared.status().envoy_active_requests,
        None,
        "unknown, not 1"
    );
    // The scan arrives with one request in flight, then one that sees it end.
    let seen = |active| EnvoyView::Seen(EnvoyRequestStats { active, total: 9 });
    host.envoy.set(Some(seen(1)));
    assert!(engine.evaluate(&host, &f.shared).is_none());
    host.envoy.set(Some(seen(0)));
    engine
        .evaluate(&host, &f.shared)
        .expect("completes on the scan that sees no request")
        .release();
    assert_eq!(released.get(), 1);
    // And a drain that never gets a scan still ends at its timeout.
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::ZERO,
        quiet_period: Duration::ZERO,
        drain_timeout: Duration::from_secs(5),
    }));
    host.envoy.set(Some(EnvoyView::Pending));
    let mut engine = Engine::default();
    assert!(engine
        .on_shutdown(&host, &f.shared, counting_release(&released))
        .is_none());
    f.clock.advance(Duration::from_secs(5));
    engine
        .evaluate(&host, &f.shared)
        .expect("the timeout bounds it")
        .release();
    assert_eq!(released.get(), 2);
}

#[test]
fn admin_endpoints_answer_and_refuse_wrong_methods() {
    let f = fixture(Some(DrainSettings::default()));
    let host = FakeHost::default();
    let mut engine = Engine::default();
    let (code, body, _) = engine.on_admin(&host, &f.shared, b"GET", ADMIN_STATUS_PATH);
    assert_eq!(code, 200);
    assert!(body.contains("\"state\":\"serving\""));
    assert_eq!(
        engine
            .on_admin(&host, &f.shared, b"GET", ADMIN_DRAIN_PATH)
            .0,
        405
    );
    assert_eq!(
        engine
            .on_admin(&host, &f.shared, b"POST", b"/graceful_drain/x")
            .0,
        404
    );
    let (code, body, release) = engine.on_admin(&host, &f.shared, b"POST", b"/graceful_drain?x=1");
    assert!(release.is_none());
    assert_eq!(code, 200);
    assert!(body.contains("\"trigger\":\"admin\""), "{body}");
    assert_eq!(host.failed_health_checks.get(), 1);
}
