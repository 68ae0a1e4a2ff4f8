//! The header blocks of an HTTP/2 connection, gathered from their frames and decoded (HPACK,
//! [`crate::exchange::hpack`]) in the directions the tracker's user asked for
//! ([`crate::exchange::Tracker::decode_request_headers`]): nothing of this exists otherwise.
//!
//! A block is the payload of a HEADERS (or PUSH_PROMISE) frame without its padding, priority
//! (or promised stream id) fields, then the payloads of its CONTINUATION frames (RFC 9113
//! §4.3, §6.2, §6.6, §6.10), buffered up to [`MAX_BLOCK`] bytes and decoded at END_HEADERS.
//! `SETTINGS_HEADER_TABLE_SIZE` in one direction's SETTINGS bounds the other direction's
//! decoder (the peer's encoder may use up to what this side advertised).
//!
//! Any error stops the decoding of that direction for good (its table would be out of step
//! with the encoder's): the connection is still followed, its streams counted as they are
//! without decoding (no health check recognised), and the error is reported once
//! ([`crate::exchange::Tracker::hpack_failure`]).

use super::*;
use crate::exchange::hpack::{Decoder, Error};

/// A header block (with its CONTINUATIONs) longer than this stops the decoding of its
/// direction. Envoy's own limit on a request's headers is `max_request_headers_kb` (60 KiB by
/// default, at most 8 MiB), counted decoded; an encoded block is rarely larger than what it
/// decodes to, so the default's blocks fit with room.
pub const MAX_BLOCK: usize = 256 * 1024;

/// Decode the client's (request) header blocks.
pub(in crate::exchange) const REQUESTS: u8 = 1;
/// Decode the server's (response) header blocks too.
pub(in crate::exchange) const RESPONSES: u8 = 2;
/// Keep the `:path` and `user-agent` of each request block ([`Blocks::hints`]: health checks).
/// Without it a request block's values are read only for `:method` (and `:path` while some
/// resumable gRPC prefix is configured): the moves' decoding costs less (callgrind, the
/// stream-edits page).
pub(in crate::exchange) const HINTS: u8 = 4;
/// Follow (and so move) the SSE responses to a `GET` (`move_http2_sse`).
pub(in crate::exchange) const SSE: u8 = 8;

// What a stream's decoded blocks said (`Stream::kind` bits).
/// The request's `:method` is `GET`.
pub(in crate::exchange) const K_GET: u8 = 1;
/// The request's `:path` starts with one of the resumable gRPC prefixes.
pub(in crate::exchange) const K_RESUMABLE: u8 = 2;
/// A final response (`:status` 2xx-5xx) was written; the bits below are its.
pub(in crate::exchange) const K_RESPONSE: u8 = 4;
/// Its `content-type` is `application/grpc` (or `application/grpc+proto`, `;...`).
pub(in crate::exchange) const K_GRPC: u8 = 8;
/// Its `content-type` is `text/event-stream`.
pub(in crate::exchange) const K_SSE: u8 = 16;
/// It has a `content-encoding` (any: event boundaries cannot be seen in encoded bytes).
pub(in crate::exchange) const K_ENCODED: u8 = 32;
/// Its `:status` is 200.
pub(in crate::exchange) const K_OK: u8 = 64;

const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const ACK: u8 = 0x1;
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;

/// One direction's blocks.
#[derive(Debug, Clone, Default)]
pub(in crate::exchange) struct Side {
    /// `None`: this direction is not decoded (not asked for, or stopped by an error).
    dec: Option<Decoder>,
    block: Vec<u8>,
    /// Where the current frame's payload starts in `block`.
    frame_at: usize,
    /// A SETTINGS entry of this direction's split across reads, and its bytes so far.
    setting: [u8; 6],
    setting_have: u8,
}

/// The fields of the client block decoded last, kept for health-check recognition (cut at
/// [`HINT_LEN`], as HTTP/1.1's).
#[derive(Debug, Clone, Default)]
struct Fields {
    path: Vec<u8>,
    has_path: bool,
    ua: Vec<u8>,
    has_ua: bool,
    cut: bool,
    valid: bool,
}

