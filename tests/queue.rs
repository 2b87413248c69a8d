//! Fair waiting: the durable queue, direct handoff, waking across brokers,
//! departures. Orders are checked by fencing tokens: each grant of a key
//! takes the next token, so the token a waiter gets is its place in line.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use lockbroker_api::{AcquireRequest, ErrorCode, Lease, LockStatus};
use lockbroker_tests::{
    config, drop_db, eventually, fresh_db_name, Broker, BrokerProcess, Client, Reply,
};
use tokio::{io::AsyncWriteExt, net::TcpStream};

/// Waits until `key` has `n` waiters (as any broker on the database sees it).
async fn until_waiters(c: &Client, key: &str, n: u64) {
    let what = format!("{key} has {n} waiters");
    eventually(&what, Duration::from_secs(10), || async {
        lock_status(c, key).await.is_some_and(|s| s.waiters == n)
    })
    .await;
}

/// A key's status, or `None` when the request failed (for `eventually`).
async fn lock_status(c: &Client, key: &str) -> Option<LockStatus> {
    c.status(key).await.ok()?.try_parse()
}

/// The token of a grant.
fn token(r: &Reply) -> u64 {
    r.ok::<Lease>().token
}

/// Starts a waiting acquire that releases at once when granted; its result
/// is (owner, token) or the error reply.
fn waiter(
    c: &Client,
    key: &str,
    owner: &str,
    priority: i32,
) -> tokio::task::JoinHandle<(String, u64)> {
    let (c, key, owner) = (c.clone(), key.to_owned(), owner.to_owned());
    tokio::spawn(async move {
        let request = AcquireRequest {
            terms: lockbroker_api::LeaseTerms {
                ttl_ms: Some(30_000),
                wait_ms: Some(60_000),
                priority: Some(priority),
                session: None,
            },
            ..AcquireRequest::new(&owner)
        };
        let r = c.acquire_with(&key, &request).await.unwrap();
        assert_eq!(r.status, 200, "{owner}: {r:?}");
        let token = token(&r);
        let rel = c.release(&key, &owner, token).await.unwrap();
        assert_eq!(rel.status, 200, "{owner} release: {rel:?}");
        (owner, token)
    })
}

/// Holds `key`, queues `owners` in order (each with its priority), releases,
/// and returns the owners in the order they were granted.
async fn grant_order(
    holder: &Client,
    clients: &[Client],
    key: &str,
    owners: &[(&str, i32)],
) -> Vec<String> {
    let base = token(&holder.acquire(key, "holder", 60_000, 0).await.unwrap());
    let mut tasks = Vec::new();
    for (i, (owner, priority)) in owners.iter().enumerate() {
        let c = &clients[i % clients.len()];
        tasks.push(waiter(c, key, owner, *priority));
        until_waiters(holder, key, i as u64 + 1).await;
    }
    holder.release(key, "holder", base).await.unwrap();
    let mut granted = Vec::new();
    for t in tasks {
        granted.push(t.await.unwrap());
    }
    granted.sort_by_key(|(_, token)| *token);
    let tokens: Vec<u64> = granted.iter().map(|(_, t)| *t).collect();
    let expected: Vec<u64> = (1..=owners.len() as u64).map(|i| base + i).collect();
    assert_eq!(tokens, expected, "every handoff took the next token");
    granted.into_iter().map(|(owner, _)| owner).collect()
}

#[tokio::test]
async fn fifo_with_the_default_policy() {
    let broker = Broker::start().await;
    let c = broker.client();
    let owners: Vec<(String, i32)> = (0..10).map(|i| (format!("w{i}"), 9 - i)).collect();
    let owners: Vec<(&str, i32)> = owners.iter().map(|(o, p)| (o.as_str(), *p)).collect();
    let order = grant_order(&c, std::slice::from_ref(&c), "fifo", &owners).await;
    let expected: Vec<&str> = owners.iter().map(|(o, _)| *o).collect();
    assert_eq!(order, expected, "priorities are ignored by FIFO");
    broker.stop().await;
}

