//! Properties of the stream edits (docs/stream-edits.md), at the glue: random conversations are
//! driven through [`NetFilter`]'s read, write and scheduled hooks over [`Sim`], a host that does
//! to its buffers what Envoy does (edits a write's slices, replaces a read buffer, writes what is
//! injected), and what leaves is checked against a reference model: the bytes that came in, with
//! only the listed edits, at their listed boundaries. The glue's application of each edit
//! (`HeadEdit`, `WsWrite`, `WsWake`, the GOAWAY, the read replacement) is covered with them.
//!
//! Each case is drawn from one seed (a small generator below): the conversation, how the writes
//! and reads are cut and sliced, when the moves thread wakes the connection and how the clock
//! moves. Proptest keeps a failing seed.

use super::*;
use crate::config::LongLivedSettings;
use crate::connections::{EVENT_DRAIN_STARTED, EVENT_GRACE_OVER, EVENT_LONG_LIVED};
use crate::engine::drain::Trigger;
use crate::engine::state::tests::{fast, fixture, Fixture};
use crate::exchange::websocket::{close_frame, GOING_AWAY};
use crate::tracking::{CONNECTION_CLOSE, GOING_AWAY_REASON};
use proptest::prelude::*;
use std::time::Duration;

std::thread_local! {
    /// `ConnectionHost::now_nanos`: the case's fake clock, as last read.
    static NOW: Cell<u64> = const { Cell::new(1) };
    /// Events committed to the connection's scheduler (`ConnectionHost::commit_scheduler`).
    static COMMITTED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

const MS: u64 = 1_000_000;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// splitmix64 over a seed: every random choice of a case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::connections::long_lived::splitmix64(self.0)
    }
    /// In `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn ascii(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| b'a' + self.below(26) as u8).collect()
    }
    fn ascii_below(&mut self, n: usize) -> Vec<u8> {
        let n = self.below(n);
        self.ascii(n)
    }
    /// `0..len` cut into pieces at up to `cuts` random points (each piece non-empty).
    fn cut(&mut self, len: usize, cuts: usize) -> Vec<(usize, usize)> {
        let mut at: Vec<usize> = (0..self.below(cuts + 1))
            .map(|_| self.below(len + 1))
            .filter(|&p| p > 0 && p < len)
            .collect();
        at.sort_unstable();
        at.dedup();
        at.push(len);
        let mut from = 0;
        at.into_iter()
            .filter(|&p| p > 0)
            .map(|p| (std::mem::replace(&mut from, p), p))
            .collect()
    }
    /// `bytes` as a write's slices: random cuts, each slice non-empty.
    fn slices(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.cut(bytes.len(), 3)
            .into_iter()
            .map(|(a, b)| bytes[a..b].to_vec())
            .collect()
    }
}

/// Envoy's side of the connection, as its filter's hooks see it: the write being handled (its
/// slices, edited as Envoy edits them), the read buffer (slices of the case's client bytes, so
/// that bytes left behind keep their addresses), and what reached the client and the upstream.
struct Sim<'a> {
    id: u64,
    open: Cell<bool>,
    write: RefCell<Vec<Vec<u8>>>,
    read: RefCell<Vec<&'a [u8]>>,
    /// What `replace_read` made of the read buffer in this read hook.
    replaced: RefCell<Option<Vec<u8>>>,
    /// Every byte written towards the client, in order (writes as edited, and injections).
    to_client: RefCell<Vec<u8>>,
    /// Injected writes: (offset in `to_client`, bytes).
    injected: RefCell<Vec<(usize, Vec<u8>)>>,
    /// `inject_read`: bytes sent towards the upstream as from the client.
    to_upstream: RefCell<Vec<u8>>,
    /// Why the module closed the connection, if it did.
    closed: RefCell<Option<Vec<u8>>>,
}

impl<'a> Sim<'a> {
    fn new(id: u64) -> Sim<'a> {
        COMMITTED.with(|c| c.borrow_mut().clear());
        Sim {
            id,
            open: Cell::new(true),
            write: RefCell::new(Vec::new()),
            read: RefCell::new(Vec::new()),
            replaced: RefCell::new(None),
            to_client: RefCell::new(Vec::new()),
            injected: RefCell::new(Vec::new()),
            to_upstream: RefCell::new(Vec::new()),
            closed: RefCell::new(None),
        }
    }

    fn flat_write(&self) -> Vec<u8> {
        self.write.borrow().concat()
    }
}

