//! The network filter's lifecycle against a fake connection: what each hook asks of the host,
//! and what it counts.

/// The stream edits' property tests, driven through the hooks (`props/mod.rs` says how).
mod props;

use super::*;
use crate::connections::{EVENT_CONFIRM_CLOSE, EVENT_DRAIN_STARTED};
use crate::testing::{counted, fixture, STATS};
use std::time::Duration;

std::thread_local! {
    /// What the fake connections of this thread were asked, in order.
    static CALLS: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
    /// The fake clock (`ConnectionHost::now_nanos`), set by the last `FakeConnection::new`.
    static CLOCK: Cell<u64> = const { Cell::new(0) };
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    NewScheduler,
    Commit(usize, u64),
    DeleteScheduler(usize),
    InjectWrite(Vec<u8>),
    Close(Vec<u8>),
    WakeStream(usize),
    ReplaceWriteStart(usize),
    ReplaceRead(Vec<u8>),
    AppendWrite(Vec<u8>),
    DrainWrite(usize),
    InjectRead(Vec<u8>),
}

fn record(c: Call) {
    CALLS.with(|calls| calls.borrow_mut().push(c));
}

fn take_calls() -> Vec<Call> {
    CALLS.with(|calls| std::mem::take(&mut *calls.borrow_mut()))
}

/// One connection as a hook sees it: its id, whether it is open, the bytes of the read or
/// write being handled.
struct FakeConnection {
    id: u64,
    open: bool,
    bytes: &'static [u8],
}

/// The fake connections' schedulers as the drain side reaches them: recorded as the hooks'
/// own commits are.
struct FakeSchedulers;

impl crate::host::connection::ConnectionWakers for FakeSchedulers {
    fn commit(&self, scheduler: usize, event: u64) {
        FakeConnection::commit_scheduler(scheduler, event)
    }
}

impl FakeConnection {
    const WAKERS: FakeSchedulers = FakeSchedulers;

    /// In a hook that runs at `now`.
    fn new(bytes: &'static [u8], now: u64) -> FakeConnection {
        CLOCK.with(|c| c.set(now));
        FakeConnection {
            id: 7,
            open: true,
            bytes,
        }
    }
}

type Slices<'b> = std::iter::Once<&'b [u8]>;

impl crate::host::extension::StatsHost for FakeConnection {
    fn count(&self, stat: crate::engine::shared::Stat) {
        crate::host::extension::StatsHost::count(STATS, stat)
    }
}

impl ConnectionHost for FakeConnection {
    type Slices<'b> = Slices<'b>;

    fn id(&self) -> u64 {
        self.id
    }
    fn is_open(&self) -> bool {
        self.open
    }
    fn new_scheduler(&self) -> Option<usize> {
        record(Call::NewScheduler);
        Some(0x5c)
    }
    fn commit_scheduler(scheduler: usize, event: u64) {
        record(Call::Commit(scheduler, event));
    }
    fn delete_scheduler(scheduler: usize) {
        record(Call::DeleteScheduler(scheduler));
    }
    fn with_read_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<Slices<'b>>) -> R,
    ) -> R {
        f(&|| Some(std::iter::once(self.bytes)))
    }
    fn with_write_slices<R>(
        &self,
        f: impl for<'b> FnOnce(&'b dyn Fn() -> Option<Slices<'b>>) -> R,
    ) -> R {
        f(&|| Some(std::iter::once(self.bytes)))
    }
    fn replace_read(&self, keep: &[u8]) -> bool {
        record(Call::ReplaceRead(keep.to_vec()));
        true
    }
    fn replace_write_start(&self, n: usize, _pieces: [&[u8]; 2]) -> bool {
        record(Call::ReplaceWriteStart(n));
        true
    }
    fn inject_write(&self, bytes: &[u8]) {
        record(Call::InjectWrite(bytes.to_vec()));
    }
    fn append_write(&self, bytes: &[u8]) -> bool {
        record(Call::AppendWrite(bytes.to_vec()));
        true
    }
    fn drain_write(&self, n: usize) -> bool {
        record(Call::DrainWrite(n));
        true
    }
    fn inject_read(&self, bytes: &[u8]) {
        record(Call::InjectRead(bytes.to_vec()));
    }
    type Stats = &'static crate::testing::FakeEnvoy;
    fn stats() -> Self::Stats {
        STATS
    }

    fn mask_key() -> [u8; 4] {
        [1, 2, 3, 4]
    }
    fn close(&self, details: &[u8]) {
        record(Call::Close(details.to_vec()));
    }
    fn close_no_flush(&self, details: &[u8]) {
        record(Call::Close(details.to_vec()));
    }
    fn wake_stream(&self, word: usize) {
        record(Call::WakeStream(word));
    }
    fn now_nanos() -> u64 {
        CLOCK.with(Cell::get)
    }
}

