//! Policy shadow mode (issue #23): a candidate loaded with `PUT
//! .../policy?mode=shadow` runs beside the policy in force and decides
//! nothing; its agreements, disagreements and failures are counted
//! exactly (`GET .../policy/shadow`, `/metrics`); one that traps or loops
//! is never felt by requests; `POST .../policy/promote` puts it in force as
//! a version; lockctl drives all of it.
//!
//! The policy in force is `default.wasm` (keys stored as sent). The
//! candidates are fixtures: `rename` stores keys with `boom` as
//! `renamed/{key}` (and agrees on every other key), `trap`, `loop` and
//! `hog` trap, loop or allocate until the memory limit on keys with `boom`
//! and on every backoff call. `deadlocks` (not checking `plain-*` keys)
//! is put in force to compare a candidate on that export. Tests wait on
//! the report's counts (a condition), never for a time.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    ErrorBody, ErrorCode, Lease, LockEventKind, PolicyLoadedBy, PolicyShadow, PolicyVersions,
    ShadowCount, ShadowExport, TenantInfo,
};
use lockbroker_tests::{
    active_version, dist, eventually_some, lockctl_admin, put_policy, tenant_info, Client,
    PolicyDir, Reply, ADMIN,
};
use serde_json::json;

/// The longest a shadow may take to judge the calls of a test.
const JUDGED_WITHIN: Duration = Duration::from_secs(60);

/// Loads `component` (of `plugins/dist`) as `default`'s shadow; the
/// tenant as the answer shows it.
async fn load_shadow(admin: &Client, component: &str) -> TenantInfo {
    let bytes = std::fs::read(dist(component)).unwrap();
    let r = put_policy(admin, "default", "?mode=shadow", bytes).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.ok()
}

/// `method` on `default`'s `.../policy/shadow`.
async fn shadow_call(admin: &Client, method: Method) -> Reply {
    admin
        .send(
            method,
            "/v1/admin/tenants/default/policy/shadow",
            &[],
            Bytes::new(),
            Duration::ZERO,
        )
        .await
        .unwrap()
}

async fn promote(admin: &Client, tenant: &str) -> Reply {
    admin
        .post(
            &format!("/v1/admin/tenants/{tenant}/policy/promote"),
            &json!({}),
        )
        .await
        .unwrap()
}

fn total(c: ShadowCount) -> u64 {
    c.agree + c.disagree + c.failed + c.dropped
}

/// The report once `enough` holds for it.
async fn report_when(
    admin: &Client,
    what: &str,
    enough: impl Fn(&PolicyShadow) -> bool,
) -> PolicyShadow {
    eventually_some(what, JUDGED_WITHIN, || async {
        let r = shadow_call(admin, Method::GET).await;
        assert_eq!(r.status, 200, "{r:?}");
        let report: PolicyShadow = r.ok();
        enough(&report).then_some(report)
    })
    .await
}

/// Acquires `key` for `owner`; its storage key.
async fn granted(c: &Client, key: &str, owner: &str) -> String {
    let r = c.acquire(key, owner, 60_000, 0).await.unwrap();
    assert_eq!(r.status, 200, "{key}: {r:?}");
    r.ok::<Lease>().storage_key
}

