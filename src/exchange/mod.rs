//! Follows the HTTP/1.1 (RFC 9112) or HTTP/2 (RFC 9113) framing of one downstream connection
//! from the bytes the network filter sees in both directions, and tells how many requests are in
//! flight on it and when it is idle. Pure: no FFI, no clock, no allocation on the HTTP/1.1 path.
//!
//! Why: the network filter in front of the connection manager sees every connection, but only
//! the HTTP filter (when it is in the chain) sees requests. Following the framing lets the
//! network filter alone know whether a connection carries a request, so an idle one can be
//! closed (or sent a GOAWAY) at drain start without an HTTP filter. Client→server bytes are what
//! the client sent; server→client bytes are Envoy's own codec output, which is well-formed, so
//! the server side is what ends requests.
//!
//! Cost: this runs on every read and write of the request path. It never walks payload bytes
//! (bodies, chunk data and HTTP/2 payloads are skipped by length, and a write made only of them
//! need not be fetched at all: [`Tracker::server_unread_ahead`], [`unread`]). A head whose
//! lines are whole in the bytes fed is read a line at a time: a scan for each LF sixteen bytes
//! at a time, the start line, and the value of a header only when its name is one of the five it
//! needs (`content-length`, `connection`, `transfer-encoding`, `user-agent`, `upgrade`; any
//! case), compared eight bytes at a time. Every other header line costs its LF scan. Where a
//! head is split between feeds, the byte-by-byte parse takes over at the split line (the
//! property tests feed the same bytes whole and byte by byte and want the same).
//!
//! What it does not follow it gives up on: the first thing it cannot follow emits
//! [`Event::Lost`] once, [`Tracker::protocol`] becomes [`Protocol::Unknown`] and every later
//! feed returns at once. The caller then treats the connection as busy until close (or asks the
//! HTTP filter). Unknown: a malformed start line, header value or chunk size; a head or line
//! longer than [`MAX_HEAD`]; both `Transfer-Encoding` and `Content-Length`, differing
//! `Content-Length` values, a request `Transfer-Encoding` not ending in chunked; more than
//! [`MAX_PIPELINED`] requests waiting; a response nobody asked for; bytes the client sent while
//! a CONNECT or upgrade waited for its answer when that answer was not a tunnel (not buffered,
//! so they cannot be parsed later); for HTTP/2, a bad preface, a server whose first frame is not
//! SETTINGS, HEADERS/DATA/CONTINUATION on stream 0, CONTINUATION out of place, a client HEADERS
//! on an even id, more than [`MAX_STREAMS`] streams open, a GOAWAY shorter than 8 bytes. (A
//! client header block on a stream closed here, as trailers after the server's RST_STREAM,
//! opens nothing and is followed on.)
//!
//! Tunnels: a 101, a 2xx to CONNECT, or a response whose body runs until close make the
//! connection busy until it closes ([`Tracker::tunnel`]); the request stays in flight (no
//! `Ended`, as in Envoy, whose stream lives as long as the tunnel) and later feeds are ignored.
//!
//! Memory per connection: `size_of::<Tracker>()` is 264 bytes on 64-bit targets (a unit test
//! holds it to at most 272): the HTTP/1.1 state (both directions' parse positions, the FIFO of
//! [`MAX_PIPELINED`] request flags and the two [`HINT_LEN`]-byte hint buffers) shares its space
//! with the HTTP/2 state. Nothing grows for HTTP/1.1. HTTP/2 adds a `Vec` of 8 bytes per open
//! stream, which only grows (capacity is kept) and is bounded by [`MAX_STREAMS`] (8 KiB).

pub mod hpack;
mod http1;
mod http2;
pub mod sse;
#[cfg(test)]
mod tests;
pub mod websocket;

use http1::*;
pub use http2::blocks::MAX_BLOCK;
pub use http2::grpc::Messages as GrpcMessages;

mod h2_moves;
pub use h2_moves::*;
use http2::*;
pub use http2::{FrameHead, FrameReader, Read};
pub use websocket::mover::Moving;

// The limits: above them the tracker gives up ([`Event::Lost`]), which is safe: the connection's
// requests are then counted from Envoy's gauges (`crate::tracking`, `Registry::give_back`), the
// connection is never taken for idle, and nothing is undercounted in between.

