//! Multi-locks: all or none, storage-key order, per-key tokens, waiting
//! without a partial set, release with handoff, renewal, bad input, and a
//! stress of overlapping multi-locks beside single-key clients checked by
//! the history checker.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lockbroker_tests::{
    eventually,
    history::{Op, Outcome, Request},
    Broker, History,
};
use lockbroker_tests::{Client, Reply};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

async fn acquire(c: &Client, keys: &[&str], owner: &str, ttl_ms: u64, wait_ms: u64) -> Reply {
    c.post(
        "/v1/multilock/acquire",
        &json!({"keys": keys, "owner": owner, "ttl_ms": ttl_ms, "wait_ms": wait_ms}),
    )
    .await
    .unwrap()
}

/// The `locks` of a grant as (key, token) pairs.
fn held(grant: &Reply) -> Vec<Value> {
    grant.json()["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|l| json!({"key": l["key"], "token": l["token"]}))
        .collect()
}

fn token_of(grant: &Reply, key: &str) -> u64 {
    grant.json()["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == key)
        .and_then(|l| l["token"].as_u64())
        .unwrap_or_else(|| panic!("no {key} in {:?}", grant.body))
}

async fn release(c: &Client, owner: &str, locks: Vec<Value>) -> Reply {
    c.post(
        "/v1/multilock/release",
        &json!({"owner": owner, "locks": locks}),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn all_or_none_in_storage_key_order_with_a_token_per_key() {
    let broker = Broker::start().await;
    let c = broker.client();

    // `b` is held by a single-key client: the multi-lock gets nothing.
    let single = c.acquire("b", "solo", 30_000, 0).await.unwrap();
    let tb = single.json()["token"].as_u64().unwrap();
    let refused = acquire(&c, &["c", "b", "a"], "multi", 30_000, 0).await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.code(), Some(lockbroker_api::ErrorCode::LockHeld));
    for key in ["a", "c"] {
        assert_eq!(c.status(key).await.unwrap().json()["held"], false, "{key}");
    }
    c.release("b", "solo", tb).await.unwrap();

    let grant = acquire(&c, &["c", "b", "a"], "multi", 30_000, 0).await;
    assert_eq!(grant.status, 200, "{:?}", grant.body);
    assert_eq!(grant.json()["owner"], "multi");
    assert_eq!(grant.json()["ttl_ms"], 30_000);
    let body = grant.json();
    let keys: Vec<&str> = body["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["a", "b", "c"], "storage-key order");
    assert!(token_of(&grant, "b") > tb, "tokens continue per key");
    for l in grant.json()["locks"].as_array().unwrap() {
        assert_eq!(l["hold_count"], 1);
        assert_eq!(l["storage_key"], l["key"]);
    }
    // Each key is an ordinary lock now.
    for key in ["a", "b", "c"] {
        let status = c.status(key).await.unwrap();
        assert_eq!(status.json()["owner"], "multi");
        assert_eq!(status.json()["token"], token_of(&grant, key));
        let other = c.acquire(key, "solo", 30_000, 0).await.unwrap();
        assert_eq!(other.status, 409);
    }
    // An overlapping multi-lock takes none of its keys.
    let overlap = acquire(&c, &["c", "d"], "other", 30_000, 0).await;
    assert_eq!(overlap.status, 409);
    assert_eq!(c.status("d").await.unwrap().json()["held"], false);

    // The same owner re-enters, as with single locks.
    let again = acquire(&c, &["a", "d"], "multi", 30_000, 0).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(token_of(&again, "a"), token_of(&grant, "a"));
    assert_eq!(again.json()["locks"][0]["hold_count"], 2);

    let released = release(&c, "multi", held(&grant)).await;
    assert_eq!(released.status, 200, "{:?}", released.body);
    assert_eq!(
        released.json(),
        json!({"locks": [
            {"key": "a", "released": false, "hold_count": 1, "lost": false},
            {"key": "b", "released": true, "hold_count": 0, "lost": false},
            {"key": "c", "released": true, "hold_count": 0, "lost": false}]})
    );
    let rest = release(&c, "multi", held(&again)).await;
    assert_eq!(rest.status, 200, "{:?}", rest.body);
    for key in ["a", "b", "c", "d"] {
        assert_eq!(c.status(key).await.unwrap().json()["held"], false, "{key}");
    }
    // Nothing held by those tokens any more: 409, nothing changes.
    let stale = release(&c, "multi", held(&grant)).await;
    assert_eq!(stale.code(), Some(lockbroker_api::ErrorCode::LeaseLost));

    let next = acquire(&c, &["a", "b", "c"], "next", 30_000, 0).await;
    for key in ["a", "b", "c"] {
        assert!(token_of(&next, key) > token_of(&grant, key), "{key}");
    }
    broker.stop().await;
}

#[tokio::test]
async fn a_waiting_multi_lock_gets_the_set_when_it_frees_and_holds_nothing_before() {
    let broker = Broker::start().await;
    let c = broker.client();
    let first = acquire(&c, &["x", "y"], "m1", 30_000, 0).await;
    assert_eq!(first.status, 200);

    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, &["y", "z"], "m2", 30_000, 20_000).await })
    };
    eventually("m2 is queued on y", WAIT, || async {
        c.status("y").await.unwrap().json()["waiters"] == 1
    })
    .await;
    // While it waits it holds nothing: z is free for others.
    let z = c.acquire("z", "solo", 30_000, 0).await.unwrap();
    assert_eq!(z.status, 200);
    c.release("z", "solo", z.json()["token"].as_u64().unwrap())
        .await
        .unwrap();

    let released = release(&c, "m1", held(&first)).await;
    assert_eq!(released.status, 200);
    let got = waiting.await.unwrap();
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert!(token_of(&got, "y") > token_of(&first, "y"));
    assert_eq!(c.status("y").await.unwrap().json()["owner"], "m2");
    assert_eq!(c.status("z").await.unwrap().json()["owner"], "m2");
    broker.stop().await;
}

