//! Test-only (`#[cfg(test)]`): the one fake Envoy the unit tests outside `src/ffi/` run against,
//! and the shared state's fixture they build on. [`FakeEnvoy`] implements the `host/` traits a
//! drain reaches Envoy through (the streams' wakers, the connections' wakers, the bootstrap
//! extension) and records what it is asked; [`fixture`] builds a [`Shared`] over a fake clock
//! whose hosts are a `&'static FakeEnvoy`, as the FFI's are `&'static`.
//!
//! May use every layer but the FFI; only test code uses it (`tests/architecture.rs`). The fakes
//! that stand for Envoy at the ABI level (the callbacks' table) stay in `src/ffi/fake_envoy.rs`:
//! they replace `extern "C"` callbacks and read the module's buffers, which takes `unsafe`, and
//! only `src/ffi/` may write it. The stream and connection fakes that record a single Envoy
//! object's calls for its glue (`http_filter/tests.rs`, `network_filter/tests.rs`) stay beside
//! that glue's tests.

use crate::config::DrainSettings;
use crate::counting::Registry;
use crate::engine::shared::{Gauge, Hosts, Shared, Stat, Waker};
use crate::host::connection::ConnectionWakers;
use crate::host::extension::{ExtensionHost, ShutdownCompletion, ShutdownRelease, StatsHost};
use crate::host::stream::Wakers;
use crate::runtime::clock::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use std::time::Instant;

/// A `Shared` over a fake clock; the commits, kicks and counts made through the fake hosts
/// ([`HOSTS`], [`STATS`]: `&'static`, as the FFI's are) are recorded in thread-local lists.
pub(crate) struct Fixture {
    pub shared: Shared,
    pub clock: Arc<FakeClock>,
}

std::thread_local! {
    pub(crate) static COMMITS: std::cell::RefCell<Vec<(usize, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    pub(crate) static KICKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(crate) static DELETED: std::cell::RefCell<Vec<usize>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The Envoy stats counted on this thread ([`StatsHost::count`]).
    pub(crate) static COUNTED: std::cell::RefCell<Vec<Stat>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Envoy as the unit tests see it: the streams' commits and deletes, the kicks and the stats
/// counted are recorded in this thread's lists above; the timers armed and the gauges set, which
/// other threads may ask for, in the instance. No network filter is loaded: a connection's
/// commit goes nowhere.
#[derive(Default)]
pub(crate) struct FakeEnvoy {
    timers: Mutex<Vec<Duration>>,
    gauges: Mutex<Vec<(Gauge, u64)>>,
}

/// The one process-wide fake, which the fixture's `Shared` and [`HOSTS`] use.
static ENVOY: FakeEnvoy = FakeEnvoy::new();

/// The fake Envoy as the module's stats host ([`StatsHost`]): what a test passes where a hook
/// passes its Envoy object's host.
pub(crate) const STATS: &FakeEnvoy = &ENVOY;

/// The fake hosts, as a drain's start and completion take them.
pub(crate) const HOSTS: Hosts<'static> = Hosts {
    streams: &ENVOY,
    extension: &ENVOY,
};

impl FakeEnvoy {
    pub(crate) const fn new() -> Self {
        FakeEnvoy {
            timers: Mutex::new(Vec::new()),
            gauges: Mutex::new(Vec::new()),
        }
    }
    /// The delays the extension's timer was armed with, in order.
    pub(crate) fn timers(&self) -> Vec<Duration> {
        lock_or_recover(&self.timers).clone()
    }
    /// The gauges set, in order.
    pub(crate) fn gauges(&self) -> Vec<(Gauge, u64)> {
        lock_or_recover(&self.gauges).clone()
    }
}

impl Wakers for FakeEnvoy {
    fn commit(&self, waker: Waker, event: u64) -> bool {
        COMMITS.with(|c| c.borrow_mut().push((waker, event)));
        true
    }
    fn delete(&self, waker: Waker) {
        DELETED.with(|d| d.borrow_mut().push(waker))
    }
}

impl ConnectionWakers for FakeEnvoy {
    fn commit(&self, _: usize, _: u64) {}
}

/// The stats counted through it go to this thread's list ([`counted`]); the fake stream and
/// connection hosts of the glue's tests count through it too ([`STATS`]).
impl StatsHost for FakeEnvoy {
    fn count(&self, stat: Stat) {
        COUNTED.with(|c| c.borrow_mut().push(stat))
    }
}

impl ExtensionHost for FakeEnvoy {
    fn to_main_thread(&self, event: u64) {
        if event == crate::host::extension::EVENT_KICK {
            KICKS.with(|k| k.set(k.get() + 1))
        }
    }
    fn arm_timer(&self, delay: Duration) {
        lock_or_recover(&self.timers).push(delay);
    }
    fn set_gauge(&self, gauge: Gauge, value: u64) {
        lock_or_recover(&self.gauges).push((gauge, value));
    }
}

/// Envoy's shutdown completion: counts the times it is given in its cell.
pub(crate) struct FakeCompletion(pub std::rc::Rc<std::cell::Cell<u32>>);

impl ShutdownCompletion for FakeCompletion {
    fn complete(self: Box<Self>) {
        self.0.set(self.0.get() + 1)
    }
}

/// A release of a fake completion counted in `n`.
pub(crate) fn counting_release(n: &std::rc::Rc<std::cell::Cell<u32>>) -> ShutdownRelease {
    ShutdownRelease::new(Box::new(FakeCompletion(n.clone())))
}

/// A test that panicked while holding a fake's lock fails by itself; the others read on.
fn lock_or_recover<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The stats counted on this thread since its last fixture.
pub(crate) fn counted() -> Vec<Stat> {
    COUNTED.with(|c| c.borrow().clone())
}

/// The streams' commits on this thread since its last fixture.
pub(crate) fn commits() -> Vec<(usize, u64)> {
    COMMITS.with(|c| c.borrow().clone())
}

/// A clock that moves only when told to (the unit tests' [`Clock`]: they step it instead of
/// sleeping).
pub struct FakeClock {
    epoch: Instant,
    elapsed_nanos: AtomicU64,
}

impl FakeClock {
    pub fn new() -> Self {
        FakeClock {
            epoch: Instant::now(),
            elapsed_nanos: AtomicU64::new(0),
        }
    }

    pub fn advance(&self, d: Duration) {
        self.elapsed_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.elapsed_nanos.load(Ordering::SeqCst))
    }
    fn nanos(&self) -> u64 {
        self.elapsed_nanos.load(Ordering::SeqCst) + 1
    }
    fn epoch(&self) -> Instant {
        self.epoch
    }
}

