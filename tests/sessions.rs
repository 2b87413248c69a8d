//! Sessions (issue #30, step 1: locks held in sessions), against a real
//! broker and MariaDB: the sessions resource, locks acquired, re-entered
//! and released in a session, a session's end (closed, or expired by the
//! database clock) releasing every lease of it and handing each key on,
//! tenants, validation, and two brokers on one database.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    EndReason, ErrorCode, Lease, LockEventKind, LockStatus, Page, ReleaseResponse, Session,
    SessionClosed, SessionKeepalive, SessionStatus,
};
use lockbroker_tests::{
    config, db_conn, eventually, Broker, Client, Reply, SseStream, KEY, OTHER_KEY,
};
use serde_json::json;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);

async fn open(c: &Client, body: serde_json::Value) -> Session {
    c.open_session(&body).await
}

async fn keepalive(c: &Client, id: &str) -> Reply {
    c.post(&format!("/v1/sessions/{id}/keepalive"), &json!({}))
        .await
        .unwrap()
}

async fn close(c: &Client, id: &str) -> Reply {
    c.close_session(id).await
}

async fn get(c: &Client, id: &str) -> Reply {
    c.get(&format!("/v1/sessions/{id}")).await.unwrap()
}

/// `POST /v1/locks/{key}/acquire` with a JSON body.
async fn acquire(c: &Client, key: &str, body: serde_json::Value) -> Reply {
    c.post(&format!("/v1/locks/{key}/acquire"), &body)
        .await
        .unwrap()
}

fn assert_code(reply: &Reply, status: u16, code: ErrorCode) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.code(), Some(code), "{reply:?}");
}

async fn status(c: &Client, key: &str) -> LockStatus {
    c.status(key).await.unwrap().ok()
}

async fn waiters(c: &Client, key: &str) -> u64 {
    match c.status(key).await {
        Ok(reply) => reply.try_parse::<LockStatus>().map_or(0, |s| s.waiters),
        Err(_) => 0,
    }
}

#[tokio::test]
async fn a_session_is_opened_kept_alive_shown_listed_and_closed() {
    let broker = Broker::start().await;
    let c = broker.client();

    let s = open(
        &c,
        json!({"ttl_ms": 5000, "name": "job-a", "lock_delay_ms": 250}),
    )
    .await;
    assert_eq!(s.id.len(), 32, "{s:?}");
    assert!(s.id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        (s.name.as_deref(), s.ttl_ms, s.lock_delay_ms),
        (Some("job-a"), 5000, 250)
    );
    assert!(s.expires_at > s.created_at, "{s:?}");
    let plain = open(&c, json!({})).await;
    assert_eq!(
        (plain.name, plain.ttl_ms, plain.lock_delay_ms),
        (None, 15_000, 0)
    );
    assert_ne!(plain.id, s.id);

    let reply = keepalive(&c, &s.id).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let kept: SessionKeepalive = reply.parse();
    assert_eq!(kept.id, s.id);
    assert!(kept.expires_at >= s.expires_at);

    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert_eq!(shown.session.id, s.id);
    assert_eq!(shown.session.expires_at, kept.expires_at);
    assert!(shown.leases.is_empty());

    let page: Page<Session> = c.get("/v1/sessions?prefix=job").await.unwrap().ok();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].id, s.id);
    assert_eq!(page.next, None);
    let all: Page<Session> = c.get("/v1/sessions").await.unwrap().ok();
    assert_eq!(all.items.len(), 2);
    // Paged one at a time: the unnamed first, then `job-a`.
    let first: Page<Session> = c.get("/v1/sessions?limit=1").await.unwrap().ok();
    assert_eq!(first.items[0].id, plain.id);
    let cursor = first.next.expect("a next page");
    let second: Page<Session> = c
        .get(&format!("/v1/sessions?limit=1&cursor={cursor}"))
        .await
        .unwrap()
        .ok();
    assert_eq!(second.items[0].id, s.id);
    let last: Page<Session> = c
        .get(&format!(
            "/v1/sessions?limit=1&cursor={}",
            second.next.unwrap()
        ))
        .await
        .unwrap()
        .ok();
    assert!(last.items.is_empty() && last.next.is_none());

    let reply = close(&c, &s.id).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let closed: SessionClosed = reply.parse();
    assert_eq!((closed.closed, closed.released), (true, 0));
    assert_code(&keepalive(&c, &s.id).await, 404, ErrorCode::SessionNotFound);
    assert_code(&get(&c, &s.id).await, 404, ErrorCode::SessionNotFound);
    assert_code(&close(&c, &s.id).await, 404, ErrorCode::SessionNotFound);
    assert_code(
        &keepalive(&c, "no-such-session").await,
        404,
        ErrorCode::SessionNotFound,
    );
    let page: Page<Session> = c.get("/v1/sessions?prefix=job").await.unwrap().ok();
    assert!(page.items.is_empty());
    broker.stop().await;
}

