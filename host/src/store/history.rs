//! The `lock_events` table: the history of each lock, appended by the
//! transaction that changes the lock (one multi-row INSERT), read newest
//! first per key, pruned by age in bounded batches.

use chrono::NaiveDateTime;

use super::{pool::Conn, Kind, RowKey};

/// What happened to a lease (the `event` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// A new grant (a new token) to a requester that found the key free.
    Granted = 1,
    /// The holder released its last hold.
    Released = 2,
    /// The lease ran out without a release (recorded by the transaction
    /// that next changed the key, `at` its expiry).
    Expired = 3,
    /// A new grant to a queued waiter, made by the transaction that freed
    /// the key.
    HandedOff = 4,
    /// An operator ended the lease.
    ForceReleased = 5,
    /// A session ended (its leases' own events say what became of them);
    /// stored with [`SESSION_KIND`] and the session's id as its key.
    SessionEnded = 6,
    /// A session's wait was refused because it would have closed a cycle
    /// (issue #33); stored with [`DEADLOCK_KIND`], the key waited for as
    /// its key and the cycle (JSON, its first step the refused wait, which
    /// names the key's kind) in `cycle`.
    Deadlock = 7,
}

/// The `kind` of a `session_ended` event's row: a session, not a key.
pub const SESSION_KIND: u8 = 4;
/// The `kind` of a `deadlock` event's row: not a change of the key's
/// leases, so not in its history (which reads its own kind), and a
/// tenant's refusals are one index range (`lock_events_by_key`).
pub const DEADLOCK_KIND: u8 = 5;

/// Why a session's end released a lease (`lock_events.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    /// Its client closed the session.
    SessionClosed = 1,
    /// The session's TTL ran out.
    SessionExpired = 2,
}

impl EndCause {
    /// The cause stored as `code`.
    pub fn from_code(code: u8) -> Option<EndCause> {
        match code {
            1 => Some(EndCause::SessionClosed),
            2 => Some(EndCause::SessionExpired),
            _ => None,
        }
    }

    /// The name in the API (`"session_closed"`, `"session_expired"`).
    pub fn name(self) -> &'static str {
        match self {
            EndCause::SessionClosed => "session_closed",
            EndCause::SessionExpired => "session_expired",
        }
    }
}

impl EventKind {
    /// The kind stored as `code`.
    pub fn from_code(code: u8) -> Option<EventKind> {
        Some(match code {
            1 => EventKind::Granted,
            2 => EventKind::Released,
            3 => EventKind::Expired,
            4 => EventKind::HandedOff,
            5 => EventKind::ForceReleased,
            6 => EventKind::SessionEnded,
            7 => EventKind::Deadlock,
            _ => return None,
        })
    }

    /// The name in the API (`"granted"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Granted => "granted",
            EventKind::Released => "released",
            EventKind::Expired => "expired",
            EventKind::HandedOff => "handed_off",
            EventKind::ForceReleased => "force_released",
            EventKind::SessionEnded => "session_ended",
            EventKind::Deadlock => "deadlock",
        }
    }
}

/// An event to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub tenant: String,
    /// The kind of the key; `None`: a session's (`session_ended`, stored
    /// as [`SESSION_KIND`], `lock_key` the session's id).
    pub kind: Option<Kind>,
    pub lock_key: String,
    pub event: EventKind,
    pub owner: String,
    pub token: u64,
    /// By the database clock; `None`: `NOW(6)` of the insert.
    pub at: Option<NaiveDateTime>,
    /// The id of the policy version that decided it, if one did.
    pub policy: Option<std::sync::Arc<str>>,
    /// The session the lease is held in, if it is.
    pub session: Option<String>,
    /// Why a session's end released it, if one did.
    pub reason: Option<EndCause>,
    /// A `deadlock` event's cycle (JSON).
    pub cycle: Option<String>,
}

impl NewEvent {
    /// The row's `kind`: the key's, or what the event is about when that
    /// is not a key's lease.
    fn kind_code(&self) -> u8 {
        match (self.event, self.kind) {
            (EventKind::Deadlock, _) => DEADLOCK_KIND,
            (_, Some(kind)) => kind as u8,
            (_, None) => SESSION_KIND,
        }
    }
}

/// A recorded event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub event: u8,
    pub owner: Vec<u8>,
    pub token: u64,
    pub at: NaiveDateTime,
    pub policy: Option<Vec<u8>>,
    pub session: Option<Vec<u8>>,
    pub reason: Option<u8>,
}

