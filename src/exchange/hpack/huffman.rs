//! The Huffman code of HPACK (RFC 7541 §5.2, Appendix B), decoding only.
//!
//! Appendix B's code is canonical: ordered by length, then by symbol, each code is the previous
//! one plus one, shifted left by the growth in length. So the 257 code lengths below are the
//! whole table (the codes follow from them), and a code is decoded a bit at a time against the
//! first code and the count of each length (unit tests: the RFC's codes of a few symbols, and
//! the property test in `super::tests`, which decodes what a real encoder wrote).

/// Code length in bits of each symbol (0-255, then 256: EOS), RFC 7541 Appendix B.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

const EOS: u16 = 256;
const MAX_LEN: usize = 30;

/// Per code length: the first code of that length, how many there are, and where their symbols
/// start in `symbols` (sorted by length, then symbol).
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u32; MAX_LEN + 1],
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut count = [0u32; MAX_LEN + 1];
    let mut s = 0;
    while s < 257 {
        count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let mut first = [0u32; MAX_LEN + 1];
    let mut offset = [0u32; MAX_LEN + 1];
    let (mut code, mut at, mut len) = (0u32, 0u32, 1);
    while len <= MAX_LEN {
        first[len] = code;
        offset[len] = at;
        at += count[len];
        code = (code + count[len]) << 1;
        len += 1;
    }
    let mut symbols = [0u16; 257];
    let mut next = offset;
    let mut s = 0;
    while s < 257 {
        let l = LENGTHS[s] as usize;
        symbols[next[l] as usize] = s as u16;
        next[l] += 1;
        s += 1;
    }
    Canonical {
        first,
        count,
        offset,
        symbols,
    }
}

static CODE: Canonical = canonical();

/// Appends the decoding of `src` to `out`. `Err` for what RFC 7541 §5.2 calls a decoding
/// error: EOS inside the string, padding longer than 7 bits or not the EOS code's leading ones.
pub(super) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in src {
        for shift in (0..8).rev() {
            code = code << 1 | u32::from(byte >> shift & 1);
            len += 1;
            let (first, count) = match (CODE.first.get(len), CODE.count.get(len)) {
                (Some(&f), Some(&c)) => (f, c),
                _ => return Err(()),
            };
            if code.wrapping_sub(first) < count {
                let at = CODE.offset.get(len).copied().unwrap_or(0) + (code - first);
                match CODE.symbols.get(at as usize) {
                    Some(&s) if s != EOS => out.push(s as u8),
                    _ => return Err(()),
                }
                (code, len) = (0, 0);
            }
        }
    }
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
