//! Follows a `text/event-stream` response body (server-sent events) and tells where it may be
//! ended without cutting an event: after a blank line. Pure: no FFI, no clock, no allocation;
//! uses nothing outside `core`.
//!
//! Why: at a drain an SSE response is ended cleanly, so that every `EventSource` reconnects by
//! itself (to another pod). The WHATWG HTML standard, "Server-sent events", §9.2.5/§9.2.6 (event
//! stream interpretation): lines end with CRLF, LF or CR; an event is dispatched at an empty
//! line, and "if the file ends in the middle of an event, before the final empty line, the
//! incomplete event is not dispatched". So the body may end only where its bytes so far end
//! with an empty line (or before any byte).
//!
//! Two layers: [`Events`] follows body bytes (for a close-delimited body, where ending means
//! closing the connection at such a place, for the chunk data the connection tracker reads, or
//! for an HTTP filter that sees the decoded body);
//! [`Chunked`] follows the wire bytes of an HTTP/1.1 chunked body (RFC 9112 §7.1), as the
//! network filter sees them after the response head, hands the chunk data to an [`Events`] and
//! tells the wire offsets where [`LAST_CHUNK`] may be written: at the start of a chunk-size
//! line, with the data so far at an event boundary. The ideas are those of `super::http1`'s
//! chunk states (that parser's types are private to the connection tracker and tied to its
//! head parsing, so they are not reused here).
//!
//! A leading byte-order mark is not treated specially (a BOM line followed by a line end reads
//! as a non-empty line): that only delays a boundary, never invents one.

#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod model;
#[cfg(test)]
mod tests;

/// The last chunk and an empty trailer section (RFC 9112 §7.1): written at a [`Chunked`] cut
/// point, it ends the response cleanly.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
/// Hex digits of a chunk size before [`Chunked`] gives up (the size must fit 64 bits).
pub const MAX_SIZE_DIGITS: u8 = 16;

const CR: u8 = b'\r';
const LF: u8 = b'\n';

/// Where the event parser is, as far as line ends go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Line {
    /// At a line start after an empty line (or at the body's start): a boundary.
    #[default]
    Boundary,
    /// Just after a CR that ended an empty line: a boundary; an LF next is part of that CRLF.
    CrBoundary,
    /// At a line start after a non-empty line.
    Start,
    /// Just after a CR that ended a non-empty line (an LF next is part of it).
    CrStart,
    /// Inside a non-empty line.
    In,
}

/// Follows the body bytes of an event stream; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Events {
    line: Line,
}

impl Events {
    /// At the start of a body.
    pub const fn new() -> Self {
        Self {
            line: Line::Boundary,
        }
    }

    /// Starts following in the middle of a body whose bytes so far were not followed (say at
    /// the drain's move time, so that nothing is scanned before): it takes itself to be inside
    /// a line of unknown content, which is never wrong in the unsafe direction. Two line ends in
    /// a row (not a CRLF's LF) prove a blank line whatever came before; one may only delay the
    /// first boundary (a property test holds it to the model for every start point).
    pub const fn resumed() -> Self {
        Self { line: Line::In }
    }

    /// The bytes fed so far end with an empty line, or none were fed: the body may end here.
    /// Not just after the CR of a blank line: an LF may follow as part of its CRLF, and a body
    /// ended between the two reads to a client that splits events on `\r\n\r\n` as an event
    /// never finished. So a stream whose lines end with a bare CR is never ended (it is held
    /// like any request): the module cuts only where every client sees a whole event.
    pub const fn at_boundary(&self) -> bool {
        matches!(self.line, Line::Boundary)
    }

    /// Follows the next body bytes; returns the offset in them after the last event boundary
    /// (an empty line's end), if one is in them.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut last = None;
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            i += 1;
            self.line = match (self.line, b) {
                (Line::CrBoundary, LF) => Line::Boundary,
                (Line::CrStart, LF) => Line::Start,
                (Line::Boundary | Line::Start, LF) => Line::Boundary,
                (Line::Boundary | Line::CrBoundary | Line::Start | Line::CrStart, CR) => {
                    Line::CrBoundary
                }
                (Line::In, LF) => Line::Start,
                (Line::In, CR) => Line::CrStart,
                (_, _) => {
                    // Inside a line: skip to its end at once.
                    let rest = bytes.get(i..).unwrap_or_default();
                    i += rest
                        .iter()
                        .position(|&c| c == LF || c == CR)
                        .unwrap_or(rest.len());
                    Line::In
                }
            };
            if self.at_boundary() {
                last = Some(i);
            }
        }
        last
    }
}

