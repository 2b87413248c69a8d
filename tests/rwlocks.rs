//! Reader-writer locks: many readers or one writer, tokens across both
//! modes, a queued writer blocking new readers, handoff to the readers at
//! the head of the queue together, expiry by the database clock, and a
//! stress run whose history is checked (reads may overlap reads, never a
//! write).

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use lockbroker_api::{
    ErrorCode, ReleaseRequest, RenewRequest, RwAcquireRequest, RwLease, RwLockStatus, RwMode,
};
use lockbroker_tests::{
    config, eventually, fresh_db_name,
    history::{Op, Request},
    Broker, Client, History, Outcome, Reply,
};
use serde_json::json;
use tokio::{io::AsyncWriteExt, net::TcpStream};

async fn acquire(
    c: &Client,
    key: &str,
    owner: &str,
    mode: RwMode,
    ttl_ms: u64,
    wait_ms: u64,
) -> Reply {
    let body = RwAcquireRequest {
        terms: lockbroker_api::LeaseTerms::new(ttl_ms, wait_ms),
        ..RwAcquireRequest::new(owner, mode)
    };
    c.post(&format!("/v1/rwlocks/{key}/acquire"), &body)
        .await
        .unwrap()
}

async fn release(c: &Client, key: &str, owner: &str, token: u64) -> Reply {
    let body = ReleaseRequest {
        owner: owner.into(),
        token,
    };
    c.post(&format!("/v1/rwlocks/{key}/release"), &body)
        .await
        .unwrap()
}

async fn renew(c: &Client, key: &str, owner: &str, token: u64, ttl_ms: u64) -> Reply {
    let body = RenewRequest {
        owner: owner.into(),
        token,
        ttl_ms: Some(ttl_ms),
    };
    c.post(&format!("/v1/rwlocks/{key}/renew"), &body)
        .await
        .unwrap()
}

async fn status(c: &Client, key: &str) -> RwLockStatus {
    c.get(&format!("/v1/rwlocks/{key}")).await.unwrap().ok()
}

/// The grant of a `200` answer.
fn granted(r: &Reply) -> RwLease {
    assert_eq!(r.status, 200, "{r:?}");
    r.ok()
}

fn held(r: &Reply) {
    assert_eq!(
        (r.status, r.code()),
        (409, Some(ErrorCode::LockHeld)),
        "{r:?}"
    );
    assert!(r.error().unwrap().retry_after_ms.unwrap() >= 1, "{r:?}");
}

/// Waits until rwlock `key` has `n` waiters queued.
async fn until_waiters(c: &Client, key: &str, n: u64) {
    eventually(
        &format!("{n} waiters on {key}"),
        Duration::from_secs(10),
        || async { status(c, key).await.waiters == n },
    )
    .await;
}

