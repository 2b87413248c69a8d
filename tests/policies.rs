//! Tenant policies as WebAssembly components, end to end: naming, fail
//! closed / fall back, containment of misbehaving guests, hot reload,
//! uploads through the admin API.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hyper::Method;
use lockbroker::config::TenantConfig;
use lockbroker_tests::{config, eventually, fresh_db_name, Broker, ADMIN, KEY};

/// A built component from `plugins/dist`.
fn dist(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/dist")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-plugins",
        path.display()
    );
    path
}

/// A policy directory of its own for one test.
struct PolicyDir(PathBuf);

impl PolicyDir {
    fn new() -> PolicyDir {
        let dir = std::env::temp_dir().join(format!("lb-policies-{}", fresh_db_name()));
        std::fs::create_dir_all(&dir).unwrap();
        PolicyDir(dir)
    }

    /// Puts `component` in place as `file`, atomically (as a deploy would).
    fn install(&self, component: &str, file: &str) {
        let tmp = self.0.join(format!(".{file}.tmp"));
        std::fs::copy(dist(component), &tmp).unwrap();
        std::fs::rename(&tmp, self.0.join(file)).unwrap();
    }

    fn write(&self, file: &str, bytes: &[u8]) {
        let tmp = self.0.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, self.0.join(file)).unwrap();
    }
}

impl Drop for PolicyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A broker whose `default` tenant uses `file` in `dir`, plus a tenant
/// `bad` (key `bad-key`) using `bad_file` if given.
async fn broker(dir: &PolicyDir, file: Option<&str>, bad_file: Option<&str>) -> Broker {
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.policy_dir = dir.0.clone();
    cfg.tenants[0].policy = file.map(str::to_owned);
    if let Some(bad) = bad_file {
        cfg.tenants.push(TenantConfig {
            name: "bad".into(),
            api_key: "bad-key".into(),
            policy: Some(bad.into()),
            max_ttl_ms: 3_600_000,
            max_waiters: 100,
            database_url: None,
        });
    }
    Broker::start_with(db, cfg).await
}

async fn tenants(broker: &Broker) -> serde_json::Value {
    let admin = broker.client_with(Some(ADMIN));
    let reply = admin.get("/v1/admin/tenants").await.unwrap();
    assert_eq!(reply.status, 200);
    reply.body
}

fn tenant<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap()
}

