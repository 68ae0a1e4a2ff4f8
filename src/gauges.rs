//! The `active_requests` gauge of every data-role HTTP filter config and tracking network filter
//! config (Envoy 1.39 and later), set from the in-flight table by a module thread every
//! [`GAUGE_PERIOD`] rather than moved by each request: two calls into Envoy per request saved
//! (about 80 instructions).

use crate::state::Shared;
use crate::threads::Threads;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How often the gauges are set. Envoy flushes stats to sinks every 5 s by default; the status
/// endpoint's `active_requests` is always exact.
pub const GAUGE_PERIOD: Duration = Duration::from_millis(500);

/// One config's gauge, as the FFI hands it over in the config's `config_new`: its maker promises
/// that the config lives until the publisher forgets it ([`GaugePublisher::forget`], from the
/// config's destroy hook). Setting it is an atomic store in Envoy that runs none of the module's
/// hooks (`ENVOY_FACTS.md` §3b), so the publisher may set it under its lock.
pub trait ConfigGauge: Send + Sync {
    fn set(&self, value: u64);
}

/// The live configs' gauges, by config word, and whether a thread sets them.
#[derive(Default)]
struct Live {
    gauges: Vec<(usize, Box<dyn ConfigGauge>)>,
    /// A thread is setting them. Changed only under the lock, with `gauges`: the thread ends
    /// (clears it) when it finds the list empty, and a new config starts one when it is clear,
    /// so a config published just as the thread saw an empty list still gets a thread.
    running: bool,
}

#[derive(Default)]
pub struct GaugePublisher {
    /// A config leaves under this lock in its destroy hook, so the thread never sets the gauge
    /// of a destroyed one.
    live: Mutex<Live>,
}

impl GaugePublisher {
    pub const fn new() -> Self {
        GaugePublisher {
            live: Mutex::new(Live {
                gauges: Vec::new(),
                running: false,
            }),
        }
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follow the gauge of the config `key`, and start the thread if none is running. The thread
    /// ends when no config is left (or the module stops).
    pub fn publish(
        &'static self,
        key: usize,
        gauge: Box<dyn ConfigGauge>,
        threads: &'static Threads,
        shared: &'static Shared,
    ) {
        {
            let mut live = self.live();
            live.gauges.push((key, gauge));
            if live.running {
                return;
            }
            live.running = true;
        }
        let on_panic = move || {
            self.live().running = false;
            shared.counters.module_error()
        };
        let spawned = threads.spawn("graceful_drain_gauge", on_panic, move || loop {
            if !threads.sleep(GAUGE_PERIOD) {
                self.live().running = false;
                return;
            }
            if !self.set_all(threads, shared) {
                return;
            }
        });
        if let Err(e) = spawned {
            self.live().running = false;
            log::warn!("graceful_drain: no thread for the active_requests gauge ({e}); it stays 0");
        }
    }

    /// Stop following the config `key` (its destroy hook); waits for a set under way.
    pub fn forget(&self, key: usize) {
        self.live().gauges.retain(|(k, _)| *k != key);
    }

    /// One round: every live config's gauge to the in-flight count. False, with the thread marked
    /// ended under the same lock, when none is left.
    fn set_all(&self, threads: &Threads, shared: &Shared) -> bool {
        let mut live = self.live();
        if live.gauges.is_empty() {
            live.running = false;
            return false;
        }
        let active = shared.requests.counts().active.max(0) as u64;
        for (_, gauge) in live.gauges.iter() {
            threads.call("active_requests_gauge", || gauge.set(active));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::fixture;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    struct Recorded(Arc<AtomicU64>);
    impl ConfigGauge for Recorded {
        fn set(&self, value: u64) {
            self.0.store(value, Ordering::SeqCst);
        }
    }

    fn recorded() -> (Box<dyn ConfigGauge>, Arc<AtomicU64>) {
        let v = Arc::new(AtomicU64::new(u64::MAX));
        (Box::new(Recorded(v.clone())), v)
    }

    #[test]
    fn a_round_sets_every_live_gauge_and_ends_with_the_last_config() {
        let p = GaugePublisher::new();
        let threads = Threads::default();
        let shared = fixture(None).shared;
        let (g, v) = recorded();
        p.live().gauges.push((0x10, g));
        p.live().running = true;
        let (t, _) = shared.requests.start(None, 0);
        assert!(p.set_all(&threads, &shared));
        assert_eq!(v.load(Ordering::SeqCst), 1, "the in-flight count");
        shared.requests.end(t);
        p.forget(0x10);
        assert!(!p.set_all(&threads, &shared), "none left: the thread ends");
        assert!(
            !p.live().running,
            "marked ended under the lock that publish takes"
        );
        threads.close();
        let (g, v) = recorded();
        p.live().gauges.push((0x10, g));
        v.store(7, Ordering::SeqCst);
        assert!(p.set_all(&threads, &shared));
        assert_eq!(
            v.load(Ordering::SeqCst),
            7,
            "gate closed: no call into Envoy"
        );
    }

    /// A config published after the thread ended (its last config gone) gets a thread again.
    #[test]
    fn a_config_published_as_the_thread_ends_gets_a_thread() {
        static P: GaugePublisher = GaugePublisher::new();
        let threads: &'static Threads = Box::leak(Box::new(Threads::default()));
        let shared: &'static Shared = Box::leak(Box::new(fixture(None).shared));
        let (g, _) = recorded();
        P.publish(1, g, threads, shared);
        P.forget(1);
        // The thread's next round finds the list empty and ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while P.live().running {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread did not end"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (t, _) = shared.requests.start(None, 0);
        let (g, v) = recorded();
        P.publish(2, g, threads, shared);
        while v.load(Ordering::SeqCst) != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the new config's gauge is never set"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        shared.requests.end(t);
        threads.close();
        threads.join(Duration::from_secs(5));
    }
}
