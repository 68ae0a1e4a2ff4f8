//! Process-wide drain state shared by every worker thread and the main thread, split by owner:
//! the in-flight [`Registry`] (workers write, the drain scans), the drain state machine (the
//! engine drives it), the `/drain` [`Waiters`] (control streams), the network filter's
//! [`Connections`] and the [`Counters`] behind the status report. The clock and the hosts that reach Envoy ([`Hosts`]) are passed in at
//! construction, so every part is unit-tested without Envoy. No FFI here.
//!
//! The request path touches only the registry (worker-local atomics) and plain counters. Locks
//! are taken on control paths only (status, drain start and completion, `/drain` waiters).

use crate::admin::AdminCheck;
use crate::clock::Clock;
use crate::config::{format_duration, DrainSettings, RequestPolicy};
use crate::connections::{Connections, StreamMark};
use crate::drain::{Decision, Drain, Observation, Outcome, Phase, Trigger};
use crate::host::extension::ExtensionHost;
pub use crate::host::extension::{Gauge, Stat};
use crate::host::stream::Wakers;
pub use crate::host::stream::{Protocol, Waker};
use crate::registry::{Lane, Registry, ReservedSlot, Ticket};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Event ids committed to a stream's waker.
pub const EVENT_GO_AWAY: u64 = 1;
pub const EVENT_DRAIN_DONE: u64 = 2;

/// How the state reaches Envoy: one host per Envoy object ([`crate::host`]), passed in at
/// construction; the FFI layer passes the real ones, tests fakes. Each is a `&'static dyn`: one
/// indirect call, as the fn pointers it replaced.
#[derive(Clone, Copy)]
pub struct Hosts {
    /// Streams' wakers (Envoy's HTTP filter schedulers): the drain start commits to them, the
    /// `/drain` completion commits to and deletes them (any thread).
    pub wakers: &'static dyn Wakers,
    /// The bootstrap extension: the engine's kick and the module's stats (any thread).
    pub extension: &'static dyn ExtensionHost,
    /// The drain started: tell idle connections (the network filter, through
    /// [`Connections::drain_started`] on this state's `connections`; any thread). The seam the
    /// connection host (`host::connection`, issue #45) takes over.
    pub connections_drain_started: fn(),
}

/// Result of asking for a drain to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartResult {
    Started,
    AlreadyStarted,
    /// The bootstrap extension (which owns the drain clock) is not loaded.
    NoEngine,
}

/// A `/drain` request waiting for completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Waiting(u64),
    AlreadyDone,
}

/// `/drain` requests waiting for the drain to complete. Owned by the control streams; answered
/// once by the drain completion.
#[derive(Default)]
pub struct Waiters {
    inner: Mutex<WaitersInner>,
}

#[derive(Default)]
struct WaitersInner {
    done: bool,
    next_id: u64,
    list: Vec<(u64, Waker)>,
    /// The waiters the completion took out and is waking, outside the lock; `true` once the
    /// waiter's stream ended meanwhile (its waker is then the completion's to delete).
    completing: Vec<(u64, bool)>,
}

/// Lock a mutex even if a panicking thread poisoned it: the data are plain lists and options
/// whose invariants a panic cannot break halfway, and refusing to drain would be worse.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Waiters {
    /// Wait for completion: `waker` gets [`EVENT_DRAIN_DONE`] when it comes.
    pub fn register(&self, waker: Waker) -> Wait {
        let mut w = lock(&self.inner);
        if w.done {
            return Wait::AlreadyDone;
        }
        w.next_id += 1;
        let id = w.next_id;
        w.list.push((id, waker));
        Wait::Waiting(id)
    }

    /// Forget a waiter (its stream ended). `true`: its waker is never used again and the caller
    /// deletes it; `false`: the completion is committing to it right now, and deletes it after.
    pub fn unregister(&self, id: u64) -> bool {
        let mut w = lock(&self.inner);
        if let Some(at) = w.list.iter().position(|(i, _)| *i == id) {
            w.list.remove(at);
            return true;
        }
        if let Some(c) = w.completing.iter_mut().find(|(i, _)| *i == id) {
            c.1 = true;
            return false;
        }
        true
    }

    /// The drain completed: wake every waiter once; later registrations answer at once.
    ///
    /// The commits are made outside the lock: a commit may run one of Envoy's destructors on
    /// this thread (`src/ffi/ENVOY_FACTS.md` §1), and nothing that can run there may find a lock
    /// of ours held. Each waker being committed stays alive through it: a stream that ends
    /// meanwhile leaves its waker to this completion ([`Waiters::unregister`]), which deletes it
    /// with `delete` after its commit.
    fn complete(&self, mut wake: impl FnMut(Waker), mut delete: impl FnMut(Waker)) {
        let taken = {
            let mut w = lock(&self.inner);
            w.done = true;
            let taken = std::mem::take(&mut w.list);
            w.completing = taken.iter().map(|&(id, _)| (id, false)).collect();
            taken
        };
        for &(_, waker) in &taken {
            wake(waker);
        }
        let orphaned = std::mem::take(&mut lock(&self.inner).completing);
        for (&(_, waker), &(_, gone)) in taken.iter().zip(&orphaned) {
            if gone {
                delete(waker);
            }
        }
    }
}

