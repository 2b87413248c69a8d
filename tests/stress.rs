//! Mutual exclusion under load: 32 concurrent clients on a few keys record
//! every hold, and the history is checked: no two holds of a key overlap,
//! and tokens strictly increase in grant order.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use lockbroker_api::Lease;
use lockbroker_tests::{config, fresh_db_name, run_clients_with, Broker, History, Load};

/// One hold as the client saw it: from the grant's arrival to just before
/// the release was sent. A correct broker makes these disjoint per key.
#[derive(Debug, Clone)]
struct Hold {
    key: usize,
    token: u64,
    granted: Instant,
    released: Instant,
}

const CLIENTS: usize = 32;
const KEYS: usize = 3;
const RUN_FOR: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_overlapping_holds_and_increasing_tokens() {
    let broker = Broker::start().await;
    let history = Arc::new(Mutex::new(Vec::<Hold>::new()));
    // A second, independent detector: a flag per key set while held.
    let in_use: Arc<Vec<AtomicBool>> =
        Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let deadline = Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let c = broker.client();
        let history = history.clone();
        let in_use = in_use.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("client-{client}");
            let mut n = 0usize;
            let mut errors = 0usize;
            while Instant::now() < deadline {
                n += 1;
                let key = (client + n) % KEYS;
                // Half the clients wait, half try once.
                let wait_ms = if client % 2 == 0 { 2_000 } else { 0 };
                let reply = c
                    .acquire(&format!("stress-{key}"), &owner, 30_000, wait_ms)
                    .await
                    .expect("broker answers");
                match reply.status {
                    200 => {}
                    409 => continue,
                    _ => {
                        errors += 1;
                        continue;
                    }
                }
                let granted = Instant::now();
                let token = reply.ok::<Lease>().token;
                assert!(
                    !in_use[key].swap(true, Ordering::SeqCst),
                    "two holders of stress-{key} at once"
                );
                // The hold itself (not a wait for a condition): a grant
                // held for a while, so that holds could overlap.
                tokio::time::sleep(Duration::from_millis(1)).await;
                in_use[key].store(false, Ordering::SeqCst);
                let released = Instant::now();
                let r = c
                    .release(&format!("stress-{key}"), &owner, token)
                    .await
                    .expect("broker answers");
                assert_eq!(r.status, 200, "release: {r:?}");
                history.lock().unwrap().push(Hold {
                    key,
                    token,
                    granted,
                    released,
                });
            }
            errors
        }));
    }
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap();
    }
    assert_eq!(errors, 0, "no request failed with anything but 409");

    let history = history.lock().unwrap().clone();
    let mut per_key: HashMap<usize, Vec<Hold>> = HashMap::new();
    for hold in history {
        per_key.entry(hold.key).or_default().push(hold);
    }
    let mut total = 0;
    for (key, mut holds) in per_key {
        total += holds.len();
        holds.sort_by_key(|h| h.granted);
        for pair in holds.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                b.granted > a.released,
                "holds of key {key} overlap: {a:?} and {b:?}"
            );
            assert!(
                b.token > a.token,
                "tokens of key {key} do not increase in grant order: {a:?} then {b:?}"
            );
        }
    }
    assert!(total > 100, "the stress ran: {total} holds");
    eprintln!("{total} holds checked");
    broker.stop().await;
}

/// Handoffs in process under load, across two brokers on one database: 16
/// clients wait on two keys; some go through one broker only (their
/// handoffs stay in its memory), some through the other, and some acquire
/// through one and release through the other (the lease changes behind the
/// granting broker's back: its waiters in memory spill to the database
/// path). Leases are short enough that some run out. The recorded history
/// must show no overlapping holds and tokens increasing in grant order per
/// key, every release answered `200` committed, and only `200`/`409`
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handoffs_in_memory_and_across_brokers_check_clean() {
    let db = fresh_db_name();
    let a = Broker::start_with(db.clone(), config(&db)).await;
    let b = Broker::start_with(db.clone(), config(&db)).await;
    let (ca, cb) = (a.client(), b.client());
    let local_before = ca.counter("lockbroker_wakeups_total{via=\"local\"}").await;
    let history = Arc::new(History::new());
    let load = Load {
        wait_ms: 3_000,
        ttl_ms: 400,
        hold: Duration::from_millis(2),
        timeout: Duration::from_secs(10),
        ..Load::default()
    };
    let clients = [ca.clone(), cb.clone()];
    run_clients_with(
        &load,
        16,
        Duration::from_secs(6),
        &["hot", "warm"],
        move |task, request| match task % 4 {
            // Acquire through one broker, release through the other.
            3 => clients[(request % 2) as usize].clone(),
            2 => clients[1].clone(),
            _ => clients[0].clone(),
        },
        history.clone(),
    )
    .await;
    let report = history.check();
    eprintln!("{report}");
    report.assert_clean();
    assert_eq!(
        report.timeouts + report.failures + report.unavailable,
        0,
        "{report}"
    );
    for (label, n) in report.acquires.0.iter().chain(&report.releases.0) {
        assert!(
            label.starts_with("200") || label == "409",
            "{n} answers {label}: {report}"
        );
    }
    assert!(report.grants > 100, "the load ran: {report}");
    let mut conn = lockbroker_tests::db_conn(&db).await;
    let unreleased = history
        .check_committed(&mut conn)
        .await
        .expect("database read");
    assert!(unreleased.is_empty(), "{unreleased:?}");
    let local = ca.counter("lockbroker_wakeups_total{via=\"local\"}").await - local_before;
    assert!(local > 20, "handoffs in process happened: {local}");
    a.shutdown().await;
    b.stop().await;
}
