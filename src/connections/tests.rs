//! Unit tests of the connection state machine, the index and the waker table.

use super::index::{LOCAL, LOCAL_SWEEP_MIN};
use super::*;
use crate::host::connection::ConnectionWakers;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

const T0: u64 = 10_000_000_000;
const IDLE: Duration = Duration::from_secs(1);
/// Long enough after T0 for a connection idle since T0 to count as idle.
const LATER: u64 = T0 + 2_000_000_000;

/// A check (drain start or grace over) followed by its confirmation, nothing in between.
fn check_then_confirm(c: &Conn, counts: &Counts, at_drain_start: bool) -> Action {
    let first = if at_drain_start {
        c.on_drain_started(counts, LATER, IDLE)
    } else {
        c.on_grace_over(counts, LATER, IDLE, true)
    };
    assert_eq!(first, Action::Nothing, "a check only marks");
    c.on_confirm_close(counts, LATER + 50_000_000, IDLE)
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// This test's own connection state, as with the network filter loaded (a commit installed).
fn with_network_filter() -> Connections {
    let c = Connections::default();
    c.note_loaded();
    c
}

fn h2_conn(id: u64) -> Conn {
    let c = Conn::new(id);
    c.on_read(PREFACE.len() + 9, &PREFACE[..H2_MAGIC_PREFIX.len()]);
    c
}

// The state machine (`machine.rs`).

#[test]
fn detects_http2_from_the_magic_prefix_like_the_connection_manager() {
    let c = h2_conn(1);
    assert_eq!(c.wire(), Wire::Http2);
    assert!(!c.sniffing());
    c.on_read(10, b"GET / HTTP/1.1"); // later bytes change nothing
    assert_eq!(c.wire(), Wire::Http2);
}

#[test]
fn anything_else_is_http1() {
    // A first read shorter than the prefix makes the connection manager pick HTTP/1 too.
    for first in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"P",
        b"PRI",
        b"PRX * HTTP/2",
        b"POST /",
    ] {
        let c = Conn::new(1);
        c.on_read(first.len(), first);
        assert_eq!(
            c.wire(),
            Wire::Http1,
            "{:?}",
            String::from_utf8_lossy(first)
        );
    }
    let c = Conn::new(2);
    c.on_read(0, b"");
    assert_eq!(c.wire(), Wire::Unknown, "an empty read decides nothing");
    assert!(c.sniffing());
}

#[test]
fn goaway_frame_is_a_no_error_goaway_for_every_stream() {
    let f = GOAWAY_NO_ERROR;
    assert_eq!(
        u32::from_be_bytes([0, f[0], f[1], f[2]]),
        8,
        "payload length"
    );
    assert_eq!(f[3], 7, "type GOAWAY");
    assert_eq!(f[4], 0, "flags");
    assert_eq!(u32::from_be_bytes([f[5], f[6], f[7], f[8]]), 0, "stream 0");
    assert_eq!(
        u32::from_be_bytes([f[9], f[10], f[11], f[12]]),
        (1 << 31) - 1
    );
    assert_eq!(
        u32::from_be_bytes([f[13], f[14], f[15], f[16]]),
        0,
        "NO_ERROR"
    );
}

#[test]
fn idle_http2_gets_goaway_then_close_once() {
    let counts = Counts::default();
    let c = h2_conn(1);
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing,
        "no GOAWAY before the server preface"
    );
    c.on_write(9);
    c.stream_started();
    c.stream_ended(T0);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing,
        "once"
    );
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Nothing);
    assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
}

#[test]
fn http2_without_goaway_at_drain_start_gets_it_at_a_later_check() {
    // Server preface not written yet at the drain start (or connected during the drain).
    let counts = Counts::default();
    let c = h2_conn(1);
    assert_eq!(c.on_drain_started(&counts, T0, IDLE), Action::Nothing);
    c.on_write(9);
    assert_eq!(c.on_grace_over(&counts, T0, IDLE, true), Action::GoAway);
    assert_eq!(c.on_grace_over(&counts, T0, IDLE, true), Action::Nothing);
    assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
}

#[test]
fn http2_control_frames_do_not_make_it_busy() {
    let counts = Counts::default();
    let c = h2_conn(1);
    c.on_write(9);
    c.stream_started();
    c.stream_ended(T0);
    c.on_read(9, b""); // SETTINGS ack, PING...
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
}

