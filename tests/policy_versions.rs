//! Policy versions (issue #23): the versions a broker keeps per tenant,
//! rollback (a swap, under load, after a restart, through lockctl), and
//! history events naming the version that decided them.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    ErrorBody, ErrorCode, Lease, LockEventKind, PolicyLoadedBy, PolicyVersions, TenantInfo,
};
use lockbroker_tests::{
    active_version, dist, eventually, lockctl_admin, put_policy, tenant_info, Client, PolicyDir,
    Reply, ADMIN, KEY, OTHER_KEY,
};
use serde_json::json;

/// Each policy call's bound: what is tested is the swap, not the deadline,
/// and a loaded machine can deschedule a call past the 5 ms default.
const DEADLINE_MS: u64 = 200;

/// Uploads `component` (of `plugins/dist`) as `default`'s policy; its
/// version id.
async fn upload(admin: &Client, component: &str) -> String {
    let bytes = std::fs::read(dist(component)).unwrap();
    let r = put_policy(admin, "default", "", bytes).await;
    assert_eq!(r.status, 200, "{r:?}");
    let info: TenantInfo = r.ok();
    let id = info.policy.id.expect("a loaded policy has an id");
    assert_eq!(
        Some(&id[..]),
        info.policy.sha256.as_deref().map(|s| &s[..12])
    );
    id
}

