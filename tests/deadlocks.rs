//! Deadlocks between sessions (issue #33), against real brokers and
//! MariaDB: an acquire whose wait would close a cycle of sessions waiting
//! for each other is refused at once (`409 deadlock`, with the cycle), on
//! one broker and across two, when the closing acquires arrive at the same
//! moment too (exactly one refused per cycle), every other waiter is still
//! served, and random waits that close no cycle are never refused. Each
//! refusal is a `deadlock` event (streams) and is listed by
//! `GET /v1/waits-for`; a tenant's policy (`plugins/fixtures/deadlocks`:
//! `plain-*` keys off, `trap-*` traps) leaves keys to their timeouts.

use std::time::Duration;

use lockbroker::config::TenantConfig;
use lockbroker_api::{CycleStep, ErrorCode, WaitsFor};
use lockbroker_tests::{
    config, db_conn, eventually, fresh_db_name,
    rings::{deadlock, hold, one_ring, ring, wait_for, wait_ms, waiters},
    server_url, Broker, Client, PolicyDir, SseStream, KEY,
};
use serde_json::json;
use sqlx::MySqlPool;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_wait_that_closes_a_cycle_is_refused_with_the_cycle() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = ring(&c, "two-", 2).await;
    let first = wait_for(&c, &s[0], "two-1", "w0");
    eventually("the first waits", WAIT, || async {
        waiters(&c, "two-1").await == 1
    })
    .await;
    let closing = wait_for(&c, &s[1], "two-0", "w1").await.unwrap();
    assert_eq!(closing.status, 409, "{closing:?}");
    let body = deadlock(&closing).expect("a deadlock");
    let cycle = body.error.cycle.expect("the cycle");
    let steps: Vec<_> = cycle
        .iter()
        .map(|c| {
            (
                c.session.as_str(),
                c.owner.as_str(),
                c.storage_key.as_str(),
                c.kind.as_str(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            (s[1].id.as_str(), "w1", "two-0", "lock"),
            (s[0].id.as_str(), "w0", "two-1", "lock")
        ]
    );
    // Nothing else is disturbed: the first still waits, and is served when
    // the refused session lets its key go.
    assert_eq!(
        waiters(&c, "two-0").await,
        0,
        "the refused wait was not queued"
    );
    assert_eq!(waiters(&c, "two-1").await, 1);
    assert_eq!(c.close_session(&s[1].id).await.status, 200);
    assert_eq!(first.await.unwrap().status, 200);
    // Counted.
    let metrics = broker
        .client_with(None)
        .get("/metrics")
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("lockbroker_deadlocks_total{tenant=\"default\"} 1"),
        "{metrics}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_session_waiting_for_its_own_key_or_a_plain_lease_is_no_deadlock() {
    let broker = Broker::start().await;
    let c = broker.client();
    let s = c.open_session(&json!({"ttl_ms": 60_000})).await;
    // Two tasks of one process share the session: one holds, one waits.
    hold(&c, &s, "own", "task-a").await;
    let own = wait_for(&c, &s, "own", "task-b");
    eventually("task-b waits", WAIT, || async {
        waiters(&c, "own").await == 1
    })
    .await;
    // Plain leases are outside the graph: a plain holder and a plain
    // waiter make no cycle with a session.
    let plain: lockbroker_api::Lease = c.acquire("plain", "p", 60_000, 0).await.unwrap().ok();
    let in_session = wait_for(&c, &s, "plain", "task-c");
    eventually("task-c waits", WAIT, || async {
        waiters(&c, "plain").await == 1
    })
    .await;
    let reply = c.acquire("own", "p", 60_000, 200).await.unwrap();
    assert_eq!(reply.code(), Some(ErrorCode::LockHeld), "{reply:?}");
    c.release("plain", "p", plain.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    assert_eq!(in_session.await.unwrap().status, 200);
    assert_eq!(c.close_session(&s.id).await.status, 200);
    let _ = own.await.unwrap();
    broker.stop().await;
}

#[tokio::test]
async fn cycles_of_two_three_and_five_sessions_are_refused_once_on_one_broker() {
    let broker = Broker::start().await;
    let c = broker.client();
    for round in 0..3 {
        for n in [2, 3, 5] {
            one_ring(std::slice::from_ref(&c), &format!("one-{round}-{n}-"), n).await;
        }
    }
    broker.stop().await;
}

#[tokio::test]
async fn cycles_through_two_brokers_are_refused_once() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let clients = [first.client(), second.client()];
    for round in 0..3 {
        for n in [2, 3, 5] {
            one_ring(&clients, &format!("two-{round}-{n}-"), n).await;
        }
    }
    second.shutdown().await;
    first.stop().await;
}

/// A session that holds nothing when it starts to wait closes no cycle,
/// so its wait is queued unchecked; yet it stays an edge of the graph.
/// Each round: session `t` holds `K`; at the same moment, through two
/// brokers, session `s` waits for `K` (holding nothing yet), `s` takes
/// the free `K3` with another owner, and `t` waits for `K3`. Whichever
/// order they land in: if `s` ends up holding `K3` while both wait, that
/// is a cycle and exactly one of the two waits is refused; if `t` took
/// `K3` first, nobody is refused. Either way, ending the sessions serves
/// or ends every wait (none is left to its timeout).
#[tokio::test]
async fn a_session_that_held_nothing_when_it_waited_is_still_in_the_cycle() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (a, b) = (first.client(), second.client());
    let mut cycles = 0;
    for round in 0..12 {
        let (k, k3) = (format!("empty-{round}-k"), format!("empty-{round}-k3"));
        let t = a.open_session(&json!({"ttl_ms": 60_000})).await;
        let s = a.open_session(&json!({"ttl_ms": 60_000})).await;
        hold(&a, &t, &k, "t-holds").await;
        let s_waits = wait_for(&a, &s, &k, "s-waits");
        let s_takes = wait_for(&b, &s, &k3, "s-takes");
        let t_waits = wait_for(if round % 2 == 0 { &b } else { &a }, &t, &k3, "t-waits");
        // Settled: each of the three either answered or is queued.
        eventually("the three settle", WAIT, || async {
            let done = [&s_waits, &s_takes, &t_waits]
                .iter()
                .filter(|h| h.is_finished())
                .count();
            done + waiters(&a, &k).await + waiters(&a, &k3).await == 3
        })
        .await;
        let took = s_takes.is_finished();
        let mut refused = 0;
        let mut pending = Vec::new();
        for (name, h) in [
            ("s-waits", s_waits),
            ("s-takes", s_takes),
            ("t-waits", t_waits),
        ] {
            if !h.is_finished() {
                pending.push(h);
                continue;
            }
            let reply = h.await.unwrap();
            if deadlock(&reply).is_some() {
                assert_ne!(name, "s-takes", "round {round}: {reply:?}");
                refused += 1;
            } else {
                assert_eq!(reply.status, 200, "round {round}: {name}: {reply:?}");
            }
        }
        if took {
            // s holds K3 and waits for K (t's); t waits for K3: a cycle.
            assert_eq!(refused, 1, "round {round}: the cycle refused once");
            cycles += 1;
        } else {
            // t took K3 first: s waits for both of t's keys, no cycle.
            assert_eq!(refused, 0, "round {round}: a false refusal");
        }
        assert_eq!(a.close_session(&t.id).await.status, 200);
        assert_eq!(a.close_session(&s.id).await.status, 200);
        for h in pending {
            let reply = tokio::time::timeout(WAIT, h)
                .await
                .expect("left waiting")
                .unwrap();
            assert_ne!(
                reply.code(),
                Some(ErrorCode::Deadlock),
                "round {round}: {reply:?}"
            );
        }
    }
    assert!(cycles > 0, "no round formed the cycle");
    second.shutdown().await;
    first.stop().await;
}

