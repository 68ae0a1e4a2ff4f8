//! Process-wide drain state shared by every worker thread and the main thread. No FFI: the few
//! things that must reach Envoy (waking a stream, kicking the engine) go through function pointers
//! the FFI layer installs at load time.
//!
//! The request path touches only atomics here. Locks are taken only on control paths (status,
//! drain start, drain completion) and for work that happens only while draining.

use crate::config::{format_duration, DrainSettings};
use crate::drain::{Decision, Drain, Observation, Outcome, Phase, Trigger};
use crate::registry::Registry;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Event ids committed to a stream's scheduler.
pub const EVENT_GO_AWAY: u64 = 1;
pub const EVENT_DRAIN_DONE: u64 = 2;

const SERVING: u8 = 0;
const DRAINING: u8 = 1;
const DRAINED: u8 = 2;

/// How the state reaches Envoy; installed once by the FFI layer.
#[derive(Clone, Copy)]
pub struct Hooks {
    /// Commit `event` to a stream scheduler (any thread).
    pub commit: fn(waker: usize, event: u64),
    /// Ask the drain engine on the main thread to evaluate the drain now (any thread).
    pub kick_engine: fn(),
}

/// Request timestamps: nanoseconds on the kernel's coarse monotonic clock, shifted so they are
/// never 0 (0 means "none" in atomics). The coarse clock costs a few instructions per request; its
/// millisecond granularity is far below what the drain rules measure.
pub fn now_nanos() -> u64 {
    let e = epoch();
    crate::ffi::coarse_monotonic_nanos()
        .saturating_sub(e.coarse)
        .saturating_add(EPOCH_OFFSET)
}

const EPOCH_OFFSET: u64 = 1_000_000_000;

struct Epoch {
    instant: Instant,
    coarse: u64,
}

fn epoch() -> &'static Epoch {
    static EPOCH: OnceLock<Epoch> = OnceLock::new();
    EPOCH.get_or_init(|| Epoch {
        instant: Instant::now(),
        coarse: crate::ffi::coarse_monotonic_nanos(),
    })
}

/// The `Instant` of a [`now_nanos`] timestamp (to within the coarse clock's granularity).
pub fn instant_of(nanos: u64) -> Instant {
    let e = epoch();
    match nanos.checked_sub(EPOCH_OFFSET) {
        Some(n) => e.instant + Duration::from_nanos(n),
        None => e.instant,
    }
}

/// HTTP protocol family of a connection sent away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
    Other,
}

impl Protocol {
    /// From Envoy's protocol strings ("HTTP/1.1", "HTTP/2", ...).
    pub fn from_envoy(s: &[u8]) -> Protocol {
        match s {
            b"HTTP/1.0" | b"HTTP/1.1" => Protocol::Http1,
            b"HTTP/2" => Protocol::Http2,
            _ => Protocol::Other,
        }
    }
}

/// Result of asking for a drain to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartResult {
    Started,
    AlreadyStarted,
    /// The bootstrap extension (which owns the drain clock) is not loaded.
    NoEngine,
}

struct Waiters {
    done: bool,
    next_id: u64,
    list: Vec<(u64, usize)>,
}

/// A `/drain` request waiting for completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Waiting(u64),
    AlreadyDone,
}

pub struct Shared {
    phase: AtomicU8,
    active: AtomicI64,
    last_start: AtomicU64,
    served_while_draining: AtomicU64,
    sent_away_http1: AtomicU64,
    sent_away_http2: AtomicU64,
    sent_away_other: AtomicU64,
    /// Envoy's own in-flight gauge sum as last seen by the drain engine (+1; 0 = never seen).
    envoy_active_plus_one: AtomicU64,
    drain: Mutex<Option<Drain>>,
    sent_away_conns: Mutex<HashSet<u64>>,
    waiters: Mutex<Waiters>,
    hooks: OnceLock<Hooks>,
    pub registry: Registry,
}

