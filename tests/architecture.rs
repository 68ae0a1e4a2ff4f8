//! The layering of `src/`, checked on the source text: only `src/ffi/` may use `unsafe` or name
//! the FFI module; every top-level module has a layer in [`LAYERS`] and imports only modules of
//! the layers below it (so each layer can be read, and tested, without the ones above it; no
//! cycle either). Comments and inline test modules do not count; a sibling `tests.rs` does.
//! The test support `src/testing/` (the one fake Envoy and the state's fixture) sits under the
//! seam and may be named by test files only ([`is_test_file`]), whatever their layer.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of the crate (a file `src/x.rs`, or a folder `src/x/` with every file
/// under it, however deep) and the code lines of its files, without comments and without
/// `#[cfg(test)] mod …` blocks.
fn modules() -> BTreeMap<String, Vec<(String, String)>> {
    modules_under(&common::repo_root().join("src"))
}

fn modules_under(src: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    // Every `.rs` file under `src`, however deep, in path order.
    let (mut files, mut dirs) = (Vec::new(), vec![src.to_path_buf()]);
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        let (sub, rs): (Vec<_>, Vec<_>) = entries.partition(|p| p.is_dir());
        dirs.extend(sub);
        files.extend(
            rs.into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "rs")),
        );
    }
    files.sort();
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for p in files {
        let rel = p.strip_prefix(src).unwrap().to_string_lossy().to_string();
        let first = Path::new(&rel)
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .to_string();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = code_lines(&text)
            .into_iter()
            .map(|(n, line)| (format!("src/{rel}:{n}"), line))
            .collect::<Vec<_>>();
        out.entry(module).or_default().extend(code);
    }
    out
}

/// A file's code lines (1-based numbers) without comment lines and without the bodies of
/// `#[cfg(test)] mod …` blocks, wherever they are in the file: the lines after such a block are
/// read too. A block ends where its braces balance (counted on code lines).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if t == "#[cfg(test)]" {
            let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
            let is_mod = next.starts_with("mod ") || next.starts_with("pub(crate) mod ");
            if is_mod && !next.trim_end().ends_with(';') {
                // Skip the attribute, the `mod` line and its body.
                let mut depth = 0i64;
                let mut j = i + 1;
                while j < lines.len() {
                    let l = lines[j].trim_start();
                    if !l.starts_with("//") {
                        depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
                    }
                    j += 1;
                    if depth <= 0 && lines[j - 1].contains('}') {
                        break;
                    }
                }
                i = j;
                continue;
            }
        }
        if !t.starts_with("//") {
            code.push((i + 1, lines[i].to_string()));
        }
        i += 1;
    }
    code
}

/// The test support module: compiled only for the unit tests, named only by test files.
const TESTING: &str = "testing";

/// A file that holds only unit tests: `tests.rs` (`#[cfg(test)] mod tests;`), or a file of a
/// `tests/` folder (a `tests.rs`'s own submodules).
fn is_test_file(at: &str) -> bool {
    let file = at.split(':').next().unwrap();
    file.contains("/tests") || file.ends_with("tests.rs")
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
    let graph = graph_of(&modules);
    assert!(graph.len() > 10, "modules found: {:?}", graph.keys());
    assert!(
        graph["ffi"].contains("engine"),
        "the graph must see real imports"
    );
    // Folders are read whole: src/exchange/ is a module like any file, with its files' lines.
    assert!(
        modules["exchange"]
            .iter()
            .any(|(at, _)| at.starts_with("src/exchange/http1/")),
        "src/exchange/ must be read"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle in src/: {}", cycle.join(" -> "));
    }
}

