//! One downstream connection's state machine ([`Conn`]): what it speaks, its streams, and what
//! each scheduled event asks of its network filter ([`Action`]). Atomics, Relaxed: every
//! decision is taken on its worker; teardown may happen elsewhere (see [`super`]).

#[cfg(feature = "cross-check")]
use super::cross_check::CrossCheck;
use super::{
    get, set, Action, ConnSettings, Connections, Counts, FirstStream, GoAwayGate, Scheduled, Wire,
    CONFIRM_DELAY, EVENT_CONFIRM_CLOSE, EVENT_DRAIN_STARTED, EVENT_GRACE_OVER, H2_MAGIC_PREFIX,
};
use crate::counting::{Lane, ReservedSlot};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

/// One downstream connection. Written by its worker thread; atomics (all Relaxed: every
/// decision is taken on that worker) only because teardown may happen elsewhere (module doc).
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    wire: AtomicU8,
    /// The server wrote bytes (for HTTP/2: its preface went first, so frames may follow).
    server_wrote: AtomicBool,
    /// HTTP streams in flight, as reported by the HTTP filter.
    streams: AtomicU32,
    /// HTTP/2 whose client has sent only connection-level frames so far (no HEADERS: it never
    /// opened a stream), as [`FirstStream`] follows them. Idle whatever filters the listener has.
    h2_streamless: AtomicBool,
    /// The glue must still look at the bytes read (the protocol is unknown, or an HTTP/2 client
    /// has not opened a stream yet): one load on the read path decides.
    following: AtomicBool,
    /// The HTTP filter reported at least one stream: it is in the chain, so `streams` is exact.
    tracked: AtomicBool,
    /// Bytes were read since the connection last had no stream (a request may be on its way
    /// through the codec without a stream yet).
    read_since_idle: AtomicBool,
    /// This module told the client (GOAWAY sent, or closed).
    told: AtomicBool,
    closed_by_us: AtomicBool,
    /// When the last stream ended (`StreamSink::now_nanos`); meaningful once tracked.
    idle_since: AtomicU64,
    /// Marked idle by a check; closed by the confirmation if still idle with the same
    /// `idle_since` (0 = not marked).
    candidate_since: AtomicU64,
    /// Its network filter was destroyed ([`super::unregister`]).
    pub(super) gone: AtomicBool,
    /// Its exchange tracker lost the thread of the bytes (`crate::tracking`): how many requests
    /// are in flight on it is no longer known, so it is never idle (never closed early).
    untracked: AtomicBool,
    /// An exchange tracker follows it (connection mode).
    pub(super) followed: AtomicBool,
    /// Test-only: the tracker's count beside the HTTP filter's ([`CrossCheck`]).
    #[cfg(feature = "cross-check")]
    pub(super) xc: CrossCheck,
    /// The network filter has a scheduler: a drain start reaches this connection's requests.
    pub(super) wakeable: AtomicBool,
    /// The HTTP filter's latest request on it still in flight, as the word it attached (0: none).
    /// Written and read on the connection's worker only.
    pub(super) stream: AtomicUsize,
    /// Whether a GOAWAY of ours may go now ([`GoAwayGate`] as a byte), set by the glue.
    goaway_gate: AtomicU8,
    /// Its listener's settings.
    settings: ConnSettings,
    /// When its worker handled the drain start (`now` of that event; 0 before).
    drain_seen_at: AtomicU64,
    /// Its worker's lane of the in-flight table: requests on it start there without a lookup.
    pub(super) lane: Option<Lane>,
    /// Its own slot of the in-flight table, for the requests it carries one at a time.
    pub(super) reserved: Option<ReservedSlot>,
}

const WIRE_UNKNOWN: u8 = 0;
const WIRE_HTTP1: u8 = 1;
const WIRE_HTTP2: u8 = 2;

impl Conn {
    pub fn new(id: u64) -> Conn {
        Conn::on_lane(id, None, None)
    }