impl ConnectionHost for Sim<'_> {
    type Slices<'b> = std::vec::IntoIter<&'b [u8]>;

    fn id(&self) -> u64 {
        self.id
    }
    fn is_open(&self) -> bool {
        self.open.get()
    }
    fn new_scheduler(&self) -> Option<usize> {
        Some(0x5c)
    }
    fn commit_scheduler(_: usize, event: u64) {
        COMMITTED.with(|c| c.borrow_mut().push(event));
    }
    fn delete_scheduler(_: usize) {}
    fn with_read_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<Self::Slices<'b>>) -> R,
    ) -> R {
        let read = self.read.borrow();
        f(&|| Some(read.iter().map(|s| &s[..]).collect::<Vec<_>>().into_iter()))
    }
    fn with_write_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<Self::Slices<'b>>) -> R,
    ) -> R {
        let write = self.write.borrow();
        f(&|| Some(write.iter().map(|s| &s[..]).collect::<Vec<_>>().into_iter()))
    }
    fn replace_read(&self, keep: &[u8]) -> bool {
        *self.replaced.borrow_mut() = Some(keep.to_vec());
        true
    }
    fn replace_write_start(&self, n: usize, pieces: [&[u8]; 2]) -> bool {
        let flat = self.flat_write();
        let n = n.min(flat.len());
        *self.write.borrow_mut() = vec![[pieces[0], pieces[1], &flat[n..]].concat()];
        true
    }
    fn append_write(&self, bytes: &[u8]) -> bool {
        self.write.borrow_mut().push(bytes.to_vec());
        true
    }
    fn drain_write(&self, n: usize) -> bool {
        let flat = self.flat_write();
        *self.write.borrow_mut() = vec![flat[n.min(flat.len())..].to_vec()];
        true
    }
    fn inject_read(&self, bytes: &[u8]) {
        self.to_upstream.borrow_mut().extend_from_slice(bytes);
    }
    fn mask_key() -> [u8; 4] {
        [1, 2, 3, 4]
    }
    fn inject_write(&self, bytes: &[u8]) {
        let at = self.to_client.borrow().len();
        self.to_client.borrow_mut().extend_from_slice(bytes);
        self.injected.borrow_mut().push((at, bytes.to_vec()));
    }
    fn close(&self, details: &[u8]) {
        self.open.set(false);
        *self.closed.borrow_mut() = Some(details.to_vec());
    }
    fn close_no_flush(&self, details: &[u8]) {
        self.close(details)
    }
    fn wake_stream(&self, _: usize) {
        panic!("connection mode: no HTTP filter's stream to wake");
    }
    fn now_nanos() -> u64 {
        NOW.with(Cell::get)
    }
}

/// One case's module: its shared state (fake clock, engine installed), a listener config with
/// `long_lived` (window 0: every connection moves at the moves' start), and the filter of a
/// connection it opened.
struct World {
    fx: &'static Fixture,
    f: NetFilter,
    _config: NetConfig,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);

impl World {
    fn new(long_lived: LongLivedSettings, sim: &Sim) -> World {
        let fx: &'static Fixture = Box::leak(Box::new(fixture(Some(fast()))));
        let config = NetConfig::load::<Sim>(
            NetworkFilterConfig {
                idle_close_grace: Duration::from_millis(20),
                idle_after: Duration::ZERO,
                track_requests: true,
                long_lived: LongLivedSettings {
                    window: Duration::ZERO,
                    ..long_lived
                },
            },
            &fx.shared,
            || {},
        );
        let f = NetFilter::new(Some(&config), &fx.shared);
        let w = World {
            fx,
            f,
            _config: config,
        };
        w.sync_clock();
        w.f.on_new_connection(sim, &fx.shared);
        w
    }

