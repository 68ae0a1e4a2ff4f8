//! One connection's requests, followed from its bytes by the network filter (connection mode:
//! no HTTP filter on the data path). The glue (`ffi::network`) hands over the bytes it sees in
//! both directions; an [`crate::exchange::Tracker`] follows their framing, and this turns what it
//! reports into the module's bookkeeping, as the HTTP filter's hooks do in filter mode:
//! - a request (HTTP/1.1) or stream (HTTP/2) that starts takes a ticket of the in-flight table,
//!   on the connection's own slot or its worker's lane, and counts against its connection
//!   ([`Conn::exchange_started`]), so the drain's count, the status's ages and the idle
//!   checks of [`crate::connections`] see it;
//! - while a drain is under way, an HTTP/1.1 request its `User-Agent` or path marks as a health
//!   check keeps its connection busy but is not work (no ticket), as in the HTTP filter;
//! - what the tracker cannot follow (`Event::Lost`) gives its tickets back and marks the
//!   connection untracked: never idle, never closed early, and while it is open the drain waits
//!   for Envoy's gauges too (`Connections::tracking_is_exact`). Its requests are given back
//!   through `Registry::give_back`, so the drain's view of Envoy's gauges keeps counting them
//!   until a gauge pass that started after the loss shows them (never an undercount between).
//!
//! Bytes fed twice: Envoy's HTTP/1.1 codec takes one request at a time. It stops reading after
//! a complete request and leaves the bytes behind it in the read buffer, which the next read
//! hook sees again (`src/ffi/ENVOY_FACTS.md` §6). Which bytes those are cannot be told from
//! the count alone (Envoy may have answered the request at once and read on, or later), so a
//! read finds them by where they are, and checks them by what they are:
//! - where: bytes Envoy left in its buffer stay where they were in memory (a drain moves a
//!   slice's start, never its bytes), so a buffer whose first byte lies strictly inside a slice
//!   of the previous read's buffer starts at that byte's offset, already fed. A buffer that
//!   starts anywhere else starts with new bytes (a slice Envoy freed and reuses from its start
//!   is not inside).
//! - what: the bytes left behind end where the previous buffer ended, so their last bytes must
//!   be that buffer's last [`TAIL`] bytes, kept at each read. Memory reused inside an old slice
//!   for new bytes fails the check unless those bytes agree there too; a failed check loses
//!   the connection (handed to Envoy's gauges) rather than guess.
//! - when: only a read that fed bytes past a complete request ([`Tracker::pipelined`]) can
//!   have left any (Envoy's codec takes every byte up to the end of a request, and all of
//!   them for HTTP/2); after any other read, every byte of the next is new, wherever it is.
//! - where, checked by what the codec does: Envoy's HTTP/1.1 codec pauses only at a request's
//!   end, so bytes it left start where a request ended (the follower keeps the client offsets of
//!   the last [`crate::exchange::REQUEST_ENDS`] ends). A buffer placed anywhere else inside the
//!   last one (memory Envoy freed and reuses for new bytes) is doubt, and loses the connection.
//! - what cannot be told loses the connection rather than count it wrong: a buffer that starts
//!   at the start of a remembered slice other than the first (Envoy drained the slices before it
//!   whole, or reuses that memory for new bytes), or outside the remembered slices when the
//!   last buffer had more (`READ_SLICES`).

use crate::connections::{Conn, FirstStream};
use crate::exchange::{Event, Protocol, Tracker};
use crate::registry::Ticket;
use crate::state::Shared;

/// One followed connection, owned by its network filter (on its worker; the close may come
/// from another thread, see [`Tracking::on_close`]).
#[derive(Debug, Default)]
pub struct Tracking {
    tracker: Tracker,
    /// The requests in flight: the tracker's id and the ticket (`None`: a health check).
    tickets: Vec<(u32, Option<Ticket>)>,
    /// The previous read buffer's first slices (see the module doc): addresses, lengths, and
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
    /// This module put `connection: close` on one of the connection's responses.
    told_close: bool,
    /// Test-only (`cross-check` builds, beside the HTTP filter): follow without counting, and
    /// report to the connection's cross-check instead.
    shadow: bool,
}

/// Where a read buffer's first byte lies in the last read buffer (see the module doc).
enum Behind {
    /// Strictly inside a remembered slice: the bytes from this client offset were left behind.
    Inside(u64),
    /// At the start of a remembered slice other than the first: left behind (Envoy drained the
    /// slices before it whole) or new bytes in a slice reused from its start; cannot be told.
    AtSlice,
    /// Anywhere else.
    Elsewhere,
}

/// What [`Tracking::close_to_insert`] decided for a write.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    /// Replace the write's first `insert` bytes (its status line) by themselves and
    /// [`CONNECTION_CLOSE`] (0: leave the write as it is).
    pub insert: usize,
    /// The bytes `from..to` of the write are a `connection: close` line to take out: requests
    /// pipelined behind this response were received, and Envoy will answer them after it.
    pub strip: Option<(usize, usize)>,
    /// The connection was counted as sent away now (its first telling, whoever tells it).
    pub counted: bool,
}

/// A response's status line, copied from a write ([`Tracking::on_write_bytes`]).
#[derive(Debug, Clone, Copy)]
pub struct StatusLine {
    bytes: [u8; MAX_STATUS_LINE],
    len: usize,
}

impl StatusLine {
    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// How the glue rewrites the start of a write ([`Tracking::on_write_bytes`]): replace its first
/// [`HeadEdit::replaced`] bytes by [`HeadEdit::pieces`], in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadEdit {
    /// Put [`CONNECTION_CLOSE`] after the status line (a copy of the write's first bytes).
    InsertClose(StatusLine),
    /// Take out the head's `connection: close` line: `kept` is a copy of the bytes before it,
    /// `through` the offset just after it.
    StripClose { kept: Vec<u8>, through: usize },
}

impl PartialEq for StatusLine {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}
impl Eq for StatusLine {}