#[tokio::test]
async fn a_candidate_that_disagrees_on_known_keys_is_counted_exactly() {
    let dir = PolicyDir::new("lb-shadow");
    let broker = dir.broker(200).await;
    let admin = broker.client_with(Some(ADMIN));
    let before = tenant_info(&admin, "default").await;
    assert_eq!(before.shadow, None);

    let info = load_shadow(&admin, "fixtures/rename.wasm").await;
    let candidate = info.shadow.clone().expect("the answer names the shadow");
    assert_eq!(candidate.name, "rename");
    assert_eq!(candidate.id, candidate.sha256[..12]);
    assert_eq!(
        info.policy, before.policy,
        "the policy in force is unchanged"
    );
    assert_eq!(
        tenant_info(&admin, "default").await.shadow,
        Some(candidate.clone())
    );

    // 30 acquires; every third key has `boom` (one of them 100 bytes
    // long): the candidate names those 10 differently.
    let c = broker.client();
    let long = format!("k-boom-{}", "x".repeat(93));
    let keys: Vec<String> = (0..30)
        .map(|i| match i {
            27 => long.clone(),
            i if i % 3 == 0 => format!("k-boom-{i}"),
            i => format!("k-{i}"),
        })
        .collect();
    for key in &keys {
        // The policy in force decides: keys are stored as sent.
        assert_eq!(&granted(&c, key, "me").await, key);
    }
    let report = report_when(&admin, "the 30 naming calls judged", |r| {
        total(r.counts.naming) >= 30
    })
    .await;
    assert_eq!(
        report.counts.naming,
        ShadowCount {
            agree: 20,
            disagree: 10,
            failed: 0,
            dropped: 0
        }
    );
    assert_eq!(report.tenant, "default");
    assert_eq!(report.candidate, candidate);
    assert_eq!(report.active, before.policy.id);
    // No contention, no waiters: no other export was called.
    for other in [
        report.counts.fairness,
        report.counts.backoff,
        report.counts.timing,
        report.counts.deadlocks,
    ] {
        assert_eq!(total(other), 0, "{report:?}");
    }
    // The 10 disagreements, newest first, with both answers.
    assert_eq!(report.disagreements.len(), 10, "{report:?}");
    let newest = &report.disagreements[0];
    assert_eq!(newest.export, ShadowExport::Naming);
    // The long key, cut to 64 bytes.
    assert_eq!(newest.input, format!("key \"{}…\"", &long[..64]));
    let second = &report.disagreements[1];
    assert_eq!(
        (
            second.input.as_str(),
            second.active.as_str(),
            second.candidate.as_str()
        ),
        (
            "key \"k-boom-24\"",
            "\"k-boom-24\"",
            "\"renamed/k-boom-24\""
        )
    );
    assert!(report
        .disagreements
        .iter()
        .all(|d| d.export == ShadowExport::Naming && d.input.contains("boom")));

    let metrics = broker.client_with(None);
    let series = |outcome: &str| {
        format!(
            "lockbroker_policy_shadow_total{{tenant=\"default\",export=\"naming\",outcome=\"{outcome}\"}}"
        )
    };
    assert_eq!(metrics.counter(&series("agree")).await, 20);
    assert_eq!(metrics.counter(&series("disagree")).await, 10);
    broker.stop().await;
}

#[tokio::test]
async fn a_candidate_that_traps_loops_or_hoards_is_counted_and_never_felt() {
    let dir = PolicyDir::new("lb-shadow");
    // A looping call runs to this deadline (in the shadow's thread); a
    // hoarding one to the tenant's memory limit.
    let broker = dir.broker(50).await;
    let admin = broker.client_with(Some(ADMIN));
    let c = broker.client();
    let candidates = [
        "fixtures/trap.wasm",
        "fixtures/loop.wasm",
        "fixtures/hog.wasm",
    ];
    for (round, candidate) in candidates.into_iter().enumerate() {
        load_shadow(&admin, candidate).await;
        // 6 plain keys, 6 keys that make the candidate trap or loop, all
        // granted by the policy in force with its own naming.
        for i in 0..6 {
            for key in [format!("r{round}-{i}"), format!("r{round}-boom-{i}")] {
                assert_eq!(granted(&c, &key, "me").await, key);
            }
        }
        // A refused acquire asks backoff for its retry_after_ms (the
        // candidate fails every backoff call): the answer still comes,
        // from the policy in force.
        let held = format!("r{round}-held");
        granted(&c, &held, "a").await;
        let r = c.acquire(&held, "b", 60_000, 0).await.unwrap();
        assert_eq!(
            (r.status, r.code()),
            (409, Some(ErrorCode::LockHeld)),
            "{r:?}"
        );
        assert!(r.error().unwrap().retry_after_ms.is_some(), "{r:?}");

        let report = report_when(&admin, "the calls judged", |r| {
            total(r.counts.naming) >= 14 && total(r.counts.backoff) >= 1
        })
        .await;
        assert_eq!(
            report.counts.naming,
            ShadowCount {
                agree: 8,
                disagree: 0,
                failed: 6,
                dropped: 0
            },
            "{candidate}"
        );
        let backoff = report.counts.backoff;
        assert_eq!(
            (backoff.agree, backoff.disagree, backoff.failed),
            (0, 0, total(backoff)),
            "{candidate}: {backoff:?}"
        );
        assert!(report.disagreements.is_empty(), "{report:?}");
    }
    // The policy in force never failed; the candidates' failures are
    // counted as theirs.
    let metrics = broker.client_with(None);
    let text = metrics.get("/metrics").await.unwrap().text();
    assert!(
        !text.contains("lockbroker_policy_failures_total{tenant=\"default\""),
        "{text}"
    );
    let failed =
        "lockbroker_policy_shadow_total{tenant=\"default\",export=\"naming\",outcome=\"failed\"}";
    assert_eq!(metrics.counter(failed).await, 6 * candidates.len() as u64);
    broker.stop().await;
}

