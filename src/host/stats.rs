//! Envoy's stats store as the module reads it ([`StatsSource`]): one pass over every gauge or
//! every counter ([`Pass`]), name and value, on the stats scanner's thread. Implemented by
//! `ffi::bootstrap` over the bootstrap extension's stats iteration; faked in tests. Plain types
//! only: what a pass sums is `crate::envoy_stats::scan`'s.

/// Which of Envoy's stats a pass reads. Each kind is its own walk over its own stats, at its own
/// cost: at 20 000 clusters the store holds ~480 000 gauges and ~1 600 000 counters, so a gauge
/// pass costs about a quarter of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// `downstream_rq_total` (less what is not work): request starts, for the quiet period.
    Counters,
    /// `downstream_rq_active` (less what is not work): requests in flight, which completion waits
    /// for.
    Gauges,
}

/// Envoy's stats store, read on the scanner thread.
pub trait StatsSource: Send + Sync + 'static {
    /// Visit every gauge (`Pass::Gauges`) or every counter, name and value. False when the call
    /// into Envoy was refused (the exit was released).
    fn visit(&self, pass: Pass, stat: &mut dyn FnMut(&[u8], u64)) -> bool;
}
