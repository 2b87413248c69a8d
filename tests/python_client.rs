//! The Python client (`clients/python`) against a real broker: its own
//! `unittest` suite runs as a child process, pointed at a broker on a fresh
//! database with two tenants, and must pass.

use std::{
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use lockbroker_tests::{Broker, KEY, OTHER_KEY};

/// The suite takes about ten seconds on an idle machine; this bounds it on a
/// busy one (and a hung test).
const SUITE_WITHIN: Duration = Duration::from_secs(300);

/// How long creating a venv and building the package may take.
const INSTALL_WITHIN: Duration = Duration::from_secs(120);

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("clients")
        .join("python")
}

/// Runs `cmd` to its end within `limit`, killing it if it overruns, and
/// prints what it wrote (cargo shows it for a failing test).
async fn run(what: &str, cmd: &mut tokio::process::Command, limit: Duration) -> Output {
    let child = cmd.kill_on_drop(true).output();
    let out = tokio::time::timeout(limit, child)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{what} could not start (is python3 installed?): {e}"));
    println!(
        "--- {what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn the_python_client_suite_passes_against_a_broker() {
    let broker = Broker::start().await;
    let dir = client_dir();
    let out = run(
        "python3 -m unittest",
        tokio::process::Command::new("python3")
            .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
            .current_dir(&dir)
            .env("LOCKBROKER_URL", broker.url())
            .env("LOCKBROKER_API_KEY", KEY)
            .env("LOCKBROKER_OTHER_API_KEY", OTHER_KEY)
            .env("PYTHONPATH", dir.join("src"))
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        SUITE_WITHIN,
    )
    .await;
    broker.stop().await;
    assert!(
        out.status.success(),
        "the Python suite failed (its output is above)"
    );
    // A suite that found no tests exits 0 on old Pythons (5 from 3.12).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Ran 0 tests") && stderr.contains("\nOK"),
        "the Python suite ran tests and passed"
    );
}

/// The package as `pip install clients/python` builds it, offline: the
/// pyproject's package layout (src/, `py.typed`) is built with a fresh
/// venv's setuptools (`build_py`, the step that lays out a wheel's files),
/// then imported from there. The whole `pip install` needs the `wheel`
/// package, which venvs do not carry, so it needs the network (checked by
/// hand, see the client's README); this is the part that can be checked
/// here.
#[tokio::test]
async fn the_package_builds_from_its_pyproject_and_imports() {
    let scratch = std::env::temp_dir().join(format!("lb-pyclient-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let (venv, src, out) = (
        scratch.join("venv"),
        scratch.join("src"),
        scratch.join("out"),
    );
    let made = run(
        "python3 -m venv",
        tokio::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv),
        INSTALL_WITHIN,
    )
    .await;
    assert!(made.status.success(), "python3 -m venv works");
    let python = venv.join("bin").join("python");
    // A copy, so the build leaves nothing (build/, *.egg-info) in the tree.
    copy_dir(&client_dir(), &src);
    let built = run(
        "setuptools build_py",
        tokio::process::Command::new(&python)
            .args([
                "-c",
                "from setuptools import setup; setup()",
                "-q",
                "build_py",
                "--build-lib",
            ])
            .arg(&out)
            .current_dir(&src),
        INSTALL_WITHIN,
    )
    .await;
    assert!(
        built.status.success(),
        "the pyproject builds (needs setuptools in the venv: Python 3.11 and older carry it)"
    );
    assert!(
        out.join("lockbroker").join("py.typed").exists(),
        "py.typed is packaged"
    );
    let imported = run(
        "import lockbroker",
        tokio::process::Command::new(&python)
            .args([
                "-c",
                "import lockbroker; lockbroker.Client('http://127.0.0.1:1', 'k'); print(lockbroker.__file__)",
            ])
            .current_dir(&scratch)
            .env("PYTHONPATH", &out),
        INSTALL_WITHIN,
    )
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(imported.status.success(), "the built package imports");
    assert!(
        String::from_utf8_lossy(&imported.stdout).contains(&*out.to_string_lossy()),
        "imported from the built copy, not from the tree"
    );
}

/// Copies a directory tree without its caches and build leftovers.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if name_str == "__pycache__" || name_str == "build" || name_str.ends_with(".egg-info") {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}
