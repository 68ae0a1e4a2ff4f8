//! The WebSocket move on a followed connection, without Envoy: the 101 switch, each write's
//! edit, and the wake-ups' steps.

use super::*;
use crate::connections::Conn;
use crate::exchange::sse::LAST_CHUNK;
use crate::testing::{fast, fixture, STATS};

impl TrackedConnection {
    /// Whether the connection carries a long-lived stream this module may move: a switched
    /// WebSocket, an SSE response in flight, or one being ended.
    fn long_lived(&mut self) -> bool {
        self.tracker.websocket().is_some()
            || self.tracker.sse_ending().is_some()
            || self.tracker.sse_in_flight()
    }
}

const UPGRADE: &[u8] =
    b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";
const SWITCHED: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

fn now() -> u64 {
    7
}

/// A server text frame with `payload` (FIN `fin`).
fn text(payload: &[u8], fin: bool) -> Vec<u8> {
    let mut f = vec![if fin { 0x81 } else { 0x01 }, payload.len() as u8];
    f.extend_from_slice(payload);
    f
}

fn switched(head: &[u8]) -> (TrackedConnection, Conn, crate::testing::Fixture) {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    t.on_read(
        UPGRADE.len(),
        Some([UPGRADE].into_iter()),
        &conn,
        &f.shared,
        STATS,
        now,
    );
    t.on_write(Some([head].into_iter()), &conn, &f.shared, STATS, now);
    (t, conn, f)
}

fn plan(at: u64) -> Option<MovePlan> {
    Some(MovePlan {
        at,
        final_at: 1_000_000_000,
        message_wait: 100,
        close_timeout: 1_000,
    })
}

#[test]
fn a_101_to_websocket_switches_the_tracker_and_keeps_the_request_in_flight() {
    let (mut t, _conn, f) = switched(SWITCHED);
    assert!(t.is_websocket());
    assert!(t.note_switch(&f.shared));
    assert!(!t.note_switch(&f.shared), "counted once");
    assert_eq!(f.shared.connections().long_lived().open().0, 1);
    assert_eq!(t.tracker().in_flight(), 1, "the upgrade holds the drain");
}

#[test]
fn other_101s_and_split_heads_stay_plain_tunnels() {
    let h2c = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n";
    let other_ext = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\
sec-websocket-extensions: x-webkit-deflate-frame\r\n\r\n";
    let twice =
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nupgrade: websocket\r\n\r\n";
    for head in [&h2c[..], &other_ext[..], &twice[..]] {
        let (mut t, _, _) = switched(head);
        assert!(!t.is_websocket(), "{:?}", String::from_utf8_lossy(head));
        assert!(t.tracker().tunnel());
    }
    // permessage-deflate is followed.
    let deflate = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\
sec-websocket-extensions: permessage-deflate; server_no_context_takeover\r\n\r\n";
    assert!(switched(deflate).0.is_websocket());
    // The head split between two writes: left as today.
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    t.on_read(
        UPGRADE.len(),
        Some([UPGRADE].into_iter()),
        &conn,
        &f.shared,
        STATS,
        now,
    );
    let (a, b) = SWITCHED.split_at(20);
    t.on_write(Some([a].into_iter()), &conn, &f.shared, STATS, now);
    t.on_write(Some([b].into_iter()), &conn, &f.shared, STATS, now);
    assert!(t.tracker().tunnel() && !t.is_websocket());
}

#[test]
fn at_a_message_end_the_wake_injects_the_close_then_later_frames_are_dropped() {
    let (mut t, _, _) = switched(SWITCHED);
    let hello = text(b"hello", true);
    assert_eq!(
        t.websocket_write(Some([&hello[..]].into_iter()), 1_000, 10)
            .0,
        WsWrite::Pass
    );
    // Before the move time: wait for it.
    assert_eq!(
        t.websocket_wake(plan(500), 100),
        (WsWake::Nothing, Some(500))
    );
    let (act, wake) = t.websocket_wake(plan(500), 500);
    assert_eq!(act, WsWake::Inject(client_close()));
    assert_eq!(wake, Some(1_500));
    assert_eq!(
        t.websocket_write(Some([&hello[..]].into_iter()), 1_000, 600)
            .0,
        WsWrite::Drop
    );
    // No answer by the close timeout: the client is between frames, the upstream is told.
    assert_eq!(
        t.websocket_wake(plan(500), 1_499),
        (WsWake::Nothing, Some(1_500))
    );
    assert_eq!(
        t.websocket_wake(plan(500), 1_500),
        (WsWake::TellUpstreamAndClose, None)
    );
}

