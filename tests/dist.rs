//! The release artefacts (`make dist`, `scripts/dist.sh`), checked as a user installing them
//! would: `SHA256SUMS` matches the files, the OCI image's every blob matches its digest, its one
//! layer holds exactly `libgraceful_drain.so`, the module the suites test, and `copy-module`, its
//! entry point, which copies the module out where a cluster has no image volumes (run here in a
//! root made of the image alone), the image says which version it is and has the architecture of
//! the ELF it holds, the SBOM lists the crate and every crate it is built from with the versions
//! and checksums of Cargo.lock, and everything is reproducible: two runs give the same bytes, and
//! the same sources built in another directory give the same `.so`.

use crate::common;

use common::envoy::{module_dir, test_mode, TempDir, TestMode};
use common::image::{blob_path, read_json as json, Dist};
use common::{repo_root, sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn module() -> PathBuf {
    module_dir().join("libgraceful_drain.so")
}

/// A blob of the layout by its descriptor, checked against the descriptor's digest and size.
fn blob(layout: &Path, descriptor: &serde_json::Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let path = blob_path(layout, &descriptor["digest"]);
    assert_eq!(
        sha256(&path),
        hex,
        "blob {digest} does not match its digest"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        descriptor["size"].as_u64().expect("size"),
        "blob {digest}: size"
    );
    path
}

/// Every file under `dir`, by relative path, with its sha256.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, sha256(&p));
            }
        }
    }
    out
}

#[test]
fn the_image_holds_exactly_the_tested_module_and_every_digest_holds() {
    let d = Dist::build("dist");
    let out = d.out();
    let so_sha = sha256(&module());

    // SHA256SUMS: every artefact, each sum right (as `sha256sum -c` checks it).
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    let names: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    let archive = format!("graceful-drain-{VERSION}.oci.tar");
    let sbom = format!("graceful-drain-{VERSION}.cdx.json");
    assert_eq!(
        names,
        [
            "libgraceful_drain.so",
            archive.as_str(),
            sbom.as_str(),
            "BUILDINFO"
        ],
        "{sums}"
    );
    common::stdout_of(
        Command::new("sha256sum")
            .args(["-c", "SHA256SUMS"])
            .current_dir(&out),
        "sha256sum -c SHA256SUMS",
    );
    assert_eq!(sha256(&out.join("libgraceful_drain.so")), so_sha);

    // The layout: one manifest, tagged with the version, one layer.
    let layout = out.join("oci");
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        VERSION
    );
    assert_eq!(
        manifests[0]["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let manifest = json(&blob(&layout, &manifests[0]));
    let config = json(&blob(&layout, &manifest["config"]));
    // The image's platform is the ELF's: its header's machine, not an assumption.
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], elf_architecture(&module()));
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/copy-module"])
    );
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer = blob(&layout, &layers[0]);

    // The layer, read by GNU tar (strict about the end of the archive): the module and
    // copy-module and nothing else, owned by root, world-readable, the module's bytes the tested
    // module's.
    let list = common::stdout_of(
        Command::new("tar")
            .args(["-tvzf"])
            .arg(&layer)
            .args(["--numeric-owner", "--full-time"]),
        "tar -tvzf",
    );
    let entries: Vec<&str> = list.lines().collect();
    assert_eq!(entries.len(), 3, "{list}");
    assert!(
        entries[0].starts_with("drwxr-xr-x 0/0") && entries[0].ends_with(" ."),
        "{list}"
    );
    assert!(
        entries[1].starts_with("-rwxr-xr-x 0/0") && entries[1].ends_with(" copy-module"),
        "{list}"
    );
    assert!(
        entries[2].starts_with("-rw-r--r-- 0/0") && entries[2].ends_with(" libgraceful_drain.so"),
        "{list}"
    );
    let x = TempDir::new("layer");
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(&x.0)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        sha256(&x.0.join("libgraceful_drain.so")),
        so_sha,
        "the image's module"
    );
    // The config's diff_id is the uncompressed layer's digest.
    let raw = Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -dc '{}' | sha256sum", layer.display()))
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(config["rootfs"]["diff_ids"][0], format!("sha256:{raw}"));

    // Another OCI tool reads it the same way (what `skopeo copy` to a registry would push).
    let inspect = common::stdout_of(
        Command::new("skopeo")
            .arg("inspect")
            .arg(format!("oci:{}:{VERSION}", layout.display())),
        "skopeo inspect",
    );
    let inspect: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    assert_eq!(inspect["Digest"], manifests[0]["digest"]);
    assert_eq!(inspect["Layers"][0], layers[0]["digest"]);

    // BUILDINFO names the version, the commit and the image digest to pin.
    let info = std::fs::read_to_string(out.join("BUILDINFO")).unwrap();
    assert!(
        info.starts_with(&format!("graceful-drain {VERSION}\n")),
        "{info}"
    );
    assert!(
        info.contains(&format!(
            "image_manifest {}",
            manifests[0]["digest"].as_str().unwrap()
        )),
        "{info}"
    );
    assert!(info.contains("\nrustc rustc "), "{info}");
    assert!(
        info.contains(&format!(
            "\nimage_architecture linux/{}\n",
            elf_architecture(&module())
        )),
        "{info}"
    );
    assert!(
        info.contains(&format!("\nsbom {sbom} (cargo-cyclonedx ")),
        "{info}"
    );

    // The oci-archive holds the same layout.
    let ax = TempDir::new("archive");
    let st = Command::new("tar")
        .arg("-xf")
        .arg(out.join(&archive))
        .arg("-C")
        .arg(&ax.0)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(tree(&ax.0), tree(&layout), "the archive is the layout");
}

