//! Schema and code agree: PyPI's schemathesis (installed by
//! `scripts/fuzz-deps`, which `scripts/test` runs and whose `st` command it
//! passes as `LOCKBROKER_SCHEMATHESIS`) generates requests from
//! `/openapi.json` for every operation — valid ones, and invalid ones (out
//! of range, wrong types, missing fields) — with a fixed seed, and checks
//! each answer against the document: no 5xx, only documented statuses,
//! content types and schemas, and invalid data refused.
//!
//! Left out: `GET /v1/events` and `.../observe`, which hold their answer
//! open by design (tests/events.rs and tests/elections.rs cover them), and
//! the policy upload (a WebAssembly body).

use lockbroker_tests::{config, fresh_db_name, Broker, ADMIN, KEY};

/// What schemathesis checks of every answer.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_schema_conformance,negative_data_rejection";

/// Runs schemathesis against `broker` with `bearer` on the operations
/// `filter` selects; its report if it found a mismatch.
async fn fuzz(st: &str, broker: &Broker, bearer: &str, filter: &[&str]) -> Result<String, String> {
    let schema = format!("{}/openapi.json", broker.url());
    // Not blocking: the broker answers on this test's runtime.
    let out = tokio::process::Command::new(st)
        .args(["run", &schema])
        .args(["--header", &format!("Authorization: Bearer {bearer}")])
        .args(["--checks", CHECKS])
        .args(filter)
        // A policy upload is a WebAssembly body, which it cannot generate
        // (tests/policies.rs sends real and broken ones).
        .args(["--exclude-operation-id", "putPolicy"])
        .args(["--seed", "20261126", "--max-examples", "30"])
        .args(["--request-timeout", "10", "--no-color"])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .output()
        .await
        .unwrap_or_else(|err| panic!("cannot run {st}: {err}"));
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(report)
    } else {
        Err(report)
    }
}

#[tokio::test]
async fn every_operation_answers_as_its_schema_says() {
    let st = std::env::var("LOCKBROKER_SCHEMATHESIS").unwrap_or_else(|_| {
        panic!("LOCKBROKER_SCHEMATHESIS is not set: run scripts/fuzz-deps (scripts/test does)")
    });
    // Leases of at most a second: a request that waits for one (a
    // generated `wait_ms` may be minutes) is answered within the timeout.
    let db = fresh_db_name();
    let mut config = config(&db);
    config.tenants[0].max_ttl_ms = 1000;
    let broker = Broker::start_with(db, config).await;
    // A tenant's operations (the admin's answer it 403, as documented)...
    let tenant = [
        "--exclude-path",
        "/v1/events",
        "--exclude-path-regex",
        "/observe$",
    ];
    // ...and the admin's, with its token.
    let admin = ["--include-path-regex", "^/v1/admin"];
    for (bearer, filter, operations) in [(KEY, &tenant[..], 61), (ADMIN, &admin[..], 20)] {
        let report = fuzz(&st, &broker, bearer, filter)
            .await
            .unwrap_or_else(|report| panic!("schemathesis found mismatches:\n{report}"));
        let tested = format!("Tested: {operations}");
        assert!(
            report.contains(&tested),
            "not every operation was tested:\n{report}"
        );
    }
}
