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
use crate::engine::shared::Shared;
use crate::host::extension::StatsHost;

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
/// A dry run's piece (`TrackedConnection::request_end_in`): at most `REQUEST_ENDS` requests of 16 bytes
/// or more complete in it.
const PROBE_PIECE: usize = 16 * crate::exchange::REQUEST_ENDS;
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

impl TrackedConnection {
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
        stats: &impl StatsHost,
        now: impl Fn() -> u64,
    ) -> Fed {
        let mut fed = Fed::default();
        if self.tracker.tunnel() && !self.lost {
            // A switched WebSocket's client frames (nothing else of a tunnel is followed).
            self.websocket_client(chunks);
            return fed;
        }
        if self.held() && !self.lost {
            // Behind a response that carries `close`: Envoy's codec consumed everything before
            // it (it pauses only at a request's end), so every byte here is a request that is
            // never to be processed, and none is fed.
            fed.hold_from = Some(0);
            return fed;
        }
        let Some(chunks) = self.followed(
            chunks,
            "Envoy gave no read buffer",
            conn,
            shared,
            stats,
            &mut fed,
        ) else {
            return fed;
        };
        if self.shadow {
            conn.cross_check_at_read();
        }
        // Health checks are told by their hints only while a drain is under way: heads begun
        // before are not asked for them (a health check's head begun before the drain and
        // completed after it counts as a request: the drain waits for it, never the reverse).
        self.tracker.want_hints(shared.is_draining());
        // HTTP/2 health checks are told by their `:path` (HPACK-decoded): only when some path is
        // configured, and from the connection's first byte (later asks do nothing: a decoder
        // must see every block).
        if self.tracker.client_fed() == 0 {
            // Movable streams (gRPC under a resumable prefix, SSE to a `GET`) are told by both
            // directions' blocks while moves are on: decoded from the first byte too.
            if shared.policy().has_health_checks() {
                self.tracker.decode_request_headers();
            }
            if let Some(prefixes) = shared.connections().long_lived().grpc_prefixes() {
                let sse = shared.connections().long_lived().http2_sse();
                self.tracker.decode_response_headers(prefixes, sse);
            }
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
                        stats,
                        "a read buffer starts inside the last one, not where a request ended",
                        &mut fed,
                    );
                    return fed;
                }
                Behind::AtSlice => {
                    self.lose(
                        conn,
                        shared,
                        stats,
                        "a read buffer starts where a slice of the last one started",
                        &mut fed,
                    );
                    return fed;
                }
                Behind::Elsewhere if self.more_slices => {
                    self.lose(
                        conn,
                        shared,
                        stats,
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
            self.lose(
                conn,
                shared,
                stats,
                "the read buffer does not match",
                &mut fed,
            );
            return fed;
        };
        // During a drain, the requests behind one whose response has not begun are held back
        // (`hold_cut`): the slices are looked at twice then, so they are kept (a drain only).
        let cut = if shared.is_draining() && self.counts() {
            let slices: Vec<&[u8]> = chunks.collect();
            let cut = self.hold_cut(&slices, run);
            let stop = cut.map_or(u64::MAX, |(end, _)| end);
            if !self.feed_read(
                slices.into_iter(),
                start,
                run,
                stop,
                conn,
                shared,
                stats,
                &now,
                &mut fed,
            ) {
                return fed;
            }
            cut
        } else {
            if !self.feed_read(
                chunks,
                start,
                run,
                u64::MAX,
                conn,
                shared,
                stats,
                &now,
                &mut fed,
            ) {
                return fed;
            }
            None
        };
        self.may_be_left_behind = self.tracker.pipelined();
        self.after_feed(conn, shared, stats, &mut fed);
        if let Some((end, i)) = cut.filter(|_| !self.lost) {
            self.hold_behind(self.unanswered_id(i), conn, shared, &now);
            fed.hold_from = Some(usize::try_from(end.saturating_sub(start)).unwrap_or(len));
        }
        self.note_partial_head(shared);
        fed
    }

    /// Feeds a read's slices (the first `run` bytes fed before, checked against the tail), the
    /// client bytes from offset `stop` on excepted. `false`: the connection was lost.
    #[allow(clippy::too_many_arguments)]
    fn feed_read<'a>(
        &mut self,
        chunks: impl Iterator<Item = &'a [u8]>,
        start: u64,
        run: usize,
        stop: u64,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
        now: &impl Fn() -> u64,
        fed: &mut Fed,
    ) -> bool {
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
                        stats,
                        "the bytes left in Envoy's read buffer are not the ones read",
                        fed,
                    );
                    return false;
                }
                bytes.get(run - at..).unwrap_or_default()
            } else {
                bytes
            };
            at += bytes.len();
            // Bytes held back (`hold_cut`) are never fed.
            let room = stop.saturating_sub(self.tracker.client_fed());
            let fresh = fresh
                .get(..usize::try_from(room).unwrap_or(usize::MAX).min(fresh.len()))
                .unwrap_or_default();
            if fresh.is_empty() {
                continue;
            }
            let shadow = !self.counts();
            let tickets = &mut self.tickets;
            self.tracker.client(fresh, &mut |ev, t| {
                on_event(ev, t, tickets, shadow, conn, shared, stats, now, fed)
            });
        }
        self.more_slices = slices > READ_SLICES;
        true
    }

    /// During a drain: where the client's bytes stop reaching Envoy, if this read (`slices`,
    /// the first `run` bytes fed before) holds bytes behind a complete request whose response
    /// has not begun. Those would be pipelined requests: Envoy would answer them after a
    /// response that carries `close` (its drain-close, or this module's), and even at once,
    /// within the read, when it answers that request without its upstream. Held back, they are
    /// never processed (RFC 9112 §9.6) and the client retries them on a new connection
    /// (§9.3.2: no response, not processed). Found by a dry run on a copy of the tracker (no
    /// event counted): the request's end, and its place behind the oldest one not answered.
    fn hold_cut(&self, slices: &[&[u8]], run: usize) -> Option<(u64, usize)> {
        let mut probe = self.tracker.clone();
        let mut at = 0;
        for bytes in slices {
            let fresh = bytes.get(run.saturating_sub(at)..).unwrap_or_default();
            at += bytes.len();
            probe.client(fresh, &mut |_, _| {});
        }
        // The oldest request not answered, or the one behind it if its response has begun
        // (then without `close`: `held` would be set).
        let i = usize::from(!probe.awaiting_response_head());
        let end = match probe.unanswered_end(i) {
            Some(end) => end,
            // More requests completed in this read than their ends are remembered
            // (`REQUEST_ENDS`): fed again in pieces, up to the one that completes request `i`.
            None if probe.complete_unanswered() > i => self.request_end_in(slices, run, i)?,
            None => return None,
        };
        (end < probe.client_fed()).then_some((end, i))
    }

    /// The client offset where the request `i` places behind the oldest one not answered ends,
    /// in this read (`slices`, the first `run` bytes fed before), found by a dry run in pieces
    /// of [`PROBE_PIECE`] bytes: no more than `REQUEST_ENDS` requests complete in one (a request
    /// has at least 16 bytes), so its end is still remembered after the piece that completes
    /// it.
    #[cold]
    fn request_end_in(&self, slices: &[&[u8]], run: usize, i: usize) -> Option<u64> {
        let mut probe = self.tracker.clone();
        let mut at = 0;
        for bytes in slices {
            let fresh = bytes.get(run.saturating_sub(at)..).unwrap_or_default();
            at += bytes.len();
            for piece in fresh.chunks(PROBE_PIECE) {
                probe.client(piece, &mut |_, _| {});
                if probe.complete_unanswered() > i {
                    return probe.unanswered_end(i);
                }
            }
        }
        None
    }

    /// HTTP/1.1: the id of the request `i` places behind the oldest one not answered (ids are
    /// sequence numbers: the oldest not answered is the one after those that ended).
    pub(super) fn unanswered_id(&self, i: usize) -> u64 {
        self.tracker.totals().1.saturating_add(1 + i as u64)
    }

    /// The response to the request `last` (its id) carries, or will carry, `close`: no later
    /// client byte reaches Envoy, and the requests read behind it (never to be processed) give
    /// their tickets back.
    pub(super) fn hold_behind(
        &mut self,
        last: u64,
        conn: &Conn,
        shared: &Shared,
        now: &impl Fn() -> u64,
    ) {
        self.set_held();
        let mut k = 0;
        while let Some(&(id, _)) = self.tickets.get(k) {
            if u64::from(id) <= last {
                k += 1;
                continue;
            }
            let (_, ticket) = self.tickets.swap_remove(k);
            if let Some(t) = ticket {
                shared.request_ended_in(conn.reserved(), t);
            }
            conn.exchange_ended(now());
        }
        self.note_partial_head(shared);
    }

    /// Keep the process-wide count of heads on their way in step with this connection's (after
    /// a read's events: a completed head has its ticket before it stops counting here).
    /// A lost connection keeps a head it had counted until it closes (the drain's view of
    /// Envoy's gauges may predate that head).
    pub(super) fn note_partial_head(&mut self, shared: &Shared) {
        if self.lost {
            return;
        }
        // A head begun behind a `close` is held back: never a request.
        let partial = self.counts() && self.tracker.partial() && !self.held();
        if partial != self.partial_head {
            self.partial_head = partial;
            shared.connections().note_partial_head(partial);
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
        stats: &impl StatsHost,
        fed: &mut Fed,
    ) -> Option<I> {
        if self.lost || self.tracker.tunnel() {
            return None;
        }
        if chunks.is_none() {
            self.lose(conn, shared, stats, missing, fed);
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
/// Returns `Some(keep)` when requests in the buffer are held back (`TrackedConnection::hold_cut`,
/// behind a `close`): the glue makes the read buffer `keep` (a copy of the bytes before them)
/// before Envoy's codec sees it.
#[allow(clippy::too_many_arguments)]
pub fn on_read_hook<'a, I: Iterator<Item = &'a [u8]>>(
    conn: &Conn,
    len: usize,
    chunks: impl Fn() -> Option<I>,
    watch: &mut FirstStream,
    tracking: Option<&mut TrackedConnection>,
    shared: &Shared,
    stats: &impl StatsHost,
    now: impl Fn() -> u64,
) -> Option<Vec<u8>> {
    if conn.following_bytes() {
        conn.on_followed_read(len, &chunks, watch);
    } else {
        conn.on_read(len, &[]);
    }
    let hold = tracking?
        .on_read(len, chunks(), conn, shared, stats, now)
        .hold_from?;
    // A copy of the bytes before the ones held back (a drain only; none when all are).
    let mut keep = Vec::new();
    for bytes in chunks().into_iter().flatten() {
        let room = hold - keep.len();
        if room == 0 {
            break;
        }
        keep.extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
    }
    Some(keep)
}
