//! The network filter's lifecycle (`envoy.filters.network.dynamic_modules`, before the HTTP
//! connection manager), written against [`ConnectionHost`]: what its config load sets up, what a
//! new connection registers, how reads and writes reach the connection's state machine and its
//! exchange tracker, how a scheduled event's [`Action`] is applied and counted, and what its
//! destroy releases. The FFI seam (`src/ffi/network.rs`) only converts and calls these, one call per hook.
//!
//! Uses [`crate::connections`] (the state machine that decides), [`crate::tracking`] (the
//! exchange tracker, connection mode), [`crate::engine::shared`] (the shared drain state, passed in) and
//! [`crate::host::connection`]. The decisions stay returned values ([`Action`], tested on their
//! own in `connections`); this file applies them through the host.

use crate::config::NetworkFilterConfig;
use crate::connections::{
    Action, Conn, ConnSettings, FirstStream, GoAwayGate, Waker, WakerSlot, GOAWAY_NO_ERROR,
};
use crate::engine::shared::{Protocol, Shared, Stat};
use crate::host::connection::ConnectionHost;
use crate::host::extension::StatsHost;
use crate::tracking::{TrackedConnection, WsWake, WsWrite};
use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;

/// One listener's network filter config. Its stats are the bootstrap extension's (through
/// `Shared::count` and the connection's host): what its connections count (told idle, sent
/// away, served while draining, untracked) lands in the same stats as the HTTP filter's.
#[derive(Debug)]
pub struct NetConfig {
    /// This listener's idle settings, given to each of its connections.
    settings: ConnSettings,
    /// Follow every exchange from the bytes (`track_requests`: connection mode).
    track_requests: bool,
    /// Loaded with the data path stepped back (the reduced surface of an untested Envoy:
    /// `Shared::data_path_stepped_back`): its filters do nothing at all.
    stepped_back: bool,
}

impl NetConfig {
    /// A listener's config was loaded: the drain side learns that connections are followed, and
    /// this listener's grace.
    pub fn load(config: NetworkFilterConfig, shared: &Shared) -> NetConfig {
        let NetworkFilterConfig {
            idle_close_grace: grace,
            idle_after,
            track_requests,
            long_lived,
            grpc_resumable_prefixes,
        } = config;
        let settings = ConnSettings {
            idle_after,
            idle_close_grace: grace,
        };
        if shared.data_path_stepped_back() {
            // Nothing noted: no connection is registered, followed, counted or told, so the
            // drain goes by Envoy's own stats (`Shared::count_is_exact` stays false).
            log::info!(
                "graceful_drain: network filter loaded, stepped back: the reduced surface passes \
                 every byte untouched (track_requests={track_requests} not applied)"
            );
            return NetConfig {
                settings,
                track_requests: false,
                stepped_back: true,
            };
        }
        let c = shared.connections();
        c.long_lived().note_settings(long_lived);
        c.long_lived().note_grpc_prefixes(&grpc_resumable_prefixes);
        if let Some(d) = shared.settings() {
            if let Some(w) = long_lived.window_within(d.min_drain_duration, d.drain_timeout) {
                log::info!(
                    "graceful_drain: long_lived_window {:?} will be shortened to {w:?} at a drain: \
                     min_drain_duration ({:?}) + window + close_timeout ({:?}) must fit \
                     drain_timeout ({:?})",
                    long_lived.window,
                    d.min_drain_duration,
                    long_lived.close_timeout,
                    d.drain_timeout
                );
            }
        }
        c.note_loaded();
        c.note_config(settings);
        if track_requests {
            c.note_tracking();
        }
        log::info!(
            "graceful_drain: network filter loaded (idle connections are told at drain start; \
             idle_close_grace={grace:?}, idle_after={idle_after:?}, \
             track_requests={track_requests}, move_long_lived_streams={}, \
             long_lived_window={:?}, close_timeout={:?}, message_wait={:?}, \
             move_http2_sse={}, grpc_resumable_prefixes={grpc_resumable_prefixes:?})",
            long_lived.enabled,
            long_lived.window,
            long_lived.close_timeout,
            long_lived.message_wait,
            long_lived.http2_sse,
        );
        NetConfig {
            settings,
            track_requests,
            stepped_back: false,
        }
    }

