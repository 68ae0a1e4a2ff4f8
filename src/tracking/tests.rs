//! Unit tests of a followed connection: reads and writes fed as Envoy hands them over (bytes fed
//! twice included), tickets, health checks, losses and the `connection: close` edits.

use super::*;
use crate::connections::Conn;
use crate::engine::drain::Trigger;
use crate::engine::shared::Shared;
use crate::engine::shared::Stat;
use crate::testing::{counted, fast, fixture, HOSTS, STATS};
use write::{HeadEdit, Told};

impl TrackedConnection {
    /// Whether the connection is still followed.
    fn is_followed(&self) -> bool {
        !self.lost
    }
}

const GET: &[u8] = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n";
const PROBE: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\nuser-agent: kube-probe/1.31\r\n\r\n";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi";

fn now() -> u64 {
    7
}

fn read(t: &mut TrackedConnection, buf: &[&[u8]], conn: &Conn, shared: &Shared) -> Fed {
    let len = buf.iter().map(|b| b.len()).sum();
    t.on_read(len, Some(buf.iter().copied()), conn, shared, STATS, now)
}

fn write(t: &mut TrackedConnection, bytes: &[u8], conn: &Conn, shared: &Shared) -> Fed {
    t.on_write(Some([bytes].into_iter()), conn, shared, STATS, now)
}

/// #44 item 6: Envoy's connection manager has a stream from a head's first byte; the
/// tracker's ticket comes with the head's end. In between the head is counted, so a drain
/// never completes while a request is still arriving.
#[test]
fn a_head_on_its_way_holds_the_drain_from_its_first_byte() {
    use crate::engine::drain::Decision;
    use crate::engine::shared::EnvoyObservation;
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    f.shared.start_drain(HOSTS, Trigger::Admin);
    f.clock.advance(std::time::Duration::from_millis(100));
    read(&mut t, &[b"GET /a HT"], &conn, &f.shared);
    assert_eq!(f.shared.connections().partial_heads(), 1);
    assert_eq!(
        f.shared.counts().active,
        0,
        "no ticket before the head ends"
    );
    assert!(
        matches!(
            f.shared.poll(HOSTS, EnvoyObservation::Unused),
            Decision::PollAt(_)
        ),
        "the drain holds"
    );
    read(&mut t, &[b"TP/1.1\r\nhost: x\r\n\r\n"], &conn, &f.shared);
    assert_eq!(f.shared.connections().partial_heads(), 0);
    assert_eq!(f.shared.counts().active, 1, "the ticket took over");
    write(&mut t, OK, &conn, &f.shared);
    // Begun again, then the connection closes: nothing left counted.
    read(&mut t, &[b"GE"], &conn, &f.shared);
    assert_eq!(f.shared.connections().partial_heads(), 1);
    t.on_close(&conn, &f.shared, STATS);
    assert_eq!(f.shared.connections().partial_heads(), 0);
    f.clock.advance(std::time::Duration::from_millis(100));
    assert!(matches!(
        f.shared.poll(HOSTS, EnvoyObservation::Unused),
        Decision::Completed(_)
    ));
    // A lost connection keeps its head counted until it closes. (The head begins after the
    // response before it: one read behind an unanswered request would be held back.)
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    read(&mut u, &[GET], &other, &f.shared);
    write(&mut u, OK, &other, &f.shared);
    read(&mut u, &[b"GET /b HTTP/1.1\r\nhost"], &other, &f.shared);
    assert_eq!(f.shared.connections().partial_heads(), 1);
    write(&mut u, b"HTTP/1.1 2x0 what\r\n\r\n", &other, &f.shared);
    assert!(!u.is_followed(), "lost");
    assert_eq!(f.shared.connections().partial_heads(), 1);
    u.on_close(&other, &f.shared, STATS);
    assert_eq!(f.shared.connections().partial_heads(), 0);
}

#[test]
fn a_request_is_in_the_table_from_its_head_to_its_response() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let fed = read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(fed.started, 1);
    assert_eq!(f.shared.counts().active, 1);
    assert_eq!(conn.streams(), 1, "counted against its connection");
    let fed = write(&mut t, OK, &conn, &f.shared);
    assert_eq!(fed.ended, 1);
    assert_eq!(f.shared.counts().active, 0);
    assert_eq!(conn.streams(), 0);
}

