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