async fn versions(admin: &Client, tenant: &str) -> PolicyVersions {
    let r = admin
        .get(&format!("/v1/admin/tenants/{tenant}/policy/versions"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    r.ok()
}

fn ids(v: &PolicyVersions) -> Vec<&str> {
    v.versions.iter().map(|v| v.id.as_str()).collect()
}

/// `POST .../policy/rollback` with `body` (none: no body at all).
async fn rollback(admin: &Client, tenant: &str, body: Option<serde_json::Value>) -> Reply {
    let path = format!("/v1/admin/tenants/{tenant}/policy/rollback");
    match body {
        Some(body) => admin.post(&path, &body).await.unwrap(),
        None => admin
            .send(Method::POST, &path, &[], Bytes::new(), Duration::ZERO)
            .await
            .unwrap(),
    }
}

/// The id of the policy in force for `tenant`.
async fn in_force(admin: &Client, tenant: &str) -> Option<String> {
    tenant_info(admin, tenant).await.policy.id
}

#[tokio::test]
async fn versions_are_listed_newest_first_after_two_uploads() {
    let dir = PolicyDir::new("lb-versions");
    let broker = dir.broker(DEADLINE_MS).await;
    let admin = broker.client_with(Some(ADMIN));
    let start = versions(&admin, "default").await;
    assert_eq!(start.tenant, "default");
    assert_eq!(start.versions.len(), 1, "{start:?}");
    let first = start.versions[0].clone();
    assert_eq!(
        (first.name.as_str(), first.loaded_by, first.active),
        ("default", PolicyLoadedBy::Startup, true)
    );
    assert_eq!(Some(first.id.clone()), in_force(&admin, "default").await);

    let prefix = upload(&admin, "team-prefix.wasm").await;
    let priority = upload(&admin, "priority.wasm").await;
    let listed = versions(&admin, "default").await;
    assert_eq!(ids(&listed), [&priority, &prefix, &first.id]);
    assert_eq!(active_version(&listed), priority);
    let by: Vec<_> = listed.versions.iter().map(|v| v.loaded_by).collect();
    assert_eq!(
        by,
        [
            PolicyLoadedBy::Upload,
            PolicyLoadedBy::Upload,
            PolicyLoadedBy::Startup
        ]
    );
    let names: Vec<_> = listed.versions.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["priority", "team-prefix", "default"]);
    // Uploading a kept version again moves it first; it is listed once.
    let again = upload(&admin, "team-prefix.wasm").await;
    assert_eq!(again, prefix);
    assert_eq!(
        ids(&versions(&admin, "default").await),
        [&prefix, &priority, &first.id]
    );

    // A tenant on the built-in policy has one version, `builtin`.
    let other = versions(&admin, "other").await;
    assert_eq!(ids(&other), ["builtin"]);
    assert!(other.versions[0].sha256.is_none() && other.versions[0].active);

    // Unknown tenant; wrong method; a tenant's key.
    let r = admin
        .get("/v1/admin/tenants/nobody/policy/versions")
        .await
        .unwrap();
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    let r = admin
        .post("/v1/admin/tenants/default/policy/versions", &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    let r = broker
        .client_with(Some(KEY))
        .get("/v1/admin/tenants/default/policy/versions")
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    broker.stop().await;
}

#[tokio::test]
async fn rollback_names_a_version_or_the_previous_one() {
    let dir = PolicyDir::new("lb-versions");
    let broker = dir.broker(DEADLINE_MS).await;
    let admin = broker.client_with(Some(ADMIN));
    let first = versions(&admin, "default").await.versions[0].id.clone();
    let prefix = upload(&admin, "team-prefix.wasm").await;
    let priority = upload(&admin, "priority.wasm").await;

    // Default: the previous version.
    let r = rollback(&admin, "default", None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let after: PolicyVersions = r.ok();
    assert_eq!(active_version(&after), prefix);
    assert_eq!(after.versions[0].loaded_by, PolicyLoadedBy::Rollback);
    assert_eq!(in_force(&admin, "default").await, Some(prefix.clone()));
    // The file follows, so a restart keeps it.
    assert_eq!(
        std::fs::read(dir.0.join("p.wasm")).unwrap(),
        std::fs::read(dist("team-prefix.wasm")).unwrap()
    );
    // Again: back to the one just replaced.
    let r = rollback(&admin, "default", Some(json!({}))).await;
    assert_eq!(active_version(&r.ok()), priority);
    // By id, or by sha256.
    let r = rollback(&admin, "default", Some(json!({"version": first}))).await;
    assert_eq!(active_version(&r.ok()), first);
    let sha = versions(&admin, "default")
        .await
        .versions
        .iter()
        .find(|v| v.id == prefix)
        .and_then(|v| v.sha256.clone())
        .unwrap();
    let r = rollback(&admin, "default", Some(json!({"version": sha}))).await;
    assert_eq!(active_version(&r.ok()), prefix);
    let c = broker.client();
    let lease: Lease = c.acquire("Job-A", "me", 30_000, 0).await.unwrap().ok();
    assert_eq!(lease.storage_key, "default/job-a");

    // Unknown version or tenant: 404, and nothing changes; a bad body: 400.
    let r = rollback(&admin, "default", Some(json!({"version": "0123456789ab"}))).await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    assert_eq!(in_force(&admin, "default").await, Some(prefix.clone()));
    let r = rollback(&admin, "nobody", None).await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    let r = rollback(&admin, "default", Some(json!({"version": 7}))).await;
    assert_eq!((r.status, r.code()), (400, Some(ErrorCode::BadRequest)));
    // Nothing to roll back to.
    let r = rollback(&admin, "other", None).await;
    assert_eq!((r.status, r.code()), (404, Some(ErrorCode::NotFound)));
    let r = admin
        .get("/v1/admin/tenants/default/policy/rollback")
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    broker.stop().await;
}

/// A grant the load made: when its request was sent and its answer came,
/// the key, and the storage key it was granted under.
struct Grant {
    sent: Instant,
    answered: Instant,
    key: String,
    storage_key: String,
}

#[tokio::test]
async fn rollback_under_load_fails_no_request_and_swaps_at_once() {
    let dir = PolicyDir::new("lb-versions");
    let broker = dir.broker(DEADLINE_MS).await;
    let admin = broker.client_with(Some(ADMIN));
    let plain = versions(&admin, "default").await.versions[0].id.clone();
    let prefix = upload(&admin, "team-prefix.wasm").await;

    // Clients acquiring fresh keys in a loop (no release: a release under
    // another naming would name another lock); every answer must be 200.
    let stop = Arc::new(AtomicBool::new(false));
    let grants: Arc<Mutex<Vec<Grant>>> = Arc::default();
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let (c, stop, grants) = (broker.client(), stop.clone(), grants.clone());
            tokio::spawn(async move {
                let mut failures = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let key = format!("Job-{i}-{n}");
                    let sent = Instant::now();
                    match c.acquire(&key, "loader", 2_000, 0).await {
                        Ok(r) if r.status == 200 => {
                            let storage_key = r.ok::<Lease>().storage_key;
                            grants.lock().unwrap().push(Grant {
                                sent,
                                answered: Instant::now(),
                                key,
                                storage_key,
                            });
                        }
                        other => failures.push(format!("{key}: {other:?}")),
                    }
                }
                failures
            })
        })
        .collect();

    let named_by = |id: &str, g: &Grant| {
        if id == plain {
            g.storage_key == g.key
        } else {
            g.storage_key == format!("default/{}", g.key.to_lowercase())
        }
    };
    // (sent at, answered at, the version then in force)
    let mut rollbacks: Vec<(Instant, Instant, String)> = Vec::new();
    for round in 0..4 {
        let expected = if round % 2 == 0 { &plain } else { &prefix };
        let sent = Instant::now();
        let r = rollback(&admin, "default", None).await;
        let answered = Instant::now();
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(active_version(&r.ok()), expected.as_str());
        rollbacks.push((sent, answered, expected.clone()));
        // Go on once grants sent well after the answer came back.
        eventually(
            "grants sent 100 ms after the rollback",
            Duration::from_secs(10),
            || async {
                let margin = answered + Duration::from_millis(100);
                grants
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|g| g.sent > margin)
                    .count()
                    >= 20
            },
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    assert!(failures.is_empty(), "failed requests: {failures:?}");

    let grants = std::mem::take(&mut *grants.lock().unwrap());
    for (i, (_, answered, id)) in rollbacks.iter().enumerate() {
        // Sent 100 ms after this rollback's answer, answered before the
        // next rollback was sent: named by this rollback's version.
        let from = *answered + Duration::from_millis(100);
        let until = rollbacks.get(i + 1).map(|(sent, _, _)| *sent);
        let window: Vec<&Grant> = grants
            .iter()
            .filter(|g| g.sent > from && until.is_none_or(|u| g.answered < u))
            .collect();
        assert!(window.len() >= 20, "round {i}: {} grants", window.len());
        for g in &window {
            assert!(
                named_by(id, g),
                "round {i}: {} granted as {} 100 ms after the rollback to {id}",
                g.key,
                g.storage_key
            );
        }
    }
    broker.stop().await;
}

#[tokio::test]
async fn history_events_name_the_policy_version() {
    let dir = PolicyDir::new("lb-versions");
    let broker = dir.broker(DEADLINE_MS).await;
    let admin = broker.client_with(Some(ADMIN));
    let plain = versions(&admin, "default").await.versions[0].id.clone();
    let c = broker.client();

    let lease: Lease = c.acquire("h1", "a", 30_000, 0).await.unwrap().ok();
    c.release("h1", "a", lease.token).await.unwrap();
    let (_, history) = c.history("locks", "h1").await;
    let events: Vec<_> = history
        .events
        .iter()
        .map(|e| (e.event, e.policy.as_deref()))
        .collect();
    assert_eq!(
        events,
        [
            (LockEventKind::Released, None),
            (LockEventKind::Granted, Some(plain.as_str()))
        ]
    );

    // Under another version: its grants, and the handoff it decides.
    let prefix = upload(&admin, "team-prefix.wasm").await;
    let held: Lease = c.acquire("h2", "a", 30_000, 0).await.unwrap().ok();
    assert_eq!(held.storage_key, "default/h2");
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("h2", "b", 30_000, 10_000).await.unwrap() })
    };
    eventually("b waits", Duration::from_secs(5), || async {
        let r = c.status("h2").await.unwrap();
        r.json()["waiters"] == 1
    })
    .await;
    c.release("h2", "a", held.token).await.unwrap();
    let handed: Lease = waiter.await.unwrap().ok();
    assert_eq!(handed.owner, "b");
    let (_, history) = c.history("locks", "h2").await;
    let events: Vec<_> = history
        .events
        .iter()
        .map(|e| (e.event, e.policy.as_deref()))
        .collect();
    assert_eq!(
        events,
        [
            (LockEventKind::HandedOff, Some(prefix.as_str())),
            (LockEventKind::Released, None),
            (LockEventKind::Granted, Some(prefix.as_str()))
        ]
    );

    // The built-in policy names no version.
    let o = broker.client_with(Some(OTHER_KEY));
    o.acquire("h3", "a", 30_000, 0).await.unwrap().ok::<Lease>();
    let (_, history) = o.history("locks", "h3").await;
    assert_eq!(history.events[0].event, LockEventKind::Granted);
    assert_eq!(history.events[0].policy, None);
    broker.stop().await;
}

