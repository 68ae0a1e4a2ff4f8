//! The read side of a followed connection: feeding the client's bytes to the tracker, and the
//! network filter's read hook. May use what `tracking` may.
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

use super::events::on_event;
use super::*;
use crate::connections::{Conn, FirstStream};
use crate::engine::state::Shared;

/// Where a read buffer's first byte lies in the last read buffer (see the module doc).
pub(super) enum Behind {
    /// Strictly inside a remembered slice: the bytes from this client offset were left behind.
    Inside(u64),
    /// At the start of a remembered slice other than the first: left behind (Envoy drained the
    /// slices before it whole) or new bytes in a slice reused from its start; cannot be told.
    AtSlice,
    /// Anywhere else.
    Elsewhere,
}

/// Slices of a read buffer remembered (Envoy's read buffer has one or two in practice; a read
/// that may start beyond these loses the connection, see the module doc).
pub(super) const READ_SLICES: usize = 4;
/// Bytes of a read buffer's end kept to check the bytes Envoy leaves behind.
pub const TAIL: usize = 16;

/// The last bytes fed of the client's stream, at most [`TAIL`] (the valid ones at the end).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tail {
    bytes: [u8; TAIL],
    len: u8,
}

impl Tail {
    pub(super) fn push(&mut self, b: &[u8]) {
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
    pub(super) fn agrees(&self, at: usize, bytes: &[u8], run: usize) -> bool {
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

impl Tracking {
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
        if self.tracker.tunnel() && !self.lost {
            // A switched WebSocket's client frames (nothing else of a tunnel is followed).
            self.websocket_client(chunks);
            return fed;
        }
        let Some(chunks) =
            self.followed(chunks, "Envoy gave no read buffer", conn, shared, &mut fed)
        else {
            return fed;
        };
        if self.shadow {
            conn.cross_check_at_read();
        }
        // Health checks are told by their hints only while a drain is under way: heads begun
        // before are not asked for them (a health check's head begun before the drain and
        // completed after it counts as a request: the drain waits for it, never the reverse).
        self.tracker.want_hints(shared.is_draining());
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
        // The tail before this read's bytes, kept only when some of them were read before (a
        // copy a read costs about 30 instructions, callgrind).
        let old_tail = (run > 0).then_some(self.tail);
        // Slices this read does not reach are remembered as none (stores, not a loop after).
        (self.read_at, self.read_len) = ([0; READ_SLICES], [0; READ_SLICES]);
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
                if !old_tail.is_some_and(|t| t.agrees(at, bytes, run)) {
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
    pub(super) fn note_partial_head(&mut self, shared: &Shared) {
        if self.lost {
            return;
        }
        let partial = self.counts() && self.tracker.partial();
        if partial != self.partial_head {
            self.partial_head = partial;
            shared.connections.note_partial_head(partial);
        }
    }

    /// Where the byte at `addr` lies in the last read buffer's remembered slices.
    pub(super) fn left_behind_at(&self, addr: usize) -> Behind {
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
    pub(super) fn followed<I>(
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
