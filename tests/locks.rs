//! Every lock case of API.md, against a real broker and MariaDB.

use std::time::Duration;

use lockbroker_api::{ErrorCode, Lease, LockStatus, ReleaseResponse};
use lockbroker_tests::{db_conn, eventually, Broker, Client, OTHER_KEY};

/// How long a test waits for a condition: a lease's expiry or a waiter's
/// arrival normally shows within a second.
const WAIT: Duration = Duration::from_secs(5);

/// A key's status, read into the API's type.
async fn status(c: &Client, key: &str) -> LockStatus {
    c.status(key).await.unwrap().ok()
}

/// Whether `key` is held, for `eventually`: a failed request is "not yet".
async fn held(c: &Client, key: &str) -> Option<bool> {
    let reply = c.status(key).await.ok()?;
    reply.try_parse::<LockStatus>().map(|s| s.held)
}

/// How many requests wait for `key`, for `eventually`.
async fn waiters(c: &Client, key: &str) -> Option<u64> {
    let reply = c.status(key).await.ok()?;
    reply.try_parse::<LockStatus>().map(|s| s.waiters)
}

fn released(released: bool, hold_count: u32) -> ReleaseResponse {
    ReleaseResponse {
        released,
        hold_count,
    }
}

#[tokio::test]
async fn acquire_release_and_status() {
    let broker = Broker::start().await;
    let c = broker.client();

    let reply = c.status("job-1").await.unwrap();
    assert_eq!(reply.status, 200);
    let free: LockStatus = reply.ok();
    assert!(!free.held);
    assert_eq!(free.owner, None);
    assert_eq!(free.waiters, 0);

    let reply = c.acquire("job-1", "worker-7", 30_000, 0).await.unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    let grant: Lease = reply.ok();
    assert_eq!(grant.key, "job-1");
    assert_eq!(grant.storage_key, "job-1");
    assert_eq!(grant.owner, "worker-7");
    assert_eq!(grant.hold_count, 1);
    assert_eq!(grant.ttl_ms, 30_000);
    let token = grant.token;
    assert!(token >= 1);
    let expires = grant.expires_at;
    assert!(expires.ends_with('Z') && expires.len() == 24, "{expires}");

    let held_now = status(&c, "job-1").await;
    assert!(held_now.held);
    assert_eq!(held_now.owner.as_deref(), Some("worker-7"));
    assert_eq!(held_now.token, Some(token));
    assert_eq!(held_now.expires_at, Some(expires));

    let other = c.acquire("job-1", "worker-8", 30_000, 0).await.unwrap();
    assert_eq!(other.status, 409);
    let refusal = other.error().expect("an error envelope");
    assert_eq!(refusal.code, ErrorCode::LockHeld);
    assert!(refusal.retry_after_ms.unwrap() >= 1);
    assert!(other.headers.contains_key("retry-after"));

    let reply = c.release("job-1", "worker-7", token).await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.ok::<ReleaseResponse>(), released(true, 0));
    assert!(!status(&c, "job-1").await.held);

    let next = c.acquire("job-1", "worker-8", 30_000, 0).await.unwrap();
    assert_eq!(next.status, 200);
    assert_eq!(next.ok::<Lease>().token, token + 1);
    broker.stop().await;
}

#[tokio::test]
async fn reentry_counts_holds() {
    let broker = Broker::start().await;
    let c = broker.client();
    let first: Lease = c.acquire("re", "w", 10_000, 0).await.unwrap().ok();
    let token = first.token;
    // A longer TTL than the first: a renewal moves the end later even
    // within the same millisecond.
    let reply = c.acquire("re", "w", 20_000, 0).await.unwrap();
    assert_eq!(reply.status, 200);
    let second: Lease = reply.ok();
    assert_eq!(second.token, token, "re-entry keeps the token");
    assert_eq!(second.hold_count, 2);
    assert!(
        second.expires_at > first.expires_at,
        "re-entry renews the lease"
    );
    let third: Lease = c.acquire("re", "w", 20_000, 0).await.unwrap().ok();
    assert_eq!(third.hold_count, 3);

    for remaining in [2, 1] {
        let r = c.release("re", "w", token).await.unwrap();
        assert_eq!(r.ok::<ReleaseResponse>(), released(false, remaining));
        assert!(status(&c, "re").await.held);
        assert_eq!(c.acquire("re", "x", 1000, 0).await.unwrap().status, 409);
    }
    let r = c.release("re", "w", token).await.unwrap();
    assert_eq!(r.ok::<ReleaseResponse>(), released(true, 0));
    assert!(!status(&c, "re").await.held);
    broker.stop().await;
}