#[tokio::test]
async fn a_lock_held_in_a_session_is_reentered_and_released() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 20_000})).await;

    let reply = acquire(&c, "job-1", json!({"session": s.id})).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let grant: Lease = reply.parse();
    // The owner defaults to the session id; the lease is the session's.
    assert_eq!(grant.owner, s.id);
    assert_eq!((grant.hold_count, grant.ttl_ms), (1, 20_000));
    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert_eq!(grant.expires_at, shown.session.expires_at);
    assert_eq!(shown.leases.len(), 1);
    assert_eq!(
        (
            shown.leases[0].kind.as_str(),
            shown.leases[0].key.as_str(),
            shown.leases[0].token
        ),
        ("lock", "job-1", grant.token)
    );

    // Re-entry by the same owner in the same session.
    let again: Lease = acquire(&c, "job-1", json!({"session": s.id})).await.ok();
    assert_eq!((again.token, again.hold_count), (grant.token, 2));
    // Another owner is refused, in the session or not; so is the same
    // owner outside the session.
    let other = acquire(&c, "job-1", json!({"owner": "w2", "session": s.id})).await;
    assert_code(&other, 409, ErrorCode::LockHeld);
    let plain = acquire(&c, "job-1", json!({"owner": "w3"})).await;
    assert_code(&plain, 409, ErrorCode::LockHeld);
    let outside = acquire(&c, "job-1", json!({"owner": s.id})).await;
    assert_code(&outside, 409, ErrorCode::LockHeld);
    // A lease in a session is not renewed: the session is kept alive.
    let renew = c.renew("job-1", &s.id, grant.token, 30_000).await.unwrap();
    assert_code(&renew, 400, ErrorCode::BadRequest);
    assert!(renew.message().contains("keepalive"), "{renew:?}");

    let held = status(&c, "job-1").await;
    assert_eq!(
        (held.held, held.owner.as_deref(), held.hold_count),
        (true, Some(s.id.as_str()), Some(2))
    );
    let one: ReleaseResponse = c.release("job-1", &s.id, grant.token).await.unwrap().ok();
    assert_eq!((one.released, one.hold_count), (false, 1));
    // Still the session's (however the release was carried out: a batch
    // keeps the row's session when it writes one hold less).
    let held = status(&c, "job-1").await;
    assert_eq!(
        (held.hold_count, held.session.as_deref()),
        (Some(1), Some(s.id.as_str()))
    );
    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert_eq!(shown.leases.len(), 1);
    let last: ReleaseResponse = c.release("job-1", &s.id, grant.token).await.unwrap().ok();
    assert_eq!((last.released, last.hold_count), (true, 0));
    assert!(!status(&c, "job-1").await.held);
    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert!(shown.leases.is_empty());

    // A plain lease of the key afterwards is plain again: it renews.
    let plain: Lease = c.acquire("job-1", "w3", 30_000, 0).await.unwrap().ok();
    assert!(plain.token > grant.token);
    let renewed = c.renew("job-1", "w3", plain.token, 30_000).await.unwrap();
    assert_eq!(renewed.status, 200, "{renewed:?}");
    // The session's close does not touch it.
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 0);
    assert!(status(&c, "job-1").await.held);
    broker.stop().await;
}

