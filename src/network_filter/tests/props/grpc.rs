//! HTTP/2 gRPC moves (docs/contributing/stream-edits.md edit 6): what the client receives, decoded by a real
//! HPACK decoder (httlib-hpack), across random interleavings of the streams' frames, random
//! message framing and random slicing of the writes.

use super::*;
use crate::exchange::grpc_unavailable;
use httlib_hpack::{Decoder, Encoder};

fn frame(out: &mut Vec<u8>, ty: u8, flags: u8, id: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[ty, flags]);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A frame Envoy will write, its header block not encoded yet (Envoy's encoder encodes at
/// write time, so blocks are encoded in the order they go out).
enum Out {
    Headers(Vec<(Vec<u8>, Vec<u8>)>, bool),
    Data(Vec<u8>),
}

/// A header block's fields.
type Block = Vec<(Vec<u8>, Vec<u8>)>;
/// One stream's fields, by block, and DATA bytes, as the client decoded them.
type Seen = (Vec<Block>, Vec<u8>, bool);

fn grpc_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n = 1 + rng.below(4);
    let resumable: Vec<bool> = (0..n).map(|_| rng.chance(60)).collect();
    let finite: Vec<bool> = (0..n).map(|_| rng.chance(40)).collect();
    // The client: preface, SETTINGS, each stream's request (a block of literals, one message).
    let mut client = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut client, 4, 0, 0, &[]);
    for (k, r) in resumable.iter().enumerate() {
        let path: &[u8] = if *r {
            b"/pkg.Watch/Sub"
        } else {
            b"/pkg.Other/Call"
        };
        let mut block = Vec::new();
        for (name, value) in [
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", path),
            (b"content-type", b"application/grpc"),
        ] {
            block.extend_from_slice(&[0, name.len() as u8]);
            block.extend_from_slice(name);
            block.push(value.len() as u8);
            block.extend_from_slice(value);
        }
        let id = 2 * k as u32 + 1;
        frame(&mut client, 1, 0x4, id, &block);
        frame(&mut client, 0, 0x1, id, &[0, 0, 0, 0, 0]);
    }
    // Envoy: each stream's response headers, its messages over DATA frames of random sizes, and
    // trailers for the finite ones.
    let mut queues: Vec<std::collections::VecDeque<Out>> = Vec::new();
    let mut bodies = Vec::new();
    for (k, f) in finite.iter().enumerate() {
        let mut q = std::collections::VecDeque::new();
        let mut h = vec![
            (b":status".to_vec(), b"200".to_vec()),
            (b"content-type".to_vec(), b"application/grpc".to_vec()),
        ];
        if rng.chance(50) {
            let len = 1 + rng.below(10);
            h.push((b"x-stream".to_vec(), rng.ascii(len)));
        }
        q.push_back(Out::Headers(h, false));
        let mut body = Vec::new();
        for m in 0..rng.below(6) {
            let len = rng.below(40);
            body.push(0);
            body.extend_from_slice(&(len as u32).to_be_bytes());
            body.extend((0..len).map(|i| (i + m + k) as u8));
        }
        let mut at = 0;
        while at < body.len() {
            let step = (1 + rng.below(30)).min(body.len() - at);
            q.push_back(Out::Data(body[at..at + step].to_vec()));
            at += step;
        }
        if *f {
            q.push_back(Out::Headers(
                vec![(b"grpc-status".to_vec(), b"0".to_vec())],
                true,
            ));
        }
        queues.push(q);
        bodies.push(body);
    }

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(long_lived(&mut rng), &sim);
    w.shared()
        .connections()
        .long_lived()
        .note_grpc_prefixes(&["/pkg.Watch/".to_string()]);
    let upstream = w.read(&sim, vec![&client[..]]);
    prop_assert_eq!(&upstream[..], &client[..]);
    let mut preface = Vec::new();
    frame(&mut preface, 4, 0, 0, &[]);
    frame(&mut preface, 4, 1, 0, &[]);
    prop_assert_eq!(w.write(&sim, rng.slices(&preface)), preface);

    let mut enc = Encoder::with_dynamic_size(4096);
    let mut reset = vec![false; n];
    let mut sent: Vec<Vec<Block>> = vec![Vec::new(); n];
    let mut moving = false;
    // Envoy reads the RST_STREAMs the module sent it: their streams' frames are dropped before
    // they are encoded (nghttp2, docs/contributing/long-lived-streams.md H2-2).
    let note_resets = |reset: &mut Vec<bool>, queues: &mut Vec<std::collections::VecDeque<Out>>| {
        let up = sim.to_upstream.borrow();
        for f in up.chunks(13) {
            let id = u32::from_be_bytes([f[5], f[6], f[7], f[8]]);
            let k = (id as usize - 1) / 2;
            reset[k] = true;
            queues[k].clear();
        }
    };
    for _ in 0..200 {
        let open: Vec<usize> = (0..n).filter(|&k| !queues[k].is_empty()).collect();
        if open.is_empty() && moving {
            break;
        }
        match rng.below(6) {
            0..=3 if !open.is_empty() => {
                let mut bytes = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let open: Vec<usize> = (0..n).filter(|&k| !queues[k].is_empty()).collect();
                    if open.is_empty() {
                        break;
                    }
                    let k = open[rng.below(open.len())];
                    let id = 2 * k as u32 + 1;
                    match queues[k].pop_front() {
                        Some(Out::Headers(fields, end)) => {
                            let mut block = Vec::new();
                            for (name, value) in &fields {
                                let flags = rng.below(32) as u8;
                                enc.encode((name.clone(), value.clone(), flags), &mut block)
                                    .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                            }
                            frame(&mut bytes, 1, 0x4 | u8::from(end), id, &block);
                            sent[k].push(fields);
                        }
                        Some(Out::Data(d)) => frame(&mut bytes, 0, 0, id, &d),
                        None => {}
                    }
                }
                prop_assert_eq!(w.write(&sim, rng.slices(&bytes)), bytes, "a write changed");
            }
            _ => {
                if !moving {
                    moving = true;
                    w.shared().start_drain(HOSTS, Trigger::Admin);
                    w.shared()
                        .connections()
                        .long_lived()
                        .begin_moves_at(w.now());
                } else {
                    w.advance(10 * MS);
                }
                w.scheduled(&sim, EVENT_LONG_LIVED);
                note_resets(&mut reset, &mut queues);
            }
        }
    }
    // Every queued frame written, then the wake-ups until nothing is left to move.
    for _ in 0..3 {
        w.advance(10 * MS);
        w.scheduled(&sim, EVENT_LONG_LIVED);
        note_resets(&mut reset, &mut queues);
    }

    // What the client received, every block decoded by a real decoder in order.
    let to_client = sim.to_client.borrow().clone();
    let mut dec = Decoder::default();
    let mut seen: std::collections::BTreeMap<u32, Seen> = Default::default();
    let mut i = 0;
    while i < to_client.len() {
        prop_assert!(i + 9 <= to_client.len(), "a frame cut short at {}", i);
        let len =
            u32::from_be_bytes([0, to_client[i], to_client[i + 1], to_client[i + 2]]) as usize;
        let (ty, flags) = (to_client[i + 3], to_client[i + 4]);
        let id = u32::from_be_bytes([
            to_client[i + 5],
            to_client[i + 6],
            to_client[i + 7],
            to_client[i + 8],
        ]);
        prop_assert!(i + 9 + len <= to_client.len(), "a frame cut short at {}", i);
        let payload = &to_client[i + 9..i + 9 + len];
        i += 9 + len;
        if id == 0 {
            continue;
        }
        let s = seen.entry(id).or_default();
        prop_assert!(!s.2, "a frame on stream {} after its end", id);
        match ty {
            1 => {
                let mut buf = payload.to_vec();
                let mut fields = Vec::new();
                dec.decode(&mut buf, &mut fields)
                    .map_err(|e| TestCaseError::fail(format!("stream {id}: {e:?}")))?;
                s.0.push(fields.into_iter().map(|(n, v, _)| (n, v)).collect());
            }
            0 => s.1.extend_from_slice(payload),
            _ => prop_assert!(false, "frame type {} on stream {}", ty, id),
        }
        s.2 |= flags & 1 != 0;
    }
    let fields_of = |t: Vec<u8>| {
        let mut buf = t[9..].to_vec();
        let mut fields = Vec::new();
        Decoder::default().decode(&mut buf, &mut fields).unwrap();
        fields
            .into_iter()
            .map(|(n, v, _)| (n, v))
            .collect::<Vec<_>>()
    };
    let moved_trailers = fields_of(grpc_unavailable(1));
    let trailers_only = fields_of(crate::exchange::grpc_trailers_only(1));
    for k in 0..n {
        let id = 2 * k as u32 + 1;
        let (blocks, data, ended) = seen.get(&id).cloned().unwrap_or_default();
        let mut want = sent[k].clone();
        if reset[k] {
            prop_assert!(resumable[k], "stream {} moved, not resumable", id);
            // Moved before its response headers were written: a Trailers-Only response.
            want.push(if sent[k].is_empty() {
                trailers_only.clone()
            } else {
                moved_trailers.clone()
            });
        }
        prop_assert_eq!(&blocks, &want, "stream {}'s blocks", id);
        // Whole messages, a prefix of what the upstream sent.
        prop_assert!(bodies[k].starts_with(&data), "stream {}'s DATA", id);
        let mut m = crate::exchange::GrpcMessages::default();
        m.feed(&data);
        prop_assert!(m.at_boundary(), "stream {} ends inside a message", id);
        // Liveness: an endless resumable stream is moved.
        if resumable[k] && !finite[k] {
            prop_assert!(reset[k] && ended, "stream {} not moved", id);
        }
    }
    // Towards Envoy: RST_STREAM(CANCEL) frames only, one per moved stream.
    let up = sim.to_upstream.borrow();
    prop_assert_eq!(up.len(), 13 * reset.iter().filter(|r| **r).count());
    for f in up.chunks(13) {
        prop_assert_eq!(&f[..5], &[0, 0, 4, 3, 0][..]);
        prop_assert_eq!(&f[9..], &[0, 0, 0, 8][..]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    /// Edit 6 (docs/contributing/stream-edits.md): the trailers go in at frame ends where the stream's
    /// messages are whole, only for resumable streams, every block the client receives
    /// decodes in step, and each moved stream gets one RST_STREAM(CANCEL) towards Envoy.
    #[test]
    fn grpc_moves_keep_the_client_s_hpack_in_step_and_messages_whole(seed in any::<u64>()) {
        grpc_case(seed)?;
    }
}
