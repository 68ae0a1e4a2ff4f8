//! The picture of a drain (docs/drain.svg, on the README's first screen) is well-formed SVG that
//! names the events it shows, and its generator (`make drain-picture`: scripts/drain-picture.py)
//! still runs: here in its fast mode, against the Envoy and module under test on free ports, and
//! what it records must be what each approach does (the module: nothing fails, nothing is cut;
//! stock Envoy: requests fail and everything in flight is cut; a fixed sleep shorter than a
//! request: that request is cut, and the long streams (SSE, WebSocket) with it). The committed picture comes from a run without `--fast`.

use crate::common;

use common::envoy::{envoy_bin, module_dir, TempDir};
use common::{free_ports, repo_root};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why `text` is not well-formed XML with one root element named `root`, if it is not: every
/// tag closed in order, attributes quoted, `&` only in entities, `<` only in markup.
fn not_well_formed(text: &str, root: &str) -> Option<String> {
    let entity_ok = |s: &str| {
        s.split('&').skip(1).all(|rest| {
            let name = rest.split(';').next().unwrap_or("");
            rest.contains(';')
                && (["amp", "lt", "gt", "quot", "apos"].contains(&name)
                    || name.strip_prefix('#').is_some_and(|d| {
                        !d.is_empty() && d.chars().all(|c| c.is_ascii_alphanumeric())
                    }))
        })
    };
    let mut stack: Vec<String> = Vec::new();
    let mut roots = 0;
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let content = &rest[..open];
        if !entity_ok(content) || content.contains('>') {
            return Some(format!("bad text {content:?}"));
        }
        if stack.is_empty() && !content.trim().is_empty() {
            return Some(format!("text outside the root: {content:?}"));
        }
        rest = &rest[open..];
        if let Some(r) = rest.strip_prefix("<!--") {
            let Some(end) = r.find("-->") else {
                return Some("an unclosed comment".into());
            };
            rest = &r[end + 3..];
            continue;
        }
        if let Some(r) = rest.strip_prefix("<?") {
            let Some(end) = r.find("?>") else {
                return Some("an unclosed declaration".into());
            };
            rest = &r[end + 2..];
            continue;
        }
        let Some(close) = rest.find('>') else {
            return Some("an unclosed tag".into());
        };
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => continue,
                other => return Some(format!("</{name}> closes {other:?}")),
            }
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name = tag.split_whitespace().next().unwrap_or("");
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == ':') {
            return Some(format!("bad tag name in <{tag}>"));
        }
        // Attributes: name="value" pairs, values without `<` or `"`, entities only.
        let mut attrs = tag[name.len()..].trim();
        while !attrs.is_empty() {
            let Some((key, value)) = attrs.split_once("=\"") else {
                return Some(format!("bad attributes in <{tag}>"));
            };
            if key.trim().is_empty() || key.trim().contains(char::is_whitespace) {
                return Some(format!("bad attribute name {key:?} in <{tag}>"));
            }
            let Some(end) = value.find('"') else {
                return Some(format!("an unclosed attribute in <{tag}>"));
            };
            if value[..end].contains('<') || !entity_ok(&value[..end]) {
                return Some(format!("bad attribute value in <{tag}>"));
            }
            attrs = value[end + 1..].trim_start();
        }
        if stack.is_empty() {
            roots += 1;
            if name != root {
                return Some(format!("the root is <{name}>, not <{root}>"));
            }
        }
        if !self_closing {
            stack.push(name.to_string());
        }
    }
    if !rest.trim().is_empty() {
        return Some(format!("text after the root: {rest:?}"));
    }
    match (stack.is_empty(), roots) {
        (true, 1) => None,
        (false, _) => Some(format!("unclosed: {stack:?}")),
        (_, n) => Some(format!("{n} root elements")),
    }
}

/// The words a reader of the picture looks for.
const EVENTS: &[&str] = &[
    "SIGTERM",
    "WebSocket",
    "Close 1001",
    "readiness 503",
    "connections told",
    "requests in flight",
    "moved",
    "cut",
    "exit (",
    "stock Envoy",
    "preStop",
    "load balancer moved on",
];

fn check_picture(svg: &str, what: &str) {
    if let Some(why) = not_well_formed(svg, "svg") {
        panic!("{what} is not well-formed SVG: {why}");
    }
    for e in EVENTS {
        assert!(svg.contains(e), "{what} does not name {e:?}");
    }
}

