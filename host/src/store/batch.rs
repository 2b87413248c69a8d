//! Statements over many lock rows at once, for the engine's batches of
//! uncontended operations: one locking read of every member's row, one
//! write of every new lease state. Both take their rows as a list of
//! [`RowKey`]s (any tenants); the engine keeps each key once per batch.

use chrono::NaiveDateTime;

use super::{locks::LockRow, pool::Conn, RowKey};

/// A lock row read by a batch, with its key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyedLockRow {
    pub tenant: Vec<u8>,
    pub kind: u8,
    pub lock_key: Vec<u8>,
    #[sqlx(flatten)]
    pub row: LockRow,
}

impl KeyedLockRow {
    /// Whether this is the row of `k`.
    pub fn is(&self, k: RowKey<'_>) -> bool {
        self.kind == k.kind as u8
            && self.tenant == k.tenant.as_bytes()
            && self.lock_key == k.key.as_bytes()
    }
}

/// The rows of `keys` that no other transaction holds, locked until the
/// end of the transaction (`FOR UPDATE SKIP LOCKED`: never waits, so a
/// batch cannot deadlock with anyone), each with `NOW(6)` read in this
/// statement. A key whose row is missing or busy is simply not returned.
pub async fn lock_rows(conn: &mut Conn, keys: &[RowKey<'_>]) -> sqlx::Result<Vec<KeyedLockRow>> {
    rows(conn, keys, "FOR UPDATE SKIP LOCKED").await
}

/// The rows of `keys`, locked until the end of the transaction, waiting
/// for those other transactions hold (a session's end, which must reach
/// every one of its keys; the caller names them in key order).
pub async fn lock_rows_waiting(
    conn: &mut Conn,
    keys: &[RowKey<'_>],
) -> sqlx::Result<Vec<KeyedLockRow>> {
    rows(conn, keys, "FOR UPDATE").await
}

/// Frees every row of `keys` in one statement (the caller holds each, and
/// knows each has nobody to hand it to), marking none; sent with the
/// commit (`Conn::defer`).
pub async fn free_rows(conn: &mut Conn, keys: &[RowKey<'_>]) -> sqlx::Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let tuples = vec!["(?, ?, ?)"; keys.len()].join(", ");
    let sql = format!(
        r#"
UPDATE locks FORCE INDEX (PRIMARY) SET owner = NULL, hold_count = 0, expires_at = NULL,
  session = NULL
WHERE (tenant, kind, lock_key) IN ({tuples})
"#
    );
    let params: Vec<_> = keys
        .iter()
        .map(|k| (k.tenant, k.kind as u8, k.key))
        .collect();
    conn.defer(&sql, params).await?;
    Ok(())
}

/// The rows of `keys` as they are (a plain read: no row locks), each with
/// `NOW(6)`; a missing row is not returned.
pub async fn read_rows(conn: &mut Conn, keys: &[RowKey<'_>]) -> sqlx::Result<Vec<KeyedLockRow>> {
    rows(conn, keys, "").await
}

/// The rows of `keys`, read with `locking` (an SQL suffix), by the primary
/// key only: on a small table the optimizer would rather scan the whole
/// table once a list names a good share of its rows (`EXPLAIN` says `ALL`
/// for 5 of 8 rows), and a locking scan row-locks every row it passes, if
/// only for a moment, so a try's `NOWAIT` read of a row no batch member
/// names would meet that lock and refuse a free key.
async fn rows(
    conn: &mut Conn,
    keys: &[RowKey<'_>],
    locking: &str,
) -> sqlx::Result<Vec<KeyedLockRow>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let tuples = vec!["(?, ?, ?)"; keys.len()].join(", ");
    let columns = super::locks::row_columns("l");
    let sql = format!(
        r#"
SELECT l.tenant, l.kind, l.lock_key, {columns}
FROM locks l FORCE INDEX (PRIMARY) WHERE (l.tenant, l.kind, l.lock_key) IN ({tuples})
{locking}
"#
    );
    let params: Vec<_> = keys
        .iter()
        .map(|k| (k.tenant, k.kind as u8, k.key))
        .collect();
    conn.fetch_all(&sql, params).await
}

/// A lease state to write into a lock row: a holder (or none, freed), its
/// token, hold count and expiry.
#[derive(Debug, Clone)]
pub struct LeaseWrite<'a> {
    pub key: RowKey<'a>,
    pub owner: Option<&'a str>,
    pub token: u64,
    pub hold_count: u32,
    pub expires_at: Option<NaiveDateTime>,
    /// A release's mark (`released_by`); `None` leaves the row's as it is.
    pub released_by: Option<u64>,
}

/// Writes every state of `writes` in one statement. The caller holds each
/// row (read by [`lock_rows`] in this transaction), so every row exists
/// and the insert half never inserts; `queued` is left as it is. A freed
/// row's `session` is cleared; a held one's kept (a batch grants only
/// plain leases, on free rows, and may release one hold of a session's
/// re-entered lease). Sent with the commit (`Conn::defer`).
pub async fn write_rows(conn: &mut Conn, writes: &[LeaseWrite<'_>]) -> sqlx::Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let tuples = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; writes.len()].join(", ");
    let sql = format!(
        r#"
INSERT INTO locks (tenant, kind, lock_key, owner, token, hold_count, expires_at, released_by)
VALUES {tuples}
ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token),
  hold_count = VALUES(hold_count), expires_at = VALUES(expires_at),
  session = IF(VALUES(owner) IS NULL, NULL, locks.session),
  released_by = COALESCE(VALUES(released_by), locks.released_by)
"#
    );
    let params: Vec<_> = writes
        .iter()
        .map(|w| {
            let k = w.key;
            (
                k.tenant,
                k.kind as u8,
                k.key,
                w.owner,
                w.token,
                w.hold_count,
                w.expires_at,
                w.released_by,
            )
        })
        .collect();
    conn.defer(&sql, params).await?;
    Ok(())
}