#[test]
fn busy_connection_hands_back_its_latest_request() {
    let conns = with_network_filter();
    let counts = Counts::default();
    let c = Arc::new(h2_conn(91));
    c.on_write(9);
    register(&c);
    let mut first = conns.stream_started(|| Some(91));
    assert!(
        !first.reached_by_connection(),
        "no scheduler on the network filter"
    );
    c.set_wakeable();
    assert!(first.reached_by_connection());
    first.attach(0x1000);
    let mut second = conns.stream_started(|| Some(91));
    second.attach(0x2000);
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::WakeStream(0x2000),
        "the latest request"
    );
    // The older one ending does not take the latest one's place away.
    stream_ended(first, || T0);
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::WakeStream(0x2000)
    );
    assert_eq!(counts.snapshot(), IdleTold::default(), "busy: not idle");
    unregister(&c);
    stream_ended(second, || T0);
}

#[test]
fn busy_http2_whose_latest_request_ended_gets_goaway_from_here() {
    let conns = with_network_filter();
    let counts = Counts::default();
    let c = Arc::new(h2_conn(92));
    c.set_wakeable();
    register(&c);
    let mut older = conns.stream_started(|| Some(92));
    older.attach(0x1000);
    let mut latest = conns.stream_started(|| Some(92));
    latest.attach(0x2000);
    stream_ended(latest, || T0);
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing,
        "no GOAWAY before the server preface"
    );
    c.on_write(9);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAwayBusy);
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing,
        "once"
    );
    assert_eq!(counts.snapshot(), IdleTold::default(), "busy: not idle");
    // Closed once idle, like an idle one told at drain start (ended on the test's clock).
    c.stream_ended(T0);
    drop(older);
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
    unregister(&c);
}

#[test]
fn busy_http1_without_an_attached_request_is_left_to_its_own_waker() {
    let counts = Counts::default();
    let c = Conn::new(1);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    c.stream_started();
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    assert_eq!(counts.snapshot(), IdleTold::default());
}

#[test]
fn http2_stream_arriving_after_goaway_keeps_the_connection() {
    let counts = Counts::default();
    let c = h2_conn(1);
    c.on_write(9);
    c.stream_started();
    c.stream_ended(T0);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
    c.stream_started(); // the client had it in flight
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Nothing);
}

/// A frame header and payload as a client sends them.
fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// What a connection pool that pre-connects sends: preface, SETTINGS, WINDOW_UPDATE, a
/// SETTINGS ack and a PING, no stream.
fn streamless_client_bytes() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    b.extend(frame(4, 0, &[0, 3, 0, 0, 0, 100]));
    b.extend(frame(8, 0, &[0, 0xf, 0, 1]));
    b.extend(frame(4, 0, &[]));
    b.extend(frame(6, 0, &[0; 8]));
    b.extend(frame(2, 3, &[0, 0, 0, 0, 16]));
    b
}

#[test]
fn first_stream_follows_control_frames_across_any_split() {
    let control = streamless_client_bytes();
    let mut opened = control.clone();
    opened.extend(frame(1, 1, &[0x82, 0x86, 0x84]));
    for step in [1, 2, 5, 9, 13, 100, control.len()] {
        let mut w = FirstStream::default();
        assert!(
            control.chunks(step).all(|c| w.feed(c)),
            "control frames only, fed {step} bytes at a time"
        );
        let mut w = FirstStream::default();
        assert!(
            !opened.chunks(step).all(|c| w.feed(c)),
            "HEADERS seen, fed {step} bytes at a time"
        );
    }
}

/// The network filter's read glue: the client's bytes in reads of any split, each read's
/// slices split again, as Envoy's buffer chunks may be.
fn read_in(c: &Conn, bytes: &[u8], step: usize) -> FirstStream {
    let mut watch = FirstStream::default();
    for read in bytes.chunks(step) {
        if c.following_bytes() {
            let slices = || Some(read.chunks(3));
            c.on_followed_read(read.len(), &slices, &mut watch);
        } else {
            c.on_read(read.len(), &[]);
        }
    }
    watch
}

