//! The Python client (`clients/python`) against real brokers: its own
//! `unittest` suite runs as a child process, handed the conformance brokers
//! (`lockbroker_tests::Conformance`: plain HTTP and mutual TLS on one fresh
//! database, the tenants of `clients/CONFORMANCE.md`), and must pass — with
//! every scenario C01–C23 run and passed by both the sync client
//! (`tests/test_conformance_sync.py`) and the async one
//! (`tests/test_conformance_async.py`).
//!
//! Both clients are standard library only, so the suite runs with the
//! system's `python3` (3.9 or newer) and nothing installed.

use std::{
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use lockbroker_tests::Conformance;

/// The suite takes about a minute and a half on an idle machine (it holds
/// leases across several TTLs, waits out rate limits); this bounds it on a
/// busy one (and a hung test).
const SUITE_WITHIN: Duration = Duration::from_secs(600);

/// How long creating a venv and building the package may take.
const INSTALL_WITHIN: Duration = Duration::from_secs(120);

/// The conformance modules, one per client, each with a test per scenario.
const CONFORMANCE_MODULES: [&str; 2] = ["test_conformance_sync", "test_conformance_async"];

/// The scenarios of `clients/CONFORMANCE.md`: C01 to C23.
const SCENARIOS: std::ops::RangeInclusive<u32> = 1..=25;

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

/// The tests of this file one at a time: the suite's timing scenarios (a
/// lease of 1 s renewed every third of it, rate limits, deadlines) are not
/// to share two cores with building the package.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// Two workers: the brokers serve the suite's concurrent connections
// (renewals, observers, stand-ins) while the test waits for the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_suite_passes_against_the_conformance_brokers() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let conformance = Conformance::start().await;
    let dir = client_dir();
    let out = conformance
        .run(
            "python3 -m unittest",
            tokio::process::Command::new("python3")
                .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
                .current_dir(&dir)
                .env("PYTHONPATH", dir.join("src"))
                .env("PYTHONDONTWRITEBYTECODE", "1"),
            SUITE_WITHIN,
        )
        .await;
    conformance.stop().await;
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
    let verdicts = verdicts(&stderr);
    for module in CONFORMANCE_MODULES {
        for id in SCENARIOS {
            let prefix = format!("test_c{id:02}_");
            let ran: Vec<&Verdict> = verdicts
                .iter()
                .filter(|v| v.module == module && v.test.starts_with(&prefix))
                .collect();
            assert!(
                !ran.is_empty(),
                "{module} has no test {prefix}* (scenario C{id:02} of clients/CONFORMANCE.md)"
            );
            for verdict in ran {
                assert_eq!(
                    verdict.outcome, "ok",
                    "{module}.{} (C{id:02}) passed",
                    verdict.test
                );
            }
        }
    }
}

/// One test of `python3 -m unittest -v`'s report.
#[derive(Debug)]
struct Verdict {
    /// The module the test is in (`test_conformance_sync`).
    module: String,
    /// The test method (`test_c04_renews_past_several_ttls`).
    test: String,
    /// `ok`, `FAIL`, `ERROR`, `skipped ...`, or `?` when none was found.
    outcome: String,
}

/// The verdicts of the `test_c..` tests in unittest's verbose report on
/// stderr: `test_c01_x (module.Class.test_c01_x) ... ok` (3.11 on; before:
/// `(module.Class)`). The verdict ends the line, or — when the test wrote
/// to stderr meanwhile (a warning logged) — is a line of its own further on.
fn verdicts(stderr: &str) -> Vec<Verdict> {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((test, rest)) = line.split_once(" (") else {
            continue;
        };
        let scenario = test
            .strip_prefix("test_c")
            .is_some_and(|t| t.len() > 3 && t.as_bytes()[..2].iter().all(u8::is_ascii_digit));
        if !scenario || test.contains(char::is_whitespace) {
            continue;
        }
        let module = rest.split(['.', ')']).next().unwrap_or_default().to_owned();
        let after = line.rsplit_once(" ... ").map(|(_, v)| v).unwrap_or("");
        let outcome = std::iter::once(after)
            .chain(lines[i + 1..].iter().copied())
            .map(str::trim)
            .find(|v| is_verdict(v))
            .unwrap_or("?")
            .to_owned();
        found.push(Verdict {
            module,
            test: test.to_owned(),
            outcome,
        });
    }
    found
}