/// Lock a mutex even if a panicking thread poisoned it: the data are plain counters and sets
/// whose invariants a panic cannot break halfway, and refusing to drain would be worse.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(registry_capacity: usize) -> Self {
        Shared {
            phase: AtomicU8::new(SERVING),
            active: AtomicI64::new(0),
            last_start: AtomicU64::new(0),
            served_while_draining: AtomicU64::new(0),
            sent_away_http1: AtomicU64::new(0),
            sent_away_http2: AtomicU64::new(0),
            sent_away_other: AtomicU64::new(0),
            envoy_active_plus_one: AtomicU64::new(0),
            drain: Mutex::new(None),
            sent_away_conns: Mutex::new(HashSet::new()),
            waiters: Mutex::new(Waiters {
                done: false,
                next_id: 1,
                list: Vec::new(),
            }),
            hooks: OnceLock::new(),
            registry: Registry::new(registry_capacity),
        }
    }

    pub fn global() -> &'static Shared {
        static GLOBAL: OnceLock<Shared> = OnceLock::new();
        GLOBAL.get_or_init(|| Shared::new(crate::registry::CAPACITY))
    }

    pub fn install_hooks(&self, hooks: Hooks) {
        let _ = self.hooks.set(hooks);
    }

    fn commit(&self, waker: usize, event: u64) {
        if let Some(h) = self.hooks.get() {
            (h.commit)(waker, event)
        }
    }

    fn kick_engine(&self) {
        if let Some(h) = self.hooks.get() {
            (h.kick_engine)()
        }
    }

    /// Install the drain clock with its settings (bootstrap extension config). The first install
    /// wins; Envoy creates the bootstrap extension once per process.
    pub fn install_engine(&self, settings: DrainSettings) -> bool {
        let mut d = lock(&self.drain);
        if d.is_some() {
            return false;
        }
        *d = Some(Drain::new(settings));
        true
    }

    pub fn settings(&self) -> Option<DrainSettings> {
        lock(&self.drain).as_ref().map(|d| d.settings())
    }

    // ---- request path: atomics only -------------------------------------------------------

    /// A data-plane request started. Returns whether a drain is under way (the caller must then
    /// send the connection away). Call after registering the request's waker.
    #[inline]
    pub fn request_started(&self, now: u64) {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.last_start.store(now, Ordering::Relaxed);
    }

    /// Whether a drain started (or completed). SeqCst: pairs with the slot claim in the registry,
    /// so a request either sees the drain or is seen by the drain's wake-up scan (or both).
    #[inline]
    pub fn is_draining(&self) -> bool {
        self.phase.load(Ordering::SeqCst) != SERVING
    }

    pub fn request_served_while_draining(&self) {
        self.served_while_draining.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub fn request_ended(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn active_requests(&self) -> u64 {
        self.active.load(Ordering::Relaxed).max(0) as u64
    }

    /// Raw count, which may be negative only if the accounting is broken (tests assert on it).
    pub fn active_requests_raw(&self) -> i64 {
        self.active.load(Ordering::Relaxed)
    }

    // ---- drain lifecycle ----------------------------------------------------------------

    /// Start the drain (idempotent), wake every in-flight request so its connection is sent away
    /// now, and kick the engine.
    pub fn start_drain(&self, trigger: Trigger) -> StartResult {
        let started = {
            let mut d = lock(&self.drain);
            match d.as_mut() {
                None => return StartResult::NoEngine,
                Some(drain) => drain.start(Instant::now(), trigger),
            }
        };
        if !started {
            return StartResult::AlreadyStarted;
        }
        self.phase.store(DRAINING, Ordering::SeqCst);
        self.registry
            .for_each_waker(|w| self.commit(w, EVENT_GO_AWAY));
        // issue-14: tell idle keep-alive connections (network filter); after the wake-ups above,
        // so on each worker the busy connections' HTTP filters act first.
        crate::connections::drain_started();
        self.kick_engine();
        StartResult::Started
    }

    /// Evaluate the drain now. On completion, answers every waiting `/drain` request.
    ///
    /// `envoy` is what Envoy's own stats show (listeners without the filter); it is merged by
    /// taking the larger count and the later start, never added, so requests that both the filter
    /// and Envoy's gauges see are not counted twice.
    pub fn poll(&self, now: Instant, envoy: Option<Observation>) -> Decision {
        let mut obs = Observation {
            active_requests: self.active_requests(),
            last_request_start: match self.last_start.load(Ordering::Relaxed) {
                0 => None,
                n => Some(instant_of(n)),
            },
        };
        if let Some(e) = envoy {
            self.envoy_active_plus_one
                .store(e.active_requests.saturating_add(1), Ordering::Relaxed);
            obs.active_requests = obs.active_requests.max(e.active_requests);
            obs.last_request_start = obs.last_request_start.max(e.last_request_start);
        }
        let decision = match lock(&self.drain).as_mut() {
            None => Decision::Idle,
            Some(d) => d.poll(now, obs),
        };
        if let Decision::Completed(_) = decision {
            self.phase.store(DRAINED, Ordering::SeqCst);
            let mut w = lock(&self.waiters);
            w.done = true;
            for (_, waker) in w.list.drain(..) {
                self.commit(waker, EVENT_DRAIN_DONE);
            }
        }
        decision
    }

    pub fn phase(&self) -> Phase {
        lock(&self.drain)
            .as_ref()
            .map_or(Phase::Serving, |d| d.phase())
    }

    /// Wait for the drain to complete: `waker` gets [`EVENT_DRAIN_DONE`] when it does.
    pub fn register_waiter(&self, waker: usize) -> Wait {
        let mut w = lock(&self.waiters);
        if w.done {
            return Wait::AlreadyDone;
        }
        let id = w.next_id;
        w.next_id += 1;
        w.list.push((id, waker));
        Wait::Waiting(id)
    }

    /// Forget a waiter (its stream ended). After this returns its waker is never used again.
    pub fn unregister_waiter(&self, id: u64) {
        lock(&self.waiters).list.retain(|(i, _)| *i != id);
    }

    /// Whether this connection was already told to go away (unknown ids: no).
    pub fn is_sent_away(&self, connection_id: Option<u64>) -> bool {
        connection_id.is_some_and(|id| lock(&self.sent_away_conns).contains(&id))
    }

    /// Record that a connection was told to go away. Returns false if it already was (the call
    /// is then redundant). Unknown connection ids always count.
    pub fn mark_sent_away(&self, connection_id: Option<u64>, protocol: Protocol) -> bool {
        if let Some(id) = connection_id {
            if !lock(&self.sent_away_conns).insert(id) {
                return false;
            }
        }
        match protocol {
            Protocol::Http1 => &self.sent_away_http1,
            Protocol::Http2 => &self.sent_away_http2,
            Protocol::Other => &self.sent_away_other,
        }
        .fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The report behind `/drain/status`, the admin status and the `/drain` answer.
    pub fn status(&self, now: Instant) -> Status {
        let (phase, settings) = match lock(&self.drain).as_ref() {
            None => (Phase::Serving, None),
            Some(d) => (d.phase(), Some(d.settings())),
        };
        let ms = |d: Duration| d.as_millis() as u64;
        let since = |nanos: u64| match nanos {
            0 => None,
            n => Some(ms(now.saturating_duration_since(instant_of(n)))),
        };
        let (trigger, started_at, outcome) = match phase {
            Phase::Serving => (None, None, None),
            Phase::Draining {
                started_at,
                trigger,
            } => (Some(trigger), Some(started_at), None),
            Phase::Drained {
                started_at,
                trigger,
                outcome,
            } => (Some(trigger), Some(started_at), Some(outcome)),
        };
        Status {
            state: phase.name(),
            trigger: trigger.map(Trigger::as_str),
            active_requests: self.active_requests_raw(),
            envoy_active_requests: match self.envoy_active_plus_one.load(Ordering::Relaxed) {
                0 => None,
                n => Some(n - 1),
            },
            in_flight_by_age: {
                let [under_1s, from_1s_to_10s, over_10s] = self.registry.age_buckets(now_nanos());
                AgeBuckets {
                    under_1s,
                    from_1s_to_10s,
                    over_10s,
                }
            },
            drain_elapsed_ms: started_at.map(|s| ms(now.saturating_duration_since(s))),
            since_last_request_start_ms: since(self.last_start.load(Ordering::Relaxed)),
            oldest_request_age_ms: self.registry.oldest_start().and_then(since),
            requests_served_while_draining: self.served_while_draining.load(Ordering::Relaxed),
            connections_sent_away: SentAway {
                http1: self.sent_away_http1.load(Ordering::Relaxed),
                http2: self.sent_away_http2.load(Ordering::Relaxed),
                other: self.sent_away_other.load(Ordering::Relaxed),
            },
            idle_connections_told: crate::connections::idle_told(), // issue-14
            outcome: outcome.map(OutcomeReport::from),
            settings: settings.map(SettingsReport::from),
        }
    }
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SentAway {
    pub http1: u64,
    pub http2: u64,
    pub other: u64,
}

/// In-flight requests by age (requests registered for wake-up; see the registry).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct AgeBuckets {
    pub under_1s: u64,
    #[serde(rename = "1s_to_10s")]
    pub from_1s_to_10s: u64,
    pub over_10s: u64,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct OutcomeReport {
    pub timed_out: bool,
    pub requests_cut: u64,
    pub duration_ms: u64,
}

impl From<Outcome> for OutcomeReport {
    fn from(o: Outcome) -> Self {
        OutcomeReport {
            timed_out: o.timed_out,
            requests_cut: o.requests_cut,
            duration_ms: o.duration.as_millis() as u64,
        }
    }
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SettingsReport {
    pub min_drain_duration: String,
    pub quiet_period: String,
    pub drain_timeout: String,
}

impl From<DrainSettings> for SettingsReport {
    fn from(s: DrainSettings) -> Self {
        SettingsReport {
            min_drain_duration: format_duration(s.min_drain_duration),
            quiet_period: format_duration(s.quiet_period),
            drain_timeout: format_duration(s.drain_timeout),
        }
    }
}

/// Drain status as reported to operators.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Status {
    pub state: &'static str,
    pub trigger: Option<&'static str>,
    /// Signed on purpose: a negative value would expose broken accounting instead of hiding it.
    pub active_requests: i64,
    /// Requests in flight by Envoy's own gauges (`http.*.downstream_rq_active` minus ignored
    /// prefixes), as the drain engine last saw them; covers listeners without the filter.
    /// `null` until a drain has polled them.
    pub envoy_active_requests: Option<u64>,
    pub in_flight_by_age: AgeBuckets,
    pub drain_elapsed_ms: Option<u64>,
    pub since_last_request_start_ms: Option<u64>,
    pub oldest_request_age_ms: Option<u64>,
    pub requests_served_while_draining: u64,
    pub connections_sent_away: SentAway,
    /// issue-14: idle keep-alive connections told by the network filter at drain start
    /// (HTTP/1.1 closed, HTTP/2 sent GOAWAY); zeros without the network filter.
    pub idle_connections_told: crate::connections::IdleTold,
    pub outcome: Option<OutcomeReport>,
    /// `null` when the bootstrap extension (the drain clock) is not loaded.
    pub settings: Option<SettingsReport>,
}

impl Status {
    pub fn to_json(&self) -> String {
        // Serialising plain structs of numbers and static strings cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn fast() -> DrainSettings {
        DrainSettings {
            min_drain_duration: Duration::from_millis(30),
            quiet_period: Duration::from_millis(10),
            drain_timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn no_engine_no_drain() {
        let s = Shared::new(16);
        assert_eq!(s.start_drain(Trigger::Admin), StartResult::NoEngine);
        assert!(!s.is_draining());
        let st = s.status(Instant::now());
        assert_eq!(st.state, "serving");
        assert!(st.settings.is_none());
    }

    #[test]
    fn drain_wakes_registered_requests_and_completes() {
        static COMMITS: AtomicUsize = AtomicUsize::new(0);
        static KICKS: AtomicUsize = AtomicUsize::new(0);
        let s = Shared::new(16);
        s.install_hooks(Hooks {
            commit: |w, e| {
                assert_eq!(e, EVENT_GO_AWAY);
                assert_eq!(w, 0x80);
                COMMITS.fetch_add(1, Ordering::SeqCst);
            },
            kick_engine: || {
                KICKS.fetch_add(1, Ordering::SeqCst);
            },
        });
        assert!(s.install_engine(fast()));
        assert!(!s.install_engine(DrainSettings::default()));
        s.request_started(now_nanos());
        let slot = s.registry.claim(0x80, now_nanos()).unwrap();
        assert!(!s.is_draining());
        let t0 = Instant::now();
        assert_eq!(s.start_drain(Trigger::Sigterm), StartResult::Started);
        assert_eq!(s.start_drain(Trigger::Admin), StartResult::AlreadyStarted);
        assert!(s.is_draining());
        assert_eq!(COMMITS.load(Ordering::SeqCst), 1);
        assert_eq!(KICKS.load(Ordering::SeqCst), 1);
        // In flight: not complete even after min drain.
        assert!(matches!(
            s.poll(t0 + Duration::from_millis(100), None),
            Decision::PollAt(_)
        ));
        s.registry.release(slot);
        s.request_ended();
        let d = s.poll(Instant::now() + Duration::from_millis(100), None);
        assert!(matches!(d, Decision::Completed(o) if !o.timed_out), "{d:?}");
        let st = s.status(Instant::now());
        assert_eq!(st.state, "drained");
        assert_eq!(st.trigger, Some("sigterm"));
        assert_eq!(st.active_requests, 0);
        assert!(st.outcome.is_some());
    }

    #[test]
    fn waiters_are_answered_once_on_completion() {
        static DONE: AtomicUsize = AtomicUsize::new(0);
        let s = Shared::new(4);
        s.install_hooks(Hooks {
            commit: |w, e| {
                if e == EVENT_DRAIN_DONE {
                    DONE.fetch_add(w, Ordering::SeqCst);
                }
            },
            kick_engine: || {},
        });
        s.install_engine(fast());
        s.start_drain(Trigger::ControlEndpoint);
        let a = s.register_waiter(0x10);
        let b = s.register_waiter(0x100);
        assert!(matches!(a, Wait::Waiting(_)));
        if let Wait::Waiting(id) = b {
            s.unregister_waiter(id);
        }
        assert!(matches!(
            s.poll(Instant::now() + Duration::from_secs(1), None),
            Decision::Completed(_)
        ));
        assert_eq!(
            DONE.load(Ordering::SeqCst),
            0x10,
            "only the remaining waiter"
        );
        assert_eq!(s.register_waiter(0x20), Wait::AlreadyDone);
    }

    #[test]
    fn connections_are_counted_once() {
        let s = Shared::new(4);
        assert!(s.mark_sent_away(Some(7), Protocol::Http2));
        assert!(!s.mark_sent_away(Some(7), Protocol::Http2));
        assert!(s.mark_sent_away(Some(8), Protocol::Http1));
        assert!(s.mark_sent_away(None, Protocol::Other));
        let st = s.status(Instant::now());
        assert_eq!(
            st.connections_sent_away,
            SentAway {
                http1: 1,
                http2: 1,
                other: 1
            }
        );
        assert_eq!(Protocol::from_envoy(b"HTTP/1.1"), Protocol::Http1);
        assert_eq!(Protocol::from_envoy(b"HTTP/2"), Protocol::Http2);
        assert_eq!(Protocol::from_envoy(b"HTTP/3"), Protocol::Other);
    }

    #[test]
    fn status_json_has_the_documented_fields() {
        let s = Shared::new(4);
        s.install_engine(DrainSettings::default());
        let v: serde_json::Value =
            serde_json::from_str(&s.status(Instant::now()).to_json()).unwrap();
        for key in [
            "state",
            "active_requests",
            "in_flight_by_age",
            "drain_elapsed_ms",
            "since_last_request_start_ms",
            "oldest_request_age_ms",
            "connections_sent_away",
            "idle_connections_told",
            "requests_served_while_draining",
            "settings",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert_eq!(v["settings"]["drain_timeout"], "25s");
    }
}