impl HeadEdit {
    /// The bytes at the write's start that the edit replaces.
    pub fn replaced(&self) -> usize {
        match self {
            HeadEdit::InsertClose(line) => line.len,
            HeadEdit::StripClose { through, .. } => *through,
        }
    }

    /// What replaces them, in order.
    pub fn pieces(&self) -> [&[u8]; 2] {
        match self {
            HeadEdit::InsertClose(line) => [line.bytes(), CONNECTION_CLOSE],
            HeadEdit::StripClose { kept, .. } => [kept, b""],
        }
    }
}

/// What [`Tracking::close_to_insert`] asks the glue to put after a response's status line.
pub const CONNECTION_CLOSE: &[u8] = b"connection: close\r\n";
const CLOSE_HEADER: &[u8] = b"\nconnection: close\r";
/// A status line longer than this is left alone (Envoy writes `HTTP/1.1 200 OK`).
pub const MAX_STATUS_LINE: usize = 128;

/// Slices of a read buffer remembered (Envoy's read buffer has one or two in practice; a read
/// that may start beyond these loses the connection, see the module doc).
const READ_SLICES: usize = 4;
/// Bytes of a read buffer's end kept to check the bytes Envoy leaves behind.
pub const TAIL: usize = 16;

/// The last bytes fed of the client's stream, at most [`TAIL`] (the valid ones at the end).
#[derive(Debug, Default, Clone, Copy)]
struct Tail {
    bytes: [u8; TAIL],
    len: u8,
}

impl Tail {
    fn push(&mut self, b: &[u8]) {
        if let Some(last) = b.len().checked_sub(TAIL).and_then(|from| b.get(from..)) {
            self.bytes.copy_from_slice(last);
            self.len = TAIL as u8;
            return;
        }
        self.bytes.copy_within(b.len().., 0);
        if let Some(to) = self.bytes.get_mut(TAIL - b.len()..) {
            to.copy_from_slice(b);
        }
        self.len = (usize::from(self.len) + b.len()).min(TAIL) as u8;
    }

    /// Whether `bytes`, at position `at` of a buffer whose first `run` bytes are the ones left
    /// behind, agree with the tail where they overlap the run's last bytes.
    fn agrees(&self, at: usize, bytes: &[u8], run: usize) -> bool {
        let overlap = usize::from(self.len).min(run);
        let from = run - overlap;
        let (lo, hi) = (at.max(from), at.saturating_add(bytes.len()).min(run));
        if lo >= hi {
            return true;
        }
        let kept = self
            .bytes
            .get(TAIL - overlap + (lo - from)..TAIL - overlap + (hi - from));
        kept.is_some() && bytes.get(lo - at..hi - at) == kept
    }
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
}

impl Tracking {
    pub fn new() -> Tracking {
        Tracking::default()
    }

    /// A tracker beside the HTTP filter (`cross-check` builds): counts nothing itself.
    pub fn shadow() -> Tracking {
        Tracking {
            shadow: true,
            ..Tracking::default()
        }
    }

    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// Whether its requests are counted (not a cross-check's shadow).
    pub fn counts(&self) -> bool {
        !self.shadow
    }

    /// Whether the connection is still followed.
    pub fn is_followed(&self) -> bool {
        !self.lost
    }