#[derive(Debug, Clone, Default)]
pub(in crate::exchange) struct Blocks {
    c: Side,
    s: Side,
    fields: Fields,
    /// The first error that stopped a direction, until it is taken; `reported`: taken once
    /// (a connection is counted once, whichever directions stop).
    failed: Option<Error>,
    reported: bool,
    /// The `:path` prefixes of resumable gRPC methods ([`K_RESUMABLE`]).
    resumable: std::sync::Arc<[String]>,
    /// The `K_*` bits of the block decoded last (its stream's).
    pub(in crate::exchange) kind: u8,
    /// Open streams answered with `application/grpc`: where their response's messages end
    /// (their DATA payloads are read for it), whether that could not be followed (a padded DATA
    /// frame: the stream is then never moved), and whether the stream is resumable.
    pub(in crate::exchange) grpc: Vec<GrpcFollowed>,
    /// Open streams answered with a movable SSE response (200 to a `GET`, `text/event-stream`,
    /// no `content-encoding`): where their events end in their DATA payloads, and whether that
    /// could not be followed (a padded DATA frame: never moved).
    pub(in crate::exchange) sse: Vec<SseFollowed>,
    /// A gRPC or SSE stream began to be followed, or a resumable gRPC request began, since the
    /// last [`Blocks::take_new_grpc`].
    pub(in crate::exchange) new_grpc: bool,
    /// [`HINTS`] was asked for.
    hints: bool,
    /// [`SSE`] was asked for.
    pub(in crate::exchange) follows_sse: bool,
}

/// One SSE stream's response followed ([`Blocks::sse`]).
#[derive(Debug, Clone, Copy)]
pub(in crate::exchange) struct SseFollowed {
    pub(in crate::exchange) id: u32,
    pub(in crate::exchange) events: crate::exchange::sse::Events,
    pub(in crate::exchange) lost: bool,
}

/// One gRPC stream's response followed ([`Blocks::grpc`]).
#[derive(Debug, Clone, Copy)]
pub(in crate::exchange) struct GrpcFollowed {
    pub(in crate::exchange) id: u32,
    pub(in crate::exchange) messages: super::grpc::Messages,
    pub(in crate::exchange) lost: bool,
    pub(in crate::exchange) resumable: bool,
}

impl Blocks {
    pub(in crate::exchange) fn new(decode: u8, resumable: std::sync::Arc<[String]>) -> Blocks {
        let mut b = Blocks {
            resumable,
            hints: decode & HINTS != 0,
            follows_sse: decode & SSE != 0,
            ..Blocks::default()
        };
        if decode & (REQUESTS | RESPONSES) != 0 {
            b.c.dec = Some(Decoder::new());
        }
        if decode & RESPONSES != 0 {
            b.s.dec = Some(Decoder::new());
        }
        b
    }

    /// Whether `client`'s blocks are decoded (not stopped).
    pub(in crate::exchange) fn decodes(&self, client: bool) -> bool {
        if client {
            self.c.dec.is_some()
        } else {
            self.s.dec.is_some()
        }
    }

    /// Whether `client`'s frames of this type (on stream `id`) have payloads read here (the
    /// server's: fetched, not fed as stand-ins, `Tracker::server_unread_ahead`).
    pub(in crate::exchange) fn reads(&self, client: bool, ty: u8, in_block: bool, id: u32) -> bool {
        let (own, other) = if client {
            (&self.c, &self.s)
        } else {
            (&self.s, &self.c)
        };
        (in_block && own.dec.is_some())
            || (ty == SETTINGS && other.dec.is_some())
            || (!client
                && ty == DATA
                && (self.grpc.iter().any(|g| g.id == id && !g.lost)
                    || self.sse.iter().any(|e| e.id == id && !e.lost)))
    }

    /// Stream `id` is a movable SSE stream whose response headers were just written: its events
    /// are followed from here (the response's first DATA byte).
    pub(in crate::exchange) fn follow_sse(&mut self, id: u32) {
        if !self.sse.iter().any(|e| e.id == id) {
            self.new_grpc = true;
            self.sse.push(SseFollowed {
                id,
                events: crate::exchange::sse::Events::new(),
                lost: false,
            });
        }
    }

    /// Stream `id` is a gRPC stream whose response headers were just written: its messages are
    /// followed from here (the response's first DATA byte).
    pub(in crate::exchange) fn follow_grpc(&mut self, id: u32, resumable: bool) {
        if !self.grpc.iter().any(|g| g.id == id) {
            self.new_grpc = true;
            self.grpc.push(GrpcFollowed {
                id,
                messages: super::grpc::Messages::default(),
                lost: false,
                resumable,
            });
        }
    }

