//! The pieces of a gRPC stream's move (`http2::grpc`): message boundaries across DATA frames and
//! feeds, and the frames written, read by a real HPACK decoder (httlib-hpack) beside a real
//! encoder's blocks of other streams.

use super::*;
use crate::exchange::http2::grpc::{self, Messages};
use httlib_hpack::{Decoder, Encoder};
use proptest::prelude::*;

/// gRPC messages (`lens`) laid into one byte stream, and the offsets where each ends.
fn messages(lens: &[usize]) -> (Vec<u8>, Vec<usize>) {
    let mut body = Vec::new();
    let mut ends = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        body.push((i % 2) as u8);
        body.extend_from_slice(&(len as u32).to_be_bytes());
        body.extend((0..len).map(|k| (k * 31 + i) as u8));
        ends.push(body.len());
    }
    (body, ends)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, .. ProptestConfig::default() })]

    /// Fed a stream's DATA payloads in any slices, `at_boundary` holds exactly at the end of
    /// each whole message (and at the start), never inside a prefix or a body.
    #[test]
    fn message_boundaries_are_found_whatever_the_slicing(
        lens in prop::collection::vec(prop_oneof![Just(0usize), 1usize..40, 1000usize..20000], 1..10),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
    ) {
        let (body, ends) = messages(&lens);
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
        at.push(body.len());
        at.sort_unstable();
        at.dedup();
        let mut m = Messages::default();
        prop_assert!(m.at_boundary());
        let mut last = 0;
        for a in at {
            m.feed(&body[last..a]);
            last = a;
            prop_assert_eq!(m.at_boundary(), a == 0 || ends.contains(&a), "at {}", a);
        }
    }
}

/// One stream of the conversation: its headers' extra fields, messages, and whether the
/// upstream ends it (trailers) or it is the one moved.
#[derive(Debug, Clone)]
struct Call {
    extra: Vec<(String, String)>,
    lens: Vec<usize>,
    /// DATA frame size the server uses.
    chunk: usize,
}

fn call() -> impl Strategy<Value = Call> {
    (
        prop::collection::vec(("x-[a-z]{1,8}", "[a-z0-9]{0,30}"), 0..4),
        prop::collection::vec(0usize..300, 1..6),
        1usize..200,
    )
        .prop_map(|(extra, lens, chunk)| Call { extra, lens, chunk })
}

/// A server frame of the conversation, before encoding: blocks are encoded in the order they
/// are written, as Envoy's encoder does.
#[derive(Debug, Clone)]
enum Out {
    Headers(u32, Vec<(String, String)>, bool),
    Data(u32, Vec<u8>),
}

fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Header blocks, each a list of fields.
type Blocks = Vec<Vec<(String, String)>>;
/// What the client read of one stream: its blocks, its DATA bytes, whether it ended.
type Seen = (Blocks, Vec<u8>, bool);

