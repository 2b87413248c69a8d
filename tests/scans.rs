//! The broker's locking statements touch only the rows they are about
//! (`store`'s module doc). On a small table MariaDB's optimizer would
//! rather scan the whole table once a statement names a good share of its
//! rows, and a locking scan locks every row it passes: a batch's read made
//! other keys' tries fail with 409 (`NOWAIT` met the lock), two rwlock
//! keys' batches deadlocked on each other's reader rows, and deletes and
//! updates of waiter rows waited on other keys' transactions until the
//! lock wait timeout.
//!
//! Each test builds a small table, holds a row that the statement must not
//! touch (another key's, another broker's) in a transaction of its own,
//! and runs the statement through the broker's own connection code with a
//! lock wait timeout of 1 s: it must succeed, having waited for nothing.
//! Without their fixes, the batch's read and the collecting `DELETE` fail
//! here. The purge of stale waiters, the rwlock readers' `DELETE` and the
//! claim of grants waited or deadlocked in an audit with other data and
//! plans (two batches at once, literal values; a plain client waited 1 s
//! on the purge with this very data), not through the broker's prepared
//! statements here: their tests guard the rule, not those cases.
//! A read with `SKIP LOCKED` never waits, so the batch's read is checked
//! by the session's row-read counters instead (no row read in table
//! order).

use std::time::{Duration, Instant};

use lockbroker::store::{
    self,
    pool::{Conn, Pool, Setup},
    Kind, RowKey,
};
use lockbroker_tests::{config_at, fresh_db_name, server_url, Broker};
use sqlx::{mysql::MySqlConnectOptions, Connection, MySqlConnection};

/// What waiting for a held row would cost a statement: the lock wait
/// timeout (1 s); a statement that waits for nothing is far quicker.
const NO_WAIT: Duration = Duration::from_millis(900);

/// A migrated database (the broker's, dropped when it stops; the rows the
/// tests write are nobody's), a pool of the broker's connections to it
/// with a lock wait timeout of 1 s, and a plain connection for setting up
/// and for holding rows.
struct Scratch {
    broker: Broker,
    pool: Pool,
    url: String,
}

impl Scratch {
    async fn new() -> Scratch {
        let name = fresh_db_name();
        let broker = Broker::start_with(name.clone(), config_at(&server_url(), &name)).await;
        let url = format!("{}/{name}", server_url());
        let options: MySqlConnectOptions = url.parse().unwrap();
        let setup = Setup {
            lock_wait_timeout_s: 1,
            idle_transaction_timeout_s: 30,
        };
        let pool = Pool::new(options, 2, setup);
        Scratch { broker, pool, url }
    }

    async fn plain(&self) -> MySqlConnection {
        MySqlConnection::connect(&self.url).await.unwrap()
    }

    /// Runs `statements` and refreshes the tables' statistics, so the
    /// optimizer plans for the small tables they leave.
    async fn fill(&self, statements: &[&str]) {
        let mut c = self.plain().await;
        for sql in statements {
            sqlx::query(sql).execute(&mut c).await.unwrap();
        }
        for table in ["locks", "waiters", "rwlock_readers"] {
            sqlx::query(&format!("ANALYZE TABLE {table}"))
                .execute(&mut c)
                .await
                .unwrap();
        }
    }

    /// A transaction of its own holding the rows `sql` (a `SELECT ...
    /// FOR UPDATE`) reads, until the connection is dropped (before
    /// [`Scratch::stop`], whose `DROP DATABASE` would wait for it).
    async fn hold(&self, sql: &str) -> MySqlConnection {
        let mut c = self.plain().await;
        sqlx::query("BEGIN").execute(&mut c).await.unwrap();
        let held = sqlx::query(sql).fetch_all(&mut c).await.unwrap();
        assert!(!held.is_empty(), "{sql} holds a row");
        c
    }

    async fn conn(&self) -> Conn {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        self.pool.acquire(deadline).await.unwrap()
    }

    async fn stop(self) {
        self.pool.close();
        self.broker.stop().await;
    }
}

