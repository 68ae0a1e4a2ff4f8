//! Property tests (bounded: a fixed number of cases per property) over every parser that takes
//! operator or network input: durations, both configs, control routing, the admin's answers,
//! the exchange tracker. None may panic, and what they accept must satisfy the documented
//! invariants; the exchange tracker must also agree with a reference model of valid HTTP/1.1
//! and HTTP/2 conversations.

use graceful_drain::config::{
    format_duration, parse_duration, BootstrapConfig, FilterConfig, MAX_DURATION,
};
use graceful_drain::envoy_stats::admin::{dechunk, parse_status};
use graceful_drain::exchange::{unread, Event, Tracker};
use graceful_drain::http_filter::control::{route, Route};
use proptest::prelude::*;
use std::time::Duration;

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 2000,
        ..ProptestConfig::default()
    }
}

const FIELDS: [&str; 3] = ["min_drain_duration", "quiet_period", "drain_timeout"];

/// Every field either config accepts, plus the Envoy fields that carry the JSON documents.
const ALL_BOOTSTRAP_FIELDS: [&str; 8] = [
    "min_drain_duration",
    "quiet_period",
    "drain_timeout",
    "admin_address",
    "admin_cluster",
    "ignored_stat_prefixes",
    "readiness_failure_delay",
    "extension_config",
];
const ALL_FILTER_FIELDS: [&str; 4] = [
    "role",
    "drain_token_file",
    "drain_token_env",
    "filter_config",
];

/// A field a user could have written: a known one, or an unknown key present in the document
/// (as written, or as JSON decodes it: `"a\tb"` is the key a-tab-b).
fn names_a_field(field: &str, known: &[&str], raw: &[u8]) -> bool {
    let contains = |s: &[u8]| raw.windows(s.len()).any(|w| w == s);
    known.contains(&field)
        || contains(format!("\"{field}\"").as_bytes())
        || contains(serde_json::to_string(field).unwrap().as_bytes())
        || serde_json::from_slice::<serde_json::Value>(raw)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.contains_key(field)))
            .unwrap_or(false)
}

/// Bytes a config parser meets: arbitrary bytes, and more often JSON objects whose keys are the
/// config's fields or other names and whose values are of every JSON type (durations among
/// them), some with one byte changed. Arbitrary bytes alone almost never get past the JSON
/// syntax, so they never reach the checks that name a field.
fn config_bytes(fields: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let key = prop_oneof![
        proptest::sample::select(fields).prop_map(str::to_string),
        "[a-z_]{1,12}",
    ];
    let value = prop_oneof![
        Just("1".to_string()),
        Just("-1".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("[\"5s\"]".to_string()),
        Just("{}".to_string()),
        Just("\"data\"".to_string()),
        Just("\"control\"".to_string()),
        "[0-9]{1,6}(ms|s|m|h)?".prop_map(|d| format!("{d:?}")),
        "[ -~]{0,8}".prop_map(|t| serde_json::Value::String(t).to_string()),
    ];
    let object = proptest::collection::vec((key, value), 0..5).prop_map(|kv| {
        let body: Vec<String> = kv.iter().map(|(k, v)| format!("{k:?}: {v}")).collect();
        format!("{{{}}}", body.join(", ")).into_bytes()
    });
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..200),
        3 => object.clone(),
        1 => (object, any::<usize>(), any::<u8>()).prop_map(|(mut b, i, x)| {
            let i = i % b.len();
            b[i] = x;
            b
        }),
    ]
}

