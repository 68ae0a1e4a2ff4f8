//! Downstream connections as the network filter sees them, and what to tell the idle ones when a
//! drain starts. No call into Envoy, and no clock of its own (the callers pass the request path's
//! coarse time, `StreamSink::now_nanos`): the network-filter glue (`ffi::network`) feeds bytes and events in and applies
//! the returned [`Action`]; the HTTP filter reports the streams it sees per connection id
//! ([`Connections::stream_started`], [`stream_ended`]). The process's one [`Connections`] is
//! owned by the module's shared state (`Shared::connections`); tests make their own.
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
//! but not always its teardown: `network_filter_scheduler_commit` takes a strong reference to
//! the filter on the committing thread (Envoy 1.38-1.40; `src/ffi/ENVOY_FACTS.md` §1), so when
//! the drain side commits just as the worker closes the connection, the filter's destroy hook
//! runs on the drain side's thread, inside the commit. Hence per-connection state is atomics behind an `Arc` ([`Conn`], found by id in its
//! worker's own map, without a lock), and the drain side never holds a lock while it commits: it
//! takes counted references to the wakers ([`Wakers`]) and commits after releasing the lock.

use crate::exchange::{FrameReader, Read};
use crate::registry::{Lane, ReservedSlot};
use crate::threads::Threads;
use serde::Serialize;
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Event ids committed to a connection's scheduler.
pub const EVENT_DRAIN_STARTED: u64 = 1;
pub const EVENT_GRACE_OVER: u64 = 2;
pub const EVENT_CONFIRM_CLOSE: u64 = 3;

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
/// first GOAWAY of RFC 9113 §6.8's graceful shutdown and is valid at any point after the server
/// preface, also before or after the connection manager's own GOAWAYs.
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

/// Follows what an HTTP/2 client sends until it opens its first stream (RFC 9113 §3.4, §4.1):
/// the 24-byte preface, then its frames, through the tracker's frame reader
/// ([`crate::exchange::FrameReader`]: headers across reads of any size, payloads skipped
/// without copying). A client that opened no stream has sent only SETTINGS, PING,
/// WINDOW_UPDATE, PRIORITY or GOAWAY frames, none larger than the default maximum frame size;
/// anything else (a HEADERS frame, or bytes that do not fit, such as a buffer fed twice) ends
/// the watch, and the connection is then treated as one that may carry a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstStream {
    /// Bytes of the preface still to skip.
    preface: u8,
    frames: FrameReader,
}

/// The client's connection preface (RFC 9113 §3.4).
const H2_PREFACE_LEN: u8 = 24;
/// SETTINGS_MAX_FRAME_SIZE's initial value (RFC 9113 §6.5.2); Envoy does not raise it by default.
const H2_DEFAULT_MAX_FRAME: u32 = 1 << 14;

impl Default for FirstStream {
    fn default() -> Self {
        FirstStream {
            preface: H2_PREFACE_LEN,
            frames: FrameReader::default(),
        }
    }
}

impl FirstStream {
    /// Feed the next bytes the client sent. `false` once the client may have opened a stream
    /// (stop feeding then); `true` while it has sent connection-level frames only.
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let n = usize::from(self.preface).min(bytes.len());
        self.preface -= n as u8;
        bytes = bytes.get(n..).unwrap_or_default();
        while !bytes.is_empty() {
            let (n, read) = self.frames.read(bytes);
            bytes = bytes.get(n..).unwrap_or_default();
            let Some(Read::Head(h)) = read else { continue };
            let connection_level = match h.ty {
                // PRIORITY may name any stream and opens none.
                0x2 => true,
                // SETTINGS, PING, GOAWAY, WINDOW_UPDATE on the connection itself.
                0x4 | 0x6 | 0x7 | 0x8 => h.id == 0,
                // HEADERS opens a stream; DATA, RST_STREAM, CONTINUATION and anything unknown
                // mean a stream or bytes this does not follow.
                _ => false,
            };
            if !connection_level || h.len > H2_DEFAULT_MAX_FRAME {
                return false;
            }
        }
        true
    }
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

/// One downstream connection. Written by its worker thread; atomics (all Relaxed: every
/// decision is taken on that worker) only because teardown may happen elsewhere (module doc).
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    wire: AtomicU8,
    /// The server wrote bytes (for HTTP/2: its preface went first, so frames may follow).
    server_wrote: AtomicBool,
    /// HTTP streams in flight, as reported by the HTTP filter.
    streams: AtomicU32,
    /// HTTP/2 whose client has sent only connection-level frames so far (no HEADERS: it never
    /// opened a stream), as [`FirstStream`] follows them. Idle whatever filters the listener has.
    h2_streamless: AtomicBool,
    /// The glue must still look at the bytes read (the protocol is unknown, or an HTTP/2 client
    /// has not opened a stream yet): one load on the read path decides.
    following: AtomicBool,
    /// The HTTP filter reported at least one stream: it is in the chain, so `streams` is exact.
    tracked: AtomicBool,
    /// Bytes were read since the connection last had no stream (a request may be on its way
    /// through the codec without a stream yet).
    read_since_idle: AtomicBool,
    /// This module told the client (GOAWAY sent, or closed).
    told: AtomicBool,
    closed_by_us: AtomicBool,
    /// When the last stream ended (`StreamSink::now_nanos`); meaningful once tracked.
    idle_since: AtomicU64,
    /// Marked idle by a check; closed by the confirmation if still idle with the same
    /// `idle_since` (0 = not marked).
    candidate_since: AtomicU64,
    /// Its network filter was destroyed ([`unregister`]).
    gone: AtomicBool,
    /// Its exchange tracker lost the thread of the bytes (`crate::tracking`): how many requests
    /// are in flight on it is no longer known, so it is never idle (never closed early).
    untracked: AtomicBool,
    /// An exchange tracker follows it (connection mode).
    followed: AtomicBool,
    /// Test-only: the tracker's count beside the HTTP filter's ([`CrossCheck`]).
    #[cfg(feature = "cross-check")]
    xc: CrossCheck,
    /// The network filter has a scheduler: a drain start reaches this connection's requests.
    wakeable: AtomicBool,
    /// The HTTP filter's latest request on it still in flight, as the word it attached (0: none).
    /// Written and read on the connection's worker only.
    stream: AtomicUsize,
    /// Its listener's settings.
    settings: ConnSettings,
    /// When its worker handled the drain start (`now` of that event; 0 before).
    drain_seen_at: AtomicU64,
    /// Its worker's lane of the in-flight table: requests on it start there without a lookup.
    lane: Option<Lane>,
    /// Its own slot of the in-flight table, for the requests it carries one at a time.
    reserved: Option<ReservedSlot>,
}

const WIRE_UNKNOWN: u8 = 0;
const WIRE_HTTP1: u8 = 1;
const WIRE_HTTP2: u8 = 2;

fn get(b: &AtomicBool) -> bool {
    b.load(Ordering::Relaxed)
}

fn set(b: &AtomicBool, v: bool) {
    b.store(v, Ordering::Relaxed)
}

impl Conn {
    pub fn new(id: u64) -> Conn {
        Conn::on_lane(id, None, None)
    }

    /// A connection of the worker whose in-flight table lane is `lane`, with its own slot there.
    pub fn on_lane(id: u64, lane: Option<Lane>, reserved: Option<ReservedSlot>) -> Conn {
        Conn {
            id,
            wire: AtomicU8::new(WIRE_UNKNOWN),
            server_wrote: AtomicBool::new(false),
            streams: AtomicU32::new(0),
            h2_streamless: AtomicBool::new(false),
            following: AtomicBool::new(true),
            tracked: AtomicBool::new(false),
            read_since_idle: AtomicBool::new(false),
            told: AtomicBool::new(false),
            closed_by_us: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            candidate_since: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            untracked: AtomicBool::new(false),
            followed: AtomicBool::new(false),
            #[cfg(feature = "cross-check")]
            xc: CrossCheck::default(),
            wakeable: AtomicBool::new(false),
            stream: AtomicUsize::new(0),
            settings: ConnSettings::default(),
            drain_seen_at: AtomicU64::new(0),
            lane,
            reserved,
        }
    }

    /// The same, with its listener's settings.
    pub fn with_settings(mut self, settings: ConnSettings) -> Conn {
        self.settings = settings;
        self
    }

    /// Its network filter can be woken at drain start (it has a scheduler).
    pub fn set_wakeable(&self) {
        set(&self.wakeable, true);
    }

    pub fn wire(&self) -> Wire {
        match self.wire.load(Ordering::Relaxed) {
            WIRE_HTTP1 => Wire::Http1,
            WIRE_HTTP2 => Wire::Http2,
            _ => Wire::Unknown,
        }
    }

