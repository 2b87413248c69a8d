//! The `locks` table: one row per (tenant, kind, storage key), for locks
//! and elections.

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::{pool::Conn, RowKey};

/// A lock row as read inside a grant transaction, with the database's clock.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LockRow {
    pub owner: Option<Vec<u8>>,
    pub token: u64,
    pub hold_count: u32,
    pub expires_at: Option<NaiveDateTime>,
    /// Pending waiters (exact while the row is locked).
    pub queued: u32,
    /// `NOW(6)` when the row was read: expiry is judged by this clock only.
    pub now: NaiveDateTime,
}

impl LockRow {
    /// The current holder, if the lease has not expired by the database clock.
    pub fn live_owner(&self) -> Option<&[u8]> {
        match (&self.owner, self.expires_at) {
            (Some(owner), Some(expires_at)) if expires_at > self.now => Some(owner),
            _ => None,
        }
    }

    /// Milliseconds left on a live lease, 0 otherwise.
    pub fn remaining_ms(&self) -> u64 {
        match (self.live_owner(), self.expires_at) {
            (Some(_), Some(expires_at)) => {
                u64::try_from((expires_at - self.now).num_milliseconds()).unwrap_or(0)
            }
            _ => 0,
        }
    }
}

/// How a read of a lock row locks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// A plain consistent read.
    None,
    /// `FOR UPDATE`: waits (briefly) for other transactions.
    Wait,
    /// `FOR UPDATE NOWAIT`: fails at once (1205 / 3572) if the row is busy.
    NoWait,
    /// `FOR UPDATE SKIP LOCKED`: `None` if the row is busy, as if missing;
    /// how reapers of several brokers stay out of each other's way.
    SkipLocked,
}

impl Locking {
    /// The clause that ends a `SELECT` locked this way.
    pub fn suffix(self) -> &'static str {
        match self {
            Locking::None => "",
            Locking::Wait => "FOR UPDATE",
            Locking::NoWait => "FOR UPDATE NOWAIT",
            Locking::SkipLocked => "FOR UPDATE SKIP LOCKED",
        }
    }
}

/// Reads a key's row with the database clock, locking it as asked.
pub async fn select(
    conn: &mut Conn,
    k: RowKey<'_>,
    locking: Locking,
) -> sqlx::Result<Option<LockRow>> {
    let suffix = locking.suffix();
    let sql = format!(
        r#"
SELECT owner, token, hold_count, expires_at, queued, NOW(6) AS now
FROM locks WHERE tenant = ? AND kind = ? AND lock_key = ?
{suffix}
"#
    );
    conn.run(|c| {
        sqlx::query_as(&sql)
            .bind(k.tenant)
            .bind(k.kind as u8)
            .bind(k.key)
            .fetch_optional(c)
    })
    .await
}

/// Creates the row of a key never seen before, in its own autocommit
/// statement. Two first acquirers racing here both succeed (the second
/// insert is ignored); they then meet on the row lock as usual.
pub async fn insert_missing(conn: &mut Conn, k: RowKey<'_>) -> sqlx::Result<MySqlQueryResult> {
    conn.run(|c| {
        sqlx::query(
            r#"
INSERT IGNORE INTO locks (tenant, kind, lock_key) VALUES (?, ?, ?)
"#,
        )
        .bind(k.tenant)
        .bind(k.kind as u8)
        .bind(k.key)
        .execute(c)
    })
    .await
}

/// Writes a lease: holder, token, hold count and expiry.
pub async fn write_lease(
    conn: &mut Conn,
    k: RowKey<'_>,
    owner: &str,
    token: u64,
    hold_count: u32,
    expires_at: NaiveDateTime,
) -> sqlx::Result<MySqlQueryResult> {
    conn.run(|c| {
        sqlx::query(
            r#"
UPDATE locks SET owner = ?, token = ?, hold_count = ?, expires_at = ?
WHERE tenant = ? AND kind = ? AND lock_key = ?
"#,
        )
        .bind(owner)
        .bind(token)
        .bind(hold_count)
        .bind(expires_at)
        .bind(k.tenant)
        .bind(k.kind as u8)
        .bind(k.key)
        .execute(c)
    })
    .await
}

/// Frees a key. The token stays: the next grant continues from it.
pub async fn free(conn: &mut Conn, k: RowKey<'_>) -> sqlx::Result<MySqlQueryResult> {
    conn.run(|c| {
        sqlx::query(
            r#"
UPDATE locks SET owner = NULL, hold_count = 0, expires_at = NULL
WHERE tenant = ? AND kind = ? AND lock_key = ?
"#,
        )
        .bind(k.tenant)
        .bind(k.kind as u8)
        .bind(k.key)
        .execute(c)
    })
    .await
}

/// Adds `delta` to the count of pending waiters (row locked by the caller).
pub async fn add_queued(
    conn: &mut Conn,
    k: RowKey<'_>,
    delta: i64,
) -> sqlx::Result<MySqlQueryResult> {
    conn.run(|c| {
        sqlx::query(
            r#"
UPDATE locks SET queued = CAST(queued AS SIGNED) + ?
WHERE tenant = ? AND kind = ? AND lock_key = ?
"#,
        )
        .bind(delta)
        .bind(k.tenant)
        .bind(k.kind as u8)
        .bind(k.key)
        .execute(c)
    })
    .await
}

/// Frees a key in one autocommit statement when that is all a release has
/// to do: `owner` holds it live with `token`, once, and nobody waits.
/// Returns whether it did; otherwise the caller takes the full path.
pub async fn free_if_sole_holder(
    conn: &mut Conn,
    k: RowKey<'_>,
    owner: &str,
    token: u64,
) -> sqlx::Result<bool> {
    let done = conn
        .run(|c| {
            sqlx::query(
                r#"
UPDATE locks SET owner = NULL, hold_count = 0, expires_at = NULL
WHERE tenant = ? AND kind = ? AND lock_key = ?
  AND owner = ? AND token = ? AND hold_count = 1 AND queued = 0 AND expires_at > NOW(6)
"#,
            )
            .bind(k.tenant)
            .bind(k.kind as u8)
            .bind(k.key)
            .bind(owner)
            .bind(token)
            .execute(c)
        })
        .await?;
    Ok(done.rows_affected() == 1)
}