/// A fresh shared state (leaked: a connection's slot needs it `'static`) and a listener's
/// config loaded into it.
fn load(track_requests: bool) -> (&'static Shared, NetConfig) {
    let shared = &Box::leak(Box::new(fixture(None))).shared;
    take_calls();
    let config = NetConfig::load(
        NetworkFilterConfig {
            idle_close_grace: Duration::from_secs(2),
            idle_after: Duration::ZERO,
            track_requests,
            long_lived: Default::default(),
            grpc_resumable_prefixes: Vec::new(),
        },
        shared,
    );
    (shared, config)
}

/// A filter of `config` whose connection Envoy just set up.
fn open(config: &NetConfig, shared: &'static Shared) -> NetFilter {
    let f = NetFilter::new(Some(config), shared);
    f.on_new_connection(&FakeConnection::new(b"", 0), shared);
    f
}

/// The client's `request` read and the server's `response` written, at `now`.
fn exchange(
    f: &NetFilter,
    shared: &'static Shared,
    request: &'static [u8],
    response: &'static [u8],
    now: u64,
) {
    f.on_read(&FakeConnection::new(request, now), request.len(), || shared);
    f.on_write(&FakeConnection::new(response, now), response.len(), || {
        shared
    });
}

const NOW: u64 = 1_000_000_000;

#[test]
fn a_new_connection_gets_a_waker_which_its_destroy_deletes() {
    let (shared, config) = load(false);
    let f = open(&config, shared);
    assert_eq!(take_calls(), [Call::NewScheduler]);
    assert_eq!(shared.connections().wakers_in_table(), 1);
    assert_eq!(
        shared
            .connections()
            .wake_all(&FakeConnection::WAKERS, EVENT_DRAIN_STARTED),
        1
    );
    assert_eq!(take_calls(), [Call::Commit(0x5c, EVENT_DRAIN_STARTED)]);
    f.on_destroy(shared, STATS);
    assert_eq!(take_calls(), [Call::DeleteScheduler(0x5c)]);
    assert!(shared.connections().wakers_in_table() == 0);
}

#[test]
fn an_idle_http2_connection_is_sent_goaway_and_counted_as_told() {
    let (shared, config) = load(false);
    let f = open(&config, shared);
    exchange(
        &f,
        shared,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        b"\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        NOW,
    );
    take_calls();
    f.on_scheduled(&FakeConnection::new(b"", NOW), EVENT_DRAIN_STARTED, shared);
    assert_eq!(take_calls(), [Call::InjectWrite(GOAWAY_NO_ERROR.to_vec())]);
    assert_eq!(counted(), [Stat::IdleTold(Protocol::Http2)]);
    f.on_destroy(shared, STATS);
}

#[test]
fn an_idle_followed_http1_connection_is_closed_at_the_confirmation() {
    let (shared, config) = load(true);
    let f = open(&config, shared);
    exchange(
        &f,
        shared,
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        NOW,
    );
    take_calls();
    let host = FakeConnection::new(b"", 2 * NOW);
    f.on_scheduled(&host, EVENT_DRAIN_STARTED, shared);
    assert_eq!(take_calls(), [], "a check only marks");
    f.on_scheduled(&host, EVENT_CONFIRM_CLOSE, shared);
    assert_eq!(
        take_calls(),
        [Call::Close(b"graceful_drain_idle_close".to_vec())]
    );
    assert!(counted().contains(&Stat::IdleTold(Protocol::Http1)));
    f.on_destroy(shared, STATS);
}

