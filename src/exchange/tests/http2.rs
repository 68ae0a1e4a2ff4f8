//! HTTP/2 exchanges: streams, continuation, resets, trailers, GOAWAY, and what the tracker
//! gives up on.

use super::*;

/// A frame with `len` payload bytes (junk: payloads are never read).
pub(super) fn fr(ty: u8, flags: u8, id: u32, len: usize) -> Vec<u8> {
    let mut f = (len as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend((0..len).map(|i| (i * 7 + 0x80) as u8));
    f
}

pub(super) fn goaway(last: u32) -> Vec<u8> {
    let mut f = fr(GOAWAY, 0, 0, 0);
    f[2] = 8;
    f.extend_from_slice(&last.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f
}

pub(super) const ES: u8 = END_STREAM;
pub(super) const EH: u8 = END_HEADERS;

pub(super) fn cf(ty: u8, flags: u8, id: u32, len: usize) -> (D, Vec<u8>) {
    (C, fr(ty, flags, id, len))
}
pub(super) fn sf(ty: u8, flags: u8, id: u32, len: usize) -> (D, Vec<u8>) {
    (S, fr(ty, flags, id, len))
}

/// The client preface with its SETTINGS, and the server's SETTINGS and ack.
pub(super) fn h2_open() -> Script {
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(fr(SETTINGS, 0, 0, 18));
    let mut srv = fr(SETTINGS, 0, 0, 12);
    srv.extend(fr(SETTINGS, 1, 0, 0));
    srv.extend(fr(8, 0, 0, 4)); // WINDOW_UPDATE
    vec![(C, pre), (S, srv), cf(SETTINGS, 1, 0, 0), cf(6, 0, 0, 8)]
}

pub(super) fn h2(rest: Script) -> Script {
    let mut s = h2_open();
    s.extend(rest);
    s
}

#[test]
pub(super) fn h2_preface_and_settings_start_no_stream() {
    let t = check(&h2_open(), &[]);
    assert_eq!(t.protocol(), Protocol::Http2);
    assert_eq!(t.in_flight(), 0);
    assert!(!t.partial());
}

pub(super) fn h2_get() -> Script {
    h2(vec![
        cf(HEADERS, ES | EH | 0x20, 1, 20),
        sf(HEADERS, EH, 1, 10),
        sf(DATA, 0, 1, 100),
        sf(DATA, ES | 0x8, 1, 10),
    ])
}

#[test]
pub(super) fn h2_get_with_end_stream_on_headers() {
    check(&h2_get(), &[Started(1), Ended(1)]);
}

pub(super) fn h2_post() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(DATA, 0, 1, 100),
        sf(HEADERS, EH, 1, 10),
        cf(DATA, ES, 1, 0),
        sf(DATA, ES, 1, 3),
        // The server answers before the client finishes: ended by the client's END_STREAM.
        cf(HEADERS, EH, 3, 5),
        sf(HEADERS, EH | ES, 3, 10),
        cf(DATA, ES, 3, 4),
    ])
}

#[test]
pub(super) fn h2_post_ends_when_both_halves_closed() {
    check(&h2_post(), &[Started(1), Ended(1), Started(3), Ended(3)]);
}

pub(super) fn h2_continuation() -> Script {
    h2(vec![
        cf(HEADERS, ES, 1, 20),
        sf(8, 0, 0, 4),
        cf(CONTINUATION, 0, 1, 20),
        cf(CONTINUATION, EH, 1, 5),
        // END_STREAM is a HEADERS flag; it takes effect with the block's end.
        sf(HEADERS, ES, 1, 10),
        sf(CONTINUATION, EH, 1, 10),
    ])
}

#[test]
pub(super) fn h2_continuation_completes_the_header_block() {
    let script = h2_continuation();
    let n = h2_open().len();
    let (t, out) = play(&script[..n + 1].to_vec());
    assert!(t.partial());
    assert!(out.is_empty());
    check(&script, &[Started(1), Ended(1)]);
}

pub(super) fn h2_resets() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(RST_STREAM, 0, 1, 4),
        sf(HEADERS, EH, 1, 10), // in flight before the server saw the RST: ignored
        cf(HEADERS, EH | ES, 3, 20),
        sf(RST_STREAM, 0, 3, 4),
        cf(DATA, ES, 3, 4), // ignored
        cf(RST_STREAM, 0, 3, 4),
    ])
}

#[test]
pub(super) fn h2_rst_from_either_side_ends_the_stream() {
    let t = check(&h2_resets(), &[Started(1), Ended(1), Started(3), Ended(3)]);
    assert_eq!(t.in_flight(), 0);
}