#[tokio::test]
async fn wrong_token_or_owner_changes_nothing() {
    let broker = Broker::start().await;
    let c = broker.client();
    let token = c
        .acquire("k", "alice", 30_000, 0)
        .await
        .unwrap()
        .ok::<Lease>()
        .token;
    let before = status(&c, "k").await;

    for (owner, tok) in [("alice", token + 1), ("alice", token - 1), ("bob", token)] {
        let r = c.release("k", owner, tok).await.unwrap();
        assert_eq!(r.status, 409, "release {owner} {tok}");
        assert_eq!(r.code(), Some(ErrorCode::LeaseLost));
        let r = c.renew("k", owner, tok, 60_000).await.unwrap();
        assert_eq!(r.status, 409, "renew {owner} {tok}");
        assert_eq!(r.code(), Some(ErrorCode::LeaseLost));
    }
    assert_eq!(status(&c, "k").await, before, "nothing changed");
    // Never held at all.
    let r = c.release("never", "alice", 1).await.unwrap();
    assert_eq!((r.status, r.code()), (409, Some(ErrorCode::LeaseLost)));
    broker.stop().await;
}

#[tokio::test]
async fn renew_extends_the_lease() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant: Lease = c.acquire("r", "w", 300, 0).await.unwrap().ok();
    let token = grant.token;
    // The same TTL, taken later and never renewed: once it has run out, so
    // has the first TTL of "r".
    let control: Lease = c.acquire("r-control", "w", 300, 0).await.unwrap().ok();
    assert!(control.expires_at >= grant.expires_at);
    let reply = c.renew("r", "w", token, 5_000).await.unwrap();
    assert_eq!(reply.status, 200);
    let renewed: Lease = reply.ok();
    assert_eq!(renewed.token, token);
    assert_eq!(renewed.ttl_ms, 5_000);
    assert_eq!(renewed.hold_count, 1);
    assert_eq!(renewed.storage_key, "r");
    eventually("the unrenewed control lease runs out", WAIT, || async {
        held(&c, "r-control").await == Some(false)
    })
    .await;
    // Past the first TTL, still held thanks to the renewal.
    assert!(status(&c, "r").await.held);
    assert_eq!(c.acquire("r", "x", 1000, 0).await.unwrap().status, 409);
    broker.stop().await;
}

#[tokio::test]
async fn expiry_then_regrant_with_a_greater_token() {
    let broker = Broker::start().await;
    let c = broker.client();
    let t1 = c
        .acquire("exp", "a", 150, 0)
        .await
        .unwrap()
        .ok::<Lease>()
        .token;
    assert_eq!(c.acquire("exp", "b", 1000, 0).await.unwrap().status, 409);
    eventually("a's 150 ms lease runs out", WAIT, || async {
        held(&c, "exp").await == Some(false)
    })
    .await;

    // Renew after expiry is lease_lost even though nobody took the lock.
    let late = c.renew("exp", "a", t1, 1000).await.unwrap();
    assert_eq!(
        (late.status, late.code()),
        (409, Some(ErrorCode::LeaseLost))
    );

    let second = c.acquire("exp", "b", 1000, 0).await.unwrap();
    assert_eq!(second.status, 200);
    let t2 = second.ok::<Lease>().token;
    assert!(t2 > t1);
    // The old holder can no longer release it.
    let stale = c.release("exp", "a", t1).await.unwrap();
    assert_eq!(
        (stale.status, stale.code()),
        (409, Some(ErrorCode::LeaseLost))
    );
    assert_eq!(status(&c, "exp").await.owner.as_deref(), Some("b"));

    // The same owner re-acquiring after its own lease expired gets a new
    // token, not a re-entry.
    eventually("b's 1 s lease runs out", WAIT, || async {
        held(&c, "exp").await == Some(false)
    })
    .await;
    let third: Lease = c.acquire("exp", "b", 1000, 0).await.unwrap().ok();
    assert_eq!(third.hold_count, 1);
    assert!(third.token > t2);
    broker.stop().await;
}