#[tokio::test]
async fn priority_order_with_the_priority_policy() {
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.policy_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    cfg.tenants[0].policy = Some("priority.wasm".into());
    // The order is tested, not the deadline: a loaded machine can stall a
    // call past the 5 ms default.
    cfg.policy_deadline_ms = 100;
    let broker = Broker::start_with(db, cfg).await;
    let c = broker.client();
    let owners = [
        ("p1", 1),
        ("p5a", 5),
        ("p3", 3),
        ("p5b", 5),
        ("p2", 2),
        ("p0", 0),
    ];
    let order = grant_order(&c, std::slice::from_ref(&c), "prio", &owners).await;
    assert_eq!(order, ["p5a", "p5b", "p3", "p2", "p1", "p0"]);
    broker.stop().await;
}

#[tokio::test]
async fn fifo_across_two_broker_processes() {
    let db = fresh_db_name();
    let a = BrokerProcess::start(&db, "").await;
    let b = BrokerProcess::start(&db, "").await;
    let (ca, cb) = (a.client(), b.client());
    let owners: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    let owners: Vec<(&str, i32)> = owners.iter().map(|o| (o.as_str(), 0)).collect();
    // Each waiter is woken by its own broker's wake loop (every 10 ms) when
    // the other broker hands it the lock. A waiter nobody woke would sit
    // out its 60 s wait: the deadline, well inside it, tells the two apart.
    let order = tokio::time::timeout(
        Duration::from_secs(20),
        grant_order(&ca, &[cb.clone(), ca.clone()], "cross", &owners),
    )
    .await
    .expect("every waiter woken across brokers within 20 s, not at the end of its wait");
    let expected: Vec<&str> = owners.iter().map(|(o, _)| *o).collect();
    assert_eq!(order, expected);
    a.stop().await;
    b.stop().await;
    drop_db(&db).await;
}

#[tokio::test]
async fn a_thousand_waiters_are_served_in_order() {
    let broker = Broker::start().await;
    let c = broker.client();
    let base = token(&c.acquire("crowd", "holder", 60_000, 0).await.unwrap());
    let mut tasks = Vec::new();
    for i in 0..1000u64 {
        let cw = c.clone();
        tasks.push(tokio::spawn(async move {
            let c = cw;
            let owner = format!("w{i}");
            let r = c.acquire("crowd", &owner, 60_000, 300_000).await.unwrap();
            assert_eq!(r.status, 200, "{owner}: {r:?}");
            let token = token(&r);
            assert_eq!(c.release("crowd", &owner, token).await.unwrap().status, 200);
            token
        }));
        // Enqueue in a known order: each after the previous one is queued.
        until_waiters(&c, "crowd", i + 1).await;
    }
    c.release("crowd", "holder", base).await.unwrap();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(
            t.await.unwrap(),
            base + 1 + i as u64,
            "waiter {i} served in its turn"
        );
    }
    broker.stop().await;
}

#[tokio::test]
async fn handoff_on_expiry_is_prompt() {
    let broker = Broker::start().await;
    let c = broker.client();
    let db_time = |r: &Reply| {
        let lease: Lease = r.ok();
        let at = chrono::DateTime::parse_from_rfc3339(&lease.expires_at).unwrap();
        at - chrono::Duration::milliseconds(i64::try_from(lease.ttl_ms).unwrap())
    };
    let mut delays = Vec::new();
    for round in 0..3 {
        let key = format!("exp-{round}");
        let g: Lease = c.acquire(&key, "holder", 300, 0).await.unwrap().ok();
        let expired_at = chrono::DateTime::parse_from_rfc3339(&g.expires_at).unwrap();
        let w = c.acquire(&key, "next", 30_000, 10_000).await.unwrap();
        assert_eq!(w.status, 200);
        assert_eq!(token(&w), g.token + 1);
        // Both times are the database's: when the lease ended, and when the
        // waiter's lease began (its expiry minus its TTL).
        let delay = (db_time(&w) - expired_at).num_milliseconds();
        assert!(delay >= 0, "granted before the lease ended: {delay} ms");
        assert!(delay < 250, "handed on {delay} ms after expiry");
        delays.push(delay);
    }
    delays.sort_unstable();
    assert!(
        delays[1] < 100,
        "median handoff after expiry: {delays:?} ms"
    );
    broker.stop().await;
}

