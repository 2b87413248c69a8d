//! Every lock case of API.md, against a real broker and MariaDB.

use std::time::Duration;

use lockbroker_tests::{db_conn, eventually, Broker, OTHER_KEY};
use serde_json::json;

/// How long a test waits for a condition: a lease's expiry or a waiter's
/// arrival normally shows within a second.
const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn acquire_release_and_status() {
    let broker = Broker::start().await;
    let c = broker.client();

    let status = c.status("job-1").await.unwrap();
    assert_eq!(status.status, 200);
    assert_eq!(status.body["held"], false);
    assert_eq!(status.body["owner"], json!(null));
    assert_eq!(status.body["waiters"], 0);

    let grant = c.acquire("job-1", "worker-7", 30_000, 0).await.unwrap();
    assert_eq!(grant.status, 200, "{:?}", grant.body);
    assert_eq!(grant.body["key"], "job-1");
    assert_eq!(grant.body["storage_key"], "job-1");
    assert_eq!(grant.body["owner"], "worker-7");
    assert_eq!(grant.body["hold_count"], 1);
    assert_eq!(grant.body["ttl_ms"], 30_000);
    let token = grant.body["token"].as_u64().unwrap();
    assert!(token >= 1);
    let expires = grant.body["expires_at"].as_str().unwrap();
    assert!(expires.ends_with('Z') && expires.len() == 24, "{expires}");

    let status = c.status("job-1").await.unwrap();
    assert_eq!(status.body["held"], true);
    assert_eq!(status.body["owner"], "worker-7");
    assert_eq!(status.body["token"], token);
    assert_eq!(status.body["expires_at"], expires);

    let other = c.acquire("job-1", "worker-8", 30_000, 0).await.unwrap();
    assert_eq!(other.status, 409);
    assert_eq!(other.code(), Some("lock_held"));
    assert!(other.body["error"]["retry_after_ms"].as_u64().unwrap() >= 1);
    assert!(other.headers.contains_key("retry-after"));

    let released = c.release("job-1", "worker-7", token).await.unwrap();
    assert_eq!(released.status, 200);
    assert_eq!(released.body, json!({"released": true, "hold_count": 0}));
    assert_eq!(c.status("job-1").await.unwrap().body["held"], false);

    let next = c.acquire("job-1", "worker-8", 30_000, 0).await.unwrap();
    assert_eq!(next.status, 200);
    assert_eq!(next.body["token"].as_u64().unwrap(), token + 1);
    broker.stop().await;
}

#[tokio::test]
async fn reentry_counts_holds() {
    let broker = Broker::start().await;
    let c = broker.client();
    let first = c.acquire("re", "w", 10_000, 0).await.unwrap();
    let token = first.body["token"].as_u64().unwrap();
    // A longer TTL than the first: a renewal moves the end later even
    // within the same millisecond.
    let second = c.acquire("re", "w", 20_000, 0).await.unwrap();
    assert_eq!(second.status, 200);
    assert_eq!(second.body["token"], token, "re-entry keeps the token");
    assert_eq!(second.body["hold_count"], 2);
    assert!(
        second.body["expires_at"].as_str() > first.body["expires_at"].as_str(),
        "re-entry renews the lease"
    );
    let third = c.acquire("re", "w", 20_000, 0).await.unwrap();
    assert_eq!(third.body["hold_count"], 3);

    for remaining in [2, 1] {
        let r = c.release("re", "w", token).await.unwrap();
        assert_eq!(r.body, json!({"released": false, "hold_count": remaining}));
        assert_eq!(c.status("re").await.unwrap().body["held"], true);
        assert_eq!(c.acquire("re", "x", 1000, 0).await.unwrap().status, 409);
    }
    let r = c.release("re", "w", token).await.unwrap();
    assert_eq!(r.body, json!({"released": true, "hold_count": 0}));
    assert_eq!(c.status("re").await.unwrap().body["held"], false);
    broker.stop().await;
}

#[tokio::test]
async fn wrong_token_or_owner_changes_nothing() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant = c.acquire("k", "alice", 30_000, 0).await.unwrap();
    let token = grant.body["token"].as_u64().unwrap();
    let before = c.status("k").await.unwrap().body;

    for (owner, tok) in [("alice", token + 1), ("alice", token - 1), ("bob", token)] {
        let r = c.release("k", owner, tok).await.unwrap();
        assert_eq!(r.status, 409, "release {owner} {tok}");
        assert_eq!(r.code(), Some("lease_lost"));
        let r = c.renew("k", owner, tok, 60_000).await.unwrap();
        assert_eq!(r.status, 409, "renew {owner} {tok}");
        assert_eq!(r.code(), Some("lease_lost"));
    }
    assert_eq!(c.status("k").await.unwrap().body, before, "nothing changed");
    // Never held at all.
    let r = c.release("never", "alice", 1).await.unwrap();
    assert_eq!((r.status, r.code()), (409, Some("lease_lost")));
    broker.stop().await;
}

