//! The docs cannot rot: every relative link in README.md and docs/*.md resolves (files, and
//! anchors into Markdown pages), and every YAML or JSON snippet in them is checked. A snippet says
//! how on the line before its fence, in an HTML comment (`<!-- check: KIND -->`, invisible on the
//! rendered page); a YAML or JSON snippet without one fails the test. Kinds:
//! - `envoy-bootstrap-extension`, `envoy-http-filter`, `envoy-network-filter`: the fragment is
//!   wrapped into a minimal bootstrap and validated by the real Envoy with the module
//!   (`envoy --mode validate`); the same fragment with an unknown field in the module's JSON must
//!   be refused, so the module really parsed it;
//! - `status-json`: every key of the example is a key of a real `/drain/status`;
//! - `kubernetes`: the Kubernetes schemas (kubernetes-validate);
//! - `file PATH`: the snippet's lines appear, in order and together, in PATH, a file a test loads.

mod common;

use common::clients::raw_exchange;
use common::envoy::{module_dir, validate_config, Envoy, Options};
use common::repo_root;
use common::tools::{kubernetes_validate, temp_file};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo_root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 8, "docs/ has {} pages", docs.len());
    pages.extend(docs);
    pages
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo_root())
        .unwrap_or(p)
        .display()
        .to_string()
}

/// A fenced code block: its info string, its text, the line of its opening fence (1-based) and
/// the `check:` comment on the line before it, if any.
struct Snippet {
    lang: String,
    text: String,
    line: usize,
    check: Option<String>,
}

/// The page's fenced blocks, and its prose with the blocks and inline code blanked out (where
/// links are looked for).
fn split(page: &str) -> (Vec<Snippet>, String) {
    let mut snippets = Vec::new();
    let mut prose = String::new();
    let mut open: Option<Snippet> = None;
    let mut previous = "";
    for (i, line) in page.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match open.take() {
            Some(s) if fence => snippets.push(s),
            Some(mut s) => {
                s.text.push_str(line);
                s.text.push('\n');
                open = Some(s);
            }
            None if fence => {
                let check = previous
                    .trim()
                    .strip_prefix("<!-- check:")
                    .and_then(|c| c.strip_suffix("-->"))
                    .map(|c| c.trim().to_string());
                open = Some(Snippet {
                    lang: line.trim_start().trim_start_matches('`').trim().to_string(),
                    text: String::new(),
                    line: i + 1,
                    check,
                });
            }
            None => {
                // Inline code spans are not links.
                let mut in_code = false;
                for c in line.chars() {
                    if c == '`' {
                        in_code = !in_code;
                    }
                    prose.push(if in_code || c == '`' { ' ' } else { c });
                }
            }
        }
        if open.is_none() || fence {
            prose.push('\n');
        }
        previous = line;
    }
    assert!(open.is_none(), "a code fence is never closed");
    (snippets, prose)
}

/// The targets of `[text](target)` and `![alt](target)` links in prose.
fn link_targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_string());
        }
    }
    out
}

