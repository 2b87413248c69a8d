//! [`Guard`]: a held lease that renews itself, one implementation for every
//! kind of lease (a lock, a semaphore permit, a read or write lease, a
//! leadership, a multi-lock), over [`Guarded`].
//!
//! The guard owns a background task that is the only one to touch the
//! lease after the grant: it renews every third of the TTL, publishes each
//! renewed grant, and declares the lease lost when the broker refuses a
//! renewal or when no renewal succeeded before the lease would have run out
//! (judged from when the last successful request was *sent*, so a slow
//! answer never makes us believe in a lease longer than the broker's).
//! [`Guard::release`] asks the task to stop and release; dropping the guard
//! does the same without waiting for the answer (the task is already
//! running, so `Drop` neither blocks nor needs a runtime). This is
//! Redisson's watchdog with tokio's `OwnedMutexGuard` shape, and losing the
//! lease is an event the caller can await ([`Guard::lost`]).

use std::{future::Future, time::Duration};

use lockbroker_api::{ErrorCode, Granted, LeaseTerms};
use tokio::{
    sync::{oneshot, watch},
    time::Instant,
};

use crate::{
    client::Client,
    error::{Error, LostReason, Result},
    kinds::Kind,
    session::InSession,
};

/// Renewals are never closer together than this, whatever the TTL.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(20);

/// What a [`Guard`]'s task needs of what it keeps: the lease, how to
/// extend it and how to give it back. Every [`Guarded`] kind is
/// `Renewable`; so is a session (its keepalive is its renewal, its close
/// its release), which is how a [`Session`](crate::Session) reuses the
/// guard's renewal and lost-detection instead of a second copy of them.
/// Sealed: implemented by this crate only.
pub trait Renewable: sealed::Sealed + Send + Sync + 'static {
    /// The lease as granted, and as each renewal replaces it.
    type Lease: Clone + Send + Sync + 'static;

    /// The fencing token (an election's term).
    fn token(lease: &Self::Lease) -> u64;
    /// The lease length the broker granted.
    fn ttl(lease: &Self::Lease) -> Duration;
    /// Extends `lease` by as long as it was granted.
    fn renew(
        client: &Client,
        lease: &Self::Lease,
    ) -> impl Future<Output = Result<Self::Lease>> + Send;
    /// Gives `lease` back.
    fn release(client: &Client, lease: &Self::Lease) -> impl Future<Output = Result<()>> + Send;
}

/// What a [`Guard`] can hold, and how it takes it: every
/// [`LeaseKind`](crate::LeaseKind) whose acquire the client knows how to
/// make ([`Kind`]: [`Lock`](crate::Lock), [`Semaphore`](crate::Semaphore),
/// [`RwLock`](crate::RwLock), [`Election`](crate::Election)), and
/// [`MultiLock`](crate::MultiLock). Sealed: implemented by this crate only.
pub trait Guarded: Renewable {
    /// What an acquire names: a key and what the kind asks besides the
    /// terms (a semaphore's size, an rwlock's mode); a multi-lock's keys.
    type Target: Send + Sync + 'static;
    /// The refusal that means "taken now": `try_acquire` answers `None`.
    const BUSY: ErrorCode;

    /// Asks for a lease for `owner` on `terms`.
    fn acquire(
        client: &Client,
        target: &Self::Target,
        owner: String,
        terms: LeaseTerms,
    ) -> impl Future<Output = Result<Self::Lease>> + Send;
    /// Gives back whatever `owner` holds of `target`: for an acquire that
    /// was cancelled, or whose answer never came, and that may have been
    /// granted all the same.
    fn abandon(
        client: &Client,
        target: &Self::Target,
        owner: &str,
    ) -> impl Future<Output = Result<()>> + Send;
}

pub(crate) mod sealed {
    /// Seals [`Renewable`](super::Renewable) and [`Guarded`](super::Guarded).
    pub trait Sealed {}
}

impl<K: Kind> sealed::Sealed for K {}

/// Every lease kind is kept alike: renewals and the release made from the
/// lease itself.
impl<K: Kind> Renewable for K {
    type Lease = K::Lease;

    fn token(lease: &K::Lease) -> u64 {
        lease.token()
    }

    fn ttl(lease: &K::Lease) -> Duration {
        Duration::from_millis(lease.ttl_ms())
    }