#[tokio::test]
async fn a_waiting_multi_lock_handed_one_key_passes_it_on_while_another_is_busy() {
    let broker = Broker::start().await;
    let c = broker.client();
    let p = c.acquire("p", "hold-p", 30_000, 0).await.unwrap();
    let q = c.acquire("q", "hold-q", 30_000, 0).await.unwrap();
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, &["p", "q"], "m", 30_000, 20_000).await })
    };
    eventually("m is queued on p", WAIT, || async {
        c.status("p").await.unwrap().json()["waiters"] == 1
    })
    .await;
    // p is handed to m, which cannot have q: it must pass p on (here: free
    // it) and queue on q, holding nothing.
    c.release("p", "hold-p", p.json()["token"].as_u64().unwrap())
        .await
        .unwrap();
    eventually("m moved to q's queue and let p go", WAIT, || async {
        let p = c.status("p").await.unwrap().json();
        let q = c.status("q").await.unwrap().json();
        p["held"] == false && q["waiters"] == 1
    })
    .await;
    c.release("q", "hold-q", q.json()["token"].as_u64().unwrap())
        .await
        .unwrap();
    let got = waiting.await.unwrap();
    assert_eq!(got.status, 200, "{:?}", got.body);
    // p was granted to m twice (handed, then with the set): its token went
    // up by two, strictly, and nobody saw the first.
    assert!(token_of(&got, "p") > p.json()["token"].as_u64().unwrap());
    broker.stop().await;
}

