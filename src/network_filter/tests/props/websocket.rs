//! WebSocket moves: the Close after the last message end, nothing after it.

use super::*;

const UPGRADE: &[u8] =
    b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";
const SWITCHED: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n";

fn frame(out: &mut Vec<u8>, b0: u8, payload: &[u8], mask: Option<[u8; 4]>) {
    out.push(b0);
    let m = if mask.is_some() { 0x80 } else { 0 };
    if payload.len() < 126 {
        out.push(m | payload.len() as u8);
    } else {
        out.push(m | 126);
        out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
}

/// One direction's frames, with where each frame ends, where the stream is between messages,
/// and where each data message completes.
#[derive(Default)]
struct Frames {
    bytes: Vec<u8>,
    frame_ends: Vec<usize>,
    message_ends: Vec<usize>,
    completed: Vec<usize>,
    /// Where its Close frame starts, if it sends one.
    close_at: Option<usize>,
}

impl Frames {
    fn new() -> Frames {
        Frames {
            frame_ends: vec![0],
            message_ends: vec![0],
            ..Frames::default()
        }
    }

    fn control(&mut self, rng: &mut Rng, mask: Option<[u8; 4]>, in_message: bool) {
        let op = if rng.chance(50) { 0x89 } else { 0x8a };
        let n = rng.below(9);
        let payload = rng.ascii(n);
        frame(&mut self.bytes, op, &payload, mask);
        self.frame_ends.push(self.bytes.len());
        if !in_message {
            self.message_ends.push(self.bytes.len());
        }
    }

    /// Random messages (text or binary, 0-`max` bytes, some fragmented with control frames
    /// between fragments, RSV1 on first frames when `deflate`), control frames between them.
    fn messages(&mut self, rng: &mut Rng, n: usize, max: usize, deflate: bool, mask: bool) {
        let key = |rng: &mut Rng| mask.then(|| (rng.next() as u32).to_be_bytes());
        for _ in 0..n {
            if rng.chance(20) {
                let k = key(rng);
                self.control(rng, k, false);
            }
            let op = if rng.chance(50) { 1 } else { 2 };
            let total = rng.below(max + 1);
            let frags = 1 + rng.below(3);
            let mut cuts: Vec<usize> = (1..frags).map(|_| rng.below(total + 1)).collect();
            cuts.sort_unstable();
            cuts.push(total);
            let payload = rng.ascii(total);
            let mut from = 0;
            for (i, &to) in cuts.iter().enumerate() {
                let fin = i + 1 == cuts.len();
                let b0 = if fin { 0x80 } else { 0 }
                    | if deflate && i == 0 && rng.chance(50) {
                        0x40
                    } else {
                        0
                    }
                    | if i == 0 { op } else { 0 };
                let k = key(rng);
                frame(&mut self.bytes, b0, &payload[from..to], k);
                from = to;
                self.frame_ends.push(self.bytes.len());
                if fin {
                    self.message_ends.push(self.bytes.len());
                    self.completed.push(self.bytes.len());
                } else if rng.chance(25) {
                    let k = key(rng);
                    self.control(rng, k, true);
                }
            }
        }
    }

    /// Where its Close frame ends, if it sends one.
    fn close_end(&self) -> Option<usize> {
        self.close_at.map(|_| self.bytes.len())
    }

    fn close(&mut self, mask: Option<[u8; 4]>) {
        self.close_at = Some(self.bytes.len());
        self.bytes
            .extend_from_slice(close_frame(GOING_AWAY, "bye", mask).as_bytes());
        self.frame_ends.push(self.bytes.len());
        self.message_ends.push(self.bytes.len());
    }
}

/// What happened to the server's bytes, in order.
#[derive(Debug)]
enum WsEvent {
    /// The server's bytes `a..b` were written; `out` reached the client; at `now`.
    Written {
        a: usize,
        b: usize,
        out: Vec<u8>,
        now: u64,
    },
    /// The module wrote `bytes` from a wake-up, after the server's first `at` bytes.
    Injected { at: usize, bytes: Vec<u8>, now: u64 },
}

/// The events in short: `W{a}..{b}:{bytes out}`, `I@{at}`.
fn summary(events: &[WsEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            WsEvent::Written { a, b, out, .. } => format!("W{a}..{b}:{}", out.len()),
            WsEvent::Injected { at, .. } => format!("I@{at}"),
        })
        .collect()
}

/// The writes injected since the `before`th, after the server's first `at` bytes.
fn injected(sim: &Sim, before: usize, at: usize, now: u64, events: &mut Vec<WsEvent>) {
    for (_, bytes) in sim.injected.borrow()[before..].iter() {
        events.push(WsEvent::Injected {
            at,
            bytes: bytes.clone(),
            now,
        });
    }
}