/// The race that a session's row, held by its acquire, closes, made to
/// happen every round: `s` (holding nothing) starts to wait for `K`, and
/// its enqueuing transaction is held between its check and its commit
/// (another connection holds `LOCK TABLES waiters READ`, so the insert of
/// `s`'s waiter waits for it); meanwhile `s` takes the free `K3`, and `t`
/// (holding `K`) waits for `K3`. `t`'s check reaches `s`, the holder of
/// `K3`, and pins it: it must wait for `s`'s transaction and then see
/// `s`'s wait, a cycle, and refuse `t`. Were `s`'s row not held, `t`'s
/// check would read `s`'s waits before the wait is there, and both would
/// wait out their `wait_ms`.
#[tokio::test]
async fn a_check_that_reaches_a_session_still_enqueuing_waits_and_sees_its_wait() {
    // Time enough (a lock wait of 5 s) for the test to hold s's enqueue
    // on a busy machine.
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.db_timeout_ms = 10_000;
    let broker = Broker::start_with(db, cfg).await;
    let c = broker.client();
    let look = MySqlPool::connect(&format!("{}/{}", server_url(), broker.db))
        .await
        .unwrap();
    for round in 0..3 {
        let (k, k3) = (format!("mid-{round}-k"), format!("mid-{round}-k3"));
        let t = c.open_session(&json!({"ttl_ms": 60_000})).await;
        let s = c.open_session(&json!({"ttl_ms": 60_000})).await;
        hold(&c, &t, &k, "t-holds").await;
        let mut blocker = db_conn(&broker.db).await;
        sqlx::query("LOCK TABLES waiters READ")
            .execute(&mut blocker)
            .await
            .unwrap();
        let s_waits = wait_ms(&c, &s, &k, "s-waits", 20_000);
        eventually("s's wait is checked, its insert held", WAIT, || {
            waiting(&look, &broker.db, "INSERT INTO waiters", 1)
        })
        .await;
        hold(&c, &s, &k3, "s-takes").await;
        let t_waits = wait_ms(&c, &t, &k3, "t-waits", 20_000);
        // t's check either pins s (and waits for s's transaction), or
        // (were s's row not held) has read s's waits already and waits at
        // its own insert.
        eventually("t's check has reached s", WAIT, || async {
            running(&look, &broker.db, "UPDATE sessions SET wait_checks").await
                || waiting(&look, &broker.db, "INSERT INTO waiters", 2).await
        })
        .await;
        sqlx::query("UNLOCK TABLES")
            .execute(&mut blocker)
            .await
            .unwrap();
        let refused = tokio::time::timeout(WAIT, t_waits)
            .await
            .expect("t's wait answered at once")
            .unwrap();
        let cycle = deadlock(&refused)
            .unwrap_or_else(|| panic!("round {round}: t's wait closes a cycle: {refused:?}"))
            .error
            .cycle
            .expect("the cycle");
        let steps: Vec<_> = cycle
            .iter()
            .map(|l| (l.session.as_str(), l.storage_key.as_str()))
            .collect();
        assert_eq!(
            steps,
            [(t.id.as_str(), k3.as_str()), (s.id.as_str(), k.as_str())]
        );
        // s still waits, and is served when t's session ends.
        assert!(!s_waits.is_finished(), "round {round}");
        assert_eq!(c.close_session(&t.id).await.status, 200);
        let served = tokio::time::timeout(WAIT, s_waits).await.unwrap().unwrap();
        assert_eq!(served.status, 200, "round {round}: {served:?}");
        assert_eq!(c.close_session(&s.id).await.status, 200);
    }
    broker.stop().await;
}

