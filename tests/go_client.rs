//! The Go client (`clients/go`) against real brokers: `go vet ./...`, then
//! its own `go test` suite, run as child processes with the brokers and
//! variables of `clients/CONFORMANCE.md` ([`Conformance`]). Both must
//! succeed, and every conformance scenario's test (C01–C23) and every
//! example must have run and passed: a suite that skipped or lost a test
//! fails here.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use lockbroker_tests::Conformance;

/// The suite takes about a minute on an idle machine; this bounds it on a
/// busy one (and a hung test). `go test` gets its own, shorter `-timeout`
/// so that a hung test is reported with its goroutines.
const SUITE_WITHIN: Duration = Duration::from_secs(600);
const GO_TEST_TIMEOUT: &str = "480s";

/// How long `go vet` (which compiles the package and its tests) may take.
const VET_WITHIN: Duration = Duration::from_secs(300);

/// The tests `go test -v` must report as passed.
const EXAMPLES: [&str; 4] = [
    "Example_cronJob",
    "Example_leaderLoop",
    "Example_fencedWrite",
    "Example_session",
];

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("clients")
        .join("go")
}

/// `go` run offline in the client's directory: the module has no
/// dependencies, so nothing may be fetched (`GOPROXY=off`,
/// `GOFLAGS=-mod=readonly`, `GOTOOLCHAIN=local`: no toolchain download on a
/// newer Go); its build cache lives under the target directory; no cgo, so
/// no C compiler is needed.
fn go(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("go");
    cmd.args(args)
        .current_dir(client_dir())
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .env("GOTELEMETRY", "off")
        .env("CGO_ENABLED", "0")
        .env(
            "GOCACHE",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-build"),
        );
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_client_passes_go_vet_and_its_conformance_suite() {
    let conformance = Conformance::start().await;
    let vet = conformance
        .run(
            "go vet ./... (is Go installed? scripts/client-deps installs it)",
            &mut go(&["vet", "./..."]),
            VET_WITHIN,
        )
        .await;
    let test = conformance
        .run(
            "go test",
            &mut go(&[
                "test",
                "-count=1",
                "-v",
                "-timeout",
                GO_TEST_TIMEOUT,
                "./...",
            ]),
            SUITE_WITHIN,
        )
        .await;
    conformance.stop().await;

    assert!(
        vet.status.success(),
        "go vet ./... is clean (its output is above)"
    );
    assert!(
        test.status.success(),
        "the Go suite passes (its output is above)"
    );
    let out = String::from_utf8_lossy(&test.stdout);
    for id in 1..=25 {
        let passed = format!("--- PASS: TestC{id:02}");
        assert!(
            out.contains(&passed),
            "the test of scenario C{id:02} ran and passed (no `{passed}` in the output above)"
        );
    }
    for example in EXAMPLES {
        assert!(
            out.contains(&format!("--- PASS: {example} ")),
            "{example} ran and passed"
        );
    }
    assert!(
        out.contains("--- PASS: TestReadmeProgramsRun"),
        "the README's programs ran"
    );
    assert!(!out.contains("--- SKIP"), "nothing is skipped");
}
