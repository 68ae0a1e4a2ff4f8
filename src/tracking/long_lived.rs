//! A WebSocket's move at a drain, on its connection (docs/contributing/long-lived-streams.md, "Moving a
//! WebSocket"): its frames fed to the [`crate::exchange::Moving`] that took the HTTP/1.1
//! state's place after the 101, what each write must become, and what each wake-up of the
//! moves thread does. Returns actions; the glue performs them. May use what `tracking` may.

use super::*;
use crate::connections::MovePlan;
use crate::engine::shared::{Shared, Stat};
use crate::exchange::websocket::mover::{Wake, Write};
use crate::exchange::websocket::{close_frame, GOING_AWAY};
use crate::host::extension::StatsHost;

/// The reason sent with our Close (RFC 6455 §7.4.1, 1001 "Going Away").
pub const GOING_AWAY_REASON: &str = "server going away";

// `Moving::step`: where the move is.
/// Switched; no wake-up asked yet (or the moves are off).
const NEW: u8 = 0;
/// A wake-up asked (before the move time, `at` is 0 until the plan is known).
const WAITING: u8 = 1;
/// The move time passed: waiting for a message end until `at` (`message_wait`).
const DUE: u8 = 2;
/// `message_wait` passed: any frame end will do (the next write that has one).
const DUE_ANY: u8 = 3;
/// Our Close was written: the connection should close by itself before `at`.
const SENT: u8 = 4;
/// Nothing more to do.
const DONE: u8 = 5;
/// Both Close frames went through: close the connection now (before Envoy's delayed close).
const CLOSING: u8 = 6;

/// What the glue does with a write towards the client of a switched connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsWrite {
    Pass,
    /// Append the Close frame to the write.
    Append(Vec<u8>),
    /// Replace the whole write by these bytes (its first frames, then the Close).
    Replace(Vec<u8>),
    /// Drop the whole write (frames after our Close).
    Drop,
}

/// What the glue does at a wake-up of a switched connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsWake {
    Nothing,
    /// Write the Close towards the client.
    Inject(Vec<u8>),
    /// Send a masked Close towards the upstream ([`upstream_close`]), then close (flushing).
    TellUpstreamAndClose,
    /// Close, flushing what is written.
    Close,
    /// The close handshake is over: close at once (flushing if the connection is still open,
    /// without waiting if Envoy's own delayed close already began: everything was written).
    CloseNow,
    /// Write these bytes towards the client (none: nothing to write), then close, flushing:
    /// an SSE response whose bytes so far end at an event boundary ends now.
    EndAndClose(Vec<u8>),
    /// HTTP/2 streams moved: write `to_client` towards the client (their `grpc-status: 14`
    /// trailers), then `to_envoy` towards Envoy (their RST_STREAM(CANCEL)), in this order and
    /// in this one hook (docs/contributing/long-lived-streams.md, "HTTP/2 streams": nothing of Envoy's can
    /// fall between them, and Envoy writes nothing more on a stream after its reset, H2-2).
    H2Moves {
        to_client: Vec<u8>,
        to_envoy: Vec<u8>,
    },
}

fn client_close() -> Vec<u8> {
    close_frame(GOING_AWAY, GOING_AWAY_REASON, None)
        .as_bytes()
        .to_vec()
}

impl TrackedConnection {
    /// Whether the connection switched to WebSocket frames that are followed.
    pub fn is_websocket(&mut self) -> bool {
        self.tracker.websocket().is_some()
    }

