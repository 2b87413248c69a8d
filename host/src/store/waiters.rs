//! The `waiters` table: the durable wait queue. Every insert, grant and
//! delete of a pending waiter happens while its key's header row is locked
//! by the caller (see the migration), so these queries need no locks.
//!
//! Two conditions, each written once here and given their thresholds by
//! the engine ([`Staleness`]), which decides when each applies:
//!
//! - a pending waiter is *stale* once its deadline has passed (by a grace
//!   the caller chooses) or its broker has not heartbeated within a window:
//!   the engine never hands a lease to a stale waiter nor counts it, and
//!   clears stale waiters out ([`STALE`]);
//! - a granted row is *claimed* once its broker has taken the grant for its
//!   client; an unclaimed grant of a broker that is no longer alive was
//!   never delivered, and may be taken back ([`UNDELIVERED`]).

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::{pool::Conn, KeyRow, RowKey};

/// SQL: the waiter row `w` belongs to a broker heard from within `?` µs.
macro_rules! broker_alive {
    () => {
        "w.broker IN (SELECT name FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND)"
    };
}

/// SQL: the waiter row `w` can still take a lease: its deadline is less
/// than `?` µs ago and its broker is alive (`?` µs).
macro_rules! eligible {
    () => {
        concat!(
            "(w.deadline > NOW(6) - INTERVAL ? MICROSECOND AND ",
            broker_alive!(),
            ")"
        )
    };
}

/// SQL: the pending waiter row `w` is not stale (see [`STALE`]); written
/// positively, so that the broker check is a semi-join. Binds
/// [`Staleness::bind`].
pub const ELIGIBLE: &str = eligible!();

/// SQL: the waiter row `w` is pending and stale: not [`ELIGIBLE`]. Binds
/// [`Staleness::bind`].
pub const STALE: &str = concat!("(w.granted_token IS NULL AND NOT ", eligible!(), ")");

/// SQL: the waiter row `w` holds a grant that its broker, gone (`?` µs),
/// never claimed.
pub const UNDELIVERED: &str = concat!(
    "(w.granted_token IS NOT NULL AND w.claimed = 0 AND NOT ",
    broker_alive!(),
    ")"
);

/// The thresholds of [`ELIGIBLE`] and [`STALE`], chosen by the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staleness {
    /// A broker not heard from for this long (µs) is gone.
    pub alive_us: u64,
    /// A waiter is stale this long (µs) after its deadline.
    pub grace_us: u64,
}

impl Staleness {
    /// The thresholds, in the order [`ELIGIBLE`] and [`STALE`] take them.
    fn params(self) -> (u64, u64) {
        (self.grace_us, self.alive_us)
    }
}

/// A pending waiter, as a handoff sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WaiterRow {
    pub id: u64,
    pub owner: Vec<u8>,
    pub priority: i32,
    pub ttl_ms: u64,
    pub broker: Vec<u8>,
    pub attempts: u32,
    /// Enqueue time in ms since the Unix epoch, by the database clock.
    pub enqueued_ms: u64,
    /// What a rwlock's waiter asks for (0 read, 1 write); `None` for the
    /// other kinds.
    pub mode: Option<u8>,
    /// The session the waiter asks to hold its lease in.
    pub session: Option<Vec<u8>>,
}

/// A waiter's grant, if the handoff happened.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GrantRow {
    pub id: u64,
    pub granted_token: Option<u64>,
    pub granted_slot: Option<u32>,
    pub granted_expires_at: Option<NaiveDateTime>,
    pub claimed: u8,
}

/// An unclaimed grant of a broker that is no longer alive.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Undelivered {
    pub id: u64,
    pub owner: Vec<u8>,
    pub granted_token: u64,
    pub granted_slot: Option<u32>,
}

