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
//! lines are whole in the bytes fed is read a line at a time: a word-at-a-time scan for each
//! LF, the start line, and the value of a header only when its name is one of the five it
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
}

#[derive(Debug, Clone)]
enum Wire {
    /// How many bytes of [`H2_PREFIX`] the client sent so far (all it sent).
    Undecided(u8),
    Http1(H1),
    Http2(H2),
}

impl Default for Wire {
    fn default() -> Self {
        Wire::Undecided(0)
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
        if let Wire::Undecided(m) = self.wire {
            let m = usize::from(m);
            let want = H2_PREFIX.get(m..).unwrap_or_default();
            let same = bytes.iter().zip(want).take_while(|(a, b)| a == b).count();
            if same == want.len() {
                // Only the prefix decides, as in Envoy; the rest of the preface is checked by the
                // HTTP/2 follower.
                self.wire = Wire::Http2(H2::new());
                self.run(true, bytes.get(same..).unwrap_or_default(), on);
            } else if same == bytes.len() {
                self.wire = Wire::Undecided((m + same) as u8);
            } else {
                // HTTP/1.1: the bytes held back as a possible preface are `H2_PREFIX[..m]`
                // (they matched it), so they are fed from there, not buffered.
                self.wire = Wire::Http1(H1::default());
                self.run(true, H2_PREFIX.get(..m).unwrap_or_default(), on);
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
        if let Wire::Undecided(_) = self.wire {
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
        let mut rest = bytes;
        while !self.ctx.lost && !self.ctx.tunnel {
            let Tracker { ctx, wire, .. } = self;
            let (n, ev) = match wire {
                Wire::Http1(h) if client => h.client(rest, ctx),
                Wire::Http1(h) => h.server(rest, ctx),
                Wire::Http2(h) => h.step(client, rest, ctx),
                Wire::Undecided(_) => (rest.len(), None),
            };
            rest = rest.get(n..).unwrap_or_default();
            let Some(ev) = ev else { return };
            match ev {
                Event::Started(_) => self.ctx.started += 1,
                Event::Ended(_) => self.ctx.ended = (self.ctx.ended + 1).min(self.ctx.started),
                Event::Lost => {}
            }
            on(ev, self);
        }
    }

    /// What the connection speaks ([`Protocol::Unknown`] once the tracker gave up).
    pub fn protocol(&self) -> Protocol {
        if self.ctx.lost {
            return Protocol::Unknown;
        }
        match self.wire {
            Wire::Undecided(_) => Protocol::Undecided,
            Wire::Http1(_) => Protocol::Http1,
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
            Wire::Http1(h) => h.req.st.in_head(),
            Wire::Http2(h) => h.c.block != 0,
            Wire::Undecided(_) => false,
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
    /// reused; keeping two sets would double them): while a head is partial, and for HTTP/2
    /// (no HPACK here), the hints are empty.
    pub fn hints(&self) -> Hints<'_> {
        match &self.wire {
            Wire::Http1(h) if h.hints.valid => h.hints.get(),
            _ => Hints::default(),
        }
    }

    /// HTTP/1.1: the next server byte starts the response head of a request in flight (no
    /// response or interim response under way).
    pub fn awaiting_response_head(&self) -> bool {
        match &self.wire {
            Wire::Http1(h) => !self.ctx.lost && h.resp.st == St::Start && h.fifo.front().is_some(),
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

    /// Client bytes fed so far (every call of [`Tracker::client`] counts), the offset in the
    /// client's byte stream of the next byte to feed.
    pub fn client_fed(&self) -> u64 {
        self.fed
    }

    /// Server bytes ahead that the tracker skips by length without reading them (the rest of a
    /// body or of a chunk's data, of an HTTP/2 frame's payload other than a GOAWAY's first
    /// eight bytes): a write of at most this many may be fed as [`unread`] bytes. 0 once lost
    /// or a tunnel (nothing is fed then).
    pub fn server_unread_ahead(&self) -> u64 {
        if self.ctx.lost || self.ctx.tunnel {
            return 0;
        }
        match &self.wire {
            Wire::Http1(h) if matches!(h.resp.st, St::Body | St::ChunkData) => h.resp.num,
            Wire::Http2(h) if h.s.in_frame && !(h.s.ty == GOAWAY && h.s.goaway_have < 4) => {
                u64::from(h.s.left)
            }
            _ => 0,
        }
    }

    /// Totals since the connection opened (for cross-checks): started, ended.
    pub fn totals(&self) -> (u64, u64) {
        (self.ctx.started, self.ctx.ended)
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1

/// Where one direction's HTTP/1.1 parser is. Heads are followed byte by byte only where a byte
/// matters (start lines, the five header names, their values); elsewhere a scan for LF.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum St {
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
    fn bounded(self) -> bool {
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
    fn in_head(self) -> bool {
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
                | St::UserAgent
                | St::SkipLine
        )
    }
}

/// Header names looked at, lowercase; their index is the header's kind.
const NAMES: [&[u8]; 5] = [
    b"content-length",
    b"connection",
    b"transfer-encoding",
    b"user-agent",
    b"upgrade",
];
const H_CL: u8 = 0;
const H_CONN: u8 = 1;
const H_TE: u8 = 2;
const H_UA: u8 = 3;
const H_UPGRADE: u8 = 4;

/// A header name and its colon as words to compare a line's first bytes with, eight at a
/// time: each word with the bit that makes its letters lowercase (`NAMES` are lowercase letters
/// and `-`; a byte matches a letter in either case, and `-` and `:` exactly).
struct NameWords {
    /// The name and colon's length (at least 8: `upgrade:`).
    len: usize,
    /// Word `i` is the bytes from `min(8 i, len - 8)`: the last one overlaps the one before.
    words: [u64; 3],
    case: [u64; 3],
}

const fn name_words(name: &[u8]) -> NameWords {
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
    fn starts(&self, line: &[u8]) -> bool {
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

const NAME_WORDS: [NameWords; 5] = [
    name_words(NAMES[0]),
    name_words(NAMES[1]),
    name_words(NAMES[2]),
    name_words(NAMES[3]),
    name_words(NAMES[4]),
];

/// Tokens looked for in `Transfer-Encoding` (bit 0) and `Connection` (bits 1, 2) values.
const TOKENS: [&[u8]; 3] = [b"chunked", b"close", b"keep-alive"];
const T_CHUNKED: u8 = 0;
const T_CLOSE: u8 = 1;
const T_KEEPALIVE: u8 = 2;

// Facts about the head being read.
const F_CL: u16 = 1;
const F_TE: u16 = 1 << 1;
const F_CHUNKED: u16 = 1 << 2;
const F_CLOSE: u16 = 1 << 3;
const F_KEEPALIVE: u16 = 1 << 4;
const F_UPGRADE: u16 = 1 << 5;
const F_HTTP10: u16 = 1 << 6;
const F_HEAD: u16 = 1 << 7;
const F_CONNECT: u16 = 1 << 8;

// A request's flags in the FIFO.
const R_HEAD: u8 = 1;
const R_CONNECT: u8 = 2;
const R_UPGRADE: u8 = 4;

/// One direction's parser position.
#[derive(Debug, Clone, Copy, Default)]
struct Half {
    st: St,
    /// Header kind whose value is read (`H_*`).
    hdr: u8,
    /// Candidates still matching (bit per `NAMES` or `TOKENS` index, or per method).
    cand: u8,
    /// Position in the name, token, literal or number being matched.
    pos: u8,
    /// Value parsing: 0 before an element, 1 inside, 2 after it (trailing whitespace).
    elem: u8,
    facts: u16,
    status: u16,
    /// Bytes of the current head (or bounded line/section) so far.
    head_len: u32,
    /// The number being read (Content-Length element, chunk size), or body bytes left.
    num: u64,
    /// The message's Content-Length.
    cl: u64,
}

/// What a parse step reached.
enum Mile {
    /// Used all the bytes.
    More,
    Head,
    Body,
    Bad,
}

impl Half {
    fn begin_head(&mut self, st: St) {
        *self = Half {
            st,
            cand: 0b11, // HEAD, CONNECT
            ..Half::default()
        };
    }

    fn begin_chunk(&mut self) {
        self.st = St::ChunkSize;
        self.pos = 0;
        self.num = 0;
        self.head_len = 0;
    }

    /// The end of a value element (a number or a token).
    fn end_element(&mut self) -> bool {
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

    /// Reads `bytes` until a head or a body ends (or they run out, or they do not parse).
    /// `req`: the client direction (request line, and the User-Agent and Upgrade headers).
    fn parse(&mut self, req: bool, hints: &mut HintBuf, bytes: &[u8]) -> (usize, Mile) {
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            let st = self.st;
            let i0 = i;
            match st {
                St::Start => {
                    if req {
                        if b == CR || b == LF {
                            i += 1;
                            continue;
                        }
                        self.begin_head(St::Method);
                        hints.clear();
                    } else {
                        self.begin_head(St::StatusVersion);
                    }
                    let (n, end) = self.whole_lines(req, hints, bytes.get(i..).unwrap_or_default());
                    i += n;
                    if let Some(mile) = end {
                        return (i, mile);
                    }
                    continue;
                }
                St::Method => {
                    i += 1;
                    if b == SP {
                        if self.pos == 0 {
                            return (i, Mile::Bad);
                        }
                        if self.cand & 1 != 0 && self.pos == 4 {
                            self.facts |= F_HEAD;
                        }
                        if self.cand & 2 != 0 && self.pos == 7 {
                            self.facts |= F_CONNECT;
                        }
                        self.st = St::Target;
                    } else if b <= SP || b == 0x7f {
                        return (i, Mile::Bad);
                    } else {
                        let p = usize::from(self.pos);
                        if b"HEAD".get(p) != Some(&b) {
                            self.cand &= !1;
                        }
                        if b"CONNECT".get(p) != Some(&b) {
                            self.cand &= !2;
                        }
                        self.pos = self.pos.saturating_add(1);
                    }
                }
                St::Target => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    match rest.iter().position(|&c| c == SP || c == LF) {
                        Some(p) => {
                            hints.path(rest.get(..p).unwrap_or_default());
                            if rest.get(p) == Some(&LF) || hints.path_total == 0 {
                                return (i + p + 1, Mile::Bad);
                            }
                            i += p + 1;
                            self.st = St::Version;
                            self.pos = 0;
                        }
                        None => {
                            hints.path(rest);
                            i = bytes.len();
                        }
                    }
                }
                St::Version | St::StatusVersion => {
                    i += 1;
                    let p = self.pos;
                    self.pos = p.saturating_add(1);
                    match p {
                        0..=6 if b"HTTP/1.".get(usize::from(p)) == Some(&b) => {}
                        7 if b.is_ascii_digit() => {
                            if b == b'0' {
                                self.facts |= F_HTTP10;
                            }
                        }
                        8 if st == St::StatusVersion && b == SP => {
                            self.st = St::StatusCode;
                            self.pos = 0;
                        }
                        8 if st == St::Version && b == CR => {}
                        8 | 9 if st == St::Version && b == LF => self.st = St::LineStart,
                        _ => return (i, Mile::Bad),
                    }
                }
                St::StatusCode => {
                    i += 1;
                    if !b.is_ascii_digit() {
                        return (i, Mile::Bad);
                    }
                    self.status = self.status * 10 + u16::from(b - b'0');
                    self.pos += 1;
                    if self.pos == 3 {
                        self.st = St::StatusTail;
                    }
                }
                St::StatusTail => {
                    i += 1;
                    match b {
                        LF => self.st = St::LineStart,
                        SP | CR => self.st = St::SkipLine,
                        _ => return (i, Mile::Bad),
                    }
                }
                St::LineStart => {
                    i += 1;
                    self.st = match b {
                        CR => St::LineCr,
                        LF => return (i, Mile::Head),
                        _ => {
                            self.cand = match b.to_ascii_lowercase() {
                                b'c' => 1 << H_CL | 1 << H_CONN,
                                b't' => 1 << H_TE,
                                b'u' if req => 1 << H_UA | 1 << H_UPGRADE,
                                _ => 0,
                            };
                            self.pos = 1;
                            if self.cand == 0 {
                                St::SkipLine
                            } else {
                                St::Name
                            }
                        }
                    };
                }
                St::LineCr => {
                    i += 1;
                    if b != LF {
                        return (i, Mile::Bad);
                    }
                    return (i, Mile::Head);
                }
                St::Name => {
                    if b == b':' {
                        i += 1;
                        let pos = usize::from(self.pos);
                        let hit = (0..NAMES.len() as u8).find(|&k| {
                            self.cand & (1 << k) != 0 && NAMES[usize::from(k)].len() == pos
                        });
                        self.st = St::SkipLine;
                        if let Some(k) = hit {
                            self.header_value(k, hints);
                        }
                    } else {
                        let l = b.to_ascii_lowercase();
                        let p = usize::from(self.pos);
                        for (k, name) in NAMES.iter().enumerate() {
                            if name.get(p) != Some(&l) {
                                self.cand &= !(1 << k);
                            }
                        }
                        self.pos = self.pos.saturating_add(1);
                        if self.cand == 0 {
                            // Not consumed: it may be the line's LF.
                            self.st = St::SkipLine;
                        } else {
                            i += 1;
                        }
                    }
                }
                St::Value => {
                    i += 1;
                    if !self.value_byte(b) {
                        return (i, Mile::Bad);
                    }
                }
                St::UserAgent => {
                    if self.elem == 0 && (b == SP || b == HT) {
                        i += 1;
                    } else {
                        self.elem = 1;
                        let rest = bytes.get(i..).unwrap_or_default();
                        match rest.iter().position(|&c| c == LF) {
                            Some(p) => {
                                hints.ua_more(rest.get(..p).unwrap_or_default());
                                hints.ua_end();
                                i += p + 1;
                                self.st = St::LineStart;
                            }
                            None => {
                                hints.ua_more(rest);
                                i = bytes.len();
                            }
                        }
                    }
                }
                St::SkipLine | St::ChunkExt | St::TrailerLine => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    match rest.iter().position(|&c| c == LF) {
                        Some(p) => {
                            i += p + 1;
                            self.st = match st {
                                St::SkipLine => St::LineStart,
                                St::TrailerLine => St::TrailerStart,
                                _ => self.chunk_line_done(),
                            };
                        }
                        None => i = bytes.len(),
                    }
                }
                St::Body | St::ChunkData => {
                    let left = bytes.len() - i;
                    let n = usize::try_from(self.num).unwrap_or(usize::MAX).min(left);
                    i += n;
                    self.num -= n as u64;
                    if self.num == 0 {
                        if st == St::Body {
                            return (i, Mile::Body);
                        }
                        self.st = St::ChunkDataEnd;
                        self.pos = 0;
                    }
                }
                St::ChunkSize => {
                    i += 1;
                    if let Some(d) = (b as char).to_digit(16) {
                        match self
                            .num
                            .checked_mul(16)
                            .and_then(|n| n.checked_add(u64::from(d)))
                        {
                            Some(n) => self.num = n,
                            None => return (i, Mile::Bad),
                        }
                        self.pos = 1;
                    } else if self.pos == 0 {
                        return (i, Mile::Bad);
                    } else if b == LF {
                        self.st = self.chunk_line_done();
                    } else if matches!(b, b';' | SP | HT | CR) {
                        self.st = St::ChunkExt;
                    } else {
                        return (i, Mile::Bad);
                    }
                }
                St::ChunkDataEnd => {
                    i += 1;
                    match (self.pos, b) {
                        (0, CR) => self.pos = 1,
                        (_, LF) => self.begin_chunk(),
                        _ => return (i, Mile::Bad),
                    }
                }
                St::TrailerStart => {
                    i += 1;
                    self.st = match b {
                        CR => St::TrailerCr,
                        LF => return (i, Mile::Body),
                        _ => St::TrailerLine,
                    };
                }
                St::TrailerCr => {
                    i += 1;
                    if b != LF {
                        return (i, Mile::Bad);
                    }
                    return (i, Mile::Body);
                }
                // Handled by the callers before parsing.
                St::Decide | St::Wait | St::Discard => return (i, Mile::More),
            }
            if st.bounded() {
                self.head_len = self.head_len.saturating_add((i - i0) as u32);
                if self.head_len as usize > MAX_HEAD {
                    return (i, Mile::Bad);
                }
            }
        }
        (i, Mile::More)
    }

    /// A head from its first byte, a whole line at a time while its lines are whole in `bytes`
    /// (the common case: Envoy's reads and writes rarely split a head): the same steps as the
    /// byte-by-byte parse, which takes over at the first line whose LF is not in `bytes`.
    /// Returns the bytes used and, if the head ended in them, `Some(Head)` or `Some(Bad)`.
    /// `None` with 0 bytes: the first line is not whole (nothing changed); with more: the state
    /// is the byte-by-byte parse's at the start of the next line (`LineStart`).
    ///
    /// Why: the byte-by-byte parse cost about 3 600 instructions per keep-alive request and
    /// response (callgrind, docs/performance.md); here a line costs one word-at-a-time scan for
    /// its LF, and only the start line and the lines of the five names are looked into.
    /// `tests/properties.rs` feeds the same bytes whole and byte by byte and wants the same.
    fn whole_lines(
        &mut self,
        req: bool,
        hints: &mut HintBuf,
        bytes: &[u8],
    ) -> (usize, Option<Mile>) {
        let Some(lf) = find_lf(bytes) else {
            return (0, None);
        };
        let line = bytes.get(..lf).unwrap_or_default();
        let ok = if req {
            self.request_line(hints, line)
        } else {
            self.status_line(line)
        };
        if !ok {
            return (lf + 1, Some(Mile::Bad));
        }
        self.st = St::LineStart;
        let mut i = lf + 1;
        loop {
            // Bytes of the head so far; the byte-by-byte parse counts every head byte but the
            // head's last LF.
            self.head_len = u32::try_from(i).unwrap_or(u32::MAX);
            if self.head_len as usize > MAX_HEAD {
                return (i, Some(Mile::Bad));
            }
            let rest = bytes.get(i..).unwrap_or_default();
            let Some(lf) = find_lf(rest) else {
                return (i, None);
            };
            let line = rest.get(..lf).unwrap_or_default();
            i += lf + 1;
            match line {
                [] => return (i, Some(Mile::Head)),
                [CR] => {
                    let counted = i - 1;
                    let end = if counted > MAX_HEAD {
                        Mile::Bad
                    } else {
                        Mile::Head
                    };
                    self.st = St::LineCr;
                    return (i, Some(end));
                }
                [CR, ..] => return (i, Some(Mile::Bad)),
                _ => {
                    if !self.header_line(req, hints, line) {
                        return (i, Some(Mile::Bad));
                    }
                }
            }
        }
    }

    /// A whole request line without its LF (`St::Method` at its first byte).
    fn request_line(&mut self, hints: &mut HintBuf, line: &[u8]) -> bool {
        let Some(sp) = line.iter().position(|&c| c == SP) else {
            return false;
        };
        let method = line.get(..sp).unwrap_or_default();
        if method.is_empty() || method.iter().any(|&c| c < SP || c == 0x7f) {
            return false;
        }
        match method {
            b"HEAD" => self.facts |= F_HEAD,
            b"CONNECT" => self.facts |= F_CONNECT,
            _ => {}
        }
        let rest = line.get(sp + 1..).unwrap_or_default();
        let Some(sp) = rest.iter().position(|&c| c == SP) else {
            return false;
        };
        let target = rest.get(..sp).unwrap_or_default();
        hints.path(target);
        if target.is_empty() {
            return false;
        }
        match rest.get(sp + 1..).unwrap_or_default() {
            [b'H', b'T', b'T', b'P', b'/', b'1', b'.', v]
            | [b'H', b'T', b'T', b'P', b'/', b'1', b'.', v, CR]
                if v.is_ascii_digit() =>
            {
                if *v == b'0' {
                    self.facts |= F_HTTP10;
                }
                true
            }
            _ => false,
        }
    }

    /// A whole status line without its LF (`St::StatusVersion` at its first byte).
    fn status_line(&mut self, line: &[u8]) -> bool {
        match line {
            [b'H', b'T', b'T', b'P', b'/', b'1', b'.', v, SP, d0, d1, d2, tail @ ..]
                if v.is_ascii_digit()
                    && d0.is_ascii_digit()
                    && d1.is_ascii_digit()
                    && d2.is_ascii_digit()
                    && matches!(tail.first(), None | Some(&SP) | Some(&CR)) =>
            {
                if *v == b'0' {
                    self.facts |= F_HTTP10;
                }
                self.status = [d0, d1, d2]
                    .iter()
                    .fold(0, |n, &&d| n * 10 + u16::from(d - b'0'));
                true
            }
            _ => false,
        }
    }

    /// A whole header line without its LF (not empty, not starting with CR): its value is
    /// read if its name is one of the five, else it is skipped. `false`: it does not parse.
    fn header_line(&mut self, req: bool, hints: &mut HintBuf, line: &[u8]) -> bool {
        let cand: u8 = match line.first().map(u8::to_ascii_lowercase) {
            Some(b'c') => 1 << H_CL | 1 << H_CONN,
            Some(b't') => 1 << H_TE,
            Some(b'u') if req => 1 << H_UA | 1 << H_UPGRADE,
            _ => return true,
        };
        let named = |k: u8| cand & (1 << k) != 0 && NAME_WORDS[usize::from(k)].starts(line);
        let Some(k) = (0..NAMES.len() as u8).find(|&k| named(k)) else {
            return true;
        };
        self.header_value(k, hints);
        let value = line
            .get(NAMES[usize::from(k)].len() + 1..)
            .unwrap_or_default();
        if k == H_UA {
            let at = value
                .iter()
                .position(|&c| c != SP && c != HT)
                .unwrap_or(value.len());
            hints.ua_more(value.get(at..).unwrap_or_default());
            hints.ua_end();
        } else {
            for &b in value.iter().chain(std::iter::once(&LF)) {
                if !self.value_byte(b) {
                    return false;
                }
                if self.st != St::Value {
                    break;
                }
            }
        }
        self.st = St::LineStart;
        true
    }

    /// One byte of a header value (`St::Value`): the state moves to `LineStart` at its LF, to
    /// `SkipLine` when the rest of the line does not matter. `false`: it does not parse.
    fn value_byte(&mut self, b: u8) -> bool {
        match b {
            LF | CR | SP | HT | b',' => {
                if self.elem == 1 {
                    if !self.end_element() {
                        return false;
                    }
                    self.elem = 2;
                }
                // A Content-Length must not be empty nor have empty elements.
                let empty = self.elem == 0 && (b == LF || b == b',');
                if empty && self.hdr == H_CL {
                    return false;
                }
                if b == b',' {
                    self.elem = 0;
                }
                if b == LF {
                    self.st = St::LineStart;
                }
            }
            _ => {
                if self.elem != 1 {
                    if self.elem == 2 && self.hdr == H_CL {
                        return false;
                    }
                    self.elem = 1;
                    self.pos = 0;
                    self.num = 0;
                    self.cand = match self.hdr {
                        H_TE => 1 << T_CHUNKED,
                        _ => 1 << T_CLOSE | 1 << T_KEEPALIVE,
                    };
                }
                match self.hdr {
                    H_CL => {
                        let d = match b {
                            b'0'..=b'9' => u64::from(b - b'0'),
                            _ => return false,
                        };
                        match self.num.checked_mul(10).and_then(|n| n.checked_add(d)) {
                            Some(n) => self.num = n,
                            None => return false,
                        }
                    }
                    H_UPGRADE => {
                        self.facts |= F_UPGRADE;
                        self.st = St::SkipLine;
                    }
                    _ => {
                        let l = b.to_ascii_lowercase();
                        let p = usize::from(self.pos);
                        for (k, t) in TOKENS.iter().enumerate() {
                            if t.get(p) != Some(&l) {
                                self.cand &= !(1 << k);
                            }
                        }
                        self.pos = self.pos.saturating_add(1);
                    }
                }
            }
        }
        true
    }

    /// The name of header kind `k` and its colon were read: its value follows.
    fn header_value(&mut self, k: u8, hints: &mut HintBuf) {
        self.hdr = k;
        self.elem = 0;
        match k {
            H_UA => {
                hints.ua_begin();
                self.st = St::UserAgent;
            }
            H_TE => {
                self.facts |= F_TE;
                self.st = St::Value;
            }
            _ => self.st = St::Value,
        }
    }

    /// A chunk-size line ended: data follows, or the trailer section after the last chunk.
    fn chunk_line_done(&mut self) -> St {
        self.head_len = 0;
        if self.num == 0 {
            St::TrailerStart
        } else {
            St::ChunkData
        }
    }

    /// After a head: where its body starts (`None`: no body).
    fn body(&mut self, chunked: bool) -> Option<St> {
        if chunked {
            self.begin_chunk();
            Some(St::ChunkSize)
        } else if self.cl > 0 {
            self.num = self.cl;
            Some(St::Body)
        } else {
            None
        }
    }
}

/// The index of the first LF in `s`, a word (eight bytes) at a time.
fn find_lf(s: &[u8]) -> Option<usize> {
    let mut words = s.chunks_exact(8);
    let mut base = 0;
    for w in &mut words {
        let zero = lf_bytes(w.try_into().unwrap_or([0; 8]));
        if zero != 0 {
            return Some(base + (zero.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    if words.remainder().is_empty() {
        return None;
    }
    // The bytes left end the slice's last word, whose other bytes were scanned (no LF): its
    // first LF is the slice's. Shorter than a word: byte by byte.
    match s.last_chunk::<8>() {
        Some(w) => {
            let zero = lf_bytes(*w);
            (zero != 0).then(|| s.len() - 8 + (zero.trailing_zeros() / 8) as usize)
        }
        None => words.remainder().iter().position(|&c| c == LF),
    }
}

/// The LF bytes of a word, flagged in their high bit: XOR with LFs makes them zero bytes, and
/// the lowest byte flagged by `(x - 0x01..) & !x & 0x80..` is exactly the first zero byte (the
/// flags above it may be wrong, so only the lowest is used).
fn lf_bytes(w: [u8; 8]) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const LFS: u64 = u64::from_ne_bytes([LF; 8]);
    let x = u64::from_le_bytes(w) ^ LFS;
    x.wrapping_sub(ONES) & !x & HIGH
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

/// The User-Agent and request-target of the latest request head, cut at HINT_LEN.
#[derive(Debug, Clone, Copy)]
struct HintBuf {
    path: [u8; HINT_LEN],
    ua: [u8; HINT_LEN],
    /// Bytes of the target seen (kept: at most HINT_LEN).
    path_total: u32,
    /// Bytes of the User-Agent value seen, and how many of them are trailing whitespace.
    ua_total: u32,
    ua_ws: u32,
    ua_len: u8,
    has_ua: bool,
    ua_cut: bool,
    valid: bool,
}

impl Default for HintBuf {
    fn default() -> Self {
        HintBuf {
            path: [0; HINT_LEN],
            ua: [0; HINT_LEN],
            path_total: 0,
            ua_total: 0,
            ua_ws: 0,
            ua_len: 0,
            has_ua: false,
            ua_cut: false,
            valid: false,
        }
    }
}

/// Appends what fits of `seg` to `buf`, which holds `*have` bytes.
fn keep(buf: &mut [u8; HINT_LEN], have: u32, seg: &[u8]) {
    let at = (have as usize).min(HINT_LEN);
    let n = (HINT_LEN - at).min(seg.len());
    if let (Some(dst), Some(src)) = (buf.get_mut(at..at + n), seg.get(..n)) {
        dst.copy_from_slice(src);
    }
}

impl HintBuf {
    fn clear(&mut self) {
        self.path_total = 0;
        self.has_ua = false;
        self.ua_cut = false;
        self.ua_len = 0;
        self.valid = false;
    }

    fn path(&mut self, seg: &[u8]) {
        keep(&mut self.path, self.path_total, seg);
        self.path_total = self.path_total.saturating_add(seg.len() as u32);
    }

    fn ua_begin(&mut self) {
        self.ua_total = 0;
        self.ua_ws = 0;
        self.ua_len = 0;
        self.ua_cut = false;
        self.has_ua = true;
    }

    fn ua_more(&mut self, seg: &[u8]) {
        keep(&mut self.ua, self.ua_total, seg);
        self.ua_total = self.ua_total.saturating_add(seg.len() as u32);
        // Trailing whitespace (and the CR) is trimmed at the end of the line: count it from
        // the end of the segment only, so the value is not walked.
        let ws = seg
            .iter()
            .rev()
            .take_while(|&&c| matches!(c, SP | HT | CR))
            .count() as u32;
        self.ua_ws = if ws as usize == seg.len() {
            self.ua_ws.saturating_add(ws)
        } else {
            ws
        };
    }

    fn ua_end(&mut self) {
        let len = self.ua_total.saturating_sub(self.ua_ws) as usize;
        self.ua_len = len.min(HINT_LEN) as u8;
        self.ua_cut = len > HINT_LEN;
    }

    fn get(&self) -> Hints<'_> {
        let path_len = (self.path_total as usize).min(HINT_LEN);
        Hints {
            user_agent: self
                .has_ua
                .then(|| self.ua.get(..usize::from(self.ua_len)).unwrap_or_default()),
            path: Some(self.path.get(..path_len).unwrap_or_default()),
            truncated: self.ua_cut || path_len < self.path_total as usize,
        }
    }
}

/// The flags of the requests read and not answered yet, oldest first.
#[derive(Debug, Clone, Copy, Default)]
struct Fifo {
    flags: [u8; MAX_PIPELINED],
    head: u8,
    len: u8,
}

impl Fifo {
    fn push(&mut self, f: u8) -> bool {
        if usize::from(self.len) >= MAX_PIPELINED {
            return false;
        }
        let at = (usize::from(self.head) + usize::from(self.len)) % MAX_PIPELINED;
        if let Some(slot) = self.flags.get_mut(at) {
            *slot = f;
        }
        self.len += 1;
        true
    }

    fn front(&self) -> Option<u8> {
        (self.len > 0).then(|| self.flags.get(usize::from(self.head)).copied().unwrap_or(0))
    }

    fn pop(&mut self) {
        if self.len > 0 {
            self.head = ((usize::from(self.head) + 1) % MAX_PIPELINED) as u8;
            self.len -= 1;
        }
    }
}

#[derive(Debug, Clone, Default)]
struct H1 {
    req: Half,
    resp: Half,
    fifo: Fifo,
    hints: HintBuf,
    /// A CONNECT or upgrade request waits for its response to say whether a tunnel follows.
    verdict_pending: bool,
    /// The client sent bytes while waiting (tunnel data or a next request; not kept).
    waited: bool,
}

// Why `Wait` does not buffer: a client may send tunnel data right behind a CONNECT or an
// upgrade request, before it knows the answer. Parsing those bytes as a request would lose
// the framing if a tunnel opens; keeping them would allocate. So they are only noticed, and
// if the answer is not a tunnel (they were the next request after all) the tracker gives up.

impl H1 {
    /// Client bytes: returns how many were used and the event that stopped it (`None`: all used).
    fn client(&mut self, bytes: &[u8], ctx: &mut Ctx) -> (usize, Option<Event>) {
        let mut off = 0;
        loop {
            let rest = bytes.get(off..).unwrap_or_default();
            match self.req.st {
                St::Wait => {
                    self.waited |= !rest.is_empty();
                    return (bytes.len(), None);
                }
                St::Discard => return (bytes.len(), None),
                _ => {}
            }
            let (n, mile) = self.req.parse(true, &mut self.hints, rest);
            off += n;
            match mile {
                Mile::More => return (off, None),
                Mile::Bad => return (off, lose(ctx)),
                Mile::Head => return (off, self.request_head(ctx)),
                Mile::Body => self.request_done(),
            }
        }
    }

    fn request_head(&mut self, ctx: &mut Ctx) -> Option<Event> {
        let f = self.req.facts;
        let te = f & F_TE != 0;
        // RFC 9112 §6.1, §6.3: both is smuggling-shaped; a request coding not ending in
        // chunked has no length. Envoy refuses both.
        if te && (f & F_CL != 0 || f & F_CHUNKED == 0) {
            return lose(ctx);
        }
        let mut flags = 0;
        if f & F_HEAD != 0 {
            flags |= R_HEAD;
        }
        if f & F_CONNECT != 0 {
            flags |= R_CONNECT;
        }
        if f & F_UPGRADE != 0 {
            flags |= R_UPGRADE;
        }
        if !self.fifo.push(flags) {
            return lose(ctx);
        }
        if f & F_CLOSE != 0 || (f & F_HTTP10 != 0 && f & F_KEEPALIVE == 0) {
            ctx.will_close = true;
        }
        if flags & (R_CONNECT | R_UPGRADE) != 0 {
            self.verdict_pending = true;
            self.waited = false;
        }
        self.hints.valid = true;
        match self.req.body(te) {
            Some(st) => self.req.st = st,
            None => self.request_done(),
        }
        Some(Event::Started(seq(ctx.started)))
    }

    fn request_done(&mut self) {
        self.req.st = if self.verdict_pending {
            St::Wait
        } else {
            St::Start
        };
    }

    /// Server bytes: as [`H1::client`].
    fn server(&mut self, bytes: &[u8], ctx: &mut Ctx) -> (usize, Option<Event>) {
        let mut off = 0;
        loop {
            if self.resp.st == St::Decide {
                let ev = self.decide(ctx);
                if ctx.tunnel {
                    return (bytes.len(), None);
                }
                if ev.is_some() {
                    return (off, ev);
                }
            }
            let rest = bytes.get(off..).unwrap_or_default();
            let (n, mile) = self.resp.parse(false, &mut self.hints, rest);
            off += n;
            match mile {
                Mile::More => return (off, None),
                Mile::Bad => return (off, lose(ctx)),
                Mile::Head => {
                    self.resp.st = St::Decide;
                    if self.fifo.front().is_none() {
                        // Envoy answers some requests before their head is complete (400,
                        // 413, 431) and then closes: that answer is the partial request's.
                        if !self.req.st.in_head() || !self.fifo.push(0) {
                            return (off, lose(ctx));
                        }
                        self.req.st = St::Discard;
                        self.hints.valid = false;
                        ctx.will_close = true;
                        return (off, Some(Event::Started(seq(ctx.started))));
                    }
                }
                Mile::Body => return (off, Some(self.response_done(ctx))),
            }
        }
    }

    /// A response head is complete: interim, tunnel, or the final response and its body.
    fn decide(&mut self, ctx: &mut Ctx) -> Option<Event> {
        let s = self.resp.status;
        let flags = self.fifo.front().unwrap_or(0);
        let f = self.resp.facts;
        self.resp.st = St::Start;
        if (100..200).contains(&s) && s != 101 {
            // 100 Continue, 103 Early Hints: the same request's final response follows.
            return None;
        }
        if s == 101 || (flags & R_CONNECT != 0 && (200..300).contains(&s)) {
            ctx.tunnel = true;
            return None;
        }
        if flags & (R_CONNECT | R_UPGRADE) != 0 && self.verdict_pending {
            // No tunnel: the client's bytes after the request are the next request, which
            // can only be parsed if none arrived meanwhile (they were not kept).
            self.verdict_pending = false;
            if self.req.st == St::Wait {
                if self.waited {
                    return lose(ctx);
                }
                self.req.st = St::Start;
            }
        }
        if f & F_CLOSE != 0 || (f & F_HTTP10 != 0 && f & F_KEEPALIVE == 0) {
            ctx.will_close = true;
        }
        let te = f & F_TE != 0;
        if te && f & F_CL != 0 {
            return lose(ctx);
        }
        if flags & R_HEAD != 0 || s == 204 || s == 304 {
            return Some(self.response_done(ctx));
        }
        if (te && f & F_CHUNKED == 0) || (!te && f & F_CL == 0) {
            // RFC 9112 §6.3: the body runs until the connection closes.
            ctx.tunnel = true;
            ctx.will_close = true;
            return None;
        }
        match self.resp.body(te) {
            Some(st) => {
                self.resp.st = st;
                None
            }
            None => Some(self.response_done(ctx)),
        }
    }

    fn response_done(&mut self, ctx: &mut Ctx) -> Event {
        self.fifo.pop();
        self.resp.st = St::Start;
        Event::Ended(seq(ctx.ended))
    }
}

/// The sequence number of the request after `count` of them.
fn seq(count: u64) -> u32 {
    u32::try_from(count + 1).unwrap_or(u32::MAX)
}

// ---------------------------------------------------------------------------------------------
// HTTP/2

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One direction's frame position.
#[derive(Debug, Clone, Copy, Default)]
struct Frames {
    /// A frame header split across feeds.
    head: [u8; 9],
    have: u8,
    /// The current frame (its header read): type, flags, stream, payload bytes left.
    in_frame: bool,
    ty: u8,
    flags: u8,
    id: u32,
    left: u32,
    /// The stream whose header block is open (0: none), whether the HEADERS had END_STREAM,
    /// and whether the block opens a counted stream.
    block: u32,
    block_end: bool,
    block_new: bool,
    /// A server GOAWAY's last-stream-id, possibly split.
    goaway: [u8; 4],
    goaway_have: u8,
}

/// A stream open (started, not ended); `closed`: which halves are (C_* bits).
#[derive(Debug, Clone, Copy)]
struct Stream {
    id: u32,
    closed: u8,
}
const C_CLIENT: u8 = 1;
const C_SERVER: u8 = 2;

#[derive(Debug, Clone)]
struct H2 {
    /// Bytes of the client preface read (24: all).
    preface: u8,
    c: Frames,
    s: Frames,
    server_started: bool,
    last_client: u32,
    client_goaway: bool,
    /// Open streams, by increasing id (new ids only increase, so pushes keep the order).
    streams: Vec<Stream>,
}

impl H2 {
    fn new() -> H2 {
        H2 {
            preface: H2_PREFIX.len() as u8,
            c: Frames::default(),
            s: Frames::default(),
            server_started: false,
            last_client: 0,
            client_goaway: false,
            streams: Vec::new(),
        }
    }

    /// One direction's bytes: returns how many were used and the event that stopped it.
    fn step(&mut self, client: bool, bytes: &[u8], ctx: &mut Ctx) -> (usize, Option<Event>) {
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
            if d.in_frame {
                let n = (d.left as usize).min(rest.len());
                if !client && d.ty == GOAWAY && d.goaway_have < 4 {
                    let at = usize::from(d.goaway_have);
                    let k = (4 - at).min(n);
                    if let (Some(dst), Some(src)) = (d.goaway.get_mut(at..at + k), rest.get(..k)) {
                        dst.copy_from_slice(src);
                    }
                    d.goaway_have += k as u8;
                }
                d.left -= n as u32;
                i += n;
                if d.left > 0 {
                    return (i, None);
                }
                d.in_frame = false;
                if let Some(ev) = self.frame_done(client, ctx) {
                    return (i, Some(ev));
                }
                continue;
            }
            if rest.is_empty() {
                return (i, None);
            }
            let head = match rest.get(..9) {
                Some(h) if d.have == 0 => {
                    i += 9;
                    <[u8; 9]>::try_from(h).unwrap_or_default()
                }
                _ => {
                    let at = usize::from(d.have);
                    let n = (9 - at).min(rest.len());
                    if let (Some(dst), Some(src)) = (d.head.get_mut(at..at + n), rest.get(..n)) {
                        dst.copy_from_slice(src);
                    }
                    i += n;
                    d.have += n as u8;
                    if d.have < 9 {
                        return (i, None);
                    }
                    d.have = 0;
                    d.head
                }
            };
            d.in_frame = true;
            d.left = u32::from_be_bytes([0, head[0], head[1], head[2]]);
            d.ty = head[3];
            d.flags = head[4];
            d.id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            d.goaway_have = 0;
            if let Some(ev) = self.frame_start(client, ctx) {
                return (i, Some(ev));
            }
        }
    }

    /// A frame header was read: checks the order rules; `Some(Lost)` if they are broken.
    fn frame_start(&mut self, client: bool, ctx: &mut Ctx) -> Option<Event> {
        let d = if client { self.c } else { self.s };
        let (ty, id) = (d.ty, d.id);
        if !client && !self.server_started {
            // RFC 9113 §3.4: the server preface is a SETTINGS frame.
            if ty != SETTINGS {
                return lose(ctx);
            }
            self.server_started = true;
        }
        if d.block != 0 {
            // RFC 9113 §6.10: a header block's frames are contiguous on their direction.
            if ty != CONTINUATION || id != d.block {
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
            GOAWAY if client => {
                self.client_goaway = true;
                return None;
            }
            GOAWAY if d.left < 8 => return lose(ctx),
            _ => return None,
        };
        let d = if client { &mut self.c } else { &mut self.s };
        d.block = id;
        d.block_new = new;
        d.block_end = ty == HEADERS && d.flags & END_STREAM != 0;
        None
    }

    /// A frame's last byte was read: what it does to its stream.
    fn frame_done(&mut self, client: bool, ctx: &mut Ctx) -> Option<Event> {
        let d = if client { &mut self.c } else { &mut self.s };
        let (ty, flags, id) = (d.ty, d.flags, d.id);
        let half = if client { C_CLIENT } else { C_SERVER };
        match ty {
            HEADERS | CONTINUATION | PUSH_PROMISE if d.block != 0 && flags & END_HEADERS != 0 => {
                let (sid, new, end) = (d.block, d.block_new, d.block_end);
                d.block = 0;
                if new {
                    if self.streams.len() >= MAX_STREAMS {
                        return lose(ctx);
                    }
                    let closed = if end { C_CLIENT } else { 0 };
                    self.streams.push(Stream { id: sid, closed });
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
            }
            _ => {}
        }
        None
    }

    /// Closes `halves` of stream `id` (if open); `Ended` once both are closed.
    fn close(&mut self, id: u32, halves: u8) -> Option<Event> {
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
        Some(Event::Ended(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::{Ended, Lost, Started};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum D {
        C,
        S,
    }
    use D::{C, S};

    type Script = Vec<(D, Vec<u8>)>;

    /// What an event looked like to the callback: the event, the hints at that moment (path,
    /// user agent, truncated) and in_flight.
    type Rec = (Event, Option<Vec<u8>>, Option<Vec<u8>>, bool, u32);

    fn rec(e: Event, t: &Tracker) -> Rec {
        let h = t.hints();
        (
            e,
            h.path.map(<[u8]>::to_vec),
            h.user_agent.map(<[u8]>::to_vec),
            h.truncated,
            t.in_flight(),
        )
    }

    fn feed(t: &mut Tracker, d: D, bytes: &[u8], out: &mut Vec<Rec>) {
        let mut on = |e: Event, t: &Tracker| out.push(rec(e, t));
        match d {
            C => t.client(bytes, &mut on),
            S => t.server(bytes, &mut on),
        }
    }

    /// Feeds each segment of the script whole, in order.
    fn play(script: &Script) -> (Tracker, Vec<Rec>) {
        let mut t = Tracker::new();
        let mut out = Vec::new();
        for (d, b) in script {
            feed(&mut t, *d, b, &mut out);
        }
        (t, out)
    }

    /// Feeds the script with the segment holding global byte `at` split there.
    fn play_split(script: &Script, at: usize) -> (Tracker, Vec<Rec>) {
        let mut t = Tracker::new();
        let mut out = Vec::new();
        let mut pos = 0;
        for (d, b) in script {
            if at > pos && at < pos + b.len() {
                let (x, y) = b.split_at(at - pos);
                feed(&mut t, *d, x, &mut out);
                feed(&mut t, *d, y, &mut out);
            } else {
                feed(&mut t, *d, b, &mut out);
            }
            pos += b.len();
        }
        (t, out)
    }

    /// Feeds the script one byte per call (and an empty call between).
    fn play_bytewise(script: &Script) -> (Tracker, Vec<Rec>) {
        let mut t = Tracker::new();
        let mut out = Vec::new();
        for (d, b) in script {
            for byte in b {
                feed(&mut t, *d, std::slice::from_ref(byte), &mut out);
                feed(&mut t, *d, &[], &mut out);
            }
        }
        (t, out)
    }

    fn events(out: &[Rec]) -> Vec<Event> {
        out.iter().map(|r| r.0).collect()
    }

    /// Plays the script whole and byte by byte: the events must be `want` both ways.
    fn check(script: &Script, want: &[Event]) -> Tracker {
        let (t, out) = play(script);
        assert_eq!(events(&out), want, "whole segments");
        let (t1, out1) = play_bytewise(script);
        assert_eq!(out1, out, "byte by byte");
        assert_eq!(t1.in_flight(), t.in_flight());
        assert_eq!(t1.protocol(), t.protocol());
        let (started, ended) = t.totals();
        let s = want.iter().filter(|e| matches!(e, Started(_))).count() as u64;
        let e = want.iter().filter(|e| matches!(e, Ended(_))).count() as u64;
        assert_eq!((started, ended), (s, e));
        t
    }

    fn c(b: &[u8]) -> (D, Vec<u8>) {
        (C, b.to_vec())
    }
    fn s(b: &[u8]) -> (D, Vec<u8>) {
        (S, b.to_vec())
    }

    // --- HTTP/1.1 exchanges -----------------------------------------------------------------

    fn keep_alive_get() -> Script {
        vec![
            c(b"GET /healthz HTTP/1.1\r\nHost: a\r\nUser-Agent:  kube-probe/1.29 \r\nCookie: x\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\nhello"),
            c(b"GET /two HTTP/1.1\r\nhost: a\r\n\r\n"),
            s(b"HTTP/1.1 204 No Content\r\n\r\n"),
        ]
    }

    #[test]
    fn unread_payload_is_fed_by_length() {
        // HTTP/1.1: a 10 000-byte body after its head, fed as stand-ins.
        let mut t = Tracker::new();
        let mut ev = Vec::new();
        let mut on = |e: Event, _: &Tracker| ev.push(e);
        t.client(b"GET / HTTP/1.1\r\n\r\n", &mut on);
        t.server(b"HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n", &mut on);
        assert_eq!(t.server_unread_ahead(), 10_000);
        for z in unread(9_999) {
            t.server(z, &mut on);
        }
        assert_eq!(t.server_unread_ahead(), 1);
        for z in unread(1) {
            t.server(z, &mut on);
        }
        assert_eq!(t.server_unread_ahead(), 0);
        assert_eq!(ev, [Event::Started(1), Event::Ended(1)]);
        // HTTP/2: a DATA frame's payload, not a GOAWAY's last-stream-id.
        let mut t = Tracker::new();
        let mut ev = Vec::new();
        let mut on = |e: Event, _: &Tracker| ev.push(e);
        t.client(H2_PREFACE, &mut on);
        t.client(&fr(SETTINGS, 0, 0, 0), &mut on);
        t.client(&fr(HEADERS, 0x5, 1, 0), &mut on);
        t.server(&fr(SETTINGS, 0, 0, 0), &mut on);
        t.server(&fr(HEADERS, 0x4, 1, 0)[..], &mut on);
        t.server(&fr(DATA, 0x1, 1, 5000)[..9], &mut on);
        assert_eq!(t.server_unread_ahead(), 5000);
        for z in unread(5000) {
            t.server(z, &mut on);
        }
        t.server(&fr(GOAWAY, 0, 0, 8)[..9], &mut on);
        assert_eq!(t.server_unread_ahead(), 0);
        assert_eq!(ev, [Event::Started(1), Event::Ended(1)]);
    }

    #[test]
    fn keep_alive_get_counts_two_requests_and_keeps_hints() {
        let t = check(
            &keep_alive_get(),
            &[Started(1), Ended(1), Started(2), Ended(2)],
        );
        assert_eq!(t.protocol(), Protocol::Http1);
        assert_eq!(t.in_flight(), 0);
        assert!(!t.will_close() && !t.tunnel() && !t.partial());
        let (_, out) = play(&keep_alive_get());
        assert_eq!(out[0].1.as_deref(), Some(&b"/healthz"[..]));
        assert_eq!(out[0].2.as_deref(), Some(&b"kube-probe/1.29"[..]));
        assert_eq!(out[0].4, 1, "in_flight inside on(Started)");
        assert_eq!(out[2].1.as_deref(), Some(&b"/two"[..]));
        assert_eq!(out[2].2, None, "the second request has no User-Agent");
        assert_eq!(
            t.hints().path,
            Some(&b"/two"[..]),
            "hints stay after Started"
        );
    }

    #[test]
    fn hints_are_cut_at_hint_len_and_say_so() {
        let long = "/".repeat(100);
        let ua = "u".repeat(70);
        let req = format!("GET {long} HTTP/1.1\r\nuser-agent: {ua}\r\n\r\n");
        let (_, out) = play(&vec![c(req.as_bytes())]);
        assert_eq!(out[0].1.as_ref().unwrap().len(), HINT_LEN);
        assert_eq!(out[0].2.as_ref().unwrap().len(), HINT_LEN);
        assert!(out[0].3);
        let (_, out) = play_bytewise(&vec![c(req.as_bytes())]);
        assert!(out[0].3);
        // Exactly HINT_LEN after trimming: not cut.
        let ua = "u".repeat(HINT_LEN);
        let req = format!("GET / HTTP/1.1\r\nUser-Agent: {ua}   \r\n\r\n");
        let (t, out) = play(&vec![c(req.as_bytes())]);
        assert!(!out[0].3);
        assert_eq!(t.hints().user_agent.unwrap().len(), HINT_LEN);
    }

    fn post_content_length() -> Script {
        vec![
            c(b"POST /p HTTP/1.1\r\ncontent-LENGTH: 11\r\nContent-Length: 11, 11\r\n\r\nhello\r\n\r\nxx"),
            s(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"),
            c(b"GET / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"),
        ]
    }

    #[test]
    fn post_with_content_length_skips_the_body() {
        check(
            &post_content_length(),
            &[Started(1), Ended(1), Started(2), Ended(2)],
        );
    }

    fn chunked_with_trailers() -> Script {
        vec![
            c(b"POST /c HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n5;ext=1\r\nhello\r\n10 ; a=\"b\"\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\ntrailer: x\r\n\r\n"),
            c(b"GET /n HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        ]
    }

    #[test]
    fn chunked_bodies_with_extensions_and_trailers() {
        check(
            &chunked_with_trailers(),
            &[Started(1), Ended(1), Started(2), Ended(2)],
        );
    }

    fn head_with_length() -> Script {
        vec![
            c(b"HEAD / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"),
            c(b"HEAD /c HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
            c(b"GET / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ]
    }

    #[test]
    fn head_responses_have_no_body_whatever_they_say() {
        check(
            &head_with_length(),
            &[
                Started(1),
                Ended(1),
                Started(2),
                Ended(2),
                Started(3),
                Ended(3),
            ],
        );
    }

    fn continue_100() -> Script {
        vec![
            c(b"PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"),
            s(b"HTTP/1.1 100 Continue\r\n\r\n"),
            c(b"data"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        ]
    }

    #[test]
    fn interim_100_continue_is_skipped() {
        check(&continue_100(), &[Started(1), Ended(1)]);
    }

    fn early_hints_103() -> Script {
        vec![
            c(b"GET / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
        ]
    }

    #[test]
    fn interim_103_is_skipped() {
        check(&early_hints_103(), &[Started(1), Ended(1)]);
    }

    fn websocket_101() -> Script {
        vec![
            c(b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUpgrade-Insecure-Requests: 1\r\n\r\n"),
            c(b"\x81\x05hello"),
            s(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
            s(b"\x81\x02hi"),
            c(b"GET / HTTP/1.1\r\n\r\n"),
        ]
    }

    #[test]
    fn upgrade_101_is_a_tunnel_until_close() {
        let t = check(&websocket_101(), &[Started(1)]);
        assert!(t.tunnel());
        assert_eq!(t.in_flight(), 1);
        assert_eq!(t.protocol(), Protocol::Http1);
    }

    fn connect_200() -> Script {
        vec![
            c(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\n\r\n"),
            c(b"\x16\x03\x01 tls"),
            s(b"HTTP/1.1 junk"),
        ]
    }

    #[test]
    fn connect_2xx_is_a_tunnel() {
        let t = check(&connect_200(), &[Started(1)]);
        assert!(t.tunnel());
    }

    fn connect_403() -> Script {
        vec![
            c(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"),
            c(b"GET / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        ]
    }

    #[test]
    fn connect_refused_goes_on_with_the_next_request() {
        let t = check(
            &connect_403(),
            &[Started(1), Ended(1), Started(2), Ended(2)],
        );
        assert!(!t.tunnel());
    }

    fn upgrade_refused_after_client_bytes() -> Script {
        vec![
            c(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"),
            s(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n"),
        ]
    }

    #[test]
    fn bytes_sent_during_a_refused_upgrade_are_unknown() {
        let t = check(&upgrade_refused_after_client_bytes(), &[Started(1), Lost]);
        assert_eq!(t.protocol(), Protocol::Unknown);
        assert_eq!(t.in_flight(), 1, "in_flight keeps its last value");
    }

    fn pipelined_three() -> Script {
        vec![
            c(b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n\r\nGET /3 HTTP/1.1\r\nIf-None-Match: x\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
            s(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"),
        ]
    }

    #[test]
    fn pipelined_requests_are_answered_in_order() {
        let t = check(
            &pipelined_three(),
            &[
                Started(1),
                Started(2),
                Started(3),
                Ended(1),
                Ended(2),
                Ended(3),
            ],
        );
        assert_eq!(t.in_flight(), 0);
    }

    fn bad_request_400() -> Script {
        vec![
            c(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: aaaa"),
            s(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request"),
            c(b"aaaaa\r\n\r\n"),
        ]
    }

    #[test]
    fn a_response_before_the_head_is_complete_answers_the_partial_request() {
        let (t, _) = play(&bad_request_400()[..1].to_vec());
        assert!(t.partial());
        assert_eq!(t.in_flight(), 0);
        let t = check(&bad_request_400(), &[Started(1), Ended(1)]);
        assert!(t.will_close());
        assert!(!t.partial());
        assert_eq!(t.hints(), Hints::default());
    }

    fn close_on_request() -> Script {
        vec![
            c(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        ]
    }

    fn close_on_response() -> Script {
        vec![
            c(b"GET / HTTP/1.1\r\nconnection: keep-alive\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive, CLOSE\r\n\r\n"),
        ]
    }

    #[test]
    fn connection_close_on_either_side_marks_will_close() {
        let (t, _) = play(&close_on_request()[..1].to_vec());
        assert!(t.will_close());
        check(&close_on_request(), &[Started(1), Ended(1)]);
        let (t, _) = play(&close_on_response()[..1].to_vec());
        assert!(!t.will_close());
        let t = check(&close_on_response(), &[Started(1), Ended(1)]);
        assert!(t.will_close());
        let (t, _) = play(&vec![c(b"GET / HTTP/1.0\r\n\r\n")]);
        assert!(t.will_close(), "HTTP/1.0 without keep-alive");
        let (t, _) = play(&vec![c(
            b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
        )]);
        assert!(!t.will_close());
    }

    fn until_close() -> Script {
        vec![
            c(b"GET / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200 OK\r\n\r\nstreaming until close"),
            c(b"GET / HTTP/1.1\r\n\r\n"),
        ]
    }

    #[test]
    fn a_body_without_length_runs_until_close() {
        let t = check(&until_close(), &[Started(1)]);
        assert!(t.tunnel() && t.will_close());
        assert_eq!(t.in_flight(), 1);
    }

    fn bare_lf() -> Script {
        vec![
            c(b"\r\n\nPOST / HTTP/1.1\nContent-Length: 2\n\nokGET / HTTP/1.1\n\n"),
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        ]
    }

    #[test]
    fn bare_lf_and_leading_empty_lines_are_accepted() {
        check(&bare_lf(), &[Started(1), Started(2), Ended(1), Ended(2)]);
    }

    /// Each HTTP/1.1 thing the tracker cannot follow, and the events before it gives up.
    fn h1_unknowns() -> Vec<(&'static str, Script, Vec<Event>)> {
        let get = || c(b"GET / HTTP/1.1\r\n\r\n");
        let ok = || s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        vec![
            ("bad request line", vec![c(b"GET / HTTX/1.1\r\n")], vec![Lost]),
            ("no target", vec![c(b"GET  HTTP/1.1\r\n")], vec![Lost]),
            ("HTTP/0.9", vec![c(b"GET /\r\n")], vec![Lost]),
            ("bad status line", vec![get(), s(b"HTTP/1.1 2x0 OK\r\n")], vec![Started(1), Lost]),
            ("bad status tail", vec![get(), s(b"HTTP/1.1 2000\r\n")], vec![Started(1), Lost]),
            ("bad chunk size", vec![c(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")], vec![Started(1), Lost]),
            ("bad chunk end", vec![c(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n")], vec![Started(1), Lost]),
            ("chunk size overflow", vec![c(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n")], vec![Started(1), Lost]),
            ("TE and CL", vec![c(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n")], vec![Lost]),
            ("TE not chunked", vec![c(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n")], vec![Lost]),
            ("CL differs in a list", vec![c(b"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n")], vec![Lost]),
            ("CL differs across lines", vec![c(b"POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n")], vec![Lost]),
            ("CL not digits", vec![c(b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n")], vec![Lost]),
            ("CL empty", vec![c(b"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n")], vec![Lost]),
            ("CL overflow", vec![c(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n")], vec![Lost]),
            ("response TE and CL", vec![get(), s(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")], vec![Started(1), Lost]),
            ("response nobody asked for", vec![get(), ok(), ok()], vec![Started(1), Ended(1), Lost]),
            ("server first", vec![ok()], vec![Lost]),
            ("bad h2 preface", vec![c(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")], vec![Lost]),
        ]
    }

    #[test]
    fn each_http1_unknown_trigger_loses_once() {
        for (name, script, want) in h1_unknowns() {
            let (t, out) = play(&script);
            assert_eq!(events(&out), want, "{name}");
            assert_eq!(t.protocol(), Protocol::Unknown, "{name}");
            // Later feeds are ignored.
            let mut more = Tracker::clone(&t);
            let mut n = 0;
            more.client(b"GET / HTTP/1.1\r\n\r\n", &mut |_, _| n += 1);
            more.server(b"HTTP/1.1 200 OK\r\n\r\n", &mut |_, _| n += 1);
            assert_eq!(n, 0, "{name}");
            assert_eq!(more.totals(), t.totals());
        }
    }

    #[test]
    fn too_long_lines_and_heads_are_unknown() {
        let mut line = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
        line.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        let (t, out) = play(&vec![c(&line)]);
        assert_eq!(events(&out), [Lost]);
        assert_eq!(t.protocol(), Protocol::Unknown);
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        while head.len() <= MAX_HEAD {
            head.extend_from_slice(b"Cookie: 0123456789\r\n");
        }
        let (_, out) = play(&vec![c(&head)]);
        assert_eq!(events(&out), [Lost]);
        // The same bytes in pieces.
        let mut t = Tracker::new();
        let mut evs = Vec::new();
        for piece in head.chunks(1000) {
            t.client(piece, &mut |e, _| evs.push(e));
        }
        assert_eq!(evs, [Lost]);
        // A long target is fine below the limit.
        let target = "/".repeat(MAX_HEAD / 2);
        let (_, out) = play(&vec![
            c(format!("GET {target} HTTP/1.1\r\n\r\n").as_bytes()),
        ]);
        assert_eq!(events(&out), [Started(1)]);
        // A chunk-size line longer than the limit.
        let mut body = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
        body.extend(std::iter::repeat_n(b'x', MAX_HEAD + 1));
        let (_, out) = play(&vec![c(&body)]);
        assert_eq!(events(&out), [Started(1), Lost]);
    }

    /// Envoy takes heads up to 8 MiB when configured to (`max_request_headers_kb: 8192`): a
    /// 4 MiB cookie header, whole and in 16 KiB reads, is followed.
    #[test]
    fn heads_as_large_as_envoy_can_take_are_followed() {
        let mut head = b"GET / HTTP/1.1\r\ncookie: ".to_vec();
        head.extend(std::iter::repeat_n(b'c', 4 << 20));
        head.extend_from_slice(b"\r\n\r\n");
        let (_, out) = play(&vec![c(&head)]);
        assert_eq!(events(&out), [Started(1)]);
        let mut t = Tracker::new();
        let mut evs = Vec::new();
        for piece in head.chunks(16 * 1024) {
            t.client(piece, &mut |e, _| evs.push(e));
        }
        assert_eq!(evs, [Started(1)]);
    }

    #[test]
    fn more_than_max_pipelined_requests_are_unknown() {
        let one = b"GET / HTTP/1.1\r\n\r\n";
        let mut t = Tracker::new();
        let mut evs = Vec::new();
        for _ in 0..MAX_PIPELINED + 1 {
            t.client(one, &mut |e, _| evs.push(e));
        }
        let mut want: Vec<Event> = (1..=MAX_PIPELINED as u32).map(Started).collect();
        want.push(Lost);
        assert_eq!(evs, want);
    }

    #[test]
    fn server_bytes_before_the_protocol_is_decided_are_unknown() {
        let mut t = Tracker::new();
        let mut evs = Vec::new();
        t.client(b"PRI * HT", &mut |e, _| evs.push(e));
        assert_eq!(t.protocol(), Protocol::Undecided);
        t.server(b"x", &mut |e, _| evs.push(e));
        assert_eq!(evs, [Lost]);
        assert_eq!(t.protocol(), Protocol::Unknown);
    }

    #[test]
    fn a_prefix_of_the_preface_that_turns_out_http1_is_replayed() {
        let mut t = Tracker::new();
        let mut evs = Vec::new();
        t.client(b"P", &mut |e, _| evs.push(e));
        assert_eq!(t.protocol(), Protocol::Undecided);
        t.client(
            b"OST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nz",
            &mut |e, _| evs.push(e),
        );
        assert_eq!(evs, [Started(1)]);
        assert_eq!(t.hints().path, Some(&b"/x"[..]));
        let (_, out) = play(&vec![c(b"PRI / HTTP/1.1\r\n\r\n")]);
        assert_eq!(events(&out), [Started(1)]);
    }

    // --- HTTP/2 -----------------------------------------------------------------------------

    /// A frame with `len` payload bytes (junk: payloads are never read, except GOAWAY's).
    fn fr(ty: u8, flags: u8, id: u32, len: usize) -> Vec<u8> {
        let mut f = (len as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[ty, flags]);
        f.extend_from_slice(&id.to_be_bytes());
        f.extend((0..len).map(|i| (i * 7 + 0x80) as u8));
        f
    }

    fn goaway(last: u32) -> Vec<u8> {
        let mut f = fr(GOAWAY, 0, 0, 0);
        f[2] = 8;
        f.extend_from_slice(&last.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        f
    }

    const ES: u8 = END_STREAM;
    const EH: u8 = END_HEADERS;

    fn cf(ty: u8, flags: u8, id: u32, len: usize) -> (D, Vec<u8>) {
        (C, fr(ty, flags, id, len))
    }
    fn sf(ty: u8, flags: u8, id: u32, len: usize) -> (D, Vec<u8>) {
        (S, fr(ty, flags, id, len))
    }

    /// The client preface with its SETTINGS, and the server's SETTINGS and ack.
    fn h2_open() -> Script {
        let mut pre = H2_PREFACE.to_vec();
        pre.extend(fr(SETTINGS, 0, 0, 18));
        let mut srv = fr(SETTINGS, 0, 0, 12);
        srv.extend(fr(SETTINGS, 1, 0, 0));
        srv.extend(fr(8, 0, 0, 4)); // WINDOW_UPDATE
        vec![(C, pre), (S, srv), cf(SETTINGS, 1, 0, 0), cf(6, 0, 0, 8)]
    }

    fn h2(rest: Script) -> Script {
        let mut s = h2_open();
        s.extend(rest);
        s
    }

    #[test]
    fn h2_preface_and_settings_start_no_stream() {
        let t = check(&h2_open(), &[]);
        assert_eq!(t.protocol(), Protocol::Http2);
        assert_eq!(t.in_flight(), 0);
        assert!(!t.partial());
    }

    fn h2_get() -> Script {
        h2(vec![
            cf(HEADERS, ES | EH | 0x20, 1, 20),
            sf(HEADERS, EH, 1, 10),
            sf(DATA, 0, 1, 100),
            sf(DATA, ES | 0x8, 1, 10),
        ])
    }

    #[test]
    fn h2_get_with_end_stream_on_headers() {
        check(&h2_get(), &[Started(1), Ended(1)]);
    }

    fn h2_post() -> Script {
        h2(vec![
            cf(HEADERS, EH, 1, 20),
            cf(DATA, 0, 1, 100),
            sf(HEADERS, EH, 1, 10),
            cf(DATA, ES, 1, 0),
            sf(DATA, ES, 1, 3),
            // The server answers before the client finishes: ended by the client's END_STREAM.
            cf(HEADERS, EH, 3, 5),
            sf(HEADERS, EH | ES, 3, 10),
            cf(DATA, ES, 3, 4),
        ])
    }

    #[test]
    fn h2_post_ends_when_both_halves_closed() {
        check(&h2_post(), &[Started(1), Ended(1), Started(3), Ended(3)]);
    }

    fn h2_continuation() -> Script {
        h2(vec![
            cf(HEADERS, ES, 1, 20),
            sf(8, 0, 0, 4),
            cf(CONTINUATION, 0, 1, 20),
            cf(CONTINUATION, EH, 1, 5),
            // END_STREAM is a HEADERS flag; it takes effect with the block's end.
            sf(HEADERS, ES, 1, 10),
            sf(CONTINUATION, EH, 1, 10),
        ])
    }

    #[test]
    fn h2_continuation_completes_the_header_block() {
        let script = h2_continuation();
        let n = h2_open().len();
        let (t, out) = play(&script[..n + 1].to_vec());
        assert!(t.partial());
        assert!(out.is_empty());
        check(&script, &[Started(1), Ended(1)]);
    }

    fn h2_resets() -> Script {
        h2(vec![
            cf(HEADERS, EH, 1, 20),
            cf(RST_STREAM, 0, 1, 4),
            sf(HEADERS, EH, 1, 10), // in flight before the server saw the RST: ignored
            cf(HEADERS, EH | ES, 3, 20),
            sf(RST_STREAM, 0, 3, 4),
            cf(DATA, ES, 3, 4), // ignored
            cf(RST_STREAM, 0, 3, 4),
        ])
    }

    #[test]
    fn h2_rst_from_either_side_ends_the_stream() {
        let t = check(&h2_resets(), &[Started(1), Ended(1), Started(3), Ended(3)]);
        assert_eq!(t.in_flight(), 0);
    }

    /// A client header block on a stream closed here opens no request, and the tracker goes on:
    /// trailers the client sent before it saw the server's RST_STREAM (legal, RFC 9113 §5.1),
    /// with a CONTINUATION; a block on a stream that ended, or on an id below the highest used
    /// (errors Envoy answers itself: no request either).
    #[test]
    fn h2_header_blocks_on_closed_streams_open_nothing_and_lose_nothing() {
        let t = check(
            &h2(vec![
                cf(HEADERS, EH, 1, 20),
                cf(DATA, 0, 1, 100),
                sf(RST_STREAM, 0, 1, 4),
                cf(DATA, 0, 1, 100),
                cf(HEADERS, ES, 1, 8),
                cf(CONTINUATION, EH, 1, 4),
                cf(HEADERS, EH | ES, 3, 3),
                sf(HEADERS, EH | ES, 3, 3),
                cf(HEADERS, EH | ES, 3, 3),
                cf(HEADERS, EH, 7, 3),
                cf(HEADERS, EH | ES, 5, 3),
                cf(HEADERS, EH | ES, 9, 3),
            ]),
            &[
                Started(1),
                Ended(1),
                Started(3),
                Ended(3),
                Started(7),
                Started(9),
            ],
        );
        assert_eq!(t.protocol(), Protocol::Http2);
        assert_eq!(t.in_flight(), 2);
    }

    fn h2_trailers() -> Script {
        h2(vec![
            cf(HEADERS, EH, 1, 20),
            cf(DATA, 0, 1, 10),
            sf(HEADERS, EH, 1, 10),
            cf(HEADERS, EH | ES, 1, 8),
            sf(DATA, 0, 1, 10),
            sf(HEADERS, 0, 1, 8),
            sf(CONTINUATION, EH, 1, 8),
            sf(HEADERS, EH | ES, 1, 8),
        ])
    }

    #[test]
    fn h2_trailers_close_a_half() {
        check(&h2_trailers(), &[Started(1), Ended(1)]);
    }

    fn h2_goaway() -> Script {
        h2(vec![
            cf(HEADERS, EH | ES, 1, 20),
            cf(HEADERS, EH | ES, 3, 20),
            cf(HEADERS, EH, 5, 20),
            (S, goaway(1)),
            cf(HEADERS, EH | ES, 7, 20),
            cf(PING_T, 0, 0, 8),
            cf(DATA, ES, 5, 0),
            cf(HEADERS, EH, 3, 2), // trailers on a cut stream: ignored
            (S, goaway(3)),        // a larger one changes nothing
            sf(HEADERS, EH | ES, 1, 10),
        ])
    }
    const PING_T: u8 = 6;

    /// A server GOAWAY ends no stream: each one counts until it ends or the connection
    /// closes (an overcount until the close, never an undercount).
    #[test]
    fn h2_server_goaway_ends_no_stream() {
        let t = check(
            &h2_goaway(),
            &[Started(1), Started(3), Started(5), Started(7), Ended(1)],
        );
        assert!(t.will_close());
        assert_eq!(t.in_flight(), 3);
    }

    fn h2_interleaved() -> Script {
        h2(vec![
            cf(HEADERS, EH, 1, 20),
            cf(HEADERS, EH, 3, 20),
            cf(DATA, 0, 1, 5),
            cf(DATA, 0, 3, 5),
            sf(HEADERS, EH, 3, 10),
            cf(DATA, ES, 3, 5),
            cf(HEADERS, EH | ES, 5, 20),
            sf(HEADERS, EH, 1, 10),
            sf(HEADERS, EH | ES, 5, 3),
            sf(DATA, ES, 3, 7),
            cf(DATA, ES, 1, 5),
            sf(DATA, 0, 1, 7),
            sf(DATA, ES, 1, 7),
        ])
    }

    #[test]
    fn h2_interleaved_streams() {
        let t = check(
            &h2_interleaved(),
            &[
                Started(1),
                Started(3),
                Started(5),
                Ended(5),
                Ended(3),
                Ended(1),
            ],
        );
        assert_eq!(t.in_flight(), 0);
    }

    fn h2_unknowns() -> Vec<(&'static str, Script, Vec<Event>)> {
        let open = h2_open();
        let with = |rest: Script| {
            let mut s = open.clone();
            s.extend(rest);
            s
        };
        let mut pre = H2_PREFACE.to_vec();
        pre.extend(fr(SETTINGS, 0, 0, 0));
        vec![
            (
                "server first frame not SETTINGS",
                vec![(C, pre.clone()), sf(8, 0, 0, 4)],
                vec![Lost],
            ),
            (
                "HEADERS on 0",
                with(vec![cf(HEADERS, EH, 0, 3)]),
                vec![Lost],
            ),
            ("DATA on 0", with(vec![sf(DATA, 0, 0, 3)]), vec![Lost]),
            (
                "CONTINUATION without block",
                with(vec![cf(CONTINUATION, EH, 1, 3)]),
                vec![Lost],
            ),
            (
                "other frame in block",
                with(vec![cf(HEADERS, 0, 1, 3), cf(DATA, 0, 1, 3)]),
                vec![Lost],
            ),
            (
                "CONTINUATION of another stream",
                with(vec![cf(HEADERS, 0, 1, 3), cf(CONTINUATION, EH, 3, 3)]),
                vec![Lost],
            ),
            (
                "server frame in its block",
                with(vec![
                    cf(HEADERS, EH, 1, 3),
                    sf(HEADERS, 0, 1, 3),
                    sf(8, 0, 0, 4),
                ]),
                vec![Started(1), Lost],
            ),
            ("even id", with(vec![cf(HEADERS, EH, 2, 3)]), vec![Lost]),
            ("short GOAWAY", with(vec![sf(GOAWAY, 0, 0, 4)]), vec![Lost]),
        ]
    }

    #[test]
    fn each_http2_unknown_trigger_loses_once() {
        for (name, script, want) in h2_unknowns() {
            let (t, out) = play(&script);
            assert_eq!(events(&out), want, "{name}");
            assert_eq!(t.protocol(), Protocol::Unknown, "{name}");
        }
    }

    #[test]
    fn more_than_max_streams_is_unknown() {
        let mut script = h2_open();
        for k in 0..=MAX_STREAMS as u32 {
            script.push(cf(HEADERS, EH, 2 * k + 1, 1));
        }
        let (t, out) = play(&script);
        assert_eq!(out.len(), MAX_STREAMS + 1);
        assert_eq!(out.last().unwrap().0, Lost);
        assert_eq!(t.in_flight(), MAX_STREAMS as u32);
    }

    #[test]
    fn a_large_frame_is_skipped_by_length() {
        let mut script = h2(vec![cf(HEADERS, EH, 1, 3), cf(DATA, ES, 1, (1 << 24) - 1)]);
        script.push(sf(HEADERS, EH | ES, 1, 3));
        check(&script, &[Started(1), Ended(1)]);
    }

    /// Every exchange above, with every segment split at every byte: the same events, hints
    /// and in_flight at each event, and the same state at the end.
    #[test]
    fn every_exchange_split_at_every_byte_gives_the_same_events() {
        let mut all: Vec<(&str, Script)> = vec![
            ("keep_alive_get", keep_alive_get()),
            ("post_content_length", post_content_length()),
            ("chunked_with_trailers", chunked_with_trailers()),
            ("head_with_length", head_with_length()),
            ("continue_100", continue_100()),
            ("early_hints_103", early_hints_103()),
            ("websocket_101", websocket_101()),
            ("connect_200", connect_200()),
            ("connect_403", connect_403()),
            ("upgrade_refused", upgrade_refused_after_client_bytes()),
            ("pipelined_three", pipelined_three()),
            ("bad_request_400", bad_request_400()),
            ("close_on_request", close_on_request()),
            ("close_on_response", close_on_response()),
            ("until_close", until_close()),
            ("bare_lf", bare_lf()),
            ("h2_open", h2_open()),
            ("h2_get", h2_get()),
            ("h2_post", h2_post()),
            ("h2_continuation", h2_continuation()),
            ("h2_resets", h2_resets()),
            ("h2_trailers", h2_trailers()),
            ("h2_goaway", h2_goaway()),
            ("h2_interleaved", h2_interleaved()),
        ];
        all.extend(h1_unknowns().into_iter().map(|(n, s, _)| (n, s)));
        all.extend(h2_unknowns().into_iter().map(|(n, s, _)| (n, s)));
        for (name, script) in all {
            let (t, want) = play(&script);
            let total: usize = script.iter().map(|(_, b)| b.len()).sum();
            for at in 1..total {
                let (t2, got) = play_split(&script, at);
                assert_eq!(got, want, "{name} split at {at}");
                assert_eq!(
                    (
                        t2.in_flight(),
                        t2.protocol(),
                        t2.partial(),
                        t2.tunnel(),
                        t2.will_close()
                    ),
                    (
                        t.in_flight(),
                        t.protocol(),
                        t.partial(),
                        t.tunnel(),
                        t.will_close()
                    ),
                    "{name} split at {at}"
                );
            }
            let (_, got) = play_bytewise(&script);
            assert_eq!(got, want, "{name} byte by byte");
        }
    }

    #[test]
    fn memory_per_connection_stays_small() {
        eprintln!("size_of::<Tracker>() = {}", std::mem::size_of::<Tracker>());
        assert!(
            std::mem::size_of::<Tracker>() <= 272,
            "{}",
            std::mem::size_of::<Tracker>()
        );
        assert_eq!(std::mem::size_of::<Stream>(), 8);
    }
}