/// The client's side: every frame's header block decoded, in order, by a real decoder; the
/// fields of each stream's blocks and its DATA bytes.
fn client_reads(bytes: &[u8]) -> Result<std::collections::BTreeMap<u32, Seen>, String> {
    let mut dec = Decoder::default();
    let mut streams = std::collections::BTreeMap::new();
    let mut i = 0;
    while i < bytes.len() {
        let head = FrameHead::decode(bytes[i..i + 9].try_into().unwrap());
        let payload = &bytes[i + 9..i + 9 + head.len as usize];
        i += 9 + head.len as usize;
        let s: &mut Seen = streams.entry(head.id).or_default();
        if s.2 {
            return Err(format!("a frame after the end of stream {}", head.id));
        }
        match head.ty {
            HEADERS => {
                let mut buf = payload.to_vec();
                let mut fields = Vec::new();
                dec.decode(&mut buf, &mut fields)
                    .map_err(|e| format!("stream {}: {e:?}", head.id))?;
                s.0.push(
                    fields
                        .into_iter()
                        .map(|(n, v, _)| {
                            (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())
                        })
                        .collect(),
                );
            }
            DATA => s.1.extend_from_slice(payload),
            _ => return Err(format!("unexpected frame type {}", head.ty)),
        }
        s.2 |= head.flags & END_STREAM != 0;
    }
    Ok(streams)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Envoy's frames of several gRPC streams interleaved at random (their blocks encoded by a
    /// real encoder choosing indexing at random, so later blocks index earlier ones), and the
    /// move of one stream written at a frame end where its messages are whole: a real decoder
    /// reads every block the client receives, each stream's fields are what was encoded, the
    /// moved stream ends with `grpc-status: 14` after whole messages (its headers first, or a
    /// Trailers-Only response when none were written), and every block after the move still
    /// decodes (the table is in step).
    #[test]
    fn a_moved_stream_ends_with_unavailable_and_every_block_still_decodes(
        calls in prop::collection::vec(call(), 2..5),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 10..200),
        flags in prop::collection::vec(0u8..32, 1..10),
        move_after in any::<prop::sample::Index>(),
        target in any::<prop::sample::Index>(),
    ) {
        let target = target.index(calls.len());
        // Each stream's frames in its own order: headers, DATA chunks, trailers.
        let mut queues: Vec<std::collections::VecDeque<Out>> = calls
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let id = 2 * k as u32 + 1;
                let mut q = std::collections::VecDeque::new();
                let mut h = vec![
                    (":status".to_string(), "200".to_string()),
                    ("content-type".to_string(), "application/grpc".to_string()),
                ];
                h.extend(c.extra.iter().cloned());
                q.push_back(Out::Headers(id, h, false));
                let (body, _) = messages(&c.lens);
                for chunk in body.chunks(c.chunk) {
                    q.push_back(Out::Data(id, chunk.to_vec()));
                }
                q.push_back(Out::Headers(id, vec![("grpc-status".into(), "0".into())], true));
                q
            })
            .collect();
        // Interleave; the move goes in at the first frame end at or after `move_after` where the
        // target's messages are whole.
        let mut enc = Encoder::with_dynamic_size(4096);
        let mut wire = Vec::new();
        let mut want: Vec<(u32, Blocks)> =
            (0..calls.len()).map(|k| (2 * k as u32 + 1, Vec::new())).collect();
        let mut msgs = Messages::default();
        let move_at = move_after.index(picks.len());
        let mut moved = false;
        let mut headers_sent = false;
        let mut f = 0;
        let mut step = 0;
        loop {
            // A stream that ended is not moved (its trailers went).
            if !moved && !queues[target].is_empty() && step >= move_at && msgs.at_boundary() {
                let id = 2 * target as u32 + 1;
                wire.extend(grpc::unavailable(id, headers_sent));
                let mut block = Vec::new();
                if !headers_sent {
                    block.push((":status".to_string(), "200".to_string()));
                    block.push(("content-type".to_string(), "application/grpc".to_string()));
                }
                block.push(("grpc-status".to_string(), "14".to_string()));
                block.push(("grpc-message".to_string(), grpc::DRAINING_MESSAGE.to_string()));
                want[target].1.push(block);
                // Envoy writes nothing more for it (docs/contributing/long-lived-streams.md, H2-2).
                queues[target].clear();
                moved = true;
            }
            let open: Vec<usize> = (0..queues.len()).filter(|&k| !queues[k].is_empty()).collect();
            if open.is_empty() {
                break;
            }
            let k = open[picks[step % picks.len()].index(open.len())];
            step += 1;
            match queues[k].pop_front().unwrap() {
                Out::Headers(id, fields, end) => {
                    let mut block = Vec::new();
                    for (n, v) in &fields {
                        let fl = flags[f % flags.len()];
                        f += 1;
                        enc.encode((n.as_bytes().to_vec(), v.as_bytes().to_vec(), fl), &mut block).unwrap();
                    }
                    let fl = EH | if end { ES } else { 0 };
                    wire.extend(frame(HEADERS, fl, id, &block));
                    want[k].1.push(fields);
                    if k == target {
                        headers_sent = true;
                    }
                }
                Out::Data(id, bytes) => {
                    if k == target {
                        msgs.feed(&bytes);
                    }
                    wire.extend(frame(DATA, 0, id, &bytes));
                }
            }
        }
        let got = client_reads(&wire).map_err(TestCaseError::fail)?;
        for (id, blocks) in &want {
            let (b, data, ended) = &got[id];
            prop_assert_eq!(b, blocks, "stream {}", id);
            prop_assert!(*ended);
            // Whole messages only.
            let mut m = Messages::default();
            m.feed(data);
            prop_assert!(m.at_boundary(), "stream {} ends inside a message", id);
        }
    }
}

#[test]
fn the_control_frames_are_what_rfc_9113_says() {
    assert_eq!(
        grpc::rst_stream(5, grpc::CANCEL),
        [0, 0, 4, 3, 0, 0, 0, 0, 5, 0, 0, 0, 8]
    );
    assert_eq!(
        grpc::window_update(0, 70_000),
        [0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 1, 0x11, 0x70]
    );
    // The trailers' block: never-indexed literals only (first byte 0x10 each), one frame with
    // END_STREAM and END_HEADERS.
    let t = grpc::unavailable(7, true);
    let head = FrameHead::decode(t[..9].try_into().unwrap());
    assert_eq!((head.ty, head.flags, head.id), (HEADERS, ES | EH, 7));
    assert_eq!(head.len as usize, t.len() - 9);
    let mut dec = Decoder::default();
    let mut fields = Vec::new();
    dec.decode(&mut t[9..].to_vec(), &mut fields).unwrap();
    assert!(
        fields.iter().all(|(_, _, f)| *f & 0x8 != 0),
        "never indexed"
    );
    assert_eq!(fields[0].0, b"grpc-status");
    assert_eq!(fields[0].1, b"14");
    assert_eq!(dec.max_dynamic_size(), 4096);
}

