//! `lockbroker-client` against a real broker, beyond the conformance
//! scenarios (`tests/rust_conformance.rs`): guards under contention hold
//! what they claim (checked against a recorded history), and every lease
//! kind is listed through the same generic calls.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lockbroker_client::Client;
use lockbroker_tests::{
    history::{Op, Request},
    Broker, History, Outcome, Proxy, KEY,
};

fn client(broker: &Broker) -> Client {
    Client::new(broker.url(), KEY).unwrap()
}

#[tokio::test]
async fn guards_exclude_each_other_and_tokens_increase() {
    const TASKS: usize = 6;
    const ROUNDS: usize = 5;
    let broker = Broker::start().await;
    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = client(&broker);
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let sent = Instant::now();
                let guard = client
                    .lock("shared")
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                let lease = guard.grant().expect("held");
                history.record(Op {
                    key: "shared".into(),
                    owner: lease.owner.clone(),
                    request: Request::Acquire {
                        ttl_ms: lease.ttl_ms,
                        wait_ms: 60_000,
                    },
                    sent,
                    answered: Instant::now(),
                    outcome: Outcome::Reply {
                        status: 200,
                        token: Some(guard.token()),
                        hold_count: Some(lease.hold_count),
                        released: None,
                    },
                });
                // The work the lock protects: a hold, part of the test (not
                // a wait for a condition).
                tokio::time::sleep(Duration::from_millis(3)).await;
                let sent = Instant::now();
                let token = guard.token();
                guard.release().await.expect("release");
                history.record(Op {
                    key: "shared".into(),
                    owner: lease.owner,
                    request: Request::Release { token },
                    sent,
                    answered: Instant::now(),
                    outcome: Outcome::Reply {
                        status: 200,
                        token: None,
                        hold_count: Some(0),
                        released: Some(true),
                    },
                });
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the clients finish")
            .expect("no client panicked");
    }
    let report = history.check();
    report.assert_clean();
    assert_eq!(report.grants, TASKS * ROUNDS, "{report}");
    // Holds never overlap, so the order of the answers is the order of the
    // grants: their tokens strictly increase in it.
    let mut grants: Vec<_> = history
        .ops()
        .into_iter()
        .filter_map(|op| op.outcome.granted().map(|t| (op.answered, t)))
        .collect();
    grants.sort();
    assert!(
        grants.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens in grant order: {:?}",
        grants.iter().map(|g| g.1).collect::<Vec<_>>()
    );
    broker.stop().await;
}

#[tokio::test]
async fn every_kind_is_listed_and_recorded_through_the_same_calls() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let p1 = c.semaphore("ls/pool", 3).acquire().await.unwrap();
    let p2 = c.semaphore("ls/pool", 3).acquire().await.unwrap();
    let pools = c.semaphores().list_all("ls/", 10).await.unwrap();
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(pools[0].permits, Some(3));
    let mut tokens: Vec<_> = pools[0].holders.iter().map(|h| h.token).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, [p1.token(), p2.token()]);
    let reader = c.read_lock("ls/cfg").acquire().await.unwrap();
    let rw = c.rwlocks().list_all("ls/", 10).await.unwrap();
    assert_eq!(rw.len(), 1, "{rw:?}");
    assert_eq!(rw[0].readers[0].token, reader.token());
    assert!(rw[0].writer.is_none());
    let leader = c
        .election("ls/leader")
        .candidate("n1")
        .campaign()
        .await
        .unwrap();
    let elections = c.elections().list_all("ls/", 10).await.unwrap();
    assert_eq!(elections.len(), 1, "{elections:?}");
    assert_eq!(
        (elections[0].leader.as_deref(), elections[0].term),
        (Some("n1"), Some(leader.token()))
    );
    // History is generic too: a semaphore's grants.
    let history = c.semaphores().history("ls/pool", None).await.unwrap();
    assert_eq!(history.events.len(), 2, "{history:?}");
    broker.stop().await;
}

/// A connection the client pooled is not used again once it has idled
/// 5 s, well before the broker closes it (10 s by default): a request
/// sent just as the broker closes its connection would be lost, and an
/// acquire's outcome unknown. (The test waits out the idle time itself.)
#[tokio::test]
async fn a_connection_idle_for_5_s_is_not_used_again() {
    let broker = Broker::start().await;
    let proxy = Proxy::start(broker.url().trim_start_matches("http://")).await;
    let client = Client::new(&format!("http://{}", proxy.addr), KEY).unwrap();
    client.locks().status("idle").await.unwrap();
    client.locks().status("idle").await.unwrap();
    assert_eq!(proxy.accepted(), 1, "a busy connection is used again");
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let guard = client
        .lock("idle")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert_eq!(proxy.accepted(), 2, "the idle one was let go");
    guard.release().await.unwrap();
    broker.stop().await;
}