#[tokio::test]
async fn renew_is_all_or_none() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant = acquire(&c, &["r1", "r2"], "m", 5_000, 0).await;
    let locks = held(&grant);
    let renewed = c
        .post(
            "/v1/multilock/renew",
            &json!({"owner": "m", "ttl_ms": 60_000, "locks": locks}),
        )
        .await
        .unwrap();
    assert_eq!(renewed.status, 200, "{:?}", renewed.body);
    assert_eq!(renewed.json()["ttl_ms"], 60_000);
    let expiry = |r: &Reply, i: usize| {
        r.json()["locks"][i]["expires_at"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(expiry(&renewed, 0) > expiry(&grant, 0));

    // One stale token: nothing is renewed.
    let bad = json!([{"key": "r1", "token": token_of(&grant, "r1")},
                     {"key": "r2", "token": token_of(&grant, "r2") + 7}]);
    let refused = c
        .post(
            "/v1/multilock/renew",
            &json!({"owner": "m", "ttl_ms": 100_000, "locks": bad}),
        )
        .await
        .unwrap();
    assert_eq!(refused.code(), Some(lockbroker_api::ErrorCode::LeaseLost));
    let status = c.status("r1").await.unwrap();
    assert_eq!(
        status.json()["expires_at"].as_str().unwrap(),
        expiry(&renewed, 0)
    );
    broker.stop().await;
}

#[tokio::test]
async fn bad_requests_are_400() {
    let broker = Broker::start().await;
    let c = broker.client();
    let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
    let sixty_four: Vec<&str> = many[..64].iter().map(String::as_str).collect();
    let cases = [
        json!({"keys": many, "owner": "m"}),
        json!({"keys": [], "owner": "m"}),
        json!({"keys": ["a", "b", "a"], "owner": "m"}),
        json!({"keys": ["a"], "owner": ""}),
        json!({"keys": ["a"], "owner": "m", "ttl_ms": 5}),
        json!({"keys": "a", "owner": "m"}),
        json!({"owner": "m"}),
    ];
    for body in cases {
        let reply = c.post("/v1/multilock/acquire", &body).await.unwrap();
        assert_eq!(reply.status, 400, "{body}: {:?}", reply.body);
        assert_eq!(reply.code(), Some(lockbroker_api::ErrorCode::BadRequest));
    }
    assert_eq!(c.status("a").await.unwrap().json()["held"], false);
    let empty = c
        .post("/v1/multilock/release", &json!({"owner": "m", "locks": []}))
        .await
        .unwrap();
    assert_eq!(empty.status, 400);
    // A key the naming policy rejects is 422; the whole set is refused.
    let invalid = acquire(&c, &["fine", "bad\nkey"], "m", 30_000, 0).await;
    assert_eq!(invalid.status, 422);
    assert_eq!(c.status("fine").await.unwrap().json()["held"], false);
    // 64 keys are fine.
    let all = acquire(&c, &sixty_four, "m", 30_000, 0).await;
    assert_eq!(all.status, 200, "{:?}", all.body);
    assert_eq!(all.json()["locks"].as_array().unwrap().len(), 64);
    // Wrong method, unknown action, no key.
    assert_eq!(c.get("/v1/multilock/acquire").await.unwrap().status, 405);
    assert_eq!(
        c.post("/v1/multilock/steal", &json!({}))
            .await
            .unwrap()
            .status,
        404
    );
    let anonymous = broker.client_with(None);
    let unauth = anonymous
        .post(
            "/v1/multilock/acquire",
            &json!({"keys": ["a"], "owner": "m"}),
        )
        .await
        .unwrap();
    assert_eq!(unauth.status, 401);
    broker.stop().await;
}

/// Records a multi-lock answer in the history as one operation per key, so
/// that the checker judges each key's holds and tokens, whoever took them.
fn record_multi(
    history: &History,
    owner: &str,
    request: Request,
    keys: &[String],
    sent: Instant,
    reply: &Reply,
) {
    let answered = Instant::now();
    let body = reply.json();
    for key in keys {
        let entry = body["locks"]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["key"] == key.as_str()));
        let outcome = Outcome::Reply {
            status: reply.status,
            token: entry.and_then(|e| e["token"].as_u64()),
            hold_count: entry
                .and_then(|e| e["hold_count"].as_u64())
                .and_then(|n| u32::try_from(n).ok()),
            released: entry.and_then(|e| e["released"].as_bool()),
        };
        history.record(Op {
            key: key.clone(),
            owner: owner.to_owned(),
            request,
            sent,
            answered,
            outcome,
        });
    }
}