/// The tracker follows the messages of a resumable gRPC stream's response (its DATA payloads
/// read, not skipped), tells whether its bytes end between two messages and between two
/// frames, and lets the module end it; other streams' DATA are still skipped unread.
#[test]
fn the_tracker_follows_a_resumable_grpc_response_s_messages() {
    fn lit(b: &mut Vec<u8>, n: &str, v: &str) {
        b.push(0x00);
        b.push(n.len() as u8);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    let mut t = Tracker::new();
    t.decode_response_headers(vec!["/pkg.Watch/".to_string()].into(), true);
    let mut out = Vec::new();
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(frame(SETTINGS, 0, 0, &[]));
    feed(&mut t, C, &pre, &mut out);
    feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
    for (id, path) in [(1, "/pkg.Watch/Sub"), (3, "/pkg.Other/Sub")] {
        let mut req = vec![0x83, 0x86];
        lit(&mut req, ":path", path);
        lit(&mut req, "content-type", "application/grpc");
        feed(&mut t, C, &frame(HEADERS, EH, id, &req), &mut out);
        feed(&mut t, C, &frame(DATA, ES, id, &[0, 0, 0, 0, 0]), &mut out);
        let mut resp = vec![0x88];
        lit(&mut resp, "content-type", "application/grpc");
        feed(&mut t, S, &frame(HEADERS, EH, id, &resp), &mut out);
    }
    let g = |id, whole, resumable| GrpcStream {
        id,
        whole,
        resumable,
        sse: false,
        no_response: false,
    };
    assert_eq!(
        t.h2_grpc_streams(),
        GrpcStreams::Now(vec![g(1, true, true), g(3, true, false)])
    );
    assert_eq!(t.h2_stream_kind(3), Some(H2Kind::Grpc { resumable: false }));
    assert!(t.take_new_grpc(), "new gRPC responses are told once");
    assert!(!t.take_new_grpc());
    // One message of 6 bytes over two DATA frames, the second split between feeds.
    let (body, _) = messages(&[6]);
    let d1 = frame(DATA, 0, 1, &body[..7]);
    feed(&mut t, S, &d1[..9], &mut out);
    assert_eq!(
        t.server_unread_ahead(),
        0,
        "a followed stream's DATA is read"
    );
    feed(&mut t, S, &d1[9..], &mut out);
    assert_eq!(
        t.h2_grpc_streams(),
        GrpcStreams::Now(vec![g(1, false, true), g(3, true, false)])
    );
    let d2 = frame(DATA, 0, 1, &body[7..]);
    feed(&mut t, S, &d2[..10], &mut out);
    assert_eq!(t.h2_grpc_streams(), GrpcStreams::NotNow, "inside a frame");
    feed(&mut t, S, &d2[10..], &mut out);
    assert_eq!(
        t.h2_grpc_streams(),
        GrpcStreams::Now(vec![g(1, true, true), g(3, true, false)])
    );
    // Any gRPC stream's DATA is read (all are ended at drain_timeout).
    let other = frame(DATA, 0, 3, &[0, 0, 0, 0, 15]);
    feed(&mut t, S, &other[..9], &mut out);
    assert_eq!(t.server_unread_ahead(), 0);
    feed(&mut t, S, &other[9..], &mut out);
    assert_eq!(
        t.h2_grpc_streams(),
        GrpcStreams::Now(vec![g(1, true, true), g(3, false, false)])
    );
    assert_eq!(t.in_flight(), 2);
    assert!(t.h2_end_stream(1));
    assert!(!t.h2_end_stream(1));
    assert_eq!(t.in_flight(), 1);
    assert_eq!(
        t.h2_grpc_streams(),
        GrpcStreams::Now(vec![g(3, false, false)])
    );
    // What the client still sends on it opens nothing.
    feed(&mut t, C, &frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]), &mut out);
    assert_eq!(t.in_flight(), 1);
    assert_eq!(t.protocol(), Protocol::Http2);
}

