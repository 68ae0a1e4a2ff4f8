//! HTTP/1.1 rules pinned one by one (tunnels, pipelining, the close/keep-alive/chunked tokens,
//! MAX_HEAD and the hint limits, start lines, SSE detection, trailers), whole, split and byte by
//! byte: each test names the rule it holds and fails on a mutant of it (bench/results/mutants.md).

use super::*;

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
            // A head split between writes is held like any request (the module cannot vouch
            // that it has no Content-Encoding: `movable_sse`).
            let whole = at == 0;
            assert_eq!(t.sse_in_flight(), sse && whole, "{line:?} split at {at}");
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
        assert!(
            !t.sse_in_flight(),
            "{line:?} byte by byte: a split head is held"
        );
        t.server(b"0\r\n\r\n", &mut |_, _| {});
        assert_eq!(t.in_flight(), 0, "{line:?} byte by byte");
    }
}

/// Only what resumes by itself is movable (issue 63): an event stream answering a `GET`, its
/// body not content-encoded, its head whole in one write. A `POST` completion, a `GET` with any
/// `Content-Encoding` (any case, `identity` too: nothing to gain), a `HEAD`, a method merely
/// starting with `GET`, are ordinary requests: not in flight as SSE, ended only by the server.
#[test]
fn only_a_get_event_stream_without_content_encoding_is_movable() {
    let head = |extra: &str| {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{extra}transfer-encoding: chunked\r\n\r\n"
        )
    };
    for (request, extra, movable) in [
        ("GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n", "", true),
        (
            "GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n",
            "cache-control: no-cache\r\n",
            true,
        ),
        (
            "POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
            "",
            false,
        ),
        ("PUT /v1/x HTTP/1.1\r\ncontent-length: 0\r\n\r\n", "", false),
        ("GETS /v1/events HTTP/1.1\r\n\r\n", "", false),
        ("GE /v1/events HTTP/1.1\r\n\r\n", "", false),
        ("get /v1/events HTTP/1.1\r\n\r\n", "", false),
        (
            "GET /v1/events HTTP/1.1\r\n\r\n",
            "content-encoding: gzip\r\n",
            false,
        ),
        (
            "GET /v1/events HTTP/1.1\r\n\r\n",
            "Content-Encoding: br\r\n",
            false,
        ),
        (
            "GET /v1/events HTTP/1.1\r\n\r\n",
            "CONTENT-ENCODING:zstd\r\n",
            false,
        ),
        (
            "GET /v1/events HTTP/1.1\r\n\r\n",
            "content-encoding: identity\r\n",
            false,
        ),
        (
            "GET /v1/events HTTP/1.1\r\n\r\n",
            "x-content-encoding: gzip\r\n",
            true,
        ),
    ] {
        let head = head(extra);
        // The request whole and byte by byte (both request parsers), the response head whole.
        for bytewise in [false, true] {
            let mut t = Tracker::new();
            if bytewise {
                for b in request.as_bytes() {
                    t.client(std::slice::from_ref(b), &mut |_, _| {});
                }
            } else {
                t.client(request.as_bytes(), &mut |_, _| {});
            }
            t.server(head.as_bytes(), &mut |_, _| {});
            assert_eq!(t.in_flight(), 1, "{request:?} {extra:?}");
            assert_eq!(
                t.sse_in_flight(),
                movable,
                "{request:?} {extra:?} bytewise {bytewise}"
            );
            assert_eq!(t.sse_hand_over(), movable, "{request:?} {extra:?}");
            if !movable {
                // An ordinary chunked response: it ends with its last chunk, whatever it holds.
                t.server(b"6\r\ndata: \r\n0\r\n\r\n", &mut |_, _| {});
                assert_eq!(t.in_flight(), 0, "{request:?} {extra:?}");
            }
        }
    }
    // Close-delimited (no length, not chunked): the same rule.
    for (request, movable) in [
        ("GET /e HTTP/1.1\r\n\r\n", true),
        ("POST /e HTTP/1.1\r\ncontent-length: 0\r\n\r\n", false),
    ] {
        let mut t = Tracker::new();
        t.client(request.as_bytes(), &mut |_, _| {});
        t.server(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: a\n\n",
            &mut |_, _| {},
        );
        assert_eq!(t.sse_ending().is_some(), movable, "{request:?}");
        assert_eq!(t.sse_in_flight(), movable, "{request:?}");
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

/// A Content-Length of one plain number is read at once (`plain_length`), anything else a byte
/// at a time: both give what the byte-by-byte parse gives. The body is framed by the number
/// (the response ends after exactly that many bytes, not before), and the forms Envoy refuses
/// (empty, two different numbers, a sign, other bytes, past `u64`) lose the connection.
#[test]
fn a_content_length_is_read_at_once_as_byte_by_byte() {
    let ok: &[(&str, usize)] = &[
        ("2", 2),
        (" 2", 2),
        ("2 ", 2),
        ("\t12\t", 12),
        ("  0  ", 0),
        ("007", 7),
        ("3\r", 3),
        ("3 \r", 3),
        ("3,3", 3),
        ("3, 3", 3),
        ("18446744073709551615", usize::MAX),
    ];
    for &(v, n) in ok {
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {v}\r\nx: y\r\n\r\n");
        let body = vec![b'b'; n.min(64)];
        let mut script = vec![c(b"GET / HTTP/1.1\r\n\r\n"), s(head.as_bytes())];
        if n > 1 {
            // All but the last byte: the response is not over.
            script.push(s(&body[..body.len() - 1]));
            let (t, _) = play(&script);
            assert_eq!(t.in_flight(), 1, "{v:?}: ended before its last body byte");
            script.pop();
        }
        if n <= 64 {
            script.push(s(&body));
            check(&script, &[Started(1), Ended(1)]);
        } else {
            check(&script, &[Started(1)]);
        }
    }
    for v in [
        "",
        " ",
        "1 2",
        "2,3",
        "2,",
        ",2",
        "+2",
        "-2",
        "0x2",
        "2a",
        "18446744073709551616",
    ] {
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {v}\r\n\r\n");
        let script = vec![c(b"GET / HTTP/1.1\r\n\r\n"), s(head.as_bytes())];
        check(&script, &[Started(1), Lost]);
    }
}

/// Hints are kept only for heads begun while they are wanted (`Tracker::want_hints`): a head
/// begun without them reports none, even when they are wanted again before it completes (its
/// start was not kept: a cut User-Agent could match a health-check prefix it does not start
/// with); the framing is followed the same either way, and an empty request-target is still
/// refused while the path is not kept.
#[test]
fn hints_are_kept_only_for_heads_begun_while_wanted() {
    /// `b` fed whole, or a byte at a time.
    fn feed_as(bytewise: bool, t: &mut Tracker, d: D, b: &[u8], out: &mut Vec<Rec>) {
        if bytewise {
            b.iter()
                .for_each(|x| feed(t, d, std::slice::from_ref(x), out));
        } else {
            feed(t, d, b, out);
        }
    }
    let req = b"GET /healthz HTTP/1.1\r\nuser-agent: kube-probe/1.29\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    for bytewise in [false, true] {
        let mut t = Tracker::new();
        let mut out = Vec::new();
        // Not wanted: the same events, no hints.
        t.want_hints(false);
        feed_as(bytewise, &mut t, C, req, &mut out);
        feed_as(bytewise, &mut t, S, resp, &mut out);
        // Wanted: kept.
        t.want_hints(true);
        feed_as(bytewise, &mut t, C, req, &mut out);
        feed_as(bytewise, &mut t, S, resp, &mut out);
        // Begun while not wanted, wanted again before it completes: none.
        t.want_hints(false);
        feed_as(bytewise, &mut t, C, &req[..5], &mut out);
        t.want_hints(true);
        feed_as(bytewise, &mut t, C, &req[5..], &mut out);
        assert_eq!(
            events(&out),
            [Started(1), Ended(1), Started(2), Ended(2), Started(3)],
            "bytewise {bytewise}"
        );
        let hints: Vec<_> = out
            .iter()
            .map(|r| (r.1.as_deref(), r.2.as_deref()))
            .collect();
        let kept = (Some(&b"/healthz"[..]), Some(&b"kube-probe/1.29"[..]));
        assert_eq!(hints[0], (None, None), "not wanted, bytewise {bytewise}");
        assert_eq!(hints[2], kept, "wanted, bytewise {bytewise}");
        assert_eq!(
            hints[4],
            (None, None),
            "begun unwanted, bytewise {bytewise}"
        );
        assert_eq!(t.hints(), Hints::default());
    }
    // The path's count still refuses an empty target while it is not kept.
    for bytewise in [false, true] {
        let mut t = Tracker::new();
        t.want_hints(false);
        let mut out = Vec::new();
        feed_as(bytewise, &mut t, C, b"GET  HTTP/1.1\r\n\r\n", &mut out);
        assert_eq!(events(&out), [Lost], "bytewise {bytewise}");
    }
}