#[test]
fn followed_reads_detect_the_protocol_and_the_first_stream_across_any_split() {
    let control = streamless_client_bytes();
    let mut opened = control.clone();
    opened.extend(frame(1, 1, &[0x82, 0x86, 0x84]));
    // From 12 bytes a read: a shorter first read is HTTP/1 to the connection manager too
    // (`determineNextProtocol` looks at the first data only), so to this.
    for step in [12, 13, 40, opened.len()] {
        let c = Conn::new(1);
        read_in(&c, &control, step);
        assert_eq!(c.wire(), Wire::Http2, "{step}");
        assert!(
            c.watching_first_stream(),
            "no stream yet ({step} bytes a read)"
        );
        let c = Conn::new(2);
        read_in(&c, &opened, step);
        assert!(
            !c.following_bytes(),
            "a stream opened ({step} bytes a read)"
        );
    }
    let c = Conn::new(3);
    read_in(&c, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n", 5);
    assert_eq!(c.wire(), Wire::Http1);
    assert!(
        !c.following_bytes(),
        "HTTP/1.1 needs no bytes after the first"
    );
    // A read whose slices Envoy could not give: detection waits, the first stream is assumed.
    let c = h2_conn(4);
    let none = || None::<std::slice::Chunks<'static, u8>>;
    c.on_followed_read(9, &none, &mut FirstStream::default());
    assert!(
        !c.following_bytes(),
        "bytes it could not read may open a stream"
    );
}

#[test]
fn a_scheduled_event_says_what_to_do_and_which_counters_move() {
    let connections = with_network_filter();
    let c = h2_conn(5);
    c.on_write(9);
    let never = |_, _| panic!("an idle connection is not sent away as busy");
    let told = c.on_scheduled(&connections, EVENT_DRAIN_STARTED, LATER, never);
    assert_eq!(
        told,
        Scheduled {
            action: Action::GoAway,
            told_http1: false,
            told_http2: true,
            sent_away_http2: false,
            sent_away_http1: false,
        }
    );
    let unknown = c.on_scheduled(&connections, 99, LATER, never);
    assert_eq!(unknown.action, Action::Nothing);
    assert!(!unknown.told_http2, "counted once");
}

/// Two listeners with their own idle_close_grace (1 s and 4 s): at a re-check 1.5 s after
/// the drain start, the first's idle HTTP/2 connection (sent GOAWAY at the start) is closed,
/// the second's is not yet; it is at a re-check past its own 4 s. Before, the settings were
/// process-wide: the last config loaded set them for every listener.
#[test]
fn each_connection_closes_after_its_own_listener_s_grace() {
    let connections = with_network_filter();
    let grace = |ms| ConnSettings {
        idle_close_grace: Duration::from_millis(ms),
        ..ConnSettings::default()
    };
    let short = h2_conn(1).with_settings(grace(1000));
    let long = h2_conn(2).with_settings(grace(4000));
    let at = |ms: u64| LATER + ms * 1_000_000;
    let any = |_, _| true;
    for c in [&short, &long] {
        c.on_write(9);
        let told = c.on_scheduled(&connections, EVENT_DRAIN_STARTED, at(0), any);
        assert_eq!(told.action, Action::GoAway);
    }
    let check_then_confirm = |c: &Conn, ms: u64| {
        let first = c
            .on_scheduled(&connections, EVENT_GRACE_OVER, at(ms), any)
            .action;
        assert_eq!(first, Action::Nothing, "a check only marks");
        c.on_scheduled(&connections, EVENT_CONFIRM_CLOSE, at(ms + 50), any)
            .action
    };
    assert_eq!(
        check_then_confirm(&long, 1500),
        Action::Nothing,
        "within its grace"
    );
    assert_eq!(
        check_then_confirm(&short, 1500),
        Action::Close,
        "past its grace"
    );
    assert_eq!(
        check_then_confirm(&long, 4500),
        Action::Close,
        "past its own"
    );
}

/// The re-check timer wakes the workers one grace after it woke them for the drain start;
/// a worker that stamped the drain start a few milliseconds after that wake-up still closes
/// its connections at that first re-check (the close, CONFIRM_DELAY after it, is past the
/// grace the client was given), not a whole grace later. Before, the check alone was judged,
/// a few milliseconds short. The connections: an HTTP/1.1 one whose last request ended just
/// before the drain start (not idle yet then), and an idle HTTP/2 one told at the start.
#[test]
fn a_connection_whose_worker_saw_the_drain_start_late_closes_at_the_first_re_check() {
    let connections = with_network_filter();
    let at = |ms: u64| LATER + ms * 1_000_000;
    let any = |_, _| true;
    let grace = DEFAULT_IDLE_CLOSE_GRACE.as_millis() as u64;
    let confirm = CONFIRM_DELAY.as_millis() as u64;
    let conns = || {
        let h1 = Conn::new(7);
        h1.on_read(20, b"GET / HTTP/1.1\r\n");
        h1.exchange_started();
        h1.exchange_ended(at(0) - 200_000_000);
        let h2 = h2_conn(8);
        h2.on_write(9);
        // The timer woke the workers at at(0); they stamped the drain start 4 ms later.
        let h1_start = h1.on_scheduled(&connections, EVENT_DRAIN_STARTED, at(4), any);
        assert_eq!(
            h1_start.action,
            Action::Nothing,
            "busy 200 ms ago: not idle yet"
        );
        let h2_start = h2.on_scheduled(&connections, EVENT_DRAIN_STARTED, at(4), any);
        assert_eq!(h2_start.action, Action::GoAway);
        [h1, h2]
    };
    // A re-check at `check_ms`, its confirmation CONFIRM_DELAY later.
    let recheck = |c: &Conn, check_ms: u64| {
        let first = c.on_scheduled(&connections, EVENT_GRACE_OVER, at(check_ms), any);
        assert_eq!(first.action, Action::Nothing, "a check only marks");
        c.on_scheduled(
            &connections,
            EVENT_CONFIRM_CLOSE,
            at(check_ms + confirm),
            any,
        )
        .action
    };
    // The timer's first re-check: one grace after its wake-up (after its CONFIRM_DELAY
    // for the drain start's confirmation, it sleeps grace - CONFIRM_DELAY).
    for c in conns() {
        assert_eq!(recheck(&c, grace), Action::Close, "{:?}", c.wire());
    }
    // A re-check earlier than that closes neither: the clients had less than their grace.
    for c in conns() {
        assert_eq!(
            recheck(&c, grace - confirm - 10),
            Action::Nothing,
            "{:?}",
            c.wire()
        );
    }
}

/// A busy HTTP/1.1 connection its tracker follows is counted as sent away at the drain
/// start (its in-flight response gets `connection: close` from the tracker); one the HTTP
/// filter counts, or one the tracker lost, is not counted here.
#[test]
fn a_followed_busy_http1_connection_is_counted_as_sent_away_at_the_drain_start() {
    let connections = with_network_filter();
    let c = Conn::new(6);
    c.on_read(20, b"GET / HTTP/1.1\r\n");
    c.set_followed(true);
    c.exchange_started();
    let mut asked = Vec::new();
    let told = c.on_scheduled(&connections, EVENT_DRAIN_STARTED, LATER, |id, h2| {
        asked.push((id, h2));
        true
    });
    assert_eq!(told.action, Action::Nothing);
    assert!(told.sent_away_http1);
    assert_eq!(asked, [(6, false)]);
    let lost = Conn::new(7);
    lost.on_read(20, b"GET / HTTP/1.1\r\n");
    lost.set_followed(true);
    lost.exchange_started();
    lost.set_untracked();
    let never = |_, _| panic!("not counted");
    let told = lost.on_scheduled(&connections, EVENT_DRAIN_STARTED, LATER, never);
    assert!(!told.sent_away_http1);
}

#[test]
fn first_stream_ends_on_anything_it_does_not_follow() {
    for bad in [
        frame(0, 1, b"data"),      // DATA
        frame(3, 1, &[0; 4]),      // RST_STREAM
        frame(4, 1, &[]),          // SETTINGS on a stream
        frame(0x42, 0, &[]),       // unknown type
        frame(6, 0, &[0; 20_000]), // larger than the default maximum frame size
    ] {
        let mut b = PREFACE.to_vec();
        b.extend(bad);
        assert!(!FirstStream::default().feed(&b), "{:?}", &b[24..33]);
    }
    // The same buffer fed twice (a filter after this one left it undrained): the preface read
    // as a frame header does not fit.
    let mut w = FirstStream::default();
    assert!(w.feed(PREFACE));
    assert!(!w.feed(PREFACE));
}

#[test]
fn http2_that_never_opened_a_stream_is_closed_after_the_grace() {
    let counts = Counts::default();
    let c = h2_conn(1);
    assert!(c.watching_first_stream());
    c.on_write(9);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
    assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
    // A stream opened between the check and its confirmation keeps the connection.
    let c = h2_conn(2);
    c.on_write(9);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    c.first_stream_seen();
    assert_eq!(
        c.on_confirm_close(&counts, LATER + 50_000_000, IDLE),
        Action::Nothing
    );
    // An HTTP/1.1 connection is never watched.
    let h1 = Conn::new(3);
    h1.on_read(16, b"GET / HTTP/1.1\r\n");
    assert!(!h1.watching_first_stream());
}

#[test]
fn untracked_http2_gets_goaway_but_no_close() {
    // It may have carried a stream that no HTTP filter saw (no HTTP filter on the listener):
    // the GOAWAY is safe either way, a close is not.
    let counts = Counts::default();
    let c = h2_conn(1);
    c.first_stream_seen();
    c.on_write(9);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::GoAway);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
}

