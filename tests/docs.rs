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
//!
//! Beyond snippets, each kind of claim is held against its source: the defaults (the module's
//! parsers given an empty config, and the config each shipped setup sets), the admin addresses
//! the docs give (the kits' files), every repository path the pages name, the README's figures
//! (the committed bench run, the measured rolling restart) and tested versions (the Envoy list,
//! the platform fixtures), the pages and anchors source comments name, and one name per mode
//! (docs/modes.md) across the docs, the config's field docs and the log lines.

use crate::common;

use common::clients::raw_exchange;
use common::envoy::{module_dir, validate_config, Envoy, Options};
use common::repo_root;
use common::tools::{kubernetes_validate, temp_file};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Markdown pages of a directory of the repository, sorted.
fn md_in(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo_root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    out.sort();
    out
}

/// The operator's pages: README.md, SECURITY.md and every page of docs/ (not its contributors'
/// folder). What an on-call engineer reads: held to the reading limits and to saying nothing of
/// how the project is developed.
fn operator_pages() -> Vec<PathBuf> {
    let mut pages = vec![
        repo_root().join("README.md"),
        repo_root().join("SECURITY.md"),
    ];
    let docs = md_in("docs");
    assert!(docs.len() >= 8, "docs/ has {} pages", docs.len());
    pages.extend(docs);
    pages
}

/// Every page whose links, paths, snippets and names are checked: the operator's pages, and the
/// contributors' (CONTRIBUTING.md, docs/contributing/).
fn pages() -> Vec<PathBuf> {
    let mut pages = operator_pages();
    pages.push(repo_root().join("CONTRIBUTING.md"));
    let notes = md_in("docs/contributing");
    assert!(
        notes.len() >= 4,
        "docs/contributing/ has {} pages",
        notes.len()
    );
    pages.extend(notes);
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
               [d](#real-heading) [e](modes.md#which-mode-is-the-default)\n";
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

/// A snippet's text without the indentation its lines share (a snippet inside a list item).
fn dedented(text: &str) -> String {
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    text.lines()
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or("")))
        .collect()
}

/// A digest pin as a page shows it: the `images:` entry of the kit's `kustomization.yaml` (`kit`, a
/// directory) with its commented newName and digest lines taken in place of newTag, the edit
/// tests/deploy.rs renders and checks in every kit. The digest's value is the page's placeholder.
fn check_kustomize_pin(kit: &str, s: &Snippet, at: &str) {
    let path = format!("{kit}/kustomization.yaml");
    let file = std::fs::read_to_string(repo_root().join(&path))
        .unwrap_or_else(|e| panic!("{at}: {path}: {e}"));
    let normal = |l: &str| -> String {
        let l = l.split("  #").next().unwrap().trim_end();
        match l.split_once("digest: sha256:") {
            Some((head, _)) => format!("{head}digest: sha256:"),
            None => l.to_string(),
        }
    };
    let mut want = Vec::new();
    for l in file.lines().skip_while(|l| *l != "images:") {
        if l.trim_start().starts_with("newTag:") {
            continue;
        }
        let l = match l.strip_prefix("  # ") {
            Some(key) if key.starts_with("newName:") || key.starts_with("digest:") => {
                format!("  {key}")
            }
            _ if l.trim_start().starts_with('#') => continue,
            _ => l.to_string(),
        };
        want.push(normal(&l));
    }
    let got: Vec<String> = dedented(&s.text).lines().map(normal).collect();
    assert_eq!(got, want, "{at}: not the pin {path} describes");
    let deploy = std::fs::read_to_string(repo_root().join("tests/deploy.rs")).unwrap();
    assert!(
        deploy.contains(&format!("dir: \"{kit}\"")),
        "{at}: tests/deploy.rs does not render {kit}'s pin"
    );
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
                "kustomize-pin" => check_kustomize_pin(arg.trim(), &s, &at),
                "envoy-bootstrap-top" => {
                    // Top-level bootstrap fields: the example gateway with them added validates.
                    let fields = dedented(&s.text);
                    let yaml = format!(
                        "{}\n{fields}",
                        std::fs::read_to_string(repo_root().join("envoy-config/gateway.yaml"))
                            .unwrap()
                    );
                    let (ok, log) = validate_config(&yaml, module_dir());
                    assert!(ok && log.contains("OK"), "{at} does not validate:\n{log}");
                }
                "prometheus-relabel" => {
                    // Relabel rules: a scrape config holding them passes promtool.
                    let indented: String = dedented(&s.text)
                        .lines()
                        .map(|l| format!("  {l}\n"))
                        .collect();
                    let cfg = format!(
                        "scrape_configs:\n- job_name: envoy\n  static_configs:\n  - targets: ['127.0.0.1:9901']\n{indented}"
                    );
                    let (dir, f) = temp_file("docs", "prometheus.yml", &cfg);
                    let (ok, log) =
                        common::tools::promtool(&["check", "config", f.to_str().unwrap()], &dir.0);
                    assert!(ok, "{at}: promtool refuses it:\n{cfg}\n{log}");
                }
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

/// Every figure in the tables of docs/contributing/performance.md is one of bench/results/report.md (the
/// committed run), up to the page's rounding: a table edited by hand, or a bench re-run whose
/// report was committed without the page, fails here.
#[test]
fn performance_tables_come_from_the_committed_run() {
    let page =
        std::fs::read_to_string(repo_root().join("docs/contributing/performance.md")).unwrap();
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

// ---------------------------------------------------------------------------------------------
// Claims checked against their source: defaults, admin addresses, paths, figures, versions,
// links, the anchors source comments name, and the one name per mode (docs/modes.md).
// ---------------------------------------------------------------------------------------------

use graceful_drain::config::{
    format_duration, BootstrapConfig, FilterConfig, NetworkFilterConfig, Role,
};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Markdown table whose header's first cell is `first`: its header and its rows, each a list
/// of trimmed cells (the separator row left out). Panics when the page has no such table.
fn table(page: &str, first: &str) -> Vec<Vec<String>> {
    let cells = |l: &str| -> Vec<String> {
        let inner = l.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|c| c.trim().to_string()).collect()
    };
    let lines: Vec<&str> = page.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with('|') && cells(l)[0] == first)
        .unwrap_or_else(|| panic!("no table whose first column is {first:?}"));
    lines[start..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("|---"))
        .map(|l| cells(l))
        .collect()
}

