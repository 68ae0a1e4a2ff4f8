//! The exchange tracker fed a request and Envoy's response in a loop, outside Envoy, so that
//! callgrind counts only the tracker (and, to compare, `httparse` given the same heads).
//!
//!     cargo build --release --manifest-path bench/tracker-loop/Cargo.toml
//!     B=bench/tracker-loop/target/release/tracker-loop
//!     valgrind --tool=callgrind $B http1 h2load 1000; valgrind --tool=callgrind $B http1 h2load 11000
//!
//! Instructions an exchange: the difference of the two totals over 10 000. Cases: `http1` or
//! `httparse` (`h2load` or `browser` heads; `httparse-bare`: its parse only), `http2`.
use graceful_drain::exchange::{Event, Tracker};
use std::hint::black_box;

/// The headers h2load sends.
const H2LOAD: &[&str] = &[
    "host: 127.0.0.1:10000",
    "user-agent: h2load nghttp2/1.52.0",
    "accept: */*",
    "accept-encoding: gzip, deflate",
];

/// A browser's headers: bench/bench.py's `BROWSER_HEADS`, read from its source so that the two
/// measure the same head (Python string literals, one a line, or two adjacent ones for a long
/// header).
fn browser_heads() -> Vec<String> {
    let list = include_str!("../../bench.py")
        .split_once("BROWSER_HEADS = [\n")
        .and_then(|(_, rest)| rest.split_once("\n]"))
        .map(|(list, _)| list)
        .expect("BROWSER_HEADS in bench/bench.py");
    let mut heads = Vec::new();
    let mut head = String::new();
    for line in list.lines().map(str::trim) {
        let (literal, ends) = match line.strip_suffix(',') {
            Some(l) => (l, true),
            None => (line, false),
        };
        head.push_str(
            literal
                .get(1..literal.len().saturating_sub(1))
                .unwrap_or_default(),
        );
        if ends {
            heads.push(std::mem::take(&mut head));
        }
    }
    assert!(
        heads.len() >= 15 && heads.iter().all(|h| h.contains(": ")),
        "BROWSER_HEADS not read as headers: {heads:?}"
    );
    heads
}

/// A direct response as Envoy 1.40 writes it.
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\
date: Sun, 06 Dec 2026 02:40:00 GMT\r\nserver: envoy\r\n\r\nok";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or_default();
    let (case, heads) = (arg(1), arg(2));
    let n: u64 = arg(3).parse().unwrap_or(20_000);
    let mut req = String::from("GET / HTTP/1.1\r\n");
    let lines: Vec<String> = if heads == "browser" {
        // h2load sends the host itself, before the headers it is given.
        std::iter::once(H2LOAD[0].to_string())
            .chain(browser_heads())
            .collect()
    } else {
        H2LOAD.iter().map(|h| h.to_string()).collect()
    };
    for h in lines {
        req.push_str(&h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    let (started, ended) = match case {
        "http1" => http1(req.as_bytes(), n),
        "http2" => http2(n),
        "httparse" | "httparse-bare" => {
            let bare = case == "httparse-bare";
            let found = (0..n)
                .filter(|_| with_httparse(black_box(req.as_bytes()), black_box(RESPONSE), bare))
                .count() as u64;
            (found, found)
        }
        _ => panic!("usage: tracker-loop http1|httparse|httparse-bare|http2 h2load|browser N"),
    };
    assert_eq!(
        (started, ended),
        (n, n),
        "every exchange started and ended once"
    );
    println!("{started} exchanges");
}

/// The tracker's events counted in `seen` (exchanges started, ended); a lost connection fails
/// the run.
fn counter(seen: &mut (u64, u64)) -> impl FnMut(Event, &Tracker) + '_ {
    |ev, _| match ev {
        Event::Started(_) => seen.0 += 1,
        Event::Ended(_) => seen.1 += 1,
        Event::Lost => panic!("the tracker lost the connection"),
    }
}

