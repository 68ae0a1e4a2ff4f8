//! Unit tests of a followed connection: reads and writes fed as Envoy hands them over (bytes fed
//! twice included), tickets, health checks, losses and the `connection: close` edits.

use super::*;
use crate::connections::Conn;
use crate::engine::drain::Trigger;
use crate::engine::state::tests::{counted, fast, fixture};
use crate::engine::state::Shared;
use crate::engine::state::Stat;

const GET: &[u8] = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n";
const PROBE: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\nuser-agent: kube-probe/1.31\r\n\r\n";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi";

fn now() -> u64 {
    7
}

fn read(t: &mut Tracking, buf: &[&[u8]], conn: &Conn, shared: &Shared) -> Fed {
    let len = buf.iter().map(|b| b.len()).sum();
    t.on_read(len, Some(buf.iter().copied()), conn, shared, now)
}

fn write(t: &mut Tracking, bytes: &[u8], conn: &Conn, shared: &Shared) -> Fed {
    t.on_write(Some([bytes].into_iter()), conn, shared, now)
}

/// #44 item 6: Envoy's connection manager has a stream from a head's first byte; the
/// tracker's ticket comes with the head's end. In between the head is counted, so a drain
/// never completes while a request is still arriving.
#[test]
fn a_head_on_its_way_holds_the_drain_from_its_first_byte() {
    use crate::engine::drain::Decision;
    use crate::engine::state::EnvoyObservation;
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    f.shared.start_drain(Trigger::Admin);
    f.clock.advance(std::time::Duration::from_millis(100));
    read(&mut t, &[b"GET /a HT"], &conn, &f.shared);
    assert_eq!(f.shared.connections.partial_heads(), 1);
    assert_eq!(
        f.shared.requests.counts().active,
        0,
        "no ticket before the head ends"
    );
    assert!(
        matches!(f.shared.poll(EnvoyObservation::Unused), Decision::PollAt(_)),
        "the drain holds"
    );
    read(&mut t, &[b"TP/1.1\r\nhost: x\r\n\r\n"], &conn, &f.shared);
    assert_eq!(f.shared.connections.partial_heads(), 0);
    assert_eq!(f.shared.requests.counts().active, 1, "the ticket took over");
    write(&mut t, OK, &conn, &f.shared);
    // Begun again, then the connection closes: nothing left counted.
    read(&mut t, &[b"GE"], &conn, &f.shared);
    assert_eq!(f.shared.connections.partial_heads(), 1);
    t.on_close(&conn, &f.shared);
    assert_eq!(f.shared.connections.partial_heads(), 0);
    f.clock.advance(std::time::Duration::from_millis(100));
    assert!(matches!(
        f.shared.poll(EnvoyObservation::Unused),
        Decision::Completed(_)
    ));
    // A lost connection keeps its head counted until it closes.
    let other = Conn::new(2);
    let mut u = Tracking::new();
    read(
        &mut u,
        &[GET, b"GET /b HTTP/1.1\r\nhost"],
        &other,
        &f.shared,
    );
    assert_eq!(f.shared.connections.partial_heads(), 1);
    write(&mut u, b"HTTP/1.1 2x0 what\r\n\r\n", &other, &f.shared);
    assert!(!u.is_followed(), "lost");
    assert_eq!(f.shared.connections.partial_heads(), 1);
    u.on_close(&other, &f.shared);
    assert_eq!(f.shared.connections.partial_heads(), 0);
}

#[test]
fn a_request_is_in_the_table_from_its_head_to_its_response() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let fed = read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(fed.started, 1);
    assert_eq!(f.shared.requests.counts().active, 1);
    assert_eq!(conn.streams(), 1, "counted against its connection");
    let fed = write(&mut t, OK, &conn, &f.shared);
    assert_eq!(fed.ended, 1);
    assert_eq!(f.shared.requests.counts().active, 0);
    assert_eq!(conn.streams(), 0);
}