/// The inline code spans of a text, in order (`a`, `b` in "`a` and `b`").
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// The single-quoted JSON values (`value: '{...}'`) of a config file, parsed.
fn json_values(path: &str) -> Vec<serde_json::Value> {
    read(path)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("value: '"))
        .filter_map(|v| v.rsplit_once('\'').map(|(json, _)| json))
        .map(|json| serde_json::from_str(json).unwrap_or_else(|e| panic!("{path}: {json}: {e}")))
        .collect()
}

/// The bootstrap extension's config in a file: the one JSON value the module's bootstrap parser
/// accepts that sets a drain field (the filters' configs name fields it refuses).
fn bootstrap_json(path: &str) -> serde_json::Value {
    let found: Vec<serde_json::Value> = json_values(path)
        .into_iter()
        .filter(|v| v.get("drain_timeout").is_some() || v.get("admin_address").is_some())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{path}: one bootstrap config expected: {found:?}"
    );
    let v = found.into_iter().next().unwrap();
    BootstrapConfig::parse(v.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{path}: the module refuses its config: {e}"));
    v
}

/// The network filter's configs in a file (those naming one of its fields).
fn network_filter_json(path: &str) -> Vec<serde_json::Value> {
    json_values(path)
        .into_iter()
        .filter(|v| {
            ["idle_close_grace", "idle_after", "track_requests"]
                .iter()
                .any(|k| v.get(k).is_some())
        })
        .inspect(|v| {
            NetworkFilterConfig::parse(v.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("the module refuses {v}: {e}"));
        })
        .collect()
}

/// A duration field as the module reads it from a bootstrap config (its default when absent).
fn duration_of(config: &serde_json::Value, field: &str) -> String {
    let c = BootstrapConfig::parse(config.to_string().as_bytes()).unwrap();
    let d = match field {
        "min_drain_duration" => c.drain.min_drain_duration,
        "quiet_period" => c.drain.quiet_period,
        "drain_timeout" => c.drain.drain_timeout,
        "readiness_failure_delay" => c.requests.readiness_failure_delay,
        other => panic!("{other} is not a duration of the bootstrap config"),
    };
    format_duration(d)
}

/// `admin_address` as written: one string or a list of them, in order (empty: unset).
fn admin_addresses(config: &serde_json::Value) -> Vec<String> {
    match config.get("admin_address") {
        None => vec![],
        Some(serde_json::Value::String(s)) if s.is_empty() => vec![],
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => {
            a.iter().map(|v| v.as_str().unwrap().to_string()).collect()
        }
        Some(other) => panic!("admin_address {other}"),
    }
}

/// The integer after `key:` on a line of a file (`terminationGracePeriodSeconds: 35`): every
/// occurrence, which must agree.
fn yaml_int(path: &str, key: &str) -> u64 {
    let values: BTreeSet<u64> = read(path)
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{path}: {key}: {v}: {e}"))
        })
        .collect();
    assert_eq!(values.len(), 1, "{path}: {key}: {values:?}");
    values.into_iter().next().unwrap()
}

/// Where each shipped setup keeps the module's config: the example gateway and `k8s/` (both
/// must agree), and each kit.
struct Setup {
    /// Files holding its bootstrap extension's config.
    bootstrap: &'static [&'static str],
    /// Files holding its network filter's config (none: no network filter).
    network_filter: &'static [&'static str],
}

fn setup(name: &str) -> Setup {
    match name {
        "example" => Setup {
            bootstrap: &["envoy-config/gateway.yaml", "k8s/configmap.yaml"],
            network_filter: &["envoy-config/gateway.yaml", "k8s/configmap.yaml"],
        },
        "kourier" => Setup {
            bootstrap: &["k8s/kourier/graceful-drain/envoy-args.yaml"],
            network_filter: &[],
        },
        "contour" => Setup {
            bootstrap: &["k8s/contour/graceful-drain/envoy-args.yaml"],
            network_filter: &[],
        },
        "envoy-gateway" => Setup {
            bootstrap: &["k8s/envoy-gateway/envoyproxy.yaml"],
            network_filter: &["k8s/envoy-gateway/connection-mode/envoypatchpolicy.yaml"],
        },
        "istio" => Setup {
            bootstrap: &["k8s/istio/bootstrap-override.yaml"],
            network_filter: &["k8s/istio/envoyfilter.yaml"],
        },
        other => panic!("no setup {other}"),
    }
}

/// Which setup a column header or a row label names.
fn setup_named(label: &str) -> Option<&'static str> {
    let l = label.to_lowercase();
    if l.contains("kourier") {
        Some("kourier")
    } else if l.contains("contour") {
        Some("contour")
    } else if l.contains("envoy gateway") {
        Some("envoy-gateway")
    } else if l.contains("istio") {
        Some("istio")
    } else if l.contains("example") || l.contains("envoy-config/gateway.yaml") {
        Some("example")
    } else {
        None
    }
}

/// The terminationGracePeriodSeconds each setup's pods get, from its manifests.
fn grace_period(setup: &str) -> u64 {
    match setup {
        "example" => {
            let g = yaml_int("k8s/deployment.yaml", "terminationGracePeriodSeconds");
            assert_eq!(
                g,
                yaml_int(
                    "k8s/deployment-prestop.yaml",
                    "terminationGracePeriodSeconds"
                )
            );
            g
        }
        "kourier" => yaml_int(
            "k8s/kourier/graceful-drain/gateway.yaml",
            "terminationGracePeriodSeconds",
        ),
        // The kit keeps Contour's own (the release's DaemonSet, byte for byte in the fixture).
        "contour" => {
            assert!(!read("k8s/contour/graceful-drain/envoy.yaml")
                .lines()
                .any(|l| l.trim().starts_with("terminationGracePeriodSeconds:")));
            yaml_int(
                "../shared/platforms/contour/v1.33.6/03-envoy.yaml",
                "terminationGracePeriodSeconds",
            )
        }
        // EG derives it from the EnvoyProxy's shutdown.drainTimeout: that plus 300 s
        // (envoyproxy.yaml says so where it sets drainTimeout).
        "envoy-gateway" => {
            let eg = read("k8s/envoy-gateway/envoyproxy.yaml");
            assert!(eg.contains("terminationGracePeriodSeconds to drainTimeout + 300s"));
            let t = eg
                .lines()
                .find_map(|l| l.trim().strip_prefix("drainTimeout:"))
                .expect("drainTimeout");
            graceful_drain::config::parse_duration(t.trim())
                .unwrap()
                .as_secs()
                + 300
        }
        // The gateway chart's values (the kit's own).
        "istio" => yaml_int("k8s/istio/values.yaml", "terminationGracePeriodSeconds"),
        other => panic!("{other}"),
    }
}

