//! The `locks` table: one row per (tenant, kind, storage key), for locks
//! and elections.

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::{brokers, lease_free, lease_live, pool::Conn, KeyRow, Kind, Locking, RowKey};

/// A lock row as read inside a grant transaction, with the database's clock
/// (the engine judges whether the lease is live by `now`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LockRow {
    pub owner: Option<Vec<u8>>,
    pub token: u64,
    pub hold_count: u32,
    pub expires_at: Option<NaiveDateTime>,
    /// Pending waiters (exact while the row is locked).
    pub queued: u32,
    /// The mark of the release that last ended a lease here.
    pub released_by: Option<u64>,
    /// No new grant before this (lock-delay, minimum hold).
    pub not_before: Option<NaiveDateTime>,
    /// The broker whose memory holds waiters for this key, as written.
    pub waiting_at: Option<Vec<u8>>,
    /// `waiting_at` if that broker is alive (heartbeat within
    /// [`brokers::ALIVE_US`] by the database clock): then the key has
    /// waiters, though `queued` may be 0.
    pub standby: Option<Vec<u8>>,
    /// The session the lease is held in (`sessions`), if any.
    pub session: Option<Vec<u8>>,
    /// `NOW(6)` when the row was read: expiry is judged by this clock only.
    pub now: NaiveDateTime,
}

/// SQL: the columns of a [`LockRow`] of the `locks` row aliased `alias`.
/// `standby` reads `brokers` in a subquery, which a locking read of the
/// outer statement does not lock (InnoDB locks only the rows of the table
/// named by `FOR UPDATE`'s statement, not those its subqueries read), so a
/// heartbeat never waits for a lock read and no lock read for a heartbeat.
pub fn row_columns(alias: &str) -> String {
    format!(
        "{alias}.owner, {alias}.token, {alias}.hold_count, {alias}.expires_at, {alias}.queued, \
         {alias}.released_by, {alias}.not_before, {alias}.waiting_at, \
         IF({alias}.waiting_at IS NOT NULL AND EXISTS (SELECT 1 FROM brokers b \
           WHERE b.name = {alias}.waiting_at \
           AND b.heartbeat_at > NOW(6) - INTERVAL {alive} MICROSECOND), \
           {alias}.waiting_at, NULL) AS standby, \
         {alias}.session, NOW(6) AS now",
        alive = brokers::ALIVE_US
    )
}

/// Reads a key's row with the database clock, locking it as asked.
pub async fn select(
    conn: &mut Conn,
    k: RowKey<'_>,
    locking: Locking,
) -> sqlx::Result<Option<LockRow>> {
    let suffix = locking.suffix();
    let columns = row_columns("l");
    let sql = format!(
        r#"
SELECT {columns}
FROM locks l WHERE l.tenant = ? AND l.kind = ? AND l.lock_key = ?
{suffix}
"#
    );
    conn.fetch_optional(&sql, (k.tenant, k.kind as u8, k.key))
        .await
}