/// Waiters: key `a` has three (stale: their broker `gone` is not alive),
/// keys `b`, `c`, `e` one each; `b`'s is granted and unclaimed, of broker
/// `other`; `c`'s is granted to broker `here`; `e`'s is pending.
const WAITERS: &[&str] = &[
    "INSERT INTO waiters (id, tenant, kind, lock_key, owner, ttl_ms, broker, enqueued_at, deadline) VALUES \
     (1, 't', 0, 'a', 'o1', 1000, 'gone', NOW(6), NOW(6) - INTERVAL 1 HOUR), \
     (2, 't', 0, 'a', 'o2', 1000, 'gone', NOW(6), NOW(6) - INTERVAL 1 HOUR), \
     (3, 't', 0, 'a', 'o3', 1000, 'gone', NOW(6), NOW(6) + INTERVAL 1 HOUR), \
     (7, 't', 0, 'e', 'o7', 1000, 'gone', NOW(6), NOW(6) + INTERVAL 1 HOUR)",
    "INSERT INTO waiters (id, tenant, kind, lock_key, owner, ttl_ms, broker, enqueued_at, deadline, \
     granted_token, granted_expires_at) VALUES \
     (4, 't', 0, 'b', 'o4', 1000, 'other', NOW(6), NOW(6) + INTERVAL 1 HOUR, 7, NOW(6) + INTERVAL 1 MINUTE), \
     (5, 't', 0, 'c', 'o5', 1000, 'here', NOW(6), NOW(6) + INTERVAL 1 HOUR, 9, NOW(6) + INTERVAL 1 MINUTE)",
];

/// Runs `what` and says how long it took; it must have succeeded.
async fn quickly<T>(what: &str, run: impl std::future::Future<Output = sqlx::Result<T>>) -> T {
    let started = Instant::now();
    let out = run.await;
    let took = started.elapsed();
    let out = out.unwrap_or_else(|e| panic!("{what} failed after {took:?}: {e}"));
    assert!(
        took < NO_WAIT,
        "{what} waited {took:?} for a row it should not touch"
    );
    out
}

#[tokio::test]
async fn a_batch_reads_its_rows_by_the_primary_key_only() {
    let s = Scratch::new().await;
    let keys: Vec<String> = (0..8).map(|i| format!("k-{i}")).collect();
    let rows: Vec<String> = keys.iter().map(|k| format!("('t', 0, '{k}')")).collect();
    let insert = format!(
        "INSERT INTO locks (tenant, kind, lock_key) VALUES {}",
        rows.join(", ")
    );
    s.fill(&[&insert]).await;
    let mut conn = s.conn().await;
    // 5 of 8 rows: `EXPLAIN` says `ALL` for this without the index hint.
    for named in [2, 5, 8] {
        let members: Vec<RowKey> = keys[..named]
            .iter()
            .map(|key| RowKey {
                tenant: "t",
                kind: Kind::Lock,
                key,
            })
            .collect();
        conn.begin().await.unwrap();
        let before = handler_reads(&mut conn).await;
        let rows = store::batch::lock_rows(&mut conn, &members).await.unwrap();
        let after = handler_reads(&mut conn).await;
        conn.rollback().await.unwrap();
        assert_eq!(rows.len(), named);
        let read = |counter: &str| after[counter] - before[counter];
        assert_eq!(
            read("Handler_read_rnd_next"),
            0,
            "{named} of 8 rows read by a table scan: {before:?} -> {after:?}"
        );
        assert!(
            read("Handler_read_key") + read("Handler_read_next") <= 2 * named as i64 + 2,
            "{named} rows by the primary key: {before:?} -> {after:?}"
        );
    }
    drop(conn);
    s.stop().await;
}

#[tokio::test]
async fn deleting_readers_of_one_rwlock_leaves_other_keys_rows_alone() {
    let s = Scratch::new().await;
    s.fill(&[
        "INSERT INTO rwlock_readers (tenant, rw_key, owner, token, expires_at) VALUES \
         ('t', 'k0', 'a', 1, NOW(6)), ('t', 'k0', 'b', 1, NOW(6)), ('t', 'k0', 'c', 1, NOW(6)), \
         ('t', 'k1', 'a', 2, NOW(6)), ('t', 'k1', 'b', 2, NOW(6))",
    ])
    .await;
    // Another key's batch, in the middle of its transaction.
    let other = s
        .hold("SELECT owner FROM rwlock_readers WHERE tenant = 't' AND rw_key = 'k1' FOR UPDATE")
        .await;
    let mut conn = s.conn().await;
    conn.begin().await.unwrap();
    quickly(
        "deleting k0's readers a and b",
        store::rwlocks::delete_readers(&mut conn, "t", "k0", &["a", "b"]),
    )
    .await;
    conn.commit().await.unwrap();
    drop(conn);
    drop(other);
    s.stop().await;
}

