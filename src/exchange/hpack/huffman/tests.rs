//! The Huffman code's unit tests (RFC 7541 Appendix B).

use super::*;

/// The codes of RFC 7541 Appendix B for a few symbols, from the lengths alone.
fn code_of(sym: usize) -> (u32, u8) {
    let l = LENGTHS[sym] as usize;
    let i = CODE.symbols[CODE.offset[l] as usize..][..CODE.count[l] as usize]
        .iter()
        .position(|&s| usize::from(s) == sym)
        .unwrap();
    (CODE.first[l] + i as u32, l as u8)
}

#[test]
fn the_lengths_give_the_rfc_codes() {
    assert_eq!(code_of(b'0' as usize), (0x0, 5));
    assert_eq!(code_of(b'a' as usize), (0x3, 5));
    assert_eq!(code_of(b' ' as usize), (0x14, 6));
    assert_eq!(code_of(b'A' as usize), (0x21, 6));
    assert_eq!(code_of(0), (0x1ff8, 13));
    assert_eq!(code_of(255), (0x3ffffee, 26));
    assert_eq!(code_of(256), (0x3fffffff, 30));
    // A complete prefix code: the Kraft sum is exactly 1.
    let kraft: u64 = LENGTHS.iter().map(|&l| 1u64 << (30 - l)).sum();
    assert_eq!(kraft, 1 << 30);
}

/// RFC 7541 C.4.1: "www.example.com" Huffman-coded.
#[test]
fn decodes_the_rfc_example_and_refuses_bad_padding() {
    let src = [
        0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
    ];
    let mut out = Vec::new();
    decode(&src, &mut out).unwrap();
    assert_eq!(out, b"www.example.com");
    // Padding of zeros, not EOS's ones.
    // '0' (5 bits) then 3 zero bits of padding: refused.
    assert!(decode(&[0x00], &mut Vec::new()).is_err());
    // A whole byte of ones: padding longer than 7 bits.
    assert!(decode(&[0xff], &mut Vec::new()).is_err());
    // The EOS code itself.
    assert!(decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()).is_err());
    // The empty string.
    assert!(decode(&[], &mut Vec::new()).is_ok());
}
