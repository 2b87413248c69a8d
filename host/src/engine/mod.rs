//! The lock engine: grants, renewals, releases and handoffs as short MySQL
//! transactions on one database. A held lock is a row with an owner and an
//! expiry, never an open transaction or a session lock, so held locks pin
//! no connection.
//!
//! - `seat`: where a lease lives, a lock's (or election's) own row or one
//!   slot of a semaphore, and the one place that tells the two apart.
//! - `lease`: what every lease does whatever its seat: the outcome of a
//!   try, release, renewal, handoff to the next waiter, expiry reaped.
//! - `lock`: tries at locks and elections (one row in `locks` per key),
//!   and the validation of a token.
//! - `gather`: operations that arrive together gathered into shared runs
//!   (one transaction each), for `batch` and `rw_batch`.
//! - `batch`: group commit, uncontended acquires and releases of locks
//!   from many clients decided and committed in shared transactions.
//! - `multilock`: several lock keys granted, renewed and released all or
//!   none, in storage-key order.
//! - `force`: an operator ending a stuck lease.
//! - `gate`: bounds on the connections that requests waiting on a key's
//!   row may hold (a few per key, half the pool in all), so hot keys never
//!   starve the others.
//! - `rwlock`: reader-writer locks (a header row and one row per reader),
//!   sharing the wait queue and its delivery with the other kinds.
//! - `rw_batch`: a rwlock key's reads, releases and renewals combined per transaction.
//! - `history`: each lock's events, appended by the transactions that
//!   make them; read and pruned.
//! - `delay`: lock-delay and minimum hold, when a key may be granted again.
//! - `semaphore`: tries at semaphores (N slot rows per key, `SKIP LOCKED`).
//! - `queue`: the durable wait queue, choosing the next waiter, waking.
//! - `held_here`: in-process handoffs, waiters of this broker for a lease
//!   it granted waiting in memory, handed the lease by one write.
//! - `pacing`: the narrow handle on a tenant's fairness and backoff.
//! - `reaper`: finds keys whose leases expired with waiters, or whose queue
//!   holds stale waiters or undelivered grants, and reaps them.
//! - `election`: watching an election (one shared poller per election).
//! - `brokers`: this broker's heartbeat, by which others tell it is alive.
//! - `wake`: push wake-ups, telling another broker that its waiter was
//!   granted (a hint; its poll is the fallback).
//! - `settle`: commits whose outcome is unknown, found out.
//! - `marks`: rwlock marks whose commit is in doubt, and whether a later
//!   header read of this broker saw them (for `settle`).
//! - `detach`: operations that run to their end when their caller leaves.
//!
//! Every database call of an operation is bounded by its [`Budget`]
//! (`db_timeout_ms`); collisions with other transactions (deadlocks,
//! Galera certification failures) are retried with backoff within it.

mod batch;
mod brokers;
mod contention;
mod deadlock;
mod delay;
mod detach;
mod election;
mod events;
#[cfg(test)]
mod fixtures;
mod force;
mod gate;
mod gather;
mod heat;
mod held_here;
mod history;
mod lease;
mod listing;
mod lock;
mod marks;
mod multilock;
pub mod pacing;
mod queue;
mod reaper;
mod rw_batch;
mod rwlock;
mod seat;
mod semaphore;
mod session;
mod settle;
mod standby;
mod waiting;
mod wake;

use std::{collections::HashMap, ops::Deref, sync::Arc, sync::Mutex, time::Duration};

use chrono::NaiveDateTime;
use tokio::{
    sync::{oneshot, watch},
    time::Instant,
};

use crate::{
    metrics::Metrics,
    policy::Delays,
    store::{
        self,
        db::Db,
        pool::{Conn, ConnectError},
        Failure, Kind, RowKey,
    },
    tenant::Tenant,
};

pub use contention::{Contention, HotKey, MAX_WINDOW_S};
pub use deadlock::CycleLink;
pub use election::{Leadership, Observation};
pub use events::{Event, Subscription};
pub use force::Forced;
pub use heat::{Counts, KeyHeat};
pub use held_here::MemoryWaiter;
pub use history::LockEvent;
pub use lease::Ask;
pub use listing::{Listing, Span};
pub use lock::{Grant, LockState, Released, Validity};
pub use multilock::{MultiRelease, MULTILOCK_MAX_KEYS};
pub use pacing::Pacing;
pub use rwlock::{RwGrant, RwHolder, RwMode, RwState};
pub use seat::{Lease, Seat, SESSION_LEASE_TTL_MS};
pub use semaphore::{SemaphoreGrant, SemaphoreState, SlotState};
pub use session::{EndReason, SessionInfo, SessionLease};
pub use waiting::{KeyQueue, Party, QueueEntry, WaitEdge, WaitGraph};
pub use wake::{
    HeatReply, HeatRequest, Push, WaitingReply, WaitingRequest, WakeReply, WakeRequest, WAKE_PATH,
};

