//! The HTTP/1.1 (RFC 9112) half of [`super::Tracker`]: both directions' parsers.

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
                | St::UserAgent
                | St::SkipLine
        )
    }
}

/// Header names looked at, lowercase; their index is the header's kind.
pub(super) const NAMES: [&[u8]; 5] = [
    b"content-length",
    b"connection",
    b"transfer-encoding",
    b"user-agent",
    b"upgrade",
];
pub(super) const H_CL: u8 = 0;
pub(super) const H_CONN: u8 = 1;
pub(super) const H_TE: u8 = 2;
pub(super) const H_UA: u8 = 3;
pub(super) const H_UPGRADE: u8 = 4;

/// What a header line's first byte says: bit `k` for each header kind `k` whose name starts
/// with it (either case), [`CR_LINE`] for CR, 0 for a line the tracker skips (most of them).
pub(super) const LINE_START: [u8; 256] = line_starts();
/// A line starting with CR: the head's end, or a head that does not parse.
pub(super) const CR_LINE: u8 = 0x80;
/// The header kinds read in requests only.
pub(super) const REQUEST_ONLY: u8 = 1 << H_UA | 1 << H_UPGRADE;

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

pub(super) const NAME_WORDS: [NameWords; 5] = [
    name_words(NAMES[0]),
    name_words(NAMES[1]),
    name_words(NAMES[2]),
    name_words(NAMES[3]),
    name_words(NAMES[4]),
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

// A request's flags in the FIFO.
pub(super) const R_HEAD: u8 = 1;
pub(super) const R_CONNECT: u8 = 2;
pub(super) const R_UPGRADE: u8 = 4;

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
            cand: 0b11, // HEAD, CONNECT
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

    /// Reads `bytes` until a head or a body ends (or they run out, or they do not parse).
    /// `req`: the client direction (request line, and the User-Agent and Upgrade headers).
    pub(super) fn parse(&mut self, req: bool, hints: &mut HintBuf, bytes: &[u8]) -> (usize, Mile) {
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
    /// response (callgrind, docs/performance.md); here a line costs one scan for its LF, sixteen
    /// bytes at a time, and only the start line and the lines of the five names are looked into.
    /// `tests/properties.rs` feeds the same bytes whole and byte by byte and wants the same.
    pub(super) fn whole_lines(
        &mut self,
        req: bool,
        hints: &mut HintBuf,
        bytes: &[u8],
    ) -> (usize, Option<Mile>) {
        let Some(lf) = lf_from(bytes, 0) else {
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
        let kinds = if req { !0 } else { !REQUEST_ONLY };
        let mut i = lf + 1;
        loop {
            // The line from `at`. Where the loop leaves, `head_len` is the bytes of the head
            // before this line (the byte-by-byte parse counts every head byte but the head's
            // last LF); inside it, nothing reads it.
            let at = i;
            if at > MAX_HEAD {
                self.head_len = head_len(at);
                return (at, Some(Mile::Bad));
            }
            let Some(lf) = lf_from(bytes, at) else {
                self.head_len = head_len(at);
                return (at, None);
            };
            i = lf + 1;
            let Some(&first) = bytes.get(at).filter(|_| lf > at) else {
                self.head_len = head_len(at);
                return (i, Some(Mile::Head));
            };
            let kind = LINE_START[usize::from(first)] & kinds;
            if kind == 0 {
                continue;
            }
            let line = bytes.get(at..lf).unwrap_or_default();
            if kind == CR_LINE {
                self.head_len = head_len(at);
                if line.len() > 1 {
                    return (i, Some(Mile::Bad));
                }
                let end = if i - 1 > MAX_HEAD {
                    Mile::Bad
                } else {
                    Mile::Head
                };
                self.st = St::LineCr;
                return (i, Some(end));
            }
            if !self.header_line(kind, hints, line) {
                self.head_len = head_len(at);
                return (i, Some(Mile::Bad));
            }
        }
    }

    /// A whole request line without its LF (`St::Method` at its first byte).
    pub(super) fn request_line(&mut self, hints: &mut HintBuf, line: &[u8]) -> bool {
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
    pub(super) fn status_line(&mut self, line: &[u8]) -> bool {
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

    /// A whole header line without its LF (not empty, not starting with CR), `cand` the
    /// header kinds its first byte can start ([`LINE_START`]): its value is read if its name is
    /// one of them, else it is skipped. `false`: it does not parse.
    pub(super) fn header_line(&mut self, cand: u8, hints: &mut HintBuf, line: &[u8]) -> bool {
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
    pub(super) fn value_byte(&mut self, b: u8) -> bool {
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
    pub(super) fn header_value(&mut self, k: u8, hints: &mut HintBuf) {
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
    pub(super) fn chunk_line_done(&mut self) -> St {
        self.head_len = 0;
        if self.num == 0 {
            St::TrailerStart
        } else {
            St::ChunkData
        }
    }

    /// After a head: where its body starts (`None`: no body).
    pub(super) fn body(&mut self, chunked: bool) -> Option<St> {
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

/// The index of the first LF in `s` from `from` on, sixteen bytes at a time.
///
/// Why: the LF scan is most of what a request head costs the tracker. A browser's 750-byte
/// head, callgrind, Envoy 1.40.0, a direct response: the read hook cost 3 860 instructions with
/// a word-at-a-time scan, 3 330 with this one inlined (3 390 as a call). The "does this block
/// hold an LF" fold below compiles, on x86_64, to one SSE2 compare and mask a block (`pcmpeqb`,
/// `pmovmskb`: eight instructions a block in the loop, rustc 1.95), with no `unsafe` and no
/// intrinsic; elsewhere to byte compares. The block that holds the LF is then looked into a
/// word at a time. The scan takes its start as an index, not a sub-slice, so a line costs no
/// slice of its own. (A cursor that keeps a block's LFs between lines cost more: most lines
/// are longer than a block, so a block rarely holds two, and each block it reads pays for a
/// mask of its LFs.)
#[inline(always)]
pub(super) fn lf_from(s: &[u8], from: usize) -> Option<usize> {
    let rest = s.get(from..)?;
    let (blocks, tail) = rest.as_chunks::<16>();
    for (k, b) in blocks.iter().enumerate() {
        if has_lf(b) {
            return Some(from + 16 * k + first_lf(b));
        }
    }
    if tail.is_empty() {
        return None;
    }
    // The bytes left end the rest's last block, whose other bytes were scanned (no LF): its
    // first LF is the rest's. Shorter than a block: a word, then byte by byte.
    if let Some(b) = rest.last_chunk::<16>() {
        return has_lf(b).then(|| from + rest.len() - 16 + first_lf(b));
    }
    let (words, bytes) = rest.as_chunks::<8>();
    if let Some(w) = words.first() {
        let zero = lf_bytes(*w);
        if zero != 0 {
            return Some(from + (zero.trailing_zeros() / 8) as usize);
        }
    }
    let at = from + 8 * words.len();
    bytes.iter().position(|&c| c == LF).map(|p| at + p)
}

/// A head length as `Half::head_len` keeps it.
fn head_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whether a block holds an LF: a fold the compiler turns into one vector compare.
fn has_lf(b: &[u8; 16]) -> bool {
    b.iter().fold(false, |any, &c| any | (c == LF))
}

/// The index of the first LF in a block that holds one.
fn first_lf(b: &[u8; 16]) -> usize {
    let (w, _) = b.as_chunks::<8>();
    let lo = w.first().map_or(0, |w| lf_bytes(*w));
    if lo != 0 {
        return (lo.trailing_zeros() / 8) as usize;
    }
    let hi = w.get(1).map_or(0, |w| lf_bytes(*w));
    8 + (hi.trailing_zeros() / 8) as usize
}

/// The LF bytes of a word, flagged in their high bit: XOR with LFs makes them zero bytes, and
/// the lowest byte flagged by `(x - 0x01..) & !x & 0x80..` is exactly the first zero byte (the
/// flags above it may be wrong, so only the lowest is used).
pub(super) fn lf_bytes(w: [u8; 8]) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const LFS: u64 = u64::from_ne_bytes([LF; 8]);
    let x = u64::from_le_bytes(w) ^ LFS;
    x.wrapping_sub(ONES) & !x & HIGH
}

/// The User-Agent and request-target of the latest request head, cut at HINT_LEN.
#[derive(Debug, Clone, Copy)]
pub(super) struct HintBuf {
    pub(super) path: [u8; HINT_LEN],
    pub(super) ua: [u8; HINT_LEN],
    /// Bytes of the target seen (kept: at most HINT_LEN).
    pub(super) path_total: u32,
    /// Bytes of the User-Agent value seen, and how many of them are trailing whitespace.
    pub(super) ua_total: u32,
    pub(super) ua_ws: u32,
    pub(super) ua_len: u8,
    pub(super) has_ua: bool,
    pub(super) ua_cut: bool,
    pub(super) valid: bool,
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
pub(super) fn keep(buf: &mut [u8; HINT_LEN], have: u32, seg: &[u8]) {
    let at = (have as usize).min(HINT_LEN);
    let n = (HINT_LEN - at).min(seg.len());
    if let (Some(dst), Some(src)) = (buf.get_mut(at..at + n), seg.get(..n)) {
        dst.copy_from_slice(src);
    }
}

impl HintBuf {
    pub(super) fn clear(&mut self) {
        self.path_total = 0;
        self.has_ua = false;
        self.ua_cut = false;
        self.ua_len = 0;
        self.valid = false;
    }

    pub(super) fn path(&mut self, seg: &[u8]) {
        keep(&mut self.path, self.path_total, seg);
        self.path_total = self.path_total.saturating_add(seg.len() as u32);
    }

    pub(super) fn ua_begin(&mut self) {
        self.ua_total = 0;
        self.ua_ws = 0;
        self.ua_len = 0;
        self.ua_cut = false;
        self.has_ua = true;
    }

    pub(super) fn ua_more(&mut self, seg: &[u8]) {
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

    pub(super) fn ua_end(&mut self) {
        let len = self.ua_total.saturating_sub(self.ua_ws) as usize;
        self.ua_len = len.min(HINT_LEN) as u8;
        self.ua_cut = len > HINT_LEN;
    }

    pub(super) fn get(&self) -> Hints<'_> {
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
pub(super) struct Fifo {
    pub(super) flags: [u8; MAX_PIPELINED],
    pub(super) head: u8,
    pub(super) len: u8,
}

impl Fifo {
    pub(super) fn push(&mut self, f: u8) -> bool {
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

    pub(super) fn front(&self) -> Option<u8> {
        (self.len > 0).then(|| self.flags.get(usize::from(self.head)).copied().unwrap_or(0))
    }

    pub(super) fn pop(&mut self) {
        if self.len > 0 {
            self.head = ((usize::from(self.head) + 1) % MAX_PIPELINED) as u8;
            self.len -= 1;
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct H1 {
    pub(super) req: Half,
    pub(super) resp: Half,
    pub(super) fifo: Fifo,
    pub(super) hints: HintBuf,
    /// A CONNECT or upgrade request waits for its response to say whether a tunnel follows.
    pub(super) verdict_pending: bool,
    /// The client sent bytes while waiting (tunnel data or a next request; not kept).
    pub(super) waited: bool,
}

// Why `Wait` does not buffer: a client may send tunnel data right behind a CONNECT or an
// upgrade request, before it knows the answer. Parsing those bytes as a request would lose
// the framing if a tunnel opens; keeping them would allocate. So they are only noticed, and
// if the answer is not a tunnel (they were the next request after all) the tracker gives up.

impl H1 {
    /// Client bytes, the first at client offset `at`: returns how many were used and the event
    /// that stopped it (`None`: all used).
    pub(super) fn client(
        &mut self,
        bytes: &[u8],
        ctx: &mut Ctx,
        at: u64,
    ) -> (usize, Option<Event>) {
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
                Mile::Head => return (off, self.request_head(ctx, at + off as u64)),
                Mile::Body => self.request_done(ctx, at + off as u64),
            }
        }
    }

    /// A request head ended just before client offset `end`.
    pub(super) fn request_head(&mut self, ctx: &mut Ctx, end: u64) -> Option<Event> {
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
            None => self.request_done(ctx, end),
        }
        Some(Event::Started(seq(ctx.started)))
    }

    /// A request ended just before client offset `end`: where Envoy's codec may stop.
    pub(super) fn request_done(&mut self, ctx: &mut Ctx, end: u64) {
        ctx.ends.push(u64::from(ctx.requests_done), end);
        ctx.requests_done = ctx.requests_done.wrapping_add(1);
        self.req.st = if self.verdict_pending {
            St::Wait
        } else {
            St::Start
        };
    }

    /// Server bytes: as [`H1::client`].
    pub(super) fn server(&mut self, bytes: &[u8], ctx: &mut Ctx) -> (usize, Option<Event>) {
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
    pub(super) fn decide(&mut self, ctx: &mut Ctx) -> Option<Event> {
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

    pub(super) fn response_done(&mut self, ctx: &mut Ctx) -> Event {
        self.fifo.pop();
        self.resp.st = St::Start;
        Event::Ended(seq(ctx.ended))
    }
}

/// The sequence number of the request after `count` of them.
pub(super) fn seq(count: u64) -> u32 {
    u32::try_from(count + 1).unwrap_or(u32::MAX)
}
