//! MySQL access: the connection pool, migrations, and one small function per
//! query (in `locks`). Nothing here decides who gets a lock; the engine does.
//!
//! Every connection runs at READ COMMITTED (a `SKIP LOCKED` scan under
//! REPEATABLE READ keeps locks on what it read until commit), in UTC, with a
//! short lock-wait timeout so a waiting statement can never hang a request.

pub mod elections;
pub mod locks;
pub mod semaphores;
pub mod waiters;

use std::{str::FromStr, time::Duration};

use sqlx::{
    migrate::MigrateDatabase,
    mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions},
    ConnectOptions, Executor, MySql, MySqlPool,
};

/// What a row of `locks` or `waiters` is about (the `kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Lock = 0,
    Election = 1,
    Semaphore = 2,
}

/// Which row: tenant, kind and storage key.
#[derive(Debug, Clone, Copy)]
pub struct RowKey<'a> {
    pub tenant: &'a str,
    pub kind: Kind,
    pub key: &'a str,
}

/// Migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Seconds a `FOR UPDATE` (without NOWAIT) waits for a row lock. Grant
/// transactions are a few milliseconds long, so this only fires when
/// something is badly wrong.
const LOCK_WAIT_TIMEOUT_S: u32 = 5;

/// How long a request waits for a free connection before answering 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// How a failed statement is to be understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Another transaction holds the row lock: `NOWAIT` contention (3572 on
    /// MySQL 8) or a lock-wait timeout (1205, which MariaDB also uses for
    /// `NOWAIT`). Only the statement was undone: roll back.
    RowLocked,
    /// InnoDB chose this transaction as a deadlock victim (1213); retry.
    Deadlock,
    /// Anything else: the database is down, unreachable or misbehaving.
    Unavailable,
}

/// Classifies a database error by its MySQL error number.
pub fn classify(err: &sqlx::Error) -> Failure {
    let number = err
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number);
    match number {
        Some(1205 | 3572) => Failure::RowLocked,
        Some(1213) => Failure::Deadlock,
        _ => Failure::Unavailable,
    }
}

/// Creates the database if it is missing, opens a pool on it and runs the
/// migrations.
///
/// # Errors
/// The URL is invalid, the server is unreachable, or a migration fails.
pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<MySqlPool> {
    use anyhow::Context as _;
    let options = MySqlConnectOptions::from_str(url)
        .context("invalid database_url")?
        .log_statements(tracing::log::LevelFilter::Trace);
    if !MySql::database_exists(url)
        .await
        .context("cannot reach the database server")?
    {
        tracing::info!("creating the database");
        MySql::create_database(url)
            .await
            .context("cannot create the database")?;
    }
    let pool = MySqlPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // No ping before each use: it costs a round trip per operation. A
        // connection that died fails its statement (503) and is dropped.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
                conn.execute(
                    format!("SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}")
                        .as_str(),
                )
                .await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .context("cannot connect to the database")?;
    MIGRATOR
        .run(&pool)
        .await
        .context("cannot run the migrations")?;
    Ok(pool)
}

/// True when a trivial query answers within `timeout`.
pub async fn ping(pool: &MySqlPool, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, sqlx::query("SELECT 1").execute(pool)).await,
        Ok(Ok(_))
    )
}