/// An SSE response followed in the place of its connection's HTTP/1.1 state: being ended at a
/// drain (`exchange::Tracker::sse_hand_over`), or close-delimited (nothing can follow it on its
/// connection); its body followed, and the caller's step (its own numbering; 0 at first).
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub body: Framing,
    /// Handed over: end at the next cut point. (`false`: a close-delimited body followed
    /// from its start, before its move time.)
    pub due: bool,
    pub step: u8,
}

/// How an SSE response's body is framed on the wire, and so how it is ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Chunked (RFC 9112 §7.1): ended by [`LAST_CHUNK`] at a [`Chunked`] cut point.
    Chunked(Chunked),
    /// Close-delimited (RFC 9112 §6.3: no length, not chunked; Envoy writes it so to an HTTP/1.0
    /// client): ended by closing the connection after an event boundary.
    UntilClose(Events),
}

impl Framing {
    /// What to write at a cut point to end the body there ([`LAST_CHUNK`], or nothing: the
    /// close ends a close-delimited body).
    pub const fn terminator(&self) -> &'static [u8] {
        match self {
            Framing::Chunked(_) => LAST_CHUNK,
            Framing::UntilClose(_) => b"",
        }
    }

    /// The body may be ended now, before any further byte (see [`Chunked::can_end_here`]).
    pub const fn can_end_here(&self) -> bool {
        match self {
            Framing::Chunked(c) => c.can_end_here(),
            Framing::UntilClose(e) => e.at_boundary(),
        }
    }

    /// Follows the next wire bytes of the body: as [`Chunked::feed`]; a close-delimited body
    /// never ends by itself and never gives up.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Fed, GiveUp> {
        match self {
            Framing::Chunked(c) => c.feed(bytes),
            Framing::UntilClose(e) => Ok(Fed {
                cut: e.feed(bytes),
                ended: None,
            }),
        }
    }
}

/// Why [`Chunked`] stopped following: the chunked framing was not what RFC 9112 §7.1 says.
/// (The server side is Envoy's own codec output, so this is not expected; the caller then
/// leaves the response as today.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// A chunk-size line that does not start with a hex digit, or has more than
    /// [`MAX_SIZE_DIGITS`] of them.
    Size,
    /// A CR not followed by LF where the framing wants a line end, or chunk data not followed by
    /// its line end.
    LineEnd,
    /// Bytes after the body's end (the last chunk and trailers).
    AfterEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ch {
    /// Reading a chunk-size line's digits (`digits` so far).
    Size,
    /// Skipping a chunk extension up to the line's LF.
    Ext,
    /// After the size line's CR.
    SizeLf,
    /// Chunk data: `left` bytes still to come.
    Data,
    /// After the data: CRLF (or LF) expected.
    DataCr,
    DataLf,
    /// After the last chunk: at a trailer line's start, in one, after an empty one's CR.
    TrailerStart,
    TrailerLine,
    TrailerCr,
    /// The body ended.
    Done,
    Lost(GiveUp),
}

/// What one [`Chunked::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fed {
    /// The last offset in the fed bytes where [`LAST_CHUNK`] may be written (a chunk boundary
    /// with the events at a boundary).
    pub cut: Option<usize>,
    /// The offset just after the body's end, if it ended in these bytes.
    pub ended: Option<usize>,
}

/// Follows the wire bytes of a chunked event-stream body; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunked {
    st: Ch,
    digits: u8,
    left: u64,
    events: Events,
}

impl Default for Chunked {
    fn default() -> Self {
        Self::new()
    }
}

impl Chunked {
    /// At the first byte of the body (just after the response head).
    pub const fn new() -> Self {
        Self {
            st: Ch::Size,
            digits: 0,
            left: 0,
            events: Events::new(),
        }
    }

    /// Starts following at the start of a chunk-size line, with `events` the body's event state
    /// so far (the connection tracker follows chunk framing and an SSE body's events: it hands
    /// over at a chunk boundary at the move time; [`Events::resumed`] when it did not follow).
    pub const fn at_chunk_start(events: Events) -> Self {
        Self {
            st: Ch::Size,
            digits: 0,
            left: 0,
            events,
        }
    }