/// Counters behind the status report (relaxed atomics: reports, not synchronisation), and the
/// one way the module's Envoy counters move ([`Counters::count`]).
pub struct Counters {
    /// Envoy's side ([`ExtensionHost::count`]).
    publish: &'static dyn ExtensionHost,
    served_while_draining: AtomicU64,
    sent_away: [AtomicU64; 3],
    /// Envoy's own in-flight gauge sum as last seen by the drain engine (+1; 0 = never seen).
    envoy_active_plus_one: AtomicU64,
    /// Contained failures of the module on the data path (the request went through regardless).
    module_errors: AtomicU64,
    accounting_error: AtomicBool,
    /// Requests the module saw that are not work: health checks on data listeners and every
    /// request to a control listener. Envoy's own request stats include them, so the engine
    /// subtracts these (started so far, and in flight: a waiting `/drain`).
    health_checks: AtomicU64,
    control_started: AtomicU64,
    control_active: AtomicI64,
    control_ended: AtomicU64,
    /// What the start-time check of `admin_address` found ([`AdminCheck`] as u8).
    admin_check: AtomicU8,
}

impl Counters {
    pub fn new(publish: &'static dyn ExtensionHost) -> Self {
        Counters {
            publish,
            served_while_draining: AtomicU64::new(0),
            sent_away: Default::default(),
            envoy_active_plus_one: AtomicU64::new(0),
            module_errors: AtomicU64::new(0),
            accounting_error: AtomicBool::new(false),
            health_checks: AtomicU64::new(0),
            control_started: AtomicU64::new(0),
            control_active: AtomicI64::new(0),
            control_ended: AtomicU64::new(0),
            admin_check: AtomicU8::new(0),
        }
    }
    /// One event: Envoy's stat moves, and the report's figure of the same name with it.
    pub fn count(&self, stat: Stat) {
        let figure = match stat {
            Stat::ServedWhileDraining => Some(&self.served_while_draining),
            Stat::SentAway(p) => Some(&self.sent_away[p as usize]),
            Stat::ModuleErrors => Some(&self.module_errors),
            // The report has these from their owners (the drain's outcome, the connections'
            // counts) or not at all.
            _ => None,
        };
        if let Some(f) = figure {
            f.fetch_add(1, Ordering::Relaxed);
        }
        self.publish.count(stat)
    }
    pub fn served_while_draining(&self) {
        self.count(Stat::ServedWhileDraining)
    }
    pub fn sent_away(&self, p: Protocol) {
        self.count(Stat::SentAway(p))
    }
    pub fn module_error(&self) {
        self.count(Stat::ModuleErrors)
    }
    pub fn health_check(&self) {
        self.health_checks.fetch_add(1, Ordering::Relaxed);
    }
    pub fn control_started(&self) {
        self.control_started.fetch_add(1, Ordering::Relaxed);
        self.control_active.fetch_add(1, Ordering::Relaxed);
    }
    pub fn control_ended(&self) {
        self.control_active.fetch_sub(1, Ordering::Relaxed);
        self.control_ended.fetch_add(1, Ordering::Relaxed);
    }
    pub fn set_admin_check(&self, c: AdminCheck) {
        self.admin_check.store(c as u8, Ordering::Relaxed);
    }
    pub fn admin_check(&self) -> AdminCheck {
        match self.admin_check.load(Ordering::Relaxed) {
            1 => AdminCheck::Checking,
            2 => AdminCheck::Recognised,
            3 => AdminCheck::NotAnswering,
            4 => AdminCheck::NotAdmin,
            _ => AdminCheck::Unset,
        }
    }
    /// Requests not work: (started so far, in flight now).
    pub fn not_work(&self) -> (u64, u64) {
        let n = self.not_work_now();
        (n.started, n.active)
    }

    /// Requests not work at one moment, for a stats pass to take before and after it
    /// ([`NotWork::within`]). Ended is read first: a request that ends between the reads is then
    /// counted as ended, never as still in flight.
    pub fn not_work_now(&self) -> NotWork {
        let ended = self.control_ended.load(Ordering::SeqCst);
        let active = self.control_active.load(Ordering::SeqCst).max(0) as u64;
        let started =
            self.health_checks.load(Ordering::SeqCst) + self.control_started.load(Ordering::SeqCst);
        NotWork {
            started,
            active,
            ended,
        }
    }
}

/// The module's requests that are not work (health checks it recognised, requests to its control
/// listeners), at one moment ([`Counters::not_work_now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotWork {
    /// Started so far.
    pub started: u64,
    /// Control requests in flight.
    pub active: u64,
    /// Control requests ended so far.
    pub ended: u64,
}

