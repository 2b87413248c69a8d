//! Group commit (`engine/batch.rs`): uncontended acquires and releases of
//! many clients share transactions. Under load on many keys, some of them
//! contended, the history is checked (no overlapping holds, tokens
//! increasing per key, every `200` release committed) and the broker must
//! really have batched. Then the same load through a proxy that loses
//! `COMMIT` answers, resets every connection or stalls: every member of a
//! batch is answered with what committed or `503`, never a guess.
//!
//! These tests load the two cores heavily, so they take turns.

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use lockbroker_tests::{
    config_at, eventually, fresh_db_name, run_clients_with, server_url, Broker, Client, History,
    Load, Release503, Report, KEY,
};
use sqlx::{Connection, MySqlConnection};
use tokio::sync::Mutex;

static TURNS: Mutex<()> = Mutex::const_new(());

/// The bound on one operation's database work in these tests.
const DB_TIMEOUT_MS: u64 = 2000;
/// No answer may take longer than the bound plus this.
const ANSWER_SLACK: Duration = Duration::from_secs(1);

/// `n` keys named `{prefix}-{i}`.
fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Runs a trying load (`wait_ms` 0) and a waiting one side by side on
/// `keys` for `duration`, each with `clients` clients, recording into
/// `history`.
async fn two_loads(
    url: &str,
    clients: usize,
    keys: &[String],
    duration: Duration,
    history: &Arc<History>,
) {
    let timeout = Duration::from_millis(DB_TIMEOUT_MS) + ANSWER_SLACK;
    let trying = Load {
        timeout,
        hold: Duration::from_millis(1),
        owners: "try",
        ..Load::default()
    };
    let waiting = Load {
        wait_ms: 300,
        owners: "wait",
        ..trying.clone()
    };
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (a, b) = (url.to_owned(), url.to_owned());
    tokio::join!(
        run_clients_with(
            &trying,
            clients,
            duration,
            &keys,
            move |_, _| Client::new(&a, Some(KEY)).unwrap(),
            history.clone(),
        ),
        run_clients_with(
            &waiting,
            clients / 4,
            duration,
            &keys,
            move |_, _| Client::new(&b, Some(KEY)).unwrap(),
            history.clone(),
        ),
    );
}

/// Every answer was `200`, `409` or (when `allow_503`) `503`, and in time.
fn only_expected_answers(report: &Report, allow_503: bool) {
    assert_eq!(
        report.timeouts, 0,
        "no answer slower than the bound: {report}"
    );
    assert_eq!(report.failures, 0, "every request was answered: {report}");
    for (label, n) in report
        .acquires
        .0
        .iter()
        .chain(&report.releases.0)
        .chain(&report.renews.0)
    {
        assert!(
            label.starts_with("200") || label == "409" || (allow_503 && label == "503"),
            "{n} answers {label}: {report}"
        );
    }
}

/// 32 trying and 8 waiting clients on 48 keys (mostly each on its own key
/// at a time, sometimes on the same): batches of several members form,
/// contended members leave them, and the history is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_grants_and_releases_check_clean_under_load() {
    let _turn = TURNS.lock().await;
    let name = fresh_db_name();
    let broker = Broker::start_with(name.clone(), config_at(&server_url(), &name)).await;
    let c = broker.client();
    let history = Arc::new(History::new());
    two_loads(
        broker.url(),
        32,
        &keys("b", 48),
        Duration::from_secs(6),
        &history,
    )
    .await;

    let mut conn = MySqlConnection::connect(&format!("{}/{name}", server_url()))
        .await
        .unwrap();
    let report = history
        .check_with_database(&mut conn, Release503::NothingHappened)
        .await;
    eprintln!("{report}");
    report.assert_clean();
    only_expected_answers(&report, false);
    assert!(report.grants > 500, "the load ran: {report}");
    assert!(report.conflicts > 0, "some keys were contended: {report}");
    let batches = c.counter("lockbroker_batches_total").await;
    let members = c.counter("lockbroker_batched_operations_total").await;
    eprintln!("{members} operations in {batches} batches");
    assert!(batches > 0, "operations were batched");
    assert!(
        members > batches + batches / 4,
        "batches had several members: {members} operations in {batches} batches"
    );
    broker.stop().await;
}