    fn shared(&self) -> &'static Shared {
        &self.fx.shared
    }

    fn sync_clock(&self) {
        NOW.with(|n| n.set(self.fx.shared.clock.nanos()));
    }

    fn advance(&self, nanos: u64) {
        self.fx.clock.advance(Duration::from_nanos(nanos));
        self.sync_clock();
    }

    fn now(&self) -> u64 {
        self.fx.shared.clock.nanos()
    }

    /// A write of `bytes` in `slices` (their concatenation): what of it reached the client.
    fn write(&self, sim: &Sim, slices: Vec<Vec<u8>>) -> Vec<u8> {
        let len = slices.iter().map(Vec::len).sum();
        *sim.write.borrow_mut() = slices;
        let shared = self.shared();
        self.f.on_write(sim, len, || shared);
        let out = sim.flat_write();
        sim.to_client.borrow_mut().extend_from_slice(&out);
        out
    }

    /// A read hook over `slices`: what Envoy's filters after this one get.
    fn read<'a>(&self, sim: &Sim<'a>, slices: Vec<&'a [u8]>) -> Vec<u8> {
        let len = slices.iter().map(|s| s.len()).sum();
        let whole: Vec<u8> = slices.concat();
        *sim.read.borrow_mut() = slices;
        *sim.replaced.borrow_mut() = None;
        let shared = self.shared();
        self.f.on_read(sim, len, || shared);
        sim.replaced.borrow_mut().take().unwrap_or(whole)
    }

    /// The connection's scheduled hook with `event`, as Envoy runs it (not once closed).
    fn scheduled(&self, sim: &Sim, event: u64) {
        if self.f.may_reach_envoy() {
            self.f.on_scheduled(sim, event, self.shared());
        }
        if !sim.open.get() {
            self.f.on_event(true);
        }
    }

    fn has_committed(&self) -> bool {
        COMMITTED.with(|c| !c.borrow().is_empty())
    }

    /// The events committed to the connection's scheduler so far, run.
    fn run_committed(&self, sim: &Sim) {
        for e in COMMITTED.with(|c| std::mem::take(&mut *c.borrow_mut())) {
            self.scheduled(sim, e);
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.f.on_destroy(self.shared());
    }
}

fn long_lived(rng: &mut Rng) -> LongLivedSettings {
    LongLivedSettings {
        enabled: true,
        window: Duration::ZERO,
        close_timeout: Duration::from_millis(5 + rng.below(60) as u64),
        message_wait: Duration::from_millis(rng.below(30) as u64),
    }
}

// ---- WebSocket ----------------------------------------------------------------------------

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
    w.shared().connections.long_lived.begin_moves_at(from);
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
        .connections
        .long_lived
        .report()
        .websocket_messages_dropped;
    prop_assert_eq!(counted, dropped, "websocket_messages_dropped");
    Ok(())
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Property 1 (docs/stream-edits.md edits 3 and 4).
    #[test]
    fn websocket_close_goes_after_the_last_message_end_and_nothing_follows(seed in any::<u64>()) {
        websocket_case(seed)?;
    }
}

// ---- SSE ----------------------------------------------------------------------------------

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
    w.shared().connections.long_lived.begin_moves_at(from);
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

    /// Property 2 (docs/stream-edits.md edit 5).
    #[test]
    fn an_sse_get_ends_after_the_last_event_boundary_and_others_pass_unchanged(seed in any::<u64>()) {
        sse_case(seed)?;
    }
}

// ---- HTTP/2 -------------------------------------------------------------------------------

fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// One HTTP/2 connection with a drain at a random point: see [`http2_case`].
fn http2_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    // The client: its preface and SETTINGS, then requests (HEADERS, END_STREAM).
    let mut client = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2_frame(&mut client, 4, 0, 0, &[]);
    let preface_end = client.len();
    let streams = rng.below(6);
    let mut opened = Vec::new();
    for k in 0..streams {
        let n = 1 + rng.below(12);
        let block = rng.ascii(n);
        h2_frame(&mut client, 1, 0x5, 2 * k as u32 + 1, &block);
        opened.push(client.len());
    }
    // The server: its preface (SETTINGS), the ack, each stream's answer, PINGs and
    // WINDOW_UPDATEs between, sometimes Envoy's GOAWAY at a random point. Each frame needs
    // the client bytes up to `needs`.
    let mut server = Vec::new();
    let mut frame_ends = Vec::new();
    let mut needs = Vec::new();
    let mut push = |server: &mut Vec<u8>, f: &dyn Fn(&mut Vec<u8>), need: usize| {
        let start = server.len();
        f(server);
        frame_ends.push(server.len());
        needs.push((start, need));
    };
    push(&mut server, &|s| h2_frame(s, 4, 0, 0, &[]), preface_end);
    push(&mut server, &|s| h2_frame(s, 4, 1, 0, &[]), preface_end);
    let goaway_after = rng.chance(30).then(|| rng.below(streams + 1));
    let mut goaway_at = None;
    for k in 0..=streams {
        if goaway_after == Some(k) {
            goaway_at = Some(server.len());
            let last = (2 * k as u32).saturating_sub(1);
            let payload = [last.to_be_bytes(), 0u32.to_be_bytes()].concat();
            push(
                &mut server,
                &|s| h2_frame(s, 7, 0, 0, &payload),
                preface_end,
            );
        }
        if k == streams {
            break;
        }
        let id = 2 * k as u32 + 1;
        let need = opened.get(k).copied().unwrap_or(preface_end);
        if rng.chance(20) {
            let p = rng.ascii(8);
            push(&mut server, &|s| h2_frame(s, 6, 0, 0, &p), preface_end);
        }
        let datas = rng.below(3);
        let n = 1 + rng.below(8);
        let block = rng.ascii(n);
        let flags = if datas == 0 { 0x5 } else { 0x4 };
        push(&mut server, &|s| h2_frame(s, 1, flags, id, &block), need);
        for d in 0..datas {
            let n = rng.below(60);
            let p = rng.ascii(n);
            let flags = u8::from(d + 1 == datas);
            push(&mut server, &|s| h2_frame(s, 0, flags, id, &p), need);
            if rng.chance(20) {
                push(&mut server, &|s| h2_frame(s, 8, 0, 0, &[0, 0, 1, 0]), need);
            }
        }
    }
    let need_for = |b: usize| {
        needs
            .iter()
            .filter(|&&(start, _)| start < b)
            .map(|&(_, n)| n)
            .max()
            .unwrap_or(0)
    };

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(LongLivedSettings::default(), &sim);
    let writes = rng.cut(server.len(), 10);
    // The first read holds the magic prefix, in its first slice: Envoy's codec (AUTO) decides
    // the protocol on its first bytes, and the module as it does.
    let mut reads = rng.cut(client.len() - preface_end, 5);
    for r in &mut reads {
        *r = (r.0 + preface_end, r.1 + preface_end);
    }
    reads.insert(0, (0, preface_end));
    let (mut wi, mut ri, mut read, mut written) = (0, 0, 0, 0);
    let mut upstream = Vec::new();
    let mut draining = false;
    let mut injected = Vec::new();
    let wake =
        |w: &World, sim: &Sim, event: u64, written: usize, injected: &mut Vec<(usize, Vec<u8>)>| {
            let before = sim.injected.borrow().len();
            w.scheduled(sim, event);
            for (_, bytes) in sim.injected.borrow()[before..].iter() {
                injected.push((written, bytes.clone()));
            }
        };
    let mut steps = 0;
    while (wi < writes.len() || ri < reads.len()) && steps < 400 {
        steps += 1;
        match rng.below(8) {
            0..=2 if wi < writes.len() && need_for(writes[wi].1) <= read => {
                let (a, b) = writes[wi];
                wi += 1;
                let slices = rng.slices(&server[a..b]);
                prop_assert_eq!(w.write(&sim, slices), &server[a..b], "a write changed");
                written = b;
            }
            0..=3 if ri < reads.len() => {
                let (a, b) = reads[ri];
                ri += 1;
                let slices = match a {
                    0 => vec![&client[..b]],
                    _ => rng
                        .cut(b - a, 2)
                        .into_iter()
                        .map(|(x, y)| &client[a + x..a + y])
                        .collect(),
                };
                upstream.extend(w.read(&sim, slices));
                read = b;
            }
            4 if !draining => {
                draining = true;
                w.shared().start_drain(Trigger::Admin);
                wake(&w, &sim, EVENT_DRAIN_STARTED, written, &mut injected);
            }
            5 if draining => {
                w.advance(rng.below(30) as u64 * MS);
                wake(&w, &sim, EVENT_GRACE_OVER, written, &mut injected);
            }
            _ => {}
        }
    }
    // Liveness: every stream answered, the connection idle, a check well after the drain.
    if !draining {
        w.shared().start_drain(Trigger::Admin);
        wake(&w, &sim, EVENT_DRAIN_STARTED, written, &mut injected);
    }
    for _ in 0..2 {
        w.advance(50 * MS);
        wake(&w, &sim, EVENT_GRACE_OVER, written, &mut injected);
    }

    // The model.
    prop_assert_eq!(&upstream[..], &client[..], "client bytes changed");
    prop_assert!(injected.len() <= 1, "GOAWAYs: {:?}", injected);
    let mut expected = server.clone();
    if let Some((at, bytes)) = injected.first() {
        prop_assert_eq!(
            &bytes[..],
            &GOAWAY_NO_ERROR[..],
            "only the GOAWAY is injected"
        );
        prop_assert!(
            frame_ends.contains(at),
            "GOAWAY after byte {}: not between frames",
            at
        );
        prop_assert!(
            goaway_at.is_none_or(|g| *at <= g),
            "our GOAWAY after byte {}, Envoy's at {:?}",
            at,
            goaway_at
        );
        expected.splice(*at..*at, bytes.iter().copied());
    } else {
        prop_assert!(
            goaway_at.is_some_and(|g| g < written),
            "never told (written {} of {}, read {} of {}, Envoy's GOAWAY at {:?}, conn {:?})",
            written,
            server.len(),
            read,
            client.len(),
            goaway_at,
            w.f.conn.get()
        );
    }
    prop_assert!(
        sim.to_client.borrow()[..] == expected[..],
        "what reached the client"
    );
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    /// Property 4 (docs/stream-edits.md edit 2).
    #[test]
    fn our_goaway_goes_between_frames_after_the_preface_and_never_after_envoys(seed in any::<u64>()) {
        http2_case(seed)?;
    }
}

