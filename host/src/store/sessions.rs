//! The `sessions` table (issue #30): one row per live session, keyed by
//! (tenant, id); the leases held in a session name it in their row's
//! `session` column (`locks`, `semaphore_slots`, `rwlock_readers`;
//! `writer_session` of `rwlocks`), its waiters in theirs (`waiters`).
//!
//! Every judgement of life is made by the database clock in the statement
//! itself (`expires_at > NOW(6) AND ending = 0`). An acquire in a session
//! reads its row `LOCK IN SHARE MODE` (`for_share`); the one statement that
//! ends a session (`end`, `end_expired`) takes it exclusively, so an
//! acquire either commits before the end (and its lease is found by the
//! end's pass) or sees the session ended. A deadlock check's pin
//! ([`PIN`], issue #33) writes the row too, so it waits for the acquires
//! in the session under way, and sees the waits they enqueue.

use chrono::NaiveDateTime;

use super::{pool::Conn, Kind};

/// `ending`: the session lives.
pub const LIVE: u8 = 0;
/// `ending`: closed by its client.
pub const CLOSED: u8 = 1;
/// `ending`: expired (no keepalive within its TTL).
pub const EXPIRED: u8 = 2;

/// A session's row, with the database clock it was read with.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionRow {
    pub id: Vec<u8>,
    pub name: Vec<u8>,
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
    pub created_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
    pub ending: u8,
    pub now: NaiveDateTime,
}

impl SessionRow {
    /// Not ended, and not expired by the database clock it was read with.
    pub fn live(&self) -> bool {
        self.ending == LIVE && self.expires_at > self.now
    }
}

const COLUMNS: &str =
    "id, name, ttl_ms, lock_delay_ms, created_at, expires_at, CAST(ending AS UNSIGNED) AS ending, NOW(6) AS now";

/// A new session (autocommit).
pub async fn insert(
    conn: &mut Conn,
    tenant: &str,
    id: &str,
    name: &str,
    ttl_ms: u64,
    lock_delay_ms: u64,
) -> sqlx::Result<()> {
    conn.execute(
        r#"
INSERT INTO sessions (tenant, id, name, ttl_ms, lock_delay_ms, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6) + INTERVAL ? MICROSECOND)
"#,
        (
            tenant,
            id,
            name,
            ttl_ms,
            lock_delay_ms,
            ttl_ms.saturating_mul(1000),
        ),
    )
    .await?;
    Ok(())
}

