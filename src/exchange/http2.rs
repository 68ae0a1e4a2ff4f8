//! The HTTP/2 (RFC 9113) half of [`super::Tracker`]: both directions' frame followers.

use super::*;

pub(super) mod blocks;
// The frames and message boundaries of a gRPC stream's move (issue 65), and the end of an SSE
// stream's (docs/contributing/long-lived-streams.md, "HTTP/2 streams").
pub(super) mod grpc;
use blocks::Blocks;

pub(super) const DATA: u8 = 0;
pub(super) const HEADERS: u8 = 1;
pub(super) const RST_STREAM: u8 = 3;
pub(super) const SETTINGS: u8 = 4;
pub(super) const PUSH_PROMISE: u8 = 5;
pub(super) const GOAWAY: u8 = 7;
pub(super) const CONTINUATION: u8 = 9;
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;

/// One direction's HTTP/2 frames, read across feeds of any split (RFC 9113 §4.1): each 9-byte
/// frame header, then its payload, passed by length without copying a byte of it. The one frame
/// follower of the crate: the tracker's, and the network filter's watch for an HTTP/2 client's
/// first stream (`crate::connections::FirstStream`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameReader {
    /// A frame header split across feeds.
    head: [u8; 9],
    have: u8,
    /// Inside a frame (its header read), with this many payload bytes still to come.
    in_frame: bool,
    left: u32,
}

/// A frame header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    pub len: u32,
    pub ty: u8,
    pub flags: u8,
    /// The stream identifier, its reserved bit cleared.
    pub id: u32,
}

/// What [`FrameReader::read`] completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// A frame header: its payload follows.
    Head(FrameHead),
    /// The current frame's last payload byte (at once for an empty payload).
    End,
}

impl FrameReader {
    /// Payload bytes of the current frame still to come; `None` between frames.
    #[inline]
    pub fn payload_left(&self) -> Option<u32> {
        self.in_frame.then_some(self.left)
    }

    /// Between two frames: no header byte and no payload byte of a frame pending.
    #[inline]
    pub fn between_frames(&self) -> bool {
        !self.in_frame && self.have == 0
    }

    /// Reads `bytes` up to the next frame boundary: how many it used and what they completed
    /// (`None`: they ran out first). In a frame's payload, the bytes used are payload bytes.
    #[inline]
    pub fn read(&mut self, bytes: &[u8]) -> (usize, Option<Read>) {
        if self.in_frame {
            let n = (self.left as usize).min(bytes.len());
            self.left -= n as u32;
            if self.left > 0 {
                return (n, None);
            }
            self.in_frame = false;
            return (n, Some(Read::End));
        }
        let (used, head) = match bytes.get(..9) {
            Some(h) if self.have == 0 => (9, <[u8; 9]>::try_from(h).unwrap_or_default()),
            _ => {
                let at = usize::from(self.have);
                let n = (9 - at).min(bytes.len());
                if let (Some(dst), Some(src)) = (self.head.get_mut(at..at + n), bytes.get(..n)) {
                    dst.copy_from_slice(src);
                }
                self.have += n as u8;
                if self.have < 9 {
                    return (n, None);
                }
                self.have = 0;
                (n, self.head)
            }
        };
        let h = FrameHead::decode(&head);
        self.in_frame = true;
        self.left = h.len;
        (used, Some(Read::Head(h)))
    }
}

impl FrameHead {
    /// The nine bytes of a frame header (RFC 9113 §4.1): length (24 bits), type, flags, then
    /// the stream identifier (31 bits after a reserved one), big-endian. Read as one word and a
    /// byte (nine byte loads and shifts were about a fifth of `H2::step`, callgrind).
    #[inline(always)]
    pub fn decode(head: &[u8; 9]) -> FrameHead {
        let (word, last) = head.split_first_chunk::<8>().map_or((0, 0), |(w, rest)| {
            (u64::from_be_bytes(*w), rest.first().copied().unwrap_or(0))
        });
        FrameHead {
            len: (word >> 40) as u32,
            ty: (word >> 32) as u8,
            flags: (word >> 24) as u8,
            id: ((word as u32) << 8 | u32::from(last)) & 0x7fff_ffff,
        }
    }
}

/// One direction's frame position.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Frames {
    pub(super) reader: FrameReader,
    /// The current frame's header (once read): type, flags, stream.
    pub(super) ty: u8,
    pub(super) flags: u8,
    pub(super) id: u32,
    /// The stream whose header block is open (0: none), whether the HEADERS had END_STREAM,
    /// and whether the block opens a counted stream.
    pub(super) block: u32,
    pub(super) block_end: bool,
    pub(super) block_new: bool,
}