/// A broker is taken for dead once its heartbeat is this old: its pending
/// waiters are skipped, its undelivered grants taken back.
pub const BROKER_DEAD_AFTER: Duration = Duration::from_micros(store::brokers::ALIVE_US);
/// How often a broker says it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);

/// An engine operation under way: it runs to its end even if the caller
/// stops waiting for it (`detach`), and answers `T` or why not.
pub type Op<T> = detach::Finish<Result<T, EngineError>>;

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
    /// Nobody holds the lock (an operator's force-release found no live
    /// lease).
    #[error("the lock is not held")]
    NotHeld,
    /// The tenant already has its most event streams open on this broker.
    #[error("too many event streams for this tenant")]
    TooManyStreams,
    /// A multi-lock names one storage key twice.
    #[error("the key {key:?} names the storage key {storage_key:?} already named by another key")]
    DuplicateKey { key: String, storage_key: String },
    /// The tenant has its `max_sessions` live sessions already.
    #[error("too many sessions for this tenant")]
    TooManySessions,
    /// Waiting would close a cycle of sessions waiting for each other
    /// (nothing granted, not queued): `cycle` says who waits for what.
    #[error("waiting would close a cycle of sessions waiting for each other (a deadlock)")]
    Deadlock { cycle: Vec<CycleLink> },
    /// The session named is unknown, ended or expired (nothing granted).
    #[error("no such session (it ended, expired, or never existed)")]
    SessionNotFound,
    /// The lease is held in a session: it lives as long as the session
    /// (renew the session instead).
    #[error("the lease is held in a session")]
    InSession,
    /// The broker is shutting down; nothing was granted.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// The database could not be used; nothing was granted.
    #[error("the database is unavailable")]
    Unavailable(#[source] DbFailure),
}

/// How the database failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum DbFailure {
    #[error(transparent)]
    Statement(#[from] sqlx::Error),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A commit whose answer was lost, found not to have happened.
    #[error("the connection broke before the commit took effect")]
    NotCommitted,
    /// A commit whose outcome could not be found out in time.
    #[error("the database did not answer whether a commit took effect")]
    Unknown,
}

impl From<sqlx::Error> for EngineError {
    fn from(err: sqlx::Error) -> Self {
        EngineError::Unavailable(DbFailure::Statement(err))
    }
}

impl From<ConnectError> for EngineError {
    fn from(err: ConnectError) -> Self {
        EngineError::Unavailable(DbFailure::Connect(err))
    }
}

/// What to do about a failed attempt.
enum Retry {
    /// A collision with another transaction: again after a random pause.
    Backoff,
    /// The server cannot serve now: again shortly, perhaps elsewhere.
    Later,
    /// The connection broke before anything was committed: again now, on a
    /// fresh connection.
    Now,
}

impl EngineError {
    /// The `kind` label of `lockbroker_db_errors_total` for a database
    /// failure; `None` for answers that are not failures (lock held, ...).
    fn db_failure_kind(&self) -> Option<&'static str> {
        let EngineError::Unavailable(failure) = self else {
            return None;
        };
        Some(match failure {
            DbFailure::Statement(err) => match store::classify(err) {
                Failure::Conflict => "conflict",
                Failure::RowLocked => "row_locked",
                Failure::NotReady => "not_ready",
                Failure::Disconnected => "disconnected",
                Failure::Other => "other",
            },
            DbFailure::Connect(ConnectError::Busy) => "busy",
            DbFailure::Connect(ConnectError::TimedOut) => "timeout",
            DbFailure::Connect(ConnectError::Closed) => "closed",
            DbFailure::Connect(ConnectError::Connect { .. }) => "connect",
            DbFailure::Connect(ConnectError::NotReady { .. }) => "not_ready",
            DbFailure::NotCommitted => "not_committed",
            DbFailure::Unknown => "unknown",
        })
    }

    fn retry(&self) -> Option<Retry> {
        match self {
            EngineError::Unavailable(DbFailure::Statement(err)) => match store::classify(err) {
                Failure::Conflict | Failure::RowLocked => Some(Retry::Backoff),
                Failure::NotReady => Some(Retry::Later),
                Failure::Disconnected => Some(Retry::Now),
                Failure::Other => None,
            },
            EngineError::Unavailable(DbFailure::Connect(ConnectError::NotReady { .. })) => {
                Some(Retry::Later)
            }
            EngineError::Unavailable(DbFailure::NotCommitted) => Some(Retry::Now),
            _ => None,
        }
    }
}

