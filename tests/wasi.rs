//! Policies that import WASI (as Python's toolchain emits them), end to
//! end: they serve, their sandbox is empty, they are cut off at their
//! tenant's deadline, a restart loads them from the disk cache, and
//! `lockbroker policy check` says what the broker would make of them.
//!
//! The guest is `plugins/fixtures/wasi` (built for wasm32-wasip2 by
//! `scripts/build-plugins`): its naming answers what it saw when a key asks
//! it to read a file, open a socket, sleep or spin.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use lockbroker::config::TenantConfig;
use lockbroker_api::{ErrorCode, Lease};
use lockbroker_tests::{bin, config, dist, fresh_db_name, Broker};

/// A directory of its own for one test, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lb-{what}-{}", fresh_db_name()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A broker whose `default` tenant runs the WASI probe with a 40 ms budget
/// and whose `slow` tenant runs it with 400 ms; compiled policies are
/// cached in `cache`.
async fn broker(policies: &TempDir, cache: &TempDir) -> Broker {
    std::fs::copy(dist("fixtures/wasi.wasm"), policies.0.join("wasi.wasm")).unwrap();
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.policy_dir = policies.0.clone();
    cfg.cache_dir = Some(cache.0.clone());
    cfg.tenants[0].policy = Some("wasi.wasm".into());
    cfg.tenants[0].policy_deadline_ms = Some(40);
    cfg.tenants.push(TenantConfig {
        policy: Some("wasi.wasm".into()),
        policy_deadline_ms: Some(400),
        policy_memory_bytes: Some(32 << 20),
        ..TenantConfig::new("slow", "slow-key")
    });
    cfg.validate().unwrap();
    Broker::start_with(db, cfg).await
}

#[tokio::test]
async fn a_wasi_policy_serves_and_its_sandbox_holds() {
    let (policies, cache) = (TempDir::new("policies"), TempDir::new("cache"));
    let broker = broker(&policies, &cache).await;
    let c = broker.client();
    let g = c.acquire("job-1", "a", 30_000, 0).await.unwrap();
    assert_eq!(g.status, 200, "{g:?}");
    assert_eq!(g.ok::<Lease>().storage_key, "job-1");
    // What the guest tried was denied, and it said so: the key is refused
    // (422 with the guest's reason), nothing is granted.
    for probe in [
        "read:/etc/passwd",
        "list:/",
        "connect:127.0.0.1:3306",
        "resolve:localhost",
    ] {
        let r = c.acquire(probe, "a", 30_000, 0).await.unwrap();
        assert_eq!(r.code(), Some(ErrorCode::InvalidKey), "{probe}: {r:?}");
    }
    // A guest that waits or spins is cut off: naming fails closed.
    for runaway in ["sleep:10000", "spin"] {
        let started = Instant::now();
        let r = c.acquire(runaway, "a", 30_000, 0).await.unwrap();
        assert_eq!(r.status, 500, "{runaway}: {r:?}");
        assert_eq!(r.code(), Some(ErrorCode::PolicyError));
        assert!(started.elapsed() < Duration::from_secs(2), "{runaway}");
    }
    // Printing is harmless (its line goes to the log).
    let p = c.acquire("print:hello", "a", 30_000, 0).await.unwrap();
    assert_eq!(p.status, 200, "{p:?}");
    // The broker is up, ready, and the policy still serves.
    assert_eq!(c.get("/readyz").await.unwrap().status, 200);
    let g = c.acquire("job-2", "a", 30_000, 0).await.unwrap();
    assert_eq!(g.status, 200, "{g:?}");
    broker.stop().await;
}

