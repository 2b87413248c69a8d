//! The `rwlocks` (header: token counter, writer, queue) and
//! `rwlock_readers` (one row per reader) tables. Every write here happens
//! while the caller holds the key's header row (`FOR UPDATE`), so these
//! statements take no locks of their own beyond the rows they touch.

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::{pool::Conn, KeyRow, Kind, Locking};

/// A rwlock's header, read with the database clock (the engine judges
/// whether the writer's lease is live by `now`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HeaderRow {
    /// The last token granted, read or write.
    pub token: u64,
    pub writer: Option<Vec<u8>>,
    pub writer_token: Option<u64>,
    pub writer_expires_at: Option<NaiveDateTime>,
    /// Pending waiters (exact while the row is locked).
    pub queued: u32,
    /// The mark of the transaction that last changed this key.
    pub changed_by: Option<u64>,
    /// The session the writer's lease is held in, if it is.
    pub writer_session: Option<Vec<u8>>,
    pub now: NaiveDateTime,
}

/// One reader's row (live while `expires_at` is after the `now` it was
/// read with).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReaderRow {
    pub owner: Vec<u8>,
    pub token: u64,
    pub expires_at: NaiveDateTime,
    /// The session the read lease is held in, if it is.
    pub session: Option<Vec<u8>>,
}

/// The header, locked as asked.
pub async fn header(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    locking: Locking,
) -> sqlx::Result<Option<HeaderRow>> {
    let sql = format!(
        r#"
SELECT token, writer, writer_token, writer_expires_at, queued, changed_by, writer_session,
  NOW(6) AS now
FROM rwlocks WHERE tenant = ? AND rw_key = ?
{}
"#,
        locking.suffix()
    );
    conn.fetch_optional(&sql, (tenant, key)).await
}

/// Creates the header of a key never seen before, in its own autocommit
/// statement (two first acquirers racing both succeed; they then meet on
/// the row lock as usual).
pub async fn insert_missing(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        "INSERT IGNORE INTO rwlocks (tenant, rw_key) VALUES (?, ?)",
        (tenant, key),
    )
    .await
}

/// Every reader row of the key, expired ones included (the caller judges
/// them by the header's `now`).
pub async fn readers(conn: &mut Conn, tenant: &str, key: &str) -> sqlx::Result<Vec<ReaderRow>> {
    conn.fetch_all(
        r#"
SELECT owner, token, expires_at, session FROM rwlock_readers
WHERE tenant = ? AND rw_key = ? ORDER BY token
"#,
        (tenant, key),
    )
    .await
}

/// A writer's lease: owner, token, expiry, and the session it is held in.
pub type Writer<'a> = (&'a str, u64, NaiveDateTime, Option<&'a [u8]>);

/// Writes the header's token counter and writer (`None`: no writer),
/// marked by the transaction `changed_by`.
pub async fn write_header(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    token: u64,
    writer: Option<Writer<'_>>,
    changed_by: u64,
) -> sqlx::Result<MySqlQueryResult> {
    let (owner, writer_token, expires_at, session) = match writer {
        Some((owner, token, expires_at, session)) => {
            (Some(owner), Some(token), Some(expires_at), session)
        }
        None => (None, None, None, None),
    };
    conn.execute(
        r#"
UPDATE rwlocks SET token = ?, writer = ?, writer_token = ?, writer_expires_at = ?,
  writer_session = ?, changed_by = ?
WHERE tenant = ? AND rw_key = ?
"#,
        (
            token,
            owner,
            writer_token,
            expires_at,
            session,
            changed_by,
            tenant,
            key,
        ),
    )
    .await
}

/// Writes `owner`'s read lease (a new one, or its renewal), held in
/// `session` if `Some`.
pub async fn put_reader(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    (owner, token, expires_at): (&str, u64, NaiveDateTime),
    session: Option<&str>,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        r#"
INSERT INTO rwlock_readers (tenant, rw_key, owner, token, expires_at, session)
VALUES (?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE token = VALUES(token), expires_at = VALUES(expires_at),
  session = VALUES(session)
"#,
        (tenant, key, owner, token, expires_at, session),
    )
    .await
}

