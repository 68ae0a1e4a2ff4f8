//! The extension's life against the fake Envoy (`crate::testing`), a fake stats store and the
//! state's fixture.

use super::*;
use crate::engine::shared::Stat;
use crate::testing::{fixture, FakeEnvoy};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A stats store with one HCM's request figures (and one of the admin's, ignored).
struct FakeStats {
    active: AtomicU64,
    refuse: bool,
    /// A stats matcher keeps only `cluster.` and `server.` stats.
    matcher: bool,
}

impl StatsSource for FakeStats {
    fn visit(&self, pass: Pass, stat: &mut dyn FnMut(&[u8], u64)) -> bool {
        if self.refuse {
            return false;
        }
        if self.matcher {
            stat(b"cluster.backend.upstream_rq_active", 4);
            stat(b"server.live", 1);
            return true;
        }
        match pass {
            Pass::Gauges => {
                stat(
                    b"http.ingress.downstream_rq_active",
                    self.active.load(Ordering::SeqCst),
                );
                stat(b"http.admin.downstream_rq_active", 5);
            }
            Pass::Counters => stat(b"http.ingress.downstream_rq_total", 40),
        }
        true
    }
}

/// This test's own process-wide parts, in statics of the test (so Miri, which reports memory
/// only a leaked pointer reaches, sees them reachable): a state over a fake clock, an owner
/// of threads, and Envoy's side of the extension.
macro_rules! env {
    () => {{
        static STATE: OnceLock<(Shared, Arc<crate::testing::FakeClock>, Threads, FakeEnvoy)> =
            OnceLock::new();
        let (shared, clock, threads, envoy) = STATE.get_or_init(|| {
            let f = fixture(None);
            (f.shared, f.clock, Threads::default(), FakeEnvoy::default())
        });
        let env = Env {
            shared,
            threads,
            envoy,
            admin: &crate::envoy_stats::admin::HttpAdmin,
            connections: envoy,
            streams: envoy,
        };
        (env, &**clock, envoy)
    }};
}

const FAST: &[u8] =
    br#"{"min_drain_duration": "50ms", "quiet_period": "0s", "drain_timeout": "5s"}"#;

/// A gauge pass during which control requests start and end (kubelet's probes, a waiting
/// `/drain`), one data request in flight all along: the figure never falls below it.
/// Taking off the control requests counted at the end of the pass, as before, gave 0 when a
/// probe started after the pass had read the control listener's gauge: the drain saw nothing
/// in flight and could complete, cutting that request.
#[test]
fn control_requests_starting_during_a_pass_never_hide_a_request_in_flight() {
    /// Reads the control listener's gauge as `control`, then runs `during` (on the module's
    /// state), then reads the data listener's gauge: one request in flight.
    struct Racing {
        control: u64,
        shared: &'static Shared,
        during: fn(&Shared),
    }
    impl StatsSource for Racing {
        fn visit(&self, _: Pass, stat: &mut dyn FnMut(&[u8], u64)) -> bool {
            stat(b"http.control.downstream_rq_active", self.control);
            (self.during)(self.shared);
            stat(b"http.ingress.downstream_rq_active", 1);
            true
        }
    }
    let (env, _, _) = env!();
    let gauges = |control: u64, during: fn(&Shared)| {
        let store = Arc::new(StatsStore {
            source: Mutex::new(Some(Arc::new(Racing {
                control,
                shared: env.shared,
                during,
            }))),
            hidden: Default::default(),
            ignored_stat_prefixes: vec!["admin".to_string()],
            env,
        });
        store.scan(Pass::Gauges).expect("the pass")
    };
    // A probe arrives after the pass read the control listener's gauge (0 then).
    assert_eq!(gauges(0, |c| c.control_started()), 1, "a probe arriving");
    // It is answered (its count ends) while a second pass reads it in Envoy's gauge.
    assert_eq!(
        gauges(1, |c| c.control_ended()),
        2,
        "a probe ending: counted, safe"
    );
    // A waiting /drain in flight all through a pass is taken off.
    env.shared.control_started();
    assert_eq!(gauges(1, |_| {}), 1, "a waiting /drain is not work");
    env.shared.control_ended();
}

