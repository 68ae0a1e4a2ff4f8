//! [`ConnectionHost`]: what the network filter ([`crate::network_filter`]) needs from the Envoy
//! connection it sits on, inside one of its hooks. the FFI seam (`src/ffi/network.rs`) implements it over
//! Envoy's network-filter callbacks; the network filter's unit tests fake it. Uses nothing but
//! std and the stats trait ([`super::extension::StatsHost`]).
//!
//! Policy code takes it as a generic (`&impl ConnectionHost`), never as `dyn`: the read and
//! write hooks run on every read and write, and a generic costs no call more than the callbacks
//! themselves.

/// One Envoy connection, seen from its network filter's hook on the connection's worker thread.
/// A value of it is valid for that hook only: the FFI makes one per hook, and once the
/// connection raised a close event none is made for a scheduled event (ENVOY_FACTS.md §1). The
/// module's stats the hook counts go through it too ([`super::extension::StatsHost`]).
pub trait ConnectionHost: super::extension::StatsHost {
    /// The slices of a buffer, as bytes (valid inside [`ConnectionHost::with_read_slices`] or
    /// [`ConnectionHost::with_write_slices`]).
    type Slices<'b>: Iterator<Item = &'b [u8]>;

    /// Envoy's id of the connection (the HTTP filter's `ConnectionId` attribute is the same).
    fn id(&self) -> u64;

    /// Whether the connection is still open (a scheduled event may run after Envoy began to
    /// close it).
    fn is_open(&self) -> bool;

    /// A scheduler for this filter (an opaque word for [`ConnectionHost::commit_scheduler`]), if
    /// Envoy gives one. On the connection's worker.
    fn new_scheduler(&self) -> Option<usize>;

    /// Commit `event` to a scheduler from [`ConnectionHost::new_scheduler`] not yet deleted.
    /// Any thread; the filter's scheduled hook then runs with `event` on its worker.
    fn commit_scheduler(scheduler: usize, event: u64);

    /// Delete a scheduler, once, by its last holder (`crate::connections::Waker`). Any thread.
    fn delete_scheduler(scheduler: usize);

    /// `f` with the read buffer's slices (`None` if Envoy could not give them). Inside the read
    /// hook. The slices come through a `&dyn Fn` so that the code reading them is not made
    /// again for each caller.
    fn with_read_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<Self::Slices<'b>>) -> R,
    ) -> R;

    /// As [`ConnectionHost::with_read_slices`], for this write's bytes. Inside the write hook.
    fn with_write_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<Self::Slices<'b>>) -> R,
    ) -> R;

    /// Inside the read hook: make the read buffer `keep` (drain it whole, then put `keep` back
    /// at its front), before the filters after this one see it. Whether Envoy took it.
    fn replace_read(&self, keep: &[u8]) -> bool;

    /// Inside the write hook: replace the first `n` bytes of this write by `pieces`, in order.
    /// Whether Envoy took it (ENVOY_FACTS.md §6).
    fn replace_write_start(&self, n: usize, pieces: [&[u8]; 2]) -> bool;

    /// Inside the write hook: add `bytes` at the end of this write. Whether Envoy took it.
    fn append_write(&self, bytes: &[u8]) -> bool;

    /// Inside the write hook: drop this write's first `n` bytes. Whether Envoy took it.
    fn drain_write(&self, n: usize) -> bool;

    /// Send `bytes` towards the upstream, into the filter chain after this filter, as if the
    /// client had sent them (docs/contributing/long-lived-streams.md, E2-E4).
    fn inject_read(&self, bytes: &[u8]);

    /// A WebSocket masking key from a strong random source (RFC 6455 §5.3; `getrandom(2)`).
    fn mask_key() -> [u8; 4];

    /// Write `bytes` towards the client ahead of the filter chain's own.
    fn inject_write(&self, bytes: &[u8]);

    /// Close after flushing what is written (never an abort); `details` goes to Envoy's access
    /// log.
    fn close(&self, details: &[u8]);

    /// Close without flushing (Envoy's `NoFlush`): for a connection already in Envoy's delayed
    /// close, whose writes are out.
    fn close_no_flush(&self, details: &[u8]);

    /// Send the connection away through one of its HTTP streams: the word that stream attached
    /// to it (`crate::connections::StreamMark::attach`), woken as from its own scheduler.
    fn wake_stream(&self, word: usize);

    /// The request path's coarse monotonic clock in nanoseconds (the one the HTTP filter stamps
    /// a stream's end with, `StreamSink::now_nanos`). Any thread. Without `self`, so that
    /// `H::now_nanos` is a zero-sized function the tracker takes by value at no cost.
    fn now_nanos() -> u64;

    /// The module's stats (the bootstrap extension's counters) as a handle that holds nothing,
    /// for the trackers the hooks hand their bytes to: the same counters as the host's own
    /// [`super::extension::StatsHost`], without a pointer more carried down the request path
    /// (passing the host itself there cost about 20 instructions a request in the read hook,
    /// callgrind). Any thread; without `self`, as [`ConnectionHost::now_nanos`].
    type Stats: super::extension::StatsHost;
    fn stats() -> Self::Stats;
}

/// The network filter's schedulers as the drain side reaches them from any thread (the drain
/// start on Envoy's main thread, the grace and moves threads): commit an event to one, by the word
/// [`ConnectionHost::new_scheduler`] gave, while a counted reference keeps it alive
/// (`crate::connections::Waker`). Passed to the calls that commit, never kept in shared state.
pub trait ConnectionWakers: Sync {
    /// As [`ConnectionHost::commit_scheduler`]; the filter's scheduled hook then runs with
    /// `event` on the connection's worker.
    fn commit(&self, scheduler: usize, event: u64);
}
