//! Lock and election leases: each operation is one short transaction on
//! the key's row in `locks`.
//!
//! A try reads the row with `SELECT ... FOR UPDATE NOWAIT` (a busy row means
//! somebody else is granting, renewing or releasing right now: the lock is
//! contended), decides by the database clock read in that same statement,
//! writes the lease and commits. A waiting acquire reads it with a plain
//! `FOR UPDATE` so that, if it cannot be granted, it joins the queue in the
//! same transaction. A free lock with queued waiters is not granted to a
//! newcomer: the queue goes first. Nothing is reported granted before the
//! commit returns.

use chrono::NaiveDateTime;
use sqlx::MySqlConnection;

use super::{
    plus_ms,
    queue::{Delivery, Queued},
    retry_deadlocks, Engine, EngineError, Handoff, LockRef,
};
use crate::store::{
    self, elections,
    locks::{self, LockRow, Locking},
    waiters, Failure, Kind,
};

/// A lease held by an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub owner: String,
    /// The fencing token (an election's term): strictly increasing per key
    /// across all grants.
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
    /// True when the hold count reached 0 and the lock was freed (or
    /// handed to the next waiter).
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
enum Attempt {
    Granted(Grant),
    /// Not grantable now: held by another owner (or queued waiters go
    /// first); milliseconds left on the lease (0 if unknown), queue length.
    Busy {
        remaining_ms: u64,
        queued: u32,
    },
}

/// What a row allows `owner`: re-entry, a new grant, or nothing.
fn decide(row: &LockRow, lock: &LockRef, owner: &str, ttl_ms: u64) -> Option<Grant> {
    let expires_at = plus_ms(row.now, ttl_ms);
    match row.live_owner() {
        Some(holder) if holder == owner.as_bytes() => Some(Grant {
            owner: owner.to_owned(),
            token: row.token,
            // An election's leader campaigning again stays leader once.
            hold_count: if lock.kind == Kind::Election {
                row.hold_count
            } else {
                row.hold_count.saturating_add(1)
            },
            ttl_ms,
            expires_at,
        }),
        Some(_) => None,
        None if row.queued > 0 => None,
        None => Some(Grant {
            owner: owner.to_owned(),
            token: row.token + 1,
            hold_count: 1,
            ttl_ms,
            expires_at,
        }),
    }
}

/// Writes a grant to the row (the caller holds it). A new election term
/// is also logged, for observers.
async fn write(
    conn: &mut MySqlConnection,
    lock: &LockRef,
    grant: &Grant,
    new: bool,
) -> Result<(), EngineError> {
    locks::write_lease(
        &mut *conn,
        lock.row(),
        &grant.owner,
        grant.token,
        grant.hold_count,
        grant.expires_at,
    )
    .await?;
    if new && lock.kind == Kind::Election {
        elections::record(
            &mut *conn,
            &lock.tenant.name,
            &lock.storage_key,
            grant.token,
            &grant.owner,
            grant.expires_at,
        )
        .await?;
    }
    Ok(())
}

impl Engine {
    /// Acquires `lock` for `owner`, waiting in the queue up to `wait_ms`
    /// (0: one try).
    ///
    /// # Errors
    /// [`EngineError::LockHeld`] with the backoff policy's `retry_after_ms`;
    /// [`EngineError::TooManyWaiters`]; [`EngineError::ShuttingDown`];
    /// [`EngineError::Unavailable`].
    pub async fn acquire(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    ) -> Result<Grant, EngineError> {
        let attempt = if wait_ms == 0 {
            self.try_once(lock, owner, ttl_ms).await?
        } else {
            match self
                .grant_or_enqueue(lock, owner, ttl_ms, wait_ms, priority)
                .await?
            {
                Ok(grant) => Attempt::Granted(grant),
                Err(queued) => {
                    return match self.await_handoff(lock, queued, wait_ms).await? {
                        Some(handoff) => Ok(self.handed(lock, owner, ttl_ms, handoff)),
                        None => {
                            let hint = self.retry_after(lock, 0, 0, wait_ms).await;
                            Err(EngineError::LockHeld {
                                retry_after_ms: hint,
                            })
                        }
                    };
                }
            }
        };
        match attempt {
            Attempt::Granted(grant) => Ok(grant),
            Attempt::Busy {
                remaining_ms,
                queued,
            } => {
                let hint = self.retry_after(lock, queued, remaining_ms, 0).await;
                Err(EngineError::LockHeld {
                    retry_after_ms: hint,
                })
            }
        }
    }