#[test]
fn inside_a_message_the_close_goes_after_its_last_fragment_in_the_write_hook() {
    let (mut t, _, _) = switched(SWITCHED);
    let first = text(b"part", false);
    t.websocket_write(Some([&first[..]].into_iter()), 1_000, 10);
    // Due, but inside a message: wait for its end.
    assert_eq!(
        t.websocket_wake(plan(500), 500),
        (WsWake::Nothing, Some(600))
    );
    // Its last fragment, then the start of a new message, in one write: the Close goes between
    // them (after the last message end in the write), and the rest is dropped.
    let mut last = vec![0x80, 3];
    last.extend_from_slice(b"end");
    let next = text(b"next", true);
    let write = [last.clone(), next[..3].to_vec()].concat();
    let (w, wake) = t.websocket_write(Some([&write[..]].into_iter()), 1_000, 550);
    let mut want = last.clone();
    want.extend_from_slice(&client_close());
    assert_eq!(w, WsWrite::Replace(want));
    assert_eq!(wake, Some(1_550));
    // A write that ends at the message end: the Close is appended.
    let (mut t, _, _) = switched(SWITCHED);
    t.websocket_write(Some([&first[..]].into_iter()), 1_000, 10);
    t.websocket_wake(plan(500), 500);
    let (w, _) = t.websocket_write(Some([&last[..]].into_iter()), 1_000, 550);
    assert_eq!(w, WsWrite::Append(client_close()));
}

#[test]
fn the_client_answer_then_the_timeout_closes_without_telling_the_upstream() {
    let (mut t, conn, f) = switched(SWITCHED);
    t.note_switch(&f.shared);
    t.websocket_wake(plan(500), 500);
    // The client's masked Close(1001) answer.
    let answer = close_frame(GOING_AWAY, "", Some([9, 9, 9, 9]));
    let a = answer.as_bytes();
    t.on_read(a.len(), Some([a].into_iter()), &conn, &f.shared, STATS, now);
    assert_eq!(t.websocket_wake(plan(500), 1_500), (WsWake::Close, None));
    t.on_close(&conn, &f.shared, STATS);
    let ll = f.shared.connections().long_lived();
    assert_eq!(ll.report().websocket.moved, 1);
    assert_eq!(ll.open().0, 0);
}

#[test]
fn without_a_plan_nothing_moves_and_a_lost_follower_is_left_alone() {
    let (mut t, _, _) = switched(SWITCHED);
    assert_eq!(t.websocket_wake(None, 10_000), (WsWake::Nothing, None));
    // A masked frame from the server: the follower gives up, the move never writes.
    let bad = [0x81, 0x80, 1, 2, 3, 4];
    t.websocket_write(Some([&bad[..]].into_iter()), 1_000, 10);
    assert_eq!(t.websocket_wake(plan(500), 500), (WsWake::Nothing, None));
    assert_eq!(t.websocket_wake(plan(500), 5_000), (WsWake::Nothing, None));
}

#[test]
fn the_tracker_keeps_its_size() {
    // Before the WebSocket move: 280 and 408 bytes (the followers take the HTTP/1.1 state's
    // place).
    assert!(std::mem::size_of::<crate::exchange::Tracker>() <= 280);
    assert!(std::mem::size_of::<TrackedConnection>() <= 408);
}

const SSE_GET: &[u8] = b"GET /events HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n";
const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: TEXT/event-stream;charset=utf-8\r\n\
transfer-encoding: chunked\r\n\r\n";

fn sse_started(head: &[u8]) -> (TrackedConnection, Conn, crate::testing::Fixture) {
    sse_started_by(SSE_GET, head)
}

fn sse_started_by(get: &[u8], head: &[u8]) -> (TrackedConnection, Conn, crate::testing::Fixture) {
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    t.on_read(
        get.len(),
        Some([get].into_iter()),
        &conn,
        &f.shared,
        STATS,
        now,
    );
    t.on_write(Some([head].into_iter()), &conn, &f.shared, STATS, now);
    (t, conn, f)
}

/// What Envoy writes to an HTTP/1.0 client for a response without a length: no chunks, the
/// body runs until the close.
const SSE_GET_10: &[u8] = b"GET /events HTTP/1.0\r\nhost: x\r\naccept: text/event-stream\r\n\r\n";
const SSE_HEAD_UNTIL_CLOSE: &[u8] =
    b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

