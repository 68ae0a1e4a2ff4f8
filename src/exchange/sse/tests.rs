use super::model::{ends_at_boundary, follow_chunked, Outcome};
use super::*;
use proptest::prelude::*;

fn chunked(pieces: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in pieces {
        v.extend(format!("{:x}\r\n", p.len()).bytes());
        v.extend_from_slice(p);
        v.extend_from_slice(b"\r\n");
    }
    v
}

#[test]
fn blank_lines_of_every_line_ending_are_boundaries() {
    for (body, at) in [
        (&b"data: a\n\n"[..], Some(9)),
        (b"data: a\r\n\r\n", Some(11)),
        // A blank line ended by a bare CR: not a cut point (an LF may follow it as part of a
        // CRLF); such a stream is held, never ended.
        (b"data: a\r\r", None),
        (b"data: a\n\r", None),
        (b"data: a\r\r\n", Some(10)),
        (b"data: a\r\n", None),
        (b"data: a\n", None),
        (b"data: a\r", None),
        (b": keepalive\n\ndata: b", Some(13)),
        (b"\n", Some(1)),
    ] {
        let mut e = Events::new();
        assert_eq!(e.feed(body), at, "{:?}", String::from_utf8_lossy(body));
        assert_eq!(e.at_boundary(), ends_at_boundary(body));
    }
    // A CRLF split between feeds is one line end, not two.
    let mut e = Events::new();
    e.feed(b"data: a\r");
    assert!(!e.at_boundary());
    assert_eq!(e.feed(b"\n"), None);
    assert_eq!(e.feed(b"\r"), None);
    assert_eq!(e.feed(b"\n"), Some(1));
    assert!(Events::new().at_boundary());
}

#[test]
fn the_last_chunk_may_go_only_after_a_whole_event_and_a_whole_chunk() {
    let wire = chunked(&[b"data: one\n\n", b"data: tw", b"o\n", b"\n"]);
    let mut c = Chunked::new();
    assert!(c.can_end_here());
    let fed = c.feed(&wire).unwrap();
    assert_eq!(fed.cut, Some(wire.len()));
    assert!(c.can_end_here());
    let first = 3 + 11 + 2;
    assert_eq!(follow_chunked(&wire).cuts, vec![first, wire.len()]);
    // Inside a chunk, or after an event's first half: no cut.
    let mut c = Chunked::new();
    assert_eq!(c.feed(&wire[..first + 6]).unwrap().cut, Some(first));
    assert!(!c.can_end_here());
    // The terminator then ends the body.
    let mut c = Chunked::new();
    c.feed(&wire).unwrap();
    assert_eq!(c.feed(LAST_CHUNK).unwrap().ended, Some(LAST_CHUNK.len()));
    assert!(c.ended());
}

#[test]
fn extensions_trailers_and_bare_lf_are_followed() {
    let wire = b"B;name=val\r\ndata: one\n\n\n0\r\nx-trailer: 1\r\n\r\n";
    let mut c = Chunked::new();
    let fed = c.feed(wire).unwrap();
    assert_eq!(fed.ended, Some(wire.len()));
    assert_eq!(fed.cut, Some(24));
    assert_eq!(follow_chunked(wire).ended, Some(wire.len()));
    // The last chunk's empty line alone, ended by a bare LF.
    let wire = b"9\r\ndata: x\n\n\r\n0\r\n\n";
    let mut c = Chunked::new();
    let fed = c.feed(&wire[..wire.len() - 1]).unwrap();
    assert_eq!((fed.ended, c.ended()), (None, false));
    assert_eq!(c.feed(b"\n").unwrap().ended, Some(1));
    assert!(c.ended());
}

#[test]
fn a_follower_resumed_mid_body_waits_for_a_proven_blank_line() {
    let mut c = Chunked::resumed_at_chunk_start();
    assert!(!c.can_end_here());
    // "\n" alone could end the line of an event: not enough.
    assert_eq!(c.feed(b"1\r\n\n\r\n").unwrap().cut, None);
    assert_eq!(c.feed(b"1\r\n\n\r\n").unwrap().cut, Some(6));
    let mut e = Events::resumed();
    assert_eq!(e.feed(b"tail of a line\r\n\r\ndata: x\n\n"), Some(27));
}

#[test]
fn bad_chunk_framing_is_given_up() {
    for (wire, g) in [
        (&b"x\r\n"[..], GiveUp::Size),
        (b"\r\n", GiveUp::Size),
        (b"11111111111111111\r\n", GiveUp::Size),
        (b"5\rx", GiveUp::LineEnd),
        (b"1\r\naXY", GiveUp::LineEnd),
        (b"5z", GiveUp::Size),
    ] {
        let mut c = Chunked::new();
        assert_eq!(c.feed(wire), Err(g), "{:?}", String::from_utf8_lossy(wire));
        assert_eq!(c.gave_up(), Some(g));
        assert_eq!(c.feed(b"1\r\n"), Err(g));
        assert_eq!(follow_chunked(wire).gave_up, Some(g));
    }
}

