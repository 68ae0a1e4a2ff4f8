//! docs/quickstart.md is run as a newcomer pastes it: every ```` ```sh quickstart ```` block, in
//! order, in one `bash` in an empty directory, against the real Envoy and the module under test;
//! each block's output must match the ```` ```text expected ```` block after it (every line, in
//! order) or ```` ```text expected-lines ```` (those lines appear, in that order); a block with
//! neither must print nothing. In expected text, `<n>` is a number and `<any>` any text (timings,
//! ids).
//!
//! The commands change only so that they run beside other tests, as the page's last section
//! says: the gateway's ports (10000, 10001, 9901) become free ports (in a copy of
//! envoy-config/gateway.yaml, in the commands and in the expected output), `target/release` the
//! module under test, `$(scripts/install-envoy.sh)` the Envoy under test (its version replaces
//! 1.40.0 and 1.40 in the expected output), and `make` lines are skipped (`make test` ran them).
//! The `bash` and everything it starts (Envoy, curl) are one process group, killed by the test's
//! guard whatever happens.

use crate::common;

use common::envoy::{envoy_bin, expected_envoy_version, minor_of, module_dir, TempDir};
use common::{free_ports, repo_root};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A fenced block of the page.
#[derive(Debug)]
struct Block {
    info: String,
    text: String,
    line: usize,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in page.lines().enumerate() {
        match open.as_mut() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some(Block {
                        info: info.trim().to_string(),
                        text: String::new(),
                        line: n + 1,
                    });
                }
            }
            Some(b) => {
                if line.trim_end() == "```" {
                    out.push(open.take().unwrap());
                } else {
                    b.text.push_str(line);
                    b.text.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed fence");
    out
}

/// A command block and what its output must match.
#[derive(Debug)]
struct Step {
    line: usize,
    commands: String,
    expected: Option<(bool, String)>,
}

/// The page's steps: each `sh quickstart` block with the `text expected[-lines]` block after it.
fn steps(page: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for b in blocks(page) {
        match b.info.as_str() {
            "sh quickstart" => steps.push(Step {
                line: b.line,
                commands: b.text,
                expected: None,
            }),
            "text expected" | "text expected-lines" => {
                let step = steps
                    .last_mut()
                    .filter(|s| s.expected.is_none())
                    .unwrap_or_else(|| {
                        panic!("line {}: an expected block with no command block", b.line)
                    });
                step.expected = Some((b.info.ends_with("-lines"), b.text));
            }
            _ => {}
        }
    }
    steps
}

/// `text` matches `pattern`, where `<n>` is one or more digits (a `-` allowed first) and `<any>`
/// any text.
fn matches(pattern: &str, text: &str) -> bool {
    if let Some(rest) = pattern.strip_prefix("<any>") {
        return (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .any(|i| matches(rest, &text[i..]));
    }
    if let Some(rest) = pattern.strip_prefix("<n>") {
        let t = text.strip_prefix('-').unwrap_or(text);
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        return (1..=digits).any(|d| matches(rest, &t[d..]));
    }
    match (pattern.chars().next(), text.chars().next()) {
        (None, None) => true,
        (Some(p), Some(t)) if p == t => matches(&pattern[p.len_utf8()..], &text[t.len_utf8()..]),
        _ => false,
    }
}

/// Why `output` does not match the expected block, if it does not.
fn mismatch(lines_only: bool, expected: &str, output: &str) -> Option<String> {
    let want: Vec<&str> = expected.lines().collect();
    let have: Vec<&str> = output.lines().collect();
    if lines_only {
        let mut from = 0;
        for w in &want {
            match have[from..].iter().position(|h| matches(w, h)) {
                Some(i) => from += i + 1,
                None => return Some(format!("no line (after line {from}) matches {w:?}")),
            }
        }
        return None;
    }
    for i in 0..want.len().max(have.len()) {
        match (want.get(i), have.get(i)) {
            (Some(w), Some(h)) if matches(w, h) => {}
            (w, h) => return Some(format!("line {}: expected {w:?}, got {h:?}", i + 1)),
        }
    }
    None
}

/// The bash and all it started, killed (the whole process group) on drop.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = self.0.id() as i32;
        // SAFETY: kill(2) on the process group this test created (bash is its leader).
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

const MARK: &str = "@@quickstart step done@@";

#[test]
fn the_quickstart_runs_as_written() {
    let page = std::fs::read_to_string(repo_root().join("docs/quickstart.md")).unwrap();
    let steps = steps(&page);
    assert!(steps.len() >= 6, "{} steps on the page", steps.len());

    let ports = free_ports(3);
    let (data, control, admin) = (ports[0], ports[1], ports[2]);
    let dir = TempDir::new("quickstart");
    let config = std::fs::read_to_string(repo_root().join("envoy-config/gateway.yaml")).unwrap();
    for original in [
        "port_value: 10000",
        "port_value: 10001",
        "port_value: 9901",
        "127.0.0.1:9901",
    ] {
        assert!(
            config.contains(original),
            "gateway.yaml has no {original:?}"
        );
    }
    let ports_in = |text: &str| {
        text.replace("port_value: 10000", &format!("port_value: {data}"))
            .replace("port_value: 10001", &format!("port_value: {control}"))
            .replace("port_value: 9901", &format!("port_value: {admin}"))
            .replace("127.0.0.1:10000", &format!("127.0.0.1:{data}"))
            .replace("127.0.0.1:10001", &format!("127.0.0.1:{control}"))
            .replace("127.0.0.1:9901", &format!("127.0.0.1:{admin}"))
    };
    let config_copy = dir.0.join("gateway.yaml");
    std::fs::write(&config_copy, ports_in(&config)).unwrap();
    let version = expected_envoy_version();
    let minor = minor_of(&version);

    let mut script = String::new();
    for s in &steps {
        for line in s.commands.lines() {
            if line.starts_with("make ") {
                continue;
            }
            let line = ports_in(line)
                .replace(
                    "envoy-config/gateway.yaml",
                    &config_copy.display().to_string(),
                )
                .replace("target/release", &module_dir().display().to_string())
                .replace(
                    "$(scripts/install-envoy.sh)",
                    &envoy_bin().display().to_string(),
                );
            script.push_str(&line);
            script.push('\n');
        }
        script.push_str(&format!("echo '{MARK}'\n"));
    }
    let out = dir.0.join("stdout");
    let err = dir.0.join("stderr");
    let child = Command::new("bash")
        .current_dir(&dir.0)
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .expect("bash");
    let mut group = Group(child);
    // The page's steps take some 10 s (a 4 s request, a 5 s min_drain_duration); generous for a
    // loaded machine, finite.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = group.0.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    let parts: Vec<&str> = output.split(&format!("{MARK}\n")).collect();
    let log = || {
        format!(
            "stderr:\n{}\nenvoy.log (last lines):\n{}",
            std::fs::read_to_string(&err).unwrap_or_default(),
            std::fs::read_to_string(dir.0.join("envoy.log"))
                .unwrap_or_default()
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    if status.is_none() {
        let done = parts.len() - 1;
        panic!(
            "the quickstart did not finish in 120 s: stuck in the step at docs/quickstart.md:{} \
             ({done} steps done)\noutput:\n{output}\n{}",
            steps.get(done).map_or(0, |s| s.line),
            log()
        );
    }
    assert_eq!(
        parts.len(),
        steps.len() + 1,
        "not every step ran:\n{output}\n{}",
        log()
    );
    for (s, part) in steps.iter().zip(&parts) {
        let expected = match &s.expected {
            Some(e) => e,
            // `make` lines are not run here: their output is not checked.
            None if s.commands.lines().all(|l| l.starts_with("make ")) => continue,
            // A step without an expected block prints nothing.
            None => &(false, String::new()),
        };
        let want = ports_in(&expected.1)
            .replace("1.40.0", &version)
            .replace("1.40", &minor);
        if let Some(why) = mismatch(expected.0, &want, part) {
            panic!(
                "docs/quickstart.md:{}: the output differs from the page: {why}\noutput:\n{part}\n{}",
                s.line,
                log()
            );
        }
    }
    drop(group);
    drop(ports);
}

#[test]
fn placeholders_match_what_they_say() {
    assert!(matches("took <n> ms", "took 5000 ms"));
    assert!(!matches("took <n> ms", "took  ms"));
    assert!(!matches("took <n> ms", "took 5s ms"));
    assert!(matches("200 after <any>s", "200 after 4.01s"));
    assert!(matches("a <any>", "a "));
    assert!(!matches("state draining", "state serving"));
    assert_eq!(mismatch(true, "b\nd\n", "a\nb\nc\nd\n"), None);
    assert!(mismatch(true, "d\nb\n", "a\nb\nc\nd\n").is_some());
    assert!(mismatch(false, "a\n", "a\nb\n").is_some());
}
