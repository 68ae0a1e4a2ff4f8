//! What the compiler refuses at the FFI seam (`src/ffi/`): a reference or handle lent to a hook
//! cannot outlive that hook. Each file under `tests/compile_fail/` must fail to compile with the
//! error in its `.stderr` beside it (`TRYBUILD=overwrite cargo test --test checks compile_fail` rewrites
//! them after a compiler change; read the diff).

#[test]
fn lent_references_and_hook_handles_stay_inside_their_hook() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