/// The layers of `src/`, bottom first: a module may import only modules of a lower layer (never
/// one of its own layer, never one above). `docs/contributing/architecture.md` draws the same table.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "the ground: what the module runs on, and how it reaches Envoy",
        &["runtime", "host"],
    ),
    ("configuration", &["config"]),
    (
        "pure followers and the request table",
        &["exchange", "counting"],
    ),
    ("Envoy's own figures", &["envoy_stats"]),
    ("downstream connections", &["connections"]),
    ("the drain", &["engine"]),
    ("the tracker", &["tracking"]),
    (
        "glue, one per Envoy object",
        &["http_filter", "network_filter", "extension"],
    ),
    ("test support, named by test files only", &[TESTING]),
    ("the seam", &["ffi"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Every import from a module to one of its own layer or above, as `from -> to (file:line)`.
fn upward_imports(modules: &BTreeMap<String, Vec<(String, String)>>) -> Vec<String> {
    let mut found = Vec::new();
    for (module, lines) in modules {
        let Some(from) = layer_of(module) else {
            continue;
        };
        for (at, line) in lines {
            for to in named(line) {
                if &to == module
                    || !modules.contains_key(&to)
                    || (to == TESTING && is_test_file(at))
                {
                    continue;
                }
                match layer_of(&to) {
                    Some(l) if l < from => {}
                    _ => found.push(format!("{module} -> {to} ({at}: {})", line.trim())),
                }
            }
        }
    }
    found
}

#[test]
fn every_module_has_a_layer_and_imports_only_lower_layers() {
    let modules = modules();
    let unplaced: Vec<&String> = modules.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules of src/ with no layer in LAYERS: {unplaced:?}"
    );
    let up = upward_imports(&modules);
    assert!(
        up.is_empty(),
        "imports from a layer to its own or a higher one:\n{}",
        up.join("\n")
    );
}

/// The modules the crate shows outside (`pub mod` in `src/lib.rs`): the ones the integration
/// tests and `bench/tracker-loop` use. Every other module is `pub(crate)`, so the compiler
/// refuses any use of it from outside the crate; a module made public again fails here.
const PUBLIC: &[&str] = &[
    "config",
    "connections",
    "engine",
    "envoy_stats",
    "exchange",
    "ffi",
    "host",
    "http_filter",
];

#[test]
fn the_crate_shows_only_the_modules_its_tests_use() {
    let lib = std::fs::read_to_string(common::repo_root().join("src/lib.rs")).unwrap();
    let mut public = Vec::new();
    let mut declared = Vec::new();
    for line in lib.lines().map(str::trim) {
        let (is_pub, rest) = if let Some(r) = line.strip_prefix("pub mod ") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("pub(crate) mod ") {
            (false, r)
        } else {
            continue;
        };
        let name = rest.trim_end_matches(';').to_string();
        if is_pub {
            public.push(name.clone());
        }
        declared.push(name);
    }
    assert_eq!(public, PUBLIC, "src/lib.rs's public modules");
    for (_, modules) in LAYERS {
        for m in *modules {
            assert!(
                declared.iter().any(|d| d == m),
                "{m} not declared in src/lib.rs"
            );
        }
    }
}

/// One road to Envoy (issue 66): outside `src/ffi/`, no `fn` pointer is kept in a `OnceLock`
/// and no boxed closure is kept (Envoy's shutdown completion is a `host/` trait,
/// `ShutdownCompletion`); the shared state (`src/engine/shared/`) keeps no `&'static dyn` host,
/// the module's own stats included (their host, `StatsHost`, is passed into each call that
/// counts). Hosts are passed into the calls that need them. Test files are not read.
#[test]
fn no_fn_pointer_closure_or_kept_host_reaches_envoy() {
    let allowed: &[(&str, &str)] = &[];
    let mut found = Vec::new();
    for (module, lines) in modules() {
        if module == "ffi" {
            continue;
        }
        for (at, line) in lines {
            let file = at.split(':').next().unwrap();
            if is_test_file(&at) {
                continue;
            }
            for seam in ["OnceLock<fn", "Box<dyn Fn", "&'static dyn"] {
                if !line.contains(seam) {
                    continue;
                }
                let kept_in_state =
                    seam != "&'static dyn" || file.starts_with("src/engine/shared/");
                let excused = allowed
                    .iter()
                    .any(|(f, what)| *f == file && line.contains(what));
                if kept_in_state && !excused {
                    found.push(format!("{at}: {}", line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "seams around the host traits:\n{}",
        found.join("\n")
    );
}

/// The layer check fails on a planted upward import (a file of `counting` naming `engine`).
#[test]
fn a_planted_upward_import_is_found() {
    let dir = std::env::temp_dir().join(format!("architecture-up-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("counting")).unwrap();
    std::fs::create_dir_all(dir.join("engine")).unwrap();
    std::fs::write(dir.join("engine/mod.rs"), "use crate::counting::Ticket;\n").unwrap();
    std::fs::write(
        dir.join("counting/table.rs"),
        "use crate::engine::shared::Shared;\n",
    )
    .unwrap();
    let modules = modules_under(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let up = upward_imports(&modules);
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(
        up[0].starts_with("counting -> engine (src/counting/table.rs:1"),
        "{up:?}"
    );
}

/// Test support is for tests: a test file of a low layer may name it, a production file may not.
#[test]
fn only_test_files_may_name_the_test_support() {
    let dir = std::env::temp_dir().join(format!("architecture-testing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for m in ["counting", "engine", "testing"] {
        std::fs::create_dir_all(dir.join(m)).unwrap();
    }
    std::fs::write(dir.join("testing/mod.rs"), "use crate::engine::Shared;\n").unwrap();
    std::fs::write(
        dir.join("engine/tests.rs"),
        "use crate::testing::fixture;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("counting/table.rs"),
        "use crate::testing::HOSTS;\n",
    )
    .unwrap();
    let modules = modules_under(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let up = upward_imports(&modules);
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(
        up[0].starts_with("counting -> testing (src/counting/table.rs:1"),
        "{up:?}"
    );
    assert_eq!(find_cycle(&graph_of(&modules)), None);
}

/// Files of `src/` that hold unit tests in another shape than the one layout, each with why it is
/// left (`docs/contributing/architecture.md`, "Unit tests").
const OTHER_TEST_LAYOUTS: &[(&str, &str)] = &[(
    "src/counting/loom_tests.rs",
    "built only under `--cfg loom` (`make loom`), where the other tests are left out",
)];

/// One unit-test layout: a module's unit tests are in `tests.rs` in the module's folder
/// (`x/mod.rs` or `x.rs` declares `#[cfg(test)] mod tests;`, and they live in `x/tests.rs`),
/// which may split a long suite into its own submodules (`x/tests/*.rs`, declared by
/// `x/tests.rs`); no inline `mod tests { … }`, no `tests/` folder without its `tests.rs`, no
/// `tests/mod.rs`, no `*_tests.rs`, but the files named in [`OTHER_TEST_LAYOUTS`].
#[test]
fn unit_tests_have_one_layout() {
    let src = common::repo_root().join("src");
    let mut found = Vec::new();
    let mut excepted_seen = BTreeSet::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for p in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = format!("src/{}", p.strip_prefix(&src).unwrap().to_string_lossy());
            if let Some((e, _)) = OTHER_TEST_LAYOUTS.iter().find(|(e, _)| rel.starts_with(e)) {
                excepted_seen.insert(*e);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if let Some(at) = rel.find("/tests/") {
                // `x/tests/<m>.rs` or `x/tests/<m>/...`: `x/tests.rs` declares `mod <m>;`.
                let root = format!("{}.rs", &rel[..at + "/tests".len()]);
                let rest = &rel[at + "/tests/".len()..];
                let m = rest.split('/').next().unwrap().trim_end_matches(".rs");
                let declared = std::fs::read_to_string(common::repo_root().join(&root))
                    .is_ok_and(|t| t.lines().any(|l| l.trim() == format!("mod {m};")));
                if !declared || m == "mod" {
                    found.push(format!(
                        "{rel}: a file of a tests/ folder whose module {root} does not declare"
                    ));
                }
            }
            if name.ends_with("_tests.rs") {
                found.push(format!("{rel}: a *_tests.rs file"));
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for (i, w) in lines.windows(2).enumerate() {
                let module = w[1].trim_start_matches("pub(crate) ");
                let inline_tests = module.starts_with("mod ")
                    && module.ends_with(" {")
                    && module.contains("tests");
                if w[0].starts_with("#[cfg(") && w[0].contains("test") && inline_tests {
                    found.push(format!("{rel}:{}: an inline test module", i + 2));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "unit tests outside the one layout (x/tests.rs):\n{}",
        found.join("\n")
    );
    for (e, _) in OTHER_TEST_LAYOUTS {
        assert!(
            excepted_seen.contains(e),
            "{e} is named in OTHER_TEST_LAYOUTS but no longer there: take it off"
        );
    }
}

/// The `#[cfg(...)]` sites on `test` or a feature in the production files of `src/`, as
/// (file, predicate) -> count. Test files, `src/testing/` and the `mod tests;` lines that
/// declare test files are left out; comments too.
fn test_only_sites() -> BTreeMap<(String, String), usize> {
    let src = common::repo_root().join("src");
    let mut sites = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for p in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let rel = format!("src/{}", p.strip_prefix(&src).unwrap().to_string_lossy());
            if !rel.ends_with(".rs") || is_test_file(&rel) || rel.starts_with("src/testing/") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for (i, line) in lines.iter().enumerate() {
                let Some(pred) = line
                    .strip_prefix("#[cfg(")
                    .and_then(|l| l.strip_suffix(")]"))
                else {
                    continue;
                };
                let names_test = pred
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "test");
                if !names_test && !pred.contains("feature") {
                    continue;
                }
                let next = lines.get(i + 1).copied().unwrap_or("");
                let declares_tests = next.starts_with("mod ")
                    && (next.ends_with("tests;")
                        || next.ends_with("props;")
                        || next.ends_with("tests {"));
                if declares_tests {
                    continue;
                }
                *sites.entry((rel.clone(), pred.to_string())).or_insert(0) += 1;
            }
        }
    }
    sites
}

/// Test-only code paths in production code are named in one place: the table of
/// `docs/contributing/architecture.md` ("Test-only code in production code") says each
/// (file, cfg) and how many sites; a new one, or one gone, fails here until the table says so.
#[test]
fn test_only_code_is_named_in_one_place() {
    let doc =
        std::fs::read_to_string(common::repo_root().join("docs/contributing/architecture.md"))
            .unwrap();
    let section = doc
        .split("## Test-only code in production code")
        .nth(1)
        .expect("the section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut named = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `src/")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let file = cells[1].trim_matches('`').to_string();
        let pred = cells[2].trim_matches('`').to_string();
        let n: usize = cells[3].parse().expect("a count of sites");
        assert!(
            named.insert((file, pred), n).is_none(),
            "a row named twice: {row}"
        );
    }
    let found = test_only_sites();
    assert!(found.len() > 20, "the count must see the code: {found:?}");
    let keys: BTreeSet<&(String, String)> = found.keys().chain(named.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| found.get(*k) != named.get(*k))
        .map(|(f, p)| {
            let n = |m: &BTreeMap<(String, String), usize>| m.get(&(f.clone(), p.clone())).copied();
            format!(
                "{f} `{p}`: {:?} in the code, {:?} in the table",
                n(&found),
                n(&named)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "test-only cfg sites in src/ that the architecture page's table does not say:\n{}",
        differ.join("\n")
    );
}

/// Which modules each module names (only modules of the crate, not itself).
fn graph_of(modules: &BTreeMap<String, Vec<(String, String)>>) -> BTreeMap<&str, BTreeSet<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, lines) in modules {
        let deps = graph.entry(module).or_default();
        for (at, line) in lines {
            for m in named(line) {
                if m == TESTING && is_test_file(at) {
                    continue;
                }
                if &m != module && modules.contains_key(&m) {
                    deps.insert(m);
                }
            }
        }
    }
    graph
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

/// The checks themselves can fail: imports are seen in both `use` forms, a cycle is found, and
/// the code after a test module is read (before, the first `#[cfg(test)] mod` ended the file).
#[test]
fn the_checks_see_what_they_look_for() {
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n    fn f() { if x { } }\n}\n// crate::c\nuse crate::d;\n#[cfg(test)]\nmod fake;\nunsafe fn e() {}\n";
    let code: Vec<String> = code_lines(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(
        code,
        [
            "use crate::a;",
            "use crate::d;",
            "#[cfg(test)]",
            "mod fake;",
            "unsafe fn e() {}"
        ]
    );
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

/// A folder is read to its deepest file: an import from a file two folders down is an edge of
/// its top-level module (before, only `src/` and `src/ffi/` were read, so `src/exchange/`'s
/// edges were dropped and a cycle through it went unseen).
#[test]
fn a_cycle_through_a_nested_folder_is_found() {
    let dir = std::env::temp_dir().join(format!("architecture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("deep/inner")).unwrap();
    std::fs::write(dir.join("top.rs"), "use crate::deep::inner::x;\n").unwrap();
    std::fs::write(dir.join("deep/mod.rs"), "pub mod inner;\n").unwrap();
    std::fs::write(dir.join("deep/inner/x.rs"), "use crate::top::f;\n").unwrap();
    let modules = modules_under(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        modules.keys().collect::<Vec<_>>(),
        ["deep", "top"],
        "a folder is one module"
    );
    let graph = graph_of(&modules);
    assert!(
        find_cycle(&graph).is_some(),
        "the nested file's import must close the cycle: {graph:?}"
    );
}
