//! Unit tests of `engine::engine`.

use super::*;
use crate::config::DrainSettings;
use crate::envoy_stats::scan::EnvoyRequestStats;
use crate::runtime::clock::Clock;
use crate::testing::{counted, counting_release, fixture, FakeEnvoy};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// Envoy (a fake of its own, recording the timers armed and the gauges set) and the extension's
/// part, played by the test as `crate::extension` plays it: the view of Envoy's stats it passes
/// in, what the engine asked of it.
#[derive(Default)]
struct Caller {
    envoy: FakeEnvoy,
    failed_health_checks: Cell<u32>,
    told_connections: Cell<u32>,
    /// What Envoy's stats say; `None`: idle figures.
    view: Cell<Option<EnvoyView>>,
}

impl Caller {
    fn hosts(&self) -> Hosts<'_> {
        Hosts {
            streams: &self.envoy,
            extension: &self.envoy,
        }
    }

    fn evaluate(&self, engine: &mut Engine, shared: &Shared) -> Option<ShutdownRelease> {
        let view = if shared.is_draining() {
            self.view
                .get()
                .unwrap_or(EnvoyView::Seen(EnvoyRequestStats {
                    active: 0,
                    total: 7,
                }))
        } else {
            EnvoyView::Unused
        };
        let asks = engine.evaluate(self.hosts(), shared, view);
        if asks.tell_connections {
            self.told_connections.set(self.told_connections.get() + 1);
        }
        if asks.fail_health_checks {
            self.failed_health_checks
                .set(self.failed_health_checks.get() + 1);
        }
        asks.release
    }

    fn shutdown(
        &self,
        engine: &mut Engine,
        shared: &Shared,
        release: ShutdownRelease,
    ) -> Option<ShutdownRelease> {
        engine.on_shutdown(self.hosts(), shared, release);
        self.evaluate(engine, shared)
    }

    /// The `draining` gauge's last value.
    fn draining(&self) -> Option<u64> {
        let gauges = self.envoy.gauges();
        let mut draining = gauges.iter().filter(|(g, _)| *g == Gauge::Draining);
        draining.next_back().map(|&(_, v)| v)
    }

    fn last_timer(&self) -> Option<Duration> {
        self.envoy.timers().last().copied()
    }
}

#[test]
fn sigterm_holds_then_releases_and_a_later_sigterm_releases_at_once() {
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::from_millis(50),
        quiet_period: Duration::ZERO,
        drain_timeout: Duration::from_secs(5),
    }));
    let host = Caller::default();
    let mut engine = Engine::default();
    let released = Rc::new(Cell::new(0));
    let pending = host.shutdown(&mut engine, &f.shared, counting_release(&released));
    assert!(pending.is_none(), "held until min_drain_duration");
    assert_eq!(host.draining(), Some(1));
    assert_eq!(host.failed_health_checks.get(), 1);
    assert_eq!(host.told_connections.get(), 1, "connections told at once");
    let delay = host.last_timer().expect("timer armed");
    assert!(delay <= IN_FLIGHT_RECHECK, "{delay:?}");
    // Timer ticks on the fake clock until the minimum has passed.
    let mut ticks = 0;
    let release = loop {
        f.clock.advance(host.last_timer().unwrap());
        if let Some(r) = host.evaluate(&mut engine, &f.shared) {
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
    assert_eq!(host.draining(), Some(0));
    assert_eq!(counted(), [Stat::DrainsStarted, Stat::DrainsCompleted]);
    // SIGTERM after a completed drain: released at once; health checks not failed again.
    let again = host.shutdown(&mut engine, &f.shared, counting_release(&released));
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
    let host = Caller::default();
    assert!(host
        .shutdown(&mut engine, &f.shared, counting_release(&n))
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
    let host = Caller::default();
    let mut engine = Engine::default();
    let (t, _) = f.shared.request_started(None);
    engine.on_envoy_drain_started(host.hosts(), &f.shared);
    assert!(host.evaluate(&mut engine, &f.shared).is_none());
    assert_eq!(
        host.failed_health_checks.get(),
        0,
        "hot restart: the admin is not ours"
    );
    f.clock.advance(Duration::from_secs(1));
    let _ = host.evaluate(&mut engine, &f.shared);
    assert!(
        matches!(f.shared.phase(), Phase::Draining { .. }),
        "a request is in flight"
    );
    f.shared.request_ended(t);
    let _ = host.evaluate(&mut engine, &f.shared);
    assert!(matches!(f.shared.phase(), Phase::Drained { .. }));
}

#[test]
fn without_the_filter_the_drain_waits_for_envoys_figures() {
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::from_millis(50),
        quiet_period: Duration::ZERO,
        drain_timeout: Duration::from_secs(5),
    }));
    let host = Caller::default();
    host.view.set(Some(EnvoyView::Pending));
    let mut engine = Engine::default();
    let released = Rc::new(Cell::new(0));
    assert!(host
        .shutdown(&mut engine, &f.shared, counting_release(&released))
        .is_none());
    // Long past the minimum, the first scan is still under way: the drain holds.
    f.clock.advance(Duration::from_secs(2));
    assert!(host.evaluate(&mut engine, &f.shared).is_none());
    assert!(matches!(f.shared.phase(), Phase::Draining { .. }));
    assert_eq!(
        f.shared.status().envoy_active_requests,
        None,
        "unknown, not 1"
    );
    // The scan arrives with one request in flight, then one that sees it end.
    let seen = |active| EnvoyView::Seen(EnvoyRequestStats { active, total: 9 });
    host.view.set(Some(seen(1)));
    assert!(host.evaluate(&mut engine, &f.shared).is_none());
    host.view.set(Some(seen(0)));
    host.evaluate(&mut engine, &f.shared)
        .expect("completes on the scan that sees no request")
        .release();
    assert_eq!(released.get(), 1);
    // And a drain that never gets a scan still ends at its timeout.
    let f = fixture(Some(DrainSettings {
        min_drain_duration: Duration::ZERO,
        quiet_period: Duration::ZERO,
        drain_timeout: Duration::from_secs(5),
    }));
    host.view.set(Some(EnvoyView::Pending));
    let mut engine = Engine::default();
    assert!(host
        .shutdown(&mut engine, &f.shared, counting_release(&released))
        .is_none());
    f.clock.advance(Duration::from_secs(5));
    host.evaluate(&mut engine, &f.shared)
        .expect("the timeout bounds it")
        .release();
    assert_eq!(released.get(), 2);
}

#[test]
fn admin_requests_are_told_apart_by_method_and_path() {
    assert_eq!(
        AdminRequest::of(b"GET", ADMIN_STATUS_PATH),
        AdminRequest::Status
    );
    assert_eq!(
        AdminRequest::of(b"POST", b"/graceful_drain?x=1"),
        AdminRequest::StartDrain
    );
    assert!(matches!(
        AdminRequest::of(b"GET", ADMIN_DRAIN_PATH),
        AdminRequest::Refused(405, _)
    ));
    assert!(matches!(
        AdminRequest::of(b"POST", ADMIN_STATUS_PATH),
        AdminRequest::Refused(405, _)
    ));
    assert!(matches!(
        AdminRequest::of(b"POST", b"/graceful_drain/x"),
        AdminRequest::Refused(404, _)
    ));
}