fn chunk(data: &[u8]) -> Vec<u8> {
    [format!("{:x}\r\n", data.len()).as_bytes(), data, b"\r\n"].concat()
}

#[test]
fn only_chunked_event_streams_are_sse_responses() {
    assert!(sse_started(SSE_HEAD).0.long_lived());
    for head in [
        &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-streams\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 5\r\n\r\n"[..],
    ] {
        assert!(!sse_started(head).0.long_lived(), "{:?}", String::from_utf8_lossy(head));
    }
    // The head split between writes: held like any request (nothing proves it carries no
    // Content-Encoding: `movable_sse`), in flight until it ends.
    let f = fixture(Some(fast()));
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    t.on_read(
        SSE_GET.len(),
        Some([SSE_GET].into_iter()),
        &conn,
        &f.shared,
        STATS,
        now,
    );
    for b in SSE_HEAD.chunks(1) {
        t.on_write(Some([b].into_iter()), &conn, &f.shared, STATS, now);
    }
    assert!(!t.long_lived());
    assert_eq!(t.tracker().in_flight(), 1);
}

/// What does not resume by itself is held like any request: a POST answered with events (an
/// LLM completion), a GET whose events are content-encoded.
#[test]
fn a_post_completion_or_a_compressed_event_stream_is_not_moved() {
    for (request, head) in [
        (
            &b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"[..],
            SSE_HEAD,
        ),
        (
            SSE_GET,
            &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        ),
    ] {
        let f = fixture(Some(fast()));
        let conn = Conn::new(1);
        let mut t = TrackedConnection::new();
        t.on_read(request.len(), Some([request].into_iter()), &conn, &f.shared, STATS, now);
        t.on_write(Some([head].into_iter()), &conn, &f.shared, STATS, now);
        assert!(!t.long_lived(), "{:?}", String::from_utf8_lossy(request));
        assert!(!t.sse_unnoticed());
        assert_eq!(t.tracker().in_flight(), 1);
        // Woken at its move time: nothing is written, nothing moves.
        let plan = MovePlan { at: 0, final_at: u64::MAX, message_wait: 0, close_timeout: 0 };
        assert_eq!(t.sse_wake(Some(plan), 1, &f.shared), (WsWake::Nothing, None));
        let ev = chunk(b"data: [DONE]\n\n");
        assert_eq!(t.sse_write(Some([&ev[..]].into_iter())), (WsWrite::Pass, None));
    }
}

#[test]
fn an_sse_response_ends_with_the_last_chunk_at_the_first_event_boundary_after_its_move_time() {
    let (mut t, conn, f) = sse_started(SSE_HEAD);
    // An event, then half of the next one (its own chunk) before the move time.
    let ev = chunk(b"data: one\n\n");
    t.on_write(Some([&ev[..]].into_iter()), &conn, &f.shared, STATS, now);
    let half = chunk(b"data: two");
    t.on_write(Some([&half[..]].into_iter()), &conn, &f.shared, STATS, now);
    // Counted at the moves' start, handed over at its move time (at a chunk start, inside
    // an event: nothing written yet).
    assert_eq!(
        t.sse_wake(plan(500), 100, &f.shared),
        (WsWake::Nothing, Some(500))
    );
    let ll = f.shared.connections().long_lived();
    assert_eq!(ll.open().1, 1);
    assert_eq!(
        t.sse_wake(plan(500), 500, &f.shared),
        (WsWake::Nothing, None)
    );
    // More of the event: not here.
    let more = chunk(b"; more");
    assert_eq!(
        t.sse_write(Some([&more[..]].into_iter())),
        (WsWrite::Pass, None)
    );
    // Its end, and the start of the next event in the same write: the last chunk goes
    // between them, the rest is dropped.
    let rest = [chunk(b"\n\n"), chunk(b"data: thr")].concat();
    let (w, wake) = t.sse_write(Some([&rest[..]].into_iter()));
    let mut want = chunk(b"\n\n");
    want.extend_from_slice(LAST_CHUNK);
    assert_eq!(w, WsWrite::Replace(want));
    assert_eq!(wake, Some(1));
    // Later writes are dropped; the next wake-up closes.
    assert_eq!(
        t.sse_write(Some([&ev[..]].into_iter())),
        (WsWrite::Drop, None)
    );
    assert_eq!(t.sse_wake(plan(500), 600, &f.shared), (WsWake::Close, None));
    t.on_close(&conn, &f.shared, STATS);
    assert_eq!(ll.open().1, 0);
    assert_eq!(ll.report().sse.moved, 1);
}