/// HTTP/1.1 requests read ahead of their responses (pipelining) before the tracker gives up.
/// Envoy sets no such limit (it reads one request at a time and buffers the rest up to the
/// connection's buffer limit); clients that pipeline at all send a few.
pub const MAX_PIPELINED: usize = 16;
/// HTTP/2 streams open at once before the tracker gives up. Envoy's default
/// `max_concurrent_streams` is 2^31-1, but clients open about 100 (browsers, gRPC); a table for
/// more would cost 8 bytes each per connection.
pub const MAX_STREAMS: usize = 1024;
/// Bytes of the User-Agent value and of the request-target kept for health-check recognition.
pub const HINT_LEN: usize = 64;
/// A request or response head (or a chunk-size line, or a trailer section) longer than this:
/// Unknown. Above the largest head Envoy can be configured to take (`max_request_headers_kb` and
/// `max_response_headers_kb` are at most 8192 KiB; 60 KiB by default): nothing is kept of a head,
/// so following the largest costs no memory.
pub const MAX_HEAD: usize = 8 * 1024 * 1024 + 64 * 1024;

/// What the connection speaks, as far as the tracker follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The client sent nothing yet, or only a prefix of `PRI * HTTP/2`.
    Undecided,
    /// HTTP/1.1 (or 1.0): anything that does not start with `PRI * HTTP/2`.
    Http1,
    /// HTTP/2 with prior knowledge: the client preface was sent.
    Http2,
    /// The tracker could not follow the bytes and stopped ([`Event::Lost`]).
    Unknown,
}

/// Something the last feed did. `id`: HTTP/2 stream id; HTTP/1.1: the request's sequence number on the connection (1, 2, 3, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A request's head is complete (HTTP/1.1), a stream's request header block is (HTTP/2).
    Started(u32),
    /// The request's final response is complete (HTTP/1.1), the stream closed or was reset.
    Ended(u32),
    /// The tracker cannot follow the connection any more (emitted once; see the module doc).
    Lost,
}

/// HTTP/1.1 only: what identifies the request whose head completed last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hints<'a> {
    /// The `User-Agent` value, trimmed, at most [`HINT_LEN`] bytes (the last such header).
    pub user_agent: Option<&'a [u8]>,
    /// The request-target, at most [`HINT_LEN`] bytes.
    pub path: Option<&'a [u8]>,
    /// Either was longer than [`HINT_LEN`] and cut.
    pub truncated: bool,
}

/// One connection's exchange tracker: feed it both directions' bytes in order.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    ctx: Ctx,
    wire: Wire,
    /// Client bytes fed so far.
    fed: u64,
}

/// What both protocols' parsers update, kept apart from their state so that a parser can hold
/// its own state mutably while it changes these.
#[derive(Debug, Clone, Copy, Default)]
struct Ctx {
    started: u64,
    ended: u64,
    lost: bool,
    tunnel: bool,
    will_close: bool,
    /// Where the last requests ended in the client's bytes ([`Tracker::ends_a_request`]), and
    /// how many ended so far (wrapping: the ring's position).
    ends: RequestEnds,
    requests_done: u8,
    /// The hints of HTTP/1.1 heads begun from now on are not wanted ([`Tracker::want_hints`]).
    hints_off: bool,
    /// HTTP/2: the directions whose header blocks are decoded ([`Tracker::decode_request_headers`]).
    decode: u8,
}

/// The client offsets just after the last [`REQUEST_ENDS`] complete requests (HTTP/1.1), low
/// 32 bits: the only places Envoy's codec stops reading at. It parses one request at a time and
/// pauses at its end, never inside one, so bytes it leaves behind start at the end of the
/// request it parsed last: the one it serves, or the one before (whose response just ended).
/// (Four ends cover that with two more pipelined behind; a longer run of pipelined requests
/// loses the connection when Envoy hands bytes back. The low bits tell offsets apart within the
/// last 4 GiB of the client's bytes, far more than a read buffer holds.)
#[derive(Debug, Clone, Copy, Default)]
struct RequestEnds {
    at: [u32; REQUEST_ENDS],
}

/// Request ends remembered (see the private `RequestEnds`).
pub const REQUEST_ENDS: usize = 4;

impl RequestEnds {
    /// `end` after `n` earlier ends (`n`: requests completed so far).
    fn push(&mut self, n: u64, end: u64) {
        self.at[(n % REQUEST_ENDS as u64) as usize] = end as u32;
    }

    fn contains(&self, offset: u64) -> bool {
        offset != 0 && self.at.contains(&(offset as u32))
    }
}

