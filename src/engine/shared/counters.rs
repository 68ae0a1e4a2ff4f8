//! The counters behind the status report and the one way the module's Envoy stats move
//! ([`Counters::count`], through the [`StatsHost`] the caller passes in), and the requests that
//! are not work ([`NotWork`]).

use super::{Protocol, Stat};
use crate::envoy_stats::admin::AdminCheck;
use crate::host::extension::StatsHost;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};

/// Counters behind the status report (relaxed atomics: reports, not synchronisation), and the
/// one way the module's Envoy counters move ([`Counters::count`]).
pub struct Counters {
    pub(super) served_while_draining: AtomicU64,
    pub(super) sent_away: [AtomicU64; 3],
    /// Envoy's own in-flight gauge sum as last seen by the drain engine (+1; 0 = never seen).
    pub(super) envoy_active_plus_one: AtomicU64,
    /// Contained failures of the module on the data path (the request went through regardless).
    pub(super) module_errors: AtomicU64,
    pub(super) accounting_error: AtomicBool,
    /// Requests the module saw that are not work: health checks on data listeners and every
    /// request to a control listener. Envoy's own request stats include them, so the engine
    /// subtracts these (started so far, and in flight: a waiting `/drain`).
    pub(super) health_checks: AtomicU64,
    pub(super) control_started: AtomicU64,
    pub(super) control_active: AtomicI64,
    pub(super) control_ended: AtomicU64,
    /// What the start-time check of `admin_address` found ([`AdminCheck`] as u8).
    pub(super) admin_check: AtomicU8,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    pub fn new() -> Self {
        Counters {
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
    /// One event: Envoy's stat moves through `stats` (the caller's host, any thread), and the
    /// report's figure of the same name with it.
    pub fn count(&self, stats: &(impl StatsHost + ?Sized), stat: Stat) {
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
        stats.count(stat)
    }
    pub fn served_while_draining(&self, stats: &(impl StatsHost + ?Sized)) {
        self.count(stats, Stat::ServedWhileDraining)
    }
    pub fn sent_away(&self, stats: &(impl StatsHost + ?Sized), p: Protocol) {
        self.count(stats, Stat::SentAway(p))
    }
    pub fn module_error(&self, stats: &(impl StatsHost + ?Sized)) {
        self.count(stats, Stat::ModuleErrors)
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
