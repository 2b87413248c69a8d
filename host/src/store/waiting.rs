//! Who waits for whom (issue #32): a key's database queue with what the
//! API shows of each waiter, the tenant's waiting rows across keys, and
//! the live holders of a set of keys. Plain reads: a look at the queue
//! never takes a lock a grant would wait for.

use chrono::NaiveDateTime;

use super::{
    lease_live, pool::Conn, sessions, waiters::Staleness, waiters::ELIGIBLE, Kind, RowKey,
};

/// A pending waiter of the database queue, as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QueuedRow {
    pub id: u64,
    pub kind: u8,
    pub lock_key: Vec<u8>,
    pub owner: Vec<u8>,
    pub session: Option<Vec<u8>>,
    pub priority: i32,
    pub attempts: u32,
    /// Enqueue time in ms since the Unix epoch (for a fairness policy).
    pub enqueued_ms: u64,
    pub enqueued_at: NaiveDateTime,
    pub deadline: NaiveDateTime,
    pub broker: Vec<u8>,
    /// A rwlock waiter's mode (0 read, 1 write).
    pub mode: Option<u8>,
}

const QUEUED: &str = r#"
SELECT w.id, CAST(w.kind AS UNSIGNED) AS kind, w.lock_key, w.owner, w.session, w.priority,
  w.attempts, CAST(UNIX_TIMESTAMP(w.enqueued_at) * 1000 AS UNSIGNED) AS enqueued_ms,
  w.enqueued_at, w.deadline, w.broker, w.mode
FROM waiters w
"#;

/// Up to `limit` eligible pending waiters of one key, oldest first.
pub async fn queue(
    conn: &mut Conn,
    k: RowKey<'_>,
    stale: Staleness,
    limit: u32,
) -> sqlx::Result<Vec<QueuedRow>> {
    let sql = format!(
        "{QUEUED} WHERE w.tenant = ? AND w.kind = ? AND w.lock_key = ? \
         AND w.granted_token IS NULL AND {ELIGIBLE} ORDER BY w.id LIMIT ?"
    );
    let (grace_us, alive_us) = (stale.grace_us, stale.alive_us);
    conn.fetch_all(
        &sql,
        (k.tenant, k.kind as u8, k.key, grace_us, alive_us, limit),
    )
    .await
}

/// Up to `limit` eligible pending waiters of the tenant's keys that start
/// with `prefix` (any kind), oldest first.
pub async fn of_tenant(
    conn: &mut Conn,
    tenant: &str,
    prefix: &[u8],
    stale: Staleness,
    limit: u32,
) -> sqlx::Result<Vec<QueuedRow>> {
    let sql = format!(
        "{QUEUED} WHERE w.tenant = ? AND w.lock_key LIKE ? \
         AND w.granted_token IS NULL AND {ELIGIBLE} ORDER BY w.id LIMIT ?"
    );
    let (grace_us, alive_us) = (stale.grace_us, stale.alive_us);
    conn.fetch_all(
        &sql,
        (tenant, like_prefix(prefix), grace_us, alive_us, limit),
    )
    .await
}

/// `prefix` as a `LIKE` pattern that matches it literally.
pub fn like_prefix(prefix: &[u8]) -> Vec<u8> {
    let mut pattern = Vec::with_capacity(prefix.len() + 1);
    for &b in prefix {
        if matches!(b, b'%' | b'_' | b'\\') {
            pattern.push(b'\\');
        }
        pattern.push(b);
    }
    pattern.push(b'%');
    pattern
}

/// A live lease of one of the keys asked about.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HolderRow {
    pub kind: u8,
    pub lock_key: Vec<u8>,
    pub owner: Vec<u8>,
    pub session: Option<Vec<u8>>,
    /// A rwlock lease's mode (0 read, 1 write).
    pub mode: Option<u8>,
}