    /// A connection of the worker whose in-flight table lane is `lane`, with its own slot there.
    pub fn on_lane(id: u64, lane: Option<Lane>, reserved: Option<ReservedSlot>) -> Conn {
        Conn {
            id,
            wire: AtomicU8::new(WIRE_UNKNOWN),
            server_wrote: AtomicBool::new(false),
            streams: AtomicU32::new(0),
            h2_streamless: AtomicBool::new(false),
            following: AtomicBool::new(true),
            tracked: AtomicBool::new(false),
            read_since_idle: AtomicBool::new(false),
            told: AtomicBool::new(false),
            closed_by_us: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            candidate_since: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            untracked: AtomicBool::new(false),
            followed: AtomicBool::new(false),
            #[cfg(feature = "cross-check")]
            xc: CrossCheck::default(),
            wakeable: AtomicBool::new(false),
            stream: AtomicUsize::new(0),
            goaway_gate: AtomicU8::new(0),
            settings: ConnSettings::default(),
            drain_seen_at: AtomicU64::new(0),
            lane,
            reserved,
        }
    }

    /// The same, with its listener's settings.
    pub fn with_settings(mut self, settings: ConnSettings) -> Conn {
        self.settings = settings;
        self
    }

    /// Its network filter can be woken at drain start (it has a scheduler).
    pub fn set_wakeable(&self) {
        set(&self.wakeable, true);
    }

    pub fn wire(&self) -> Wire {
        match self.wire.load(Ordering::Relaxed) {
            WIRE_HTTP1 => Wire::Http1,
            WIRE_HTTP2 => Wire::Http2,
            _ => Wire::Unknown,
        }
    }

    fn set_wire(&self, w: Wire) {
        let v = match w {
            Wire::Unknown => WIRE_UNKNOWN,
            Wire::Http1 => WIRE_HTTP1,
            Wire::Http2 => WIRE_HTTP2,
        };
        self.wire.store(v, Ordering::Relaxed)
    }

    pub fn streams(&self) -> u32 {
        self.streams.load(Ordering::Relaxed)
    }

    /// Whether the protocol is still to be detected from the client's first bytes.
    pub(super) fn sniffing(&self) -> bool {
        self.wire() == Wire::Unknown
    }

    /// The client sent `len` bytes; `first` is the start of the read buffer (up to
    /// `H2_MAGIC_PREFIX.len()` bytes) while the protocol is still unknown, empty once known.
    pub fn on_read(&self, len: usize, first: &[u8]) {
        if len > 0 {
            set(&self.read_since_idle, true);
        }
        if !self.sniffing() || first.is_empty() {
            return;
        }
        // Decided on the first bytes by the connection manager's own rule (`codec_type: AUTO`
        // creates its codec on the first data: HTTP/2 if it starts with the magic prefix, else
        // HTTP/1), so the filter never disagrees with the codec about the protocol.
        let h2 = first.starts_with(H2_MAGIC_PREFIX);
        self.set_wire(if h2 { Wire::Http2 } else { Wire::Http1 });
        set(&self.h2_streamless, h2);
        set(&self.following, h2);
    }

    /// Whether a read needs the read buffer's bytes (`tracking::on_read_hook`): `tracked` (the
    /// connection's exchanges are followed) or still [`Conn::following_bytes`].
    #[inline]
    pub fn read_wants_bytes(&self, tracked: bool) -> bool {
        tracked || self.following_bytes()
    }

    /// Whether the glue must still hand over the bytes it reads ([`Conn::on_followed_read`]);
    /// once false, `on_read(len, &[])` is all a read needs.
    #[inline]
    pub fn following_bytes(&self) -> bool {
        get(&self.following)
    }

    /// Whether the client's bytes must still go to the connection's [`FirstStream`].
    pub(super) fn watching_first_stream(&self) -> bool {
        get(&self.h2_streamless)
    }

    /// The client's HTTP/2 frames are no longer known to be connection-level only: it opened a
    /// stream, or sent something [`FirstStream`] does not follow.
    pub(super) fn first_stream_seen(&self) {
        set(&self.h2_streamless, false);
        set(&self.following, false);
    }

