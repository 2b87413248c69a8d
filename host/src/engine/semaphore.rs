//! Semaphores: N holders at once. A header row holds the size and the
//! queue count; each permit is a slot row with its own lease and token.
//!
//! A try claims a free slot with `SELECT ... FOR UPDATE SKIP LOCKED` and
//! never touches the header lock, so tries on one semaphore do not queue
//! behind each other. Everything that touches the wait queue (enqueue,
//! handoff on release, leaving) locks the header first, then a slot: one
//! lock order, no deadlocks.

use chrono::NaiveDateTime;

use super::{plus_ms, queue::Delivery, retry_deadlocks, Engine, EngineError, LockRef};
use crate::store::{
    self,
    semaphores::{self, SlotRow},
    waiters, Failure,
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

/// The header of a semaphore, created with `permits` slots if missing.
async fn ensure(engine: &Engine, lock: &LockRef, permits: u32) -> Result<(), EngineError> {
    let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
    let header = match semaphores::header(&engine.pool, tenant, key).await? {
        Some(header) => header,
        None => {
            semaphores::create(&engine.pool, tenant, key, permits).await?;
            semaphores::header(&engine.pool, tenant, key)
                .await?
                .ok_or(sqlx::Error::RowNotFound)?
        }
    };
    if header.permits != permits {
        return Err(EngineError::PermitsMismatch {
            permits: header.permits,
        });
    }
    Ok(())
}

fn owned_by(row: &SlotRow, owner: &str, token: u64) -> bool {
    row.live_owner() == Some(owner.as_bytes()) && row.token == token
}

impl Engine {
    /// Takes a permit of `lock` (a semaphore of `permits` slots) for
    /// `owner`, waiting in the queue up to `wait_ms`. An owner that already
    /// holds a live permit gets that one back, renewed.
    ///
    /// # Errors
    /// [`EngineError::SemaphoreFull`], [`EngineError::PermitsMismatch`],
    /// [`EngineError::TooManyWaiters`], [`EngineError::ShuttingDown`],
    /// [`EngineError::Unavailable`].
    pub async fn acquire_permit(
        &self,
        lock: &LockRef,
        owner: &str,
        permits: u32,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    ) -> Result<SemaphoreGrant, EngineError> {
        ensure(self, lock, permits).await?;
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let grant_slot = |row: SlotRow, renew: bool| SemaphoreGrant {
            owner: owner.to_owned(),
            slot: row.slot,
            token: if renew { row.token } else { row.token + 1 },
            permits,
            ttl_ms,
            expires_at: plus_ms(row.now, ttl_ms),
        };
        // First a try that takes no header lock (queued waiters still go
        // first); only a waiting acquire that found no permit locks the
        // header, to look again and join the queue atomically.
        let mut outcome = Err(None);
        for locked in [false, true] {
            if locked && wait_ms == 0 {
                break;
            }
            outcome = retry_deadlocks(|| async {
                let mut tx = self.pool.begin().await?;
                let header = if locked {
                    semaphores::header_for_update(&mut *tx, tenant, key).await?
                } else {
                    semaphores::header(&mut *tx, tenant, key).await?
                };
                let queued = header.map_or(0, |h| h.queued);
                // An owner asking again gets its own live permit back, renewed.
                let mine = match semaphores::slot_of_owner(&mut *tx, tenant, key, owner).await? {
                    Some(slot) => semaphores::slot_for_update(&mut *tx, tenant, key, slot)
                        .await?
                        .filter(|row| row.live_owner() == Some(owner.as_bytes())),
                    None => None,
                };
                let claimed = match mine {
                    Some(row) => Some(grant_slot(row, true)),
                    None if queued > 0 => None,
                    None => semaphores::claim_free_slot(&mut *tx, tenant, key)
                        .await?
                        .map(|row| grant_slot(row, false)),
                };
                if let Some(grant) = claimed {
                    let lease = (owner, grant.token, grant.expires_at);
                    semaphores::write_slot(&mut *tx, tenant, key, grant.slot, Some(lease)).await?;
                    tx.commit().await?;
                    return Ok(Ok(grant));
                }
                if !locked {
                    tx.rollback().await?;
                    return Ok(Err(None));
                }
                let queued = self
                    .enqueue(&mut tx, lock, owner, priority, ttl_ms, wait_ms)
                    .await?;
                // If this fails, dropping `queued` takes the waiter out again.
                tx.commit().await?;
                Ok(Err(Some(queued)))
            })
            .await?;
            if !matches!(outcome, Err(None)) {
                break;
            }
        }
        let queued = match outcome {
            Ok(grant) => return Ok(grant),
            Err(None) => None,
            Err(Some(queued)) => Some(queued),
        };
        if let Some(queued) = queued {
            if let Some(handoff) = self.await_handoff(lock, queued, wait_ms).await? {
                return Ok(SemaphoreGrant {
                    owner: owner.to_owned(),
                    slot: handoff.slot.unwrap_or_default(),
                    token: handoff.token,
                    permits,
                    ttl_ms,
                    expires_at: handoff.expires_at,
                });
            }
        }
        let hint = self.retry_after(lock, 0, 0, wait_ms).await;
        Err(EngineError::SemaphoreFull {
            retry_after_ms: hint,
        })
    }

    /// Hands `slot` (held in the caller's transaction, as are the header and
    /// the slot row) to the next waiter, or frees it.
    async fn hand_on_slot(
        &self,
        conn: &mut sqlx::MySqlConnection,
        lock: &LockRef,
        row: &SlotRow,
        queued: u32,
    ) -> Result<Option<Delivery>, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let chosen = if queued > 0 {
            self.choose(conn, lock).await?
        } else {
            None
        };
        let Some(waiter) = chosen else {
            semaphores::write_slot(&mut *conn, tenant, key, row.slot, None).await?;
            return Ok(None);
        };
        let owner = String::from_utf8_lossy(&waiter.owner).into_owned();
        let (token, expires_at) = (row.token + 1, plus_ms(row.now, waiter.ttl_ms));
        let lease = (owner.as_str(), token, expires_at);
        semaphores::write_slot(&mut *conn, tenant, key, row.slot, Some(lease)).await?;
        let delivery = self
            .record_handoff(conn, lock, waiter, token, Some(row.slot), expires_at)
            .await?;
        Ok(Some(delivery))
    }

    /// Gives back `owner`'s permit in `slot` with `token`; it goes to the
    /// next waiter, if any.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that permit is not live.
    pub async fn release_slot(
        &self,
        lock: &LockRef,
        owner: &str,
        slot: u32,
        token: u64,
    ) -> Result<(), EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        // The common case, nobody waiting, is one statement that does not
        // serialize on the header; anything else takes the full path.
        match semaphores::free_if_nobody_waits(&self.pool, tenant, key, slot, owner, token).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(err) if store::classify(&err) != Failure::Unavailable => {}
            Err(err) => return Err(err.into()),
        }
        let delivery = retry_deadlocks(|| async {
            let mut tx = self.pool.begin().await?;
            let Some(header) = semaphores::header_for_update(&mut *tx, tenant, key).await? else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let row = semaphores::slot_for_update(&mut *tx, tenant, key, slot).await?;
            let Some(row) = row.filter(|r| owned_by(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let delivery = self
                .hand_on_slot(&mut tx, lock, &row, header.queued)
                .await?;
            tx.commit().await?;
            Ok(delivery)
        })
        .await?;
        self.deliver(delivery.into_iter().collect());
        Ok(())
    }

    /// Extends `owner`'s permit in `slot` to `ttl_ms` from now.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once it has expired.
    pub async fn renew_slot(
        &self,
        lock: &LockRef,
        owner: &str,
        slot: u32,
        token: u64,
        ttl_ms: u64,
    ) -> Result<SemaphoreGrant, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        retry_deadlocks(|| async {
            let mut tx = self.pool.begin().await?;
            let permits = semaphores::header(&mut *tx, tenant, key)
                .await?
                .map_or(0, |h| h.permits);
            let row = semaphores::slot_for_update(&mut *tx, tenant, key, slot).await?;
            let Some(row) = row.filter(|r| owned_by(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let expires_at = plus_ms(row.now, ttl_ms);
            semaphores::write_slot(
                &mut *tx,
                tenant,
                key,
                slot,
                Some((owner, token, expires_at)),
            )
            .await?;
            tx.commit().await?;
            Ok(SemaphoreGrant {
                owner: owner.to_owned(),
                slot,
                token,
                permits,
                ttl_ms,
                expires_at,
            })
        })
        .await
    }

    /// The semaphore's size, live holders and queue, without locking.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub async fn inspect_semaphore(&self, lock: &LockRef) -> Result<SemaphoreState, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let Some(header) = semaphores::header(&self.pool, tenant, key).await? else {
            return Ok(SemaphoreState {
                permits: None,
                holders: Vec::new(),
                waiters: 0,
            });
        };
        let holders = semaphores::slots(&self.pool, tenant, key)
            .await?
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

    /// The reaper's work on one semaphore: drop abandoned waiters, hand
    /// free or expired slots to waiters. Skips a semaphore whose header
    /// another transaction holds.
    pub(super) async fn reap_semaphore(&self, lock: &LockRef) -> Result<(), EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        let mut tx = self.pool.begin().await?;
        let Some(header) = semaphores::header_skip_locked(&mut *tx, tenant, key).await? else {
            tx.rollback().await?;
            return Ok(());
        };
        let stale = waiters::delete_stale(&mut *tx, lock.row()).await?;
        if stale > 0 {
            self.add_queued(&mut tx, lock, -i64::try_from(stale).unwrap_or(0))
                .await?;
        }
        let mut queued = header
            .queued
            .saturating_sub(u32::try_from(stale).unwrap_or(0));
        let mut deliveries = Vec::new();
        while queued > 0 {
            let Some(row) = semaphores::claim_free_slot(&mut *tx, tenant, key).await? else {
                break;
            };
            match self.hand_on_slot(&mut tx, lock, &row, queued).await? {
                Some(delivery) => {
                    deliveries.push(delivery);
                    queued -= 1;
                }
                None => break,
            }
        }
        tx.commit().await?;
        if !deliveries.is_empty() {
            self.metrics.inc("lockbroker_expiry_handoffs_total", &[]);
        }
        self.deliver(deliveries);
        Ok(())
    }
}