/// Whether `raw` is a JSON object: the parser's errors on one are about its fields.
fn is_json_object(raw: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(raw).is_ok_and(|v| v.is_object())
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn durations_never_panic_and_round_trip(s in ".{0,24}") {
        if let Ok(d) = parse_duration(&s) {
            prop_assert!(d <= MAX_DURATION);
            prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn duration_like_strings_parse_exactly(secs in 0u64..4000, nanos in 0u32..1_000_000_000, ms in any::<bool>()) {
        let expected = Duration::new(secs, nanos);
        let text = if ms {
            format!("{}ms", secs)
        } else {
            format!("{secs}.{nanos:09}s")
        };
        let want = if ms { Duration::from_millis(secs) } else { expected };
        match parse_duration(&text) {
            Ok(d) => prop_assert_eq!(d, want),
            Err(e) => {
                prop_assert!(want > MAX_DURATION, "{} refused: {}", text, e);
                prop_assert!(e.contains("maximum"));
            }
        }
    }

    #[test]
    fn bootstrap_config_never_panics_on_bytes(raw in config_bytes(&ALL_BOOTSTRAP_FIELDS[..7])) {
        if let Err(e) = BootstrapConfig::parse(&raw) {
            prop_assert!(names_a_field(&e.field, &ALL_BOOTSTRAP_FIELDS, &raw), "{}", e);
            prop_assert!(e.to_string().starts_with("invalid graceful_drain bootstrap config: field `"));
            // In an object, the field at fault, not the document as a whole.
            prop_assert!(!is_json_object(&raw) || e.field != "extension_config", "{} for {}", e, String::from_utf8_lossy(&raw));
        }
    }

    /// Documents that are JSON objects with known keys and values of any JSON type: an error
    /// always names one of the keys (never the document as a whole).
    #[test]
    fn wrong_types_and_duplicates_name_the_field(
        entries in proptest::collection::vec((0usize..6, prop_oneof![
            Just("1".to_string()), Just("true".to_string()), Just("null".to_string()),
            Just("[\"5s\"]".to_string()), Just("{}".to_string()), Just("\"5s\"".to_string()),
            Just("\"x\"".to_string()),
        ]), 1..5)
    ) {
        let keys = &ALL_BOOTSTRAP_FIELDS[..6];
        let body: Vec<String> = entries.iter().map(|(k, v)| format!("\"{}\": {}", keys[*k], v)).collect();
        let json = format!("{{{}}}", body.join(", "));
        if let Err(e) = BootstrapConfig::parse(json.as_bytes()) {
            prop_assert!(keys.contains(&e.field.as_str()), "{} for {}", e, json);
        }
    }

    #[test]
    fn accepted_bootstrap_configs_are_consistent(
        values in proptest::collection::vec(prop_oneof![
            Just(None),
            (0u64..40_000).prop_map(|ms| Some(format!("{ms}ms"))),
            "[0-9.a-z -]{0,8}".prop_map(Some),
        ], 3)
    ) {
        let fields: Vec<String> = FIELDS.iter().zip(&values)
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k:?}: {v:?}")))
            .collect();
        let json = format!("{{{}}}", fields.join(", "));
        match BootstrapConfig::parse(json.as_bytes()) {
            Ok(c) => {
                let d = c.drain;
                prop_assert!(d.drain_timeout > Duration::ZERO);
                prop_assert!(d.drain_timeout >= d.min_drain_duration);
                prop_assert!(d.drain_timeout >= d.quiet_period);
            }
            Err(e) => prop_assert!(FIELDS.contains(&e.field.as_str()), "{} for {}", e, json),
        }
    }

    #[test]
    fn filter_config_never_panics_on_bytes(raw in config_bytes(&ALL_FILTER_FIELDS[..3])) {
        let r = FilterConfig::parse_with(&raw, |_| None, |_| Err(std::io::ErrorKind::NotFound.into()));
        if let Err(e) = r {
            prop_assert!(names_a_field(&e.field, &ALL_FILTER_FIELDS, &raw), "{}", e);
            // In an object, the field at fault, not the document as a whole.
            prop_assert!(!is_json_object(&raw) || e.field != "filter_config", "{} for {}", e, String::from_utf8_lossy(&raw));
        }
    }

    #[test]
    fn routing_never_panics_and_only_exact_paths_are_endpoints(
        method in proptest::collection::vec(any::<u8>(), 0..10),
        path in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let r = route(&method, &path);
        let bare = path.split(|&b| b == b'?').next().unwrap_or(&[]);
        if r != Route::NotFound {
            prop_assert!(matches!(bare, b"/ready" | b"/drain/status" | b"/drain"), "{:?} -> {:?}", path, r);
        }
        if let Route::Drain { .. } = r {
            prop_assert!(method == b"GET" || method == b"POST");
        }
    }

    #[test]
    fn status_lines_never_panic_and_are_read_exactly(
        minor in any::<u8>(),
        code in proptest::collection::vec(any::<u8>(), 3),
        tail in proptest::collection::vec(any::<u8>(), 0..20),
        raw in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        prop_assert!(parse_status(&raw).is_err() || raw.starts_with(b"HTTP/1."));
        let mut line = b"HTTP/1.".to_vec();
        line.push(minor);
        line.push(b' ');
        line.extend_from_slice(&code);
        line.extend_from_slice(&tail);
        let digits = minor.is_ascii_digit() && code.iter().all(u8::is_ascii_digit);
        let ends = matches!(tail.first(), None | Some(b' ' | b'\r'));
        match parse_status(&line) {
            Ok(c) => {
                prop_assert!(digits && ends);
                let want = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
                prop_assert_eq!(c, want);
            }
            Err(_) => prop_assert!(!(digits && ends)),
        }
    }

    #[test]
    fn chunked_bodies_never_panic_and_never_grow(
        parts in proptest::collection::vec((0usize..64, proptest::collection::vec(any::<u8>(), 0..64)), 0..6),
        junk in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        // Size lines that may lie about the data after them, then anything.
        let mut wire = Vec::new();
        for (size, data) in &parts {
            wire.extend_from_slice(format!("{size:x}\r\n").as_bytes());
            wire.extend_from_slice(data);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(&junk);
        for raw in [&wire[..], &junk[..]] {
            let (data, _) = dechunk(raw);
            prop_assert!(data.len() <= raw.len());
        }
    }

    #[test]
    fn chunked_bodies_decode_to_their_data(
        data in proptest::collection::vec(any::<u8>(), 0..200),
        cuts in proptest::collection::vec(1usize..40, 0..10),
    ) {
        let mut wire = Vec::new();
        let mut rest = &data[..];
        for c in cuts.iter().chain(std::iter::repeat(&40)) {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at((*c).min(rest.len()));
            wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            wire.extend_from_slice(chunk);
            wire.extend_from_slice(b"\r\n");
            rest = tail;
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        prop_assert_eq!(dechunk(&wire), (data, true));
    }
}

// --- The exchange tracker ---------------------------------------------------------------------

/// A small deterministic generator: the conversations below are built from one proptest seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng((seed ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        // Payloads that look like framing, to catch a parser that reads them.
        const JUNK: &[u8] = b"\r\n0:HTTP/1.1 200 \x00\x01\x04\xff;chunked";
        (0..n).map(|_| *self.pick(JUNK)).collect()
    }
    /// A header name in a random mix of cases.
    fn case(&mut self, name: &str) -> String {
        name.chars()
            .map(|c| {
                if self.one_in(2) {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    }
}

/// One valid conversation: both directions' bytes, the causal order they may be fed in, and
/// the events a correct tracker reports.
#[derive(Default, Debug)]
struct Conversation {
    client: Vec<u8>,
    server: Vec<u8>,
    /// Consecutive pieces of each direction: (end offset, bytes of the other direction that
    /// must have been fed before the piece's first byte).
    client_pieces: Vec<(usize, usize)>,
    server_pieces: Vec<(usize, usize)>,
    /// (from the client, offset after the byte that causes it, event)
    events: Vec<(bool, usize, Event)>,
}

impl Conversation {
    fn push(&mut self, client: bool, bytes: &[u8], need: usize) {
        let (buf, pieces) = if client {
            (&mut self.client, &mut self.client_pieces)
        } else {
            (&mut self.server, &mut self.server_pieces)
        };
        buf.extend_from_slice(bytes);
        pieces.push((buf.len(), need));
    }

    /// Feeds the conversation in random causal order and random splits; returns the events
    /// the model expects for that order and the tracker's. `stand_in`: server bytes the
    /// tracker says it will not read are fed as [`unread`] stand-ins, as the network filter
    /// feeds such a write (without asking Envoy for the buffer).
    fn play(&self, rng: &mut Rng, stand_in: bool) -> (Vec<Event>, Vec<Event>, Tracker) {
        fn allowed(pieces: &[(usize, usize)], other_fed: usize) -> usize {
            let mut end = 0;
            for &(e, need) in pieces {
                if need > other_fed {
                    break;
                }
                end = e;
            }
            end
        }
        let mut t = Tracker::new();
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let (mut cf, mut sf) = (0, 0);
        while cf < self.client.len() || sf < self.server.len() {
            let ac = allowed(&self.client_pieces, sf);
            let as_ = allowed(&self.server_pieces, cf);
            let can_c = ac > cf;
            let can_s = as_ > sf;
            assert!(can_c || can_s, "model deadlock at {cf}/{sf}");
            let client = if can_c && can_s { rng.one_in(2) } else { can_c };
            let max = if rng.one_in(3) {
                1 + rng.below(200)
            } else {
                1 + rng.below(8)
            };
            let (from, to) = if client {
                (cf, ac.min(cf + max))
            } else {
                (sf, as_.min(sf + max))
            };
            for &(c, off, e) in &self.events {
                if c == client && off > from && off <= to {
                    want.push(e);
                }
            }
            let mut on = |e: Event, _: &Tracker| got.push(e);
            if client {
                t.client(&self.client[from..to], &mut on);
                cf = to;
            } else if stand_in && t.server_unread_ahead() >= (to - from) as u64 {
                for z in unread(to - from) {
                    t.server(z, &mut on);
                }
                sf = to;
            } else {
                t.server(&self.server[from..to], &mut on);
                sf = to;
            }
        }
        (want, got, t)
    }
}

/// A valid HTTP/1.1 conversation: methods with and without bodies (Content-Length, chunked with
/// extensions and trailers), responses with Content-Length, chunked or no body, 1xx interims,
/// pipelining up to `depth`, header names in any case, junk headers that start like the
/// interesting ones.
fn h1_conversation(rng: &mut Rng) -> Conversation {
    const JUNK: [&str; 10] = [
        "Cookie: a=b",
        "Cache-Control: no-cache",
        "Content-Type: text/plain",
        "Te: trailers",
        "Upgrade-Insecure-Requests: 1",
        "Connection: keep-alive",
        "Accept: */*",
        "X-Transfer-Encoding: gzip",
        "Content-Lengthy: 9",
        "Transfer: 1",
    ];
    let n = 1 + rng.below(6);
    let depth = 1 + rng.below(4);
    let mut conv = Conversation::default();
    let mut head_end = Vec::new();
    let mut resp_end = Vec::new();
    let mut requests = Vec::new();
    for j in 0..n {
        let method = *rng.pick(&["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]);
        let eol = if rng.one_in(8) { "\n" } else { "\r\n" };
        let mut head = String::new();
        if rng.one_in(8) {
            head.push_str("\r\n");
        }
        head.push_str(&format!(
            "{method} /p{j}?q={} HTTP/1.1{eol}",
            rng.next() % 1000
        ));
        head.push_str(&format!("{}: x{eol}", rng.case("host")));
        if rng.one_in(2) {
            head.push_str(&format!("{}:  probe/{} {eol}", rng.case("user-agent"), j));
        }
        for _ in 0..rng.below(4) {
            head.push_str(&format!("{}{eol}", rng.pick(&JUNK)));
        }
        let mut body = Vec::new();
        match rng.below(3) {
            0 => {}
            1 => {
                let len = rng.below(50);
                head.push_str(&format!("{}: {len}{eol}", rng.case("content-length")));
                body = rng.bytes(len);
            }
            _ => {
                head.push_str(&format!("{}: chunked{eol}", rng.case("transfer-encoding")));
                body = chunked(rng, eol);
            }
        }
        head.push_str(eol);
        requests.push((head.into_bytes(), body, method == "HEAD"));
    }
    // Responses, each with its interims.
    let mut responses = Vec::new();
    for (_, _, head_method) in &requests {
        let mut r = Vec::new();
        for _ in 0..rng.below(3) {
            if rng.one_in(2) {
                r.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            } else {
                r.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n");
            }
        }
        let status = *rng.pick(&[200, 201, 204, 304, 404, 500]);
        r.extend_from_slice(format!("HTTP/1.1 {status} Whatever\r\nserver: envoy\r\n").as_bytes());
        if status == 204 || status == 304 {
            r.extend_from_slice(b"\r\n");
        } else if rng.one_in(2) {
            let len = rng.below(60);
            r.extend_from_slice(format!("content-length: {len}\r\n\r\n").as_bytes());
            if !head_method {
                r.extend(rng.bytes(len));
            }
        } else {
            r.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            if !head_method {
                r.extend(chunked(rng, "\r\n"));
            }
        }
        responses.push(r);
    }
    // The client's bytes, then the server's, with what each needs of the other.
    for (j, (head, body, _)) in requests.iter().enumerate() {
        let need = if j >= depth {
            resp_end_of(&responses, j - depth)
        } else {
            0
        };
        conv.push(true, head, need);
        head_end.push(conv.client.len());
        conv.events
            .push((true, conv.client.len(), Event::Started(j as u32 + 1)));
        if !body.is_empty() {
            conv.push(true, body, need);
        }
    }
    for (j, r) in responses.iter().enumerate() {
        conv.push(false, r, head_end[j]);
        resp_end.push(conv.server.len());
        conv.events
            .push((false, conv.server.len(), Event::Ended(j as u32 + 1)));
    }
    conv
}

/// The server offset where response `j` ends.
fn resp_end_of(responses: &[Vec<u8>], j: usize) -> usize {
    responses[..=j].iter().map(Vec::len).sum()
}

fn chunked(rng: &mut Rng, eol: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..rng.below(4) {
        let len = 1 + rng.below(20);
        let ext = if rng.one_in(3) { ";a=\"b\"" } else { "" };
        b.extend_from_slice(format!("{len:X}{ext}{eol}").as_bytes());
        b.extend(rng.bytes(len));
        b.extend_from_slice(eol.as_bytes());
    }
    b.extend_from_slice(format!("0{eol}").as_bytes());
    if rng.one_in(3) {
        b.extend_from_slice(format!("trailer-x: 1{eol}").as_bytes());
    }
    b.extend_from_slice(eol.as_bytes());
    b
}

fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A valid HTTP/2 conversation: several interleaved streams, END_STREAM on HEADERS or on DATA,
/// CONTINUATION, 1xx and trailers, some streams reset by either side, connection-level frames
/// in between. Pieces are frames; each needs all the other direction's frames before it in
/// the script (so the order of cross-direction effects is the script's).
fn h2_conversation(rng: &mut Rng) -> Conversation {
    const ES: u8 = 0x1;
    const EH: u8 = 0x4;
    /// (from the client, type, flags, payload length)
    type Frame = (bool, u8, u8, usize);
    fn block(rng: &mut Rng, client: bool, es: bool, out: &mut Vec<Frame>) {
        let conts = if rng.one_in(3) { 1 + rng.below(2) } else { 0 };
        let extra = if rng.one_in(3) { 0x20 } else { 0 };
        let es = if es { ES } else { 0 };
        out.push((
            client,
            1,
            es | extra | if conts == 0 { EH } else { 0 },
            rng.below(30),
        ));
        for k in 0..conts {
            out.push((
                client,
                9,
                if k + 1 == conts { EH } else { 0 },
                rng.below(30),
            ));
        }
    }
    /// One side of a stream: a header block, DATA, trailers; END_STREAM on the last.
    fn side(rng: &mut Rng, client: bool) -> Vec<Frame> {
        let mut out = Vec::new();
        if !client && rng.one_in(4) {
            block(rng, false, false, &mut out); // 1xx
        }
        let data = rng.below(4);
        let trailers = rng.one_in(4);
        block(rng, client, data == 0 && !trailers, &mut out);
        for k in 0..data {
            let es = k + 1 == data && !trailers;
            out.push((client, 0, if es { ES } else { 0 }, rng.below(40)));
        }
        if trailers {
            block(rng, client, true, &mut out);
        }
        out
    }
    #[derive(Default)]
    struct S {
        cq: std::collections::VecDeque<Frame>,
        sq: std::collections::VecDeque<Frame>,
        opened: bool,
        block_done: bool,
        closed: [bool; 2],
        ended: bool,
    }
    let n = 1 + rng.below(5);
    let mut streams: Vec<S> = (0..n)
        .map(|_| S {
            cq: side(rng, true).into(),
            sq: side(rng, false).into(),
            ..S::default()
        })
        .collect();
    let mut conv = Conversation::default();
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend(frame(4, 0, 0, &[0; 12]));
    conv.push(true, &preface, 0);
    let settings = frame(4, 0, 0, &[0; 6]);
    conv.push(false, &settings, conv.client.len());
    // Whose header block is open on each direction (index 0: client).
    let mut in_block: [Option<usize>; 2] = [None, None];
    // Whether that block's HEADERS had END_STREAM.
    let mut block_es = [false; 2];
    loop {
        // What may go next: a stream's next client or server frame, a reset, or a
        // connection-level frame.
        let mut choices = Vec::new();
        for (k, s) in streams.iter().enumerate() {
            if s.ended {
                continue;
            }
            let may_open = k == 0 || streams[k - 1].opened;
            if !s.cq.is_empty() && may_open && in_block[0].is_none_or(|b| b == k) {
                choices.push((k, true));
            }
            if s.block_done && !s.sq.is_empty() && in_block[1].is_none_or(|b| b == k) {
                choices.push((k, false));
            }
        }
        if choices.is_empty() {
            break;
        }
        let (k, client) = *rng.pick(&choices);
        let dir = usize::from(!client);
        let id = 2 * k as u32 + 1;
        if rng.one_in(6) && in_block[dir].is_none() {
            let ty = *rng.pick(&[6u8, 8, 2, 4]);
            let len = match ty {
                6 => 8,
                8 => 4,
                2 => 5,
                _ => 0,
            };
            let (flags, sid) = match ty {
                2 => (0, id),
                4 => (1, 0),
                _ => (0, 0),
            };
            let need = if client {
                conv.server.len()
            } else {
                conv.client.len()
            };
            conv.push(client, &frame(ty, flags, sid, &vec![0; len]), need);
            continue;
        }
        let s = &mut streams[k];
        // Not inside a header block of either direction (the other side's block of this stream
        // would never be finished).
        let reset = s.block_done
            && in_block[dir].is_none()
            && in_block[1 - dir] != Some(k)
            && rng.one_in(12);
        let f = if reset {
            (client, 3u8, 0u8, 4usize)
        } else if client {
            s.cq.pop_front().unwrap()
        } else {
            s.sq.pop_front().unwrap()
        };
        let (_, ty, flags, len) = f;
        let need = if client {
            conv.server.len()
        } else {
            conv.client.len()
        };
        conv.push(client, &frame(ty, flags, id, &rng.bytes(len)), need);
        let at = if client {
            conv.client.len()
        } else {
            conv.server.len()
        };
        s.opened = true;
        if ty == 3 {
            s.ended = true;
            conv.events.push((client, at, Event::Ended(id)));
            continue;
        }
        // Header blocks: END_STREAM is the HEADERS' and counts at the block's end.
        if ty == 1 {
            in_block[dir] = Some(k);
            block_es[dir] = flags & ES != 0;
        }
        let ends_block = (ty == 1 || ty == 9) && flags & EH != 0;
        let mut closes = ty == 0 && flags & ES != 0;
        if ends_block {
            in_block[dir] = None;
            closes = block_es[dir];
            if client && !s.block_done {
                s.block_done = true;
                conv.events.push((true, at, Event::Started(id)));
            }
        }
        if closes {
            s.closed[dir] = true;
            if s.closed[0] && s.closed[1] {
                s.ended = true;
                conv.events.push((client, at, Event::Ended(id)));
            }
        }
    }
    conv
}

proptest! {
    #![proptest_config(cfg())]

    /// Any bytes, both directions, any splits and interleavings (after a start that leads the
    /// tracker into HTTP/1.1 or HTTP/2, or none): it never panics and its counts stay sane.
    #[test]
    fn exchange_tracker_never_panics_on_bytes(
        start in 0usize..3,
        client in proptest::collection::vec(any::<u8>(), 0..300),
        server in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in proptest::collection::vec((any::<bool>(), 0usize..40), 0..40),
    ) {
        let (mut c, mut s) = match start {
            0 => (Vec::new(), Vec::new()),
            1 => (b"POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\n".to_vec(), b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()),
            _ => {
                let mut c = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                c.extend(frame(4, 0, 0, &[]));
                c.extend(frame(1, 0x4, 1, &[1, 2]));
                (c, frame(4, 0, 0, &[]))
            }
        };
        c.extend(client);
        s.extend(server);
        let mut t = Tracker::new();
        let (mut lost, mut started, mut ended) = (0, 0u64, 0u64);
        let (mut cf, mut sf) = (0, 0);
        let mut check = |e: Event, t: &Tracker| {
            match e {
                Event::Started(_) => started += 1,
                Event::Ended(_) => ended += 1,
                Event::Lost => lost += 1,
            }
            let (st, en) = t.totals();
            assert!(u64::from(t.in_flight()) <= st && en <= st);
        };
        for (client, len) in cuts.iter().copied().chain(std::iter::repeat_n((true, 1000), 2)).chain(std::iter::once((false, 1000))) {
            if client {
                let to = (cf + len).min(c.len());
                t.client(&c[cf..to], &mut check);
                cf = to;
            } else {
                let to = (sf + len).min(s.len());
                t.server(&s[sf..to], &mut check);
                sf = to;
            }
        }
        let (st, en) = t.totals();
        prop_assert!(lost <= 1);
        prop_assert_eq!((st, en), (started, ended));
        prop_assert!(en <= st);
        prop_assert!(u64::from(t.in_flight()) <= st);
        prop_assert_eq!(lost == 1, t.protocol() == graceful_drain::exchange::Protocol::Unknown);
    }

    /// Valid HTTP/1.1 conversations, fed in any causal order and split anywhere: the tracker's
    /// events are the model's, in order, and it never gives up.
    #[test]
    fn exchange_tracker_follows_valid_http1(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let conv = h1_conversation(&mut rng);
        let (want, got, t) = conv.play(&mut rng, seed % 2 == 1);
        prop_assert_eq!(&got, &want, "{:?}", String::from_utf8_lossy(&conv.client));
        let ends = want.iter().filter(|e| matches!(e, Event::Ended(_))).count() as u32;
        let starts = want.iter().filter(|e| matches!(e, Event::Started(_))).count() as u32;
        prop_assert_eq!(t.in_flight(), starts - ends);
        prop_assert_eq!(t.in_flight(), 0);
        prop_assert_eq!(t.protocol(), graceful_drain::exchange::Protocol::Http1);
    }

    /// Valid HTTP/2 conversations, likewise.
    #[test]
    fn exchange_tracker_follows_valid_http2(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let conv = h2_conversation(&mut rng);
        let (want, got, t) = conv.play(&mut rng, seed % 2 == 1);
        prop_assert_eq!(&got, &want);
        let ends = want.iter().filter(|e| matches!(e, Event::Ended(_))).count() as u32;
        let starts = want.iter().filter(|e| matches!(e, Event::Started(_))).count() as u32;
        prop_assert_eq!(t.in_flight(), starts - ends);
        prop_assert_eq!(t.protocol(), graceful_drain::exchange::Protocol::Http2);
    }
}

// --- Whole lines against byte by byte ---------------------------------------------------------

/// A start line, valid or nearly so (each corruption is one the parser must refuse or accept
/// the same way whatever the split).
fn near_start_line(rng: &mut Rng, req: bool) -> Vec<u8> {
    // Mostly valid (so that bodies, HEAD, CONNECT and interim responses are reached), else
    // one of the near misses.
    let mut choose = |ok: &[&'static str], bad: &[&'static str]| -> &'static str {
        if rng.one_in(12) {
            bad[rng.below(bad.len())]
        } else {
            ok[rng.below(ok.len())]
        }
    };
    let mut l = if req {
        let method = choose(
            &["GET", "HEAD", "CONNECT", "POST"],
            &["HEADX", "", "G\x01T", "CONNEC"],
        );
        let target = choose(&["/", "/healthz", "*", "example.com:443"], &["", "/a b"]);
        let version = choose(
            &["HTTP/1.1", "HTTP/1.0"],
            &["HTTP/1.x", "HTTP/2.0", "HTTP/1.1 ", "HTTP/1.1\r"],
        );
        format!("{method} {target} {version}").into_bytes()
    } else {
        let version = choose(&["HTTP/1.1", "HTTP/1.0"], &["HTTP/1.", "HTTPS/1.1"]);
        let code = choose(
            &["200", "204", "304", "100", "101", "103", "404"],
            &["2x0", "20"],
        );
        let tail = choose(&["", " OK", " ", " Continue\r"], &["\r", "x"]);
        format!("{version} {code}{tail}").into_bytes()
    };
    if rng.one_in(16) {
        let at = rng.below(l.len() + 1);
        l.insert(at, *rng.pick(&[b' ', b'\r', b'\t', 0x7f, b':']));
    }
    l
}

/// A header line (without its LF): mostly one of the five names the parser reads, in any case,
/// with a value that fits it (and the body length it sets, if it does); sometimes a value that
/// does not, a near miss of a name, an obs-fold, or junk.
fn near_header_line(rng: &mut Rng, body: &mut Body) -> Vec<u8> {
    let bad = rng.one_in(8);
    let (name, value): (String, String) = match rng.below(8) {
        0 | 1 => {
            let n = match *body {
                Body::Length(m) => m,
                _ => rng.below(9),
            };
            let v = if bad {
                rng.pick(&["", "abc", "1,2", "99999999999999999999999", ","])
                    .to_string()
            } else {
                *body = Body::Length(n);
                rng.pick(&["{n}", " {n}", "{n} ", "{n}, {n}"])
                    .replace("{n}", &n.to_string())
            };
            (rng.case("content-length"), v)
        }
        2 => {
            let v = if bad {
                rng.pick(&["chunked, gzip", "", "gzip"]).to_string()
            } else {
                *body = Body::Chunked;
                rng.pick(&["chunked", " gzip, chunked", "Chunked "])
                    .to_string()
            };
            (rng.case("transfer-encoding"), v)
        }
        3 => {
            let v = rng.pick(&[
                " close",
                "keep-alive",
                "foo, close",
                "Close\r",
                "upgrade",
                "",
                "closed",
            ]);
            (rng.case("connection"), v.to_string())
        }
        4 => {
            let v = rng.pick(&[" h2load nghttp2/1.52.0  ", "\t kube-probe/1.30\r", "", " x"]);
            (rng.case("user-agent"), v.to_string())
        }
        5 => (
            rng.case("upgrade"),
            rng.pick(&[" websocket", "", " h2c"]).to_string(),
        ),
        6 => {
            let n = rng.pick(&[
                "content-lengthx",
                "content-type",
                "connectio",
                "c",
                "t",
                "u",
                "te",
                "upgrade-insecure-requests",
                "content-length ",
                " connection",
                "\tuser-agent",
                "host",
                "date",
                "server",
            ]);
            (n.to_string(), " 7".to_string())
        }
        _ => (
            String::from_utf8_lossy(&rng.bytes(4)).into_owned(),
            String::new(),
        ),
    };
    let mut l = format!("{name}:{value}").into_bytes();
    if rng.one_in(16) {
        l = b" folded".to_vec();
    }
    if rng.one_in(16) {
        let at = rng.below(l.len() + 1);
        l.insert(at, *rng.pick(b"\r ,:"));
    }
    l
}

/// The body a head announced (the last valid announcement wins, as far as the test cares).
#[derive(Clone, Copy)]
enum Body {
    None,
    Length(usize),
    Chunked,
}

/// A head (a start line, header lines and the empty line, each ended by CRLF or a bare LF)
/// and the body it announced.
fn near_message(rng: &mut Rng, req: bool) -> Vec<u8> {
    let mut h = Vec::new();
    if req && rng.one_in(8) {
        h.extend_from_slice(b"\r\n");
    }
    let end = |h: &mut Vec<u8>, rng: &mut Rng| {
        h.extend_from_slice(if rng.one_in(5) { b"\n" } else { b"\r\n" })
    };
    h.extend(near_start_line(rng, req));
    end(&mut h, rng);
    let mut body = Body::None;
    if !req && !rng.one_in(6) {
        // Most responses say their length (else their body runs until the close).
        h.extend_from_slice(b"content-length: 3\r\n");
        body = Body::Length(3);
    }
    for _ in 0..rng.below(6) {
        h.extend(near_header_line(rng, &mut body));
        end(&mut h, rng);
    }
    if rng.one_in(20) {
        h.extend_from_slice(b"\rx");
    }
    end(&mut h, rng);
    match body {
        Body::None => {}
        Body::Length(n) => h.extend(rng.bytes(n)),
        Body::Chunked => {
            let n = rng.below(5) + 1;
            h.extend(format!("{n:x}{}\r\n", if rng.one_in(3) { ";ext=1" } else { "" }).bytes());
            h.extend(rng.bytes(n));
            h.extend_from_slice(b"\r\n0\r\n");
            if rng.one_in(3) {
                h.extend_from_slice(b"trailer: x\r\n");
            }
            h.extend_from_slice(b"\r\n");
        }
    }
    h
}

/// What a feed reports: every event with the state the tracker shows at it, then the final state.
fn trace(
    t: &mut Tracker,
    msgs: &[(bool, Vec<u8>)],
    cut: &mut dyn FnMut(usize) -> usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut on = |e: Event, t: &Tracker| {
        out.push(format!(
            "{e:?} in_flight={} {:?} close={} tunnel={} partial={} hints={:?}",
            t.in_flight(),
            t.protocol(),
            t.will_close(),
            t.tunnel(),
            t.partial(),
            t.hints()
        ))
    };
    for (client, bytes) in msgs {
        let mut at = 0;
        while at < bytes.len() {
            let to = (at + cut(bytes.len() - at)).min(bytes.len());
            if *client {
                t.client(&bytes[at..to], &mut on);
            } else {
                t.server(&bytes[at..to], &mut on);
            }
            at = to;
        }
    }
    out.push(format!(
        "end in_flight={} {:?} close={} tunnel={} partial={} hints={:?} await={}",
        t.in_flight(),
        t.protocol(),
        t.will_close(),
        t.tunnel(),
        t.partial(),
        t.hints(),
        t.awaiting_response_head()
    ));
    out
}

proptest! {
    #![proptest_config(cfg())]

    /// Heads valid and not, with bodies, both directions: fed whole (lines taken whole), byte
    /// by byte (the byte-by-byte parse only) and in random splits, the tracker reports the same
    /// events, in the same states, and ends in the same state.
    #[test]
    fn exchange_tracker_is_the_same_whole_and_byte_by_byte(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let mut msgs = Vec::new();
        for _ in 0..1 + rng.below(4) {
            msgs.push((true, near_message(&mut rng, true)));
            if rng.one_in(4) {
                continue;
            }
            msgs.push((false, near_message(&mut rng, false)));
        }
        let whole = trace(&mut Tracker::new(), &msgs, &mut |left| left);
        let bytewise = trace(&mut Tracker::new(), &msgs, &mut |_| 1);
        prop_assert_eq!(&whole, &bytewise, "{:?}", msgs.iter().map(|(c, b)| (c, String::from_utf8_lossy(b))).collect::<Vec<_>>());
        let mut split = Rng::new(seed.rotate_left(17));
        let split = trace(&mut Tracker::new(), &msgs, &mut |left| 1 + split.below(left.min(40)));
        prop_assert_eq!(&whole, &split);
    }

}