#[test]
fn two_dist_runs_give_the_same_bytes() {
    let a = Dist::build("dist-a");
    // A second later: no time of the run may reach the artefacts.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let b = Dist::build("dist-b");
    let (ta, tb) = (tree(&a.out()), tree(&b.out()));
    assert!(ta.len() >= 7, "{ta:?}");
    assert_eq!(ta, tb, "two dist runs differ");
}

/// Copy the project's sources (tracked files and new ones not ignored, as they are now) into
/// `dest`.
fn copy_sources(dest: &Path) {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(repo_root())
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files");
    for name in out.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let rel = Path::new(std::str::from_utf8(name).unwrap());
        let from = repo_root().join(rel);
        if !from.is_file() {
            continue; // deleted in the work tree
        }
        let to = dest.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap();
    }
}

/// `make build` (the Makefile's reproducible flags) of the sources copied into `dir`.
fn build_copy(dir: &Path) -> PathBuf {
    copy_sources(dir);
    common::stdout_of(
        Command::new("make")
            .args(["--no-print-directory", "build"])
            .current_dir(dir)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("MAKEFLAGS")
            .env_remove("MAKELEVEL"),
        &format!("make build in {dir:?}"),
    );
    dir.join("target/release/libgraceful_drain.so")
}

#[test]
fn the_same_sources_built_in_another_directory_give_the_same_module() {
    let a = TempDir::new("repro-a");
    let built = build_copy(&a.0);
    // Under `make test` the module under test was built by `make build` here: it is the
    // reference. Run otherwise (plain `cargo test`), a second copy is.
    let remapped = std::env::var("RUSTFLAGS")
        .is_ok_and(|f| f.contains(&format!("--remap-path-prefix={}=", repo_root().display())));
    let b = TempDir::new("repro-b");
    let release_build = std::env::var_os("GRACEFUL_DRAIN_MODULE_DIR").is_some()
        && test_mode() != TestMode::CrossCheck;
    let reference = if remapped && release_build {
        module()
    } else {
        build_copy(&b.0)
    };
    assert_eq!(
        sha256(&built),
        sha256(&reference),
        "{built:?} and {reference:?} differ"
    );
    // Neither the build directory nor cargo's home is written into it.
    let bytes = std::fs::read(&built).unwrap();
    let cargo_home = std::env::var("CARGO_HOME")
        .unwrap_or_else(|_| std::env::var("HOME").unwrap_or_default() + "/.cargo");
    for path in [a.0.display().to_string(), cargo_home] {
        assert!(
            !bytes.windows(path.len()).any(|w| w == path.as_bytes()),
            "{path} is written into the module"
        );
    }
}