    fn set_wire(&self, w: Wire) {
        let v = match w {
            Wire::Unknown => WIRE_UNKNOWN,
            Wire::Http1 => WIRE_HTTP1,
            Wire::Http2 => WIRE_HTTP2,
        };
        self.wire.store(v, Ordering::Relaxed)
    }

    pub fn streams(&self) -> u32 {
        self.streams.load(Ordering::Relaxed)
    }

    /// Whether the protocol is still to be detected from the client's first bytes.
    fn sniffing(&self) -> bool {
        self.wire() == Wire::Unknown
    }

    /// The client sent `len` bytes; `first` is the start of the read buffer (up to
    /// `H2_MAGIC_PREFIX.len()` bytes) while the protocol is still unknown, empty once known.
    pub fn on_read(&self, len: usize, first: &[u8]) {
        if len > 0 {
            set(&self.read_since_idle, true);
        }
        if !self.sniffing() || first.is_empty() {
            return;
        }
        // Decided on the first bytes by the connection manager's own rule (`codec_type: AUTO`
        // creates its codec on the first data: HTTP/2 if it starts with the magic prefix, else
        // HTTP/1), so the filter never disagrees with the codec about the protocol.
        let h2 = first.starts_with(H2_MAGIC_PREFIX);
        self.set_wire(if h2 { Wire::Http2 } else { Wire::Http1 });
        set(&self.h2_streamless, h2);
        set(&self.following, h2);
    }

    /// Whether a read needs the read buffer's bytes (`tracking::on_read_hook`): `tracked` (the
    /// connection's exchanges are followed) or still [`Conn::following_bytes`].
    #[inline]
    pub fn read_wants_bytes(&self, tracked: bool) -> bool {
        tracked || self.following_bytes()
    }

    /// Whether the glue must still hand over the bytes it reads ([`Conn::on_followed_read`]);
    /// once false, `on_read(len, &[])` is all a read needs.
    #[inline]
    pub fn following_bytes(&self) -> bool {
        get(&self.following)
    }

    /// Whether the client's bytes must still go to the connection's [`FirstStream`].
    fn watching_first_stream(&self) -> bool {
        get(&self.h2_streamless)
    }

    /// The client's HTTP/2 frames are no longer known to be connection-level only: it opened a
    /// stream, or sent something [`FirstStream`] does not follow.
    fn first_stream_seen(&self) {
        set(&self.h2_streamless, false);
        set(&self.following, false);
    }

    /// A read while [`Conn::following_bytes`]: `chunks()` gives the read buffer's slices
    /// (`None`: Envoy could not give them); `watch` is the connection's [`FirstStream`]. Detects
    /// the protocol from the first bytes and, for HTTP/2, follows the client's frames until it
    /// opens a stream. No payload is copied beyond the prefix the detection needs.
    pub fn on_followed_read<'a, I: Iterator<Item = &'a [u8]>>(
        &self,
        len: usize,
        chunks: &impl Fn() -> Option<I>,
        watch: &mut FirstStream,
    ) {
        if self.sniffing() {
            let mut head = [0u8; H2_MAGIC_PREFIX.len()];
            let mut have = 0;
            for bytes in chunks().into_iter().flatten() {
                let take = bytes.len().min(head.len() - have);
                head[have..have + take].copy_from_slice(&bytes[..take]);
                have += take;
                if have == head.len() {
                    break;
                }
            }
            self.on_read(len, &head[..have]);
        } else {
            self.on_read(len, &[]);
        }
        if !self.watching_first_stream() {
            return;
        }
        let still_streamless = chunks().is_some_and(|mut c| c.all(|b| watch.feed(b)));
        if !still_streamless {
            // A stream opened, or bytes this cannot follow (or could not read): from here on the
            // connection may carry a stream.
            self.first_stream_seen();
        }
    }