/// Whether the module's GOAWAY (`crate::connections::GOAWAY_NO_ERROR`) may be written into a connection now, as its exchange tracker
/// knows it (connection mode; decided by the glue just before a scheduled event is handled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GoAwayGate {
    /// It may: no tracker follows the connection (filter mode: unchanged), or the tracker saw
    /// every server byte, no GOAWAY among them, and the server's bytes end between two frames.
    #[default]
    May,
    /// The server (Envoy) already wrote a GOAWAY: the client was told; ours would raise its
    /// last-stream-id. Counted as told, never written.
    EnvoySent,
    /// Not now: the tracker lost the thread of the bytes (it cannot vouch that no GOAWAY went),
    /// or the server's bytes end inside a frame. A later check may try again.
    NotNow,
}

#[derive(Debug, Clone)]
enum Wire {
    /// How many bytes of [`H2_PREFIX`] the client sent so far (all it sent), and the resumable
    /// gRPC path prefixes for the HTTP/2 state ([`Tracker::decode_response_headers`]; here, not
    /// in the tracker, so that they cost no room once the protocol is decided).
    Undecided(u8, Option<std::sync::Arc<[String]>>),
    Http1(H1),
    Http2(H2),
    /// After a 101 to WebSocket: the frame followers in the HTTP/1.1 state's place (no larger).
    WebSocket(Moving),
    /// An SSE response being ended at a drain (`Tracker::sse_hand_over`).
    Sse(sse::Ending),
}

impl Default for Wire {
    fn default() -> Self {
        Wire::Undecided(0, None)
    }
}

/// What `codec_type: AUTO` looks for (Envoy's `Http2::CLIENT_MAGIC_PREFIX`).
const H2_PREFIX: &[u8] = b"PRI * HTTP/2";
/// The whole client connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const CR: u8 = b'\r';
const LF: u8 = b'\n';
const SP: u8 = b' ';
const HT: u8 = b'\t';

fn lose(ctx: &mut Ctx) -> Option<Event> {
    ctx.lost = true;
    Some(Event::Lost)
}

impl Tracker {
    /// A tracker for a connection that has not carried a byte yet.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Bytes the client sent, in order, any split (call once per buffer slice). Calls `on` for every Started/Ended/Lost, in order.
    pub fn client(&mut self, bytes: &[u8], on: &mut impl FnMut(Event, &Tracker)) {
        self.fed = self.fed.saturating_add(bytes.len() as u64);
        if self.ctx.lost || self.ctx.tunnel {
            return;
        }
        if let Wire::Undecided(held, resumable) = &mut self.wire {
            let m = usize::from(*held);
            let want = H2_PREFIX.get(m..).unwrap_or_default();
            let same = bytes.iter().zip(want).take_while(|(a, b)| a == b).count();
            if same == want.len() {
                // Only the prefix decides, as in Envoy; the rest of the preface is checked by the
                // HTTP/2 follower.
                let resumable = resumable.take().unwrap_or_default();
                self.wire = Wire::Http2(H2::new(self.ctx.decode, resumable));
                self.run(true, bytes.get(same..).unwrap_or_default(), on);
            } else if same == bytes.len() {
                *held = (m + same) as u8;
            } else {
                // HTTP/1.1: the bytes held back as a possible preface are `H2_PREFIX[..m]`
                // (they matched it), so they are fed from there, not buffered.
                self.wire = Wire::Http1(H1::default());
                let held = H2_PREFIX.get(..m).unwrap_or_default();
                self.fed -= bytes.len() as u64;
                self.run(true, held, on);
                self.fed += bytes.len() as u64;
                self.run(true, bytes, on);
            }
            return;
        }
        self.run(true, bytes, on);
    }

    /// Bytes the server wrote towards the client, in order, any split.
    pub fn server(&mut self, bytes: &[u8], on: &mut impl FnMut(Event, &Tracker)) {
        if self.ctx.lost || self.ctx.tunnel {
            return;
        }
        if let Wire::Undecided(..) = self.wire {
            if !bytes.is_empty() {
                // The connection manager writes nothing before it picked a codec.
                lose(&mut self.ctx);
                on(Event::Lost, self);
            }
            return;
        }
        self.run(false, bytes, on);
    }