    /// Whether a gRPC or SSE stream began to be followed since the last call.
    pub(in crate::exchange) fn take_new_grpc(&mut self) -> bool {
        std::mem::take(&mut self.new_grpc)
    }

    /// Stream `id` ended.
    pub(in crate::exchange) fn forget(&mut self, id: u32) {
        self.grpc.retain(|g| g.id != id);
        self.sse.retain(|e| e.id != id);
    }

    /// A frame header was read (and accepted by the follower).
    pub(in crate::exchange) fn frame_start(&mut self, client: bool) {
        let side = if client { &mut self.c } else { &mut self.s };
        side.frame_at = side.block.len();
        side.setting_have = 0;
    }

    /// Payload bytes of the current frame, on stream `id` (`in_block`: a frame of an open
    /// header block).
    pub(in crate::exchange) fn payload(
        &mut self,
        client: bool,
        (ty, flags, id): (u8, u8, u32),
        in_block: bool,
        bytes: &[u8],
    ) {
        if !client && ty == DATA {
            if let Some(g) = self.grpc.iter_mut().find(|g| g.id == id) {
                // RFC 9113 §6.1: a padded DATA frame's first byte is the pad length; Envoy pads
                // none, and a stream it would pad is simply not moved.
                if flags & PADDED != 0 {
                    g.lost = true;
                }
                g.messages.feed(bytes);
            } else if let Some(e) = self.sse.iter_mut().find(|e| e.id == id) {
                // As gRPC's: the pad length and padding are not body bytes.
                if flags & PADDED != 0 {
                    e.lost = true;
                }
                let _ = e.events.feed(bytes);
            }
            return;
        }
        let (own, other) = if client {
            (&mut self.c, &mut self.s)
        } else {
            (&mut self.s, &mut self.c)
        };
        if in_block && own.dec.is_some() {
            if own.block.len() + bytes.len() > MAX_BLOCK {
                self.fail(client, Error::Block);
                return;
            }
            own.block.extend_from_slice(bytes);
        } else if ty == SETTINGS && flags & ACK == 0 {
            if let Some(dec) = &mut other.dec {
                settings(&mut own.setting, &mut own.setting_have, dec, bytes);
            }
        }
    }

    /// The last byte of a frame of an open header block was read: its padding and priority
    /// fields are taken out, and at END_HEADERS the block is decoded ([`Blocks::kind`] its
    /// facts, 0 when it was not decoded).
    pub(in crate::exchange) fn frame_end(&mut self, client: bool, ty: u8, flags: u8) {
        self.kind = 0;
        let side = if client { &mut self.c } else { &mut self.s };
        if side.dec.is_none() {
            return;
        }
        if ty != CONTINUATION {
            let payload = side.block.get(side.frame_at..).unwrap_or_default();
            let (mut skip, mut pad) = (0, 0);
            if flags & PADDED != 0 {
                pad = usize::from(payload.first().copied().unwrap_or(0));
                skip = 1;
            }
            if ty == HEADERS && flags & PRIORITY != 0 {
                skip += 5;
            }
            if ty == PUSH_PROMISE {
                skip += 4;
            }
            if skip + pad > payload.len() {
                self.fail(client, Error::Block);
                return;
            }
            let end = side.block.len() - pad;
            side.block.truncate(end);
            side.block.drain(side.frame_at..side.frame_at + skip);
        }
        if flags & END_HEADERS == 0 {
            return;
        }
        let block = std::mem::take(&mut side.block);
        let Some(dec) = &mut side.dec else { return };
        let mut kind = 0;
        let result = if !client {
            dec.decode(&block, wanted_in_responses, |name, value| {
                kind |= response_fact(name, value);
            })
        } else if !self.hints {
            // Only what a stream's kind needs.
            let resumable = &self.resumable;
            let paths = !resumable.is_empty();
            dec.decode(
                &block,
                |name| name == b":method" || (paths && name == b":path"),
                |name, value| {
                    if name == b":method" {
                        if value == b"GET" {
                            kind |= K_GET;
                        }
                    } else if resumable.iter().any(|p| value.starts_with(p.as_bytes())) {
                        kind |= K_RESUMABLE;
                    }
                },
            )
        } else {
            let f = &mut self.fields;
            let resumable = &self.resumable;
            (f.has_path, f.has_ua, f.cut, f.valid) = (false, false, false, false);
            dec.decode(&block, wanted_in_requests, |name, value| {
                if name == b":method" {
                    if value == b"GET" {
                        kind |= K_GET;
                    }
                    return;
                }
                if name == b":path" && resumable.iter().any(|p| value.starts_with(p.as_bytes())) {
                    kind |= K_RESUMABLE;
                }
                let (buf, has) = if name == b":path" {
                    (&mut f.path, &mut f.has_path)
                } else {
                    (&mut f.ua, &mut f.has_ua)
                };
                buf.clear();
                buf.extend_from_slice(value.get(..HINT_LEN).unwrap_or(value));
                f.cut |= value.len() > HINT_LEN;
                *has = true;
            })
        };
        // A response block without a final `:status` (1xx, trailers) says nothing of the
        // response's kind.
        if !client && kind & K_RESPONSE == 0 {
            kind = 0;
        }
        match result {
            Ok(()) => {
                self.kind = kind;
                self.fields.valid = client && self.hints;
                // The buffer back for the next block, unless one large block grew it.
                let side = if client { &mut self.c } else { &mut self.s };
                if block.capacity() <= 16 * 1024 {
                    side.block = block;
                    side.block.clear();
                }
            }
            Err(e) => self.fail(client, e),
        }
    }