/// GitHub's anchors for a page's headings: lowercased, punctuation dropped, spaces to hyphens,
/// `-1`, `-2` ... for repeats.
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut in_fence = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim().to_lowercase();
        let slug: String = text
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// What is wrong with the relative links of one page (empty: nothing).
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let (_, prose) = split(text);
    let dir = page.parent().unwrap();
    let mut broken = Vec::new();
    for target in link_targets(&prose) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        if path.is_empty() {
            if !anchors(text).contains(anchor.unwrap_or("")) {
                broken.push(format!("{}: {target}: no such heading", rel(page)));
            }
            continue;
        }
        let file = dir.join(path);
        if !file.exists() {
            broken.push(format!("{}: {target}: no such file", rel(page)));
            continue;
        }
        if let Some(a) = anchor {
            if file.extension().is_some_and(|x| x == "md") {
                let page_text = std::fs::read_to_string(&file).unwrap();
                if !anchors(&page_text).contains(a) {
                    broken.push(format!("{}: {target}: no such heading", rel(page)));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        links += link_targets(&split(&text).1).len();
        broken.extend(broken_links(&page, &text));
    }
    assert!(
        links > 30,
        "only {links} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // The check does catch a missing file, a missing heading, and keeps links in code out.
    let page = repo_root().join("docs/example.md");
    let bad = "See [a](nowhere.md), [b](modes.md#no-such-heading), [c](#nor-here).\n\
               `[in code](nowhere.md)`\n```\n[in a block](nowhere.md)\n```\n# Real heading\n\
               [d](#real-heading) [e](modes.md#gateways-whose-listeners-come-from-a-control-plane-bootstrap-only-mode)\n";
    let found = broken_links(&page, bad);
    assert_eq!(found.len(), 3, "{found:?}");
}

#[test]
fn anchors_follow_githubs_rules() {
    let a = anchors("# Compatibility: Envoy 1.38, 1.39, 1.40\n## What `tests/rollout.rs` shows\n## Tests\n## Tests\n");
    let want: BTreeSet<String> = [
        "compatibility-envoy-138-139-140",
        "what-testsrolloutrs-shows",
        "tests",
        "tests-1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(a, want);
}

/// The README's two commands stay first: `make run` and `make test`, as the Makefile has them.
#[test]
fn readme_starts_with_the_two_commands_and_stays_short() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let (snippets, _) = split(&readme);
    let first = &snippets[0];
    assert_eq!(first.lang, "sh");
    let commands: Vec<&str> = first
        .text
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .collect();
    assert_eq!(commands, ["make run", "make test"]);
    let makefile = std::fs::read_to_string(repo_root().join("Makefile")).unwrap();
    for target in ["run:", "test:"] {
        assert!(
            makefile.lines().any(|l| l.starts_with(target)),
            "no {target}"
        );
    }
    let lines = readme.lines().count();
    assert!(
        lines < 200,
        "README.md has {lines} lines: keep it a front door"
    );
}

const ADMIN: &str =
    "admin:\n  address: { socket_address: { address: 127.0.0.1, port_value: 9901 } }\n";

const BOOTSTRAP_EXTENSION: &str = r#"bootstrap_extensions:
- name: envoy.bootstrap.dynamic_modules
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.bootstrap.dynamic_modules.v3.DynamicModuleBootstrapExtension
    dynamic_module_config: { name: graceful_drain, do_not_close: true, metrics_namespace: graceful_drain }
    extension_name: graceful_drain
    extension_config:
      "@type": type.googleapis.com/google.protobuf.StringValue
      value: '{"admin_address": "127.0.0.1:9901"}'
"#;

/// A data listener whose network filters are `network` (YAML list items at column 0) followed by
/// an HTTP connection manager whose HTTP filters are `http` followed by the router.
fn listener(network: &str, http: &str) -> String {
    let indent = |text: &str, n: usize| -> String {
        text.lines()
            .map(|l| format!("{}{l}\n", " ".repeat(n)))
            .collect()
    };
    format!(
        r#"static_resources:
  listeners:
  - name: data
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 10000 }} }}
    filter_chains:
    - filters:
{}      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: data
          route_config: {{ virtual_hosts: [ {{ name: all, domains: ["*"], routes: [ {{ match: {{ prefix: "/" }}, direct_response: {{ status: 200 }} }} ] }} ] }}
          http_filters:
{}          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
"#,
        indent(network, 6),
        indent(http, 10)
    )
}

/// The fragment as a whole bootstrap, for `envoy --mode validate`.
fn wrap(kind: &str, fragment: &str) -> String {
    match kind {
        "envoy-bootstrap-extension" => format!("{ADMIN}{fragment}"),
        "envoy-http-filter" => format!("{ADMIN}{BOOTSTRAP_EXTENSION}{}", listener("", fragment)),
        "envoy-network-filter" => format!("{ADMIN}{BOOTSTRAP_EXTENSION}{}", listener(fragment, "")),
        other => panic!("no wrapper for {other}"),
    }
}

