use super::*;
use Event::{Ended, Lost, Started};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum D {
    C,
    S,
}
use D::{C, S};

type Script = Vec<(D, Vec<u8>)>;

/// What an event looked like to the callback: the event, the hints at that moment (path,
/// user agent, truncated) and in_flight.
type Rec = (Event, Option<Vec<u8>>, Option<Vec<u8>>, bool, u32);

fn rec(e: Event, t: &Tracker) -> Rec {
    let h = t.hints();
    (
        e,
        h.path.map(<[u8]>::to_vec),
        h.user_agent.map(<[u8]>::to_vec),
        h.truncated,
        t.in_flight(),
    )
}

fn feed(t: &mut Tracker, d: D, bytes: &[u8], out: &mut Vec<Rec>) {
    let mut on = |e: Event, t: &Tracker| out.push(rec(e, t));
    match d {
        C => t.client(bytes, &mut on),
        S => t.server(bytes, &mut on),
    }
}

/// Feeds each segment of the script whole, in order.
fn play(script: &Script) -> (Tracker, Vec<Rec>) {
    let mut t = Tracker::new();
    let mut out = Vec::new();
    for (d, b) in script {
        feed(&mut t, *d, b, &mut out);
    }
    (t, out)
}

/// Feeds the script with the segment holding global byte `at` split there.
fn play_split(script: &Script, at: usize) -> (Tracker, Vec<Rec>) {
    let mut t = Tracker::new();
    let mut out = Vec::new();
    let mut pos = 0;
    for (d, b) in script {
        if at > pos && at < pos + b.len() {
            let (x, y) = b.split_at(at - pos);
            feed(&mut t, *d, x, &mut out);
            feed(&mut t, *d, y, &mut out);
        } else {
            feed(&mut t, *d, b, &mut out);
        }
        pos += b.len();
    }
    (t, out)
}

/// Feeds the script one byte per call (and an empty call between).
fn play_bytewise(script: &Script) -> (Tracker, Vec<Rec>) {
    let mut t = Tracker::new();
    let mut out = Vec::new();
    for (d, b) in script {
        for byte in b {
            feed(&mut t, *d, std::slice::from_ref(byte), &mut out);
            feed(&mut t, *d, &[], &mut out);
        }
    }
    (t, out)
}

fn events(out: &[Rec]) -> Vec<Event> {
    out.iter().map(|r| r.0).collect()
}

/// Plays the script whole and byte by byte: the events must be `want` both ways.
fn check(script: &Script, want: &[Event]) -> Tracker {
    let (t, out) = play(script);
    assert_eq!(events(&out), want, "whole segments");
    let (t1, out1) = play_bytewise(script);
    assert_eq!(out1, out, "byte by byte");
    assert_eq!(t1.in_flight(), t.in_flight());
    assert_eq!(t1.protocol(), t.protocol());
    let (started, ended) = t.totals();
    let s = want.iter().filter(|e| matches!(e, Started(_))).count() as u64;
    let e = want.iter().filter(|e| matches!(e, Ended(_))).count() as u64;
    assert_eq!((started, ended), (s, e));
    t
}

fn c(b: &[u8]) -> (D, Vec<u8>) {
    (C, b.to_vec())
}
fn s(b: &[u8]) -> (D, Vec<u8>) {
    (S, b.to_vec())
}

// --- HTTP/1.1 exchanges -----------------------------------------------------------------

fn keep_alive_get() -> Script {
    vec![
        c(b"GET /healthz HTTP/1.1\r\nHost: a\r\nUser-Agent:  kube-probe/1.29 \r\nCookie: x\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\nhello"),
        c(b"GET /two HTTP/1.1\r\nhost: a\r\n\r\n"),
        s(b"HTTP/1.1 204 No Content\r\n\r\n"),
    ]
}

#[test]
fn unread_payload_is_fed_by_length() {
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
    // HTTP/2: a DATA frame's payload, not a GOAWAY's last-stream-id.
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
    assert_eq!(t.server_unread_ahead(), 0);
    assert_eq!(ev, [Event::Started(1), Event::Ended(1)]);
}

