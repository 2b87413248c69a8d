//! Semaphores: N holders at once. A header row holds the size and the
//! queue count; each permit is a slot row with its own lease and token.
//!
//! A try claims a free slot with `SELECT ... FOR UPDATE SKIP LOCKED` and
//! never touches the header lock, so tries on one semaphore do not queue
//! behind each other. Everything that touches the wait queue (enqueue,
//! handoff on release, leaving, a try that finds waiters queued) locks the
//! header first, then a slot: one lock order, no deadlocks.

use chrono::NaiveDateTime;

use super::{
    detach::{finish, Departure},
    plus_ms,
    queue::{Delivery, Queued},
    settle::Expect,
    Budget, DbFailure, Engine, EngineError, LockRef,
};
use crate::store::{
    self,
    locks::Locking,
    pool::Conn,
    semaphores::{self, SlotRow},
    Failure,
};

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
    pub expires_at: NaiveDateTime,
}

/// What `GET /v1/semaphores/{key}` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreState {
    /// `None` for a semaphore never acquired.
    pub permits: Option<u32>,
    pub holders: Vec<SlotState>,
    pub waiters: u64,
}

/// One try at a permit.
enum Attempt {
    Granted(SemaphoreGrant),
    /// No permit for a newcomer now.
    Full,
    /// Joined the queue.
    Queued(Queued),
}

fn owned_by(row: &SlotRow, owner: &str, token: u64) -> bool {
    row.live_owner() == Some(owner.as_bytes()) && row.token == token
}

/// What a commit of `grant` leaves in its slot.
fn leaves(grant: &SemaphoreGrant) -> Expect {
    Expect::Slot {
        slot: grant.slot,
        owner: grant.owner.clone(),
        token: grant.token,
        expires_at: grant.expires_at,
        fresh: grant.fresh,
    }
}