#[tokio::test]
async fn renew_extends_the_lease() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant = c.acquire("r", "w", 300, 0).await.unwrap();
    let token = grant.body["token"].as_u64().unwrap();
    // The same TTL, taken later and never renewed: once it has run out, so
    // has the first TTL of "r".
    let control = c.acquire("r-control", "w", 300, 0).await.unwrap();
    assert!(control.body["expires_at"].as_str() >= grant.body["expires_at"].as_str());
    let renewed = c.renew("r", "w", token, 5_000).await.unwrap();
    assert_eq!(renewed.status, 200);
    assert_eq!(renewed.body["token"], token);
    assert_eq!(renewed.body["ttl_ms"], 5_000);
    assert_eq!(renewed.body["hold_count"], 1);
    assert_eq!(renewed.body["storage_key"], "r");
    eventually("the unrenewed control lease runs out", WAIT, || async {
        c.status("r-control")
            .await
            .is_ok_and(|s| s.body["held"] == false)
    })
    .await;
    // Past the first TTL, still held thanks to the renewal.
    assert_eq!(c.status("r").await.unwrap().body["held"], true);
    assert_eq!(c.acquire("r", "x", 1000, 0).await.unwrap().status, 409);
    broker.stop().await;
}

#[tokio::test]
async fn expiry_then_regrant_with_a_greater_token() {
    let broker = Broker::start().await;
    let c = broker.client();
    let first = c.acquire("exp", "a", 150, 0).await.unwrap();
    let t1 = first.body["token"].as_u64().unwrap();
    assert_eq!(c.acquire("exp", "b", 1000, 0).await.unwrap().status, 409);
    eventually("a's 150 ms lease runs out", WAIT, || async {
        c.status("exp").await.is_ok_and(|s| s.body["held"] == false)
    })
    .await;

    // Renew after expiry is lease_lost even though nobody took the lock.
    let late = c.renew("exp", "a", t1, 1000).await.unwrap();
    assert_eq!((late.status, late.code()), (409, Some("lease_lost")));

    let second = c.acquire("exp", "b", 1000, 0).await.unwrap();
    assert_eq!(second.status, 200);
    let t2 = second.body["token"].as_u64().unwrap();
    assert!(t2 > t1);
    // The old holder can no longer release it.
    let stale = c.release("exp", "a", t1).await.unwrap();
    assert_eq!((stale.status, stale.code()), (409, Some("lease_lost")));
    assert_eq!(c.status("exp").await.unwrap().body["owner"], "b");

    // The same owner re-acquiring after its own lease expired gets a new
    // token, not a re-entry.
    eventually("b's 1 s lease runs out", WAIT, || async {
        c.status("exp").await.is_ok_and(|s| s.body["held"] == false)
    })
    .await;
    let third = c.acquire("exp", "b", 1000, 0).await.unwrap();
    assert_eq!(third.body["hold_count"], 1);
    assert!(third.body["token"].as_u64().unwrap() > t2);
    broker.stop().await;
}

#[tokio::test]
async fn expiry_is_judged_by_the_database_clock() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant = c.acquire("clock", "a", 60_000, 0).await.unwrap();
    let token = grant.body["token"].as_u64().unwrap();
    // Move the lease's end into the past on the database: no broker clock
    // is consulted, so the lock is free at once.
    let mut db = db_conn(&broker.db).await;
    sqlx::query("UPDATE locks SET expires_at = NOW(6) - INTERVAL 1 SECOND")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(c.status("clock").await.unwrap().body["held"], false);
    let r = c.renew("clock", "a", token, 1000).await.unwrap();
    assert_eq!(r.code(), Some("lease_lost"));
    let b = c.acquire("clock", "b", 1000, 0).await.unwrap();
    assert_eq!(b.body["token"].as_u64().unwrap(), token + 1);
    broker.stop().await;
}

#[tokio::test]
async fn keys_compare_byte_for_byte() {
    let broker = Broker::start().await;
    let c = broker.client();
    let keys = [
        "Job",
        "job",
        "job ",
        "jöb",
        "job\u{301}",
        "ключ/キー ✓",
        "a/b",
        "a%2Fb",
    ];
    let mut tokens = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let r = c
            .acquire(key, &format!("owner-{i}"), 30_000, 0)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{key:?} is its own lock: {:?}", r.body);
        assert_eq!(r.body["key"], *key);
        assert_eq!(r.body["storage_key"], *key);
        tokens.push(r.body["token"].as_u64().unwrap());
    }
    for (i, key) in keys.iter().enumerate() {
        let s = c.status(key).await.unwrap();
        assert_eq!(s.body["owner"], format!("owner-{i}"), "{key:?}");
        assert_eq!(s.body["key"], *key);
    }
    let mut db = db_conn(&broker.db).await;
    let (rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM locks")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(rows as usize, keys.len());
    broker.stop().await;
}