/// One WebSocket conversation, moved at a random time: see [`websocket_case`].
fn websocket_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let deflate = rng.chance(30);
    let mut s = Frames::new();
    let n = rng.below(10);
    s.messages(&mut rng, n, 300, deflate, false);
    if rng.chance(8) {
        s.close(None);
    }
    let mut c = Frames::new();
    let n = rng.below(5);
    c.messages(&mut rng, n, 40, deflate, true);
    let client_closes_first = rng.chance(10);
    if client_closes_first {
        c.close(Some([9, 9, 9, 9]));
    }
    let settings = long_lived(&mut rng);
    let message_wait = settings.message_wait.as_nanos() as u64;
    let from = 1 + rng.below(60) as u64 * MS;
    // The client's bytes, with room for its answer to our Close.
    let answer = close_frame(GOING_AWAY, "", Some([5, 6, 7, 8]))
        .as_bytes()
        .to_vec();
    let answers = rng.chance(70) && !client_closes_first;
    let client_all: Vec<u8> = [&c.bytes[..], &answer[..]].concat();
    let our_close = close_frame(GOING_AWAY, GOING_AWAY_REASON, None)
        .as_bytes()
        .to_vec();

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(settings, &sim);
    w.shared().connections().long_lived().begin_moves_at(from);
    let mut head = SWITCHED.to_vec();
    if deflate {
        head.extend_from_slice(b"Sec-WebSocket-Extensions: permessage-deflate\r\n");
    }
    head.extend_from_slice(b"\r\n");
    prop_assert_eq!(w.read(&sim, vec![UPGRADE]), UPGRADE);
    prop_assert_eq!(w.write(&sim, vec![head.clone()]), head.clone());

    let writes = rng.cut(s.bytes.len(), 12);
    let mut reads = rng.cut(c.bytes.len(), 6);
    let (mut wi, mut ri) = (0, 0);
    let mut events = Vec::new();
    let mut upstream = Vec::new();
    // When the client's own Close (not an answer) was read: the events before it.
    let mut client_close_read = None;
    let mut answer_due = false;
    let mut first_due_wake = None;
    let mut written = 0;
    let mut steps = 0;
    while sim.open.get() && steps < 400 {
        steps += 1;
        let done = wi == writes.len() && ri == reads.len();
        if done {
            break;
        }
        match rng.below(7) {
            0..=2 if wi < writes.len() => {
                let (a, b) = writes[wi];
                wi += 1;
                let slices = rng.slices(&s.bytes[a..b]);
                let out = w.write(&sim, slices);
                written = b;
                events.push(WsEvent::Written {
                    a,
                    b,
                    out,
                    now: w.now(),
                });
            }
            3 if ri < reads.len() => {
                let (a, b) = reads[ri];
                ri += 1;
                let slices = rng
                    .cut(b - a, 2)
                    .into_iter()
                    .map(|(x, y)| &client_all[a + x..a + y])
                    .collect();
                upstream.extend(w.read(&sim, slices));
                if client_closes_first && b == c.bytes.len() {
                    client_close_read = Some(events.len());
                }
            }
            4 => {
                if first_due_wake.is_none() && w.now() >= from && w.has_committed() {
                    first_due_wake = Some(w.now());
                }
                let before = sim.injected.borrow().len();
                w.run_committed(&sim);
                injected(&sim, before, written, w.now(), &mut events);
            }
            _ => {
                w.advance(rng.below(15) as u64 * MS);
                if first_due_wake.is_none() && w.now() >= from {
                    first_due_wake = Some(w.now());
                }
                let before = sim.injected.borrow().len();
                w.scheduled(&sim, EVENT_LONG_LIVED);
                injected(&sim, before, written, w.now(), &mut events);
            }
        }
        // The client answers our Close once it has it (and has sent its frames before).
        if answers
            && !answer_due
            && ri == reads.len()
            && sim.to_client.borrow().ends_with(&our_close)
        {
            answer_due = true;
            reads.push((c.bytes.len(), client_all.len()));
        }
    }
    // Liveness: long after the move time, with every server byte written.
    for _ in 0..3 {
        if !sim.open.get() {
            break;
        }
        w.advance(from + message_wait + MS);
        if first_due_wake.is_none() {
            first_due_wake = Some(w.now());
        }
        let before = sim.injected.borrow().len();
        w.scheduled(&sim, EVENT_LONG_LIVED);
        injected(&sim, before, written, w.now(), &mut events);
    }

    // The model.
    let any_frame_ok = |now: u64| first_due_wake.is_some_and(|d| now >= d + message_wait);
    let last_in = |ends: &[usize], a: usize, b: usize| {
        ends.iter().copied().filter(|&e| e > a && e <= b).max()
    };
    let mut placed: Option<(usize, usize)> = None; // (M, event index)
    for (i, ev) in events.iter().enumerate() {
        match ev {
            WsEvent::Written { a, b, out, now } => {
                if placed.is_some() {
                    prop_assert!(out.is_empty(), "a server byte after our Close: {ev:?}");
                    continue;
                }
                if out[..] == s.bytes[*a..*b] {
                    continue;
                }
                prop_assert!(
                    out.ends_with(&our_close),
                    "a write changed other than by our Close: {ev:?}"
                );
                let k = a + out.len() - our_close.len();
                prop_assert_eq!(&out[..k - a], &s.bytes[*a..k], "the bytes before our Close");
                let by_message = last_in(&s.message_ends, *a, *b);
                let by_frame = last_in(&s.frame_ends, *a, *b);
                prop_assert!(
                    Some(k) == by_message || (Some(k) == by_frame && any_frame_ok(*now)),
                    "our Close after byte {} of the write {}..{}, not after its last message \
                     end {:?} (last frame end {:?}, any frame allowed: {})",
                    k,
                    a,
                    b,
                    by_message,
                    by_frame,
                    any_frame_ok(*now)
                );
                prop_assert!(*now >= from, "our Close before the move time");
                // (A Close whose frame is not whole in the write is not seen: ours goes before it,
                // as when it comes in the next write.)
                prop_assert!(
                    s.close_end().is_none_or(|sc| sc > *b),
                    "our Close after the server's: k {} a {} b {} sc {:?} len {} events {:?}",
                    k,
                    a,
                    b,
                    s.close_at,
                    s.bytes.len(),
                    summary(&events)
                );
                placed = Some((k, i));
            }
            WsEvent::Injected { at, bytes, now } => {
                prop_assert_eq!(bytes, &our_close, "only our Close is injected");
                prop_assert!(placed.is_none(), "a second Close");
                prop_assert!(
                    s.message_ends.contains(at)
                        || (s.frame_ends.contains(at) && any_frame_ok(*now)),
                    "our Close injected after byte {} of the server's: not a message end",
                    at
                );
                prop_assert!(*now >= from, "our Close before the move time");
                prop_assert!(
                    s.close_end().is_none_or(|sc| sc > *at),
                    "our Close after the server's: at {} server close at {:?}, len {}, events {:?}",
                    at,
                    s.close_at,
                    s.bytes.len(),
                    summary(&events)
                );
                placed = Some((*at, i));
            }
        }
    }
    if let (Some((_, i)), Some(j)) = (placed, client_close_read) {
        prop_assert!(i < j, "our Close after the client's own");
    }
    // What reached the client: the head, the server's bytes up to M, our Close, nothing after.
    let to_client = sim.to_client.borrow().clone();
    let expected = match placed {
        Some((m, _)) => [&head[..], &s.bytes[..m], &our_close[..]].concat(),
        None => [&head[..], &s.bytes[..written]].concat(),
    };
    prop_assert!(
        to_client == expected,
        "what reached the client: {} bytes, expected {} (placed {:?}, written {}, injected {:?}, events {:?})",
        to_client.len(),
        expected.len(),
        placed,
        written,
        sim.injected.borrow(),
        summary(&events)
    );
    // Liveness: moved, unless a Close was on its way before ours.
    if s.close_at.is_none() && client_close_read.is_none() && written == s.bytes.len() {
        prop_assert!(placed.is_some(), "never moved");
    }
    // Client -> upstream: unchanged, then at most the masked Close of the close timeout.
    let sent = &client_all[..reads.last().map_or(0, |r| r.1)];
    prop_assert_eq!(
        &upstream[..],
        &sent[..upstream.len()],
        "client bytes changed"
    );
    let told = sim.to_upstream.borrow().clone();
    if !told.is_empty() {
        let answer_read = answer_due && upstream.len() == client_all.len();
        prop_assert!(
            placed.is_some() && !answer_read,
            "the upstream told without cause"
        );
        prop_assert_eq!(
            told,
            crate::tracking::upstream_close(Sim::mask_key()),
            "the upstream's Close"
        );
        prop_assert!(
            c.frame_ends.contains(&upstream.len()),
            "between client frames"
        );
    }
    // Whole messages completed after our Close are counted dropped (at the close).
    let shared = w.shared();
    drop(w);
    let dropped = placed.map_or(0, |(m, _)| {
        s.completed
            .iter()
            .filter(|&&e| e > m && e <= written)
            .count()
    }) as u64;
    let counted = shared
        .connections()
        .long_lived()
        .report()
        .websocket_messages_dropped;
    prop_assert_eq!(counted, dropped, "websocket_messages_dropped");
    Ok(())
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Property 1 (docs/contributing/stream-edits.md edits 3 and 4).
    #[test]
    fn websocket_close_goes_after_the_last_message_end_and_nothing_follows(seed in any::<u64>()) {
        websocket_case(seed)?;
    }
}
