//! HTTP/2 header blocks decoded by the tracker (`Tracker::decode_request_headers`): a real
//! encoder's blocks (httlib-hpack) framed with padding, priority and CONTINUATIONs, fed in
//! random slices; what each stream's `Started` sees; failing open.

use super::*;
use httlib_hpack::Encoder;
use proptest::prelude::*;

const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A SETTINGS frame advertising `SETTINGS_HEADER_TABLE_SIZE = size` (and one other setting).
fn settings_table_size(size: u32) -> Vec<u8> {
    let mut p = vec![0, 3, 0, 0, 0, 100]; // MAX_CONCURRENT_STREAMS
    p.extend_from_slice(&[0, 1]);
    p.extend_from_slice(&size.to_be_bytes());
    frame(SETTINGS, 0, 0, &p)
}

/// How one block is framed: HEADERS (padded by `pad`, with priority fields) then
/// CONTINUATIONs cut at `cuts` (fractions of the block, per mille).
#[derive(Debug, Clone)]
struct Framing {
    pad: Option<u8>,
    priority: bool,
    cuts: Vec<u16>,
    end_stream: bool,
}

fn framed(id: u32, block: &[u8], f: &Framing) -> Vec<u8> {
    let mut at: Vec<usize> = f
        .cuts
        .iter()
        .map(|&c| block.len() * usize::from(c) / 1000)
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut pieces = Vec::new();
    let mut last = 0;
    for a in at {
        pieces.push(&block[last..a]);
        last = a;
    }
    pieces.push(&block[last..]);
    let mut out = Vec::new();
    let n = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        let eh = if i + 1 == n { EH } else { 0 };
        if i == 0 {
            let mut flags = eh | if f.end_stream { ES } else { 0 };
            let mut payload = Vec::new();
            if let Some(pad) = f.pad {
                flags |= PADDED;
                payload.push(pad);
            }
            if f.priority {
                flags |= PRIORITY;
                payload.extend_from_slice(&[0, 0, 0, 0, 15]);
            }
            payload.extend_from_slice(piece);
            payload.extend(std::iter::repeat_n(0u8, usize::from(f.pad.unwrap_or(0))));
            out.extend(frame(HEADERS, flags, id, &payload));
        } else {
            out.extend(frame(CONTINUATION, eh, id, piece));
        }
    }
    out
}

#[derive(Debug, Clone)]
struct Req {
    path: Vec<u8>,
    ua: Option<Vec<u8>>,
    /// Other fields, before and after.
    extra: Vec<(Vec<u8>, Vec<u8>)>,
    /// httlib flags for each field (cycled).
    flags: Vec<u8>,
    update: Option<u32>,
    framing: Framing,
}

fn req() -> impl Strategy<Value = Req> {
    let path = prop_oneof![
        prop::sample::select(vec![
            "/healthz",
            "/grpc.health.v1.Health/Check",
            "/",
            "/a?b"
        ])
        .prop_map(|p| p.as_bytes().to_vec()),
        "/[a-z/]{0,100}".prop_map(String::into_bytes),
    ];
    let ua = prop::option::of(prop_oneof![
        Just(b"grpc-go/1.60".to_vec()),
        "[ -~]{0,80}".prop_map(String::into_bytes),
    ]);
    let extra = prop::collection::vec(
        ("[a-z-]{1,12}", prop::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(n, v)| (n.into_bytes(), v)),
        0..6,
    );
    let framing = (
        prop::option::of(any::<u8>()),
        any::<bool>(),
        prop::collection::vec(0u16..=1000, 0..4),
        any::<bool>(),
    )
        .prop_map(|(pad, priority, cuts, end_stream)| Framing {
            pad,
            priority,
            cuts,
            end_stream,
        });
    (
        path,
        ua,
        extra,
        prop::collection::vec(0u8..32, 1..8),
        prop::option::of(0u32..=8192),
        framing,
    )
        .prop_map(|(path, ua, extra, flags, update, framing)| Req {
            path,
            ua,
            extra,
            flags,
            update,
            framing,
        })
}

