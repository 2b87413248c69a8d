//! Quotas and secrets against the real broker and MariaDB: `max_held`
//! counts every kind's live leases and refuses a multi-lock whole;
//! `max_requests_per_s` answers `rate_limited` with `Retry-After`; a tenant
//! at its limits does not limit another; several keys per tenant and
//! `sha256:` digests in place of secrets; `lockbroker hash-key` and
//! `lockbroker config check`.

use std::{
    io::Write,
    process::{Command, Stdio},
};

use lockbroker::{config::TenantConfig, secret};
use lockbroker_api::ErrorCode;
use lockbroker_tests::{bin, config, fresh_db_name, Broker, Client, Reply, KEY, OTHER_KEY};
use serde_json::{json, Value};

/// A broker whose `default` tenant is changed by `tenant`.
async fn broker_with(tenant: impl FnOnce(&mut TenantConfig)) -> Broker {
    let db = fresh_db_name();
    let mut config = config(&db);
    tenant(&mut config.tenants[0]);
    config.validate().expect("valid");
    Broker::start_with(db, config).await
}

async fn post(c: &Client, path: &str, body: Value) -> Reply {
    c.post(path, &body).await.unwrap()
}

fn refused_with(reply: &Reply, code: ErrorCode) -> u64 {
    assert_eq!(reply.status, 429, "{reply:?}");
    assert_eq!(reply.code(), Some(code), "{reply:?}");
    let error = reply.error().unwrap();
    let retry_after_ms = error.retry_after_ms.expect("a retry hint");
    let header: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(header >= 1 && header * 1000 >= retry_after_ms, "{reply:?}");
    retry_after_ms
}

#[tokio::test]
async fn max_held_counts_every_kind_and_refuses_a_multi_lock_whole() {
    let broker = broker_with(|t| t.max_held = 4).await;
    let c = broker.client();
    let lock = post(&c, "/v1/locks/a/acquire", json!({"owner": "w"})).await;
    assert_eq!(lock.status, 200, "{lock:?}");
    let permit = json!({"owner": "w", "permits": 2});
    assert!(post(&c, "/v1/semaphores/s/acquire", permit).await.is_ok());
    let read = json!({"owner": "w", "mode": "read"});
    assert!(post(&c, "/v1/rwlocks/r/acquire", read).await.is_ok());
    // Three held: a multi-lock of two would make five.
    let multi = json!({"owner": "w", "keys": ["m1", "m2"]});
    let reply = post(&c, "/v1/multilock/acquire", multi.clone()).await;
    refused_with(&reply, ErrorCode::QuotaExceeded);
    for key in ["m1", "m2"] {
        let status = c.status(key).await.unwrap();
        assert_eq!(
            status.json()["held"],
            false,
            "{key} was granted: {status:?}"
        );
    }
    // One more fits; then nothing.
    let campaign = json!({"candidate": "w"});
    assert!(post(&c, "/v1/elections/e/campaign", campaign).await.is_ok());
    let reply = post(&c, "/v1/locks/b/acquire", json!({"owner": "w"})).await;
    refused_with(&reply, ErrorCode::QuotaExceeded);
    // Another tenant is not limited by this one's quota.
    let other = broker.client_with(Some(OTHER_KEY));
    let reply = post(&other, "/v1/locks/b/acquire", json!({"owner": "w"})).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    // A release makes room at once.
    let token = lock.json()["token"].as_u64().unwrap();
    assert!(c.release("a", "w", token).await.unwrap().is_ok());
    let reply = post(&c, "/v1/locks/b/acquire", json!({"owner": "w"})).await;
    assert_eq!(reply.status, 200, "{reply:?}");
}

#[tokio::test]
async fn expired_leases_leave_the_quota() {
    let broker = broker_with(|t| t.max_held = 1).await;
    let c = broker.client();
    let first = json!({"owner": "w", "ttl_ms": 200});
    assert!(post(&c, "/v1/locks/a/acquire", first).await.is_ok());
    let reply = post(&c, "/v1/locks/b/acquire", json!({"owner": "w"})).await;
    refused_with(&reply, ErrorCode::QuotaExceeded);
    // Once `a` expires (by the database clock), `b` fits: a client that
    // follows the retry hint gets it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let reply = post(&c, "/v1/locks/b/acquire", json!({"owner": "w"})).await;
        if reply.status == 200 {
            break;
        }
        let wait = refused_with(&reply, ErrorCode::QuotaExceeded);
        assert!(std::time::Instant::now() < deadline, "never admitted");
        tokio::time::sleep(std::time::Duration::from_millis(wait.min(250))).await;
    }
}