    /// The client's bytes on a switched connection (every read's bytes are new: Envoy's codec
    /// takes all of an upgraded connection's bytes, ENVOY_FACTS.md).
    /// (`None`: Envoy gave none; the follower then gives up, a client byte being unseen.)
    pub(super) fn websocket_client<'a>(&mut self, chunks: Option<impl Iterator<Item = &'a [u8]>>) {
        if let Some(m) = self.tracker.websocket() {
            match chunks {
                Some(chunks) => chunks.for_each(|c| m.mv.client_bytes(c)),
                // A reserved opcode: the follower gives up (sticky).
                None => m.mv.client_bytes(&[0x83, 0x80, 0, 0, 0, 0]),
            }
        }
    }

    /// A write towards the client on a switched connection (`chunks`: its slices, `None` if
    /// Envoy gave none: the move then gives up, a server byte being unseen). `now`: `Shared`
    /// clock nanos. Returns what to do with the write, and a wake-up to ask for when our
    /// Close goes out in it (the close timeout).
    pub fn websocket_write<'a>(
        &mut self,
        chunks: Option<impl Iterator<Item = &'a [u8]>>,
        close_timeout: u64,
        now: u64,
    ) -> (WsWrite, Option<u64>) {
        let Some(m) = self.tracker.websocket() else {
            return (WsWrite::Pass, None);
        };
        let Some(chunks) = chunks else {
            // A reserved opcode with FIN: the follower gives up (sticky), so nothing is written
            // into a stream it no longer follows.
            m.mv.server_bytes(&[0x83, 0x00]);
            return (WsWrite::Pass, None);
        };
        let slices: Vec<&[u8]> = chunks.collect();
        let before: usize = slices.iter().map(|c| c.len()).sum();
        // The whole write at once: the Close goes after its last message end, in whichever
        // slice (a Close after the first slice's would drop the whole messages of the others).
        let (out, split) = match m.mv.server_write(&slices) {
            Write::Pass => (WsWrite::Pass, None),
            Write::Drop => (WsWrite::Drop, None),
            Write::AppendClose => (WsWrite::Pass, Some(before)),
            Write::SplitClose(k) => (WsWrite::Pass, Some(k)),
        };
        let Some(at) = split else {
            if m.step == SENT && m.mv.handshake_done() {
                // The upstream answered the client's Close: nothing more will pass. Close now,
                // rather than wait for Envoy's own close after the upstream's (a delayed close:
                // the client waits for the server to close first, RFC 6455 §7.1.1).
                m.step = CLOSING;
                return (out, Some(1));
            }
            return (out, None);
        };
        m.step = SENT;
        m.at = now.saturating_add(close_timeout);
        let close = client_close();
        if at == before {
            return (WsWrite::Append(close), Some(m.at));
        }
        let mut bytes: Vec<u8> = slices.concat();
        bytes.truncate(at);
        bytes.extend_from_slice(&close);
        (WsWrite::Replace(bytes), Some(m.at))
    }

    /// A write just switched the connection to WebSocket frames (`tunnel()` is set): counted
    /// open once. Returns `true` the first time.
    pub fn note_switch(&mut self, shared: &Shared) -> bool {
        let Some(m) = self.tracker.websocket() else {
            return false;
        };
        if m.step != NEW {
            return false;
        }
        m.step = WAITING;
        if self.counts() {
            shared.connections().long_lived().websocket_opened();
        }
        true
    }

    /// The moves thread woke the connection (`plan`: its move, `None` before the moves begin
    /// or when they are off). Returns what to do now and when to be woken next.
    pub fn websocket_wake(&mut self, plan: Option<MovePlan>, now: u64) -> (WsWake, Option<u64>) {
        let counts = self.counts();
        let Some(m) = self.tracker.websocket().filter(|_| counts) else {
            return (WsWake::Nothing, None);
        };
        match m.step {
            NEW | WAITING => {
                let Some(p) = plan else {
                    return (WsWake::Nothing, None);
                };
                m.step = WAITING;
                if now < p.at {
                    m.at = p.at;
                    return (WsWake::Nothing, Some(p.at));
                }
                if m.mv.due(false) == Wake::InjectClose {
                    m.step = SENT;
                    m.at = now.saturating_add(p.close_timeout);
                    return (WsWake::Inject(client_close()), Some(m.at));
                }
                if m.mv.lost() || m.mv.ending() {
                    m.step = DONE;
                    return (WsWake::Nothing, None);
                }
                m.step = DUE;
                m.at = now.saturating_add(p.message_wait);
                (WsWake::Nothing, Some(m.at))
            }
            DUE if now >= m.at => {
                let close_timeout = plan.map_or(0, |p| p.close_timeout);
                if m.mv.due(true) == Wake::InjectClose {
                    m.step = SENT;
                    m.at = now.saturating_add(close_timeout);
                    return (WsWake::Inject(client_close()), Some(m.at));
                }
                m.step = if m.mv.moved() { SENT } else { DUE_ANY };
                if m.step == SENT {
                    return (WsWake::Nothing, Some(m.at));
                }
                (WsWake::Nothing, None)
            }
            CLOSING => {
                m.step = DONE;
                (WsWake::CloseNow, None)
            }
            SENT if now >= m.at => {
                m.step = DONE;
                match m.mv.close_timeout() {
                    Wake::TellUpstreamAndClose => (WsWake::TellUpstreamAndClose, None),
                    Wake::Close => (WsWake::Close, None),
                    _ => (WsWake::Nothing, None),
                }
            }
            DUE | SENT => (WsWake::Nothing, Some(m.at)),
            _ => (WsWake::Nothing, None),
        }
    }

    /// The connection closed: a switched one is no longer open, and moved if our Close went.
    pub(super) fn websocket_closed(&mut self, shared: &Shared, stats: &impl StatsHost) {
        let counts = self.counts();
        let Some(m) = self.tracker.websocket() else {
            return;
        };
        if m.step == NEW || !counts {
            return;
        }
        let moved = m.mv.moved();
        let dropped = if moved { m.mv.dropped_messages() } else { 0 };
        shared
            .connections()
            .long_lived()
            .websocket_closed(moved, dropped);
        if moved {
            shared.count(stats, Stat::WebsocketsMoved);
            for _ in 0..dropped {
                shared.count(stats, Stat::WebsocketMessagesDropped);
            }
        }
    }
}