/// The client's and the server's bytes of a connection carrying `reqs` (stream 1, 3, ...),
/// each answered (a junk header block: the server's are not decoded) before the next.
fn conversation(reqs: &[Req], advertised: u32) -> Script {
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(frame(SETTINGS, 0, 0, &[]));
    let mut script = vec![(C, pre), (S, settings_table_size(advertised))];
    let mut enc = Encoder::with_dynamic_size(4096);
    for (i, r) in reqs.iter().enumerate() {
        let id = 2 * i as u32 + 1;
        let mut block = Vec::new();
        if let Some(u) = r.update {
            enc.update_max_dynamic_size(u.min(advertised), &mut block)
                .unwrap();
        }
        let mut fields = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":scheme".to_vec(), b"http".to_vec()),
        ];
        fields.extend(r.extra.iter().take(2).cloned());
        fields.push((b":path".to_vec(), r.path.clone()));
        if let Some(ua) = &r.ua {
            fields.push((b"user-agent".to_vec(), ua.clone()));
        }
        fields.extend(r.extra.iter().skip(2).cloned());
        for (k, (n, v)) in fields.into_iter().enumerate() {
            let flags = r.flags[k % r.flags.len()];
            enc.encode((n, v, flags), &mut block).unwrap();
        }
        script.push((C, framed(id, &block, &r.framing)));
        if !r.framing.end_stream {
            // The client's half ends with an empty DATA frame.
            script.push((C, frame(DATA, ES, id, &[])));
        }
        script.push((S, fr(HEADERS, EH | ES, id, 12)));
    }
    script
}

/// Feeds `script` with each segment cut where `cuts` say (per mille of its length, cycled).
fn play_sliced(script: &Script, cuts: &[u16], decode: bool) -> (Tracker, Vec<Rec>) {
    let mut t = Tracker::new();
    if decode {
        t.decode_request_headers();
    }
    let mut out = Vec::new();
    for (i, (d, b)) in script.iter().enumerate() {
        let cut = cuts.get(i % cuts.len().max(1)).copied().unwrap_or(0);
        let at = b.len() * usize::from(cut) / 1000;
        let (x, y) = b.split_at(at);
        for part in [x, y] {
            // Another cut inside each part: slices of three sizes.
            let (p, q) = part.split_at(part.len() / 3);
            feed(&mut t, *d, p, &mut out);
            feed(&mut t, *d, q, &mut out);
        }
    }
    (t, out)
}

fn cut(v: &[u8]) -> (Vec<u8>, bool) {
    (v[..v.len().min(HINT_LEN)].to_vec(), v.len() > HINT_LEN)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Each stream's `Started` sees its own `:path` and `user-agent` (cut at `HINT_LEN`, as
    /// HTTP/1.1's), whatever the encoder's choices, the frames' padding, priority fields and
    /// CONTINUATIONs, and the slicing of the bytes; without decoding asked for, none; the
    /// events are the same either way (decoding never changes what is counted).
    #[test]
    fn each_stream_s_start_sees_its_own_path_and_user_agent(
        reqs in prop::collection::vec(req(), 1..8),
        advertised in prop_oneof![Just(4096u32), Just(8192)],
        cuts in prop::collection::vec(0u16..=1000, 1..10),
    ) {
        let script = conversation(&reqs, advertised);
        let (t, out) = play_sliced(&script, &cuts, true);
        let (_, plain) = play_sliced(&script, &cuts, false);
        prop_assert_eq!(events(&out), events(&plain));
        prop_assert_eq!(t.protocol(), Protocol::Http2);
        prop_assert_eq!(t.in_flight(), 0);
        let starts: Vec<&Rec> = out.iter().filter(|r| matches!(r.0, Started(_))).collect();
        prop_assert_eq!(starts.len(), reqs.len());
        for (r, rec) in reqs.iter().zip(starts) {
            let (path, path_cut) = cut(&r.path);
            let (ua, ua_cut) = r.ua.as_deref().map(cut).map_or((None, false), |(u, c)| (Some(u), c));
            prop_assert_eq!(rec.1.as_ref(), Some(&path));
            prop_assert_eq!(&rec.2, &ua);
            prop_assert_eq!(rec.3, path_cut || ua_cut);
        }
        prop_assert!(plain.iter().all(|r| r.1.is_none() && r.2.is_none()));
    }
}