/// The live leases of the tenant's `keys` of `kind`.
pub async fn holders(
    conn: &mut Conn,
    tenant: &str,
    kind: Kind,
    keys: &[Vec<u8>],
) -> sqlx::Result<Vec<HolderRow>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    conn.fetch_all(
        &holders_sql(kind, keys.len()),
        holders_params(tenant, kind, keys),
    )
    .await
}

/// SQL: the live leases of `n` keys of `kind` as [`HolderRow`] columns;
/// binds [`holders_params`].
fn holders_sql(kind: Kind, n: usize) -> String {
    let marks = vec!["?"; n].join(", ");
    match kind {
        Kind::Lock | Kind::Election => format!(
            "SELECT CAST(l.kind AS UNSIGNED) AS kind, l.lock_key, l.owner, l.session, \
             CAST(NULL AS UNSIGNED) AS mode FROM locks l \
             WHERE l.tenant = ? AND l.kind = {} AND l.lock_key IN ({marks}) AND {}",
            kind as u8,
            lease_live("l")
        ),
        Kind::Semaphore => format!(
            "SELECT CAST(2 AS UNSIGNED) AS kind, s.sem_key AS lock_key, s.owner, s.session, \
             CAST(NULL AS UNSIGNED) AS mode FROM semaphore_slots s \
             WHERE s.tenant = ? AND s.sem_key IN ({marks}) AND {}",
            lease_live("s")
        ),
        Kind::RwLock => format!(
            "SELECT CAST(3 AS UNSIGNED) AS kind, h.rw_key AS lock_key, h.writer AS owner, \
             h.writer_session AS session, CAST(1 AS UNSIGNED) AS mode FROM rwlocks h \
             WHERE h.tenant = ? AND h.rw_key IN ({marks}) AND h.writer IS NOT NULL \
             AND h.writer_expires_at > NOW(6) \
             UNION ALL \
             SELECT CAST(3 AS UNSIGNED), r.rw_key, r.owner, r.session, CAST(0 AS UNSIGNED) \
             FROM rwlock_readers r \
             WHERE r.tenant = ? AND r.rw_key IN ({marks}) AND r.expires_at > NOW(6)"
        ),
    }
}

/// The parameters of [`holders_sql`].
fn holders_params<'a>(tenant: &'a str, kind: Kind, keys: &'a [Vec<u8>]) -> Vec<(&'a [u8],)> {
    let mut params: Vec<(&[u8],)> = vec![(tenant.as_bytes(),)];
    params.extend(keys.iter().map(|k| (k.as_slice(),)));
    if kind == Kind::RwLock {
        params.push((tenant.as_bytes(),));
        params.extend(keys.iter().map(|k| (k.as_slice(),)));
    }
    params
}

/// A session other than the asking one that holds the key, with one of
/// its pending waits (none: `owner` and the rest are `NULL`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HolderWait {
    pub holder: Vec<u8>,
    pub owner: Option<Vec<u8>>,
    pub kind: Option<u8>,
    pub lock_key: Option<Vec<u8>>,
    pub mode: Option<u8>,
}

