//! Heads read a whole line at a time (start lines, the five header names, their values), and
//! what follows a head: chunk-size lines and the body's framing. Uses only `exchange`'s own
//! types.

use super::*;

impl Half {
    /// A head from its first byte, a whole line at a time while its lines are whole in `bytes`
    /// (the common case: Envoy's reads and writes rarely split a head): the same steps as the
    /// byte-by-byte parse, which takes over at the first line whose LF is not in `bytes`.
    /// Returns the bytes used and, if the head ended in them, `Some(Head)` or `Some(Bad)`.
    /// `None` with 0 bytes: the first line is not whole (nothing changed); with more: the state
    /// is the byte-by-byte parse's at the start of the next line (`LineStart`).
    ///
    /// Why: the byte-by-byte parse cost about 3 600 instructions per keep-alive request and
    /// response (callgrind, docs/contributing/performance.md); here a line costs one scan for its LF, sixteen
    /// bytes at a time, and only the start line and the lines of the five names are looked into.
    /// `tests/properties.rs` feeds the same bytes whole and byte by byte and wants the same.
    pub(in crate::exchange) fn whole_lines(
        &mut self,
        req: bool,
        hints: &mut HintBuf,
        bytes: &[u8],
    ) -> (usize, Option<Mile>) {
        let mut lfs = Lfs::new(bytes);
        let Some(lf) = lfs.next_lf() else {
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
        let kinds = if req { !RESPONSE_ONLY } else { !REQUEST_ONLY };
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
            let Some(lf) = lfs.next_lf() else {
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
    pub(in crate::exchange) fn request_line(&mut self, hints: &mut HintBuf, line: &[u8]) -> bool {
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
            b"GET" => self.facts |= F_GET,
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
    pub(in crate::exchange) fn status_line(&mut self, line: &[u8]) -> bool {
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
    pub(in crate::exchange) fn header_line(
        &mut self,
        cand: u8,
        hints: &mut HintBuf,
        line: &[u8],
    ) -> bool {
        let named = |k: u8| cand & (1 << k) != 0 && NAME_WORDS[usize::from(k)].starts(line);
        let Some(k) = (0..NAMES.len() as u8).find(|&k| named(k)) else {
            return true;
        };
        if k == H_CT {
            // A response's Content-Type, whole: compared at once (what `content_type_byte` does
            // a byte at a time), not fed byte by byte: every response has one.
            let value = line
                .get(NAMES[usize::from(H_CT)].len() + 1..)
                .unwrap_or_default();
            let v = without_leading_ows(value);
            if v.first().is_some_and(|&c| c | 0x20 == b't')
                && v.get(..EVENT_STREAM.len())
                    .is_some_and(|t| t.eq_ignore_ascii_case(EVENT_STREAM))
                && matches!(
                    v.get(EVENT_STREAM.len()),
                    None | Some(&CR) | Some(&SP) | Some(&HT) | Some(&b';') | Some(&b',')
                )
            {
                self.facts |= F_SSE;
            }
            self.st = St::LineStart;
            return true;
        }
        self.header_value(k, hints);
        let value = line
            .get(NAMES[usize::from(k)].len() + 1..)
            .unwrap_or_default();
        if k == H_UA {
            hints.ua_more(without_leading_ows(value));
            hints.ua_end();
        } else if let Some(n) = (k == H_CL).then(|| plain_length(value)).flatten() {
            // A Content-Length of one number (every response has one): what the bytes below
            // would do, at once.
            self.num = n;
            if !self.end_element() {
                return false;
            }
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
    pub(in crate::exchange) fn value_byte(&mut self, b: u8) -> bool {
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

    /// One byte of a response's `Content-Type` value: [`F_SSE`] when its media type (before any
    /// parameter) is `text/event-stream`, any case; the rest of the line is skipped as soon as
    /// it cannot be.
    pub(in crate::exchange) fn content_type_byte(&mut self, b: u8) {
        match b {
            SP | HT if self.elem == 0 => {}
            LF | CR | SP | HT | b';' | b',' => {
                if self.elem == 1 && self.cand != 0 && usize::from(self.pos) == EVENT_STREAM.len() {
                    self.facts |= F_SSE;
                }
                self.st = if b == LF { St::LineStart } else { St::SkipLine };
            }
            _ => {
                if self.elem == 0 {
                    self.elem = 1;
                    self.pos = 0;
                    self.cand = 1;
                }
                if EVENT_STREAM.get(usize::from(self.pos)) != Some(&b.to_ascii_lowercase()) {
                    self.cand = 0;
                    self.st = St::SkipLine;
                }
                self.pos = self.pos.saturating_add(1);
            }
        }
    }

    /// The name of header kind `k` and its colon were read: its value follows.
    pub(in crate::exchange) fn header_value(&mut self, k: u8, hints: &mut HintBuf) {
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
            H_CT => self.st = St::ContentType,
            _ => self.st = St::Value,
        }
    }

    /// A chunk-size line ended: data follows, or the trailer section after the last chunk.
    pub(in crate::exchange) fn chunk_line_done(&mut self) -> St {
        self.head_len = 0;
        if self.num == 0 {
            St::TrailerStart
        } else {
            St::ChunkData
        }
    }

    /// After a head: where its body starts (`None`: no body).
    pub(in crate::exchange) fn body(&mut self, chunked: bool) -> Option<St> {
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

/// A Content-Length value (without its LF) that is one number between optional whitespace
/// (`value_byte` takes CR as whitespace too): the number. `None` for anything else (empty, a
/// list, other bytes, a number past `u64`), which `value_byte` then reads a byte at a time
/// (and refuses or accepts as it always did).
fn plain_length(value: &[u8]) -> Option<u64> {
    let v = without_leading_ows(value);
    let end = v
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(v.len());
    let (digits, rest) = v.split_at_checked(end)?;
    if digits.is_empty() || !rest.iter().all(|&c| matches!(c, SP | HT | CR)) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// A header value without the spaces and tabs before it (RFC 9110 §5.5: OWS).
fn without_leading_ows(value: &[u8]) -> &[u8] {
    let at = value
        .iter()
        .position(|&c| c != SP && c != HT)
        .unwrap_or(value.len());
    value.get(at..).unwrap_or_default()
}