/// A client header block on a stream closed here opens no request, and the tracker goes on:
/// trailers the client sent before it saw the server's RST_STREAM (legal, RFC 9113 §5.1),
/// with a CONTINUATION; a block on a stream that ended, or on an id below the highest used
/// (errors Envoy answers itself: no request either).
#[test]
pub(super) fn h2_header_blocks_on_closed_streams_open_nothing_and_lose_nothing() {
    let t = check(
        &h2(vec![
            cf(HEADERS, EH, 1, 20),
            cf(DATA, 0, 1, 100),
            sf(RST_STREAM, 0, 1, 4),
            cf(DATA, 0, 1, 100),
            cf(HEADERS, ES, 1, 8),
            cf(CONTINUATION, EH, 1, 4),
            cf(HEADERS, EH | ES, 3, 3),
            sf(HEADERS, EH | ES, 3, 3),
            cf(HEADERS, EH | ES, 3, 3),
            cf(HEADERS, EH, 7, 3),
            cf(HEADERS, EH | ES, 5, 3),
            cf(HEADERS, EH | ES, 9, 3),
        ]),
        &[
            Started(1),
            Ended(1),
            Started(3),
            Ended(3),
            Started(7),
            Started(9),
        ],
    );
    assert_eq!(t.protocol(), Protocol::Http2);
    assert_eq!(t.in_flight(), 2);
}

pub(super) fn h2_trailers() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(DATA, 0, 1, 10),
        sf(HEADERS, EH, 1, 10),
        cf(HEADERS, EH | ES, 1, 8),
        sf(DATA, 0, 1, 10),
        sf(HEADERS, 0, 1, 8),
        sf(CONTINUATION, EH, 1, 8),
        sf(HEADERS, EH | ES, 1, 8),
    ])
}

#[test]
pub(super) fn h2_trailers_close_a_half() {
    check(&h2_trailers(), &[Started(1), Ended(1)]);
}

pub(super) fn h2_goaway() -> Script {
    h2(vec![
        cf(HEADERS, EH | ES, 1, 20),
        cf(HEADERS, EH | ES, 3, 20),
        cf(HEADERS, EH, 5, 20),
        (S, goaway(1)),
        cf(HEADERS, EH | ES, 7, 20),
        cf(PING_T, 0, 0, 8),
        cf(DATA, ES, 5, 0),
        cf(HEADERS, EH, 3, 2), // trailers on a cut stream: ignored
        (S, goaway(3)),        // a larger one changes nothing
        sf(HEADERS, EH | ES, 1, 10),
    ])
}
pub(super) const PING_T: u8 = 6;

/// A server GOAWAY ends no stream: each one counts until it ends or the connection
/// closes (an overcount until the close, never an undercount).
#[test]
pub(super) fn h2_server_goaway_ends_no_stream() {
    let t = check(
        &h2_goaway(),
        &[Started(1), Started(3), Started(5), Started(7), Ended(1)],
    );
    assert!(t.will_close());
    assert_eq!(t.in_flight(), 3);
}

pub(super) fn h2_interleaved() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(HEADERS, EH, 3, 20),
        cf(DATA, 0, 1, 5),
        cf(DATA, 0, 3, 5),
        sf(HEADERS, EH, 3, 10),
        cf(DATA, ES, 3, 5),
        cf(HEADERS, EH | ES, 5, 20),
        sf(HEADERS, EH, 1, 10),
        sf(HEADERS, EH | ES, 5, 3),
        sf(DATA, ES, 3, 7),
        cf(DATA, ES, 1, 5),
        sf(DATA, 0, 1, 7),
        sf(DATA, ES, 1, 7),
    ])
}

#[test]
pub(super) fn h2_interleaved_streams() {
    let t = check(
        &h2_interleaved(),
        &[
            Started(1),
            Started(3),
            Started(5),
            Ended(5),
            Ended(3),
            Ended(1),
        ],
    );
    assert_eq!(t.in_flight(), 0);
}

pub(super) fn h2_unknowns() -> Vec<(&'static str, Script, Vec<Event>)> {
    let open = h2_open();
    let with = |rest: Script| {
        let mut s = open.clone();
        s.extend(rest);
        s
    };
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(fr(SETTINGS, 0, 0, 0));
    vec![
        (
            "server first frame not SETTINGS",
            vec![(C, pre.clone()), sf(8, 0, 0, 4)],
            vec![Lost],
        ),
        (
            "HEADERS on 0",
            with(vec![cf(HEADERS, EH, 0, 3)]),
            vec![Lost],
        ),
        ("DATA on 0", with(vec![sf(DATA, 0, 0, 3)]), vec![Lost]),
        (
            "CONTINUATION without block",
            with(vec![cf(CONTINUATION, EH, 1, 3)]),
            vec![Lost],
        ),
        (
            "other frame in block",
            with(vec![cf(HEADERS, 0, 1, 3), cf(DATA, 0, 1, 3)]),
            vec![Lost],
        ),
        (
            "CONTINUATION of another stream",
            with(vec![cf(HEADERS, 0, 1, 3), cf(CONTINUATION, EH, 3, 3)]),
            vec![Lost],
        ),
        (
            "server frame in its block",
            with(vec![
                cf(HEADERS, EH, 1, 3),
                sf(HEADERS, 0, 1, 3),
                sf(8, 0, 0, 4),
            ]),
            vec![Started(1), Lost],
        ),
        ("even id", with(vec![cf(HEADERS, EH, 2, 3)]), vec![Lost]),
        ("short GOAWAY", with(vec![sf(GOAWAY, 0, 0, 4)]), vec![Lost]),
    ]
}