#[tokio::test]
async fn bad_requests_and_unknown_sessions() {
    let broker = Broker::start().await;
    let c = broker.client();
    for body in [
        json!({"ttl_ms": 999}),
        json!({"ttl_ms": 3_600_001}),
        json!({"lock_delay_ms": 60_001}),
        json!({"ttl_ms": "soon"}),
        json!({"name": "n".repeat(513)}),
        json!([null, null]),
    ] {
        let reply = c.post("/v1/sessions", &body).await.unwrap();
        assert_code(&reply, 400, ErrorCode::BadRequest);
    }
    let reply = c
        .send(
            Method::POST,
            "/v1/sessions",
            &[],
            Bytes::from("{"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_code(&reply, 400, ErrorCode::BadRequest);
    for query in [
        "limit=0",
        "limit=1001",
        "cursor=zz",
        "cursor=00.",
        "other=1",
    ] {
        let reply = c.get(&format!("/v1/sessions?{query}")).await.unwrap();
        assert_code(&reply, 400, ErrorCode::BadRequest);
    }
    let reply = c
        .send(
            Method::PUT,
            "/v1/sessions",
            &[],
            Bytes::new(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_code(&reply, 405, ErrorCode::MethodNotAllowed);
    let reply = c.post("/v1/sessions/x/other", &json!({})).await.unwrap();
    assert_code(&reply, 404, ErrorCode::NotFound);
    let anonymous = broker.client_with(None);
    let reply = anonymous.post("/v1/sessions", &json!({})).await.unwrap();
    assert_code(&reply, 401, ErrorCode::Unauthenticated);

    let s = open(&c, json!({})).await;
    // ttl_ms with a session: 400.
    let reply = acquire(&c, "k", json!({"session": s.id, "ttl_ms": 1000})).await;
    assert_code(&reply, 400, ErrorCode::BadRequest);
    // No owner, no session: 400 as before.
    let reply = acquire(&c, "k", json!({"ttl_ms": 1000})).await;
    assert_code(&reply, 400, ErrorCode::BadRequest);
    // ttl_ms with a session is refused for every kind.
    for (path, body) in [
        (
            "/v1/semaphores/pool/acquire",
            json!({"owner": "w", "permits": 2, "session": s.id, "ttl_ms": 1000}),
        ),
        (
            "/v1/rwlocks/r/acquire",
            json!({"owner": "w", "mode": "read", "session": s.id, "ttl_ms": 1000}),
        ),
        (
            "/v1/multilock/acquire",
            json!({"owner": "w", "keys": ["a", "b"], "session": s.id, "ttl_ms": 1000}),
        ),
    ] {
        let reply = c.post(path, &body).await.unwrap();
        assert_code(&reply, 400, ErrorCode::BadRequest);
        assert!(reply.message().contains("exclude each other"), "{reply:?}");
    }
    // An unknown session: 404, nothing granted.
    let reply = acquire(
        &c,
        "k",
        json!({"session": "0123456789abcdef0123456789abcdef"}),
    )
    .await;
    assert_code(&reply, 404, ErrorCode::SessionNotFound);
    let reply = acquire(&c, "k", json!({"session": "x".repeat(100), "owner": "w"})).await;
    assert_code(&reply, 404, ErrorCode::SessionNotFound);
    assert!(!status(&c, "k").await.held);
    broker.stop().await;
}

#[tokio::test]
async fn another_tenant_never_sees_a_session() {
    let broker = Broker::start().await;
    let c = broker.client();
    let other = broker.client_with(Some(OTHER_KEY));
    let s = open(&c, json!({"name": "mine"})).await;
    assert_code(
        &keepalive(&other, &s.id).await,
        404,
        ErrorCode::SessionNotFound,
    );
    assert_code(&get(&other, &s.id).await, 404, ErrorCode::SessionNotFound);
    assert_code(&close(&other, &s.id).await, 404, ErrorCode::SessionNotFound);
    let reply = acquire(&other, "k", json!({"session": s.id})).await;
    assert_code(&reply, 404, ErrorCode::SessionNotFound);
    let page: Page<Session> = other.get("/v1/sessions").await.unwrap().ok();
    assert!(page.items.is_empty());
    // Still the owner's.
    assert_eq!(keepalive(&c, &s.id).await.status, 200);
    broker.stop().await;
}

#[tokio::test]
async fn a_close_releases_every_lease_and_hands_a_key_to_its_waiter() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000, "lock_delay_ms": 5000})).await;
    let mut tokens = Vec::new();
    for key in ["a", "b", "c"] {
        let grant: Lease = acquire(&c, key, json!({"session": s.id})).await.ok();
        tokens.push(grant.token);
    }
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("b", "waiter", 30_000, 10_000).await.unwrap() })
    };
    eventually("the waiter queues", WAIT, || async {
        waiters(&c, "b").await == 1
    })
    .await;

    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!((closed.closed, closed.released), (true, 3));
    let handed: Lease = waiter.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        ("waiter", tokens[1] + 1)
    );
    // A close does not delay: the others are free at once.
    for key in ["a", "c"] {
        assert!(!status(&c, key).await.held);
        let grant = c.acquire(key, "next", 30_000, 0).await.unwrap();
        assert_eq!(grant.status, 200, "{grant:?}");
    }
    let (events, _) = c.history("locks", "a").await;
    assert!(
        events.contains(&(LockEventKind::Released, s.id.clone(), tokens[0])),
        "{events:?}"
    );
    // Ended: no new lease in it.
    let reply = acquire(&c, "d", json!({"session": s.id})).await;
    assert_code(&reply, 404, ErrorCode::SessionNotFound);
    assert!(!status(&c, "d").await.held);
    broker.stop().await;
}