/// The time an operation's database work may take: past it, 503.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub deadline: Instant,
}

impl Budget {
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Which lock, semaphore or election an operation is about, with what
/// the engine needs of its tenant.
#[derive(Clone)]
pub struct LockRef {
    /// The tenant's name: its rows are keyed by it.
    pub tenant: String,
    pub kind: Kind,
    /// The key as the client sent it.
    pub key: String,
    /// The key as stored, from the tenant's naming policy.
    pub storage_key: String,
    /// Waiting requests the tenant may have at once, across keys and
    /// brokers (429 beyond).
    pub max_waiters: u64,
    /// The tenant's fairness and backoff (and its policy's `timing`).
    pub pacing: Arc<dyn Pacing>,
    /// The lock's lock-delay and minimum hold: the tenant's, as its policy
    /// overrides them for this key ([`Scope::resolve`]).
    pub delays: Delays,
    /// The id of the policy version that named the key (its history's
    /// grants name it); none for the built-in policy, or a lock not named
    /// by a request (then the version in force is named).
    pub named_by: Option<Arc<str>>,
}

impl std::fmt::Debug for LockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockRef")
            .field("tenant", &self.tenant)
            .field("kind", &self.kind)
            .field("key", &self.key)
            .field("storage_key", &self.storage_key)
            .finish_non_exhaustive()
    }
}

/// What the engine needs of a tenant: its name, its waiter limit and its
/// pacing. A tenant gives one ([`Scope::of`]); a test can make one up.
#[derive(Clone)]
pub struct Scope {
    pub tenant: String,
    pub max_waiters: u64,
    pub pacing: Arc<dyn Pacing>,
    /// The tenant's configured lock-delay and minimum hold.
    pub delays: Delays,
}

impl Scope {
    /// A configured tenant's scope: its policy paces.
    pub fn of(tenant: &Arc<Tenant>) -> Scope {
        Scope {
            tenant: tenant.name.clone(),
            max_waiters: tenant.max_waiters,
            pacing: pacing::of(tenant),
            delays: tenant.delays,
        }
    }

    /// This tenant's lock of `kind` named `storage_key` (`key` as the
    /// client sent it), as the broker uses it: [`Scope::lock`] with the
    /// delays the tenant's policy gives the key, if it exports `timing`
    /// (one policy call; none for other kinds, or a policy without it).
    pub async fn resolve(&self, kind: Kind, key: String, storage_key: String) -> LockRef {
        let mut lock = self.lock(kind, key, storage_key);
        if kind == Kind::Lock {
            if let Some(delays) = self.pacing.delays(&lock.storage_key, self.delays) {
                lock.delays = delays.await;
            }
        }
        lock
    }

    /// This tenant's lock of `kind` named `storage_key` (`key` as the
    /// client sent it), with the tenant's configured delays for locks and
    /// none for semaphores and elections; its policy is not asked (see
    /// [`Scope::resolve`]).
    pub fn lock(&self, kind: Kind, key: String, storage_key: String) -> LockRef {
        LockRef {
            tenant: self.tenant.clone(),
            kind,
            key,
            storage_key,
            max_waiters: self.max_waiters,
            pacing: self.pacing.clone(),
            delays: if kind == Kind::Lock {
                self.delays
            } else {
                Delays::default()
            },
            named_by: None,
        }
    }
}

impl LockRef {
    /// `tenant`'s lock of `kind` named `storage_key` (`key` as the client
    /// sent it), with its delays as the tenant's policy gives them
    /// ([`Scope::resolve`]).
    pub async fn new(
        tenant: &Arc<Tenant>,
        kind: Kind,
        key: String,
        storage_key: String,
    ) -> LockRef {
        Scope::of(tenant).resolve(kind, key, storage_key).await
    }

    /// The database row's key (for a semaphore, its header's).
    pub fn row(&self) -> RowKey<'_> {
        RowKey {
            tenant: &self.tenant,
            kind: self.kind,
            key: &self.storage_key,
        }
    }
}