#[test]
fn an_sse_response_between_two_events_at_its_move_time_ends_at_once() {
    // The tracker follows an SSE body's events (its chunk data is read, not skipped): a quiet
    // stream whose last event ended is ended at its move time, not at drain_timeout.
    let (mut t, conn, f) = sse_started(SSE_HEAD);
    let ev = chunk(b"id: 1\ndata: one\r\n\r\n");
    // Split inside the chunk data: still followed.
    t.on_write(Some([&ev[..9]].into_iter()), &conn, &f.shared, STATS, now);
    t.on_write(Some([&ev[9..]].into_iter()), &conn, &f.shared, STATS, now);
    assert_eq!(
        t.sse_wake(plan(500), 500, &f.shared),
        (WsWake::EndAndClose(LAST_CHUNK.to_vec()), None)
    );
    // The upstream's next event, written after: dropped.
    assert_eq!(
        t.sse_write(Some([&ev[..]].into_iter())),
        (WsWrite::Drop, None)
    );
    t.on_close(&conn, &f.shared, STATS);
    let ll = f.shared.connections().long_lived();
    assert_eq!(ll.report().sse.moved, 1);
}

#[test]
fn an_sse_response_not_at_a_chunk_start_is_handed_over_later() {
    let (mut t, conn, f) = sse_started(SSE_HEAD);
    let ev = chunk(b"data: one\n\n");
    // Half a chunk written: the move waits for its end.
    t.on_write(Some([&ev[..5]].into_iter()), &conn, &f.shared, STATS, now);
    let (act, wake) = t.sse_wake(plan(500), 500, &f.shared);
    assert_eq!(act, WsWake::Nothing);
    assert_eq!(wake, Some(500 + SSE_RETRY_NANOS));
    t.on_write(Some([&ev[5..]].into_iter()), &conn, &f.shared, STATS, now);
    // At a chunk start after a whole event: ended now.
    assert_eq!(
        t.sse_wake(plan(500), 600, &f.shared),
        (WsWake::EndAndClose(LAST_CHUNK.to_vec()), None)
    );
    assert!(t.tracker().tunnel(), "handed over");
}