#[tokio::test]
async fn an_expired_session_ends_within_its_ttl_and_a_second_and_hands_keys_on() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 1000})).await;
    let grant: Lease = acquire(&c, "exp", json!({"session": s.id})).await.ok();
    let other: Lease = acquire(&c, "exp-2", json!({"session": s.id})).await.ok();
    let acquired = Instant::now();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            let reply = c.acquire("exp", "waiter", 30_000, 10_000).await.unwrap();
            (reply, Instant::now())
        })
    };
    let (reply, at) = waiter.await.unwrap();
    let handed: Lease = reply.ok();
    assert_eq!(handed.token, grant.token + 1);
    // Its TTL (from before the acquire) and a second at most.
    let took = at - acquired;
    assert!(took < Duration::from_millis(2000), "{took:?}");
    assert!(took >= Duration::from_millis(800), "{took:?}");
    assert_code(&keepalive(&c, &s.id).await, 404, ErrorCode::SessionNotFound);
    let reply = acquire(&c, "exp-3", json!({"session": s.id})).await;
    assert_code(&reply, 404, ErrorCode::SessionNotFound);
    eventually("the other key is free", WAIT, || async {
        !status(&c, "exp-2").await.held
    })
    .await;
    let (events, _) = c.history("locks", "exp-2").await;
    assert_eq!(
        events.first(),
        Some(&(LockEventKind::Expired, s.id.clone(), other.token)),
        "{events:?}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn an_expiry_delays_the_keys_by_the_sessions_lock_delay() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 1000, "lock_delay_ms": 3000})).await;
    let _grant: Lease = acquire(&c, "slow", json!({"session": s.id})).await.ok();
    eventually("the session expires", WAIT, || async {
        get(&c, &s.id).await.status == 404
    })
    .await;
    eventually("the lease ends", WAIT, || async {
        !status(&c, "slow").await.held
    })
    .await;
    // Free, but not granted again before the lock-delay ends.
    let reply = c.acquire("slow", "next", 30_000, 0).await.unwrap();
    assert_code(&reply, 409, ErrorCode::LockHeld);
    let hint = reply.error().unwrap().retry_after_ms.unwrap();
    assert!(hint > 500 && hint <= 3000, "{hint}");
    // A waiter is handed it when the delay ends.
    let reply = c.acquire("slow", "next", 30_000, 10_000).await.unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    broker.stop().await;
}

#[tokio::test]
async fn a_waiting_acquire_in_a_session_is_handed_a_session_lease() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000})).await;
    let plain: Lease = c.acquire("w", "holder", 30_000, 0).await.unwrap().ok();
    let waiting = {
        let (c, id) = (c.clone(), s.id.clone());
        tokio::spawn(
            async move { acquire(&c, "w", json!({"session": id, "wait_ms": 10_000})).await },
        )
    };
    eventually("the session's acquire queues", WAIT, || async {
        waiters(&c, "w").await == 1
    })
    .await;
    c.release("w", "holder", plain.token)
        .await
        .unwrap()
        .ok::<ReleaseResponse>();
    let handed: Lease = waiting.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        (s.id.as_str(), plain.token + 1)
    );
    assert_eq!(handed.ttl_ms, 30_000);
    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert_eq!(shown.leases.len(), 1);
    assert_eq!(handed.expires_at, shown.session.expires_at);
    let renew = c.renew("w", &s.id, handed.token, 30_000).await.unwrap();
    assert_code(&renew, 400, ErrorCode::BadRequest);
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 1);
    assert!(!status(&c, "w").await.held);
    broker.stop().await;
}