/// Envoy leaves the requests behind the one it answers in its read buffer: the next read
/// starts with them again, at the same place in memory, and they are not fed twice.
#[test]
fn bytes_envoy_left_in_its_read_buffer_are_not_fed_again() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    // One slice of Envoy's read buffer: three requests, then a fourth appended behind them.
    let buffer = [GET, GET, GET, GET].concat();
    let first = read(&mut t, &[&buffer[..3 * GET.len()]], &conn, &f.shared);
    assert_eq!(first.started, 3);
    write(&mut t, OK, &conn, &f.shared);
    // Envoy consumed the first request; the other two are still there, and a fourth came.
    let left = &buffer[GET.len()..];
    let again = read(&mut t, &[left], &conn, &f.shared);
    assert_eq!(again.started, 1, "only the new request starts");
    assert_eq!(f.shared.counts().active, 3);
    for _ in 0..3 {
        write(&mut t, OK, &conn, &f.shared);
    }
    assert_eq!(f.shared.counts().active, 0);
    assert!(t.is_followed());
}

/// A buffer elsewhere in memory (even right behind the last one, or at its very start, as
/// a reused slice would be) holds new bytes only.
#[test]
fn a_buffer_that_does_not_start_inside_the_last_one_is_all_new() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
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
    assert_eq!(f.shared.counts().active, 0);
    assert_eq!(t.tracker().totals(), (3, 3));
}

/// After a read that ended at a request's end, Envoy's codec took every byte: a buffer
/// inside that read's memory (reused for new bytes) is all new, never skipped.
#[test]
fn after_a_read_that_ends_at_a_request_s_end_every_byte_is_new_wherever_it_lies() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
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
    assert_eq!(f.shared.counts().active, 0);
}

/// Memory inside the last buffer, reused for new bytes while that buffer held pipelined
/// requests: its bytes are not the ones the last read ended with, so they are not taken
/// for bytes left behind (which would skip new requests): the connection is lost instead.
#[test]
fn new_bytes_inside_the_last_buffer_are_not_taken_for_bytes_left_behind() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
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
    t.on_close(&conn, &f.shared, STATS);
}

/// Envoy drains whole slices: bytes left behind can start at a later slice's own start,
/// where new bytes in a reused slice would start too. Cannot be told: lost, never counted
/// twice (phantom requests would hold the drain until its timeout).
#[test]
fn a_buffer_starting_at_a_later_slice_s_start_is_lost_not_counted_twice() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let rest = [GET, GET].concat();
    assert_eq!(read(&mut t, &[GET, &rest], &conn, &f.shared).started, 3);
    write(&mut t, OK, &conn, &f.shared);
    let fed = read(&mut t, &[&rest], &conn, &f.shared);
    assert!(fed.lost, "{fed:?}");
    assert_eq!(fed.started, 0);
    t.on_close(&conn, &f.shared, STATS);
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
    let mut t = TrackedConnection::new();
    assert_eq!(read(&mut t, &[&three], &conn, &f.shared).started, 3);
    write(&mut t, OK, &conn, &f.shared);
    let fed = read(&mut t, &[&three[GET.len() + 5..]], &conn, &f.shared);
    assert!(fed.lost, "{fed:?}");
    assert_eq!(fed.started, 0);
    t.on_close(&conn, &f.shared, STATS);
    // At the first request's end: the two requests Envoy left, fed before.
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    assert_eq!(read(&mut u, &[&three], &other, &f.shared).started, 3);
    write(&mut u, OK, &other, &f.shared);
    let fed = read(&mut u, &[&three[GET.len()..]], &other, &f.shared);
    assert!(!fed.lost, "{fed:?}");
    assert_eq!((fed.started, f.shared.counts().active), (0, 2));
    u.on_close(&other, &f.shared, STATS);
}

/// A buffer of more slices than remembered, holding pipelined requests: the next buffer may
/// start inside a slice not remembered; lost, never counted twice.
#[test]
fn a_buffer_that_may_start_in_a_slice_not_remembered_is_lost_not_counted_twice() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
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
    t.on_close(&conn, &f.shared, STATS);
}