/// What a new waiter is.
#[derive(Debug, Clone, Copy)]
pub struct NewWaiter<'a> {
    pub owner: &'a str,
    pub priority: i32,
    pub ttl_ms: u64,
    pub broker: &'a str,
    pub wait_ms: u64,
    /// The session to hold the lease in (its `ttl_ms` is then the session
    /// lease's).
    pub session: Option<&'a str>,
}

/// Enqueues a waiter; its id.
pub async fn insert(conn: &mut Conn, k: RowKey<'_>, w: NewWaiter<'_>) -> sqlx::Result<u64> {
    let done = conn
        .execute(
            r#"
INSERT INTO waiters (tenant, kind, lock_key, owner, priority, ttl_ms, broker, enqueued_at, deadline,
  session)
VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6), NOW(6) + INTERVAL ? MICROSECOND, ?)
"#,
            (
                k.tenant,
                k.kind as u8,
                k.key,
                w.owner,
                w.priority,
                w.ttl_ms,
                w.broker,
                w.wait_ms.saturating_mul(1000),
                w.session,
            ),
        )
        .await?;
    Ok(done.last_insert_id())
}

/// Sets what waiter `id` (of a rwlock, just inserted by the caller's
/// transaction) asks for: 0 read, 1 write.
pub async fn set_mode(conn: &mut Conn, id: u64, mode: u8) -> sqlx::Result<MySqlQueryResult> {
    conn.execute("UPDATE waiters SET mode = ? WHERE id = ?", (mode, id))
        .await
}

/// Which end of the queue to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Oldest,
    /// Highest priority first, oldest first among equals.
    MostUrgent,
}

/// Up to `limit` pending waiters of a key that are not stale, in `order`.
pub async fn pending(
    conn: &mut Conn,
    k: RowKey<'_>,
    order: Order,
    limit: u32,
    stale: Staleness,
) -> sqlx::Result<Vec<WaiterRow>> {
    let order_by = match order {
        Order::Oldest => "w.id",
        Order::MostUrgent => "w.priority DESC, w.id",
    };
    let sql = format!(
        r#"
SELECT w.id, w.owner, w.priority, w.ttl_ms, w.broker, w.attempts,
       CAST(UNIX_TIMESTAMP(w.enqueued_at) * 1000 AS UNSIGNED) AS enqueued_ms, w.mode, w.session
FROM waiters w
WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ? AND w.granted_token IS NULL
  AND {ELIGIBLE}
ORDER BY {order_by} LIMIT ?
"#
    );
    let (grace_us, alive_us) = stale.params();
    conn.fetch_all(
        &sql,
        (k.tenant, k.kind as u8, k.key, grace_us, alive_us, limit),
    )
    .await
}

/// Removes a key's stale pending waiters; how many.
pub async fn delete_stale(conn: &mut Conn, k: RowKey<'_>, stale: Staleness) -> sqlx::Result<u64> {
    let sql = format!(
        r#"
DELETE w FROM waiters w FORCE INDEX (waiters_by_key)
WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ? AND {STALE}
"#
    );
    let (grace_us, alive_us) = stale.params();
    let done = conn
        .execute(&sql, (k.tenant, k.kind as u8, k.key, grace_us, alive_us))
        .await?;
    Ok(done.rows_affected())
}

/// Records the handoff to a waiter. `claimed` when the handing broker is
/// the waiter's own and delivers it in-process.
pub async fn grant(
    conn: &mut Conn,
    id: u64,
    token: u64,
    slot: Option<u32>,
    expires_at: NaiveDateTime,
    claimed: bool,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        r#"
UPDATE waiters SET granted_token = ?, granted_slot = ?, granted_expires_at = ?, claimed = ?
WHERE id = ?
"#,
        (token, slot, expires_at, u8::from(claimed), id),
    )
    .await
}

/// Counts one more pass-over for waiters a handoff skipped.
pub async fn passed_over(conn: &mut Conn, ids: &[u64]) -> sqlx::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!(
        "UPDATE waiters FORCE INDEX (PRIMARY) SET attempts = attempts + 1 WHERE id IN ({marks})"
    );
    let ids: Vec<(u64,)> = ids.iter().map(|id| (*id,)).collect();
    conn.execute(&sql, ids).await?;
    Ok(())
}