#[tokio::test]
async fn past_its_rate_a_tenant_is_told_when_to_come_back_and_others_are_not() {
    let broker = broker_with(|t| {
        t.max_requests_per_s = Some(1);
        t.max_requests_burst = Some(3);
    })
    .await;
    let (c, other) = (broker.client(), broker.client_with(Some(OTHER_KEY)));
    // The burst, then a refusal (the bucket refills one a second).
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(c.status("k").await.unwrap());
    }
    assert!(
        statuses[..3].iter().all(|r| r.status == 200),
        "{statuses:?}"
    );
    let wait = refused_with(&statuses[3], ErrorCode::RateLimited);
    assert!((1..=1000).contains(&wait), "{wait}");
    // Writes count too; the other tenant and the health checks do not.
    let reply = post(&c, "/v1/locks/k/acquire", json!({"owner": "w"})).await;
    assert_eq!(reply.status, 429, "{reply:?}");
    for _ in 0..10 {
        assert_eq!(other.status("k").await.unwrap().status, 200);
        assert_eq!(c.get("/healthz").await.unwrap().status, 200);
    }
}

#[tokio::test]
async fn a_tenant_may_have_several_keys_and_a_config_may_hold_only_digests() {
    let new_digest = secret::digest_text("new-key");
    let broker = broker_with(|t| {
        t.api_key = None;
        t.api_keys = vec![
            KEY.try_into().unwrap(),
            new_digest.as_str().try_into().unwrap(),
        ];
    })
    .await;
    for key in [KEY, "new-key"] {
        let reply = broker.client_with(Some(key)).status("k").await.unwrap();
        assert_eq!(reply.status, 200, "{key}: {reply:?}");
    }
    // The digest is not itself a key.
    let reply = broker
        .client_with(Some(&new_digest))
        .status("k")
        .await
        .unwrap();
    assert_eq!(reply.status, 401, "{reply:?}");
}

/// Runs `lockbroker args` with `stdin`: exit code, stdout, stderr.
fn lockbroker(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(bin("lockbroker"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap(),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn hash_key_prints_the_digest_a_config_takes() {
    let (code, out, _) = lockbroker(&["hash-key"], "hunter2\n");
    assert_eq!(code, 0);
    assert_eq!(out.trim(), secret::digest_text("hunter2"));
    let (code, _, err) = lockbroker(&["hash-key"], "");
    assert_eq!(code, 2);
    assert!(err.contains("no secret"), "{err}");
}

#[test]
fn config_check_accepts_a_good_config_and_names_what_is_wrong_with_a_bad_one() {
    let digest = secret::digest_text("k");
    let admin = secret::digest_text("admin");
    let good = format!(
        "admin_token = \"{admin}\"\n[[tenant]]\nname = \"a\"\napi_keys = [\"{digest}\", \"j\"]\nmax_held = 10\nmax_requests_per_s = 100\n"
    );
    let dir = std::env::temp_dir().join(format!("lb-config-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("good.toml");
    std::fs::write(&file, good).unwrap();
    let (code, out, err) = lockbroker(&["config", "check", file.to_str().unwrap()], "");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok"), "{out}");
    // A bad value is named; a malformed digest is refused without
    // repeating it.
    let bad = dir.join("bad.toml");
    for (text, says) in [
        ("api_key = \"k\"\nmax_held = 0", "max_held"),
        ("api_key = \"sha256:secret\"", "64 hex digits"),
    ] {
        std::fs::write(&bad, format!("[[tenant]]\nname = \"a\"\n{text}\n")).unwrap();
        let (code, _, err) = lockbroker(&["config", "check", bad.to_str().unwrap()], "");
        assert_eq!(code, 2);
        assert!(err.contains(says) && !err.contains("secret\""), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
