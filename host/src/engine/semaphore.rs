//! Semaphores: N holders at once. A header row holds the size and the
//! queue count; each permit is a slot row with its own lease and token.
//!
//! A try claims a free slot with `SELECT ... FOR UPDATE SKIP LOCKED` and
//! never touches the header lock, so tries on one semaphore do not queue
//! behind each other. Everything that touches the wait queue (enqueue,
//! handoff on release, leaving, a try that finds waiters queued) locks the
//! header first, then a slot: one lock order, no deadlocks. Release,
//! renewal, handoff and expiry are the lease's own (`lease`).

use chrono::NaiveDateTime;

use super::{
    detach::{finish, Departure},
    history,
    lease::{Attempt, Wish},
    plus_ms,
    seat::{self, Lease, LeaseRow, Seat},
    session, Ask, Budget, Engine, EngineError, LockRef, Op,
};
use crate::store::{self, pool::Conn, semaphores, Locking};

/// A permit held by an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreGrant {
    pub owner: String,
    pub slot: u32,
    /// Strictly increases with every grant of this slot.
    pub token: u64,
    pub permits: u32,
    pub ttl_ms: u64,
    pub expires_at: NaiveDateTime,
    /// A new grant, not the owner's live permit handed back renewed.
    pub fresh: bool,
}

/// A held slot, as `GET /v1/semaphores/{key}` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub slot: u32,
    pub owner: String,
    pub token: u64,
    /// Its session's expiry for a permit held in a session.
    pub expires_at: NaiveDateTime,
    /// The session the permit is held in, if it is.
    pub session: Option<String>,
}

/// What `GET /v1/semaphores/{key}` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreState {
    /// `None` for a semaphore never acquired.
    pub permits: Option<u32>,
    pub holders: Vec<SlotState>,
    pub waiters: u64,
}

impl SemaphoreGrant {
    fn new(lease: Lease, permits: u32) -> SemaphoreGrant {
        SemaphoreGrant {
            owner: lease.owner,
            slot: lease.seat.slot().unwrap_or_default(),
            token: lease.token,
            permits,
            ttl_ms: lease.ttl_ms,
            expires_at: lease.expires_at,
            fresh: lease.fresh,
        }
    }
}

fn full(retry_after_ms: u64) -> EngineError {
    EngineError::SemaphoreFull { retry_after_ms }
}

impl Engine {
    /// Takes a permit of `lock` (a semaphore of `permits` slots) as `ask`
    /// asks, waiting in the queue up to its `wait_ms`. An owner that already
    /// holds a live permit gets that one back, renewed. Runs to its end
    /// even if the caller leaves; a permit nobody receives is given back.
    ///
    /// # Errors
    /// [`EngineError::SemaphoreFull`], [`EngineError::PermitsMismatch`],
    /// [`EngineError::TooManyWaiters`], [`EngineError::ShuttingDown`],
    /// [`EngineError::Unavailable`].
    pub fn acquire_permit(&self, lock: &LockRef, ask: &Ask, permits: u32) -> Op<SemaphoreGrant> {
        let (engine, lock, ask) = (self.clone(), lock.clone(), ask.clone());
        finish(move |departure| async move {
            engine
                .acquire_permit_now(&lock, ask.wish(), permits, departure)
                .await
        })
    }

    async fn acquire_permit_now(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        permits: u32,
        mut departure: Departure,
    ) -> Result<SemaphoreGrant, EngineError> {
        let started = tokio::time::Instant::now();
        let budget = self.budget();
        self.ensure(lock, permits, budget).await?;
        // First a try that takes no header lock; only a semaphore with
        // waiters queued, or a waiting acquire that found no permit, locks
        // the header, to settle the queue or join it atomically.
        let attempt = match self.try_permit(lock, wish, budget).await? {
            Some(attempt) => attempt,
            None => self.permit_or_enqueue(lock, wish, budget).await?,
        };
        let concluded = self
            .conclude(lock, attempt, wish, &mut departure, full)
            .await;
        let lease = self.lease_answer(lock, wish.session, concluded).await?;
        self.time_grant(lock, started);
        Ok(SemaphoreGrant::new(lease, permits))
    }