#[test]
fn keep_alive_get_counts_two_requests_and_keeps_hints() {
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
fn hints_are_cut_at_hint_len_and_say_so() {
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

fn post_content_length() -> Script {
    vec![
        c(b"POST /p HTTP/1.1\r\ncontent-LENGTH: 11\r\nContent-Length: 11, 11\r\n\r\nhello\r\n\r\nxx"),
        s(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"),
    ]
}

#[test]
fn post_with_content_length_skips_the_body() {
    check(
        &post_content_length(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
}

fn chunked_with_trailers() -> Script {
    vec![
        c(b"POST /c HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n5;ext=1\r\nhello\r\n10 ; a=\"b\"\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\ntrailer: x\r\n\r\n"),
        c(b"GET /n HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
fn chunked_bodies_with_extensions_and_trailers() {
    check(
        &chunked_with_trailers(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
}

fn head_with_length() -> Script {
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
fn head_responses_have_no_body_whatever_they_say() {
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

fn continue_100() -> Script {
    vec![
        c(b"PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"),
        s(b"HTTP/1.1 100 Continue\r\n\r\n"),
        c(b"data"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
fn interim_100_continue_is_skipped() {
    check(&continue_100(), &[Started(1), Ended(1)]);
}

fn early_hints_103() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
    ]
}

#[test]
fn interim_103_is_skipped() {
    check(&early_hints_103(), &[Started(1), Ended(1)]);
}

fn websocket_101() -> Script {
    vec![
        c(b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUpgrade-Insecure-Requests: 1\r\n\r\n"),
        c(b"\x81\x05hello"),
        s(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        s(b"\x81\x02hi"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
    ]
}

#[test]
fn upgrade_101_is_a_tunnel_until_close() {
    let t = check(&websocket_101(), &[Started(1)]);
    assert!(t.tunnel());
    assert_eq!(t.in_flight(), 1);
    assert_eq!(t.protocol(), Protocol::Http1);
}

fn connect_200() -> Script {
    vec![
        c(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\n\r\n"),
        c(b"\x16\x03\x01 tls"),
        s(b"HTTP/1.1 junk"),
    ]
}

#[test]
fn connect_2xx_is_a_tunnel() {
    let t = check(&connect_200(), &[Started(1)]);
    assert!(t.tunnel());
}

fn connect_403() -> Script {
    vec![
        c(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
fn connect_refused_goes_on_with_the_next_request() {
    let t = check(
        &connect_403(),
        &[Started(1), Ended(1), Started(2), Ended(2)],
    );
    assert!(!t.tunnel());
}

fn upgrade_refused_after_client_bytes() -> Script {
    vec![
        c(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"),
        s(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
fn bytes_sent_during_a_refused_upgrade_are_unknown() {
    let t = check(&upgrade_refused_after_client_bytes(), &[Started(1), Lost]);
    assert_eq!(t.protocol(), Protocol::Unknown);
    assert_eq!(t.in_flight(), 1, "in_flight keeps its last value");
}

fn pipelined_three() -> Script {
    vec![
        c(b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n\r\nGET /3 HTTP/1.1\r\nIf-None-Match: x\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
        s(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"),
    ]
}

#[test]
fn pipelined_requests_are_answered_in_order() {
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

fn bad_request_400() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: aaaa"),
        s(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request"),
        c(b"aaaaa\r\n\r\n"),
    ]
}

#[test]
fn a_response_before_the_head_is_complete_answers_the_partial_request() {
    let (t, _) = play(&bad_request_400()[..1].to_vec());
    assert!(t.partial());
    assert_eq!(t.in_flight(), 0);
    let t = check(&bad_request_400(), &[Started(1), Ended(1)]);
    assert!(t.will_close());
    assert!(!t.partial());
    assert_eq!(t.hints(), Hints::default());
}

fn close_on_request() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

fn close_on_response() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\nconnection: keep-alive\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive, CLOSE\r\n\r\n"),
    ]
}

#[test]
fn connection_close_on_either_side_marks_will_close() {
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

fn until_close() -> Script {
    vec![
        c(b"GET / HTTP/1.1\r\n\r\n"),
        s(b"HTTP/1.1 200 OK\r\n\r\nstreaming until close"),
        c(b"GET / HTTP/1.1\r\n\r\n"),
    ]
}

#[test]
fn a_body_without_length_runs_until_close() {
    let t = check(&until_close(), &[Started(1)]);
    assert!(t.tunnel() && t.will_close());
    assert_eq!(t.in_flight(), 1);
}

fn bare_lf() -> Script {
    vec![
        c(b"\r\n\nPOST / HTTP/1.1\nContent-Length: 2\n\nokGET / HTTP/1.1\n\n"),
        s(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
}

#[test]
fn bare_lf_and_leading_empty_lines_are_accepted() {
    check(&bare_lf(), &[Started(1), Started(2), Ended(1), Ended(2)]);
}

/// Each HTTP/1.1 thing the tracker cannot follow, and the events before it gives up.
fn h1_unknowns() -> Vec<(&'static str, Script, Vec<Event>)> {
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
fn each_http1_unknown_trigger_loses_once() {
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
fn too_long_lines_and_heads_are_unknown() {
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

/// Envoy takes heads up to 8 MiB when configured to (`max_request_headers_kb: 8192`): a
/// 4 MiB cookie header, whole and in 16 KiB reads, is followed.
#[test]
fn heads_as_large_as_envoy_can_take_are_followed() {
    let mut head = b"GET / HTTP/1.1\r\ncookie: ".to_vec();
    head.extend(std::iter::repeat_n(b'c', 4 << 20));
    head.extend_from_slice(b"\r\n\r\n");
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
fn more_than_max_pipelined_requests_are_unknown() {
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

#[test]
fn server_bytes_before_the_protocol_is_decided_are_unknown() {
    let mut t = Tracker::new();
    let mut evs = Vec::new();
    t.client(b"PRI * HT", &mut |e, _| evs.push(e));
    assert_eq!(t.protocol(), Protocol::Undecided);
    t.server(b"x", &mut |e, _| evs.push(e));
    assert_eq!(evs, [Lost]);
    assert_eq!(t.protocol(), Protocol::Unknown);
}

#[test]
fn a_prefix_of_the_preface_that_turns_out_http1_is_replayed() {
    let mut t = Tracker::new();
    let mut evs = Vec::new();
    t.client(b"P", &mut |e, _| evs.push(e));
    assert_eq!(t.protocol(), Protocol::Undecided);
    t.client(
        b"OST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nz",
        &mut |e, _| evs.push(e),
    );
    assert_eq!(evs, [Started(1)]);
    assert_eq!(t.hints().path, Some(&b"/x"[..]));
    let (_, out) = play(&vec![c(b"PRI / HTTP/1.1\r\n\r\n")]);
    assert_eq!(events(&out), [Started(1)]);
}

// --- HTTP/2 -----------------------------------------------------------------------------

/// A frame with `len` payload bytes (junk: payloads are never read, except GOAWAY's).
fn fr(ty: u8, flags: u8, id: u32, len: usize) -> Vec<u8> {
    let mut f = (len as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend((0..len).map(|i| (i * 7 + 0x80) as u8));
    f
}

fn goaway(last: u32) -> Vec<u8> {
    let mut f = fr(GOAWAY, 0, 0, 0);
    f[2] = 8;
    f.extend_from_slice(&last.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f
}

const ES: u8 = END_STREAM;
const EH: u8 = END_HEADERS;

fn cf(ty: u8, flags: u8, id: u32, len: usize) -> (D, Vec<u8>) {
    (C, fr(ty, flags, id, len))
}
fn sf(ty: u8, flags: u8, id: u32, len: usize) -> (D, Vec<u8>) {
    (S, fr(ty, flags, id, len))
}

/// The client preface with its SETTINGS, and the server's SETTINGS and ack.
fn h2_open() -> Script {
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(fr(SETTINGS, 0, 0, 18));
    let mut srv = fr(SETTINGS, 0, 0, 12);
    srv.extend(fr(SETTINGS, 1, 0, 0));
    srv.extend(fr(8, 0, 0, 4)); // WINDOW_UPDATE
    vec![(C, pre), (S, srv), cf(SETTINGS, 1, 0, 0), cf(6, 0, 0, 8)]
}

fn h2(rest: Script) -> Script {
    let mut s = h2_open();
    s.extend(rest);
    s
}

#[test]
fn h2_preface_and_settings_start_no_stream() {
    let t = check(&h2_open(), &[]);
    assert_eq!(t.protocol(), Protocol::Http2);
    assert_eq!(t.in_flight(), 0);
    assert!(!t.partial());
}

fn h2_get() -> Script {
    h2(vec![
        cf(HEADERS, ES | EH | 0x20, 1, 20),
        sf(HEADERS, EH, 1, 10),
        sf(DATA, 0, 1, 100),
        sf(DATA, ES | 0x8, 1, 10),
    ])
}

#[test]
fn h2_get_with_end_stream_on_headers() {
    check(&h2_get(), &[Started(1), Ended(1)]);
}

fn h2_post() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(DATA, 0, 1, 100),
        sf(HEADERS, EH, 1, 10),
        cf(DATA, ES, 1, 0),
        sf(DATA, ES, 1, 3),
        // The server answers before the client finishes: ended by the client's END_STREAM.
        cf(HEADERS, EH, 3, 5),
        sf(HEADERS, EH | ES, 3, 10),
        cf(DATA, ES, 3, 4),
    ])
}

#[test]
fn h2_post_ends_when_both_halves_closed() {
    check(&h2_post(), &[Started(1), Ended(1), Started(3), Ended(3)]);
}

fn h2_continuation() -> Script {
    h2(vec![
        cf(HEADERS, ES, 1, 20),
        sf(8, 0, 0, 4),
        cf(CONTINUATION, 0, 1, 20),
        cf(CONTINUATION, EH, 1, 5),
        // END_STREAM is a HEADERS flag; it takes effect with the block's end.
        sf(HEADERS, ES, 1, 10),
        sf(CONTINUATION, EH, 1, 10),
    ])
}

#[test]
fn h2_continuation_completes_the_header_block() {
    let script = h2_continuation();
    let n = h2_open().len();
    let (t, out) = play(&script[..n + 1].to_vec());
    assert!(t.partial());
    assert!(out.is_empty());
    check(&script, &[Started(1), Ended(1)]);
}

fn h2_resets() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(RST_STREAM, 0, 1, 4),
        sf(HEADERS, EH, 1, 10), // in flight before the server saw the RST: ignored
        cf(HEADERS, EH | ES, 3, 20),
        sf(RST_STREAM, 0, 3, 4),
        cf(DATA, ES, 3, 4), // ignored
        cf(RST_STREAM, 0, 3, 4),
    ])
}

#[test]
fn h2_rst_from_either_side_ends_the_stream() {
    let t = check(&h2_resets(), &[Started(1), Ended(1), Started(3), Ended(3)]);
    assert_eq!(t.in_flight(), 0);
}

/// A client header block on a stream closed here opens no request, and the tracker goes on:
/// trailers the client sent before it saw the server's RST_STREAM (legal, RFC 9113 §5.1),
/// with a CONTINUATION; a block on a stream that ended, or on an id below the highest used
/// (errors Envoy answers itself: no request either).
#[test]
fn h2_header_blocks_on_closed_streams_open_nothing_and_lose_nothing() {
    let t = check(
        &h2(vec![
            cf(HEADERS, EH, 1, 20),
            cf(DATA, 0, 1, 100),
            sf(RST_STREAM, 0, 1, 4),
            cf(DATA, 0, 1, 100),
            cf(HEADERS, ES, 1, 8),
            cf(CONTINUATION, EH, 1, 4),
            cf(HEADERS, EH | ES, 3, 3),
            sf(HEADERS, EH | ES, 3, 3),
            cf(HEADERS, EH | ES, 3, 3),
            cf(HEADERS, EH, 7, 3),
            cf(HEADERS, EH | ES, 5, 3),
            cf(HEADERS, EH | ES, 9, 3),
        ]),
        &[
            Started(1),
            Ended(1),
            Started(3),
            Ended(3),
            Started(7),
            Started(9),
        ],
    );
    assert_eq!(t.protocol(), Protocol::Http2);
    assert_eq!(t.in_flight(), 2);
}

fn h2_trailers() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(DATA, 0, 1, 10),
        sf(HEADERS, EH, 1, 10),
        cf(HEADERS, EH | ES, 1, 8),
        sf(DATA, 0, 1, 10),
        sf(HEADERS, 0, 1, 8),
        sf(CONTINUATION, EH, 1, 8),
        sf(HEADERS, EH | ES, 1, 8),
    ])
}

#[test]
fn h2_trailers_close_a_half() {
    check(&h2_trailers(), &[Started(1), Ended(1)]);
}

fn h2_goaway() -> Script {
    h2(vec![
        cf(HEADERS, EH | ES, 1, 20),
        cf(HEADERS, EH | ES, 3, 20),
        cf(HEADERS, EH, 5, 20),
        (S, goaway(1)),
        cf(HEADERS, EH | ES, 7, 20),
        cf(PING_T, 0, 0, 8),
        cf(DATA, ES, 5, 0),
        cf(HEADERS, EH, 3, 2), // trailers on a cut stream: ignored
        (S, goaway(3)),        // a larger one changes nothing
        sf(HEADERS, EH | ES, 1, 10),
    ])
}
const PING_T: u8 = 6;

/// A server GOAWAY ends no stream: each one counts until it ends or the connection
/// closes (an overcount until the close, never an undercount).
#[test]
fn h2_server_goaway_ends_no_stream() {
    let t = check(
        &h2_goaway(),
        &[Started(1), Started(3), Started(5), Started(7), Ended(1)],
    );
    assert!(t.will_close());
    assert_eq!(t.in_flight(), 3);
}

fn h2_interleaved() -> Script {
    h2(vec![
        cf(HEADERS, EH, 1, 20),
        cf(HEADERS, EH, 3, 20),
        cf(DATA, 0, 1, 5),
        cf(DATA, 0, 3, 5),
        sf(HEADERS, EH, 3, 10),
        cf(DATA, ES, 3, 5),
        cf(HEADERS, EH | ES, 5, 20),
        sf(HEADERS, EH, 1, 10),
        sf(HEADERS, EH | ES, 5, 3),
        sf(DATA, ES, 3, 7),
        cf(DATA, ES, 1, 5),
        sf(DATA, 0, 1, 7),
        sf(DATA, ES, 1, 7),
    ])
}

#[test]
fn h2_interleaved_streams() {
    let t = check(
        &h2_interleaved(),
        &[
            Started(1),
            Started(3),
            Started(5),
            Ended(5),
            Ended(3),
            Ended(1),
        ],
    );
    assert_eq!(t.in_flight(), 0);
}

fn h2_unknowns() -> Vec<(&'static str, Script, Vec<Event>)> {
    let open = h2_open();
    let with = |rest: Script| {
        let mut s = open.clone();
        s.extend(rest);
        s
    };
    let mut pre = H2_PREFACE.to_vec();
    pre.extend(fr(SETTINGS, 0, 0, 0));
    vec![
        (
            "server first frame not SETTINGS",
            vec![(C, pre.clone()), sf(8, 0, 0, 4)],
            vec![Lost],
        ),
        (
            "HEADERS on 0",
            with(vec![cf(HEADERS, EH, 0, 3)]),
            vec![Lost],
        ),
        ("DATA on 0", with(vec![sf(DATA, 0, 0, 3)]), vec![Lost]),
        (
            "CONTINUATION without block",
            with(vec![cf(CONTINUATION, EH, 1, 3)]),
            vec![Lost],
        ),
        (
            "other frame in block",
            with(vec![cf(HEADERS, 0, 1, 3), cf(DATA, 0, 1, 3)]),
            vec![Lost],
        ),
        (
            "CONTINUATION of another stream",
            with(vec![cf(HEADERS, 0, 1, 3), cf(CONTINUATION, EH, 3, 3)]),
            vec![Lost],
        ),
        (
            "server frame in its block",
            with(vec![
                cf(HEADERS, EH, 1, 3),
                sf(HEADERS, 0, 1, 3),
                sf(8, 0, 0, 4),
            ]),
            vec![Started(1), Lost],
        ),
        ("even id", with(vec![cf(HEADERS, EH, 2, 3)]), vec![Lost]),
        ("short GOAWAY", with(vec![sf(GOAWAY, 0, 0, 4)]), vec![Lost]),
    ]
}

#[test]
fn each_http2_unknown_trigger_loses_once() {
    for (name, script, want) in h2_unknowns() {
        let (t, out) = play(&script);
        assert_eq!(events(&out), want, "{name}");
        assert_eq!(t.protocol(), Protocol::Unknown, "{name}");
    }
}

#[test]
fn more_than_max_streams_is_unknown() {
    let mut script = h2_open();
    for k in 0..=MAX_STREAMS as u32 {
        script.push(cf(HEADERS, EH, 2 * k + 1, 1));
    }
    let (t, out) = play(&script);
    assert_eq!(out.len(), MAX_STREAMS + 1);
    assert_eq!(out.last().unwrap().0, Lost);
    assert_eq!(t.in_flight(), MAX_STREAMS as u32);
}

#[test]
fn a_large_frame_is_skipped_by_length() {
    let mut script = h2(vec![cf(HEADERS, EH, 1, 3), cf(DATA, ES, 1, (1 << 24) - 1)]);
    script.push(sf(HEADERS, EH | ES, 1, 3));
    check(&script, &[Started(1), Ended(1)]);
}

/// Every exchange above, with every segment split at every byte: the same events, hints
/// and in_flight at each event, and the same state at the end.
#[test]
fn every_exchange_split_at_every_byte_gives_the_same_events() {
    let mut all: Vec<(&str, Script)> = vec![
        ("keep_alive_get", keep_alive_get()),
        ("post_content_length", post_content_length()),
        ("chunked_with_trailers", chunked_with_trailers()),
        ("head_with_length", head_with_length()),
        ("continue_100", continue_100()),
        ("early_hints_103", early_hints_103()),
        ("websocket_101", websocket_101()),
        ("connect_200", connect_200()),
        ("connect_403", connect_403()),
        ("upgrade_refused", upgrade_refused_after_client_bytes()),
        ("pipelined_three", pipelined_three()),
        ("bad_request_400", bad_request_400()),
        ("close_on_request", close_on_request()),
        ("close_on_response", close_on_response()),
        ("until_close", until_close()),
        ("bare_lf", bare_lf()),
        ("h2_open", h2_open()),
        ("h2_get", h2_get()),
        ("h2_post", h2_post()),
        ("h2_continuation", h2_continuation()),
        ("h2_resets", h2_resets()),
        ("h2_trailers", h2_trailers()),
        ("h2_goaway", h2_goaway()),
        ("h2_interleaved", h2_interleaved()),
    ];
    all.extend(h1_unknowns().into_iter().map(|(n, s, _)| (n, s)));
    all.extend(h2_unknowns().into_iter().map(|(n, s, _)| (n, s)));
    for (name, script) in all {
        let (t, want) = play(&script);
        let total: usize = script.iter().map(|(_, b)| b.len()).sum();
        for at in 1..total {
            let (t2, got) = play_split(&script, at);
            assert_eq!(got, want, "{name} split at {at}");
            assert_eq!(
                (
                    t2.in_flight(),
                    t2.protocol(),
                    t2.partial(),
                    t2.tunnel(),
                    t2.will_close()
                ),
                (
                    t.in_flight(),
                    t.protocol(),
                    t.partial(),
                    t.tunnel(),
                    t.will_close()
                ),
                "{name} split at {at}"
            );
        }
        let (_, got) = play_bytewise(&script);
        assert_eq!(got, want, "{name} byte by byte");
    }
}

#[test]
fn memory_per_connection_stays_small() {
    eprintln!("size_of::<Tracker>() = {}", std::mem::size_of::<Tracker>());
    assert!(
        // 264 before the last request ends were kept (16 bytes: bytes Envoy hands back are
        // placed by them, #44 item 5).
        std::mem::size_of::<Tracker>() <= 280,
        "{}",
        std::mem::size_of::<Tracker>()
    );
    assert_eq!(std::mem::size_of::<Stream>(), 8);
}

#[test]
fn lf_from_finds_the_first_lf_at_or_after_its_start_at_every_length_and_offset() {
    // Every length up to past three blocks, every start, with no LF, one LF anywhere, two, and
    // all: the blocks, the words and the bytes after them answer as `position` from the start,
    // LFs before it not seen. Other bytes are 0x0B (LF ^ 1) and 0x8A (LF | 0x80): the ones a
    // word trick gets wrong.
    let want = |s: &[u8], from: usize| s[from..].iter().position(|&c| c == LF).map(|p| from + p);
    for len in 0..56 {
        for filler in [b'a', 0x0b, 0x8a] {
            let plain = vec![filler; len];
            for from in 0..=len {
                assert_eq!(http1::lf_from(&plain, from), None, "len {len} from {from}");
            }
            for at in 0..len {
                for second in at..len {
                    let mut s = plain.clone();
                    s[at] = LF;
                    s[second] = LF;
                    for from in 0..=len {
                        assert_eq!(
                            http1::lf_from(&s, from),
                            want(&s, from),
                            "len {len} LFs at {at} and {second} from {from} filler {filler:#x}"
                        );
                    }
                }
            }
        }
        for lfs in 0..len {
            let mut s = vec![LF; len];
            s[..lfs].fill(b'a');
            for from in 0..=len {
                assert_eq!(
                    http1::lf_from(&s, from),
                    want(&s, from),
                    "len {len}, LFs from {lfs}"
                );
            }
        }
    }
    assert_eq!(http1::lf_from(b"a\n", 3), None, "a start past the end");
}