#[tokio::test]
async fn purging_a_keys_stale_waiters_leaves_other_keys_rows_alone() {
    let s = Scratch::new().await;
    s.fill(WAITERS).await;
    // Another key's waiter, being enqueued (without the index hint, the
    // purge waited for it until the lock wait timeout).
    let other = s
        .hold("SELECT id FROM waiters WHERE id = 7 FOR UPDATE")
        .await;
    let mut conn = s.conn().await;
    conn.begin().await.unwrap();
    let key = RowKey {
        tenant: "t",
        kind: Kind::Lock,
        key: "a",
    };
    let stale = store::waiters::Staleness {
        alive_us: 1_000_000,
        grace_us: 0,
    };
    let purged = quickly(
        "purging a's stale waiters",
        store::waiters::delete_stale(&mut conn, key, stale),
    )
    .await;
    conn.commit().await.unwrap();
    assert_eq!(purged, 3, "a's waiters: their broker is gone");
    drop(conn);
    drop(other);
    s.stop().await;
}

#[tokio::test]
async fn collecting_and_passing_over_waiters_leave_other_rows_alone() {
    let s = Scratch::new().await;
    s.fill(WAITERS).await;
    // Other keys' waiters, each held by a transaction of its own (one
    // point lookup each: a holder must lock nothing else itself).
    let other = [
        s.hold("SELECT id FROM waiters WHERE id = 4 FOR UPDATE")
            .await,
        s.hold("SELECT id FROM waiters WHERE id = 5 FOR UPDATE")
            .await,
    ];
    let mut conn = s.conn().await;
    conn.begin().await.unwrap();
    quickly(
        "passing over waiters 1 and 2",
        store::waiters::passed_over(&mut conn, &[1, 2]),
    )
    .await;
    conn.commit().await.unwrap();
    quickly(
        "deleting waiters 1, 2 and 3",
        store::waiters::delete_many(&mut conn, &[1, 2, 3]),
    )
    .await;
    conn.done();
    let mut plain = s.plain().await;
    let left: Vec<(u64,)> = sqlx::query_as("SELECT id FROM waiters ORDER BY id")
        .fetch_all(&mut plain)
        .await
        .unwrap();
    assert_eq!(left, [(4,), (5,), (7,)]);
    drop(conn);
    drop(other);
    s.stop().await;
}

#[tokio::test]
async fn claiming_a_brokers_grants_leaves_other_brokers_rows_alone() {
    let s = Scratch::new().await;
    s.fill(WAITERS).await;
    s.fill(&[
        "INSERT INTO waiters (id, tenant, kind, lock_key, owner, ttl_ms, broker, enqueued_at, deadline, \
         granted_token, granted_expires_at) VALUES \
         (6, 't', 0, 'd', 'o6', 1000, 'other', NOW(6), NOW(6) + INTERVAL 1 HOUR, 3, NOW(6) + INTERVAL 1 MINUTE)",
    ])
    .await;
    // Another broker's grant, being delivered.
    let other = s
        .hold("SELECT id FROM waiters WHERE id = 4 FOR UPDATE")
        .await;
    let mut conn = s.conn().await;
    let claimed = quickly(
        "claiming broker here's grants",
        store::waiters::claim_for_broker(&mut conn, "here"),
    )
    .await;
    conn.done();
    assert_eq!(claimed, 1);
    drop(conn);
    drop(other);
    s.stop().await;
}

/// The session's row-read counters (`Handler_read_*`).
async fn handler_reads(conn: &mut Conn) -> std::collections::BTreeMap<String, i64> {
    let sql = "SHOW SESSION STATUS WHERE Variable_name IN \
        ('Handler_read_rnd_next', 'Handler_read_key', 'Handler_read_next')";
    let rows: Vec<(String, String)> = conn.fetch_all(sql, ()).await.unwrap();
    rows.into_iter()
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect()
}
