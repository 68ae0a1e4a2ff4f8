//! Unit tests of `runtime::clock`.

use super::*;
use crate::testing::FakeClock;

#[test]
fn fake_clock_moves_only_when_told_and_round_trips() {
    let c = FakeClock::new();
    let (a, n) = (c.now(), c.nanos());
    assert_eq!(c.now(), a);
    assert_eq!(n, 1);
    c.advance(Duration::from_millis(1500));
    assert_eq!(c.now() - a, Duration::from_millis(1500));
    assert_eq!(c.instant_of(c.nanos()), c.now());
    assert_eq!(c.precise_nanos(), c.nanos());
}