/// Appends `events` in one statement (in the caller's transaction), sent
/// with its next statement or commit (`Conn::defer`).
pub async fn append(conn: &mut Conn, events: &[NewEvent]) -> sqlx::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let tuples =
        vec!["(?, ?, ?, ?, ?, ?, COALESCE(?, NOW(6)), ?, ?, ?, ?)"; events.len()].join(", ");
    let sql = format!(
        r#"
INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at, policy, session, reason, cycle)
VALUES {tuples}
"#
    );
    let params: Vec<_> = events
        .iter()
        .map(|e| {
            (
                &e.tenant,
                e.kind_code(),
                &e.lock_key,
                e.event as u8,
                &e.owner,
                e.token,
                e.at,
                e.policy.as_deref(),
                e.session.as_deref(),
                e.reason.map(|r| r as u8),
                e.cycle.as_deref(),
            )
        })
        .collect();
    conn.defer(&sql, params).await?;
    Ok(())
}

/// The key's latest `limit` events, newest first.
pub async fn latest(conn: &mut Conn, k: RowKey<'_>, limit: u32) -> sqlx::Result<Vec<EventRow>> {
    conn.fetch_all(
        r#"
SELECT event, owner, token, at, policy, session, reason FROM lock_events
WHERE tenant = ? AND kind = ? AND lock_key = ?
ORDER BY id DESC LIMIT ?
"#,
        (k.tenant, k.kind as u8, k.key, limit),
    )
    .await
}

/// An event with its id and key, as the feed of every change reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FeedRow {
    pub id: u64,
    pub tenant: Vec<u8>,
    pub kind: u8,
    pub lock_key: Vec<u8>,
    pub event: u8,
    pub owner: Vec<u8>,
    pub token: u64,
    pub at: NaiveDateTime,
    pub session: Option<Vec<u8>>,
    pub reason: Option<u8>,
    /// A `deadlock` event's cycle (JSON).
    pub cycle: Option<Vec<u8>>,
}

/// The columns of a [`FeedRow`].
const FEED: &str = "id, tenant, kind, lock_key, event, owner, token, at, session, reason, cycle";

/// Every tenant's events after `after`, oldest first, at most `limit`.
pub async fn after(conn: &mut Conn, after: u64, limit: u32) -> sqlx::Result<Vec<FeedRow>> {
    let sql = format!("SELECT {FEED} FROM lock_events WHERE id > ? ORDER BY id LIMIT ?");
    conn.fetch_all(&sql, (after, limit)).await
}

/// The events of `ids` that exist (ids the feed passed over as gaps, looked
/// for again in case their transactions committed late).
pub async fn with_ids(conn: &mut Conn, ids: &[u64]) -> sqlx::Result<Vec<FeedRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("SELECT {FEED} FROM lock_events WHERE id IN ({marks}) ORDER BY id");
    let params: Vec<(u64,)> = ids.iter().map(|id| (*id,)).collect();
    conn.fetch_all(&sql, params).await
}

/// `tenant`'s events with ids in `after..=until`, oldest first, at most
/// `limit` (a stream catching up).
pub async fn of_tenant(
    conn: &mut Conn,
    tenant: &str,
    (after, until): (u64, u64),
    limit: u32,
) -> sqlx::Result<Vec<FeedRow>> {
    let sql = format!(
        "SELECT {FEED} FROM lock_events WHERE id > ? AND id <= ? AND tenant = ? ORDER BY id LIMIT ?"
    );
    conn.fetch_all(&sql, (after, until, tenant, limit)).await
}

/// `tenant`'s `deadlock` events of the last `within_s` seconds whose key
/// starts with `prefix`, newest first, at most `limit` (one range of
/// `lock_events_by_key`).
pub async fn refusals(
    conn: &mut Conn,
    tenant: &str,
    prefix: &[u8],
    within_s: u32,
    limit: u32,
) -> sqlx::Result<Vec<FeedRow>> {
    let sql = format!(
        r#"
SELECT {FEED} FROM lock_events
WHERE tenant = ? AND kind = ? AND lock_key LIKE ?
  AND at > NOW(6) - INTERVAL ? SECOND
ORDER BY id DESC LIMIT ?
"#
    );
    let like = super::waiting::like_prefix(prefix);
    conn.fetch_all(&sql, (tenant, DEADLOCK_KIND, like, within_s, limit))
        .await
}

/// The lowest and the highest id of the events kept (`None` when none).
pub async fn ids(conn: &mut Conn) -> sqlx::Result<(Option<u64>, Option<u64>)> {
    conn.fetch_one("SELECT MIN(id), MAX(id) FROM lock_events", ())
        .await
}

/// Deletes up to `limit` events older than `older_than_us` µs by the
/// database clock (autocommit); how many.
pub async fn prune(conn: &mut Conn, older_than_us: u64, limit: u32) -> sqlx::Result<u64> {
    let done = conn
        .execute(
            r#"
DELETE FROM lock_events WHERE at < NOW(6) - INTERVAL ? MICROSECOND
ORDER BY at LIMIT ?
"#,
            (older_than_us, limit),
        )
        .await?;
    Ok(done.rows_affected())
}