#[tokio::test]
async fn readers_share_a_writer_is_alone_and_tokens_increase_across_modes() {
    let broker = Broker::start().await;
    let c = broker.client();
    let a = granted(&acquire(&c, "cfg", "a", RwMode::Read, 30_000, 0).await);
    assert_eq!(
        (a.mode, a.readers, a.key.as_str()),
        (RwMode::Read, 1, "cfg")
    );
    let b = granted(&acquire(&c, "cfg", "b", RwMode::Read, 30_000, 0).await);
    assert_eq!(b.readers, 2);
    assert!(b.token > a.token);
    held(&acquire(&c, "cfg", "w", RwMode::Write, 30_000, 0).await);
    // The same owner asking again for its mode: its lease, renewed.
    let again = granted(&acquire(&c, "cfg", "a", RwMode::Read, 60_000, 0).await);
    assert_eq!((again.token, again.ttl_ms), (a.token, 60_000));
    // No upgrade: a reader asking to write waits like anyone.
    held(&acquire(&c, "cfg", "a", RwMode::Write, 30_000, 0).await);

    let now = status(&c, "cfg").await;
    assert_eq!(now.writer, None);
    let readers: Vec<(&str, u64)> = now
        .readers
        .iter()
        .map(|r| (r.owner.as_str(), r.token))
        .collect();
    assert_eq!(readers, [("a", a.token), ("b", b.token)]);
    assert_eq!(now.waiters, 0);

    // A rwlock and a lock of one name are unrelated.
    let lock = c.acquire("cfg", "w", 30_000, 0).await.unwrap();
    assert_eq!(lock.status, 200, "{lock:?}");

    let lost = release(&c, "cfg", "a", b.token).await;
    assert_eq!(lost.code(), Some(ErrorCode::LeaseLost));
    assert_eq!(release(&c, "cfg", "a", a.token).await.status, 200);
    assert_eq!(release(&c, "cfg", "b", b.token).await.status, 200);
    let gone = release(&c, "cfg", "b", b.token).await;
    assert_eq!(gone.code(), Some(ErrorCode::LeaseLost));

    let w = granted(&acquire(&c, "cfg", "w", RwMode::Write, 30_000, 0).await);
    assert_eq!((w.mode, w.readers), (RwMode::Write, 0));
    assert!(w.token > b.token, "a write's token follows the reads'");
    held(&acquire(&c, "cfg", "r", RwMode::Read, 30_000, 0).await);
    held(&acquire(&c, "cfg", "x", RwMode::Write, 30_000, 0).await);
    let writer = status(&c, "cfg").await.writer.expect("a writer");
    assert_eq!((writer.owner.as_str(), writer.token), ("w", w.token));
    let renewed = granted(&renew(&c, "cfg", "w", w.token, 45_000).await);
    assert_eq!(
        (renewed.token, renewed.ttl_ms, renewed.mode),
        (w.token, 45_000, RwMode::Write)
    );
    assert_eq!(release(&c, "cfg", "w", w.token).await.status, 200);
    let r = granted(&acquire(&c, "cfg", "r", RwMode::Read, 30_000, 0).await);
    assert!(r.token > w.token);

    // Bad input, sent as raw JSON: the request type cannot express it.
    for bad in [
        json!({"owner": "x"}),
        json!({"owner": "x", "mode": "exclusive"}),
        json!({"mode": "read"}),
        json!({"owner": "x", "mode": "read", "ttl_ms": 1}),
    ] {
        let r = c.post("/v1/rwlocks/cfg/acquire", &bad).await.unwrap();
        assert_eq!(
            (r.status, r.code()),
            (400, Some(ErrorCode::BadRequest)),
            "{bad}"
        );
    }
    let long = "k".repeat(5000);
    let r = acquire(&c, &long, "x", RwMode::Read, 30_000, 0).await;
    assert_eq!(
        (r.status, r.code()),
        (422, Some(ErrorCode::InvalidKey)),
        "{r:?}"
    );
    let never = status(&c, "never").await;
    assert_eq!(
        (never.writer, never.readers.len(), never.waiters),
        (None, 0, 0)
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_queued_writer_is_granted_while_readers_keep_arriving() {
    let broker = Broker::start().await;
    let c = broker.client();
    let first = granted(&acquire(&c, "hot", "r0", RwMode::Read, 30_000, 0).await);
    let writer = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "hot", "w", RwMode::Write, 30_000, 20_000).await })
    };
    until_waiters(&c, "hot", 1).await;
    // Readers keep arriving: those trying once are refused, those that
    // wait queue behind the writer; none gets in ahead of it.
    let mut waiting = Vec::new();
    for n in 0..5 {
        held(&acquire(&c, "hot", &format!("try-{n}"), RwMode::Read, 30_000, 0).await);
        let late = c.clone();
        waiting.push(tokio::spawn(async move {
            acquire(
                &late,
                "hot",
                &format!("late-{n}"),
                RwMode::Read,
                30_000,
                20_000,
            )
            .await
        }));
        until_waiters(&c, "hot", 2 + n).await;
    }
    assert_eq!(
        status(&c, "hot").await.readers.len(),
        1,
        "only the first reader"
    );
    assert_eq!(release(&c, "hot", "r0", first.token).await.status, 200);
    let w = granted(&writer.await.unwrap());
    assert!(w.token > first.token);
    let now = status(&c, "hot").await;
    assert_eq!(now.writer.map(|h| h.token), Some(w.token));
    assert!(now.readers.is_empty());
    assert_eq!(release(&c, "hot", "w", w.token).await.status, 200);
    for task in waiting {
        let r = granted(&task.await.unwrap());
        assert!(r.token > w.token, "the late readers come after the writer");
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_release_hands_on_to_every_reader_up_to_the_next_writer() {
    let broker = Broker::start().await;
    let c = broker.client();
    let w1 = granted(&acquire(&c, "q", "w1", RwMode::Write, 30_000, 0).await);
    let wait = |owner: &'static str, mode: RwMode| {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "q", owner, mode, 30_000, 20_000).await })
    };
    let mut readers = Vec::new();
    for (n, owner) in ["r1", "r2", "r3"].into_iter().enumerate() {
        readers.push(wait(owner, RwMode::Read));
        until_waiters(&c, "q", n as u64 + 1).await;
    }
    let w2 = wait("w2", RwMode::Write);
    until_waiters(&c, "q", 4).await;
    let r4 = wait("r4", RwMode::Read);
    until_waiters(&c, "q", 5).await;

    assert_eq!(release(&c, "q", "w1", w1.token).await.status, 200);
    let mut tokens = Vec::new();
    for task in readers {
        let r = granted(&task.await.unwrap());
        assert!(r.token > w1.token);
        tokens.push((r.owner, r.token));
    }
    let now = status(&c, "q").await;
    assert_eq!(now.readers.len(), 3, "{now:?}");
    assert_eq!(now.waiters, 2, "w2 and r4 still wait: {now:?}");
    assert!(!w2.is_finished() && !r4.is_finished());

    for (owner, token) in &tokens {
        assert_eq!(release(&c, "q", owner, *token).await.status, 200);
    }
    let w2 = granted(&w2.await.unwrap());
    assert!(tokens.iter().all(|(_, t)| w2.token > *t));
    assert_eq!(status(&c, "q").await.waiters, 1);
    assert_eq!(release(&c, "q", "w2", w2.token).await.status, 200);
    let r4 = granted(&r4.await.unwrap());
    assert!(r4.token > w2.token);
    assert_eq!(r4.readers, 1);
    broker.stop().await;
}

