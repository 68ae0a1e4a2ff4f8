//! The tracker's unit tests: scripts of client and server bytes, fed whole, split and byte by
//! byte. Helpers and the tests across protocols here; `http1` and `http2` hold each
//! protocol's exchanges.

mod http1;
mod http1_rules;
mod http2;
mod http2_grpc;
mod http2_headers;

use super::*;
use http1::*;
use http2::*;
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

// --- Across protocols -------------------------------------------------------------------

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
fn lfs_finds_every_lf_once_in_order_at_every_length() {
    // Every length up to past two 64-byte windows and the shifted last one, with no LF, one LF anywhere, two anywhere,
    // and LFs from anywhere to the end: the windows, the last one (shifted or padded) and the
    // bit scan answer as `position` does, each LF once. Other bytes are 0x0B (LF ^ 1) and 0x8A
    // (LF | 0x80), which a compare that is not exact gets wrong.
    let want = |s: &[u8]| -> Vec<usize> {
        s.iter()
            .enumerate()
            .filter(|&(_, &c)| c == LF)
            .map(|(j, _)| j)
            .collect()
    };
    let got = |s: &[u8]| -> Vec<usize> {
        let mut lfs = super::http1::Lfs::new(s);
        let mut out = Vec::new();
        while let Some(j) = lfs.next_lf() {
            out.push(j);
            assert!(out.len() <= s.len(), "more LFs than bytes in {s:?}");
        }
        assert_eq!(lfs.next_lf(), None, "an LF after the last");
        out
    };
    for len in 0..150 {
        for filler in [b'a', 0x0b, 0x8a] {
            let plain = vec![filler; len];
            assert_eq!(got(&plain), want(&plain), "len {len} filler {filler:#x}");
            for at in 0..len {
                // Two LFs: every second position near the first, and a few far ones.
                let seconds = (at..len.min(at + 70)).chain([len / 2, len - 1]);
                for second in seconds.filter(|&p| p >= at) {
                    let mut s = plain.clone();
                    s[at] = LF;
                    s[second] = LF;
                    assert_eq!(
                        got(&s),
                        want(&s),
                        "len {len} LFs at {at} and {second} filler {filler:#x}"
                    );
                }
            }
        }
        for from in 0..len {
            let mut s = vec![LF; len];
            s[..from].fill(b'a');
            assert_eq!(got(&s), want(&s), "len {len}, LFs from {from}");
        }
    }
}