/// A block the decoder refuses (an index past the tables) stops the decoding of the client's
/// blocks: reported once, no hints from then on, and every stream still counted.
#[test]
fn a_block_that_does_not_decode_stops_decoding_and_nothing_else() {
    let mut t = Tracker::new();
    t.decode_request_headers();
    let mut out = Vec::new();
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(frame(SETTINGS, 0, 0, &[]));
    feed(&mut t, C, &pre, &mut out);
    feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
    // :method GET, :path /healthz (literal, indexed name 4), decoded.
    let mut good = vec![0x82, 0x04, 8];
    good.extend_from_slice(b"/healthz");
    feed(&mut t, C, &frame(HEADERS, EH | ES, 1, &good), &mut out);
    assert_eq!(out.last().unwrap().1.as_deref(), Some(&b"/healthz"[..]));
    assert_eq!(t.hpack_failure(), None);
    feed(
        &mut t,
        C,
        &frame(HEADERS, EH | ES, 3, &[0x82, 0xff, 0x10]),
        &mut out,
    );
    assert_eq!(events(&out), [Started(1), Started(3)]);
    assert_eq!(
        out.last().unwrap().1,
        None,
        "no hints from a block not decoded"
    );
    assert_eq!(t.hpack_failure(), Some(hpack::Error::Index));
    assert_eq!(t.hpack_failure(), None, "reported once");
    feed(&mut t, C, &frame(HEADERS, EH | ES, 5, &good), &mut out);
    assert_eq!(events(&out), [Started(1), Started(3), Started(5)]);
    assert_eq!(out.last().unwrap().1, None, "stopped for good");
    assert_eq!(t.protocol(), Protocol::Http2, "still followed");
    // Padding longer than its frame: refused the same way (a new connection).
    let mut t = Tracker::new();
    t.decode_request_headers();
    feed(&mut t, C, &pre, &mut out);
    feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
    feed(
        &mut t,
        C,
        &frame(HEADERS, EH | PADDED, 1, &[9, 0x82]),
        &mut out,
    );
    assert_eq!(t.hpack_failure(), Some(hpack::Error::Block));
    assert_eq!(t.in_flight(), 1);
    // A block above MAX_BLOCK, across CONTINUATIONs.
    let mut t = Tracker::new();
    t.decode_request_headers();
    feed(&mut t, C, &pre, &mut out);
    let piece = vec![0x82; 16 * 1024];
    feed(&mut t, C, &frame(HEADERS, 0, 1, &piece), &mut out);
    for _ in 0..MAX_BLOCK / piece.len() {
        feed(&mut t, C, &frame(CONTINUATION, 0, 1, &piece), &mut out);
    }
    feed(&mut t, C, &frame(CONTINUATION, EH, 1, &piece), &mut out);
    assert_eq!(t.hpack_failure(), Some(hpack::Error::Block));
    assert_eq!(t.in_flight(), 1);
}

/// Decoding is asked for before the first byte or not at all; while it is on, the server's
/// SETTINGS payloads are read (not fed as stand-ins: they carry the table size); DATA still is.
#[test]
fn decoding_starts_with_the_connection_and_reads_the_server_s_settings() {
    let mut t = Tracker::new();
    let mut out = Vec::new();
    feed(&mut t, C, H2_PREFACE, &mut out);
    t.decode_request_headers();
    let mut good = vec![0x82, 0x04, 8];
    good.extend_from_slice(b"/healthz");
    feed(&mut t, C, &frame(HEADERS, EH | ES, 1, &good), &mut out);
    assert_eq!(out.last().unwrap().1, None, "asked too late: not decoded");

    for decode in [true, false] {
        let mut t = Tracker::new();
        if decode {
            t.decode_request_headers();
        }
        feed(&mut t, C, H2_PREFACE, &mut out);
        let s = settings_table_size(8192);
        feed(&mut t, S, &s[..9], &mut out);
        assert_eq!(t.server_unread_ahead(), if decode { 0 } else { 12 });
        feed(&mut t, S, &s[9..], &mut out);
        let d = frame(DATA, 0, 1, &[0; 10]);
        feed(&mut t, S, &d[..9], &mut out);
        assert_eq!(t.server_unread_ahead(), 10);
    }
}