#[tokio::test]
async fn readers_behind_a_writer_that_left_the_queue_join_the_readers() {
    let broker = Broker::start().await;
    let c = broker.client();
    let r0 = granted(&acquire(&c, "left", "r0", RwMode::Read, 60_000, 0).await);
    let writer = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "left", "w", RwMode::Write, 30_000, 500).await })
    };
    until_waiters(&c, "left", 1).await;
    let reader = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "left", "r1", RwMode::Read, 30_000, 20_000).await })
    };
    until_waiters(&c, "left", 2).await;
    // The writer gives up; the reader behind it is granted beside r0, which
    // still reads (the reaper hands it on: nobody released anything).
    held(&writer.await.unwrap());
    let r1 = granted(&reader.await.unwrap());
    assert!(r1.token > r0.token);
    let now = status(&c, "left").await;
    let readers: Vec<&str> = now.readers.iter().map(|r| r.owner.as_str()).collect();
    assert_eq!(readers, ["r0", "r1"]);
    broker.stop().await;
}

#[tokio::test]
async fn leases_end_by_the_database_clock_and_pass_to_waiters() {
    let broker = Broker::start().await;
    let c = broker.client();
    let r = granted(&acquire(&c, "exp", "r", RwMode::Read, 300, 0).await);
    let writer = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "exp", "w", RwMode::Write, 400, 20_000).await })
    };
    // Nobody releases: the reaper hands the expired read on.
    let w = granted(&writer.await.unwrap());
    assert!(w.token > r.token);
    let late = renew(&c, "exp", "r", r.token, 30_000).await;
    assert_eq!(late.code(), Some(ErrorCode::LeaseLost), "{late:?}");
    let reader = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "exp", "r2", RwMode::Read, 30_000, 20_000).await })
    };
    let r2 = granted(&reader.await.unwrap());
    assert!(r2.token > w.token);
    let expired = renew(&c, "exp", "w", w.token, 30_000).await;
    assert_eq!(expired.code(), Some(ErrorCode::LeaseLost), "{expired:?}");
    let gone = release(&c, "exp", "w", w.token).await;
    assert_eq!(gone.code(), Some(ErrorCode::LeaseLost));
    broker.stop().await;
}