/// Marks the key as having waiters in `broker`'s memory for the live lease
/// `owner` holds with `token`, unless another live broker's mark is there
/// (one autocommit statement); whether it did. A mark left by a broker
/// that is no longer alive is replaced.
pub async fn set_standby(
    conn: &mut Conn,
    k: RowKey<'_>,
    broker: &str,
    owner: &str,
    token: u64,
) -> sqlx::Result<bool> {
    let sql = format!(
        r#"
UPDATE locks l SET l.waiting_at = ?
WHERE l.tenant = ? AND l.kind = ? AND l.lock_key = ? AND l.owner = ? AND l.token = ? AND {live}
  AND (l.waiting_at IS NULL OR l.waiting_at = ? OR NOT EXISTS (SELECT 1 FROM brokers b
    WHERE b.name = l.waiting_at AND b.heartbeat_at > NOW(6) - INTERVAL {alive} MICROSECOND))
"#,
        live = lease_live("l"),
        alive = brokers::ALIVE_US
    );
    let done = conn
        .execute(
            &sql,
            (broker, k.tenant, k.kind as u8, k.key, owner, token, broker),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// SQL: takes a broker's mark off a key (tenant, kind, key, broker).
const CLEAR_STANDBY: &str = r#"
UPDATE locks SET waiting_at = NULL
WHERE tenant = ? AND kind = ? AND lock_key = ? AND waiting_at = ?
"#;

/// Takes `broker`'s mark off the key, deferred to go with the commit of
/// the caller's transaction (which holds the row).
pub async fn clear_standby(conn: &mut Conn, k: RowKey<'_>, broker: &str) -> sqlx::Result<()> {
    conn.defer(CLEAR_STANDBY, (k.tenant, k.kind as u8, k.key, broker))
        .await
}

/// Takes `broker`'s mark off the key while its lease is live (one
/// autocommit statement); false when the row is free (the key may be
/// waiting for `broker` to hand it on) or not marked by `broker`.
pub async fn clear_standby_if_held(
    conn: &mut Conn,
    k: RowKey<'_>,
    broker: &str,
) -> sqlx::Result<bool> {
    let sql = format!(
        r#"
UPDATE locks l SET l.waiting_at = NULL
WHERE l.tenant = ? AND l.kind = ? AND l.lock_key = ? AND l.waiting_at = ? AND {live}
"#,
        live = lease_live("l")
    );
    let done = conn
        .execute(&sql, (k.tenant, k.kind as u8, k.key, broker))
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Takes `broker`'s mark off the key, whatever its lease (one autocommit
/// statement): for a mark its broker no longer stands behind (a free key
/// with waiters queued is then handed on by the reaper).
pub async fn drop_standby(conn: &mut Conn, k: RowKey<'_>, broker: &str) -> sqlx::Result<()> {
    conn.execute(CLEAR_STANDBY, (k.tenant, k.kind as u8, k.key, broker))
        .await?;
    Ok(())
}

/// Creates the row of a key never seen before, in its own autocommit
/// statement. Two first acquirers racing here both succeed (the second
/// insert is ignored); they then meet on the row lock as usual.
pub async fn insert_missing(conn: &mut Conn, k: RowKey<'_>) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        r#"
INSERT IGNORE INTO locks (tenant, kind, lock_key) VALUES (?, ?, ?)
"#,
        (k.tenant, k.kind as u8, k.key),
    )
    .await
}

/// A lease to write into a lock row.
#[derive(Debug, Clone, Copy)]
pub struct LeaseWrite<'a> {
    pub owner: &'a str,
    pub token: u64,
    pub hold_count: u32,
    pub expires_at: NaiveDateTime,
    /// Marks a write made by a release (a handoff); `None` keeps the mark.
    pub released_by: Option<u64>,
    /// No new grant before this; `None` keeps the row's.
    pub not_before: Option<NaiveDateTime>,
    /// The session the lease is held in (`None`: a plain lease).
    pub session: Option<&'a str>,
}

/// Writes a lease: holder, token, hold count and expiry, and the marks of
/// [`LeaseWrite`]. Deferred (`Conn::defer`): the caller holds the row, so
/// the write cannot miss it, and goes with the commit.
pub async fn write_lease(conn: &mut Conn, k: RowKey<'_>, w: LeaseWrite<'_>) -> sqlx::Result<()> {
    conn.defer(
        r#"
UPDATE locks SET owner = ?, token = ?, hold_count = ?, expires_at = ?,
  released_by = COALESCE(?, released_by), not_before = COALESCE(?, not_before), session = ?
WHERE tenant = ? AND kind = ? AND lock_key = ?
"#,
        (
            w.owner,
            w.token,
            w.hold_count,
            w.expires_at,
            w.released_by,
            w.not_before,
            w.session,
            k.tenant,
            k.kind as u8,
            k.key,
        ),
    )
    .await
}

/// Frees a key. The token stays: the next grant continues from it.
/// `released_by` and `not_before` as for [`LeaseWrite`].
pub async fn free(
    conn: &mut Conn,
    k: RowKey<'_>,
    released_by: Option<u64>,
    not_before: Option<NaiveDateTime>,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        r#"
UPDATE locks SET owner = NULL, hold_count = 0, expires_at = NULL, session = NULL,
  released_by = COALESCE(?, released_by), not_before = COALESCE(?, not_before)
WHERE tenant = ? AND kind = ? AND lock_key = ?
"#,
        (released_by, not_before, k.tenant, k.kind as u8, k.key),
    )
    .await
}

/// Frees a key in one autocommit statement if its row holds `owner`'s
/// live lease with `token`, held `holds` times, and no waiter is queued,
/// marking the row with `released_by` (a row already marked so is left to
/// the full release, which tells a replay from a new release); whether it
/// did. (The engine uses it
/// for the common release, which then needs no handoff.) A lease held in
/// a session is left to the full release, whose read of the row names the
/// session in the `released` event.
pub async fn free_if_alone(
    conn: &mut Conn,
    k: RowKey<'_>,
    owner: &str,
    token: u64,
    holds: u32,
    released_by: u64,
) -> sqlx::Result<bool> {
    let sql = format!(
        r#"
UPDATE locks l SET l.owner = NULL, l.hold_count = 0, l.expires_at = NULL, l.session = NULL,
  l.released_by = ?
WHERE l.tenant = ? AND l.kind = ? AND l.lock_key = ?
  AND l.owner = ? AND l.token = ? AND l.hold_count = ? AND l.queued = 0 AND {live}
  AND l.waiting_at IS NULL AND l.session IS NULL
  AND NOT (l.released_by <=> ?)
"#,
        live = lease_live("l")
    );
    let done = conn
        .execute(
            &sql,
            (
                released_by,
                k.tenant,
                k.kind as u8,
                k.key,
                owner,
                token,
                holds,
                released_by,
            ),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Keys of locks and elections that have pending waiters but a free or
/// expired lease (nobody handed it on), up to `limit`.
pub async fn free_with_waiters(conn: &mut Conn, limit: u32) -> sqlx::Result<Vec<KeyRow>> {
    // Driven from the (small) queue, not from every lock row.
    let sql = format!(
        r#"
SELECT DISTINCT w.tenant, CAST(w.kind AS SIGNED) AS kind, w.lock_key FROM waiters w
JOIN locks l ON l.tenant = w.tenant AND l.kind = w.kind AND l.lock_key = w.lock_key
WHERE w.kind IN (?, ?) AND w.granted_token IS NULL AND {free}
LIMIT ?
"#,
        free = lease_free("l")
    );
    conn.fetch_all(&sql, (Kind::Lock as u8, Kind::Election as u8, limit))
        .await
}