/// Removes `owner`'s reader row.
pub async fn delete_reader(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    owner: &str,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        "DELETE FROM rwlock_readers WHERE tenant = ? AND rw_key = ? AND owner = ?",
        (tenant, key, owner),
    )
    .await
}

/// Writes many plain read leases of the key in one statement (new ones,
/// or renewals): `(owner, token, expires_at)` each, every owner once. For
/// a combined transaction (`engine::rw_batch`), which writes each reader
/// it served once, whatever it did to it first (it serves no session's).
pub async fn put_readers(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    readers: &[(&str, u64, NaiveDateTime)],
) -> sqlx::Result<()> {
    if readers.is_empty() {
        return Ok(());
    }
    let tuples = vec!["(?, ?, ?, ?, ?)"; readers.len()].join(", ");
    let sql = format!(
        r#"
INSERT INTO rwlock_readers (tenant, rw_key, owner, token, expires_at) VALUES {tuples}
ON DUPLICATE KEY UPDATE token = VALUES(token), expires_at = VALUES(expires_at), session = NULL
"#
    );
    let params: Vec<_> = readers
        .iter()
        .map(|&(owner, token, expires_at)| (tenant, key, owner, token, expires_at))
        .collect();
    conn.execute(&sql, params).await?;
    Ok(())
}

/// Removes the reader rows of `owners` in one statement.
pub async fn delete_readers(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    owners: &[&str],
) -> sqlx::Result<()> {
    if owners.is_empty() {
        return Ok(());
    }
    let list = vec!["?"; owners.len()].join(", ");
    // By the primary key only (see the module `store`): on a small table
    // the optimizer would scan every key's readers, and two keys' batches
    // deadlocked on each other's reader rows.
    let sql = format!(
        "DELETE r FROM rwlock_readers r FORCE INDEX (PRIMARY) \
         WHERE r.tenant = ? AND r.rw_key = ? AND r.owner IN ({list})"
    );
    let params: Vec<_> = [tenant, key]
        .into_iter()
        .chain(owners.iter().copied())
        .map(|v| (v,))
        .collect();
    conn.execute(&sql, params).await?;
    Ok(())
}

/// Removes the key's expired reader rows (their tokens live on in the
/// header's counter).
pub async fn delete_expired_readers(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        "DELETE FROM rwlock_readers WHERE tenant = ? AND rw_key = ? AND expires_at <= NOW(6)",
        (tenant, key),
    )
    .await
}

/// Rwlocks with pending waiters and no live writer that nobody handed on:
/// no live reader either (the last lease expired), or the oldest pending
/// waiter is a reader (the writer it queued behind left the queue), up to
/// `limit`.
pub async fn free_with_waiters(conn: &mut Conn, limit: u32) -> sqlx::Result<Vec<KeyRow>> {
    conn.fetch_all(
        r#"
SELECT h.tenant, CAST(? AS SIGNED) AS kind, h.rw_key AS lock_key FROM rwlocks h
WHERE h.queued > 0
  AND (h.writer IS NULL OR h.writer_expires_at <= NOW(6))
  AND (
    NOT EXISTS (
      SELECT 1 FROM rwlock_readers r
      WHERE r.tenant = h.tenant AND r.rw_key = h.rw_key AND r.expires_at > NOW(6))
    OR (
      SELECT w.mode FROM waiters w
      WHERE w.tenant = h.tenant AND w.kind = ? AND w.lock_key = h.rw_key
        AND w.granted_token IS NULL
      ORDER BY w.id LIMIT 1) = 0)
LIMIT ?
"#,
        (Kind::RwLock as u8, Kind::RwLock as u8, limit),
    )
    .await
}