/// A session's waiting acquire of `key` (held by another owner) that runs
/// out after 100 ms: the policy in force is asked its `deadlocks`, if it
/// exports it.
async fn wait_runs_out(c: &Client, session: &str, key: &str) {
    granted(c, key, "holder").await;
    let body = json!({"session": session, "owner": "waiter", "wait_ms": 100});
    let r = c
        .post(&format!("/v1/locks/{key}/acquire"), &body)
        .await
        .unwrap();
    assert_eq!(r.code(), Some(ErrorCode::LockHeld), "{key}: {r:?}");
}

#[tokio::test]
async fn a_candidate_is_compared_on_deadlocks_while_the_policy_in_force_exports_it() {
    let dir = PolicyDir::new("lb-shadow");
    let broker = dir.broker(200).await;
    let admin = broker.client_with(Some(ADMIN));
    let c = broker.client();
    // In force: `deadlocks`, which does not check `plain-*` keys. The
    // candidate, `rename`, does not export it: it checks every key.
    let bytes = std::fs::read(dist("fixtures/deadlocks.wasm")).unwrap();
    let r = put_policy(&admin, "default", "?mode=active", bytes).await;
    assert_eq!(r.status, 200, "{r:?}");
    load_shadow(&admin, "fixtures/rename.wasm").await;
    let s = c.open_session(&json!({"ttl_ms": 60_000})).await;
    wait_runs_out(&c, &s.id, "plain-1").await;
    wait_runs_out(&c, &s.id, "checked-1").await;
    let report = report_when(&admin, "both deadlocks calls judged", |r| {
        total(r.counts.deadlocks) >= 2
    })
    .await;
    assert_eq!(
        report.counts.deadlocks,
        ShadowCount {
            agree: 1,
            disagree: 1,
            failed: 0,
            dropped: 0
        },
        "{report:?}"
    );
    let disagreements: Vec<_> = report
        .disagreements
        .iter()
        .map(|d| {
            (
                d.export,
                d.input.as_str(),
                d.active.as_str(),
                d.candidate.as_str(),
            )
        })
        .collect();
    assert_eq!(
        disagreements,
        [(
            ShadowExport::Deadlocks,
            "storage key \"plain-1\"",
            "not checked",
            "checked"
        )]
    );
    let metrics = broker.client_with(None);
    let series = "lockbroker_policy_shadow_total{tenant=\"default\",export=\"deadlocks\",outcome=\"disagree\"}";
    assert_eq!(metrics.counter(series).await, 1);

    // Back to `default.wasm` in force (the shadow goes on): no `deadlocks`,
    // so nothing is asked, nor compared.
    let r = admin
        .post("/v1/admin/tenants/default/policy/rollback", &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    wait_runs_out(&c, &s.id, "plain-2").await;
    // A call after the wait (a naming the candidate disagrees on): once it
    // is judged, so is every call offered before it.
    granted(&c, "marker-boom", "me").await;
    let report = report_when(&admin, "the marker judged", |r| {
        r.disagreements
            .iter()
            .any(|d| d.input.contains("marker-boom"))
    })
    .await;
    assert_eq!(total(report.counts.deadlocks), 2, "{report:?}");
    broker.stop().await;
}

#[tokio::test]
async fn promote_puts_the_candidate_in_force_and_a_rollback_goes_back() {
    let dir = PolicyDir::new("lb-shadow");
    let broker = dir.broker(200).await;
    let admin = broker.client_with(Some(ADMIN));
    let plain = tenant_info(&admin, "default").await.policy.id.unwrap();
    let candidate = load_shadow(&admin, "fixtures/rename.wasm")
        .await
        .shadow
        .unwrap();
    let c = broker.client();
    assert_eq!(granted(&c, "p-boom-1", "me").await, "p-boom-1");

    let r = promote(&admin, "default").await;
    assert_eq!(r.status, 200, "{r:?}");
    let versions: PolicyVersions = r.ok();
    assert_eq!(active_version(&versions), candidate.id);
    let first = &versions.versions[0];
    assert_eq!(
        (
            first.name.as_str(),
            first.loaded_by,
            first.sha256.as_deref()
        ),
        (
            "rename",
            PolicyLoadedBy::Promote,
            Some(&candidate.sha256[..])
        )
    );
    assert_eq!(versions.versions[1].id, plain);
    // The shadow ended; the candidate is in force, and in the file.
    let r = shadow_call(&admin, Method::GET).await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    let now = tenant_info(&admin, "default").await;
    assert_eq!(
        (now.policy.id.as_deref(), now.shadow),
        (Some(&candidate.id[..]), None)
    );
    assert_eq!(
        std::fs::read(dir.0.join("p.wasm")).unwrap(),
        std::fs::read(dist("fixtures/rename.wasm")).unwrap()
    );
    // Its naming decides, and history names its version.
    assert_eq!(granted(&c, "p-boom-2", "me").await, "renamed/p-boom-2");
    let (_, history) = c.history("locks", "p-boom-2").await;
    assert_eq!(history.events[0].event, LockEventKind::Granted);
    assert_eq!(history.events[0].policy.as_deref(), Some(&candidate.id[..]));
    // Nothing left to promote.
    let r = promote(&admin, "default").await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));

    // A rollback goes back to the version the promote replaced.
    let r = admin
        .post("/v1/admin/tenants/default/policy/rollback", &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(active_version(&r.ok()), plain);
    assert_eq!(granted(&c, "p-boom-3", "me").await, "p-boom-3");
    broker.stop().await;
}