/// What a cell says: its code spans (`5s`, `127.0.0.1:9901`), quotes dropped.
fn cell_values(cell: &str) -> Vec<String> {
    code_spans(cell)
        .into_iter()
        .map(|s| s.trim_matches('"').to_string())
        .collect()
}

/// The module's own default for a documented field, as the reference table writes it: from the
/// parsers themselves, given an empty config.
fn module_default(field: &str) -> String {
    let b = BootstrapConfig::parse(b"").unwrap();
    let f = FilterConfig::parse(b"").unwrap();
    let n = NetworkFilterConfig::parse(b"").unwrap();
    let list = |v: &[String]| serde_json::to_string(v).unwrap();
    match field {
        "min_drain_duration" | "quiet_period" | "drain_timeout" | "readiness_failure_delay" => {
            duration_of(&serde_json::json!({}), field)
        }
        "admin_address" if b.admin_address.is_empty() => "none".into(),
        "ignored_stat_prefixes" => list(&b.ignored_stat_prefixes),
        "health_check_user_agents" => list(&b.requests.health_check_user_agents),
        "health_check_paths" => list(&b.requests.health_check_paths),
        "lifecycle_log_level" => b.lifecycle_log_level.as_str().to_lowercase(),
        "role" => match f.role {
            Role::Data => "data".into(),
            Role::Control => "control".into(),
        },
        "drain_token_file" | "drain_token_env" if f.drain_token.is_none() => "none".into(),
        "idle_close_grace" => format_duration(n.idle_close_grace),
        "idle_after" => format_duration(n.idle_after),
        "track_requests" => n.track_requests.to_string(),
        "move_long_lived_streams" => n.long_lived.enabled.to_string(),
        "move_http2_sse" => n.long_lived.http2_sse.to_string(),
        "long_lived_window" => format_duration(n.long_lived.window),
        "close_timeout" => format_duration(n.long_lived.close_timeout),
        "message_wait" => format_duration(n.long_lived.message_wait),
        "grpc_resumable_prefixes" => list(&n.grpc_resumable_prefixes),
        other => {
            panic!("docs/reference.md documents {other}: say here where its default comes from")
        }
    }
}