/// What a release says of itself: the changelog has an entry for this version (keep-a-changelog
/// headings), and the license file is the one Cargo.toml names.
#[test]
fn the_changelog_and_the_license_go_with_the_version() {
    let log = std::fs::read_to_string(repo_root().join("CHANGELOG.md")).unwrap();
    let heading = format!("## [{VERSION}] - ");
    let entry = log
        .lines()
        .find(|l| l.starts_with(&heading))
        .unwrap_or_else(|| panic!("CHANGELOG.md has no `{heading}YYYY-MM-DD` entry"));
    let date = &entry[heading.len()..];
    assert!(
        date.len() == 10 && date.chars().filter(|c| *c == '-').count() == 2,
        "{entry}"
    );
    assert!(
        log.contains("## [Unreleased]"),
        "an Unreleased section on top"
    );
    let license = std::fs::read_to_string(repo_root().join("LICENSE")).unwrap();
    assert!(license.contains("Apache License") && license.contains("Version 2.0"));
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    assert!(cargo.contains("license = \"Apache-2.0\""));
}

/// The OCI architecture of an ELF file, from its header (class, byte order, e_machine), read here
/// independently of scripts/dist.sh.
fn elf_architecture(path: &Path) -> &'static str {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..4], b"\x7fELF", "{path:?} is not an ELF file");
    assert_eq!(b[5], 1, "{path:?}: little-endian");
    match (b[4], u16::from_le_bytes([b[18], b[19]])) {
        (2, 62) => "amd64",
        (2, 183) => "arm64",
        (c, m) => panic!("{path:?}: ELF class {c}, e_machine {m}: not a platform this test knows"),
    }
}

/// `scripts/dist.sh` on copies of the module and of copy-module whose ELF headers say another
/// machine: the image's architecture is read from the ELF, so an aarch64 module gives an arm64
/// image (and BUILDINFO says so), not an amd64 one. Refused: a module whose copy-module is of
/// another architecture, and a machine the OCI spec has no name for, named.
#[test]
fn the_image_architecture_comes_from_the_elf_header() {
    let host = Dist::build("elf-host");
    let dir = TempDir::new("elf-arch");
    let patched = |from: &Path, name: &str, machine: u16| {
        let mut b = std::fs::read(from).unwrap();
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        let to = dir.0.join(name);
        std::fs::write(&to, &b).unwrap();
        to
    };
    let volume = host.image_volume();
    let copier = volume.0.join("copy-module");
    let dist = |so: &Path, copier: &Path, out: &str| {
        Command::new("bash")
            .arg(repo_root().join("scripts/dist.sh"))
            .arg(so)
            .arg(dir.0.join(out))
            .env("COPY_MODULE", copier)
            .output()
            .unwrap()
    };
    // aarch64 (e_machine 183), both files.
    let so = patched(&module(), "arm64.so", 183);
    let out = dist(&so, &patched(&copier, "copy-module-arm64", 183), "arm64");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let layout = dir.0.join("arm64/oci");
    let index = json(&layout.join("index.json"));
    let manifest = json(&blob(&layout, &index["manifests"][0]));
    let config = json(&blob(&layout, &manifest["config"]));
    assert_eq!(elf_architecture(&so), "arm64");
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("arm64"))
    );
    let info = std::fs::read_to_string(dir.0.join("arm64/BUILDINFO")).unwrap();
    assert!(
        info.contains("\nimage_architecture linux/arm64\n"),
        "{info}"
    );
    // Refused.
    for (so, copier, want) in [
        (
            so.clone(),
            copier.clone(),
            "copy-module is amd64, the module arm64",
        ),
        (
            patched(&module(), "odd.so", 0x1234),
            copier.clone(),
            "e_machine 4660: no OCI architecture",
        ),
    ] {
        let out = dist(&so, &copier, "refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{so:?}: {err}");
        assert!(err.contains(want), "{so:?}: {err}");
        assert!(!dir.0.join("refused/oci").exists());
    }
}