    async fn renew(client: &Client, lease: &K::Lease) -> Result<K::Lease> {
        let request = K::Renew::from(lease);
        client.leases::<K>().renew(lease.key(), &request).await
    }

    async fn release(client: &Client, lease: &K::Lease) -> Result<()> {
        let request = K::Release::from(lease);
        client
            .leases::<K>()
            .release(lease.key(), &request)
            .await
            .map(drop)
    }
}

/// Every lease kind is taken alike: `/v1/{kind}/{key}/acquire`.
impl<K: Kind> Guarded for K {
    type Target = (String, K::Extra);
    const BUSY: ErrorCode = K::BUSY;

    async fn acquire(
        client: &Client,
        (key, extra): &(String, K::Extra),
        owner: String,
        terms: LeaseTerms,
    ) -> Result<K::Lease> {
        let request = K::request(owner, terms, extra);
        client.leases::<K>().acquire(key, &request).await
    }

    async fn abandon(client: &Client, (key, _): &(String, K::Extra), owner: &str) -> Result<()> {
        let leases = client.leases::<K>();
        if let Some(release) = K::held_by(&leases.status(key).await?, owner) {
            leases.release(key, &release).await?;
        }
        Ok(())
    }
}

/// Where the lease stands, as the task publishes it.
#[derive(Debug, Clone)]
enum State<G> {
    Held(G),
    Lost(LostReason),
    Released,
}

/// Sent to the task by [`Guard::release`]; a dropped sender (the guard
/// dropped) means the same without anyone waiting for the answer.
struct Stop {
    answer: oneshot::Sender<Result<()>>,
}

/// A held lease, renewed in the background until released or dropped:
/// [`LockGuard`](crate::LockGuard), [`PermitGuard`](crate::PermitGuard),
/// [`RwLockGuard`](crate::RwLockGuard), [`LeaderGuard`](crate::LeaderGuard),
/// [`MultiLockGuard`](crate::MultiLockGuard).
///
/// A lease held in a [`Session`](crate::Session) is a guard too, but its
/// task renews nothing (the broker refuses to renew it: the session's
/// keepalive keeps it): it follows the session, lost when the session is
/// lost, ended when the session is closed.
///
/// A task owned by the guard renews the lease every third of its TTL. The
/// lease is lost ([`Guard::lost`] resolves) when the broker refuses a
/// renewal, or when no renewal succeeded before the lease would have run
/// out, counted from when the last successful request was sent (so a slow
/// answer never makes the guard believe in a longer lease than the
/// broker's). [`Guard::release`] stops the renewals and releases; dropping
/// the guard does the same in the background.
#[must_use = "dropping the guard releases the lease"]
pub struct Guard<K: Renewable> {
    state: watch::Receiver<State<K::Lease>>,
    stop: Option<oneshot::Sender<Stop>>,
    token: u64,
}

impl<K: Renewable> std::fmt::Debug for Guard<K>
where
    K::Lease: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("token", &self.token)
            .field("state", &*self.state.borrow())
            .finish()
    }
}

impl<K: Renewable> Guard<K> {
    /// Starts guarding `grant`, which was asked for at `sent` and arrived at
    /// `answered`, after waiting in the queue if `queued`. Must run inside a
    /// tokio runtime (it spawns the renewal).
    ///
    /// The lease began after `sent`, so `sent + ttl` is a safe end for a
    /// request that did not wait (NOWAIT): that is what the guard uses then.
    /// A request that may have waited in the queue was granted at some
    /// unknown time before `answered`: the guard assumes the answer took at
    /// most a tenth of the TTL to arrive, and renews at once to replace that
    /// assumption with a measured bound.
    pub(crate) fn start(
        client: Client,
        grant: K::Lease,
        sent: Instant,
        answered: Instant,
        queued: bool,
    ) -> Guard<K> {
        let ttl = K::ttl(&grant);
        let began = if queued {
            answered.checked_sub(ttl / 10).map_or(sent, |b| b.max(sent))
        } else {
            sent
        };
        let first_renewal = if began > sent {
            answered
        } else {
            began + (ttl / 3).max(MIN_RENEW_EVERY)
        };
        let token = K::token(&grant);
        let (state_tx, state) = watch::channel(State::Held(grant.clone()));
        let (stop, stop_rx) = oneshot::channel();
        tokio::spawn(keep::<K>(
            client,
            grant,
            Renewal {
                deadline: began + ttl,
                next: first_renewal,
            },
            state_tx,
            stop_rx,
        ));
        Guard {
            state,
            stop: Some(stop),
            token,
        }
    }