/// Envoy leaves the requests behind the one it answers in its read buffer: the next read
/// starts with them again, at the same place in memory, and they are not fed twice.
#[test]
fn bytes_envoy_left_in_its_read_buffer_are_not_fed_again() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    // One slice of Envoy's read buffer: three requests, then a fourth appended behind them.
    let buffer = [GET, GET, GET, GET].concat();
    let first = read(&mut t, &[&buffer[..3 * GET.len()]], &conn, &f.shared);
    assert_eq!(first.started, 3);
    write(&mut t, OK, &conn, &f.shared);
    // Envoy consumed the first request; the other two are still there, and a fourth came.
    let left = &buffer[GET.len()..];
    let again = read(&mut t, &[left], &conn, &f.shared);
    assert_eq!(again.started, 1, "only the new request starts");
    assert_eq!(f.shared.requests.counts().active, 3);
    for _ in 0..3 {
        write(&mut t, OK, &conn, &f.shared);
    }
    assert_eq!(f.shared.requests.counts().active, 0);
    assert!(t.is_followed());
}

/// A buffer elsewhere in memory (even right behind the last one, or at its very start, as
/// a reused slice would be) holds new bytes only.
#[test]
fn a_buffer_that_does_not_start_inside_the_last_one_is_all_new() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let buffer = [GET, GET].concat();
    read(&mut t, &[&buffer[..GET.len()]], &conn, &f.shared);
    write(&mut t, OK, &conn, &f.shared);
    // Right behind the bytes of the last read.
    assert_eq!(
        read(&mut t, &[&buffer[GET.len()..]], &conn, &f.shared).started,
        1
    );
    write(&mut t, OK, &conn, &f.shared);
    // At the very start of the last read's slice (a slice reused from its beginning).
    let reused = &buffer[GET.len()..];
    assert_eq!(read(&mut t, &[reused], &conn, &f.shared).started, 1);
    write(&mut t, OK, &conn, &f.shared);
    assert_eq!(f.shared.requests.counts().active, 0);
    assert_eq!(t.tracker().totals(), (3, 3));
}

/// After a read that ended at a request's end, Envoy's codec took every byte: a buffer
/// inside that read's memory (reused for new bytes) is all new, never skipped.
#[test]
fn after_a_read_that_ends_at_a_request_s_end_every_byte_is_new_wherever_it_lies() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let mut mem = [0u8; 128];
    mem[..GET.len()].copy_from_slice(GET);
    read(&mut t, &[&mem[..GET.len()]], &conn, &f.shared);
    write(&mut t, OK, &conn, &f.shared);
    // The same memory reused from inside for the next request.
    mem[10..10 + GET.len()].copy_from_slice(GET);
    let fed = read(&mut t, &[&mem[10..10 + GET.len()]], &conn, &f.shared);
    assert_eq!((fed.started, fed.lost), (1, false));
    write(&mut t, OK, &conn, &f.shared);
    assert_eq!(t.tracker().totals(), (2, 2));
    assert_eq!(f.shared.requests.counts().active, 0);
}

/// Memory inside the last buffer, reused for new bytes while that buffer held pipelined
/// requests: its bytes are not the ones the last read ended with, so they are not taken
/// for bytes left behind (which would skip new requests): the connection is lost instead.
#[test]
fn new_bytes_inside_the_last_buffer_are_not_taken_for_bytes_left_behind() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let mut mem = [GET, GET].concat();
    read(&mut t, &[&mem], &conn, &f.shared);
    write(&mut t, OK, &conn, &f.shared);
    // Where the second request was: a new one whose end differs from the last read's.
    let other = b"GET /b HTTP/1.1\r\nhost: y\r\n\r\n";
    mem[GET.len()..GET.len() + other.len()].copy_from_slice(other);
    let fed = read(&mut t, &[&mem[GET.len()..]], &conn, &f.shared);
    assert!(fed.lost, "{fed:?}");
    assert_eq!(
        fed.started, 0,
        "nothing fed from a buffer that does not match"
    );
    t.on_close(&conn, &f.shared);
}