#[tokio::test]
async fn each_tenant_gets_its_own_deadline() {
    let (policies, cache) = (TempDir::new("policies"), TempDir::new("cache"));
    let broker = broker(&policies, &cache).await;
    let slow = broker.client_with(Some("slow-key"));
    let started = Instant::now();
    let r = slow.acquire("spin", "a", 30_000, 0).await.unwrap();
    let took = started.elapsed();
    assert_eq!(r.code(), Some(ErrorCode::PolicyError), "{r:?}");
    assert!(
        took >= Duration::from_millis(400),
        "cut off early: {took:?}"
    );
    let started = Instant::now();
    let r = broker
        .client()
        .acquire("spin", "a", 30_000, 0)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(r.code(), Some(ErrorCode::PolicyError), "{r:?}");
    assert!(
        took < Duration::from_millis(400),
        "not cut off at 40 ms: {took:?}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_restart_loads_the_compiled_policy_from_the_disk_cache() {
    let (policies, cache) = (TempDir::new("policies"), TempDir::new("cache"));
    let mut broker = broker(&policies, &cache).await;
    let metric = "lockbroker_policy_cache_hits_total{tenant=\"default\"}";
    let first = broker.client().get("/metrics").await.unwrap();
    // The second tenant loads the same bytes: it may already hit the
    // cache; the first never does.
    assert!(!first.text().contains(metric), "{}", first.text());
    broker.restart().await;
    let again = broker.client().get("/metrics").await.unwrap();
    assert!(
        again.text().contains(&format!("{metric} 1")),
        "{}",
        again.text()
    );
    let g = broker
        .client()
        .acquire("job", "a", 30_000, 0)
        .await
        .unwrap();
    assert_eq!(g.status, 200, "{g:?}");
    broker.stop().await;
}

/// Runs `lockbroker policy check ARGS` with its own cache directory and a
/// config whose tenants `default` and `team-a` have a 100 ms budget: the
/// check times 200 calls of each export and reports the first one cut
/// off, and on a busy 2-core machine a call of a few microseconds now and
/// then overran the default 5 ms.
fn policy_check(args: &[&str], cache: &TempDir) -> std::process::Output {
    let config = cache.0.join("check.toml");
    std::fs::write(
        &config,
        "[[tenant]]\nname = \"default\"\napi_key = \"k1\"\npolicy_deadline_ms = 100\n\
         [[tenant]]\nname = \"team-a\"\napi_key = \"k2\"\npolicy_deadline_ms = 100\n",
    )
    .unwrap();
    std::process::Command::new(bin("lockbroker"))
        .args(["policy", "check"])
        .args(args)
        .arg("--config")
        .arg(&config)
        .env("LOCKBROKER_CACHE_DIR", &cache.0)
        .env("LOCKBROKER_LOG", "warn")
        .output()
        .expect("run lockbroker policy check")
}

#[test]
fn policy_check_accepts_a_good_component_and_refuses_a_bad_one() {
    let cache = TempDir::new("cache");
    let good = dist("fixtures/wasi.wasm");
    let out = policy_check(
        &[
            good.to_str().unwrap(),
            "--tenant",
            "team-a",
            "--key",
            "Job-1",
            "--key",
            "read:/etc/passwd",
        ],
        &cache,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("policy:     wasi-probe 0.1.0"), "{stdout}");
    assert!(stdout.contains("\"Job-1\" -> \"Job-1\""), "{stdout}");
    assert!(
        stdout.contains("\"read:/etc/passwd\" rejected:"),
        "{stdout}"
    );
    assert!(stdout.contains("wasi:filesystem/types"), "{stdout}");
    assert!(stdout.contains("naming    p50"), "{stdout}");
    for (bad, reason) in [
        ("fixtures/trap-always.wasm", "self-check"),
        ("fixtures/imports.wasm", "lockbroker:needs-clock/clock"),
        ("fixtures/garbage.wasm", "not a valid WebAssembly component"),
    ] {
        let out = policy_check(&[dist(bad).to_str().unwrap()], &cache);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {stderr}");
        assert!(
            stderr.contains("refused") && stderr.contains(reason),
            "{bad}: {stderr}"
        );
    }
}
