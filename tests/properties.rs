//! Property tests (bounded: a fixed number of cases per property) over every parser that takes
//! operator or network input: durations, both configs, control routing, the admin's answers.
//! None may panic, and what they accept must satisfy the documented invariants.

use graceful_drain::admin::{dechunk, parse_status};
use graceful_drain::config::{
    format_duration, parse_duration, BootstrapConfig, FilterConfig, MAX_DURATION,
};
use graceful_drain::control::{route, Route};
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

/// A field a user could have written: a known one, or an unknown key present in the document.
fn names_a_field(field: &str, known: &[&str], raw: &[u8]) -> bool {
    known.contains(&field)
        || raw
            .windows(field.len() + 2)
            .any(|w| w == format!("\"{field}\"").as_bytes())
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
    fn bootstrap_config_never_panics_on_bytes(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Err(e) = BootstrapConfig::parse(&raw) {
            prop_assert!(names_a_field(&e.field, &ALL_BOOTSTRAP_FIELDS, &raw), "{}", e);
            prop_assert!(e.to_string().starts_with("invalid graceful_drain bootstrap config: field `"));
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
    fn filter_config_never_panics_on_bytes(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
        let r = FilterConfig::parse_with(&raw, |_| None, |_| Err(std::io::ErrorKind::NotFound.into()));
        if let Err(e) = r {
            prop_assert!(names_a_field(&e.field, &ALL_FILTER_FIELDS, &raw), "{}", e);
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
