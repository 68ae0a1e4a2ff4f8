//! `copy-module <directory>`: copies `libgraceful_drain.so`, the file next to this program in the
//! module image, into `<directory>` (an emptyDir the Envoy container mounts), so that a cluster
//! without image volumes loads the module from the same image. The copy is written under a
//! temporary name, synced, then renamed: Envoy never finds half a module. Exit status: 0 copied,
//! 1 the copy failed, 2 usage.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const MODULE: &str = "libgraceful_drain.so";

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let [dir] = &args[..] else {
        eprintln!("usage: copy-module <directory>: copies {MODULE} from the module image into it");
        return ExitCode::from(2);
    };
    let from = source();
    match copy(&from, Path::new(dir)) {
        Ok((to, bytes)) => {
            println!(
                "copy-module: {} -> {} ({bytes} bytes)",
                from.display(),
                to.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "copy-module: cannot copy {} into {}: {e}",
                from.display(),
                Path::new(dir).display()
            );
            ExitCode::FAILURE
        }
    }
}

/// The module beside this program (`/` in the image).
fn source() -> PathBuf {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/"));
    dir.join(MODULE)
}

fn copy(from: &Path, dir: &Path) -> io::Result<(PathBuf, u64)> {
    let to = dir.join(MODULE);
    let tmp = dir.join(format!(".{MODULE}.tmp"));
    let bytes = fs::copy(from, &tmp)?;
    File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, &to)?;
    File::open(dir)?.sync_all()?;
    Ok((to, bytes))
}