#[test]
fn a_bad_config_and_a_second_engine_are_refused() {
    let (env, _, _) = env!();
    assert!(Extension::load(br#"{"drain_timeout": "soon"}"#, env, true).is_none());
    assert!(env.shared.settings().is_none(), "nothing installed");
    let first = Extension::load(FAST, env, true).expect("loads");
    assert!(
        Extension::load(FAST, env, true).is_none(),
        "configured twice"
    );
    first.destroy();
}

#[test]
fn sigterm_is_held_until_the_drain_completes_then_released_once() {
    let (env, clock, envoy) = env!();
    // Filter mode: the module's own count, once a scan of the drain showed nothing in flight
    // outside it (the scanner runs on its own thread, in real time).
    env.shared.note_data_filter_loaded();
    let ext = Extension::load(FAST, env, true).unwrap();
    ext.set_stats(Some(Arc::new(FakeStats {
        active: AtomicU64::new(0),
        refuse: false,
        matcher: false,
    })));
    let released = Rc::new(Cell::new(0));
    let hold = crate::testing::counting_release(&released);
    assert!(ext.on_shutdown(hold).is_none(), "held");
    assert_eq!(envoy.gauges()[0], (Gauge::Draining, 1));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut advanced = Duration::ZERO;
    let release = loop {
        if let Some(r) = ext.on_event(EVENT_KICK) {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not released 10 s after min_drain_duration passed"
        );
        // The drain's clock past min_drain_duration, not near its timeout.
        if advanced < Duration::from_millis(100) {
            let step = *envoy.timers().last().expect("timer armed");
            clock.advance(step);
            advanced += step;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert!(
        advanced >= Duration::from_millis(50),
        "not before min_drain_duration"
    );
    assert_eq!(released.get(), 0, "returned to the glue, which calls it");
    release.release();
    assert_eq!(released.get(), 1);
    assert!(ext.on_event(EVENT_KICK).is_none(), "given once");
    assert_eq!(
        crate::testing::counted(),
        [Stat::DrainsStarted, Stat::DrainsCompleted]
    );
    ext.destroy();
    assert_eq!(released.get(), 1);
}

#[test]
fn destroy_disarms_a_hold_still_pending_and_closes_the_gate() {
    let (env, _, _) = env!();
    let ext = Extension::load(FAST, env, true).unwrap();
    let released = Rc::new(Cell::new(0));
    let hold = crate::testing::counting_release(&released);
    assert!(ext.on_shutdown(hold).is_none());
    ext.destroy();
    assert_eq!(released.get(), 0, "never called from the destroy hook");
    assert!(
        !env.threads.is_open(),
        "no module thread calls into Envoy any more"
    );
}

#[test]
fn admin_endpoints_answer_and_refuse_wrong_methods() {
    let (env, _, _) = env!();
    let ext = Extension::load(FAST, env, true).unwrap();
    let (code, body, _) = ext.on_admin(b"GET", b"/graceful_drain/status");
    assert_eq!(code, 200);
    assert!(body.contains("\"state\":\"serving\""), "{body}");
    assert_eq!(ext.on_admin(b"GET", b"/graceful_drain").0, 405);
    assert_eq!(ext.on_admin(b"POST", b"/graceful_drain/x").0, 404);
    let (code, body, release) = ext.on_admin(b"POST", b"/graceful_drain?x=1");
    assert!(release.is_none());
    assert_eq!(code, 200);
    assert!(body.contains("\"trigger\":\"admin\""), "{body}");
    ext.destroy();
}

/// A panic a module thread contained is counted in `module_errors` by the next evaluation on
/// the main thread (`Threads` only counts it: nothing calls back up from there).
#[test]
fn a_panic_contained_on_a_module_thread_is_counted_at_the_next_evaluation() {
    let (env, _, _) = env!();
    let ext = Extension::load(FAST, env, true).unwrap();
    env.threads.spawn("boom", || panic!("test panic")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env.shared.status().module_errors == 0 {
        assert!(std::time::Instant::now() < deadline, "never counted");
        std::thread::sleep(Duration::from_millis(2));
        assert!(ext.on_event(EVENT_KICK).is_none());
    }
    assert_eq!(env.shared.status().module_errors, 1);
    assert_eq!(crate::testing::counted(), [Stat::ModuleErrors]);
    ext.destroy();
}

#[test]
fn the_admin_check_result_sets_its_gauge_and_evaluates_nothing() {
    let (env, _, envoy) = env!();
    let ext = Extension::load(FAST, env, true).unwrap();
    env.shared.set_admin_check(AdminCheck::Recognised);
    assert!(ext.on_event(EVENT_ADMIN_CHECKED).is_none());
    assert_eq!(envoy.gauges(), [(Gauge::AdminAddressOk, 1)]);
    assert!(envoy.timers().is_empty(), "not an evaluation");
    ext.destroy();
}

#[test]
fn a_scan_sums_the_followed_stats_less_what_is_not_work_and_stops_with_the_store() {
    let (env, _, _) = env!();
    let ext = Extension::load(FAST, env, true).unwrap();
    let store = ext.store.clone();
    assert_eq!(
        store.scan(Pass::Gauges),
        None,
        "no store before extension_new"
    );
    let stats = Arc::new(FakeStats {
        active: AtomicU64::new(3),
        refuse: false,
        matcher: false,
    });
    ext.set_stats(Some(stats.clone()));
    assert_eq!(
        store.scan(Pass::Gauges),
        Some(3),
        "the admin's own is ignored"
    );
    env.shared.control_started();
    assert_eq!(
        store.scan(Pass::Gauges),
        Some(2),
        "a waiting /drain is not work"
    );
    assert_eq!(store.scan(Pass::Counters), Some(39));
    assert!(!store.last_pass_hidden());
    // #44 item 3: a stats matcher that keeps none of the request stats. The pass reads 0,
    // and says that 0 is no figure.
    ext.set_stats(Some(Arc::new(FakeStats {
        active: AtomicU64::new(0),
        refuse: false,
        matcher: true,
    })));
    for pass in [Pass::Gauges, Pass::Counters] {
        assert_eq!(store.scan(pass), Some(0));
        assert!(store.last_pass_hidden(), "{pass:?}");
    }
    ext.set_stats(Some(Arc::new(FakeStats {
        active: AtomicU64::new(0),
        refuse: true,
        matcher: false,
    })));
    assert_eq!(store.scan(Pass::Gauges), None, "the gate refused the call");
    ext.set_stats(None);
    assert_eq!(store.scan(Pass::Gauges), None, "extension destroyed");
    ext.destroy();
}
