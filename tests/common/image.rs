//! A glibc-only root, standing in for Envoy's distroless images (`scripts/glibc-root.sh`: Debian
//! 12's `libc6` package and nothing else), and how to start Envoy inside it: `chroot` in a private
//! mount namespace with `/proc` and `/dev` mounted, as a container runtime gives them. The network
//! namespace stays the host's, so the test reaches Envoy on loopback as usual. And the release
//! artefacts (`scripts/dist.sh`), with the module image's one layer unpacked as a Kubernetes
//! image volume shows it.

use super::envoy::{module_dir, TempDir};
use super::repo_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One root for one Envoy process; removed on drop.
#[derive(Debug)]
pub struct GlibcRoot {
    dir: TempDir,
    /// The `libc6` package version the root was made from.
    pub libc6: String,
}

/// Where Envoy, its config and the module sit inside the root (as in Envoy's images, with the
/// module in the search path the repository's manifests use).
pub const ENVOY_IN_ROOT: &str = "/usr/local/bin/envoy";
pub const MODULES_IN_ROOT: &str = "/usr/local/lib/envoy/modules";
pub const CONFIG_IN_ROOT: &str = "/etc/envoy/envoy.yaml";

impl GlibcRoot {
    pub fn new() -> GlibcRoot {
        let dir = TempDir::new("glibc-root");
        let root = dir.0.join("root");
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("scripts/glibc-root.sh"))
            .arg(&root);
        let libc6 = super::stdout_of(&mut cmd, "scripts/glibc-root.sh")
            .trim()
            .to_string();
        GlibcRoot { dir, libc6 }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.0.join("root")
    }

    fn inside(&self, abs: &str) -> PathBuf {
        self.path().join(abs.trim_start_matches('/'))
    }

    /// Every shared library file the root holds (its whole `lib` tree).
    pub fn libraries(&self) -> Vec<String> {
        let mut found = Vec::new();
        for d in ["lib", "lib64", "usr/lib"] {
            collect_names(&self.path().join(d), &mut found);
        }
        found.sort();
        found
    }

    /// A command that starts `envoy` inside the root with the config `cfg` and the module file
    /// `module` (both copied in); further arguments given to the command go to Envoy.
    pub fn envoy_command(&self, envoy: &Path, cfg: &Path, module: &Path) -> Command {
        copy(envoy, &self.inside(ENVOY_IN_ROOT), 0o755);
        copy(cfg, &self.inside(CONFIG_IN_ROOT), 0o644);
        copy(
            module,
            &self.inside(&format!("{MODULES_IN_ROOT}/libgraceful_drain.so")),
            0o644,
        );
        let root = self.path();
        // SAFETY: geteuid has no preconditions.
        let as_root = unsafe { libc::geteuid() } == 0;
        let mut cmd = Command::new("unshare");
        cmd.arg("--mount");
        if !as_root {
            // Without root, a user namespace maps us to root in it (chroot needs that).
            cmd.arg("--map-root-user");
        }
        // unshare does not fork (no --fork), and sh and chroot exec: the child's pid is Envoy's,
        // so the guard's signals reach Envoy itself.
        cmd.args([
            "sh",
            "-c",
            r#"r="$0"; mount -t proc proc "$r/proc" && mount --bind /dev "$r/dev" && exec chroot "$r" "$@""#,
        ])
        .arg(&root)
        .arg(ENVOY_IN_ROOT)
        .args(["-c", CONFIG_IN_ROOT])
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", MODULES_IN_ROOT)
        // Nothing of the host's library path applies inside.
        .env_remove("LD_LIBRARY_PATH");
        cmd
    }
}

fn copy(from: &Path, to: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(to);
    // A hard link where the file system allows (Envoy is ~100 MB), else a copy.
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {from:?} to {to:?}: {e}"));
    }
    let _ = std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode));
}

fn collect_names(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            collect_names(&p, out);
        } else if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
            if name.contains(".so") {
                out.push(name.to_string());
            }
        }
    }
}

/// The release artefacts of the module under test, written by `scripts/dist.sh` (what
/// `make dist` runs) into a temp dir.
pub struct Dist {
    dir: TempDir,
}

impl Dist {
    pub fn build(tag: &str) -> Dist {
        super::tools::tools_dir(); // umoci, skopeo
        let dir = TempDir::new(tag);
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/dist.sh"))
            .arg(module_dir().join("libgraceful_drain.so"))
            .arg(dir.0.join("dist"))
            .output()
            .expect("run scripts/dist.sh");
        assert!(
            out.status.success(),
            "scripts/dist.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Dist { dir }
    }

    /// The output directory (`target/dist/` for `make dist`).
    pub fn out(&self) -> PathBuf {
        self.dir.0.join("dist")
    }

    /// The OCI image layout.
    pub fn layout(&self) -> PathBuf {
        self.out().join("oci")
    }

    /// The image's files as a Kubernetes image volume mounts them: its layers unpacked, in order,
    /// into a fresh directory (by GNU tar, strict about the archive's end).
    pub fn image_volume(&self) -> TempDir {
        let layout = self.layout();
        let index = read_json(&layout.join("index.json"));
        let manifest = read_json(&blob_path(&layout, &index["manifests"][0]["digest"]));
        let vol = TempDir::new("image-volume");
        for layer in manifest["layers"].as_array().expect("layers") {
            let st = Command::new("tar")
                .arg("-xzf")
                .arg(blob_path(&layout, &layer["digest"]))
                .arg("-C")
                .arg(&vol.0)
                .status()
                .expect("tar");
            assert!(st.success(), "unpacking a layer");
        }
        vol
    }
}

pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        .unwrap_or_else(|e| panic!("{path:?} is not JSON: {e}"))
}

/// The blob file of a digest (`sha256:<hex>`) in a layout.
pub fn blob_path(layout: &Path, digest: &serde_json::Value) -> PathBuf {
    let d = digest.as_str().expect("digest");
    layout
        .join("blobs/sha256")
        .join(d.strip_prefix("sha256:").expect("a sha256 digest"))
}
