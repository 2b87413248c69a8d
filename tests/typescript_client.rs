//! The TypeScript client (`clients/typescript`) against real brokers: its
//! type check (`npm run typecheck`, `tsc --noEmit`, strict) and its own
//! `node --test` suite (built with `tsc` first), run as child processes
//! with the conformance brokers' environment (`lockbroker_tests::Conformance`,
//! clients/CONFORMANCE.md). Both must pass, and every scenario C01–C23 must
//! have run and passed: a test the suite lost or skipped fails this one.
//!
//! The node packages come from `scripts/client-deps` (`npm ci`).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use lockbroker_tests::Conformance;

/// `tsc --noEmit` over the sources, tests and examples.
const TYPECHECK_WITHIN: Duration = Duration::from_secs(180);

/// Building with `tsc` and the suite: about half a minute on an idle
/// machine; this bounds it on a busy one (and a hung test).
const SUITE_WITHIN: Duration = Duration::from_secs(420);

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("clients")
        .join("typescript")
}

fn npm(dir: &Path, script: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("npm");
    cmd.args(["run", "--silent", script])
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("NODE_OPTIONS", "");
    cmd
}

#[tokio::test]
async fn the_typescript_client_typechecks_and_passes_every_conformance_scenario() {
    let dir = client_dir();
    assert!(
        dir.join("node_modules").join("typescript").exists(),
        "clients/typescript/node_modules is missing: run scripts/client-deps (npm ci)"
    );
    let conformance = Conformance::start().await;
    let typecheck = conformance
        .run(
            "npm run typecheck",
            &mut npm(&dir, "typecheck"),
            TYPECHECK_WITHIN,
        )
        .await;
    let suite = conformance
        .run("npm test", &mut npm(&dir, "test"), SUITE_WITHIN)
        .await;
    conformance.stop().await;

    assert!(
        typecheck.status.success(),
        "tsc --noEmit found errors (its output is above)"
    );
    let tap = String::from_utf8_lossy(&suite.stdout);
    let results = results(&tap);
    let failed: Vec<&String> = results
        .iter()
        .filter(|(_, passed)| !**passed)
        .map(|(name, _)| name)
        .collect();
    assert!(
        suite.status.success() && failed.is_empty(),
        "the TypeScript suite failed (its output is above); failing: {failed:?}"
    );
    for n in 1..=25 {
        let id = format!("c{n:02}");
        let runs: Vec<(&String, &bool)> = results
            .iter()
            .filter(|(name, _)| name.starts_with(&format!("{id} ")))
            .collect();
        assert!(!runs.is_empty(), "no test of scenario {id} ran");
        assert!(
            runs.iter().all(|(_, passed)| **passed),
            "scenario {id} did not pass: {runs:?}"
        );
    }
    assert!(
        results.contains_key("the generated API types are not stale"),
        "the stale-types test ran"
    );
}

/// Every test of a TAP report (`node --test --test-reporter=tap`) by name:
/// passed (`ok`, not skipped nor a todo) or not. The files' own entries
/// (named by their paths) are kept too, so a file that failed to load
/// counts as failed.
fn results(tap: &str) -> BTreeMap<String, bool> {
    let mut results = BTreeMap::new();
    for line in tap.lines() {
        let line = line.trim_start();
        let (ok, rest) = if let Some(rest) = line.strip_prefix("not ok ") {
            (false, rest)
        } else if let Some(rest) = line.strip_prefix("ok ") {
            (true, rest)
        } else {
            continue;
        };
        let Some((_, title)) = rest.split_once(" - ") else {
            continue;
        };
        let (name, directive) = match title.split_once(" # ") {
            Some((name, directive)) => (name, directive.to_ascii_uppercase()),
            None => (title, String::new()),
        };
        let skipped = directive.starts_with("SKIP") || directive.starts_with("TODO");
        let passed = ok && !skipped;
        results
            .entry(name.trim().to_owned())
            .and_modify(|p: &mut bool| *p &= passed)
            .or_insert(passed);
    }
    results
}

#[test]
fn tap_results_are_read_by_name() {
    let tap = "TAP version 13\n\
        # Subtest: c01 acquire and release\n\
        ok 1 - c01 acquire and release\n  ---\n  duration_ms: 12\n  ...\n\
        not ok 2 - c02 try returns null\n\
        ok 3 - c03 wait # SKIP no broker\n\
        \x20   ok 1 - c04 nested\n\
        # pass 2\n";
    let r = results(tap);
    assert_eq!(r.get("c01 acquire and release"), Some(&true));
    assert_eq!(r.get("c02 try returns null"), Some(&false));
    assert_eq!(r.get("c03 wait"), Some(&false));
    assert_eq!(r.get("c04 nested"), Some(&true));
    assert_eq!(r.len(), 4);
}
