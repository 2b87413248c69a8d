//! The `semaphores` (header) and `semaphore_slots` tables.

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::{lease_free, lease_live, pool::Conn, KeyRow, Kind, Locking};

/// A semaphore's size and queue.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Header {
    pub permits: u32,
    pub queued: u32,
}

/// One slot, read with the database clock (the engine judges whether its
/// lease is live by `now`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SlotRow {
    pub slot: u32,
    pub owner: Option<Vec<u8>>,
    pub token: u64,
    pub expires_at: Option<NaiveDateTime>,
    /// The mark of the release that last ended a lease here.
    pub released_by: Option<u64>,
    /// The session the lease is held in (`None`: a plain lease, or free).
    pub session: Option<Vec<u8>>,
    pub now: NaiveDateTime,
}

/// Which slot: tenant, semaphore (its storage key) and slot number.
#[derive(Debug, Clone, Copy)]
pub struct SlotKey<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub slot: u32,
}

/// The header, locked as asked (see [`Locking`]).
pub async fn header(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    locking: Locking,
) -> sqlx::Result<Option<Header>> {
    let sql = format!(
        "SELECT permits, queued FROM semaphores WHERE tenant = ? AND sem_key = ? {}",
        locking.suffix()
    );
    conn.fetch_optional(&sql, (tenant, key)).await
}

/// Creates a semaphore of `permits` slots unless it exists (autocommit:
/// two first acquirers racing both succeed; the first size wins).
pub async fn create(conn: &mut Conn, tenant: &str, key: &str, permits: u32) -> sqlx::Result<()> {
    conn.execute(
        "INSERT IGNORE INTO semaphores (tenant, sem_key, permits) VALUES (?, ?, ?)",
        (tenant, key, permits),
    )
    .await?;
    let rows = vec!["(?, ?, ?)"; permits as usize].join(", ");
    let sql = format!("INSERT IGNORE INTO semaphore_slots (tenant, sem_key, slot) VALUES {rows}");
    let params: Vec<_> = (0..permits).map(|slot| (tenant, key, slot)).collect();
    conn.execute(&sql, params).await?;
    Ok(())
}

/// Claims a free or expired slot, skipping slots other transactions hold.
pub async fn claim_free_slot(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
) -> sqlx::Result<Option<SlotRow>> {
    let sql = format!(
        r#"
SELECT x.slot, x.owner, x.token, x.expires_at, x.released_by, x.session, NOW(6) AS now FROM semaphore_slots x
WHERE x.tenant = ? AND x.sem_key = ? AND {free}
LIMIT 1
FOR UPDATE SKIP LOCKED
"#,
        free = lease_free("x")
    );
    conn.fetch_optional(&sql, (tenant, key)).await
}

/// The slot `owner` holds live, if any, by a plain read: locking reads over
/// the semaphore's slots would wait for every slot being claimed. The caller
/// locks that one slot and checks again.
pub async fn slot_of_owner(
    conn: &mut Conn,
    tenant: &str,
    key: &str,
    owner: &str,
) -> sqlx::Result<Option<u32>> {
    let sql = format!(
        r#"
SELECT x.slot FROM semaphore_slots x
WHERE x.tenant = ? AND x.sem_key = ? AND x.owner = ? AND {live}
LIMIT 1
"#,
        live = lease_live("x")
    );
    let row: Option<(u32,)> = conn.fetch_optional(&sql, (tenant, key, owner)).await?;
    Ok(row.map(|(slot,)| slot))
}

/// One slot, row-locked.
pub async fn slot_for_update(conn: &mut Conn, s: SlotKey<'_>) -> sqlx::Result<Option<SlotRow>> {
    conn.fetch_optional(
        r#"
SELECT slot, owner, token, expires_at, released_by, session, NOW(6) AS now FROM semaphore_slots
WHERE tenant = ? AND sem_key = ? AND slot = ?
FOR UPDATE
"#,
        (s.tenant, s.key, s.slot),
    )
    .await
}

/// All slots, unlocked.
pub async fn slots(conn: &mut Conn, tenant: &str, key: &str) -> sqlx::Result<Vec<SlotRow>> {
    conn.fetch_all(
        r#"
SELECT slot, owner, token, expires_at, released_by, session, NOW(6) AS now FROM semaphore_slots
WHERE tenant = ? AND sem_key = ? ORDER BY slot
"#,
        (tenant, key),
    )
    .await
}

/// Writes `owner`'s lease with `token` until `expires_at`, held in
/// `session` if `Some`, into slot `s`; `released_by` marks a write made by
/// a release (a handoff), `None` keeps the mark.
pub async fn write_slot(
    conn: &mut Conn,
    s: SlotKey<'_>,
    (owner, token, expires_at, session): (&str, u64, NaiveDateTime, Option<&str>),
    released_by: Option<u64>,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        r#"
UPDATE semaphore_slots SET owner = ?, token = ?, expires_at = ?, session = ?,
  released_by = COALESCE(?, released_by)
WHERE tenant = ? AND sem_key = ? AND slot = ?
"#,
        (
            owner,
            token,
            expires_at,
            session,
            released_by,
            s.tenant,
            s.key,
            s.slot,
        ),
    )
    .await
}

/// Frees a slot. The token stays: the next grant continues from it.
pub async fn free_slot(
    conn: &mut Conn,
    s: SlotKey<'_>,
    released_by: Option<u64>,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute(
        r#"
UPDATE semaphore_slots SET owner = NULL, expires_at = NULL, session = NULL,
  released_by = COALESCE(?, released_by)
WHERE tenant = ? AND sem_key = ? AND slot = ?
"#,
        (released_by, s.tenant, s.key, s.slot),
    )
    .await
}

/// Frees `owner`'s live slot with `token` in one statement if no waiter is
/// queued for the semaphore (the header is only share-locked, so such
/// releases do not queue behind each other), marking the slot with
/// `released_by` (a slot already marked so is left to the full release,
/// as is a session's slot, whose event names the session); whether it
/// did.
pub async fn free_if_alone(
    conn: &mut Conn,
    s: SlotKey<'_>,
    (owner, token): (&str, u64),
    released_by: u64,
) -> sqlx::Result<bool> {
    let sql = format!(
        r#"
UPDATE semaphore_slots s
JOIN semaphores h ON h.tenant = s.tenant AND h.sem_key = s.sem_key
SET s.owner = NULL, s.expires_at = NULL, s.released_by = ?
WHERE s.tenant = ? AND s.sem_key = ? AND s.slot = ?
  AND s.owner = ? AND s.token = ? AND {live} AND h.queued = 0
  AND NOT (s.released_by <=> ?) AND s.session IS NULL
"#,
        live = lease_live("s")
    );
    let done = conn
        .execute(
            &sql,
            (
                released_by,
                s.tenant,
                s.key,
                s.slot,
                owner,
                token,
                released_by,
            ),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Semaphores that have pending waiters and a free or expired slot (nobody
/// handed it on), up to `limit`.
pub async fn free_with_waiters(conn: &mut Conn, limit: u32) -> sqlx::Result<Vec<KeyRow>> {
    let sql = format!(
        r#"
SELECT DISTINCT h.tenant, CAST(? AS SIGNED) AS kind, h.sem_key AS lock_key FROM semaphores h
JOIN semaphore_slots x ON x.tenant = h.tenant AND x.sem_key = h.sem_key
WHERE h.queued > 0 AND {free}
LIMIT ?
"#,
        free = lease_free("x")
    );
    conn.fetch_all(&sql, (Kind::Semaphore as u8, limit)).await
}