/// One stream of [`stream_kinds_follow_both_directions_blocks`]: its request and response.
#[derive(Debug, Clone)]
struct Exchange {
    get: bool,
    path: &'static str,
    status: &'static str,
    content_type: Option<&'static str>,
    encoded: bool,
    flags: u8,
}

fn exchange() -> impl Strategy<Value = Exchange> {
    (
        any::<bool>(),
        prop::sample::select(vec![
            "/pkg.Watch/Sub",
            "/pkg.Watcher/Sub",
            "/pkg.Other/Call",
            "/events",
        ]),
        prop::sample::select(vec!["200", "404", "503", "204"]),
        prop::option::of(prop::sample::select(vec![
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC; x=1",
            "application/grpc-web",
            "text/event-stream",
            "text/event-stream; charset=utf-8",
            "text/plain",
        ])),
        any::<bool>(),
        0u8..32,
    )
        .prop_map(
            |(get, path, status, content_type, encoded, flags)| Exchange {
                get,
                path,
                status,
                content_type,
                encoded,
                flags,
            },
        )
}

/// What the tracker must say of `e` once its response block is read.
fn kind_of(e: &Exchange) -> H2Kind {
    let ct = e.content_type.unwrap_or("").to_ascii_lowercase();
    let media = ct.split(';').next().unwrap().trim().to_string();
    if media == "application/grpc" || media.starts_with("application/grpc+") {
        H2Kind::Grpc {
            resumable: e.path.starts_with("/pkg.Watch/"),
        }
    } else if media == "text/event-stream" {
        H2Kind::Sse {
            movable: e.get && e.status == "200" && !e.encoded,
        }
    } else {
        H2Kind::Other
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// With both directions decoded, each open stream's kind comes from its own request
    /// (`:method`, `:path` against the resumable prefixes) and response (`:status`,
    /// `content-type`, `content-encoding`) blocks, whatever the encoders' choices, the order
    /// the responses come in, a 1xx before them, and the slicing; and decoding both
    /// directions changes no event.
    #[test]
    fn stream_kinds_follow_both_directions_blocks(
        exchanges in prop::collection::vec(exchange(), 1..8),
        order in Just(()).prop_perturb(|_, mut rng| {
            let mut v: Vec<usize> = (0..8).collect();
            for i in (1..v.len()).rev() {
                v.swap(i, (rng.next_u32() as usize) % (i + 1));
            }
            v
        }),
        interim in any::<bool>(),
        cuts in prop::collection::vec(0u16..=1000, 1..10),
    ) {
        let mut pre = H2_PREFACE.to_vec();
        pre.extend(frame(SETTINGS, 0, 0, &[]));
        let mut script = vec![(C, pre), (S, frame(SETTINGS, 0, 0, &[]))];
        let (mut cenc, mut senc) = (Encoder::with_dynamic_size(4096), Encoder::with_dynamic_size(4096));
        for (i, e) in exchanges.iter().enumerate() {
            let mut block = Vec::new();
            let method = if e.get { "GET" } else { "POST" };
            for (n, v) in [(":method", method), (":scheme", "http"), (":path", e.path), ("te", "trailers")] {
                cenc.encode((n.as_bytes().to_vec(), v.as_bytes().to_vec(), e.flags), &mut block).unwrap();
            }
            script.push((C, frame(HEADERS, EH, 2 * i as u32 + 1, &block)));
        }
        let mut want = Vec::new();
        for &i in order.iter().filter(|&&i| i < exchanges.len()) {
            let e = &exchanges[i];
            let id = 2 * i as u32 + 1;
            if interim {
                let mut b = Vec::new();
                senc.encode((b":status".to_vec(), b"103".to_vec(), e.flags), &mut b).unwrap();
                senc.encode((b"link".to_vec(), b"</a>".to_vec(), e.flags), &mut b).unwrap();
                script.push((S, frame(HEADERS, EH, id, &b)));
            }
            let mut b = Vec::new();
            senc.encode((b":status".to_vec(), e.status.as_bytes().to_vec(), e.flags), &mut b).unwrap();
            if let Some(ct) = e.content_type {
                senc.encode((b"content-type".to_vec(), ct.as_bytes().to_vec(), e.flags), &mut b).unwrap();
            }
            if e.encoded {
                senc.encode((b"content-encoding".to_vec(), b"gzip".to_vec(), e.flags), &mut b).unwrap();
            }
            script.push((S, frame(HEADERS, EH, id, &b)));
            script.push((S, frame(DATA, 0, id, &[0, 0, 0, 0, 1, 7])));
            want.push((script.len(), id, kind_of(e)));
        }
        // Played whole and sliced, the kind checked after each response's segments.
        let prefixes: std::sync::Arc<[String]> = vec!["/pkg.Watch/".to_string()].into();
        let mut t = Tracker::new();
        t.decode_response_headers(prefixes, true);
        let mut plain = Tracker::new();
        let (mut out, mut out_plain) = (Vec::new(), Vec::new());
        for (k, (d, b)) in script.iter().enumerate() {
            let cut = usize::from(cuts[k % cuts.len()]);
            let (x, y) = b.split_at(b.len() * cut / 1000);
            for part in [x, y] {
                feed(&mut t, *d, part, &mut out);
                feed(&mut plain, *d, part, &mut out_plain);
            }
            for (at, id, kind) in &want {
                if *at == k + 1 {
                    prop_assert_eq!(t.h2_stream_kind(*id), Some(*kind));
                }
            }
        }
        prop_assert_eq!(events(&out), events(&out_plain));
        prop_assert_eq!(t.hpack_failure(), None);
        for i in 0..exchanges.len() {
            prop_assert_eq!(plain.h2_stream_kind(2 * i as u32 + 1), None, "not decoded");
        }
    }
}

/// The server's header blocks are read, not skipped as payloads, once responses are decoded.
#[test]
fn with_responses_decoded_the_server_s_header_blocks_are_read() {
    let mut t = Tracker::new();
    t.decode_response_headers(Vec::new().into(), true);
    let mut out = Vec::new();
    feed(&mut t, C, H2_PREFACE, &mut out);
    feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
    feed(
        &mut t,
        C,
        &frame(HEADERS, EH, 1, &[0x82, 0x84, 0x86]),
        &mut out,
    );
    assert_eq!(t.h2_stream_kind(1), Some(H2Kind::NoResponse));
    let h = frame(HEADERS, EH, 1, &[0x88]);
    feed(&mut t, S, &h[..9], &mut out);
    assert_eq!(t.server_unread_ahead(), 0);
    feed(&mut t, S, &h[9..], &mut out);
    assert_eq!(t.h2_stream_kind(1), Some(H2Kind::Other));
    let d = frame(DATA, 0, 1, &[0; 10]);
    feed(&mut t, S, &d[..9], &mut out);
    assert_eq!(t.server_unread_ahead(), 10);
}

/// Both directions stopping is one report (the connection is counted once), and once the
/// responses are not decoded no stream has a kind.
#[test]
fn both_directions_stopping_is_reported_once() {
    let mut t = Tracker::new();
    t.decode_response_headers(Vec::new().into(), true);
    let mut out = Vec::new();
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(frame(SETTINGS, 0, 0, &[]));
    feed(&mut t, C, &pre, &mut out);
    feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
    feed(
        &mut t,
        C,
        &frame(HEADERS, EH, 1, &[0x82, 0x84, 0x86]),
        &mut out,
    );
    feed(&mut t, C, &frame(HEADERS, EH, 3, &[0xff, 0x10]), &mut out);
    assert_eq!(t.hpack_failure(), Some(hpack::Error::Index));
    feed(&mut t, S, &frame(HEADERS, EH, 1, &[0xff, 0x10]), &mut out);
    assert_eq!(t.hpack_failure(), None, "the connection was reported");
    assert_eq!(t.h2_stream_kind(1), None);
    assert_eq!(t.in_flight(), 2);
}