/// A stream open (started, not ended); `closed`: which halves are (C_* bits).
#[derive(Debug, Clone, Copy)]
pub(super) struct Stream {
    pub(super) id: u32,
    pub(super) closed: u8,
    /// What its decoded header blocks said (`blocks::K_*` bits; 0 when not decoded).
    pub(super) kind: u8,
}
pub(super) const C_CLIENT: u8 = 1;
pub(super) const C_SERVER: u8 = 2;

#[derive(Debug, Clone)]
pub(super) struct H2 {
    /// Bytes of the client preface read (24: all).
    pub(super) preface: u8,
    pub(super) c: Frames,
    pub(super) s: Frames,
    pub(super) server_started: bool,
    /// The server wrote a GOAWAY (any last-stream-id): no GOAWAY with a higher one may follow.
    pub(super) server_goaway: bool,
    pub(super) last_client: u32,
    /// Open streams, by increasing id (new ids only increase, so pushes keep the order).
    pub(super) streams: Vec<Stream>,
    /// The header blocks decoded (HPACK), when asked for ([`blocks`]).
    pub(super) blocks: Option<Box<Blocks>>,
}

impl H2 {
    /// `decode`: the directions whose header blocks are decoded ([`blocks::REQUESTS`],
    /// [`blocks::RESPONSES`]); `resumable`: the gRPC path prefixes that mark a stream resumable.
    pub(super) fn new(decode: u8, resumable: std::sync::Arc<[String]>) -> H2 {
        H2 {
            preface: H2_PREFIX.len() as u8,
            c: Frames::default(),
            s: Frames::default(),
            server_started: false,
            server_goaway: false,
            last_client: 0,
            streams: Vec::new(),
            blocks: (decode != 0).then(|| Box::new(Blocks::new(decode, resumable))),
        }
    }

    /// One direction's bytes: returns how many were used and the event that stopped it.
    pub(super) fn step(
        &mut self,
        client: bool,
        bytes: &[u8],
        ctx: &mut Ctx,
    ) -> (usize, Option<Event>) {
        let mut i = 0;
        if client && usize::from(self.preface) < H2_PREFACE.len() {
            let want = H2_PREFACE
                .get(usize::from(self.preface)..)
                .unwrap_or_default();
            let n = want.len().min(bytes.len());
            if bytes.get(..n) != want.get(..n) {
                return (n, lose(ctx));
            }
            self.preface += n as u8;
            i = n;
        }
        loop {
            let d = if client { &mut self.c } else { &mut self.s };
            let rest = bytes.get(i..).unwrap_or_default();
            let in_payload = d.reader.payload_left().is_some();
            let (n, read) = d.reader.read(rest);
            if let (true, Some(b)) = (in_payload, &mut self.blocks) {
                let payload = rest.get(..n).unwrap_or_default();
                b.payload(client, (d.ty, d.flags, d.id), d.block != 0, payload);
            }
            i += n;
            let ev = match read {
                None => return (i, None),
                Some(Read::Head(h)) => {
                    (d.ty, d.flags, d.id) = (h.ty, h.flags, h.id);
                    let ev = self.frame_start(client, ctx);
                    if let (None, Some(b)) = (ev, &mut self.blocks) {
                        b.frame_start(client);
                    }
                    ev
                }
                Some(Read::End) => self.frame_done(client, ctx),
            };
            if let Some(ev) = ev {
                return (i, Some(ev));
            }
        }
    }

    /// A frame header was read: checks the order rules; `Some(Lost)` if they are broken.
    pub(super) fn frame_start(&mut self, client: bool, ctx: &mut Ctx) -> Option<Event> {
        // The fields it reads, not a copy of the whole direction.
        let d = if client { &self.c } else { &self.s };
        let (ty, id, block) = (d.ty, d.id, d.block);
        let payload = d.reader.payload_left().unwrap_or(0);
        if !client && !self.server_started {
            // RFC 9113 §3.4: the server preface is a SETTINGS frame.
            if ty != SETTINGS {
                return lose(ctx);
            }
            self.server_started = true;
        }
        if block != 0 {
            // RFC 9113 §6.10: a header block's frames are contiguous on their direction.
            if ty != CONTINUATION || id != block {
                return lose(ctx);
            }
            return None;
        }
        // Which frames open a header block, and whether it opens a counted stream.
        let new = match ty {
            DATA | HEADERS | CONTINUATION if id == 0 => return lose(ctx),
            CONTINUATION => return lose(ctx),
            HEADERS if client => {
                if id % 2 == 0 {
                    return lose(ctx);
                }
                if id > self.last_client {
                    self.last_client = id;
                    true
                } else {
                    // Trailers of an open stream, or a header block on a stream that is closed
                    // here: legal after the server's RST_STREAM (RFC 9113 §5.1: frames the
                    // client sent before it saw the reset), else a stream error Envoy answers
                    // (§5.1.1: an id below the highest used is a connection error). Neither
                    // opens a request, so neither is counted; trailers still end their stream
                    // (`close` ignores an id not open).
                    false
                }
            }
            HEADERS => false,
            PUSH_PROMISE if !client => {
                if id == 0 {
                    return lose(ctx);
                }
                false
            }
            // A client GOAWAY changes nothing here: Envoy's connection manager keeps serving
            // (the client only opens no more streams); none is short enough to give up on.
            GOAWAY if client => return None,
            GOAWAY if payload < 8 => return lose(ctx),
            _ => return None,
        };
        let d = if client { &mut self.c } else { &mut self.s };
        d.block = id;
        d.block_new = new;
        d.block_end = ty == HEADERS && d.flags & END_STREAM != 0;
        None
    }