impl NotWork {
    /// What to take off the figure of a pass over Envoy's stats made between `before` and
    /// `after`: `(started, in flight)`, each erring on the side that holds a drain. Envoy counts a
    /// request in `downstream_rq_total` and `downstream_rq_active` when it creates the stream,
    /// before any filter sees it, and takes it off `downstream_rq_active` before the filters hear
    /// the stream end (`src/ffi/ENVOY_FACTS.md` §6); the control filter ends its count before it
    /// answers (`http_filter::ControlStream::respond`).
    /// - In flight: a control request in flight before the pass and not ended by its end was in
    ///   `downstream_rq_active` all through it; one that started or ended during the pass may or
    ///   may not be in what the pass read, so it is not taken off (the drain may hold a little
    ///   longer, never complete early). Taking off what was in flight at the end of the pass
    ///   instead let a readiness probe arriving during a gauge pass hide a request in flight.
    /// - Started: what the module counted by the end of the pass. One it counted during the pass
    ///   after the pass read Envoy's counter makes this pass's figure lower and the next one's
    ///   higher: a start seen (the drain holds), never one hidden. (Taken before the pass, a start
    ///   counted during it would lower the next figure and could cancel a real start.)
    pub fn within(before: NotWork, after: NotWork) -> (u64, u64) {
        let ended_during = after.ended.saturating_sub(before.ended);
        (after.started, before.active.saturating_sub(ended_during))
    }
}

/// What Envoy's own stats add to the module's exact counts: the scanner's raw figures
/// ([`crate::stats_scan::EnvoyView`]) and the drain's observation made of them
/// ([`EnvoyObservation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvoyReading<T> {
    /// Not used: no drain, or the filter counts every request that matters.
    Unused,
    /// Needed (no filter on the listeners) but not read yet: hold the drain (its timeout still
    /// bounds it).
    Pending,
    Seen(T),
}

impl<T> EnvoyReading<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> EnvoyReading<U> {
        match self {
            EnvoyReading::Unused => EnvoyReading::Unused,
            EnvoyReading::Pending => EnvoyReading::Pending,
            EnvoyReading::Seen(t) => EnvoyReading::Seen(f(t)),
        }
    }
}

/// Envoy's figures as the drain state machine sees them, for one poll.
pub type EnvoyObservation = EnvoyReading<Observation>;

pub struct Shared {
    pub clock: Box<dyn Clock>,
    pub requests: Registry,
    pub waiters: Waiters,
    pub counters: Counters,
    /// Downstream connections as the network filter sees them (its wakers, counts and settings).
    pub connections: Connections,
    drain: Mutex<Option<Drain>>,
    policy: OnceLock<RequestPolicy>,
    /// When readiness fails (clock nanos), set at drain start; 0 while serving.
    readiness_fails_at: AtomicU64,
    /// A data-role HTTP filter config was loaded (filter mode): the module then counts requests
    /// itself, exactly, and Envoy's stats are only a cross-check for other listeners.
    data_filter_loaded: AtomicBool,
    /// The Envoy the module was loaded into (set once, at program init).
    envoy: OnceLock<crate::compat::EnvoyGeneration>,
    hosts: Hosts,
}

impl Shared {
    pub fn new(clock: Box<dyn Clock>, hosts: Hosts) -> Self {
        Self::with_registry(clock, hosts, Registry::new())
    }

    pub fn with_registry(clock: Box<dyn Clock>, hosts: Hosts, requests: Registry) -> Self {
        Shared {
            clock,
            requests,
            waiters: Waiters::default(),
            counters: Counters::new(hosts.extension),
            connections: Connections::default(),
            drain: Mutex::new(None),
            policy: OnceLock::new(),
            readiness_fails_at: AtomicU64::new(0),
            data_filter_loaded: AtomicBool::new(false),
            envoy: OnceLock::new(),
            hosts,
        }
    }