#[test]
fn an_sse_response_that_began_after_the_moves_started_is_noticed_once() {
    let (mut t, _conn, f) = sse_started(SSE_HEAD);
    assert!(t.sse_unnoticed(), "no wake-up counted it yet");
    assert_eq!(
        t.sse_wake(plan(500), 100, &f.shared),
        (WsWake::Nothing, Some(500))
    );
    assert!(!t.sse_unnoticed());
    // Other responses are never SSE in flight.
    let (t, _, _) = sse_started(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    assert!(!t.sse_unnoticed());
}

#[test]
fn a_close_delimited_sse_response_is_closed_after_an_event_boundary() {
    // Followed from the body's start (the head's write carries the first bytes).
    let head = [SSE_HEAD_UNTIL_CLOSE, b"data: one\n\ndata: tw"].concat();
    let (mut t, conn, f) = sse_started_by(SSE_GET_10, &head);
    assert!(t.long_lived() && t.sse_unnoticed());
    // Before the move time, writes pass, followed.
    let w = b"o\n\ndata: th";
    assert_eq!(
        t.sse_write(Some([&w[..]].into_iter())),
        (WsWrite::Pass, None)
    );
    // At the move time, inside an event: handed over, nothing yet.
    assert_eq!(
        t.sse_wake(plan(500), 500, &f.shared),
        (WsWake::Nothing, None)
    );
    // The event's end and half the next: the write is cut after the blank line (no last
    // chunk: the close ends the body), the close asked for now.
    let w = b"ree\n\ndata: fo";
    assert_eq!(
        t.sse_write(Some([&w[..]].into_iter())),
        (WsWrite::Replace(b"ree\n\n".to_vec()), Some(1))
    );
    assert_eq!(t.sse_wake(plan(500), 600, &f.shared), (WsWake::Close, None));
    t.on_close(&conn, &f.shared, STATS);
    let ll = f.shared.connections().long_lived();
    assert_eq!(ll.report().sse.moved, 1);
    assert_eq!(ll.open().1, 0);
}

#[test]
fn a_close_delimited_sse_response_between_two_events_is_closed_at_its_move_time() {
    let head = [SSE_HEAD_UNTIL_CLOSE, b"data: one\r\n\r\n"].concat();
    let (mut t, _conn, f) = sse_started_by(SSE_GET_10, &head);
    assert_eq!(
        t.sse_wake(plan(500), 500, &f.shared),
        (WsWake::EndAndClose(Vec::new()), None)
    );
    // A close-delimited response that is not an event stream is a plain tunnel.
    let (mut t, _, _) = sse_started_by(
        SSE_GET_10,
        b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n",
    );
    assert!(!t.long_lived() && t.tracker().tunnel());
}

#[test]
fn once_both_close_frames_passed_the_connection_closes_at_once() {
    let (mut t, conn, f) = switched(SWITCHED);
    t.websocket_wake(plan(500), 500);
    let answer = close_frame(GOING_AWAY, "", Some([9, 9, 9, 9]));
    let a = answer.as_bytes();
    t.on_read(a.len(), Some([a].into_iter()), &conn, &f.shared, STATS, now);
    // The upstream's answer to the client's Close: dropped, and the close asked for now.
    let server_close = close_frame(GOING_AWAY, "", None);
    let s = server_close.as_bytes();
    assert_eq!(
        t.websocket_write(Some([s].into_iter()), 1_000, 700),
        (WsWrite::Drop, Some(1))
    );
    assert_eq!(t.websocket_wake(plan(500), 701), (WsWake::CloseNow, None));
    assert_eq!(t.websocket_wake(plan(500), 5_000), (WsWake::Nothing, None));
}

/// A write of several slices at an SSE response's move (issue 63): the last chunk goes after
/// the write's *last* event boundary, whichever slice holds it, so every whole event of the
/// write reaches the client; only the event begun after it is left out.
#[test]
fn an_sse_end_in_a_write_of_many_slices_goes_after_its_last_whole_event() {
    let (mut t, conn, f) = sse_started(SSE_HEAD);
    let half = chunk(b"data: zero");
    t.on_write(Some([&half[..]].into_iter()), &conn, &f.shared, STATS, now);
    assert_eq!(
        t.sse_wake(plan(500), 500, &f.shared),
        (WsWake::Nothing, None)
    );
    // Three slices: the end of the open event and a whole one; two whole ones; half of one.
    let a = [chunk(b"\n\n"), chunk(b"data: one\n\n")].concat();
    let b = [chunk(b"data: two\n\n"), chunk(b"data: three\n\n")].concat();
    let c = chunk(b"data: fo");
    let (w, wake) = t.sse_write(Some([&a[..], &b[..], &c[..]].into_iter()));
    let mut want = [a.clone(), b.clone()].concat();
    want.extend_from_slice(LAST_CHUNK);
    assert_eq!(w, WsWrite::Replace(want));
    assert_eq!(wake, Some(1));
}

/// An HTTP/2 frame.
fn h2_frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A header block of literals without indexing (literal names).
fn h2_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        b.extend_from_slice(&[0, n.len() as u8]);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    b
}

