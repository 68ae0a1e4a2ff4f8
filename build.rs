//! Build script: links the unwinder into the `.so` statically, so the module needs nothing but
//! glibc (Envoy's distroless images hold glibc and nothing else: no `libgcc_s.so.1`).
//!
//! Why: on `*-linux-gnu` Rust's standard library links `libgcc_s.so.1` for unwinding (rustc passes
//! `-lgcc_s` itself, so `-static-libgcc` does not help), and the module needs unwinding: every hook
//! catches panics with `catch_unwind` so that none reaches Envoy (`panic = "abort"` would kill
//! Envoy instead). GCC ships the same unwinder as a static, position-independent archive,
//! `libgcc_eh.a` (what `gcc -shared -static-libgcc` links). Copied into a directory of its own as
//! `libgcc_s.a` and put first on the cdylib's library path, rustc's `-lgcc_s` finds it before the
//! shared one (`ld` takes the first directory that has either form of the name). The unwinder's
//! symbols stay local to the `.so` (rustc's version script exports only the hooks), so it does
//! not interpose on Envoy's own; it finds frames through `dl_iterate_phdr` (glibc), and a panic
//! never unwinds past our own frames. Only the cdylib is linked this way: the test binaries keep
//! the shared unwinder.
//!
//! Checked by `tests/images.rs` (the `.so` needs only glibc's libraries, and Envoy loads it and
//! drains in a root made of Debian 12's `libc6` alone) and by `tests/hardening.rs` (panics in
//! hooks are contained).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || env != "gnu" {
        return; // musl and the others link their unwinder statically already
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .unwrap_or_else(|e| panic!("graceful_drain build: cannot run {cc} (the linker): {e}"));
    let eh = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // `-print-file-name` echoes the bare name when the compiler has no such file.
    assert!(
        eh.is_absolute() && eh.exists(),
        "graceful_drain build: {cc} has no libgcc_eh.a (the static unwinder, from GCC's \
         libgcc-*-dev package); without it the module would need libgcc_s.so.1, which Envoy's \
         distroless images lack"
    );
    println!("cargo:rerun-if-changed={}", eh.display());
    let dir = Path::new(&std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("static-unwind");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/static-unwind");
    std::fs::copy(&eh, dir.join("libgcc_s.a")).expect("copy libgcc_eh.a");
    println!("cargo:rustc-cdylib-link-arg=-L{}", dir.display());
}
