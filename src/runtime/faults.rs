//! Test-only fault injection (built only with the `panic-test` feature, never in release
//! artefacts): `GRACEFUL_DRAIN_TEST_FAULTS=name,name` in Envoy's environment turns faults on, so
//! integration tests can prove that a failure is contained, or that a test can fail.
//!
//! Faults: `skip_wakeup` (a drain does not wake in-flight requests), `no_timer` (the engine's
//! timer cannot be created), `shutdown_panic` (the SIGTERM hook panics after taking Envoy's
//! completion callback), `admin_panic` (the thread making the drain start's admin calls panics),
//! `hold_thread_calls` (every call a module thread makes into Envoy waits until the exit was
//! released: see `threads::GateFaults`), `no_gate` (with it, such calls pass the closed gate and
//! are counted as late instead of refused), `slow_stats_scan` (every pass over Envoy's stats
//! takes [`SLOW_SCAN`] more, as on a very large configuration or a loaded machine).

use std::sync::OnceLock;
use std::time::Duration;

/// What `slow_stats_scan` adds to each pass over Envoy's stats.
pub const SLOW_SCAN: Duration = Duration::from_millis(700);

pub fn active(name: &str) -> bool {
    static FAULTS: OnceLock<Vec<String>> = OnceLock::new();
    FAULTS
        .get_or_init(|| {
            std::env::var("GRACEFUL_DRAIN_TEST_FAULTS")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .iter()
        .any(|f| f == name)
}