    /// Stops decoding `client`'s direction.
    fn fail(&mut self, client: bool, e: Error) {
        let side = if client { &mut self.c } else { &mut self.s };
        side.dec = None;
        side.block = Vec::new();
        if client {
            self.fields.valid = false;
        } else {
            // No response's kind or messages are known from here: nothing is moved.
            self.grpc.clear();
            self.sse.clear();
        }
        self.failed.get_or_insert(e);
    }

    /// The error that stopped a direction, once per connection.
    pub(in crate::exchange) fn take_failure(&mut self) -> Option<Error> {
        if self.reported {
            return None;
        }
        let e = self.failed.take();
        self.reported = e.is_some();
        e
    }

    /// The `user-agent` and `:path` of the client block decoded last, if it was.
    pub(in crate::exchange) fn hints(&self) -> Hints<'_> {
        let f = &self.fields;
        if !f.valid {
            return Hints::default();
        }
        Hints {
            user_agent: f.has_ua.then_some(&f.ua[..]),
            path: f.has_path.then_some(&f.path[..]),
            truncated: f.cut,
        }
    }
}

/// The fields read of request blocks.
fn wanted_in_requests(name: &[u8]) -> bool {
    name == b":path" || name == b"user-agent" || name == b":method"
}

/// The fields read of response blocks.
fn wanted_in_responses(name: &[u8]) -> bool {
    name == b":status" || name == b"content-type" || name == b"content-encoding"
}

/// What one response field says (`K_*` bits).
fn response_fact(name: &[u8], value: &[u8]) -> u8 {
    match name {
        b":status" => match value.first() {
            Some(b'2'..=b'5') if value == b"200" => K_RESPONSE | K_OK,
            Some(b'2'..=b'5') => K_RESPONSE,
            _ => 0,
        },
        b"content-encoding" => K_ENCODED,
        b"content-type" => {
            // The media type, before any parameter; any case (RFC 9110 §8.3.1).
            let media = value.split(|&b| b == b';').next().unwrap_or_default();
            let media = media.trim_ascii();
            let grpc = b"application/grpc";
            if media.eq_ignore_ascii_case(b"text/event-stream") {
                K_SSE
            } else if media.len() >= grpc.len()
                && media
                    .get(..grpc.len())
                    .is_some_and(|m| m.eq_ignore_ascii_case(grpc))
                && matches!(media.get(grpc.len()), None | Some(b'+'))
            {
                K_GRPC
            } else {
                0
            }
        }
        _ => 0,
    }
}

/// SETTINGS entries (RFC 9113 §6.5.1: 16-bit identifier, 32-bit value) across reads.
fn settings(entry: &mut [u8; 6], have: &mut u8, dec: &mut Decoder, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let at = usize::from(*have);
        let n = (6 - at).min(bytes.len());
        if let (Some(dst), Some(src)) = (entry.get_mut(at..at + n), bytes.get(..n)) {
            dst.copy_from_slice(src);
        }
        bytes = bytes.get(n..).unwrap_or_default();
        *have += n as u8;
        if *have == 6 {
            *have = 0;
            let [i0, i1, v0, v1, v2, v3] = *entry;
            if u16::from_be_bytes([i0, i1]) == SETTINGS_HEADER_TABLE_SIZE {
                dec.advertised(u32::from_be_bytes([v0, v1, v2, v3]));
            }
        }
    }
}