#[test]
fn the_committed_picture_is_well_formed_and_on_the_readme_s_first_screen() {
    let svg = std::fs::read_to_string(repo_root().join("docs/drain.svg")).unwrap();
    check_picture(&svg, "docs/drain.svg");
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let at = readme
        .lines()
        .position(|l| l.contains("(docs/drain.svg)") || l.contains("\"docs/drain.svg\""))
        .expect("README.md shows docs/drain.svg");
    let first_heading = readme
        .lines()
        .skip(1)
        .position(|l| l.starts_with("## "))
        .unwrap_or(usize::MAX);
    assert!(
        at < 40 && at < first_heading,
        "docs/drain.svg is on README.md's line {}: keep it on the first screen",
        at + 1
    );
}

#[test]
fn the_well_formedness_check_can_fail() {
    assert_eq!(
        not_well_formed("<svg><g/><text>a &amp; b</text></svg>", "svg"),
        None
    );
    for bad in [
        "<svg><g></svg>",
        "<svg><text>a & b</text></svg>",
        "<svg x=1/>",
        "<svg></svg><svg></svg>",
        "<svg><text>a < b</text></svg>",
        "<g/>",
    ] {
        assert!(not_well_formed(bad, "svg").is_some(), "{bad}");
    }
}

/// The generator and all it starts (Envoy, its SSE upstream), killed as a group on drop.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = self.0.id() as i32;
        // SAFETY: kill(2) on the process group this test created (python is its leader, the
        // Envoys it starts are in it).
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

#[test]
fn the_generator_runs_and_records_what_each_approach_does() {
    let ports = free_ports(4);
    let dir = TempDir::new("drain-picture");
    let svg = dir.0.join("drain.svg");
    let json = dir.0.join("drain.json");
    let list = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let child = Command::new("python3")
        .arg(repo_root().join("scripts/drain-picture.py"))
        .args(["--fast", "--ports", &list])
        .arg("--out")
        .arg(&svg)
        .arg("--json")
        .arg(&json)
        .arg("--envoy")
        .arg(envoy_bin())
        .arg("--module-dir")
        .arg(module_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.0.join("stderr")).unwrap())
        .process_group(0)
        .spawn()
        .expect("python3");
    let mut group = Group(child);
    // Three runs of some 5 s each, and three Envoy starts: generous for a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(st) = group.0.try_wait().unwrap() {
            break st;
        }
        let stderr = std::fs::read_to_string(dir.0.join("stderr")).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "scripts/drain-picture.py --fast did not finish in 180 s:\n{stderr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(dir.0.join("stderr")).unwrap_or_default();
    assert!(
        status.success(),
        "drain-picture.py failed: {status}\n{stderr}"
    );
    check_picture(&std::fs::read_to_string(&svg).unwrap(), "the generated SVG");

    let lanes: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let lane = |kind: &str| {
        lanes
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} lane: {lanes}"))
            .clone()
    };
    let slow_ok = |l: &serde_json::Value| {
        l["slow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["ok"] == true)
            .collect::<Vec<_>>()
    };
    let failed = |l: &serde_json::Value| l["failed"].as_array().unwrap().len();
    let module = lane("module");
    assert_eq!(failed(&module), 0, "with the module: {module}");
    assert_eq!(slow_ok(&module), [true, true, true], "{module}");
    for kind in ["sse", "websocket"] {
        assert_eq!(module["streams"][kind]["moved"], true, "{kind}: {module}");
    }
    assert_eq!(module["exit_code"], 0, "{module}");
    let ready = module["ready_503"].as_f64().expect("readiness turned");
    assert!(ready < 1.0, "readiness turned {ready} s after SIGTERM");
    assert!(!module["told"].as_array().unwrap().is_empty(), "{module}");

    let stock = lane("stock");
    assert!(failed(&stock) > 0, "stock Envoy: {stock}");
    assert_eq!(slow_ok(&stock), [false, false, false], "{stock}");
    for kind in ["sse", "websocket"] {
        assert_eq!(stock["streams"][kind]["moved"], false, "{kind}: {stock}");
    }

    // The sleep (3 s) is shorter than the last slow request (4 s): it is cut at SIGTERM.
    let sleep = lane("sleep");
    assert_eq!(slow_ok(&sleep), [true, true, false], "{sleep}");
    for kind in ["sse", "websocket"] {
        assert_eq!(sleep["streams"][kind]["moved"], false, "{kind}: {sleep}");
    }
    drop(group);
    drop(ports);
}
