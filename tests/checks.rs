//! Checks on the source and the docs, no Envoy: the layering, the docs, what the compiler refuses
//! at the FFI seam.
//!
//! One test binary, `checks` (`make test TEST_ARGS="--test checks"`; one suite of it: `--test
//! <suite>`, which scripts/test-args.sh turns into this binary and the test filter `<suite>::`).
//! The integration suites are grouped into a few binaries, each built and linked once (Cargo.toml's
//! [[test]] targets, listed there since `autotests = false`); each suite stays a file of its own in
//! tests/, a module here.

#[path = "common/mod.rs"]
mod common;

#[path = "architecture.rs"]
mod architecture;

#[path = "docs.rs"]
mod docs;

#[path = "compile_fail.rs"]
mod compile_fail;

#[path = "reference.rs"]
mod reference;

#[path = "drain_picture.rs"]
mod drain_picture;

/// With `autotests = false` a file in tests/ that no test binary names would never be built nor
/// run: each is a binary's root (a `[[test]]` of Cargo.toml) or a suite of exactly one root.
#[test]
fn every_file_in_tests_is_in_one_test_binary() {
    let root = common::repo_root();
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let roots: Vec<&str> = cargo
        .lines()
        .filter_map(|l| l.strip_prefix("path = \"tests/")?.strip_suffix(".rs\""))
        .collect();
    assert!(roots.len() >= 2, "no [[test]] roots in Cargo.toml");
    let mut suites: Vec<String> = Vec::new();
    for r in &roots {
        let text = std::fs::read_to_string(root.join(format!("tests/{r}.rs"))).unwrap();
        suites.extend(text.lines().filter_map(|l| {
            Some(
                l.strip_prefix("#[path = \"")?
                    .strip_suffix(".rs\"]")?
                    .to_string(),
            )
        }));
    }
    let mut files: Vec<String> = std::fs::read_dir(root.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    for f in &files {
        let n =
            roots.iter().filter(|r| *r == f).count() + suites.iter().filter(|s| *s == f).count();
        assert_eq!(
            n, 1,
            "tests/{f}.rs is in {n} test binaries: name it in one root (tests/<binary>.rs: \
             `#[path = \"{f}.rs\"] mod {f};`, with `use crate::common;` for its `mod common;`), \
             or make it a [[test]] of Cargo.toml"
        );
    }
}