#[test]
fn idle_http1_is_closed_at_drain_start() {
    let counts = Counts::default();
    let c = Conn::new(1);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    c.stream_started();
    c.on_write(100);
    c.stream_ended(T0);
    assert_eq!(check_then_confirm(&c, &counts, true), Action::Close);
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Nothing);
    assert_eq!(counts.snapshot(), IdleTold { http1: 1, http2: 0 });
}

#[test]
fn http1_with_a_request_read_or_in_flight_is_not_closed() {
    let counts = Counts::default();
    let c = Conn::new(1);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    c.stream_started();
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing,
        "in flight"
    );
    c.stream_ended(T0);
    // Bytes of the next request read, its stream not started yet (headers incomplete).
    c.on_read(10, b"");
    assert_eq!(
        c.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing,
        "request on its way"
    );
    c.stream_started();
    c.stream_ended(T0);
    // The response carried connection: close; whatever is left is closed after the grace.
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
    assert_eq!(counts.snapshot(), IdleTold { http1: 1, http2: 0 });
}

#[test]
fn http1_between_back_to_back_requests_is_busy_not_idle() {
    // A keep-alive client sending back to back: its last response ended just now.
    let counts = Counts::default();
    let c = Conn::new(1);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    c.stream_started();
    c.stream_ended(T0);
    let just_after = T0 + 1_000_000; // 1 ms
    assert_eq!(
        c.on_drain_started(&counts, just_after, IDLE),
        Action::Nothing
    );
    assert_eq!(
        c.on_grace_over(&counts, T0 + 500_000_000, IDLE, true),
        Action::Nothing
    );
    // The client stopped sending: a later check closes it.
    assert_eq!(check_then_confirm(&c, &counts, false), Action::Close);
    assert_eq!(counts.snapshot(), IdleTold { http1: 1, http2: 0 });
}

