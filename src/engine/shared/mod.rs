//! Process-wide drain state shared by every worker thread and the main thread, split by owner:
//! the in-flight [`Registry`] (workers write, the drain scans), the drain state machine and its
//! mutex (the engine drives it; here), the `/drain` [`Waiters`] (control streams; `waiters.rs`),
//! the network filter's [`Connections`], the [`Counters`] (`counters.rs`, private: the
//! callers say the event, [`Shared::count`]) and the [`Status`]
//! report made of them (`status.rs`). The clock is passed in at construction, and the hosts that
//! reach Envoy into each call that needs them (a drain's [`Hosts`], the module's stats through a
//! [`StatsHost`]), so every part is unit-tested without Envoy. No FFI here.
//!
//! The request path touches only the registry (worker-local atomics) and plain counters. Locks
//! are taken on control paths only (status, drain start and completion, `/drain` waiters).

use crate::config::{DrainSettings, RequestPolicy};
use crate::connections::{Connections, StreamMark};
use crate::counting::{Counts, Lane, Registry, ReservedSlot, Ticket};
use crate::engine::drain::{Decision, Drain, Observation, Phase, Trigger};
use crate::envoy_stats::admin::AdminCheck;
use crate::host::envoy_release::{Standing, Surface};
use crate::host::extension::StatsHost;
pub use crate::host::extension::{Gauge, Stat};
pub use crate::host::stream::{Protocol, Waker};
pub use crate::host::Hosts;
use crate::runtime::clock::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

mod counters;
mod status;
mod waiters;
use counters::Counters;
pub use counters::NotWork;
pub use status::{
    AgeBuckets, FieldDoc, OutcomeReport, SentAway, SettingsReport, Status, TableReport,
    STATUS_FIELDS,
};
pub use waiters::{Wait, Waiters};

/// Event ids committed to a stream's waker.
pub const EVENT_GO_AWAY: u64 = 1;
pub const EVENT_DRAIN_DONE: u64 = 2;

/// Result of asking for a drain to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartResult {
    Started,
    AlreadyStarted,
    /// The bootstrap extension (which owns the drain clock) is not loaded.
    NoEngine,
}

/// Lock a mutex even if a panicking thread poisoned it: the data are plain lists and options
/// whose invariants a panic cannot break halfway, and refusing to drain would be worse.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub use crate::envoy_stats::scan::EnvoyReading;

/// Envoy's figures as the drain state machine sees them, for one poll.
pub type EnvoyObservation = EnvoyReading<Observation>;

pub struct Shared {
    clock: Box<dyn Clock>,
    requests: Registry,
    waiters: Waiters,
    counters: Counters,
    /// Downstream connections as the network filter sees them (its wakers, counts and settings).
    connections: Connections,
    drain: Mutex<Option<Drain>>,
    policy: OnceLock<RequestPolicy>,
    /// When readiness fails (clock nanos), set at drain start; 0 while serving.
    readiness_fails_at: AtomicU64,
    /// A data-role HTTP filter config was loaded (filter mode): the module then counts requests
    /// itself, exactly, and Envoy's stats are only a cross-check for other listeners.
    data_filter_loaded: AtomicBool,
    /// The Envoy the module was loaded into (set once, at program init).
    envoy: OnceLock<crate::host::envoy_release::EnvoyGeneration>,
    /// Where the module stands there: release, tested or not, surface (set once, at program
    /// init; unset in unit tests and outside Envoy: the full surface).
    standing: OnceLock<Standing>,
}

impl Shared {
    pub fn new(clock: Box<dyn Clock>) -> Self {
        Self::with_registry(clock, Registry::new())
    }

    pub fn with_registry(clock: Box<dyn Clock>, requests: Registry) -> Self {
        Shared {
            clock,
            requests,
            waiters: Waiters::default(),
            counters: Counters::new(),
            connections: Connections::default(),
            drain: Mutex::new(None),
            policy: OnceLock::new(),
            readiness_fails_at: AtomicU64::new(0),
            data_filter_loaded: AtomicBool::new(false),
            envoy: OnceLock::new(),
            standing: OnceLock::new(),
        }
    }

    /// Downstream connections as the network filter sees them (its wakers, counts, settings and
    /// long-lived streams): what the network filter, its trackers and the drain's start tell
    /// them, each through a method that says the event.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// The drain's clock (`Instant`s, and the request path's coarse nanos).
    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// The module's count of requests in flight, and when the last one started.
    pub fn counts(&self) -> Counts {
        self.requests.counts()
    }

    /// This worker's lane of the request table (`None` off a worker, or when the table is full).
    pub fn lane(&self) -> Option<Lane> {
        self.requests.lane()
    }

    /// A connection's own slot in its worker's lane (see `Registry::reserve`).
    pub fn reserve(&'static self, lane: Lane) -> Option<ReservedSlot> {
        self.requests.reserve(lane)
    }

    /// `n` requests a lost connection's tracker can no longer end go back to Envoy's figures;
    /// `end` ends their tickets (see `Registry::give_back`).
    pub fn give_back(&self, n: u64, end: impl FnOnce()) {
        self.requests.give_back(n, end)
    }

    /// Whether this worker already sent `connection` away.
    pub fn is_sent_away(&self, connection: Option<u64>) -> bool {
        self.requests.is_sent_away(connection)
    }

    /// A `/drain` request waits for the completion: `waker` gets [`EVENT_DRAIN_DONE`] then.
    pub fn wait_for_completion(&self, waker: Waker) -> Wait {
        self.waiters.register(waker)
    }

    /// A waiting `/drain` request's stream ended (see [`Waiters::unregister`]).
    pub fn stop_waiting(&self, id: u64) -> bool {
        self.waiters.unregister(id)
    }

