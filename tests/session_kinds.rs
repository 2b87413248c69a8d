//! Every kind in a session (issue #30): semaphore permits, rwlock read and
//! write leases and multi-locks held in a session, against a real broker
//! and MariaDB. Each is granted with the session's expiry, shown in the
//! session and in its key's status, cannot be renewed on its own, is
//! released by its own release or by the session's end (closed or
//! expired), which hands each key to its waiters with history saying why,
//! and is refused once the session has ended. Locks and elections are in
//! `tests/sessions.rs`.

use std::time::{Duration, Instant};

use lockbroker_api::{
    EndReason, ErrorCode, LockEventKind, LockHistory, MultiLockLease, RwLease, RwLockStatus,
    SemaphoreLease, SemaphoreStatus, Session, SessionClosed, SessionStatus,
};
use lockbroker_tests::{config, eventually, Broker, Client, Reply};
use serde_json::json;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);

async fn open(c: &Client, body: serde_json::Value) -> Session {
    c.open_session(&body).await
}

async fn close(c: &Client, id: &str) -> Reply {
    c.close_session(id).await
}

async fn post(c: &Client, path: &str, body: serde_json::Value) -> Reply {
    c.post(path, &body).await.unwrap()
}

fn assert_code(reply: &Reply, status: u16, code: ErrorCode) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.code(), Some(code), "{reply:?}");
}

async fn semaphore(c: &Client, key: &str) -> SemaphoreStatus {
    c.get(&format!("/v1/semaphores/{key}")).await.unwrap().ok()
}

async fn rwlock(c: &Client, key: &str) -> RwLockStatus {
    c.get(&format!("/v1/rwlocks/{key}")).await.unwrap().ok()
}

/// The latest events of `key` of `kind` (`semaphores`, `rwlocks`,
/// `locks`) as (event, owner, token, session, reason), newest first.
async fn history(
    c: &Client,
    kind: &str,
    key: &str,
) -> Vec<(
    LockEventKind,
    String,
    u64,
    Option<String>,
    Option<EndReason>,
)> {
    let (_, history): (_, LockHistory) = c.history(kind, key).await;
    history
        .events
        .into_iter()
        .map(|e| (e.event, e.owner, e.token, e.session, e.reason))
        .collect()
}