#[test]
fn http1_request_arriving_between_check_and_confirmation_is_not_cut() {
    let counts = Counts::default();
    let c = Conn::new(1);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    c.stream_started();
    c.stream_ended(T0);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    // The client's next request was in the socket buffer: read before the confirmation.
    c.on_read(40, b"");
    assert_eq!(c.on_confirm_close(&counts, LATER, IDLE), Action::Nothing);
    // Or read, served and finished within the confirmation delay.
    let c = Conn::new(2);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    c.stream_started();
    c.stream_ended(T0);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    c.on_read(40, b"");
    c.stream_started();
    c.stream_ended(LATER + 10_000_000);
    assert_eq!(
        c.on_confirm_close(&counts, LATER + 50_000_000, IDLE),
        Action::Nothing
    );
    // A confirmation without a check closes nothing.
    assert_eq!(
        c.on_confirm_close(&counts, LATER * 2, IDLE),
        Action::Nothing
    );
    assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 0 });
}

#[test]
fn http1_never_tracked_is_not_closed() {
    // No HTTP filter saw a stream: idle cannot be told from busy.
    let counts = Counts::default();
    let c = Conn::new(1);
    c.on_read(40, b"GET / HTTP/1.1\r\n");
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    let fresh = Conn::new(2);
    assert_eq!(
        fresh.on_drain_started(&counts, LATER, IDLE),
        Action::Nothing
    );
}