#[test]
fn a_busy_connection_is_sent_away_through_its_latest_stream() {
    let (shared, config) = load(false);
    let f = open(&config, shared);
    f.on_read(&FakeConnection::new(b"", NOW), 40, || shared);
    let mut mark = shared.connections().stream_started(|| Some(7));
    assert!(mark.reached_by_connection());
    mark.attach(0x1234);
    take_calls();
    f.on_scheduled(&FakeConnection::new(b"", NOW), EVENT_DRAIN_STARTED, shared);
    assert_eq!(take_calls(), [Call::WakeStream(0x1234)]);
    assert_eq!(counted(), [], "busy: not told idle");
    crate::connections::stream_ended(mark, || NOW);
    f.on_destroy(shared, STATS);
}

#[test]
fn nothing_is_done_to_a_connection_no_longer_open_or_closed() {
    let (shared, config) = load(false);
    let f = open(&config, shared);
    exchange(
        &f,
        shared,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        NOW,
    );
    take_calls();
    let closing = FakeConnection {
        open: false,
        ..FakeConnection::new(b"", NOW)
    };
    f.on_scheduled(&closing, EVENT_DRAIN_STARTED, shared);
    assert_eq!(take_calls(), []);
    assert!(f.may_reach_envoy());
    f.on_event(false);
    assert!(f.may_reach_envoy(), "not a close");
    f.on_event(true);
    assert!(
        !f.may_reach_envoy(),
        "closed: no host is made for it any more"
    );
    f.on_destroy(shared, STATS);
}

/// The reduced surface of an untested Envoy (issue 63 item 6): a config loaded with the data
/// path stepped back notes nothing (the drain goes by Envoy's own stats), and its filter asks
/// nothing of the host, whatever its connection carries and whatever the drain does: no
/// scheduler, no GOAWAY, no close, no edit of a write. The same steps on the full surface do.
#[test]
fn a_stepped_back_filter_passes_every_byte_and_asks_nothing_of_its_connection() {
    use crate::host::envoy_release::{release_verdict, EnvoyRelease, OnUntested};
    let newer = Some(EnvoyRelease {
        minor: 41,
        patch: 0,
        dev: false,
    });
    for (policy, stepped_back) in [(OnUntested::Reduced, true), (OnUntested::Full, false)] {
        let shared = &Box::leak(Box::new(fixture(None))).shared;
        shared.set_standing(release_verdict(newer, policy, "").unwrap());
        assert_eq!(shared.data_path_stepped_back(), stepped_back);
        take_calls();
        let config = NetConfig::load(
            NetworkFilterConfig {
                idle_close_grace: Duration::from_secs(2),
                idle_after: Duration::ZERO,
                track_requests: true,
                long_lived: Default::default(),
                grpc_resumable_prefixes: Vec::new(),
            },
            shared,
        );
        assert_eq!(
            shared.count_is_exact(),
            !stepped_back,
            "{policy:?}: stepped back, the module's count is not the drain's"
        );
        let f = open(&config, shared);
        exchange(
            &f,
            shared,
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
            b"\x00\x00\x00\x04\x00\x00\x00\x00\x00",
            NOW,
        );
        f.on_scheduled(&FakeConnection::new(b"", NOW), EVENT_DRAIN_STARTED, shared);
        f.on_destroy(shared, STATS);
        let calls = take_calls();
        if stepped_back {
            assert_eq!(calls, [], "{policy:?}");
            assert_eq!(counted(), [], "{policy:?}");
            assert!(shared.connections().wakers_in_table() == 0);
        } else {
            assert!(
                calls.contains(&Call::NewScheduler)
                    && calls.contains(&Call::InjectWrite(GOAWAY_NO_ERROR.to_vec())),
                "{policy:?}: {calls:?}"
            );
        }
        assert_eq!(config.counts_requests(), !stepped_back, "{policy:?}");
    }
}
