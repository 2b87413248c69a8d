//! The lock engine: grants, renewals and releases as short MySQL
//! transactions. A held lock is a row with an owner and an expiry, never an
//! open transaction or a session lock, so held locks pin no connection.
//!
//! - `lease`: one transaction per operation on one lock row.
//! - `wait`: what `wait_ms > 0` does between tries (the waiting seam).

mod lease;
mod wait;

use std::sync::Arc;

use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::{metrics::Metrics, store, tenant::Tenant};

pub use lease::{Grant, LockState, Released};

/// How many times a deadlocked transaction is retried before giving up.
const DEADLOCK_RETRIES: u32 = 3;

/// Why a lock operation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Held by another owner (and `wait_ms` ran out).
    #[error("the lock is held by another owner")]
    LockHeld { retry_after_ms: u64 },
    /// The caller's lease is not the current grant (expired, re-granted,
    /// released, or never held).
    #[error("the lease is not held by this owner and token")]
    LeaseLost,
    /// The tenant already has `max_waiters` waiting requests.
    #[error("too many waiters for this tenant")]
    TooManyWaiters,
    /// The broker is shutting down; nothing was granted.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// The database could not be used; nothing was granted.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
}

impl From<sqlx::Error> for EngineError {
    fn from(err: sqlx::Error) -> Self {
        EngineError::Unavailable(err)
    }
}

/// Which lock an operation is about.
#[derive(Debug, Clone)]
pub struct LockRef {
    pub tenant: Arc<Tenant>,
    /// The key as the client sent it.
    pub key: String,
    /// The key as stored, from the tenant's naming policy.
    pub storage_key: String,
}

/// The lock engine, shared by all requests.
pub struct Engine {
    pool: MySqlPool,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    waits: wait::Waits,
}

impl Engine {
    pub fn new(pool: MySqlPool, metrics: Arc<Metrics>, shutdown: watch::Receiver<bool>) -> Engine {
        Engine {
            pool,
            metrics,
            shutdown,
            waits: wait::Waits::default(),
        }
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

/// `now + ms`, on the database's clock reading `now`.
fn plus_ms(now: NaiveDateTime, ms: u64) -> NaiveDateTime {
    now + chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX / 2))
}

/// Runs `op` again while InnoDB reports a deadlock, a bounded number of times.
async fn retry_deadlocks<T, F, Fut>(mut op: F) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EngineError>>,
{
    let mut tries = 0;
    loop {
        match op().await {
            Err(EngineError::Unavailable(err))
                if store::classify(&err) == store::Failure::Deadlock
                    && tries < DEADLOCK_RETRIES =>
            {
                tries += 1;
                tracing::debug!(tries, "deadlock, retrying");
            }
            other => return other,
        }
    }
}
