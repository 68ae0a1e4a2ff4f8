//! Properties of the stream edits (docs/contributing/stream-edits.md), at the glue: random conversations are
//! driven through [`NetFilter`]'s read, write and scheduled hooks over [`Sim`], a host that does
//! to its buffers what Envoy does (edits a write's slices, replaces a read buffer, writes what is
//! injected), and what leaves is checked against a reference model: the bytes that came in, with
//! only the listed edits, at their listed boundaries. The glue's application of each edit
//! (`HeadEdit`, `WsWrite`, `WsWake`, the GOAWAY, the read replacement) is covered with them.
//!
//! Each case is drawn from one seed (a small generator below): the conversation, how the writes
//! and reads are cut and sliced, when the moves thread wakes the connection and how the clock
//! moves. Proptest keeps a failing seed.
//!
//! Files: this one (the generator, the simulated host and the world around a case), then one
//! per stream kind: `websocket`, `sse`, `http2`, `http1` (pipelined requests).

use crate::config::LongLivedSettings;
use crate::connections::{EVENT_DRAIN_STARTED, EVENT_GRACE_OVER, EVENT_LONG_LIVED};
use crate::engine::drain::Trigger;
use crate::exchange::websocket::{close_frame, GOING_AWAY};
use crate::network_filter::*;
use crate::testing::{fast, fixture, Fixture, HOSTS, STATS};
use crate::tracking::{CONNECTION_CLOSE, GOING_AWAY_REASON};
use proptest::prelude::*;
use std::time::Duration;

mod grpc;
mod h2sse;
mod http1;
mod http2;
mod sse;
mod websocket;

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

impl crate::host::extension::StatsHost for Sim<'_> {
    fn count(&self, stat: crate::engine::shared::Stat) {
        crate::host::extension::StatsHost::count(STATS, stat)
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
    type Stats = &'static crate::testing::FakeEnvoy;
    fn stats() -> Self::Stats {
        STATS
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
        let config = NetConfig::load(
            NetworkFilterConfig {
                idle_close_grace: Duration::from_millis(20),
                idle_after: Duration::ZERO,
                track_requests: true,
                long_lived: LongLivedSettings {
                    window: Duration::ZERO,
                    ..long_lived
                },
                grpc_resumable_prefixes: Vec::new(),
            },
            &fx.shared,
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
        NOW.with(|n| n.set(self.fx.shared.clock().nanos()));
    }

    fn advance(&self, nanos: u64) {
        self.fx.clock.advance(Duration::from_nanos(nanos));
        self.sync_clock();
    }

    fn now(&self) -> u64 {
        self.fx.shared.clock().nanos()
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
        self.f.on_destroy(self.shared(), STATS);
    }
}

fn long_lived(rng: &mut Rng) -> LongLivedSettings {
    LongLivedSettings {
        enabled: true,
        window: Duration::ZERO,
        close_timeout: Duration::from_millis(5 + rng.below(60) as u64),
        message_wait: Duration::from_millis(rng.below(30) as u64),
        http2_sse: true,
    }
}
