//! SSE ends: a GET after its last event boundary; everything else unchanged.

use super::*;

/// What happened to an SSE response's body bytes, in order.
#[derive(Debug)]
enum SseEvent {
    /// The server's body bytes `a..b` were written; `out` reached the client; at `now`.
    Written {
        a: usize,
        b: usize,
        out: Vec<u8>,
        now: u64,
    },
    /// The module wrote `bytes` from a wake-up, after the body's first `at` bytes.
    Injected { at: usize, bytes: Vec<u8>, now: u64 },
    /// The module closed the connection, after the body's first `at` bytes.
    Closed { at: usize },
}

/// One event-stream response (a GET or a POST, chunked or close-delimited, sometimes with a
/// `Content-Encoding`), moved at a random time: see [`sse_case`].
fn sse_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let get = rng.chance(75);
    let chunked = rng.chance(65);
    let encoded = rng.chance(10);
    let request: &[u8] = match (get, chunked) {
        (true, true) => b"GET /events HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n",
        (true, false) => b"GET /events HTTP/1.0\r\nhost: x\r\naccept: text/event-stream\r\n\r\n",
        (false, true) => b"POST /v1/chat HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
        (false, false) => b"POST /v1/chat HTTP/1.0\r\ncontent-length: 2\r\n\r\n{}",
    };
    let mut head: Vec<u8> = if chunked {
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            .to_vec()
    } else {
        b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n".to_vec()
    };
    if encoded {
        head.extend_from_slice(b"content-encoding: identity\r\n");
    }
    head.extend_from_slice(b"\r\n");
    // The events, and where each ends in the payload.
    let mut payload = Vec::new();
    let mut boundaries = vec![0];
    for _ in 0..rng.below(10) {
        let eol: &[u8] = if rng.chance(30) { b"\r\n" } else { b"\n" };
        if rng.chance(30) {
            payload.extend_from_slice(b"id: ");
            payload.extend(rng.ascii(3));
            payload.extend_from_slice(eol);
        }
        for _ in 0..1 + rng.below(3) {
            payload.extend_from_slice(b"data: ");
            let n = rng.below(40);
            payload.extend(rng.ascii(n));
            payload.extend_from_slice(eol);
        }
        payload.extend_from_slice(eol);
        // After the blank line's LF only: never between its CR and LF (a body ended there is
        // an unfinished event to a client that splits on `\r\n\r\n`; `sse::Events`).
        boundaries.push(payload.len());
    }
    // The body, and where it may end: at an event boundary (at a chunk start, chunked).
    let (body, ends) = if chunked {
        let mut cuts: Vec<usize> = boundaries
            .iter()
            .copied()
            .filter(|_| rng.chance(50))
            .collect();
        cuts.extend(rng.cut(payload.len(), 6).into_iter().map(|(_, b)| b));
        cuts.push(payload.len());
        cuts.sort_unstable();
        cuts.dedup();
        let (mut body, mut ends, mut from) = (Vec::new(), vec![0], 0);
        for to in cuts.into_iter().filter(|&c| c > 0) {
            body.extend(format!("{:x}\r\n", to - from).into_bytes());
            body.extend_from_slice(&payload[from..to]);
            body.extend_from_slice(b"\r\n");
            if boundaries.contains(&to) {
                ends.push(body.len());
            }
            from = to;
        }
        (body, ends)
    } else {
        (payload.clone(), boundaries.clone())
    };
    let term: &[u8] = if chunked {
        crate::exchange::sse::LAST_CHUNK
    } else {
        b""
    };
    let from = 1 + rng.below(60) as u64 * MS;
    let settings = long_lived(&mut rng);

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(settings, &sim);
    w.shared().connections().long_lived().begin_moves_at(from);
    prop_assert_eq!(w.read(&sim, vec![request]), request);
    prop_assert_eq!(w.write(&sim, vec![head.clone()]), head.clone());
    let cuts = 2 + rng.below(10);
    let writes = rng.cut(body.len(), cuts);
    let (mut wi, mut written, mut events) = (0, 0, Vec::new());
    let wake = |w: &World, sim: &Sim, written: usize, events: &mut Vec<SseEvent>, run: bool| {
        let before = sim.injected.borrow().len();
        if run {
            w.run_committed(sim);
        } else {
            w.scheduled(sim, EVENT_LONG_LIVED);
        }
        for (_, bytes) in sim.injected.borrow()[before..].iter() {
            events.push(SseEvent::Injected {
                at: written,
                bytes: bytes.clone(),
                now: w.now(),
            });
        }
        if !sim.open.get() {
            events.push(SseEvent::Closed { at: written });
        }
    };
    while sim.open.get() && wi < writes.len() {
        match rng.below(6) {
            0..=2 => {
                let (a, b) = writes[wi];
                wi += 1;
                let slices = rng.slices(&body[a..b]);
                let out = w.write(&sim, slices);
                written = b;
                events.push(SseEvent::Written {
                    a,
                    b,
                    out,
                    now: w.now(),
                });
            }
            3 => wake(&w, &sim, written, &mut events, true),
            _ => {
                w.advance(rng.below(15) as u64 * MS);
                wake(&w, &sim, written, &mut events, false);
            }
        }
    }
    // Liveness: long after the move time, with every byte written.
    for _ in 0..3 {
        if sim.open.get() {
            w.advance(from + 20 * MS);
            wake(&w, &sim, written, &mut events, false);
        }
        if sim.open.get() {
            wake(&w, &sim, written, &mut events, true);
        }
    }

    // The model.
    let last_in = |a: usize, b: usize| ends.iter().copied().filter(|&e| e > a && e <= b).max();
    let mut ended: Option<usize> = None;
    for ev in &events {
        match ev {
            SseEvent::Written { a, b, out, now } => {
                if ended.is_some() {
                    prop_assert!(out.is_empty(), "a byte after the end: {:?}", ev);
                    continue;
                }
                if out[..] == body[*a..*b] {
                    continue;
                }
                if out.is_empty() && !chunked {
                    // Ended at the previous write's end, without a byte to add.
                    prop_assert!(
                        ends.contains(a),
                        "closed after byte {}: not an event end",
                        a
                    );
                    ended = Some(*a);
                    continue;
                }
                prop_assert!(out.ends_with(term), "a write changed: {:?}", ev);
                let k = a + out.len() - term.len();
                prop_assert_eq!(&out[..k - a], &body[*a..k], "the bytes before the end");
                prop_assert_eq!(
                    Some(k),
                    last_in(*a, *b),
                    "the end after byte {} of the write {}..{}: not its last event end",
                    k,
                    a,
                    b
                );
                prop_assert!(*now >= from, "ended before the move time");
                ended = Some(k);
            }
            SseEvent::Injected { at, bytes, now } => {
                prop_assert!(ended.is_none(), "a second end");
                prop_assert_eq!(&bytes[..], term, "only the last chunk is written");
                prop_assert!(
                    ends.contains(at),
                    "ended after byte {}: not an event end",
                    at
                );
                prop_assert!(*now >= from, "ended before the move time");
                ended = Some(*at);
            }
            SseEvent::Closed { at } => {
                if ended.is_none() {
                    prop_assert!(!chunked, "a chunked response closed without its last chunk");
                    prop_assert!(
                        ends.contains(at),
                        "closed after byte {}: not an event end",
                        at
                    );
                    ended = Some(*at);
                }
            }
        }
    }
    let to_client = sim.to_client.borrow().clone();
    let expected = match ended {
        Some(e) => [&head[..], &body[..e], term].concat(),
        None => [&head[..], &body[..written]].concat(),
    };
    prop_assert!(
        to_client == expected,
        "what reached the client: {} bytes, expected {} (ended {:?}, events {:?})",
        to_client.len(),
        expected.len(),
        ended,
        events
    );
    let closed = sim.closed.borrow().clone();
    if get && !encoded {
        prop_assert!(ended.is_some(), "never ended");
        prop_assert_eq!(closed, Some(b"graceful_drain_long_lived_moved".to_vec()));
    } else {
        prop_assert_eq!(ended, None, "a POST or an encoded body was ended");
        prop_assert_eq!(closed, None);
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Property 2 (docs/contributing/stream-edits.md edit 5).
    #[test]
    fn an_sse_get_ends_after_the_last_event_boundary_and_others_pass_unchanged(seed in any::<u64>()) {
        sse_case(seed)?;
    }
}