/// Feeds `wire` cut at `cuts`; returns every cut offset and end reported, and the give-up.
/// The body's end and bytes after it in one feed: the end is still reported, and the give-up
/// comes with the next feed (found by the property test below: the end was lost).
#[test]
fn an_end_followed_by_more_bytes_in_one_feed_keeps_the_end() {
    let mut wire = chunked(&[b"data: a\n\n"]);
    wire.extend_from_slice(LAST_CHUNK);
    let end = wire.len();
    wire.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let mut c = Chunked::new();
    let fed = c
        .feed(&wire)
        .expect("the end is reported with the bytes after it");
    assert_eq!(fed.ended, Some(end));
    assert_eq!(c.gave_up(), Some(GiveUp::AfterEnd));
    assert_eq!(c.feed(&[]), Err(GiveUp::AfterEnd));
}

fn incremental(wire: &[u8], cuts: &[usize]) -> (Vec<usize>, Option<usize>, Option<GiveUp>) {
    let mut c = Chunked::new();
    let (mut seen, mut ended, mut err) = (Vec::new(), None, None);
    let mut points: Vec<usize> = cuts.to_vec();
    points.push(wire.len());
    points.sort_unstable();
    let mut at = 0;
    for p in points {
        match c.feed(&wire[at..p]) {
            Ok(f) => {
                seen.extend(f.cut.map(|x| at + x));
                ended = ended.or(f.ended.map(|x| at + x));
            }
            Err(g) => err = Some(g),
        }
        at = p;
    }
    // A give-up found after an end in the same feed comes with the next feed.
    if err.is_none() {
        err = c.feed(&[]).err();
    }
    (seen, ended, err)
}

fn arb_body_piece() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(vec![b'\r', b'\n']),
            1 => prop::sample::select(vec![b'd', b':', b' ', b'a']),
        ],
        0..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    /// Any chunking of any chunked event stream (possibly damaged) gives the model's cut points
    /// (the last of each feed, and all of them byte by byte), end and give-up.
    #[test]
    fn any_chunking_matches_the_whole_buffer_model(
        pieces in prop::collection::vec(arb_body_piece(), 0..6),
        end in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..2),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).filter(|p| !p.is_empty()).collect();
        let mut wire = chunked(&refs);
        if end {
            wire.extend_from_slice(LAST_CHUNK);
        }
        if !wire.is_empty() {
            for (i, x) in &flips {
                let i = i.index(wire.len());
                wire[i] ^= x;
            }
        }
        let want: Outcome = follow_chunked(&wire);
        let every: Vec<usize> = (0..wire.len()).collect();
        let (seen, ended, err) = incremental(&wire, &every);
        prop_assert_eq!(&seen, &want.cuts);
        prop_assert_eq!(ended, want.ended);
        prop_assert_eq!(err, want.gave_up);
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
        let (seen, ended, err) = incremental(&wire, &cuts);
        prop_assert!(seen.iter().all(|c| want.cuts.contains(c)));
        prop_assert_eq!(ended, want.ended);
        prop_assert_eq!(err, want.gave_up);
    }

    /// Resumed anywhere, the follower never says "boundary" where the model does not, and it
    /// agrees again once two blank lines have passed.
    #[test]
    fn a_resumed_follower_never_invents_a_boundary(body in arb_body_piece(), start in any::<prop::sample::Index>()) {
        let start = start.index(body.len() + 1);
        let mut e = Events::resumed();
        prop_assert!(!e.at_boundary());
        for end in start..body.len() {
            e.feed(&body[end..end + 1]);
            if e.at_boundary() {
                prop_assert!(ends_at_boundary(&body[..end + 1]), "{:?} from {}", body, start);
            }
        }
    }

    /// Body bytes split anywhere: the boundary state is the model's for every prefix.
    #[test]
    fn events_match_the_model_for_every_prefix(body in arb_body_piece(), cut in any::<prop::sample::Index>()) {
        let cut = cut.index(body.len() + 1);
        let mut e = Events::new();
        e.feed(&body[..cut]);
        prop_assert_eq!(e.at_boundary(), ends_at_boundary(&body[..cut]));
        e.feed(&body[cut..]);
        prop_assert_eq!(e.at_boundary(), ends_at_boundary(&body));
    }
}
