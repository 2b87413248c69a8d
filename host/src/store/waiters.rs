//! The `waiters` table: the durable wait queue. Every insert, grant and
//! delete of a pending waiter happens while its key's header row is locked
//! by the caller (see the migration), so these queries need no locks.
//!
//! A pending waiter is *eligible* while its deadline has not passed and its
//! broker heartbeated within `alive_us` microseconds (the caller's
//! threshold): only eligible waiters are handed a lease or counted.
//! A granted row is *claimed* once its broker has taken the grant for its
//! client; an unclaimed grant of a broker that is no longer alive was never
//! delivered, and may be taken back.

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::{pool::Conn, Kind, RowKey};

/// SQL: the waiter row `w` belongs to a broker seen alive within `?` µs.
const BROKER_ALIVE: &str =
    "w.broker IN (SELECT name FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND)";

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
}

/// Enqueues a waiter; its id.
pub async fn insert(conn: &mut Conn, k: RowKey<'_>, w: NewWaiter<'_>) -> sqlx::Result<u64> {
    let done = conn
        .run(|c| {
            sqlx::query(
                r#"
INSERT INTO waiters (tenant, kind, lock_key, owner, priority, ttl_ms, broker, enqueued_at, deadline)
VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6), NOW(6) + INTERVAL ? MICROSECOND)
"#,
            )
            .bind(k.tenant)
            .bind(k.kind as u8)
            .bind(k.key)
            .bind(w.owner)
            .bind(w.priority)
            .bind(w.ttl_ms)
            .bind(w.broker)
            .bind(w.wait_ms.saturating_mul(1000))
            .execute(c)
        })
        .await?;
    Ok(done.last_insert_id())
}

/// Which end of the queue to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Oldest,
    /// Highest priority first, oldest first among equals.
    MostUrgent,
}

/// Up to `limit` eligible pending waiters of a key, in `order`.
pub async fn pending(
    conn: &mut Conn,
    k: RowKey<'_>,
    order: Order,
    limit: u32,
    alive_us: u64,
) -> sqlx::Result<Vec<WaiterRow>> {
    let order_by = match order {
        Order::Oldest => "w.id",
        Order::MostUrgent => "w.priority DESC, w.id",
    };
    let sql = format!(
        r#"
SELECT w.id, w.owner, w.priority, w.ttl_ms, w.broker, w.attempts,
       CAST(UNIX_TIMESTAMP(w.enqueued_at) * 1000 AS UNSIGNED) AS enqueued_ms
FROM waiters w
WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ? AND w.granted_token IS NULL
  AND w.deadline > NOW(6) AND {BROKER_ALIVE}
ORDER BY {order_by} LIMIT ?
"#
    );
    conn.run(|c| {
        sqlx::query_as(&sql)
            .bind(k.tenant)
            .bind(k.kind as u8)
            .bind(k.key)
            .bind(alive_us)
            .bind(limit)
            .fetch_all(c)
    })
    .await
}

/// Removes a key's pending waiters that are not eligible (deadline passed,
/// or broker not alive); how many.
pub async fn purge_ineligible(conn: &mut Conn, k: RowKey<'_>, alive_us: u64) -> sqlx::Result<u64> {
    let sql = format!(
        r#"
DELETE w FROM waiters w
WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ? AND w.granted_token IS NULL
  AND (w.deadline <= NOW(6) OR NOT {BROKER_ALIVE})
"#
    );
    let done = conn
        .run(|c| {
            sqlx::query(&sql)
                .bind(k.tenant)
                .bind(k.kind as u8)
                .bind(k.key)
                .bind(alive_us)
                .execute(c)
        })
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
    conn.run(|c| {
        sqlx::query(
            r#"
UPDATE waiters SET granted_token = ?, granted_slot = ?, granted_expires_at = ?, claimed = ?
WHERE id = ?
"#,
        )
        .bind(token)
        .bind(slot)
        .bind(expires_at)
        .bind(u8::from(claimed))
        .bind(id)
        .execute(c)
    })
    .await
}

/// Counts one more pass-over for waiters a handoff skipped.
pub async fn passed_over(conn: &mut Conn, ids: &[u64]) -> sqlx::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("UPDATE waiters SET attempts = attempts + 1 WHERE id IN ({marks})");
    conn.run(|c| {
        let mut query = sqlx::query(&sql);
        for id in ids {
            query = query.bind(id);
        }
        query.execute(c)
    })
    .await?;
    Ok(())
}

/// A waiter's row, if it still exists.
pub async fn get(conn: &mut Conn, id: u64) -> sqlx::Result<Option<GrantRow>> {
    conn.run(|c| {
        sqlx::query_as(
            r#"
SELECT id, granted_token, granted_slot, granted_expires_at, claimed FROM waiters WHERE id = ?
"#,
        )
        .bind(id)
        .fetch_optional(c)
    })
    .await
}

/// Removes a waiter's row.
pub async fn delete(conn: &mut Conn, id: u64) -> sqlx::Result<MySqlQueryResult> {
    conn.run(|c| {
        sqlx::query("DELETE FROM waiters WHERE id = ?")
            .bind(id)
            .execute(c)
    })
    .await
}

/// Claims the grants to waiters of `broker` that are not claimed yet;
/// how many.
pub async fn claim_for_broker(conn: &mut Conn, broker: &str) -> sqlx::Result<u64> {
    let done = conn
        .run(|c| {
            sqlx::query(
                r#"
UPDATE waiters SET claimed = 1 WHERE broker = ? AND granted_token IS NOT NULL AND claimed = 0
"#,
            )
            .bind(broker)
            .execute(c)
        })
        .await?;
    Ok(done.rows_affected())
}