    /// [`Chunked::at_chunk_start`] of a body whose event bytes so far were not followed.
    pub const fn resumed_at_chunk_start() -> Self {
        Self::at_chunk_start(Events::resumed())
    }

    /// [`LAST_CHUNK`] written now ends the body cleanly: at a chunk-size line's start, with the
    /// event data so far at a boundary.
    pub const fn can_end_here(&self) -> bool {
        matches!(self.st, Ch::Size) && self.digits == 0 && self.events.at_boundary()
    }

    /// The body ended (last chunk and trailer section seen).
    pub const fn ended(&self) -> bool {
        matches!(self.st, Ch::Done)
    }

    /// Why it gave up, if it did.
    pub const fn gave_up(&self) -> Option<GiveUp> {
        match self.st {
            Ch::Lost(g) => Some(g),
            _ => None,
        }
    }

    /// Follows the next wire bytes of the body. Sticky once it gives up. Bytes after the body's
    /// end in the same feed as the end: this feed says where the end was (`Ok`), the next one
    /// returns the give-up ([`GiveUp::AfterEnd`]).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Fed, GiveUp> {
        let mut fed = Fed::default();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            match self.st {
                Ch::Lost(g) => return Err(g),
                Ch::Done => {
                    // Bytes after the body's end. When the end came in these same bytes, say
                    // where it was: the give-up is sticky and the next feed returns it.
                    let g = self.lose(GiveUp::AfterEnd);
                    return if fed.ended.is_some() { Ok(fed) } else { Err(g) };
                }
                Ch::Size => {
                    i += 1;
                    if let Some(d) = (b as char).to_digit(16) {
                        if self.digits == MAX_SIZE_DIGITS {
                            return Err(self.lose(GiveUp::Size));
                        }
                        self.digits += 1;
                        self.left = self.left << 4 | u64::from(d);
                    } else if self.digits == 0 {
                        return Err(self.lose(GiveUp::Size));
                    } else {
                        match b {
                            LF => self.size_line_done(),
                            CR => self.st = Ch::SizeLf,
                            b';' | b' ' | b'\t' => self.st = Ch::Ext,
                            _ => return Err(self.lose(GiveUp::Size)),
                        }
                    }
                }
                Ch::Ext | Ch::TrailerLine => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    match rest.iter().position(|&c| c == LF) {
                        Some(p) => {
                            i += p + 1;
                            if self.st == Ch::Ext {
                                self.size_line_done();
                            } else {
                                self.st = Ch::TrailerStart;
                            }
                        }
                        None => i = bytes.len(),
                    }
                }
                Ch::SizeLf => {
                    i += 1;
                    if b != LF {
                        return Err(self.lose(GiveUp::LineEnd));
                    }
                    self.size_line_done();
                }
                Ch::Data => {
                    let n = usize::try_from(self.left)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len() - i);
                    self.events.feed(bytes.get(i..i + n).unwrap_or_default());
                    i += n;
                    self.left -= n as u64;
                    if self.left == 0 {
                        self.st = Ch::DataCr;
                    }
                }
                Ch::DataCr | Ch::DataLf => {
                    i += 1;
                    match (self.st, b) {
                        (Ch::DataCr, CR) => self.st = Ch::DataLf,
                        (_, LF) => {
                            self.st = Ch::Size;
                            self.digits = 0;
                        }
                        _ => return Err(self.lose(GiveUp::LineEnd)),
                    }
                }
                Ch::TrailerStart => {
                    i += 1;
                    self.st = match b {
                        CR => Ch::TrailerCr,
                        LF => Ch::Done,
                        _ => Ch::TrailerLine,
                    };
                }
                Ch::TrailerCr => {
                    i += 1;
                    if b != LF {
                        return Err(self.lose(GiveUp::LineEnd));
                    }
                    self.st = Ch::Done;
                }
            }
            if self.can_end_here() {
                fed.cut = Some(i);
            }
            if self.st == Ch::Done && fed.ended.is_none() {
                fed.ended = Some(i);
            }
        }
        match self.st {
            Ch::Lost(g) => Err(g),
            _ => Ok(fed),
        }
    }

    fn lose(&mut self, g: GiveUp) -> GiveUp {
        self.st = Ch::Lost(g);
        g
    }

    /// A chunk-size line ended: its data follows, or the trailer section after the last chunk.
    fn size_line_done(&mut self) {
        self.st = if self.left == 0 {
            Ch::TrailerStart
        } else {
            Ch::Data
        };
    }
}
