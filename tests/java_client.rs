//! The Java client (`clients/java`) against real brokers: its JUnit 5 suite
//! (`clients/java/run-tests`: `javac`, then JUnit's console launcher, all
//! offline) runs as a child process with the brokers and variables of
//! `clients/CONFORMANCE.md` ([`Conformance`]). It must succeed, and the
//! launcher's XML report must show every conformance scenario's test
//! (C01–C23) and the README's examples as run and passed: a suite that
//! skipped or lost a test fails here.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use lockbroker_tests::Conformance;

/// The suite takes about a minute on an idle machine (compiling included);
/// this bounds it on a busy one, and a hung test.
const SUITE_WITHIN: Duration = Duration::from_secs(600);

/// The test classes that must have run and passed besides the scenarios':
/// the README's examples, the checks that the README shows them and names
/// every scenario's test, and the pom's.
const ALSO: [&str; 3] = [
    "dev.lockbroker.client.ExamplesTest",
    "dev.lockbroker.client.ReadmeTest",
    "dev.lockbroker.client.PackagingTest",
];

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("clients")
        .join("java")
}

/// One `<testcase>` of a JUnit XML report.
#[derive(Debug)]
struct TestCase {
    class: String,
    /// The method with its parentheses: `c01AcquireAndRelease()`.
    name: String,
    passed: bool,
}

/// The test cases of a JUnit XML report (the legacy format JUnit's console
/// launcher writes): each `<testcase name=".." classname="..">`, passed
/// when it holds no `<failure`, `<error` nor `<skipped`.
fn test_cases(xml: &str) -> Vec<TestCase> {
    let attribute = |tag: &str, name: &str| -> String {
        let start = format!("{name}=\"");
        tag.find(&start)
            .map(|at| {
                let rest = &tag[at + start.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_owned()
            })
            .unwrap_or_default()
    };
    xml.split("<testcase ")
        .skip(1)
        .map(|case| {
            let tag = &case[..case.find('>').unwrap_or(case.len())];
            let body = if tag.ends_with('/') {
                ""
            } else {
                &case[..case.find("</testcase>").unwrap_or(case.len())]
            };
            TestCase {
                class: attribute(tag, "classname"),
                name: attribute(tag, "name"),
                passed: !["<failure", "<error", "<skipped"]
                    .iter()
                    .any(|bad| body.contains(bad)),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_java_client_passes_its_conformance_suite() {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("java-client");
    let report = out_dir.join("reports").join("TEST-junit-jupiter.xml");
    let _ = std::fs::remove_file(&report);
    let conformance = Conformance::start().await;
    let run = conformance
        .run(
            "clients/java/run-tests (a JDK and junit5? scripts/client-deps installs them)",
            tokio::process::Command::new(client_dir().join("run-tests"))
                .env("LOCKBROKER_JAVA_OUT", &out_dir),
            SUITE_WITHIN,
        )
        .await;
    conformance.stop().await;

    assert!(
        run.status.success(),
        "the Java suite passes (its output is above)"
    );
    let xml = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("the launcher wrote its report {}: {e}", report.display()));
    let cases = test_cases(&xml);
    for id in 1..=25 {
        let prefix = format!("c{id:02}");
        let case = cases
            .iter()
            .find(|c| c.name.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no test of scenario C{id:02} ran (none named {prefix}...)"));
        assert!(
            case.passed,
            "the test of scenario C{id:02} passed: {case:?}"
        );
    }
    for class in ALSO {
        let of_class: Vec<_> = cases.iter().filter(|c| c.class == class).collect();
        assert!(!of_class.is_empty(), "{class} ran");
        assert!(
            of_class.iter().all(|c| c.passed),
            "every test of {class} passed: {of_class:?}"
        );
    }
    assert!(
        cases.iter().all(|c| c.passed),
        "nothing failed or was skipped: {:?}",
        cases.iter().filter(|c| !c.passed).collect::<Vec<_>>()
    );
}

#[test]
fn the_report_parser_reads_passes_failures_and_skips() {
    let xml = r#"<testsuite><testcase name="c01A()" classname="x.A" time="0.1">
<system-out><![CDATA[ok]]></system-out>
</testcase>
<testcase name="c02B()" classname="x.A" time="0.1"><failure message="no">..</failure></testcase>
<testcase name="c03C()" classname="x.B" time="0"><skipped/></testcase>
<testcase name="c04D()" classname="x.B" time="0"/>
</testsuite>"#;
    let cases = test_cases(xml);
    let got: Vec<_> = cases
        .iter()
        .map(|c| (c.class.as_str(), c.name.as_str(), c.passed))
        .collect();
    assert_eq!(
        got,
        [
            ("x.A", "c01A()", true),
            ("x.A", "c02B()", false),
            ("x.B", "c03C()", false),
            ("x.B", "c04D()", true),
        ]
    );
}