    /// A read while [`Conn::following_bytes`]: `chunks()` gives the read buffer's slices
    /// (`None`: Envoy could not give them); `watch` is the connection's [`FirstStream`]. Detects
    /// the protocol from the first bytes and, for HTTP/2, follows the client's frames until it
    /// opens a stream. No payload is copied beyond the prefix the detection needs.
    pub fn on_followed_read<'a, I: Iterator<Item = &'a [u8]>>(
        &self,
        len: usize,
        chunks: &impl Fn() -> Option<I>,
        watch: &mut FirstStream,
    ) {
        if self.sniffing() {
            let mut head = [0u8; H2_MAGIC_PREFIX.len()];
            let mut have = 0;
            for bytes in chunks().into_iter().flatten() {
                let take = bytes.len().min(head.len() - have);
                head[have..have + take].copy_from_slice(&bytes[..take]);
                have += take;
                if have == head.len() {
                    break;
                }
            }
            self.on_read(len, &head[..have]);
        } else {
            self.on_read(len, &[]);
        }
        if !self.watching_first_stream() {
            return;
        }
        let still_streamless = chunks().is_some_and(|mut c| c.all(|b| watch.feed(b)));
        if !still_streamless {
            // A stream opened, or bytes this cannot follow (or could not read): from here on the
            // connection may carry a stream.
            self.first_stream_seen();
        }
    }