#[tokio::test]
async fn a_handoff_passes_over_a_waiter_whose_session_ended() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000})).await;
    let plain: Lease = c.acquire("h", "holder", 30_000, 0).await.unwrap().ok();
    let in_session = {
        let (c, id) = (c.clone(), s.id.clone());
        tokio::spawn(
            async move { acquire(&c, "h", json!({"session": id, "wait_ms": 60_000})).await },
        )
    };
    eventually("the session's acquire queues", WAIT, || async {
        waiters(&c, "h").await == 1
    })
    .await;
    let after = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("h", "after", 30_000, 10_000).await.unwrap() })
    };
    eventually("both queue", WAIT, || async { waiters(&c, "h").await == 2 }).await;
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 0);
    // The close took its waiter out of the queue, and its request is
    // answered at once (not when its minute of waiting runs out): the
    // session ended, nothing granted.
    eventually("one waiter left", WAIT, || async {
        waiters(&c, "h").await == 1
    })
    .await;
    let reply = tokio::time::timeout(WAIT, in_session)
        .await
        .expect("answered before its wait ran out")
        .unwrap();
    assert_code(&reply, 404, ErrorCode::SessionNotFound);
    c.release("h", "holder", plain.token)
        .await
        .unwrap()
        .ok::<ReleaseResponse>();
    let handed: Lease = after.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        ("after", plain.token + 1)
    );
    broker.stop().await;
}

#[tokio::test]
async fn two_brokers_serve_one_session_and_end_it_once() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());

    // Opened on one, kept alive and used on the other, closed on the first.
    let s = open(&c1, json!({"ttl_ms": 20_000})).await;
    assert_eq!(keepalive(&c2, &s.id).await.status, 200);
    let grant: Lease = acquire(&c2, "x", json!({"session": s.id})).await.ok();
    assert_eq!(grant.owner, s.id);
    let waiter = {
        let c1 = c1.clone();
        tokio::spawn(async move { c1.acquire("x", "waiter", 30_000, 10_000).await.unwrap() })
    };
    eventually("the waiter queues", WAIT, || async {
        waiters(&c2, "x").await >= 1
    })
    .await;
    let closed: SessionClosed = close(&c1, &s.id).await.ok();
    assert_eq!(closed.released, 1);
    let handed: Lease = waiter.await.unwrap().ok();
    assert_eq!(handed.token, grant.token + 1);
    assert_code(&close(&c2, &s.id).await, 404, ErrorCode::SessionNotFound);

    // Expiry: found by whichever reaper first, ended once.
    let mut sessions = Vec::new();
    for i in 0..4 {
        let s = open(&c2, json!({"ttl_ms": 1000})).await;
        let key = format!("y{i}");
        let grant: Lease = acquire(&c1, &key, json!({"session": s.id})).await.ok();
        sessions.push((s, key, grant.token));
    }
    for (s, key, token) in &sessions {
        eventually("the session ends", WAIT, || async {
            get(&c1, &s.id).await.status == 404 && !status(&c2, key).await.held
        })
        .await;
        let (events, _) = c1.history("locks", key).await;
        let ended = events
            .iter()
            .filter(|(kind, _, t)| *kind != LockEventKind::Granted && t == token)
            .count();
        assert_eq!(ended, 1, "{events:?}");
    }
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn one_close_releases_a_thousand_leases() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 600_000})).await;
    let mut tasks = tokio::task::JoinSet::new();
    let per_task = 1000 / 16 + 1;
    for t in 0..16 {
        let (c, id) = (c.clone(), s.id.clone());
        tasks.spawn(async move {
            for i in (t * per_task)..((t + 1) * per_task).min(1000) {
                let reply = acquire(&c, &format!("k{i:04}"), json!({"session": id})).await;
                assert_eq!(reply.status, 200, "{reply:?}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert_eq!(shown.leases.len(), 1000);
    let started = Instant::now();
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    let took = started.elapsed();
    eprintln!("one close released {} leases in {took:?}", closed.released);
    assert_eq!(closed.released, 1000);
    assert!(took < Duration::from_secs(5), "{took:?}");
    for key in ["k0000", "k0500", "k0999"] {
        assert!(!status(&c, key).await.held);
    }
    broker.stop().await;
}

#[tokio::test]
async fn an_end_left_unfinished_is_carried_out_by_a_reaper() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 60_000})).await;
    let grant: Lease = acquire(&c, "left", json!({"session": s.id})).await.ok();
    // As a broker that marked the session ended and died before its pass
    // (40 s ago): the lease is still held in it.
    let mut db = db_conn(&broker.db).await;
    sqlx::query(
        "UPDATE sessions SET ending = 1, expires_at = NOW(6) - INTERVAL 40 SECOND WHERE id = ?",
    )
    .bind(&s.id)
    .execute(&mut db)
    .await
    .unwrap();
    assert!(status(&c, "left").await.held);
    assert_code(&keepalive(&c, &s.id).await, 404, ErrorCode::SessionNotFound);
    eventually("a reaper finishes the end", WAIT, || async {
        !status(&c, "left").await.held
    })
    .await;
    eventually("the session's row is gone", WAIT, || async {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM sessions")
            .fetch_one(&mut db_conn(&broker.db).await)
            .await
            .unwrap();
        n == 0
    })
    .await;
    let (events, _) = c.history("locks", "left").await;
    assert_eq!(
        events.first(),
        Some(&(LockEventKind::Released, s.id.clone(), grant.token)),
        "{events:?}"
    );
    broker.stop().await;
}

