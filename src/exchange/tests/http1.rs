//! HTTP/1.1 exchanges: keep-alive, bodies, interim responses, tunnels, pipelining, and what
//! the tracker gives up on.

use super::*;

pub(super) fn keep_alive_get() -> Script {
    vec![
        c(b"GET /healthz HTTP/1.1\r\nHost: a\r\nUser-Agent:  kube-probe/1.29 \r\nCookie: x\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\nhello"),
        c(b"GET /two HTTP/1.1\r\nhost: a\r\n\r\n"),
        s(b"HTTP/1.1 204 No Content\r\n\r\n"),
    ]
}

#[test]
pub(super) fn unread_payload_is_fed_by_length() {
    // HTTP/1.1: a 10 000-byte body after its head, fed as stand-ins.
    let mut t = Tracker::new();
    let mut ev = Vec::new();
    let mut on = |e: Event, _: &Tracker| ev.push(e);
    t.client(b"GET / HTTP/1.1\r\n\r\n", &mut on);
    t.server(b"HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n", &mut on);
    assert_eq!(t.server_unread_ahead(), 10_000);
    for z in unread(9_999) {
        t.server(z, &mut on);
    }
    assert_eq!(t.server_unread_ahead(), 1);
    for z in unread(1) {
        t.server(z, &mut on);
    }
    assert_eq!(t.server_unread_ahead(), 0);
    assert_eq!(ev, [Event::Started(1), Event::Ended(1)]);
    // HTTP/2: a DATA frame's payload, and a GOAWAY's (its last-stream-id ends no stream).
    let mut t = Tracker::new();
    let mut ev = Vec::new();
    let mut on = |e: Event, _: &Tracker| ev.push(e);
    t.client(H2_PREFACE, &mut on);
    t.client(&fr(SETTINGS, 0, 0, 0), &mut on);
    t.client(&fr(HEADERS, 0x5, 1, 0), &mut on);
    t.server(&fr(SETTINGS, 0, 0, 0), &mut on);
    t.server(&fr(HEADERS, 0x4, 1, 0)[..], &mut on);
    t.server(&fr(DATA, 0x1, 1, 5000)[..9], &mut on);
    assert_eq!(t.server_unread_ahead(), 5000);
    for z in unread(5000) {
        t.server(z, &mut on);
    }
    t.server(&fr(GOAWAY, 0, 0, 8)[..9], &mut on);
    assert_eq!(t.server_unread_ahead(), 8);
    for z in unread(8) {
        t.server(z, &mut on);
    }
    assert_eq!(t.server_unread_ahead(), 0);
    assert!(t.will_close(), "the GOAWAY was followed to its end");
    assert_eq!(ev, [Event::Started(1), Event::Ended(1)]);
}

/// What may be fed as stand-ins is only what the tracker skips by length: a body's or a chunk's
/// data, an HTTP/2 frame's payload. Not a head's digits, a chunk-size line, an SSE body (its
/// events are read), an HTTP/2 frame header; nothing once lost.
#[test]
fn only_bytes_skipped_by_length_may_be_stand_ins() {
    let get = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".as_slice();
    let ahead = |client: &[u8], server: &[u8]| {
        let mut t = Tracker::new();
        t.client(client, &mut |_, _| {});
        t.server(server, &mut |_, _| {});
        t.server_unread_ahead()
    };
    assert_eq!(
        ahead(get, b"HTTP/1.1 200 OK\r\ncontent-length: 12"),
        0,
        "a head"
    );
    let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".as_slice();
    assert_eq!(ahead(get, &[chunked, b"1f"].concat()), 0, "a size line");
    assert_eq!(
        ahead(get, &[chunked, b"1f\r\nab"].concat()),
        0x1d,
        "a chunk's data"
    );
    let sse =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    assert_eq!(
        ahead(get, &[&sse[..], b"1f\r\ndata: "].concat()),
        0,
        "SSE events"
    );
    // Lost inside a body: the client's next bytes are not HTTP.
    let mut t = Tracker::new();
    t.client(get, &mut |_, _| {});
    t.server(
        b"HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n",
        &mut |_, _| {},
    );
    assert_eq!(t.server_unread_ahead(), 10_000);
    t.client(b"\x00\x01 not HTTP\r\n\r\n", &mut |_, _| {});
    assert_eq!(t.protocol(), Protocol::Unknown);
    assert_eq!(t.server_unread_ahead(), 0, "lost in an HTTP/1.1 body");
    // HTTP/2: a payload is skipped from its first byte, a GOAWAY's too; a frame header is read.
    let h2 = || {
        let mut t = Tracker::new();
        t.client(H2_PREFACE, &mut |_, _| {});
        t.client(&fr(SETTINGS, 0, 0, 0), &mut |_, _| {});
        t.client(&fr(HEADERS, 0x5, 1, 0), &mut |_, _| {});
        t.server(&fr(SETTINGS, 0, 0, 0), &mut |_, _| {});
        t
    };
    let goaway = fr(GOAWAY, 0, 0, 20);
    for (fed, want) in [(0, 0), (5, 0), (9, 20), (12, 17), (13, 16), (29, 0)] {
        let mut t = h2();
        t.server(&goaway[..fed], &mut |_, _| {});
        assert_eq!(t.server_unread_ahead(), want, "{} GOAWAY bytes", fed);
    }
    let mut t = h2();
    t.server(&fr(DATA, 0, 1, 5000)[..9], &mut |_, _| {});
    assert_eq!(t.server_unread_ahead(), 5000);
    t.client(&fr(HEADERS, 0x5, 0, 0), &mut |_, _| {});
    assert_eq!(t.protocol(), Protocol::Unknown);
    assert_eq!(t.server_unread_ahead(), 0, "lost inside an HTTP/2 payload");
    // The stand-ins come in whole pieces and never as an empty one.
    let sizes = |n| unread(n).map(<[u8]>::len).collect::<Vec<_>>();
    assert_eq!(sizes(0), [0usize; 0]);
    assert_eq!(sizes(8192), [4096, 4096]);
    assert_eq!(sizes(4097), [4096, 1]);
    assert!(unread(3).flatten().all(|&b| b == 0xAA));
}