/// Envoy drains whole slices: bytes left behind can start at a later slice's own start,
/// where new bytes in a reused slice would start too. Cannot be told: lost, never counted
/// twice (phantom requests would hold the drain until its timeout).
#[test]
fn a_buffer_starting_at_a_later_slice_s_start_is_lost_not_counted_twice() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let rest = [GET, GET].concat();
    assert_eq!(read(&mut t, &[GET, &rest], &conn, &f.shared).started, 3);
    write(&mut t, OK, &conn, &f.shared);
    let fed = read(&mut t, &[&rest], &conn, &f.shared);
    assert!(fed.lost, "{fed:?}");
    assert_eq!(fed.started, 0);
    t.on_close(&conn, &f.shared);
}

/// #44 item 5: Envoy's codec stops only where a request ended, so bytes it hands back start
/// there. A read buffer that starts inside the last one anywhere else is memory Envoy freed
/// and reuses for new bytes, however its last bytes compare: lost (handed to Envoy's gauges),
/// never skipped as if fed before (ef5a7d9 took it as left behind: its new requests were
/// never counted). One that starts at a request's end is what Envoy leaves, and is followed.
#[test]
fn a_buffer_starting_inside_the_last_where_no_request_ended_is_lost() {
    let f = fixture(Some(fast()));
    let three = [GET, GET, GET].concat();
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    assert_eq!(read(&mut t, &[&three], &conn, &f.shared).started, 3);
    write(&mut t, OK, &conn, &f.shared);
    let fed = read(&mut t, &[&three[GET.len() + 5..]], &conn, &f.shared);
    assert!(fed.lost, "{fed:?}");
    assert_eq!(fed.started, 0);
    t.on_close(&conn, &f.shared);
    // At the first request's end: the two requests Envoy left, fed before.
    let other = Conn::new(2);
    let mut u = Tracking::new();
    assert_eq!(read(&mut u, &[&three], &other, &f.shared).started, 3);
    write(&mut u, OK, &other, &f.shared);
    let fed = read(&mut u, &[&three[GET.len()..]], &other, &f.shared);
    assert!(!fed.lost, "{fed:?}");
    assert_eq!((fed.started, f.shared.requests.counts().active), (0, 2));
    u.on_close(&other, &f.shared);
}

/// A buffer of more slices than remembered, holding pipelined requests: the next buffer may
/// start inside a slice not remembered; lost, never counted twice.
#[test]
fn a_buffer_that_may_start_in_a_slice_not_remembered_is_lost_not_counted_twice() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    // The first request in four pieces, its end and two more requests in a fifth slice.
    let cut = [3, 6, 9, 12];
    let last = [&GET[12..], GET, GET].concat();
    let slices = [
        &GET[..cut[0]],
        &GET[cut[0]..cut[1]],
        &GET[cut[1]..cut[2]],
        &GET[cut[2]..cut[3]],
        &last[..],
    ];
    assert_eq!(read(&mut t, &slices, &conn, &f.shared).started, 3);
    write(&mut t, OK, &conn, &f.shared);
    // Envoy took the first request and left the other two, inside the fifth slice.
    let fed = read(&mut t, &[&last[GET.len() - 12..]], &conn, &f.shared);
    assert!(fed.lost, "{fed:?}");
    assert_eq!(fed.started, 0);
    t.on_close(&conn, &f.shared);
}