/// The SBOM (CycloneDX, cargo-cyclonedx): the crate at this version and every crate the module
/// is built from (`cargo tree`'s normal dependencies for this target: no dev-dependencies), each
/// with its version, its purl and, for crates.io's, Cargo.lock's checksum; copy-module too. No
/// path of the build machine in it.
#[test]
fn the_sbom_lists_the_crate_and_every_crate_it_is_built_from() {
    let d = Dist::build("sbom");
    let path = d.out().join(format!("graceful-drain-{VERSION}.cdx.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&repo_root().display().to_string()), "{text}");
    let bom: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.5");
    let me = &bom["metadata"]["component"];
    assert_eq!(
        (me["name"].as_str(), me["version"].as_str()),
        (Some("graceful-drain"), Some(VERSION))
    );
    assert_eq!(me["licenses"][0]["expression"], "Apache-2.0");
    assert_eq!(bom["metadata"]["tools"][0]["name"], "cargo-cyclonedx");

    // Cargo.lock's checksums, by name and version.
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock")).unwrap();
    let mut checksums = BTreeMap::new();
    for p in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            p.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        if let Some(sum) = field("checksum") {
            checksums.insert((field("name").unwrap(), field("version").unwrap()), sum);
        }
    }
    // What the module is built from, as cargo itself says.
    let host =
        String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout).unwrap();
    let host = host
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap()
        .to_string();
    let tree = Command::new("cargo")
        .args([
            "tree", "--locked", "-e", "normal", "--prefix", "none", "--target", &host,
        ])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let mut want: std::collections::BTreeSet<(String, String)> =
        String::from_utf8_lossy(&tree.stdout)
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some((
                    w.next()?.to_string(),
                    w.next()?.strip_prefix('v')?.to_string(),
                ))
            })
            .filter(|(n, _)| n != "graceful-drain")
            .collect();
    assert!(want.iter().any(|(n, _)| n == "serde_json"), "{want:?}");
    want.insert((
        "graceful-drain-copy-module".to_string(),
        VERSION.to_string(),
    ));

    let mut got = std::collections::BTreeSet::new();
    for c in bom["components"].as_array().expect("components") {
        let (name, version) = (c["name"].as_str().unwrap(), c["version"].as_str().unwrap());
        assert!(
            c["purl"]
                .as_str()
                .unwrap()
                .starts_with(&format!("pkg:cargo/{name}@{version}")),
            "{c}"
        );
        if let Some(sum) = checksums.get(&(name.to_string(), version.to_string())) {
            assert_eq!(c["hashes"][0]["alg"], "SHA-256", "{c}");
            assert_eq!(
                c["hashes"][0]["content"].as_str(),
                Some(sum.as_str()),
                "{name} {version}: Cargo.lock's checksum"
            );
        }
        got.insert((name.to_string(), version.to_string()));
    }
    assert_eq!(got, want, "the SBOM's components against cargo tree");
    // Not a test dependency among them.
    assert!(
        !got.iter().any(|(n, _)| n == "tokio" || n == "proptest"),
        "{got:?}"
    );
}

/// copy-module, the image's entry point, run as the without-image-volumes init container runs
/// it: in a root made of the image's layer and nothing else (no shell, no libc), as user 65532
/// where this test can switch to it, into an empty directory: the module arrives whole, with its
/// bytes. It is static (no interpreter, no library needed) and of the module's architecture; it
/// fails, saying so, without a directory or into one that does not exist.
#[test]
fn copy_module_copies_the_module_in_a_root_made_of_the_image_alone() {
    let d = Dist::build("copy-module");
    let root = d.image_volume();
    let exe = root.0.join("copy-module");
    let headers = Command::new("readelf")
        .args(["-ld"])
        .arg(&exe)
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&headers.stdout);
    assert!(
        !headers.contains("INTERP") && !headers.contains("(NEEDED)"),
        "{headers}"
    );
    assert_eq!(elf_architecture(&exe), elf_architecture(&module()));

    use std::os::unix::fs::PermissionsExt;
    let out_dir = root.0.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    let chroot = |args: &[&str]| {
        let mut cmd = Command::new("unshare");
        cmd.arg("--mount");
        if !as_root {
            cmd.arg("--map-root-user");
        }
        cmd.arg("chroot");
        if as_root {
            cmd.arg("--userspec=65532:65532");
        }
        cmd.arg(&root.0).arg("/copy-module").args(args);
        cmd.output().unwrap()
    };
    let run = chroot(&["/out"]);
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let copied = out_dir.join("libgraceful_drain.so");
    assert_eq!(sha256(&copied), sha256(&module()), "the copied module");
    let names: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["libgraceful_drain.so"], "no temporary file left");
    if as_root {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&copied).unwrap().uid(), 65532);
    }
    assert_eq!(
        std::fs::metadata(&copied).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // Failures say so.
    let usage = chroot(&[]);
    assert_eq!(
        usage.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&usage.stderr)
    );
    let missing = chroot(&["/no-such-dir"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot copy"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}