/// The move of a resumable gRPC stream at a wake-up: nothing before the move time; at it, the
/// stream inside a message waits (asked again 10 ms later), a stream of another method is left
/// alone; once its bytes end between two messages, the trailers and the RST_STREAM go, the
/// stream is no longer in flight (its ticket given back) and counted moved.
#[test]
fn a_resumable_grpc_stream_moves_at_a_message_boundary_at_its_time() {
    let f = fixture(Some(fast()));
    f.shared
        .connections()
        .long_lived()
        .note_grpc_prefixes(&["/pkg.Watch/".to_string()]);
    let conn = Conn::new(1);
    let mut t = TrackedConnection::new();
    let read = |t: &mut TrackedConnection, b: &[u8]| {
        t.on_read(b.len(), Some([b].into_iter()), &conn, &f.shared, STATS, now);
    };
    let mut pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    pre.extend(h2_frame(4, 0, 0, &[]));
    read(&mut t, &pre);
    t.on_write(
        Some([&h2_frame(4, 0, 0, &[])[..]].into_iter()),
        &conn,
        &f.shared,
        STATS,
        now,
    );
    for (id, path) in [(1, "/pkg.Watch/Sub"), (3, "/pkg.Other/Sub")] {
        let req = h2_block(&[(":method", "POST"), (":path", path)]);
        read(&mut t, &h2_frame(1, 0x4, id, &req));
        let resp = h2_block(&[(":status", "200"), ("content-type", "application/grpc")]);
        t.on_write(
            Some([&h2_frame(1, 0x4, id, &resp)[..]].into_iter()),
            &conn,
            &f.shared,
            STATS,
            now,
        );
    }
    assert_eq!(f.shared.counts().active, 2);
    // Half a message (a 5-byte prefix announcing 4 bytes, then 2 of them).
    let half = h2_frame(0, 0, 1, &[0, 0, 0, 0, 4, 1, 2]);
    t.on_write(Some([&half[..]].into_iter()), &conn, &f.shared, STATS, now);
    assert_eq!(
        t.h2_wake(plan(500), 100, 7, &conn, &f.shared, STATS),
        (WsWake::Nothing, Some(500))
    );
    assert_eq!(
        t.h2_wake(plan(500), 500, 7, &conn, &f.shared, STATS),
        (WsWake::Nothing, Some(500 + 10_000_000)),
        "inside a message: looked at again"
    );
    let rest = h2_frame(0, 0, 1, &[3, 4]);
    t.on_write(Some([&rest[..]].into_iter()), &conn, &f.shared, STATS, now);
    let (act, wake) = t.h2_wake(plan(500), 600, 7, &conn, &f.shared, STATS);
    assert_eq!(
        act,
        WsWake::H2Moves {
            to_client: crate::exchange::grpc_unavailable(1),
            to_envoy: crate::exchange::rst_stream_cancel(1),
        }
    );
    assert_eq!(wake, Some(1_000_000_000), "the last part's pass next");
    assert_eq!(f.shared.counts().active, 1, "its ticket given back");
    assert_eq!(f.shared.connections().long_lived().report().grpc.moved, 1);
    assert_eq!(
        t.h2_wake(plan(500), 700, 7, &conn, &f.shared, STATS),
        (WsWake::Nothing, Some(1_000_000_000)),
        "the other method's stream is held"
    );
    // In the last part of drain_timeout, every gRPC stream still open ends the same way.
    let (act, wake) = t.h2_wake(plan(500), 1_000_000_000, 7, &conn, &f.shared, STATS);
    assert_eq!(
        act,
        WsWake::H2Moves {
            to_client: crate::exchange::grpc_unavailable(3),
            to_envoy: crate::exchange::rst_stream_cancel(3),
        }
    );
    assert_eq!(wake, None);
    assert_eq!(f.shared.counts().active, 0);
    let ll = f.shared.connections().long_lived();
    assert_eq!(
        (ll.report().grpc.moved, ll.report().grpc.ended_at_timeout),
        (1, 1)
    );
    t.on_close(&conn, &f.shared, STATS);
    assert_eq!(f.shared.counts().active, 0);
}

/// The last part of `drain_timeout`: a tenth, within [1 s, 5 s], never before the moves begin.
#[test]
fn the_last_part_of_the_timeout_is_a_tenth_within_one_and_five_seconds() {
    use crate::connections::long_lived::final_span;
    use std::time::Duration;
    let s = Duration::from_secs;
    assert_eq!(final_span(s(5), s(25)), Duration::from_millis(2500));
    assert_eq!(final_span(s(1), s(8)), s(1));
    assert_eq!(final_span(s(5), s(300)), s(5));
    assert_eq!(final_span(s(5), s(5)), s(0));
}

/// `move_long_lived_streams: false` turns the HTTP/2 moves off too: no prefixes are handed to
/// new connections, so nothing is decoded or moved; with moves on, the list is handed over even
/// when empty and `move_http2_sse` is off: gRPC streams of any method still open in the last part
/// of `drain_timeout` are ended there (issue 65 item 3), which needs both directions decoded.
#[test]
fn the_grpc_prefixes_reach_connections_only_while_moves_are_on() {
    let f = fixture(Some(fast()));
    let ll = f.shared.connections().long_lived();
    assert_eq!(
        ll.grpc_prefixes().as_deref(),
        Some(&[][..]),
        "none configured: both directions still decoded, for SSE and the timeout's ends"
    );
    ll.note_settings(crate::config::LongLivedSettings {
        http2_sse: false,
        ..Default::default()
    });
    assert_eq!(
        ll.grpc_prefixes().as_deref(),
        Some(&[][..]),
        "move_http2_sse false, no prefix: still decoded, for the timeout's ends"
    );
    ll.note_settings(crate::config::LongLivedSettings::default());
    ll.note_grpc_prefixes(&["/pkg.Watch/".to_string()]);
    assert_eq!(
        ll.grpc_prefixes().as_deref(),
        Some(&["/pkg.Watch/".to_string()][..])
    );
    ll.note_settings(crate::config::LongLivedSettings {
        enabled: false,
        ..Default::default()
    });
    assert_eq!(ll.grpc_prefixes(), None, "moves off");
}
