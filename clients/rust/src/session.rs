//! [`Session`]: a broker session that keeps itself alive, and the leases
//! of every kind held in it ([`Session::lock`], [`Session::semaphore`],
//! [`Session::read_lock`] / [`Session::write_lock`],
//! [`Session::multilock`], [`Session::election`]), with one lost signal
//! for all of them.
//!
//! A session is kept exactly as a lease is: its keepalive is a renewal and
//! its close a release, so it *is* a [`Guard`] (over [`SessionLife`]), and
//! the guard's task does what it does for every lease: a keepalive every
//! third of the TTL, lost when the broker refuses one (`session_not_found`:
//! at once) or when none was confirmed before the TTL ran out since the
//! last confirmed one was sent, closed on [`Session::close`] or, in the
//! background, on drop.
//!
//! A lease taken in the session is a plain [`Guard`] of its kind
//! ([`LockGuard`](crate::LockGuard), [`PermitGuard`](crate::PermitGuard),
//! [`RwLockGuard`](crate::RwLockGuard),
//! [`MultiLockGuard`](crate::MultiLockGuard),
//! [`LeaderGuard`](crate::LeaderGuard)) whose task renews nothing (the
//! broker refuses to renew a session's lease) and follows the session
//! instead: lost when it is lost, over when it is closed. Each kind is one
//! method here, which takes the [`Client`]'s own builder of that kind
//! ([`Client::semaphore`], [`Client::multilock`], ...) and holds it in the
//! session ([`LeaseBuilder::in_session`] does the rest).

use std::{
    future::{Future, IntoFuture},
    pin::Pin,
    time::Duration,
};

use lockbroker_api::{
    CreateSessionRequest, Election, Lock, RwLock, RwMode, Semaphore, Session as SessionInfo,
    SessionStatus, SESSION_DEFAULT_TTL_MS,
};
use tokio::time::Instant;

use crate::{
    builder::LeaseBuilder,
    client::Client,
    error::{LostReason, Result},
    guard::{sealed::Sealed, Guard, Guarded, Renewable},
    multilock::MultiLock,
};

/// The TTL of [`Client::session`] when a caller has no better idea: the
/// broker's default.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_millis(SESSION_DEFAULT_TTL_MS);

/// A session's end, as a lease held in it follows it: `Some(reason)` when
/// the session was lost, `None` when it was closed.
type SessionEnd = Pin<Box<dyn Future<Output = Option<LostReason>> + Send>>;

/// What a lease builder needs to hold its lease in a session: the id to
/// name in the acquire, and the session's end to follow.
pub(crate) struct InSession {
    pub(crate) id: String,
    pub(crate) end: SessionEnd,
}

/// A session as a [`Guard`] keeps it: renewed by keepalives, released by
/// a close. Private: callers hold a [`Session`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLife;

impl Sealed for SessionLife {}

impl Renewable for SessionLife {
    type Lease = SessionInfo;

    /// Sessions have no token; their leases do.
    fn token(_: &SessionInfo) -> u64 {
        0
    }

    fn ttl(session: &SessionInfo) -> Duration {
        Duration::from_millis(session.ttl_ms)
    }

    async fn renew(client: &Client, session: &SessionInfo) -> Result<SessionInfo> {
        let kept = client.sessions().keepalive(&session.id).await?;
        Ok(SessionInfo {
            expires_at: kept.expires_at,
            ..session.clone()
        })
    }

    async fn release(client: &Client, session: &SessionInfo) -> Result<()> {
        client.sessions().close(&session.id).await.map(drop)
    }
}

/// Opens a [`Session`]; from [`Client::session`]. Await it (or
/// [`open`](Self::open) it) to open the session.
#[must_use]
pub struct SessionBuilder {
    client: Client,
    request: CreateSessionRequest,
}

impl Client {
    /// A session of `ttl` (1 s to 1 h) that keeps itself alive:
    /// `let session = client.session(Duration::from_secs(15)).await?;`,
    /// then `session.lock("a").acquire().await?` for each lease to hold in
    /// it.
    pub fn session(&self, ttl: Duration) -> SessionBuilder {
        SessionBuilder {
            client: self.clone(),
            request: CreateSessionRequest {
                ttl_ms: Some(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
                name: None,
                lock_delay_ms: None,
            },
        }
    }
}

impl SessionBuilder {
    /// A name for people and listings (`client.sessions().list(prefix)`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.request.name = Some(name.into());
        self
    }

