//! Finding a head's LFs, sixty-four bytes at a time (most of what a request head costs the
//! tracker). Pure.

use super::*;
use wide::u8x16;

/// The LFs of a head's bytes, in order, each found once: a cursor over 64-byte windows that
/// keeps a bit mask of the LFs of the window it is in.
///
/// Why: a line-by-line scan for the next LF (sixteen bytes a step, a fold rustc compiled to a
/// vector compare, and a word search for where the LF is) paid, per line, for its setup, its
/// partial first block and the search: about 1 460 of the tracker's ~3 000 instructions a
/// request with h2load's heads, 2 800 with a browser's (bench/results/tracker-profile.md).
/// Here a window costs four vector compares and masks (`pcmpeqb`, `pmovmskb` on x86_64,
/// through `wide`'s safe API: no `unsafe` here), and each LF after that a bit scan. Two
/// cursors that computed masks without SIMD (a word at a time) cost more than the line scan
/// (measured, 2026-12-05): the mask is what pays, so it is taken from a crate that does it in
/// one instruction rather than emulated.
pub(in crate::exchange) struct Lfs<'a> {
    s: &'a [u8],
    /// Where the window of `mask` starts: bit `j` is the byte at `base + j`.
    base: usize,
    /// Where the next window starts (at or past `s.len()`: there is none).
    next: usize,
    /// The window's LFs not returned yet.
    mask: u64,
}

impl<'a> Lfs<'a> {
    pub(in crate::exchange) fn new(s: &'a [u8]) -> Lfs<'a> {
        Lfs {
            s,
            base: 0,
            next: 0,
            mask: 0,
        }
    }

    /// The index of the next LF, `None` when there is none left.
    #[inline(always)]
    pub(in crate::exchange) fn next_lf(&mut self) -> Option<usize> {
        if self.mask == 0 && !self.load() {
            return None;
        }
        let j = self.base + self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(j)
    }

    /// Finds the next window that holds an LF (`false`: no LF is left). Fewer than 64 bytes
    /// left: the last 64 bytes of `s`, shifted so that bit 0 is the first byte not read yet;
    /// fewer than 64 in all: a copy padded with zeros.
    #[inline(always)]
    fn load(&mut self) -> bool {
        let s = self.s;
        let mut at = self.next;
        while let Some(w) = s
            .get(at..at + 64)
            .and_then(|w| <&[u8; 64]>::try_from(w).ok())
        {
            let m = lf_mask(w);
            at += 64;
            if m != 0 {
                self.base = at - 64;
                self.next = at;
                self.mask = m;
                return true;
            }
        }
        self.next = s.len();
        let Some(left) = s.len().checked_sub(at).filter(|&n| n > 0) else {
            return false;
        };
        let m = match s.last_chunk::<64>() {
            // `left` is 1 to 63: the bytes before `at` (read already) are shifted out.
            Some(w) => lf_mask(w) >> (64 - left),
            None => {
                let mut w = [0u8; 64];
                if let (Some(to), Some(from)) = (w.get_mut(..left), s.get(at..)) {
                    to.copy_from_slice(from);
                }
                lf_mask(&w)
            }
        };
        self.base = at;
        self.mask = m;
        m != 0
    }
}

/// The LFs of a 64-byte window as a bit mask: bit `j` is byte `j`.
#[inline(always)]
fn lf_mask(w: &[u8; 64]) -> u64 {
    let (blocks, _) = w.as_chunks::<16>();
    let lf = u8x16::splat(LF);
    blocks.iter().enumerate().fold(0, |m, (k, b)| {
        let bits = u8x16::new(*b).cmp_eq(lf).move_mask() as u16;
        m | u64::from(bits) << (16 * k)
    })
}

/// A head length as `Half::head_len` keeps it.
pub(super) fn head_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
