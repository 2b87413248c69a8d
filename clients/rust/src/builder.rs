//! [`LeaseBuilder`]: what a guard is asked for (who holds, for how long,
//! how long to wait), one builder for every kind, and the [`Client`]
//! methods that start one: [`Client::lock`], [`Client::semaphore`],
//! [`Client::read_lock`], [`Client::write_lock`], [`Client::rwlock`],
//! [`Client::election`] (and [`Client::multilock`], in `multilock.rs`).

use std::time::Duration;

use lockbroker_api::{Election, LeaseTerms, Lock, RwLock, RwMode, Semaphore};
use tokio::time::Instant;

use crate::{
    client::Client,
    error::Result,
    guard::{Guard, Guarded},
    pending::Pending,
    session::InSession,
};

/// How long `acquire()`/`campaign()` wait for the lease unless told.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Builds a [`Guard`] of the kind `K`: `client.lock("job").ttl(..).acquire()`.
#[must_use]
pub struct LeaseBuilder<K: Guarded> {
    client: Client,
    target: K::Target,
    owner: Option<String>,
    ttl: Option<Duration>,
    wait: Duration,
    priority: Option<i32>,
    /// The session to hold the lease in, instead of a TTL of its own.
    session: Option<InSession>,
}

/// Builds a [`LockGuard`](crate::LockGuard); from [`Client::lock`].
pub type LockBuilder = LeaseBuilder<Lock>;
/// Builds a [`PermitGuard`](crate::PermitGuard); from [`Client::semaphore`].
pub type SemaphoreBuilder = LeaseBuilder<Semaphore>;
/// Builds a [`RwLockGuard`](crate::RwLockGuard); from [`Client::read_lock`],
/// [`Client::write_lock`] or [`Client::rwlock`].
pub type RwLockBuilder = LeaseBuilder<RwLock>;
/// Builds a [`LeaderGuard`](crate::LeaderGuard); from [`Client::election`].
pub type ElectionBuilder = LeaseBuilder<Election>;

impl Client {
    /// A guard builder for the lock `key`:
    /// `client.lock("job").ttl(..).acquire().await?`.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LeaseBuilder::new(self, (key.into(), ()))
    }

    /// A guard builder for one permit of the semaphore `key` of `permits`
    /// slots: `client.semaphore("pool", 5).acquire().await?`.
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> SemaphoreBuilder {
        LeaseBuilder::new(self, (key.into(), permits))
    }

    /// A guard builder for a read (shared) lease of the rwlock `key`:
    /// `client.read_lock("config").acquire().await?`.
    pub fn read_lock(&self, key: impl Into<String>) -> RwLockBuilder {
        self.rwlock(key, RwMode::Read)
    }

    /// A guard builder for a write (exclusive) lease of the rwlock `key`.
    pub fn write_lock(&self, key: impl Into<String>) -> RwLockBuilder {
        self.rwlock(key, RwMode::Write)
    }

    /// A guard builder for a lease of the rwlock `key` in `mode`.
    pub fn rwlock(&self, key: impl Into<String>, mode: RwMode) -> RwLockBuilder {
        LeaseBuilder::new(self, (key.into(), mode))
    }

    /// A guard builder for leading the election `name`:
    /// `client.election("scheduler").campaign().await?`.
    pub fn election(&self, name: impl Into<String>) -> ElectionBuilder {
        LeaseBuilder::new(self, (name.into(), ()))
    }
}

impl<K: Guarded> LeaseBuilder<K> {
    pub(crate) fn new(client: &Client, target: K::Target) -> LeaseBuilder<K> {
        LeaseBuilder {
            client: client.clone(),
            target,
            owner: None,
            ttl: None,
            wait: DEFAULT_WAIT,
            priority: None,
            session: None,
        }
    }

    /// Holds the lease in a session: no TTL of its own, no renewals; it
    /// lives and ends with the session (`session.rs`).
    pub(crate) fn in_session(mut self, session: InSession) -> Self {
        self.session = Some(session);
        self
    }

