//! Downstream connections as the network filter sees them, and what to tell the idle ones when a
//! drain starts. No call into Envoy, and no clock of its own (the callers pass the request path's
//! coarse time, `StreamSink::now_nanos`): the network filter ([`crate::network_filter`]) feeds
//! bytes and events in and applies the returned [`Action`] through its host; the HTTP filter
//! reports the streams it sees per connection id ([`Connections::stream_started`],
//! [`stream_ended`]). The process's one [`Connections`] is owned by the module's shared state
//! (`Shared::connections`); tests make their own. Uses only [`crate::exchange`] (the frame
//! reader), [`crate::counting`] (lanes, reserved slots), [`crate::runtime`] (the grace and moves
//! threads, the clock they read), [`crate::config`] (the idle defaults) and
//! [`crate::host::connection`] (the schedulers the drain side commits to, passed in by the
//! caller): nothing above them.
//!
//! Why: at drain start the HTTP filter reaches every connection that carries a request. An idle
//! keep-alive connection carries none, so nobody told its client until the process exited and the
//! kernel closed it (for HTTP/2, without GOAWAY). The network filter in front of the connection
//! manager knows every connection; this module decides, per connection:
//! - HTTP/2 with no stream in flight (after the server preface): inject GOAWAY(2^31-1, NO_ERROR)
//!   at drain start, close once the client had `idle_close_grace` to act on it and no request
//!   was in flight for `idle_after`;
//! - idle HTTP/1.1 (no request in flight for `idle_after`, nothing read since): close cleanly;
//! - busy connections: the HTTP filter sends them away (GOAWAY / `connection: close` through the
//!   connection manager). Its requests register with their connection ([`StreamMark::attach`])
//!   instead of each making a scheduler of its own: at drain start this module hands the
//!   connection's latest request back to the HTTP filter ([`Action::WakeStream`]), which sends
//!   the connection away from there, on the worker, as from its own scheduled hook. An HTTP/2
//!   connection whose latest request already ended while older ones go on gets the GOAWAY frame
//!   from here ([`Action::GoAwayBusy`]) and is closed once idle, like an idle one.
//!
//! Without the HTTP filter (connection mode) streams are unknown: every HTTP/2 connection gets
//! the GOAWAY (safe on busy ones) and nothing is closed, except an HTTP/2 connection whose client
//! never opened a stream ([`FirstStream`] follows its frame headers until it does).
//!
//! Threading: a connection's network filter and every HTTP stream on it run on one worker thread,
//! but its destroy hook may run on the drain side's thread, inside a scheduler commit
//! (`src/ffi/ENVOY_FACTS.md` §1). Hence per-connection state is atomics behind an `Arc`
//! ([`Conn`], found by id in its worker's own map, without a lock), and the drain side never
//! holds a lock while it commits: it takes counted references to the wakers ([`Wakers`]) and
//! commits after releasing the lock.
//!
//! Files: [`machine`] the per-connection state machine ([`Conn`]); [`first_stream`] the HTTP/2
//! client's frames until its first stream; [`index`] the worker's map by connection id and the
//! HTTP filter's [`StreamMark`]; [`wakers`] the scheduler table; [`connections`]
//! the process's [`Connections`] and the grace thread; `cross_check` the test-only cross-check.

#[cfg(feature = "cross-check")]
mod cross_check;
pub mod first_stream;
// Named after the type it holds (`connections::connections::Connections`).
#[allow(clippy::module_inception)]
pub mod connections;
pub mod index;
pub mod long_lived;
pub mod machine;
pub mod wakers;

pub use self::connections::Connections;
pub use crate::exchange::GoAwayGate;
#[cfg(feature = "cross-check")]
pub use cross_check::{cross_check_tallies, CROSS_CHECKS};
pub use first_stream::FirstStream;
pub use index::{register, stream_ended, unregister, StreamMark};
pub use long_lived::{LongLived, LongLivedReport, MovePlan};
pub use machine::Conn;
pub use wakers::{Waker, WakerSlot, Wakers};

use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Event ids committed to a connection's scheduler.
pub const EVENT_DRAIN_STARTED: u64 = 1;
pub const EVENT_GRACE_OVER: u64 = 2;
pub const EVENT_CONFIRM_CLOSE: u64 = 3;
/// A long-lived stream's move wants its next step (`long_lived`'s moves thread).
pub const EVENT_LONG_LIVED: u64 = 4;

