//! The HTTP/1.1 parser's byte-level state machine: one direction's bytes until a head or a
//! body ends. Uses only `exchange`'s own types.

use super::*;

impl Half {
    /// Reads `bytes` until a head or a body ends (or they run out, or they do not parse).
    /// `req`: the client direction (request line, and the User-Agent and Upgrade headers).
    ///
    /// The two steps of nearly every call are taken here, before the byte state machine
    /// ([`Half::parse_bytes`], whose set-up costs about 40 instructions a call, callgrind): a
    /// head from its first byte, a whole line at a time, and the rest of a body not read as
    /// events (skipped by length). Each does what the state machine's own arm does.
    #[inline]
    pub(in crate::exchange) fn parse(
        &mut self,
        req: bool,
        hints: &mut HintBuf,
        bytes: &[u8],
    ) -> (usize, Mile) {
        match self.st {
            // A request's leading empty lines are the state machine's (RFC 9112 §2.2).
            St::Start if bytes.first().is_some_and(|&b| !req || (b != CR && b != LF)) => {
                let (n, end) = self.head(req, hints, bytes);
                match end {
                    Some(mile) => (n, mile),
                    None => {
                        let (m, mile) =
                            self.parse_bytes(req, hints, bytes.get(n..).unwrap_or_default());
                        (n + m, mile)
                    }
                }
            }
            St::Body if self.events.is_none() => {
                // Not empty: a body of length 0 never enters `Body` (`Half::body`).
                let n = usize::try_from(self.num)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.num -= n as u64;
                (
                    n,
                    if self.num == 0 {
                        Mile::Body
                    } else {
                        Mile::More
                    },
                )
            }
            _ => self.parse_bytes(req, hints, bytes),
        }
    }

    /// A head from its first byte (not a request's leading CR or LF): its whole lines
    /// ([`Half::whole_lines`]); `None`: the byte state machine goes on after the bytes used.
    fn head(&mut self, req: bool, hints: &mut HintBuf, bytes: &[u8]) -> (usize, Option<Mile>) {
        if req {
            self.begin_head(St::Method);
            hints.clear();
        } else {
            self.begin_head(St::StatusVersion);
        }
        self.whole_lines(req, hints, bytes)
    }

    /// [`Half::parse`]'s byte state machine: every state, any split of the bytes.
    #[inline(never)]
    fn parse_bytes(&mut self, req: bool, hints: &mut HintBuf, bytes: &[u8]) -> (usize, Mile) {
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            let st = self.st;
            let i0 = i;
            match st {
                St::Start => {
                    if req && (b == CR || b == LF) {
                        i += 1;
                        continue;
                    }
                    let (n, end) = self.head(req, hints, bytes.get(i..).unwrap_or_default());
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
                        if self.cand & 4 != 0 && self.pos == 3 {
                            self.facts |= F_GET;
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
                        if b"GET".get(p) != Some(&b) {
                            self.cand &= !4;
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
                                b'c' if req => 1 << H_CL | 1 << H_CONN,
                                b'c' => 1 << H_CL | 1 << H_CONN | 1 << H_CT,
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
                St::ContentType => {
                    i += 1;
                    self.content_type_byte(b);
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
                    if let Some(e) = &mut self.events {
                        e.feed(bytes.get(i..i + n).unwrap_or_default());
                    }
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
}
