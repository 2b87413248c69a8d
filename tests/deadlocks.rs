//! Deadlocks between sessions (issue #33), against real brokers and
//! MariaDB: an acquire whose wait would close a cycle of sessions waiting
//! for each other is refused at once (`409 deadlock`, with the cycle), on
//! one broker and across two, when the closing acquires arrive at the same
//! moment too (exactly one refused per cycle), every other waiter is still
//! served, and random waits that close no cycle are never refused.

use std::time::Duration;

use lockbroker_api::{ErrorBody, ErrorCode, Session};
use lockbroker_tests::{config, eventually, Broker, Client, Reply};
use serde_json::json;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);

async fn hold(c: &Client, s: &Session, key: &str, owner: &str) {
    let reply = c
        .post(
            &format!("/v1/locks/{key}/acquire"),
            &json!({"session": s.id, "owner": owner}),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
}

/// Starts `s`'s waiting acquire of `key` (as `owner`) in a task.
fn wait_for(c: &Client, s: &Session, key: &str, owner: &str) -> tokio::task::JoinHandle<Reply> {
    let (c, path) = (c.clone(), format!("/v1/locks/{key}/acquire"));
    let body = json!({"session": s.id, "owner": owner, "wait_ms": 30_000});
    tokio::spawn(async move { c.post(&path, &body).await.unwrap() })
}

async fn waiters(c: &Client, key: &str) -> usize {
    let q: lockbroker_api::KeyWaiters = c
        .get(&format!("/v1/locks/{key}/waiters"))
        .await
        .unwrap()
        .ok();
    q.waiters.len()
}

/// A ring of `n` sessions: session `i` holds `{prefix}{i}` and will wait
/// for `{prefix}{i+1}`.
async fn ring(c: &Client, prefix: &str, n: usize) -> Vec<Session> {
    let mut sessions = Vec::new();
    for i in 0..n {
        let s = c
            .open_session(&json!({"ttl_ms": 60_000, "name": format!("{prefix}{i}")}))
            .await;
        hold(c, &s, &format!("{prefix}{i}"), &format!("h{i}")).await;
        sessions.push(s);
    }
    sessions
}

fn deadlock(reply: &Reply) -> Option<ErrorBody> {
    (reply.code() == Some(ErrorCode::Deadlock)).then(|| reply.parse())
}

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

/// Closes a ring of `n` sessions through `clients` (session `i`'s wait
/// through client `i % len`) with every wait sent at once; exactly one is
/// refused, and ending its session serves every other, one after another.
async fn one_ring(clients: &[Client], prefix: &str, n: usize) {
    let c = &clients[0];
    let s = ring(c, prefix, n).await;
    let waits: Vec<_> = (0..n)
        .map(|i| {
            let via = &clients[i % clients.len()];
            wait_for(
                via,
                &s[i],
                &format!("{prefix}{}", (i + 1) % n),
                &format!("w{i}"),
            )
        })
        .collect();
    // The refused one answers at once; the others wait.
    let mut refused = None;
    let mut pending = Vec::new();
    for (i, w) in waits.into_iter().enumerate() {
        pending.push((i, w));
    }
    eventually("one is refused", WAIT, || async {
        pending.iter().any(|(_, w)| w.is_finished())
    })
    .await;
    let mut still = Vec::new();
    for (i, w) in pending {
        if w.is_finished() {
            let reply = w.await.unwrap();
            let body = deadlock(&reply).unwrap_or_else(|| panic!("{prefix}: {reply:?}"));
            assert_eq!(body.error.cycle.unwrap().len(), n, "{prefix}");
            assert!(refused.replace(i).is_none(), "{prefix}: refused twice");
        } else {
            still.push((i, w));
        }
    }
    let refused = refused.unwrap();
    assert_eq!(still.len(), n - 1);
    eventually("the others wait", WAIT, || async {
        let mut queued = 0;
        for i in 0..n {
            queued += waiters(c, &format!("{prefix}{i}")).await;
        }
        queued == n - 1
    })
    .await;
    // Ending the refused session hands its key to the one waiting for it,
    // whose session then ends, and so on round: every wait is served.
    let mut ending = refused;
    for _ in 0..n - 1 {
        assert_eq!(c.close_session(&s[ending].id).await.status, 200);
        let next = (ending + n - 1) % n;
        let at = still.iter().position(|(i, _)| *i == next).unwrap();
        let (_, w) = still.remove(at);
        let reply = w.await.unwrap();
        assert_eq!(reply.status, 200, "{prefix}: w{next}: {reply:?}");
        ending = next;
    }
    assert_eq!(c.close_session(&s[ending].id).await.status, 200);
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
