//! Brokers on a three-node MariaDB Galera cluster of the test's own: the
//! recommended setup (every broker lists the nodes in the same order, so
//! all write through one node) through a kill -9 of that node; brokers whose
//! lists differ in order, which move to one node; and brokers pointed at
//! different nodes for good (with deadlock checks between sessions too).
//! Row locks are per node on Galera and reads are not causal by default:
//! each run records what clients saw and checks it.
//!
//! Each test starts its own cluster (about 10 s); they take turns.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lockbroker_tests::{
    eventually, eventually_some, fresh_db_name,
    rings::{deadlock, hold, one_ring, wait_ms},
    run_clients_with, BrokerProcess, Client, GaleraCluster, History, Load, Release503, KEY,
};
use serde_json::json;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use tokio::sync::Mutex;

const DB_TIMEOUT_MS: u64 = 2000;
/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);
static TURNS: Mutex<()> = Mutex::const_new(());

/// Brokers that list the same nodes in different orders start on
/// different nodes, then the later one follows the longest-running one
/// (the `brokers` table says which server each writes through): they end
/// up on one node within seconds, and a load over both is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_split_by_their_lists_converge_on_one_node() {
    let _turn = TURNS.lock().await;
    let run = Run::start(&[&[1, 2, 3], &[2, 3, 1]]).await;
    eventually(
        "both brokers write through one node",
        Duration::from_secs(5),
        || async {
            let servers = run.servers().await;
            servers.len() == 2 && servers[0] == servers[1]
        },
    )
    .await;
    assert_eq!(
        run.servers().await[0],
        run.cluster.host_port(1),
        "the oldest broker's node"
    );
    let load = run.load(16, Duration::from_secs(5), &["k0", "k1", "k2"], 300);
    Run::finish(load).await;
    let report = run.check(2).await;
    report.assert_clean();
    assert_eq!(report.unavailable, 0, "503 on a healthy cluster: {report}");
    run.stop().await;
}

/// Two brokers on one cluster, and a load over both of them.
struct Run {
    cluster: GaleraCluster,
    db: String,
    brokers: Vec<BrokerProcess>,
    history: Arc<History>,
}

impl Run {
    /// A cluster and one broker per node order in `orders`.
    async fn start(orders: &[&[usize]]) -> Run {
        Run::start_with(orders, DB_TIMEOUT_MS).await
    }

    /// [`Run::start`] with brokers' `db_timeout_ms` of `db_timeout_ms`.
    async fn start_with(orders: &[&[usize]], db_timeout_ms: u64) -> Run {
        let cluster = GaleraCluster::up().await;
        let db = fresh_db_name();
        let mut brokers = Vec::new();
        for order in orders {
            let urls = cluster.toml_list(&db, order);
            let extra = format!("db_timeout_ms = {db_timeout_ms}");
            brokers.push(BrokerProcess::start_on(&urls, &extra).await);
        }
        Run {
            cluster,
            db,
            brokers,
            history: Arc::new(History::new()),
        }
    }

    /// `n` clients for `duration` on `keys`, each request to the brokers in
    /// turn; half of them try once, half wait up to `wait_ms` in the queue.
    fn load(
        &self,
        n: usize,
        duration: Duration,
        keys: &'static [&'static str],
        wait_ms: u64,
    ) -> tokio::task::JoinHandle<()> {
        let tries = self.clients(n - n / 2, duration, keys, 0, "trier");
        let waits = self.clients(n / 2, duration, keys, wait_ms, "waiter");
        tokio::spawn(async move {
            tries.await.unwrap();
            waits.await.unwrap();
        })
    }

    /// Waits for a load to end (bounded).
    async fn finish(load: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(Duration::from_secs(60), load)
            .await
            .expect("the load ends")
            .unwrap();
    }

    /// Stops the brokers (the cluster goes down when dropped).
    async fn stop(self) {
        for broker in self.brokers {
            broker.stop().await;
        }
    }

    fn clients(
        &self,
        n: usize,
        duration: Duration,
        keys: &'static [&'static str],
        wait_ms: u64,
        owners: &'static str,
    ) -> tokio::task::JoinHandle<()> {
        let urls: Vec<String> = self.brokers.iter().map(|b| b.url.clone()).collect();
        let history = self.history.clone();
        let load = Load {
            timeout: Duration::from_millis(DB_TIMEOUT_MS + 1000),
            wait_ms,
            owners,
            ..Load::default()
        };
        tokio::spawn(async move {
            run_clients_with(
                &load,
                n,
                duration,
                keys,
                move |task, request| {
                    let url = &urls[(task + request as usize) % urls.len()];
                    Client::new(url, Some(KEY)).unwrap()
                },
                history,
            )
            .await;
        })
    }

    /// Checks the history, and that every `200` release committed (read
    /// on node `node`).
    async fn check(&self, node: usize) -> lockbroker_tests::Report {
        let url = format!("{}/{}", self.cluster.urls[node - 1], self.db);
        let mut conn = MySqlConnection::connect(&url).await.unwrap();
        let report = self
            .history
            .check_with_database(&mut conn, Release503::MayHaveCommitted)
            .await;
        eprintln!("{report}");
        report
    }

    /// The server each live broker writes through, oldest broker first
    /// (from the `brokers` table, read on the first node that answers).
    async fn servers(&self) -> Vec<String> {
        for url in &self.cluster.urls {
            let Ok(mut conn) = MySqlConnection::connect(&format!("{url}/{}", self.db)).await else {
                continue;
            };
            let rows: Vec<(Vec<u8>,)> = sqlx::query_as(
                "SELECT server FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL 1 SECOND ORDER BY started_at, name",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
            return rows
                .into_iter()
                .map(|(s,)| String::from_utf8_lossy(&s).into_owned())
                .collect();
        }
        Vec::new()
    }

    fn answered_since(&self, t: Instant, status: u16) -> usize {
        self.history
            .ops()
            .iter()
            .filter(|op| op.answered >= t && op.outcome.status() == Some(status))
            .count()
    }

    fn granted_since(&self, t: Instant) -> usize {
        self.history
            .ops()
            .iter()
            .filter(|op| op.answered >= t && op.outcome.granted().is_some())
            .count()
    }
}