    /// A read: the read buffer holds `len` bytes, given by `chunks` (`None`: Envoy could not
    /// give them). The first bytes may be ones fed before, which Envoy's codec handed back.
    /// `now`: the clock stream ends are stamped with (`StreamSink::now_nanos`), read only when
    /// a request ends.
    pub fn on_read<'a>(
        &mut self,
        len: usize,
        chunks: Option<impl Iterator<Item = &'a [u8]>>,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> Fed {
        let mut fed = Fed::default();
        let Some(chunks) =
            self.followed(chunks, "Envoy gave no read buffer", conn, shared, &mut fed)
        else {
            return fed;
        };
        if self.shadow {
            conn.cross_check_at_read();
        }
        let mut chunks = chunks.peekable();
        let fed_before = self.tracker.client_fed();
        // Where the buffer starts in the client's bytes: inside what the last read saw (bytes
        // Envoy left behind), or at the first byte not fed yet.
        let first = chunks.peek().map(|first| first.as_ptr() as usize);
        let start = match first.filter(|_| self.may_be_left_behind) {
            // The last read ended before any complete request: Envoy's codec took it all.
            None => fed_before,
            Some(addr) => match self.left_behind_at(addr) {
                // Envoy's codec stops only at a request's end: bytes it left start at one.
                Behind::Inside(offset) if self.tracker.ends_a_request(offset) => offset,
                Behind::Inside(_) => {
                    self.lose(
                        conn,
                        shared,
                        "a read buffer starts inside the last one, not where a request ended",
                        &mut fed,
                    );
                    return fed;
                }
                Behind::AtSlice => {
                    self.lose(
                        conn,
                        shared,
                        "a read buffer starts where a slice of the last one started",
                        &mut fed,
                    );
                    return fed;
                }
                Behind::Elsewhere if self.more_slices => {
                    self.lose(
                        conn,
                        shared,
                        "a read buffer may start in a slice not remembered",
                        &mut fed,
                    );
                    return fed;
                }
                // Envoy answered the requests at once and read on (each answer lets its codec
                // take the next): every byte is new.
                Behind::Elsewhere => fed_before,
            },
        };
        let Some(run) = fed_before
            .checked_sub(start)
            .and_then(|s| usize::try_from(s).ok())
            .filter(|&s| s <= len)
        else {
            self.lose(conn, shared, "the read buffer does not match", &mut fed);
            return fed;
        };
        let old_tail = self.tail;
        let (mut offset, mut at, mut slices) = (start, 0usize, 0usize);
        for bytes in chunks {
            if let (Some(a), Some(l), Some(o)) = (
                self.read_at.get_mut(slices),
                self.read_len.get_mut(slices),
                self.read_offset.get_mut(slices),
            ) {
                (*a, *l, *o) = (bytes.as_ptr() as usize, bytes.len() as u32, offset);
            }
            slices += 1;
            offset = offset.saturating_add(bytes.len() as u64);
            self.tail.push(bytes);
            let fresh = if at < run {
                if !old_tail.agrees(at, bytes, run) {
                    self.lose(
                        conn,
                        shared,
                        "the bytes left in Envoy's read buffer are not the ones read",
                        &mut fed,
                    );
                    return fed;
                }
                bytes.get(run - at..).unwrap_or_default()
            } else {
                bytes
            };
            at += bytes.len();
            if fresh.is_empty() {
                continue;
            }
            let shadow = !self.counts();
            let tickets = &mut self.tickets;
            self.tracker.client(fresh, &mut |ev, t| {
                on_event(ev, t, tickets, shadow, conn, shared, &now, &mut fed)
            });
        }
        for i in slices..READ_SLICES {
            (self.read_at[i], self.read_len[i]) = (0, 0);
        }
        self.may_be_left_behind = self.tracker.pipelined();
        self.more_slices = slices > READ_SLICES;
        self.after_feed(conn, shared, &mut fed);
        self.note_partial_head(shared);
        fed
    }

    /// Keep the process-wide count of heads on their way in step with this connection's (after
    /// a read's events: a completed head has its ticket before it stops counting here).
    /// A lost connection keeps a head it had counted until it closes (the drain's view of
    /// Envoy's gauges may predate that head).
    fn note_partial_head(&mut self, shared: &Shared) {
        if self.lost {
            return;
        }
        let partial = self.counts() && self.tracker.partial();
        if partial != self.partial_head {
            self.partial_head = partial;
            shared.connections.note_partial_head(partial);
        }
    }

    /// Server bytes ahead that the tracker skips unread: a write of at most this many can be
    /// fed as [`crate::exchange::unread`] bytes.
    pub fn server_unread_ahead(&self) -> u64 {
        self.tracker.server_unread_ahead()
    }

    /// A write towards the client: `chunks` are this write's bytes (`None`: not given).
    pub fn on_write<'a>(
        &mut self,
        chunks: Option<impl Iterator<Item = &'a [u8]>>,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> Fed {
        let mut fed = Fed::default();
        let Some(chunks) =
            self.followed(chunks, "Envoy gave no write buffer", conn, shared, &mut fed)
        else {
            return fed;
        };
        for bytes in chunks {
            let shadow = !self.counts();
            let tickets = &mut self.tickets;
            self.tracker.server(bytes, &mut |ev, t| {
                on_event(ev, t, tickets, shadow, conn, shared, &now, &mut fed)
            });
        }
        self.after_feed(conn, shared, &mut fed);
        fed
    }

    /// A write hook's first step, `len` bytes written: fed by their length alone when the
    /// tracker would skip them unread (the rest of a body, an HTTP/2 frame's payload), without
    /// Envoy's two buffer callbacks (about 300 instructions): `true`. Else (`false`) the glue
    /// fetches the write's slices for [`Tracking::on_write_bytes`].
    pub fn on_write_len(
        &mut self,
        len: usize,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> bool {
        if self.server_unread_ahead() < len as u64 {
            return false;
        }
        self.on_write(Some(crate::exchange::unread(len)), conn, shared, now);
        true
    }

    /// A write hook's bytes (`chunks()`: the write's slices, `None` if Envoy could not give
    /// them): fed, after [`Tracking::close_to_insert`] looked at its first slice. Returns how to
    /// edit the write's start, with copies of the bytes it keeps, when this response gets or
    /// loses `connection: close` (the glue edits the write once the slices are released).
    pub fn on_write_bytes<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        chunks: impl Fn() -> Option<I>,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> Option<HeadEdit> {
        let first = chunks().and_then(|mut c| c.next());
        let told = self.close_to_insert(first, conn, shared);
        let edit = first.and_then(|b| {
            if let Some((from, to)) = told.strip {
                return Some(HeadEdit::StripClose {
                    kept: b.get(..from)?.to_vec(),
                    through: to,
                });
            }
            let b = b.get(..told.insert).filter(|b| !b.is_empty())?;
            let mut line = StatusLine {
                bytes: [0; MAX_STATUS_LINE],
                len: b.len(),
            };
            line.bytes.get_mut(..b.len())?.copy_from_slice(b);
            Some(HeadEdit::InsertClose(line))
        });
        self.on_write(chunks(), conn, shared, now);
        edit
    }

    /// Before a write is fed: during a drain, a response head that starts this write on an
    /// HTTP/1.1 connection not told yet, and carrying no `connection: close` of its own, gets
    /// one, after its status line (the connection manager does this itself only once Envoy's
    /// health checks fail: after `readiness_failure_delay`, and never without `admin_address`).
    /// Counts the connection as sent away (once, whoever said it). `first`: the write's first
    /// slice.
    ///
    /// Unless requests are pipelined behind this response ([`Tracker::pipelined`]: bytes of
    /// them were read, so Envoy's codec holds them): Envoy answers those after this one, its
    /// drain-close on every response included (measured: three pipelined POSTs at a drain, all
    /// three proxied, each response with `connection: close`). RFC 9112 §9.6: a client closes
    /// after a response carrying `close`, and the server must process no request after it; a
    /// strict client would take the answered ones for lost. So such a response carries no
    /// `close` (Envoy's own line is taken out, `Told::strip`), and the close goes on the response
    /// to the last request received. (Bytes that arrive after that response was written are
    /// not followed here: Envoy closes the connection once that response is done and its codec
    /// holds nothing more.)
    pub fn close_to_insert(&mut self, first: Option<&[u8]>, conn: &Conn, shared: &Shared) -> Told {
        let no = Told::default();
        if self.told_close
            || !self.counts()
            || self.lost
            || !shared.is_draining()
            || !self.tracker.awaiting_response_head()
        {
            return no;
        }
        let behind = self.tracker.pipelined();
        let Some(head) = first else {
            return no;
        };
        // A final response (not 1xx), its status line whole in this slice.
        if !head.starts_with(b"HTTP/1.1 ") || head.get(9) == Some(&b'1') {
            return no;
        }
        let Some(lf) = head.iter().take(MAX_STATUS_LINE).position(|&b| b == b'\n') else {
            return no;
        };
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(head.len(), |e| e + 4);
        let close_line = head[..end]
            .windows(CLOSE_HEADER.len())
            .position(|w| w.eq_ignore_ascii_case(CLOSE_HEADER));
        if behind {
            // The line from after its LF through its CRLF (`\nconnection: close\r` then `\n`).
            let strip = close_line
                .map(|at| (at + 1, at + CLOSE_HEADER.len() + 1))
                .filter(|&(_, to)| head.get(to - 1) == Some(&b'\n'));
            return Told { strip, ..no };
        }
        self.told_close = true;
        Told {
            insert: if close_line.is_some() { 0 } else { lf + 1 },
            strip: None,
            counted: shared
                .send_away_once(Some(conn.id), || crate::state::Protocol::Http1)
                .is_some(),
        }
    }

    /// The connection is gone (its filter's destroy hook, possibly on the drain side's thread:
    /// only the in-flight table and atomics are touched). Ends what it still holds: a tunnel, a
    /// response cut by the close, requests read ahead that Envoy never answered.
    pub fn on_close(&mut self, conn: &Conn, shared: &Shared) {
        self.end_all(conn, shared);
        if std::mem::take(&mut self.partial_head) {
            shared.connections.note_partial_head(false);
        }
        if self.lost && self.counts() {
            shared.connections.note_untracked(false);
        }
    }

    /// Where the byte at `addr` lies in the last read buffer's remembered slices.
    fn left_behind_at(&self, addr: usize) -> Behind {
        for i in 0..READ_SLICES {
            let (at, len) = (self.read_at[i], self.read_len[i] as usize);
            if at < addr && addr < at.saturating_add(len) {
                return Behind::Inside(self.read_offset[i].saturating_add((addr - at) as u64));
            }
            if at == addr && i > 0 && len > 0 {
                return Behind::AtSlice;
            }
        }
        Behind::Elsewhere
    }

    /// A read's or write's bytes, if they are to be fed: not once the connection is lost or a
    /// tunnel (upgrade, CONNECT, a response until close: busy until it closes), and without
    /// them (`None`: Envoy did not give them) the connection is lost, `missing` saying why.
    fn followed<I>(
        &mut self,
        chunks: Option<I>,
        missing: &str,
        conn: &Conn,
        shared: &Shared,
        fed: &mut Fed,
    ) -> Option<I> {
        if self.lost || self.tracker.tunnel() {
            return None;
        }
        if chunks.is_none() {
            self.lose(conn, shared, missing, fed);
        }
        chunks
    }

    fn after_feed(&mut self, conn: &Conn, shared: &Shared, fed: &mut Fed) {
        if fed.lost && !self.lost {
            self.lose(
                conn,
                shared,
                "its bytes do not follow HTTP/1.1 or HTTP/2 framing",
                fed,
            );
        }
    }

    fn lose(&mut self, conn: &Conn, shared: &Shared, why: &str, fed: &mut Fed) {
        fed.lost = true;
        self.lost = true;
        // Envoy may still be serving them: given back, so that the drain counts them from
        // Envoy's gauges instead, and until a gauge pass shows them (`Registry::give_back`).
        let counted = self.tickets.iter().filter(|(_, t)| t.is_some()).count() as u64;
        shared
            .requests
            .give_back(counted, || self.end_all(conn, shared));
        shared
            .counters
            .count(crate::state::Stat::ConnectionsUntracked);
        if self.shadow {
            conn.cross_check_event(None);
            log::info!(
                "graceful_drain: cross-check: connection {} no longer followed ({why})",
                conn.id
            );
            return;
        }
        conn.set_untracked();
        shared.connections.note_untracked(true);
        log::info!(
            "graceful_drain: connection {} is no longer followed ({why}, protocol {:?}): counted \
             busy until it closes; the drain also waits for Envoy's gauges while it is open",
            conn.id,
            self.tracker.protocol()
        );
    }

    fn end_all(&mut self, conn: &Conn, shared: &Shared) {
        for (_, ticket) in self.tickets.drain(..) {
            if let Some(t) = ticket {
                shared.request_ended_in(conn.reserved(), t);
            }
        }
    }
}