    /// The connection's scheduled `event` (on its worker, the filter not closed): what to do,
    /// and which of the filter's counters it moves. `now`: the clock stream ends are stamped
    /// with; `send_away_once(id, http2)`: whether a busy connection told here is the first
    /// telling of it (whoever tells it: this filter, the HTTP filter, or for HTTP/1.1 the
    /// `connection: close` its exchange tracker puts on the in-flight response).
    pub fn on_scheduled(
        &self,
        connections: &Connections,
        event: u64,
        now: u64,
        send_away_once: impl FnOnce(u64, bool) -> bool,
    ) -> Scheduled {
        let (counts, idle_after) = (&connections.counts, self.settings.idle_after);
        let before = counts.snapshot();
        let action = match event {
            EVENT_DRAIN_STARTED => {
                let _ = self.drain_seen_at.compare_exchange(
                    0,
                    now.max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                self.on_drain_started(counts, now, idle_after)
            }
            EVENT_GRACE_OVER => {
                let grace_over = self.grace_over(now);
                self.on_grace_over(counts, now, idle_after, grace_over)
            }
            EVENT_CONFIRM_CLOSE => self.on_confirm_close(counts, now, idle_after),
            _ => Action::Nothing,
        };
        let after = counts.snapshot();
        // A busy HTTP/1.1 connection its tracker follows is told with its in-flight response
        // (`tracking::Tracking::close_to_insert`): counted now, as the HTTP filter counts its own.
        let followed_busy_http1 = event == EVENT_DRAIN_STARTED
            && action == Action::Nothing
            && self.wire() == Wire::Http1
            && get(&self.followed)
            && !get(&self.untracked)
            && self.streams() > 0;
        let (sent_away_http2, sent_away_http1) = match (action, followed_busy_http1) {
            (Action::GoAwayBusy, _) => (send_away_once(self.id, true), false),
            (_, true) => (false, send_away_once(self.id, false)),
            _ => (false, false),
        };
        Scheduled {
            action,
            told_http1: after.http1 > before.http1,
            told_http2: after.http2 > before.http2,
            sent_away_http2,
            sent_away_http1,
        }
    }

    /// Whether its own `idle_close_grace` has passed since its worker handled the drain start
    /// (the re-checks run at the shortest grace any listener has). A connection opened after
    /// the drain start counts from its first re-check.
    ///
    /// Judged at the close, [`CONFIRM_DELAY`] after this check: the re-check timer counts the
    /// grace from the moment it woke the workers, and each worker stamps the drain start a
    /// little later (its own turn, the coarse clock's tick). Judged at the check itself, the
    /// first re-check, exactly one grace after the wake-up, found the grace short by that much
    /// and the close waited a whole grace more (seen with Envoy Gateway's shutdown-manager: an
    /// idle connection 4 s instead of 2 s, past its last poll before Envoy's exit).
    fn grace_over(&self, now: u64) -> bool {
        let seen = match self.drain_seen_at.compare_exchange(
            0,
            now.max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return false,
            Err(seen) => seen,
        };
        let closed_at = now.saturating_add(CONFIRM_DELAY.as_nanos() as u64);
        closed_at.saturating_sub(seen) >= self.settings.idle_close_grace.as_nanos() as u64
    }

    /// The server wrote `len` bytes towards the client.
    pub fn on_write(&self, len: usize) {
        if len > 0 && !get(&self.server_wrote) {
            set(&self.server_wrote, true);
        }
    }

    /// The connection's in-flight table lane (its worker's), if known.
    pub fn lane(&self) -> Option<Lane> {
        self.lane
    }

    /// The connection's own slot of the in-flight table, if it has one.
    pub fn reserved(&self) -> Option<&ReservedSlot> {
        self.reserved.as_ref()
    }

    /// Its exchange tracker saw a request (HTTP/1.1) or stream (HTTP/2) start (connection mode:
    /// as the HTTP filter's report does in filter mode).
    pub fn exchange_started(&self) {
        self.stream_started();
    }

    /// Its exchange tracker saw one end, at `now` (the coarse clock of `StreamSink::now_nanos`).
    pub fn exchange_ended(&self, now: u64) {
        self.stream_ended(now);
    }

    /// An exchange tracker follows the connection and counts its requests (connection mode).
    pub fn set_followed(&self, followed: bool) {
        set(&self.followed, followed);
    }

    /// Its exchange tracker can no longer follow the connection: never idle from here on.
    pub fn set_untracked(&self) {
        set(&self.untracked, true);
    }

    fn stream_started(&self) {
        if get(&self.h2_streamless) {
            set(&self.h2_streamless, false);
            set(&self.following, false);
        }
        set(&self.tracked, true);
        self.streams.fetch_add(1, Ordering::Relaxed);
    }

    fn stream_ended(&self, now: u64) {
        let before = self
            .streams
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if before == Ok(1) {
            set(&self.read_since_idle, false);
            self.idle_since.store(now, Ordering::Relaxed);
        }
    }

    /// Test-only (`cross-check`): the connection's tracker, following it beside the HTTP
    /// filter without counting, saw a request start (`Some(true)`), end (`Some(false)`), or
    /// lost the thread (`None`). A no-op in other builds.
    pub fn cross_check_event(&self, started: Option<bool>) {
        #[cfg(feature = "cross-check")]
        self.xc.event(started);
        #[cfg(not(feature = "cross-check"))]
        let _ = started;
    }

    /// Test-only (`cross-check`): a read is about to be fed to the connection's tracker. The
    /// connection manager has processed every earlier read, and both filters have seen every
    /// write: the one point where the two counts describe the same bytes (inside the
    /// connection manager's processing of a read, at a request start or end, the tracker has
    /// already read that whole buffer: it runs first). A no-op in other builds.
    pub fn cross_check_at_read(&self) {
        #[cfg(feature = "cross-check")]
        self.xc.check(self.id, "read", self.streams());
    }

    /// Idle by what the HTTP filter reported: no stream in flight, none for `idle_after`, and
    /// for HTTP/1.1 nothing read since the last one (bytes of a next request). HTTP/2 clients
    /// send control frames (SETTINGS ack, WINDOW_UPDATE, PING) on idle connections, so there
    /// only streams count; an HTTP/2 connection whose client never opened one is idle too.
    fn idle(&self, now: u64, idle_after: Duration) -> bool {
        if get(&self.untracked) {
            return false;
        }
        if self.wire() == Wire::Http2 && get(&self.h2_streamless) {
            // Never opened a stream (a pool's pre-connected connection): nothing to wait for.
            return true;
        }
        get(&self.tracked)
            && self.streams() == 0
            && (self.wire() == Wire::Http2 || !get(&self.read_since_idle))
            && now.saturating_sub(self.idle_since.load(Ordering::Relaxed))
                >= idle_after.as_nanos() as u64
    }

    /// The drain started. Counts what it tells. Idle HTTP/1.1 connections are only marked here;
    /// [`Conn::on_confirm_close`] closes them [`CONFIRM_DELAY`] later if still idle.
    pub fn on_drain_started(&self, counts: &Counts, now: u64, idle_after: Duration) -> Action {
        if get(&self.told) {
            return Action::Nothing;
        }
        if self.streams() > 0 {
            // Busy: its latest request sends it away through the connection manager.
            let stream = self.stream.load(Ordering::Relaxed);
            if stream != 0 {
                return Action::WakeStream(stream);
            }
            // HTTP/2 whose latest request ended before older ones: GOAWAY from here (after the
            // server preface); closed once idle, like an idle one.
            if self.wire() == Wire::Http2 && get(&self.server_wrote) {
                set(&self.told, true);
                return Action::GoAwayBusy;
            }
            return Action::Nothing;
        }
        match self.wire() {
            // GOAWAY only after the server preface.
            Wire::Http2 if get(&self.server_wrote) => {
                set(&self.told, true);
                counts.http2.fetch_add(1, Ordering::Relaxed);
                Action::GoAway
            }
            Wire::Http1 if self.idle(now, idle_after) => self.mark_candidate(),
            _ => Action::Nothing,
        }
    }

    /// A grace period after the drain start is over (repeats). Marks what may be closed.
    /// `grace_over`: its own `idle_close_grace` has passed since the drain start (what it told
    /// then may be closed now); a connection still to be told is told whatever it says.
    pub fn on_grace_over(
        &self,
        counts: &Counts,
        now: u64,
        idle_after: Duration,
        grace_over: bool,
    ) -> Action {
        if get(&self.closed_by_us) {
            return Action::Nothing;
        }
        match self.wire() {
            // Close only what is known idle: a stream that arrived after the GOAWAY (a client
            // that had it in flight) keeps the connection; the HTTP filter sent it away and the
            // connection manager closes it after that stream. Without the HTTP filter (never
            // tracked) idle cannot be told from busy, so the close is left to the client.
            Wire::Http2 if grace_over && get(&self.told) && self.idle(now, idle_after) => {
                self.mark_candidate()
            }
            // Opened (or first written to) after the drain start and no stream on it: tell it now.
            Wire::Http2 if !get(&self.told) && get(&self.server_wrote) && self.streams() == 0 => {
                set(&self.told, true);
                counts.http2.fetch_add(1, Ordering::Relaxed);
                Action::GoAway
            }
            // Busy at drain start and idle since (a client that stopped sending before its next
            // request would have carried `connection: close`): close it.
            Wire::Http1 if grace_over && !get(&self.told) && self.idle(now, idle_after) => {
                self.mark_candidate()
            }
            _ => Action::Nothing,
        }
    }

    fn mark_candidate(&self) -> Action {
        let since = self.idle_since.load(Ordering::Relaxed).max(1);
        self.candidate_since.store(since, Ordering::Relaxed);
        Action::Nothing
    }

    /// [`CONFIRM_DELAY`] after a check: close what it marked if nothing happened since (no
    /// stream, for HTTP/1.1 no byte read, and no stream that started and ended meanwhile).
    pub fn on_confirm_close(&self, counts: &Counts, now: u64, idle_after: Duration) -> Action {
        let since = self.candidate_since.swap(0, Ordering::Relaxed);
        if since == 0
            || get(&self.closed_by_us)
            || !self.idle(now, idle_after)
            || self.idle_since.load(Ordering::Relaxed).max(1) != since
        {
            return Action::Nothing;
        }
        match self.wire() {
            Wire::Http2 => {
                set(&self.closed_by_us, true);
                Action::Close
            }
            Wire::Http1 => self.close_http1(counts),
            Wire::Unknown => Action::Nothing,
        }
    }

    fn close_http1(&self, counts: &Counts) -> Action {
        set(&self.told, true);
        set(&self.closed_by_us, true);
        counts.http1.fetch_add(1, Ordering::Relaxed);
        Action::Close
    }
}

/// Test-only (`cross-check` builds): the tracker's in-flight count on one connection, compared
/// at every read ([`Conn::cross_check_at_read`]) with the HTTP filter's streams whose response
/// it has not seen end. The tracker must never count fewer: that would let a drain complete
/// early. It may count more, for reasons that only delay the exit: HTTP/1.1 requests read
/// ahead of Envoy's codec (pipelining), streams counted until the connection closes.
#[cfg(feature = "cross-check")]
#[derive(Debug, Default)]
struct CrossCheck {
    in_flight: AtomicU32,
    /// Requests (HTTP/1.1) or streams (HTTP/2) seen to start since the connection opened: by
    /// the tracker, and by the HTTP filter (its request-headers hook).
    started: AtomicU64,
    http_started: AtomicU64,
    /// The HTTP filter's streams whose response it saw end (end of stream through its encode
    /// hooks) and that have not ended yet: their bytes may be written before the stream ends.
    http_done: AtomicU32,
    lost: AtomicBool,
}

/// Process-wide cross-check tallies: checks made, checks with the tracker ahead, disagreements,
/// checks made at request starts (of the checks made).
#[cfg(feature = "cross-check")]
pub static CROSS_CHECKS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

#[cfg(feature = "cross-check")]
impl CrossCheck {
    fn event(&self, started: Option<bool>) {
        match started {
            Some(true) => {
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                self.started.fetch_add(1, Ordering::Relaxed);
            }
            Some(false) => {
                let _ = self
                    .in_flight
                    .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            None => set(&self.lost, true),
        }
    }

    /// The HTTP filter saw a request start (its request-headers hook): the tracker, which reads
    /// every byte before the connection manager parses it, must have seen at least as many
    /// start. The counts in flight are not compared here: the tracker has read the whole
    /// buffer the connection manager is working through, so it may already have ended a
    /// stream the HTTP filter still holds (traced: a client's HEADERS and RST_STREAM in one
    /// read); they are compared at reads (`check`), where both have seen the same bytes.
    fn check_start(&self, id: u64) {
        let http_started = self.http_started.fetch_add(1, Ordering::Relaxed) + 1;
        if get(&self.lost) {
            return;
        }
        let started = self.started.load(Ordering::Relaxed);
        CROSS_CHECKS[0].fetch_add(1, Ordering::Relaxed);
        CROSS_CHECKS[3].fetch_add(1, Ordering::Relaxed);
        if started < http_started {
            CROSS_CHECKS[2].fetch_add(1, Ordering::Relaxed);
            log::error!(
                "graceful_drain: cross-check disagreement on connection {id} at a request start: \
                 the tracker saw {started} requests start, the HTTP filter {http_started}"
            );
        }
    }

    /// `http`: the HTTP filter's streams in flight on the connection. Compared with those whose
    /// response it has not seen end: the tracker must count at least those.
    fn check(&self, id: u64, at: &str, http: u32) {
        if get(&self.lost) {
            return;
        }
        let http = http.saturating_sub(self.http_done.load(Ordering::Relaxed));
        let tracker = self.in_flight.load(Ordering::Relaxed);
        CROSS_CHECKS[0].fetch_add(1, Ordering::Relaxed);
        if tracker > http {
            CROSS_CHECKS[1].fetch_add(1, Ordering::Relaxed);
        } else if tracker < http {
            CROSS_CHECKS[2].fetch_add(1, Ordering::Relaxed);
            log::error!(
                "graceful_drain: cross-check disagreement on connection {id} at a {at}: the \
                 tracker counts {tracker} in flight, the HTTP filter {http} not answered yet"
            );
        }
    }
}

/// The cross-check's tallies so far, for the log: (checks, tracker ahead, disagreements,
/// checks at request starts).
#[cfg(feature = "cross-check")]
pub fn cross_check_tallies() -> (u64, u64, u64, u64) {
    let [a, b, c, d] = &CROSS_CHECKS;
    let g = |x: &AtomicU64| x.load(Ordering::Relaxed);
    (g(a), g(b), g(c), g(d))
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

// ---- index by connection id (for the HTTP filter) ----------------------------------------------

/// Connection ids are small sequential integers: a multiplicative hash spreads them at a fraction
/// of SipHash's cost (this lookup is on every request).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type ConnMap = HashMap<u64, Arc<Conn>, BuildHasherDefault<IdHasher>>;

/// Live connections of this worker thread by id. A connection's network filter and every HTTP
/// stream on it run on one worker, so the HTTP filter finds its connection here without a lock.
/// A connection torn down on another thread (module doc) cannot be removed from its worker's
/// map from there: it is only marked `gone`, and the worker sweeps such entries out as its map
/// grows (amortised: at most about twice the live connections stay in it).
struct Local {
    map: ConnMap,
    sweep_at: usize,
}

const LOCAL_SWEEP_MIN: usize = 64;

thread_local! {
    static LOCAL: std::cell::RefCell<Local> = std::cell::RefCell::new(Local {
        map: ConnMap::default(),
        sweep_at: LOCAL_SWEEP_MIN,
    });
}

/// Make a connection findable by id from its worker (network filter, new connection).
pub fn register(conn: &Arc<Conn>) {
    let _ = LOCAL.try_with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else {
            return;
        };
        if l.map.len() >= l.sweep_at {
            l.map.retain(|_, c| !get(&c.gone));
            l.sweep_at = (2 * l.map.len()).max(LOCAL_SWEEP_MIN);
        }
        l.map.insert(conn.id, conn.clone());
    });
}

/// Forget a connection (network filter destroyed; any thread: on another one it is only marked,
/// and its worker sweeps it out later).
pub fn unregister(conn: &Conn) {
    set(&conn.gone, true);
    let _ = LOCAL.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            if l.map
                .get(&conn.id)
                .is_some_and(|c| std::ptr::eq(&**c, conn))
            {
                l.map.remove(&conn.id);
            }
        }
    });
}