/// A waiter's row, if it still exists.
pub async fn get(conn: &mut Conn, id: u64) -> sqlx::Result<Option<GrantRow>> {
    conn.fetch_optional(
        r#"
SELECT id, granted_token, granted_slot, granted_expires_at, claimed FROM waiters WHERE id = ?
"#,
        (id,),
    )
    .await
}

/// Removes a waiter's row.
pub async fn delete(conn: &mut Conn, id: u64) -> sqlx::Result<MySqlQueryResult> {
    conn.execute("DELETE FROM waiters WHERE id = ?", (id,))
        .await
}

/// Removes the rows of waiters `ids` (granted rows whose waiters have their
/// answers), a `DELETE` per id in one text query (each of them its own
/// transaction), each row found by the primary key: `WHERE id IN (...)`
/// was a table scan on a small table, which waited on other keys' waiter
/// rows, and no index hint or join kept a multi-row `DELETE` from locking
/// more than its rows (measured on MariaDB 10.11). In the text protocol,
/// the ids written out: a prepared statement per batch size would churn
/// the statement cache.
pub async fn delete_many(conn: &mut Conn, ids: &[u64]) -> sqlx::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let deletes: Vec<String> = ids
        .iter()
        .map(|id| format!("DELETE FROM waiters WHERE id = {id}"))
        .collect();
    conn.statement(&deletes.join(";\n")).await
}

/// Claims the grants to waiters of `broker` that are not claimed yet;
/// how many.
pub async fn claim_for_broker(conn: &mut Conn, broker: &str) -> sqlx::Result<u64> {
    let done = conn
        .execute(
            r#"
UPDATE waiters FORCE INDEX (waiters_by_broker) SET claimed = 1
WHERE broker = ? AND granted_token IS NOT NULL AND claimed = 0
"#,
            (broker,),
        )
        .await?;
    Ok(done.rows_affected())
}