/// How many statements of `db` whose text starts with `prefix` run in a
/// state like `state` (`%`: any).
async fn statements(look: &MySqlPool, db: &str, prefix: &str, state: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = ? AND INFO LIKE CONCAT(?, '%') AND STATE LIKE ?",
    )
    .bind(db)
    .bind(prefix)
    .bind(state)
    .fetch_one(look)
    .await
    .unwrap()
}

/// Whether a statement of `db` whose text starts with `prefix` runs.
async fn running(look: &MySqlPool, db: &str, prefix: &str) -> bool {
    statements(look, db, prefix, "%").await > 0
}

/// Whether `n` statements (at least) of `db` whose text starts with
/// `prefix` wait for a table's lock.
async fn waiting(look: &MySqlPool, db: &str, prefix: &str, n: i64) -> bool {
    statements(look, db, prefix, "Waiting for table%").await >= n
}

#[tokio::test]
async fn random_waits_in_one_key_order_are_never_refused() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let clients = [first.client(), second.client()];
    // Twenty sessions, each taking random keys in ascending order (the
    // classic way to never deadlock), holding them briefly: 1,000
    // acquires, many of them waiting, none closing a cycle.
    let mut tasks = Vec::new();
    for t in 0..20usize {
        let c = clients[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let s = c.open_session(&json!({"ttl_ms": 60_000})).await;
            let mut acquired = 0;
            let mut rng = t as u64 + 1;
            while acquired < 50 {
                // xorshift: a few keys of 0..12, ascending.
                let mut keys = Vec::new();
                for _ in 0..3 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    keys.push(rng % 12);
                }
                keys.sort_unstable();
                keys.dedup();
                let mut held = Vec::new();
                for k in keys {
                    let owner = format!("t{t}-{acquired}");
                    let reply = c
                        .post(
                            &format!("/v1/locks/rnd-{k}/acquire"),
                            &json!({"session": s.id, "owner": owner, "wait_ms": 20_000}),
                        )
                        .await
                        .unwrap();
                    assert_ne!(
                        reply.code(),
                        Some(ErrorCode::Deadlock),
                        "a false refusal: {reply:?}"
                    );
                    assert_eq!(reply.status, 200, "{reply:?}");
                    let lease: lockbroker_api::Lease = reply.parse();
                    held.push((k, owner, lease.token));
                    acquired += 1;
                }
                for (k, owner, token) in held.into_iter().rev() {
                    c.release(&format!("rnd-{k}"), &owner, token)
                        .await
                        .unwrap()
                        .ok::<lockbroker_api::ReleaseResponse>();
                }
            }
            assert_eq!(c.close_session(&s.id).await.status, 200);
            acquired
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert!(total >= 1000, "{total}");
    second.shutdown().await;
    first.stop().await;
}