/// Sends a waiting rwlock acquire over a raw connection, to drop it
/// mid-wait.
async fn raw_waiting_acquire(broker: &Broker, key: &str, owner: &str, mode: RwMode) -> TcpStream {
    let addr = broker.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let body = serde_json::to_string(&RwAcquireRequest {
        terms: lockbroker_api::LeaseTerms::new(30_000, 60_000),
        ..RwAcquireRequest::new(owner, mode)
    })
    .unwrap();
    let request = format!(
        "POST /v1/rwlocks/{key}/acquire HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        lockbroker_tests::KEY,
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    s
}

#[tokio::test]
async fn departed_waiters_never_hold_the_rwlock() {
    let broker = Broker::start().await;
    let c = broker.client();
    let free = |what: String| {
        let c = c.clone();
        async move {
            eventually(&what, Duration::from_secs(5), || async {
                let s = status(&c, "dc").await;
                s.writer.is_none() && s.readers.is_empty() && s.waiters == 0
            })
            .await;
        }
    };
    let w = granted(&acquire(&c, "dc", "holder", RwMode::Write, 60_000, 0).await);
    let conn = raw_waiting_acquire(&broker, "dc", "gone", RwMode::Read).await;
    until_waiters(&c, "dc", 1).await;
    drop(conn);
    until_waiters(&c, "dc", 0).await;
    assert_eq!(release(&c, "dc", "holder", w.token).await.status, 200);
    free("the departed reader left the queue".into()).await;

    // The race: two readers and a writer leave just as the key is handed
    // to them. Their grants are given back, never left held by nobody.
    for round in 0..5 {
        let w = granted(&acquire(&c, "dc", "holder", RwMode::Write, 60_000, 0).await);
        let r1 = raw_waiting_acquire(&broker, "dc", "gone-1", RwMode::Read).await;
        until_waiters(&c, "dc", 1).await;
        let r2 = raw_waiting_acquire(&broker, "dc", "gone-2", RwMode::Read).await;
        until_waiters(&c, "dc", 2).await;
        let w2 = raw_waiting_acquire(&broker, "dc", "gone-3", RwMode::Write).await;
        until_waiters(&c, "dc", 3).await;
        let (_, released) = tokio::join!(
            async { drop((r1, r2, w2)) },
            release(&c, "dc", "holder", w.token)
        );
        assert_eq!(released.status, 200);
        free(format!(
            "round {round}: the departed waiters' grants were given back"
        ))
        .await;
    }
    granted(&acquire(&c, "dc", "after", RwMode::Write, 30_000, 0).await);
    broker.stop().await;
}

/// The answer to a `COMMIT` is lost after the server committed (a write
/// grant, then a release that hands the key to a waiting reader): the
/// broker reads the transaction's mark back and answers and delivers both.
/// A `COMMIT` that never reached the server is found not to have happened
/// and is tried again: one grant, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_commits_are_settled_by_the_header_mark() {
    let (proxy, broker) = Broker::behind_proxy(2000).await;
    let c = broker.client();
    let hits = || proxy.commits_hit.load(Ordering::SeqCst);
    // A first grant creates the key's header.
    let first = granted(&acquire(&c, "a", "me", RwMode::Write, 60_000, 0).await);
    assert_eq!(release(&c, "a", "me", first.token).await.status, 200);

    proxy.lose_next_commit_answer();
    let w = granted(&acquire(&c, "a", "me", RwMode::Write, 60_000, 0).await);
    assert_eq!(hits(), 1, "the fault hit the grant's COMMIT");
    assert_eq!(w.token, first.token + 1);
    let writer = status(&c, "a").await.writer.expect("the grant committed");
    assert_eq!((writer.owner.as_str(), writer.token), ("me", w.token));

    let reader = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "a", "next", RwMode::Read, 60_000, 10_000).await })
    };
    until_waiters(&c, "a", 1).await;
    proxy.lose_next_commit_answer();
    let released = release(&c, "a", "me", w.token).await;
    assert_eq!(hits(), 2, "the fault hit the release's COMMIT");
    assert_eq!(released.status, 200, "{released:?}");
    let handed = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the reader is answered")
        .unwrap();
    let r = granted(&handed);
    assert_eq!(r.token, w.token + 1);

    assert_eq!(release(&c, "a", "next", r.token).await.status, 200);
    proxy.drop_next_commit();
    let again = granted(&acquire(&c, "a", "me", RwMode::Write, 60_000, 0).await);
    assert_eq!(hits(), 3, "the fault hit a COMMIT");
    assert_eq!(again.token, r.token + 1, "granted once");

    let text = c.get("/metrics").await.unwrap().text();
    assert!(
        text.contains("lockbroker_lost_commits_total{outcome=\"committed\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("lockbroker_lost_commits_total{outcome=\"not_committed\"} 1"),
        "{text}"
    );
    broker.stop().await;
}