    /// The Envoy minor the module was loaded into (`None` before program init, in unit tests).
    pub fn envoy_minor(&self) -> Option<&'static str> {
        self.envoy.get().map(|g| g.minor())
    }

    /// The Envoy generation the module was loaded into (program init; once).
    pub fn set_envoy(&self, found: crate::host::envoy_release::EnvoyGeneration) {
        let _ = self.envoy.set(found);
    }

    /// Where the module stands in the running Envoy (program init; once).
    pub fn set_standing(&self, standing: Standing) {
        let _ = self.standing.set(standing);
    }

    pub fn standing(&self) -> Option<&Standing> {
        self.standing.get()
    }

    /// Whether the data path's filters step back (the reduced surface of an untested Envoy:
    /// [`Surface::Reduced`]): a filter config loaded then passes every byte untouched, calls
    /// nothing of Envoy's on the data path and counts nothing; the drain goes by Envoy's own stats
    /// as in bootstrap-only mode. Read when a config loads.
    pub fn data_path_stepped_back(&self) -> bool {
        self.standing
            .get()
            .is_some_and(|s| s.surface == Surface::Reduced)
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

    // ---- the module's counts ---------------------------------------------------------------

    /// One event: Envoy's stat moves through `stats` (the caller's host, any thread), and the
    /// status's figure of the same name with it ([`Counters::count`]).
    #[inline]
    pub fn count(&self, stats: &(impl StatsHost + ?Sized), stat: Stat) {
        self.counters.count(stats, stat)
    }

    /// A request started while a drain was under way.
    pub fn served_while_draining(&self, stats: &(impl StatsHost + ?Sized)) {
        self.counters.served_while_draining(stats)
    }

    /// A failure of the module was contained (on the data path or a module thread).
    pub fn module_error(&self, stats: &(impl StatsHost + ?Sized)) {
        self.counters.module_error(stats)
    }

    /// A request the module told a health check (not work: no ticket).
    pub fn health_check_seen(&self) {
        self.counters.health_check()
    }

    /// A request to a control listener started (not work until it ends).
    pub fn control_started(&self) {
        self.counters.control_started()
    }

    /// A request to a control listener ended.
    pub fn control_ended(&self) {
        self.counters.control_ended()
    }

    /// What the start-time check of `admin_address` found (so far).
    pub fn set_admin_check(&self, c: AdminCheck) {
        self.counters.set_admin_check(c)
    }

    pub fn admin_check(&self) -> AdminCheck {
        self.counters.admin_check()
    }

    /// The requests not work at this moment ([`Counters::not_work_now`]), for a pass over
    /// Envoy's stats to take before and after it.
    pub fn not_work_now(&self) -> NotWork {
        self.counters.not_work_now()
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
    /// `protocol()` (asked only then), through `stats`, and returns that protocol; `None` if it
    /// already was.
    pub fn send_away_once(
        &self,
        stats: &(impl StatsHost + ?Sized),
        connection: Option<u64>,
        protocol: impl FnOnce() -> Protocol,
    ) -> Option<Protocol> {
        if !self.requests.mark_sent_away(connection) {
            return None;
        }
        let p = protocol();
        self.counters.sent_away(stats, p);
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

    /// Start the drain (idempotent), wake every in-flight request through `envoy`'s streams so
    /// its connection is sent away now, and kick the engine.
    pub fn start_drain(&self, envoy: Hosts<'_>, trigger: Trigger) -> StartResult {
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
        if crate::runtime::faults::active("skip_wakeup") {
            // Test-only: prove the race test catches a lost wake-up (every commit lost; the
            // wakers left to the scan still deleted).
            struct Lost<'a>(&'a dyn crate::host::stream::Wakers);
            impl crate::host::stream::Wakers for Lost<'_> {
                fn commit(&self, _: Waker, _: u64) -> bool {
                    true
                }
                fn delete(&self, waker: Waker) {
                    self.0.delete(waker)
                }
            }
            self.requests
                .begin_drain(&Lost(envoy.streams), EVENT_GO_AWAY);
            envoy.extension.kick_engine();
            return StartResult::Started;
        }
        self.requests.begin_drain(envoy.streams, EVENT_GO_AWAY);
        // Idle keep-alive connections are told by the engine's first evaluation of the drain
        // (`Asks::tell_connections`, on Envoy's main thread), after the wake-ups above, so
        // on each worker the busy connections' HTTP filters act first.
        envoy.extension.kick_engine();
        StartResult::Started
    }

    /// Evaluate the drain now. On completion, answers every waiting `/drain` request (through
    /// `envoy`'s streams).
    ///
    /// `envoy` is what Envoy's own stats show (listeners without the filter); it is merged by
    /// taking the larger count and the later start, never added, so requests that both the filter
    /// and Envoy's gauges see are not counted twice.
    pub fn poll(&self, hosts: Hosts<'_>, envoy: EnvoyObservation) -> Decision {
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
            self.connections.note_drained();
            self.waiters.complete(
                |w| {
                    hosts.streams.commit(w, EVENT_DRAIN_DONE);
                },
                |w| hosts.streams.delete(w),
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
            module_version: crate::host::envoy_release::MODULE_VERSION,
            envoy: self.envoy_minor(),
            envoy_release: self
                .standing
                .get()
                .and_then(|s| s.release.map(|r| r.to_string())),
            envoy_untested: self.standing.get().is_some_and(|s| s.untested.is_some()),
            surface: self
                .standing
                .get()
                .map_or(Surface::Full, |s| s.surface)
                .as_str(),
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
            long_lived_streams: self.connections().long_lived().report(),
            outcome: outcome.map(OutcomeReport::from),
            settings: settings.map(SettingsReport::from),
        }
    }
}

#[cfg(test)]
mod tests;
