//! Exported network-filter hooks (`envoy.filters.network.dynamic_modules`, placed before the HTTP
//! connection manager). Each hook: guard, convert, delegate to [`crate::connections`], which
//! decides; this file only applies the decision, through `envoy::NetConnection`.

use super::abi::{Buffer, EnvoyPtr};
use super::envoy::{self, Hook, NetConnection};
use super::{envoy_bytes, guard};
use crate::config::NetworkFilterConfig;
use crate::connections::{
    self, Action, Conn, ConnSettings, FirstStream, Waker, WakerSlot, GOAWAY_NO_ERROR,
};
use crate::state::{Protocol, Stat, EVENT_GO_AWAY};
use crate::tracking::Tracking;
use std::cell::{Cell, OnceCell, RefCell};
use std::os::raw::c_void;
use std::ptr;
use std::sync::Arc;

const STATUS_CONTINUE: u32 = 0;
/// `envoy_dynamic_module_type_network_connection_event`: RemoteClose, LocalClose.
const EVENT_REMOTE_CLOSE: u32 = 0;
const EVENT_LOCAL_CLOSE: u32 = 1;

/// Its stats are the bootstrap extension's (`super::stats`, through `Shared::counters`): what
/// its connections count (told idle, sent away, served while draining, untracked) lands in the
/// same stats as the HTTP filter's.
struct NetConfig {
    /// This listener's idle settings, given to each of its connections.
    settings: ConnSettings,
    /// Follow every exchange from the bytes (`track_requests`: connection mode).
    track_requests: bool,
}

/// One connection's filter. Only shared references to it are ever made: its hooks can nest (a
/// close or a write made from the scheduled hook raises the event and write hooks of the same
/// filter at once), so every field that changes is a cell.
struct NetFilter {
    config: *const NetConfig,
    conn: OnceCell<Arc<Conn>>,
    slot: Cell<Option<WakerSlot>>,
    /// An HTTP/2 client's frames until its first stream (while `conn` is watching for it).
    first_stream: Cell<FirstStream>,
    /// The connection raised a close event: Envoy's side of it may be gone before a scheduled
    /// event still queued for this filter runs (ENVOY_FACTS.md, schedulers), so that event
    /// must not call back into Envoy.
    closed: Cell<bool>,
    /// The connection's requests, followed from its bytes (connection mode), if configured.
    tracking: Option<RefCell<Tracking>>,
}

fn commit(waker: usize, event: u64) {
    // SAFETY: `waker` is a live scheduler: the caller holds a counted reference to it
    // (`connections::Waker`), and only the last reference deletes it.
    super::threads().call("connection_wake", || unsafe {
        envoy::net_scheduler_commit(waker, event)
    });
}