/// The fake clock; with a `tick`, `nanos` moves in steps of it, as the kernel's coarse clock
/// does (`now` stays exact).
struct ArcClock(Arc<FakeClock>, u64);
impl Clock for ArcClock {
    fn now(&self) -> std::time::Instant {
        self.0.now()
    }
    fn nanos(&self) -> u64 {
        match self.1 {
            0 => self.0.nanos(),
            tick => (self.0.nanos() - 1) / tick * tick + 1,
        }
    }
    fn epoch(&self) -> std::time::Instant {
        self.0.epoch()
    }
}

/// A fresh `Shared` over a fake clock (this thread's lists cleared), with a drain engine
/// installed if `settings` are given.
pub(crate) fn fixture(settings: Option<DrainSettings>) -> Fixture {
    fixture_ticking(settings, 0)
}

/// As [`fixture`], the clock's `nanos` moving in steps of `tick` (0: exact).
pub(crate) fn fixture_ticking(settings: Option<DrainSettings>, tick: u64) -> Fixture {
    COMMITS.with(|c| c.borrow_mut().clear());
    DELETED.with(|d| d.borrow_mut().clear());
    COUNTED.with(|c| c.borrow_mut().clear());
    KICKS.with(|k| k.set(0));
    let clock = Arc::new(FakeClock::new());
    let shared = Shared::with_registry(
        Box::new(ArcClock(clock.clone(), tick)),
        Registry::with_limits(4, 8),
    );
    if let Some(s) = settings {
        assert!(shared.install_engine(s));
    }
    Fixture { shared, clock }
}

/// Drain settings short enough for a unit test: 30 ms at least, 10 ms quiet, 500 ms at most.
pub(crate) fn fast() -> DrainSettings {
    DrainSettings {
        min_drain_duration: Duration::from_millis(30),
        quiet_period: Duration::from_millis(10),
        drain_timeout: Duration::from_millis(500),
    }
}

/// Envoy's streams' wakers as the drain scan reaches them, played by two closures: `commit`
/// sees each waker committed to, `delete` each one left to the scan.
pub(crate) struct Visit<C, D>(std::sync::Mutex<C>, std::sync::Mutex<D>);

impl<C: FnMut(usize) + Send, D: FnMut(usize) + Send> crate::host::stream::Wakers for Visit<C, D> {
    fn commit(&self, waker: usize, _: u64) -> bool {
        (self.0.lock().unwrap())(waker);
        true
    }
    fn delete(&self, waker: usize) {
        (self.1.lock().unwrap())(waker)
    }
}

/// A drain scan's wakers: `commit` and `delete` as [`Visit`].
pub(crate) fn visit<C: FnMut(usize) + Send, D: FnMut(usize) + Send>(
    commit: C,
    delete: D,
) -> Visit<C, D> {
    Visit(std::sync::Mutex::new(commit), std::sync::Mutex::new(delete))
}