    /// The header of a semaphore, created with `permits` slots if missing.
    async fn ensure(
        &self,
        lock: &LockRef,
        permits: u32,
        budget: Budget,
    ) -> Result<(), EngineError> {
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        let header = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let header = match semaphores::header(&mut conn, tenant, key, Locking::None).await?
                {
                    Some(header) => header,
                    None => {
                        // Idempotent (INSERT IGNORE): a lost answer is simply
                        // tried again.
                        semaphores::create(&mut conn, tenant, key, permits).await?;
                        semaphores::header(&mut conn, tenant, key, Locking::None)
                            .await?
                            .ok_or(sqlx::Error::RowNotFound)?
                    }
                };
                conn.done();
                Ok(header)
            })
            .await?;
        if header.permits != permits {
            return Err(EngineError::PermitsMismatch {
                permits: header.permits,
            });
        }
        Ok(())
    }

    /// The owner's own live permit, renewed, or a free slot claimed, in the
    /// caller's transaction (which holds the header if `queued` counts);
    /// not yet written. Re-entry is within the same session (or none): a
    /// permit held in a session is not the same owner's plain permit.
    async fn claim(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        wish: Wish<'_>,
        queued: u32,
    ) -> Result<Option<Lease>, EngineError> {
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        let lease = |row: LeaseRow, fresh: bool| Lease {
            seat: row.seat,
            owner: wish.owner.to_owned(),
            token: if fresh { row.token + 1 } else { row.token },
            hold_count: 1,
            ttl_ms: wish.ttl_ms,
            expires_at: plus_ms(row.now, wish.ttl_ms),
            fresh,
            session: wish.session.map(str::to_owned),
        };
        let mine = match semaphores::slot_of_owner(tx, tenant, key, wish.owner).await? {
            Some(slot) => seat::read(tx, lock, Seat::Slot(slot)).await?.filter(|row| {
                row.live_owner() == Some(wish.owner.as_bytes())
                    && row.session.as_deref() == wish.session.map(str::as_bytes)
            }),
            None => None,
        };
        Ok(match mine {
            Some(row) => Some(lease(row, false)),
            None if queued > 0 => None,
            None => seat::free_one(tx, lock).await?.map(|row| {
                // A slot whose lease ran out is taken over: record its end.
                history::note_expired(tx, lock, &row);
                lease(row, true)
            }),
        })
    }

    /// A try without the header lock. `None`: the queue is not empty, or
    /// (for a waiting acquire) no permit is free: the locked path decides.
    async fn try_permit(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        budget: Budget,
    ) -> Result<Option<Attempt>, EngineError> {
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            if !session::hold(&mut tx, &lock.tenant, wish.session).await? {
                tx.rollback().await?;
                return Err(EngineError::SessionNotFound);
            }
            let queued = seat::header(&mut tx, lock, Locking::None)
                .await?
                .unwrap_or(0);
            if let Some(lease) = self.claim(&mut tx, lock, wish, queued).await? {
                return self.commit_grant(tx, lock, lease).await.map(Some);
            }
            tx.rollback().await?;
            Ok((queued == 0 && wish.wait_ms == 0).then_some(Attempt::Busy {
                remaining_ms: 0,
                queued: 0,
            }))
        })
        .await
    }

    /// With the header locked: hands free slots to eligible waiters (and
    /// clears out stale ones), then grants, enqueues, or finds it full.
    async fn permit_or_enqueue(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        budget: Budget,
    ) -> Result<Attempt, EngineError> {
        let _turn = self.gates.turn(lock, budget).await?;
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            if !session::hold(&mut tx, &lock.tenant, wish.session).await? {
                tx.rollback().await?;
                return Err(EngineError::SessionNotFound);
            }
            let Some(mut queued) = seat::header(&mut tx, lock, Locking::Wait).await? else {
                tx.rollback().await?;
                return Err(sqlx::Error::RowNotFound.into());
            };
            let deliveries = self.fill(&mut tx, lock, &mut queued).await?;
            if let Some(lease) = self.claim(&mut tx, lock, wish, queued).await? {
                let attempt = self.commit_grant(tx, lock, lease).await?;
                self.deliver(deliveries);
                return Ok(attempt);
            }
            // The hint of a full semaphore knows nothing of its leases.
            let handed = super::settle::Expect::Unchecked;
            self.refuse_or_enqueue(tx, lock, wish, (0, 0), deliveries, handed)
                .await
        })
        .await
    }

    /// Gives back `owner`'s permit in `slot` with `token`; it goes to the
    /// next waiter, if any. Runs to its end even if the caller leaves.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that permit is not live.
    pub fn release_slot(&self, lock: &LockRef, owner: &str, slot: u32, token: u64) -> Op<()> {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move {
            engine
                .release_seat(&lock, Seat::Slot(slot), &owner, token, super::lease::mark())
                .await
                .map(|_| ())
        })
    }

    /// Extends `owner`'s permit in `slot` to `ttl_ms` from now.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once it has expired.
    pub fn renew_slot(
        &self,
        lock: &LockRef,
        owner: &str,
        slot: u32,
        token: u64,
        ttl_ms: u64,
    ) -> Op<SemaphoreGrant> {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move {
            let permits = engine.permits(&lock).await?;
            let lease = engine
                .renew_seat(&lock, Seat::Slot(slot), &owner, token, ttl_ms)
                .await?;
            Ok(SemaphoreGrant::new(lease, permits))
        })
    }

    /// The semaphore's size (0 for one never acquired), by a plain read.
    async fn permits(&self, lock: &LockRef) -> Result<u32, EngineError> {
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let header = semaphores::header(&mut conn, tenant, key, Locking::None).await?;
            conn.done();
            Ok(header.map_or(0, |h| h.permits))
        })
        .await
    }

    /// The semaphore's size, live holders and queue, without locking.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn inspect_semaphore(&self, lock: &LockRef) -> Op<SemaphoreState> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.inspect_semaphore_now(&lock).await })
    }

    async fn inspect_semaphore_now(&self, lock: &LockRef) -> Result<SemaphoreState, EngineError> {
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        let (header, slots, expiries) = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let header = semaphores::header(&mut conn, tenant, key, Locking::None).await?;
                let slots = match header {
                    Some(_) => semaphores::slots(&mut conn, tenant, key).await?,
                    None => Vec::new(),
                };
                let sessions: Vec<_> = slots.iter().filter_map(|s| s.session.clone()).collect();
                let expiries = store::sessions::expiries(&mut conn, tenant, &sessions).await?;
                conn.done();
                Ok((header, slots, expiries))
            })
            .await?;
        let Some(header) = header else {
            return Ok(SemaphoreState {
                permits: None,
                holders: Vec::new(),
                waiters: 0,
            });
        };
        let holders = slots
            .into_iter()
            .map(LeaseRow::of_slot)
            .filter_map(|row| {
                let owner = String::from_utf8_lossy(row.live_owner()?).into_owned();
                // Live by its own row; shown with its session's expiry.
                let in_session = session::expiry_of(&expiries, row.session.as_deref());
                Some(SlotState {
                    slot: row.seat.slot()?,
                    owner,
                    token: row.token,
                    expires_at: in_session.or(row.expires_at)?,
                    session: row
                        .session
                        .as_deref()
                        .map(|s| String::from_utf8_lossy(s).into_owned()),
                })
            })
            .collect();
        Ok(SemaphoreState {
            permits: Some(header.permits),
            holders,
            waiters: u64::from(header.queued),
        })
    }
}