#[tokio::test]
async fn no_barging_past_the_queue() {
    let broker = Broker::start().await;
    let c = broker.client();
    c.acquire("nb", "holder", 400, 0).await.unwrap();
    let w = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("nb", "queued", 30_000, 10_000).await.unwrap() })
    };
    until_waiters(&c, "nb", 1).await;
    // Right after expiry, before or after the reaper: a newcomer's try never
    // takes the lock from the queued waiter. Newcomers try until the waiter
    // has the lock, so their tries span the expiry whenever it comes.
    eventually(
        "the queued waiter gets the lock",
        Duration::from_secs(10),
        || async {
            let r = c.acquire("nb", "newcomer", 30_000, 0).await.unwrap();
            assert_eq!(r.status, 409, "{r:?}");
            w.is_finished()
        },
    )
    .await;
    let w = w.await.unwrap();
    assert_eq!(w.status, 200);
    assert_eq!(w.ok::<Lease>().owner, "queued");
    broker.stop().await;
}

/// Sends a waiting acquire over a raw connection, to drop it mid-wait.
async fn raw_waiting_acquire(broker: &Broker, key: &str, owner: &str) -> TcpStream {
    let addr = broker.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let body = serde_json::to_string(&AcquireRequest {
        terms: lockbroker_api::LeaseTerms::new(30_000, 60_000),
        ..AcquireRequest::new(owner)
    })
    .unwrap();
    let request = format!(
        "POST /v1/locks/{key}/acquire HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        lockbroker_tests::KEY,
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    s
}

#[tokio::test]
async fn a_departed_waiter_never_holds_the_lock() {
    let broker = Broker::start().await;
    let c = broker.client();
    let held = token(&c.acquire("dc", "holder", 60_000, 0).await.unwrap());
    let conn = raw_waiting_acquire(&broker, "dc", "gone").await;
    until_waiters(&c, "dc", 1).await;
    drop(conn);
    until_waiters(&c, "dc", 0).await;
    c.release("dc", "holder", held).await.unwrap();
    let s = lock_status(&c, "dc").await.unwrap();
    assert!(!s.held, "{s:?}");

    // The race: the client leaves just as the lock is handed to it. The
    // grant is released again, never left held by nobody.
    for round in 0..10 {
        let held = token(&c.acquire("dc", "holder", 60_000, 0).await.unwrap());
        let conn = raw_waiting_acquire(&broker, "dc", "gone").await;
        until_waiters(&c, "dc", 1).await;
        let (_, released) = tokio::join!(async { drop(conn) }, c.release("dc", "holder", held));
        assert_eq!(released.unwrap().status, 200);
        let what = format!("round {round}: the departed waiter's grant was released");
        eventually(&what, Duration::from_secs(5), || async {
            lock_status(&c, "dc")
                .await
                .is_some_and(|s| !s.held && s.waiters == 0)
        })
        .await;
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_waiter_that_times_out_leaves_the_queue() {
    let broker = Broker::start().await;
    let c = broker.client();
    let held = token(&c.acquire("to", "holder", 60_000, 0).await.unwrap());
    let started = Instant::now();
    let r = c.acquire("to", "impatient", 30_000, 300).await.unwrap();
    assert_eq!(r.code(), Some(ErrorCode::LockHeld));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(lock_status(&c, "to").await.unwrap().waiters, 0);
    c.release("to", "holder", held).await.unwrap();
    assert!(!lock_status(&c, "to").await.unwrap().held);
    broker.stop().await;
}

/// Pending waiters in the database's wait queue (any key).
async fn queue_rows(db: &str) -> i64 {
    use sqlx::Row;
    let mut conn = lockbroker_tests::db_conn(db).await;
    sqlx::query("SELECT COUNT(*) FROM waiters WHERE granted_token IS NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0)
}

/// Makes `key` contended through the broker of `c`: "holder" takes it, a
/// waiter "warm" queues (in the database: the key was quiet), and the
/// release hands it on. From then on the broker remembers the key's lease,
/// and its waiters wait in memory. The token "warm" holds it with.
async fn contend(c: &Client, key: &str) -> u64 {
    let base = token(&c.acquire(key, "holder", 60_000, 0).await.unwrap());
    let warm = {
        let (c, key) = (c.clone(), key.to_owned());
        tokio::spawn(async move { c.acquire(&key, "warm", 60_000, 30_000).await.unwrap() })
    };
    until_waiters(c, key, 1).await;
    c.release(key, "holder", base).await.unwrap();
    let warm = warm.await.unwrap();
    assert_eq!(token(&warm), base + 1);
    base + 1
}

/// Waiters of the broker that granted the lease wait in its memory: the
/// database queue stays empty while `GET` counts them, and each release
/// hands on to the next in arrival order with the next token.
#[tokio::test]
async fn waiters_of_the_granting_broker_wait_in_memory() {
    let broker = Broker::start().await;
    let c = broker.client();
    let base = contend(&c, "mem").await;
    let local_before = c.counter("lockbroker_wakeups_total{via=\"local\"}").await;
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(waiter(&c, "mem", &format!("m{i}"), 0));
        until_waiters(&c, "mem", i + 1).await;
    }
    assert_eq!(
        queue_rows(&broker.db).await,
        0,
        "nobody in the database queue"
    );
    c.release("mem", "warm", base).await.unwrap();
    let mut granted = Vec::new();
    for t in tasks {
        granted.push(t.await.unwrap());
    }
    let expected: Vec<(String, u64)> = (0..4).map(|i| (format!("m{i}"), base + 1 + i)).collect();
    assert_eq!(granted, expected, "arrival order, one token each");
    let local = c.counter("lockbroker_wakeups_total{via=\"local\"}").await - local_before;
    assert_eq!(local, 4, "all four handed on in process");
    assert_eq!(queue_rows(&broker.db).await, 0);
    broker.stop().await;
}

/// A key whose holders release as soon as they are granted, starting
/// with every contender queued in the database (the key was not yet
/// contended when they came): the waiters move to the granting broker's
/// memory and stay there. Each newcomer reaches the key while a release
/// of it is under way (the holder lets go at once): it used to be sent to
/// the database queue then, and the key never left it (issue #29's one
/// broker `contended` at 0.35-0.8x). Counted by handoffs in process, not
/// timed.
#[tokio::test]
async fn waiters_move_to_memory_when_holders_release_at_once() {
    const CLIENTS: usize = 6;
    const ROUNDS: u64 = 40;
    let broker = Broker::start().await;
    let c = broker.client();
    let base = token(&c.acquire("hot", "holder", 60_000, 0).await.unwrap());
    let local_before = c.counter("lockbroker_wakeups_total{via=\"local\"}").await;
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let (ci, owner) = (c.clone(), format!("h{i}"));
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let r = ci.acquire("hot", &owner, 30_000, 30_000).await.unwrap();
                assert_eq!(r.status, 200, "{owner}: {r:?}");
                let t = token(&r);
                let rel = ci.release("hot", &owner, t).await.unwrap();
                assert_eq!(rel.status, 200, "{owner} release: {rel:?}");
                tokens.push(t);
            }
            tokens
        }));
        until_waiters(&c, "hot", i as u64 + 1).await;
    }
    assert_eq!(
        queue_rows(&broker.db).await,
        CLIENTS as i64,
        "every contender starts in the database queue"
    );
    c.release("hot", "holder", base).await.unwrap();
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.extend(t.await.unwrap());
    }
    tokens.sort_unstable();
    let grants = CLIENTS as u64 * ROUNDS;
    let expected: Vec<u64> = (1..=grants).map(|i| base + i).collect();
    assert_eq!(tokens, expected, "one token per grant, none skipped");
    let local = c.counter("lockbroker_wakeups_total{via=\"local\"}").await - local_before;
    assert!(
        local * 4 >= grants * 3,
        "{local} of {grants} grants handed on in process: the waiters stayed in the database queue"
    );
    assert_eq!(queue_rows(&broker.db).await, 0);
    broker.stop().await;
}