/// The same faults on reads and releases, which are served by their key's
/// combined transaction (`rw_batch`): a lost answer is settled by the
/// batch's mark (committed: answered as granted or released); a `COMMIT`
/// that never reached the server is found not to have happened and the
/// read takes its own transaction: granted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn combined_reads_and_releases_settle_lost_commits_by_the_batch_mark() {
    let (proxy, broker) = Broker::behind_proxy(2000).await;
    let c = broker.client();
    let hits = || proxy.commits_hit.load(Ordering::SeqCst);
    // A first grant creates the key's header.
    let first = granted(&acquire(&c, "b", "r1", RwMode::Read, 60_000, 0).await);
    assert_eq!(release(&c, "b", "r1", first.token).await.status, 200);

    proxy.lose_next_commit_answer();
    let r1 = granted(&acquire(&c, "b", "r1", RwMode::Read, 60_000, 0).await);
    assert_eq!(hits(), 1, "the fault hit the read's COMMIT");
    assert_eq!(r1.token, first.token + 1);

    proxy.drop_next_commit();
    let r2 = granted(&acquire(&c, "b", "r2", RwMode::Read, 60_000, 0).await);
    assert_eq!(hits(), 2, "the fault hit a COMMIT");
    assert_eq!((r2.token, r2.readers), (r1.token + 1, 2), "granted once");
    let readers: Vec<(String, u64)> = status(&c, "b")
        .await
        .readers
        .into_iter()
        .map(|r| (r.owner, r.token))
        .collect();
    assert_eq!(readers, [("r1".into(), r1.token), ("r2".into(), r2.token)]);

    proxy.lose_next_commit_answer();
    assert_eq!(release(&c, "b", "r1", r1.token).await.status, 200);
    assert_eq!(hits(), 3, "the fault hit the release's COMMIT");
    let left = status(&c, "b").await.readers;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(release(&c, "b", "r2", r2.token).await.status, 200);

    let text = c.get("/metrics").await.unwrap().text();
    assert!(
        text.contains("lockbroker_lost_commits_total{outcome=\"committed\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("lockbroker_lost_commits_total{outcome=\"not_committed\"} 1"),
        "{text}"
    );
    broker.stop().await;
}

/// Statements of the database `db` (other tests share the server) that
/// read a rwlock header with a lock: while the test holds every header,
/// each is waiting for it. (From the process list: a lock wait in the
/// optimizer's first read does not always show in `INNODB_TRX`.)
async fn header_waits(pool: &sqlx::MySqlPool, db: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = ? AND ID <> CONNECTION_ID() \
         AND INFO LIKE '%FROM rwlocks WHERE%FOR UPDATE%'",
    )
    .bind(db)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A read's `COMMIT` answer is lost, and the next transaction of the key
/// (a writer that queues, waiting on the header behind it) takes the
/// header before the broker reads it back and writes its own mark over the
/// read's: the read is still found committed, because the writer's header
/// read saw the read's mark (`engine::marks`), not taken for a commit that
/// never happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_commit_overwritten_by_the_next_transaction_is_found_committed() {
    use sqlx::Connection;
    // Long enough for both to wait on the header inside InnoDB (the
    // sessions' lock wait timeout is half of it) while the test sets up.
    let (proxy, broker) = Broker::behind_proxy(20_000).await;
    let name = broker.db.clone();
    let c = broker.client();
    let first = granted(&acquire(&c, "d", "r0", RwMode::Read, 60_000, 0).await);
    assert_eq!(release(&c, "d", "r0", first.token).await.status, 200);

    // Hold the header so that the read and then the writer wait behind it.
    let mut holder = lockbroker_tests::db_conn(&name).await;
    let looking = sqlx::MySqlPool::connect(&format!("{}/{name}", lockbroker_tests::server_url()))
        .await
        .unwrap();
    let mut tx = holder.begin().await.unwrap();
    let rows: Vec<(Vec<u8>,)> = sqlx::query_as("SELECT rw_key FROM rwlocks FOR UPDATE")
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one header");
    let read = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "d", "r1", RwMode::Read, 60_000, 0).await })
    };
    eventually(
        "the read waits on the header",
        Duration::from_secs(10),
        || async { header_waits(&looking, &name).await == 1 },
    )
    .await;
    let write = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "d", "w", RwMode::Write, 60_000, 20_000).await })
    };
    eventually(
        "the writer waits behind it",
        Duration::from_secs(10),
        || async { header_waits(&looking, &name).await == 2 },
    )
    .await;
    proxy.lose_next_commit_answer();
    tx.rollback().await.unwrap();

    let r1 = granted(&read.await.unwrap());
    assert_eq!(
        proxy.commits_hit.load(Ordering::SeqCst),
        1,
        "the fault hit the read's COMMIT"
    );
    assert_eq!(r1.token, first.token + 1);
    until_waiters(&c, "d", 1).await;
    let text = c.get("/metrics").await.unwrap().text();
    assert!(
        text.contains("lockbroker_lost_commits_total{outcome=\"committed\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("lockbroker_lost_commits_total{outcome=\"not_committed\"}"),
        "{text}"
    );
    // The writer queued behind the read and gets the key when it ends.
    assert_eq!(release(&c, "d", "r1", r1.token).await.status, 200);
    let w = granted(&write.await.unwrap());
    assert_eq!(w.token, r1.token + 1);
    broker.stop().await;
}

