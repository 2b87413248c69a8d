//! MySQL access: connections ([`pool`], one server; [`db`], the servers
//! of one database with failover; [`keepalive`] on their sockets),
//! migrations, and one small function per
//! query (`locks`, `semaphores`, `waiters`, `elections`, `brokers`, `history`; `batch`
//! for statements over many lock rows at once).
//!
//! Nothing here decides who gets a lock, which waiter goes next or what to
//! clean up; the engine does, and passes its thresholds in. Rows come back
//! as plain data with the database clock (`now`), for the engine to judge.
//! The few conditions a statement must test atomically (a lease live by
//! `NOW(6)`, a waiter no longer eligible) are each written once, below and
//! in `waiters`.
//!
//! Statements that lock (`FOR UPDATE`, `UPDATE`, `DELETE`) read rows by an
//! index that names only their own key's rows, forced where the optimizer
//! might choose otherwise (`FORCE INDEX`, or ids joined as a derived
//! table): on a small table it prefers a scan once a statement names a
//! good share of the rows, and a locking scan locks every row it passes,
//! if only for a moment, so that other keys' `NOWAIT` reads failed, their
//! `SKIP LOCKED` reads skipped rows, and two keys' transactions
//! deadlocked. `tests/scans.rs` checks each such statement by the server's
//! row-read counters.

pub mod batch;
pub mod brokers;
pub mod db;
pub mod elections;
pub mod history;
pub mod keepalive;
pub mod listing;
pub mod locks;
pub mod pool;
pub mod query;
pub mod rwlocks;
pub mod semaphores;
pub mod sessions;
pub mod waiters;
pub mod waiting;

use sqlx::mysql::MySqlDatabaseError;

/// What a row of `locks` or `waiters` is about (the `kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Lock = 0,
    Election = 1,
    Semaphore = 2,
    /// A reader-writer lock (`rwlocks`; only its waiters share `waiters`).
    RwLock = 3,
}

impl Kind {
    /// The kind as the API and the metrics name it (`lock`, `election`,
    /// `semaphore`, `rwlock`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Election => "election",
            Kind::Semaphore => "semaphore",
            Kind::RwLock => "rwlock",
        }
    }

    /// The kind [`Kind::name`] names.
    pub fn of_name(name: &str) -> Option<Kind> {
        [Kind::Lock, Kind::Election, Kind::Semaphore, Kind::RwLock]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// Which row: tenant, kind and storage key.
#[derive(Debug, Clone, Copy)]
pub struct RowKey<'a> {
    pub tenant: &'a str,
    pub kind: Kind,
    pub key: &'a str,
}

/// How a read of a row locks it.
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

/// Adds `delta` to the count of pending waiters in `k`'s header (row
/// locked by the caller): a lock's or election's own row, a semaphore's or
/// a rwlock's header.
pub async fn add_queued(
    conn: &mut pool::Conn,
    k: RowKey<'_>,
    delta: i64,
) -> sqlx::Result<sqlx::mysql::MySqlQueryResult> {
    let (tenant, key) = (k.tenant, k.key);
    match k.kind {
        Kind::Lock | Kind::Election => {
            let sql = "UPDATE locks SET queued = CAST(queued AS SIGNED) + ? \
                WHERE tenant = ? AND kind = ? AND lock_key = ?";
            conn.execute(sql, (delta, tenant, k.kind as u8, key)).await
        }
        Kind::Semaphore => {
            let sql = "UPDATE semaphores SET queued = CAST(queued AS SIGNED) + ? \
                WHERE tenant = ? AND sem_key = ?";
            conn.execute(sql, (delta, tenant, key)).await
        }
        Kind::RwLock => {
            let sql = "UPDATE rwlocks SET queued = CAST(queued AS SIGNED) + ? \
                WHERE tenant = ? AND rw_key = ?";
            conn.execute(sql, (delta, tenant, key)).await
        }
    }
}

/// SQL: the lease of the row aliased `alias` is live by the database clock
/// (the one definition of "held" inside statements; the engine judges rows
/// it has read by the `now` read with them).
fn lease_live(alias: &str) -> String {
    format!("({alias}.owner IS NOT NULL AND {alias}.expires_at > NOW(6))")
}

/// SQL: the lease of the row aliased `alias` is free or has expired.
fn lease_free(alias: &str) -> String {
    format!("({alias}.owner IS NULL OR {alias}.expires_at <= NOW(6))")
}

/// A key found by a scan (the reaper's): tenant, kind and storage key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyRow {
    pub tenant: Vec<u8>,
    pub kind: i64,
    pub lock_key: Vec<u8>,
}

/// Migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How a failed statement is to be understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Another transaction holds the row lock: `NOWAIT` contention (3572 on
    /// MySQL 8) or a lock-wait timeout (1205, which MariaDB also uses for
    /// `NOWAIT`). Only the statement was undone: roll back.
    RowLocked,
    /// The transaction was rolled back because it collided with another:
    /// an InnoDB deadlock victim, or on Galera a certification failure
    /// (both 1213, at any statement or at `COMMIT`), or 1180 (an error
    /// during `COMMIT`). Nothing of it happened: retry.
    Conflict,
    /// This server cannot take writes now: a Galera node that is not ready
    /// (1047), a read-only server (1290, 1836), one shutting down (1053):
    /// move on to the next server.
    NotReady,
    /// The connection broke or did not answer: whether the statement took
    /// effect is unknown (only a `COMMIT` makes that matter).
    Disconnected,
    /// Any other error of the server.
    Other,
}

/// Classifies a database error by its MySQL error number.
pub fn classify(err: &sqlx::Error) -> Failure {
    match err {
        sqlx::Error::Database(db) => {
            let number = db
                .try_downcast_ref::<MySqlDatabaseError>()
                .map(MySqlDatabaseError::number);
            match number {
                Some(1205 | 3572) => Failure::RowLocked,
                Some(1213 | 1180) => Failure::Conflict,
                Some(1047 | 1053 | 1290 | 1836) => Failure::NotReady,
                // The session was killed (MariaDB's ER_CONNECTION_KILLED).
                Some(1927) => Failure::Disconnected,
                _ => Failure::Other,
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Failure::Disconnected,
        _ => Failure::Other,
    }
}