#[test]
pub(super) fn each_http2_unknown_trigger_loses_once() {
    for (name, script, want) in h2_unknowns() {
        let (t, out) = play(&script);
        assert_eq!(events(&out), want, "{name}");
        assert_eq!(t.protocol(), Protocol::Unknown, "{name}");
    }
}

#[test]
pub(super) fn more_than_max_streams_is_unknown() {
    let mut script = h2_open();
    for k in 0..=MAX_STREAMS as u32 {
        script.push(cf(HEADERS, EH, 2 * k + 1, 1));
    }
    let (t, out) = play(&script);
    assert_eq!(out.len(), MAX_STREAMS + 1);
    assert_eq!(out.last().unwrap().0, Lost);
    assert_eq!(t.in_flight(), MAX_STREAMS as u32);
}

#[test]
pub(super) fn a_large_frame_is_skipped_by_length() {
    let mut script = h2(vec![cf(HEADERS, EH, 1, 3), cf(DATA, ES, 1, (1 << 24) - 1)]);
    script.push(sf(HEADERS, EH | ES, 1, 3));
    check(&script, &[Started(1), Ended(1)]);
}

/// Server bytes may come between the client's first bytes (enough to pick HTTP/2) and the rest
/// of its preface: they are the server's SETTINGS, not a preface to check.
#[test]
pub(super) fn server_settings_before_the_rest_of_the_client_preface() {
    let (head, tail) = H2_PREFACE.split_at(H2_PREFIX.len());
    let mut rest = tail.to_vec();
    rest.extend(fr(SETTINGS, 0, 0, 0));
    rest.extend(fr(HEADERS, ES | EH, 1, 5));
    let script = vec![
        (C, head.to_vec()),
        sf(SETTINGS, 0, 0, 6),
        (C, rest),
        sf(HEADERS, ES | EH, 1, 5),
    ];
    let t = check(&script, &[Started(1), Ended(1)]);
    assert_eq!(t.protocol(), Protocol::Http2);
}

/// A server push (PUSH_PROMISE with its CONTINUATION on the request's stream, then the pushed
/// stream's HEADERS on an even id) is the server's: it opens no counted stream and is not given
/// up on; the request's stream ends as usual. (Envoy does not push; a server that did is
/// followed, not a reason to stop following.)
#[test]
pub(super) fn a_server_push_opens_no_counted_stream() {
    let script = h2(vec![
        cf(HEADERS, ES | EH, 1, 8),
        sf(PUSH_PROMISE, 0, 1, 12),
        sf(CONTINUATION, EH, 1, 4),
        sf(HEADERS, EH, 2, 6),
        sf(HEADERS, ES | EH, 1, 6),
        sf(DATA, ES, 2, 3),
    ]);
    let t = check(&script, &[Started(1), Ended(1)]);
    assert_eq!(t.in_flight(), 0);
    assert_eq!(t.protocol(), Protocol::Http2);
    let lost = |s| {
        let (t, out) = play(&h2(s));
        (events(&out), t.protocol())
    };
    assert_eq!(
        lost(vec![cf(HEADERS, ES | EH, 1, 8), sf(PUSH_PROMISE, EH, 0, 4)]),
        (vec![Started(1), Lost], Protocol::Unknown),
        "a PUSH_PROMISE on stream 0"
    );
    assert_eq!(
        lost(vec![cf(PUSH_PROMISE, 0, 1, 4), cf(CONTINUATION, EH, 1, 4)]),
        (vec![Lost], Protocol::Unknown),
        "a client's PUSH_PROMISE opens no header block"
    );
}

/// A client's GOAWAY, well formed or short, changes nothing: the connection manager goes on
/// serving the streams (the client only opens no more), so it is not marked closing.
#[test]
pub(super) fn a_client_goaway_changes_nothing() {
    for len in [8, 4] {
        let script = h2(vec![
            cf(HEADERS, ES | EH, 1, 8),
            cf(GOAWAY, 0, 0, len),
            sf(HEADERS, EH, 1, 6),
        ]);
        let t = check(&script, &[Started(1)]);
        assert!(!t.will_close(), "GOAWAY of {len}");
        assert_eq!(t.in_flight(), 1);
        assert_eq!(t.protocol(), Protocol::Http2);
    }
}