fn http1(req: &[u8], n: u64) -> (u64, u64) {
    let mut t = Tracker::new();
    let mut seen = (0, 0);
    let mut on = counter(&mut seen);
    for _ in 0..n {
        t.client(black_box(req), &mut on);
        t.server(black_box(RESPONSE), &mut on);
    }
    drop(on);
    seen
}

/// Both heads through `httparse`: complete, and (unless `bare`) the names the tracker follows
/// looked up in its header array.
#[inline(never)]
fn with_httparse(req: &[u8], resp: &[u8], bare: bool) -> bool {
    let mut h = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Request::new(&mut h);
    let request = matches!(r.parse(req), Ok(httparse::Status::Complete(_)));
    let mut h = [httparse::EMPTY_HEADER; 32];
    let mut s = httparse::Response::new(&mut h);
    let response = matches!(s.parse(resp), Ok(httparse::Status::Complete(_)));
    if bare {
        return request && response;
    }
    let agent = r
        .headers
        .iter()
        .any(|x| x.name.eq_ignore_ascii_case("user-agent"));
    let length = s.headers.iter().find_map(|x| {
        x.name
            .eq_ignore_ascii_case("content-length")
            .then(|| {
                std::str::from_utf8(x.value)
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .flatten()
    });
    let chunked = s
        .headers
        .iter()
        .any(|x| x.name.eq_ignore_ascii_case("transfer-encoding"));
    request && response && agent && length == Some(2) && !chunked
}

fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let l = payload.len() as u32;
    let mut v = vec![(l >> 16) as u8, (l >> 8) as u8, l as u8, ty, flags];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// h2load's HEADERS (HPACK as it sends them), Envoy's HEADERS and a DATA frame ending the
/// stream, after the preface and SETTINGS both ways.
fn http2(n: u64) -> (u64, u64) {
    let mut t = Tracker::new();
    let mut seen = (0, 0);
    let mut on = counter(&mut seen);
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend(frame(4, 0, 0, &[0, 3, 0, 0, 0, 100]));
    preface.extend(frame(8, 0, 0, &[0, 0x10, 0, 0]));
    t.client(&preface, &mut on);
    t.server(&frame(4, 0, 0, &[]), &mut on);
    t.server(&frame(4, 1, 0, &[]), &mut on);
    t.client(&frame(4, 1, 0, &[]), &mut on);
    let request = [
        0x82u8, 0x86, 0x84, 0x41, 0x8a, 0x08, 0x9d, 0x5c, 0x0b, 0x81, 0x70, 0xdc, 0x78, 0x0f, 0x03,
        0x53, 0x03, 0x2a, 0x2f, 0x2a, 0x90, 0x7a, 0x8a, 0xaa, 0x69, 0xd2, 0x9a, 0xc4, 0xc0, 0x57,
        0x0b, 0xcb, 0x87,
    ];
    let response = [
        0x88u8, 0x5f, 0x87, 0x49, 0x7c, 0xa5, 0x8a, 0xe8, 0x19, 0xaa, 0x0f, 0x0d, 0x01, 0x32, 0x61,
        0x96, 0xdf, 0x3d, 0xbf, 0x4a, 0x00, 0x4a, 0x65, 0xb6, 0x85, 0x04, 0x01, 0x09, 0x40, 0x21,
        0x71, 0xa6, 0x6e, 0x36, 0x25, 0x31, 0x68, 0xdf, 0x76, 0x85, 0x86, 0xb1, 0x92, 0x72, 0xff,
    ];
    for k in 0..n {
        let id = 1 + 2 * k as u32;
        t.client(black_box(&frame(1, 5, id, &request)), &mut on);
        let mut s = frame(1, 4, id, &response);
        s.extend(frame(0, 1, id, b"ok"));
        t.server(black_box(&s), &mut on);
    }
    drop(on);
    seen
}
