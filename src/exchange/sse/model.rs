//! Reference model of [`super::Events`] and [`super::Chunked`] for the property tests and the
//! fuzz target: the same rules the plain way, over a whole buffer, with allocation. Compiled only
//! for tests and `cargo fuzz` (`cfg(fuzzing)`).

use super::{GiveUp, MAX_SIZE_DIGITS};

/// The body so far ends with an empty line (WHATWG event stream lines: CRLF, LF or CR) whose
/// last byte is an LF, or is empty: not just after a CR, where an LF may yet follow as part of a
/// CRLF (a body ended between the two is an unfinished event to a client that splits on
/// `\r\n\r\n`).
pub fn ends_at_boundary(body: &[u8]) -> bool {
    let mut last_line_empty = true;
    let mut line_len = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'\r' | b'\n' => {
                last_line_empty = line_len == 0;
                line_len = 0;
                if body[i] == b'\r' && body.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
            }
            _ => line_len += 1,
        }
        i += 1;
    }
    line_len == 0 && last_line_empty && body.last().is_none_or(|&b| b == b'\n')
}

/// What the model read from a whole chunked body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Every wire offset (after at least one byte) where the last chunk may be written.
    pub cuts: Vec<usize>,
    /// The offset after the body's end.
    pub ended: Option<usize>,
    /// Where it stopped following.
    pub gave_up: Option<GiveUp>,
}

/// Follows `wire`, a chunked body's bytes from its first one.
pub fn follow_chunked(wire: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    let mut body = Vec::new();
    let mut p = 0;
    let lf_from = |q: usize| {
        wire[q.min(wire.len())..]
            .iter()
            .position(|&c| c == b'\n')
            .map(|k| q + k)
    };
    loop {
        // A chunk-size line.
        if p == wire.len() {
            return out;
        }
        let digits = wire[p..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if digits == 0 || digits > usize::from(MAX_SIZE_DIGITS) {
            out.gave_up = Some(GiveUp::Size);
            return out;
        }
        let size = wire[p..p + digits].iter().fold(0u64, |n, c| {
            n * 16 + u64::from((*c as char).to_digit(16).unwrap())
        });
        let after = p + digits;
        let next = match wire.get(after) {
            None => return out,
            Some(b'\n') => after + 1,
            Some(b'\r') => match wire.get(after + 1) {
                None => return out,
                Some(b'\n') => after + 2,
                Some(_) => {
                    out.gave_up = Some(GiveUp::LineEnd);
                    return out;
                }
            },
            Some(b';' | b' ' | b'\t') => match lf_from(after) {
                None => return out,
                Some(lf) => lf + 1,
            },
            Some(_) => {
                out.gave_up = Some(GiveUp::Size);
                return out;
            }
        };
        p = next;
        if size == 0 {
            // Trailer section.
            loop {
                match wire.get(p) {
                    None => return out,
                    Some(b'\n') => {
                        p += 1;
                        break;
                    }
                    Some(b'\r') => match wire.get(p + 1) {
                        None => return out,
                        Some(b'\n') => {
                            p += 2;
                            break;
                        }
                        Some(_) => {
                            out.gave_up = Some(GiveUp::LineEnd);
                            return out;
                        }
                    },
                    Some(_) => match lf_from(p) {
                        None => return out,
                        Some(lf) => p = lf + 1,
                    },
                }
            }
            out.ended = Some(p);
            if p < wire.len() {
                out.gave_up = Some(GiveUp::AfterEnd);
            }
            return out;
        }
        let avail = (wire.len() - p) as u64;
        if avail < size {
            return out;
        }
        body.extend_from_slice(&wire[p..p + size as usize]);
        p += size as usize;
        p = match (wire.get(p), wire.get(p + 1)) {
            (None, _) | (Some(b'\r'), None) => return out,
            (Some(b'\n'), _) => p + 1,
            (Some(b'\r'), Some(b'\n')) => p + 2,
            _ => {
                out.gave_up = Some(GiveUp::LineEnd);
                return out;
            }
        };
        if ends_at_boundary(&body) {
            out.cuts.push(p);
        }
    }
}