/// Two brokers on one database, waiters of both on one key: whoever holds
/// it, grants follow arrival order across the brokers (waiters in memory
/// arrived before any queued in the database; later ones queue there).
#[tokio::test]
async fn arrival_order_holds_across_memory_and_the_database_queue() {
    let db = fresh_db_name();
    let a = Broker::start_with(db.clone(), config(&db)).await;
    let b = Broker::start_with(db.clone(), config(&db)).await;
    let (ca, cb) = (a.client(), b.client());
    let owners: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    // Two waiters at the holder's broker first (in memory), then the two
    // brokers take turns (the database queue).
    let clients = [
        ca.clone(),
        ca.clone(),
        cb.clone(),
        ca.clone(),
        cb.clone(),
        ca.clone(),
        cb.clone(),
        ca.clone(),
    ];
    let base = contend(&ca, "mixed").await;
    let mut tasks = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        tasks.push(waiter(&clients[i], "mixed", owner, 0));
        until_waiters(&ca, "mixed", i as u64 + 1).await;
        if i == 1 {
            assert_eq!(queue_rows(&db).await, 0, "the first two wait in memory");
        }
    }
    ca.release("mixed", "warm", base).await.unwrap();
    let mut granted = Vec::new();
    for t in tasks {
        granted.push(
            tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .expect("every waiter served well within its wait")
                .unwrap(),
        );
    }
    granted.sort_by_key(|(_, t)| *t);
    let order: Vec<&str> = granted.iter().map(|(o, _)| o.as_str()).collect();
    let expected: Vec<&str> = owners.iter().map(String::as_str).collect();
    assert_eq!(order, expected);
    let tokens: Vec<u64> = granted.iter().map(|(_, t)| *t).collect();
    assert_eq!(tokens, (1..=8).map(|i| base + i).collect::<Vec<_>>());
    a.shutdown().await;
    b.stop().await;
}