    /// After the session *expires* (not when it is closed), its keys are
    /// not granted again for this long (at most 60 s): time for a holder
    /// that lost its session to notice before the next one starts.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.request.lock_delay_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Opens the session and starts keeping it alive. Must run inside a
    /// tokio runtime.
    ///
    /// # Errors
    /// `bad_request` for a TTL out of range, `quota_exceeded` when the
    /// tenant has its `max_sessions`, and every error of
    /// [`Error`](crate::Error).
    pub async fn open(self) -> Result<Session> {
        let sent = Instant::now();
        let info = self.client.sessions().open(&self.request).await?;
        let id = info.id.clone();
        // The session began after `sent`: its safe end is `sent + ttl`,
        // exactly as for a lease granted without waiting.
        let guard = Guard::start(self.client.clone(), info, sent, Instant::now(), false);
        Ok(Session {
            client: self.client,
            guard,
            id,
        })
    }
}

impl IntoFuture for SessionBuilder {
    type Output = Result<Session>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Session>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

/// An open session, kept alive in the background (a keepalive every third
/// of its TTL), holding the leases taken with [`Session::lock`],
/// [`Session::semaphore`], [`Session::read_lock`], [`Session::write_lock`],
/// [`Session::rwlock`], [`Session::multilock`] and [`Session::election`]
/// (the same calls, with the same guards, as the [`Client`]'s); closed by
/// [`Session::close`] or, in the background, when dropped, which releases
/// every lease in it at once.
///
/// [`Session::lost`] is the one signal for the session and all its leases:
/// it fires when a keepalive is refused (the session was closed from
/// outside or expired: `session_not_found`) or when none was confirmed
/// before the TTL ran out since the last confirmed one was sent, so
/// before the broker can have ended it. Each lease's own
/// [`Guard::lost`] fires then too.
#[must_use = "dropping the session closes it, releasing its leases"]
pub struct Session {
    client: Client,
    guard: Guard<SessionLife>,
    id: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("guard", &self.guard)
            .finish()
    }
}

impl Session {
    /// The session's id (what an acquire names as `session`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session as last confirmed (its `expires_at` moves with each
    /// keepalive); `None` once it is lost or closed.
    pub fn info(&self) -> Option<SessionInfo> {
        self.guard.grant()
    }

    /// True once the session is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the session is lost (and with it every lease in it);
    /// never after it was closed. Owns what it needs, for `tokio::select!`
    /// beside the work the leases protect.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// A builder for the lock `key` held in this session:
    /// `session.lock("a").acquire().await?` waits for it,
    /// `try_acquire()` tries once. The guard renews nothing (the session
    /// keeps it) and is lost with the session.
    pub fn lock(&self, key: impl Into<String>) -> SessionLeaseBuilder<Lock> {
        self.hold(self.client.lock(key))
    }

    /// A builder for one permit of the semaphore `key` of `permits` slots,
    /// held in this session: `session.semaphore("pool", 5).acquire().await?`
    /// (as [`Client::semaphore`]).
    pub fn semaphore(
        &self,
        key: impl Into<String>,
        permits: u32,
    ) -> SessionLeaseBuilder<Semaphore> {
        self.hold(self.client.semaphore(key, permits))
    }

    /// A builder for a read (shared) lease of the rwlock `key`, held in
    /// this session (as [`Client::read_lock`]).
    pub fn read_lock(&self, key: impl Into<String>) -> SessionLeaseBuilder<RwLock> {
        self.hold(self.client.read_lock(key))
    }

    /// A builder for a write (exclusive) lease of the rwlock `key`, held in
    /// this session (as [`Client::write_lock`]).
    pub fn write_lock(&self, key: impl Into<String>) -> SessionLeaseBuilder<RwLock> {
        self.hold(self.client.write_lock(key))
    }

    /// A builder for a lease of the rwlock `key` in `mode`, held in this
    /// session (as [`Client::rwlock`]).
    pub fn rwlock(&self, key: impl Into<String>, mode: RwMode) -> SessionLeaseBuilder<RwLock> {
        self.hold(self.client.rwlock(key, mode))
    }