/// How soon to look again when a gRPC stream's bytes did not end between two messages (or the
/// connection's between two frames) at its move time.
const H2_RETRY_NANOS: u64 = 10_000_000;

impl TrackedConnection {
    /// A gRPC response began since the last call (HTTP/2, its streams followed): once the
    /// moves began, the glue wakes the connection so that it is moved at its time (a stream
    /// opened on a connection made after the moves began, or after its wake-up).
    pub fn grpc_unnoticed(&mut self) -> bool {
        self.tracker.take_new_grpc()
    }

    /// Whether the connection is followed as HTTP/2.
    pub fn is_http2(&self) -> bool {
        self.tracker.protocol() == Protocol::Http2
    }

    /// The moves thread woke an HTTP/2 connection. At its move time, every resumable gRPC
    /// stream whose response so far ends between two whole messages is moved (ended in the
    /// tracker, its ticket given back, counted); at its time in the last part of
    /// `drain_timeout` (`final_at`), every gRPC stream still open is, the same way. The others,
    /// or all while a frame is under way, are looked at again 10 ms later. A connection whose
    /// gRPC streams are not followed is never woken again. `stamp`: the connections' clock, for
    /// the connection's idle time.
    pub fn h2_wake(
        &mut self,
        plan: Option<MovePlan>,
        now: u64,
        stamp: u64,
        conn: &crate::connections::Conn,
        shared: &Shared,
        stats: &impl StatsHost,
    ) -> (WsWake, Option<u64>) {
        use crate::exchange::GrpcStreams;
        if !self.counts() || self.lost {
            return (WsWake::Nothing, None);
        }
        let Some(p) = plan else {
            return (WsWake::Nothing, None);
        };
        let streams = match self.tracker.h2_grpc_streams() {
            GrpcStreams::Off => return (WsWake::Nothing, None),
            GrpcStreams::NotNow => {
                let next = if now < p.at {
                    p.at
                } else {
                    now.saturating_add(H2_RETRY_NANOS)
                };
                return (WsWake::Nothing, Some(next));
            }
            GrpcStreams::Now(s) => s,
        };
        let last = now >= p.final_at;
        if now < p.at {
            return (WsWake::Nothing, Some(p.at));
        }
        let (mut to_client, mut to_envoy) = (Vec::new(), Vec::new());
        let mut waiting = false;
        for g in streams.into_iter().filter(|g| g.resumable || last) {
            if !g.whole {
                waiting = true;
                continue;
            }
            if !self.tracker.h2_end_stream(g.id) {
                continue;
            }
            to_client.extend(if g.sse {
                crate::exchange::sse_end_of_stream(g.id)
            } else if g.no_response {
                crate::exchange::grpc_trailers_only(g.id)
            } else {
                crate::exchange::grpc_unavailable(g.id)
            });
            to_envoy.extend(crate::exchange::rst_stream_cancel(g.id));
            if let Some(i) = self.tickets.iter().position(|(t, _)| *t == g.id) {
                if let (_, Some(ticket)) = self.tickets.swap_remove(i) {
                    shared.request_ended_in(conn.reserved(), ticket);
                }
                conn.exchange_ended(stamp);
            }
            let ll = shared.connections().long_lived();
            if g.sse {
                ll.h2_sse_response_moved();
                shared.count(stats, Stat::H2SseResponsesMoved);
            } else if last {
                ll.grpc_stream_moved(true);
                shared.count(stats, Stat::GrpcStreamsEndedAtTimeout);
            } else {
                ll.grpc_stream_moved(false);
                shared.count(stats, Stat::GrpcStreamsMoved);
            }
        }
        let wake = if waiting {
            Some(now.saturating_add(H2_RETRY_NANOS))
        } else {
            // The last part's pass, for the streams held to their end (and those opened since).
            (!last && p.final_at != u64::MAX).then_some(p.final_at)
        };
        if to_client.is_empty() {
            return (WsWake::Nothing, wake);
        }
        (
            WsWake::H2Moves {
                to_client,
                to_envoy,
            },
            wake,
        )
    }
}