/// The glue's gate (issue 63 item 3): after Envoy's own GOAWAY the connection counts as told
/// and ours never goes, at the drain start or at a later check; while the tracker cannot vouch
/// (lost, or the server inside a frame), nothing goes now and a later check may send it.
#[test]
fn a_goaway_of_ours_waits_for_the_gate_and_never_follows_envoy_s_own() {
    let counts = Counts::default();
    // Idle, Envoy's GOAWAY already sent.
    let c = h2_conn(1);
    c.on_write(9);
    c.set_goaway_gate(GoAwayGate::EnvoySent);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    // Busy, likewise.
    let c = h2_conn(2);
    c.on_write(9);
    c.stream_started();
    c.set_goaway_gate(GoAwayGate::EnvoySent);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    // Not now, then may: told at the later check, once.
    let c = h2_conn(3);
    c.on_write(9);
    c.set_goaway_gate(GoAwayGate::NotNow);
    assert_eq!(c.on_drain_started(&counts, LATER, IDLE), Action::Nothing);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    c.set_goaway_gate(GoAwayGate::May);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::GoAway);
    assert_eq!(c.on_grace_over(&counts, LATER, IDLE, true), Action::Nothing);
    assert_eq!(counts.snapshot(), IdleTold { http1: 0, http2: 1 });
}

// The index and the streams counted through it (`index.rs`).

#[test]
fn streams_are_counted_through_the_index() {
    let conns = with_network_filter();
    let c = Arc::new(Conn::new(77));
    assert!(!conns.stream_started(|| Some(77)).is_set(), "unknown id");
    register(&c);
    let m1 = conns.stream_started(|| Some(77));
    let m2 = conns.stream_started(|| Some(77));
    assert!(m1.is_set());
    assert!(!conns.stream_started(|| None).is_set());
    assert_eq!(c.streams(), 2);
    stream_ended(m1, || T0);
    stream_ended(StreamMark::default(), || T0);
    assert_eq!(c.streams(), 1);
    // Another thread (a teardown elsewhere) can unregister it; the mark still holds the
    // connection's state, so its stream ends without a lookup and without harm.
    let c2 = c.clone();
    std::thread::spawn(move || unregister(&c2)).join().unwrap();
    assert!(!conns.stream_started(|| Some(77)).is_set(), "unregistered");
    stream_ended(m2, || T0);
    assert_eq!(c.streams(), 0);
    // Found only on the thread that registered it (a connection's worker).
    let d = Arc::new(Conn::new(78));
    register(&d);
    let elsewhere = std::thread::scope(|sc| {
        sc.spawn(|| conns.stream_started(|| Some(78)).is_set())
            .join()
            .unwrap()
    });
    assert!(!elsewhere);
    assert!(conns.stream_started(|| Some(78)).is_set());
    unregister(&d);
    assert!(!conns.stream_started(|| Some(78)).is_set());
}

#[test]
fn without_the_network_filter_no_stream_is_counted() {
    // No commit installed: no network filter in this process, so the HTTP filter counts
    // nothing, even for a connection id this thread knows.
    let conns = Connections::default();
    let c = Arc::new(Conn::new(79));
    register(&c);
    let asked = std::cell::Cell::new(false);
    let m = conns.stream_started(|| {
        asked.set(true);
        Some(79)
    });
    assert!(!m.is_set());
    assert!(!asked.get(), "the connection id is not even asked for");
    assert_eq!(c.streams(), 0);
    // Once a network filter installs its commit, the same connection is found.
    conns.note_loaded();
    let m = conns.stream_started(|| Some(79));
    assert!(m.is_set());
    assert_eq!(c.streams(), 1);
    stream_ended(m, || T0);
    unregister(&c);
}