    /// A builder for the locks `keys`, taken all or none and held in this
    /// session as one lease: `session.multilock(["a", "b"]).acquire().await?`
    /// (as [`Client::multilock`]; the guard is a
    /// [`MultiLockGuard`](crate::MultiLockGuard)).
    pub fn multilock<I, K>(&self, keys: I) -> SessionLeaseBuilder<MultiLock>
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.hold(self.client.multilock(keys))
    }

    /// A builder for leading the election `name` from this session:
    /// `session.election("scheduler").candidate("node-2").campaign().await?`
    /// (as [`Client::election`]). The leadership lasts as long as the
    /// session; releasing the guard resigns.
    pub fn election(&self, name: impl Into<String>) -> SessionLeaseBuilder<Election> {
        self.hold(self.client.election(name))
    }

    /// Holds what `builder` asks for in this session: no TTL of its own,
    /// no renewals; its guard follows the session's end.
    fn hold<K: Guarded>(&self, builder: LeaseBuilder<K>) -> SessionLeaseBuilder<K> {
        let end: SessionEnd = Box::pin(self.guard.ended());
        SessionLeaseBuilder {
            inner: builder.in_session(InSession {
                id: self.id.clone(),
                end,
            }),
        }
    }

    /// `GET /v1/sessions/{id}`: the session and every lease in it, as the
    /// broker sees them now.
    ///
    /// # Errors
    /// `session_not_found` once it has ended.
    pub async fn status(&self) -> Result<SessionStatus> {
        self.client.sessions().status(&self.id).await
    }

    /// Stops the keepalives and closes the session, releasing every lease
    /// in it (each key goes to its next waiter).
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the session was
    /// lost before (nothing to close); the close call's own error
    /// otherwise (the session then runs out by itself).
    pub async fn close(self) -> Result<()> {
        self.guard.release().await
    }
}

/// Builds a lease held in a [`Session`]; from [`Session::lock`],
/// [`Session::semaphore`], [`Session::read_lock`], [`Session::write_lock`],
/// [`Session::rwlock`], [`Session::multilock`] or [`Session::election`].
/// The same options as the [`Client`]'s builder of the kind
/// ([`LeaseBuilder`]) but the TTL: the lease lives as long as the session.
#[must_use]
pub struct SessionLeaseBuilder<K: Guarded> {
    inner: LeaseBuilder<K>,
}

impl<K: Guarded> SessionLeaseBuilder<K> {
    /// Who holds it (an election's candidate; default: a name unique to
    /// this lease, `host:pid:n`; see [`LeaseBuilder::owner`]).
    pub fn owner(self, owner: impl Into<String>) -> Self {
        SessionLeaseBuilder {
            inner: self.inner.owner(owner),
        }
    }

    /// How long to wait in the queue (default
    /// [`DEFAULT_WAIT`](crate::DEFAULT_WAIT); at most 300 s).
    pub fn wait(self, wait: Duration) -> Self {
        SessionLeaseBuilder {
            inner: self.inner.wait(wait),
        }
    }

    /// Handed to the tenant's fairness policy.
    pub fn priority(self, priority: i32) -> Self {
        SessionLeaseBuilder {
            inner: self.inner.priority(priority),
        }
    }

    /// Waits up to [`wait`](Self::wait) for the lease and guards it in the
    /// session. Cancelled, it leaves no lease behind (as
    /// [`LeaseBuilder::acquire`]).
    ///
    /// # Errors
    /// `lock_held` (semaphores: `semaphore_full`) when the wait ran out;
    /// `session_not_found` when the session has ended; every other error
    /// of [`Error`](crate::Error).
    pub async fn acquire(self) -> Result<Guard<K>> {
        self.inner.acquire().await
    }

    /// Tries once, without waiting: `None` when the lease is taken.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), but `lock_held` (`semaphore_full`).
    pub async fn try_acquire(self) -> Result<Option<Guard<K>>> {
        self.inner.try_acquire().await
    }
}

impl SessionLeaseBuilder<Election> {
    /// The candidate's name: the same as [`owner`](Self::owner).
    pub fn candidate(self, candidate: impl Into<String>) -> Self {
        SessionLeaseBuilder {
            inner: self.inner.candidate(candidate),
        }
    }

    /// [`acquire`](Self::acquire): waits to lead, and guards the
    /// leadership in the session (releasing it resigns).
    ///
    /// # Errors
    /// `lock_held` when another candidate still leads after the wait;
    /// `session_not_found` when the session has ended.
    pub async fn campaign(self) -> Result<Guard<Election>> {
        self.inner.campaign().await
    }

    /// [`try_acquire`](Self::try_acquire): `None` when another candidate
    /// leads.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign), but `lock_held`.
    pub async fn try_campaign(self) -> Result<Option<Guard<Election>>> {
        self.inner.try_campaign().await
    }
}
