//! docs/reference.md is written from the code, and this test fails when the page differs from
//! what the code says: every setting (`config::settings::SETTINGS`, held to the parsers by its
//! unit tests), every stat (`Stat::ALL`, `Gauge::ALL`, `LabelledGauge::ALL`, the lists the module
//! defines its stats from, each with its `doc()`), every `/drain/status` field
//! (`STATUS_FIELDS`, held below to a serialised status path by path) and every log line the
//! module writes at info or above (read from the `log::` calls in `src/`).
//!
//! `make reference` rewrites the page (this test with `GRACEFUL_DRAIN_WRITE_REFERENCE=1`).

use graceful_drain::config::settings::{Scope, SETTINGS};
use graceful_drain::connections::{IdleTold, LongLivedReport};
use graceful_drain::engine::shared::{
    AgeBuckets, OutcomeReport, SentAway, SettingsReport, Status, TableReport, STATUS_FIELDS,
};
use graceful_drain::host::extension::{Gauge, LabelledGauge, Stat, StatDoc};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A table cell: pipes escaped, code spans kept whole.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// `text` as one code span, however many backticks it holds.
fn code(text: &str) -> String {
    let mut fence = String::from("`");
    while text.contains(fence.as_str()) {
        fence.push('`');
    }
    if fence.len() > 1 || text.starts_with('`') || text.ends_with('`') {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

fn settings() -> String {
    let mut out = String::new();
    for scope in Scope::ALL {
        let _ = writeln!(out, "\n### {}\n", upper_first(scope.title()));
        out.push_str("| setting | type | default | what it does | bounds, refusals |\n");
        out.push_str("|---|---|---|---|---|\n");
        for s in SETTINGS.iter().filter(|s| s.scope == scope) {
            let default = match s.default {
                None => "refused".to_string(),
                Some("null") => "unset".to_string(),
                Some(d) => code(d),
            };
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                s.name,
                s.kind,
                default,
                cell(s.what),
                cell(s.bounds)
            );
        }
    }
    out
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn stats() -> String {
    let mut rows: Vec<(String, &str, StatDoc)> = Vec::new();
    for g in LabelledGauge::ALL {
        let name = format!("{}{{{}}}", g.name(), g.labels().join(","));
        rows.push((name, "gauge", g.doc()));
    }
    for g in Gauge::ALL {
        rows.push((g.name().to_string(), "gauge", g.doc()));
    }
    for s in Stat::ALL {
        rows.push((s.name().to_string(), "counter", s.doc()));
    }
    let mut out =
        String::from("\n| stat | type | unit | moves in | meaning |\n|---|---|---|---|---|\n");
    for (name, kind, d) in rows {
        let _ = writeln!(
            out,
            "| `{name}` | {kind} | {} | {} | {} |",
            d.unit,
            d.modes,
            cell(d.what)
        );
    }
    out
}

fn status_fields() -> String {
    let mut out = String::from("\n| field | type | meaning |\n|---|---|---|\n");
    for f in STATUS_FIELDS {
        let _ = writeln!(out, "| `{}` | {} | {} |", f.path, f.kind, cell(f.meaning));
    }
    out
}

/// One `log::` call at info or above.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LogLine {
    file: String,
    level: String,
    text: String,
}

/// Files of `src/` that are not the module a release runs: tests, test doubles and the test-only
/// features' code.
fn release_file(rel: &str) -> bool {
    let test_only = [
        "tests.rs",
        "loom_tests.rs",
        "model.rs",
        "fake_envoy.rs",
        "cross_check.rs",
        "faults.rs",
    ];
    !rel.split('/')
        .any(|c| c == "tests" || c == "props" || c == "testing")
        && !test_only.iter().any(|t| rel.ends_with(t))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text without its `#[cfg(test)] mod … { … }` blocks (their braces counted).
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
        if lines[i].trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            let mut depth = 0i64;
            let mut j = i + 1;
            loop {
                depth +=
                    lines[j].matches('{').count() as i64 - lines[j].matches('}').count() as i64;
                j += 1;
                if depth <= 0 || j >= lines.len() {
                    break;
                }
            }
            i = j;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

/// The Rust string literal starting at `s` (after its opening quote): its value, with `\`
/// line continuations joined as the compiler joins them.
fn string_literal(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                '\n' => {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                }
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// `{}`, `{:?}`, `{name}`, `{name:?}` as `<…>` / `<name>`; `{{`, `}}` as braces. A named
/// argument bound in the same file to a string literal (`let why = "…"`, `const X: &str = "…"`)
/// is that literal.
fn placeholders(text: &str, file: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let r = &rest[i..];
        if r.starts_with("{{") || r.starts_with("}}") {
            out.push_str(&r[..1]);
            rest = &r[2..];
            continue;
        }
        if let Some(after) = r.strip_prefix('}') {
            out.push('}');
            rest = after;
            continue;
        }
        let end = r.find('}').unwrap_or(r.len() - 1);
        let name = r[1..end].split(':').next().unwrap_or("");
        out.push_str(&bound_literal(name, file).unwrap_or_else(|| {
            if name.is_empty() {
                "<…>".to_string()
            } else {
                format!("<{name}>")
            }
        }));
        rest = &r[end + 1..];
    }
    out.push_str(rest);
    out
}

fn bound_literal(name: &str, file: &str) -> Option<String> {
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    for binding in [
        format!("let {name} = \""),
        format!("const {name}: &str = \""),
    ] {
        if let Some(i) = file.find(&binding) {
            return string_literal(&file[i + binding.len()..]);
        }
    }
    // `let line = path::to::some_fn(...)`: the text that function formats last.
    let call = file.split(&format!("let {name} = ")).nth(1)?;
    let callee = call.split('(').next()?.rsplit("::").next()?.trim();
    if callee.is_empty() || !callee.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let mut files = Vec::new();
    rs_files(&repo().join("src"), &mut files);
    files.iter().find_map(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        let body = text.split(&format!("fn {callee}(")).nth(1)?;
        let body = body.split("\nfn ").next()?.split("\npub fn ").next()?;
        let at = body.rfind("format!(\n")?;
        let literal = body[at..].split_once('"')?.1;
        Some(placeholders(&string_literal(literal)?, &text))
    })
}

fn log_lines() -> Vec<LogLine> {
    let src = repo().join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut found = Vec::new();
    for p in files {
        let rel = p
            .strip_prefix(repo())
            .unwrap()
            .to_string_lossy()
            .to_string();
        if !release_file(&rel) {
            continue;
        }
        let text = without_test_modules(&std::fs::read_to_string(&p).unwrap());
        for (mac, level) in [
            ("log::info!(", "info"),
            ("log::warn!(", "warn"),
            ("log::error!(", "error"),
            ("log::log!(", ""),
        ] {
            let mut at = 0;
            while let Some(i) = text[at..].find(mac) {
                let start = at + i + mac.len();
                at = start;
                let mut args = text[start..].trim_start();
                let level = if level.is_empty() {
                    let comma = args.find(',').expect("log::log! has a level");
                    let expr = args[..comma].trim();
                    args = args[comma + 1..].trim_start();
                    assert!(
                        expr.contains("lifecycle"),
                        "{rel}: log::log! at level {expr:?}: teach tests/reference.rs its level"
                    );
                    "info or warn (`lifecycle_log_level`)"
                } else {
                    level
                };
                let literal = args
                    .strip_prefix('"')
                    .and_then(string_literal)
                    .unwrap_or_else(|| panic!("{rel}: a {mac} whose message is no literal"));
                // The test-only `cross-check` feature's lines: never in a release.
                if literal.starts_with("graceful_drain: cross-check:") {
                    continue;
                }
                found.push(LogLine {
                    file: rel.clone(),
                    level: level.to_string(),
                    text: placeholders(&literal, &text),
                });
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

fn logs() -> String {
    let mut by_file: BTreeMap<String, Vec<LogLine>> = BTreeMap::new();
    for l in log_lines() {
        by_file.entry(l.file.clone()).or_default().push(l);
    }
    let mut out = String::new();
    for (file, lines) in by_file {
        let _ = writeln!(out, "\n[`{file}`](../{file}):\n");
        for l in lines {
            let text = l.text.strip_prefix("graceful_drain: ").unwrap_or(&l.text);
            let _ = writeln!(out, "- **{}**: {}", l.level, code(text));
        }
    }
    out
}

/// How a refused config is logged: `ConfigError`'s `Display` (src/config/mod.rs).
fn config_error_line() -> String {
    let file = std::fs::read_to_string(repo().join("src/config/mod.rs")).unwrap();
    let at = file
        .find("\"invalid graceful_drain ")
        .expect("src/config/mod.rs writes `invalid graceful_drain ... config`");
    placeholders(&string_literal(&file[at + 1..]).unwrap(), &file)
}

/// The page as the code says it.
fn reference() -> String {
    let mut page = String::from(
        "# Reference\n\n\
         <!-- Written by `make reference` from the code; tests/reference.rs fails when it differs. \
         Do not edit by hand. -->\n\n\
         Every setting, stat, `/drain/status` field and log line, written from the code.\n\n\
         ## Settings\n\n\
         Each config is JSON in a `google.protobuf.StringValue`; an empty string means every \
         default; an unknown field is refused. A refused value stops Envoy at start with a log \
         line naming the field. Durations: `\"5s\"`, `\"1.5s\"`, `\"250ms\"`.\n",
    );
    page.push_str(&settings());
    page.push_str(
        "\n## Stats\n\n\
         Each stat is `graceful_drain.<name>` in Envoy (the bootstrap extension's \
         `metrics_namespace`), `envoy_graceful_drain_<name>` in Prometheus. Every one exists \
         from the start (counters at 0), in every mode. \"Moves in\" names the [modes](modes.md#the-three-modes) in which \
         it can change.\n",
    );
    page.push_str(&stats());
    page.push_str(
        "\n## Status fields\n\n\
         `GET /drain/status` on the control listener, `GET /graceful_drain/status` on the admin, \
         and the answer of `/drain` return this JSON object.\n",
    );
    page.push_str(&status_fields());
    page.push_str(
        "\n## Log lines\n\n\
         Every line the module writes at info or above, by source file, without the \
         `graceful_drain: ` each begins with. `<name>` and `<…>` stand \
         for values filled in at run time. Lines at `info or warn` follow `lifecycle_log_level`. \
         A line that is `<e>` alone is an error's own text; a refused config reads ",
    );
    page.push_str(&code(&config_error_line()));
    page.push_str(".\n");
    page.push_str(&logs());
    page
}

#[test]
fn the_reference_page_is_what_the_code_says() {
    let path = repo().join("docs/reference.md");
    let want = reference();
    if std::env::var_os("GRACEFUL_DRAIN_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(have.lines().count().min(want.lines().count()));
        panic!(
            "docs/reference.md differs from the code from line {}:\n  page: {:?}\n  code: {:?}\n\
             run `make reference` and commit the page",
            first + 1,
            have.lines().nth(first),
            want.lines().nth(first)
        );
    }
}

/// A status with every field present (no `null`), and one as a fresh module reports it.
fn full_status() -> Status {
    Status {
        module_version: "0.0.0",
        envoy: Some("1.40"),
        envoy_release: Some("1.40.0".into()),
        envoy_untested: false,
        surface: "full",
        state: "drained",
        ready: false,
        trigger: Some("sigterm"),
        active_requests: 0,
        accounting_error: false,
        envoy_active_requests: Some(0),
        in_flight_by_age: AgeBuckets {
            under_1s: 0,
            from_1s_to_10s: 0,
            over_10s: 0,
        },
        drain_elapsed_ms: Some(1),
        since_last_request_start_ms: Some(1),
        oldest_request_age_ms: Some(1),
        requests_served_while_draining: 0,
        connections_sent_away: SentAway {
            http1: 0,
            http2: 0,
            other: 0,
        },
        module_errors: 0,
        admin_address_check: "recognised",
        health_checks_seen: 0,
        not_work_requests: 0,
        request_table: TableReport {
            workers: 0,
            slots: 0,
            bytes: 0,
            own_wakers: 0,
        },
        idle_connections_told: IdleTold::default(),
        long_lived_streams: LongLivedReport::default(),
        outcome: Some(OutcomeReport {
            timed_out: false,
            requests_cut: 0,
            duration_ms: 1,
        }),
        settings: Some(SettingsReport {
            min_drain_duration: "5s".into(),
            quiet_period: "1s".into(),
            drain_timeout: "25s".into(),
        }),
    }
}

fn json_paths(v: &serde_json::Value, prefix: &str, out: &mut Vec<(String, &'static str)>) {
    let kind = match v {
        serde_json::Value::Object(_) => "object",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "integer",
        serde_json::Value::Null => "null",
        serde_json::Value::Array(_) => "array",
    };
    if !prefix.is_empty() {
        out.push((prefix.to_string(), kind));
    }
    if let serde_json::Value::Object(m) = v {
        for (k, v) in m {
            let p = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            json_paths(v, &p, out);
        }
    }
}

/// The table lists every field of the serialised status and no other, with its JSON type; and a
/// field `null` in a fresh module's status says `or null`.
#[test]
fn the_status_table_is_the_serialised_status_field_by_field() {
    let full: serde_json::Value = serde_json::from_str(&full_status().to_json()).unwrap();
    let mut paths = Vec::new();
    json_paths(&full, "", &mut paths);
    paths.sort();
    let mut listed: Vec<(String, &str)> = STATUS_FIELDS
        .iter()
        .map(|f| (f.path.to_string(), f.kind.trim_end_matches(" or null")))
        .collect();
    listed.sort();
    assert_eq!(listed, paths, "STATUS_FIELDS against a serialised Status");

    let mut fresh = full_status();
    fresh.envoy = None;
    fresh.envoy_release = None;
    fresh.trigger = None;
    fresh.envoy_active_requests = None;
    fresh.drain_elapsed_ms = None;
    fresh.since_last_request_start_ms = None;
    fresh.oldest_request_age_ms = None;
    fresh.outcome = None;
    fresh.settings = None;
    let fresh: serde_json::Value = serde_json::from_str(&fresh.to_json()).unwrap();
    let mut paths = Vec::new();
    json_paths(&fresh, "", &mut paths);
    for (path, kind) in paths {
        let f = STATUS_FIELDS.iter().find(|f| f.path == path).unwrap();
        assert_eq!(
            kind == "null",
            f.kind.ends_with(" or null"),
            "{path}: {kind} in a status, {} in the table",
            f.kind
        );
    }
}

/// Stats: one line each, named once, said short.
#[test]
fn every_stat_has_one_short_line() {
    let mut names: Vec<&str> = Stat::ALL.iter().map(|s| s.name()).collect();
    names.extend(Gauge::ALL.iter().map(|g| g.name()));
    names.extend(LabelledGauge::ALL.iter().map(|g| g.name()));
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "a stat named twice");
    let docs = Stat::ALL
        .iter()
        .map(|s| s.doc())
        .chain(Gauge::ALL.iter().map(|g| g.doc()))
        .chain(LabelledGauge::ALL.iter().map(|g| g.doc()));
    for d in docs {
        assert!(d.what.split_whitespace().count() <= 25, "{d:?}");
    }
    for f in STATUS_FIELDS {
        assert!(f.meaning.split_whitespace().count() <= 25, "{f:?}");
    }
}

/// The scan finds the lines an operator sees at a drain (so it reads the calls it should).
#[test]
fn the_log_scan_finds_the_lifecycle_lines() {
    let lines = log_lines();
    for want in [
        "graceful_drain: drain started (trigger=",
        "graceful_drain: drain completed in ",
        "graceful_drain: releasing Envoy's exit",
        "graceful_drain: drain engine loaded (graceful_drain ",
    ] {
        assert!(
            lines.iter().any(|l| l.text.starts_with(want)),
            "no log line starts with {want:?}"
        );
    }
    assert!(
        lines.iter().all(|l| !l.text.contains('{')),
        "a placeholder left unread"
    );
}