#[test]
fn during_a_drain_health_checks_keep_the_connection_busy_but_are_not_work() {
    let f = fixture(Some(fast()));
    f.shared.install_policy(crate::config::RequestPolicy {
        health_check_paths: vec!["/healthz".into()],
        ..Default::default()
    });
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let fed = read(&mut t, &[PROBE], &conn, &f.shared);
    assert_eq!((fed.started, fed.health_checks), (1, 1));
    assert_eq!(f.shared.counts().active, 0, "not work");
    assert_eq!(conn.streams(), 1, "but the connection is busy");
    write(&mut t, OK, &conn, &f.shared);
    assert_eq!(conn.streams(), 0);
    let fed = read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!((fed.health_checks, fed.served_while_draining), (0, 1));
    assert_eq!(f.shared.counts().active, 1);
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
        f.shared.start_drain(HOSTS, Trigger::Admin);
        let conn = Conn::new(1);
        let mut t = TrackedConnection::new();
        let fed = read(&mut t, &[LONG_PROBE], &conn, &f.shared);
        assert_eq!((fed.started, fed.health_checks), (1, 0), "{paths:?}");
        assert_eq!(f.shared.counts().active, 1, "work: {paths:?}");
        let mut u = TrackedConnection::new();
        let fed = read(&mut u, &[PROBE], &Conn::new(2), &f.shared);
        assert_eq!(
            fed.health_checks,
            u32::from(!paths.is_empty()),
            "/healthz is a health check only when configured: {paths:?}"
        );
    }
}

/// An HTTP/2 frame.
fn h2_frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A request header block: `:method POST` (static 3), `:path` (literal with incremental
/// indexing, indexed name 4), `user-agent` (indexed name 58, without indexing).
fn h2_request(path: &str, ua: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x44, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x0f, 58 - 15, ua.len() as u8]);
    b.extend_from_slice(ua.as_bytes());
    b
}

/// #63 item 5: HTTP/2 health checks are told by the same rule as HTTP/1.1's, from the stream's
/// HPACK-decoded `:path` (and `user-agent` when `health_check_user_agents` narrows them): the
/// gRPC check on its configured path is not work, the same stream on another path, or with
/// another `user-agent`, is. A later block that indexes the first's `:path` (dynamic table
/// entry 62) is a check too: the table is followed. Without `health_check_paths`, nothing is
/// decoded and every stream is work.
#[test]
fn during_a_drain_http2_health_checks_are_told_by_their_decoded_path() {
    const CHECK: &str = "/grpc.health.v1.Health/Check";
    for (paths, agents) in [
        (vec![CHECK.to_string()], vec![]),
        (
            vec![CHECK.to_string()],
            vec!["grpc-health-probe/".to_string()],
        ),
        (vec![], vec![]),
    ] {
        let f = fixture(Some(fast()));
        f.shared.install_policy(crate::config::RequestPolicy {
            health_check_paths: paths.clone(),
            health_check_user_agents: agents.clone(),
            ..Default::default()
        });
        let conn = Conn::new(1);
        let mut t = TrackedConnection::new();
        let mut pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        pre.extend(h2_frame(4, 0, 0, &[]));
        read(&mut t, &[&pre], &conn, &f.shared);
        write(&mut t, &h2_frame(4, 0, 0, &[]), &conn, &f.shared);
        f.shared.start_drain(HOSTS, Trigger::Admin);
        let probe = h2_frame(1, 0x4 | 0x1, 1, &h2_request(CHECK, "grpc-health-probe/0.4"));
        let fed = read(&mut t, &[&probe], &conn, &f.shared);
        let checks = u32::from(!paths.is_empty());
        assert_eq!(
            (fed.started, fed.health_checks),
            (1, checks),
            "{paths:?} {agents:?}"
        );
        assert_eq!(f.shared.counts().active, 1 - i64::from(checks));
        // Indexed `:path` from the dynamic table (the first block inserted it), another agent.
        let mut again = vec![0x83, 0xbe, 0x0f, 58 - 15, 4];
        again.extend_from_slice(b"curl");
        let fed = read(&mut t, &[&h2_frame(1, 0x5, 3, &again)], &conn, &f.shared);
        let narrowed = !agents.is_empty();
        assert_eq!(
            fed.health_checks,
            u32::from(checks == 1 && !narrowed),
            "{paths:?} {agents:?}"
        );
        let other = h2_frame(
            1,
            0x5,
            5,
            &h2_request("/pkg.Svc/Call", "grpc-health-probe/0.4"),
        );
        let fed = read(&mut t, &[&other], &conn, &f.shared);
        assert_eq!(
            (fed.started, fed.health_checks),
            (1, 0),
            "another path is work"
        );
        t.on_close(&conn, &f.shared, STATS);
    }
}

