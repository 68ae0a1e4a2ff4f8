use super::model::{follow, Outcome};
use super::*;
use proptest::prelude::*;

/// Encodes one frame. `len_form`: 0 = shortest, 2 = force 16-bit, 8 = force 64-bit length.
fn frame(b0: u8, key: Option<[u8; 4]>, payload: &[u8], len_form: u8) -> Vec<u8> {
    let mut v = vec![b0];
    let m = if key.is_some() { 0x80 } else { 0 };
    let n = payload.len();
    match (len_form, n) {
        (0, 0..=125) => v.push(m | n as u8),
        (0 | 2, 0..=0xFFFF) => {
            v.push(m | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        }
        _ => {
            v.push(m | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let k = key.unwrap_or([0; 4]);
    if key.is_some() {
        v.extend_from_slice(&k);
    }
    v.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
    v
}

const FIN: u8 = 0x80;
const KEY: Option<[u8; 4]> = Some([0x37, 0xfa, 0x21, 0x3d]);

/// Feeds `bytes` in pieces cut at `cuts`; returns the ends as stream offsets and the result.
fn run(f: &mut Follower, bytes: &[u8], cuts: &[usize]) -> (Vec<(usize, u8, bool)>, Option<GiveUp>) {
    let mut ends = Vec::new();
    let mut at = 0;
    let mut err = None;
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
    points.push(bytes.len());
    points.sort_unstable();
    for p in points {
        let r = f.feed(&bytes[at..p], |e| {
            ends.push((at + e.at, e.opcode, e.in_message))
        });
        if let Err(g) = r {
            err = Some(g);
        }
        at = p;
    }
    (ends, err)
}

fn whole(bytes: &[u8], masked: bool) -> (Vec<(usize, u8, bool)>, Option<GiveUp>, Follower) {
    let mut f = Follower::new(masked, false);
    let (e, g) = run(&mut f, bytes, &[]);
    (e, g, f)
}

#[test]
fn server_text_messages_end_at_each_frame() {
    let mut b = frame(FIN | 1, None, b"hello", 0);
    b.extend(frame(FIN | 2, None, &[7; 300], 0));
    let (ends, err, f) = whole(&b, false);
    assert_eq!(err, None);
    assert_eq!(ends, vec![(7, 1, false), (7 + 4 + 300, 2, false)]);
    assert!(f.at_message_end());
}

#[test]
fn every_split_point_gives_the_same_ends() {
    let mut b = frame(1, KEY, b"frag-one", 0);
    b.extend(frame(FIN | 9, KEY, b"ping", 0));
    b.extend(frame(FIN, KEY, &[1; 200], 0));
    b.extend(frame(FIN | 2, KEY, &[2; 70_000], 0));
    b.extend(frame(FIN | 8, KEY, &[0x03, 0xE9, b'b', b'y'], 0));
    let (want, err, _) = whole(&b, true);
    assert_eq!(err, None);
    assert_eq!(want.len(), 5);
    for cut in 0..=b.len().min(400) {
        let mut f = Follower::new(true, false);
        assert_eq!(
            run(&mut f, &b, &[cut]),
            (want.clone(), None),
            "cut at {cut}"
        );
    }
    // Byte by byte.
    let mut f = Follower::new(true, false);
    let cuts: Vec<usize> = (0..b.len()).step_by(1).take(300).collect();
    assert_eq!(run(&mut f, &b, &cuts).0, want);
    assert_eq!(f.close(), Some(Close { code: Some(1001) }));
}

#[test]
fn control_frames_between_fragments_are_followed_and_mark_the_message_open() {
    let mut b = frame(1, None, b"a", 0);
    b.extend(frame(FIN | 10, None, b"", 0));
    b.extend(frame(0, None, b"b", 0));
    b.extend(frame(FIN, None, b"c", 0));
    let (ends, err, f) = whole(&b, false);
    assert_eq!(err, None);
    let open: Vec<bool> = ends.iter().map(|e| e.2).collect();
    assert_eq!(open, vec![true, true, true, false]);
    assert!(f.at_message_end());
    let fed = Follower::new(false, false).feed_last(&b).unwrap();
    assert_eq!(fed.frame_end, Some(b.len()));
    assert_eq!(fed.message_end, Some(b.len()));
    let fed = Follower::new(false, false).feed_last(&b[..9]).unwrap();
    assert_eq!(
        fed,
        Fed {
            frame_end: Some(8),
            message_end: None
        }
    );
}

fn gives_up(bytes: &[u8], masked: bool, deflate: bool) -> Option<GiveUp> {
    let mut f = Follower::new(masked, deflate);
    let r = f.feed(bytes, |_| {}).err();
    assert_eq!(f.gave_up(), r);
    if let Some(g) = r {
        // Sticky: later bytes are not read.
        assert_eq!(f.feed(&frame(FIN | 1, None, b"x", 0), |_| panic!()), Err(g));
        assert_eq!(f.feed(&[], |_| panic!()), Err(g), "even with no bytes");
    }
    r
}

#[test]
fn a_masked_frame_from_the_server_is_given_up() {
    assert_eq!(
        gives_up(&frame(FIN | 1, KEY, b"x", 0), false, false),
        Some(GiveUp::Mask)
    );
}

#[test]
fn an_unmasked_frame_from_the_client_is_given_up() {
    assert_eq!(
        gives_up(&frame(FIN | 1, None, b"x", 0), true, false),
        Some(GiveUp::Mask)
    );
}

#[test]
fn reserved_opcodes_are_given_up() {
    for op in [3u8, 4, 5, 6, 7, 11, 12, 13, 14, 15] {
        assert_eq!(
            gives_up(&frame(FIN | op, None, b"", 0), false, false),
            Some(GiveUp::ReservedOpcode)
        );
    }
}

#[test]
fn a_64_bit_length_with_the_high_bit_or_over_the_limit_is_given_up() {
    let mut high = vec![FIN | 2, 127];
    high.extend_from_slice(&(1u64 << 63).to_be_bytes());
    assert_eq!(gives_up(&high, false, false), Some(GiveUp::Length));
    let mut over = vec![FIN | 2, 127];
    over.extend_from_slice(&(MAX_PAYLOAD + 1).to_be_bytes());
    assert_eq!(gives_up(&over, false, false), Some(GiveUp::Length));
    let mut at = vec![FIN | 2, 127];
    at.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
    assert_eq!(gives_up(&at, false, false), None);
    // Not in the shortest form.
    assert_eq!(
        gives_up(&frame(FIN | 2, None, b"abc", 8), false, false),
        Some(GiveUp::Length)
    );
    assert_eq!(
        gives_up(&frame(FIN | 2, None, b"abc", 2), false, false),
        Some(GiveUp::Length)
    );
    assert_eq!(
        gives_up(&frame(FIN | 2, None, &[0; 200], 8), false, false),
        Some(GiveUp::Length)
    );
}

#[test]
fn the_length_split_inside_its_64_bits_is_followed() {
    for n in [70_000, 70_001] {
        the_length_split_inside_its_64_bits_is_followed_for(n);
    }
}

fn the_length_split_inside_its_64_bits_is_followed_for(n: usize) {
    let b = frame(FIN | 2, None, &vec![9; n], 0);
    for cut in 2..10 {
        let mut f = Follower::new(false, false);
        assert_eq!(
            run(&mut f, &b, &[cut, cut + 1]),
            (vec![(b.len(), 2, false)], None)
        );
    }
}

#[test]
fn rsv_bits_without_deflate_are_given_up() {
    for rsv in [0x40u8, 0x20, 0x10] {
        assert_eq!(
            gives_up(&frame(FIN | rsv | 1, None, b"x", 0), false, false),
            Some(GiveUp::Reserved)
        );
    }
}

#[test]
fn permessage_deflate_frames_are_followed_where_rfc_7692_allows_rsv1() {
    // Compressed message, first frame RSV1, continuation without.
    let mut b = frame(0x40 | 1, None, &[0xf2, 0x48, 0xcd], 0);
    b.extend(frame(FIN, None, &[0xc9, 0xc9, 0x07, 0x00], 0));
    assert_eq!(gives_up(&b, false, true), None);
    // RSV1 on a continuation or a control frame: given up even with deflate.
    let mut c = frame(1, None, b"a", 0);
    c.extend(frame(0x40 | FIN, None, b"b", 0));
    assert_eq!(gives_up(&c, false, true), Some(GiveUp::Reserved));
    assert_eq!(
        gives_up(&frame(0x40 | FIN | 9, None, b"", 0), false, true),
        Some(GiveUp::Reserved)
    );
    // RSV2/RSV3 are never allowed.
    assert_eq!(
        gives_up(&frame(0x20 | FIN | 1, None, b"", 0), false, true),
        Some(GiveUp::Reserved)
    );
}

#[test]
fn control_frames_fragmented_or_over_125_bytes_are_given_up() {
    assert_eq!(
        gives_up(&frame(9, None, b"", 0), false, false),
        Some(GiveUp::FragmentedControl)
    );
    assert_eq!(
        gives_up(&frame(FIN | 9, None, &[0; 126], 0), false, false),
        Some(GiveUp::ControlTooLong)
    );
    assert_eq!(
        gives_up(&frame(FIN | 10, None, &[0; 125], 0), false, false),
        None
    );
}

#[test]
fn fragments_out_of_order_are_given_up() {
    assert_eq!(
        gives_up(&frame(FIN, None, b"x", 0), false, false),
        Some(GiveUp::Fragmentation)
    );
    let mut b = frame(1, None, b"a", 0);
    b.extend(frame(FIN | 2, None, b"b", 0));
    assert_eq!(gives_up(&b, false, false), Some(GiveUp::Fragmentation));
}

#[test]
fn close_codes_are_read_through_the_mask_and_split_anywhere() {
    let b = frame(FIN | 8, KEY, &[0x03, 0xE8, b'o', b'k'], 0);
    for cut in 0..b.len() {
        let mut f = Follower::new(true, false);
        run(&mut f, &b, &[cut, cut + 1]);
        assert_eq!(f.close(), Some(Close { code: Some(1000) }), "cut {cut}");
    }
    let (_, err, f) = whole(&frame(FIN | 8, None, b"", 0), false);
    assert_eq!((err, f.close()), (None, Some(Close { code: None })));
    assert_eq!(
        gives_up(&frame(FIN | 8, None, b"x", 0), false, false),
        Some(GiveUp::CloseBody)
    );
    let mut after = frame(FIN | 8, None, b"", 0);
    after.extend(frame(FIN | 1, None, b"late", 0));
    assert_eq!(gives_up(&after, false, false), Some(GiveUp::AfterClose));
}

#[test]
fn built_close_frames_are_read_back_by_the_follower() {
    let unmasked = close_frame(GOING_AWAY, "draining", None);
    assert_eq!(
        unmasked.as_bytes(),
        &frame(FIN | 8, None, b"\x03\xe9draining", 0)[..]
    );
    let masked = close_frame(GOING_AWAY, "draining", KEY);
    assert_eq!(
        masked.as_bytes(),
        &frame(FIN | 8, KEY, b"\x03\xe9draining", 0)[..]
    );
    for (f, b) in [
        (Follower::new(false, false), unmasked),
        (Follower::new(true, false), masked),
    ] {
        let mut f = f;
        assert_eq!(f.feed(b.as_bytes(), |_| {}), Ok(()));
        assert_eq!(f.close(), Some(Close { code: Some(1001) }));
    }
    // A long reason is cut at a character boundary to fit 125 bytes of payload.
    let long = "é".repeat(100);
    let c = close_frame(GOING_AWAY, &long, KEY);
    assert_eq!(c.as_bytes().len(), 6 + 2 + 122);
    assert_eq!(c.as_bytes()[1], 0x80 | 124);
    let c = close_frame(GOING_AWAY, &"a".repeat(200), None);
    assert_eq!(c.as_bytes().len(), MAX_CLOSE_FRAME - 4);
    // The debug log shows the frame's bytes.
    assert_eq!(
        format!("{:?}", close_frame(GOING_AWAY, "", None)),
        "CloseFrame([136, 2, 3, 233])"
    );
}

#[test]
fn only_a_101_to_websocket_is_followed() {
    let ws = Switched::WebSocket { deflate: false };
    assert_eq!(switched(101, b"websocket", b""), ws);
    assert_eq!(switched(101, b" WebSocket ", b""), ws);
    // A 101 without `Upgrade: websocket`, an h2c upgrade, another protocol, no 101.
    assert_eq!(switched(101, b"", b""), Switched::Other);
    assert_eq!(switched(101, b"h2c", b""), Switched::Other);
    assert_eq!(switched(101, b"websocket, h2c", b""), Switched::Other);
    assert_eq!(switched(200, b"websocket", b""), Switched::Other);
    assert_eq!(switched(426, b"websocket", b""), Switched::Other);
    // Extensions.
    let deflate = Switched::WebSocket { deflate: true };
    assert_eq!(switched(101, b"websocket", b"permessage-deflate"), deflate);
    assert_eq!(
        switched(
            101,
            b"websocket",
            b"permessage-deflate; client_max_window_bits=15; server_no_context_takeover"
        ),
        deflate
    );
    assert_eq!(
        switched(101, b"websocket", b"x-webkit-deflate-frame"),
        Switched::UnknownExtension
    );
    assert_eq!(
        switched(101, b"websocket", b"permessage-deflate, permessage-deflate"),
        Switched::UnknownExtension
    );
    assert_eq!(switched(101, b"websocket", b" , "), ws);
}

#[test]
fn the_follower_is_small() {
    assert!(
        core::mem::size_of::<Follower>() <= 48,
        "{}",
        core::mem::size_of::<Follower>()
    );
}

fn incremental(bytes: &[u8], masked: bool, deflate: bool, cuts: &[usize]) -> Outcome {
    let mut f = Follower::new(masked, deflate);
    let (ends, gave_up) = run(&mut f, bytes, cuts);
    Outcome {
        ends,
        gave_up,
        close: f.close(),
        at_frame_end: f.at_frame_end() && gave_up.is_none(),
        in_message: f.in_message(),
    }
}

/// One generated frame: header bits, payload length, length form, masked or not.
fn arb_frame() -> impl Strategy<Value = (u8, bool, Vec<u8>, u8)> {
    (
        prop_oneof![
            4 => prop::sample::select(vec![0x81u8, 0x82, 0x01, 0x02, 0x00, 0x80, 0x89, 0x8A, 0x88, 0xC1]),
            1 => any::<u8>(),
        ],
        prop::bool::weighted(0.9),
        prop_oneof![
            6 => prop::collection::vec(any::<u8>(), 0..140),
            1 => prop::collection::vec(any::<u8>(), 125..300),
        ],
        prop_oneof![8 => Just(0u8), 1 => Just(2u8), 1 => Just(8u8)],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    /// Any chunking of any frame sequence (valid or not) gives the model's frame ends, close,
    /// give-up reason and final position.
    #[test]
    fn any_chunking_matches_the_whole_buffer_model(
        frames in prop::collection::vec(arb_frame(), 0..8),
        masked in any::<bool>(),
        deflate in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..2),
        truncate in any::<prop::sample::Index>(),
        cut_whole in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut bytes = Vec::new();
        for (b0, right_mask, payload, form) in &frames {
            let key = (masked == *right_mask).then_some([1, 2, 3, 4]);
            bytes.extend(frame(*b0, key, payload, *form));
        }
        if !bytes.is_empty() {
            for (i, x) in &flips {
                let i = i.index(bytes.len());
                bytes[i] ^= x;
            }
            if cut_whole {
                bytes.truncate(truncate.index(bytes.len() + 1));
            }
        }
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        let want = follow(&bytes, masked, deflate);
        prop_assert_eq!(incremental(&bytes, masked, deflate, &cuts), want.clone());
        // Byte by byte too.
        let every: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(incremental(&bytes, masked, deflate, &every), want);
    }
}

/// Rough per-frame cost: `cargo test --release --lib per_frame_cost -- --ignored --nocapture`;
/// instructions: run that binary under `valgrind --tool=callgrind
/// --toggle-collect='*Follower::feed_last*'` with `PER_FRAME_ROUNDS=1` and `PER_FRAME_STEP=<feed size>` (docs/contributing/long-lived-streams.md).
#[test]
#[ignore = "timing, run by hand"]
fn per_frame_cost() {
    let mut one = frame(FIN | 2, None, &[0; 64], 0);
    one.extend(frame(FIN | 1, None, &[0; 300], 0));
    one.extend(frame(FIN | 9, None, b"", 0));
    let buf: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * 10_000)
        .collect();
    let frames = 30_000u64;
    let rounds: u32 = std::env::var("PER_FRAME_ROUNDS").map_or(50, |r| r.parse().unwrap());
    for (name, step) in [
        ("whole 4 MiB feeds", buf.len()),
        ("16 KiB feeds", 16 * 1024),
        ("7-byte feeds", 7),
    ] {
        if std::env::var("PER_FRAME_STEP").is_ok_and(|s| s != step.to_string()) {
            continue;
        }
        let t = std::time::Instant::now();
        let mut n = 0u64;
        for _ in 0..rounds {
            let mut f = Follower::new(false, false);
            for c in buf.chunks(step) {
                n += u64::from(f.feed_last(c).unwrap().frame_end.is_some());
            }
        }
        let per = t.elapsed().as_nanos() as f64 / f64::from(rounds) / frames as f64;
        assert!(n > 0);
        println!("{name}: {per:.1} ns per frame");
    }
}
