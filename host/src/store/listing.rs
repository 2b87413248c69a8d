//! Listings: a stretch of a tenant's keys of one kind in storage-key (byte)
//! order, read from the primary key of each kind's header table (`locks`,
//! `semaphores`, `rwlocks`) after a cursor and within a prefix, each row
//! saying whether a lease of it is live by the database clock; and the live
//! leases of the keys a page keeps. Plain reads: no row locks.
//!
//! A stretch is bounded (`limit` rows): the engine reads stretches until it
//! has a page of live keys or has read enough, so a page of 100 keys among
//! a million is a short index range scan.

use chrono::NaiveDateTime;

use super::{lease_live, pool::Conn, Kind};

/// Which keys a stretch reads: the tenant's keys after `after` (if any)
/// that start with `prefix`, at most `limit` of them.
#[derive(Debug, Clone, Copy)]
pub struct Stretch<'a> {
    pub tenant: &'a str,
    pub after: Option<&'a [u8]>,
    pub prefix: &'a [u8],
    pub limit: u32,
}

impl Stretch<'_> {
    /// The condition on the key column `column` (bound by
    /// [`Stretch::params`]): after the cursor, at or above the prefix, and
    /// below the prefix's upper bound if it has one, so that the primary
    /// key's range is all that is read.
    fn condition(&self, column: &str) -> String {
        let upper =
            upper_bound(self.prefix).map_or(String::new(), |_| format!(" AND {column} < ?"));
        format!("{column} > ? AND {column} >= ?{upper}")
    }

    /// The values of [`Stretch::condition`], in order.
    fn bounds(&self) -> (Vec<u8>, Vec<u8>, Option<Vec<u8>>) {
        (
            self.after.unwrap_or_default().to_vec(),
            self.prefix.to_vec(),
            upper_bound(self.prefix),
        )
    }
}

/// The least byte string above every string that starts with `prefix`;
/// `None` when there is none (an empty prefix, or one of `0xFF` bytes only).
fn upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < 0xFF {
            upper.push(last + 1);
            return Some(upper);
        }
    }
    None
}

/// A key of a stretch: its storage key, whether a lease of it is live by
/// the database clock, and its table's own columns (`row`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Entry<T> {
    pub entry_key: Vec<u8>,
    pub live: bool,
    #[sqlx(flatten)]
    pub row: T,
}

/// A lock's or election's row. For a live lease, `acquired_at` is when its
/// token was granted, from the key's history (`None` once the history was
/// pruned, and for elections, which have none).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LockEntry {
    pub owner: Option<Vec<u8>>,
    pub token: u64,
    pub hold_count: u32,
    pub expires_at: Option<NaiveDateTime>,
    pub queued: u32,
    pub acquired_at: Option<NaiveDateTime>,
    /// The session the lease is held in, if it is.
    pub session: Option<Vec<u8>>,
}

/// A semaphore's header.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SemaphoreEntry {
    pub permits: u32,
    pub queued: u32,
}

/// A rwlock's header (the writer's columns may hold an expired lease).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RwEntry {
    pub writer: Option<Vec<u8>>,
    pub writer_token: Option<u64>,
    /// The writer's session's expiry if it is held in one.
    pub writer_expires_at: Option<NaiveDateTime>,
    pub writer_session: Option<Vec<u8>>,
    pub queued: u32,
    pub now: NaiveDateTime,
}

/// A live lease of one of a page's keys: a semaphore's slot (`slot`) or a
/// rwlock's reader.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Holder {
    pub key: Vec<u8>,
    pub slot: Option<u32>,
    pub owner: Vec<u8>,
    pub token: u64,
    /// Its session's expiry if it is held in one.
    pub expires_at: NaiveDateTime,
    pub session: Option<Vec<u8>>,
}

/// The expiry of the session that `alias`'s `column` names (NULL for
/// none): a session's lease shows its session's.
fn session_expiry(alias: &str, column: &str) -> String {
    format!(
        "(SELECT s.expires_at FROM sessions s WHERE s.tenant = {alias}.tenant AND s.id = {alias}.{column})"
    )
}

/// The statement of a stretch of the tenant's locks (or elections, by
/// `kind`), for [`stretch`].
pub fn locks(kind: Kind, s: &Stretch<'_>) -> String {
    let live = lease_live("l");
    // The grant of a live lease is its key's latest granted or handed-off
    // event with its token (nothing is recorded while a lease is held).
    format!(
        r#"
SELECT l.lock_key AS entry_key, {live} AS live, l.owner, l.token, l.hold_count,
  COALESCE({session}, l.expires_at) AS expires_at,
  l.queued, CASE WHEN {live} THEN (
    SELECT e.at FROM lock_events e
    WHERE e.tenant = l.tenant AND e.kind = l.kind AND e.lock_key = l.lock_key
      AND e.token = l.token AND e.event IN (1, 4)
    ORDER BY e.id DESC LIMIT 1)
  END AS acquired_at, CASE WHEN {live} THEN l.session END AS session
FROM locks l WHERE l.tenant = ? AND l.kind = {} AND {}
ORDER BY l.lock_key LIMIT ?
"#,
        kind as u8,
        s.condition("l.lock_key"),
        session = session_expiry("l", "session"),
    )
}