#[test]
fn connections_torn_down_elsewhere_are_swept_out_of_their_workers_map() {
    let net = with_network_filter();
    let conns: Vec<_> = (1000..1000 + 3 * LOCAL_SWEEP_MIN as u64)
        .map(|id| Arc::new(Conn::new(id)))
        .collect();
    for c in &conns {
        register(c);
    }
    let elsewhere = conns.clone();
    std::thread::spawn(move || elsewhere.iter().for_each(|c| unregister(c)))
        .join()
        .unwrap();
    // Still in this thread's map (marked gone) until registrations here sweep them out.
    assert!(
        !net.stream_started(|| Some(1000)).is_set(),
        "gone connections are not found"
    );
    let all_live = || LOCAL.with(|l| l.borrow().map.values().all(|c| !get(&c.gone)));
    let mut fresh = vec![];
    for id in 5000..5000 + 6 * LOCAL_SWEEP_MIN as u64 {
        let c = Arc::new(Conn::new(id));
        register(&c);
        fresh.push(c);
        if all_live() {
            break;
        }
    }
    assert!(all_live(), "gone entries were never swept out");
    assert!(
        fresh.len() <= conns.len() + 1,
        "swept only after {} registrations",
        fresh.len()
    );
    for c in &fresh {
        unregister(c);
    }
    assert_eq!(LOCAL.with(|l| l.borrow().map.len()), 0);
}

static DESTROYED: AtomicUsize = AtomicUsize::new(0);
fn destroy(w: usize) {
    DESTROYED.fetch_add(w, Ordering::SeqCst);
}

#[test]
fn wakers_insert_remove_snapshot_and_destroy_by_the_last_holder() {
    let w = Wakers::default();
    let a = w.insert(Waker::new(0x10, destroy));
    let b = w.insert(Waker::new(0x20, destroy));
    assert_eq!(w.len(), 2);
    let snap = w.snapshot();
    assert_eq!(snap.len(), 2);
    // The owner leaves while the drain side holds the snapshot: not destroyed yet.
    drop(w.remove(a));
    assert!(w.remove(a).is_none(), "twice is harmless");
    assert_eq!(DESTROYED.load(Ordering::SeqCst) & 0x10, 0);
    drop(snap);
    assert_eq!(DESTROYED.load(Ordering::SeqCst) & 0x10, 0x10, "last holder");
    let c = w.insert(Waker::new(0x40, destroy));
    let mut seen: Vec<usize> = w.snapshot().iter().map(|x| x.word()).collect();
    seen.sort();
    assert_eq!(seen, [0x20, 0x40]);
    drop(w.remove(b));
    drop(w.remove(c));
    assert!(w.is_empty());
    // From other threads (other shards).
    let w = Arc::new(Wakers::default());
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let w = w.clone();
            std::thread::spawn(move || w.insert(Waker::new(0x100 * (i + 1), destroy)))
        })
        .collect();
    let slots: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(w.len(), 4);
    for s in slots {
        assert!(w.remove(s).is_some());
    }
    assert!(w.is_empty());
}

#[test]
fn wake_all_commits_each_live_waker_and_drain_is_marked_once() {
    static SUM: AtomicUsize = AtomicUsize::new(0);
    struct Summing;
    impl ConnectionWakers for Summing {
        fn commit(&self, w: usize, e: u64) {
            assert_eq!(e, EVENT_DRAIN_STARTED);
            SUM.fetch_add(w, Ordering::SeqCst);
        }
    }
    let c = Connections::default();
    assert_eq!(
        c.wake_all(&Summing, EVENT_DRAIN_STARTED),
        0,
        "no network filter loaded"
    );
    c.note_loaded();
    let a = c.wakers.insert(Waker::new(0x1000, |_| {}));
    let _b = c.wakers.insert(Waker::new(0x2000, |_| {}));
    drop(c.wakers.remove(a));
    assert_eq!(c.wake_all(&Summing, EVENT_DRAIN_STARTED), 1);
    assert_eq!(SUM.load(Ordering::SeqCst), 0x2000);
    assert!(c.mark_draining());
    assert!(!c.mark_draining());
    assert!(c.is_draining());
    assert_eq!(
        c.graces(),
        (DEFAULT_IDLE_CLOSE_GRACE, DEFAULT_IDLE_CLOSE_GRACE),
        "no config: the default"
    );
    c.note_config(ConnSettings {
        idle_close_grace: Duration::from_millis(1500),
        ..ConnSettings::default()
    });
    c.note_config(ConnSettings {
        idle_close_grace: Duration::from_millis(4000),
        ..ConnSettings::default()
    });
    assert_eq!(
        c.graces(),
        (Duration::from_millis(1500), Duration::from_millis(4000)),
        "two listeners: each keeps its own"
    );
}