/// A network filter's read hook, everything it decides, given the read buffer's slices
/// (`chunks()`; `None`: Envoy could not give them): the protocol from the first bytes and an
/// HTTP/2 client's frames until its first stream (while [`Conn::following_bytes`]; `watch` is
/// the connection's [`FirstStream`]), then the exchange tracker's feed (`tracking`, connection
/// mode), which counts what it starts, ends or loses itself. The glue asks Envoy for the slices
/// only when [`Conn::read_wants_bytes`]; otherwise `conn.on_read(len, &[])` is the read.
pub fn on_read_hook<'a, I: Iterator<Item = &'a [u8]>>(
    conn: &Conn,
    len: usize,
    chunks: impl Fn() -> Option<I>,
    watch: &mut FirstStream,
    tracking: Option<&mut Tracking>,
    shared: &Shared,
    now: impl Fn() -> u64,
) {
    if conn.following_bytes() {
        conn.on_followed_read(len, &chunks, watch);
    } else {
        conn.on_read(len, &[]);
    }
    if let Some(t) = tracking {
        t.on_read(len, chunks(), conn, shared, now);
    }
}

#[allow(clippy::too_many_arguments)]
fn on_event(
    ev: Event,
    t: &Tracker,
    tickets: &mut Vec<(u32, Option<Ticket>)>,
    shadow: bool,
    conn: &Conn,
    shared: &Shared,
    now: &impl Fn() -> u64,
    fed: &mut Fed,
) {
    if shadow {
        #[cfg(feature = "cross-check")]
        log::debug!(
            "graceful_drain: cross-check: connection {} tracker {ev:?}",
            conn.id
        );
        match ev {
            Event::Started(id) => {
                tickets.push((id, None));
                conn.cross_check_event(Some(true));
            }
            Event::Ended(id) => {
                if let Some(i) = tickets.iter().position(|(t, _)| *t == id) {
                    tickets.swap_remove(i);
                    conn.cross_check_event(Some(false));
                }
            }
            Event::Lost => fed.lost = true,
        }
        return;
    }
    match ev {
        Event::Started(id) => {
            fed.started += 1;
            conn.exchange_started();
            if shared.is_draining() && t.protocol() == Protocol::Http1 && is_health_check(t, shared)
            {
                fed.health_checks += 1;
                shared.counters.health_check();
                tickets.push((id, None));
                return;
            }
            let (ticket, draining) = shared.request_started_in(conn.lane(), conn.reserved());
            if draining {
                fed.served_while_draining += 1;
                shared.counters.served_while_draining();
            }
            tickets.push((id, Some(ticket)));
        }
        Event::Ended(id) => {
            if let Some(i) = tickets.iter().position(|(t, _)| *t == id) {
                fed.ended += 1;
                if let (_, Some(ticket)) = tickets.swap_remove(i) {
                    shared.request_ended_in(conn.reserved(), ticket);
                }
                conn.exchange_ended(now());
                // The HTTP filter counts the connections it sends away; here Envoy's drain-close
                // did it, with the response that just ended.
                if t.protocol() == Protocol::Http1 && t.will_close() && shared.is_draining() {
                    fed.sent_away_http1 |= shared
                        .send_away_once(Some(conn.id), || crate::state::Protocol::Http1)
                        .is_some();
                }
            }
        }
        // Handled once the feed returns (the tickets are this call's to give back).
        Event::Lost => fed.lost = true,
    }
}