/// The statement of a stretch of the tenant's semaphores.
pub fn semaphores(s: &Stretch<'_>) -> String {
    format!(
        r#"
SELECT s.sem_key AS entry_key, s.permits, s.queued, EXISTS(
    SELECT 1 FROM semaphore_slots t WHERE t.tenant = s.tenant AND t.sem_key = s.sem_key
      AND {}) AS live
FROM semaphores s WHERE s.tenant = ? AND {}
ORDER BY s.sem_key LIMIT ?
"#,
        lease_live("t"),
        s.condition("s.sem_key")
    )
}

/// The statement of a stretch of the tenant's rwlocks.
pub fn rwlocks(s: &Stretch<'_>) -> String {
    format!(
        r#"
SELECT h.rw_key AS entry_key, h.writer, h.writer_token, h.writer_session,
  COALESCE({session}, h.writer_expires_at) AS writer_expires_at, h.queued,
  NOW(6) AS now, (h.writer IS NOT NULL AND h.writer_expires_at > NOW(6)) OR EXISTS(
    SELECT 1 FROM rwlock_readers r WHERE r.tenant = h.tenant AND r.rw_key = h.rw_key
      AND r.expires_at > NOW(6)) AS live
FROM rwlocks h WHERE h.tenant = ? AND {}
ORDER BY h.rw_key LIMIT ?
"#,
        s.condition("h.rw_key"),
        session = session_expiry("h", "writer_session"),
    )
}

/// The stretch `s` read by `sql` (one of [`locks`], [`semaphores`],
/// [`rwlocks`]), which takes the tenant, the stretch's bounds and its
/// limit.
pub async fn stretch<T>(conn: &mut Conn, sql: &str, s: Stretch<'_>) -> sqlx::Result<Vec<Entry<T>>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow> + Send + Unpin,
{
    let (after, prefix, upper) = s.bounds();
    match upper {
        Some(upper) => {
            conn.fetch_all(sql, (s.tenant, after, prefix, upper, s.limit))
                .await
        }
        None => {
            conn.fetch_all(sql, (s.tenant, after, prefix, s.limit))
                .await
        }
    }
}

/// Which live leases of a page's keys [`holders`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holders {
    /// A semaphore's slots.
    Slots,
    /// A rwlock's readers.
    Readers,
}

/// The live leases of the tenant's `keys`, by key and token.
pub async fn holders(
    conn: &mut Conn,
    of: Holders,
    tenant: &str,
    keys: &[Vec<u8>],
) -> sqlx::Result<Vec<Holder>> {
    let (table, column, slot) = match of {
        Holders::Slots => ("semaphore_slots", "sem_key", "slot"),
        Holders::Readers => ("rwlock_readers", "rw_key", "NULL"),
    };
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; keys.len()].join(", ");
    let sql = format!(
        r#"
SELECT {column} AS `key`, {slot} AS slot, owner, token, session,
  COALESCE({session}, expires_at) AS expires_at FROM {table} t
WHERE tenant = ? AND {column} IN ({marks}) AND {}
ORDER BY {column}, token
"#,
        lease_live("t"),
        session = session_expiry("t", "session"),
    );
    let mut params: Vec<(&[u8],)> = vec![(tenant.as_bytes(),)];
    params.extend(keys.iter().map(|k| (k.as_slice(),)));
    conn.fetch_all(&sql, params).await
}

/// How many live leases the tenant holds of each kind: locks, elections'
/// leaderships, semaphore permits, rwlock leases (writers and readers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct HeldCounts {
    pub locks: u64,
    pub elections: u64,
    pub semaphores: u64,
    pub rwlocks: u64,
}

impl HeldCounts {
    /// Every kind together.
    pub fn total(&self) -> u64 {
        self.locks + self.elections + self.semaphores + self.rwlocks
    }
}

/// How many live leases the tenant holds, by kind (lock and election rows,
/// semaphore slots, rwlock writers and readers). Reads the tenant's rows
/// through each table's primary key: the cost grows with the tenant's rows
/// (a lock row outlives its leases; a million of them take about 0.4 s of
/// one database core here), so callers count rarely (see `crate::quota`,
/// and the held-leases gauge, every 15 s).
pub async fn count_held(conn: &mut Conn, tenant: &str) -> sqlx::Result<HeldCounts> {
    let sql = format!(
        r#"
SELECT
  CAST((SELECT COUNT(*) FROM locks l WHERE l.tenant = ? AND l.kind = 0 AND {locks})
    AS UNSIGNED) AS locks,
  CAST((SELECT COUNT(*) FROM locks l WHERE l.tenant = ? AND l.kind = 1 AND {locks})
    AS UNSIGNED) AS elections,
  CAST((SELECT COUNT(*) FROM semaphore_slots s WHERE s.tenant = ? AND {slots})
    AS UNSIGNED) AS semaphores,
  CAST((SELECT COUNT(*) FROM rwlocks w WHERE w.tenant = ?
     AND w.writer IS NOT NULL AND w.writer_expires_at > NOW(6))
  + (SELECT COUNT(*) FROM rwlock_readers r WHERE r.tenant = ? AND r.expires_at > NOW(6))
    AS UNSIGNED) AS rwlocks
"#,
        locks = lease_live("l"),
        slots = lease_live("s"),
    );
    let t = tenant.as_bytes();
    conn.fetch_one(&sql, (t, t, t, t, t)).await
}

#[cfg(test)]
mod tests {
    use super::upper_bound;

    #[test]
    fn the_upper_bound_of_a_prefix_is_the_next_string_after_all_its_keys() {
        assert_eq!(upper_bound(b"job-"), Some(b"job.".to_vec()));
        assert_eq!(upper_bound(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(upper_bound(b"\xff"), None);
        assert_eq!(upper_bound(b""), None);
    }
}