/// The next event of `s`: its name and data.
async fn next_event(s: &mut SseStream) -> (String, serde_json::Value) {
    let event = s.next(WAIT).await;
    let data = event.json();
    (event.event, data)
}

/// A session's leases' events name it, the events of those its end
/// released say why, one `session_ended` event follows (on every stream
/// of the tenant, whatever its prefix), and the metrics count it.
#[tokio::test]
async fn a_sessions_end_is_named_in_history_events_and_metrics() {
    let broker = Broker::start().await;
    let c = broker.client();
    let mut events = SseStream::open(broker.url(), "/v1/events?prefix=se-", KEY, &[]).await;
    assert_eq!(events.status, 200);

    let s = open(&c, json!({"ttl_ms": 30_000, "name": "job"})).await;
    let a: Lease = acquire(&c, "se-a", json!({"session": s.id})).await.ok();
    let b: Lease = acquire(&c, "se-b", json!({"session": s.id})).await.ok();
    // Status and listing name the session, with its expiry.
    let held = status(&c, "se-a").await;
    assert_eq!(
        (held.session.as_deref(), held.expires_at.as_deref()),
        (Some(s.id.as_str()), Some(s.expires_at.as_str()))
    );
    let listed: Page<LockStatus> = c.get("/v1/locks?prefix=se-").await.unwrap().ok();
    let sessions: Vec<_> = listed.items.iter().map(|i| i.session.as_deref()).collect();
    assert_eq!(sessions, [Some(s.id.as_str()), Some(s.id.as_str())]);
    let released: ReleaseResponse = c.release("se-b", &s.id, b.token).await.unwrap().ok();
    assert!(released.released);
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 1);

    // History: every event of a session lease names the session; the one
    // its close made says so.
    let (_, history) = c.history("locks", "se-b").await;
    let named: Vec<_> = history
        .events
        .iter()
        .map(|e| (e.event, e.session.as_deref(), e.reason))
        .collect();
    assert_eq!(
        named,
        [
            (LockEventKind::Released, Some(s.id.as_str()), None),
            (LockEventKind::Granted, Some(s.id.as_str()), None),
        ]
    );
    let (_, history) = c.history("locks", "se-a").await;
    let last = &history.events[0];
    assert_eq!(
        (last.event, last.token, last.session.as_deref(), last.reason),
        (
            LockEventKind::Released,
            a.token,
            Some(s.id.as_str()),
            Some(EndReason::SessionClosed)
        )
    );
    // A plain lease names none.
    let plain = c.acquire("se-c", "plain", 30_000, 0).await.unwrap();
    assert_eq!(plain.status, 200);
    let (_, history) = c.history("locks", "se-c").await;
    assert_eq!(
        (
            history.events[0].session.as_deref(),
            history.events[0].reason
        ),
        (None, None)
    );
    assert_eq!(status(&c, "se-c").await.session, None);

    // The stream: the four changes, then the session's end.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let (name, data) = next_event(&mut events).await;
        seen.push((
            name,
            data["kind"].as_str().unwrap_or_default().to_owned(),
            data["storage_key"].as_str().unwrap_or_default().to_owned(),
            data["session"].clone(),
            data["reason"].clone(),
        ));
    }
    let id = json!(s.id);
    let row = |name: &str, kind: &str, key: &str, reason: serde_json::Value| {
        (
            name.to_owned(),
            kind.to_owned(),
            key.to_owned(),
            id.clone(),
            reason,
        )
    };
    assert_eq!(
        seen,
        [
            row("granted", "lock", "se-a", json!(null)),
            row("granted", "lock", "se-b", json!(null)),
            row("released", "lock", "se-b", json!(null)),
            row("released", "lock", "se-a", json!("session_closed")),
            row("session_ended", "session", &s.id, json!("session_closed")),
        ]
    );

    // An expiry: `session_expired`, on the key and on the stream.
    let e = open(&c, json!({"ttl_ms": 1000})).await;
    let lease: Lease = acquire(&c, "se-d", json!({"session": e.id})).await.ok();
    let mut ended = None;
    // (se-c's grant, se-d's grant and expiry come first.)
    for _ in 0..4 {
        let (name, data) = next_event(&mut events).await;
        if name == "session_ended" {
            ended = Some(data);
            break;
        }
    }
    let ended = ended.expect("a session_ended event for the expired session");
    assert_eq!(
        (&ended["storage_key"], &ended["session"], &ended["reason"]),
        (&json!(e.id), &json!(e.id), &json!("session_expired"))
    );
    let (_, history) = c.history("locks", "se-d").await;
    let last = &history.events[0];
    assert_eq!(
        (last.event, last.token, last.reason),
        (
            LockEventKind::Expired,
            lease.token,
            Some(EndReason::SessionExpired)
        )
    );

    // Metrics: each end counted once, by reason; the gauge follows the
    // live sessions (read from the database about once a second).
    let closed_total = "lockbroker_sessions_ended_total{tenant=\"default\",reason=\"closed\"}";
    let expired_total = "lockbroker_sessions_ended_total{tenant=\"default\",reason=\"expired\"}";
    assert_eq!(c.counter(closed_total).await, 1);
    assert_eq!(c.counter(expired_total).await, 1);
    let live = "lockbroker_sessions{tenant=\"default\"}";
    for _ in 0..3 {
        open(&c, json!({"ttl_ms": 30_000})).await;
    }
    eventually("the gauge shows three live sessions", WAIT, || async {
        c.counter(live).await == 3
    })
    .await;
    broker.stop().await;
}