    /// The connection's scheduled `event` (on its worker, the filter not closed): what to do,
    /// and which of the filter's counters it moves. `now`: the clock stream ends are stamped
    /// with; `send_away_once(id, http2)`: whether a busy connection told here is the first
    /// telling of it (whoever tells it: this filter, the HTTP filter, or for HTTP/1.1 the
    /// `connection: close` its exchange tracker puts on the in-flight response).
    pub fn on_scheduled(
        &self,
        connections: &Connections,
        event: u64,
        now: u64,
        send_away_once: impl FnOnce(u64, bool) -> bool,
    ) -> Scheduled {
        let (counts, idle_after) = (&connections.counts, self.settings.idle_after);
        let before = counts.snapshot();
        let action = match event {
            EVENT_DRAIN_STARTED => {
                let _ = self.drain_seen_at.compare_exchange(
                    0,
                    now.max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                self.on_drain_started(counts, now, idle_after)
            }
            EVENT_GRACE_OVER => {
                let grace_over = self.grace_over(now);
                self.on_grace_over(counts, now, idle_after, grace_over)
            }
            EVENT_CONFIRM_CLOSE => self.on_confirm_close(counts, now, idle_after),
            _ => Action::Nothing,
        };
        let after = counts.snapshot();
        // A busy HTTP/1.1 connection its tracker follows is told with its in-flight response
        // (`tracking::TrackedConnection::close_to_insert`): counted now, as the HTTP filter counts its own.
        let followed_busy_http1 = event == EVENT_DRAIN_STARTED
            && action == Action::Nothing
            && self.wire() == Wire::Http1
            && get(&self.followed)
            && !get(&self.untracked)
            && self.streams() > 0;
        let (sent_away_http2, sent_away_http1) = match (action, followed_busy_http1) {
            (Action::GoAwayBusy, _) => (send_away_once(self.id, true), false),
            (_, true) => (false, send_away_once(self.id, false)),
            _ => (false, false),
        };
        Scheduled {
            action,
            told_http1: after.http1 > before.http1,
            told_http2: after.http2 > before.http2,
            sent_away_http2,
            sent_away_http1,
        }
    }

    /// Whether its own `idle_close_grace` has passed since its worker handled the drain start
    /// (the re-checks run at the shortest grace any listener has). A connection opened after
    /// the drain start counts from its first re-check.
    ///
    /// Judged at the close, [`CONFIRM_DELAY`] after this check: each worker stamps the drain
    /// start a little after the timer woke it, so judged at the check the first re-check found
    /// the grace a few ms short and the close waited a whole grace more (the test
    /// `a_connection_whose_worker_saw_the_drain_start_late_closes_at_the_first_re_check`).
    fn grace_over(&self, now: u64) -> bool {
        let seen = match self.drain_seen_at.compare_exchange(
            0,
            now.max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return false,
            Err(seen) => seen,
        };
        let closed_at = now.saturating_add(CONFIRM_DELAY.as_nanos() as u64);
        closed_at.saturating_sub(seen) >= self.settings.idle_close_grace.as_nanos() as u64
    }

    /// The server wrote `len` bytes towards the client.
    pub fn on_write(&self, len: usize) {
        if len > 0 && !get(&self.server_wrote) {
            set(&self.server_wrote, true);
        }
    }

    /// The connection's in-flight table lane (its worker's), if known.
    pub fn lane(&self) -> Option<Lane> {
        self.lane
    }

    /// The connection's own slot of the in-flight table, if it has one.
    pub fn reserved(&self) -> Option<&ReservedSlot> {
        self.reserved.as_ref()
    }

    /// Its exchange tracker saw a request (HTTP/1.1) or stream (HTTP/2) start (connection mode:
    /// as the HTTP filter's report does in filter mode).
    pub fn exchange_started(&self) {
        self.stream_started();
    }

    /// Its exchange tracker saw one end, at `now` (the coarse clock of `StreamSink::now_nanos`).
    pub fn exchange_ended(&self, now: u64) {
        self.stream_ended(now);
    }

    /// An exchange tracker follows the connection and counts its requests (connection mode).
    pub fn set_followed(&self, followed: bool) {
        set(&self.followed, followed);
    }

    /// Its exchange tracker can no longer follow the connection: never idle from here on.
    pub fn set_untracked(&self) {
        set(&self.untracked, true);
    }

    pub(super) fn stream_started(&self) {
        if get(&self.h2_streamless) {
            set(&self.h2_streamless, false);
            set(&self.following, false);
        }
        set(&self.tracked, true);
        self.streams.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn stream_ended(&self, now: u64) {
        let before = self
            .streams
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if before == Ok(1) {
            set(&self.read_since_idle, false);
            self.idle_since.store(now, Ordering::Relaxed);
        }
    }

    /// Test-only (`cross-check`): the connection's tracker, following it beside the HTTP
    /// filter without counting, saw a request start (`Some(true)`), end (`Some(false)`), or
    /// lost the thread (`None`). A no-op in other builds.
    pub fn cross_check_event(&self, started: Option<bool>) {
        #[cfg(feature = "cross-check")]
        self.xc.event(started);
        #[cfg(not(feature = "cross-check"))]
        let _ = started;
    }

    /// Test-only (`cross-check`): a read is about to be fed to the connection's tracker. The
    /// connection manager has processed every earlier read, and both filters have seen every
    /// write: the one point where the two counts describe the same bytes (inside the
    /// connection manager's processing of a read, at a request start or end, the tracker has
    /// already read that whole buffer: it runs first). A no-op in other builds.
    pub fn cross_check_at_read(&self) {
        #[cfg(feature = "cross-check")]
        self.xc.check(self.id, "read", self.streams());
    }

    /// Idle by what the HTTP filter reported: no stream in flight, none for `idle_after`, and
    /// for HTTP/1.1 nothing read since the last one (bytes of a next request). HTTP/2 clients
    /// send control frames (SETTINGS ack, WINDOW_UPDATE, PING) on idle connections, so there
    /// only streams count; an HTTP/2 connection whose client never opened one is idle too.
    fn idle(&self, now: u64, idle_after: Duration) -> bool {
        if get(&self.untracked) {
            return false;
        }
        if self.wire() == Wire::Http2 && get(&self.h2_streamless) {
            // Never opened a stream (a pool's pre-connected connection): nothing to wait for.
            return true;
        }
        get(&self.tracked)
            && self.streams() == 0
            && (self.wire() == Wire::Http2 || !get(&self.read_since_idle))
            && now.saturating_sub(self.idle_since.load(Ordering::Relaxed))
                >= idle_after.as_nanos() as u64
    }

    /// What the glue's exchange tracker says of a GOAWAY of ours now (worker thread, just
    /// before a scheduled event is handled: [`GoAwayGate`]).
    pub fn set_goaway_gate(&self, gate: GoAwayGate) {
        let b = match gate {
            GoAwayGate::May => 0,
            GoAwayGate::EnvoySent => 1,
            GoAwayGate::NotNow => 2,
        };
        self.goaway_gate.store(b, Ordering::Relaxed);
    }

    /// `action` (a GOAWAY) if the gate lets it go; else nothing, and when Envoy already sent
    /// its own GOAWAY the connection counts as told (no later check tries again).
    fn goaway_if_allowed(&self, action: Action) -> Action {
        match self.goaway_gate.load(Ordering::Relaxed) {
            0 => action,
            1 => {
                set(&self.told, true);
                Action::Nothing
            }
            _ => Action::Nothing,
        }
    }

    /// The drain started. Counts what it tells. Idle HTTP/1.1 connections are only marked here;
    /// [`Conn::on_confirm_close`] closes them [`CONFIRM_DELAY`] later if still idle.
    pub fn on_drain_started(&self, counts: &Counts, now: u64, idle_after: Duration) -> Action {
        if get(&self.told) {
            return Action::Nothing;
        }
        if self.streams() > 0 {
            // Busy: its latest request sends it away through the connection manager.
            let stream = self.stream.load(Ordering::Relaxed);
            if stream != 0 {
                return Action::WakeStream(stream);
            }
            // HTTP/2 whose latest request ended before older ones: GOAWAY from here (after the
            // server preface); closed once idle, like an idle one.
            if self.wire() == Wire::Http2 && get(&self.server_wrote) {
                if self.goaway_if_allowed(Action::GoAwayBusy) == Action::Nothing {
                    return Action::Nothing;
                }
                set(&self.told, true);
                return Action::GoAwayBusy;
            }
            return Action::Nothing;
        }
        match self.wire() {
            // GOAWAY only after the server preface.
            Wire::Http2 if get(&self.server_wrote) => {
                if self.goaway_if_allowed(Action::GoAway) == Action::Nothing {
                    return Action::Nothing;
                }
                set(&self.told, true);
                counts.http2.fetch_add(1, Ordering::Relaxed);
                Action::GoAway
            }
            Wire::Http1 if self.idle(now, idle_after) => self.mark_candidate(),
            _ => Action::Nothing,
        }
    }

    /// A grace period after the drain start is over (repeats). Marks what may be closed.
    /// `grace_over`: its own `idle_close_grace` has passed since the drain start (what it told
    /// then may be closed now); a connection still to be told is told whatever it says.
    pub fn on_grace_over(
        &self,
        counts: &Counts,
        now: u64,
        idle_after: Duration,
        grace_over: bool,
    ) -> Action {
        if get(&self.closed_by_us) {
            return Action::Nothing;
        }
        match self.wire() {
            // Close only what is known idle: a stream that arrived after the GOAWAY (a client
            // that had it in flight) keeps the connection; the HTTP filter sent it away and the
            // connection manager closes it after that stream. Without the HTTP filter (never
            // tracked) idle cannot be told from busy, so the close is left to the client.
            Wire::Http2 if grace_over && get(&self.told) && self.idle(now, idle_after) => {
                self.mark_candidate()
            }
            // Opened (or first written to) after the drain start and no stream on it: tell it now.
            Wire::Http2 if !get(&self.told) && get(&self.server_wrote) && self.streams() == 0 => {
                if self.goaway_if_allowed(Action::GoAway) == Action::Nothing {
                    return Action::Nothing;
                }
                set(&self.told, true);
                counts.http2.fetch_add(1, Ordering::Relaxed);
                Action::GoAway
            }
            // Busy at drain start and idle since (a client that stopped sending before its next
            // request would have carried `connection: close`): close it.
            Wire::Http1 if grace_over && !get(&self.told) && self.idle(now, idle_after) => {
                self.mark_candidate()
            }
            _ => Action::Nothing,
        }
    }

    fn mark_candidate(&self) -> Action {
        let since = self.idle_since.load(Ordering::Relaxed).max(1);
        self.candidate_since.store(since, Ordering::Relaxed);
        Action::Nothing
    }

    /// [`CONFIRM_DELAY`] after a check: close what it marked if nothing happened since (no
    /// stream, for HTTP/1.1 no byte read, and no stream that started and ended meanwhile).
    pub fn on_confirm_close(&self, counts: &Counts, now: u64, idle_after: Duration) -> Action {
        let since = self.candidate_since.swap(0, Ordering::Relaxed);
        if since == 0
            || get(&self.closed_by_us)
            || !self.idle(now, idle_after)
            || self.idle_since.load(Ordering::Relaxed).max(1) != since
        {
            return Action::Nothing;
        }
        match self.wire() {
            Wire::Http2 => {
                set(&self.closed_by_us, true);
                Action::Close
            }
            Wire::Http1 => self.close_http1(counts),
            Wire::Unknown => Action::Nothing,
        }
    }

    fn close_http1(&self, counts: &Counts) -> Action {
        set(&self.told, true);
        set(&self.closed_by_us, true);
        counts.http1.fetch_add(1, Ordering::Relaxed);
        Action::Close
    }
}