fn is_verdict(text: &str) -> bool {
    matches!(
        text,
        "ok" | "FAIL" | "ERROR" | "expected failure" | "unexpected success"
    ) || text.starts_with("skipped")
}

#[test]
fn verdicts_are_read_from_the_verbose_report() {
    let report = "\
test_c01_acquire (test_conformance_sync.Locks.test_c01_acquire) ... ok
test_c05_lost (test_conformance_async.Locks) ... lockbroker: lease 'k' lost: lease_lost
ok
test_c06_cut (test_conformance_sync.Locks.test_c06_cut) ... FAIL
test_other (test_locks.X.test_other) ... ok
test_c07_skip (test_conformance_sync.Locks.test_c07_skip) ... skipped 'no'
";
    let got: Vec<(String, String, String)> = verdicts(report)
        .into_iter()
        .map(|v| (v.module, v.test, v.outcome))
        .collect();
    let want = [
        ("test_conformance_sync", "test_c01_acquire", "ok"),
        ("test_conformance_async", "test_c05_lost", "ok"),
        ("test_conformance_sync", "test_c06_cut", "FAIL"),
        ("test_conformance_sync", "test_c07_skip", "skipped 'no'"),
    ]
    .map(|(m, t, o)| (m.to_owned(), t.to_owned(), o.to_owned()));
    assert_eq!(got, want);
}

/// The package as `pip install clients/python` builds it, offline: the
/// pyproject's package layout (src/, `py.typed`, the `aio` subpackage, the
/// version read from `_version.py`) is built with a fresh venv's setuptools
/// (`build_py`, the step that lays out a wheel's files), then imported from
/// there. The whole `pip install` needs the `wheel` package, which venvs do
/// not carry, so it needs the network (checked by hand, see the client's
/// README); this is the part that can be checked here.
#[tokio::test]
async fn the_package_builds_from_its_pyproject_and_imports() {
    let _serial = ONE_AT_A_TIME.lock().await;
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
            // The system's setuptools (scripts/client-deps sees to it):
            // venvs of Python 3.12 and newer carry none of their own, and
            // without pip, none is installed (nor needed) in it.
            .args(["-m", "venv", "--system-site-packages", "--without-pip"])
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
        "the pyproject builds (needs setuptools: scripts/client-deps installs it)"
    );
    assert!(
        out.join("lockbroker").join("py.typed").exists(),
        "py.typed is packaged"
    );
    assert!(
        out.join("lockbroker").join("aio").join("http.py").exists(),
        "the async client is packaged"
    );
    let imported = run(
        "import lockbroker",
        tokio::process::Command::new(&python)
            .args([
                "-c",
                "import lockbroker; lockbroker.Client('http://127.0.0.1:1', 'k'); \
                 lockbroker.AsyncClient('http://127.0.0.1:1', 'k'); \
                 print(lockbroker.__file__, lockbroker.__version__)",
            ])
            .current_dir(&scratch)
            .env("PYTHONPATH", &out),
        INSTALL_WITHIN,
    )
    .await;
    let metadata = run(
        "setuptools --version",
        tokio::process::Command::new(&python)
            .args(["-c", "from setuptools import setup; setup()", "--version"])
            .current_dir(&src),
        INSTALL_WITHIN,
    )
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(imported.status.success(), "the built package imports");
    let printed = String::from_utf8_lossy(&imported.stdout);
    assert!(
        printed.contains(&*out.to_string_lossy()),
        "imported from the built copy, not from the tree"
    );
    let version = String::from_utf8_lossy(&metadata.stdout);
    let version = version.lines().last().unwrap_or_default().trim();
    assert!(
        !version.is_empty() && printed.trim().ends_with(version),
        "the package's metadata has the version of lockbroker.__version__ ({version:?} in {printed:?})"
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