#[tokio::test]
async fn tenants_never_see_each_other() {
    let broker = Broker::start().await;
    let a = broker.client();
    let b = broker.client_with(Some(OTHER_KEY));
    let grant = a.acquire("shared-name", "w", 30_000, 0).await.unwrap();
    let token = grant.body["token"].as_u64().unwrap();

    // Tenant b, with a's key name, owner and token, reaches nothing of a's.
    assert_eq!(b.status("shared-name").await.unwrap().body["held"], false);
    let r = b.release("shared-name", "w", token).await.unwrap();
    assert_eq!(r.code(), Some("lease_lost"));
    let r = b.renew("shared-name", "w", token, 60_000).await.unwrap();
    assert_eq!(r.code(), Some("lease_lost"));
    let a_status = a.status("shared-name").await.unwrap().body;
    assert_eq!(a_status["held"], true);
    assert_eq!(a_status["expires_at"], grant.body["expires_at"]);

    // Its own lock of that name is free and has its own tokens.
    let rb = b.acquire("shared-name", "w2", 30_000, 0).await.unwrap();
    assert_eq!(rb.status, 200);
    assert_eq!(rb.body["token"], 1);
    assert_eq!(a.status("shared-name").await.unwrap().body["owner"], "w");
    assert_eq!(
        a.release("shared-name", "w", token).await.unwrap().status,
        200
    );
    assert_eq!(b.status("shared-name").await.unwrap().body["owner"], "w2");
    broker.stop().await;
}

#[tokio::test]
async fn waiting_acquire_gets_the_lock_when_released() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant = c.acquire("w", "first", 30_000, 0).await.unwrap();
    let token = grant.body["token"].as_u64().unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("w", "second", 30_000, 10_000).await.unwrap() })
    };
    eventually("the second acquire waits in the queue", WAIT, || async {
        c.status("w").await.is_ok_and(|s| s.body["waiters"] == 1)
    })
    .await;
    c.release("w", "first", token).await.unwrap();
    let got = waiter.await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.body["owner"], "second");
    assert_eq!(got.body["token"].as_u64().unwrap(), token + 1);

    // A wait that runs out answers 409 after about wait_ms.
    let started = std::time::Instant::now();
    let timed_out = c.acquire("w", "third", 30_000, 300).await.unwrap();
    let took = started.elapsed();
    assert_eq!(timed_out.code(), Some("lock_held"));
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    broker.stop().await;
}

#[tokio::test]
async fn waiting_acquire_gets_the_lock_when_it_expires() {
    let broker = Broker::start().await;
    let c = broker.client();
    c.acquire("e", "first", 300, 0).await.unwrap();
    let got = c.acquire("e", "second", 5_000, 5_000).await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.body["owner"], "second");
    broker.stop().await;
}

#[tokio::test]
async fn max_waiters_gives_429() {
    let db = lockbroker_tests::fresh_db_name();
    let mut config = lockbroker_tests::config(&db);
    config.tenants[0].max_waiters = 1;
    let broker = Broker::start_with(db, config).await;
    let c = broker.client();
    c.acquire("mw", "holder", 30_000, 0).await.unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("mw", "w1", 30_000, 1_500).await.unwrap() })
    };
    eventually("w1 waits in the queue", WAIT, || async {
        c.status("mw").await.is_ok_and(|s| s.body["waiters"] == 1)
    })
    .await;
    let over = c.acquire("mw", "w2", 30_000, 1_000).await.unwrap();
    assert_eq!((over.status, over.code()), (429, Some("too_many_waiters")));
    // A single try is not a waiter and still answers 409.
    assert_eq!(c.acquire("mw", "w3", 30_000, 0).await.unwrap().status, 409);
    assert_eq!(waiter.await.unwrap().status, 409);
    broker.stop().await;
}

#[tokio::test]
async fn first_acquirers_race_and_one_wins() {
    let broker = Broker::start().await;
    let c = broker.client();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.acquire("fresh", &format!("w{i}"), 30_000, 0)
                .await
                .unwrap()
        }));
    }
    let mut winners = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => {
                winners += 1;
                assert_eq!(r.body["token"], 1);
            }
            409 => assert_eq!(r.code(), Some("lock_held")),
            other => panic!("unexpected {other}: {:?}", r.body),
        }
    }
    assert_eq!(winners, 1);
    broker.stop().await;
}