/// A block that does not decode stops the decoding of the connection: counted once
/// (`hpack_decoding_stopped`), its streams counted as work, the connection still followed.
#[test]
fn an_http2_block_that_does_not_decode_is_counted_once_and_its_streams_are_work() {
    let f = fixture(Some(fast()));
    f.shared.install_policy(crate::config::RequestPolicy {
        health_check_paths: vec!["/healthz".into()],
        ..Default::default()
    });
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let mut pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    pre.extend(h2_frame(4, 0, 0, &[]));
    read(&mut t, &[&pre], &conn, &f.shared);
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let bad = h2_frame(1, 0x5, 1, &[0x82, 0xff, 0x10]);
    let fed = read(&mut t, &[&bad], &conn, &f.shared);
    assert_eq!((fed.started, fed.health_checks), (1, 0));
    let probe = h2_frame(1, 0x5, 3, &h2_request("/healthz", "kube-probe/1.31"));
    let fed = read(&mut t, &[&probe], &conn, &f.shared);
    assert_eq!(
        (fed.started, fed.health_checks),
        (1, 0),
        "no longer decoded"
    );
    assert!(t.is_followed());
    let stopped = counted()
        .into_iter()
        .filter(|s| *s == Stat::HpackDecodingStopped)
        .count();
    assert_eq!(stopped, 1);
    t.on_close(&conn, &f.shared, STATS);
}

/// What the tracker cannot follow gives its tickets back, marks the connection untracked
/// (never idle) and makes the count inexact until the connection closes.
#[test]
fn a_connection_the_tracker_loses_is_untracked_until_it_closes() {
    let f = fixture(Some(fast()));
    f.shared.connections().note_tracking();
    assert!(f.shared.count_is_exact());
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(f.shared.counts().active, 1);
    let fed = write(&mut t, b"HTTP/1.1 2x0 what\r\n\r\n", &conn, &f.shared);
    assert!(fed.lost);
    assert!(!t.is_followed());
    assert_eq!(f.shared.counts().active, 0, "its ticket is given back");
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
    t.on_close(&conn, &f.shared, STATS);
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
    let mut t = TrackedConnection::new();
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
        let own_before = f.shared.counts();
        let own_after = f.shared.counts();
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
    let view = |cache: &EnvoyStatsCache| cache.view(f.shared.counts(), false).unwrap();
    assert_eq!(view(&cache).active, 2);
    let fed = write(&mut t, b"HTTP/1.1 2x0 what\r\n\r\n", &conn, &f.shared);
    assert!(fed.lost);
    assert_eq!(f.shared.counts().active, 0, "tickets given back");
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
    t.on_close(&conn, &f.shared, STATS);
}

#[test]
fn a_close_gives_back_what_is_still_in_flight() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    read(&mut t, &[GET, GET], &conn, &f.shared);
    assert_eq!(f.shared.counts().active, 2);
    t.on_close(&conn, &f.shared, STATS);
    assert_eq!(f.shared.counts().active, 0);
}

#[test]
fn a_read_buffer_envoy_does_not_give_is_lost_not_guessed() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let none: Option<std::iter::Empty<&[u8]>> = None;
    assert!(t.on_read(10, none, &conn, &f.shared, STATS, now).lost);
    t.on_close(&conn, &f.shared, STATS);
}

/// A write through the glue's path (`on_write_bytes`): the edit it asks for.
fn write_head(
    t: &mut TrackedConnection,
    bytes: &[u8],
    conn: &Conn,
    shared: &Shared,
) -> Option<HeadEdit> {
    t.on_write_bytes(|| Some([bytes].into_iter()), conn, shared, STATS, now)
}

const CLOSING: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi";