/// The steps of a cycle as (session, owner, key, kind).
fn steps(cycle: &[CycleStep]) -> Vec<(String, String, String, String)> {
    cycle
        .iter()
        .map(|c| {
            let c = c.clone();
            (c.session, c.owner, c.storage_key, c.kind)
        })
        .collect()
}

#[tokio::test]
async fn a_refusal_is_an_event_and_listed_by_the_wait_for_graph() {
    let broker = Broker::start().await;
    let c = broker.client();
    let mut stream = SseStream::open(broker.url(), "/v1/events?prefix=ev-", KEY, &[]).await;
    assert_eq!(stream.status, 200);
    let s = ring(&c, "ev-", 2).await;
    let first = wait_for(&c, &s[0], "ev-1", "w0");
    eventually("the first waits", WAIT, || async {
        waiters(&c, "ev-1").await == 1
    })
    .await;
    let closing = wait_for(&c, &s[1], "ev-0", "w1").await.unwrap();
    let refused = deadlock(&closing).expect("a deadlock").error.cycle.unwrap();
    // The stream: the two grants, then the refusal with its cycle.
    let event = loop {
        let event = stream.next(WAIT).await;
        if event.event == "deadlock" {
            break event;
        }
        assert_eq!(event.event, "granted", "{event:?}");
    };
    let data = event.json();
    assert_eq!(
        (
            &data["kind"],
            &data["storage_key"],
            &data["owner"],
            &data["session"],
            &data["token"]
        ),
        (
            &json!("lock"),
            &json!("ev-0"),
            &json!("w1"),
            &json!(s[1].id),
            &json!(0)
        ),
        "{event:?}"
    );
    let cycle: Vec<CycleStep> = serde_json::from_value(data["cycle"].clone()).unwrap();
    assert_eq!(steps(&cycle), steps(&refused));
    // The wait-for graph lists it (a refused cycle never shows as edges),
    // for its prefix only.
    let graph: WaitsFor = c.get("/v1/waits-for?prefix=ev-").await.unwrap().ok();
    assert_eq!(graph.refused.len(), 1, "{graph:?}");
    assert_eq!(steps(&graph.refused[0].cycle), steps(&refused));
    assert!(graph.edges.iter().all(|e| !e.in_cycle), "{graph:?}");
    let other: WaitsFor = c.get("/v1/waits-for?prefix=other-").await.unwrap().ok();
    assert!(other.refused.is_empty(), "{other:?}");
    // Not a change of the key's leases: not in its history.
    let history: lockbroker_api::LockHistory = c.get("/v1/locks/ev-0/history").await.unwrap().ok();
    assert!(
        history
            .events
            .iter()
            .all(|e| e.event != lockbroker_api::LockEventKind::Deadlock),
        "{history:?}"
    );
    assert_eq!(c.close_session(&s[1].id).await.status, 200);
    assert_eq!(first.await.unwrap().status, 200);
    broker.stop().await;
}