/// The request whose head just completed is a health check by the configured policy. A path
/// cut to the hint's length cannot be matched exactly: only its `User-Agent` counts then.
fn is_health_check(t: &Tracker, shared: &Shared) -> bool {
    let h = t.hints();
    let path = h
        .path
        .filter(|p| !(h.truncated && p.len() >= crate::exchange::HINT_LEN));
    shared.policy().is_health_check(h.user_agent, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Trigger;
    use crate::state::tests::{counted, fast, fixture};
    use crate::state::Stat;

    const GET: &[u8] = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n";
    const PROBE: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\nuser-agent: kube-probe/1.31\r\n\r\n";
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi";

    fn now() -> u64 {
        7
    }

    fn read(t: &mut Tracking, buf: &[&[u8]], conn: &Conn, shared: &Shared) -> Fed {
        let len = buf.iter().map(|b| b.len()).sum();
        t.on_read(len, Some(buf.iter().copied()), conn, shared, now)
    }

    fn write(t: &mut Tracking, bytes: &[u8], conn: &Conn, shared: &Shared) -> Fed {
        t.on_write(Some([bytes].into_iter()), conn, shared, now)
    }

    /// #44 item 6: Envoy's connection manager has a stream from a head's first byte; the
    /// tracker's ticket comes with the head's end. In between the head is counted, so a drain
    /// never completes while a request is still arriving.
    #[test]
    fn a_head_on_its_way_holds_the_drain_from_its_first_byte() {
        use crate::drain::Decision;
        use crate::state::EnvoyObservation;
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        f.shared.start_drain(Trigger::Admin);
        f.clock.advance(std::time::Duration::from_millis(100));
        read(&mut t, &[b"GET /a HT"], &conn, &f.shared);
        assert_eq!(f.shared.connections.partial_heads(), 1);
        assert_eq!(
            f.shared.requests.counts().active,
            0,
            "no ticket before the head ends"
        );
        assert!(
            matches!(f.shared.poll(EnvoyObservation::Unused), Decision::PollAt(_)),
            "the drain holds"
        );
        read(&mut t, &[b"TP/1.1\r\nhost: x\r\n\r\n"], &conn, &f.shared);
        assert_eq!(f.shared.connections.partial_heads(), 0);
        assert_eq!(f.shared.requests.counts().active, 1, "the ticket took over");
        write(&mut t, OK, &conn, &f.shared);
        // Begun again, then the connection closes: nothing left counted.
        read(&mut t, &[b"GE"], &conn, &f.shared);
        assert_eq!(f.shared.connections.partial_heads(), 1);
        t.on_close(&conn, &f.shared);
        assert_eq!(f.shared.connections.partial_heads(), 0);
        f.clock.advance(std::time::Duration::from_millis(100));
        assert!(matches!(
            f.shared.poll(EnvoyObservation::Unused),
            Decision::Completed(_)
        ));
        // A lost connection keeps its head counted until it closes.
        let other = Conn::new(2);
        let mut u = Tracking::new();
        read(
            &mut u,
            &[GET, b"GET /b HTTP/1.1\r\nhost"],
            &other,
            &f.shared,
        );
        assert_eq!(f.shared.connections.partial_heads(), 1);
        write(&mut u, b"HTTP/1.1 2x0 what\r\n\r\n", &other, &f.shared);
        assert!(!u.is_followed(), "lost");
        assert_eq!(f.shared.connections.partial_heads(), 1);
        u.on_close(&other, &f.shared);
        assert_eq!(f.shared.connections.partial_heads(), 0);
    }

    #[test]
    fn a_request_is_in_the_table_from_its_head_to_its_response() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let fed = read(&mut t, &[GET], &conn, &f.shared);
        assert_eq!(fed.started, 1);
        assert_eq!(f.shared.requests.counts().active, 1);
        assert_eq!(conn.streams(), 1, "counted against its connection");
        let fed = write(&mut t, OK, &conn, &f.shared);
        assert_eq!(fed.ended, 1);
        assert_eq!(f.shared.requests.counts().active, 0);
        assert_eq!(conn.streams(), 0);
    }

    /// Envoy leaves the requests behind the one it answers in its read buffer: the next read
    /// starts with them again, at the same place in memory, and they are not fed twice.
    #[test]
    fn bytes_envoy_left_in_its_read_buffer_are_not_fed_again() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        // One slice of Envoy's read buffer: three requests, then a fourth appended behind them.
        let buffer = [GET, GET, GET, GET].concat();
        let first = read(&mut t, &[&buffer[..3 * GET.len()]], &conn, &f.shared);
        assert_eq!(first.started, 3);
        write(&mut t, OK, &conn, &f.shared);
        // Envoy consumed the first request; the other two are still there, and a fourth came.
        let left = &buffer[GET.len()..];
        let again = read(&mut t, &[left], &conn, &f.shared);
        assert_eq!(again.started, 1, "only the new request starts");
        assert_eq!(f.shared.requests.counts().active, 3);
        for _ in 0..3 {
            write(&mut t, OK, &conn, &f.shared);
        }
        assert_eq!(f.shared.requests.counts().active, 0);
        assert!(t.is_followed());
    }

    /// A buffer elsewhere in memory (even right behind the last one, or at its very start, as
    /// a reused slice would be) holds new bytes only.
    #[test]
    fn a_buffer_that_does_not_start_inside_the_last_one_is_all_new() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let buffer = [GET, GET].concat();
        read(&mut t, &[&buffer[..GET.len()]], &conn, &f.shared);
        write(&mut t, OK, &conn, &f.shared);
        // Right behind the bytes of the last read.
        assert_eq!(
            read(&mut t, &[&buffer[GET.len()..]], &conn, &f.shared).started,
            1
        );
        write(&mut t, OK, &conn, &f.shared);
        // At the very start of the last read's slice (a slice reused from its beginning).
        let reused = &buffer[GET.len()..];
        assert_eq!(read(&mut t, &[reused], &conn, &f.shared).started, 1);
        write(&mut t, OK, &conn, &f.shared);
        assert_eq!(f.shared.requests.counts().active, 0);
        assert_eq!(t.tracker().totals(), (3, 3));
    }

    /// After a read that ended at a request's end, Envoy's codec took every byte: a buffer
    /// inside that read's memory (reused for new bytes) is all new, never skipped.
    #[test]
    fn after_a_read_that_ends_at_a_request_s_end_every_byte_is_new_wherever_it_lies() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let mut mem = [0u8; 128];
        mem[..GET.len()].copy_from_slice(GET);
        read(&mut t, &[&mem[..GET.len()]], &conn, &f.shared);
        write(&mut t, OK, &conn, &f.shared);
        // The same memory reused from inside for the next request.
        mem[10..10 + GET.len()].copy_from_slice(GET);
        let fed = read(&mut t, &[&mem[10..10 + GET.len()]], &conn, &f.shared);
        assert_eq!((fed.started, fed.lost), (1, false));
        write(&mut t, OK, &conn, &f.shared);
        assert_eq!(t.tracker().totals(), (2, 2));
        assert_eq!(f.shared.requests.counts().active, 0);
    }

    /// Memory inside the last buffer, reused for new bytes while that buffer held pipelined
    /// requests: its bytes are not the ones the last read ended with, so they are not taken
    /// for bytes left behind (which would skip new requests): the connection is lost instead.
    #[test]
    fn new_bytes_inside_the_last_buffer_are_not_taken_for_bytes_left_behind() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let mut mem = [GET, GET].concat();
        read(&mut t, &[&mem], &conn, &f.shared);
        write(&mut t, OK, &conn, &f.shared);
        // Where the second request was: a new one whose end differs from the last read's.
        let other = b"GET /b HTTP/1.1\r\nhost: y\r\n\r\n";
        mem[GET.len()..GET.len() + other.len()].copy_from_slice(other);
        let fed = read(&mut t, &[&mem[GET.len()..]], &conn, &f.shared);
        assert!(fed.lost, "{fed:?}");
        assert_eq!(
            fed.started, 0,
            "nothing fed from a buffer that does not match"
        );
        t.on_close(&conn, &f.shared);
    }

    /// Envoy drains whole slices: bytes left behind can start at a later slice's own start,
    /// where new bytes in a reused slice would start too. Cannot be told: lost, never counted
    /// twice (phantom requests would hold the drain until its timeout).
    #[test]
    fn a_buffer_starting_at_a_later_slice_s_start_is_lost_not_counted_twice() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let rest = [GET, GET].concat();
        assert_eq!(read(&mut t, &[GET, &rest], &conn, &f.shared).started, 3);
        write(&mut t, OK, &conn, &f.shared);
        let fed = read(&mut t, &[&rest], &conn, &f.shared);
        assert!(fed.lost, "{fed:?}");
        assert_eq!(fed.started, 0);
        t.on_close(&conn, &f.shared);
    }

    /// #44 item 5: Envoy's codec stops only where a request ended, so bytes it hands back start
    /// there. A read buffer that starts inside the last one anywhere else is memory Envoy freed
    /// and reuses for new bytes, however its last bytes compare: lost (handed to Envoy's gauges),
    /// never skipped as if fed before (ef5a7d9 took it as left behind: its new requests were
    /// never counted). One that starts at a request's end is what Envoy leaves, and is followed.
    #[test]
    fn a_buffer_starting_inside_the_last_where_no_request_ended_is_lost() {
        let f = fixture(Some(fast()));
        let three = [GET, GET, GET].concat();
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        assert_eq!(read(&mut t, &[&three], &conn, &f.shared).started, 3);
        write(&mut t, OK, &conn, &f.shared);
        let fed = read(&mut t, &[&three[GET.len() + 5..]], &conn, &f.shared);
        assert!(fed.lost, "{fed:?}");
        assert_eq!(fed.started, 0);
        t.on_close(&conn, &f.shared);
        // At the first request's end: the two requests Envoy left, fed before.
        let other = Conn::new(2);
        let mut u = Tracking::new();
        assert_eq!(read(&mut u, &[&three], &other, &f.shared).started, 3);
        write(&mut u, OK, &other, &f.shared);
        let fed = read(&mut u, &[&three[GET.len()..]], &other, &f.shared);
        assert!(!fed.lost, "{fed:?}");
        assert_eq!((fed.started, f.shared.requests.counts().active), (0, 2));
        u.on_close(&other, &f.shared);
    }

    /// A buffer of more slices than remembered, holding pipelined requests: the next buffer may
    /// start inside a slice not remembered; lost, never counted twice.
    #[test]
    fn a_buffer_that_may_start_in_a_slice_not_remembered_is_lost_not_counted_twice() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        // The first request in four pieces, its end and two more requests in a fifth slice.
        let cut = [3, 6, 9, 12];
        let last = [&GET[12..], GET, GET].concat();
        let slices = [
            &GET[..cut[0]],
            &GET[cut[0]..cut[1]],
            &GET[cut[1]..cut[2]],
            &GET[cut[2]..cut[3]],
            &last[..],
        ];
        assert_eq!(read(&mut t, &slices, &conn, &f.shared).started, 3);
        write(&mut t, OK, &conn, &f.shared);
        // Envoy took the first request and left the other two, inside the fifth slice.
        let fed = read(&mut t, &[&last[GET.len() - 12..]], &conn, &f.shared);
        assert!(fed.lost, "{fed:?}");
        assert_eq!(fed.started, 0);
        t.on_close(&conn, &f.shared);
    }

    #[test]
    fn during_a_drain_health_checks_keep_the_connection_busy_but_are_not_work() {
        let f = fixture(Some(fast()));
        f.shared.start_drain(Trigger::Admin);
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let fed = read(&mut t, &[PROBE], &conn, &f.shared);
        assert_eq!((fed.started, fed.health_checks), (1, 1));
        assert_eq!(f.shared.requests.counts().active, 0, "not work");
        assert_eq!(conn.streams(), 1, "but the connection is busy");
        write(&mut t, OK, &conn, &f.shared);
        assert_eq!(conn.streams(), 0);
        let fed = read(&mut t, &[GET], &conn, &f.shared);
        assert_eq!((fed.health_checks, fed.served_while_draining), (0, 1));
        assert_eq!(f.shared.requests.counts().active, 1);
    }

    /// What the tracker cannot follow gives its tickets back, marks the connection untracked
    /// (never idle) and makes the count inexact until the connection closes.
    #[test]
    fn a_connection_the_tracker_loses_is_untracked_until_it_closes() {
        let f = fixture(Some(fast()));
        f.shared.connections.note_tracking();
        assert!(f.shared.count_is_exact());
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        read(&mut t, &[GET], &conn, &f.shared);
        assert_eq!(f.shared.requests.counts().active, 1);
        let fed = write(&mut t, b"HTTP/1.1 2x0 what\r\n\r\n", &conn, &f.shared);
        assert!(fed.lost);
        assert!(!t.is_followed());
        assert_eq!(
            f.shared.requests.counts().active,
            0,
            "its ticket is given back"
        );
        assert!(
            !f.shared.count_is_exact(),
            "the drain also waits for Envoy's gauges"
        );
        let untracked = |c: Vec<Stat>| {
            c.into_iter()
                .filter(|s| *s == Stat::ConnectionsUntracked)
                .count()
        };
        assert_eq!(untracked(counted()), 1, "one lost connection, counted once");
        assert_eq!(read(&mut t, &[GET], &conn, &f.shared), Fed::default());
        t.on_close(&conn, &f.shared);
        assert!(f.shared.count_is_exact());
    }

    /// Losing the thread gives the connection's tickets back while Envoy still serves their
    /// requests. The last gauge pass took them for the module's own (its excess is 0), so the
    /// drain's view keeps them until a gauge pass that started after the loss counts them in
    /// Envoy's excess; then it follows Envoy's gauge down. (Before `Registry::give_back`, the
    /// view fell to 0 at the loss with the request in flight: the drain could complete on it.)
    #[test]
    fn a_lost_connection_s_requests_stay_counted_until_a_gauge_pass_sees_them() {
        use crate::stats_scan::{DrainTiming, EnvoyStatsCache, Pass, PassReading};
        use std::time::{Duration, Instant};
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        read(&mut t, &[GET, GET], &conn, &f.shared);
        let t0 = Instant::now();
        let d = DrainTiming {
            started: t0,
            earliest_completion: t0,
            quiet_period: Duration::ZERO,
            exact_count: false,
        };
        let mut cache = EnvoyStatsCache::default();
        // Envoy's gauge shows the two requests: the module's own, no excess.
        let pass = |cache: &mut EnvoyStatsCache, pass: Pass, value: u64, ms: u64| {
            let own_before = f.shared.requests.counts();
            let own_after = f.shared.requests.counts();
            let at = t0 + Duration::from_millis(ms);
            let r = PassReading {
                hidden: false,
                value,
                own_before,
                own_after,
                started: at,
                ended: at,
            };
            cache.record(pass, r, d);
        };
        pass(&mut cache, Pass::Counters, 2, 0);
        pass(&mut cache, Pass::Gauges, 2, 1);
        let view = |cache: &EnvoyStatsCache| cache.view(f.shared.requests.counts(), false).unwrap();
        assert_eq!(view(&cache).active, 2);
        let fed = write(&mut t, b"HTTP/1.1 2x0 what\r\n\r\n", &conn, &f.shared);
        assert!(fed.lost);
        assert_eq!(f.shared.requests.counts().active, 0, "tickets given back");
        assert_eq!(
            view(&cache).active,
            2,
            "still in flight for the drain until a gauge pass counts them"
        );
        // A pass after the loss: Envoy still serves both, now all excess.
        pass(&mut cache, Pass::Gauges, 2, 2);
        assert_eq!(view(&cache).active, 2);
        // Envoy served one, then the other.
        pass(&mut cache, Pass::Gauges, 1, 3);
        assert_eq!(view(&cache).active, 1);
        pass(&mut cache, Pass::Gauges, 0, 4);
        assert_eq!(view(&cache).active, 0);
        t.on_close(&conn, &f.shared);
    }

    #[test]
    fn a_close_gives_back_what_is_still_in_flight() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        read(&mut t, &[GET, GET], &conn, &f.shared);
        assert_eq!(f.shared.requests.counts().active, 2);
        t.on_close(&conn, &f.shared);
        assert_eq!(f.shared.requests.counts().active, 0);
    }

    #[test]
    fn a_read_buffer_envoy_does_not_give_is_lost_not_guessed() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let none: Option<std::iter::Empty<&[u8]>> = None;
        assert!(t.on_read(10, none, &conn, &f.shared, now).lost);
        t.on_close(&conn, &f.shared);
    }

    /// During a drain the first final response head of an HTTP/1.1 connection gets
    /// `connection: close` once; never while serving, never on a 1xx, nor where Envoy put one.
    /// #44 item 1: three requests pipelined at a drain. Envoy answers all three (its codec
    /// holds the second and third), each with its drain-close line. RFC 9112 §9.6: the close goes
    /// on the response to the last request received, none before it: the first two lose
    /// Envoy's line, the third keeps it (and counts the connection as sent away).
    #[test]
    fn pipelined_requests_at_a_drain_get_close_only_on_the_last_response() {
        let f = fixture(Some(fast()));
        f.shared.start_drain(Trigger::Admin);
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let three = [GET, GET, GET].concat();
        read(&mut t, &[&three], &conn, &f.shared);
        let closing = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi";
        let line_start = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".len();
        let stripped = Told {
            insert: 0,
            strip: Some((line_start, line_start + b"connection: close\r\n".len())),
            counted: false,
        };
        for _ in 0..2 {
            assert_eq!(t.close_to_insert(Some(closing), &conn, &f.shared), stripped);
            write(&mut t, closing, &conn, &f.shared);
        }
        // (The tracker follows Envoy's bytes as written, before the edit: it saw Envoy's close
        // end the first response and counted the connection sent away then, once.)
        assert_eq!(
            t.close_to_insert(Some(closing), &conn, &f.shared),
            Told::default(),
            "the last one keeps Envoy's close"
        );
        write(&mut t, closing, &conn, &f.shared);
        assert_eq!(
            f.shared.status().connections_sent_away.http1,
            1,
            "counted once"
        );
        // Without Envoy's line (no drain-close yet): nothing to take out before the last, and
        // the module's own close on the last.
        let other = Conn::new(2);
        let mut u = Tracking::new();
        read(&mut u, &[&[GET, GET].concat()], &other, &f.shared);
        assert_eq!(
            u.close_to_insert(Some(OK), &other, &f.shared),
            Told::default()
        );
        write(&mut u, OK, &other, &f.shared);
        assert_eq!(
            u.close_to_insert(Some(OK), &other, &f.shared).insert,
            b"HTTP/1.1 200 OK\r\n".len()
        );
        // A second request's head only begun is behind too (Envoy's codec holds its bytes).
        let third = Conn::new(3);
        let mut v = Tracking::new();
        read(&mut v, &[&[GET, b"GET /b HT"].concat()], &third, &f.shared);
        assert_eq!(
            v.close_to_insert(Some(closing), &third, &f.shared),
            stripped,
            "a partial head behind"
        );
    }

    /// The glue's edit of a write: the kept bytes, then the rest after the stripped line.
    #[test]
    fn a_stripped_close_line_leaves_the_rest_of_the_head_whole() {
        let f = fixture(Some(fast()));
        f.shared.start_drain(Trigger::Admin);
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        read(&mut t, &[&[GET, GET].concat()], &conn, &f.shared);
        let closing =
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nConnection: Close\r\nx: y\r\n\r\nhi";
        let edit = t
            .on_write_bytes(|| Some([&closing[..]].into_iter()), &conn, &f.shared, || 0)
            .expect("an edit");
        let mut out = edit.pieces().concat();
        out.extend_from_slice(&closing[edit.replaced()..]);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx: y\r\n\r\nhi".to_vec()
        );
    }

    #[test]
    fn during_a_drain_a_response_head_gets_connection_close_once() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        read(&mut t, &[GET], &conn, &f.shared);
        assert_eq!(
            t.close_to_insert(Some(OK), &conn, &f.shared),
            Told::default(),
            "serving"
        );
        write(&mut t, OK, &conn, &f.shared);
        f.shared.start_drain(Trigger::Admin);
        read(&mut t, &[GET], &conn, &f.shared);
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
        assert_eq!(
            t.close_to_insert(Some(interim), &conn, &f.shared),
            Told::default(),
            "1xx"
        );
        write(&mut t, interim, &conn, &f.shared);
        assert_eq!(
            t.close_to_insert(Some(OK), &conn, &f.shared),
            Told {
                insert: b"HTTP/1.1 200 OK\r\n".len(),
                strip: None,
                counted: true
            }
        );
        assert_eq!(f.shared.status().connections_sent_away.http1, 1);
        write(&mut t, OK, &conn, &f.shared);
        read(&mut t, &[GET], &conn, &f.shared);
        assert_eq!(
            t.close_to_insert(Some(OK), &conn, &f.shared),
            Told::default(),
            "once"
        );
        // A connection whose response already carries Envoy's own close is counted, not edited.
        let other = Conn::new(2);
        let mut u = Tracking::new();
        read(&mut u, &[GET], &other, &f.shared);
        let closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(
            u.close_to_insert(Some(closing), &other, &f.shared),
            Told {
                insert: 0,
                strip: None,
                counted: true
            }
        );
        assert_eq!(f.shared.status().connections_sent_away.http1, 2);
    }

    /// The per-connection memory the docs state (docs/modes.md, connection mode).
    #[test]
    fn a_followed_connection_costs_at_most_408_bytes_before_its_tickets() {
        let size = std::mem::size_of::<Tracking>();
        eprintln!("size_of::<Tracking>() = {size}");
        // 392 before the follower kept the last request ends (16 bytes, #44 item 5).
        assert!(size <= 408, "{size}");
    }

    #[test]
    fn a_shadow_tracker_counts_nothing() {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = Tracking::shadow();
        read(&mut t, &[GET], &conn, &f.shared);
        assert_eq!(f.shared.requests.counts().active, 0);
        assert_eq!(conn.streams(), 0);
        assert_eq!(t.tracker().in_flight(), 1);
    }
}