fn check_envoy_fragment(kind: &str, s: &Snippet, at: &str) {
    assert!(
        s.lang == "yaml",
        "{at}: an Envoy fragment must be a yaml block"
    );
    let (ok, log) = validate_config(&wrap(kind, &s.text), module_dir());
    assert!(ok && log.contains("OK"), "{at} does not validate:\n{log}");
    assert!(
        log.contains("graceful_drain: drain engine loaded"),
        "{at}: module not loaded:\n{log}"
    );
    // The module read the fragment's own config: an unknown field in it is refused.
    assert!(s.text.contains("value: '{"), "{at}: no module config found");
    let broken = s
        .text
        .replacen("value: '{", "value: '{\"no_such_field\": 1, ", 1);
    let (ok, log) = validate_config(&wrap(kind, &broken), module_dir());
    assert!(
        !ok && log.contains("no_such_field"),
        "{at}: an unknown field was not refused:\n{log}"
    );
}

/// Every key path (`a.b`) of a JSON value.
fn key_paths(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let serde_json::Value::Object(m) = v {
        for (k, child) in m {
            let p = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            key_paths(child, &p, out);
            out.insert(p);
        }
    }
}

async fn check_status_json(s: &Snippet, at: &str, real: &serde_json::Value) {
    let example: serde_json::Value =
        serde_json::from_str(&s.text).unwrap_or_else(|e| panic!("{at}: not JSON: {e}"));
    let mut shown = BTreeSet::new();
    key_paths(&example, "", &mut shown);
    let mut exported = BTreeSet::new();
    key_paths(real, "", &mut exported);
    assert!(shown.len() >= 10, "{at}: {shown:?}");
    let unknown: Vec<_> = shown.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "{at}: keys /drain/status does not have: {unknown:?}\nreal: {real}"
    );
}

fn check_same_as(path: &str, s: &Snippet, at: &str) {
    let file = std::fs::read_to_string(repo_root().join(path))
        .unwrap_or_else(|e| panic!("{at}: {path}: {e}"));
    // Compared dedented: a snippet may show a nested part of the file from column 0.
    let dedent = |lines: &[&str]| -> Vec<String> {
        let indent = lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0);
        lines
            .iter()
            .map(|l| l.get(indent..).unwrap_or("").to_string())
            .collect()
    };
    let want = dedent(&s.text.lines().collect::<Vec<_>>());
    let have: Vec<&str> = file.lines().collect();
    assert!(
        !want.is_empty() && have.windows(want.len()).any(|w| dedent(w) == want),
        "{at}: the snippet is not in {path} as it stands"
    );
    // ... and that file is one a test reads.
    let tests = std::fs::read_dir(repo_root().join("tests")).unwrap();
    let read_by_a_test = tests.map(|e| e.unwrap().path()).any(|p| {
        p.extension().is_some_and(|x| x == "rs")
            && std::fs::read_to_string(&p).unwrap().contains(path)
    });
    assert!(read_by_a_test, "{at}: no test reads {path}");
}

#[tokio::test]
async fn every_yaml_and_json_snippet_is_checked() {
    // A real status to hold the documented one against.
    let envoy = Envoy::start(Options::default()).await;
    let real = envoy.drain_status().await;
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for s in split(&text).0 {
            if !["yaml", "yml", "json"].contains(&s.lang.as_str()) {
                continue;
            }
            let at = format!("{}:{}", rel(&page), s.line);
            let check = s.check.clone().unwrap_or_else(|| {
                panic!(
                    "{at}: a {} snippet without a <!-- check: ... --> line",
                    s.lang
                )
            });
            let (kind, arg) = check.split_once(' ').unwrap_or((check.as_str(), ""));
            match kind {
                "envoy-bootstrap-extension" | "envoy-http-filter" | "envoy-network-filter" => {
                    check_envoy_fragment(kind, &s, &at)
                }
                "status-json" => check_status_json(&s, &at, &real).await,
                "kubernetes" => {
                    let (_dir, f) = temp_file("docs", "snippet.yaml", &s.text);
                    let (ok, log) = kubernetes_validate(&f);
                    assert!(ok && log.contains("passed"), "{at}:\n{log}");
                }
                "file" => check_same_as(arg.trim(), &s, &at),
                other => panic!("{at}: unknown check {other:?}"),
            }
            checked += 1;
        }
    }
    // README's minimal bootstrap and the three steps of docs/configuration.md, the status JSON.
    assert!(checked >= 5, "only {checked} snippets checked");
}