    /// The grant a handoff made.
    fn handed(&self, lock: &LockRef, owner: &str, ttl_ms: u64, handoff: Handoff) -> Grant {
        self.metrics.inc(
            "lockbroker_lock_grants_total",
            &[("tenant", &lock.tenant.name), ("via", "handoff")],
        );
        Grant {
            owner: owner.to_owned(),
            token: handoff.token,
            hold_count: 1,
            ttl_ms,
            expires_at: handoff.expires_at,
        }
    }

    fn granted(&self, lock: &LockRef, grant: &Grant) {
        let via = if grant.hold_count > 1 {
            "reentry"
        } else {
            "direct"
        };
        self.metrics.inc(
            "lockbroker_lock_grants_total",
            &[("tenant", &lock.tenant.name), ("via", via)],
        );
    }

    /// One try, never waiting for another transaction.
    async fn try_once(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Attempt, EngineError> {
        retry_deadlocks(|| async {
            let mut inserted = false;
            loop {
                let mut tx = self.pool.begin().await?;
                let row = match locks::select(&mut *tx, lock.row(), Locking::NoWait).await {
                    Ok(row) => row,
                    Err(err) if store::classify(&err) == Failure::RowLocked => {
                        tx.rollback().await?;
                        return Ok(Attempt::Busy {
                            remaining_ms: 0,
                            queued: 0,
                        });
                    }
                    Err(err) => return Err(err.into()),
                };
                let Some(row) = row else {
                    tx.rollback().await?;
                    self.create_row(lock, &mut inserted).await?;
                    continue;
                };
                let Some(grant) = decide(&row, lock, owner, ttl_ms) else {
                    tx.rollback().await?;
                    return Ok(Attempt::Busy {
                        remaining_ms: row.remaining_ms(),
                        queued: row.queued,
                    });
                };
                write(&mut tx, lock, &grant, grant.token != row.token).await?;
                tx.commit().await?;
                self.granted(lock, &grant);
                return Ok(Attempt::Granted(grant));
            }
        })
        .await
    }

    /// Creates the row of a key never seen before (once per operation).
    async fn create_row(&self, lock: &LockRef, inserted: &mut bool) -> Result<(), EngineError> {
        if *inserted {
            return Err(sqlx::Error::RowNotFound.into());
        }
        locks::insert_missing(&self.pool, lock.row()).await?;
        *inserted = true;
        Ok(())
    }

    /// Grants at once if allowed, else joins the queue in the same
    /// transaction. `Err` carries the queued waiter.
    #[allow(clippy::type_complexity)]
    async fn grant_or_enqueue(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    ) -> Result<Result<Grant, Queued>, EngineError> {
        retry_deadlocks(|| async {
            let mut inserted = false;
            loop {
                let mut tx = self.pool.begin().await?;
                let Some(row) = locks::select(&mut *tx, lock.row(), Locking::Wait).await? else {
                    tx.rollback().await?;
                    self.create_row(lock, &mut inserted).await?;
                    continue;
                };
                if let Some(grant) = decide(&row, lock, owner, ttl_ms) {
                    write(&mut tx, lock, &grant, grant.token != row.token).await?;
                    tx.commit().await?;
                    self.granted(lock, &grant);
                    return Ok(Ok(grant));
                }
                let queued = self
                    .enqueue(&mut tx, lock, owner, priority, ttl_ms, wait_ms)
                    .await?;
                // If this fails, dropping `queued` takes the waiter out again.
                tx.commit().await?;
                return Ok(Err(queued));
            }
        })
        .await
    }

    /// Hands a freed lock to the next waiter, or frees it. The caller holds
    /// the row (read as `row`) and commits, then delivers.
    pub(super) async fn hand_on(
        &self,
        conn: &mut MySqlConnection,
        lock: &LockRef,
        row: &LockRow,
    ) -> Result<Option<Delivery>, EngineError> {
        let chosen = if row.queued > 0 {
            self.choose(conn, lock).await?
        } else {
            None
        };
        let Some(waiter) = chosen else {
            locks::free(&mut *conn, lock.row()).await?;
            return Ok(None);
        };
        let grant = Grant {
            owner: String::from_utf8_lossy(&waiter.owner).into_owned(),
            token: row.token + 1,
            hold_count: 1,
            ttl_ms: waiter.ttl_ms,
            expires_at: plus_ms(row.now, waiter.ttl_ms),
        };
        write(conn, lock, &grant, true).await?;
        let delivery = self
            .record_handoff(conn, lock, waiter, grant.token, None, grant.expires_at)
            .await?;
        Ok(Some(delivery))
    }

    /// Releases one hold of `owner`'s lease with `token`; the last hold
    /// hands the lock to the next waiter, if any.
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
        // The common case, a sole hold and no waiters, is one statement.
        // Anything else (re-entry, waiters, a lost lease, even a deadlock
        // victim) takes the full transaction below.
        match locks::free_if_sole_holder(&self.pool, lock.row(), owner, token).await {
            Ok(true) => {
                return Ok(Released {
                    released: true,
                    hold_count: 0,
                })
            }
            Ok(false) => {}
            Err(err) if store::classify(&err) != Failure::Unavailable => {}
            Err(err) => return Err(err.into()),
        }
        let (released, delivery) = retry_deadlocks(|| async {
            let mut tx = self.pool.begin().await?;
            let row = locks::select(&mut *tx, lock.row(), Locking::Wait).await?;
            let Some(row) = row.filter(|r| owns(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let mut delivery = None;
            let released = if row.hold_count > 1 {
                let hold_count = row.hold_count - 1;
                let expires_at = row.expires_at.unwrap_or(row.now);
                locks::write_lease(&mut *tx, lock.row(), owner, token, hold_count, expires_at)
                    .await?;
                Released {
                    released: false,
                    hold_count,
                }
            } else {
                delivery = self.hand_on(&mut tx, lock, &row).await?;
                Released {
                    released: true,
                    hold_count: 0,
                }
            };
            tx.commit().await?;
            Ok((released, delivery))
        })
        .await?;
        self.deliver(delivery.into_iter().collect());
        Ok(released)
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
        retry_deadlocks(|| async {
            let mut tx = self.pool.begin().await?;
            let row = locks::select(&mut *tx, lock.row(), Locking::Wait).await?;
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
            write(&mut tx, lock, &grant, false).await?;
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
        let row = locks::select(&self.pool, lock.row(), Locking::None).await?;
        let waiters = row.as_ref().map_or(0, |r| u64::from(r.queued));
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

    /// The latest term (token) of an election or lock, live or not.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub async fn last_term(&self, lock: &LockRef) -> Result<u64, EngineError> {
        Ok(locks::select(&self.pool, lock.row(), Locking::None)
            .await?
            .map_or(0, |r| r.token))
    }

    /// An election's terms after `after`, oldest first.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub async fn terms_since(
        &self,
        lock: &LockRef,
        after: u64,
    ) -> Result<Vec<elections::TermRow>, EngineError> {
        Ok(elections::since(&self.pool, &lock.tenant.name, &lock.storage_key, after).await?)
    }

    /// The reaper's work on one lock or election: drop abandoned waiters and,
    /// if the lease is free or expired, hand it to the next waiter. Skips a
    /// row another transaction (or another broker's reaper) holds.
    pub(super) async fn reap_lock(&self, lock: &LockRef) -> Result<(), EngineError> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = locks::select(&mut *tx, lock.row(), Locking::SkipLocked).await? else {
            tx.rollback().await?;
            return Ok(());
        };
        let stale = waiters::delete_stale(&mut *tx, lock.row()).await?;
        if stale > 0 {
            self.add_queued(&mut tx, lock, -i64::try_from(stale).unwrap_or(0))
                .await?;
        }
        let mut delivery = None;
        if row.live_owner().is_none() {
            let row = LockRow {
                queued: row.queued.saturating_sub(u32::try_from(stale).unwrap_or(0)),
                ..row
            };
            delivery = self.hand_on(&mut tx, lock, &row).await?;
            if delivery.is_some() {
                self.metrics.inc("lockbroker_expiry_handoffs_total", &[]);
            }
        }
        tx.commit().await?;
        self.deliver(delivery.into_iter().collect());
        Ok(())
    }
}

/// True when `row` is a live lease of `owner` with `token`.
fn owns(row: &LockRow, owner: &str, token: u64) -> bool {
    row.live_owner() == Some(owner.as_bytes()) && row.token == token
}
