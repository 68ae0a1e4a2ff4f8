//! The scanner thread: runs the passes when a drain needs them, at the pace `plan` sets, and
//! hands the engine its view. May use what `stats_scan` may.

use super::*;

#[derive(Default)]
pub(super) struct State {
    cache: EnvoyStatsCache,
    /// Set by the engine when it first asks during a drain.
    timing: Option<DrainTiming>,
    stop: bool,
    /// The thread has ended (stopped, or the store became unreadable).
    ended: bool,
}

pub(super) struct Inner {
    state: Mutex<State>,
    wake: Condvar,
}

pub(super) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The scanner thread and the engine's window on its results.
pub struct Scanner {
    inner: Arc<Inner>,
}

impl Scanner {
    /// Start the thread. Its first scan measures what a scan costs on this configuration (the
    /// pacing of filter-mode drains needs it before the drain starts).
    pub fn start(threads: &Threads, source: impl ScanSource) -> std::io::Result<Scanner> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let for_thread = inner.clone();
        threads.spawn("graceful_stats", move || {
            run(&for_thread, &source);
            lock(&for_thread.state).ended = true;
        })?;
        Ok(Scanner { inner })
    }

    /// The engine's question, during a drain: what do Envoy's stats say now? Never blocks on a
    /// scan (the state lock is held only to copy figures).
    pub fn view(&self, d: DrainTiming, own_now: Counts) -> EnvoyView {
        let mut st = lock(&self.inner.state);
        let mut wake = false;
        match st.timing {
            None => {
                st.timing = Some(d);
                wake = true;
            }
            // The count's exactness changed mid-drain (a connection lost, or closed): the plan
            // follows what the drain is now, not what it was at its first question.
            Some(t) if t.exact_count != d.exact_count => {
                st.timing = Some(d);
                st.cache.timing_changed(d);
                wake = true;
            }
            Some(_) => {}
        }
        if st.ended {
            st.cache.no_more_passes();
        } else {
            wake |= st.cache.observe_own(own_now, Instant::now(), d);
        }
        if wake {
            self.inner.wake.notify_all();
        }
        if st.cache.hidden() {
            // Envoy keeps none of the request stats (a stats matcher): never read as 0. With an
            // exact count of its own the module goes by it; without one, nothing shows the
            // requests in flight, so the drain holds (drain_timeout bounds it). Said at load.
            return if d.exact_count {
                EnvoyView::Unused
            } else {
                EnvoyView::Pending
            };
        }
        match st.cache.view(own_now, d.exact_count) {
            Some(v) => EnvoyView::Seen(v),
            // The store can no longer be read: nothing will come; the filter's counts are all
            // there is (Envoy is tearing down anyway).
            None if st.ended => EnvoyView::Unused,
            // Not seen yet in this drain, the filter loaded or not: hold (drain_timeout bounds
            // it). A filter on every listener does not mean every request: a route can disable
            // it, and only Envoy's figures show what it does not see.
            None => EnvoyView::Pending,
        }
    }

    /// The calibration passes' costs (counters, gauges), once taken.
    pub fn calibration(&self) -> Option<(Duration, Duration)> {
        lock(&self.inner.state).cache.calibration
    }

    /// Tell the thread to stop (its owner, [`Threads`], joins it).
    pub fn stop(&self) {
        let mut st = lock(&self.inner.state);
        st.stop = true;
        self.inner.wake.notify_all();
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One pass, timed, with the module's counts around it.
pub(super) fn timed_pass(source: &dyn ScanSource, pass: Pass) -> Option<PassReading> {
    let own_before = source.own_counts();
    let started = Instant::now();
    let value = source.scan(pass)?;
    let ended = Instant::now();
    let own_after = source.own_counts();
    Some(PassReading {
        value,
        hidden: source.last_pass_hidden(),
        own_before,
        own_after,
        started,
        ended,
    })
}

pub(super) fn run(inner: &Inner, source: &dyn ScanSource) {
    let Some(counters) = timed_pass(source, Pass::Counters) else {
        return;
    };
    let Some(gauges) = timed_pass(source, Pass::Gauges) else {
        return;
    };
    let (c, g) = (counters.cost(), gauges.cost());
    lock(&inner.state).cache.calibrate(c, g);
    if counters.hidden || gauges.hidden {
        log::warn!("{HIDDEN_STATS}");
    }
    let interval = scan_interval(c + g, SCAN_SHARE_PERCENT);
    if interval > IN_FLIGHT_RECHECK {
        log::info!(
            "graceful_drain: a scan of Envoy's stats takes {} ms on this configuration ({} ms for \
             the gauges): while draining, Envoy's request stats are read on the module's own \
             thread, every {} ms with the filter on every listener (at most \
             {SCAN_SHARE_PERCENT}% of a CPU; the drain does not depend on them), else around the \
             moment the drain may first complete, and at up to {BUSY_SCAN_SHARE_PERCENT}% of a \
             CPU while requests without the filter are seen",
            (c + g).as_millis(),
            g.as_millis(),
            interval.as_millis()
        );
    }
    let mut st = lock(&inner.state);
    loop {
        if st.stop {
            return;
        }
        let Some(d) = st.timing.filter(|_| source.draining()) else {
            st = inner
                .wake
                .wait_timeout(st, IDLE_RECHECK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        };
        let now = Instant::now();
        let (pass, at) = st.cache.due(d);
        if now < at {
            st = inner
                .wake
                .wait_timeout(st, at - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        drop(st);
        let Some(reading) = timed_pass(source, pass) else {
            return;
        };
        {
            let mut cur = lock(&inner.state);
            // Planned by the drain as it is now (its exactness may have changed during the pass).
            let d = cur.timing.unwrap_or(d);
            cur.cache.record(pass, reading, d);
        }
        source.scanned();
        st = lock(&inner.state);
    }
}