/// Which of the waiters `ids` still have a row (plain read).
pub async fn present(conn: &mut Conn, ids: &[u64]) -> sqlx::Result<Vec<u64>> {
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("SELECT id FROM waiters WHERE id IN ({marks})");
    let params: Vec<(u64,)> = ids.iter().map(|id| (*id,)).collect();
    let rows: Vec<(u64,)> = conn.fetch_all(&sql, params).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Granted waiters of one broker: its one batched check per tick.
pub async fn granted_for_broker(conn: &mut Conn, broker: &str) -> sqlx::Result<Vec<GrantRow>> {
    conn.fetch_all(
        r#"
SELECT id, granted_token, granted_slot, granted_expires_at, claimed FROM waiters
WHERE broker = ? AND granted_token IS NOT NULL
"#,
        (broker,),
    )
    .await
}

/// Pending waiters of a tenant that are not stale, across keys and brokers.
pub async fn pending_for_tenant(
    conn: &mut Conn,
    tenant: &str,
    stale: Staleness,
) -> sqlx::Result<u64> {
    let sql = format!(
        r#"
SELECT COUNT(*) FROM waiters w
WHERE w.tenant = ? AND w.granted_token IS NULL AND {ELIGIBLE}
"#
    );
    let (grace_us, alive_us) = stale.params();
    let (n,): (i64,) = conn.fetch_one(&sql, (tenant, grace_us, alive_us)).await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// [`pending_for_tenant`], for the wait of session `id` that is checked
/// for a deadlock, and in the same statement whether the session holds
/// any lease (`sessions::HOLDS_ANY`), read after its pin: on one server
/// the caller's transaction already holds the session's row shared (every
/// acquire in a session does, `engine::session::hold`), which a check
/// that reaches the session waits for, since it writes the row
/// (`sessions::PIN`); on Galera, where locks are per node, the session's
/// own pin is a write too (`sessions::pin_for_galera`).
pub async fn pending_for_tenant_and_holding(
    conn: &mut Conn,
    tenant: &str,
    stale: Staleness,
    id: &[u8],
) -> sqlx::Result<(u64, bool)> {
    super::sessions::pin_for_galera(conn, tenant, id).await?;
    let sql = format!(
        r#"
SELECT (SELECT COUNT(*) FROM waiters w
  WHERE w.tenant = ? AND w.granted_token IS NULL AND {ELIGIBLE}), {}
"#,
        super::sessions::HOLDS_ANY
    );
    let (grace_us, alive_us) = stale.params();
    let t = tenant.as_bytes();
    let (n, holds): (i64, i64) = conn
        .fetch_one(&sql, (t, grace_us, alive_us, t, id, t, id, t, id, t, id))
        .await?;
    Ok((u64::try_from(n).unwrap_or(0), holds != 0))
}

/// Keys (of every kind) with stale pending waiters or with grants that
/// gone brokers never claimed, up to `limit`.
pub async fn keys_to_clean(
    conn: &mut Conn,
    stale: Staleness,
    limit: u32,
) -> sqlx::Result<Vec<KeyRow>> {
    let sql = format!(
        r#"
SELECT DISTINCT w.tenant, CAST(w.kind AS SIGNED) AS kind, w.lock_key FROM waiters w
WHERE {STALE} OR {UNDELIVERED}
LIMIT ?
"#
    );
    let (grace_us, alive_us) = stale.params();
    conn.fetch_all(&sql, (grace_us, alive_us, stale.alive_us, limit))
        .await
}

/// A key's grants that gone brokers (not heard from within `alive_us`)
/// never claimed.
pub async fn undelivered(
    conn: &mut Conn,
    k: RowKey<'_>,
    alive_us: u64,
) -> sqlx::Result<Vec<Undelivered>> {
    let sql = format!(
        r#"
SELECT w.id, w.owner, w.granted_token, w.granted_slot FROM waiters w
WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ? AND {UNDELIVERED}
"#
    );
    conn.fetch_all(&sql, (k.tenant, k.kind as u8, k.key, alive_us))
        .await
}

/// Takes back an unclaimed grant: true if it was still unclaimed (a
/// broker's claim and this are atomic on the row).
pub async fn revoke(conn: &mut Conn, id: u64) -> sqlx::Result<bool> {
    let done = conn
        .execute("DELETE FROM waiters WHERE id = ? AND claimed = 0", (id,))
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Removes up to `limit` granted rows whose lease ended more than
/// `after_us` ago (nobody collected them).
pub async fn delete_uncollected(conn: &mut Conn, after_us: u64, limit: u32) -> sqlx::Result<u64> {
    let done = conn
        .execute(
            r#"
DELETE FROM waiters
WHERE granted_token IS NOT NULL AND granted_expires_at < NOW(6) - INTERVAL ? MICROSECOND
LIMIT ?
"#,
            (after_us, limit),
        )
        .await?;
    Ok(done.rows_affected())
}

/// The pending waiters of key `k` as a newcomer of `broker` sees them: the
/// newest one's id (0 with none; a waiter inserted later gets a higher id,
/// the table's auto-increment being given out under the key's row lock)
/// and how many belong to other brokers.
pub async fn queued_for(conn: &mut Conn, k: RowKey<'_>, broker: &str) -> sqlx::Result<(u64, u64)> {
    let (newest, foreign): (u64, u64) = conn
        .fetch_one(
            r#"
SELECT CAST(COALESCE(MAX(id), 0) AS UNSIGNED), CAST(COALESCE(SUM(broker <> ?), 0) AS UNSIGNED)
FROM waiters
WHERE tenant = ? AND kind = ? AND lock_key = ? AND granted_token IS NULL
"#,
            (broker, k.tenant, k.kind as u8, k.key),
        )
        .await?;
    Ok((newest, foreign))
}
