//! Unit tests of `connections::long_lived`.

use super::*;

#[test]
fn move_times_spread_over_the_window() {
    let seed = 12345;
    let mut us: Vec<f64> = (1..=1000).map(|id| unit(id, seed)).collect();
    us.sort_by(f64::total_cmp);
    assert!(us[0] >= 0.0 && us[999] < 1.0);
    // Roughly uniform: each tenth holds 100 +- 40.
    for k in 0..10 {
        let n = us
            .iter()
            .filter(|&&u| u >= k as f64 / 10.0 && u < (k + 1) as f64 / 10.0)
            .count();
        assert!((60..=140).contains(&n), "decile {k}: {n}");
    }
    // Another seed (another pod) gives another order.
    assert_ne!(unit(1, seed), unit(1, seed + 1));
}

#[test]
fn a_plan_exists_only_once_the_moves_began() {
    let ll = LongLived::default();
    assert_eq!(ll.plan(7), None);
    ll.note_settings(LongLivedSettings {
        window: Duration::from_secs(2),
        ..LongLivedSettings::default()
    });
    ll.from.store(1_000, Ordering::Relaxed);
    let p = ll.plan(7).unwrap();
    assert!(p.at >= 1_000 && p.at < 1_000 + 2_000_000_000, "{p:?}");
    assert_eq!(p.close_timeout, 5_000_000_000);
    ll.note_settings(LongLivedSettings {
        enabled: false,
        ..LongLivedSettings::default()
    });
    assert_eq!(ll.plan(7), None);
}

#[test]
fn the_window_is_shortened_to_fit_the_drain_timeout() {
    let s = LongLivedSettings {
        window: Duration::from_secs(10),
        ..LongLivedSettings::default()
    };
    // 1 s hold + 2 s window + 5 s close_timeout = 8 s.
    assert_eq!(
        s.window_within(Duration::from_secs(1), Duration::from_secs(8)),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        s.window_within(Duration::from_secs(5), Duration::from_secs(25)),
        None
    );
}