#[tokio::test]
async fn a_shadow_survives_a_reload_of_the_policy_in_force_not_a_restart() {
    let dir = PolicyDir::new("lb-shadow");
    let mut broker = dir.broker(200).await;
    let admin = broker.client_with(Some(ADMIN));
    let candidate = load_shadow(&admin, "fixtures/rename.wasm")
        .await
        .shadow
        .unwrap();
    let c = broker.client();
    granted(&c, "s-boom-1", "me").await;
    report_when(&admin, "the first call judged", |r| {
        total(r.counts.naming) == 1
    })
    .await;

    // The policy in force changes by its file (a hot reload): the shadow
    // goes on, compared with the new one.
    dir.install("team-prefix.wasm", "p.wasm");
    let prefix = eventually_some("the file reloaded", JUDGED_WITHIN, || async {
        let t = tenant_info(&admin, "default").await;
        (t.policy.name == "team-prefix").then_some(t)
    })
    .await;
    assert_eq!(prefix.shadow, Some(candidate.clone()));
    assert_eq!(granted(&c, "s-2", "me").await, "default/s-2");
    let report = report_when(&admin, "the second call judged", |r| {
        total(r.counts.naming) == 2
    })
    .await;
    assert_eq!(report.active, prefix.policy.id);
    // team-prefix stores `default/s-2`, the candidate `s-2`.
    assert_eq!(report.counts.naming.disagree, 2, "{report:?}");

    // Not recorded: after a restart there is no shadow.
    broker.restart().await;
    let admin = broker.client_with(Some(ADMIN));
    let r = shadow_call(&admin, Method::GET).await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    assert_eq!(tenant_info(&admin, "default").await.shadow, None);
    broker.stop().await;
}