/// docs/reference.md's settings tables (written from `config::settings::SETTINGS`): every
/// field's default is what the module's own parsers give an empty config; and docs/
/// configuration.md's table of the drain rules repeats the three that decide a drain.
#[test]
fn the_documented_defaults_are_the_modules() {
    let page = read("docs/reference.md");
    let section = page
        .split("\n## Settings")
        .nth(1)
        .expect("docs/reference.md has a Settings section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut checked = 0;
    // Each scope's table: `| setting | type | default | ...`.
    for part in section.split("\n### ").skip(1) {
        let rows = table(part, "setting");
        assert_eq!(rows[0][..3], ["setting", "type", "default"]);
        for row in &rows[1..] {
            let field = code_spans(&row[0]).pop().expect("a field in code");
            let have = match code_spans(&row[2]).as_slice() {
                [] if row[2] == "refused" => continue, // a removed field, refused at start
                [] if row[2] == "unset" => "none".to_string(),
                [] => row[2].clone(),
                [one] => one.trim_matches('"').to_string(),
                more => panic!("{field}: {more:?}"),
            };
            assert_eq!(
                have,
                module_default(&field),
                "docs/reference.md: the default of {field}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 17, "only {checked} fields");
    for row in &table(&read("docs/configuration.md"), "setting")[1..] {
        let field = code_spans(&row[0]).pop().unwrap();
        assert_eq!(cell_values(&row[1]), [module_default(&field)], "{field}");
    }
}

/// README's defaults table: each setup's column from the files it ships (the example and `k8s/`
/// must agree), the grace periods from the manifests. (The module's own defaults are the
/// reference's, checked there.)
#[test]
fn readme_defaults_come_from_the_manifests() {
    let readme = read("README.md");
    let rows = table(&readme, "setting");
    let header = &rows[0];
    let columns: Vec<(usize, &str)> = header
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, h)| (i, setup_named(h).unwrap_or_else(|| panic!("column {h:?}"))))
        .collect();
    assert_eq!(columns.len(), 5, "{header:?}");
    let mut checked = 0;
    for row in &rows[1..] {
        let field = code_spans(&row[0]).pop().unwrap();
        for &(i, name) in &columns {
            let s = setup(name);
            let cell = &row[i];
            let at = format!("README defaults, {field}, {}", header[i]);
            match field.as_str() {
                "min_drain_duration" | "quiet_period" | "drain_timeout" => {
                    for f in s.bootstrap {
                        assert_eq!(
                            cell_values(cell),
                            [duration_of(&bootstrap_json(f), &field)],
                            "{at}: {f}"
                        );
                    }
                }
                "admin_address" => {
                    for f in s.bootstrap {
                        assert_eq!(
                            cell_values(cell),
                            admin_addresses(&bootstrap_json(f)),
                            "{at}: {f}"
                        );
                    }
                }
                "track_requests" => {
                    if s.network_filter.is_empty() {
                        assert!(cell.contains("no network filter"), "{at}: {cell}");
                        for f in s.bootstrap {
                            assert!(network_filter_json(f).is_empty(), "{at}: {f} has one");
                            assert!(!read(f).contains("DynamicModuleNetworkFilter"), "{at}: {f}");
                        }
                    }
                    for f in s.network_filter {
                        for v in network_filter_json(f) {
                            let n = NetworkFilterConfig::parse(v.to_string().as_bytes()).unwrap();
                            assert_eq!(
                                cell_values(cell)[0],
                                n.track_requests.to_string(),
                                "{at}: {f}"
                            );
                        }
                    }
                }
                "terminationGracePeriodSeconds" => {
                    assert_eq!(cell_values(cell), [grace_period(name).to_string()], "{at}");
                    // ... above the setup's drain_timeout: the exit is the module's, not a SIGKILL.
                    let timeout = BootstrapConfig::parse(
                        bootstrap_json(s.bootstrap[0]).to_string().as_bytes(),
                    )
                    .unwrap()
                    .drain
                    .drain_timeout;
                    assert!(grace_period(name) > timeout.as_secs(), "{at}");
                }
                other => panic!("README defaults: no source for {other}"),
            }
            checked += 1;
        }
    }
    assert!(checked >= 24, "only {checked} cells checked");
    // The check does tell a wrong address (Kourier's admin address before the kit moved it to
    // its socket: now the kit's read-only guard, which refuses the drain's calls).
    let kourier = admin_addresses(&bootstrap_json(setup("kourier").bootstrap[0]));
    assert_ne!(kourier, ["127.0.0.1:9901"]);
}

/// A repository path as written in a page (`k8s/contour/`, `src/exchange/http1/`): the
/// top-level directories and files whose paths the docs name.
const REPO_PREFIXES: [&str; 8] = [
    "src/",
    "tests/",
    "scripts/",
    "k8s/",
    "envoy-config/",
    "bench/",
    "docs/",
    ".ci/",
];

/// Every repository path a text names, outside links (checked apart): prose, inline code and
/// code blocks. A path followed by a placeholder (`k8s/<platform>`, `k8s/*.yaml`) is a pattern,
/// not a path.
fn repo_paths(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut out = Vec::new();
    for i in 0..chars.len() {
        if i > 0 && (path_char(chars[i - 1]) || chars[i - 1] == '(') {
            continue; // inside a longer path (`internal/xds/...`, `../k8s/`), or a link target
        }
        let rest: String = chars[i..chars.len().min(i + 16)].iter().collect();
        if !REPO_PREFIXES.iter().any(|p| rest.starts_with(p)) {
            continue;
        }
        let mut j = i;
        while j < chars.len() && path_char(chars[j]) {
            j += 1;
        }
        if chars.get(j).is_some_and(|c| "<*{…".contains(*c)) {
            continue;
        }
        let path: String = chars[i..j].iter().collect();
        out.push(path.trim_end_matches(['.', ',', ':']).to_string());
    }
    out
}

/// Every repository path README.md and the docs name exists, and every `kubectl apply -k`
/// directory is a kustomization.
#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for path in repo_paths(&text) {
            // What `make bench` writes, not the repository.
            if path.starts_with("bench/out/") {
                continue;
            }
            checked += 1;
            if !repo_root().join(&path).exists() {
                missing.push(format!("{}: {path}", rel(&page)));
            }
        }
        for l in text.lines() {
            for verb in ["kubectl apply -k ", "kubectl delete -k "] {
                if let Some(rest) = l.split(verb).nth(1) {
                    let dir = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '/');
                    if REPO_PREFIXES.iter().any(|p| dir.starts_with(p))
                        && !repo_root().join(dir).join("kustomization.yaml").exists()
                    {
                        missing.push(format!("{}: {dir} is not a kustomization", rel(&page)));
                    }
                }
            }
        }
    }
    assert!(
        checked > 150,
        "only {checked} paths found: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
    // The scan finds paths in prose, code and blocks, and leaves patterns and others' paths.
    let found = repo_paths(
        "`k8s/contour/` and k8s/<platform>, k8s/*.yaml, (../k8s/x), internal/xds/a.go\n\
         ```\nkubectl apply -f k8s/deployment.yaml\n```\nsee src/config.rs.",
    );
    assert_eq!(
        found,
        ["k8s/contour/", "k8s/deployment.yaml", "src/config.rs"]
    );
}

/// Every figure the README and docs/modes.md (where each mode's cost is stated) give for a cost
/// (`×1.02`, `70 %`) is one of the committed bench runs (bench/results/report.md, tracker.md,
/// and the proxy runs of #48 whose rows tracker-profile.md keeps unedited), up to its rounding;
/// the README's rolling-restart figures are docs/kubernetes.md's measured table.
#[test]
fn readme_figures_come_from_the_measurements() {
    let readme = read("README.md");
    let costs = readme.clone() + &read("docs/modes.md");
    let report = read("bench/results/report.md")
        + &read("bench/results/tracker.md")
        + &read("bench/results/tracker-profile.md");
    let measured: Vec<f64> = numbers(&report).into_iter().map(|(v, _)| v).collect();
    let in_report = |v: f64, decimals: usize| {
        let half = 0.5 * 10f64.powi(-(decimals as i32)) + 1e-9;
        measured.iter().any(|m| (m - v).abs() <= half)
    };
    let mut figures = Vec::new();
    for line in costs.lines() {
        // `×1.02-1.03`: the figures up to the next space.
        for after in line.split('×').skip(1) {
            figures.extend(numbers(after.split_whitespace().next().unwrap_or("")));
        }
        // `70 %`: the figure before each percent sign.
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(2).filter(|w| w[1].starts_with('%')) {
            figures.extend(numbers(w[0]));
        }
    }
    assert!(
        figures.len() >= 8,
        "only {} figures: {figures:?}",
        figures.len()
    );
    let missing: Vec<_> = figures.iter().filter(|(v, d)| !in_report(*v, *d)).collect();
    assert!(
        missing.is_empty(),
        "README and docs/modes.md figures not in the bench results: {missing:?}"
    );

    // "lost 261 of 1 403 HTTP/1.1 requests": stock Envoy's row of the rolling restart, and "0
    // requests lost": every row with the module.
    let k8s = read("docs/kubernetes.md");
    let rows = table(&k8s, "front → gateway");
    assert_eq!(rows[0][2..4], ["requests", "failed"]);
    let lost = readme
        .split("lost ")
        .nth(1)
        .and_then(|r| r.split(" HTTP/1.1 requests").next())
        .expect("the README's stock-Envoy figure");
    let said: Vec<f64> = numbers(lost).into_iter().map(|(v, _)| v).collect();
    let stock = rows
        .iter()
        .find(|r| r[0] == "HTTP/1.1" && r[1].contains("stock Envoy"))
        .expect("stock Envoy's HTTP/1.1 row");
    let measured: Vec<f64> = [&stock[3], &stock[2]]
        .iter()
        .flat_map(|c| numbers(c))
        .map(|(v, _)| v)
        .collect();
    assert_eq!(said, measured, "README: {lost}");
    assert!(readme.contains("0 requests lost"));
    for r in rows[1..].iter().filter(|r| !r[1].contains("stock Envoy")) {
        assert_eq!(r[3], "0", "{r:?}");
    }
}