#[test]
fn during_a_drain_health_checks_keep_the_connection_busy_but_are_not_work() {
    let f = fixture(Some(fast()));
    f.shared.install_policy(crate::config::RequestPolicy {
        health_check_paths: vec!["/healthz".into()],
        ..Default::default()
    });
    f.shared.start_drain(Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let fed = read(&mut t, &[PROBE], &conn, &f.shared);
    assert_eq!((fed.started, fed.health_checks), (1, 1));
    assert_eq!(f.shared.requests.counts().active, 0, "not work");
    assert_eq!(conn.streams(), 1, "but the connection is busy");
    write(&mut t, OK, &conn, &f.shared);
    assert_eq!(conn.streams(), 0);
    let fed = read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!((fed.health_checks, fed.served_while_draining), (0, 1));
    assert_eq!(f.shared.requests.counts().active, 1);
}

/// #63 item 5 (c): a checker's `User-Agent` on a path nobody configured is work (counted, so it
/// holds the drain); and with no path configured nothing is a health check. The tracker asks
/// the HTTP filter's predicate.
#[test]
fn a_checker_s_user_agent_alone_never_makes_a_health_check() {
    const LONG_PROBE: &[u8] =
        b"POST /upload HTTP/1.1\r\nhost: x\r\nuser-agent: kube-probe/1.31\r\ncontent-length: 5\r\n\r\n";
    for paths in [vec![], vec!["/healthz".to_string()]] {
        let f = fixture(Some(fast()));
        f.shared.install_policy(crate::config::RequestPolicy {
            health_check_paths: paths.clone(),
            ..Default::default()
        });
        f.shared.start_drain(Trigger::Admin);
        let conn = Conn::new(1);
        let mut t = Tracking::new();
        let fed = read(&mut t, &[LONG_PROBE], &conn, &f.shared);
        assert_eq!((fed.started, fed.health_checks), (1, 0), "{paths:?}");
        assert_eq!(f.shared.requests.counts().active, 1, "work: {paths:?}");
        let mut u = Tracking::new();
        let fed = read(&mut u, &[PROBE], &Conn::new(2), &f.shared);
        assert_eq!(
            fed.health_checks,
            u32::from(!paths.is_empty()),
            "/healthz is a health check only when configured: {paths:?}"
        );
    }
}

/// What the tracker cannot follow gives its tickets back, marks the connection untracked
/// (never idle) and makes the count inexact until the connection closes.
#[test]
fn a_connection_the_tracker_loses_is_untracked_until_it_closes() {
    let f = fixture(Some(fast()));
    f.shared.connections.note_tracking();
    assert!(f.shared.count_is_exact());
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(f.shared.requests.counts().active, 1);
    let fed = write(&mut t, b"HTTP/1.1 2x0 what\r\n\r\n", &conn, &f.shared);
    assert!(fed.lost);
    assert!(!t.is_followed());
    assert_eq!(
        f.shared.requests.counts().active,
        0,
        "its ticket is given back"
    );
    assert!(
        !f.shared.count_is_exact(),
        "the drain also waits for Envoy's gauges"
    );
    let untracked = |c: Vec<Stat>| {
        c.into_iter()
            .filter(|s| *s == Stat::ConnectionsUntracked)
            .count()
    };
    assert_eq!(untracked(counted()), 1, "one lost connection, counted once");
    assert_eq!(read(&mut t, &[GET], &conn, &f.shared), Fed::default());
    t.on_close(&conn, &f.shared);
    assert!(f.shared.count_is_exact());
}

/// Losing the thread gives the connection's tickets back while Envoy still serves their
/// requests. The last gauge pass took them for the module's own (its excess is 0), so the
/// drain's view keeps them until a gauge pass that started after the loss counts them in
/// Envoy's excess; then it follows Envoy's gauge down. (Before `Registry::give_back`, the
/// view fell to 0 at the loss with the request in flight: the drain could complete on it.)
#[test]
fn a_lost_connection_s_requests_stay_counted_until_a_gauge_pass_sees_them() {
    use crate::envoy_stats::scan::{DrainTiming, EnvoyStatsCache, Pass, PassReading};
    use std::time::{Duration, Instant};
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    read(&mut t, &[GET, GET], &conn, &f.shared);
    let t0 = Instant::now();
    let d = DrainTiming {
        started: t0,
        earliest_completion: t0,
        quiet_period: Duration::ZERO,
        exact_count: false,
    };
    let mut cache = EnvoyStatsCache::default();
    // Envoy's gauge shows the two requests: the module's own, no excess.
    let pass = |cache: &mut EnvoyStatsCache, pass: Pass, value: u64, ms: u64| {
        let own_before = f.shared.requests.counts();
        let own_after = f.shared.requests.counts();
        let at = t0 + Duration::from_millis(ms);
        let r = PassReading {
            hidden: false,
            value,
            own_before,
            own_after,
            started: at,
            ended: at,
        };
        cache.record(pass, r, d);
    };
    pass(&mut cache, Pass::Counters, 2, 0);
    pass(&mut cache, Pass::Gauges, 2, 1);
    let view = |cache: &EnvoyStatsCache| cache.view(f.shared.requests.counts(), false).unwrap();
    assert_eq!(view(&cache).active, 2);
    let fed = write(&mut t, b"HTTP/1.1 2x0 what\r\n\r\n", &conn, &f.shared);
    assert!(fed.lost);
    assert_eq!(f.shared.requests.counts().active, 0, "tickets given back");
    assert_eq!(
        view(&cache).active,
        2,
        "still in flight for the drain until a gauge pass counts them"
    );
    // A pass after the loss: Envoy still serves both, now all excess.
    pass(&mut cache, Pass::Gauges, 2, 2);
    assert_eq!(view(&cache).active, 2);
    // Envoy served one, then the other.
    pass(&mut cache, Pass::Gauges, 1, 3);
    assert_eq!(view(&cache).active, 1);
    pass(&mut cache, Pass::Gauges, 0, 4);
    assert_eq!(view(&cache).active, 0);
    t.on_close(&conn, &f.shared);
}

#[test]
fn a_close_gives_back_what_is_still_in_flight() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    read(&mut t, &[GET, GET], &conn, &f.shared);
    assert_eq!(f.shared.requests.counts().active, 2);
    t.on_close(&conn, &f.shared);
    assert_eq!(f.shared.requests.counts().active, 0);
}