    /// Feeds one direction: each step consumes bytes until it has an event (then `on` is
    /// called with the whole tracker) or until the bytes are used up.
    fn run(&mut self, client: bool, bytes: &[u8], on: &mut impl FnMut(Event, &Tracker)) {
        // Client bytes end at `fed` (the held-back preface bytes, fed first, end where the new
        // bytes start).
        let base = self.fed.saturating_sub(bytes.len() as u64);
        let mut rest = bytes;
        while !self.ctx.lost && !self.ctx.tunnel {
            let Tracker { ctx, wire, .. } = self;
            let (n, ev) = match wire {
                Wire::Http1(h) if client => {
                    h.client(rest, ctx, base + (bytes.len() - rest.len()) as u64)
                }
                Wire::Http1(h) => h.server(rest, ctx),
                Wire::Http2(h) => h.step(client, rest, ctx),
                Wire::Undecided(..) | Wire::WebSocket(_) | Wire::Sse(_) => (rest.len(), None),
            };
            rest = rest.get(n..).unwrap_or_default();
            let Some(ev) = ev else {
                if self.ctx.tunnel && !client {
                    self.switch(rest);
                }
                return;
            };
            match ev {
                Event::Started(_) => self.ctx.started += 1,
                Event::Ended(_) => self.ctx.ended = (self.ctx.ended + 1).min(self.ctx.started),
                Event::Lost => {}
            }
            on(ev, self);
            // Neither follower gives an event without bytes: HTTP/1.1 reaches a response
            // head's verdict in the call that read its end (`H1::server`); an HTTP/2 frame
            // gives at most one event, in the call that read its last byte (`H2::step` goes on
            // to a frame's end in the call that read its header when its payload is empty, and
            // stops after an event only at a frame's end or when the connection is lost).
            if rest.is_empty() && matches!(self.wire, Wire::Http1(_) | Wire::Http2(_)) {
                return;
            }
        }
    }

    /// A tunnel just opened with `rest` the server's first bytes in it: a 101 that switched to
    /// WebSocket frames ([`http1::F_WS`]) takes the HTTP/1.1 state's place with the two frame
    /// followers ([`Moving`]), unless the client sent bytes while it waited for the answer
    /// (not kept, so its frames cannot be followed: left as today). A close-delimited SSE
    /// response ([`http1::F_SSE`], no length, not chunked) takes it with its events followed
    /// from the body's start ([`sse::Framing::UntilClose`]): nothing follows it on the
    /// connection, so nothing is lost by dropping the HTTP/1.1 state.
    #[cold]
    fn switch(&mut self, rest: &[u8]) {
        let Wire::Http1(h) = &self.wire else { return };
        let f = h.resp.facts;
        let connect = h.fifo.front().unwrap_or(0) & R_CONNECT != 0;
        if f & F_SSE != 0 && h.resp.status != 101 && !connect && h.fifo.len == 1 {
            let mut events = sse::Events::new();
            events.feed(rest);
            self.wire = Wire::Sse(sse::Ending {
                body: sse::Framing::UntilClose(events),
                due: false,
                step: 0,
            });
            return;
        }
        if f & F_WS == 0 || h.waited {
            return;
        }
        let mut moving = Moving::new(f & F_DEFLATE != 0);
        moving.mv.server_bytes(rest);
        self.wire = Wire::WebSocket(moving);
    }

    /// The WebSocket this connection switched to, if it did (see [`Moving`]); its frames are
    /// fed there by the caller, not through [`Tracker::client`] and [`Tracker::server`].
    pub fn websocket(&mut self) -> Option<&mut Moving> {
        match &mut self.wire {
            Wire::WebSocket(m) => Some(m),
            _ => None,
        }
    }

    /// HTTP/1.1: an SSE response is under way and not handed over to its end yet: a chunked
    /// one with no other request read behind it, or a close-delimited one.
    pub fn sse_in_flight(&self) -> bool {
        match &self.wire {
            Wire::Http1(h) => {
                h.resp.events.is_some()
                    && !self.ctx.lost
                    && !self.ctx.tunnel
                    && h.fifo.len == 1
                    && h.req.st == St::Start
            }
            Wire::Sse(e) => !e.due,
            _ => false,
        }
    }