/// The "does it fit my gateway?" matrix: one row per gateway the issue names, each version it
/// says was tested is one the tests run (scripts/install-envoy.sh, the platform fixtures), and
/// Istio is said untested as long as no test names it.
#[test]
fn readme_matrix_versions_are_the_tested_ones() {
    let readme = read("README.md");
    let rows = table(&readme, "gateway");
    assert_eq!(
        rows[0],
        ["gateway", "versions tested", "mode", "kit", "caveats"]
    );
    let row = |name: &str| -> &Vec<String> {
        rows.iter()
            .find(|r| r[0].to_lowercase().contains(name))
            .unwrap_or_else(|| panic!("no {name} row in the README's matrix"))
    };
    let versions = |cell: &str| -> BTreeSet<String> {
        cell.split(|c: char| c.is_whitespace() || ",;()".contains(c))
            .map(|w| w.trim_start_matches("knative-").trim_start_matches('v'))
            .filter(|w| w.split('.').count() == 3 && w.split('.').all(|p| p.parse::<u32>().is_ok()))
            .map(String::from)
            .collect()
    };
    let fixtures = |platform: &str| -> BTreeSet<String> {
        std::fs::read_dir(common::platforms().join(platform))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with('v') || n.starts_with("knative-v"))
            .map(|n| {
                n.trim_start_matches("knative-")
                    .trim_start_matches('v')
                    .to_string()
            })
            .collect()
    };
    // Your own bootstrap: every Envoy the suites and the compatibility tests run.
    let tested = std::process::Command::new(repo_root().join("scripts/install-envoy.sh"))
        .arg("--tested")
        .output()
        .unwrap();
    let tested: BTreeSet<String> = String::from_utf8(tested.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(tested.len() >= 6, "{tested:?}");
    assert_eq!(versions(&row("your own")[1]), tested);
    // Kourier: the releases in the fixtures.
    assert_eq!(versions(&row("kourier")[1]), fixtures("kourier"));
    // Contour and Envoy Gateway: the releases in the fixtures, each with the Envoy its own
    // manifest runs (`vX (Envoy Y)`).
    for (name, dir) in [("contour", "contour"), ("envoy gateway", "envoy-gateway")] {
        let cell = &row(name)[1];
        let mut releases = BTreeSet::new();
        for part in cell.split("), ") {
            let (release, envoy) = part
                .trim_end_matches(')')
                .split_once(" (Envoy ")
                .unwrap_or_else(|| panic!("{name}: {part:?} is not `vX (Envoy Y)`"));
            let release = release.trim().trim_start_matches('v').to_string();
            let manifests: String =
                std::fs::read_dir(common::platforms().join(dir).join(format!("v{release}")))
                    .unwrap()
                    .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
                    .collect();
            assert!(
                manifests.contains(&format!("envoy:distroless-v{envoy}")),
                "{name} v{release}'s manifest does not run Envoy {envoy}"
            );
            releases.insert(release);
        }
        assert_eq!(releases, fixtures(dir), "{name}");
    }
    // Istio: the release in the fixtures (its own proxy is not run: the cell says on what).
    let istio = row("istio");
    let releases: Vec<String> = std::fs::read_dir(common::platforms().join("istio"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert!(!releases.is_empty());
    for r in &releases {
        assert!(istio[1].contains(r.as_str()), "Istio {r} in the matrix");
    }
    assert!(istio[1].contains("stock Envoy") && istio[3].contains("k8s/istio/"));
    row("home-grown").len();
}

/// Every cell of the README's tables is short: the decision is made from them, the details are
/// a link away.
#[test]
fn readme_table_cells_are_short() {
    let readme = read("README.md");
    let mut long = Vec::new();
    let mut cells = 0;
    for l in readme
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
    {
        for c in l.trim_matches('|').split('|') {
            cells += 1;
            let words = c.split_whitespace().count();
            if words > 20 {
                long.push(format!("{words} words: {}", c.trim()));
            }
        }
    }
    assert!(cells > 60, "only {cells} cells");
    assert!(
        long.is_empty(),
        "README cells over 20 words:\n{}",
        long.join("\n")
    );
}

/// The CHANGELOG and the upgrade page are linked from the README, and the CHANGELOG's own links
/// resolve like the docs'.
#[test]
fn changelog_and_upgrading_are_linked() {
    let readme = read("README.md");
    let targets = link_targets(&split(&readme).1);
    for t in ["CHANGELOG.md", "docs/upgrading.md"] {
        assert!(targets.iter().any(|l| l == t), "README does not link {t}");
    }
    let changelog = repo_root().join("CHANGELOG.md");
    let text = std::fs::read_to_string(&changelog).unwrap();
    let broken = broken_links(&changelog, &text);
    assert!(broken.is_empty(), "{broken:?}");
    let upgrading = read("docs/upgrading.md");
    assert!(link_targets(&split(&upgrading).1).contains(&"../CHANGELOG.md".to_string()));
}

/// Where a source file names a page of the docs (`docs/modes.md`, `docs/alerts.md#anchor`) or a
/// README section (`README "Settings"`), the page, the heading, the section exist.
#[test]
fn every_doc_a_source_comment_names_exists() {
    let mut files = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                // A build's output (bench/tracker-loop/target) is not the repository's.
                if !p.ends_with("target") {
                    walk(&p, out);
                }
            } else {
                out.push(p);
            }
        }
    }
    for d in ["src", "tests", "k8s", "envoy-config", "scripts", "bench"] {
        walk(&repo_root().join(d), &mut files);
    }
    for f in ["Makefile", "build.rs", "Cargo.toml", ".ci/run"] {
        files.push(repo_root().join(f));
    }
    let readme_sections = anchors(&read("README.md"));
    let mut broken = Vec::new();
    let mut named = 0;
    for f in files {
        if f.ends_with("tests/docs.rs") || f.components().any(|c| c.as_os_str() == "fixtures") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue; // not text
        };
        for (doc, anchor) in doc_references(&text) {
            named += 1;
            let page = repo_root().join(&doc);
            if !page.exists() {
                broken.push(format!("{}: {doc}: no such page", rel(&f)));
            } else if let Some(a) = anchor {
                if !anchors(&std::fs::read_to_string(&page).unwrap()).contains(&a) {
                    broken.push(format!("{}: {doc}#{a}: no such heading", rel(&f)));
                }
            }
        }
        for quote in ["README \"", "README's \""] {
            for rest in text.split(quote).skip(1) {
                let section = rest.split('"').next().unwrap_or("");
                named += 1;
                if !readme_sections.contains(&anchor_of(section)) {
                    broken.push(format!(
                        "{}: README \"{section}\": no such section",
                        rel(&f)
                    ));
                }
            }
        }
    }
    assert!(named > 20, "only {named} references found");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    // The scan reads pages and anchors, and leaves templates alone.
    assert_eq!(
        doc_references("see docs/alerts.md#gracefuldraintimedout, docs/modes.md, docs/contributing/architecture.md; format!(\"docs/alerts.md#{}\")"),
        [
            ("docs/alerts.md".to_string(), Some("gracefuldraintimedout".to_string())),
            ("docs/modes.md".to_string(), None),
            ("docs/contributing/architecture.md".to_string(), None),
            ("docs/alerts.md".to_string(), None),
        ]
    );
}