/// The masked Close towards the upstream (as from its client, RFC 6455 §5.3) with `key`.
pub fn upstream_close(key: [u8; 4]) -> Vec<u8> {
    close_frame(GOING_AWAY, GOING_AWAY_REASON, Some(key))
        .as_bytes()
        .to_vec()
}

// ---- SSE (HTTP/1.1, chunked or close-delimited) ---------------------------------------------

/// `sse::Ending::step`: looking for an event boundary (at a chunk start, when chunked).
const SSE_LOOKING: u8 = 0;
/// The end was written (or the server ended the response): close at the next wake-up.
const SSE_ENDED: u8 = 1;
/// Closed (or closing).
const SSE_CLOSED: u8 = 2;
/// The body could not be followed: left as today.
const SSE_LOST: u8 = 3;

/// How soon to look again when an SSE response was not at a chunk start at its move time.
const SSE_RETRY_NANOS: u64 = 10_000_000;

impl TrackedConnection {
    /// An SSE response is in flight that no wake-up counted yet (it began after the moves'
    /// start, or the drain has not started): the glue wakes it once the drain started.
    pub fn sse_unnoticed(&self) -> bool {
        !self.sse_counted && self.tracker.sse_in_flight()
    }

    /// The moves thread woke a connection that is not a WebSocket: an SSE response in flight
    /// is counted (once), and at its move time handed over to its end: ended at once when its
    /// bytes so far end at an event boundary (the tracker follows an SSE body's events), else
    /// the write hook ends it at the first boundary; once ended, the connection closes.
    pub fn sse_wake(
        &mut self,
        plan: Option<MovePlan>,
        now: u64,
        shared: &Shared,
    ) -> (WsWake, Option<u64>) {
        if !self.counts() {
            return (WsWake::Nothing, None);
        }
        if let Some(e) = self.tracker.sse_ending().filter(|e| e.due) {
            if e.step == SSE_ENDED {
                e.step = SSE_CLOSED;
                return (WsWake::Close, None);
            }
            return (WsWake::Nothing, None);
        }
        if !self.tracker.sse_in_flight() {
            return (WsWake::Nothing, None);
        }
        if !self.sse_counted {
            self.sse_counted = true;
            shared.connections().long_lived().sse_opened();
        }
        let Some(p) = plan else {
            return (WsWake::Nothing, None);
        };
        if now < p.at {
            return (WsWake::Nothing, Some(p.at));
        }
        if !self.tracker.sse_hand_over() {
            return (WsWake::Nothing, Some(now.saturating_add(SSE_RETRY_NANOS)));
        }
        match self.tracker.sse_ending() {
            Some(e) if e.step == SSE_LOOKING && e.body.can_end_here() => {
                e.step = SSE_CLOSED;
                (WsWake::EndAndClose(e.body.terminator().to_vec()), None)
            }
            _ => (WsWake::Nothing, None),
        }
    }

