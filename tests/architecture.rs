//! The layering of `src/`, checked on the source text: only `src/ffi/` may use `unsafe` or name
//! the FFI module, and the modules of the crate import each other without a cycle (each layer
//! can be read, and tested, without the ones above it). Comments and test modules do not count.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of the crate (`src/ffi/*` counts as `ffi`) and the code lines of its
/// files, without comments and without `#[cfg(test)] mod …` blocks (they close the file).
fn modules() -> BTreeMap<String, Vec<(String, String)>> {
    let src = common::repo_root().join("src");
    let mut files = Vec::new();
    for dir in [src.clone(), src.join("ffi")] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for p in files {
        let rel = p.strip_prefix(&src).unwrap().to_string_lossy().to_string();
        let module = match Path::new(&rel).components().count() {
            1 => rel.trim_end_matches(".rs").to_string(),
            _ => "ffi".to_string(),
        };
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut code = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if t == "#[cfg(test)]" {
                let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
                if next.starts_with("mod ") || next.starts_with("pub(crate) mod ") {
                    break;
                }
            }
            if t.starts_with("//") {
                continue;
            }
            code.push((format!("src/{rel}:{}", i + 1), line.to_string()));
        }
        out.entry(module).or_default().extend(code);
    }
    out
}

/// The modules a code line names as `crate::<module>`.
fn named(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.push(name);
        }
    }
    // `use crate::{a, b::c}` names each.
    if let Some(i) = line.find("crate::{") {
        let inside = &line[i + "crate::{".len()..];
        for part in inside.split([',', '}']) {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn only_the_ffi_module_uses_unsafe_or_names_the_ffi_module() {
    let mut offenders = Vec::new();
    for (module, lines) in modules() {
        if module == "ffi" {
            continue;
        }
        for (at, line) in lines {
            let words: Vec<&str> = line
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .collect();
            if words.contains(&"unsafe") || named(&line).iter().any(|m| m == "ffi") {
                offenders.push(format!("{at}: {}", line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "outside src/ffi/:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_modules_of_src_import_each_other_without_a_cycle() {
    let modules = modules();
    let known: BTreeSet<&String> = modules.keys().collect();
    let mut graph: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, lines) in &modules {
        let deps = graph.entry(module).or_default();
        for (_, line) in lines {
            for m in named(line) {
                if &m != module && known.contains(&m) {
                    deps.insert(m);
                }
            }
        }
    }
    assert!(graph.len() > 10, "modules found: {:?}", graph.keys());
    assert!(
        graph["ffi"].contains("state"),
        "the graph must see real imports"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle in src/: {}", cycle.join(" -> "));
    }
}

/// A cycle of `graph` (module -> the modules it names), as its path, if there is one.
fn find_cycle(graph: &BTreeMap<&str, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        n: &'a str,
        graph: &'a BTreeMap<&'a str, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| *p == n) {
            let mut cycle: Vec<String> = path[i..].iter().map(|s| s.to_string()).collect();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n);
        for d in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n);
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The checks themselves can fail: imports are seen in both `use` forms, and a cycle is found.
#[test]
fn the_checks_see_what_they_look_for() {
    assert_eq!(named("use crate::{clock::Clock, ffi};"), ["clock", "ffi"]);
    assert_eq!(named("let x = crate::ffi::shared();"), ["ffi"]);
    let edges = |pairs: &[(&'static str, &str)]| {
        let mut g: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(*a).or_default().insert(b.to_string());
        }
        g
    };
    assert_eq!(find_cycle(&edges(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        find_cycle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
