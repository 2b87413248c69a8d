//! The stored procedures of the built-in (FIFO) policy's path for locks
//! (migration `20261124000002_lock_routines.sql`, re-created with their
//! history inserts by `20261125000003_history_routines.sql`): a waiting
//! acquire and a release in one `CALL` each, where the general path takes
//! 6 to 8 statements; each writes its `lock_events` rows itself. Both may leave a transaction open (their answer says so):
//! the engine commits it, or rolls it back, itself.

use chrono::NaiveDateTime;
use sqlx::{mysql::MySqlRow, Row};

use super::{pool::Conn, RowKey};

/// What a procedure did: `outcome` and the columns it fills (see the
/// migration for which outcome fills which).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub outcome: Vec<u8>,
    pub token: Option<u64>,
    pub hold_count: Option<u64>,
    pub expires_at: Option<NaiveDateTime>,
    pub fresh: Option<u64>,
    pub waiter_id: Option<u64>,
    pub waiter_broker: Option<Vec<u8>>,
    pub remaining_ms: Option<u64>,
    pub queued: Option<u64>,
    pub purged: Option<u64>,
    /// 1 when the procedure committed its change itself (nothing is open).
    pub committed: Option<u64>,
}

/// Read by position: sqlx names the columns of a prepared statement by
/// what `PREPARE` announced, and a `CALL` announces none.
impl<'r> sqlx::FromRow<'r, MySqlRow> for Outcome {
    fn from_row(row: &'r MySqlRow) -> sqlx::Result<Outcome> {
        Ok(Outcome {
            outcome: row.try_get(0)?,
            token: row.try_get(1)?,
            hold_count: row.try_get(2)?,
            expires_at: row.try_get(3)?,
            fresh: row.try_get(4)?,
            waiter_id: row.try_get(5)?,
            waiter_broker: row.try_get(6)?,
            remaining_ms: row.try_get(7)?,
            queued: row.try_get(8)?,
            purged: row.try_get(9)?,
            committed: row.try_get(10)?,
        })
    }
}

impl Outcome {
    /// Whether the outcome is `name`.
    pub fn is(&self, name: &str) -> bool {
        self.outcome == name.as_bytes()
    }
}

/// What a waiting acquire asks for, with the engine's thresholds.
#[derive(Debug, Clone, Copy)]
pub struct AcquireCall<'a> {
    pub owner: &'a str,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub priority: i32,
    /// This broker: the new waiter's.
    pub broker: &'a str,
    /// A broker heard from within this many µs is alive.
    pub alive_us: u64,
    /// The tenant's limit of eligible waiters.
    pub max_waiters: u64,
}

/// `lockbroker_lock_acquire`: grants, re-enters or enqueues, leaving the
/// transaction it began open (or answers `general`: roll back and take
/// the general path).
pub async fn acquire(conn: &mut Conn, k: RowKey<'_>, a: AcquireCall<'_>) -> sqlx::Result<Outcome> {
    let rows: Vec<Outcome> = conn
        .fetch_all(
            "CALL lockbroker_lock_acquire(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                k.tenant,
                k.kind as u8,
                k.key,
                a.owner,
                a.ttl_ms,
                a.wait_ms,
                a.priority,
                a.broker,
                a.alive_us,
                a.max_waiters,
            ),
        )
        .await?;
    one(rows)
}

/// `lockbroker_lock_release`: frees (one autocommitted statement when
/// nobody waits: `committed`), hands on to the oldest eligible waiter, or
/// drops one hold, leaving its transaction open otherwise; every write
/// marks the row with `mark`, and a row found marked so answers `already`.
pub async fn release(
    conn: &mut Conn,
    k: RowKey<'_>,
    owner: &str,
    token: u64,
    mark: u64,
    broker: &str,
    alive_us: u64,
) -> sqlx::Result<Outcome> {
    let rows: Vec<Outcome> = conn
        .fetch_all(
            "CALL lockbroker_lock_release(?, ?, ?, ?, ?, ?, ?, ?)",
            (
                k.tenant,
                k.kind as u8,
                k.key,
                owner,
                token,
                mark,
                broker,
                alive_us,
            ),
        )
        .await?;
    one(rows)
}

/// The one row a procedure answers.
fn one(mut rows: Vec<Outcome>) -> sqlx::Result<Outcome> {
    match rows.pop() {
        Some(row) if rows.is_empty() => Ok(row),
        // Not a broken connection: nothing is to be found out.
        _ => Err(sqlx::Error::RowNotFound),
    }
}