/// Only END_STREAM ends a half: DATA without it (either side) ends nothing; and streams end in
/// any order, the oldest first among several open.
#[test]
pub(super) fn only_end_stream_ends_a_half_and_streams_end_in_any_order() {
    let script = h2(vec![
        cf(HEADERS, EH, 1, 8),
        cf(HEADERS, ES | EH, 3, 8),
        cf(HEADERS, ES | EH, 5, 8),
        cf(DATA, 0, 1, 4),
        sf(HEADERS, EH, 1, 6),
        sf(DATA, 0, 1, 4),
        sf(HEADERS, ES | EH, 3, 6),
        sf(DATA, ES, 1, 4),
        cf(DATA, 0x8, 1, 4),
        cf(DATA, ES, 1, 0),
        sf(HEADERS, ES | EH, 5, 6),
    ]);
    let (t, out) = play(&script);
    assert_eq!(
        events(&out),
        [
            Started(1),
            Started(3),
            Started(5),
            Ended(3),
            Ended(1),
            Ended(5)
        ]
    );
    let in_flight: Vec<u32> = out.iter().map(|r| r.4).collect();
    assert_eq!(in_flight, [1, 2, 3, 2, 1, 0]);
    check(
        &script,
        &[
            Started(1),
            Started(3),
            Started(5),
            Ended(3),
            Ended(1),
            Ended(5),
        ],
    );
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn a_frame_header_decodes_field_by_field() {
    // RFC 9113 §4.1, read a byte at a time: each field from its own bytes, the reserved bit
    // cleared. Every byte position takes values that set its top and bottom bits, so a field
    // taking a neighbour's byte or losing one of its own fails.
    let by_bytes = |h: &[u8; 9]| super::http2::FrameHead {
        len: u32::from(h[0]) << 16 | u32::from(h[1]) << 8 | u32::from(h[2]),
        ty: h[3],
        flags: h[4],
        id: (u32::from(h[5]) & 0x7f) << 24
            | u32::from(h[6]) << 16
            | u32::from(h[7]) << 8
            | u32::from(h[8]),
    };
    for at in 0..9 {
        for v in [0x01u8, 0x80, 0xff, 0x7f, 0x5a] {
            for base in [0x00u8, 0xff, 0x33] {
                let mut h = [base; 9];
                h[at] = v;
                assert_eq!(
                    super::http2::FrameHead::decode(&h),
                    by_bytes(&h),
                    "{h:02x?}"
                );
            }
        }
    }
}

/// Whether a GOAWAY of the module's may follow the server's bytes (issue 63 item 3): between
/// two frames, after the server preface, and only while the server wrote no GOAWAY of its own
/// (RFC 9113 §6.8: a last-stream-id is never raised). Lost, or not HTTP/2: not now.
#[test]
fn a_goaway_of_ours_fits_only_between_frames_and_never_after_the_server_s() {
    let (t, _) = play(&h2(vec![cf(HEADERS, EH, 1, 20)]));
    assert_eq!(t.goaway_gate(), GoAwayGate::May);
    // Inside a server frame (its header, then its payload): not now.
    for cut in [4, 9, 12] {
        let mut s = h2(vec![cf(HEADERS, EH, 1, 20)]);
        let f = fr(DATA, 0, 1, 16);
        s.push((S, f[..cut].to_vec()));
        let (t, _) = play(&s);
        assert_eq!(t.goaway_gate(), GoAwayGate::NotNow, "cut at {cut}");
    }
    // Envoy's own GOAWAY (its final one, any last-stream-id): never ours after it, whatever
    // follows.
    for last in [0, 1, (1 << 31) - 1] {
        let s = h2(vec![
            cf(HEADERS, EH, 1, 20),
            (S, goaway(last)),
            sf(HEADERS, EH, 1, 10),
        ]);
        let (t, _) = play(&s);
        assert_eq!(t.goaway_gate(), GoAwayGate::EnvoySent, "last {last}");
        let (t, _) = play_bytewise(&s);
        assert_eq!(
            t.goaway_gate(),
            GoAwayGate::EnvoySent,
            "last {last}, byte by byte"
        );
    }
    // HTTP/1.1, undecided, lost: nothing proves a GOAWAY fits.
    let mut t = Tracker::new();
    assert_eq!(t.goaway_gate(), GoAwayGate::NotNow);
    t.client(b"GET / HTTP/1.1\r\n\r\n", &mut |_, _| {});
    assert_eq!(t.goaway_gate(), GoAwayGate::NotNow);
    let (t, _) = play(&h2(vec![sf(DATA, 0, 0, 3)])); // DATA on stream 0: lost
    assert_eq!(t.protocol(), Protocol::Unknown);
    assert_eq!(t.goaway_gate(), GoAwayGate::NotNow, "lost");
}