    /// Guards `grant`, a lease held in `session`: nothing is renewed; the
    /// lease is lost when the session's end answers a reason (the session
    /// was lost), and over when it answers `None` (the session was closed,
    /// which released every lease in it). Release and drop work as for
    /// any guard. Must run inside a tokio runtime.
    pub(crate) fn follow(client: Client, grant: K::Lease, session: InSession) -> Guard<K> {
        let token = K::token(&grant);
        let (state_tx, state) = watch::channel(State::Held(grant.clone()));
        let (stop, stop_rx) = oneshot::channel();
        tokio::spawn(follow::<K>(client, grant, session, state_tx, stop_rx));
        Guard {
            state,
            stop: Some(stop),
            token,
        }
    }

    /// Resolves when the lease is no longer held: with the reason if it
    /// was lost, `None` if it was released (or the guard's task is gone).
    /// What leases held in a session follow.
    pub(crate) fn ended(&self) -> impl Future<Output = Option<LostReason>> + Send + 'static {
        let mut state = self.state.clone();
        async move {
            match state.wait_for(|s| !matches!(s, State::Held(_))).await {
                Ok(now) => match &*now {
                    State::Lost(reason) => Some(reason.clone()),
                    _ => None,
                },
                Err(_) => None,
            }
        }
    }

    /// The fencing token: pass it to whatever the lease protects, which
    /// should refuse writes carrying an older one.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The latest grant (its `expires_at` moves with each renewal); the
    /// last one held if the lease was lost.
    pub fn grant(&self) -> Option<K::Lease> {
        match &*self.state.borrow() {
            State::Held(grant) => Some(grant.clone()),
            _ => None,
        }
    }

    /// True once the lease is known to be lost.
    pub fn is_lost(&self) -> bool {
        matches!(*self.state.borrow(), State::Lost(_))
    }

    /// Resolves when the lease is lost: the broker refused a renewal, or
    /// none succeeded before the lease would have run out. It does not
    /// resolve while the lease is held, nor after it was released. The
    /// future owns what it needs, so it can outlive a borrow of the guard
    /// (in `tokio::select!` next to the work the lease protects).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let ended = self.ended();
        async move {
            match ended.await {
                Some(reason) => reason,
                None => std::future::pending().await,
            }
        }
    }

    /// Stops renewing and releases the lease (resigns, for a leadership).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease was lost before (nothing to
    /// release); the release call's own error otherwise (the lease then
    /// runs out by itself).
    pub async fn release(mut self) -> Result<()> {
        let Some(stop) = self.stop.take() else {
            return Ok(());
        };
        let (answer, answered) = oneshot::channel();
        if stop.send(Stop { answer }).is_err() {
            return Err(Error::Connect(
                "the renewal task is gone (its runtime shut down)".into(),
            ));
        }
        answered.await.unwrap_or_else(|_| {
            Err(Error::Connect(
                "the renewal task is gone (its runtime shut down)".into(),
            ))
        })
    }
}

/// When the lease surely ends by our clock, and when to renew it next.
struct Renewal {
    deadline: Instant,
    next: Instant,
}

