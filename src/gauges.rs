//! The `active_requests` gauge of every data-role HTTP filter config (Envoy 1.39 and later), set
//! from the in-flight table by a module thread every [`GAUGE_PERIOD`] rather than moved by each
//! request: two calls into Envoy per request saved (about 80 instructions).

use crate::state::Shared;
use crate::threads::Threads;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How often the gauges are set. Envoy flushes stats to sinks every 5 s by default; the status
/// endpoint's `active_requests` is always exact.
pub const GAUGE_PERIOD: Duration = Duration::from_millis(500);

/// Sets a config-scope gauge: `(config, gauge id, value)`. Any thread.
pub type SetGauge = fn(usize, usize, u64);

/// The live data-role configs, as `(config, gauge id)`, and the thread that sets their gauges.
#[derive(Default)]
pub struct GaugePublisher {
    /// A config leaves under this lock in its destroy hook, so the thread never sets the gauge
    /// of a destroyed one. The gauge set made under it is an atomic store in Envoy that runs
    /// none of the module's hooks (`ENVOY_FACTS.md` §3b), so the lock cannot be re-entered.
    live: Mutex<Vec<(usize, usize)>>,
    running: AtomicBool,
}

impl GaugePublisher {
    pub const fn new() -> Self {
        GaugePublisher {
            live: Mutex::new(Vec::new()),
            running: AtomicBool::new(false),
        }
    }

    fn live(&self) -> MutexGuard<'_, Vec<(usize, usize)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follow `config`'s gauge `id`, and start the thread if it is not running. The thread ends
    /// when no config is left (or the module stops).
    pub fn publish(
        &'static self,
        config: usize,
        id: usize,
        threads: &'static Threads,
        shared: &'static Shared,
        set: SetGauge,
    ) {
        self.live().push((config, id));
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let on_panic = move || shared.counters.module_error();
        let spawned = threads.spawn("graceful_drain_gauge", on_panic, move || {
            while threads.sleep(GAUGE_PERIOD) && self.set_all(threads, shared, set) {}
            self.running.store(false, Ordering::Release);
        });
        if let Err(e) = spawned {
            self.running.store(false, Ordering::Release);
            log::warn!("graceful_drain: no thread for the active_requests gauge ({e}); it stays 0");
        }
    }

    /// Stop following `config` (its destroy hook); waits for a set under way.
    pub fn forget(&self, config: usize) {
        self.live().retain(|&(c, _)| c != config);
    }

    /// One round: every live config's gauge to the in-flight count. False when none is left.
    fn set_all(&self, threads: &Threads, shared: &Shared, set: SetGauge) -> bool {
        let live = self.live();
        let active = shared.requests.counts().active.max(0) as u64;
        for &(config, id) in live.iter() {
            threads.call("active_requests_gauge", || set(config, id, active));
        }
        !live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::fixture;
    use std::sync::atomic::AtomicU64;

    static SET: AtomicU64 = AtomicU64::new(u64::MAX);

    fn record(config: usize, id: usize, value: u64) {
        assert_eq!((config, id), (0x10, 3));
        SET.store(value, Ordering::SeqCst);
    }

    #[test]
    fn a_round_sets_every_live_gauge_and_ends_with_the_last_config() {
        let p = GaugePublisher::new();
        let threads = Threads::default();
        let shared = fixture(None).shared;
        p.live().push((0x10, 3));
        let (t, _) = shared.requests.start(None, 0);
        assert!(p.set_all(&threads, &shared, record));
        assert_eq!(SET.load(Ordering::SeqCst), 1, "the in-flight count");
        shared.requests.end(t);
        p.forget(0x10);
        assert!(
            !p.set_all(&threads, &shared, record),
            "none left: the thread ends"
        );
        threads.close();
        p.live().push((0x10, 3));
        SET.store(7, Ordering::SeqCst);
        assert!(p.set_all(&threads, &shared, record));
        assert_eq!(
            SET.load(Ordering::SeqCst),
            7,
            "gate closed: no call into Envoy"
        );
    }
}
