//! The module's Envoy stats ([`Stat`], [`Gauge`]), every one defined by the bootstrap extension's
//! config, so all of them carry that one config's `metrics_namespace` (`graceful_drain` in every
//! shipped config: `envoy_graceful_drain_*` in a scrape), however the filters are loaded. A
//! filter's own stats would take the namespace of the filter's config instead: Envoy Gateway
//! writes none for the HTTP filters its policies add, so they would be `dynamicmodulescustom_*`,
//! shared with every other module (its `internal/xds/translator/dynamicmodule.go`, v1.8.3 and
//! v1.9.0). And every Envoy from 1.38 on has these callbacks (1.38 has no config-scope update for
//! an HTTP filter's own stats).
//!
//! They are unlabelled config-scope stats: an update is a bounds-checked atomic on a stat the
//! config holds, from any thread, while the config lives (ENVOY_FACTS.md §3b, checked in 1.38.3,
//! 1.39.3 and 1.40.0). The config outlives every caller: Envoy joins its workers and destroys the
//! listeners (so every filter) before the bootstrap extension (ENVOY_FACTS.md §5), and a module
//! thread's update goes through the threads' gate, closed (waiting for an update under way)
//! before the config is destroyed. Before the config exists, and without a bootstrap extension,
//! an update does nothing.

use super::envoy::{ExtensionConfig, ExtensionMetrics};
use crate::engine::shared::{Gauge, Stat};
use crate::host::extension::StatsHost;
use crate::runtime::threads::Threads;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The ids Envoy gave, in the order of [`Stat::ALL`] and [`Gauge::ALL`] (`None`: refused).
struct Ids {
    counters: [Option<usize>; Stat::ALL.len()],
    gauges: [Option<usize>; Gauge::ALL.len()],
}

static IDS: OnceLock<Ids> = OnceLock::new();
/// The bootstrap config's word while it lives (0 before its `config_new`, after its destroy).
static CONFIG: AtomicUsize = AtomicUsize::new(0);

/// `config_new` of the bootstrap extension: define every stat (Envoy allows it there only) and
/// publish the config for updates. Once per process: Envoy refuses a second engine before this.
pub(crate) fn define(envoy: &ExtensionConfig) {
    IDS.get_or_init(|| Ids {
        counters: Stat::ALL.map(|s| envoy.define(s.name(), false)),
        gauges: Gauge::ALL.map(|g| envoy.define(g.name(), true)),
    });
    // SAFETY: `forget` takes it back in config_destroy, after the threads' gate closed.
    let metrics = unsafe { envoy.metrics() };
    CONFIG.store(metrics.word(), Ordering::Release);
}

/// `config_destroy` of the bootstrap extension (the gate is closed, the workers gone): no update
/// after this.
pub(crate) fn forget() {
    CONFIG.store(0, Ordering::Release);
}

/// Run `update` on the live config, through the gate on a module thread.
fn update(what: &'static str, id: Option<usize>, update: impl FnOnce(ExtensionMetrics, usize)) {
    let Some(id) = id else { return };
    let on = || {
        let word = CONFIG.load(Ordering::Acquire);
        if word != 0 {
            // SAFETY: the live config's word (see the module doc for why it outlives us).
            update(unsafe { ExtensionMetrics::from_word(word) }, id)
        }
    };
    if Threads::on_module_thread() {
        super::threads().call(what, on);
    } else {
        on()
    }
}

/// The module's counters where no Envoy object of a hook is at hand: the network filter's
/// destroy hook (the connection is gone; its close counts the long-lived streams it moved), and
/// the trackers under the connection's read and write hooks (`ConnectionHost::stats`: a handle
/// that holds nothing, so the request path carries no pointer more for it).
/// Every [`StatsHost`] of the FFI (this, `NetConnection`, `EnvoyStream`, `EnvoyExtension`) makes
/// the one call below, [`count`], the same ABI call whoever counts.
pub(crate) struct ModuleStats;

/// Called from any thread: the network filters' hooks on their workers, and a connection's
/// destroy on whichever thread Envoy ends it (possibly the drain side's, inside its commit:
/// `NetFilter::on_destroy`); the HTTP filters' hooks on their workers; the engine and the
/// extension on the main thread (the module threads' contained panics are counted there, from
/// `Threads::take_panics`); a module thread, were one to count, through the gate ([`update`]),
/// with the host it was handed when spawned. Safe on each: the
/// update is a bounds-checked atomic on a stat the config holds, from any thread, while the
/// config lives (ENVOY_FACTS.md §3b, checked in 1.38.3, 1.39.3 and 1.40.0; the module doc above
/// says why the config outlives every caller).
impl StatsHost for ModuleStats {
    fn count(&self, stat: Stat) {
        count(stat)
    }
}

/// Add one to a counter. Any thread.
pub(crate) fn count(stat: Stat) {
    let at = Stat::ALL.iter().position(|s| *s == stat);
    let id = IDS.get().zip(at).and_then(|(ids, at)| ids.counters[at]);
    update("stat", id, |m, id| m.increment_counter(id));
}

/// Set a gauge. Any thread.
pub(crate) fn set(gauge: Gauge, value: u64) {
    let at = Gauge::ALL.iter().position(|g| *g == gauge);
    let id = IDS.get().zip(at).and_then(|(ids, at)| ids.gauges[at]);
    update("stat", id, |m, id| m.set_gauge(id, value));
}