    /// A frame's last byte was read: what it does to its stream.
    pub(super) fn frame_done(&mut self, client: bool, ctx: &mut Ctx) -> Option<Event> {
        let d = if client { &mut self.c } else { &mut self.s };
        let (ty, flags, id) = (d.ty, d.flags, d.id);
        let half = if client { C_CLIENT } else { C_SERVER };
        let mut kind = 0;
        if let (HEADERS | CONTINUATION | PUSH_PROMISE, Some(b)) = (ty, &mut self.blocks) {
            if d.block != 0 {
                // Decoded before the stream's event: a health check is told at its `Started`.
                b.frame_end(client, ty, flags);
                kind = b.kind;
                if !client && kind != 0 && ty != PUSH_PROMISE {
                    let sid = d.block;
                    if let Ok(at) = self.streams.binary_search_by_key(&sid, |s| s.id) {
                        if let Some(s) = self.streams.get_mut(at) {
                            s.kind |= kind;
                            use blocks::{K_ENCODED, K_GET, K_GRPC, K_OK, K_RESUMABLE, K_SSE};
                            if s.kind & K_GRPC != 0 {
                                b.follow_grpc(sid, s.kind & K_RESUMABLE != 0);
                            } else if b.follows_sse
                                && s.kind & (K_SSE | K_GET | K_OK | K_ENCODED)
                                    == K_SSE | K_GET | K_OK
                            {
                                // The HTTP/1.1 rule (docs/contributing/stream-edits.md).
                                b.follow_sse(sid);
                            }
                        }
                    }
                }
            }
        }
        let d = if client { &mut self.c } else { &mut self.s };
        match ty {
            HEADERS | CONTINUATION | PUSH_PROMISE if d.block != 0 && flags & END_HEADERS != 0 => {
                let (sid, new, end) = (d.block, d.block_new, d.block_end);
                d.block = 0;
                if new {
                    if self.streams.len() >= MAX_STREAMS {
                        return lose(ctx);
                    }
                    let closed = if end { C_CLIENT } else { 0 };
                    if let Some(b) = &mut self.blocks {
                        // Moved with a Trailers-Only response if none began by its move time.
                        b.new_grpc |= kind & blocks::K_RESUMABLE != 0;
                    }
                    self.streams.push(Stream {
                        id: sid,
                        closed,
                        kind,
                    });
                    return Some(Event::Started(sid));
                }
                if end {
                    return self.close(sid, half);
                }
            }
            DATA if flags & END_STREAM != 0 => return self.close(id, half),
            RST_STREAM => return self.close(id, C_CLIENT | C_SERVER),
            GOAWAY if !client => {
                // The connection closes once its streams are done. Streams above the
                // last-stream-id are not taken as refused (RFC 9113 §6.8 says the server will
                // not process them, but a stream the server did take would then be dropped
                // from the count while in flight): every stream counts until it ends or the
                // connection closes. An overcount until the close, never an undercount.
                ctx.will_close = true;
                self.server_goaway = true;
            }
            _ => {}
        }
        None
    }

    /// Closes `halves` of stream `id` (if open); `Ended` once both are closed.
    pub(super) fn close(&mut self, id: u32, halves: u8) -> Option<Event> {
        let at = self.streams.binary_search_by_key(&id, |s| s.id).ok()?;
        let s = self.streams.get_mut(at)?;
        s.closed |= halves;
        if s.closed != C_CLIENT | C_SERVER {
            return None;
        }
        if at + 1 == self.streams.len() {
            // The common case (one stream at a time, or the newest ending): no move.
            self.streams.pop();
        } else {
            self.streams.remove(at);
        }
        if let Some(b) = &mut self.blocks {
            b.forget(id);
        }
        Some(Event::Ended(id))
    }
}