#[tokio::test]
async fn expiry_is_judged_by_the_database_clock() {
    let broker = Broker::start().await;
    let c = broker.client();
    let token = c
        .acquire("clock", "a", 60_000, 0)
        .await
        .unwrap()
        .ok::<Lease>()
        .token;
    // Move the lease's end into the past on the database: no broker clock
    // is consulted, so the lock is free at once.
    let mut db = db_conn(&broker.db).await;
    sqlx::query("UPDATE locks SET expires_at = NOW(6) - INTERVAL 1 SECOND")
        .execute(&mut db)
        .await
        .unwrap();
    assert!(!status(&c, "clock").await.held);
    let r = c.renew("clock", "a", token, 1000).await.unwrap();
    assert_eq!(r.code(), Some(ErrorCode::LeaseLost));
    let b: Lease = c.acquire("clock", "b", 1000, 0).await.unwrap().ok();
    assert_eq!(b.token, token + 1);
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
        assert_eq!(r.status, 200, "{key:?} is its own lock: {r:?}");
        let lease: Lease = r.ok();
        assert_eq!(lease.key, *key);
        assert_eq!(lease.storage_key, *key);
        tokens.push(lease.token);
    }
    for (i, key) in keys.iter().enumerate() {
        let s = status(&c, key).await;
        assert_eq!(s.owner, Some(format!("owner-{i}")), "{key:?}");
        assert_eq!(s.key, *key);
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
    let grant: Lease = a.acquire("shared-name", "w", 30_000, 0).await.unwrap().ok();
    let token = grant.token;

    // Tenant b, with a's key name, owner and token, reaches nothing of a's.
    assert!(!status(&b, "shared-name").await.held);
    let r = b.release("shared-name", "w", token).await.unwrap();
    assert_eq!(r.code(), Some(ErrorCode::LeaseLost));
    let r = b.renew("shared-name", "w", token, 60_000).await.unwrap();
    assert_eq!(r.code(), Some(ErrorCode::LeaseLost));
    let a_status = status(&a, "shared-name").await;
    assert!(a_status.held);
    assert_eq!(a_status.expires_at, Some(grant.expires_at));

    // Its own lock of that name is free and has its own tokens.
    let rb = b.acquire("shared-name", "w2", 30_000, 0).await.unwrap();
    assert_eq!(rb.status, 200);
    assert_eq!(rb.ok::<Lease>().token, 1);
    assert_eq!(status(&a, "shared-name").await.owner.as_deref(), Some("w"));
    assert_eq!(
        a.release("shared-name", "w", token).await.unwrap().status,
        200
    );
    assert_eq!(status(&b, "shared-name").await.owner.as_deref(), Some("w2"));
    broker.stop().await;
}

#[tokio::test]
async fn waiting_acquire_gets_the_lock_when_released() {
    let broker = Broker::start().await;
    let c = broker.client();
    let token = c
        .acquire("w", "first", 30_000, 0)
        .await
        .unwrap()
        .ok::<Lease>()
        .token;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("w", "second", 30_000, 10_000).await.unwrap() })
    };
    eventually("the second acquire waits in the queue", WAIT, || async {
        waiters(&c, "w").await == Some(1)
    })
    .await;
    c.release("w", "first", token).await.unwrap();
    let got = waiter.await.unwrap();
    assert_eq!(got.status, 200);
    let got: Lease = got.ok();
    assert_eq!(got.owner, "second");
    assert_eq!(got.token, token + 1);

    // A wait that runs out answers 409 after about wait_ms.
    let started = std::time::Instant::now();
    let timed_out = c.acquire("w", "third", 30_000, 300).await.unwrap();
    let took = started.elapsed();
    assert_eq!(timed_out.code(), Some(ErrorCode::LockHeld));
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
    assert_eq!(got.ok::<Lease>().owner, "second");
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
        waiters(&c, "mw").await == Some(1)
    })
    .await;
    let over = c.acquire("mw", "w2", 30_000, 1_000).await.unwrap();
    assert_eq!(
        (over.status, over.code()),
        (429, Some(ErrorCode::TooManyWaiters))
    );
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
                assert_eq!(r.ok::<Lease>().token, 1);
            }
            409 => assert_eq!(r.code(), Some(ErrorCode::LockHeld)),
            _ => panic!("unexpected {r:?}"),
        }
    }
    assert_eq!(winners, 1);
    broker.stop().await;
}