/// A tenant's `max_sessions`: one more is refused with 429
/// `quota_exceeded`, nothing opened; a close makes room.
#[tokio::test]
async fn max_sessions_refuses_one_more() {
    let db = lockbroker_tests::fresh_db_name();
    let mut cfg = config(&db);
    cfg.tenants[0].max_sessions = 2;
    let broker = Broker::start_with(db, cfg).await;
    let c = broker.client();
    let first = open(&c, json!({"ttl_ms": 30_000})).await;
    open(&c, json!({"ttl_ms": 30_000})).await;
    let reply = c
        .post("/v1/sessions", &json!({"ttl_ms": 30_000}))
        .await
        .unwrap();
    assert_code(&reply, 429, ErrorCode::QuotaExceeded);
    assert!(reply.text().contains("max_sessions"), "{reply:?}");
    let listed: Page<Session> = c.get("/v1/sessions").await.unwrap().ok();
    assert_eq!(listed.items.len(), 2, "nothing opened");
    // Another tenant has its own count.
    let other = Client::new(broker.url(), Some(OTHER_KEY)).unwrap();
    open(&other, json!({"ttl_ms": 30_000})).await;
    close(&c, &first.id).await.ok::<SessionClosed>();
    open(&c, json!({"ttl_ms": 30_000})).await;
    broker.stop().await;
}