#[tokio::test]
async fn every_kind_is_held_in_a_session_shown_and_released_by_its_close() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000, "name": "kinds"})).await;

    // Granted in the session, with its expiry and TTL; the owner defaults
    // to the session id.
    let permit: SemaphoreLease = post(
        &c,
        "/v1/semaphores/sk-pool/acquire",
        json!({"permits": 1, "session": s.id}),
    )
    .await
    .ok();
    assert_eq!(
        (
            permit.owner.as_str(),
            permit.ttl_ms,
            permit.expires_at.as_str()
        ),
        (s.id.as_str(), 30_000, s.expires_at.as_str())
    );
    let read: RwLease = post(
        &c,
        "/v1/rwlocks/sk-read/acquire",
        json!({"owner": "reader", "mode": "read", "session": s.id}),
    )
    .await
    .ok();
    assert_eq!(
        (read.ttl_ms, read.expires_at.as_str()),
        (30_000, s.expires_at.as_str())
    );
    let write: RwLease = post(
        &c,
        "/v1/rwlocks/sk-write/acquire",
        json!({"owner": "writer", "mode": "write", "session": s.id}),
    )
    .await
    .ok();
    let multi: MultiLockLease = post(
        &c,
        "/v1/multilock/acquire",
        json!({"owner": "multi", "keys": ["sk-m2", "sk-m1"], "session": s.id}),
    )
    .await
    .ok();
    assert_eq!(multi.ttl_ms, 30_000);
    assert!(
        multi.locks.iter().all(|l| l.expires_at == s.expires_at),
        "{multi:?}"
    );

    // The session shows them all, with the slot and the modes.
    let shown: SessionStatus = c.get(&format!("/v1/sessions/{}", s.id)).await.unwrap().ok();
    let leases: Vec<_> = shown
        .leases
        .iter()
        .map(|l| {
            (
                l.kind.as_str(),
                l.storage_key.as_str(),
                l.token,
                l.slot,
                l.mode.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        leases,
        [
            ("lock", "sk-m1", multi.locks[0].token, None, None),
            ("lock", "sk-m2", multi.locks[1].token, None, None),
            (
                "semaphore",
                "sk-pool",
                permit.token,
                Some(permit.slot),
                None
            ),
            ("rwlock", "sk-read", read.token, None, Some("read")),
            ("rwlock", "sk-write", write.token, None, Some("write")),
        ]
    );
    // So do the keys' status, with the session's expiry.
    let held = semaphore(&c, "sk-pool").await;
    assert_eq!(
        (
            held.holders[0].session.as_deref(),
            held.holders[0].expires_at.as_str()
        ),
        (Some(s.id.as_str()), s.expires_at.as_str())
    );
    let held = rwlock(&c, "sk-write").await;
    let writer = held.writer.unwrap();
    assert_eq!(
        (writer.session.as_deref(), writer.expires_at.as_str()),
        (Some(s.id.as_str()), s.expires_at.as_str())
    );
    assert_eq!(
        rwlock(&c, "sk-read").await.readers[0].session.as_deref(),
        Some(s.id.as_str())
    );
    let listed: serde_json::Value = c.get("/v1/rwlocks?prefix=sk-").await.unwrap().ok();
    assert_eq!(listed["items"][1]["writer"]["session"], json!(s.id));

    // None of them renews on its own.
    for (path, body) in [
        (
            "/v1/semaphores/sk-pool/renew",
            json!({"owner": s.id, "slot": permit.slot, "token": permit.token, "ttl_ms": 5000}),
        ),
        (
            "/v1/rwlocks/sk-write/renew",
            json!({"owner": "writer", "token": write.token, "ttl_ms": 5000}),
        ),
        (
            "/v1/rwlocks/sk-read/renew",
            json!({"owner": "reader", "token": read.token, "ttl_ms": 5000}),
        ),
        (
            "/v1/multilock/renew",
            json!({"owner": "multi", "locks": [
                {"key": "sk-m1", "token": multi.locks[0].token},
                {"key": "sk-m2", "token": multi.locks[1].token}], "ttl_ms": 5000}),
        ),
    ] {
        assert_code(&post(&c, path, body).await, 400, ErrorCode::BadRequest);
    }

    // Waiters of each kind, handed the keys by the close.
    let waiting = |path: &'static str, body: serde_json::Value| {
        let c = c.clone();
        tokio::spawn(async move { post(&c, path, body).await })
    };
    let sem_waiter = waiting(
        "/v1/semaphores/sk-pool/acquire",
        json!({"owner": "w1", "permits": 1, "wait_ms": 10_000}),
    );
    let write_waiter = waiting(
        "/v1/rwlocks/sk-read/acquire",
        json!({"owner": "w2", "mode": "write", "wait_ms": 10_000}),
    );
    let read_waiter = waiting(
        "/v1/rwlocks/sk-write/acquire",
        json!({"owner": "w3", "mode": "read", "wait_ms": 10_000}),
    );
    let lock_waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("sk-m1", "w4", 30_000, 10_000).await.unwrap() })
    };
    eventually("every waiter queues", WAIT, || async {
        semaphore(&c, "sk-pool").await.waiters == 1
            && rwlock(&c, "sk-read").await.waiters == 1
            && rwlock(&c, "sk-write").await.waiters == 1
            && c.status("sk-m1")
                .await
                .unwrap()
                .ok::<lockbroker_api::LockStatus>()
                .waiters
                == 1
    })
    .await;

    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!((closed.closed, closed.released), (true, 5));
    let handed: SemaphoreLease = sem_waiter.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        ("w1", permit.token + 1)
    );
    let handed: RwLease = write_waiter.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        ("w2", read.token + 1)
    );
    let handed: RwLease = read_waiter.await.unwrap().ok();
    assert_eq!(
        (handed.owner.as_str(), handed.token),
        ("w3", write.token + 1)
    );
    let handed: lockbroker_api::Lease = lock_waiter.await.unwrap().ok();
    assert_eq!(handed.token, multi.locks[0].token + 1);
    assert!(
        !c.status("sk-m2")
            .await
            .unwrap()
            .ok::<lockbroker_api::LockStatus>()
            .held
    );

    // History: each end names the session and why.
    let closed = Some(EndReason::SessionClosed);
    let sid = Some(s.id.clone());
    assert_eq!(
        history(&c, "semaphores", "sk-pool").await[1],
        (
            LockEventKind::Released,
            s.id.clone(),
            permit.token,
            sid.clone(),
            closed
        )
    );
    assert!(history(&c, "rwlocks", "sk-read").await.contains(&(
        LockEventKind::Released,
        "reader".to_owned(),
        read.token,
        sid.clone(),
        closed
    )));
    assert!(history(&c, "rwlocks", "sk-write").await.contains(&(
        LockEventKind::Released,
        "writer".to_owned(),
        write.token,
        sid.clone(),
        closed
    )));
    // The grants in the session named it too.
    assert!(history(&c, "semaphores", "sk-pool").await.contains(&(
        LockEventKind::Granted,
        s.id.clone(),
        permit.token,
        sid.clone(),
        None
    )));

    // Ended: nothing of any kind is granted in it.
    for (path, body) in [
        (
            "/v1/semaphores/sk-other/acquire",
            json!({"permits": 2, "session": s.id}),
        ),
        (
            "/v1/rwlocks/sk-other/acquire",
            json!({"mode": "read", "session": s.id}),
        ),
        (
            "/v1/multilock/acquire",
            json!({"keys": ["sk-o1", "sk-o2"], "session": s.id}),
        ),
    ] {
        assert_code(&post(&c, path, body).await, 404, ErrorCode::SessionNotFound);
    }
    assert!(semaphore(&c, "sk-other").await.holders.is_empty());
    let other = rwlock(&c, "sk-other").await;
    assert!(other.readers.is_empty() && other.writer.is_none());
    assert!(
        !c.status("sk-o1")
            .await
            .unwrap()
            .ok::<lockbroker_api::LockStatus>()
            .held
    );
    broker.stop().await;
}