    /// Hands an SSE response over to its end ([`sse::Ending`], `due`): a close-delimited one at
    /// once, a chunked one if the server's bytes so far end at a chunk start (else `false`: try
    /// again after the next write). From then on the connection is a tunnel: busy until it
    /// closes, its request in flight, and later bytes are the caller's to feed
    /// ([`Tracker::sse_ending`]), from the body's event state so far.
    pub fn sse_hand_over(&mut self) -> bool {
        if !self.sse_in_flight() {
            return false;
        }
        let h = match &mut self.wire {
            Wire::Sse(e) => {
                e.due = true;
                return true;
            }
            Wire::Http1(h) => h,
            _ => return false,
        };
        if h.resp.st != St::ChunkSize || h.resp.pos != 0 {
            return false;
        }
        let events = h.resp.events.unwrap_or_else(sse::Events::resumed);
        self.ctx.tunnel = true;
        self.wire = Wire::Sse(sse::Ending {
            body: sse::Framing::Chunked(sse::Chunked::at_chunk_start(events)),
            due: true,
            step: 0,
        });
        true
    }

    /// The SSE response followed in the HTTP/1.1 state's place: handed over to its end
    /// (`due`), or close-delimited and followed from its start.
    pub fn sse_ending(&mut self) -> Option<&mut sse::Ending> {
        match &mut self.wire {
            Wire::Sse(e) => Some(e),
            _ => None,
        }
    }

    /// HTTP/2: whether a GOAWAY of the module's may be written after the server's bytes so far
    /// ([`GoAwayGate`]): the follower saw every one of them (not lost),
    /// none was a GOAWAY, and they end between two frames. A connection that is not HTTP/2 (or
    /// not decided yet) is `NotNow`: nothing proves a GOAWAY fits.
    pub fn goaway_gate(&self) -> GoAwayGate {
        match &self.wire {
            Wire::Http2(_) if self.ctx.lost => GoAwayGate::NotNow,
            Wire::Http2(h) if h.server_goaway => GoAwayGate::EnvoySent,
            Wire::Http2(h) if h.s.reader.between_frames() => GoAwayGate::May,
            _ => GoAwayGate::NotNow,
        }
    }

    /// What the connection speaks ([`Protocol::Unknown`] once the tracker gave up).
    pub fn protocol(&self) -> Protocol {
        if self.ctx.lost {
            return Protocol::Unknown;
        }
        match self.wire {
            Wire::Undecided(..) => Protocol::Undecided,
            Wire::Http1(_) | Wire::WebSocket(_) | Wire::Sse(_) => Protocol::Http1,
            Wire::Http2(_) => Protocol::Http2,
        }
    }

    /// Requests (HTTP/1.1) / streams (HTTP/2) started and not ended. Never negative (u32, never underflows).
    pub fn in_flight(&self) -> u32 {
        u32::try_from(self.ctx.started.saturating_sub(self.ctx.ended)).unwrap_or(u32::MAX)
    }

    /// HTTP/1.1: bytes of a request head were read and the head is not complete yet (a request on its way: the connection is not idle). HTTP/2: a header block is incomplete (HEADERS without END_HEADERS, awaiting CONTINUATION).
    ///
    /// For HTTP/2 this includes a HEADERS or CONTINUATION frame whose payload is still
    /// arriving: `Started` comes with the last byte of the block. Leading empty lines before an
    /// HTTP/1.1 request line do not count.
    pub fn partial(&self) -> bool {
        match &self.wire {
            // A tunnel's client bytes are not heads (and a 101 to WebSocket drops the HTTP/1.1
            // state: the same whether the 101 came whole or split).
            Wire::Http1(h) => h.req.st.in_head() && !self.ctx.tunnel,
            Wire::Http2(h) => h.c.block != 0,
            Wire::Undecided(..) | Wire::WebSocket(_) | Wire::Sse(_) => false,
        }
    }

    /// A 101 upgrade or a CONNECT tunnel (2xx to CONNECT) is open, or a response body runs until the connection closes: busy until close.
    pub fn tunnel(&self) -> bool {
        self.ctx.tunnel
    }

    /// The connection will close after the current exchange (`Connection: close` on a request or response).
    ///
    /// Also set by an HTTP/1.0 message without `Connection: keep-alive`, by a response body
    /// that runs until close, by a response written before the request head was complete, and
    /// for HTTP/2 by a server GOAWAY.
    pub fn will_close(&self) -> bool {
        self.ctx.will_close
    }