/// Issue 63 item 4: three requests read in one buffer during a drain. Envoy would answer the
/// second and third after a response carrying `close` (or at once, within the read, when it
/// answers the first without its upstream): they never reach Envoy's codec. The first is
/// answered with `close` and counted; the two behind are not requests of the connection.
#[test]
fn requests_pipelined_at_a_drain_are_held_back_behind_the_close() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let three = [GET, GET, GET].concat();
    let fed = read(&mut t, &[&three[..20], &three[20..]], &conn, &f.shared);
    assert_eq!(
        fed.hold_from,
        Some(GET.len()),
        "the bytes after the first request"
    );
    assert_eq!((fed.started, f.shared.counts().active), (1, 1));
    let edit = write_head(&mut t, OK, &conn, &f.shared).expect("an edit");
    assert_eq!(
        (edit.replaced(), edit.pieces().concat()),
        (17, b"HTTP/1.1 200 OK\r\nconnection: close\r\n".to_vec()),
        "the response to the last request given to Envoy says close"
    );
    assert_eq!(f.shared.counts().active, 0);
    assert_eq!(conn.streams(), 0, "idle: nothing else will be answered");
    // Whatever comes after (Envoy hands back nothing: the bytes were taken out) is held too.
    let fed = read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!((fed.hold_from, fed.started), (Some(0), 0));
    assert_eq!(f.shared.counts().active, 0);
    // A head only begun behind is held back too, and is no head on its way.
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    let fed = read(&mut u, &[&[GET, b"GET /b HT"].concat()], &other, &f.shared);
    assert_eq!(fed.hold_from, Some(GET.len()));
    assert_eq!(f.shared.connections().partial_heads(), 0);
    u.on_close(&other, &f.shared, STATS);
    t.on_close(&conn, &f.shared, STATS);
    assert_eq!(f.shared.counts().active, 0);
}

/// More requests in one read during a drain than request ends are remembered
/// (`REQUEST_ENDS`): the ones behind the first are held back all the same (found by
/// `network_filter::props`: with the first answered at once, Envoy's codec read on and
/// answered the second after a response that said close).
#[test]
fn more_pipelined_requests_than_ends_remembered_are_held_back_too() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(HOSTS, Trigger::Admin);
    for n in [2, 4, 5, 9] {
        let conn = Conn::new(n as u64);
        let mut t = TrackedConnection::new();
        let many = GET.repeat(n);
        let fed = read(&mut t, &[&many[..30], &many[30..]], &conn, &f.shared);
        assert_eq!(fed.hold_from, Some(GET.len()), "{n} requests");
        // Short requests, many in a piece of the dry run.
        let short: &[u8] = b"GET / HTTP/1.1\n\n";
        let other = Conn::new(100 + n as u64);
        let mut u = TrackedConnection::new();
        let fed = read(&mut u, &[&short.repeat(n)], &other, &f.shared);
        assert_eq!(fed.hold_from, Some(short.len()), "{n} short requests");
        t.on_close(&conn, &f.shared, STATS);
        u.on_close(&other, &f.shared, STATS);
    }
}

/// Envoy's own `connection: close` in a later slice of the head than the status line is seen:
/// no second one is put in (found by `network_filter::props`), and the connection is told.
#[test]
fn envoys_close_in_a_later_slice_of_the_head_is_not_doubled() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    read(&mut t, &[GET], &conn, &f.shared);
    let at = CLOSING.windows(10).position(|w| w == b"connection");
    let (a, b) = CLOSING.split_at(at.expect("a close line"));
    let edit = t.on_write_bytes(|| Some([a, b].into_iter()), &conn, &f.shared, STATS, now);
    assert_eq!(edit, None, "Envoy's close is there");
    assert!(t.told_close());
    // Without it, the close line goes in as ever.
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    read(&mut u, &[GET], &other, &f.shared);
    let (a, b) = OK.split_at(20);
    let edit = u.on_write_bytes(|| Some([a, b].into_iter()), &other, &f.shared, STATS, now);
    assert_eq!(edit.map(|e| e.replaced()), Some(17));
    t.on_close(&conn, &f.shared, STATS);
    u.on_close(&other, &f.shared, STATS);
}

/// A CONNECT (or an upgrade) read behind a request during a drain is not held back: the bytes
/// behind it may be a tunnel's. Envoy answers it after the first response, so that response
/// gets no `close` (found by `network_filter::props`: the CONNECT reached Envoy behind a
/// response the module had told `close`).
#[test]
fn a_connect_pipelined_behind_a_request_keeps_its_response_untold() {
    let connect: &[u8] = b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n";
    let upgrade: &[u8] = b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n\
connection: upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
sec-websocket-version: 13\r\n\r\n";
    for behind in [connect, upgrade] {
        let f = fixture(Some(fast()));
        f.shared.start_drain(HOSTS, Trigger::Admin);
        let conn = Conn::new(1);
        let mut t = TrackedConnection::new();
        let fed = read(&mut t, &[&[GET, behind].concat()], &conn, &f.shared);
        assert_eq!(fed.hold_from, None, "nothing held back behind a CONNECT");
        assert_eq!(write_head(&mut t, OK, &conn, &f.shared), None, "no close");
        // The next response (no tunnel) may say it: nothing is behind it.
        let denied = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n";
        assert!(write_head(&mut t, denied, &conn, &f.shared).is_some());
        t.on_close(&conn, &f.shared, STATS);
    }
}

