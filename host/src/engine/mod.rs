//! The lock engine: grants, renewals, releases and handoffs as short MySQL
//! transactions. A held lock is a row with an owner and an expiry, never an
//! open transaction or a session lock, so held locks pin no connection.
//!
//! - `lease`: locks and elections (one row in `locks` per key).
//! - `semaphore`: N slot rows per key, claimed with `SKIP LOCKED`.
//! - `queue`: the durable wait queue, direct handoff and waking waiters.
//! - `reaper`: hands expired leases with waiters on; cleans the queue.

mod lease;
mod queue;
mod reaper;
mod semaphore;

use std::{collections::HashMap, ops::Deref, sync::Arc, sync::Mutex};

use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use tokio::sync::{oneshot, watch};

use crate::{
    metrics::Metrics,
    store::{self, Kind, RowKey},
    tenant::Tenant,
};

pub use lease::{Grant, LockState, Released};
pub use semaphore::{SemaphoreGrant, SemaphoreState, SlotState};

/// How many times a deadlocked transaction is retried before giving up.
const DEADLOCK_RETRIES: u32 = 3;

/// Why an operation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Held by another owner (and `wait_ms` ran out).
    #[error("the lock is held by another owner")]
    LockHeld { retry_after_ms: u64 },
    /// Every permit is taken (and `wait_ms` ran out).
    #[error("every permit of the semaphore is taken")]
    SemaphoreFull { retry_after_ms: u64 },
    /// The semaphore exists with another number of permits.
    #[error("the semaphore has {permits} permits")]
    PermitsMismatch { permits: u32 },
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

/// Which lock, semaphore or election an operation is about.
#[derive(Debug, Clone)]
pub struct LockRef {
    pub tenant: Arc<Tenant>,
    pub kind: Kind,
    /// The key as the client sent it.
    pub key: String,
    /// The key as stored, from the tenant's naming policy.
    pub storage_key: String,
}

impl LockRef {
    /// The database row's key.
    pub fn row(&self) -> RowKey<'_> {
        RowKey {
            tenant: &self.tenant.name,
            kind: self.kind,
            key: &self.storage_key,
        }
    }
}

/// A lease handed to a waiter by the transaction that freed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handoff {
    pub token: u64,
    pub slot: Option<u32>,
    pub expires_at: NaiveDateTime,
    /// True when the waiter's row is gone already (a handoff in this
    /// broker); false when the waiter removes it (another broker's grant).
    pub collected: bool,
}

/// The lock engine, shared by all requests (cheap to clone).
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

pub struct Inner {
    pool: MySqlPool,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    /// This process's name in the `waiters.broker` column.
    broker: String,
    /// Waiters of this process, by waiter id: where a handoff is delivered.
    local: Mutex<HashMap<u64, oneshot::Sender<Handoff>>>,
}

impl Deref for Engine {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Engine {
    pub fn new(pool: MySqlPool, metrics: Arc<Metrics>, shutdown: watch::Receiver<bool>) -> Engine {
        Engine(Arc::new(Inner {
            pool,
            metrics,
            shutdown,
            broker: broker_name(),
            local: Mutex::new(HashMap::new()),
        }))
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Turns true when the broker begins to shut down.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// This broker's name among the brokers sharing the database.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The `retry_after_ms` hint for a refused try, from the backoff policy.
    async fn retry_after(
        &self,
        lock: &LockRef,
        waiters: u32,
        remaining_ms: u64,
        budget_ms: u64,
    ) -> u64 {
        let decision = lock
            .tenant
            .policy
            .next_delay(crate::policy::Contention {
                attempt: 1,
                waited_ms: budget_ms,
                budget_ms,
                waiters,
                lease_remaining_ms: remaining_ms,
                seed: rand::random(),
            })
            .await;
        match decision {
            crate::policy::Decision::RetryAfter(ms) => ms.max(1),
            crate::policy::Decision::GiveUp => remaining_ms.max(1),
        }
    }
}

/// A name unique to this process: host, pid and a random suffix (a
/// restarted process with a recycled pid must not collect its
/// predecessor's handoffs).
fn broker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host: String = host.chars().take(32).collect();
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
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