    /// Whether this listener's connections count requests (`track_requests`, not stepped back):
    /// the FFI then starts the `active_requests` gauge.
    pub fn counts_requests(&self) -> bool {
        self.track_requests
    }

    /// Envoy destroys a listener's config, after its filters (`None`: a config it refused).
    pub fn unload(config: Option<Box<NetConfig>>) {
        #[cfg(feature = "cross-check")]
        {
            let (checks, ahead, disagreements, starts) = crate::connections::cross_check_tallies();
            log::info!(
                "graceful_drain: cross-check: {checks} checks ({starts} at request starts, the \
                 others at reads), the tracker ahead at {ahead}, {disagreements} disagreements"
            );
        }
        drop(config);
    }
}

/// One connection's filter. Only shared references to it are ever made: its hooks can nest (a
/// close or a write made from the scheduled hook raises the event and write hooks of the same
/// filter at once), so every field that changes is a cell.
pub struct NetFilter {
    /// Its listener's idle settings (the config outlives its filters).
    settings: ConnSettings,
    conn: OnceCell<Arc<Conn>>,
    slot: Cell<Option<WakerSlot>>,
    /// An HTTP/2 client's frames until its first stream (while `conn` is watching for it).
    first_stream: Cell<FirstStream>,
    /// The connection raised a close event: no host may be made for it any more
    /// ([`NetFilter::may_reach_envoy`]).
    closed: Cell<bool>,
    /// The connection's requests, followed from its bytes (connection mode), if configured.
    tracking: Option<RefCell<TrackedConnection>>,
    /// Its config stepped back ([`NetConfig`]): the connection is never set up, so every hook
    /// returns at once and the bytes pass untouched.
    stepped_back: bool,
}

impl NetFilter {
    /// Envoy made a filter for a new connection of the listener `config` is for (`None`: no
    /// config, the defaults).
    pub fn new(config: Option<&NetConfig>, shared: &Shared) -> NetFilter {
        let track = config.is_some_and(|c| c.track_requests);
        // Per connection, by its listener's own config, whatever other listeners have: where
        // this listener's chain has the HTTP filter too, the tracker's count is the one, and the
        // HTTP filter takes no ticket for the connection's requests (`StreamMark::
        // counted_by_tracker`). The test-only cross-check build follows beside the HTTP filter
        // without counting instead.
        #[cfg(not(feature = "cross-check"))]
        let _ = shared;
        let tracking = match track {
            #[cfg(feature = "cross-check")]
            true if shared.data_filter_loaded() => Some(TrackedConnection::shadow()),
            true => Some(TrackedConnection::new()),
            false => None,
        };
        NetFilter {
            settings: config.map_or_else(ConnSettings::default, |c| c.settings),
            conn: OnceCell::new(),
            slot: Cell::new(None),
            first_stream: Cell::new(FirstStream::default()),
            closed: Cell::new(false),
            tracking: tracking.map(RefCell::new),
            stepped_back: config.is_some_and(|c| c.stepped_back),
        }
    }

    /// The connection is set up (its callbacks exist): its state, findable by id from its
    /// worker, and a waker for the drain side.
    pub fn on_new_connection(&self, host: &impl ConnectionHost, shared: &'static Shared) {
        if self.stepped_back {
            // No state, no scheduler: the other hooks find no connection and return at once.
            return;
        }
        let lane = shared.lane();
        let conn = Arc::new(
            Conn::on_lane(host.id(), lane, lane.and_then(|l| shared.reserve(l)))
                .with_settings(self.settings),
        );
        if self.tracking.as_ref().is_some_and(|t| t.borrow().counts()) {
            conn.set_followed(true);
        }
        crate::connections::register(&conn);
        let _ = self.conn.set(conn);
        if let Some(s) = host.new_scheduler() {
            let waker = Waker::new(s, host_delete_scheduler(host));
            self.slot
                .set(Some(shared.connections().insert_waker(waker)));
            if let Some(conn) = self.conn.get() {
                conn.set_wakeable();
            }
        }
    }