/// A lease handed to a waiter by the transaction that freed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handoff {
    pub token: u64,
    pub seat: Seat,
    pub expires_at: NaiveDateTime,
}

/// Settings of an engine.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Bound on the database work of one operation.
    pub db_timeout: Duration,
    /// Uncontended lock operations share transactions (`batch`).
    pub group_commit: bool,
}

/// The lock engine on one database, shared by all requests (cheap to clone).
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

pub struct Inner {
    db: Db,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    settings: Settings,
    /// This process's name in the `waiters.broker` and `brokers` columns.
    broker: String,
    /// Waiters of this process, by waiter id: where a handoff is delivered.
    /// Whoever takes a waiter's sender out of here delivers its grant.
    local: Mutex<HashMap<u64, oneshot::Sender<Handoff>>>,
    /// Rows of waiters that received their grants, to delete in one batch.
    collected: Mutex<Vec<u64>>,
    /// The election pollers running on this broker.
    pollers: election::Pollers,
    /// Push wake-ups: to other brokers' waiters, and from other brokers.
    wake: wake::Wake,
    /// Uncontended operations gathered for the next shared transaction.
    batcher: batch::Batcher,
    /// Rwlock operations gathered per key for its next combined transaction.
    combiner: rw_batch::Combiner,
    /// Rwlock marks whose commit is in flight or in doubt (`marks`).
    marks: Arc<marks::Marks>,
    /// The feed of every change, for event streams.
    feed: events::Feed,
    /// Keys (tenant, storage key) with a timer to hand them on when their
    /// lock-delay or minimum hold ends (`delay`).
    delayed: Mutex<std::collections::HashSet<(String, String)>>,
    /// Turns per key for operations that wait on a key's row (`gate`).
    gates: gate::Gates,
    /// Leases granted through this broker, with the waiters here for them
    /// (`held_here`).
    held_here: held_here::HeldHere,
    /// How hot this broker saw each key (`heat`, `GET /v1/contention`).
    heat: heat::Heat,
    /// The tenants whose keys the reaper tends, by name: replaced whole
    /// when a config reload adds, removes or changes tenants.
    scopes: std::sync::RwLock<Arc<Scopes>>,
}

/// The reaper's tenants, by name (as stored: bytes).
pub type Scopes = HashMap<Vec<u8>, Scope>;

impl Deref for Engine {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Engine {
    pub fn new(
        db: Db,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
        settings: Settings,
        broker: String,
    ) -> Engine {
        let gates = gate::Gates::new(db.max_connections());
        Engine(Arc::new(Inner {
            db,
            metrics,
            shutdown,
            settings,
            broker,
            local: Mutex::new(HashMap::new()),
            collected: Mutex::new(Vec::new()),
            pollers: election::Pollers::default(),
            wake: wake::Wake::default(),
            batcher: batch::Batcher::default(),
            combiner: rw_batch::Combiner::default(),
            marks: Arc::default(),
            feed: events::Feed::default(),
            delayed: Mutex::new(std::collections::HashSet::new()),
            gates,
            held_here: held_here::HeldHere::default(),
            heat: heat::Heat::default(),
            scopes: std::sync::RwLock::default(),
        }))
    }

    /// The tenants of this database whose keys the reaper tends from its
    /// next pass on (keys of other tenants are left alone).
    pub fn set_scopes(&self, scopes: impl IntoIterator<Item = Scope>) {
        let scopes = scopes
            .into_iter()
            .map(|t| (t.tenant.clone().into_bytes(), t))
            .collect();
        *self.scopes.write().expect("scopes lock") = Arc::new(scopes);
    }

