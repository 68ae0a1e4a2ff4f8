//! The User-Agent and request-target of the latest request head, kept (cut at `HINT_LEN`) for
//! the health-check policy. Uses only `exchange`'s own types.

use super::*;

/// The User-Agent and request-target of the latest request head, cut at HINT_LEN.
#[derive(Debug, Clone, Copy)]
pub(in crate::exchange) struct HintBuf {
    pub(in crate::exchange) path: [u8; HINT_LEN],
    pub(in crate::exchange) ua: [u8; HINT_LEN],
    /// Bytes of the target seen (kept: at most HINT_LEN).
    pub(in crate::exchange) path_total: u32,
    /// Bytes of the User-Agent value seen, and how many of them are trailing whitespace.
    pub(in crate::exchange) ua_total: u32,
    pub(in crate::exchange) ua_ws: u32,
    pub(in crate::exchange) ua_len: u8,
    pub(in crate::exchange) has_ua: bool,
    pub(in crate::exchange) ua_cut: bool,
    pub(in crate::exchange) valid: bool,
    /// Whether the tracker's user wants the hints of the next head (`Tracker::want_hints`), and
    /// whether the head being read keeps them: fixed at its first byte, so a head is kept whole
    /// or not at all (a cut User-Agent could match a health-check prefix it does not start
    /// with).
    pub(in crate::exchange) wanted: bool,
    pub(in crate::exchange) on: bool,
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
            wanted: true,
            on: true,
        }
    }
}

/// Appends what fits of `seg` to `buf`, which holds `*have` bytes.
pub(in crate::exchange) fn keep(buf: &mut [u8; HINT_LEN], have: u32, seg: &[u8]) {
    let at = (have as usize).min(HINT_LEN);
    let n = (HINT_LEN - at).min(seg.len());
    if let (Some(dst), Some(src)) = (buf.get_mut(at..at + n), seg.get(..n)) {
        dst.copy_from_slice(src);
    }
}

impl HintBuf {
    pub(in crate::exchange) fn clear(&mut self) {
        self.on = self.wanted;
        self.path_total = 0;
        self.has_ua = false;
        self.ua_cut = false;
        self.ua_len = 0;
        self.valid = false;
    }

    /// Counted even when not kept: an empty request-target is refused by its count.
    pub(in crate::exchange) fn path(&mut self, seg: &[u8]) {
        if self.on {
            keep(&mut self.path, self.path_total, seg);
        }
        self.path_total = self.path_total.saturating_add(seg.len() as u32);
    }

    pub(in crate::exchange) fn ua_begin(&mut self) {
        self.ua_total = 0;
        self.ua_ws = 0;
        self.ua_len = 0;
        self.ua_cut = false;
        self.has_ua = true;
    }

    pub(in crate::exchange) fn ua_more(&mut self, seg: &[u8]) {
        if !self.on {
            return;
        }
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

    pub(in crate::exchange) fn ua_end(&mut self) {
        if !self.on {
            return;
        }
        let len = self.ua_total.saturating_sub(self.ua_ws) as usize;
        self.ua_len = len.min(HINT_LEN) as u8;
        self.ua_cut = len > HINT_LEN;
    }

    pub(in crate::exchange) fn get(&self) -> Hints<'_> {
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