/// Requests read behind one whose response head was written before the drain (without
/// `close`): that one is answered as it goes, the next one read gets the `close`, and what is
/// behind that one is held back. Before a drain nothing is held back.
#[test]
fn the_close_goes_on_the_first_response_not_begun() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    assert_eq!(read(&mut t, &[GET], &conn, &f.shared).hold_from, None);
    write(
        &mut t,
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n",
        &conn,
        &f.shared,
    );
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    let fed = read(&mut u, &[&[GET, GET].concat()], &other, &f.shared);
    assert_eq!(
        fed.hold_from, None,
        "not draining: Envoy serves them in turn"
    );
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let fed = read(&mut t, &[&[GET, GET].concat()], &conn, &f.shared);
    assert_eq!(fed.hold_from, Some(GET.len()), "behind the second request");
    assert_eq!(f.shared.counts().active, 4);
    write(&mut t, b"hi", &conn, &f.shared);
    assert!(write_head(&mut t, OK, &conn, &f.shared).is_some());
    assert_eq!(f.shared.counts().active, 2, "u's two");
}

/// Requests read before the drain behind a slow one (Envoy's codec left them in its read
/// buffer). At the drain, Envoy's own `close` on the slow one's response is kept (it writes
/// the same line when its connection manager is `Closing`, and then closes), and the requests
/// behind it are never given to Envoy: no longer counted, and held back when Envoy hands them
/// back. The same for Envoy's `close` without a drain (`max_requests_per_connection`).
#[test]
fn envoy_s_own_close_is_kept_and_what_was_read_behind_it_is_held_back() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let three = [GET, GET, GET].concat();
    read(&mut t, &[&three], &conn, &f.shared);
    assert_eq!(f.shared.counts().active, 3);
    f.shared.start_drain(HOSTS, Trigger::Admin);
    assert_eq!(
        t.close_to_insert(Some(CLOSING), &conn, &f.shared, STATS),
        Told {
            insert: 0,
            counted: true
        },
        "kept, and the connection counted as sent away"
    );
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    read(&mut u, &[&three], &other, &f.shared);
    assert_eq!(
        write_head(&mut u, CLOSING, &other, &f.shared),
        None,
        "no edit"
    );
    assert_eq!(f.shared.counts().active, 3, "t's three");
    assert_eq!(other.streams(), 0);
    // Envoy hands the two back (the same memory, where the first ended).
    let len = three.len() - GET.len();
    let fed = u.on_read(
        len,
        Some([&three[GET.len()..]].into_iter()),
        &other,
        &f.shared,
        STATS,
        now,
    );
    assert_eq!((fed.hold_from, fed.started), (Some(0), 0));
    u.on_close(&other, &f.shared, STATS);
    t.on_close(&conn, &f.shared, STATS);
    // No drain: Envoy's close all the same.
    let g = fixture(Some(fast()));
    let third = Conn::new(3);
    let mut v = TrackedConnection::new();
    read(&mut v, &[&[GET, GET].concat()], &third, &g.shared);
    assert_eq!(write_head(&mut v, CLOSING, &third, &g.shared), None);
    assert_eq!(g.shared.counts().active, 0);
    assert_eq!(read(&mut v, &[GET], &third, &g.shared).hold_from, Some(0));
    assert!(
        !counted().contains(&Stat::ModuleErrors),
        "no anomaly: {:?}",
        counted()
    );
}