    /// The client sent `data_len` bytes. `shared` is asked for only when the bytes are wanted:
    /// the common read of a connection that is not followed pays nothing for it.
    #[inline]
    pub fn on_read<'s>(
        &self,
        host: &impl ConnectionHost,
        data_len: usize,
        shared: impl FnOnce() -> &'s Shared,
    ) {
        let Some(conn) = self.conn.get() else {
            return;
        };
        let mut tracking = match self.tracking.as_ref().map(RefCell::try_borrow_mut) {
            Some(Ok(t)) => Some(t),
            // Cannot be: its hooks do not nest into a read or write hook.
            Some(Err(_)) => {
                in_use();
                None
            }
            None => None,
        };
        if conn.read_wants_bytes(tracking.is_some()) {
            self.read_with_bytes(host, conn, tracking.as_deref_mut(), data_len, shared);
        } else {
            conn.on_read(data_len, &[]);
        }
    }

    /// A read whose bytes are wanted: hands the read buffer's slices to
    /// [`crate::tracking::on_read_hook`], which decides everything. Kept out of the read hook, so
    /// that its stack buffers and calls do not weigh on the common path of a connection that is
    /// not followed.
    #[inline(never)]
    fn read_with_bytes<'s, H: ConnectionHost>(
        &self,
        host: &H,
        conn: &Conn,
        tracking: Option<&mut TrackedConnection>,
        data_len: usize,
        shared: impl FnOnce() -> &'s Shared,
    ) {
        let shared = shared();
        let mut watch = self.first_stream.get();
        let keep = host.with_read_slices(|chunks| {
            crate::tracking::on_read_hook(
                conn,
                data_len,
                chunks,
                &mut watch,
                tracking,
                shared,
                &H::stats(),
                H::now_nanos,
            )
        });
        self.first_stream.set(watch);
        // After the slices are released: requests behind a `close` never reach Envoy's codec
        // (RFC 9112 §9.6); the bytes before them do.
        if let Some(keep) = keep {
            if !host.replace_read(&keep) {
                shared.count(host, Stat::ModuleErrors);
                log::warn!(
                    "graceful_drain: could not hold back requests pipelined behind a \
                     connection: close on connection {}: Envoy may process them",
                    conn.id
                );
            }
        }
    }

    /// The server wrote `data_len` bytes towards the client. `shared`: as for
    /// [`NetFilter::on_read`].
    #[inline]
    pub fn on_write<'s, H: ConnectionHost>(
        &self,
        host: &H,
        data_len: usize,
        shared: impl FnOnce() -> &'s Shared,
    ) {
        let Some(conn) = self.conn.get() else {
            return;
        };
        conn.on_write(data_len);
        // An empty write (Envoy makes one at a proxied response's end, ENVOY_FACTS.md §6) has
        // no byte to follow: no buffer callbacks for it.
        let Some(tracking) = self.tracking.as_ref().filter(|_| data_len > 0) else {
            return;
        };
        let Ok(mut t) = tracking.try_borrow_mut() else {
            in_use();
            return;
        };
        let shared = shared();
        let now = H::now_nanos;
        if t.on_write_len(data_len, conn, shared, &H::stats(), now) {
            return;
        }
        if t.tracker().tunnel() {
            // Only a tunnel's writes (nothing else pays for the long-lived streams' moves).
            return self.long_lived_write(host, conn, &mut t, shared);
        }
        let edit = host
            .with_write_slices(|chunks| t.on_write_bytes(chunks, conn, shared, &H::stats(), now));
        if t.tracker().tunnel() || t.sse_unnoticed() {
            self.switched::<H>(conn, &mut t, shared);
        }
        if t.grpc_unnoticed() && shared.connections().long_lived().plan(conn.id).is_some() {
            // A gRPC response began after the moves began: its connection's move (now, or at
            // its time) and the last part of the timeout are asked for again.
            self.wake_at::<H>(shared, 1);
        }
        drop(t);
        // After the slices are released: the rewrite changes the buffer they described.
        if edit.is_some_and(|e| !host.replace_write_start(e.replaced(), e.pieces())) {
            log::warn!(
                "graceful_drain: could not edit connection: close in a response on connection {}",
                conn.id
            );
        }
    }

    /// A write on a tunnel: a switched WebSocket's server frames, passed, or with our Close put
    /// in at a frame end, or dropped after it (docs/contributing/long-lived-streams.md, step 2-3).
    #[cold]
    #[inline(never)]
    fn long_lived_write<H: ConnectionHost>(
        &self,
        host: &H,
        conn: &Conn,
        t: &mut TrackedConnection,
        shared: &Shared,
    ) {
        if !t.is_websocket() {
            let (w, wake) = host.with_write_slices(|chunks| t.sse_write(chunks()));
            return self.apply_write(
                host,
                conn,
                shared,
                w,
                wake,
                "SSE response ended at an event boundary",
            );
        }
        let close_timeout = shared
            .connections()
            .long_lived()
            .settings()
            .close_timeout
            .as_nanos() as u64;
        let now = shared.clock().nanos();
        let (w, wake) =
            host.with_write_slices(|chunks| t.websocket_write(chunks(), close_timeout, now));
        self.apply_write(host, conn, shared, w, wake, "WebSocket Close(1001)")
    }

    /// A write opened a tunnel or an SSE response: a WebSocket is counted open once, and woken
    /// by the moves thread at the moves' start (`wake_all`), or now if they began; an SSE
    /// response that began after the drain started (no wake-up counted it) is woken now.
    #[cold]
    #[inline(never)]
    fn switched<H: ConnectionHost>(&self, conn: &Conn, t: &mut TrackedConnection, shared: &Shared) {
        let ll = shared.connections().long_lived();
        // `note_switch` first: it counts a switch whatever the drain.
        let websocket = t.note_switch(shared) && ll.plan(conn.id).is_some();
        if websocket || (t.sse_unnoticed() && ll.drain_started()) {
            self.wake_at::<H>(shared, 1);
        }
    }

    /// Applies a long-lived stream's write edit, and asks for its wake-up (the edits do not
    /// re-enter this filter's hooks: the tracker may stay borrowed).
    fn apply_write<H: ConnectionHost>(
        &self,
        host: &H,
        conn: &Conn,
        shared: &Shared,
        w: WsWrite,
        wake: Option<u64>,
        what: &str,
    ) {
        let ok = match &w {
            WsWrite::Pass => true,
            WsWrite::Append(bytes) => host.append_write(bytes),
            WsWrite::Replace(bytes) => host.replace_write_start(usize::MAX, [bytes, b""]),
            WsWrite::Drop => host.drain_write(usize::MAX),
        };
        if !ok {
            log::warn!(
                "graceful_drain: could not edit a long-lived stream's write on connection {} \
                 ({w:?})",
                conn.id
            );
        } else if !matches!(w, WsWrite::Drop) && wake.is_some() {
            let how = if matches!(w, WsWrite::Replace(_)) {
                "cut into a write"
            } else {
                "after a write"
            };
            log::debug!("graceful_drain: {what} {how} on connection {}", conn.id);
        }
        if let Some(at) = wake {
            self.wake_at::<H>(shared, at);
        }
    }

    /// Ask the moves thread to wake this connection at `at` (`Shared` clock nanos).
    /// `at` 1: now, committed to the connection's own scheduler (from its worker: its end was
    /// written).
    fn wake_at<H: ConnectionHost>(&self, shared: &Shared, at: u64) {
        if let Some(slot) = self.slot.get() {
            if at <= 1 {
                // Committed without the table's lock held (`get` released it).
                if let Some(w) = shared.connections().waker(slot) {
                    H::commit_scheduler(w.word(), crate::connections::EVENT_LONG_LIVED);
                }
            } else {
                shared.connections().wake_at(slot, at);
            }
        }
    }

    /// The moves thread woke the connection: its WebSocket's next step.
    fn long_lived_wake<H: ConnectionHost>(&self, host: &H, conn: &Conn, shared: &Shared) {
        let Some(tracking) = &self.tracking else {
            return;
        };
        let Ok(mut t) = tracking.try_borrow_mut() else {
            return in_use();
        };
        let plan = shared.connections().long_lived().plan(conn.id);
        let now = shared.clock().nanos();
        let open = host.is_open();
        let (act, wake) = if !open && !t.is_websocket() {
            (WsWake::Nothing, None)
        } else if t.is_websocket() {
            t.websocket_wake(plan, now)
        } else if t.is_http2() {
            t.h2_wake(plan, now, H::now_nanos(), conn, shared, host)
        } else {
            t.sse_wake(plan, now, shared)
        };
        drop(t);
        if !open && act != WsWake::CloseNow {
            // Closing by itself: nothing to write into it any more.
            return;
        }
        match act {
            WsWake::CloseNow if open => {
                log::debug!(
                    "graceful_drain: WebSocket close handshake over on connection {}: closing",
                    conn.id
                );
                host.close(b"graceful_drain_websocket_moved")
            }
            WsWake::CloseNow => {
                log::debug!(
                    "graceful_drain: WebSocket close handshake over on connection {}, in Envoy's \
                     delayed close: closing now",
                    conn.id
                );
                host.close_no_flush(b"graceful_drain_websocket_moved")
            }
            WsWake::Nothing => {}
            WsWake::Inject(close) => {
                log::debug!(
                    "graceful_drain: WebSocket Close(1001) to the client of connection {}",
                    conn.id
                );
                host.inject_write(&close)
            }
            WsWake::TellUpstreamAndClose => {
                log::debug!(
                    "graceful_drain: WebSocket client of connection {} did not answer the Close: \
                     Close(1001) to the upstream, then closing",
                    conn.id
                );
                host.inject_read(&crate::tracking::upstream_close(H::mask_key()));
                host.close(b"graceful_drain_websocket_close_timeout")
            }
            WsWake::Close => {
                log::debug!(
                    "graceful_drain: long-lived stream on connection {} ended or still open \
                     after close_timeout: closing",
                    conn.id
                );
                host.close(b"graceful_drain_long_lived_moved")
            }
            WsWake::H2Moves {
                to_client,
                to_envoy,
            } => {
                log::debug!(
                    "graceful_drain: HTTP/2 streams of connection {} ended (gRPC: grpc-status 14 at \
                     a message boundary; SSE: END_STREAM at an event boundary), their upstream \
                     streams reset",
                    conn.id
                );
                // Both in this hook, in this order: nothing of Envoy's falls between them.
                host.inject_write(&to_client);
                host.inject_read(&to_envoy);
            }
            WsWake::EndAndClose(end) => {
                log::debug!(
                    "graceful_drain: SSE response on connection {} at an event boundary at its \
                     move time: ended, closing",
                    conn.id
                );
                if !end.is_empty() {
                    host.inject_write(&end);
                }
                host.close(b"graceful_drain_long_lived_moved")
            }
        }
        if let Some(at) = wake {
            self.wake_at::<H>(shared, at);
        }
    }

    /// The connection raised an event; `close`: a remote or local close.
    pub fn on_event(&self, close: bool) {
        if close {
            self.closed.set(true);
            // Test-only: the streams the close resets end in both filters in no set order.
            #[cfg(feature = "cross-check")]
            if let Some(conn) = self.conn.get() {
                conn.cross_check_event(None);
            }
        }
    }

    /// Whether a scheduled event may make a host for this connection: not once it raised a
    /// close event, as Envoy's side of it may be gone before a scheduled event still queued for
    /// this filter runs (ENVOY_FACTS.md §1, schedulers).
    pub fn may_reach_envoy(&self) -> bool {
        !self.closed.get()
    }

    /// The drain side's `event_id` reached the connection ([`crate::connections::Connections::
    /// wake_all`]; only while [`NetFilter::may_reach_envoy`]): the state machine decides, this
    /// applies its [`Action`] through `host` and counts what it told.
    pub fn on_scheduled<H: ConnectionHost>(&self, host: &H, event_id: u64, shared: &Shared) {
        let Some(conn) = self.conn.get() else { return };
        if event_id == crate::connections::EVENT_LONG_LIVED {
            // Also in Envoy's delayed close (not open any more): a finished WebSocket handshake
            // closes it at once.
            return self.long_lived_wake(host, conn, shared);
        }
        if !host.is_open() {
            return;
        }
        let send_away_once = |id, http2| {
            let p = if http2 {
                Protocol::Http2
            } else {
                Protocol::Http1
            };
            shared.send_away_once(host, Some(id), || p).is_some()
        };
        // What the exchange tracker knows of the server's bytes decides whether a GOAWAY of
        // ours may go (connection mode; without a tracker, as before). A tracker in use cannot
        // vouch: not now.
        if let Some(tracking) = &self.tracking {
            let gate = tracking
                .try_borrow()
                .map_or(GoAwayGate::NotNow, |t| t.tracker().goaway_gate());
            conn.set_goaway_gate(gate);
        }
        let done = conn.on_scheduled(
            shared.connections(),
            event_id,
            H::now_nanos(),
            send_away_once,
        );
        // Sent-away connections were counted by `send_away_once`.
        for (p, told) in [
            (Protocol::Http1, done.told_http1),
            (Protocol::Http2, done.told_http2),
        ] {
            if told {
                shared.count(host, Stat::IdleTold(p));
            }
        }
        apply(host, conn, done.action);
    }

    /// Envoy destroys the filter; possibly on the drain side's thread, inside its commit (see
    /// [`crate::connections`]): touches only thread-safe state, never the connection's host;
    /// what the close counts goes through `stats` (any thread).
    pub fn on_destroy(&self, shared: &Shared, stats: &impl StatsHost) {
        if let Some(slot) = self.slot.get() {
            // Deletes the scheduler now, or when a commit in progress lets go of it.
            drop(shared.connections().remove_waker(slot));
        }
        if let Some(conn) = self.conn.get() {
            if let Some(tracking) = &self.tracking {
                if let Ok(mut t) = tracking.try_borrow_mut() {
                    t.on_close(conn, shared, stats);
                }
            }
            crate::connections::unregister(conn);
        }
    }
}

/// `H::delete_scheduler` as the plain `fn` a [`Waker`] holds.
fn host_delete_scheduler<H: ConnectionHost>(_: &H) -> fn(usize) {
    H::delete_scheduler
}

/// Does what the state machine decided to the connection.
fn apply(host: &impl ConnectionHost, conn: &Conn, action: Action) {
    match action {
        Action::Nothing => {}
        Action::WakeStream(word) => host.wake_stream(word),
        Action::GoAway | Action::GoAwayBusy => {
            log::debug!(
                "graceful_drain: GOAWAY to {} HTTP/2 connection {}",
                if action == Action::GoAway {
                    "idle"
                } else {
                    "busy"
                },
                conn.id
            );
            host.inject_write(&GOAWAY_NO_ERROR)
        }
        Action::Close => {
            log::debug!("graceful_drain: closing idle connection {}", conn.id);
            host.close(b"graceful_drain_idle_close")
        }
    }
}

#[cold]
fn in_use() {
    log::warn!("graceful_drain: a connection's tracker was in use: bytes not followed");
}

#[cfg(test)]
mod tests;