#[tokio::test]
async fn no_shadow_bad_requests_and_dropping_one() {
    let dir = PolicyDir::new("lb-shadow");
    let broker = dir.broker(200).await;
    let admin = broker.client_with(Some(ADMIN));
    let before = tenant_info(&admin, "default").await;

    // No shadow: 404 for the report, its drop and a promote.
    for method in [Method::GET, Method::DELETE] {
        let r = shadow_call(&admin, method).await;
        assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    }
    let r = promote(&admin, "default").await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    for path in [
        "/v1/admin/tenants/nobody/policy/shadow",
        "/v1/admin/tenants/nobody/policy/promote",
    ] {
        let r = admin.get(path).await.unwrap();
        assert!(matches!(r.status, 404 | 405), "{path}: {r:?}");
    }
    let r = promote(&admin, "nobody").await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));

    // A mistyped mode or another parameter: 400, nothing loaded or put
    // in force (before the body is even read).
    let bytes = std::fs::read(dist("fixtures/rename.wasm")).unwrap();
    for query in ["?mode=shadwo", "?shadow", "?mode=shadow&x=1"] {
        let r = put_policy(&admin, "default", query, bytes.clone()).await;
        assert_eq!(
            (r.status, r.code()),
            (400, Some(ErrorCode::BadRequest)),
            "{query}: {r:?}"
        );
    }
    // Not a component: 422, and the tenant's load error stays clear.
    let garbage = std::fs::read(dist("fixtures/garbage.wasm")).unwrap();
    let r = put_policy(&admin, "default", "?mode=shadow", garbage).await;
    assert_eq!(
        (r.status, r.code()),
        (422, Some(ErrorCode::InvalidPolicy)),
        "{r:?}"
    );
    let r = put_policy(&admin, "default", "?mode=shadow", Vec::new()).await;
    assert_eq!((r.status, r.code()), (400, Some(ErrorCode::BadRequest)));
    assert_eq!(tenant_info(&admin, "default").await, before);

    // Wrong methods; a tenant's key.
    let r = admin
        .post("/v1/admin/tenants/default/policy/shadow", &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.headers["allow"], "GET, DELETE");
    let r = admin
        .get("/v1/admin/tenants/default/policy/promote")
        .await
        .unwrap();
    assert_eq!(r.status, 405, "{r:?}");
    let r = broker
        .client()
        .get("/v1/admin/tenants/default/policy/shadow")
        .await
        .unwrap();
    assert_eq!(r.status, 403, "{r:?}");

    // `mode=active` is the plain upload; a shadow is dropped with its
    // last report, and the policy in force stays.
    let r = put_policy(&admin, "default", "?mode=active", bytes.clone()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let rename = r.ok::<TenantInfo>().policy;
    assert_eq!(rename.name, "rename");
    let candidate = load_shadow(&admin, "default.wasm").await.shadow.unwrap();
    let r = shadow_call(&admin, Method::DELETE).await;
    assert_eq!(r.status, 200, "{r:?}");
    let last: PolicyShadow = r.ok();
    assert_eq!(last.candidate, candidate);
    let r = shadow_call(&admin, Method::GET).await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    let now = tenant_info(&admin, "default").await;
    assert_eq!((now.policy, now.shadow), (rename, None));
    broker.stop().await;
}

#[tokio::test]
async fn lockctl_policy_shadow_report_and_promote() {
    let dir = PolicyDir::new("lb-shadow");
    let broker = dir.broker(200).await;
    let admin = broker.client_with(Some(ADMIN));
    let lockctl = |args: &[&str]| lockctl_admin(broker.url(), args);
    let file = dist("fixtures/rename.wasm");
    let file = file.to_str().unwrap();
    let out = lockctl(&["policy", "shadow", "--tenant", "default", file])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("; shadow ") && text.contains(" rename "),
        "{text}"
    );

    let c = broker.client();
    granted(&c, "l-boom-1", "me").await;
    granted(&c, "l-2", "me").await;
    report_when(&admin, "both calls judged", |r| total(r.counts.naming) == 2).await;

    let out = lockctl(&["--json", "policy", "shadow-report", "--tenant", "default"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: PolicyShadow = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report.counts.naming.agree, report.counts.naming.disagree),
        (1, 1)
    );
    let out = lockctl(&["policy", "shadow-report", "--tenant", "default"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("naming: 1 agree, 1 disagree, 0 failed, 0 dropped"),
        "{text}"
    );
    assert!(
        text.contains("deadlocks: 0 agree, 0 disagree, 0 failed, 0 dropped"),
        "{text}"
    );
    assert!(text.contains("candidate \"renamed/l-boom-1\""), "{text}");

    let out = lockctl(&["--json", "policy", "promote", "--tenant", "default"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let versions: PolicyVersions = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(active_version(&versions), report.candidate.id);

    // No shadow any more: refused (exit 1) with the API's error.
    let out = lockctl(&["--json", "policy", "shadow-report", "--tenant", "default"])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err: ErrorBody = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err.error.code, ErrorCode::NotFound);

    // Load one again and drop it.
    let out = lockctl(&["policy", "shadow", "--tenant", "default", file])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = lockctl(&["--json", "policy", "shadow-drop", "--tenant", "default"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = shadow_call(&admin, Method::GET).await;
    assert_eq!(r.status, 404, "{r:?}");
    broker.stop().await;
}