/// A stream counted against a connection ([`Connections::stream_started`]); hand it back to
/// [`stream_ended`]. `Default` is "none".
/// It holds the connection itself, so the end of the stream takes no lock and no lookup (the
/// connection's state outlives its network filter while a stream still holds it: harmless).
#[derive(Debug, Default)]
pub struct StreamMark {
    conn: Option<Arc<Conn>>,
    /// The word attached to the connection (0: none).
    attached: usize,
}

impl StreamMark {
    pub fn is_set(&self) -> bool {
        self.conn.is_some()
    }

    /// Whether a drain start reaches this stream through its connection (a network filter with
    /// a scheduler in front): the stream then needs no scheduler of its own.
    pub fn reached_by_connection(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| get(&c.wakeable))
    }

    /// Whether the connection's exchange tracker counts its requests (its listener's network
    /// filter has `track_requests`): the HTTP filter, in the same chain, then counts none of
    /// them again. Decided per connection, by its own listener.
    pub fn counted_by_tracker(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| get(&c.followed))
    }

    /// The in-flight table lane of the connection's worker, if known.
    pub fn lane(&self) -> Option<Lane> {
        self.conn.as_ref().and_then(|c| c.lane)
    }

    /// The connection's own slot of the in-flight table, if it has one.
    pub fn reserved(&self) -> Option<&ReservedSlot> {
        self.conn.as_ref().and_then(|c| c.reserved.as_ref())
    }

    /// Test-only (`cross-check`): the HTTP filter saw this stream's response end (`true`), or
    /// the stream that had ends now (`false`).
    #[cfg(feature = "cross-check")]
    pub fn cross_check_response_done(&self, done: bool) {
        if let Some(c) = &self.conn {
            if done {
                c.xc.http_done.fetch_add(1, Ordering::Relaxed);
            } else {
                let _ =
                    c.xc.http_done
                        .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
        }
    }

    /// Make this stream the one its connection hands back at drain start ([`Action::WakeStream`])
    /// until it ends. `word` identifies the stream to the glue (non-zero). On the stream's worker.
    pub fn attach(&mut self, word: usize) {
        if let Some(c) = &self.conn {
            c.stream.store(word, Ordering::Relaxed);
            self.attached = word;
        }
    }
}

/// The stream behind `mark` ended at `now()` (`StreamSink::now_nanos`, read only for a set mark;
/// idempotent for a default mark). After this its connection no longer hands it back.
pub fn stream_ended(mark: StreamMark, now: impl FnOnce() -> u64) {
    if let Some(c) = mark.conn {
        if mark.attached != 0 {
            // A later stream may have attached itself since: only take back our own word.
            let _ =
                c.stream
                    .compare_exchange(mark.attached, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
        c.stream_ended(now());
    }
}

// ---- scheduler table shared with the drain side ------------------------------------------------

const SHARDS: usize = 64;

/// Lock a mutex even if poisoned: the slabs hold plain words whose invariants a panic cannot
/// break halfway, and refusing to drain would be worse.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection's waker (an opaque word: the glue stores a scheduler pointer) and how to destroy
/// it. Shared by the table and, briefly, by the drain side while it commits: the last holder
/// destroys it, so a commit never meets a deleted scheduler.
#[derive(Debug)]
pub struct Waker {
    word: usize,
    destroy: fn(usize),
}

impl Waker {
    pub fn new(word: usize, destroy: fn(usize)) -> Arc<Waker> {
        Arc::new(Waker { word, destroy })
    }

    pub fn word(&self) -> usize {
        self.word
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        (self.destroy)(self.word)
    }
}

#[derive(Default)]
struct Slab {
    entries: Vec<Option<Arc<Waker>>>,
    free: Vec<usize>,
}

/// Where a connection's waker sits in [`Wakers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakerSlot {
    shard: usize,
    index: usize,
}

/// Every live connection's waker, sharded per worker thread so registering a connection takes
/// an uncontended lock.
pub struct Wakers {
    shards: Box<[Mutex<Slab>]>,
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl Default for Wakers {
    fn default() -> Self {
        Wakers {
            shards: (0..SHARDS).map(|_| Mutex::new(Slab::default())).collect(),
        }
    }
}

impl Wakers {
    fn my_shard() -> usize {
        SHARD
            .try_with(|s| {
                if s.get() == usize::MAX {
                    s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
                }
                s.get()
            })
            .unwrap_or(0)
    }

    pub fn insert(&self, waker: Arc<Waker>) -> WakerSlot {
        let shard = Self::my_shard();
        let mut s = lock(&self.shards[shard]);
        let index = match s.free.pop() {
            Some(i) => {
                s.entries[i] = Some(waker);
                i
            }
            None => {
                s.entries.push(Some(waker));
                s.entries.len() - 1
            }
        };
        WakerSlot { shard, index }
    }

    /// Take the waker out of the table. Dropping the result destroys it unless the drain side
    /// is committing to it right now (then that commit's end destroys it).
    pub fn remove(&self, slot: WakerSlot) -> Option<Arc<Waker>> {
        let mut s = lock(&self.shards[slot.shard]);
        let w = s.entries.get_mut(slot.index)?.take();
        if w.is_some() {
            s.free.push(slot.index);
        }
        w
    }

    /// Counted references to every live waker; no lock is held once this returns.
    pub fn snapshot(&self) -> Vec<Arc<Waker>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let s = lock(shard);
            all.extend(s.entries.iter().flatten().cloned());
        }
        all
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).entries.iter().flatten().count())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---- the connections of a process (one per Shared) ---------------------------------------------

