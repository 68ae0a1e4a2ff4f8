//! One connection's requests, followed from its bytes by the network filter (connection mode:
//! no HTTP filter on the data path). The glue (`ffi::network`) hands over the bytes it sees in
//! both directions; an [`crate::exchange::Tracker`] follows their framing, and this turns what it
//! reports into the module's bookkeeping, as the HTTP filter's hooks do in filter mode:
//! - a request (HTTP/1.1) or stream (HTTP/2) that starts takes a ticket of the in-flight table,
//!   on the connection's own slot or its worker's lane, and counts against its connection
//!   ([`crate::connections::Conn::exchange_started`]), so the drain's count, the status's ages
//!   and the idle checks of [`crate::connections`] see it;
//! - while a drain is under way, an HTTP/1.1 request its `User-Agent` or path marks as a health
//!   check keeps its connection busy but is not work (no ticket), as in the HTTP filter (its
//!   hints are kept only for heads begun while a drain is under way: `Tracker::want_hints`);
//! - what the tracker cannot follow (`Event::Lost`) gives its tickets back and marks the
//!   connection untracked: never idle, never closed early, and while it is open the drain waits
//!   for Envoy's gauges too (`Connections::tracking_is_exact`). Its requests are given back
//!   through `Registry::give_back`, so the drain's view of Envoy's gauges keeps counting them
//!   until a gauge pass that started after the loss shows them (never an undercount between).
//!
//! Files: `read` (the read side, bytes Envoy feeds twice, and the requests held back behind a
//! `connection: close`), `write` (the write side and the `connection: close` it puts on
//! HTTP/1.1 responses), `events` (the tracker's
//! events turned into tickets and connection counts; loss; close).
//! May use: `exchange`, `registry`, `connections`, and `state::Shared` (handed in by the glue).

mod events;
mod long_lived;
mod read;
mod write;

pub use long_lived::{upstream_close, WsWake, WsWrite};
pub use read::on_read_hook;
// The bytes the module writes, which the network filter's property tests compare with.
#[cfg(test)]
pub(crate) use {long_lived::GOING_AWAY_REASON, write::CONNECTION_CLOSE};

use read::{Tail, READ_SLICES};

use crate::counting::Ticket;
use crate::exchange::{Protocol, Tracker};

/// One followed connection, owned by its network filter (on its worker; the close may come
/// from another thread, see [`TrackedConnection::on_close`]).
#[derive(Debug, Default)]
pub struct TrackedConnection {
    tracker: Tracker,
    /// The requests in flight: the tracker's id and the ticket (`None`: a health check).
    tickets: Vec<(u32, Option<Ticket>)>,
    /// The previous read buffer's first slices (see `read`): addresses, lengths, and
    /// the client offsets of their first bytes (apart: 16 bytes less than as tuples).
    read_at: [usize; READ_SLICES],
    read_len: [u32; READ_SLICES],
    read_offset: [u64; READ_SLICES],
    /// The previous read buffer's last bytes.
    tail: Tail,
    /// The previous read fed bytes past a complete request ([`Tracker::pipelined`]): Envoy may
    /// have left them in its buffer (else it took every byte).
    may_be_left_behind: bool,
    /// The previous read buffer had more slices than remembered.
    more_slices: bool,
    lost: bool,
    /// A request head has begun and is not complete: counted in
    /// [`crate::connections::Connections::partial_heads`].
    partial_head: bool,
    /// [`TOLD_CLOSE`]: this module put `connection: close` on one of the connection's
    /// responses (or found Envoy's there during a drain). [`HELD`]: HTTP/1.1, the response to
    /// the last request Envoy was given carries `connection: close` (Envoy's or this module's):
    /// no later client byte reaches Envoy (`read`, RFC 9112 §9.6). (Bits of one byte: the
    /// struct stays within its documented size.)
    close: u8,
    /// An SSE response of the connection was counted open at the moves' start.
    sse_counted: bool,
    /// Test-only (`cross-check` builds, beside the HTTP filter): follow without counting, and
    /// report to the connection's cross-check instead.
    shadow: bool,
}

/// What one read or write did, for the glue's counters and log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    pub started: u32,
    pub ended: u32,
    pub health_checks: u32,
    pub served_while_draining: u32,
    /// During the drain, a response ended with `connection: close` (Envoy's drain-close, the
    /// module's health-check failure) on a connection not counted as sent away before.
    pub sent_away_http1: bool,
    /// The tracker lost the thread in this call.
    pub lost: bool,
    /// A read: the read buffer's bytes from this index on are requests that Envoy must never
    /// process (behind a response that carries `connection: close`): the glue takes them out.
    pub hold_from: Option<usize>,
}

const TOLD_CLOSE: u8 = 1;
const HELD: u8 = 2;

impl TrackedConnection {
    fn told_close(&self) -> bool {
        self.close & TOLD_CLOSE != 0
    }

    fn held(&self) -> bool {
        self.close & HELD != 0
    }

    fn set_held(&mut self) {
        self.close |= HELD;
    }

    pub fn new() -> TrackedConnection {
        TrackedConnection::default()
    }

    /// A tracker beside the HTTP filter (`cross-check` builds): counts nothing itself.
    #[cfg(feature = "cross-check")]
    pub fn shadow() -> TrackedConnection {
        TrackedConnection {
            shadow: true,
            ..TrackedConnection::default()
        }
    }

    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// Whether its requests are counted (not a cross-check's shadow).
    pub fn counts(&self) -> bool {
        !self.shadow
    }
}

#[cfg(test)]
mod tests;