/// How many live sessions `tenant` has (plain read, by the database
/// clock).
pub async fn count_live(conn: &mut Conn, tenant: &str) -> sqlx::Result<u64> {
    let (n,): (i64,) = conn
        .fetch_one(
            "SELECT COUNT(*) FROM sessions WHERE tenant = ? AND ending = 0 AND expires_at > NOW(6)",
            (tenant,),
        )
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Every tenant's count of live sessions (plain read; tenants without one
/// are not listed).
pub async fn live_by_tenant(conn: &mut Conn) -> sqlx::Result<Vec<(Vec<u8>, i64)>> {
    conn.fetch_all(
        r#"
SELECT tenant, COUNT(*) FROM sessions
WHERE ending = 0 AND expires_at > NOW(6) GROUP BY tenant
"#,
        (),
    )
    .await
}

/// The session's row, read as asked: plain, or `LOCK IN SHARE MODE`
/// (`shared`: an acquire in the session, which the session's end waits
/// for).
pub async fn get(
    conn: &mut Conn,
    tenant: &str,
    id: &str,
    shared: bool,
) -> sqlx::Result<Option<SessionRow>> {
    let suffix = if shared { "LOCK IN SHARE MODE" } else { "" };
    let sql = format!("SELECT {COLUMNS} FROM sessions WHERE tenant = ? AND id = ? {suffix}");
    conn.fetch_optional(&sql, (tenant, id)).await
}

/// Extends a live session by its TTL from now; whether it was live (the
/// caller's transaction then reads the new expiry).
pub async fn keepalive(conn: &mut Conn, tenant: &str, id: &str) -> sqlx::Result<bool> {
    let done = conn
        .execute(
            r#"
UPDATE sessions SET expires_at = NOW(6) + INTERVAL (ttl_ms * 1000) MICROSECOND
WHERE tenant = ? AND id = ? AND expires_at > NOW(6) AND ending = 0
"#,
            (tenant, id),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Ends a live session as `ending` says (one autocommit statement, which
/// takes the row exclusively); whether it was live. Its `expires_at`
/// becomes now: the moment it ended.
pub async fn end(conn: &mut Conn, tenant: &str, id: &str, ending: u8) -> sqlx::Result<bool> {
    let done = conn
        .execute(
            r#"
UPDATE sessions SET ending = ?, expires_at = NOW(6)
WHERE tenant = ? AND id = ? AND expires_at > NOW(6) AND ending = 0
"#,
            (ending, tenant, id),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// A session whose end is to be carried out: tenant, id, why it ended.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Ended {
    pub tenant: Vec<u8>,
    pub id: Vec<u8>,
    pub lock_delay_ms: u64,
    pub ending: u8,
}

/// `tenant IN (...)` for `tenants` (never empty: the caller has one).
fn of_tenants(tenants: &[&[u8]]) -> String {
    format!("tenant IN ({})", vec!["?"; tenants.len()].join(", "))
}

/// Whether any session of `tenants` has expired by the database clock
/// and is not ended yet (a plain read, before the locking one).
pub async fn any_expired(conn: &mut Conn, tenants: &[&[u8]]) -> sqlx::Result<bool> {
    if tenants.is_empty() {
        return Ok(false);
    }
    let sql = format!(
        r#"
SELECT 1 FROM sessions FORCE INDEX (sessions_by_expiry)
WHERE expires_at <= NOW(6) AND ending = 0 AND {} LIMIT 1
"#,
        of_tenants(tenants)
    );
    let params: Vec<(&[u8],)> = tenants.iter().map(|t| (*t,)).collect();
    let found: Option<(i64,)> = conn.fetch_optional(&sql, params).await?;
    Ok(found.is_some())
}

/// Sessions of `tenants` expired by the database clock and not ended
/// yet, up to `limit`, locked (`SKIP LOCKED`: another broker's reaper
/// takes the others) and marked expired in the caller's transaction. A
/// broker ends only its own tenants' sessions: it carries out their end
/// pass with their tenant's settings.
pub async fn end_expired(
    conn: &mut Conn,
    tenants: &[&[u8]],
    limit: u32,
) -> sqlx::Result<Vec<Ended>> {
    if tenants.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        r#"
SELECT tenant, id, lock_delay_ms, CAST(2 AS UNSIGNED) AS ending
FROM sessions FORCE INDEX (sessions_by_expiry)
WHERE expires_at <= NOW(6) AND ending = 0 AND {}
LIMIT {limit} FOR UPDATE SKIP LOCKED
"#,
        of_tenants(tenants)
    );
    let params: Vec<(&[u8],)> = tenants.iter().map(|t| (*t,)).collect();
    let found: Vec<Ended> = conn.fetch_all(&sql, params).await?;
    for s in &found {
        conn.execute(
            "UPDATE sessions SET ending = ?, expires_at = NOW(6) WHERE tenant = ? AND id = ?",
            (EXPIRED, &s.tenant[..], &s.id[..]),
        )
        .await?;
    }
    Ok(found)
}

/// Sessions of `tenants` ended more than `after_us` ago whose end was
/// never finished (their broker stopped mid-pass), up to `limit`.
pub async fn stuck(
    conn: &mut Conn,
    tenants: &[&[u8]],
    after_us: u64,
    limit: u32,
) -> sqlx::Result<Vec<Ended>> {
    if tenants.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        r#"
SELECT tenant, id, lock_delay_ms, CAST(ending AS UNSIGNED) AS ending
FROM sessions FORCE INDEX (sessions_by_expiry)
WHERE expires_at <= NOW(6) - INTERVAL {after_us} MICROSECOND AND ending <> 0 AND {}
LIMIT {limit}
"#,
        of_tenants(tenants)
    );
    let params: Vec<(&[u8],)> = tenants.iter().map(|t| (*t,)).collect();
    conn.fetch_all(&sql, params).await
}

/// The expiry of each of `tenant`'s sessions `ids` that has a row (plain
/// read): what a status shows for a lease held in one.
pub async fn expiries(
    conn: &mut Conn,
    tenant: &str,
    ids: &[Vec<u8>],
) -> sqlx::Result<Vec<(Vec<u8>, NaiveDateTime)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("SELECT id, expires_at FROM sessions WHERE tenant = ? AND id IN ({marks})");
    let mut params: Vec<(&[u8],)> = vec![(tenant.as_bytes(),)];
    params.extend(ids.iter().map(|id| (id.as_slice(),)));
    conn.fetch_all(&sql, params).await
}

/// Removes an ended session's row.
pub async fn delete(conn: &mut Conn, tenant: &str, id: &str) -> sqlx::Result<bool> {
    let done = conn
        .execute(
            "DELETE FROM sessions WHERE tenant = ? AND id = ? AND ending <> 0",
            (tenant, id),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The start of the statement that pins sessions for a deadlock check
/// (issue #33), to be completed with which of the tenant's rows: a write
/// of their `wait_checks`, held to the end of the transaction. A check
/// reads a session's waits only after pinning its row, and a session's
/// wait is enqueued by a transaction that holds the row too (shared, as
/// every acquire in a session does; on Galera written as well,
/// [`pin_for_galera`]), so checks that could see each other's waits run one
/// after the other (the later one sees the earlier one's wait), through
/// any broker. A write, because on Galera certification orders writes,
/// not locks.
pub const PIN: &str = "UPDATE sessions SET wait_checks = wait_checks + 1 WHERE tenant = ?";

/// Pins the caller's own session `id` for the check of its wait with a
/// write (see [`PIN`]) on Galera (`Conn::on_galera`), where the shared
/// lock its acquire holds is the node's own and certification sees only
/// writes. On one server that lock is the pin: nothing to do.
pub async fn pin_for_galera(conn: &mut Conn, tenant: &str, id: &[u8]) -> sqlx::Result<()> {
    if !conn.on_galera() {
        return Ok(());
    }
    let sql = format!("{PIN} AND id = ?");
    conn.execute(&sql, (tenant, id)).await.map(|_| ())
}

/// Whether a session holds any lease, as an expression (1 or 0) for a
/// plain read: binds the tenant and the session's id four times. A lease
/// row that names the session counts, live or not. A session that holds
/// nothing cannot be part of a cycle, whatever it waits for.
pub const HOLDS_ANY: &str = r#"CAST(
  EXISTS (SELECT 1 FROM locks FORCE INDEX (locks_by_session)
    WHERE tenant = ? AND session = ? AND owner IS NOT NULL)
  OR EXISTS (SELECT 1 FROM semaphore_slots FORCE INDEX (slots_by_session)
    WHERE tenant = ? AND session = ? AND owner IS NOT NULL)
  OR EXISTS (SELECT 1 FROM rwlocks FORCE INDEX (rwlocks_by_session)
    WHERE tenant = ? AND writer_session = ? AND writer IS NOT NULL)
  OR EXISTS (SELECT 1 FROM rwlock_readers FORCE INDEX (readers_by_session)
    WHERE tenant = ? AND session = ?) AS SIGNED)"#;

/// A lease held in a session (plain read): its kind, key and token, and
/// which of the key's leases it is (a semaphore's `slot`, a rwlock's
/// `mode`: 0 read, 1 write).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HeldRow {
    pub kind: u8,
    pub lock_key: Vec<u8>,
    pub token: u64,
    pub slot: Option<u32>,
    pub mode: Option<u8>,
    /// A rwlock reader's owner (its row's key); `None` otherwise.
    pub owner: Option<Vec<u8>>,
}

/// The session's leases of every kind, one `SELECT` per table through its
/// session index, as one statement: each takes the tenant and the id.
/// Every number, NULLs included, is cast unsigned: a signed literal or an
/// untyped NULL in one branch makes the union's column a DECIMAL.
const HELD: &str = r#"
SELECT CAST(kind AS UNSIGNED) AS kind, lock_key, token, CAST(NULL AS UNSIGNED) AS slot,
  CAST(NULL AS UNSIGNED) AS mode, CAST(NULL AS BINARY) AS owner
FROM locks FORCE INDEX (locks_by_session)
WHERE tenant = ? AND session = ? AND owner IS NOT NULL
UNION ALL
SELECT CAST(2 AS UNSIGNED), sem_key, token, CAST(slot AS UNSIGNED), CAST(NULL AS UNSIGNED),
  NULL
FROM semaphore_slots FORCE INDEX (slots_by_session)
WHERE tenant = ? AND session = ? AND owner IS NOT NULL
UNION ALL
SELECT CAST(3 AS UNSIGNED), rw_key, writer_token, CAST(NULL AS UNSIGNED), CAST(1 AS UNSIGNED),
  NULL
FROM rwlocks FORCE INDEX (rwlocks_by_session)
WHERE tenant = ? AND writer_session = ? AND writer IS NOT NULL
UNION ALL
SELECT CAST(3 AS UNSIGNED), rw_key, token, CAST(NULL AS UNSIGNED), CAST(0 AS UNSIGNED), owner
FROM rwlock_readers FORCE INDEX (readers_by_session)
WHERE tenant = ? AND session = ?
"#;

/// Up to `limit` leases held in the session, in (kind, key, slot) order.
pub async fn leases(
    conn: &mut Conn,
    tenant: &str,
    id: &str,
    limit: u32,
) -> sqlx::Result<Vec<HeldRow>> {
    let sql = format!("SELECT * FROM ({HELD}) h ORDER BY kind, lock_key, slot, mode LIMIT ?");
    conn.fetch_all(
        &sql,
        (tenant, id, tenant, id, tenant, id, tenant, id, limit),
    )
    .await
}

/// How many leases the session holds (plain read).
pub async fn count_leases(conn: &mut Conn, tenant: &str, id: &str) -> sqlx::Result<u64> {
    let sql = format!("SELECT COUNT(*) FROM ({HELD}) h");
    let (n,): (i64,) = conn
        .fetch_one(&sql, (tenant, id, tenant, id, tenant, id, tenant, id))
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A pending waiter of a session.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WaiterOf {
    pub id: u64,
    pub kind: u8,
    pub lock_key: Vec<u8>,
    /// The broker whose client waits.
    pub broker: Vec<u8>,
}

/// The session's pending waiters.
pub async fn waiters(conn: &mut Conn, tenant: &str, id: &str) -> sqlx::Result<Vec<WaiterOf>> {
    conn.fetch_all(
        r#"
SELECT id, CAST(kind AS UNSIGNED) AS kind, lock_key, broker
FROM waiters FORCE INDEX (waiters_by_session)
WHERE session = ? AND tenant = ? AND granted_token IS NULL
"#,
        (id, tenant),
    )
    .await
}

/// Removes pending waiter `id` (the caller holds its key's header);
/// whether it was still pending.
pub async fn drop_waiter(conn: &mut Conn, id: u64) -> sqlx::Result<bool> {
    let done = conn
        .execute(
            "DELETE FROM waiters WHERE id = ? AND granted_token IS NULL",
            (id,),
        )
        .await?;
    Ok(done.rows_affected() == 1)
}

/// A page of the tenant's sessions whose name starts with `prefix`, after
/// (name, id) `after`, ordered by name then id (the `sessions_by_name`
/// index range), live or not yet ended.
pub async fn list(
    conn: &mut Conn,
    tenant: &str,
    prefix: &[u8],
    after: Option<(&[u8], &[u8])>,
    limit: u32,
) -> sqlx::Result<Vec<SessionRow>> {
    let pattern = super::waiting::like_prefix(prefix);
    let (after_name, after_id) = after.unwrap_or((b"", b""));
    let first = u8::from(after.is_none());
    let sql = format!(
        r#"
SELECT {COLUMNS} FROM sessions FORCE INDEX (sessions_by_name)
WHERE tenant = ? AND name LIKE ? AND ending = 0 AND expires_at > NOW(6)
  AND (? = 1 OR name > ? OR (name = ? AND id > ?))
ORDER BY name, id LIMIT ?
"#
    );
    conn.fetch_all(
        &sql,
        (
            tenant, pattern, first, after_name, after_name, after_id, limit,
        ),
    )
    .await
}

/// The kind of a lease row, as stored.
pub fn kind_of(code: u8) -> Option<Kind> {
    Some(match code {
        0 => Kind::Lock,
        1 => Kind::Election,
        2 => Kind::Semaphore,
        3 => Kind::RwLock,
        _ => return None,
    })
}