/// 16 clients take random 3-of-8 multi-locks while 4 single-key clients
/// take the same keys: nobody deadlocks or times out while keys free up,
/// and per key no two holds overlap and tokens only go up.
#[tokio::test]
async fn overlapping_multi_locks_and_single_locks_never_deadlock_nor_overlap() {
    const MULTI: usize = 16;
    const SINGLE: usize = 4;
    const ROUNDS: usize = 12;
    const TTL_MS: u64 = 10_000;
    const WAIT_MS: u64 = 60_000;
    let broker = Broker::start().await;
    let history = Arc::new(History::new());
    let keys: Vec<String> = (0..8).map(|i| format!("acct-{i}")).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in 0..MULTI {
        let (c, history, keys) = (broker.client(), history.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("multi-{m}");
            let (mut granted, mut failed) = (0, Vec::new());
            for round in 0..ROUNDS {
                // 3 distinct keys out of 8, different each round.
                let mut picked: Vec<String> = (0..3)
                    .map(|i| keys[(m * 3 + round * 5 + i * (1 + m % 2) * 3) % 8].clone())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                // Half the clients name their keys out of order: the broker
                // sorts them.
                if m % 2 == 1 {
                    picked.reverse();
                }
                let body =
                    json!({"keys": picked, "owner": owner, "ttl_ms": TTL_MS, "wait_ms": WAIT_MS});
                let sent = Instant::now();
                let reply = c.post("/v1/multilock/acquire", &body).await.unwrap();
                let ttl = TTL_MS;
                record_multi(
                    &history,
                    &owner,
                    Request::Acquire {
                        ttl_ms: ttl,
                        wait_ms: WAIT_MS,
                    },
                    &picked,
                    sent,
                    &reply,
                );
                if reply.status != 200 {
                    failed.push(format!("{owner} round {round} acquire: {:?}", reply.body));
                    continue;
                }
                granted += 1;
                tokio::task::yield_now().await;
                let locks = held(&reply);
                let sent = Instant::now();
                let released = release(&c, &owner, locks.clone()).await;
                for lock in &locks {
                    let key = lock["key"].as_str().unwrap().to_owned();
                    let token = lock["token"].as_u64().unwrap();
                    record_multi(
                        &history,
                        &owner,
                        Request::Release { token },
                        &[key],
                        sent,
                        &released,
                    );
                }
                let all_freed = released.json()["locks"]
                    .as_array()
                    .is_some_and(|l| l.iter().all(|l| l["released"] == true));
                if released.status != 200 || !all_freed {
                    failed.push(format!(
                        "{owner} round {round} release: {:?}",
                        released.body
                    ));
                }
            }
            (granted, failed)
        }));
    }
    for s in 0..SINGLE {
        let (c, history, keys) = (broker.client(), history.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("single-{s}");
            let (mut granted, mut failed) = (0, Vec::new());
            for round in 0..ROUNDS {
                let key = &keys[(s * 2 + round) % 8];
                let sent = Instant::now();
                let reply = c.acquire(key, &owner, TTL_MS, WAIT_MS).await.unwrap();
                history.record(Op {
                    key: key.clone(),
                    owner: owner.clone(),
                    request: Request::Acquire {
                        ttl_ms: TTL_MS,
                        wait_ms: WAIT_MS,
                    },
                    sent,
                    answered: Instant::now(),
                    outcome: Outcome::Reply {
                        status: reply.status,
                        token: reply.json()["token"].as_u64(),
                        hold_count: reply.json()["hold_count"].as_u64().map(|n| n as u32),
                        released: None,
                    },
                });
                if reply.status != 200 {
                    failed.push(format!("{owner} round {round} acquire: {:?}", reply.body));
                    continue;
                }
                granted += 1;
                let token = reply.json()["token"].as_u64().unwrap();
                let sent = Instant::now();
                let released = c.release(key, &owner, token).await.unwrap();
                history.record(Op {
                    key: key.clone(),
                    owner: owner.clone(),
                    request: Request::Release { token },
                    sent,
                    answered: Instant::now(),
                    outcome: Outcome::Reply {
                        status: released.status,
                        token: None,
                        hold_count: released.json()["hold_count"].as_u64().map(|n| n as u32),
                        released: released.json()["released"].as_bool(),
                    },
                });
                if released.status != 200 {
                    failed.push(format!(
                        "{owner} round {round} release: {:?}",
                        released.body
                    ));
                }
            }
            (granted, failed)
        }));
    }
    let (mut total, mut failed) = (0, Vec::new());
    for task in tasks {
        let (granted, failures) = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("no client is stuck (no deadlock)")
            .expect("client task");
        total += granted;
        failed.extend(failures);
    }
    // The history first: it judges mutual exclusion and token order.
    let report = history.check();
    report.assert_clean();
    // Then nobody timed out (every wait ended in a grant) or lost a lease.
    assert!(
        failed.is_empty(),
        "{} failures: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(total, (MULTI + SINGLE) * ROUNDS);
    assert!(
        report.grants >= (MULTI * 3 + SINGLE) * ROUNDS / 2,
        "{report}"
    );
    eprintln!(
        "{} multi-locks of 3 and {} single locks in {:?}",
        MULTI * ROUNDS,
        SINGLE * ROUNDS,
        started.elapsed()
    );
    broker.stop().await;
}