    /// The Envoy minor the module was loaded into (`None` before program init, in unit tests).
    pub fn envoy_minor(&self) -> Option<&'static str> {
        self.envoy.get().map(|g| g.minor())
    }

    /// The Envoy generation the module was loaded into (program init; once).
    pub fn set_envoy(&self, found: crate::compat::EnvoyGeneration) {
        let _ = self.envoy.set(found);
    }

    /// A data-role HTTP filter config was loaded (its config_new).
    pub fn note_data_filter_loaded(&self) {
        self.data_filter_loaded.store(true, Ordering::Relaxed);
    }

    pub fn data_filter_loaded(&self) -> bool {
        self.data_filter_loaded.load(Ordering::Relaxed)
    }

    /// Whether the module's own count holds every request that matters (the drain then needs no
    /// stats scan to complete): a data-role HTTP filter is loaded (filter mode), or a network
    /// filter follows the exchanges and has lost none (connection mode).
    pub fn count_is_exact(&self) -> bool {
        self.data_filter_loaded() || self.connections.tracking_is_exact()
    }

    pub fn commit(&self, waker: Waker, event: u64) {
        self.hosts.wakers.commit(waker, event);
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

    /// Install the request policy (bootstrap config); the first install wins.
    pub fn install_policy(&self, policy: RequestPolicy) {
        let _ = self.policy.set(policy);
    }

    pub fn policy(&self) -> &RequestPolicy {
        static DEFAULT: OnceLock<RequestPolicy> = OnceLock::new();
        self.policy
            .get()
            .unwrap_or_else(|| DEFAULT.get_or_init(RequestPolicy::default))
    }

    /// Whether readiness still answers "ready": while serving, and during the configured
    /// `readiness_failure_delay` after the drain start.
    pub fn is_ready(&self) -> bool {
        match self.readiness_fails_at.load(Ordering::Acquire) {
            0 => !self.is_draining(),
            // Precise: readiness is not on the request path, and the coarse clock's ticks could
            // end the delay up to one tick (about 4 ms) early.
            at => self.clock.precise_nanos() < at,
        }
    }

    /// When readiness fails (or failed), once a drain started.
    pub fn readiness_fails_at(&self) -> Option<std::time::Instant> {
        match self.readiness_fails_at.load(Ordering::Acquire) {
            0 => None,
            at => Some(self.clock.instant_of(at)),
        }
    }

    // ---- request path ---------------------------------------------------------------------

    /// A data-plane request started, with a waker of its own (or none: it is then only counted
    /// and aged). Returns its ticket and whether a drain is under way (the caller must then send
    /// the connection away itself; otherwise the drain's scan reaches it).
    #[inline]
    pub fn request_started(&self, waker: Option<Waker>) -> (Ticket, bool) {
        self.requests.start(waker, self.clock.nanos())
    }

    /// A request started that its connection reaches at drain start (no waker of its own): in
    /// the connection's own slot if free, else in its worker's lane.
    pub fn request_started_on(&self, conn: &StreamMark) -> (Ticket, bool) {
        self.request_started_in(conn.lane(), conn.reserved())
    }

    /// A request without a waker of its own, on a connection with this lane and slot (the HTTP
    /// filter's through [`Shared::request_started_on`], or one the network filter's exchange
    /// tracker saw start). Returns its ticket and whether a drain had started.
    pub fn request_started_in(
        &self,
        lane: Option<Lane>,
        reserved: Option<&ReservedSlot>,
    ) -> (Ticket, bool) {
        let now = self.clock.nanos();
        if let Some(started) = reserved.and_then(|r| r.start(now)) {
            return started;
        }
        match lane {
            Some(lane) => self.requests.start_in(Some(lane), None, now),
            None => self.requests.start(None, now),
        }
    }

    /// The request started by [`Shared::request_started_on`] ended.
    pub fn request_ended_on(&self, conn: &StreamMark, ticket: Ticket) {
        self.request_ended_in(conn.reserved(), ticket)
    }

    /// The request started by [`Shared::request_started_in`] with this slot ended.
    pub fn request_ended_in(&self, reserved: Option<&ReservedSlot>, ticket: Ticket) {
        match reserved {
            Some(r) => r.end(ticket),
            None => {
                self.requests.end(ticket);
            }
        }
    }

    /// Record that `connection` is being sent away, once per connection whoever sends it (the
    /// HTTP filter, or the network filter for a busy HTTP/2 connection): counts it under
    /// `protocol()` (asked only then) and returns that protocol; `None` if it already was.
    pub fn send_away_once(
        &self,
        connection: Option<u64>,
        protocol: impl FnOnce() -> Protocol,
    ) -> Option<Protocol> {
        if !self.requests.mark_sent_away(connection) {
            return None;
        }
        let p = protocol();
        self.counters.sent_away(p);
        Some(p)
    }

    /// The request ended; returns its waker for the caller to destroy.
    #[inline]
    pub fn request_ended(&self, ticket: Ticket) -> Option<Waker> {
        self.requests.end(ticket)
    }

    /// Whether a drain started (or completed).
    #[inline]
    pub fn is_draining(&self) -> bool {
        self.requests.is_draining()
    }

    // ---- drain lifecycle ----------------------------------------------------------------

    /// Start the drain (idempotent), wake every in-flight request so its connection is sent away
    /// now, and kick the engine.
    pub fn start_drain(&self, trigger: Trigger) -> StartResult {
        {
            let mut d = lock(&self.drain);
            match d.as_mut() {
                None => return StartResult::NoEngine,
                Some(drain) => {
                    if !drain.start(self.clock.now(), trigger) {
                        return StartResult::AlreadyStarted;
                    }
                }
            }
        }
        let delay = self.policy().readiness_failure_delay.as_nanos() as u64;
        self.readiness_fails_at.store(
            self.clock.precise_nanos().saturating_add(delay),
            Ordering::Release,
        );
        #[cfg(feature = "panic-test")]
        if crate::faults::active("skip_wakeup") {
            // Test-only: prove the race test catches a lost wake-up.
            self.requests
                .begin_drain(|_| {}, |w| self.hosts.wakers.delete(w));
            self.hosts.extension.kick_engine();
            return StartResult::Started;
        }
        self.requests.begin_drain(
            |w| self.commit(w, EVENT_GO_AWAY),
            |w| self.hosts.wakers.delete(w),
        );
        // Tell idle keep-alive connections (network filter); after the wake-ups above, so on each
        // worker the busy connections' HTTP filters act first.
        (self.hosts.connections_drain_started)();
        self.hosts.extension.kick_engine();
        StartResult::Started
    }

    /// Evaluate the drain now. On completion, answers every waiting `/drain` request.
    ///
    /// `envoy` is what Envoy's own stats show (listeners without the filter); it is merged by
    /// taking the larger count and the later start, never added, so requests that both the filter
    /// and Envoy's gauges see are not counted twice.
    pub fn poll(&self, envoy: EnvoyObservation) -> Decision {
        let now = self.clock.now();
        let counts = self.requests.counts();
        let active = if counts.active < 0 {
            // A double end somewhere: the count cannot be trusted, so never complete early on it;
            // hold (the timeout still bounds the drain) and say so.
            if !self.counters.accounting_error.swap(true, Ordering::Relaxed) {
                log::error!(
                    "graceful_drain: in-flight count is negative ({}): request accounting is \
                     broken; the drain now waits for drain_timeout",
                    counts.active
                );
            }
            1
        } else if self.counters.accounting_error.load(Ordering::Relaxed) {
            1
        } else {
            // With the heads on their way (connection mode): Envoy already has their streams.
            (counts.active as u64).saturating_add(self.connections.partial_heads() as u64)
        };
        let mut obs = Observation {
            active_requests: active,
            last_request_start: (counts.last_start != 0)
                .then(|| self.clock.instant_of(counts.last_start)),
        };
        match envoy {
            EnvoyObservation::Unused => {}
            // Envoy's figures are the only signal and are not in yet: never complete on nothing.
            EnvoyObservation::Pending => obs.active_requests = obs.active_requests.max(1),
            EnvoyObservation::Seen(e) => {
                self.counters
                    .envoy_active_plus_one
                    .store(e.active_requests.saturating_add(1), Ordering::Relaxed);
                obs.active_requests = obs.active_requests.max(e.active_requests);
                obs.last_request_start = obs.last_request_start.max(e.last_request_start);
            }
        }
        let decision = match lock(&self.drain).as_mut() {
            None => Decision::Idle,
            Some(d) => d.poll(now, obs),
        };
        if let Decision::Completed(_) = decision {
            self.waiters.complete(
                |w| self.commit(w, EVENT_DRAIN_DONE),
                |w| self.hosts.wakers.delete(w),
            );
        }
        decision
    }

    pub fn phase(&self) -> Phase {
        lock(&self.drain)
            .as_ref()
            .map_or(Phase::Serving, |d| d.phase())
    }

    /// The report behind `/drain/status`, the admin status and the `/drain` answer.
    pub fn status(&self) -> Status {
        let now = self.clock.now();
        let (phase, settings) = match lock(&self.drain).as_ref() {
            None => (Phase::Serving, None),
            Some(d) => (d.phase(), Some(d.settings())),
        };
        let ms = |d: Duration| d.as_millis() as u64;
        let since = |nanos: u64| match nanos {
            0 => None,
            n => Some(ms(now.saturating_duration_since(self.clock.instant_of(n)))),
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
        let c = &self.counters;
        let counts = self.requests.counts();
        let [under_1s, from_1s_to_10s, over_10s] = self.requests.age_buckets(self.clock.nanos());
        let table = self.requests.footprint();
        let (not_work_started, _) = c.not_work();
        Status {
            module_version: crate::compat::MODULE_VERSION,
            envoy: self.envoy_minor(),
            state: phase.name(),
            ready: self.is_ready(),
            trigger: trigger.map(Trigger::as_str),
            active_requests: counts.active,
            accounting_error: c.accounting_error.load(Ordering::Relaxed),
            envoy_active_requests: match c.envoy_active_plus_one.load(Ordering::Relaxed) {
                0 => None,
                n => Some(n - 1),
            },
            in_flight_by_age: AgeBuckets {
                under_1s,
                from_1s_to_10s,
                over_10s,
            },
            drain_elapsed_ms: started_at.map(|s| ms(now.saturating_duration_since(s))),
            since_last_request_start_ms: since(counts.last_start),
            oldest_request_age_ms: self.requests.oldest_start().and_then(since),
            requests_served_while_draining: c.served_while_draining.load(Ordering::Relaxed),
            connections_sent_away: SentAway {
                http1: c.sent_away[Protocol::Http1 as usize].load(Ordering::Relaxed),
                http2: c.sent_away[Protocol::Http2 as usize].load(Ordering::Relaxed),
                other: c.sent_away[Protocol::Other as usize].load(Ordering::Relaxed),
            },
            module_errors: c.module_errors.load(Ordering::Relaxed),
            admin_address_check: c.admin_check().as_str(),
            health_checks_seen: c.health_checks.load(Ordering::Relaxed),
            not_work_requests: not_work_started,
            request_table: TableReport {
                workers: table.workers as u64,
                slots: table.slots as u64,
                bytes: table.bytes as u64,
                own_wakers: self.requests.own_wakers() as u64,
            },
            idle_connections_told: self.connections.idle_told(),
            outcome: outcome.map(OutcomeReport::from),
            settings: settings.map(SettingsReport::from),
        }
    }
}

/// Size of the in-flight table (it grows with the peak concurrency and never shrinks).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TableReport {
    pub workers: u64,
    pub slots: u64,
    pub bytes: u64,
    /// Requests in flight with a scheduler of their own; the others are reached through their
    /// connection's (the network filter in front).
    pub own_wakers: u64,
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
    /// The module's version (`compat::MODULE_VERSION`).
    pub module_version: &'static str,
    /// The Envoy minor the module found itself in (`1.40` also for a later one with 1.40's
    /// callbacks); `null` outside Envoy.
    pub envoy: Option<&'static str>,
    pub state: &'static str,
    /// What the readiness endpoint answers now (see `readiness_failure_delay`).
    pub ready: bool,
    pub trigger: Option<&'static str>,
    /// Signed on purpose: a negative value would expose broken accounting instead of hiding it.
    pub active_requests: i64,
    /// The count went negative at some point: the drain no longer trusts it (waits for timeout).
    pub accounting_error: bool,
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
    /// Failures contained on the data path (each request went through unharmed) and on the
    /// admin-call threads.
    pub module_errors: u64,
    /// Whether `admin_address` answered as Envoy's admin at start: `unset`, `checking`,
    /// `recognised`, `not_answering`, `not_admin`.
    pub admin_address_check: &'static str,
    /// Health checks recognised on data listeners (answered, never counted as work).
    pub health_checks_seen: u64,
    /// Requests not counted as work: those health checks plus control-listener requests.
    pub not_work_requests: u64,
    pub request_table: TableReport,
    /// Idle keep-alive connections told by the network filter at drain start (HTTP/1.1 closed,
    /// HTTP/2 sent GOAWAY); zeros without the network filter.
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
pub(crate) mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// A `Shared` over a fake clock, whose commits and kicks are recorded in thread-local lists
    /// (the hosts are `&'static`, as the FFI's are: [`FakeEnvoy`]).
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
        /// The Envoy stats counted on this thread ([`ExtensionHost::count`]).
        pub(crate) static COUNTED: std::cell::RefCell<Vec<Stat>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Envoy as the state's tests see it: what the state asks of it is recorded in this
    /// thread's lists above.
    pub(crate) struct FakeEnvoy;

    impl FakeEnvoy {
        pub(crate) const HOSTS: Hosts = Hosts {
            wakers: &FakeEnvoy,
            extension: &FakeEnvoy,
            connections_drain_started: || {},
        };
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

    impl ExtensionHost for FakeEnvoy {
        fn to_main_thread(&self, event: u64) {
            if event == crate::host::extension::EVENT_KICK {
                KICKS.with(|k| k.set(k.get() + 1))
            }
        }
        fn arm_timer(&self, _: Duration) {}
        fn count(&self, stat: Stat) {
            COUNTED.with(|c| c.borrow_mut().push(stat))
        }
        fn set_gauge(&self, _: Gauge, _: u64) {}
    }

    pub(crate) fn counted() -> Vec<Stat> {
        COUNTED.with(|c| c.borrow().clone())
    }

    pub(crate) fn commits() -> Vec<(usize, u64)> {
        COMMITS.with(|c| c.borrow().clone())
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

    pub(crate) fn fixture(settings: Option<DrainSettings>) -> Fixture {
        fixture_ticking(settings, 0)
    }

    fn fixture_ticking(settings: Option<DrainSettings>, tick: u64) -> Fixture {
        COMMITS.with(|c| c.borrow_mut().clear());
        DELETED.with(|d| d.borrow_mut().clear());
        COUNTED.with(|c| c.borrow_mut().clear());
        KICKS.with(|k| k.set(0));
        let clock = Arc::new(FakeClock::new());
        let shared = Shared::with_registry(
            Box::new(ArcClock(clock.clone(), tick)),
            FakeEnvoy::HOSTS,
            Registry::with_limits(4, 8),
        );
        if let Some(s) = settings {
            assert!(shared.install_engine(s));
        }
        Fixture { shared, clock }
    }

    pub(crate) fn fast() -> DrainSettings {
        DrainSettings {
            min_drain_duration: Duration::from_millis(30),
            quiet_period: Duration::from_millis(10),
            drain_timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn no_engine_no_drain() {
        let f = fixture(None);
        assert_eq!(f.shared.start_drain(Trigger::Admin), StartResult::NoEngine);
        assert!(!f.shared.is_draining());
        let st = f.shared.status();
        assert_eq!(st.state, "serving");
        assert!(st.settings.is_none());
    }

    #[test]
    fn drain_wakes_registered_requests_and_completes_by_the_rules() {
        let f = fixture(Some(fast()));
        let s = &f.shared;
        assert!(
            !s.install_engine(DrainSettings::default()),
            "first install wins"
        );
        let (t, draining) = s.request_started(Some(0x80));
        assert!(!draining);
        assert_eq!(s.start_drain(Trigger::Sigterm), StartResult::Started);
        assert_eq!(s.start_drain(Trigger::Admin), StartResult::AlreadyStarted);
        assert!(s.is_draining());
        assert_eq!(commits(), vec![(0x80, EVENT_GO_AWAY)]);
        assert_eq!(KICKS.with(|k| k.get()), 1);
        // In flight: not complete even after the minimum.
        f.clock.advance(Duration::from_millis(100));
        assert!(matches!(
            s.poll(EnvoyObservation::Unused),
            Decision::PollAt(_)
        ));
        assert_eq!(s.request_ended(t), Some(0x80));
        // The request started before the drain: the quiet period runs from the drain start, and
        // both it and the minimum are over, so the drain completes at this poll.
        let d = s.poll(EnvoyObservation::Unused);
        assert!(matches!(d, Decision::Completed(o) if !o.timed_out), "{d:?}");
        let st = s.status();
        assert_eq!(st.state, "drained");
        assert_eq!(st.trigger, Some("sigterm"));
        assert_eq!(st.active_requests, 0);
        assert_eq!(st.outcome.as_ref().map(|o| o.duration_ms), Some(100));
    }

    #[test]
    fn a_negative_count_holds_the_drain_until_the_timeout() {
        let f = fixture(Some(fast()));
        let s = &f.shared;
        let (t, _) = s.request_started(None);
        s.request_ended(t);
        // A forged second end of the same request (the ticket type forbids it in real code).
        s.requests.end(Ticket::forged_for_tests());
        s.start_drain(Trigger::Admin);
        f.clock.advance(Duration::from_millis(100));
        assert!(
            matches!(s.poll(EnvoyObservation::Unused), Decision::PollAt(_)),
            "not completed on a broken count"
        );
        let st = s.status();
        assert_eq!(st.active_requests, -1);
        assert!(st.accounting_error);
        f.clock.advance(Duration::from_millis(400));
        assert!(matches!(s.poll(EnvoyObservation::Unused), Decision::Completed(o) if o.timed_out));
    }

    #[test]
    fn waiters_are_answered_once_on_completion() {
        let f = fixture(Some(fast()));
        let s = &f.shared;
        s.start_drain(Trigger::ControlEndpoint);
        let a = s.waiters.register(0x10);
        let b = s.waiters.register(0x100);
        assert!(matches!(a, Wait::Waiting(_)));
        if let Wait::Waiting(id) = b {
            assert!(
                s.waiters.unregister(id),
                "not completing: the stream deletes its waker"
            );
        }
        f.clock.advance(Duration::from_secs(1));
        assert!(matches!(
            s.poll(EnvoyObservation::Unused),
            Decision::Completed(_)
        ));
        let done: Vec<_> = commits()
            .into_iter()
            .filter(|(_, e)| *e == EVENT_DRAIN_DONE)
            .collect();
        assert_eq!(
            done,
            vec![(0x10, EVENT_DRAIN_DONE)],
            "only the remaining waiter"
        );
        assert_eq!(s.waiters.register(0x20), Wait::AlreadyDone);
        assert!(
            DELETED.with(|d| d.borrow().is_empty()),
            "none left to the completion"
        );
    }

    /// A waiter's stream ending inside the completion's own commit (Envoy may run a destructor
    /// in a commit, on the committing thread): the lock is not held there, so its unregister
    /// does not deadlock, and its waker, left to the completion, is deleted once, after the
    /// commit. Before, the completion committed under the lock: this unregister deadlocked.
    #[test]
    fn a_waiter_ending_inside_the_completion_s_commit_is_deleted_once_after_it() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let w = Waiters::default();
            let Wait::Waiting(a) = w.register(0x10) else {
                panic!("registered");
            };
            let Wait::Waiting(_) = w.register(0x20) else {
                panic!("registered");
            };
            let mut woken = Vec::new();
            let mut deleted = Vec::new();
            let mut left_to_completion = None;
            w.complete(
                |waker| {
                    woken.push(waker);
                    if waker == 0x10 {
                        left_to_completion = Some(w.unregister(a));
                    }
                },
                |waker| deleted.push(waker),
            );
            tx.send((woken, deleted, left_to_completion, w.unregister(a)))
                .unwrap();
        });
        let (woken, deleted, left, after) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the completion deadlocked on its own lock");
        assert_eq!(woken, vec![0x10, 0x20]);
        assert_eq!(
            left,
            Some(false),
            "the completion holds it: the stream must not delete it"
        );
        assert_eq!(deleted, vec![0x10], "deleted once, by the completion");
        assert!(after, "after the completion, nothing holds it");
    }

    #[test]
    fn envoy_observations_merge_by_maximum() {
        let f = fixture(Some(fast()));
        let s = &f.shared;
        let (t, _) = s.request_started(None);
        s.start_drain(Trigger::Admin);
        f.clock.advance(Duration::from_millis(100));
        let envoy = Observation {
            active_requests: 1,
            last_request_start: None,
        };
        s.request_ended(t);
        assert!(matches!(
            s.poll(EnvoyObservation::Seen(envoy)),
            Decision::PollAt(_)
        ));
        assert_eq!(s.status().envoy_active_requests, Some(1));
        let idle = Observation {
            active_requests: 0,
            last_request_start: None,
        };
        assert!(matches!(
            s.poll(EnvoyObservation::Seen(idle)),
            Decision::Completed(_)
        ));
    }

    #[test]
    fn protocol_labels_are_the_same_in_stats_and_status() {
        let f = fixture(None);
        let s = &f.shared;
        s.counters.sent_away(Protocol::Http2);
        s.counters.sent_away(Protocol::Http1);
        s.counters.sent_away(Protocol::from_envoy(b"HTTP/3"));
        assert_eq!(
            s.status().connections_sent_away,
            SentAway {
                http1: 1,
                http2: 1,
                other: 1
            }
        );
        assert_eq!(
            counted(),
            [
                Stat::SentAway(Protocol::Http2),
                Stat::SentAway(Protocol::Http1),
                Stat::SentAway(Protocol::Other)
            ],
            "Envoy's stats move with the report"
        );
        assert_eq!(Protocol::from_envoy(b"HTTP/1.0"), Protocol::Http1);
        assert_eq!(Protocol::from_envoy(b"HTTP/2"), Protocol::Http2);
    }

    /// Every stat has its own name, and the names a scrape sees are the documented ones.
    #[test]
    fn each_stat_has_its_own_documented_name() {
        let mut names: Vec<&str> = Stat::ALL.iter().map(|s| s.name()).collect();
        names.extend(Gauge::ALL.iter().map(|g| g.name()));
        let docs = include_str!("../docs/configuration.md");
        for n in &names {
            assert!(
                docs.contains(&format!("`{n}`")),
                "{n} is not in docs/configuration.md"
            );
        }
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all, "two stats share a name");
        let f = fixture(None);
        f.shared.counters.count(Stat::IdleTold(Protocol::Http1));
        f.shared.counters.module_error();
        assert_eq!(
            counted(),
            [Stat::IdleTold(Protocol::Http1), Stat::ModuleErrors]
        );
        assert_eq!(f.shared.status().module_errors, 1);
    }

    #[test]
    fn status_reports_the_idle_connections_of_its_own_state() {
        use crate::connections::IdleTold;
        let f = fixture(None);
        assert_eq!(f.shared.status().idle_connections_told, IdleTold::default());
        let counts = &f.shared.connections.counts;
        counts.http1.fetch_add(2, Ordering::Relaxed);
        counts.http2.fetch_add(1, Ordering::Relaxed);
        assert_eq!(
            f.shared.status().idle_connections_told,
            IdleTold { http1: 2, http2: 1 }
        );
        let other = fixture(None);
        assert_eq!(
            other.shared.status().idle_connections_told,
            IdleTold::default(),
            "another state has connections of its own"
        );
    }

    #[test]
    fn status_json_has_the_documented_fields() {
        let f = fixture(Some(DrainSettings::default()));
        let v: serde_json::Value = serde_json::from_str(&f.shared.status().to_json()).unwrap();
        for key in [
            "module_version",
            "envoy",
            "state",
            "active_requests",
            "accounting_error",
            "in_flight_by_age",
            "drain_elapsed_ms",
            "since_last_request_start_ms",
            "oldest_request_age_ms",
            "connections_sent_away",
            "idle_connections_told",
            "requests_served_while_draining",
            "module_errors",
            "health_checks_seen",
            "not_work_requests",
            "ready",
            "request_table",
            "settings",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert_eq!(v["settings"]["drain_timeout"], "25s");
        assert_eq!(v["module_version"], env!("CARGO_PKG_VERSION"));
        assert!(v["envoy"].is_null(), "no Envoy here: {v}");
        f.shared.set_envoy(crate::compat::EnvoyGeneration::V1_38);
        let v: serde_json::Value = serde_json::from_str(&f.shared.status().to_json()).unwrap();
        assert_eq!(v["envoy"], "1.38");
    }

    /// The delay is measured on the precise clock: with the request path's coarse clock (4 ms
    /// ticks) readiness failed up to one tick early (seen: 799.8 ms of an 800 ms delay).
    #[test]
    fn readiness_never_fails_early_on_a_coarse_tick() {
        let f = fixture_ticking(Some(fast()), 4_000_000);
        f.shared.install_policy(RequestPolicy {
            readiness_failure_delay: Duration::from_millis(20),
            ..RequestPolicy::default()
        });
        // The drain starts just before a tick; 16.6 ms later the coarse clock has moved 20 ms.
        f.clock.advance(Duration::from_micros(3_900));
        f.shared.start_drain(Trigger::Sigterm);
        f.clock.advance(Duration::from_micros(16_600));
        assert!(f.shared.is_ready(), "failed 3.4 ms early");
        f.clock.advance(Duration::from_micros(3_400));
        assert!(!f.shared.is_ready());
    }

    #[test]
    fn readiness_fails_after_the_configured_delay() {
        let f = fixture(Some(fast()));
        f.shared.install_policy(RequestPolicy {
            readiness_failure_delay: Duration::from_millis(20),
            ..RequestPolicy::default()
        });
        assert!(f.shared.is_ready());
        f.shared.start_drain(Trigger::Sigterm);
        assert!(f.shared.is_ready(), "still ready during the delay");
        assert!(f.shared.is_draining());
        f.clock.advance(Duration::from_millis(19));
        assert!(f.shared.is_ready());
        f.clock.advance(Duration::from_millis(1));
        assert!(!f.shared.is_ready());
        assert!(!f.shared.status().ready);
        let g = fixture(Some(fast()));
        g.shared.start_drain(Trigger::Sigterm);
        assert!(!g.shared.is_ready(), "no delay: fails at once");
    }

    #[test]
    fn concurrent_requests_count_back_to_zero() {
        let f = fixture(None);
        let shared = &f.shared;
        let n = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for t in 0..4usize {
                let n = &n;
                sc.spawn(move || {
                    for i in 0..2000usize {
                        let (tk, _) = shared.request_started(Some(((t << 16) | (i + 1)) << 4));
                        n.fetch_add(1, Ordering::Relaxed);
                        shared.request_ended(tk);
                    }
                });
            }
        });
        assert_eq!(n.load(Ordering::Relaxed), 8000);
        assert_eq!(shared.status().active_requests, 0);
    }
}