/// The first step of a deadlock check's walk, in one round trip: pins
/// (see `sessions::PIN`) the sessions other than `me` that hold `key` (of
/// `kind`), then reads them with their eligible pending waits (after the
/// pin: a wait enqueued and committed before is seen; one being enqueued
/// now is waited for). Empty: no other session holds the key.
pub async fn pinned_holders(
    conn: &mut Conn,
    tenant: &str,
    kind: Kind,
    key: &[u8],
    me: &[u8],
    stale: Staleness,
) -> sqlx::Result<Vec<HolderWait>> {
    let keys = [key.to_vec()];
    let held = holders_sql(kind, 1);
    let pin = format!(
        "{} AND id IN (SELECT h.session FROM ({held}) h WHERE h.session IS NOT NULL) AND id <> ?",
        sessions::PIN
    );
    let mut params: Vec<(&[u8],)> = vec![(tenant.as_bytes(),)];
    params.extend(holders_params(tenant, kind, &keys));
    params.push((me,));
    conn.defer(&pin, params).await?;
    let eligible = ELIGIBLE
        .replacen('?', &stale.grace_us.to_string(), 1)
        .replacen('?', &stale.alive_us.to_string(), 1);
    let sql = format!(
        "SELECT DISTINCT h.session AS holder, w.owner, CAST(w.kind AS UNSIGNED) AS kind, \
         w.lock_key, w.mode FROM ({held}) h \
         LEFT JOIN waiters w FORCE INDEX (waiters_by_session) ON w.session = h.session \
         AND w.tenant = ? AND w.granted_token IS NULL AND {eligible} \
         WHERE h.session IS NOT NULL AND h.session <> ?"
    );
    let mut params = holders_params(tenant, kind, &keys);
    params.push((tenant.as_bytes(),));
    params.push((me,));
    conn.fetch_all(&sql, params).await
}

/// How many eligible waiters each of the tenant's `keys` of `kind` has in
/// the database queue: (kind, key, count) of the keys with any.
pub async fn counts(
    conn: &mut Conn,
    tenant: &str,
    kind: Kind,
    keys: &[Vec<u8>],
    stale: Staleness,
) -> sqlx::Result<Vec<(u8, Vec<u8>, u64)>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; keys.len()].join(", ");
    // The kind and the staleness thresholds are numbers of the broker's
    // own, written into the statement; the tenant and keys are bound.
    let eligible = ELIGIBLE
        .replacen('?', &stale.grace_us.to_string(), 1)
        .replacen('?', &stale.alive_us.to_string(), 1);
    let sql = format!(
        "SELECT CAST(w.kind AS UNSIGNED), w.lock_key, CAST(COUNT(*) AS UNSIGNED) FROM waiters w \
         WHERE w.tenant = ? AND w.kind = {} AND w.lock_key IN ({marks}) \
         AND w.granted_token IS NULL AND {eligible} GROUP BY w.kind, w.lock_key",
        kind as u8
    );
    let mut params: Vec<(&[u8],)> = vec![(tenant.as_bytes(),)];
    params.extend(keys.iter().map(|k| (k.as_slice(),)));
    conn.fetch_all(&sql, params).await
}

/// A pending wait of a session: which key, as which owner, for what.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionWait {
    pub session: Vec<u8>,
    pub owner: Vec<u8>,
    pub kind: u8,
    pub lock_key: Vec<u8>,
    pub mode: Option<u8>,
}

/// The eligible pending waits of `tenant`'s sessions `ids`, which it pins
/// first (see `sessions::PIN`; one round trip).
pub async fn pinned_waits_of(
    conn: &mut Conn,
    tenant: &str,
    ids: &[Vec<u8>],
    stale: Staleness,
) -> sqlx::Result<Vec<SessionWait>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let pin = format!("{} AND id IN ({marks})", sessions::PIN);
    let mut params: Vec<(&[u8],)> = vec![(tenant.as_bytes(),)];
    params.extend(ids.iter().map(|s| (s.as_slice(),)));
    conn.defer(&pin, params).await?;
    let eligible = ELIGIBLE
        .replacen('?', &stale.grace_us.to_string(), 1)
        .replacen('?', &stale.alive_us.to_string(), 1);
    let sql = format!(
        "SELECT w.session, w.owner, CAST(w.kind AS UNSIGNED) AS kind, w.lock_key, w.mode \
         FROM waiters w FORCE INDEX (waiters_by_session) \
         WHERE w.session IN ({marks}) AND w.tenant = ? AND w.granted_token IS NULL AND {eligible}"
    );
    let mut params: Vec<(&[u8],)> = ids.iter().map(|s| (s.as_slice(),)).collect();
    params.push((tenant.as_bytes(),));
    conn.fetch_all(&sql, params).await
}
