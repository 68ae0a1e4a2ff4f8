//! The HTTP/1.1 (RFC 9112) half of [`super::Tracker`]: both directions' parsers.
//!
//! Files: this one (parser states, the header names and tokens looked at, a direction's
//! position), `parse` (the byte-level state machine), `lines` (heads read a whole line at a
//! time, values, chunk lines and body framing), `lf` (the LF scan), `hints` (the latest
//! request's User-Agent and path), `h1` (both directions tied together: the request FIFO and
//! the events). Uses only `exchange`'s own types.

mod h1;
mod hints;
mod lf;
mod lines;
mod parse;

pub(super) use h1::*;
pub(super) use hints::*;
pub(super) use lf::*;

use super::*;

/// Where one direction's HTTP/1.1 parser is. Heads are followed byte by byte only where a byte
/// matters (start lines, the five header names, their values); elsewhere a scan for LF.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum St {
    /// Before a message: requests skip empty lines here (RFC 9112 §2.2).
    #[default]
    Start,
    Method,
    Target,
    Version,
    StatusVersion,
    StatusCode,
    StatusTail,
    LineStart,
    LineCr,
    Name,
    Value,
    /// A response's `Content-Type` value (`Half::content_type_byte`).
    ContentType,
    UserAgent,
    SkipLine,
    /// Response head complete: decide what it means (no byte consumed).
    Decide,
    Body,
    ChunkSize,
    ChunkExt,
    ChunkData,
    ChunkDataEnd,
    TrailerStart,
    TrailerCr,
    TrailerLine,
    /// Client: after a CONNECT or upgrade request, until its response says what follows.
    Wait,
    /// Client: after a response to a head that never completed; the connection closes.
    Discard,
}

impl St {
    /// A head (or chunk-size line or trailer section) is being read: counted against MAX_HEAD.
    pub(super) fn bounded(self) -> bool {
        !matches!(
            self,
            St::Start
                | St::Decide
                | St::Body
                | St::ChunkData
                | St::ChunkDataEnd
                | St::Wait
                | St::Discard
        )
    }

    /// Inside a message head (after its first byte).
    pub(super) fn in_head(self) -> bool {
        matches!(
            self,
            St::Method
                | St::Target
                | St::Version
                | St::StatusVersion
                | St::StatusCode
                | St::StatusTail
                | St::LineStart
                | St::LineCr
                | St::Name
                | St::Value
                | St::ContentType
                | St::UserAgent
                | St::SkipLine
        )
    }
}

/// Header names looked at, lowercase; their index is the header's kind.
pub(super) const NAMES: [&[u8]; 6] = [
    b"content-length",
    b"connection",
    b"transfer-encoding",
    b"user-agent",
    b"upgrade",
    b"content-type",
];
pub(super) const H_CL: u8 = 0;
pub(super) const H_CONN: u8 = 1;
pub(super) const H_TE: u8 = 2;
pub(super) const H_UA: u8 = 3;
pub(super) const H_UPGRADE: u8 = 4;
/// Responses only: `text/event-stream` marks an SSE response (issue #46).
pub(super) const H_CT: u8 = 5;

/// What a header line's first byte says: bit `k` for each header kind `k` whose name starts
/// with it (either case), [`CR_LINE`] for CR, 0 for a line the tracker skips (most of them).
pub(super) const LINE_START: [u8; 256] = line_starts();
/// A line starting with CR: the head's end, or a head that does not parse.
pub(super) const CR_LINE: u8 = 0x80;
/// The header kinds read in requests only.
pub(super) const REQUEST_ONLY: u8 = 1 << H_UA | 1 << H_UPGRADE;
/// The header kinds read in responses only.
pub(super) const RESPONSE_ONLY: u8 = 1 << H_CT;
/// The media type of an event stream (WHATWG HTML §9.2), lowercase.
pub(super) const EVENT_STREAM: &[u8] = b"text/event-stream";

const fn line_starts() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut k = 0;
    while k < NAMES.len() {
        let c = NAMES[k][0];
        t[c as usize] |= 1 << k;
        t[c.to_ascii_uppercase() as usize] |= 1 << k;
        k += 1;
    }
    t[CR as usize] = CR_LINE;
    t
}

/// A header name and its colon as words to compare a line's first bytes with, eight at a
/// time: each word with the bit that makes its letters lowercase (`NAMES` are lowercase letters
/// and `-`; a byte matches a letter in either case, and `-` and `:` exactly).
pub(super) struct NameWords {
    /// The name and colon's length (at least 8: `upgrade:`).
    pub(super) len: usize,
    /// Word `i` is the bytes from `min(8 i, len - 8)`: the last one overlaps the one before.
    pub(super) words: [u64; 3],
    pub(super) case: [u64; 3],
}

pub(super) const fn name_words(name: &[u8]) -> NameWords {
    let len = name.len() + 1;
    let mut words = [0u64; 3];
    let mut case = [0u64; 3];
    let mut i = 0;
    while i < 3 {
        let off = if 8 * i + 8 <= len { 8 * i } else { len - 8 };
        let mut j = 0;
        while j < 8 {
            let b = if off + j < name.len() {
                name[off + j]
            } else {
                b':'
            };
            words[i] |= (b as u64) << (8 * j);
            if b.is_ascii_lowercase() {
                case[i] |= 0x20 << (8 * j);
            }
            j += 1;
        }
        i += 1;
    }
    NameWords { len, words, case }
}