    fn scopes(&self) -> Arc<Scopes> {
        self.scopes.read().expect("scopes lock").clone()
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Turns true when the broker begins to shut down.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// This broker's name among the brokers sharing the database.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// Waiters of this broker queued now, in the database queue or in
    /// memory (for metrics).
    pub fn local_waiters(&self) -> usize {
        let here = usize::try_from(self.held_here.waiting_total()).unwrap_or(usize::MAX);
        self.local.lock().expect("local waiters").len() + here
    }

    /// A fresh budget for one step of database work.
    fn budget(&self) -> Budget {
        Budget {
            deadline: Instant::now() + self.settings.db_timeout,
        }
    }

    /// A connection for autocommit statements.
    async fn conn(&self, budget: Budget) -> Result<Conn, EngineError> {
        Ok(self.db.acquire(budget.deadline).await?)
    }

    /// A connection with a transaction begun.
    async fn begin(&self, budget: Budget) -> Result<Conn, EngineError> {
        let mut conn = self.db.acquire(budget.deadline).await?;
        conn.begin().await?;
        Ok(conn)
    }

    /// Creates the header of a key never seen before (at most once per
    /// operation: a second call means it vanished again, an error).
    async fn create_header(
        &self,
        lock: &LockRef,
        budget: Budget,
        inserted: &mut bool,
    ) -> Result<(), EngineError> {
        if *inserted {
            return Err(sqlx::Error::RowNotFound.into());
        }
        let mut conn = self.conn(budget).await?;
        seat::create_header(&mut conn, lock).await?;
        conn.done();
        *inserted = true;
        Ok(())
    }

    /// True when the database answers a trivial query within a second.
    pub async fn ping(&self) -> bool {
        let budget = Budget {
            deadline: Instant::now() + Duration::from_secs(1),
        };
        let Ok(mut conn) = self.conn(budget).await else {
            return false;
        };
        let ok = conn.statement("SELECT 1").await.is_ok();
        if ok {
            conn.done();
        }
        ok
    }

    /// Runs `op` until it succeeds, fails for good, or `budget` runs out:
    /// collisions with other transactions are retried after a random pause
    /// (they say nothing was done), a broken connection once at once on a
    /// fresh one, a server that cannot serve now after a short pause.
    async fn retry<T, F, Fut>(&self, budget: Budget, mut op: F) -> Result<T, EngineError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, EngineError>>,
    {
        let mut attempt = 0u32;
        let mut broken = 0u32;
        loop {
            let started = Instant::now();
            let result = op().await;
            self.metrics.observe(
                "lockbroker_db_call_duration_seconds",
                &[],
                started.elapsed().as_secs_f64(),
            );
            let err = match result {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            if let Some(kind) = err.db_failure_kind() {
                self.metrics
                    .inc("lockbroker_db_errors_total", &[("kind", kind)]);
            }
            let pause = match err.retry() {
                Some(Retry::Backoff) => {
                    let cap = 1u64 << attempt.min(6);
                    Duration::from_millis(1 + rand::random::<u64>() % cap)
                }
                Some(Retry::Later) => Duration::from_millis(50),
                Some(Retry::Now) if broken < 2 => {
                    broken += 1;
                    Duration::ZERO
                }
                _ => return Err(err),
            };
            if pause >= budget.left() {
                return Err(err);
            }
            attempt += 1;
            self.metrics.inc("lockbroker_db_retries_total", &[]);
            tracing::debug!(attempt, error = %err, "retrying");
            tokio::time::sleep(pause).await;
        }
    }

    /// Runs `pass` every `interval`, handing it the count of ticks so far,
    /// until `stop`. A failed pass is counted in the counter `errors` and
    /// logged as `failed`, at most once every 10 s (the database may be down
    /// for a while).
    async fn every<F, Fut>(
        &self,
        interval: Duration,
        mut stop: watch::Receiver<bool>,
        errors: &'static str,
        failed: &str,
        mut pass: F,
    ) where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<(), EngineError>>,
    {
        let mut tick = 0u32;
        let mut last_warning: Option<Instant> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            tick = tick.wrapping_add(1);
            if let Err(err) = pass(tick).await {
                self.metrics.inc(errors, &[]);
                if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    tracing::warn!(error = %err, "{failed}");
                    last_warning = Some(Instant::now());
                }
            }
        }
    }

    /// The `retry_after_ms` hint for a refused try, from the tenant's
    /// backoff.
    async fn retry_after(
        &self,
        lock: &LockRef,
        waiters: u32,
        remaining_ms: u64,
        budget_ms: u64,
    ) -> u64 {
        let decision = lock
            .pacing
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

    /// Microseconds within which a broker must have heartbeated to count
    /// as alive.
    fn alive_us(&self) -> u64 {
        micros(BROKER_DEAD_AFTER)
    }

    /// When a pending waiter stops counting: at its deadline, or when its
    /// broker stops heartbeating.
    fn stale(&self) -> store::waiters::Staleness {
        store::waiters::Staleness {
            alive_us: self.alive_us(),
            grace_us: 0,
        }
    }
}

/// A duration in whole microseconds, saturating.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A name unique to this process: host, pid and a random suffix (a
/// restarted process with a recycled pid must not collect its
/// predecessor's handoffs).
pub fn broker_name() -> String {
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