/// Every broker lists the nodes in the same order: all write through node
/// 1. It is killed mid-load: grants resume within 5 s through node 2, and
/// the history is clean. While the cluster was healthy, no 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_writer_node_fails_over() {
    let _turn = TURNS.lock().await;
    let run = Run::start(&[&[1, 2, 3], &[1, 2, 3]]).await;
    let started = Instant::now();
    let load = run.load(16, Duration::from_secs(16), &["k0", "k1", "k2", "k3"], 300);
    eventually("grants flow", Duration::from_secs(10), || async {
        run.granted_since(started) >= 50
    })
    .await;

    let killed = Instant::now();
    let healthy_503 = run.answered_since(started, 503);
    run.cluster.kill(1).await;
    eventually(
        "grants resume within 5 s",
        Duration::from_secs(5),
        || async { run.granted_since(killed + Duration::from_millis(100)) >= 10 },
    )
    .await;
    eprintln!("grants resumed {:?} after the kill", killed.elapsed());

    Run::finish(load).await;
    let report = run.check(2).await;
    report.assert_clean();
    assert_eq!(
        healthy_503, 0,
        "503 while the cluster was healthy: {report}"
    );
    assert_eq!(report.timeouts, 0, "{report}");
    assert!(report.grants > 100, "{report}");
    run.stop().await;
}

/// A misconfiguration that cannot mend itself: two brokers each list one
/// node of the cluster, a different one, and so write through different
/// nodes, where row locks do not see each other. Certification at commit
/// still decides: no overlapping holds, no token regression, no lost
/// release, and no 503 while every node is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_on_different_nodes_stay_correct() {
    let _turn = TURNS.lock().await;
    let run = Run::start(&[&[1], &[2]]).await;
    assert_ne!(run.servers().await[0], run.servers().await[1]);
    let load = run.load(16, Duration::from_secs(10), &["k0", "k1", "k2"], 300);
    Run::finish(load).await;
    let report = run.check(3).await;
    report.assert_clean();
    let strict = run.history.check();
    strict.assert_clean();
    assert_eq!(report.unavailable, 0, "503 on a healthy cluster: {report}");
    assert_eq!(report.timeouts, 0, "{report}");
    assert!(report.grants > 100, "{report}");
    run.stop().await;
}

/// Deadlock checks between sessions (issue #33) through brokers on
/// different nodes for good, where row locks do not see each other: a
/// check pins (writes) each session whose waits it reads, so two checks
/// that would each miss the other's wait are ordered by certification (the
/// later one retried). Rings of two and three sessions closed at once
/// through both brokers are refused exactly once each, and the other waits
/// are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlock_cycles_through_brokers_on_different_nodes_are_refused_once() {
    let _turn = TURNS.lock().await;
    let run = Run::start(&[&[1], &[2]]).await;
    assert_ne!(run.servers().await[0], run.servers().await[1]);
    let clients: Vec<Client> = run.brokers.iter().map(BrokerProcess::client).collect();
    for round in 0..3 {
        for n in [2, 3] {
            one_ring(&clients, &format!("g-{round}-{n}-"), n).await;
        }
    }
    run.stop().await;
}