#[tokio::test]
async fn re_entry_is_within_the_session_and_a_release_ends_one_lease() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000})).await;

    // A semaphore permit asked for again in the session: the same one.
    let ask = json!({"owner": "o", "permits": 3, "session": s.id});
    let first: SemaphoreLease = post(&c, "/v1/semaphores/re-pool/acquire", ask.clone())
        .await
        .ok();
    let again: SemaphoreLease = post(&c, "/v1/semaphores/re-pool/acquire", ask).await.ok();
    assert_eq!((again.slot, again.token), (first.slot, first.token));
    // The same owner outside the session is another holder: another slot.
    let plain: SemaphoreLease = post(
        &c,
        "/v1/semaphores/re-pool/acquire",
        json!({"owner": "o", "permits": 3, "ttl_ms": 30_000}),
    )
    .await
    .ok();
    assert_ne!(plain.slot, first.slot);
    assert_eq!(semaphore(&c, "re-pool").await.holders.len(), 2);

    // A rwlock read: the same lease again in the session; outside it,
    // the owner's read is another holder's (one reader row per owner).
    let ask = json!({"owner": "o", "mode": "read", "session": s.id});
    let read: RwLease = post(&c, "/v1/rwlocks/re-rw/acquire", ask.clone())
        .await
        .ok();
    let again: RwLease = post(&c, "/v1/rwlocks/re-rw/acquire", ask).await.ok();
    assert_eq!(again.token, read.token);
    let outside = post(
        &c,
        "/v1/rwlocks/re-rw/acquire",
        json!({"owner": "o", "mode": "read", "ttl_ms": 30_000}),
    )
    .await;
    assert_code(&outside, 409, ErrorCode::LockHeld);

    // A release ends that lease only; the session lives on.
    let released = post(
        &c,
        "/v1/semaphores/re-pool/release",
        json!({"owner": "o", "slot": first.slot, "token": first.token}),
    )
    .await;
    assert_eq!(released.status, 200, "{released:?}");
    let released = post(
        &c,
        "/v1/rwlocks/re-rw/release",
        json!({"owner": "o", "token": read.token}),
    )
    .await;
    assert_eq!(released.status, 200, "{released:?}");
    let shown: SessionStatus = c.get(&format!("/v1/sessions/{}", s.id)).await.unwrap().ok();
    assert!(shown.leases.is_empty(), "{shown:?}");
    assert_eq!(
        history(&c, "rwlocks", "re-rw").await[0],
        (
            LockEventKind::Released,
            "o".to_owned(),
            read.token,
            Some(s.id.clone()),
            None
        )
    );
    // The plain permit is untouched by the session's close.
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 0);
    let left = semaphore(&c, "re-pool").await;
    assert_eq!(left.holders.len(), 1);
    assert_eq!(
        (left.holders[0].token, left.holders[0].session.as_deref()),
        (plain.token, None)
    );
    broker.stop().await;
}