/// The waker table, the counts, the drain flag and the grace. One per process, owned by the
/// module's shared state (`Shared::connections`); a test makes its own.
pub struct Connections {
    pub wakers: Wakers,
    pub counts: Counts,
    draining: AtomicBool,
    /// The shortest and longest `idle_close_grace` of the network filter configs loaded (ms;
    /// 0 for none): the re-checks run at the shortest, for as long as the longest needs.
    grace_min_ms: AtomicU64,
    grace_max_ms: AtomicU64,
    commit: OnceLock<fn(usize, u64)>,
    /// A network filter that follows exchanges (`track_requests`) is loaded: its connections'
    /// requests are in the in-flight table (connection mode).
    tracking: AtomicBool,
    /// Open connections whose tracker lost the thread: their requests are not in the table, so
    /// while any is open the drain also waits for Envoy's gauges.
    untracked_open: AtomicUsize,
    /// Followed connections whose next request's head has begun and is not complete yet.
    partial_heads: AtomicUsize,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            wakers: Wakers::default(),
            counts: Counts::default(),
            draining: AtomicBool::new(false),
            grace_min_ms: AtomicU64::new(0),
            grace_max_ms: AtomicU64::new(0),
            commit: OnceLock::new(),
            tracking: AtomicBool::new(false),
            untracked_open: AtomicUsize::new(0),
            partial_heads: AtomicUsize::new(0),
        }
    }
}

impl Connections {
    /// How the drain side wakes a connection (installed once by the network-filter glue).
    pub fn install_commit(&self, commit: fn(usize, u64)) {
        let _ = self.commit.set(commit);
    }