    /// HTTP/1.1: User-Agent value and request-target of the request whose head completed last (valid inside `on` for Started, and after). At most HINT_LEN bytes each, `truncated` set if either was cut.
    ///
    /// "After" lasts until the first byte of the next request head arrives (the buffers are
    /// reused; keeping two sets would double them): while a head is partial, the hints are
    /// empty. Empty too for a head begun while they were not wanted ([`Tracker::want_hints`]).
    ///
    /// HTTP/2: `user-agent` and `:path` of the client header block decoded last (valid inside
    /// `on` for a stream's `Started`), when request blocks are decoded
    /// ([`Tracker::decode_request_headers`]) and their decoding has not stopped; else empty.
    pub fn hints(&self) -> Hints<'_> {
        match &self.wire {
            // Not once a tunnel opened: a 101 to WebSocket replaces the HTTP/1.1 state, and a
            // tunnel reads the same whether its head came whole or split.
            Wire::Http1(h) if h.hints.valid && !self.ctx.tunnel => h.hints.get(),
            Wire::Http2(H2 {
                blocks: Some(b), ..
            }) => b.hints(),
            _ => Hints::default(),
        }
    }

    /// Whether the hints of HTTP/1.1 request heads begun from the next client byte on are kept
    /// ([`Tracker::hints`]; wanted unless told otherwise). Keeping them is copying up to
    /// 2 x [`HINT_LEN`] bytes a request (about 100 instructions, callgrind), which only a drain
    /// reads (health checks): the network filter wants them while a drain is under way. A head
    /// keeps them or not from its first byte, whatever this says while it is read.
    #[inline]
    pub fn want_hints(&mut self, wanted: bool) {
        self.ctx.hints_off = !wanted;
    }

    /// HTTP/2: decode the client's header blocks (HPACK), for the `:path` and `user-agent` of
    /// each stream ([`Tracker::hints`]). Only before the connection's first byte (a decoder must
    /// see every block from the start: later, this does nothing). Costs a copy of every
    /// request header block and its decoding, so it is asked for only when something reads
    /// the result (`health_check_paths` configured).
    pub fn decode_request_headers(&mut self) {
        if self.fed == 0 && matches!(self.wire, Wire::Undecided(0, _)) {
            self.ctx.decode |= http2::blocks::REQUESTS | http2::blocks::HINTS;
        }
    }

    /// HTTP/2: decode the server's header blocks too (and the client's), for each stream's
    /// kind ([`Tracker::h2_stream_kind`]): a gRPC response, an SSE response to a `GET`;
    /// `resumable`: the `:path` prefixes of the gRPC methods whose streams may be moved. As
    /// [`Tracker::decode_request_headers`], only before the connection's first byte. `sse`:
    /// SSE responses to a `GET` are followed too ([`Tracker::h2_grpc_streams`] gives them).
    pub fn decode_response_headers(&mut self, resumable: std::sync::Arc<[String]>, sse: bool) {
        if let (0, Wire::Undecided(0, r)) = (self.fed, &mut self.wire) {
            *r = Some(resumable);
            self.ctx.decode |= http2::blocks::REQUESTS | http2::blocks::RESPONSES;
            if sse {
                self.ctx.decode |= http2::blocks::SSE;
            }
        }
    }

    /// HTTP/2: the open gRPC streams answered with `application/grpc` (their response headers
    /// written) whose messages are followed, and the movable SSE streams whose events are
    /// ([`GrpcStreams::Now`]); [`GrpcStreams::NotNow`]
    /// when no move may be written now: the server's bytes, or the client's (a RST_STREAM goes
    /// in between them towards Envoy), do not end between two frames outside a header block
    /// (RFC 9113 §6.10: nothing may come between a block's frames), or the client preface is
    /// not whole; [`GrpcStreams::Off`] when the response blocks are not decoded (not asked for,
    /// or stopped) or the tracker lost the thread.
    pub fn h2_grpc_streams(&self) -> GrpcStreams {
        let Wire::Http2(h) = &self.wire else {
            return GrpcStreams::Off;
        };
        let Some(b) = h.blocks.as_deref() else {
            return GrpcStreams::Off;
        };
        if self.ctx.lost || !b.decodes(false) {
            return GrpcStreams::Off;
        }
        let between = |d: &Frames| d.reader.between_frames() && d.block == 0;
        if !between(&h.s) || !between(&h.c) || usize::from(h.preface) < H2_PREFACE.len() {
            return GrpcStreams::NotNow;
        }
        GrpcStreams::Now(
            b.grpc
                .iter()
                .filter(|g| !g.lost)
                .map(|g| GrpcStream {
                    id: g.id,
                    whole: g.messages.at_boundary(),
                    resumable: g.resumable,
                    sse: false,
                    no_response: false,
                })
                .chain(b.sse.iter().filter(|e| !e.lost).map(|e| GrpcStream {
                    id: e.id,
                    whole: e.events.at_boundary(),
                    resumable: true,
                    sse: true,
                    no_response: false,
                }))
                .chain(
                    h.streams
                        .iter()
                        .filter(|s| {
                            use http2::blocks::{K_RESPONSE, K_RESUMABLE};
                            s.kind & (K_RESUMABLE | K_RESPONSE) == K_RESUMABLE
                                && s.closed & C_SERVER == 0
                        })
                        .map(|s| GrpcStream {
                            id: s.id,
                            whole: true,
                            resumable: true,
                            sse: false,
                            no_response: true,
                        }),
                )
                .collect(),
        )
    }

    /// HTTP/2: whether a gRPC (or movable SSE) stream's response began since the last call (its connection's
    /// moves then want a wake-up, when the drain's moves already began).
    #[inline]
    pub fn take_new_grpc(&mut self) -> bool {
        match &mut self.wire {
            Wire::Http2(H2 {
                blocks: Some(b), ..
            }) => b.take_new_grpc(),
            _ => false,
        }
    }

    /// HTTP/2: the module ended open stream `id` itself (its move): it is no longer in flight
    /// (`false`: it was not open). Whatever either side still sends on it opens nothing.
    pub fn h2_end_stream(&mut self, id: u32) -> bool {
        let Wire::Http2(h) = &mut self.wire else {
            return false;
        };
        if h.close(id, C_CLIENT | C_SERVER).is_none() {
            return false;
        }
        self.ctx.ended = (self.ctx.ended + 1).min(self.ctx.started);
        true
    }

    /// HTTP/2: what the decoded header blocks of open stream `id` say it is (`None`: not open,
    /// or its blocks were not decoded).
    pub fn h2_stream_kind(&self, id: u32) -> Option<H2Kind> {
        let Wire::Http2(h) = &self.wire else {
            return None;
        };
        let b = h.blocks.as_deref()?;
        if !b.decodes(false) || !b.decodes(true) {
            return None;
        }
        let at = h.streams.binary_search_by_key(&id, |s| s.id).ok()?;
        let k = h.streams.get(at)?.kind;
        use http2::blocks::*;
        Some(if k & K_RESPONSE == 0 {
            H2Kind::NoResponse
        } else if k & K_GRPC != 0 {
            H2Kind::Grpc {
                resumable: k & K_RESUMABLE != 0,
            }
        } else if k & K_SSE != 0 {
            H2Kind::Sse {
                movable: k & K_GET != 0 && k & K_OK != 0 && k & K_ENCODED == 0,
            }
        } else {
            H2Kind::Other
        })
    }

    /// HTTP/2: why the decoding of a direction's header blocks stopped, once (the connection is
    /// still followed; its streams are counted, none is told a health check).
    pub fn hpack_failure(&mut self) -> Option<hpack::Error> {
        match &mut self.wire {
            Wire::Http2(H2 {
                blocks: Some(b), ..
            }) => b.take_failure(),
            _ => None,
        }
    }

    /// HTTP/1.1: the next server byte starts the response head of a request in flight (no
    /// response or interim response under way).
    pub fn awaiting_response_head(&self) -> bool {
        match &self.wire {
            Wire::Http1(h) => {
                !self.ctx.lost
                    && !self.ctx.tunnel
                    && h.resp.st == St::Start
                    && h.fifo.front().is_some()
            }
            _ => false,
        }
    }

    /// HTTP/1.1: client bytes were fed past the end of a request whose response has not ended
    /// (pipelined: Envoy's codec stops at that end and leaves the rest in its read buffer,
    /// `src/ffi/ENVOY_FACTS.md` §6). Never for HTTP/2, whose codec takes every byte it is given.
    pub fn pipelined(&self) -> bool {
        match &self.wire {
            Wire::Http1(h) => {
                h.fifo.len >= 2 || (h.fifo.len == 1 && (h.req.st.in_head() || h.waited))
            }
            _ => false,
        }
    }

    /// HTTP/1.1: the client offset just after the request `i` places behind the oldest one not
    /// answered (0: that one), if it is complete (its last byte fed), its end still remembered
    /// ([`REQUEST_ENDS`]), and no CONNECT or upgrade waits for its answer (the bytes behind
    /// such a request may be a tunnel's, not requests).
    pub fn unanswered_end(&self, i: usize) -> Option<u64> {
        let back = self
            .complete_unanswered()
            .checked_sub(i)
            .filter(|&b| b > 0 && b <= REQUEST_ENDS)?;
        let n = self.ctx.requests_done.wrapping_sub(back as u8);
        let end = *self.ctx.ends.at.get(usize::from(n) % REQUEST_ENDS)?;
        // The ring keeps low 32 bits: the end lies within the last 4 GiB fed.
        self.fed
            .checked_sub(u64::from((self.fed as u32).wrapping_sub(end)))
    }

    /// HTTP/1.1: how many requests read and not answered are complete (their last byte fed;
    /// 0 while a CONNECT or upgrade waits for its answer, or once lost or a tunnel).
    pub fn complete_unanswered(&self) -> usize {
        let Wire::Http1(h) = &self.wire else {
            return 0;
        };
        if self.ctx.lost || self.ctx.tunnel || h.verdict_pending {
            return 0;
        }
        // The newest request read is not complete while its body (or, answered early, its
        // head: `Discard`) is still arriving; the others in the FIFO are.
        let open = !matches!(h.req.st, St::Start | St::Wait) && !h.req.st.in_head();
        usize::from(h.fifo.len).saturating_sub(usize::from(open))
    }

    /// HTTP/1.1: a CONNECT or upgrade request read behind the oldest one not answered waits
    /// for its own answer (the bytes behind the oldest cannot be told requests from a tunnel's:
    /// [`Tracker::complete_unanswered`] is 0, and nothing of them is held back).
    pub fn tunnel_request_behind(&self) -> bool {
        match &self.wire {
            Wire::Http1(h) => h.verdict_pending && h.fifo.len >= 2,
            _ => false,
        }
    }

    /// HTTP/1.1: the oldest request not answered is a CONNECT (its 2xx opens a tunnel).
    pub fn answering_connect(&self) -> bool {
        match &self.wire {
            Wire::Http1(h) => h.fifo.front().is_some_and(|f| f & R_CONNECT != 0),
            _ => false,
        }
    }

    /// Whether a complete request ended just before the client offset `offset` (HTTP/1.1; one of
    /// the last [`REQUEST_ENDS`]): where bytes Envoy's codec left behind may start.
    pub fn ends_a_request(&self, offset: u64) -> bool {
        matches!(self.wire, Wire::Http1(_)) && self.ctx.ends.contains(offset)
    }

    /// Client bytes fed so far (every call of [`Tracker::client`] counts), the offset in the
    /// client's byte stream of the next byte to feed.
    pub fn client_fed(&self) -> u64 {
        self.fed
    }

    /// Server bytes ahead that the tracker skips by length without reading them (the rest of a
    /// body or of a chunk's data, of an HTTP/2 frame's payload: no payload is read, not even a
    /// GOAWAY's, whose last-stream-id ends no stream here, see `H2::frame_done`): a write of at
    /// most this many may be fed as [`unread`] bytes. 0 once lost or a tunnel (nothing is fed
    /// then).
    pub fn server_unread_ahead(&self) -> u64 {
        if self.ctx.lost || self.ctx.tunnel {
            return 0;
        }
        match &self.wire {
            Wire::Http1(h)
                if matches!(h.resp.st, St::Body | St::ChunkData) && h.resp.events.is_none() =>
            {
                h.resp.num
            }
            // Not a payload read here: SETTINGS (the table size a decoder may use) or a header
            // block, when header blocks are decoded; DATA of a followed gRPC stream.
            Wire::Http2(H2 {
                blocks: Some(b), s, ..
            }) if b.reads(false, s.ty, s.block != 0, s.id) => 0,
            Wire::Http2(h) => u64::from(h.s.reader.payload_left().unwrap_or(0)),
            _ => 0,
        }
    }

    /// Totals since the connection opened (for cross-checks): started, ended.
    pub fn totals(&self) -> (u64, u64) {
        (self.ctx.started, self.ctx.ended)
    }
}

/// Stand-ins for `n` bytes the tracker will not read ([`Tracker::server_unread_ahead`]):
/// feeding them is feeding the real ones, without asking Envoy for its buffer.
/// They are 0xAA, not zeros: a parser that read them by mistake would see nonsense (a zero
/// could pass for the top byte of an HTTP/2 frame length), and the property tests would fail.
pub fn unread(n: usize) -> impl Iterator<Item = &'static [u8]> {
    static FILL: [u8; 4096] = [0xAA; 4096];
    let whole = n / FILL.len();
    let part = n % FILL.len();
    std::iter::repeat_n(&FILL[..], whole).chain((part > 0).then(|| &FILL[..part]))
}