/// Nothing is put into a tunnel's head: a 2xx to CONNECT, a 101 (Envoy writes no `close` there
/// either), and the tunnel is not counted as sent away. A CONNECT refused is a plain response.
/// Nothing is held back behind a CONNECT or upgrade request (tunnel bytes, not requests).
#[test]
fn nothing_is_inserted_into_a_tunnel_s_head() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let connect = b"CONNECT up:443 HTTP/1.1\r\nhost: up:443\r\n\r\n";
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let fed = read(
        &mut t,
        &[&[&connect[..], b"\x16\x03\x01 tls"].concat()],
        &conn,
        &f.shared,
    );
    assert_eq!(fed.hold_from, None, "tunnel bytes behind a CONNECT");
    let established = b"HTTP/1.1 200 OK\r\n\r\n";
    assert_eq!(write_head(&mut t, established, &conn, &f.shared), None);
    assert!(t.tracker().tunnel());
    let upgrade =
        b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n";
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    read(&mut u, &[upgrade], &other, &f.shared);
    let switching =
        b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n";
    assert_eq!(write_head(&mut u, switching, &other, &f.shared), None);
    assert_eq!(f.shared.status().connections_sent_away.http1, 0);
    let third = Conn::new(3);
    let mut v = TrackedConnection::new();
    read(&mut v, &[connect], &third, &f.shared);
    let refused = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n";
    assert!(write_head(&mut v, refused, &third, &f.shared).is_some());
}

/// Requests held back behind a response that cannot be told `close` (its status line split
/// from its first slice): nothing is edited, and the anomaly is counted.
#[test]
fn a_response_that_cannot_carry_the_close_owed_is_counted() {
    let f = fixture(Some(fast()));
    f.shared.start_drain(HOSTS, Trigger::Admin);
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    read(&mut t, &[&[GET, GET].concat()], &conn, &f.shared);
    let before = counted()
        .iter()
        .filter(|s| **s == Stat::ModuleErrors)
        .count();
    assert_eq!(write_head(&mut t, b"HTTP/1.1 20", &conn, &f.shared), None);
    let after = counted()
        .iter()
        .filter(|s| **s == Stat::ModuleErrors)
        .count();
    assert_eq!(after, before + 1);
    // Not an anomaly where nothing is held back.
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    read(&mut u, &[GET], &other, &f.shared);
    assert_eq!(write_head(&mut u, b"HTTP/1.1 20", &other, &f.shared), None);
    let last = counted()
        .iter()
        .filter(|s| **s == Stat::ModuleErrors)
        .count();
    assert_eq!(last, after);
}

/// During a drain the first final response head of an HTTP/1.1 connection gets
/// `connection: close` once; never while serving, never on a 1xx, nor where Envoy put one.
#[test]
fn during_a_drain_a_response_head_gets_connection_close_once() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(
        t.close_to_insert(Some(OK), &conn, &f.shared, STATS),
        Told::default(),
        "serving"
    );
    write(&mut t, OK, &conn, &f.shared);
    f.shared.start_drain(HOSTS, Trigger::Admin);
    read(&mut t, &[GET], &conn, &f.shared);
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    assert_eq!(
        t.close_to_insert(Some(interim), &conn, &f.shared, STATS),
        Told::default(),
        "1xx"
    );
    write(&mut t, interim, &conn, &f.shared);
    assert_eq!(
        t.close_to_insert(Some(OK), &conn, &f.shared, STATS),
        Told {
            insert: b"HTTP/1.1 200 OK\r\n".len(),
            counted: true
        }
    );
    assert_eq!(f.shared.status().connections_sent_away.http1, 1);
    write(&mut t, OK, &conn, &f.shared);
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(
        t.close_to_insert(Some(OK), &conn, &f.shared, STATS),
        Told::default(),
        "once"
    );
    // A connection whose response already carries Envoy's own close is counted, not edited.
    let other = Conn::new(2);
    let mut u = TrackedConnection::new();
    read(&mut u, &[GET], &other, &f.shared);
    let closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(
        u.close_to_insert(Some(closing), &other, &f.shared, STATS),
        Told {
            insert: 0,
            counted: true
        }
    );
    assert_eq!(f.shared.status().connections_sent_away.http1, 2);
}

/// The per-connection memory the docs state (docs/modes.md, connection mode).
#[test]
fn a_followed_connection_costs_at_most_408_bytes_before_its_tickets() {
    let size = std::mem::size_of::<TrackedConnection>();
    eprintln!("size_of::<TrackedConnection>() = {size}");
    // 392 before the follower kept the last request ends (16 bytes, #44 item 5).
    assert!(size <= 408, "{size}");
}

#[test]
fn a_shadow_tracker_counts_nothing() {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection {
        shadow: true,
        ..TrackedConnection::default()
    };
    read(&mut t, &[GET], &conn, &f.shared);
    assert_eq!(f.shared.counts().active, 0);
    assert_eq!(conn.streams(), 0);
    assert_eq!(t.tracker().in_flight(), 1);
}