fn delete_scheduler(waker: usize) {
    // SAFETY: called once, by the last holder of the scheduler (see `Waker`).
    let delete = || unsafe { envoy::net_scheduler_delete(waker) };
    if crate::threads::Threads::on_module_thread() {
        // The last holder can be the idle-grace thread: `Connections::wake_all` drops its
        // snapshot there after committing. A module thread reaches Envoy only through the gate:
        // after the exit was released the scheduler is left to the process's end (#44 item 10).
        super::threads().call("connection_waker_delete", delete);
    } else {
        // Envoy's own threads (a filter's destroy hook, the drain start on the main thread).
        delete()
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_config_new(
    _ce: EnvoyPtr,
    _name: Buffer,
    config: Buffer,
) -> *const c_void {
    guard("network_filter_config_new", ptr::null(), || {
        // SAFETY: Envoy's config bytes are valid for the duration of this call.
        let raw = unsafe { envoy_bytes(config) };
        match NetworkFilterConfig::parse(raw) {
            Ok(NetworkFilterConfig {
                idle_close_grace: grace,
                idle_after,
                track_requests,
            }) => {
                let c = &super::shared().connections;
                c.install_commit(commit);
                let settings = ConnSettings {
                    idle_after,
                    idle_close_grace: grace,
                };
                c.note_config(settings);
                if track_requests {
                    c.note_tracking();
                }
                log::info!(
                    "graceful_drain: network filter loaded (idle connections are told at drain \
                     start; idle_close_grace={grace:?}, idle_after={idle_after:?}, \
                     track_requests={track_requests})"
                );
                if track_requests {
                    super::publish_active_requests();
                }
                Box::into_raw(Box::new(NetConfig {
                    settings,
                    track_requests,
                })) as *const c_void
            }
            Err(e) => {
                log::error!("{e}");
                ptr::null()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_config_destroy(cm: *const c_void) {
    guard("network_filter_config_destroy", (), || {
        #[cfg(feature = "cross-check")]
        {
            let (checks, ahead, disagreements, starts) = crate::connections::cross_check_tallies();
            log::info!(
                "graceful_drain: cross-check: {checks} checks ({starts} at request starts, the \
                 others at reads), the tracker ahead at {ahead}, {disagreements} disagreements"
            );
        }
        if !cm.is_null() {
            // SAFETY: from Box::into_raw in config_new; Envoy destroys it once, after its filters.
            drop(unsafe { Box::from_raw(cm as *mut NetConfig) });
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_new(
    cm: *const c_void,
    _fe: EnvoyPtr,
) -> *const c_void {
    guard("network_filter_new", ptr::null(), || {
        // SAFETY: the config outlives its filters.
        let track = unsafe { (cm as *const NetConfig).as_ref() }.is_some_and(|c| c.track_requests);
        // Per connection, by its listener's own config, whatever other listeners have: where
        // this listener's chain has the HTTP filter too, the tracker's count is the one, and the
        // HTTP filter takes no ticket for the connection's requests (`StreamMark::
        // counted_by_tracker`). The test-only cross-check build follows beside the HTTP filter
        // without counting instead.
        let tracking = match track {
            #[cfg(feature = "cross-check")]
            true if super::shared().data_filter_loaded() => Some(Tracking::shadow()),
            true => Some(Tracking::new()),
            false => None,
        };
        Box::into_raw(Box::new(NetFilter {
            config: cm as *const NetConfig,
            conn: OnceCell::new(),
            slot: Cell::new(None),
            first_stream: Cell::new(FirstStream::default()),
            closed: Cell::new(false),
            tracking: tracking.map(RefCell::new),
        })) as *const c_void
    })
}

/// # Safety
/// `fm` must be a pointer returned by `on_network_filter_new` and not yet destroyed.
unsafe fn net_filter<'a>(fm: *const c_void) -> Option<&'a NetFilter> {
    // SAFETY: per the contract; a shared reference only (hooks may nest: see NetFilter), on the
    // filter's worker.
    unsafe { (fm as *const NetFilter).as_ref() }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_new_connection(
    fe: EnvoyPtr,
    fm: *const c_void,
) -> u32 {
    guard("network_filter_new_connection", STATUS_CONTINUE, || {
        // SAFETY: our own filter pointer.
        let Some(f) = (unsafe { net_filter(fm) }) else {
            return STATUS_CONTINUE;
        };
        let hook = Hook::frame();
        // SAFETY: the filter's own pointer inside its hook; callbacks are set by now.
        let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
        let id = envoy.id();
        let requests = &super::shared().requests;
        let lane = requests.lane();
        // SAFETY: the config outlives its filters.
        let settings =
            unsafe { f.config.as_ref() }.map_or_else(ConnSettings::default, |c| c.settings);
        let conn = Arc::new(
            Conn::on_lane(id, lane, lane.and_then(|l| requests.reserve(l))).with_settings(settings),
        );
        if f.tracking.as_ref().is_some_and(|t| t.borrow().counts()) {
            conn.set_followed(true);
        }
        connections::register(&conn);
        let _ = f.conn.set(conn);
        if let Some(s) = envoy.new_scheduler() {
            let waker = Waker::new(s, delete_scheduler);
            f.slot
                .set(Some(super::shared().connections.wakers.insert(waker)));
            if let Some(conn) = f.conn.get() {
                conn.set_wakeable();
            }
        }
        STATUS_CONTINUE
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_read(
    fe: EnvoyPtr,
    fm: *const c_void,
    data_len: usize,
    _end_stream: bool,
) -> u32 {
    guard("network_filter_read", STATUS_CONTINUE, || {
        // SAFETY: our own filter pointer.
        let Some(f) = (unsafe { net_filter(fm) }) else {
            return STATUS_CONTINUE;
        };
        let Some(conn) = f.conn.get() else {
            return STATUS_CONTINUE;
        };
        let mut tracking = match f.tracking.as_ref().map(RefCell::try_borrow_mut) {
            Some(Ok(t)) => Some(t),
            // Cannot be: its hooks do not nest into a read or write hook.
            Some(Err(_)) => {
                in_use();
                None
            }
            None => None,
        };
        if conn.read_wants_bytes(tracking.is_some()) {
            let hook = Hook::frame();
            // SAFETY: the filter's own pointer inside its read hook.
            let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
            read_with_bytes(
                envoy,
                conn,
                &f.first_stream,
                tracking.as_deref_mut(),
                data_len,
            );
        } else {
            conn.on_read(data_len, &[]);
        }
        STATUS_CONTINUE
    })
}

/// A read whose bytes are wanted: hands Envoy's read-buffer slices to
/// [`crate::tracking::on_read_hook`], which decides everything. Kept out of the read hook, so
/// that its stack buffers and calls do not weigh on the common path of a connection that is not
/// followed.
#[inline(never)]
fn read_with_bytes(
    envoy: NetConnection,
    conn: &Conn,
    first_stream: &Cell<FirstStream>,
    tracking: Option<&mut Tracking>,
    data_len: usize,
) {
    let mut watch = first_stream.get();
    envoy.with_read_slices(|chunks| {
        crate::tracking::on_read_hook(
            conn,
            data_len,
            chunks,
            &mut watch,
            tracking,
            super::shared(),
            now,
        )
    });
    first_stream.set(watch);
}

#[cold]
fn in_use() {
    log::warn!("graceful_drain: a connection's tracker was in use: bytes not followed");
}

/// The coarse clock the HTTP filter stamps a stream's end with (`StreamSink::now_nanos`).
fn now() -> u64 {
    super::coarse_monotonic_nanos()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_write(
    fe: EnvoyPtr,
    fm: *const c_void,
    data_len: usize,
    _end_stream: bool,
) -> u32 {
    guard("network_filter_write", STATUS_CONTINUE, || {
        // SAFETY: our own filter pointer.
        let Some(f) = (unsafe { net_filter(fm) }) else {
            return STATUS_CONTINUE;
        };
        let Some(conn) = f.conn.get() else {
            return STATUS_CONTINUE;
        };
        conn.on_write(data_len);
        // An empty write (Envoy makes one at a proxied response's end, ENVOY_FACTS.md §6) has
        // no byte to follow: no buffer callbacks for it.
        if let Some(tracking) = f.tracking.as_ref().filter(|_| data_len > 0) {
            let Ok(mut t) = tracking.try_borrow_mut() else {
                in_use();
                return STATUS_CONTINUE;
            };
            let shared = super::shared();
            if t.on_write_len(data_len, conn, shared, now) {
                return STATUS_CONTINUE;
            }
            let hook = Hook::frame();
            // SAFETY: the filter's own pointer inside its write hook.
            let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
            let edit =
                envoy.with_write_slices(|chunks| t.on_write_bytes(chunks, conn, shared, now));
            drop(t);
            // After the slices are released: the rewrite changes the buffer they described.
            if edit.is_some_and(|e| !envoy.replace_write_start(e.replaced(), e.pieces())) {
                log::warn!(
                    "graceful_drain: could not edit connection: close in a response on \
                     connection {}",
                    conn.id
                );
            }
        }
        STATUS_CONTINUE
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_event(
    _fe: EnvoyPtr,
    fm: *const c_void,
    event: u32,
) {
    guard("network_filter_event", (), || {
        // SAFETY: our own filter pointer.
        if let Some(f) = unsafe { net_filter(fm) } {
            if matches!(event, EVENT_REMOTE_CLOSE | EVENT_LOCAL_CLOSE) {
                f.closed.set(true);
                // Test-only: the streams the close resets end in both filters in no set order.
                #[cfg(feature = "cross-check")]
                if let Some(conn) = f.conn.get() {
                    conn.cross_check_event(None);
                }
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_scheduled(
    fe: EnvoyPtr,
    fm: *const c_void,
    event_id: u64,
) {
    guard("network_filter_scheduled", (), || {
        // SAFETY: our own filter pointer.
        let Some(f) = (unsafe { net_filter(fm) }) else {
            return;
        };
        let Some(conn) = f.conn.get() else { return };
        if f.closed.get() {
            return;
        }
        let hook = Hook::frame();
        // SAFETY: the filter's own pointer inside its hook, not closed (see NetFilter::closed).
        let envoy = unsafe { NetConnection::in_hook(&hook, fe) };
        if !envoy.is_open() {
            return;
        }
        let shared = super::shared();
        // The clock the HTTP filter stamps a stream's end with (StreamSink::now_nanos).
        let now = super::coarse_monotonic_nanos();
        let send_away_once = |id, http2| {
            let p = if http2 {
                Protocol::Http2
            } else {
                Protocol::Http1
            };
            shared.send_away_once(Some(id), || p).is_some()
        };
        let done = conn.on_scheduled(&shared.connections, event_id, now, send_away_once);
        // Sent-away connections were counted by `send_away_once`.
        for (p, told) in [
            (Protocol::Http1, done.told_http1),
            (Protocol::Http2, done.told_http2),
        ] {
            if told {
                shared.counters.count(Stat::IdleTold(p));
            }
        }
        let action = done.action;
        match action {
            Action::Nothing => {}
            Action::WakeStream(word) => crate::ffi::http::wake_stream(word, EVENT_GO_AWAY),
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
                envoy.inject_write(&GOAWAY_NO_ERROR)
            }
            Action::Close => {
                log::debug!("graceful_drain: closing idle connection {}", conn.id);
                envoy.close(b"graceful_drain_idle_close")
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_network_filter_destroy(fm: *const c_void) {
    guard("network_filter_destroy", (), || {
        if fm.is_null() {
            return;
        }
        // SAFETY: from Box::into_raw in filter_new; Envoy destroys it exactly once.
        let f = unsafe { Box::from_raw(fm as *mut NetFilter) };
        // May run on the drain side's thread, inside its commit (see crate::connections): touch
        // only thread-safe state here.
        if let Some(slot) = f.slot.get() {
            // Deletes the scheduler now, or when a commit in progress lets go of it.
            drop(super::shared().connections.wakers.remove(slot));
        }
        if let Some(conn) = f.conn.get() {
            if let Some(tracking) = &f.tracking {
                if let Ok(mut t) = tracking.try_borrow_mut() {
                    t.on_close(conn, super::shared());
                }
            }
            connections::unregister(conn);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::{EVENT_CONFIRM_CLOSE, EVENT_DRAIN_STARTED, EVENT_GRACE_OVER};
    use crate::ffi::abi::{
        reset_fake, script, script_with_args, take_calls, take_calls_with_args, Arg, Call,
    };
    use crate::ffi::module_buffer;

    /// Envoy's `which` ("read" or "write") buffer holds `bytes` (one slice) in the hook that runs
    /// next: its chunk callbacks hand them over.
    fn buffer_holds(which: &str, bytes: &'static [u8]) {
        let (size, chunks) = match which {
            "read" => (
                "envoy_dynamic_module_callback_network_filter_get_read_buffer_chunks_size",
                "envoy_dynamic_module_callback_network_filter_get_read_buffer_chunks",
            ),
            _ => (
                "envoy_dynamic_module_callback_network_filter_get_write_buffer_chunks_size",
                "envoy_dynamic_module_callback_network_filter_get_write_buffer_chunks",
            ),
        };
        script(size, || 1);
        script_with_args(chunks, move |args| {
            let [_, Arg::Ptr(out)] = args else {
                panic!("chunks(filter, out): {args:?}")
            };
            // SAFETY: the module's room for the one slice the size callback reported.
            unsafe {
                *(*out as *mut Buffer) = Buffer {
                    ptr: bytes.as_ptr().cast(),
                    len: bytes.len(),
                }
            };
            1
        });
    }

    /// A connection of a network filter configured with `config` (JSON), as Envoy opens it
    /// (connection id 7, at fake address 0x200): (config, filter).
    fn open_connection(config: &str) -> (*const c_void, *const c_void) {
        reset_fake();
        let cm = envoy_dynamic_module_on_network_filter_config_new(
            fake_envoy_ptr(0x100),
            module_buffer(b"graceful_drain"),
            module_buffer(config.as_bytes()),
        );
        assert!(!cm.is_null(), "the config is accepted");
        let fm = envoy_dynamic_module_on_network_filter_new(cm, fake_envoy_ptr(0x200));
        script(
            "envoy_dynamic_module_callback_network_filter_get_connection_id",
            || 7,
        );
        envoy_dynamic_module_on_network_filter_new_connection(fake_envoy_ptr(0x200), fm);
        (cm, fm)
    }

    /// One exchange on the connection: the client's `request` read, the server's `response`
    /// written (the hooks as Envoy calls them).
    fn exchange(fm: *const c_void, request: &'static [u8], response: &'static [u8]) {
        let fe = fake_envoy_ptr(0x200);
        buffer_holds("read", request);
        envoy_dynamic_module_on_network_filter_read(fe, fm, request.len(), false);
        buffer_holds("write", response);
        envoy_dynamic_module_on_network_filter_write(fe, fm, response.len(), false);
    }

    fn close_connection(cm: *const c_void, fm: *const c_void) {
        envoy_dynamic_module_on_network_filter_event(fake_envoy_ptr(0x200), fm, EVENT_REMOTE_CLOSE);
        envoy_dynamic_module_on_network_filter_destroy(fm);
        envoy_dynamic_module_on_network_filter_config_destroy(cm);
    }

    /// The calls named `name` among `calls`, by their arguments.
    fn args_of(calls: &[Call], name: &str) -> Vec<Vec<Arg>> {
        calls
            .iter()
            .filter(|c| c.name == name)
            .map(|c| c.args.clone())
            .collect()
    }

    /// An idle HTTP/2 connection (its client's preface and SETTINGS read, the server's SETTINGS
    /// written) hears of the drain start as one GOAWAY frame written towards the client: NO_ERROR,
    /// last stream id 2^31-1 (every stream it sent is served), on stream 0, the connection left
    /// open (no end of stream), and nothing else written or closed.
    #[test]
    fn an_idle_http2_connection_is_sent_one_no_error_goaway_at_the_drain_start() {
        let (cm, fm) = open_connection("{}");
        // The client preface, then an empty SETTINGS frame; the server's empty SETTINGS.
        exchange(
            fm,
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
            b"\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        );
        take_calls();
        envoy_dynamic_module_on_network_filter_scheduled(
            fake_envoy_ptr(0x200),
            fm,
            EVENT_DRAIN_STARTED,
        );
        let calls = take_calls_with_args();
        let goaway: Vec<u8> = [
            &[0, 0, 8][..],            // length 8
            &[7],                      // type GOAWAY
            &[0],                      // no flags
            &[0, 0, 0, 0],             // stream 0
            &[0x7f, 0xff, 0xff, 0xff], // last stream id 2^31-1
            &[0, 0, 0, 0],             // NO_ERROR
        ]
        .concat();
        assert_eq!(
            args_of(&calls, "network_filter_inject_write_data"),
            [vec![Arg::Ptr(0x200), Arg::Bytes(goaway), Arg::Int(0)]],
            "{calls:?}"
        );
        assert!(
            args_of(&calls, "network_filter_close_with_details").is_empty(),
            "{calls:?}"
        );
        close_connection(cm, fm);
    }

    /// An idle HTTP/1.1 connection whose exchanges the filter follows (connection mode) is closed
    /// at the check after the drain start's: FlushWrite (what is written still reaches the client,
    /// then a clean FIN; never an abort or a reset), with details that name the module in Envoy's
    /// access log, and nothing written into it.
    #[test]
    fn an_idle_http1_connection_is_closed_with_a_flush_at_the_drain_start() {
        let (cm, fm) = open_connection(r#"{"track_requests": true, "idle_after": "0s"}"#);
        exchange(
            fm,
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        );
        let fe = fake_envoy_ptr(0x200);
        take_calls();
        envoy_dynamic_module_on_network_filter_scheduled(fe, fm, EVENT_DRAIN_STARTED);
        envoy_dynamic_module_on_network_filter_scheduled(fe, fm, EVENT_CONFIRM_CLOSE);
        let calls = take_calls_with_args();
        assert_eq!(
            args_of(&calls, "network_filter_close_with_details"),
            [vec![
                Arg::Ptr(0x200),
                Arg::Int(0), // FlushWrite
                Arg::Bytes(b"graceful_drain_idle_close".to_vec()),
            ]],
            "{calls:?}"
        );
        assert!(
            args_of(&calls, "network_filter_inject_write_data").is_empty(),
            "{calls:?}"
        );
        close_connection(cm, fm);
    }

    /// Envoy's side of a filter, as the fake callbacks see it: never dereferenced.
    fn fake_envoy_ptr(addr: usize) -> EnvoyPtr {
        ptr::without_provenance_mut(addr)
    }

    /// Against the fake callback table: a close event raised while a hook of the same filter runs
    /// (as Envoy raises it from inside a close) nests safely (shared references only), and a
    /// scheduled event that runs after the close makes no call into Envoy (its connection may be
    /// gone: ENVOY_FACTS.md §1); nor does the destroy hook.
    #[test]
    fn after_its_close_event_a_filter_makes_no_call_into_envoy() {
        reset_fake();
        let cm = envoy_dynamic_module_on_network_filter_config_new(
            fake_envoy_ptr(0x100),
            module_buffer(b"graceful_drain"),
            module_buffer(b"{}"),
        );
        assert!(!cm.is_null(), "the config is accepted");
        let fe = fake_envoy_ptr(0x200);
        let fm = envoy_dynamic_module_on_network_filter_new(cm, fe);
        script(
            "envoy_dynamic_module_callback_network_filter_get_connection_id",
            || 4242,
        );
        assert_eq!(
            envoy_dynamic_module_on_network_filter_new_connection(fe, fm),
            STATUS_CONTINUE
        );
        take_calls();
        // Open: the scheduled hook asks for the connection's state before anything else.
        envoy_dynamic_module_on_network_filter_scheduled(fe, fm, EVENT_DRAIN_STARTED);
        assert_eq!(take_calls(), ["network_filter_get_connection_state"]);
        // Envoy raises the close event from inside a call of this very hook.
        script(
            "envoy_dynamic_module_callback_network_filter_get_connection_state",
            move || {
                envoy_dynamic_module_on_network_filter_event(fe, fm, EVENT_LOCAL_CLOSE);
                0 // Open
            },
        );
        envoy_dynamic_module_on_network_filter_scheduled(fe, fm, EVENT_GRACE_OVER);
        take_calls();
        envoy_dynamic_module_on_network_filter_scheduled(fe, fm, EVENT_CONFIRM_CLOSE);
        assert_eq!(
            take_calls(),
            Vec::<&str>::new(),
            "closed: no call into Envoy"
        );
        envoy_dynamic_module_on_network_filter_destroy(fm);
        assert_eq!(take_calls(), Vec::<&str>::new(), "destroy calls nothing");
        envoy_dynamic_module_on_network_filter_config_destroy(cm);
    }
}