impl Engine {
    /// Takes a permit of `lock` (a semaphore of `permits` slots) for
    /// `owner`, waiting in the queue up to `wait_ms`. An owner that already
    /// holds a live permit gets that one back, renewed. Runs to its end
    /// even if the caller leaves; a permit nobody receives is given back.
    ///
    /// # Errors
    /// [`EngineError::SemaphoreFull`], [`EngineError::PermitsMismatch`],
    /// [`EngineError::TooManyWaiters`], [`EngineError::ShuttingDown`],
    /// [`EngineError::Unavailable`].
    pub fn acquire_permit(
        &self,
        lock: &LockRef,
        owner: &str,
        permits: u32,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    ) -> impl std::future::Future<Output = Result<SemaphoreGrant, EngineError>> + Send + 'static
    {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |departure| async move {
            let wish = Wish {
                owner: &owner,
                permits,
                ttl_ms,
                wait_ms,
                priority,
            };
            engine.acquire_permit_now(&lock, wish, departure).await
        })
    }

    async fn acquire_permit_now(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        mut departure: Departure,
    ) -> Result<SemaphoreGrant, EngineError> {
        let budget = self.budget();
        self.ensure(lock, wish.permits, budget).await?;
        // First a try that takes no header lock; only a semaphore with
        // waiters queued, or a waiting acquire that found no permit, locks
        // the header, to settle the queue or join it atomically.
        let mut attempt = self.try_permit(lock, &wish, budget).await?;
        if attempt.is_none() {
            attempt = Some(self.permit_or_enqueue(lock, &wish, budget).await?);
        }
        let grant = match attempt.expect("decided") {
            Attempt::Granted(grant) => grant,
            Attempt::Full => return Err(self.full(lock, 0).await),
            Attempt::Queued(queued) => match self
                .await_handoff(lock, queued, wish.wait_ms, &mut departure)
                .await?
            {
                Some(handoff) => SemaphoreGrant {
                    owner: wish.owner.to_owned(),
                    slot: handoff.slot.unwrap_or_default(),
                    token: handoff.token,
                    permits: wish.permits,
                    ttl_ms: wish.ttl_ms,
                    expires_at: handoff.expires_at,
                    fresh: true,
                },
                None => return Err(self.full(lock, wish.wait_ms).await),
            },
        };
        if departure.gone() {
            if grant.fresh {
                self.give_back(lock, wish.owner, grant.token, Some(grant.slot))
                    .await;
            }
            return Err(EngineError::ShuttingDown);
        }
        Ok(grant)
    }

    async fn full(&self, lock: &LockRef, waited_ms: u64) -> EngineError {
        EngineError::SemaphoreFull {
            retry_after_ms: self.retry_after(lock, 0, 0, waited_ms).await,
        }
    }

    /// The header of a semaphore, created with `permits` slots if missing.
    async fn ensure(
        &self,
        lock: &LockRef,
        permits: u32,
        budget: Budget,
    ) -> Result<(), EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
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
    /// caller's transaction (which holds the header if `queued` counts).
    async fn claim(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        wish: &Wish<'_>,
        queued: u32,
    ) -> Result<Option<SemaphoreGrant>, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let grant = |row: SlotRow, fresh: bool| SemaphoreGrant {
            owner: wish.owner.to_owned(),
            slot: row.slot,
            token: if fresh { row.token + 1 } else { row.token },
            permits: wish.permits,
            ttl_ms: wish.ttl_ms,
            expires_at: plus_ms(row.now, wish.ttl_ms),
            fresh,
        };
        let mine = match semaphores::slot_of_owner(tx, tenant, key, wish.owner).await? {
            Some(slot) => semaphores::slot_for_update(tx, tenant, key, slot)
                .await?
                .filter(|row| row.live_owner() == Some(wish.owner.as_bytes())),
            None => None,
        };
        let claimed = match mine {
            Some(row) => Some(grant(row, false)),
            None if queued > 0 => None,
            None => semaphores::claim_free_slot(tx, tenant, key)
                .await?
                .map(|row| grant(row, true)),
        };
        if let Some(g) = &claimed {
            let lease = (wish.owner, g.token, g.expires_at);
            semaphores::write_slot(tx, tenant, key, g.slot, Some(lease)).await?;
        }
        Ok(claimed)
    }

    /// A try without the header lock. `None`: the queue is not empty, or
    /// (for a waiting acquire) no permit is free: the locked path decides.
    async fn try_permit(
        &self,
        lock: &LockRef,
        wish: &Wish<'_>,
        budget: Budget,
    ) -> Result<Option<Attempt>, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let queued = semaphores::header(&mut tx, tenant, key, Locking::None)
                .await?
                .map_or(0, |h| h.queued);
            if let Some(grant) = self.claim(&mut tx, lock, wish, queued).await? {
                self.commit(tx, lock, leaves(&grant)).await?;
                return Ok(Some(Attempt::Granted(grant)));
            }
            tx.rollback().await?;
            Ok((queued == 0 && wish.wait_ms == 0).then_some(Attempt::Full))
        })
        .await
    }

    /// With the header locked: hands free slots to eligible waiters (and
    /// clears out the others), then grants, enqueues, or finds it full.
    async fn permit_or_enqueue(
        &self,
        lock: &LockRef,
        wish: &Wish<'_>,
        budget: Budget,
    ) -> Result<Attempt, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let Some(header) = semaphores::header(&mut tx, tenant, key, Locking::Wait).await?
            else {
                tx.rollback().await?;
                return Err(sqlx::Error::RowNotFound.into());
            };
            let mut queued = header.queued;
            let deliveries = self.fill_slots(&mut tx, lock, &mut queued).await?;
            if let Some(grant) = self.claim(&mut tx, lock, wish, queued).await? {
                self.commit(tx, lock, leaves(&grant)).await?;
                self.deliver(deliveries);
                return Ok(Attempt::Granted(grant));
            }
            if wish.wait_ms == 0 {
                if deliveries.is_empty() {
                    tx.rollback().await?;
                } else {
                    self.commit(tx, lock, Expect::Unchecked).await?;
                    self.deliver(deliveries);
                }
                return Ok(Attempt::Full);
            }
            let waiter = self
                .enqueue(
                    &mut tx,
                    lock,
                    wish.owner,
                    wish.priority,
                    wish.ttl_ms,
                    wish.wait_ms,
                )
                .await?;
            // If this fails, dropping `waiter` takes it out again.
            self.commit(tx, lock, Expect::Waiter { id: waiter.id() })
                .await?;
            self.deliver(deliveries);
            Ok(Attempt::Queued(waiter))
        })
        .await
    }

    /// Hands free or expired slots to eligible waiters while there are
    /// any; when none is eligible, the others are cleared out and `queued`
    /// is left at 0. The caller holds the header.
    async fn fill_slots(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        queued: &mut u32,
    ) -> Result<Vec<Delivery>, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let mut deliveries = Vec::new();
        while *queued > 0 {
            let Some(row) = semaphores::claim_free_slot(tx, tenant, key).await? else {
                break;
            };
            match self.hand_on_slot(tx, lock, &row, queued).await? {
                Some(delivery) => deliveries.push(delivery),
                None => break,
            }
        }
        Ok(deliveries)
    }

    /// Hands `slot` (held in the caller's transaction, as are the header and
    /// the slot row) to the next eligible waiter, or frees it (clearing out
    /// waiters that can no longer take it). Keeps `queued` up to date.
    async fn hand_on_slot(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        row: &SlotRow,
        queued: &mut u32,
    ) -> Result<Option<Delivery>, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let chosen = if *queued > 0 {
            self.choose(conn, lock).await?
        } else {
            None
        };
        let Some(waiter) = chosen else {
            if *queued > 0 {
                *queued = queued.saturating_sub(self.purge(conn, lock).await?);
            }
            semaphores::write_slot(conn, tenant, key, row.slot, None).await?;
            return Ok(None);
        };
        let owner = String::from_utf8_lossy(&waiter.owner).into_owned();
        let (token, expires_at) = (row.token + 1, plus_ms(row.now, waiter.ttl_ms));
        let lease = (owner.as_str(), token, expires_at);
        semaphores::write_slot(conn, tenant, key, row.slot, Some(lease)).await?;
        let delivery = self
            .record_handoff(conn, lock, waiter, token, Some(row.slot), expires_at)
            .await?;
        *queued = queued.saturating_sub(1);
        Ok(Some(delivery))
    }

    /// Gives back `owner`'s permit in `slot` with `token`; it goes to the
    /// next waiter, if any. Runs to its end even if the caller leaves.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that permit is not live.
    pub fn release_slot(
        &self,
        lock: &LockRef,
        owner: &str,
        slot: u32,
        token: u64,
    ) -> impl std::future::Future<Output = Result<(), EngineError>> + Send + 'static {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move { engine.release_slot_now(&lock, &owner, slot, token).await })
    }

    pub(super) async fn release_slot_now(
        &self,
        lock: &LockRef,
        owner: &str,
        slot: u32,
        token: u64,
    ) -> Result<(), EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        // The common case, nobody waiting, is one statement that does not
        // serialize on the header; anything else takes the full path.
        let mut conn = self.conn(budget).await?;
        let ended = Expect::SlotEnded { slot, token };
        match semaphores::free_if_nobody_waits(&mut conn, tenant, key, slot, owner, token).await {
            Ok(true) => {
                conn.done();
                return Ok(());
            }
            Ok(false) => conn.done(),
            Err(err) if store::classify(&err) == Failure::Disconnected => {
                match self.find_out(conn, err, lock, ended.clone()).await {
                    Ok(()) => return Ok(()),
                    Err(EngineError::Unavailable(DbFailure::NotCommitted)) => {}
                    Err(err) => return Err(err),
                }
            }
            Err(err) if store::classify(&err) == Failure::Other => return Err(err.into()),
            Err(_) => {}
        }
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let Some(header) = semaphores::header(&mut tx, tenant, key, Locking::Wait).await?
            else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let row = semaphores::slot_for_update(&mut tx, tenant, key, slot).await?;
            let Some(row) = row.filter(|r| owned_by(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let mut queued = header.queued;
            let delivery = self.hand_on_slot(&mut tx, lock, &row, &mut queued).await?;
            self.commit(tx, lock, ended.clone()).await?;
            self.deliver(delivery);
            Ok(())
        })
        .await
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
    ) -> impl std::future::Future<Output = Result<SemaphoreGrant, EngineError>> + Send + 'static
    {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move {
            engine
                .renew_slot_now(&lock, &owner, slot, token, ttl_ms)
                .await
        })
    }

    async fn renew_slot_now(
        &self,
        lock: &LockRef,
        owner: &str,
        slot: u32,
        token: u64,
        ttl_ms: u64,
    ) -> Result<SemaphoreGrant, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let permits = semaphores::header(&mut tx, tenant, key, Locking::None)
                .await?
                .map_or(0, |h| h.permits);
            let row = semaphores::slot_for_update(&mut tx, tenant, key, slot).await?;
            let Some(row) = row.filter(|r| owned_by(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let grant = SemaphoreGrant {
                owner: owner.to_owned(),
                slot,
                token,
                permits,
                ttl_ms,
                expires_at: plus_ms(row.now, ttl_ms),
                fresh: false,
            };
            let lease = (owner, token, grant.expires_at);
            semaphores::write_slot(&mut tx, tenant, key, slot, Some(lease)).await?;
            self.commit(tx, lock, leaves(&grant)).await?;
            Ok(grant)
        })
        .await
    }

    /// The semaphore's size, live holders and queue, without locking.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn inspect_semaphore(
        &self,
        lock: &LockRef,
    ) -> impl std::future::Future<Output = Result<SemaphoreState, EngineError>> + Send + 'static
    {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.inspect_semaphore_now(&lock).await })
    }

    async fn inspect_semaphore_now(&self, lock: &LockRef) -> Result<SemaphoreState, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        let (header, slots) = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let header = semaphores::header(&mut conn, tenant, key, Locking::None).await?;
                let slots = match header {
                    Some(_) => semaphores::slots(&mut conn, tenant, key).await?,
                    None => Vec::new(),
                };
                conn.done();
                Ok((header, slots))
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
            .filter_map(|row| {
                let owner = String::from_utf8_lossy(row.live_owner()?).into_owned();
                Some(SlotState {
                    slot: row.slot,
                    owner,
                    token: row.token,
                    expires_at: row.expires_at?,
                })
            })
            .collect();
        Ok(SemaphoreState {
            permits: Some(header.permits),
            holders,
            waiters: u64::from(header.queued),
        })
    }

    /// The reaper's work on one semaphore: take back grants dead brokers
    /// never delivered, clear out waiters that can no longer take a permit,
    /// hand free or expired slots to the others. Skips a semaphore whose
    /// header another transaction holds.
    pub(super) async fn reap_semaphore(&self, lock: &LockRef) -> Result<(), EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        let mut tx = self.begin(budget).await?;
        let Some(header) = semaphores::header(&mut tx, tenant, key, Locking::SkipLocked).await?
        else {
            tx.rollback().await?;
            return Ok(());
        };
        for grant in self.take_back(&mut tx, lock).await? {
            let Some(slot) = grant.granted_slot else {
                continue;
            };
            // The slot still holds that undelivered grant: free it, so the
            // loop below hands it on.
            if let Some(row) = semaphores::slot_for_update(&mut tx, tenant, key, slot).await? {
                if row.token == grant.granted_token
                    && row.owner.as_deref() == Some(&grant.owner[..])
                {
                    semaphores::write_slot(&mut tx, tenant, key, slot, None).await?;
                }
            }
        }
        let mut queued = header.queued;
        let deliveries = self.fill_slots(&mut tx, lock, &mut queued).await?;
        if queued > 0 {
            // Every slot is held: still clear out waiters that cannot take one.
            self.purge(&mut tx, lock).await?;
        }
        self.commit(tx, lock, Expect::Unchecked).await?;
        if !deliveries.is_empty() {
            self.metrics.inc("lockbroker_expiry_handoffs_total", &[]);
        }
        self.deliver(deliveries);
        Ok(())
    }
}

/// What an acquire asks for.
struct Wish<'a> {
    owner: &'a str,
    permits: u32,
    ttl_ms: u64,
    wait_ms: u64,
    priority: i32,
}