#[tokio::test]
async fn versions_and_a_rollback_survive_a_restart() {
    let dir = PolicyDir::new("lb-versions");
    let mut broker = dir.broker(DEADLINE_MS).await;
    let admin = broker.client_with(Some(ADMIN));
    let plain = versions(&admin, "default").await.versions[0].id.clone();
    let prefix = upload(&admin, "team-prefix.wasm").await;
    let priority = upload(&admin, "priority.wasm").await;
    let r = rollback(&admin, "default", Some(json!({"version": prefix}))).await;
    assert_eq!(r.status, 200, "{r:?}");
    let before: PolicyVersions = r.ok();
    assert_eq!(ids(&before), [&prefix, &priority, &plain]);

    broker.restart().await;
    let admin = broker.client_with(Some(ADMIN));
    eventually("the policy loaded", Duration::from_secs(30), || async {
        in_force(&admin, "default").await.is_some()
    })
    .await;
    assert_eq!(in_force(&admin, "default").await, Some(prefix.clone()));
    let after = versions(&admin, "default").await;
    assert_eq!(after, before, "the same versions, the same one in force");
    let lease: Lease = broker
        .client()
        .acquire("Job-R", "me", 30_000, 0)
        .await
        .unwrap()
        .ok();
    assert_eq!(lease.storage_key, "default/job-r");

    // A version not compiled since the restart: compiled from its kept
    // bytes (the previous one: priority).
    let r = rollback(&admin, "default", None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(active_version(&r.ok()), priority);
    assert_eq!(
        std::fs::read(dir.0.join("p.wasm")).unwrap(),
        std::fs::read(dist("priority.wasm")).unwrap()
    );
    broker.stop().await;
}

#[tokio::test]
async fn lockctl_policy_versions_and_rollback() {
    let dir = PolicyDir::new("lb-versions");
    let broker = dir.broker(DEADLINE_MS).await;
    let admin = broker.client_with(Some(ADMIN));
    let plain = versions(&admin, "default").await.versions[0].id.clone();
    let prefix = upload(&admin, "team-prefix.wasm").await;
    let lockctl = |args: &[&str]| lockctl_admin(broker.url(), args);
    let out = lockctl(&["policy", "versions", "--tenant", "default", "--json"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: PolicyVersions = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&listed), [&prefix, &plain]);

    let out = lockctl(&["policy", "rollback", "--tenant", "default", "--json"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rolled: PolicyVersions = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(active_version(&rolled), plain);

    // By id, in words.
    let out = lockctl(&["policy", "rollback", "--tenant", "default", &prefix])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.starts_with(&format!("* {prefix} team-prefix"))),
        "{text}"
    );
    assert_eq!(in_force(&admin, "default").await, Some(prefix.clone()));

    // An unknown version: refused (exit 1) with the API's error.
    let out = lockctl(&[
        "--json",
        "policy",
        "rollback",
        "--tenant",
        "default",
        "0123456789ab",
    ])
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err: ErrorBody = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err.error.code, ErrorCode::NotFound);
    broker.stop().await;
}