#[test]
fn a_read_buffer_envoy_does_not_give_is_lost_not_guessed() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let none: Option<std::iter::Empty<&[u8]>> = None;
    assert!(t.on_read(10, none, &conn, &f.shared, now).lost);
    t.on_close(&conn, &f.shared);
}

/// During a drain the first final response head of an HTTP/1.1 connection gets
/// `connection: close` once; never while serving, never on a 1xx, nor where Envoy put one.
/// #44 item 1: three requests pipelined at a drain. Envoy answers all three (its codec
/// holds the second and third), each with its drain-close line. RFC 9112 §9.6: the close goes
/// on the response to the last request received, none before it: the first two lose
/// Envoy's line, the third keeps it (and counts the connection as sent away).
#[test]
fn pipelined_requests_at_a_drain_get_close_only_on_the_last_response() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    let three = [GET, GET, GET].concat();
    read(&mut t, &[&three], &conn, &f.shared);
    let closing = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi";
    let line_start = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".len();
    let stripped = Told {
        insert: 0,
        strip: Some((line_start, line_start + b"connection: close\r\n".len())),
        counted: false,
    };
    for _ in 0..2 {
        assert_eq!(t.close_to_insert(Some(closing), &conn, &f.shared), stripped);
        write(&mut t, closing, &conn, &f.shared);
    }
    // (The tracker follows Envoy's bytes as written, before the edit: it saw Envoy's close
    // end the first response and counted the connection sent away then, once.)
    assert_eq!(
        t.close_to_insert(Some(closing), &conn, &f.shared),
        Told::default(),
        "the last one keeps Envoy's close"
    );
    write(&mut t, closing, &conn, &f.shared);
    assert_eq!(
        f.shared.status().connections_sent_away.http1,
        1,
        "counted once"
    );
    // Without Envoy's line (no drain-close yet): nothing to take out before the last, and
    // the module's own close on the last.
    let other = Conn::new(2);
    let mut u = Tracking::new();
    read(&mut u, &[&[GET, GET].concat()], &other, &f.shared);
    assert_eq!(
        u.close_to_insert(Some(OK), &other, &f.shared),
        Told::default()
    );
    write(&mut u, OK, &other, &f.shared);
    assert_eq!(
        u.close_to_insert(Some(OK), &other, &f.shared).insert,
        b"HTTP/1.1 200 OK\r\n".len()
    );
    // A second request's head only begun is behind too (Envoy's codec holds its bytes).
    let third = Conn::new(3);
    let mut v = Tracking::new();
    read(&mut v, &[&[GET, b"GET /b HT"].concat()], &third, &f.shared);
    assert_eq!(
        v.close_to_insert(Some(closing), &third, &f.shared),
        stripped,
        "a partial head behind"
    );
}

