//! [`Guard`]: a held lease that renews itself, one implementation for the
//! three kinds of lease (a lock, a semaphore permit, a leadership).
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

use tokio::{
    sync::{oneshot, watch},
    time::Instant,
};

use crate::{
    client::Client,
    error::{Error, LostReason, Result},
};

/// Renewals are never closer together than this, whatever the TTL.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(20);

/// A lease kind a [`Guard`] can hold: [`Lease`](lockbroker_api::Lease)
/// (locks), [`SemaphoreLease`](lockbroker_api::SemaphoreLease) (permits),
/// [`Leadership`](lockbroker_api::Leadership) (elections).
pub trait Grant: sealed::Renewable {
    /// The fencing token (an election's term).
    fn token(&self) -> u64;
    /// The lease length the broker granted.
    fn ttl(&self) -> Duration;
}

pub(crate) mod sealed {
    use std::future::Future;

    use crate::{client::Client, error::Result};

    /// How the guard's task renews and releases one kind of lease. Sealed:
    /// only this crate's lease types are guarded.
    pub trait Renewable: Clone + Send + Sync + 'static {
        fn renew(&self, client: &Client) -> impl Future<Output = Result<Self>> + Send;
        fn release(&self, client: &Client) -> impl Future<Output = Result<()>> + Send;
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
/// [`LeaderGuard`](crate::LeaderGuard).
///
/// A task owned by the guard renews the lease every third of its TTL. The
/// lease is lost ([`Guard::lost`] resolves) when the broker refuses a
/// renewal, or when no renewal succeeded before the lease would have run
/// out, counted from when the last successful request was sent (so a slow
/// answer never makes the guard believe in a longer lease than the
/// broker's). [`Guard::release`] stops the renewals and releases; dropping
/// the guard does the same in the background.
#[must_use = "dropping the guard releases the lease"]
pub struct Guard<G: Grant> {
    state: watch::Receiver<State<G>>,
    stop: Option<oneshot::Sender<Stop>>,
    token: u64,
}

impl<G: Grant> std::fmt::Debug for Guard<G>
where
    G: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("token", &self.token)
            .field("state", &*self.state.borrow())
            .finish()
    }
}

impl<G: Grant> Guard<G> {
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
        grant: G,
        sent: Instant,
        answered: Instant,
        queued: bool,
    ) -> Guard<G> {
        let ttl = grant.ttl();
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
        let token = grant.token();
        let (state_tx, state) = watch::channel(State::Held(grant.clone()));
        let (stop, stop_rx) = oneshot::channel();
        tokio::spawn(keep(
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

    /// The fencing token: pass it to whatever the lease protects, which
    /// should refuse writes carrying an older one.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The latest grant (its `expires_at` moves with each renewal); the
    /// last one held if the lease was lost.
    pub fn grant(&self) -> Option<G> {
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
        let mut state = self.state.clone();
        async move {
            let reason = match state.wait_for(|s| !matches!(s, State::Held(_))).await {
                Ok(now) => match &*now {
                    State::Lost(reason) => Some(reason.clone()),
                    _ => None,
                },
                Err(_) => None,
            };
            match reason {
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
async fn keep<G: Grant>(
    client: Client,
    mut grant: G,
    Renewal {
        mut deadline,
        mut next,
    }: Renewal,
    state: watch::Sender<State<G>>,
    mut stop: oneshot::Receiver<Stop>,
) {
    let every = (grant.ttl() / 3).max(MIN_RENEW_EVERY);
    let retry_every = (every / 4).max(MIN_RENEW_EVERY);
    let mut last_error = String::from("none");
    let lost = loop {
        tokio::select! {
            biased;
            stopped = &mut stop => return finish(&client, &grant, &state, stopped.ok()).await,
            () = tokio::time::sleep_until(next) => {}
        }
        let sent = Instant::now();
        if sent >= deadline {
            break LostReason::Expired { last_error };
        }
        let renewed = tokio::select! {
            biased;
            stopped = &mut stop => return finish(&client, &grant, &state, stopped.ok()).await,
            renewed = tokio::time::timeout_at(deadline, grant.renew(&client)) => renewed,
        };
        match renewed {
            Ok(Ok(renewed)) => {
                deadline = sent + renewed.ttl();
                next = sent + every;
                grant = renewed;
                state.send_replace(State::Held(grant.clone()));
            }
            Ok(Err(Error::Api(refusal))) if refusal.status < 500 => {
                break LostReason::Refused(refusal);
            }
            Ok(Err(err)) => {
                last_error = err.to_string();
                next = (Instant::now() + retry_every).min(deadline);
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
async fn finish<G: Grant>(
    client: &Client,
    grant: &G,
    state: &watch::Sender<State<G>>,
    stop: Option<Stop>,
) {
    let released = match grant.release(client).await {
        Err(Error::Api(refusal)) if refusal.code == lockbroker_api::ErrorCode::LeaseLost => {
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