#[test]
pub(super) fn keep_alive_get_counts_two_requests_and_keeps_hints() {
    let t = check(
        &keep_alive_get(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
    assert_eq!(t.protocol(), Protocol::Http1);
    assert_eq!(t.in_flight(), 0);
    assert!(!t.will_close() && !t.tunnel() && !t.partial());
    let (_, out) = play(&keep_alive_get());
    assert_eq!(out[0].1.as_deref(), Some(&b"/healthz"[..]));
    assert_eq!(out[0].2.as_deref(), Some(&b"kube-probe/1.29"[..]));
    assert_eq!(out[0].4, 1, "in_flight inside on(Started)");
    assert_eq!(out[2].1.as_deref(), Some(&b"/two"[..]));
    assert_eq!(out[2].2, None, "the second request has no User-Agent");
    assert_eq!(
        t.hints().path,
        Some(&b"/two"[..]),
        "hints stay after Started"
    );
}

#[test]
pub(super) fn hints_are_cut_at_hint_len_and_say_so() {
    let long = "/".repeat(100);
    let ua = "u".repeat(70);
    let req = format!("GET {long} HTTP/1.1\r\nuser-agent: {ua}\r\n\r\n");
    let (_, out) = play(&vec![c(req.as_bytes())]);
    assert_eq!(out[0].1.as_ref().unwrap().len(), HINT_LEN);
    assert_eq!(out[0].2.as_ref().unwrap().len(), HINT_LEN);
    assert!(out[0].3);
    let (_, out) = play_bytewise(&vec![c(req.as_bytes())]);
    assert!(out[0].3);
    // Exactly HINT_LEN after trimming: not cut.
    let ua = "u".repeat(HINT_LEN);
    let req = format!("GET / HTTP/1.1\r\nUser-Agent: {ua}   \r\n\r\n");
    let (t, out) = play(&vec![c(req.as_bytes())]);
    assert!(!out[0].3);
    assert_eq!(t.hints().user_agent.unwrap().len(), HINT_LEN);
}

pub(super) fn post_content_length() -> Script {
    vec![
        c(b"POST /p HTTP/1.1\r\ncontent-LENGTH: 11\r\nContent-Length: 11, 11\r\n\r\nhello\r\n\r\nxx"),
        s(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"),
    ]
}

#[test]
pub(super) fn post_with_content_length_skips_the_body() {
    check(
        &post_content_length(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
}

pub(super) fn chunked_with_trailers() -> Script {
    vec![
        c(b"POST /c HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n5;ext=1\r\nhello\r\n10 ; a=\"b\"\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\ntrailer: x\r\n\r\n"),
        c(b"GET /n HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
pub(super) fn chunked_bodies_with_extensions_and_trailers() {
    check(
        &chunked_with_trailers(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
}

pub(super) fn head_with_length() -> Script {
    vec![
        c(b"HEAD / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"),
        c(b"HEAD /c HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    ]
}

#[test]
pub(super) fn head_responses_have_no_body_whatever_they_say() {
    check(
        &head_with_length(),
        &[
            Started(1),
            Ended(1),
            Started(2),
            Ended(2),
            Started(3),
            Ended(3),
        ],
    );
}

pub(super) fn continue_100() -> Script {
    vec![
        c(b"PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"),
        s(b"HTTP/1.1 100 Continue\r\n\r\n"),
        c(b"data"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
pub(super) fn interim_100_continue_is_skipped() {
    check(&continue_100(), &[Started(1), Ended(1)]);
}

pub(super) fn early_hints_103() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
    ]
}

#[test]
pub(super) fn interim_103_is_skipped() {
    check(&early_hints_103(), &[Started(1), Ended(1)]);
}

pub(super) fn websocket_101() -> Script {
    vec![
        c(b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUpgrade-Insecure-Requests: 1\r\n\r\n"),
        c(b"\x81\x05hello"),
        s(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        s(b"\x81\x02hi"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
    ]
}

#[test]
pub(super) fn upgrade_101_is_a_tunnel_until_close() {
    let t = check(&websocket_101(), &[Started(1)]);
    assert!(t.tunnel());
    assert_eq!(t.in_flight(), 1);
    assert_eq!(t.protocol(), Protocol::Http1);
}

pub(super) fn connect_200() -> Script {
    vec![
        c(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\n\r\n"),
        c(b"\x16\x03\x01 tls"),
        s(b"HTTP/1.1 junk"),
    ]
}

#[test]
pub(super) fn connect_2xx_is_a_tunnel() {
    let t = check(&connect_200(), &[Started(1)]);
    assert!(t.tunnel());
}

pub(super) fn connect_403() -> Script {
    vec![
        c(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
pub(super) fn connect_refused_goes_on_with_the_next_request() {
    let t = check(
        &connect_403(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
    assert!(!t.tunnel());
}

pub(super) fn upgrade_refused_after_client_bytes() -> Script {
    vec![
        c(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"),
        s(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
pub(super) fn bytes_sent_during_a_refused_upgrade_are_unknown() {
    let t = check(&upgrade_refused_after_client_bytes(), &[Started(1), Lost]);
    assert_eq!(t.protocol(), Protocol::Unknown);
    assert_eq!(t.in_flight(), 1, "in_flight keeps its last value");
}

pub(super) fn pipelined_three() -> Script {
    vec![
        c(b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n\r\nGET /3 HTTP/1.1\r\nIf-None-Match: x\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
        s(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"),
    ]
}

#[test]
pub(super) fn pipelined_requests_are_answered_in_order() {
    let t = check(
        &pipelined_three(),
        &[
            Started(1),
            Started(2),
            Started(3),
            Ended(1),
            Ended(2),
            Ended(3),
        ],
    );
    assert_eq!(t.in_flight(), 0);
}

pub(super) fn bad_request_400() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: aaaa"),
        s(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request"),
        c(b"aaaaa\r\n\r\n"),
    ]
}

#[test]
pub(super) fn a_response_before_the_head_is_complete_answers_the_partial_request() {
    let (t, _) = play(&bad_request_400()[..1].to_vec());
    assert!(t.partial());
    assert_eq!(t.in_flight(), 0);
    let t = check(&bad_request_400(), &[Started(1), Ended(1)]);
    assert!(t.will_close());
    assert!(!t.partial());
    assert_eq!(t.hints(), Hints::default());
}

pub(super) fn close_on_request() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

pub(super) fn close_on_response() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\nconnection: keep-alive\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive, CLOSE\r\n\r\n"),
    ]
}

#[test]
pub(super) fn connection_close_on_either_side_marks_will_close() {
    let (t, _) = play(&close_on_request()[..1].to_vec());
    assert!(t.will_close());
    check(&close_on_request(), &[Started(1), Ended(1)]);
    let (t, _) = play(&close_on_response()[..1].to_vec());
    assert!(!t.will_close());
    let t = check(&close_on_response(), &[Started(1), Ended(1)]);
    assert!(t.will_close());
    let (t, _) = play(&vec![c(b"GET / HTTP/1.0\r\n\r\n")]);
    assert!(t.will_close(), "HTTP/1.0 without keep-alive");
    let (t, _) = play(&vec![c(
        b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
    )]);
    assert!(!t.will_close());
}

pub(super) fn until_close() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\n\r\nstreaming until close"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
    ]
}

#[test]
pub(super) fn a_body_without_length_runs_until_close() {
    let t = check(&until_close(), &[Started(1)]);
    assert!(t.tunnel() && t.will_close());
    assert_eq!(t.in_flight(), 1);
}

pub(super) fn bare_lf() -> Script {
    vec![
        c(b"\r\n\nPOST / HTTP/1.1\nContent-Length: 2\n\nokGET / HTTP/1.1\n\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
pub(super) fn bare_lf_and_leading_empty_lines_are_accepted() {
    check(&bare_lf(), &[Started(1), Started(2), Ended(1), Ended(2)]);
}

/// Each HTTP/1.1 thing the tracker cannot follow, and the events before it gives up.
pub(super) fn h1_unknowns() -> Vec<(&'static str, Script, Vec<Event>)> {
    let get = || c(b"GET / HTTP/1.1\r\n\r\n");
    let ok = || s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    vec![
        (
            "bad request line",
            vec![c(b"GET / HTTX/1.1\r\n")],
            vec![Lost],
        ),
        ("no target", vec![c(b"GET  HTTP/1.1\r\n")], vec![Lost]),
        ("HTTP/0.9", vec![c(b"GET /\r\n")], vec![Lost]),
        (
            "bad status line",
            vec![get(), s(b"HTTP/1.1 2x0 OK\r\n")],
            vec![Started(1), Lost],
        ),
        (
            "bad status tail",
            vec![get(), s(b"HTTP/1.1 2000\r\n")],
            vec![Started(1), Lost],
        ),
        (
            "bad chunk size",
            vec![c(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            )],
            vec![Started(1), Lost],
        ),
        (
            "bad chunk end",
            vec![c(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            )],
            vec![Started(1), Lost],
        ),
        (
            "chunk size overflow",
            vec![c(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
            )],
            vec![Started(1), Lost],
        ),
        (
            "TE and CL",
            vec![c(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            )],
            vec![Lost],
        ),
        (
            "TE not chunked",
            vec![c(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            )],
            vec![Lost],
        ),
        (
            "CL differs in a list",
            vec![c(b"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n")],
            vec![Lost],
        ),
        (
            "CL differs across lines",
            vec![c(
                b"POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n",
            )],
            vec![Lost],
        ),
        (
            "CL not digits",
            vec![c(b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n")],
            vec![Lost],
        ),
        (
            "CL empty",
            vec![c(b"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n")],
            vec![Lost],
        ),
        (
            "CL overflow",
            vec![c(
                b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            )],
            vec![Lost],
        ),
        (
            "response TE and CL",
            vec![
                get(),
                s(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            ],
            vec![Started(1), Lost],
        ),
        (
            "response nobody asked for",
            vec![get(), ok(), ok()],
            vec![Started(1), Ended(1), Lost],
        ),
        ("server first", vec![ok()], vec![Lost]),
        (
            "bad h2 preface",
            vec![c(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")],
            vec![Lost],
        ),
    ]
}

#[test]
pub(super) fn each_http1_unknown_trigger_loses_once() {
    for (name, script, want) in h1_unknowns() {
        let (t, out) = play(&script);
        assert_eq!(events(&out), want, "{name}");
        assert_eq!(t.protocol(), Protocol::Unknown, "{name}");
        // Later feeds are ignored.
        let mut more = Tracker::clone(&t);
        let mut n = 0;
        more.client(b"GET / HTTP/1.1\r\n\r\n", &mut |_, _| n += 1);
        more.server(b"HTTP/1.1 200 OK\r\n\r\n", &mut |_, _| n += 1);
        assert_eq!(n, 0, "{name}");
        assert_eq!(more.totals(), t.totals());
    }
}

#[test]
pub(super) fn too_long_lines_and_heads_are_unknown() {
    let mut line = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
    line.extend(std::iter::repeat_n(b'a', MAX_HEAD));
    let (t, out) = play(&vec![c(&line)]);
    assert_eq!(events(&out), [Lost]);
    assert_eq!(t.protocol(), Protocol::Unknown);
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    while head.len() <= MAX_HEAD {
        head.extend_from_slice(b"Cookie: 0123456789\r\n");
    }
    let (_, out) = play(&vec![c(&head)]);
    assert_eq!(events(&out), [Lost]);
    // The same bytes in pieces.
    let mut t = Tracker::new();
    let mut evs = Vec::new();
    for piece in head.chunks(1000) {
        t.client(piece, &mut |e, _| evs.push(e));
    }
    assert_eq!(evs, [Lost]);
    // A long target is fine below the limit.
    let target = "/".repeat(MAX_HEAD / 2);
    let (_, out) = play(&vec![
        c(format!("GET {target} HTTP/1.1\r\n\r\n").as_bytes()),
    ]);
    assert_eq!(events(&out), [Started(1)]);
    // A chunk-size line longer than the limit.
    let mut body = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
    body.extend(std::iter::repeat_n(b'x', MAX_HEAD + 1));
    let (_, out) = play(&vec![c(&body)]);
    assert_eq!(events(&out), [Started(1), Lost]);
}

/// Envoy takes heads up to 8 MiB when configured to (`max_request_headers_kb: 8192` bounds the
/// names and values; `": "` and CRLF come on top): 8 MiB of names and values in 1 024 headers,
/// whole and in 16 KiB reads, is followed.
#[test]
pub(super) fn heads_as_large_as_envoy_can_take_are_followed() {
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..1024 {
        let name = format!("x-h{i:04}");
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend(std::iter::repeat_n(b'c', 8192 - name.len()));
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    assert!(head.len() > (8 << 20) + 4096, "{}", head.len());
    let (_, out) = play(&vec![c(&head)]);
    assert_eq!(events(&out), [Started(1)]);
    let mut t = Tracker::new();
    let mut evs = Vec::new();
    for piece in head.chunks(16 * 1024) {
        t.client(piece, &mut |e, _| evs.push(e));
    }
    assert_eq!(evs, [Started(1)]);
}

#[test]
pub(super) fn more_than_max_pipelined_requests_are_unknown() {
    let one = b"GET / HTTP/1.1\r\n\r\n";
    let mut t = Tracker::new();
    let mut evs = Vec::new();
    for _ in 0..MAX_PIPELINED + 1 {
        t.client(one, &mut |e, _| evs.push(e));
    }
    let mut want: Vec<Event> = (1..=MAX_PIPELINED as u32).map(Started).collect();
    want.push(Lost);
    assert_eq!(evs, want);
}

/// Where each request ended in the client's bytes, across reads and inside one read (Envoy's
/// codec stops there with pipelined requests behind: `ends_a_request`).
#[test]
fn request_ends_are_kept_at_their_client_offsets() {
    let a = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n".as_slice();
    let b = b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n".as_slice();
    let post = b"POST /c HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc".as_slice();
    let mut t = Tracker::new();
    t.client(a, &mut |_, _| {});
    t.client(&[b, post].concat(), &mut |_, _| {});
    let ends = [a.len(), a.len() + b.len(), a.len() + b.len() + post.len()];
    for end in ends {
        assert!(t.ends_a_request(end as u64), "a request ends at {end}");
    }
    for not in [0, 1, ends[0] + 1, ends[1] - 1, ends[1] + 1, ends[2] - 3] {
        assert!(!t.ends_a_request(not as u64), "no request ends at {not}");
    }
    assert_eq!(t.client_fed(), ends[2] as u64);
}

/// A 101 that negotiated permessage-deflate lets the frame followers take RSV1 (compressed)
/// frames; without it such a frame is not WebSocket as negotiated and the move gives up.
#[test]
fn only_a_negotiated_deflate_lets_compressed_frames_be_followed() {
    let get = b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let compressed = b"\xc1\x02hi"; // FIN | RSV1 | text
    for (extensions, deflate) in [
        ("", false),
        ("Sec-WebSocket-Extensions: permessage-deflate\r\n", true),
    ] {
        let mut t = Tracker::new();
        t.client(get, &mut |_, _| {});
        let head = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{extensions}\r\n"
        );
        t.server(head.as_bytes(), &mut |_, _| {});
        let m = t.websocket().expect("switched to WebSocket frames");
        assert!(!m.mv.lost());
        m.mv.server_bytes(compressed);
        assert_eq!(m.mv.lost(), !deflate, "deflate negotiated: {deflate}");
    }
}

/// A chunked SSE response is handed over to its end only at a chunk's start: not inside a
/// chunk's data, nor inside a chunk-size line.
#[test]
fn an_sse_response_is_handed_over_only_at_a_chunk_start() {
    let get = b"GET /events HTTP/1.1\r\nhost: x\r\n\r\n".as_slice();
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .as_slice();
    let event = b"b\r\ndata: one\n\n\r\n".as_slice();
    for (written, at_start) in [
        (&b""[..], true),
        (event, true),
        (&event[..5], false),
        (&event[..1], false),
        (&event[..2], false),
        (&event[..event.len() - 1], false),
    ] {
        let mut t = Tracker::new();
        t.client(get, &mut |_, _| {});
        t.server(&[head, written].concat(), &mut |_, _| {});
        assert!(t.sse_in_flight());
        assert_eq!(
            t.sse_hand_over(),
            at_start,
            "after {:?}",
            String::from_utf8_lossy(written)
        );
        assert_eq!(t.tunnel(), at_start);
    }
}

/// Where a drain's `connection: close` may go in: the next server byte starts the response
/// head of a request in flight; not inside a response, not with no request, not once lost.
#[test]
fn a_response_head_is_awaited_only_for_a_request_in_flight() {
    let get = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".as_slice();
    let mut t = Tracker::new();
    t.client(get, &mut |_, _| {});
    assert!(t.awaiting_response_head(), "a request in flight");
    t.server(b"HTTP/1.1 200 OK\r\ncontent-le", &mut |_, _| {});
    assert!(!t.awaiting_response_head(), "inside its response head");
    t.server(b"ngth: 2\r\n\r\nok", &mut |_, _| {});
    assert!(!t.awaiting_response_head(), "no request in flight");
    t.client(get, &mut |_, _| {});
    assert!(t.awaiting_response_head());
    t.client(b"\x00\x01 not HTTP\r\n\r\n", &mut |_, _| {});
    assert_eq!(t.protocol(), Protocol::Unknown);
    assert!(!t.awaiting_response_head(), "lost: nothing is known");
}

/// A 2xx to CONNECT is a tunnel whatever length its head states (RFC 9112 §6.3 rule 2: such a
/// response has no content; `Content-Length` and `Transfer-Encoding` are ignored): the client's
/// bytes after it are the tunnel's, not a next request. Unlike `connect_2xx_is_a_tunnel`, whose
/// 200 without a length would run until close anyway, this needs the request's CONNECT flag.
#[test]
fn a_2xx_to_connect_is_a_tunnel_even_with_a_length() {
    for framing in ["Content-Length: 0\r\n", "Transfer-Encoding: chunked\r\n"] {
        let head = format!("HTTP/1.1 200 Connection Established\r\n{framing}\r\n");
        let script = vec![
            c(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
            s(head.as_bytes()),
            c(b"\x16\x03\x01\x00\x05hello"),
            s(b"\x16\x03\x03\x00\x02ok"),
        ];
        let t = check(&script, &[Started(1)]);
        assert!(t.tunnel(), "{framing}");
        assert!(
            !t.will_close(),
            "{framing}: a tunnel, not a body until close"
        );
        assert_eq!(t.in_flight(), 1, "{framing}");
    }
}

/// Only requests carry the user agent the hints report: a response's `User-Agent` header (some
/// servers send one) leaves the request's, also while a pipelined request is in flight.
#[test]
fn a_response_user_agent_is_not_the_request_s() {
    let script = vec![
        c(b"GET /a HTTP/1.1\r\nUser-Agent: client/1\r\n\r\nGET /b HTTP/1.1\r\nUser-Agent: client/2\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nUser-Agent: server/9\r\nContent-Length: 0\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nuser-agent: server/9\r\nContent-Length: 0\r\n\r\n"),
    ];
    let (t, out) = play(&script);
    let (_, bytewise) = play_bytewise(&script);
    assert_eq!(bytewise, out, "byte by byte");
    assert_eq!(
        events(&out),
        [Started(1), Started(2), Ended(1), Ended(2)],
        "{out:?}"
    );
    let uas: Vec<_> = out.iter().map(|r| r.2.as_deref()).collect();
    let (one, two) = (Some(&b"client/1"[..]), Some(&b"client/2"[..]));
    assert_eq!(uas, [one, two, two, two], "{out:?}");
    assert_eq!(t.hints().user_agent, Some(&b"client/2"[..]));
}

/// The FIFO of pipelined requests moves on at each response: the second response is framed by
/// the second request (a GET's body is read), not by the first (a HEAD's response has none).
#[test]
fn each_pipelined_response_is_framed_by_its_own_request() {
    let script = vec![
        c(b"HEAD /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nHEAD /c HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
    ];
    let t = check(
        &script,
        &[
            Started(1),
            Started(2),
            Started(3),
            Ended(1),
            Ended(2),
            Ended(3),
        ],
    );
    assert_eq!(t.in_flight(), 0);
}

/// An upgrade request pipelined behind a plain one waits for its own response: the plain
/// request's 200 is not its verdict, so the client's early frames (noticed, not parsed) do not
/// make the tracker give up, and the 101 that follows opens the tunnel.
#[test]
fn a_pipelined_upgrade_waits_for_its_own_response() {
    let script = vec![
        c(b"GET /a HTTP/1.1\r\n\r\nGET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        c(b"\x81\x82\x00\x00\x00\x00hi"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        s(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
    ];
    let t = check(&script, &[Started(1), Started(2), Ended(1)]);
    assert!(t.tunnel());
    assert_eq!(t.in_flight(), 1);
}

/// Which responses close the connection: an HTTP/1.0 one unless it says keep-alive; a
/// `Connection` token of another name does not, whatever its length (here five letters, as
/// `close`); a transfer coding of seven letters other than `chunked` leaves the body unframed,
/// so it runs until the connection closes (RFC 9112 §6.3).
#[test]
fn only_the_close_and_keep_alive_tokens_decide_a_response_s_connection() {
    let get = || c(b"GET / HTTP/1.1\r\n\r\n");
    for (head, closes) in [
        (
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        ("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", true),
        (
            "HTTP/1.1 200 OK\r\nConnection: other\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n",
            true,
        ),
    ] {
        let t = check(&vec![get(), s(head.as_bytes())], &[Started(1), Ended(1)]);
        assert_eq!(t.will_close(), closes, "{head:?}");
    }
    let t = check(
        &vec![
            get(),
            s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: deflate\r\n\r\n1\r\na\r\n0\r\n\r\n"),
        ],
        &[Started(1)],
    );
    assert!(t.tunnel() && t.will_close(), "a body until close");
    let t = check(
        &vec![
            get(),
            s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
        ],
        &[Started(1), Ended(1)],
    );
    assert!(!t.will_close());
}

/// Only heads, chunk-size lines and trailers count against MAX_HEAD: a body or a chunk's data
/// larger than it, fed as real bytes a piece at a time, is followed to its end.
#[test]
fn bodies_larger_than_max_head_are_not_heads() {
    let piece = vec![b'x'; 1 << 20];
    let n = MAX_HEAD / piece.len() + 2;
    let len = n * piece.len();
    for chunked in [false, true] {
        let mut t = Tracker::new();
        let mut ev = Vec::new();
        let mut on = |e: Event, _: &Tracker| ev.push(e);
        let post = if chunked {
            format!("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{len:x}\r\n")
        } else {
            format!("POST / HTTP/1.1\r\nContent-Length: {len}\r\n\r\n")
        };
        t.client(post.as_bytes(), &mut on);
        for _ in 0..n {
            t.client(&piece, &mut on);
        }
        if chunked {
            t.client(b"\r\n0\r\n\r\n", &mut on);
        }
        t.server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", &mut on);
        assert_eq!(ev, [Started(1), Ended(1)], "chunked: {chunked}");
        assert_eq!(t.in_flight(), 0);
    }
}

/// A hint cut at HINT_LEN keeps its first HINT_LEN bytes however the head is split (here inside
/// the path and inside the user agent, each piece running past the limit), and `truncated` says
/// which was cut: the user agent alone, the path alone, neither.
#[test]
fn hints_split_past_hint_len_keep_their_start_and_say_which_was_cut() {
    let long_path = format!("/{}", "p".repeat(HINT_LEN + 20));
    let long_ua = "u".repeat(HINT_LEN + 20);
    let head = |path: &str, ua: &str| format!("GET {path} HTTP/1.1\r\nUser-Agent: {ua}\r\n\r\n");
    for (path, ua, truncated) in [
        (long_path.as_str(), "curl/8", true),
        ("/short", long_ua.as_str(), true),
        ("/short", "curl/8", false),
    ] {
        let req = head(path, ua);
        let script = vec![c(req.as_bytes())];
        let path_at = req.find(path).unwrap();
        let ua_at = req.find(ua).unwrap();
        for at in [0, path_at + 10, ua_at + 10] {
            let (t, out) = play_split(&script, at);
            assert_eq!(events(&out), [Started(1)]);
            let h = t.hints();
            let want_path = &path.as_bytes()[..path.len().min(HINT_LEN)];
            let want_ua = &ua.as_bytes()[..ua.len().min(HINT_LEN)];
            assert_eq!(h.path, Some(want_path), "split at {at}");
            assert_eq!(h.user_agent, Some(want_ua), "split at {at}");
            assert_eq!(h.truncated, truncated, "{path} {ua}, split at {at}");
        }
    }
}

/// A response is SSE when its Content-Type's media type, before any parameter, is
/// `text/event-stream` in any case, with optional whitespace around: decided the same whether
/// the line comes whole or split at any byte (the byte-by-byte path). A longer or shorter type,
/// another header, or a request's Content-Type is not.
#[test]
fn sse_is_told_by_the_media_type_whole_or_split_at_any_byte() {
    let get = b"GET /events HTTP/1.1\r\nhost: x\r\n\r\n".as_slice();
    let plain_get = b"GET /events HTTP/1.1\r\ncontent-type: text/event-stream\r\n\r\n".as_slice();
    for (request, line, sse) in [
        (get, "Content-Type: text/event-stream\r\n", true),
        (get, "content-type:text/event-stream\r\n", true),
        (get, "Content-Type: \t Text/Event-STREAM \t\r\n", true),
        (
            get,
            "Content-Type: text/event-stream; charset=utf-8\r\n",
            true,
        ),
        (get, "Content-Type: text/event-stream,x\r\n", true),
        (get, "Content-Type: text/event-stream x\r\n", true),
        (get, "Content-Type: text/ event-stream\r\n", false),
        (get, "Content-Type: text/event-stream\n", true),
        (get, "Content-Type: text/event-streams\r\n", false),
        (get, "Content-Type: text/event-strea\r\n", false),
        (get, "Content-Type: text/event-strea;\r\n", false),
        (get, "Content-Type: xtext/event-stream\r\n", false),
        (get, "Content-Type: text/html\r\n", false),
        (get, "Content-Type:\r\n", false),
        (get, "Content-Type: ;text/event-stream\r\n", false),
        (get, "Content-Types: text/event-stream\r\n", false),
        (get, "X-Content-Type: text/event-stream\r\n", false),
        (plain_get, "Content-Type: text/html\r\n", false),
    ] {
        let head = format!("HTTP/1.1 200 OK\r\n{line}Transfer-Encoding: chunked\r\n\r\n");
        let head = head.as_bytes();
        let from = head.len() - line.len() - "Transfer-Encoding: chunked\r\n\r\n".len();
        for at in std::iter::once(0).chain(from..from + line.len()) {
            let mut t = Tracker::new();
            t.client(request, &mut |_, _| {});
            let (a, b) = head.split_at(at);
            t.server(a, &mut |_, _| {});
            t.server(b, &mut |_, _| {});
            assert_eq!(t.sse_in_flight(), sse, "{line:?} split at {at}");
            assert_eq!(t.in_flight(), 1, "{line:?} split at {at}");
            // The head went on to its Transfer-Encoding: the last chunk ends the response.
            t.server(b"0\r\n\r\n", &mut |_, _| {});
            assert_eq!(t.in_flight(), 0, "{line:?} split at {at}");
        }
        let mut t = Tracker::new();
        t.client(request, &mut |_, _| {});
        for byte in head {
            t.server(std::slice::from_ref(byte), &mut |_, _| {});
        }
        assert_eq!(t.sse_in_flight(), sse, "{line:?} byte by byte");
        t.server(b"0\r\n\r\n", &mut |_, _| {});
        assert_eq!(t.in_flight(), 0, "{line:?} byte by byte");
    }
}

/// MAX_HEAD bounds a head's bytes before its last LF, exactly: a head of MAX_HEAD bytes then a
/// bare LF, or of MAX_HEAD - 1 bytes then CRLF, is followed; one byte more is not. The same
/// whole (lines read at once) and split inside its last header line (the byte-by-byte parse).
#[test]
pub(super) fn max_head_is_exact_whole_or_split() {
    let head = |before_end: usize, end: &[u8]| {
        let start = b"GET / HTTP/1.1\r\nx-fill: ".as_slice();
        let mut h = start.to_vec();
        h.resize(before_end - 2, b'f');
        h.extend_from_slice(b"\r\n");
        h.extend_from_slice(end);
        assert_eq!(h.len(), before_end + end.len());
        h
    };
    for (before_end, end, followed) in [
        (MAX_HEAD, &b"\n"[..], true),
        (MAX_HEAD + 1, &b"\n"[..], false),
        (MAX_HEAD - 1, &b"\r\n"[..], true),
        (MAX_HEAD, &b"\r\n"[..], false),
    ] {
        let h = head(before_end, end);
        let want = if followed {
            vec![Started(1)]
        } else {
            vec![Lost]
        };
        let (_, out) = play(&vec![c(&h)]);
        assert_eq!(events(&out), want, "{before_end} + {end:?}, whole");
        for split in [h.len() - end.len() - 5, h.len() - 1] {
            let mut t = Tracker::new();
            let mut evs = Vec::new();
            t.client(&h[..split], &mut |e, _| evs.push(e));
            t.client(&h[split..], &mut |e, _| evs.push(e));
            assert_eq!(evs, want, "{before_end} + {end:?}, split at {split}");
        }
    }
}

/// Start lines and header values the tracker refuses (Envoy answers 400, so the connection's
/// framing is not followed further) and near misses it accepts.
#[test]
pub(super) fn start_line_and_value_rules() {
    let lost = |req: &[u8]| {
        let (t, out) = play(&vec![c(req)]);
        let (_, bytewise) = play_bytewise(&vec![c(req)]);
        assert_eq!(
            events(&bytewise),
            events(&out),
            "{:?}",
            String::from_utf8_lossy(req)
        );
        (events(&out) == [Lost], t)
    };
    for bad in [
        &b" / HTTP/1.1\r\n\r\n"[..],
        b"G\x01T / HTTP/1.1\r\n\r\n",
        b"G\x7fT / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n\rx\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
    ] {
        assert!(lost(bad).0, "{:?} is refused", String::from_utf8_lossy(bad));
    }
    for (good, closes) in [
        (&b"GET / HTTP/1.1\r\nConnection: close x\r\n\r\n"[..], true),
        (b"GET / HTTP/1.1\r\nConnection: te  ,  close\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nConnection: x close\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nConnection: keep-alive x\r\n\r\n", false),
        (b"G~T / HTTP/1.9\r\n\r\n", false),
    ] {
        let (is_lost, t) = lost(good);
        assert!(!is_lost, "{:?} is followed", String::from_utf8_lossy(good));
        assert_eq!(t.in_flight(), 1);
        assert_eq!(
            t.will_close(),
            closes,
            "{:?}",
            String::from_utf8_lossy(good)
        );
    }
}

/// Methods are told by their whole name, whole or byte by byte: OPTIONS (seven letters, as
/// CONNECT) and POST (four, as HEAD) get their response's body read and open no tunnel.
#[test]
pub(super) fn methods_of_the_same_length_as_connect_and_head_are_not_them() {
    let script = vec![
        c(b"OPTIONS * HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
    ];
    let t = check(
        &script,
        &[Started(1), Started(2), Ended(1), Ended(2), Started(3)],
    );
    assert!(!t.tunnel());
    assert_eq!(t.in_flight(), 1);
}

/// The byte-by-byte parse (a head's lines split across reads) keeps the whole-line rules: a
/// status line ending right after its code with a bare LF, an HTTP/1.0 request closing, the
/// version followed by anything but the line's end refused, and a header name of a known
/// name's length and first letter not taken for it.
#[test]
pub(super) fn the_byte_by_byte_parse_keeps_the_start_line_and_name_rules() {
    let t = check(
        &vec![
            c(b"GET / HTTP/1.1\r\n\r\n"),
            s(b"HTTP/1.1 200\nContent-Length: 2\n\nok"),
        ],
        &[Started(1), Ended(1)],
    );
    assert!(!t.will_close());
    let t = check(
        &vec![c(
            b"GET / HTTP/1.0\r\nCookie-abc: close\r\nTransfer-xyz: x\r\n\r\n",
        )],
        &[Started(1)],
    );
    assert!(t.will_close(), "HTTP/1.0 without keep-alive");
    let script = vec![c(
        b"GET / HTTP/1.1\r\nCookie-abc: close\r\nTrailer-xyz-abcde: chunked\r\n\r\n",
    )];
    let t = check(&script, &[Started(1)]);
    assert!(!t.will_close(), "Cookie-abc is not Connection");
    let (t, _) = play_bytewise(&script);
    assert!(
        !t.will_close(),
        "Cookie-abc is not Connection, byte by byte"
    );
    for bad in [
        &b"GET / HTTP/1.1x\r\n\r\n"[..],
        b"GET / HTTP/1.1 200\r\n\r\n",
        b"GET / HTTP/1.1 \r\n\r\n",
    ] {
        let (_, out) = play_bytewise(&vec![c(bad)]);
        assert_eq!(events(&out), [Lost], "{:?}", String::from_utf8_lossy(bad));
        let (_, out) = play(&vec![c(bad)]);
        assert_eq!(
            events(&out),
            [Lost],
            "{:?} whole",
            String::from_utf8_lossy(bad)
        );
    }
    for bad in [&b"HTTP/1.1X200 OK\r\n\r\n"[..], b"HTTP/1.1\n\n"] {
        let script = vec![c(b"GET / HTTP/1.1\r\n\r\n"), s(bad)];
        let (_, out) = play_bytewise(&script);
        assert_eq!(
            events(&out),
            [Started(1), Lost],
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

/// A chunked response's trailer section counts against MAX_HEAD as a whole (not line by line),
/// and a last chunk or trailer section may end with a bare LF.
#[test]
pub(super) fn trailers_are_bounded_as_one_and_may_end_in_a_bare_lf() {
    let get = || c(b"GET / HTTP/1.1\r\n\r\n");
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".as_slice();
    for end in [&b"1\na\n0\n\n"[..], b"1\r\na\r\n0\r\nx-t: 1\n\n"] {
        check(
            &vec![get(), s(&[head, end].concat())],
            &[Started(1), Ended(1)],
        );
    }
    let line = format!("x-trailer: {}\r\n", "t".repeat(1000));
    let mut body = head.to_vec();
    body.extend_from_slice(b"0\r\n");
    let lines = MAX_HEAD / line.len() + 1;
    for _ in 0..lines {
        body.extend_from_slice(line.as_bytes());
    }
    body.extend_from_slice(b"\r\n");
    let (_, out) = play(&vec![get(), s(&body)]);
    assert_eq!(events(&out), [Started(1), Lost], "trailers beyond MAX_HEAD");
    let fits = &body[..body.len() - 2 - line.len() * 2];
    let (_, out) = play(&vec![get(), s(&[fits, b"\r\n"].concat())]);
    assert_eq!(
        events(&out),
        [Started(1), Ended(1)],
        "trailers within MAX_HEAD"
    );
}

/// An SSE response's chunk data read behind its size line in the same write is fed to its event
/// follower from the data's first byte: handed over at the next chunk start, the follower knows
/// the body stopped inside an event.
#[test]
pub(super) fn sse_chunk_data_behind_its_size_line_is_followed() {
    let data = b"data: one\n\ndata: tw".as_slice();
    let mut write =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    write.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    write.extend_from_slice(data);
    write.extend_from_slice(b"\r\n");
    let mut t = Tracker::new();
    t.client(b"GET /events HTTP/1.1\r\n\r\n", &mut |_, _| {});
    t.server(&write, &mut |_, _| {});
    assert!(t.sse_hand_over());
    let mut events = sse::Events::new();
    events.feed(data);
    assert!(!events.at_boundary());
    let want = sse::Framing::Chunked(sse::Chunked::at_chunk_start(events));
    assert_eq!(t.sse_ending().map(|e| e.body), Some(want));
}