/// The guard's task: renew until stopped or lost, then release when told.
async fn keep<K: Renewable>(
    client: Client,
    mut grant: K::Lease,
    Renewal {
        mut deadline,
        mut next,
    }: Renewal,
    state: watch::Sender<State<K::Lease>>,
    mut stop: oneshot::Receiver<Stop>,
) {
    let every = (K::ttl(&grant) / 3).max(MIN_RENEW_EVERY);
    let retry_every = (every / 4).max(MIN_RENEW_EVERY);
    let mut last_error = String::from("none");
    let lost = loop {
        tokio::select! {
            biased;
            stopped = &mut stop => return finish::<K>(&client, &grant, &state, stopped.ok()).await,
            () = tokio::time::sleep_until(next) => {}
        }
        let sent = Instant::now();
        if sent >= deadline {
            break LostReason::Expired { last_error };
        }
        let renewed = tokio::select! {
            biased;
            stopped = &mut stop => return finish::<K>(&client, &grant, &state, stopped.ok()).await,
            renewed = tokio::time::timeout_at(deadline, K::renew(&client, &grant)) => renewed,
        };
        match renewed {
            Ok(Ok(renewed)) => {
                deadline = sent + K::ttl(&renewed);
                next = sent + every;
                grant = renewed;
                state.send_replace(State::Held(grant.clone()));
            }
            // A 429 (the tenant's rate) says nothing of the lease: tried
            // again once the broker's hint has passed, while it lasts.
            Ok(Err(Error::Api(refusal))) if refusal.status < 500 && !refusal.is_throttled() => {
                break LostReason::Refused(refusal);
            }
            Ok(Err(err)) => {
                let wait = err.retry_after().unwrap_or(retry_every).max(retry_every);
                last_error = err.to_string();
                next = (Instant::now() + wait).min(deadline);
            }
            Err(_) => break LostReason::Expired { last_error },
        }
    };
    state.send_replace(State::Lost(lost.clone()));
    if let Ok(Stop { answer }) = stop.await {
        let _ = answer.send(Err(Error::LeaseLost(lost)));
    }
}

/// Releases the lease; answers `release()` if it asked.
async fn finish<K: Renewable>(
    client: &Client,
    grant: &K::Lease,
    state: &watch::Sender<State<K::Lease>>,
    stop: Option<Stop>,
) {
    let released = match K::release(client, grant).await {
        // A session closed from outside answers its close with
        // `session_not_found`: it was lost, as a lease taken away.
        Err(Error::Api(refusal))
            if matches!(
                refusal.code,
                ErrorCode::LeaseLost | ErrorCode::SessionNotFound
            ) =>
        {
            let reason = LostReason::Refused(refusal);
            state.send_replace(State::Lost(reason.clone()));
            Err(Error::LeaseLost(reason))
        }
        other => {
            state.send_replace(State::Released);
            other
        }
    };
    if let Some(Stop { answer }) = stop {
        let _ = answer.send(released);
    }
}

/// The task of a guard whose lease is held in a session: no renewal (the
/// session's keepalive keeps the lease); release when told, unless the
/// session ended first.
async fn follow<K: Renewable>(
    client: Client,
    grant: K::Lease,
    InSession {
        id,
        end: mut session_end,
    }: InSession,
    state: watch::Sender<State<K::Lease>>,
    mut stop: oneshot::Receiver<Stop>,
) {
    // The session's end first: a release asked for once the session has
    // ended (closed or lost) is answered by that end, not sent to the
    // broker (where the lease is gone already).
    let (ended, asked) = tokio::select! {
        biased;
        ended = &mut session_end => (ended, None),
        stopped = &mut stop => {
            let refusal = match K::release(&client, &grant).await {
                Err(Error::Api(refusal)) if refusal.code == ErrorCode::LeaseLost => refusal,
                released => {
                    state.send_replace(State::Released);
                    if let Ok(Stop { answer }) = stopped {
                        let _ = answer.send(released);
                    }
                    return;
                }
            };
            // Gone already. If the session has ended meanwhile (its close,
            // or its loss, not yet known here: the close's answer may still
            // be on its way), the session's end says how the lease ended;
            // it is known within one TTL. With the session alive, the lease
            // was taken away (a force-release): lost.
            let session_ended = matches!(
                client.sessions().status(&id).await,
                Err(err) if err.code() == Some(ErrorCode::SessionNotFound)
            );
            let taken = Some(LostReason::Refused(refusal));
            let ended = if session_ended {
                tokio::time::timeout(K::ttl(&grant), &mut session_end)
                    .await
                    .unwrap_or(taken)
            } else {
                taken
            };
            (ended, Some(stopped.ok()))
        }
    };
    let answer = match ended {
        Some(lost) => {
            state.send_replace(State::Lost(lost.clone()));
            Err(Error::LeaseLost(lost))
        }
        // Closed with its session: nothing is left to release.
        None => {
            state.send_replace(State::Released);
            Ok(())
        }
    };
    let asker = match asked {
        Some(asker) => asker,
        None => stop.await.ok(),
    };
    if let Some(Stop { answer: to }) = asker {
        let _ = to.send(answer);
    }
}