/// The `docs/<page>.md` and `docs/<page>.md#<anchor>` a text names (`<page>` may be in a folder:
/// `contributing/architecture`).
fn doc_references(text: &str) -> Vec<(String, Option<String>)> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = Vec::new();
    for (i, _) in text.match_indices("docs/") {
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| word(c) || c == '/')
        {
            continue;
        }
        let rest = &text[i + 5..];
        // A page of a folder of docs/ (`docs/contributing/architecture.md`) too.
        let name: String = rest.chars().take_while(|c| word(*c) || *c == '/').collect();
        let Some(after) = rest[name.len()..].strip_prefix(".md") else {
            continue;
        };
        let anchor: String = after
            .strip_prefix('#')
            .map(|a| a.chars().take_while(|c| word(*c)).collect())
            .unwrap_or_default();
        out.push((
            format!("docs/{name}.md"),
            (!anchor.is_empty()).then_some(anchor),
        ));
    }
    out
}

/// GitHub's anchor for one heading's text.
fn anchor_of(heading: &str) -> String {
    anchors(&format!("# {heading}\n"))
        .into_iter()
        .next()
        .unwrap()
}

/// One name per mode: docs/modes.md defines the three modes and the terms the pages use, and no
/// page, config field doc or log line calls a mode anything else.
#[test]
fn every_mode_has_one_name() {
    let modes = read("docs/modes.md");
    let defined = table(&modes, "mode");
    let names: Vec<String> = defined[1..]
        .iter()
        .map(|r| r[0].trim_matches('*').to_string())
        .collect();
    assert_eq!(
        names,
        ["filter mode", "connection mode", "bootstrap-only mode"]
    );
    let glossary = modes
        .split("## Glossary")
        .nth(1)
        .expect("docs/modes.md has a glossary")
        .split("\n## ")
        .next()
        .unwrap();
    for term in [
        "bootstrap extension",
        "HTTP filter",
        "network filter",
        "tracker",
        "bootstrap-only",
        "data listener",
        "control listener",
        "drain",
        "told",
        "sent away",
        "idle",
        "drain-close",
        "untracked",
        "kit",
    ] {
        assert!(
            glossary.contains(&format!("- **{term}**:")),
            "docs/modes.md's glossary does not define {term:?}"
        );
    }
    // Which default is which, said where the modes are defined and in the reference.
    assert!(modes.contains("## Which mode is the default"));
    assert_eq!(module_default("track_requests"), "false");
    for f in ["envoy-config/gateway.yaml", "k8s/configmap.yaml"] {
        let n = network_filter_json(f);
        assert!(
            !n.is_empty() && n.iter().all(|v| v["track_requests"] == true),
            "{f}"
        );
    }
    assert!(read("docs/configuration.md").contains("(the module's default)"));

    // "<word> mode" everywhere: one of the three names, or a word that is not a name.
    let allowed = [
        "filter",
        "connection",
        "bootstrap-only",
        "each",
        "every",
        "the",
        "mixed",
        "one",
        "which",
        "any",
        "no",
        "a",
        "its",
        "this",
        "that",
    ];
    let mut texts: Vec<(String, String)> = pages()
        .into_iter()
        .map(|p| (rel(&p), std::fs::read_to_string(&p).unwrap()))
        .collect();
    texts.push(("CHANGELOG.md".into(), read("CHANGELOG.md")));
    // The config's field docs, and every log line of the module.
    for f in [
        "mod",
        "filter",
        "bootstrap_config",
        "token",
        "duration",
        "admin_address",
    ] {
        let path = format!("src/config/{f}.rs");
        texts.push((path.clone(), read(&path)));
    }
    let mut logs = String::new();
    let mut src = Vec::new();
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
    rs_files(&repo_root().join("src"), &mut src);
    for f in src {
        for l in std::fs::read_to_string(&f).unwrap().lines() {
            if l.contains("graceful_drain: ") {
                logs.push_str(l);
                logs.push('\n');
            }
        }
    }
    texts.push(("log lines in src/".into(), logs));
    let mut wrong = Vec::new();
    for (name, text) in &texts {
        // Lines joined, comment markers dropped: a doc comment may wrap "connection mode".
        let flat: String = text
            .lines()
            .map(|l| {
                let l = l.trim_start();
                ["///", "//!", "//", "#"]
                    .iter()
                    .find_map(|m| l.strip_prefix(m))
                    .unwrap_or(l)
            })
            .collect::<Vec<_>>()
            .join(" ");
        for (i, _) in flat.match_indices(" mode") {
            let after = flat[i + 5..].chars().next();
            if after.is_some_and(|c| c.is_alphanumeric()) {
                continue; // "model", "modes"
            }
            let word = flat[..i]
                .rsplit(|c: char| c.is_whitespace() || "(`*[|".contains(c))
                .next()
                .unwrap_or("")
                .to_lowercase();
            let word = word.trim_end_matches("'s");
            if !word.is_empty() && !allowed.contains(&word) {
                wrong.push(format!("{name}: \"{word} mode\""));
            }
        }
        for retired in [
            "network filter alone",
            "HTTP filter mode",
            "filter-only mode",
        ] {
            if text.contains(retired) {
                wrong.push(format!("{name}: \"{retired}\""));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "modes named outside docs/modes.md's three names:\n{}",
        wrong.join("\n")
    );
}

/// The stats-matcher section names exactly what the module reads and defines: the suffixes its
/// scan sums (each seen by a pass of its kind, so the matcher entries keep the drain's figures),
/// the module's own series in the relabelling that restores their prefix, and every kit page
/// points to it.
#[test]
fn the_stats_matcher_entries_are_what_the_module_reads() {
    use graceful_drain::envoy_stats::scan::{Pass, StatSums, HIDDEN_STATS};
    let text = std::fs::read_to_string(repo_root().join("docs/configuration.md")).unwrap();
    let section = &text[text
        .find("### Stats matchers and renamed series")
        .expect("the section")..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
    let suffixes: Vec<&str> = section
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- suffix: "))
        .collect();
    assert_eq!(
        suffixes,
        [
            "downstream_rq_active",
            "downstream_rq_total",
            "health_check.request_total"
        ]
    );
    for pass in [Pass::Gauges, Pass::Counters] {
        let mut sums = StatSums::new(pass, &[]);
        for s in &suffixes {
            sums.add(format!("http.ingress.{s}").as_bytes(), 1);
        }
        assert!(
            !sums.saw_none(),
            "{pass:?}: the entries keep what the pass reads"
        );
    }
    for s in &suffixes[..2] {
        assert!(HIDDEN_STATS.contains(s), "the start line names {s}");
    }
    let regex = section
        .lines()
        .find_map(|l| l.trim().strip_prefix("regex: ("))
        .and_then(|r| r.strip_suffix(')'))
        .expect("the relabelling regex");
    let mut want = vec!["build_info"];
    want.extend(common::STAT_NAMES);
    assert_eq!(regex.split('|').collect::<Vec<_>>(), want);
    for page in ["kourier.md", "contour.md", "envoy-gateway.md"] {
        let t = std::fs::read_to_string(repo_root().join("docs").join(page)).unwrap();
        assert!(
            t.contains("configuration.md#stats-matchers-and-renamed-series"),
            "{page} points to the stats-matcher entries"
        );
    }
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

/// docs/contributing/reliability.md says which suites the cross-check build runs in CI: exactly the ones
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
    let page =
        std::fs::read_to_string(repo_root().join("docs/contributing/reliability.md")).unwrap();
    let row = page
        .lines()
        .find(|l| l.contains("| `make test TEST_MODE=cross-check`"))
        .expect("docs/contributing/reliability.md's row for the cross-check");
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
        "docs/contributing/reliability.md's cross-check row names these suites, .ci/run runs those"
    );
    const COUNTS: [&str; 10] = [
        "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    ];
    for (i, word) in COUNTS.iter().enumerate() {
        if row.contains(&format!("the {word} suites")) {
            assert_eq!(
                i + 2,
                ci.len(),
                "docs/contributing/reliability.md's cross-check row says {word} suites; .ci/run runs {ci:?}"
            );
        }
    }
}

/// README.md and every page render as their source reads (issue 67): each fenced code block
/// the source opens is one fenced code block to a real CommonMark parser (pulldown-cmark),
/// holding exactly the lines between its fences. An unindented line inside a list item's fence
/// ends the list item, and the rest of the page renders as code: this fails here.
#[test]
fn every_page_s_code_blocks_render_as_their_source_reads() {
    use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
    let mut pages = pages();
    pages.push(repo_root().join("CHANGELOG.md"));
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        // The source's fenced blocks: the lines between an opening fence and the next fence of
        // the same indentation, with that indentation taken off.
        let mut want: Vec<String> = Vec::new();
        let mut open: Option<(usize, String)> = None;
        for line in text.lines() {
            let indent = line.len() - line.trim_start().len();
            let fence = line.trim_start().starts_with("```");
            match &mut open {
                None if fence => open = Some((indent, String::new())),
                Some((i, body)) if fence && indent == *i => {
                    want.push(std::mem::take(body));
                    open = None;
                }
                Some((i, body)) => {
                    body.push_str(line.get(*i..).unwrap_or(line.trim_start()));
                    body.push('\n');
                }
                None => {}
            }
        }
        assert!(open.is_none(), "{}: a fence never closed", page.display());
        let mut got: Vec<String> = Vec::new();
        let mut inside: Option<String> = None;
        for ev in Parser::new(&text) {
            match ev {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) => {
                    inside = Some(String::new())
                }
                Event::Text(t) if inside.is_some() => {
                    inside.as_mut().unwrap().push_str(&t);
                }
                Event::End(TagEnd::CodeBlock) => {
                    if let Some(b) = inside.take() {
                        got.push(b);
                    }
                }
                _ => {}
            }
        }
        assert_eq!(
            got.len(),
            want.len(),
            "{}: {} fenced code blocks in the source, {} rendered",
            page.display(),
            want.len(),
            got.len()
        );
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{}: a code block renders otherwise", page.display());
        }
    }
}

