//! Waiting for a lock (`wait_ms > 0`): the seam behind which waiting is done.
//!
//! Today a waiter retries `NOWAIT` tries, paced by the tenant's backoff
//! policy, until its budget runs out; waiters are counted per key and per
//! tenant so `max_waiters` holds and `GET /v1/locks/{key}` can show them.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{lease::Attempt, Engine, EngineError, Grant, LockRef};
use crate::policy::{Contention, Decision};

/// Waiting requests of this broker, per (tenant, storage key) and per tenant.
#[derive(Default)]
pub(super) struct Waits {
    counts: Mutex<WaitCounts>,
}

#[derive(Default)]
struct WaitCounts {
    per_key: HashMap<(String, String), u64>,
    per_tenant: HashMap<String, u64>,
}

/// A registered waiter; unregisters when dropped (also on cancellation).
struct WaitGuard<'a> {
    waits: &'a Waits,
    tenant: String,
    key: String,
}

impl Waits {
    fn enter(&self, lock: &LockRef) -> Result<WaitGuard<'_>, EngineError> {
        let mut counts = self.counts.lock().expect("waits lock");
        let tenant = lock.tenant.name.clone();
        let per_tenant = counts.per_tenant.entry(tenant.clone()).or_default();
        if *per_tenant >= lock.tenant.max_waiters {
            return Err(EngineError::TooManyWaiters);
        }
        *per_tenant += 1;
        *counts
            .per_key
            .entry((tenant.clone(), lock.storage_key.clone()))
            .or_default() += 1;
        Ok(WaitGuard {
            waits: self,
            tenant,
            key: lock.storage_key.clone(),
        })
    }

    fn count(&self, lock: &LockRef) -> u64 {
        let counts = self.counts.lock().expect("waits lock");
        counts
            .per_key
            .get(&(lock.tenant.name.clone(), lock.storage_key.clone()))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let mut counts = self.waits.counts.lock().expect("waits lock");
        if let Some(n) = counts.per_tenant.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                counts.per_tenant.remove(&self.tenant);
            }
        }
        let key = (
            std::mem::take(&mut self.tenant),
            std::mem::take(&mut self.key),
        );
        if let Some(n) = counts.per_key.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                counts.per_key.remove(&key);
            }
        }
    }
}

impl Engine {
    /// Acquires `lock` for `owner`, waiting up to `wait_ms` (0: one try).
    ///
    /// # Errors
    /// [`EngineError::LockHeld`] with the backoff policy's `retry_after_ms`
    /// when the lock stayed held; [`EngineError::TooManyWaiters`];
    /// [`EngineError::ShuttingDown`]; [`EngineError::Unavailable`].
    pub async fn acquire(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Result<Grant, EngineError> {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(wait_ms);
        let mut remaining_ms = match self.try_once(lock, owner, ttl_ms).await? {
            Attempt::Granted(grant) => return Ok(grant),
            Attempt::Held { remaining_ms } => remaining_ms,
        };
        let _waiting = if wait_ms > 0 {
            Some(self.waits.enter(lock)?)
        } else {
            None
        };
        let policy = &lock.tenant.policy;
        let mut shutdown = self.shutdown.clone();
        let mut attempt = 1;
        loop {
            let waited = started.elapsed();
            let decision = policy
                .next_delay(Contention {
                    attempt,
                    waited_ms: millis(waited),
                    budget_ms: wait_ms,
                    waiters: u32::try_from(self.waits.count(lock).saturating_sub(1))
                        .unwrap_or(u32::MAX),
                    lease_remaining_ms: remaining_ms,
                    seed: rand::random(),
                })
                .await;
            let now = Instant::now();
            let delay = match decision {
                Decision::RetryAfter(ms) if now < deadline => Duration::from_millis(ms.max(1)),
                Decision::RetryAfter(ms) => {
                    return Err(EngineError::LockHeld { retry_after_ms: ms });
                }
                Decision::GiveUp => {
                    return Err(EngineError::LockHeld {
                        retry_after_ms: remaining_ms.max(1),
                    })
                }
            };
            tokio::select! {
                () = tokio::time::sleep(delay.min(deadline - now)) => {}
                () = crate::shutdown::stopped(&mut shutdown) => return Err(EngineError::ShuttingDown),
            }
            attempt += 1;
            match self.try_once(lock, owner, ttl_ms).await? {
                Attempt::Granted(grant) => return Ok(grant),
                Attempt::Held { remaining_ms: r } => remaining_ms = r,
            }
        }
    }

    /// Requests of this broker waiting for `lock`.
    pub(super) fn waiters(&self, lock: &LockRef) -> u64 {
        self.waits.count(lock)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