/// A lease granted through one broker and released through another: the
/// waiters in the first broker's memory learn it from its wake loop and
/// are handed the key in order at once (not at the end of their wait); so
/// after an expiry.
#[tokio::test]
async fn waiters_in_memory_follow_a_release_elsewhere_and_an_expiry() {
    let db = fresh_db_name();
    let a = Broker::start_with(db.clone(), config(&db)).await;
    let b = Broker::start_with(db.clone(), config(&db)).await;
    let (ca, cb) = (a.client(), b.client());
    let base = contend(&ca, "elsewhere").await;
    let first = waiter(&ca, "elsewhere", "first", 0);
    until_waiters(&ca, "elsewhere", 1).await;
    let second = waiter(&ca, "elsewhere", "second", 0);
    until_waiters(&ca, "elsewhere", 2).await;
    assert_eq!(queue_rows(&db).await, 0, "both wait in memory");
    let r = cb.release("elsewhere", "warm", base).await.unwrap();
    assert_eq!(r.status, 200);
    let served = tokio::time::timeout(Duration::from_secs(10), async {
        (first.await.unwrap(), second.await.unwrap())
    })
    .await
    .expect("served within 10 s of a 60 s wait");
    // Handed on in arrival order by the broker that granted the lease,
    // which found it freed (the database queue stayed empty).
    assert_eq!((served.0 .1, served.1 .1), (base + 1, base + 2));
    assert_eq!(queue_rows(&db).await, 0);

    // A lease left to run out: its waiter in memory gets it right after.
    let short = token(&ca.acquire("elsewhere", "short", 300, 0).await.unwrap());
    let started = Instant::now();
    let next = ca
        .acquire("elsewhere", "next", 30_000, 20_000)
        .await
        .unwrap();
    assert_eq!(next.status, 200, "{next:?}");
    assert_eq!(token(&next), short + 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    a.shutdown().await;
    b.stop().await;
}

/// Whether `key`'s row names a broker whose memory holds waiters for it
/// (`locks.waiting_at`).
async fn marked(db: &str, key: &str) -> bool {
    use sqlx::Row;
    let mut conn = lockbroker_tests::db_conn(db).await;
    sqlx::query("SELECT waiting_at IS NOT NULL FROM locks WHERE lock_key = ?")
        .bind(key)
        .fetch_optional(&mut conn)
        .await
        .unwrap()
        .is_some_and(|row| row.get::<i64, _>(0) == 1)
}

/// A waiting acquire of `owner` for `key` (30 s lease, `wait_ms`), its
/// reply kept (the lease is not released).
fn wait_for(c: &Client, key: &str, owner: &str, wait_ms: u64) -> tokio::task::JoinHandle<Reply> {
    let (c, key, owner) = (c.clone(), key.to_owned(), owner.to_owned());
    tokio::spawn(async move { c.acquire(&key, &owner, 30_000, wait_ms).await.unwrap() })
}

/// Waiters in one broker's memory are the key's next holders whichever
/// broker the release reaches: a release through another broker leaves
/// the key to them (the row names their broker), so a try at either
/// broker is refused meanwhile and a later waiter queues behind them.
/// Once the last of them holds the key, or the last leaves, the key is
/// plain again: freed elsewhere, the next try takes it at once.
#[tokio::test]
async fn a_release_elsewhere_leaves_the_key_to_the_waiters_in_memory() {
    let db = fresh_db_name();
    let a = Broker::start_with(db.clone(), config(&db)).await;
    let b = Broker::start_with(db.clone(), config(&db)).await;
    let (ca, cb) = (a.client(), b.client());
    let key = "standby";
    let base = contend(&ca, key).await;
    let first = wait_for(&ca, key, "first", 60_000);
    eventually(
        "the waiter in memory marks the key",
        Duration::from_secs(10),
        || marked(&db, key),
    )
    .await;
    assert_eq!(queue_rows(&db).await, 0, "it waits in memory");

    let r = cb.release(key, "warm", base).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // Right after the release, before or after the handoff: no barging.
    for (c, who) in [(&cb, "barger-b"), (&ca, "barger-a")] {
        let r = c.acquire(key, who, 30_000, 0).await.unwrap();
        assert_eq!(r.status, 409, "{who} took the key past the waiter: {r:?}");
    }
    let late = wait_for(&cb, key, "late", 60_000);
    let first = first.await.unwrap();
    assert_eq!(token(&first), base + 1, "the waiter in memory is next");
    until_waiters(&cb, key, 1).await;
    assert!(!marked(&db, key).await, "its last waiter took the mark off");
    let r = cb.release(key, "first", base + 1).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let late = late.await.unwrap();
    assert_eq!(token(&late), base + 2, "then the later waiter");
    let r = cb.release(key, "late", base + 2).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");

    // Nobody waits: a try through the broker that held waiters takes it.
    let again = ca.acquire(key, "again", 30_000, 0).await.unwrap();
    assert_eq!(token(&again), base + 3, "{again:?}");
    // A last waiter in memory whose wait runs out takes the mark off.
    let impatient = ca.acquire(key, "impatient", 30_000, 300).await.unwrap();
    assert_eq!(impatient.status, 409, "{impatient:?}");
    assert!(
        !marked(&db, key).await,
        "the mark left with the last waiter"
    );
    let r = cb.release(key, "again", base + 3).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let after = cb.acquire(key, "after", 30_000, 0).await.unwrap();
    assert_eq!(token(&after), base + 4, "a free key is free: {after:?}");
    a.shutdown().await;
    b.stop().await;
}

/// A waiter in memory whose wait runs out leaves without a trace, and one
/// whose client hangs up never holds the lock; the next one is served.
#[tokio::test]
async fn waiters_in_memory_time_out_and_leave_cleanly() {
    let broker = Broker::start().await;
    let c = broker.client();
    let base = contend(&c, "leave").await;
    let timed_out = c.acquire("leave", "impatient", 30_000, 200).await.unwrap();
    assert_eq!(timed_out.status, 409, "{timed_out:?}");
    assert_eq!(timed_out.code(), Some(ErrorCode::LockHeld));
    until_waiters(&c, "leave", 0).await;
    let next = waiter(&c, "leave", "next", 0);
    until_waiters(&c, "leave", 1).await;
    c.release("leave", "warm", base).await.unwrap();
    let (owner, t) = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("served")
        .unwrap();
    assert_eq!((owner.as_str(), t), ("next", base + 1));
    broker.stop().await;
}