/// docs/troubleshooting.md on HAProxy: its default `option httpchk` (`OPTIONS / HTTP/1.0`) gets
/// 426 from Envoy, and the check the page gives gets 200 from the control listener's `/ready`.
#[tokio::test]
async fn haproxy_checks_get_what_troubleshooting_says() {
    let page = std::fs::read_to_string(repo_root().join("docs/troubleshooting.md")).unwrap();
    let send = page
        .lines()
        .find_map(|l| l.strip_prefix("http-check send "))
        .expect("an http-check send line");
    let words: Vec<&str> = send.split_whitespace().collect();
    let after = |key: &str| -> &str {
        let i = words
            .iter()
            .position(|w| *w == key)
            .unwrap_or_else(|| panic!("{key}"));
        words[i + 1]
    };
    let (meth, uri, ver) = (after("meth"), after("uri"), after("ver"));
    let host = words[words.iter().position(|w| *w == "hdr").unwrap() + 2];
    let envoy = Envoy::start(Options::default()).await;
    let status_line = |answer: Vec<u8>| -> String {
        String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let default_check = raw_exchange(envoy.control, b"OPTIONS / HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(status_line(default_check), "HTTP/1.1 426 Upgrade Required");
    // HAProxy closes its check connections (`Connection: close`).
    let documented = format!("{meth} {uri} {ver}\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let answer = raw_exchange(envoy.control, documented.as_bytes())
        .await
        .unwrap();
    assert_eq!(status_line(answer), "HTTP/1.1 200 OK", "{documented}");
}

/// The numbers of a text: digit groups joined across single spaces when the next group has three
/// digits (`81 586`), decimal points kept, signs dropped, versions and names (`HTTP/1.1`, `h2`)
/// left out. With each, its number of decimals.
fn numbers(text: &str) -> Vec<(f64, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        // Versions and names (HTTP/1.1, h2load) are not figures.
        if !chars[i].is_ascii_digit()
            || (i > 0 && (chars[i - 1].is_ascii_alphabetic() || chars[i - 1] == '/'))
        {
            i += 1;
            continue;
        }
        let mut digits = String::new();
        loop {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                digits.push(chars[i]);
                i += 1;
            }
            let group = chars.get(i + 1..i + 4).unwrap_or(&[]);
            let joined = chars.get(i) == Some(&' ')
                && !digits.contains('.')
                && group.len() == 3
                && group.iter().all(char::is_ascii_digit)
                && !chars
                    .get(i + 4)
                    .is_some_and(|c| c.is_ascii_digit() || *c == '.');
            if !joined {
                break;
            }
            i += 1;
        }
        let digits = digits.trim_end_matches('.');
        if let Ok(v) = digits.parse::<f64>() {
            out.push((v, digits.split_once('.').map_or(0, |(_, d)| d.len())));
        }
    }
    out
}

/// Every figure in the tables of docs/performance.md is one of bench/results/report.md (the
/// committed run), up to the page's rounding: a table edited by hand, or a bench re-run whose
/// report was committed without the page, fails here.
#[test]
fn performance_tables_come_from_the_committed_run() {
    let page = std::fs::read_to_string(repo_root().join("docs/performance.md")).unwrap();
    // The committed full run, and the focused run of connection mode with the tracker (its
    // figures and how they were taken: bench/results/tracker.md).
    let report = std::fs::read_to_string(repo_root().join("bench/results/report.md")).unwrap()
        + &std::fs::read_to_string(repo_root().join("bench/results/tracker.md")).unwrap();
    assert!(page.contains("bench/results/") && page.contains("commit a4b991a"));
    let measured: Vec<f64> = numbers(&report).into_iter().map(|(v, _)| v).collect();
    let in_report = |v: f64, decimals: usize| {
        let half = 0.5 * 10f64.powi(-(decimals as i32)) + 1e-9;
        measured.iter().any(|m| (m - v).abs() <= half)
    };
    let mut checked = 0;
    let mut missing = Vec::new();
    for row in page
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
    {
        // The first column names the case (5 000 clusters, one request per connection).
        let cells: Vec<&str> = row.split('|').skip(2).collect();
        for cell in cells {
            for (v, d) in numbers(cell) {
                checked += 1;
                if !in_report(v, d) {
                    missing.push(format!("{v} in: {row}"));
                }
            }
        }
    }
    assert!(checked > 200, "only {checked} figures found");
    assert!(
        missing.is_empty(),
        "figures not in bench/results/report.md nor tracker.md:\n{}",
        missing.join("\n")
    );
    // The check does see a figure that is not in the report.
    assert!(!in_report(81_494.0, 0) && in_report(81_493.0, 0) && in_report(1.066, 3));
}

#[test]
fn numbers_are_read_as_written() {
    let got: Vec<(f64, usize)> = numbers(
        "| 81 586 | 1.065 | 2.27 s | 0 / 302 | 130 944 slots, 2 workers | HTTP/2 | −1.25 |",
    );
    assert_eq!(
        got,
        [
            (81586.0, 0),
            (1.065, 3),
            (2.27, 2),
            (0.0, 0),
            (302.0, 0),
            (130944.0, 0),
            (2.0, 0),
            (1.25, 2)
        ]
    );
}

/// The suites a shell variable of `.ci/run` passes to `cargo test` (`NAME="--test a --test b \
/// ... -- --skip x"`), by name.
fn ci_suites(var: &str) -> BTreeSet<String> {
    let run = std::fs::read_to_string(repo_root().join(".ci/run")).unwrap();
    let start = format!("{var}=\"");
    let (_, value) = run
        .split_once(&start)
        .unwrap_or_else(|| panic!("no {start} in .ci/run"));
    let value = value.split('"').next().unwrap();
    let words: Vec<&str> = value.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "--test")
        .map(|w| w[1].to_string())
        .collect()
}