/// Granted waiters of one broker: its one batched check per tick.
pub async fn granted_for_broker(conn: &mut Conn, broker: &str) -> sqlx::Result<Vec<GrantRow>> {
    conn.run(|c| {
        sqlx::query_as(
            r#"
SELECT id, granted_token, granted_slot, granted_expires_at, claimed FROM waiters
WHERE broker = ? AND granted_token IS NOT NULL
"#,
        )
        .bind(broker)
        .fetch_all(c)
    })
    .await
}

/// Eligible pending waiters of a tenant, across keys and brokers.
pub async fn pending_for_tenant(conn: &mut Conn, tenant: &str, alive_us: u64) -> sqlx::Result<u64> {
    let sql = format!(
        r#"
SELECT COUNT(*) FROM waiters w
WHERE w.tenant = ? AND w.granted_token IS NULL AND w.deadline > NOW(6) AND {BROKER_ALIVE}
"#
    );
    let (n,): (i64,) = conn
        .run(|c| {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(alive_us)
                .fetch_one(c)
        })
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A key the reaper should look at.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReapKey {
    pub tenant: Vec<u8>,
    pub kind: i64,
    pub lock_key: Vec<u8>,
}

/// What makes a key worth reaping, besides a free lease with waiters.
/// `?`s: alive µs, grace µs, alive µs.
const NEEDS_CLEANING: &str = r#"
(w.granted_token IS NULL
     AND (w.deadline < NOW(6) - INTERVAL ? MICROSECOND
          OR w.broker NOT IN (SELECT name FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND)))
 OR (w.granted_token IS NOT NULL AND w.claimed = 0
     AND w.broker NOT IN (SELECT name FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND))
"#;

/// Locks and elections with pending waiters whose lease is free or has
/// expired, with pending waiters past their deadline by `grace_us` or of
/// dead brokers, or with unclaimed grants of dead brokers.
pub async fn lock_keys_to_reap(
    conn: &mut Conn,
    limit: u32,
    alive_us: u64,
    grace_us: u64,
) -> sqlx::Result<Vec<ReapKey>> {
    let sql = format!(
        r#"
SELECT DISTINCT w.tenant, CAST(w.kind AS SIGNED) AS kind, w.lock_key FROM waiters w
JOIN locks l ON l.tenant = w.tenant AND l.kind = w.kind AND l.lock_key = w.lock_key
WHERE w.kind IN (0, 1)
  AND ((w.granted_token IS NULL AND (l.owner IS NULL OR l.expires_at <= NOW(6)))
       OR {NEEDS_CLEANING})
LIMIT ?
"#
    );
    conn.run(|c| {
        sqlx::query_as(&sql)
            .bind(grace_us)
            .bind(alive_us)
            .bind(alive_us)
            .bind(limit)
            .fetch_all(c)
    })
    .await
}

/// Semaphores with pending waiters and a free or expired slot, or with
/// waiters to clean as for locks.
pub async fn semaphore_keys_to_reap(
    conn: &mut Conn,
    limit: u32,
    alive_us: u64,
    grace_us: u64,
) -> sqlx::Result<Vec<ReapKey>> {
    let sql = format!(
        r#"
SELECT DISTINCT s.tenant, CAST({kind} AS SIGNED) AS kind, s.sem_key AS lock_key FROM semaphores s
JOIN semaphore_slots x ON x.tenant = s.tenant AND x.sem_key = s.sem_key
WHERE s.queued > 0 AND (x.owner IS NULL OR x.expires_at <= NOW(6))
UNION
SELECT DISTINCT w.tenant, CAST(w.kind AS SIGNED) AS kind, w.lock_key FROM waiters w
WHERE w.kind = {kind} AND ({NEEDS_CLEANING})
LIMIT ?
"#,
        kind = Kind::Semaphore as u8
    );
    conn.run(|c| {
        sqlx::query_as(&sql)
            .bind(grace_us)
            .bind(alive_us)
            .bind(alive_us)
            .bind(limit)
            .fetch_all(c)
    })
    .await
}

/// Unclaimed grants of a key to waiters of brokers not seen alive within
/// `alive_us`.
pub async fn undelivered(
    conn: &mut Conn,
    k: RowKey<'_>,
    alive_us: u64,
) -> sqlx::Result<Vec<Undelivered>> {
    let sql = format!(
        r#"
SELECT w.id, w.owner, w.granted_token, w.granted_slot FROM waiters w
WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ?
  AND w.granted_token IS NOT NULL AND w.claimed = 0 AND NOT {BROKER_ALIVE}
"#
    );
    conn.run(|c| {
        sqlx::query_as(&sql)
            .bind(k.tenant)
            .bind(k.kind as u8)
            .bind(k.key)
            .bind(alive_us)
            .fetch_all(c)
    })
    .await
}

/// Takes back an unclaimed grant: true if it was still unclaimed (a
/// broker's claim and this are atomic on the row).
pub async fn revoke(conn: &mut Conn, id: u64) -> sqlx::Result<bool> {
    let done = conn
        .run(|c| {
            sqlx::query("DELETE FROM waiters WHERE id = ? AND claimed = 0")
                .bind(id)
                .execute(c)
        })
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Removes granted rows nobody collected long after their lease ended.
pub async fn delete_uncollected(conn: &mut Conn) -> sqlx::Result<u64> {
    let done = conn
        .run(|c| {
            sqlx::query(
                r#"
DELETE FROM waiters
WHERE granted_token IS NOT NULL AND granted_expires_at < NOW(6) - INTERVAL 1 MINUTE
LIMIT 1000
"#,
            )
            .execute(c)
        })
        .await?;
    Ok(done.rows_affected())
}