/// An election's leadership held in a session: the campaign's answer
/// carries the session's expiry, the leadership is not renewed on its own,
/// and the session's close hands it to the waiting candidate (the next
/// term).
#[tokio::test]
async fn a_leadership_held_in_a_session_passes_on_when_it_closes() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000})).await;
    let lead = c
        .post(
            "/v1/elections/sess-elect/campaign",
            &json!({"candidate": "alpha", "session": s.id}),
        )
        .await
        .unwrap();
    assert_eq!(lead.status, 200, "{lead:?}");
    let lead = lead.json();
    assert_eq!(lead["leader"], "alpha");
    assert_eq!(lead["expires_at"].as_str(), Some(s.expires_at.as_str()));
    let term = lead["term"].as_u64().unwrap();
    let renew = c
        .post(
            "/v1/elections/sess-elect/renew",
            &json!({"candidate": "alpha", "term": term, "ttl_ms": 5000}),
        )
        .await
        .unwrap();
    assert_code(&renew, 400, ErrorCode::BadRequest);
    let shown: SessionStatus = get(&c, &s.id).await.ok();
    assert_eq!(shown.leases.len(), 1, "{shown:?}");
    assert_eq!(shown.leases[0].kind, "election");

    let next = {
        let c = c.clone();
        tokio::spawn(async move {
            c.post(
                "/v1/elections/sess-elect/campaign",
                &json!({"candidate": "beta", "ttl_ms": 30_000, "wait_ms": 10_000}),
            )
            .await
            .unwrap()
        })
    };
    eventually("beta waits", WAIT, || async {
        use sqlx::Row;
        let mut conn = db_conn(&broker.db).await;
        let n: i64 = sqlx::query("SELECT COUNT(*) FROM waiters WHERE granted_token IS NULL")
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .get(0);
        n == 1
    })
    .await;
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 1);
    let next = next.await.unwrap();
    assert_eq!(next.status, 200, "{next:?}");
    let next = next.json();
    assert_eq!(
        (next["leader"].as_str(), next["term"].as_u64()),
        (Some("beta"), Some(term + 1))
    );
    broker.stop().await;
}

/// The admin force-closes a tenant's session: its leases released (the
/// waiter handed its key), the client's next keepalive `404`; a tenant
/// key may not, an unknown session or tenant is `404`.
#[tokio::test]
async fn the_admin_force_closes_a_session() {
    let broker = Broker::start().await;
    let c = broker.client();
    let admin = broker.client_with(Some(lockbroker_tests::ADMIN));
    let s = open(&c, json!({"ttl_ms": 30_000})).await;
    let grant: Lease = acquire(&c, "forced", json!({"session": s.id})).await.ok();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("forced", "next", 30_000, 10_000).await.unwrap() })
    };
    eventually("the waiter queues", WAIT, || async {
        waiters(&c, "forced").await == 1
    })
    .await;
    let path = format!("/v1/admin/tenants/default/sessions/{}", s.id);
    let delete = |client: &Client, path: String| {
        let client = client.clone();
        async move {
            client
                .send(
                    Method::DELETE,
                    &path,
                    &[],
                    Bytes::new(),
                    Duration::from_secs(5),
                )
                .await
                .unwrap()
        }
    };
    // A tenant's key is not the admin token.
    assert_eq!(delete(&c, path.clone()).await.status, 403);
    let closed: SessionClosed = delete(&admin, path.clone()).await.ok();
    assert_eq!((closed.closed, closed.released), (true, 1));
    let handed: Lease = waiter.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        ("next", grant.token + 1)
    );
    assert_code(&keepalive(&c, &s.id).await, 404, ErrorCode::SessionNotFound);
    assert_code(&delete(&admin, path).await, 404, ErrorCode::SessionNotFound);
    let unknown = delete(
        &admin,
        format!("/v1/admin/tenants/nobody/sessions/{}", s.id),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert!(
        c.counter("lockbroker_admin_actions_total{action=\"force_close_session\",result=\"ok\"}")
            .await
            >= 1
    );
    broker.stop().await;
}