/// A broker whose tenant `dl` (key `dl-key`) runs
/// `plugins/fixtures/deadlocks` (`plain-*` keys unchecked, `trap-*` keys
/// trap), with a client of it.
async fn broker_on_deadlocks_policy() -> (PolicyDir, Broker, Client) {
    let dir = PolicyDir::new("lb-deadlocks");
    dir.install("fixtures/deadlocks.wasm", "policy.wasm");
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.policy_dir = dir.0.clone();
    cfg.tenants.push(TenantConfig {
        policy: Some("policy.wasm".to_owned()),
        // Not a test of the deadline: a loaded machine can deschedule a
        // call past the 5 ms default.
        policy_deadline_ms: Some(200),
        ..TenantConfig::new("dl", "dl-key")
    });
    cfg.validate().unwrap();
    let broker = Broker::start_with(db, cfg).await;
    let c = broker.client_with(Some("dl-key"));
    (dir, broker, c)
}

#[tokio::test]
async fn a_policy_leaves_keys_it_turns_off_to_their_timeouts() {
    let (_dir, broker, c) = broker_on_deadlocks_policy().await;
    // Off for `plain-*`: the closing wait waits out its budget, and is
    // answered as any wait that ran out (not a deadlock).
    let s = ring(&c, "plain-", 2).await;
    let first = wait_for(&c, &s[0], "plain-1", "w0");
    eventually("the first waits", WAIT, || async {
        waiters(&c, "plain-1").await == 1
    })
    .await;
    let started = std::time::Instant::now();
    let closing = wait_ms(&c, &s[1], "plain-0", "w1", 700).await.unwrap();
    assert_eq!(closing.code(), Some(ErrorCode::LockHeld), "{closing:?}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert_eq!(c.close_session(&s[1].id).await.status, 200);
    assert_eq!(first.await.unwrap().status, 200);
    // On for other keys, and for keys whose call traps (the fallback).
    for prefix in ["checked-", "trap-"] {
        let s = ring(&c, prefix, 2).await;
        let first = wait_for(&c, &s[0], &format!("{prefix}1"), "w0");
        eventually("the first waits", WAIT, || async {
            waiters(&c, &format!("{prefix}1")).await == 1
        })
        .await;
        let closing = wait_for(&c, &s[1], &format!("{prefix}0"), "w1")
            .await
            .unwrap();
        assert!(deadlock(&closing).is_some(), "{prefix}: {closing:?}");
        assert_eq!(c.close_session(&s[1].id).await.status, 200);
        assert_eq!(first.await.unwrap().status, 200);
    }
    // A cycle through an unchecked wait is refused when a checked wait
    // closes it: s1 waits for plain-x (unchecked) first, then s0's wait
    // for `mixed` closes the cycle.
    let s0 = c.open_session(&json!({"ttl_ms": 60_000})).await;
    let s1 = c.open_session(&json!({"ttl_ms": 60_000})).await;
    hold(&c, &s0, "plain-x", "h0").await;
    hold(&c, &s1, "mixed", "h1").await;
    let unchecked = wait_for(&c, &s1, "plain-x", "w1");
    eventually("s1 waits", WAIT, || async {
        waiters(&c, "plain-x").await == 1
    })
    .await;
    let closing = wait_for(&c, &s0, "mixed", "w0").await.unwrap();
    let cycle = deadlock(&closing).expect("a deadlock").error.cycle.unwrap();
    assert_eq!(
        steps(&cycle),
        [
            (s0.id.clone(), "w0".into(), "mixed".into(), "lock".into()),
            (s1.id.clone(), "w1".into(), "plain-x".into(), "lock".into()),
        ]
    );
    assert_eq!(c.close_session(&s0.id).await.status, 200);
    assert_eq!(unchecked.await.unwrap().status, 200);
    // Asked on every session wait for a key another session held (eight:
    // two per ring and the two waits of the last cycle); both `trap-`
    // calls fell back (counted). (At least: a wait retried after a
    // database conflict is asked again.)
    let labels = "{tenant=\"dl\",export=\"deadlocks\"}";
    let metrics = broker.client_with(None);
    let calls = metrics
        .counter(&format!("lockbroker_policy_calls_total{labels}"))
        .await;
    assert!(calls >= 8, "{calls}");
    let fallbacks = metrics
        .counter(&format!("lockbroker_policy_fallbacks_total{labels}"))
        .await;
    assert!(fallbacks >= 2, "{fallbacks}");
    broker.stop().await;
}

#[tokio::test]
async fn a_cycle_through_a_semaphore_and_a_rwlock_is_refused() {
    let broker = Broker::start().await;
    let c = broker.client();
    let post = |path: &'static str, body: serde_json::Value| {
        let c = c.clone();
        async move { c.post(path, &body).await.unwrap() }
    };
    let s0 = c.open_session(&json!({"ttl_ms": 60_000})).await;
    let s1 = c.open_session(&json!({"ttl_ms": 60_000})).await;
    // s0 holds the semaphore's only permit, s1 reads the rwlock.
    let permit = json!({"owner": "h0", "permits": 1, "session": s0.id});
    let reply = post("/v1/semaphores/k-sem/acquire", permit).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let read = json!({"owner": "h1", "mode": "read", "session": s1.id});
    assert_eq!(post("/v1/rwlocks/k-rw/acquire", read).await.status, 200);
    // s0 waits to write k-rw (held by s1's reader) ...
    let write = json!({"owner": "w0", "mode": "write", "session": s0.id, "wait_ms": 30_000});
    let writer = tokio::spawn(post("/v1/rwlocks/k-rw/acquire", write));
    eventually("s0 waits for k-rw", WAIT, || async {
        let q: lockbroker_api::KeyWaiters = c.get("/v1/rwlocks/k-rw/waiters").await.unwrap().ok();
        q.waiters.len() == 1
    })
    .await;
    // ... so s1's wait for the semaphore closes the cycle.
    let wait = json!({"owner": "w1", "permits": 1, "session": s1.id, "wait_ms": 30_000});
    let closing = post("/v1/semaphores/k-sem/acquire", wait).await;
    let cycle = deadlock(&closing).expect("a deadlock").error.cycle.unwrap();
    assert_eq!(
        steps(&cycle),
        [
            (
                s1.id.clone(),
                "w1".into(),
                "k-sem".into(),
                "semaphore".into()
            ),
            (s0.id.clone(), "w0".into(), "k-rw".into(), "rwlock".into()),
        ]
    );
    assert_eq!(c.close_session(&s1.id).await.status, 200);
    assert_eq!(writer.await.unwrap().status, 200);
    broker.stop().await;
}
