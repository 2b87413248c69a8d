//! The `waiters` table: the durable wait queue. Every insert, grant and
//! delete of a pending waiter happens while its key's header row is locked
//! by the caller (see the migration), so these queries need no locks.

use chrono::NaiveDateTime;
use sqlx::{mysql::MySqlQueryResult, MySqlExecutor};

use super::{Kind, RowKey};

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
pub async fn insert(
    db: impl MySqlExecutor<'_>,
    k: RowKey<'_>,
    w: NewWaiter<'_>,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
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
    .execute(db)
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

/// Up to `limit` pending, unexpired waiters of a key, in `order`.
pub async fn pending(
    db: impl MySqlExecutor<'_>,
    k: RowKey<'_>,
    order: Order,
    limit: u32,
) -> sqlx::Result<Vec<WaiterRow>> {
    let order_by = match order {
        Order::Oldest => "id",
        Order::MostUrgent => "priority DESC, id",
    };
    sqlx::query_as(&format!(
        r#"
SELECT id, owner, priority, ttl_ms, broker, attempts,
       CAST(UNIX_TIMESTAMP(enqueued_at) * 1000 AS UNSIGNED) AS enqueued_ms
FROM waiters
WHERE tenant = ? AND kind = ? AND lock_key = ? AND granted_token IS NULL AND deadline > NOW(6)
ORDER BY {order_by} LIMIT ?
"#
    ))
    .bind(k.tenant)
    .bind(k.kind as u8)
    .bind(k.key)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Records the handoff to a waiter.
pub async fn grant(
    db: impl MySqlExecutor<'_>,
    id: u64,
    token: u64,
    slot: Option<u32>,
    expires_at: NaiveDateTime,
) -> sqlx::Result<MySqlQueryResult> {
    sqlx::query(
        r#"
UPDATE waiters SET granted_token = ?, granted_slot = ?, granted_expires_at = ? WHERE id = ?
"#,
    )
    .bind(token)
    .bind(slot)
    .bind(expires_at)
    .bind(id)
    .execute(db)
    .await
}

/// Counts one more pass-over for waiters a handoff skipped.
pub async fn passed_over(db: impl MySqlExecutor<'_>, ids: &[u64]) -> sqlx::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("UPDATE waiters SET attempts = attempts + 1 WHERE id IN ({marks})");
    let mut query = sqlx::query(&sql);
    for id in ids {
        query = query.bind(id);
    }
    query.execute(db).await?;
    Ok(())
}

/// A waiter's row, if it still exists.
pub async fn get(db: impl MySqlExecutor<'_>, id: u64) -> sqlx::Result<Option<GrantRow>> {
    sqlx::query_as(
        r#"
SELECT id, granted_token, granted_slot, granted_expires_at FROM waiters WHERE id = ?
"#,
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Removes a waiter's row.
pub async fn delete(db: impl MySqlExecutor<'_>, id: u64) -> sqlx::Result<MySqlQueryResult> {
    sqlx::query("DELETE FROM waiters WHERE id = ?")
        .bind(id)
        .execute(db)
        .await
}

/// Granted waiters of one broker: its one batched check per tick.
pub async fn granted_for_broker(
    db: impl MySqlExecutor<'_>,
    broker: &str,
) -> sqlx::Result<Vec<GrantRow>> {
    sqlx::query_as(
        r#"
SELECT id, granted_token, granted_slot, granted_expires_at FROM waiters
WHERE broker = ? AND granted_token IS NOT NULL
"#,
    )
    .bind(broker)
    .fetch_all(db)
    .await
}

/// Pending waiters of a tenant, across keys and brokers.
pub async fn pending_for_tenant(db: impl MySqlExecutor<'_>, tenant: &str) -> sqlx::Result<u64> {
    let (n,): (i64,) = sqlx::query_as(
        r#"
SELECT COUNT(*) FROM waiters WHERE tenant = ? AND granted_token IS NULL
"#,
    )
    .bind(tenant)
    .fetch_one(db)
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

/// Seconds a pending waiter may outlive its deadline before it counts as
/// abandoned (its broker died) and the reaper removes it.
pub const STALE_AFTER_S: u32 = 10;

/// Locks and elections with pending waiters whose lease is free or has
/// expired, or with abandoned waiters.
pub async fn lock_keys_to_reap(
    db: impl MySqlExecutor<'_>,
    limit: u32,
) -> sqlx::Result<Vec<ReapKey>> {
    sqlx::query_as(&format!(
        r#"
SELECT DISTINCT w.tenant, CAST(w.kind AS SIGNED) AS kind, w.lock_key FROM waiters w
JOIN locks l ON l.tenant = w.tenant AND l.kind = w.kind AND l.lock_key = w.lock_key
WHERE w.granted_token IS NULL AND w.kind IN (0, 1)
  AND (l.owner IS NULL OR l.expires_at <= NOW(6)
       OR w.deadline < NOW(6) - INTERVAL {STALE_AFTER_S} SECOND)
LIMIT ?
"#
    ))
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Semaphores with pending waiters and a free or expired slot, or with
/// abandoned waiters.
pub async fn semaphore_keys_to_reap(
    db: impl MySqlExecutor<'_>,
    limit: u32,
) -> sqlx::Result<Vec<ReapKey>> {
    sqlx::query_as(&format!(
        r#"
SELECT DISTINCT s.tenant, CAST({kind} AS SIGNED) AS kind, s.sem_key AS lock_key FROM semaphores s
JOIN semaphore_slots x ON x.tenant = s.tenant AND x.sem_key = s.sem_key
WHERE s.queued > 0 AND (x.owner IS NULL OR x.expires_at <= NOW(6))
UNION
SELECT DISTINCT w.tenant, CAST(w.kind AS SIGNED) AS kind, w.lock_key FROM waiters w
WHERE w.granted_token IS NULL AND w.kind = {kind}
  AND w.deadline < NOW(6) - INTERVAL {STALE_AFTER_S} SECOND
LIMIT ?
"#,
        kind = Kind::Semaphore as u8
    ))
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Removes a key's abandoned waiters; how many.
pub async fn delete_stale(db: impl MySqlExecutor<'_>, k: RowKey<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query(&format!(
        r#"
DELETE FROM waiters
WHERE tenant = ? AND kind = ? AND lock_key = ? AND granted_token IS NULL
  AND deadline < NOW(6) - INTERVAL {STALE_AFTER_S} SECOND
"#
    ))
    .bind(k.tenant)
    .bind(k.kind as u8)
    .bind(k.key)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Removes granted rows nobody collected (their broker died) long after
/// their lease ended.
pub async fn delete_uncollected(db: impl MySqlExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query(
        r#"
DELETE FROM waiters
WHERE granted_token IS NOT NULL AND granted_expires_at < NOW(6) - INTERVAL 1 MINUTE
LIMIT 1000
"#,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
