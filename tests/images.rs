//! Where users run Envoy: the official images. Envoy's `distroless-vX.Y.Z` images (the default of
//! Envoy Gateway and Contour) hold glibc and nothing else, so the module must need nothing else:
//! its dynamic section is checked, and the real Envoy of every supported minor loads it and drains
//! inside a root made only of Debian 12's `libc6` package (`scripts/glibc-root.sh`), the
//! distroless base's glibc. The Ubuntu-based images (`envoyproxy/envoy:vX.Y.Z`) have more
//! libraries and a newer glibc than Debian 12; the glibc symbol versions the module needs are
//! checked in `tests/deploy.rs`, and every other suite runs on this Debian 12 host.

use crate::common;

use common::envoy::{
    install_envoy, minor_of, module_dir, supported_envoy_versions, Envoy, Options, FAST,
};
use common::image::GlibcRoot;
use common::scenario::{sigterm_drains_in_flight_work, Slow};
use std::process::Command;
use std::sync::Arc;

/// The libraries Envoy's own binary needs, which a glibc-only root has (Envoy's images too).
const GLIBC_LIBRARIES: [&str; 6] = [
    "libc.so.6",
    "ld-linux-x86-64.so.2",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
];

fn needed(path: &std::path::Path) -> Vec<String> {
    let out = common::stdout_of(
        Command::new("readelf").arg("-d").arg(path),
        &format!("readelf -d {path:?}"),
    );
    out.lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next().map(str::to_string))
        .collect()
}

#[test]
fn the_module_needs_only_the_libraries_of_glibc() {
    let so = module_dir().join("libgraceful_drain.so");
    let libs = needed(&so);
    assert!(libs.contains(&"libc.so.6".to_string()), "{libs:?}");
    for l in &libs {
        assert!(
            GLIBC_LIBRARIES.contains(&l.as_str()),
            "the module needs {l}, which Envoy's distroless images lack (all: {libs:?})"
        );
    }
    // Every symbol it takes from outside is glibc's (or a weak one glibc may leave unset): no
    // unwinder symbol from libgcc_s, none of libstdc++.
    let nm = |only: &str| common::stdout_of(Command::new("nm").args(["-D", only]).arg(&so), "nm");
    let text = nm("--undefined-only");
    let foreign: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("@GLIBC_") && !l.trim_start().starts_with("w "))
        .collect();
    assert!(
        foreign.is_empty(),
        "symbols from outside glibc: {foreign:?}"
    );
    // It carries its own unwinder, not exported (Envoy's is never interposed).
    let exported = nm("--defined-only");
    assert!(!exported.contains("_Unwind_"), "{exported}");
    assert!(
        exported.contains("envoy_dynamic_module_on_program_init"),
        "{exported}"
    );
}

#[test]
fn the_glibc_root_holds_glibc_and_nothing_else() {
    let root = GlibcRoot::new();
    let libs = root.libraries();
    assert!(libs.iter().any(|l| l == "libc.so.6"), "{libs:?}");
    assert!(
        !libs
            .iter()
            .any(|l| l.starts_with("libgcc_s") || l.starts_with("libstdc++")),
        "{libs:?}"
    );
    assert!(
        root.libc6.starts_with("2.36-"),
        "Debian 12's glibc: {}",
        root.libc6
    );
}

/// Every supported minor, as its distroless image runs it: Envoy in a glibc-only root, the
/// module loaded from the search path the manifests use, SIGTERM with work in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_a_glibc_only_root_every_supported_envoy_loads_the_module_and_drains() {
    for v in supported_envoy_versions() {
        let root = Arc::new(GlibcRoot::new());
        let o = Options {
            envoy_bin: Some(install_envoy(&v)),
            root: Some(root.clone()),
            ..Options::default()
        };
        let mut e = Envoy::start(o).await;
        let log = e.log();
        assert!(
            log.contains(&format!("loaded into Envoy {}", minor_of(&v))),
            "{v}:\n{log}"
        );
        sigterm_drains_in_flight_work(&mut e, Slow::FAULT_HEADER, FAST.rules()).await;
    }
}