    /// Who holds it (an election's candidate; default: a name unique to
    /// this guard, `host:pid:n`). The same owner acquiring again re-enters
    /// rather than waits. With an owner of your own, a cancelled acquire
    /// cannot tell a grant it got from a lease that owner held already: a
    /// grant whose answer was on its way when the acquire was cancelled
    /// then runs out by its TTL instead of being given back.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Lease length (default: the broker's, 30 s); the guard renews every
    /// third of it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to wait in the queue (default [`DEFAULT_WAIT`]; at most
    /// 300 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Handed to the tenant's fairness policy (higher is more urgent for
    /// policies that use it).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Waits up to [`wait`](Self::wait) for the lease and guards it.
    ///
    /// Cancelling it (dropping the future) leaves no lease behind: if the
    /// broker granted it meanwhile, the grant is given back in the
    /// background (with an owner of the client's making; see
    /// [`owner`](Self::owner)). So is one whose outcome is unknown
    /// ([`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown),
    /// [`Error::Timeout`](crate::Error::Timeout)): the acquire is never
    /// sent twice.
    ///
    /// # Errors
    /// `lock_held` (semaphores: `semaphore_full`) as
    /// [`Error::Api`](crate::Error::Api) when the wait ran out, and every
    /// other error of [`Error`](crate::Error).
    pub async fn acquire(self) -> Result<Guard<K>> {
        let wait = self.wait;
        self.request(wait).await
    }

    /// Tries once, without waiting: `None` when the lease is taken.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error) but `lock_held`
    /// (`semaphore_full`).
    pub async fn try_acquire(self) -> Result<Option<Guard<K>>> {
        match self.request(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.code() == Some(K::BUSY) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Asks for the lease, waiting up to `wait`. Cancelled (dropped) or
    /// ending with an unknown outcome, the acquire gives back in the
    /// background what it may have been granted (`pending.rs`), unless the
    /// caller named the owner.
    async fn request(self, wait: Duration) -> Result<Guard<K>> {
        let made_up = self.owner.is_none();
        let owner = self.owner.unwrap_or_else(|| self.client.unique_owner());
        let terms = LeaseTerms {
            // The broker refuses a TTL beside a session: the session's is
            // the lease's.
            ttl_ms: if self.session.is_some() {
                None
            } else {
                self.ttl.map(millis)
            },
            wait_ms: Some(millis(wait)),
            priority: self.priority,
            session: self.session.as_ref().map(|s| s.id.clone()),
        };
        let pending = Pending::<K>::new(self.client, self.target, owner, made_up);
        let sent = Instant::now();
        let acquired = K::acquire(
            pending.client(),
            pending.target(),
            pending.owner().to_owned(),
            terms,
        )
        .await;
        let client = pending.client().clone();
        pending.settle(&acquired);
        let grant = acquired?;
        Ok(match self.session {
            Some(session) => Guard::follow(client, grant, session),
            None => Guard::start(client, grant, sent, Instant::now(), !wait.is_zero()),
        })
    }
}

impl ElectionBuilder {
    /// The candidate's name: the same as [`owner`](Self::owner).
    pub fn candidate(self, candidate: impl Into<String>) -> ElectionBuilder {
        self.owner(candidate)
    }

    /// [`acquire`](Self::acquire): waits to lead, and guards the
    /// leadership (renewing the term; releasing it resigns).
    ///
    /// # Errors
    /// `lock_held` when another candidate still leads after the wait.
    pub async fn campaign(self) -> Result<Guard<Election>> {
        self.acquire().await
    }

    /// [`try_acquire`](Self::try_acquire): `None` when another candidate
    /// leads.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error) but `lock_held`.
    pub async fn try_campaign(self) -> Result<Option<Guard<Election>>> {
        self.try_acquire().await
    }
}

/// Milliseconds for the wire, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