/// docs/reliability.md says which suites the cross-check build runs in CI: exactly the ones
/// `.ci/run` gives `make test TEST_MODE=cross-check`, each named as its file, and as many as it
/// says (it said seven while CI ran five).
#[test]
fn reliability_names_the_suites_ci_cross_checks() {
    let ci = ci_suites("CROSS_CHECK_SUITES");
    assert!(ci.len() >= 3, "CROSS_CHECK_SUITES in .ci/run: {ci:?}");
    for suite in &ci {
        assert!(
            repo_root().join(format!("tests/{suite}.rs")).exists(),
            ".ci/run cross-checks a suite that does not exist: {suite}"
        );
    }
    let page = std::fs::read_to_string(repo_root().join("docs/reliability.md")).unwrap();
    let row = page
        .lines()
        .find(|l| l.contains("| `make test TEST_MODE=cross-check`"))
        .expect("docs/reliability.md's row for the cross-check");
    let named: BTreeSet<String> = row
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| span.strip_suffix(".rs"))
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect();
    assert_eq!(
        named, ci,
        "docs/reliability.md's cross-check row names these suites, .ci/run runs those"
    );
    const COUNTS: [&str; 10] = [
        "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    ];
    for (i, word) in COUNTS.iter().enumerate() {
        if row.contains(&format!("the {word} suites")) {
            assert_eq!(
                i + 2,
                ci.len(),
                "docs/reliability.md's cross-check row says {word} suites; .ci/run runs {ci:?}"
            );
        }
    }
}
