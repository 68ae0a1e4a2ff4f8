//! The decoder against RFC 7541's examples and against a real encoder (httlib-hpack) choosing
//! every representation at random.

use super::*;
use httlib_hpack::Encoder;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn all(dec: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    dec.decode(
        block,
        |_| true,
        |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        },
    )?;
    Ok(out)
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// RFC 7541 C.3 (without Huffman) and C.4 (with): three requests on one connection, the
/// table's size after each.
#[test]
fn decodes_the_rfc_request_examples_with_and_without_huffman() {
    let want = [
        pairs(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ]),
        pairs(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
            ("cache-control", "no-cache"),
        ]),
        pairs(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ]),
    ];
    let sizes = [57, 110, 164];
    let plain = [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ];
    let huffman = [
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ];
    for blocks in [plain, huffman] {
        let mut dec = Decoder::new();
        for (i, b) in blocks.iter().enumerate() {
            assert_eq!(all(&mut dec, &hex(b)).unwrap(), want[i], "block {i}");
            assert_eq!(dec.table_size().0, sizes[i], "block {i}");
        }
    }
}

/// What the decoder refuses (and the caller then stops decoding the direction).
#[test]
fn refuses_bad_indices_truncations_and_size_updates() {
    let mut dec = Decoder::new();
    // Index 0, and one past the static table with an empty dynamic table.
    assert_eq!(all(&mut dec, &[0x80]), Err(Error::Index));
    assert_eq!(all(&mut dec, &[0x80 | 62]), Err(Error::Index));
    // A literal name whose length runs past the block.
    assert_eq!(all(&mut dec, &[0x40, 0x05, b'a']), Err(Error::Truncated));
    // An integer whose continuation is missing, or too large.
    assert_eq!(all(&mut dec, &[0xff]), Err(Error::Integer));
    assert_eq!(
        all(&mut dec, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        Err(Error::Integer)
    );
    // A long run of zero-valued continuation bytes (the shift would pass 64 bits).
    let mut zeros = vec![0xff];
    zeros.extend([0x80; 20]);
    zeros.push(0x00);
    assert_eq!(all(&mut dec, &zeros), Err(Error::Integer));
    // A size update above the advertised 4096, after a field, or above the module's maximum.
    assert_eq!(all(&mut dec, &[0x3f, 0xe2, 0x1f]), Err(Error::SizeUpdate)); // 4097
    assert_eq!(all(&mut dec, &[0x82, 0x20]), Err(Error::SizeUpdate));
    dec.advertised(1 << 20);
    assert_eq!(
        all(&mut dec, &[0x3f, 0xe2, 0xff, 0x03]),
        Err(Error::TableTooLarge)
    ); // 65537
       // An invalid Huffman string (padding of zeros).
    assert_eq!(
        all(&mut dec, &[0x00, 0x81, 0x00, 0x00]),
        Err(Error::Huffman)
    );
}

/// One random field: name, value, and how the encoder writes it.
#[derive(Debug, Clone)]
struct Field {
    name: Vec<u8>,
    value: Vec<u8>,
    /// httlib's flags: Huffman name/value, with/never indexing, best format (indexed when found).
    flags: u8,
}

fn field() -> impl Strategy<Value = Field> {
    let name = prop_oneof![
        // Names of the static table (indexed names), a few the module reads.
        prop::sample::select(vec![
            ":path",
            ":method",
            ":authority",
            "user-agent",
            "content-type",
            "accept-encoding",
            "cookie",
            "grpc-timeout",
            "te",
        ])
        .prop_map(|n| n.as_bytes().to_vec()),
        "[a-z0-9-]{1,20}".prop_map(|n| n.into_bytes()),
    ];
    let value = prop_oneof![
        prop::sample::select(vec!["/", "/healthz", "GET", "POST", "trailers", ""])
            .prop_map(|v| v.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..300),
    ];
    (name, value, 0u8..32).prop_map(|(name, value, flags)| Field { name, value, flags })
}

/// A block: optional size updates (only at its start), then fields.
#[derive(Debug, Clone)]
struct Block {
    updates: Vec<u32>,
    fields: Vec<Field>,
}

fn block() -> impl Strategy<Value = Block> {
    (
        prop::collection::vec(
            prop_oneof![Just(0u32), 0u32..=4096, Just(4096), 4096u32..=8192],
            0..3,
        ),
        prop::collection::vec(field(), 0..20),
    )
        .prop_map(|(updates, fields)| Block { updates, fields })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    /// Whatever representations a real encoder chooses (indexed, literal with, without and never
    /// indexed, by index or by name, Huffman or not, table size updates down to 0 and up to
    /// the advertised size), the decoder reads back every field of every block in order, and
    /// its table's size stays the encoder's; with a filter, only the wanted fields, the table
    /// still in step (a later block's indices still decode).
    #[test]
    fn decodes_what_a_real_encoder_wrote(
        blocks in prop::collection::vec(block(), 1..8),
        advertised in prop_oneof![Just(4096u32), Just(8192)],
        filter in any::<bool>(),
    ) {
        let mut enc = Encoder::with_dynamic_size(4096);
        let mut dec = Decoder::new();
        dec.advertised(advertised);
        for b in &blocks {
            let mut wire = Vec::new();
            for &u in &b.updates {
                let u = u.min(advertised);
                enc.update_max_dynamic_size(u, &mut wire).unwrap();
            }
            for f in &b.fields {
                enc.encode((f.name.clone(), f.value.clone(), f.flags), &mut wire).unwrap();
            }
            let want: Vec<(Vec<u8>, Vec<u8>)> = b
                .fields
                .iter()
                .filter(|f| !filter || f.name == b":path")
                .map(|f| (f.name.clone(), f.value.clone()))
                .collect();
            let mut got = Vec::new();
            dec.decode(
                &wire,
                |n| !filter || n == b":path",
                |n, v| got.push((n.to_vec(), v.to_vec())),
            )
            .unwrap();
            prop_assert_eq!(got, want);
            prop_assert_eq!(dec.table_size().1 as u32, enc.max_dynamic_size());
        }
    }

    /// Random bytes never panic the decoder (they are refused or decode to something).
    #[test]
    fn random_bytes_never_panic(
        blocks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 1..5),
    ) {
        let mut dec = Decoder::new();
        for b in &blocks {
            let _ = dec.decode(b, |_| true, |_, _| {});
            prop_assert!(dec.table_size().0 <= dec.table_size().1.max(DEFAULT_TABLE_SIZE));
        }
    }
}
