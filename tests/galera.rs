//! Brokers on a three-node MariaDB Galera cluster of the test's own: the
//! recommended setup (every broker lists the nodes in the same order, so
//! all write through one node) through a kill -9 of that node; brokers whose
//! lists differ in order, which move to one node; and brokers pointed at
//! different nodes for good. Row locks are per node on Galera and reads are
//! not causal by default: each run records what clients saw and checks it.
//!
//! Each test starts its own cluster (about 10 s); they take turns.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lockbroker_tests::{
    eventually, fresh_db_name, run_clients_with, BrokerProcess, Client, GaleraCluster, History,
    Load, Release503, KEY,
};
use sqlx::{Connection, MySqlConnection};
use tokio::sync::Mutex;

const DB_TIMEOUT_MS: u64 = 2000;
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
        let cluster = GaleraCluster::up().await;
        let db = fresh_db_name();
        let mut brokers = Vec::new();
        for order in orders {
            let urls = cluster.toml_list(&db, order);
            let extra = format!("db_timeout_ms = {DB_TIMEOUT_MS}");
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