/// Two waits that close one cycle, on two nodes, checked while neither
/// has committed (each check reads the other's waits before they are
/// there) and then committed at the same moment: each is held between its
/// check and its commit by a gap lock over its session's waiters taken on
/// its own node (`REPEATABLE READ`), and both are let go at once. Row
/// locks do not reach across nodes, so only Galera orders them: each
/// check wrote (pinned) the other's session row, which the other's
/// transaction holds, so the replicated write aborts it, or certification
/// fails the second to commit (each also wrote its own row); that one is
/// retried, sees the other's wait and is refused. Exactly one per round,
/// and the other is served when the refused session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cycle_whose_waits_commit_at_once_on_two_nodes_is_refused_once() {
    let _turn = TURNS.lock().await;
    // Time enough (a lock wait of 10 s) for the test to hold both waits.
    let run = Run::start_with(&[&[1], &[2]], 20_000).await;
    let clients: Vec<Client> = run.brokers.iter().map(BrokerProcess::client).collect();
    let nodes: Vec<String> = (0..2)
        .map(|i| format!("{}/{}", run.cluster.urls[i], run.db))
        .collect();
    let mut looks = Vec::new();
    for node in &nodes {
        looks.push(MySqlPool::connect(node).await.unwrap());
    }
    for round in 0..4 {
        let keys = [format!("gc-{round}-0"), format!("gc-{round}-1")];
        let mut sessions = Vec::new();
        for i in 0..2 {
            let s = clients[i].open_session(&json!({"ttl_ms": 60_000})).await;
            hold(&clients[i], &s, &keys[i], &format!("h{i}")).await;
            sessions.push(s);
        }
        let mut blockers = Vec::new();
        for (node, s) in nodes.iter().zip(&sessions) {
            let mut b = MySqlConnection::connect(node).await.unwrap();
            sqlx::raw_sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; BEGIN")
                .execute(&mut b)
                .await
                .unwrap();
            sqlx::query("SELECT id FROM waiters WHERE session = ? FOR UPDATE")
                .bind(&s.id)
                .fetch_all(&mut b)
                .await
                .unwrap();
            blockers.push(b);
        }
        // Session i, through node i's broker, waits for the other's key.
        let mut waits = Vec::new();
        for i in 0..2 {
            waits.push(wait_ms(
                &clients[i],
                &sessions[i],
                &keys[1 - i],
                &format!("w{i}"),
                20_000,
            ));
        }
        eventually("both checked, both inserts held", WAIT, || async {
            inserts_waiting(&looks[0]).await && inserts_waiting(&looks[1]).await
        })
        .await;
        let (mut b0, mut b1) = (blockers.remove(0), blockers.remove(0));
        let (r0, r1) = tokio::join!(
            sqlx::query("ROLLBACK").execute(&mut b0),
            sqlx::query("ROLLBACK").execute(&mut b1)
        );
        // A blocker that a replicated write aborted has nothing to undo.
        let _ = (r0, r1);
        let refused = eventually_some("one is refused", WAIT, || {
            let done: Vec<usize> = (0..2).filter(|&i| waits[i].is_finished()).collect();
            async move { (!done.is_empty()).then_some(done) }
        })
        .await;
        assert_eq!(refused.len(), 1, "round {round}: both answered");
        let r = refused[0];
        let reply = waits.remove(r).await.unwrap();
        let body =
            deadlock(&reply).unwrap_or_else(|| panic!("round {round}: a deadlock: {reply:?}"));
        let cycle = body.error.cycle.expect("the cycle");
        assert_eq!(cycle.len(), 2, "round {round}: {cycle:?}");
        assert_eq!(cycle[0].session, sessions[r].id);
        assert_eq!(cycle[1].session, sessions[1 - r].id);
        let other = waits.remove(0);
        assert!(!other.is_finished(), "round {round}: the other still waits");
        assert_eq!(clients[r].close_session(&sessions[r].id).await.status, 200);
        let served = tokio::time::timeout(WAIT, other).await.unwrap().unwrap();
        assert_eq!(served.status, 200, "round {round}: {served:?}");
        let o = 1 - r;
        assert_eq!(clients[o].close_session(&sessions[o].id).await.status, 200);
    }
    run.stop().await;
}

/// Whether a waiter's insert runs on the node of `look` (in the test that
/// holds them, it waits there for the test's gap lock). The process list,
/// not `INNODB_TRX`: polled often, the latter held up Galera's appliers.
async fn inserts_waiting(look: &MySqlPool) -> bool {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE INFO LIKE 'INSERT INTO waiters%'",
    )
    .fetch_one(look)
    .await
    .unwrap();
    n > 0
}