/// Operator pages (README.md, SECURITY.md, CHANGELOG.md, docs/*.md) say nothing of how the project is
/// developed: no tracker issue numbers (`#46`, `issue 35`; another project's `owner/repo#123`
/// is a public reference and stays) and no internal tool names.
#[test]
fn operator_pages_name_no_tracker_issue_or_internal_tool() {
    let mut pages = operator_pages();
    pages.push(repo_root().join("CHANGELOG.md"));
    let mut found = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let words: Vec<&str> = lower
                .split(|c: char| c.is_whitespace() || "(),;:".contains(c))
                .collect();
            let hash_issue = words.iter().any(|w| {
                w.strip_prefix('#').is_some_and(|d| {
                    !d.is_empty() && d.chars().take_while(char::is_ascii_digit).count() >= 2
                })
            });
            let issue_word = words.windows(2).any(|w| {
                matches!(w[0], "issue" | "issues")
                    && w[1]
                        .trim_start_matches('#')
                        .starts_with(|c: char| c.is_ascii_digit())
            });
            let tool = ["farm-bench", "farm-studio", "duplicates --change"]
                .iter()
                .any(|t| lower.contains(t));
            if hash_issue || issue_word || tool {
                found.push(format!("{}:{}: {line}", page.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "development details on operator pages:\n{}",
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Reading limits: the operator's pages are read in half an hour (issue 67).
// ---------------------------------------------------------------------------------------------

/// The most words the operator's pages hold in all (about half an hour at reading speed).
const MAX_OPERATOR_WORDS: usize = 12_000;
/// The most words in one table cell.
const MAX_CELL_WORDS: usize = 25;
/// The most words in one paragraph or list item (its own text, nested lists apart).
const MAX_PARAGRAPH_WORDS: usize = 120;

/// What a page holds for a reader, as a CommonMark parser (pulldown-cmark, with tables) renders
/// it: its words (prose, headings, tables and inline code; code blocks and HTML comments are not
/// read), and the words of each table cell and of each paragraph or list item, with the line it
/// starts on.
struct Reading {
    words: usize,
    cells: Vec<(usize, usize)>,
    paragraphs: Vec<(usize, usize)>,
}

fn reading(text: &str) -> Reading {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    #[derive(PartialEq)]
    enum Block {
        Cell,
        Paragraph,
    }
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut r = Reading {
        words: 0,
        cells: Vec::new(),
        paragraphs: Vec::new(),
    };
    // The blocks open around the current text, innermost last: (kind, words, line).
    let mut open: Vec<(Block, usize, usize)> = Vec::new();
    let mut in_code_block = false;
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
            Event::End(TagEnd::CodeBlock) => in_code_block = false,
            Event::Start(Tag::TableCell) => open.push((Block::Cell, 0, line_of(range.start))),
            Event::Start(Tag::Paragraph | Tag::Item) => {
                open.push((Block::Paragraph, 0, line_of(range.start)))
            }
            Event::End(TagEnd::TableCell | TagEnd::Paragraph | TagEnd::Item) => {
                let (kind, words, line) = open.pop().expect("a block was open");
                match kind {
                    Block::Cell => r.cells.push((line, words)),
                    Block::Paragraph => r.paragraphs.push((line, words)),
                }
            }
            Event::Text(t) | Event::Code(t) if !in_code_block => {
                let n = t.split_whitespace().count();
                r.words += n;
                if let Some(block) = open.last_mut() {
                    block.1 += n;
                }
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "unbalanced blocks");
    r
}

/// The operator's pages stay readable: at most MAX_OPERATOR_WORDS in all, no table cell over
/// MAX_CELL_WORDS, no paragraph or list item over MAX_PARAGRAPH_WORDS, measured as a CommonMark
/// parser renders them. The CHANGELOG is not in the total (an upgrade reads only its own
/// releases' entries) but keeps the cell and paragraph limits.
#[test]
fn operator_pages_are_read_in_half_an_hour() {
    let mut total = 0;
    let mut per_page = Vec::new();
    let mut too_long = Vec::new();
    let mut pages = operator_pages();
    pages.push(repo_root().join("CHANGELOG.md"));
    for page in &pages {
        let r = reading(&std::fs::read_to_string(page).unwrap());
        if !page.ends_with("CHANGELOG.md") {
            total += r.words;
            per_page.push(format!("{:6} {}", r.words, rel(page)));
        }
        for (line, words) in r.cells.iter().filter(|(_, w)| *w > MAX_CELL_WORDS) {
            too_long.push(format!(
                "{}:{line}: a table cell of {words} words",
                rel(page)
            ));
        }
        for (line, words) in r
            .paragraphs
            .iter()
            .filter(|(_, w)| *w > MAX_PARAGRAPH_WORDS)
        {
            too_long.push(format!(
                "{}:{line}: a paragraph of {words} words",
                rel(page)
            ));
        }
    }
    assert!(
        too_long.is_empty(),
        "over the limits ({MAX_CELL_WORDS} words a cell, {MAX_PARAGRAPH_WORDS} a paragraph):\n{}",
        too_long.join("\n")
    );
    assert!(
        total <= MAX_OPERATOR_WORDS,
        "the operator's pages hold {total} words, over {MAX_OPERATOR_WORDS}: move design notes \
         and measurements to docs/contributing/, or link to where a fact is already said\n{}",
        per_page.join("\n")
    );
    assert!(total > 3_000, "only {total} words: is the count broken?");
    println!("operator pages: {total} words\n{}", per_page.join("\n"));
}

#[test]
fn reading_counts_what_a_reader_reads() {
    let page = "# Title words\n\nOne two `three four` five.\n\n\
                | a | b |\n|---|---|\n| one two three | x |\n\n\
                - item one\n  - nested two three\n\n\
                ```sh\nnot read at all\n```\n\n<!-- not read -->\n";
    let r = reading(page);
    // Title words (2), the paragraph (5), the table (a, b, one two three, x: 6), the items (5).
    assert_eq!(r.words, 18);
    let cells: Vec<usize> = r.cells.iter().map(|(_, w)| *w).collect();
    assert_eq!(cells, [1, 1, 3, 1]);
    let paragraphs: Vec<(usize, usize)> = r.paragraphs.clone();
    assert_eq!(paragraphs, [(3, 5), (10, 3), (9, 2)]);
}

/// The contributors' notes are out of the operator's path: the README links CONTRIBUTING.md
/// once, and no operator page links into docs/contributing/ (design notes and measurements would
/// read as reference).
#[test]
fn contributor_notes_are_linked_once_from_the_readme() {
    let mut found = Vec::new();
    for page in operator_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in link_targets(&split(&text).1) {
            if target.contains("contributing/") {
                found.push(format!("{}: {target}", rel(&page)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "operator pages linking contributor notes:\n{}",
        found.join("\n")
    );
    let readme = read("README.md");
    let to_contributing = link_targets(&split(&readme).1)
        .iter()
        .filter(|t| t.starts_with("CONTRIBUTING.md"))
        .count();
    assert_eq!(to_contributing, 1, "README links CONTRIBUTING.md once");
}