    /// A write of an SSE response followed in the HTTP/1.1 state's place (`chunks`: its slices;
    /// `None`: the body is no longer followed, left as today). Returns the edit, and a wake-up
    /// to ask for (now: the close) once the response ended in it.
    pub fn sse_write<'a>(
        &mut self,
        chunks: Option<impl Iterator<Item = &'a [u8]>>,
    ) -> (WsWrite, Option<u64>) {
        let Some(e) = self.tracker.sse_ending() else {
            return (WsWrite::Pass, None);
        };
        match e.step {
            SSE_ENDED | SSE_CLOSED => return (WsWrite::Drop, None),
            SSE_LOST => return (WsWrite::Pass, None),
            _ => {}
        }
        let Some(chunks) = chunks else {
            e.step = SSE_LOST;
            return (WsWrite::Pass, None);
        };
        if !e.due {
            // Followed only (close-delimited, before its move time).
            for c in chunks {
                let _ = e.body.feed(c);
            }
            return (WsWrite::Pass, None);
        }
        let slices: Vec<&[u8]> = chunks.collect();
        let (mut before, mut end) = (0usize, None);
        for c in &slices {
            match e.body.feed(c) {
                Err(_) => {
                    e.step = SSE_LOST;
                    return (WsWrite::Pass, None);
                }
                Ok(fed) => {
                    // The server ended the response itself: nothing to add.
                    if let Some(k) = fed.ended {
                        end = Some((before + k, false));
                        break;
                    }
                    // The write's last event boundary, whichever slice holds it: every whole
                    // event of the write reaches the client (the first slice's would drop the
                    // events of the others).
                    if let Some(k) = fed.cut {
                        end = Some((before + k, true));
                    }
                }
            }
            before += c.len();
        }
        let Some((at, cut)) = end else {
            return (WsWrite::Pass, None);
        };
        e.step = SSE_ENDED;
        let terminator = if cut { e.body.terminator() } else { b"" };
        let total: usize = slices.iter().map(|c| c.len()).sum();
        let edit = if at == total {
            if terminator.is_empty() {
                WsWrite::Pass
            } else {
                WsWrite::Append(terminator.to_vec())
            }
        } else {
            let mut bytes: Vec<u8> = slices.concat();
            bytes.truncate(at);
            bytes.extend_from_slice(terminator);
            WsWrite::Replace(bytes)
        };
        (edit, Some(1))
    }

    /// The connection closed: an SSE response counted at the moves' start is no longer open,
    /// and moved if its end was written.
    pub(super) fn sse_closed(&mut self, shared: &Shared, stats: &impl StatsHost) {
        if !std::mem::take(&mut self.sse_counted) {
            return;
        }
        let moved = self
            .tracker
            .sse_ending()
            .is_some_and(|e| matches!(e.step, SSE_ENDED | SSE_CLOSED));
        shared.connections().long_lived().sse_closed(moved);
        if moved {
            shared.count(stats, Stat::SseResponsesMoved);
        }
    }
}

#[cfg(test)]
mod tests;