#[tokio::test]
async fn max_waiters_gives_429() {
    let db = fresh_db_name();
    let mut config = config(&db);
    config.tenants[0].max_waiters = 1;
    let broker = Broker::start_with(db, config).await;
    let c = broker.client();
    granted(&acquire(&c, "full", "w", RwMode::Write, 30_000, 0).await);
    let first = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "full", "r1", RwMode::Read, 30_000, 5_000).await })
    };
    until_waiters(&c, "full", 1).await;
    let over = acquire(&c, "full", "r2", RwMode::Read, 30_000, 5_000).await;
    assert_eq!(
        (over.status, over.code()),
        (429, Some(ErrorCode::TooManyWaiters))
    );
    held(&first.await.unwrap());
    broker.stop().await;
}

const CLIENTS: usize = 16;
const WRITERS: usize = 5;
const KEYS: usize = 2;
const RUN_FOR: Duration = Duration::from_secs(6);
const TTL_MS: u64 = 30_000;

/// Records one exchange into `history`.
fn record(
    history: &History,
    key: &str,
    owner: &str,
    request: Request,
    sent: Instant,
    reply: &Reply,
) {
    let lease = reply.try_parse::<RwLease>();
    history.record(Op {
        key: key.to_owned(),
        owner: owner.to_owned(),
        request,
        sent,
        answered: Instant::now(),
        outcome: Outcome::Reply {
            status: reply.status,
            token: lease.as_ref().map(|l| l.token),
            hold_count: lease.map(|_| 1),
            released: matches!(request, Request::Release { .. }).then_some(reply.status == 200),
        },
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_reads_overlap_writes_never_and_tokens_increase() {
    let broker = Broker::start().await;
    let history = Arc::new(History::new());
    let deadline = Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let (c, history) = (broker.client(), history.clone());
        tasks.push(tokio::spawn(async move {
            let (mode, owner) = if client < WRITERS {
                (RwMode::Write, format!("writer-{client}"))
            } else {
                (RwMode::Read, format!("reader-{client}"))
            };
            let (mut grants, mut n, mut most_readers) = (0usize, 0usize, 0u32);
            while Instant::now() < deadline && n < 100_000 {
                n += 1;
                let key = format!("stress-{}", (client + n) % KEYS);
                // Some wait, some try once.
                let wait_ms = if client % 3 == 0 { 0 } else { 2_000 };
                let request = Request::Acquire {
                    ttl_ms: TTL_MS,
                    wait_ms,
                };
                let sent = Instant::now();
                let reply = acquire(&c, &key, &owner, mode, TTL_MS, wait_ms).await;
                record(&history, &key, &owner, request, sent, &reply);
                match reply.status {
                    200 => {}
                    409 => continue,
                    other => panic!("unexpected {other}: {reply:?}"),
                }
                grants += 1;
                let lease = reply.ok::<RwLease>();
                most_readers = most_readers.max(lease.readers);
                let token = lease.token;
                // Hold a moment, so that holds meet.
                tokio::time::sleep(Duration::from_millis(2)).await;
                let sent = Instant::now();
                let reply = release(&c, &key, &owner, token).await;
                record(
                    &history,
                    &key,
                    &owner,
                    Request::Release { token },
                    sent,
                    &reply,
                );
                assert_eq!(reply.status, 200, "{reply:?}");
            }
            (grants, most_readers)
        }));
    }
    let (mut grants, mut writes, mut most_readers) = (0, 0, 0);
    for (client, task) in tasks.into_iter().enumerate() {
        let (n, most) = task.await.unwrap();
        grants += n;
        if client < WRITERS {
            writes += n;
        }
        most_readers = most_readers.max(most);
    }
    assert!(
        writes > 0 && writes < grants,
        "both modes were granted: {writes} of {grants}"
    );
    let report = history.check_shared(|op| op.owner.starts_with("reader"));
    report.assert_clean();
    assert!(grants > 50, "too few grants to mean anything: {grants}");
    assert!(report.grants >= grants);
    assert!(
        most_readers > 1,
        "reads never overlapped: the run proves little"
    );
    broker.stop().await;
}