/// The broker's own connections (`store::pool`) on two nodes contend for
/// one row the way a grant does: read it `FOR UPDATE`, write it and a log
/// row (writes whose answer nothing reads: `Conn::defer`), commit. On
/// Galera a replicated write set aborts a local transaction that holds the
/// row (a brute-force abort) hundreds of times a run; whatever the moment,
/// every commit that answered OK is in the log exactly once, nothing is in
/// the log that was not answered OK, and no value was taken twice. (Writes
/// sent in one packet with their `COMMIT` broke this a few times in every
/// 4,000 transactions: a rolled-back transaction answered OK.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_is_reported_only_if_it_happened() {
    use lockbroker::store::{
        self,
        pool::{Pool, Setup},
    };
    use sqlx::mysql::MySqlConnectOptions;

    let _turn = TURNS.lock().await;
    let cluster = GaleraCluster::up().await;
    let db = fresh_db_name();
    let mut admin = MySqlConnection::connect(&cluster.urls[0]).await.unwrap();
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY, token BIGINT NOT NULL, owner VARCHAR(40))"),
        format!("CREATE TABLE `{db}`.log (n BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT NOT NULL, owner VARCHAR(40) NOT NULL)"),
        format!("INSERT INTO `{db}`.t VALUES (1, 0, NULL)"),
    ] {
        sqlx::query(&sql).execute(&mut admin).await.unwrap();
    }
    let setup = Setup {
        lock_wait_timeout_s: 5,
        idle_transaction_timeout_s: 30,
    };
    let pools: Vec<Pool> = cluster.urls[..2]
        .iter()
        .map(|url| {
            let options: MySqlConnectOptions = url.parse().unwrap();
            Pool::new(options.database(&db), 4, setup)
        })
        .collect();
    // (owner, token) of every commit answered OK; conflicts answered.
    let claimed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let conflicts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(8);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let pool = pools[i % 2].clone();
            let (claimed, conflicts) = (claimed.clone(), conflicts.clone());
            tokio::spawn(async move {
                let me = format!("w{i}");
                while Instant::now() < until {
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    let mut conn = pool.acquire(deadline).await.unwrap();
                    let outcome = async {
                        conn.begin().await?;
                        let (token,): (i64,) = conn
                            .fetch_one("SELECT token FROM t WHERE id = 1 FOR UPDATE", ())
                            .await?;
                        let token = token + 1;
                        conn.defer(
                            "UPDATE t SET token = ?, owner = ? WHERE id = 1",
                            (token, me.as_str()),
                        )
                        .await?;
                        conn.defer(
                            "INSERT INTO log (token, owner) VALUES (?, ?)",
                            (token, me.as_str()),
                        )
                        .await?;
                        conn.commit().await?;
                        Ok::<i64, sqlx::Error>(token)
                    }
                    .await;
                    match outcome {
                        Ok(token) => claimed.lock().unwrap().push((me.clone(), token)),
                        Err(err) if store::classify(&err) == store::Failure::Conflict => {
                            conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(err) => panic!("{me}: {err}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let claimed = claimed.lock().unwrap().clone();
    let conflicts = conflicts.load(std::sync::atomic::Ordering::Relaxed);
    // Read on the third node, once it has applied everything.
    let mut reader = MySqlConnection::connect(&format!("{}/{db}", cluster.urls[2]))
        .await
        .unwrap();
    sqlx::query("SET SESSION wsrep_sync_wait = 1")
        .execute(&mut reader)
        .await
        .unwrap();
    let log: Vec<(String, i64)> = sqlx::query_as("SELECT owner, token FROM log")
        .fetch_all(&mut reader)
        .await
        .unwrap();
    eprintln!(
        "{} commits answered OK, {conflicts} conflicts, {} log rows",
        claimed.len(),
        log.len()
    );
    assert!(
        conflicts >= 20,
        "the nodes contended ({conflicts} conflicts): the run proves something"
    );
    let mut tokens: Vec<i64> = claimed.iter().map(|(_, t)| *t).collect();
    tokens.sort_unstable();
    let taken_twice: Vec<_> = tokens
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    let (mut claimed_sorted, mut log_sorted) = (claimed.clone(), log.clone());
    claimed_sorted.sort();
    log_sorted.sort();
    let phantom: Vec<_> = claimed_sorted
        .iter()
        .filter(|c| log_sorted.binary_search(c).is_err())
        .collect();
    let unclaimed: Vec<_> = log_sorted
        .iter()
        .filter(|l| claimed_sorted.binary_search(l).is_err())
        .collect();
    assert!(
        taken_twice.is_empty() && phantom.is_empty() && unclaimed.is_empty(),
        "values taken twice {taken_twice:?}; answered OK but not committed {phantom:?}; committed but not answered OK {unclaimed:?}"
    );
    for pool in &pools {
        pool.close();
    }
}