/// The answers of batch `COMMIT`s are lost again and again under load (the
/// server committed): each is settled by its members' rows and answered as
/// committed; the history (with the database) is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_batch_commit_answers_are_settled_under_load() {
    let _turn = TURNS.lock().await;
    let (proxy, broker) = Broker::behind_proxy(DB_TIMEOUT_MS).await;
    let name = broker.db.clone();
    let c = broker.client();
    let history = Arc::new(History::new());
    let load = {
        let (url, history) = (broker.url().to_owned(), history.clone());
        tokio::spawn(async move {
            two_loads(&url, 24, &keys("l", 64), Duration::from_secs(8), &history).await;
        })
    };
    let hit = || proxy.commits_hit.load(Ordering::SeqCst);
    eventually("the load runs", Duration::from_secs(5), || async {
        history
            .ops()
            .iter()
            .any(|op| op.outcome.granted().is_some())
    })
    .await;
    for n in 1..=10 {
        proxy.lose_next_commit_answer();
        eventually("the next COMMIT is hit", Duration::from_secs(5), || async {
            hit() >= n
        })
        .await;
    }
    load.await.unwrap();

    let mut conn = MySqlConnection::connect(&format!("{}/{name}", server_url()))
        .await
        .unwrap();
    let report = history
        .check_with_database(&mut conn, Release503::NothingHappened)
        .await;
    eprintln!("{report}");
    report.assert_clean();
    only_expected_answers(&report, true);
    let settled = c
        .counter("lockbroker_lost_commits_total{outcome=\"committed\"}")
        .await;
    assert_eq!(settled, 10, "every lost answer was found committed");
    assert!(c.counter("lockbroker_batches_total").await > 0);
    broker.stop().await;
}

/// Every database connection reset, then the database cut off silently,
/// each under load: members of the batches in flight are answered `503`
/// or with what committed (the history with the database is clean), in
/// time, and the load flows again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_cut_or_stalled_mid_flight_answer_503_or_what_committed() {
    let _turn = TURNS.lock().await;
    let (proxy, broker) = Broker::behind_proxy(DB_TIMEOUT_MS).await;
    let name = broker.db.clone();
    let history = Arc::new(History::new());
    let load = {
        let (url, history) = (broker.url().to_owned(), history.clone());
        tokio::spawn(async move {
            two_loads(&url, 24, &keys("f", 64), Duration::from_secs(12), &history).await;
        })
    };
    let grants_since = |t: Instant| {
        history
            .ops()
            .iter()
            .filter(|op| op.answered >= t && op.outcome.granted().is_some())
            .count()
    };
    let unavailable_since = |t: Instant| {
        history
            .ops()
            .iter()
            .filter(|op| op.answered >= t && op.outcome.status() == Some(503))
            .count()
    };
    let start = Instant::now();
    eventually("the load runs", Duration::from_secs(5), || async {
        grants_since(start) > 50
    })
    .await;
    for fault in ["reset", "pause"] {
        let at = Instant::now();
        if fault == "reset" {
            proxy.reset();
        } else {
            proxy.pause();
        }
        eventually("clients get 503", Duration::from_secs(8), || async {
            unavailable_since(at) >= 3
        })
        .await;
        proxy.restore();
        let back = Instant::now();
        eventually("grants after recovery", Duration::from_secs(5), || async {
            grants_since(back) > 20
        })
        .await;
    }
    load.await.unwrap();

    let mut conn = MySqlConnection::connect(&format!("{}/{name}", server_url()))
        .await
        .unwrap();
    // A release whose commit could not be settled while the database was
    // away is answered 503 although it may have committed (its client
    // stopped using the lock either way).
    let report = history
        .check_with_database(&mut conn, Release503::MayHaveCommitted)
        .await;
    eprintln!("{report}");
    report.assert_clean();
    only_expected_answers(&report, true);
    assert!(report.unavailable > 0, "the faults were seen: {report}");
    broker.stop().await;
}