#[tokio::test]
async fn waiting_acquires_in_a_session_are_handed_session_leases() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = open(&c, json!({"ttl_ms": 30_000})).await;
    let permit: SemaphoreLease = post(
        &c,
        "/v1/semaphores/wt-pool/acquire",
        json!({"owner": "holder", "permits": 1, "ttl_ms": 30_000}),
    )
    .await
    .ok();
    let write: RwLease = post(
        &c,
        "/v1/rwlocks/wt-rw/acquire",
        json!({"owner": "holder", "mode": "write", "ttl_ms": 30_000}),
    )
    .await
    .ok();
    let waiting = |path: &'static str, body: serde_json::Value| {
        let c = c.clone();
        tokio::spawn(async move { post(&c, path, body).await })
    };
    let sem = waiting(
        "/v1/semaphores/wt-pool/acquire",
        json!({"permits": 1, "session": s.id, "wait_ms": 10_000}),
    );
    let rw = waiting(
        "/v1/rwlocks/wt-rw/acquire",
        json!({"mode": "read", "session": s.id, "wait_ms": 10_000}),
    );
    eventually("both queue", WAIT, || async {
        semaphore(&c, "wt-pool").await.waiters == 1 && rwlock(&c, "wt-rw").await.waiters == 1
    })
    .await;
    let ok = post(
        &c,
        "/v1/semaphores/wt-pool/release",
        json!({"owner": "holder", "slot": permit.slot, "token": permit.token}),
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let ok = post(
        &c,
        "/v1/rwlocks/wt-rw/release",
        json!({"owner": "holder", "token": write.token}),
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let handed: SemaphoreLease = sem.await.unwrap().ok();
    assert_eq!(
        (
            handed.owner.as_str(),
            handed.token,
            handed.expires_at.as_str()
        ),
        (s.id.as_str(), permit.token + 1, s.expires_at.as_str())
    );
    let handed_rw: RwLease = rw.await.unwrap().ok();
    assert_eq!(
        (handed_rw.owner.as_str(), handed_rw.token),
        (s.id.as_str(), write.token + 1)
    );
    assert_eq!(handed_rw.ttl_ms, 30_000);
    let shown: SessionStatus = c.get(&format!("/v1/sessions/{}", s.id)).await.unwrap().ok();
    assert_eq!(shown.leases.len(), 2, "{shown:?}");
    assert_eq!(
        history(&c, "rwlocks", "wt-rw").await[0],
        (
            LockEventKind::HandedOff,
            s.id.clone(),
            handed_rw.token,
            Some(s.id.clone()),
            None
        )
    );
    let closed: SessionClosed = close(&c, &s.id).await.ok();
    assert_eq!(closed.released, 2);
    assert!(semaphore(&c, "wt-pool").await.holders.is_empty());
    assert!(rwlock(&c, "wt-rw").await.readers.is_empty());
    broker.stop().await;
}

#[tokio::test]
async fn an_expired_session_hands_semaphores_and_rwlocks_on_through_another_broker() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());
    let s = open(&c1, json!({"ttl_ms": 1000})).await;
    // Held through the second broker; waited for there too.
    let permit: SemaphoreLease = post(
        &c2,
        "/v1/semaphores/ex-pool/acquire",
        json!({"permits": 1, "session": s.id}),
    )
    .await
    .ok();
    let write: RwLease = post(
        &c2,
        "/v1/rwlocks/ex-rw/acquire",
        json!({"mode": "write", "session": s.id}),
    )
    .await
    .ok();
    let acquired = Instant::now();
    let waiting = |path: &'static str, body: serde_json::Value| {
        let c = c2.clone();
        tokio::spawn(async move { (post(&c, path, body).await, Instant::now()) })
    };
    let sem = waiting(
        "/v1/semaphores/ex-pool/acquire",
        json!({"owner": "next", "permits": 1, "ttl_ms": 30_000, "wait_ms": 10_000}),
    );
    let rw = waiting(
        "/v1/rwlocks/ex-rw/acquire",
        json!({"owner": "next", "mode": "write", "ttl_ms": 30_000, "wait_ms": 10_000}),
    );
    for (waiter, token) in [(sem, permit.token), (rw, write.token)] {
        let (reply, at) = waiter.await.unwrap();
        assert_eq!(reply.status, 200, "{reply:?}");
        let handed: serde_json::Value = reply.parse();
        assert_eq!(handed["token"], json!(token + 1));
        // Within its TTL (from before the acquires) and a second.
        let took = at - acquired;
        assert!(took < Duration::from_millis(2000), "{took:?}");
    }
    let expired = Some(EndReason::SessionExpired);
    assert!(history(&c1, "semaphores", "ex-pool").await.contains(&(
        LockEventKind::Expired,
        s.id.clone(),
        permit.token,
        Some(s.id.clone()),
        expired
    )));
    assert!(history(&c1, "rwlocks", "ex-rw").await.contains(&(
        LockEventKind::Expired,
        s.id.clone(),
        write.token,
        Some(s.id.clone()),
        expired
    )));
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn a_waiting_acquire_on_another_broker_answers_when_its_session_closes() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());
    let s = open(&c1, json!({"ttl_ms": 30_000})).await;
    let held = c1.acquire("aw-lock", "holder", 30_000, 0).await.unwrap();
    assert_eq!(held.status, 200, "{held:?}");
    let full: SemaphoreLease = post(
        &c1,
        "/v1/semaphores/aw-pool/acquire",
        json!({"owner": "holder", "permits": 1, "ttl_ms": 30_000}),
    )
    .await
    .ok();
    assert_eq!(full.slot, 0);
    // Both wait on the second broker, in the session, far longer than the
    // test takes.
    let waiting = |path: String, body: serde_json::Value| {
        let c = c2.clone();
        tokio::spawn(async move { (post(&c, &path, body).await, Instant::now()) })
    };
    let lock = waiting(
        "/v1/locks/aw-lock/acquire".to_owned(),
        json!({"session": s.id, "wait_ms": 20_000}),
    );
    let sem = waiting(
        "/v1/semaphores/aw-pool/acquire".to_owned(),
        json!({"permits": 1, "session": s.id, "wait_ms": 20_000}),
    );
    eventually("both queue", WAIT, || async {
        semaphore(&c1, "aw-pool").await.waiters == 1
            && c1
                .status("aw-lock")
                .await
                .unwrap()
                .ok::<lockbroker_api::LockStatus>()
                .waiters
                == 1
    })
    .await;
    // Closed through the first: the second's waiters answer at once.
    let closed_at = Instant::now();
    let closed: SessionClosed = close(&c1, &s.id).await.ok();
    assert_eq!(closed.released, 0);
    for waiter in [lock, sem] {
        let (reply, at) = waiter.await.unwrap();
        assert_code(&reply, 404, ErrorCode::SessionNotFound);
        let took = at - closed_at;
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    // Nothing was granted: the holders still hold, nobody waits.
    let pool = semaphore(&c2, "aw-pool").await;
    assert_eq!(
        (pool.holders[0].owner.as_str(), pool.waiters),
        ("holder", 0)
    );
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn a_broker_that_does_not_serve_the_tenant_leaves_its_expired_sessions_alone() {
    let first = Broker::start().await;
    // The second serves only the other tenant: its reaper must not take
    // the first tenant's sessions (it could not carry out their end).
    let mut only_other = config(&first.db);
    only_other.tenants.retain(|t| t.name == "other");
    let second = Broker::start_with(first.db.clone(), only_other).await;
    let c = first.client();
    let mut waiting = Vec::new();
    for i in 0..6 {
        let s = open(&c, json!({"ttl_ms": 1000})).await;
        let key = format!("nt-{i}");
        let grant: lockbroker_api::Lease = c
            .post(
                &format!("/v1/locks/{key}/acquire"),
                &json!({"session": s.id}),
            )
            .await
            .unwrap()
            .ok();
        let acquired = Instant::now();
        let c = c.clone();
        waiting.push(tokio::spawn(async move {
            let reply = c.acquire(&key, "next", 30_000, 20_000).await.unwrap();
            (reply, grant.token, Instant::now() - acquired)
        }));
    }
    for waiter in waiting {
        let (reply, token, took) = waiter.await.unwrap();
        let handed: lockbroker_api::Lease = reply.ok();
        assert_eq!(handed.token, token + 1);
        // Its TTL and a second at most, every time.
        assert!(took < Duration::from_millis(2500), "{took:?}");
    }
    second.shutdown().await;
    first.stop().await;
}