/// Between marking a connection for closing and closing it: the worker then has read whatever
/// the client sent meanwhile (a request already in the socket buffer when the check ran would
/// otherwise be cut by the close). Measured without it: 150 HTTP/1.1 clients pausing ~1 s between
/// requests lost 1-2 requests sent at the drain start.
pub const CONFIRM_DELAY: Duration = Duration::from_millis(50);

/// The idle defaults live with the network filter's config (the layer below).
pub use crate::config::{DEFAULT_IDLE_AFTER, DEFAULT_IDLE_CLOSE_GRACE};

/// A connection's own settings, from the network filter config of its listener (listeners may
/// set them differently; none is process-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnSettings {
    /// No request for this long makes it idle.
    pub idle_after: Duration,
    /// Told at the drain start (idle HTTP/2: GOAWAY), closed at a re-check at least this long
    /// after it.
    pub idle_close_grace: Duration,
}

impl Default for ConnSettings {
    fn default() -> Self {
        ConnSettings {
            idle_after: DEFAULT_IDLE_AFTER,
            idle_close_grace: DEFAULT_IDLE_CLOSE_GRACE,
        }
    }
}

/// Re-checks after the drain start, one per grace period: connections that were not idle long
/// enough at an earlier check are closed at a later one (bounded: the drain ends anyway).
const RECHECKS: u32 = 30;

/// The start of the HTTP/2 client connection preface (RFC 9113 §3.4) that Envoy's connection
/// manager looks for with `codec_type: AUTO` (`Http2::CLIENT_MAGIC_PREFIX`).
pub const H2_MAGIC_PREFIX: &[u8] = b"PRI * HTTP/2";

/// GOAWAY frame: length 8, type 7, flags 0, stream 0; last-stream-id 2^31-1; error NO_ERROR.
/// The largest last-stream-id means "every stream you already sent will be processed": it is the
/// first GOAWAY of RFC 9113 §6.8's graceful shutdown. Valid after the server preface, between two
/// frames, and only while no GOAWAY went out on the connection: "Endpoints MUST NOT increase the
/// value they send in the last stream identifier" (§6.8), and after Envoy's final GOAWAY(N)
/// (`max_connection_duration`, `max_requests_per_connection`, an overload action) nghttp2
/// ("GOAWAY: invalid last_stream_id") and grpc-go kill the connection and every stream on it.
/// The glue says whether the bytes prove it may go ([`GoAwayGate`]).
pub const GOAWAY_NO_ERROR: [u8; 17] = [
    0, 0, 8, 7, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0,
];

/// What the connection speaks, from the first bytes the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Nothing (or only a prefix of the HTTP/2 preface) read yet.
    Unknown,
    Http1,
    Http2,
}

/// What the glue must do to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// Write [`GOAWAY_NO_ERROR`] into the connection (towards the client).
    GoAway,
    /// As `GoAway`, on a connection with requests in flight: counted as sent away (not idle).
    GoAwayBusy,
    /// Send the connection away through this request of the HTTP filter (the word it attached).
    WakeStream(usize),
    /// Close after flushing what is already written.
    Close,
}

fn get(b: &AtomicBool) -> bool {
    b.load(Ordering::Relaxed)
}

fn set(b: &AtomicBool, v: bool) {
    b.store(v, Ordering::Relaxed)
}

/// What a connection's scheduled event asks of its network filter ([`Conn::on_scheduled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    pub action: Action,
    /// The filter's `idle_connections_told_http1`, `_http2` and `connections_sent_away_http2`
    /// counters each move by one.
    pub told_http1: bool,
    pub told_http2: bool,
    pub sent_away_http2: bool,
    /// Its `connections_sent_away_http1` counter moves by one.
    pub sent_away_http1: bool,
}

/// Idle connections told, by protocol.
#[derive(Debug, Default)]
pub struct Counts {
    pub http1: AtomicU64,
    pub http2: AtomicU64,
}

#[derive(Default, Debug, Serialize, PartialEq, Eq, Clone, Copy)]
pub struct IdleTold {
    /// Idle HTTP/1.1 keep-alive connections closed.
    pub http1: u64,
    /// Idle HTTP/2 connections sent GOAWAY (and closed after the grace).
    pub http2: u64,
}

impl Counts {
    pub fn snapshot(&self) -> IdleTold {
        IdleTold {
            http1: self.http1.load(Ordering::Relaxed),
            http2: self.http2.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