#[tokio::test]
async fn team_prefix_names_and_rejects_keys() {
    let dir = PolicyDir::new();
    dir.install("team-prefix.wasm", "team.wasm");
    let broker = broker(&dir, Some("team.wasm"), None).await;
    let c = broker.client();
    let g = c.acquire("Reports/Daily", "a", 30_000, 0).await.unwrap();
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(g.body["key"], "Reports/Daily");
    assert_eq!(g.body["storage_key"], "default/reports/daily");
    // Another spelling of the same storage key is the same lock.
    let same = c.acquire("reports/DAILY", "b", 30_000, 0).await.unwrap();
    assert_eq!(same.code(), Some("lock_held"));
    let s = c.status("REPORTS/daily").await.unwrap();
    assert_eq!(s.body["owner"], "a");
    for bad in ["has space", "-leading", "semi;colon", ""] {
        let r = c.acquire(bad, "a", 30_000, 0).await.unwrap();
        assert_eq!(r.status, 422, "{bad:?}: {:?}", r.body);
        assert_eq!(r.code(), Some("invalid_key"));
        assert!(!r.message().is_empty());
    }
    let info = tenants(&broker).await;
    let t = tenant(&info, "default");
    assert_eq!(t["policy"]["name"], "team-prefix");
    assert_eq!(t["policy"]["file"], "team.wasm");
    assert_eq!(t["policy"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(t["last_error"], serde_json::Value::Null);
    // The other tenant keeps the built-in policy.
    assert_eq!(tenant(&info, "other")["policy"]["name"], "builtin");
    broker.stop().await;
}

/// The misbehaving tenant gets 500 policy_error on its trigger, keeps
/// working otherwise, and never slows the other tenants much.
async fn contained(fixture: &str) {
    let dir = PolicyDir::new();
    dir.install(fixture, "bad.wasm");
    let broker = broker(&dir, None, Some("bad.wasm")).await;
    let bad = broker.client_with(Some("bad-key"));
    let good = broker.client();

    let stop = Arc::new(AtomicBool::new(false));
    let hammering = {
        let (bad, stop) = (bad.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = bad.acquire("boom", "w", 30_000, 0).await.unwrap();
                assert_eq!(r.status, 500, "{:?}", r.body);
                assert_eq!(r.code(), Some("policy_error"));
                n += 1;
            }
            n
        })
    };
    let mut worst = Duration::ZERO;
    for i in 0..40 {
        let started = Instant::now();
        let key = format!("good-{i}");
        let g = good.acquire(&key, "w", 30_000, 0).await.unwrap();
        assert_eq!(g.status, 200);
        good.release(&key, "w", g.body["token"].as_u64().unwrap())
            .await
            .unwrap();
        worst = worst.max(started.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    let failures = hammering.await.unwrap();
    assert!(failures > 0);
    // Generous: a shared 2-core machine; a guest stuck for good would make
    // this seconds.
    assert!(worst < Duration::from_millis(500), "{fixture}: {worst:?}");

    // The misbehaving tenant still works for keys that do not trigger it.
    let ok = bad.acquire("fine", "w", 30_000, 0).await.unwrap();
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    // Backoff failures (triggered by any non-zero seed) fall back to the
    // built-in backoff: the 409 still carries a hint.
    let held = bad.acquire("fine", "x", 30_000, 0).await.unwrap();
    assert_eq!(held.code(), Some("lock_held"));
    assert!(held.body["error"]["retry_after_ms"].as_u64().unwrap() >= 1);
    let metrics = broker.client_with(None).get("/metrics").await.unwrap();
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains("lockbroker_policy_failures_total{tenant=\"bad\",export=\"naming\"}"),
        "{text}"
    );
    assert!(
        text.contains("lockbroker_policy_failures_total{tenant=\"bad\",export=\"backoff\"}"),
        "{text}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_looping_policy_is_contained() {
    contained("fixtures/loop.wasm").await;
}

#[tokio::test]
async fn a_memory_hog_policy_is_contained() {
    contained("fixtures/hog.wasm").await;
}

#[tokio::test]
async fn a_trapping_policy_is_contained() {
    contained("fixtures/trap.wasm").await;
}

#[tokio::test]
async fn waiting_with_a_failing_backoff_falls_back() {
    let dir = PolicyDir::new();
    dir.install("fixtures/loop.wasm", "bad.wasm");
    let broker = broker(&dir, None, Some("bad.wasm")).await;
    let bad = broker.client_with(Some("bad-key"));
    let g = bad.acquire("wait", "a", 400, 0).await.unwrap();
    assert_eq!(g.status, 200);
    // Every backoff call loops and is cut off; the built-in backoff paces
    // the retries and the waiter gets the lock when the lease expires.
    let w = bad.acquire("wait", "b", 30_000, 5_000).await.unwrap();
    assert_eq!(w.status, 200, "{:?}", w.body);
    assert_eq!(w.body["owner"], "b");
    broker.stop().await;
}

#[tokio::test]
async fn a_policy_that_never_loaded_fails_closed() {
    let dir = PolicyDir::new();
    dir.install("fixtures/garbage.wasm", "bad.wasm");
    let broker = broker(&dir, None, Some("bad.wasm")).await;
    let bad = broker.client_with(Some("bad-key"));
    let r = bad.acquire("k", "w", 30_000, 0).await.unwrap();
    assert_eq!((r.status, r.code()), (500, Some("policy_error")));
    // Other tenants are served; readiness reports the problem.
    assert_eq!(
        broker
            .client()
            .acquire("k", "w", 30_000, 0)
            .await
            .unwrap()
            .status,
        200
    );
    let ready = broker.client_with(None).get("/readyz").await.unwrap();
    assert_eq!(ready.status, 503);
    assert!(ready.message().contains("bad"));
    let info = tenants(&broker).await;
    assert!(tenant(&info, "bad")["last_error"]
        .as_str()
        .unwrap()
        .contains("not a valid"));
    // Fixing the file brings the tenant (and readiness) back, no restart.
    dir.install("default.wasm", "bad.wasm");
    eventually(
        "the fixed policy was picked up",
        Duration::from_secs(5),
        || async {
            bad.acquire("k", "w", 30_000, 0)
                .await
                .is_ok_and(|r| r.status == 200)
        },
    )
    .await;
    assert_eq!(
        broker
            .client_with(None)
            .get("/readyz")
            .await
            .unwrap()
            .status,
        200
    );
    broker.stop().await;
}

/// 16 clients that acquire and release locks in a loop until stopped.
struct Hammer {
    stop: Arc<AtomicBool>,
    /// Answers the clients have had so far.
    answers: Arc<AtomicUsize>,
    clients: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Hammer {
    fn start(broker: &Broker) -> Hammer {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(AtomicUsize::new(0));
        let clients = (0..16)
            .map(|i| {
                let (c, stop, answers) = (broker.client(), stop.clone(), answers.clone());
                tokio::spawn(async move {
                    let (mut n, mut failures) = (0usize, Vec::new());
                    let owner = format!("c{i}");
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("job-{}", (i + n) % 4);
                        n += 1;
                        let acquired = c.acquire(&key, &owner, 30_000, 0).await;
                        answers.fetch_add(1, Ordering::Relaxed);
                        match acquired {
                            Ok(r) if r.status == 200 => {
                                let token = r.body["token"].as_u64().unwrap();
                                let released = c.release(&key, &owner, token).await;
                                answers.fetch_add(1, Ordering::Relaxed);
                                match released {
                                    Ok(rel) if rel.status == 200 => {}
                                    other => failures.push(format!("release: {other:?}")),
                                }
                            }
                            Ok(r) if r.status == 409 => {}
                            other => failures.push(format!("acquire: {other:?}")),
                        }
                    }
                    failures
                })
            })
            .collect();
        Hammer {
            stop,
            answers,
            clients,
        }
    }

    /// Waits until the clients have had 100 more answers: the load has run
    /// under whatever is in force now (`what`).
    async fn runs_under(&self, what: &str) {
        let target = self.answers.load(Ordering::Relaxed) + 100;
        let what = format!("100 more requests under {what}");
        eventually(&what, Duration::from_secs(10), || async {
            self.answers.load(Ordering::Relaxed) >= target
        })
        .await;
    }

    /// Stops the clients; the requests that did not get 200 (or 409 on
    /// acquire).
    async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        for t in self.clients {
            failures.extend(t.await.unwrap());
        }
        failures
    }
}

#[tokio::test]
async fn hot_reload_under_load_fails_no_request() {
    let dir = PolicyDir::new();
    dir.install("default.wasm", "p.wasm");
    let broker = broker(&dir, Some("p.wasm"), None).await;
    let load = Hammer::start(&broker);
    load.runs_under("the first policy").await;

    // Same naming, new fairness: a swap nobody should notice but the admin.
    dir.install("priority.wasm", "p.wasm");
    eventually(
        "the new policy took effect within a second",
        Duration::from_secs(1),
        || async {
            let info = tenants(&broker).await;
            tenant(&info, "default")["policy"]["name"] == "priority"
        },
    )
    .await;
    load.runs_under("the new policy").await;

    // A bad version keeps the old one in force, and fails nobody.
    dir.write("p.wasm", b"definitely not wasm");
    eventually(
        "the bad file's error is shown",
        Duration::from_secs(5),
        || async {
            let info = tenants(&broker).await;
            tenant(&info, "default")["last_error"].is_string()
        },
    )
    .await;
    let info = tenants(&broker).await;
    assert_eq!(tenant(&info, "default")["policy"]["name"], "priority");
    load.runs_under("the bad file").await;

    let failures = load.finish().await;
    assert!(
        failures.is_empty(),
        "failed requests during reloads: {failures:?}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_naming_change_takes_effect_within_a_second() {
    let dir = PolicyDir::new();
    dir.install("default.wasm", "p.wasm");
    let broker = broker(&dir, Some("p.wasm"), None).await;
    let load = Hammer::start(&broker);
    let c = broker.client();
    assert_eq!(
        c.status("Job-X").await.unwrap().body["storage_key"],
        "Job-X"
    );
    dir.install("team-prefix.wasm", "p.wasm");
    eventually(
        "the new naming took effect within a second",
        Duration::from_secs(1),
        || async {
            c.status("Job-X")
                .await
                .is_ok_and(|r| r.body["storage_key"] == "default/job-x")
        },
    )
    .await;
    load.runs_under("the new naming").await;
    let failures = load.finish().await;
    // A lease taken under the old naming and released under the new one
    // names another lock: that release is refused (lease_lost), and the
    // old lease runs out by its TTL. Nothing else may fail.
    for failure in &failures {
        assert!(
            failure.starts_with("release") && failure.contains("lease_lost"),
            "{failure}"
        );
    }
    assert!(failures.len() <= 16, "{failures:?}");
    broker.stop().await;
}

#[tokio::test]
async fn admin_upload_validates_then_swaps() {
    let dir = PolicyDir::new();
    dir.install("default.wasm", "p.wasm");
    let broker = broker(&dir, Some("p.wasm"), None).await;
    let admin = broker.client_with(Some(ADMIN));
    let put = |file: &str| {
        let admin = admin.clone();
        let bytes = std::fs::read(dist(file)).unwrap();
        async move {
            admin
                .send(
                    Method::PUT,
                    "/v1/admin/tenants/default/policy",
                    &[("content-type", "application/wasm")],
                    Bytes::from(bytes),
                    Duration::ZERO,
                )
                .await
                .unwrap()
        }
    };
    let before = tenant(&tenants(&broker).await, "default")["policy"]["sha256"].clone();
    for bad in [
        "fixtures/trap-always.wasm",
        "fixtures/wrong-world.wasm",
        "fixtures/imports.wasm",
        "fixtures/not-a-component.wasm",
        "fixtures/garbage.wasm",
    ] {
        let r = put(bad).await;
        assert_eq!(r.status, 422, "{bad}: {:?}", r.body);
        assert_eq!(r.code(), Some("invalid_policy"));
        let info = tenants(&broker).await;
        assert_eq!(
            tenant(&info, "default")["policy"]["sha256"],
            before,
            "{bad}: old policy stays"
        );
    }
    let r = put("priority.wasm").await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["policy"]["name"], "priority");
    assert_ne!(r.body["policy"]["sha256"], before);
    assert_eq!(r.body["last_error"], serde_json::Value::Null);
    // The upload replaced the tenant's file, so a restart keeps it.
    assert_eq!(
        std::fs::read(dir.0.join("p.wasm")).unwrap(),
        std::fs::read(dist("priority.wasm")).unwrap()
    );

    // Unknown tenant, tenant key, too large.
    let r = admin
        .send(
            Method::PUT,
            "/v1/admin/tenants/nobody/policy",
            &[],
            Bytes::from_static(b"x"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 404);
    let tenant_client = broker.client_with(Some(KEY));
    let r = tenant_client
        .send(
            Method::PUT,
            "/v1/admin/tenants/default/policy",
            &[],
            Bytes::from_static(b"x"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    let huge = Bytes::from(vec![0u8; broker.config.max_policy_bytes + 1]);
    let r = admin
        .send(
            Method::PUT,
            "/v1/admin/tenants/default/policy",
            &[],
            huge,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!((r.status, r.code()), (413, Some("too_large")));
    broker.stop().await;
}
