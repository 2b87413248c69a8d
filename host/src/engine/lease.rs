//! Lock leases: each operation is one short transaction on the key's row.
//!
//! A grant reads the row with `SELECT ... FOR UPDATE NOWAIT` (a busy row
//! means somebody else is granting, renewing or releasing right now: the
//! lock is contended), decides by the database clock read in that same
//! statement, writes the lease and commits. Nothing is reported granted
//! before the commit returns.

use chrono::NaiveDateTime;

use super::{plus_ms, retry_deadlocks, Engine, EngineError, LockRef};
use crate::store::{self, locks, Failure};

/// A lease held by an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub owner: String,
    /// The fencing token: strictly increasing per key across all grants.
    pub token: u64,
    /// How many times the owner has acquired it without releasing.
    pub hold_count: u32,
    pub ttl_ms: u64,
    /// When the lease ends, by the database clock (UTC).
    pub expires_at: NaiveDateTime,
}

/// The result of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// True when the hold count reached 0 and the lock is free.
    pub released: bool,
    pub hold_count: u32,
}

/// What `GET /v1/locks/{key}` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    pub held: bool,
    pub owner: Option<String>,
    pub token: Option<u64>,
    pub expires_at: Option<NaiveDateTime>,
    pub waiters: u64,
}

/// One try at a lock.
#[derive(Debug)]
pub(super) enum Attempt {
    Granted(Grant),
    /// Held by another owner; milliseconds left on its lease (0 if unknown).
    Held {
        remaining_ms: u64,
    },
}

impl Engine {
    /// One try: grant, re-enter, or report the lock held. Never waits for
    /// another transaction.
    pub(super) async fn try_once(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Attempt, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        retry_deadlocks(|| async {
            let mut inserted = false;
            loop {
                let mut tx = self.pool.begin().await?;
                let row = match locks::select_nowait(&mut *tx, tenant, key).await {
                    Ok(row) => row,
                    Err(err) if store::classify(&err) == Failure::RowLocked => {
                        tx.rollback().await?;
                        return Ok(Attempt::Held { remaining_ms: 0 });
                    }
                    Err(err) => return Err(err.into()),
                };
                let Some(row) = row else {
                    tx.rollback().await?;
                    if inserted {
                        return Err(sqlx::Error::RowNotFound.into());
                    }
                    locks::insert_missing(&self.pool, tenant, key).await?;
                    inserted = true;
                    continue;
                };
                let grant = match row.live_owner() {
                    Some(holder) if holder == owner.as_bytes() => Grant {
                        owner: owner.to_owned(),
                        token: row.token,
                        hold_count: row.hold_count.saturating_add(1),
                        ttl_ms,
                        expires_at: plus_ms(row.now, ttl_ms),
                    },
                    Some(_) => {
                        let remaining_ms = row.remaining_ms();
                        tx.rollback().await?;
                        return Ok(Attempt::Held { remaining_ms });
                    }
                    None => Grant {
                        owner: owner.to_owned(),
                        token: row.token + 1,
                        hold_count: 1,
                        ttl_ms,
                        expires_at: plus_ms(row.now, ttl_ms),
                    },
                };
                locks::write_lease(
                    &mut *tx,
                    tenant,
                    key,
                    owner,
                    grant.token,
                    grant.hold_count,
                    grant.expires_at,
                )
                .await?;
                tx.commit().await?;
                self.metrics.inc(
                    "lockbroker_lock_grants_total",
                    &[
                        ("tenant", tenant),
                        ("reentry", bool_label(grant.hold_count > 1)),
                    ],
                );
                return Ok(Attempt::Granted(grant));
            }
        })
        .await
    }

    /// Releases one hold of `owner`'s lease with `token`.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that lease is not live (nothing
    /// changes); [`EngineError::Unavailable`] when the database failed.
    pub async fn release(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
    ) -> Result<Released, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        retry_deadlocks(|| async {
            let mut tx = self.pool.begin().await?;
            let row = locks::select_for_update(&mut *tx, tenant, key).await?;
            let Some(row) = row.filter(|r| owns(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let released = if row.hold_count > 1 {
                let expires_at = row.expires_at.unwrap_or(row.now);
                let hold_count = row.hold_count - 1;
                locks::write_lease(&mut *tx, tenant, key, owner, token, hold_count, expires_at)
                    .await?;
                Released {
                    released: false,
                    hold_count,
                }
            } else {
                locks::free(&mut *tx, tenant, key).await?;
                Released {
                    released: true,
                    hold_count: 0,
                }
            };
            tx.commit().await?;
            Ok(released)
        })
        .await
    }

    /// Extends `owner`'s live lease with `token` to `ttl_ms` from now.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once the lease has expired by the database
    /// clock, even if nobody took the lock since.
    pub async fn renew(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<Grant, EngineError> {
        let (tenant, key) = (lock.tenant.name.as_str(), lock.storage_key.as_str());
        retry_deadlocks(|| async {
            let mut tx = self.pool.begin().await?;
            let row = locks::select_for_update(&mut *tx, tenant, key).await?;
            let Some(row) = row.filter(|r| owns(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let grant = Grant {
                owner: owner.to_owned(),
                token,
                hold_count: row.hold_count,
                ttl_ms,
                expires_at: plus_ms(row.now, ttl_ms),
            };
            locks::write_lease(
                &mut *tx,
                tenant,
                key,
                owner,
                token,
                grant.hold_count,
                grant.expires_at,
            )
            .await?;
            tx.commit().await?;
            Ok(grant)
        })
        .await
    }

    /// The lock's current state, without taking any row lock.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] when the database failed.
    pub async fn inspect(&self, lock: &LockRef) -> Result<LockState, EngineError> {
        let row = locks::select(&self.pool, &lock.tenant.name, &lock.storage_key).await?;
        let waiters = self.waiters(lock);
        let live = row.as_ref().and_then(|r| r.live_owner().map(|o| (r, o)));
        Ok(match live {
            Some((row, owner)) => LockState {
                held: true,
                owner: Some(String::from_utf8_lossy(owner).into_owned()),
                token: Some(row.token),
                expires_at: row.expires_at,
                waiters,
            },
            None => LockState {
                held: false,
                owner: None,
                token: None,
                expires_at: None,
                waiters,
            },
        })
    }
}

/// True when `row` is a live lease of `owner` with `token`.
fn owns(row: &locks::LockRow, owner: &str, token: u64) -> bool {
    row.live_owner() == Some(owner.as_bytes()) && row.token == token
}

fn bool_label(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}