/// The glue's edit of a write: the kept bytes, then the rest after the stripped line.
#[test]
fn a_stripped_close_line_leaves_the_rest_of_the_head_whole() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    read(&mut t, &[&[GET, GET].concat()], &conn, &f.shared);
    let closing = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nConnection: Close\r\nx: y\r\n\r\nhi";
    let edit = t
        .on_write_bytes(|| Some([&closing[..]].into_iter()), &conn, &f.shared, || 0)
        .expect("an edit");
    let mut out = edit.pieces().concat();
    out.extend_from_slice(&closing[edit.replaced()..]);
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx: y\r\n\r\nhi".to_vec()
    );
}

#[test]
fn during_a_drain_a_response_head_gets_connection_close_once() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::new();
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(
        t.close_to_insert(Some(OK), &conn, &f.shared),
        Told::default(),
        "serving"
    );
    write(&mut t, OK, &conn, &f.shared);
    f.shared.start_drain(Trigger::Admin);
    read(&mut t, &[GET], &conn, &f.shared);
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    assert_eq!(
        t.close_to_insert(Some(interim), &conn, &f.shared),
        Told::default(),
        "1xx"
    );
    write(&mut t, interim, &conn, &f.shared);
    assert_eq!(
        t.close_to_insert(Some(OK), &conn, &f.shared),
        Told {
            insert: b"HTTP/1.1 200 OK\r\n".len(),
            strip: None,
            counted: true
        }
    );
    assert_eq!(f.shared.status().connections_sent_away.http1, 1);
    write(&mut t, OK, &conn, &f.shared);
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(
        t.close_to_insert(Some(OK), &conn, &f.shared),
        Told::default(),
        "once"
    );
    // A connection whose response already carries Envoy's own close is counted, not edited.
    let other = Conn::new(2);
    let mut u = Tracking::new();
    read(&mut u, &[GET], &other, &f.shared);
    let closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(
        u.close_to_insert(Some(closing), &other, &f.shared),
        Told {
            insert: 0,
            strip: None,
            counted: true
        }
    );
    assert_eq!(f.shared.status().connections_sent_away.http1, 2);
}

/// The per-connection memory the docs state (docs/modes.md, connection mode).
#[test]
fn a_followed_connection_costs_at_most_408_bytes_before_its_tickets() {
    let size = std::mem::size_of::<Tracking>();
    eprintln!("size_of::<Tracking>() = {size}");
    // 392 before the follower kept the last request ends (16 bytes, #44 item 5).
    assert!(size <= 408, "{size}");
}

#[test]
fn a_shadow_tracker_counts_nothing() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = Tracking::shadow();
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(f.shared.requests.counts().active, 0);
    assert_eq!(conn.streams(), 0);
    assert_eq!(t.tracker().in_flight(), 1);
}