    /// A network filter config with these settings was loaded (any listener).
    pub fn note_config(&self, settings: ConnSettings) {
        let ms = (settings.idle_close_grace.as_millis() as u64).max(1);
        let _ = self
            .grace_min_ms
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m == 0 || ms < m).then_some(ms)
            });
        self.grace_max_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The shortest and longest `idle_close_grace` of the configs loaded (the default if none).
    pub fn graces(&self) -> (Duration, Duration) {
        let ms = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => DEFAULT_IDLE_CLOSE_GRACE,
            v => Duration::from_millis(v),
        };
        (ms(&self.grace_min_ms), ms(&self.grace_max_ms))
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// A network filter that follows exchanges was loaded (its config's `track_requests`).
    pub fn note_tracking(&self) {
        self.tracking.store(true, Ordering::Relaxed);
    }

    /// Whether the in-flight table holds every request of the connections this module follows:
    /// a tracking network filter is loaded and none of its open connections lost the thread.
    pub fn tracking_is_exact(&self) -> bool {
        self.tracking.load(Ordering::Relaxed) && self.untracked_open.load(Ordering::Relaxed) == 0
    }

    /// A followed connection lost the thread (`opened`) or one that had closed (`!opened`).
    pub fn note_untracked(&self, opened: bool) {
        if opened {
            self.untracked_open.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = self
                .untracked_open
                .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// A followed connection's request head began (`true`) or completed, or the connection
    /// stopped being followed (`false`). Envoy's connection manager makes a stream at a head's
    /// first byte (counted in its gauge from then), the tracker takes a ticket at the head's end:
    /// in between, the drain counts the head here (`Shared::poll`).
    pub fn note_partial_head(&self, began: bool) {
        if began {
            self.partial_heads.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = self
                .partial_heads
                .try_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    /// Followed connections with a request head on its way.
    pub fn partial_heads(&self) -> usize {
        self.partial_heads.load(Ordering::SeqCst)
    }

    /// Open connections whose tracker lost the thread.
    pub fn untracked_open(&self) -> usize {
        self.untracked_open.load(Ordering::Relaxed)
    }

    /// Wake every connection with `event`. Returns how many were woken.
    pub fn wake_all(&self, event: u64) -> usize {
        let Some(commit) = self.commit.get() else {
            return 0;
        };
        // Commit without holding any lock: a commit may run a connection's destroy hook on
        // this thread (module doc), which takes the table's lock to leave it.
        let all = self.wakers.snapshot();
        for w in &all {
            commit(w.word(), event);
        }
        all.len()
    }

    /// Mark the drain started (once). Returns false if it already was.
    pub fn mark_draining(&self) -> bool {
        !self.draining.swap(true, Ordering::SeqCst)
    }

    /// The HTTP filter saw a stream start on the connection `id()` names (its ConnectionId
    /// attribute, only asked for when a network filter is loaded). Returns the mark to pass to
    /// [`stream_ended`]; none if the connection has no network filter.
    pub fn stream_started(&self, id: impl FnOnce() -> Option<u64>) -> StreamMark {
        if self.commit.get().is_none() {
            return StreamMark::default(); // no network filter in this process: nothing to count
        }
        let Some(id) = id() else {
            return StreamMark::default();
        };
        let conn = LOCAL
            .try_with(|l| {
                let l = l.try_borrow().ok()?;
                l.map.get(&id).filter(|c| !get(&c.gone)).cloned()
            })
            .ok()
            .flatten();
        if let Some(c) = &conn {
            c.stream_started();
            #[cfg(feature = "cross-check")]
            c.xc.check_start(c.id);
        }
        StreamMark { conn, attached: 0 }
    }

    /// Idle connections told so far (status JSON, drain-complete log line).
    pub fn idle_told(&self) -> IdleTold {
        self.counts.snapshot()
    }

    /// Integration point for the drain start (`Shared::start_drain`): wake every connection now
    /// so idle ones are told, and once more after the grace so they are closed. Any thread;
    /// idempotent. The re-checks run on a thread owned by `threads`, whose gate keeps their
    /// commits out of Envoy once the exit is released; `drained` only ends them early.
    pub fn drain_started(
        &'static self,
        threads: &'static Threads,
        on_panic: fn(),
        drained: impl Fn() -> bool + Send + 'static,
    ) {
        if !self.mark_draining() || self.commit.get().is_none() {
            return; // already started, or no network filter loaded
        }
        let n = self.wake_all(EVENT_DRAIN_STARTED);
        let (shortest, longest) = self.graces();
        log::info!(
            "graceful_drain: telling idle connections about the drain ({n} open connections; idle \
             HTTP/2 get GOAWAY now and a close after their listener's idle_close_grace \
             ({shortest:?}{}), idle HTTP/1.1 a close)",
            if longest > shortest {
                format!(" to {longest:?}")
            } else {
                String::new()
            }
        );
        let grace = shortest.max(Duration::from_millis(10));
        // Enough rounds at the shortest grace for the longest to pass, then RECHECKS more.
        let rounds = RECHECKS + (longest.as_millis() / grace.as_millis().max(1)) as u32;
        // One timer thread per process: network filters have no timer of their own, and the
        // scheduler commit is thread-safe. It ends after its rounds, or when the module stops.
        let spawned = threads.spawn("graceful_drain_idle_grace", on_panic, move || {
            for round in 0..=rounds {
                if round > 0 {
                    if !threads.sleep(grace.saturating_sub(CONFIRM_DELAY)) || drained() {
                        return;
                    }
                    self.wake_all(EVENT_GRACE_OVER);
                }
                if !threads.sleep(CONFIRM_DELAY) || drained() {
                    return;
                }
                self.wake_all(EVENT_CONFIRM_CLOSE);
            }
        });
        if let Err(e) = spawned {
            log::warn!("graceful_drain: no grace timer thread ({e}); idle HTTP/2 closed at exit");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 10_000_000_000;
    const IDLE: Duration = Duration::from_secs(1);
    /// Long enough after T0 for a connection idle since T0 to count as idle.
    const LATER: u64 = T0 + 2_000_000_000;

    /// A check (drain start or grace over) followed by its confirmation, nothing in between.
    fn check_then_confirm(c: &Conn, counts: &Counts, at_drain_start: bool) -> Action {
        let first = if at_drain_start {
            c.on_drain_started(counts, LATER, IDLE)
        } else {
            c.on_grace_over(counts, LATER, IDLE, true)
        };
        assert_eq!(first, Action::Nothing, "a check only marks");
        c.on_confirm_close(counts, LATER + 50_000_000, IDLE)
    }

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    /// This test's own connection state, as with the network filter loaded (a commit installed).
    fn with_network_filter() -> Connections {
        let c = Connections::default();
        c.install_commit(|_, _| {});
        c
    }

    fn h2_conn(id: u64) -> Conn {
        let c = Conn::new(id);
        c.on_read(PREFACE.len() + 9, &PREFACE[..H2_MAGIC_PREFIX.len()]);
        c
    }

    #[test]
    fn detects_http2_from_the_magic_prefix_like_the_connection_manager() {
        let c = h2_conn(1);
        assert_eq!(c.wire(), Wire::Http2);
        assert!(!c.sniffing());
        c.on_read(10, b"GET / HTTP/1.1"); // later bytes change nothing
        assert_eq!(c.wire(), Wire::Http2);
    }

    #[test]
    fn anything_else_is_http1() {
        // A first read shorter than the prefix makes the connection manager pick HTTP/1 too.
        for first in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"P",
            b"PRI",
            b"PRX * HTTP/2",
            b"POST /",
        ] {
            let c = Conn::new(1);
            c.on_read(first.len(), first);
            assert_eq!(
                c.wire(),
                Wire::Http1,
                "{:?}",
                String::from_utf8_lossy(first)
            );
        }
        let c = Conn::new(2);
        c.on_read(0, b"");
        assert_eq!(c.wire(), Wire::Unknown, "an empty read decides nothing");
        assert!(c.sniffing());
    }

    #[test]
    fn goaway_frame_is_a_no_error_goaway_for_every_stream() {
        let f = GOAWAY_NO_ERROR;
        assert_eq!(
            u32::from_be_bytes([0, f[0], f[1], f[2]]),
            8,
            "payload length"
        );
        assert_eq!(f[3], 7, "type GOAWAY");
        assert_eq!(f[4], 0, "flags");
        assert_eq!(u32::from_be_bytes([f[5], f[6], f[7], f[8]]), 0, "stream 0");
        assert_eq!(
            u32::from_be_bytes([f[9], f[10], f[11], f[12]]),
            (1 << 31) - 1
        );
        assert_eq!(
            u32::from_be_bytes([f[13], f[14], f[15], f[16]]),
            0,
            "NO_ERROR"
        );
    }

    #[test]
    fn idle_http2_gets_goaway_then_close_once() {
        let counts = Counts::default();
        let c = h2_conn(1);
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing,
            "no GOAWAY before the server preface"
        );
        c.on_write(9);
        c.stream_started();
        c.stream_ended(T0);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing,
            "once"
        );
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Nothing);
        assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
    }

    #[test]
    fn http2_without_goaway_at_drain_start_gets_it_at_a_later_check() {
        // Server preface not written yet at the drain start (or connected during the drain).
        let counts = Counts::default();
        let c = h2_conn(1);
        assert_eq!(c.on_drain_started(&counts, T0, IDLE), Action::Nothing);
        c.on_write(9);
        assert_eq!(c.on_grace_over(&counts, T0, IDLE, true), Action::GoAway);
        assert_eq!(c.on_grace_over(&counts, T0, IDLE, true), Action::Nothing);
        assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
    }

    #[test]
    fn http2_control_frames_do_not_make_it_busy() {
        let counts = Counts::default();
        let c = h2_conn(1);
        c.on_write(9);
        c.stream_started();
        c.stream_ended(T0);
        c.on_read(9, b""); // SETTINGS ack, PING...
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
    }

    #[test]
    fn busy_connection_hands_back_its_latest_request() {
        let conns = with_network_filter();
        let counts = Counts::default();
        let c = Arc::new(h2_conn(91));
        c.on_write(9);
        register(&c);
        let mut first = conns.stream_started(|| Some(91));
        assert!(
            !first.reached_by_connection(),
            "no scheduler on the network filter"
        );
        c.set_wakeable();
        assert!(first.reached_by_connection());
        first.attach(0x1000);
        let mut second = conns.stream_started(|| Some(91));
        second.attach(0x2000);
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::WakeStream(0x2000),
            "the latest request"
        );
        // The older one ending does not take the latest one's place away.
        stream_ended(first, || T0);
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::WakeStream(0x2000)
        );
        assert_eq!(counts.snapshot(), IdleTold::default(), "busy: not idle");
        unregister(&c);
        stream_ended(second, || T0);
    }

    #[test]
    fn busy_http2_whose_latest_request_ended_gets_goaway_from_here() {
        let conns = with_network_filter();
        let counts = Counts::default();
        let c = Arc::new(h2_conn(92));
        c.set_wakeable();
        register(&c);
        let mut older = conns.stream_started(|| Some(92));
        older.attach(0x1000);
        let mut latest = conns.stream_started(|| Some(92));
        latest.attach(0x2000);
        stream_ended(latest, || T0);
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing,
            "no GOAWAY before the server preface"
        );
        c.on_write(9);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAwayBusy);
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing,
            "once"
        );
        assert_eq!(counts.snapshot(), IdleTold::default(), "busy: not idle");
        // Closed once idle, like an idle one told at drain start (ended on the test's clock).
        c.stream_ended(T0);
        drop(older);
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
        unregister(&c);
    }

    #[test]
    fn busy_http1_without_an_attached_request_is_left_to_its_own_waker() {
        let counts = Counts::default();
        let c = Conn::new(1);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        c.stream_started();
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
        assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
        assert_eq!(counts.snapshot(), IdleTold::default());
    }

    #[test]
    fn http2_stream_arriving_after_goaway_keeps_the_connection() {
        let counts = Counts::default();
        let c = h2_conn(1);
        c.on_write(9);
        c.stream_started();
        c.stream_ended(T0);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
        c.stream_started(); // the client had it in flight
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Nothing);
    }

    /// A frame header and payload as a client sends them.
    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// What a connection pool that pre-connects sends: preface, SETTINGS, WINDOW_UPDATE, a
    /// SETTINGS ack and a PING, no stream.
    fn streamless_client_bytes() -> Vec<u8> {
        let mut b = PREFACE.to_vec();
        b.extend(frame(4, 0, &[0, 3, 0, 0, 0, 100]));
        b.extend(frame(8, 0, &[0, 0xf, 0, 1]));
        b.extend(frame(4, 0, &[]));
        b.extend(frame(6, 0, &[0; 8]));
        b.extend(frame(2, 3, &[0, 0, 0, 0, 16]));
        b
    }

    #[test]
    fn first_stream_follows_control_frames_across_any_split() {
        let control = streamless_client_bytes();
        let mut opened = control.clone();
        opened.extend(frame(1, 1, &[0x82, 0x86, 0x84]));
        for step in [1, 2, 5, 9, 13, 100, control.len()] {
            let mut w = FirstStream::default();
            assert!(
                control.chunks(step).all(|c| w.feed(c)),
                "control frames only, fed {step} bytes at a time"
            );
            let mut w = FirstStream::default();
            assert!(
                !opened.chunks(step).all(|c| w.feed(c)),
                "HEADERS seen, fed {step} bytes at a time"
            );
        }
    }

    /// The network filter's read glue: the client's bytes in reads of any split, each read's
    /// slices split again, as Envoy's buffer chunks may be.
    fn read_in(c: &Conn, bytes: &[u8], step: usize) -> FirstStream {
        let mut watch = FirstStream::default();
        for read in bytes.chunks(step) {
            if c.following_bytes() {
                let slices = || Some(read.chunks(3));
                c.on_followed_read(read.len(), &slices, &mut watch);
            } else {
                c.on_read(read.len(), &[]);
            }
        }
        watch
    }

    #[test]
    fn followed_reads_detect_the_protocol_and_the_first_stream_across_any_split() {
        let control = streamless_client_bytes();
        let mut opened = control.clone();
        opened.extend(frame(1, 1, &[0x82, 0x86, 0x84]));
        // From 12 bytes a read: a shorter first read is HTTP/1 to the connection manager too
        // (`determineNextProtocol` looks at the first data only), so to this.
        for step in [12, 13, 40, opened.len()] {
            let c = Conn::new(1);
            read_in(&c, &control, step);
            assert_eq!(c.wire(), Wire::Http2, "{step}");
            assert!(
                c.watching_first_stream(),
                "no stream yet ({step} bytes a read)"
            );
            let c = Conn::new(2);
            read_in(&c, &opened, step);
            assert!(
                !c.following_bytes(),
                "a stream opened ({step} bytes a read)"
            );
        }
        let c = Conn::new(3);
        read_in(&c, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n", 5);
        assert_eq!(c.wire(), Wire::Http1);
        assert!(
            !c.following_bytes(),
            "HTTP/1.1 needs no bytes after the first"
        );
        // A read whose slices Envoy could not give: detection waits, the first stream is assumed.
        let c = h2_conn(4);
        let none = || None::<std::slice::Chunks<'static, u8>>;
        c.on_followed_read(9, &none, &mut FirstStream::default());
        assert!(
            !c.following_bytes(),
            "bytes it could not read may open a stream"
        );
    }

    #[test]
    fn a_scheduled_event_says_what_to_do_and_which_counters_move() {
        let connections = with_network_filter();
        let c = h2_conn(5);
        c.on_write(9);
        let never = |_, _| panic!("an idle connection is not sent away as busy");
        let told = c.on_scheduled(&connections, EVENT_DRAIN_STARTED, LATER, never);
        assert_eq!(
            told,
            Scheduled {
                action: Action::GoAway,
                told_http1: false,
                told_http2: true,
                sent_away_http2: false,
                sent_away_http1: false,
            }
        );
        let unknown = c.on_scheduled(&connections, 99, LATER, never);
        assert_eq!(unknown.action, Action::Nothing);
        assert!(!unknown.told_http2, "counted once");
    }

    /// Two listeners with their own idle_close_grace (1 s and 4 s): at a re-check 1.5 s after
    /// the drain start, the first's idle HTTP/2 connection (sent GOAWAY at the start) is closed,
    /// the second's is not yet; it is at a re-check past its own 4 s. Before, the settings were
    /// process-wide: the last config loaded set them for every listener.
    #[test]
    fn each_connection_closes_after_its_own_listener_s_grace() {
        let connections = with_network_filter();
        let grace = |ms| ConnSettings {
            idle_close_grace: Duration::from_millis(ms),
            ..ConnSettings::default()
        };
        let short = h2_conn(1).with_settings(grace(1000));
        let long = h2_conn(2).with_settings(grace(4000));
        let at = |ms: u64| LATER + ms * 1_000_000;
        let any = |_, _| true;
        for c in [&short, &long] {
            c.on_write(9);
            let told = c.on_scheduled(&connections, EVENT_DRAIN_STARTED, at(0), any);
            assert_eq!(told.action, Action::GoAway);
        }
        let check_then_confirm = |c: &Conn, ms: u64| {
            let first = c
                .on_scheduled(&connections, EVENT_GRACE_OVER, at(ms), any)
                .action;
            assert_eq!(first, Action::Nothing, "a check only marks");
            c.on_scheduled(&connections, EVENT_CONFIRM_CLOSE, at(ms + 50), any)
                .action
        };
        assert_eq!(
            check_then_confirm(&long, 1500),
            Action::Nothing,
            "within its grace"
        );
        assert_eq!(
            check_then_confirm(&short, 1500),
            Action::Close,
            "past its grace"
        );
        assert_eq!(
            check_then_confirm(&long, 4500),
            Action::Close,
            "past its own"
        );
    }

    /// The re-check timer wakes the workers one grace after it woke them for the drain start;
    /// a worker that stamped the drain start a few milliseconds after that wake-up still closes
    /// its connections at that first re-check (the close, CONFIRM_DELAY after it, is past the
    /// grace the client was given), not a whole grace later. Before, the check alone was judged,
    /// a few milliseconds short. The connections: an HTTP/1.1 one whose last request ended just
    /// before the drain start (not idle yet then), and an idle HTTP/2 one told at the start.
    #[test]
    fn a_connection_whose_worker_saw_the_drain_start_late_closes_at_the_first_re_check() {
        let connections = with_network_filter();
        let at = |ms: u64| LATER + ms * 1_000_000;
        let any = |_, _| true;
        let grace = DEFAULT_IDLE_CLOSE_GRACE.as_millis() as u64;
        let confirm = CONFIRM_DELAY.as_millis() as u64;
        let conns = || {
            let h1 = Conn::new(7);
            h1.on_read(20, b"GET / HTTP/1.1\r\n");
            h1.exchange_started();
            h1.exchange_ended(at(0) - 200_000_000);
            let h2 = h2_conn(8);
            h2.on_write(9);
            // The timer woke the workers at at(0); they stamped the drain start 4 ms later.
            let h1_start = h1.on_scheduled(&connections, EVENT_DRAIN_STARTED, at(4), any);
            assert_eq!(
                h1_start.action,
                Action::Nothing,
                "busy 200 ms ago: not idle yet"
            );
            let h2_start = h2.on_scheduled(&connections, EVENT_DRAIN_STARTED, at(4), any);
            assert_eq!(h2_start.action, Action::GoAway);
            [h1, h2]
        };
        // A re-check at `check_ms`, its confirmation CONFIRM_DELAY later.
        let recheck = |c: &Conn, check_ms: u64| {
            let first = c.on_scheduled(&connections, EVENT_GRACE_OVER, at(check_ms), any);
            assert_eq!(first.action, Action::Nothing, "a check only marks");
            c.on_scheduled(
                &connections,
                EVENT_CONFIRM_CLOSE,
                at(check_ms + confirm),
                any,
            )
            .action
        };
        // The timer's first re-check: one grace after its wake-up (after its CONFIRM_DELAY
        // for the drain start's confirmation, it sleeps grace - CONFIRM_DELAY).
        for c in conns() {
            assert_eq!(recheck(&c, grace), Action::Close, "{:?}", c.wire());
        }
        // A re-check earlier than that closes neither: the clients had less than their grace.
        for c in conns() {
            assert_eq!(
                recheck(&c, grace - confirm - 10),
                Action::Nothing,
                "{:?}",
                c.wire()
            );
        }
    }

    /// A busy HTTP/1.1 connection its tracker follows is counted as sent away at the drain
    /// start (its in-flight response gets `connection: close` from the tracker); one the HTTP
    /// filter counts, or one the tracker lost, is not counted here.
    #[test]
    fn a_followed_busy_http1_connection_is_counted_as_sent_away_at_the_drain_start() {
        let connections = with_network_filter();
        let c = Conn::new(6);
        c.on_read(20, b"GET / HTTP/1.1\r\n");
        c.set_followed(true);
        c.exchange_started();
        let mut asked = Vec::new();
        let told = c.on_scheduled(&connections, EVENT_DRAIN_STARTED, LATER, |id, h2| {
            asked.push((id, h2));
            true
        });
        assert_eq!(told.action, Action::Nothing);
        assert!(told.sent_away_http1);
        assert_eq!(asked, [(6, false)]);
        let lost = Conn::new(7);
        lost.on_read(20, b"GET / HTTP/1.1\r\n");
        lost.set_followed(true);
        lost.exchange_started();
        lost.set_untracked();
        let never = |_, _| panic!("not counted");
        let told = lost.on_scheduled(&connections, EVENT_DRAIN_STARTED, LATER, never);
        assert!(!told.sent_away_http1);
    }

    #[test]
    fn first_stream_ends_on_anything_it_does_not_follow() {
        for bad in [
            frame(0, 1, b"data"),      // DATA
            frame(3, 1, &[0; 4]),      // RST_STREAM
            frame(4, 1, &[]),          // SETTINGS on a stream
            frame(0x42, 0, &[]),       // unknown type
            frame(6, 0, &[0; 20_000]), // larger than the default maximum frame size
        ] {
            let mut b = PREFACE.to_vec();
            b.extend(bad);
            assert!(!FirstStream::default().feed(&b), "{:?}", &b[24..33]);
        }
        // The same buffer fed twice (a filter after this one left it undrained): the preface read
        // as a frame header does not fit.
        let mut w = FirstStream::default();
        assert!(w.feed(PREFACE));
        assert!(!w.feed(PREFACE));
    }

    #[test]
    fn http2_that_never_opened_a_stream_is_closed_after_the_grace() {
        let counts = Counts::default();
        let c = h2_conn(1);
        assert!(c.watching_first_stream());
        c.on_write(9);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
        assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
        // A stream opened between the check and its confirmation keeps the connection.
        let c = h2_conn(2);
        c.on_write(9);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
        assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
        c.first_stream_seen();
        assert_eq!(
            c.on_confirm_close(&counts, LATER + 50_000_000, IDLE),
            Action::Nothing
        );
        // An HTTP/1.1 connection is never watched.
        let h1 = Conn::new(3);
        h1.on_read(16, b"GET / HTTP/1.1\r\n");
        assert!(!h1.watching_first_stream());
    }

    #[test]
    fn untracked_http2_gets_goaway_but_no_close() {
        // It may have carried a stream that no HTTP filter saw (no HTTP filter on the listener):
        // the GOAWAY is safe either way, a close is not.
        let counts = Counts::default();
        let c = h2_conn(1);
        c.first_stream_seen();
        c.on_write(9);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
        assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    }

    #[test]
    fn idle_http1_is_closed_at_drain_start() {
        let counts = Counts::default();
        let c = Conn::new(1);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        c.stream_started();
        c.on_write(100);
        c.stream_ended(T0);
        assert_eq!(check_then_confirm(&c, &counts, true), Action::Close);
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Nothing);
        assert_eq!(counts.snapshot(), IdleTold { http1: 1, http2: 0 });
    }

    #[test]
    fn http1_with_a_request_read_or_in_flight_is_not_closed() {
        let counts = Counts::default();
        let c = Conn::new(1);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        c.stream_started();
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing,
            "in flight"
        );
        c.stream_ended(T0);
        // Bytes of the next request read, its stream not started yet (headers incomplete).
        c.on_read(10, b"");
        assert_eq!(
            c.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing,
            "request on its way"
        );
        c.stream_started();
        c.stream_ended(T0);
        // The response carried connection: close; whatever is left is closed after the grace.
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
        assert_eq!(counts.snapshot(), IdleTold { http1: 1, http2: 0 });
    }

    #[test]
    fn http1_between_back_to_back_requests_is_busy_not_idle() {
        // A keep-alive client sending back to back: its last response ended just now.
        let counts = Counts::default();
        let c = Conn::new(1);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        c.stream_started();
        c.stream_ended(T0);
        let just_after = T0 + 1_000_000; // 1 ms
        assert_eq!(
            c.on_drain_started(&counts, just_after, IDLE),
            Action::Nothing
        );
        assert_eq!(
            c.on_grace_over(&counts, T0 + 500_000_000, IDLE, true),
            Action::Nothing
        );
        // The client stopped sending: a later check closes it.
        assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
        assert_eq!(counts.snapshot(), IdleTold { http1: 1, http2: 0 });
    }

    #[test]
    fn http1_request_arriving_between_check_and_confirmation_is_not_cut() {
        let counts = Counts::default();
        let c = Conn::new(1);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        c.stream_started();
        c.stream_ended(T0);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
        // The client's next request was in the socket buffer: read before the confirmation.
        c.on_read(40, b"");
        assert_eq!(c.on_confirm_close(&counts, LATER, IDLE), Action::Nothing);
        // Or read, served and finished within the confirmation delay.
        let c = Conn::new(2);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        c.stream_started();
        c.stream_ended(T0);
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
        c.on_read(40, b"");
        c.stream_started();
        c.stream_ended(LATER + 10_000_000);
        assert_eq!(
            c.on_confirm_close(&counts, LATER + 50_000_000, IDLE),
            Action::Nothing
        );
        // A confirmation without a check closes nothing.
        assert_eq!(
            c.on_confirm_close(&counts, LATER * 2, IDLE),
            Action::Nothing
        );
        assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 0 });
    }

    #[test]
    fn http1_never_tracked_is_not_closed() {
        // No HTTP filter saw a stream: idle cannot be told from busy.
        let counts = Counts::default();
        let c = Conn::new(1);
        c.on_read(40, b"GET / HTTP/1.1\r\n");
        assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
        assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
        let fresh = Conn::new(2);
        assert_eq!(
            fresh.on_drain_started(&counts, LATER, IDLE),
            Action::Nothing
        );
    }

    #[test]
    fn streams_are_counted_through_the_index() {
        let conns = with_network_filter();
        let c = Arc::new(Conn::new(77));
        assert!(!conns.stream_started(|| Some(77)).is_set(), "unknown id");
        register(&c);
        let m1 = conns.stream_started(|| Some(77));
        let m2 = conns.stream_started(|| Some(77));
        assert!(m1.is_set());
        assert!(!conns.stream_started(|| None).is_set());
        assert_eq!(c.streams(), 2);
        stream_ended(m1, || T0);
        stream_ended(StreamMark::default(), || T0);
        assert_eq!(c.streams(), 1);
        // Another thread (a teardown elsewhere) can unregister it; the mark still holds the
        // connection's state, so its stream ends without a lookup and without harm.
        let c2 = c.clone();
        std::thread::spawn(move || unregister(&c2)).join().unwrap();
        assert!(!conns.stream_started(|| Some(77)).is_set(), "unregistered");
        stream_ended(m2, || T0);
        assert_eq!(c.streams(), 0);
        // Found only on the thread that registered it (a connection's worker).
        let d = Arc::new(Conn::new(78));
        register(&d);
        let elsewhere = std::thread::scope(|sc| {
            sc.spawn(|| conns.stream_started(|| Some(78)).is_set())
                .join()
                .unwrap()
        });
        assert!(!elsewhere);
        assert!(conns.stream_started(|| Some(78)).is_set());
        unregister(&d);
        assert!(!conns.stream_started(|| Some(78)).is_set());
    }

    #[test]
    fn without_the_network_filter_no_stream_is_counted() {
        // No commit installed: no network filter in this process, so the HTTP filter counts
        // nothing, even for a connection id this thread knows.
        let conns = Connections::default();
        let c = Arc::new(Conn::new(79));
        register(&c);
        let asked = std::cell::Cell::new(false);
        let m = conns.stream_started(|| {
            asked.set(true);
            Some(79)
        });
        assert!(!m.is_set());
        assert!(!asked.get(), "the connection id is not even asked for");
        assert_eq!(c.streams(), 0);
        // Once a network filter installs its commit, the same connection is found.
        conns.install_commit(|_, _| {});
        let m = conns.stream_started(|| Some(79));
        assert!(m.is_set());
        assert_eq!(c.streams(), 1);
        stream_ended(m, || T0);
        unregister(&c);
    }

    #[test]
    fn connections_torn_down_elsewhere_are_swept_out_of_their_workers_map() {
        let net = with_network_filter();
        let conns: Vec<_> = (1000..1000 + 3 * LOCAL_SWEEP_MIN as u64)
            .map(|id| Arc::new(Conn::new(id)))
            .collect();
        for c in &conns {
            register(c);
        }
        let elsewhere = conns.clone();
        std::thread::spawn(move || elsewhere.iter().for_each(|c| unregister(c)))
            .join()
            .unwrap();
        // Still in this thread's map (marked gone) until registrations here sweep them out.
        assert!(
            !net.stream_started(|| Some(1000)).is_set(),
            "gone connections are not found"
        );
        let all_live = || LOCAL.with(|l| l.borrow().map.values().all(|c| !get(&c.gone)));
        let mut fresh = vec![];
        for id in 5000..5000 + 6 * LOCAL_SWEEP_MIN as u64 {
            let c = Arc::new(Conn::new(id));
            register(&c);
            fresh.push(c);
            if all_live() {
                break;
            }
        }
        assert!(all_live(), "gone entries were never swept out");
        assert!(
            fresh.len() <= conns.len() + 1,
            "swept only after {} registrations",
            fresh.len()
        );
        for c in &fresh {
            unregister(c);
        }
        assert_eq!(LOCAL.with(|l| l.borrow().map.len()), 0);
    }

    static DESTROYED: AtomicUsize = AtomicUsize::new(0);
    fn destroy(w: usize) {
        DESTROYED.fetch_add(w, Ordering::SeqCst);
    }

    #[test]
    fn wakers_insert_remove_snapshot_and_destroy_by_the_last_holder() {
        let w = Wakers::default();
        let a = w.insert(Waker::new(0x10, destroy));
        let b = w.insert(Waker::new(0x20, destroy));
        assert_eq!(w.len(), 2);
        let snap = w.snapshot();
        assert_eq!(snap.len(), 2);
        // The owner leaves while the drain side holds the snapshot: not destroyed yet.
        drop(w.remove(a));
        assert!(w.remove(a).is_none(), "twice is harmless");
        assert_eq!(DESTROYED.load(Ordering::SeqCst) & 0x10, 0);
        drop(snap);
        assert_eq!(DESTROYED.load(Ordering::SeqCst) & 0x10, 0x10, "last holder");
        let c = w.insert(Waker::new(0x40, destroy));
        let mut seen: Vec<usize> = w.snapshot().iter().map(|x| x.word()).collect();
        seen.sort();
        assert_eq!(seen, [0x20, 0x40]);
        drop(w.remove(b));
        drop(w.remove(c));
        assert!(w.is_empty());
        // From other threads (other shards).
        let w = Arc::new(Wakers::default());
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let w = w.clone();
                std::thread::spawn(move || w.insert(Waker::new(0x100 * (i + 1), destroy)))
            })
            .collect();
        let slots: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(w.len(), 4);
        for s in slots {
            assert!(w.remove(s).is_some());
        }
        assert!(w.is_empty());
    }

    #[test]
    fn wake_all_commits_each_live_waker_and_drain_is_marked_once() {
        static SUM: AtomicUsize = AtomicUsize::new(0);
        let c = Connections::default();
        assert_eq!(c.wake_all(EVENT_DRAIN_STARTED), 0, "no commit installed");
        c.install_commit(|w, e| {
            assert_eq!(e, EVENT_DRAIN_STARTED);
            SUM.fetch_add(w, Ordering::SeqCst);
        });
        let a = c.wakers.insert(Waker::new(0x1000, |_| {}));
        let _b = c.wakers.insert(Waker::new(0x2000, |_| {}));
        drop(c.wakers.remove(a));
        assert_eq!(c.wake_all(EVENT_DRAIN_STARTED), 1);
        assert_eq!(SUM.load(Ordering::SeqCst), 0x2000);
        assert!(c.mark_draining());
        assert!(!c.mark_draining());
        assert!(c.is_draining());
        assert_eq!(
            c.graces(),
            (DEFAULT_IDLE_CLOSE_GRACE, DEFAULT_IDLE_CLOSE_GRACE),
            "no config: the default"
        );
        c.note_config(ConnSettings {
            idle_close_grace: Duration::from_millis(1500),
            ..ConnSettings::default()
        });
        c.note_config(ConnSettings {
            idle_close_grace: Duration::from_millis(4000),
            ..ConnSettings::default()
        });
        assert_eq!(
            c.graces(),
            (Duration::from_millis(1500), Duration::from_millis(4000)),
            "two listeners: each keeps its own"
        );
    }
}