/// HTTP/2 SSE (`move_http2_sse`): a 200 `text/event-stream` to a `GET` is followed (its DATA
/// read for event boundaries) and given as movable when its bytes so far end at a blank line,
/// whatever the frames' sizes; one to a `POST` is not; with `sse` false, none is (the blocks
/// still decoded, for gRPC).
#[test]
fn the_tracker_follows_an_sse_get_s_events_only_when_asked() {
    fn lit(b: &mut Vec<u8>, n: &str, v: &str) {
        b.push(0x00);
        b.push(n.len() as u8);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    for sse in [true, false] {
        let mut t = Tracker::new();
        t.decode_response_headers(Vec::new().into(), sse);
        let mut out = Vec::new();
        let mut pre = H2_PREFACE.to_vec();
        pre.extend(frame(SETTINGS, 0, 0, &[]));
        feed(&mut t, C, &pre, &mut out);
        feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
        // 0x82: `:method: GET`, 0x83: POST (static table); 0x84: `:path: /`.
        feed(
            &mut t,
            C,
            &frame(HEADERS, EH | ES, 1, &[0x82, 0x86, 0x84]),
            &mut out,
        );
        feed(
            &mut t,
            C,
            &frame(HEADERS, EH, 3, &[0x83, 0x86, 0x84]),
            &mut out,
        );
        feed(&mut t, C, &frame(DATA, ES, 3, b"{}"), &mut out);
        for id in [1, 3] {
            let mut resp = vec![0x88];
            lit(&mut resp, "content-type", "text/event-stream");
            feed(&mut t, S, &frame(HEADERS, EH, id, &resp), &mut out);
        }
        assert_eq!(t.h2_stream_kind(1), Some(H2Kind::Sse { movable: true }));
        assert_eq!(t.h2_stream_kind(3), Some(H2Kind::Sse { movable: false }));
        let s = |whole| GrpcStream {
            id: 1,
            whole,
            resumable: true,
            sse: true,
            no_response: false,
        };
        let want = |whole| GrpcStreams::Now(if sse { vec![s(whole)] } else { vec![] });
        assert_eq!(
            t.h2_grpc_streams(),
            want(true),
            "sse {sse}: before any byte"
        );
        assert_eq!(t.take_new_grpc(), sse);
        // One event over two DATA frames, the first split between feeds.
        let d1 = frame(DATA, 0, 1, b"data: a\n");
        feed(&mut t, S, &d1[..12], &mut out);
        assert_eq!(t.h2_grpc_streams(), GrpcStreams::NotNow, "inside a frame");
        feed(&mut t, S, &d1[12..], &mut out);
        assert_eq!(
            t.h2_grpc_streams(),
            want(false),
            "sse {sse}: inside an event"
        );
        feed(&mut t, S, &frame(DATA, 0, 1, b"\n"), &mut out);
        assert_eq!(t.h2_grpc_streams(), want(true), "sse {sse}: at a boundary");
        assert!(t.h2_end_stream(1));
        assert_eq!(t.h2_grpc_streams(), GrpcStreams::Now(vec![]));
    }
}

/// Item 4 of issue 65: a request under a resumable prefix with no response block yet is given
/// as movable with `no_response` (a Trailers-Only response ends it), and told as new once; once
/// its response headers are written it is a followed gRPC stream like any other.
#[test]
fn a_resumable_request_without_a_response_is_movable_with_trailers_only() {
    let mut t = Tracker::new();
    t.decode_response_headers(vec!["/pkg.Watch/".to_string()].into(), false);
    let mut out = Vec::new();
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(frame(SETTINGS, 0, 0, &[]));
    feed(&mut t, C, &pre, &mut out);
    feed(&mut t, S, &frame(SETTINGS, 0, 0, &[]), &mut out);
    for (id, path) in [(1, "/pkg.Watch/Sub"), (3, "/pkg.Other/Sub")] {
        let mut req = vec![0x83, 0x86, 0x00, 5];
        req.extend_from_slice(b":path");
        req.push(path.len() as u8);
        req.extend_from_slice(path.as_bytes());
        feed(&mut t, C, &frame(HEADERS, EH, id, &req), &mut out);
    }
    let g = |no_response| GrpcStream {
        id: 1,
        whole: true,
        resumable: true,
        sse: false,
        no_response,
    };
    assert_eq!(t.h2_grpc_streams(), GrpcStreams::Now(vec![g(true)]));
    assert!(t.take_new_grpc(), "a resumable request is told once");
    assert!(!t.take_new_grpc());
    let trailers_only = crate::exchange::grpc_trailers_only(1);
    assert_eq!(&trailers_only[3..5], &[HEADERS, ES | EH]);
    let resp = [
        0x88, 0x00, 12, b'c', b'o', b'n', b't', b'e', b'n', b't', b'-', b't', b'y', b'p', b'e', 16,
    ];
    let mut resp = resp.to_vec();
    resp.extend_from_slice(b"application/grpc");
    feed(&mut t, S, &frame(HEADERS, EH, 1, &resp), &mut out);
    assert_eq!(t.h2_grpc_streams(), GrpcStreams::Now(vec![g(false)]));
}