// ---- HTTP/1.1 pipelined requests ----------------------------------------------------------

/// One of Envoy's writes: what it wrote, what reached the client, and whether it starts a
/// response head (of the request `req`, `interim` for a 1xx).
#[derive(Debug)]
struct H1Write {
    req: usize,
    head: Option<HeadKind>,
    wrote: Vec<u8>,
    out: Vec<u8>,
    draining: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadKind {
    Interim,
    /// A final response; `close`: Envoy's own `connection: close` on it; `tunnel`: the 2xx
    /// to a CONNECT.
    Final {
        close: bool,
        tunnel: bool,
    },
}

/// A response's writes: (head kind if the write starts a head, bytes).
type Response = Vec<(Option<HeadKind>, Vec<u8>)>;

fn h1_response(rng: &mut Rng, post: bool, connect: bool) -> Response {
    let mut writes = Vec::new();
    if connect {
        let head = b"HTTP/1.1 200 Connection Established\r\n\r\n".to_vec();
        writes.push((
            Some(HeadKind::Final {
                close: false,
                tunnel: true,
            }),
            head,
        ));
        return writes;
    }
    if post && rng.chance(20) {
        writes.push((
            Some(HeadKind::Interim),
            b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
        ));
    }
    let close = rng.chance(10);
    let mut head = if rng.chance(15) {
        b"HTTP/1.1 204 No Content\r\n".to_vec()
    } else {
        b"HTTP/1.1 200 OK\r\n".to_vec()
    };
    let no_body = head.starts_with(b"HTTP/1.1 204");
    head.extend_from_slice(b"date: today\r\n");
    if close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    let body = if no_body {
        head.extend_from_slice(b"\r\n");
        Vec::new()
    } else if rng.chance(50) {
        let n = rng.below(40);
        head.extend(format!("content-length: {n}\r\n\r\n").into_bytes());
        rng.ascii(n)
    } else {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
        let mut body = Vec::new();
        for _ in 0..rng.below(3) {
            let n = 1 + rng.below(20);
            body.extend(format!("{n:x}\r\n").into_bytes());
            body.extend(rng.ascii(n));
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        body
    };
    // The head whole in its write (Envoy's codec), the body's first bytes with it or not.
    let with_head = rng.below(body.len() + 1);
    let kind = HeadKind::Final {
        close,
        tunnel: false,
    };
    writes.push((Some(kind), [&head[..], &body[..with_head]].concat()));
    for (a, b) in rng.cut(body.len() - with_head, 2) {
        writes.push((None, body[with_head + a..with_head + b].to_vec()));
    }
    writes
}

/// Envoy's side of an HTTP/1.1 connection: its read buffer (ranges of the client's bytes, so
/// that bytes left behind keep their addresses), its codec, its answers.
struct H1Envoy<'a, 'w> {
    rng: Rng,
    w: &'w World,
    sim: &'w Sim<'a>,
    client: &'a [u8],
    /// Where each request ends; which are POSTs; which Envoy answers at once (a local reply,
    /// within the read: its codec then reads on without the read hook).
    ends: Vec<usize>,
    posts: Vec<bool>,
    local: Vec<bool>,
    connect: bool,
    /// The client bytes sent so far, and those in Envoy's read buffer.
    arrived: usize,
    buf: Vec<(usize, usize)>,
    /// The client offset of the next byte Envoy's codec takes.
    codec: usize,
    serving: Option<(usize, Response)>,
    dispatched: Vec<usize>,
    tunnel: bool,
    envoy_closes: bool,
    writes: Vec<H1Write>,
    /// Where the module first held requests back.
    cut_at: Option<usize>,
}

impl H1Envoy<'_, '_> {
    fn buffered(&self) -> usize {
        self.buf.iter().map(|(a, b)| b - a).sum()
    }

    /// The client's bytes up to `to` reach Envoy's read buffer.
    fn arrive(&mut self, to: usize) {
        match self.buf.last_mut() {
            Some(r) if r.1 == self.arrived => r.1 = to,
            _ => self.buf.push((self.arrived, to)),
        }
        self.arrived = to;
        self.buf.retain(|(a, b)| a < b);
    }

    /// The read hook over Envoy's read buffer, then its codec.
    fn read(&mut self) -> Result<(), TestCaseError> {
        if self.buffered() == 0 {
            return Ok(());
        }
        // Each range in random slices, never starting at a request end (Envoy's 16 KiB slices
        // rarely do; the module loses a connection whose buffer starts where a slice of the
        // last one started).
        let mut slices: Vec<&[u8]> = Vec::new();
        for &(a, b) in &self.buf.clone() {
            let mut at: Vec<usize> = self
                .rng
                .cut(b - a, 2)
                .into_iter()
                .map(|(x, _)| a + x)
                .filter(|&x| x == a || !self.ends.contains(&x))
                .collect();
            at.push(b);
            slices.extend(at.windows(2).map(|p| &self.client[p[0]..p[1]]));
        }
        let whole: Vec<u8> = slices.concat();
        let got = self.w.read(self.sim, slices);
        prop_assert_eq!(&got[..], &whole[..got.len()], "a read changed");
        if got.len() < whole.len() {
            let (first, _) = self.buf[0];
            let at = first + got.len();
            prop_assert!(
                self.w.shared().is_draining(),
                "requests held back without a drain"
            );
            prop_assert!(
                self.cut_at.is_some() || got.is_empty() || self.ends.contains(&at),
                "requests held back from byte {}: not a request end",
                at
            );
            self.cut_at.get_or_insert(at);
            // Envoy's buffer is what the module kept.
            let mut left = got.len();
            let mut kept = Vec::new();
            for &(a, b) in &self.buf {
                let n = left.min(b - a);
                if n > 0 {
                    kept.push((a, a + n));
                }
                left -= n;
            }
            self.buf = kept;
        }
        self.run_codec()
    }

    /// Envoy's codec over its read buffer: one request at a time; a request answered at once
    /// lets it read on.
    fn run_codec(&mut self) -> Result<(), TestCaseError> {
        while self.serving.is_none() && !self.buf.is_empty() && self.sim.open.get() {
            let (a, b) = self.buf[0];
            prop_assert_eq!(
                a,
                self.codec,
                "Envoy's codec given bytes that are not the next"
            );
            if self.tunnel {
                self.codec = b;
                self.buf.remove(0);
                continue;
            }
            let Some(k) = self.ends.iter().position(|&e| e > a && e <= b) else {
                // A request on its way: the codec takes it all.
                self.codec = b;
                self.buf.remove(0);
                continue;
            };
            self.codec = self.ends[k];
            self.buf[0].0 = self.ends[k];
            self.buf.retain(|(a, b)| a < b);
            self.dispatched.push(k);
            let connect = self.connect && k + 1 == self.ends.len();
            let resp = h1_response(&mut self.rng, self.posts[k], connect);
            self.serving = Some((k, resp));
            if self.local[k] && !connect {
                while self.serving.is_some() && self.sim.open.get() {
                    self.write()?;
                }
            }
        }
        Ok(())
    }

    /// Envoy's next write of the response it is serving; at its end, it reads on (the bytes it
    /// left behind first, through the read hook) or closes (its own `close`).
    fn write(&mut self) -> Result<(), TestCaseError> {
        let Some((req, resp)) = self.serving.as_mut() else {
            return Ok(());
        };
        let req = *req;
        let (head, bytes) = resp.remove(0);
        let done = resp.is_empty();
        let slices = match head {
            // The status line whole in the first slice (edit 1 needs it there); the rest of
            // the head anywhere.
            Some(_) => {
                let line = bytes.iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
                let first = line + self.rng.below(bytes.len() - line + 1);
                let mut s = vec![bytes[..first].to_vec()];
                s.extend(self.rng.slices(&bytes[first..]));
                s
            }
            None => self.rng.slices(&bytes),
        };
        let out = self.w.write(self.sim, slices);
        self.writes.push(H1Write {
            req,
            head,
            wrote: bytes,
            out,
            draining: self.w.shared().is_draining(),
        });
        if let Some(HeadKind::Final { close, tunnel }) = head {
            self.envoy_closes |= close;
            self.tunnel |= tunnel;
        }
        if !done {
            return Ok(());
        }
        self.serving = None;
        if self.envoy_closes {
            // Envoy closes after a response of its own with `close`.
            self.sim.close(b"envoy");
            return Ok(());
        }
        if self.tunnel {
            // The client's tunnel bytes, now that it has the 2xx.
            let all = self.client.len();
            self.arrive(all);
        }
        Ok(())
    }
}

/// HTTP/1.1 requests pipelined on one connection, a drain at a random point, a CONNECT last
/// sometimes: see [`H1Envoy`] for Envoy's side. Its codec takes one request at a time: it
/// stops after a complete request, leaving the bytes behind it in its read buffer at their
/// addresses, and reads nothing more until it has answered it (then the read hook sees the
/// bytes left behind again), unless it answers at once (a local reply: it reads on within the
/// read); it closes after a response of its own with `close`; a CONNECT's 2xx opens a tunnel.
fn http1_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n = 1 + rng.below(5);
    let connect = rng.chance(15);
    let mut client = Vec::new();
    let (mut ends, mut posts, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..n {
        if connect && k + 1 == n {
            client.extend_from_slice(
                b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n",
            );
            posts.push(false);
        } else if rng.chance(40) {
            let body = rng.ascii_below(30);
            client.extend(
                format!(
                    "POST /p{k} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes(),
            );
            client.extend(body);
            posts.push(true);
        } else {
            client.extend(format!("GET /g{k} HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes());
            posts.push(false);
        }
        local.push(rng.chance(25));
        ends.push(client.len());
    }
    let requests_end = client.len();
    let tunnel_up = if connect {
        rng.ascii_below(60)
    } else {
        Vec::new()
    };
    client.extend_from_slice(&tunnel_up);
    // When the client sends: random arrivals of its requests.
    let arrivals = rng.cut(requests_end, 6);

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(LongLivedSettings::default(), &sim);
    let mut e = H1Envoy {
        rng,
        w: &w,
        sim: &sim,
        client: &client,
        ends,
        posts,
        local,
        connect,
        arrived: 0,
        buf: Vec::new(),
        codec: 0,
        serving: None,
        dispatched: Vec::new(),
        tunnel: false,
        envoy_closes: false,
        writes: Vec::new(),
        cut_at: None,
    };
    let (mut ai, mut draining, mut unread) = (0, false, false);
    let mut steps = 0;
    while steps < 600 && sim.open.get() {
        steps += 1;
        let can_arrive = ai < arrivals.len();
        // A read event: new bytes (not while Envoy reads nothing: a request being answered),
        // or the bytes left behind once Envoy reads again.
        let can_read = (e.serving.is_none() || e.tunnel) && unread;
        let can_write = e.serving.is_some();
        if !can_arrive && !can_read && !can_write {
            break;
        }
        match e.rng.below(6) {
            0 | 1 if can_arrive => {
                e.arrive(arrivals[ai].1);
                ai += 1;
                unread = true;
            }
            2 if can_read => {
                unread = false;
                e.read()?;
            }
            3 | 4 if can_write => {
                e.write()?;
                if e.serving.is_none() && e.buffered() > 0 {
                    // Envoy reads again: the bytes it left behind first.
                    unread = true;
                }
            }
            5 if !draining => {
                draining = true;
                w.shared().start_drain(Trigger::Admin);
                w.scheduled(&sim, EVENT_DRAIN_STARTED);
            }
            _ => {}
        }
    }
    let H1Envoy {
        writes,
        dispatched,
        cut_at,
        serving,
        arrived,
        ends,
        ..
    } = e;

    // The model, on the write side: Envoy's bytes, with `connection: close` after the status
    // line of at most one final response, not a tunnel's, not one that has it already.
    let mut told: Option<usize> = None;
    let mut expected = Vec::new();
    for wr in &writes {
        expected.extend_from_slice(&wr.wrote);
        if wr.out == wr.wrote {
            continue;
        }
        let line = wr.wrote.iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
        let edited = [&wr.wrote[..line], CONNECTION_CLOSE, &wr.wrote[line..]].concat();
        prop_assert_eq!(
            &wr.out,
            &edited,
            "a write changed other than by the close line"
        );
        prop_assert!(told.is_none(), "told twice");
        prop_assert_eq!(
            wr.head,
            Some(HeadKind::Final {
                close: false,
                tunnel: false
            }),
            "close on this head"
        );
        prop_assert!(wr.draining, "close before the drain");
        told = Some(wr.req);
        let at = expected.len() - wr.wrote.len() + line;
        expected.splice(at..at, CONNECTION_CLOSE.iter().copied());
    }
    prop_assert!(
        sim.to_client.borrow()[..] == expected[..],
        "what reached the client"
    );
    // On the read side: nothing behind a response that carries close reaches Envoy, and no
    // request is held back unless the client was told.
    let closing = writes
        .iter()
        .find(|wr| {
            matches!(wr.head, Some(HeadKind::Final { close: true, .. })) || told == Some(wr.req)
        })
        .map(|wr| wr.req);
    if let Some(k) = closing {
        prop_assert!(
            dispatched.iter().all(|&j| j <= k),
            "request dispatched behind the close of {}: {:?}",
            k,
            dispatched
        );
    }
    if let Some(at) = cut_at {
        prop_assert!(
            closing.is_some(),
            "requests held back from {} but no close",
            at
        );
    }
    // Nothing left hanging: every request sent was answered, or is behind a close.
    let sent = ends.iter().filter(|&&e| e <= arrived).count();
    if closing.is_none() && sim.open.get() && serving.is_none() && ai == arrivals.len() {
        prop_assert_eq!(
            dispatched.len(),
            sent,
            "requests neither answered nor closed on"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Property 3 (docs/stream-edits.md edit 1 and the hold-back of pipelined requests).
    #[test]
    fn connection_close_is_inserted_once_and_nothing_behind_it_reaches_envoy(seed in any::<u64>()) {
        http1_case(seed)?;
    }
}
