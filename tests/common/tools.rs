//! The deployment tools the tests drive (installed by `scripts/install-tools.sh`):
//! kubernetes-validate, hadolint, `kubectl kustomize`, promtool, and PyYAML (kubernetes-validate's
//! own dependency) to read rendered manifests as JSON.

use super::envoy::TempDir;
use super::{repo_root, stdout_of};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The bin directory of `.venv/`, after `scripts/install-tools.sh` made sure the tools are there.
pub fn tools_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("scripts/install-tools.sh"));
        PathBuf::from(stdout_of(&mut cmd, "scripts/install-tools.sh").trim())
    })
}

/// Run a command; returns whether it succeeded and its stdout + stderr.
pub fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run tool");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

pub fn kubernetes_validate(path: &Path) -> (bool, String) {
    run(Command::new(tools_dir().join("kubernetes-validate"))
        .args(["--strict", "--no-warn"])
        .arg(path))
}

/// kubectl: the wheel's when install-tools.sh installed one (no kubectl on the machine), else the
/// machine's.
pub fn kubectl() -> PathBuf {
    let venv = tools_dir().join("kubectl");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("kubectl")
    }
}

/// Prometheus's promtool (Debian's package, on the PATH once `scripts/install-tools.sh` ran).
pub fn promtool(args: &[&str], dir: &Path) -> (bool, String) {
    tools_dir();
    run(Command::new("promtool").args(args).current_dir(dir))
}

/// `kubectl kustomize <dir>`: the rendered manifests as YAML text.
pub fn kustomize(dir: &Path) -> String {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 manifests")
}

/// Every document of a YAML stream, as JSON.
pub fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    let out = python(
        "import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)",
        &[],
        text,
    );
    assert!(
        out.status.success(),
        "YAML does not parse:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).expect("JSON from PyYAML") {
        serde_json::Value::Array(docs) => docs,
        other => panic!("expected a list of documents, got {other}"),
    }
}

/// One YAML document as JSON.
pub fn yaml(text: &str) -> serde_json::Value {
    let mut docs = yaml_docs(text);
    assert_eq!(docs.len(), 1, "expected one YAML document");
    docs.remove(0)
}

/// Write `text` to `name` in a new temp dir (kept alive by the returned guard).
pub fn temp_file(tag: &str, name: &str, text: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let path = dir.0.join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// `dir` (absolute) as a path relative to `from` (kustomize refuses absolute resource paths).
pub fn relative(from: &Path, dir: &Path) -> String {
    let up = "../".repeat(from.components().count() - 1);
    format!(
        "{up}{}",
        dir.strip_prefix("/").expect("absolute path").display()
    )
}

/// Validate one document against a JSON Schema file (the `jsonschema` package that
/// kubernetes-validate depends on); returns whether it passed and the errors.
pub fn json_schema_validate(schema: &Path, doc: &serde_json::Value) -> (bool, String) {
    let out = python(
        "import json, sys, jsonschema\nschema = json.load(open(sys.argv[1]))\nerrors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(json.load(sys.stdin)), key=str)\nfor e in errors: print('/'.join(map(str, e.absolute_path)) + ': ' + e.message)\nsys.exit(1 if errors else 0)",
        &[schema.as_os_str()],
        &doc.to_string(),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Run a Python script of the tools' venv with `args`, `input` on its stdin.
fn python(script: &str, args: &[&std::ffi::OsStr], input: &str) -> std::process::Output {
    let mut child = Command::new(tools_dir().join("python"))
        .args(["-c", script])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the tools' python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `kubectl kustomize` of `base` with some of its optional components (subdirectories of `base`)
/// enabled, as a user's kustomization would: the rendered manifests.
pub fn kustomize_with_components(base: &Path, components: &[&str]) -> String {
    let dir = TempDir::new("kustomize");
    let mut k = format!("resources:\n- {}\ncomponents:\n", relative(&dir.0, base));
    for c in components {
        k.push_str(&format!("- {}\n", relative(&dir.0, &base.join(c))));
    }
    std::fs::write(dir.0.join("kustomization.yaml"), k).unwrap();
    kustomize(&dir.0)
}

/// One line of a platform fixtures' `SOURCES` file: the release tag and commit a fixture comes
/// from, the file's path in the platform's repository, and how the fixture is checked against it
/// (`blob:<git blob id>`: the file as it is; `sha256:<digest>`: a part cut from it, as the
/// script named in the file's header writes it).
#[derive(Debug)]
pub struct FixtureSource {
    pub tag: String,
    pub commit: String,
    pub path: String,
    pub fixture: String,
}

/// Every line of `dir/SOURCES`, each fixture checked against its recorded id (a mismatch
/// fails the test, naming the file and the release).
pub fn checked_fixture_sources(dir: &Path) -> Vec<FixtureSource> {
    let sources = std::fs::read_to_string(dir.join("SOURCES")).expect("SOURCES");
    let mut out = Vec::new();
    for line in sources
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [tag, commit, path, id, fixture] = f[..] else {
            panic!("bad SOURCES line: {line}")
        };
        assert_eq!(commit.len(), 40, "{line}");
        let file = dir.join(fixture);
        let got = match id.split_once(':') {
            Some(("blob", _)) => {
                let (ok, text) = run(Command::new("git").arg("hash-object").arg(&file));
                assert!(ok, "git hash-object {}: {text}", file.display());
                format!("blob:{}", text.trim())
            }
            Some(("sha256", _)) => format!("sha256:{}", super::sha256(&file)),
            _ => panic!("bad id in SOURCES line: {line}"),
        };
        assert_eq!(got, id, "{fixture} is not what {path} of {tag} gives");
        out.push(FixtureSource {
            tag: tag.to_string(),
            commit: commit.to_string(),
            path: path.to_string(),
            fixture: fixture.to_string(),
        });
    }
    out
}