impl NameWords {
    /// `line` starts with the name, in any case, and its colon.
    pub(super) fn starts(&self, line: &[u8]) -> bool {
        let Some(head) = line.get(..self.len) else {
            return false;
        };
        (0..self.len.div_ceil(8)).all(|i| {
            let off = (8 * i).min(self.len - 8);
            let w = head
                .get(off..off + 8)
                .and_then(|w| <[u8; 8]>::try_from(w).ok());
            w.is_some_and(|w| u64::from_le_bytes(w) | self.case[i] == self.words[i])
        })
    }
}

pub(super) const NAME_WORDS: [NameWords; 6] = [
    name_words(NAMES[0]),
    name_words(NAMES[1]),
    name_words(NAMES[2]),
    name_words(NAMES[3]),
    name_words(NAMES[4]),
    name_words(NAMES[5]),
];

/// Tokens looked for in `Transfer-Encoding` (bit 0) and `Connection` (bits 1, 2) values.
pub(super) const TOKENS: [&[u8]; 3] = [b"chunked", b"close", b"keep-alive"];
pub(super) const T_CHUNKED: u8 = 0;
pub(super) const T_CLOSE: u8 = 1;
pub(super) const T_KEEPALIVE: u8 = 2;

// Facts about the head being read.
pub(super) const F_CL: u16 = 1;
pub(super) const F_TE: u16 = 1 << 1;
pub(super) const F_CHUNKED: u16 = 1 << 2;
pub(super) const F_CLOSE: u16 = 1 << 3;
pub(super) const F_KEEPALIVE: u16 = 1 << 4;
pub(super) const F_UPGRADE: u16 = 1 << 5;
pub(super) const F_HTTP10: u16 = 1 << 6;
pub(super) const F_HEAD: u16 = 1 << 7;
pub(super) const F_CONNECT: u16 = 1 << 8;
/// A 101 that switched to WebSocket frames (`h1::switched_head`), with permessage-deflate.
pub(super) const F_WS: u16 = 1 << 9;
pub(super) const F_DEFLATE: u16 = 1 << 10;
/// A response whose `Content-Type` is `text/event-stream`; cleared at the head's end unless the
/// response may be moved (`h1::movable_sse`).
pub(super) const F_SSE: u16 = 1 << 11;
/// A `GET` request (an `EventSource` sends nothing else: WHATWG HTML §9.2.2).
pub(super) const F_GET: u16 = 1 << 12;

// A request's flags in the FIFO.
pub(super) const R_HEAD: u8 = 1;
pub(super) const R_CONNECT: u8 = 2;
pub(super) const R_UPGRADE: u8 = 4;
pub(super) const R_GET: u8 = 8;

/// One direction's parser position.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Half {
    pub(super) st: St,
    /// Header kind whose value is read (`H_*`).
    pub(super) hdr: u8,
    /// Candidates still matching (bit per `NAMES` or `TOKENS` index, or per method).
    pub(super) cand: u8,
    /// Position in the name, token, literal or number being matched.
    pub(super) pos: u8,
    /// Value parsing: 0 before an element, 1 inside, 2 after it (trailing whitespace).
    pub(super) elem: u8,
    pub(super) facts: u16,
    pub(super) status: u16,
    /// Bytes of the current head (or bounded line/section) so far.
    pub(super) head_len: u32,
    /// The number being read (Content-Length element, chunk size), or body bytes left.
    pub(super) num: u64,
    /// The message's Content-Length.
    pub(super) cl: u64,
    /// A chunked SSE response's events so far (its chunk data is fed here, not skipped:
    /// `Tracker::server_unread_ahead` is 0 for it), so that a drain knows whether the body
    /// ends at an event boundary. `None` for every other message (one byte, in the padding).
    pub(super) events: Option<sse::Events>,
}

/// What a parse step reached.
pub(super) enum Mile {
    /// Used all the bytes.
    More,
    Head,
    Body,
    Bad,
}

impl Half {
    pub(super) fn begin_head(&mut self, st: St) {
        *self = Half {
            st,
            cand: 0b111, // HEAD, CONNECT, GET
            ..Half::default()
        };
    }

    pub(super) fn begin_chunk(&mut self) {
        self.st = St::ChunkSize;
        self.pos = 0;
        self.num = 0;
        self.head_len = 0;
    }

    /// The end of a value element (a number or a token).
    pub(super) fn end_element(&mut self) -> bool {
        match self.hdr {
            H_CL => {
                if self.facts & F_CL != 0 && self.cl != self.num {
                    return false;
                }
                self.cl = self.num;
                self.facts |= F_CL;
            }
            H_TE | H_CONN => {
                let pos = usize::from(self.pos);
                let hit = |t: u8| self.cand & (1 << t) != 0 && TOKENS[usize::from(t)].len() == pos;
                if self.hdr == H_TE {
                    // Only the last coding counts: it must be chunked for a known length.
                    if hit(T_CHUNKED) {
                        self.facts |= F_CHUNKED;
                    } else {
                        self.facts &= !F_CHUNKED;
                    }
                } else if hit(T_CLOSE) {
                    self.facts |= F_CLOSE;
                } else if hit(T_KEEPALIVE) {
                    self.facts |= F_KEEPALIVE;
                }
            }
            _ => {}
        }
        true
    }
}
