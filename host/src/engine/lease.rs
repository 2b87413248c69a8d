//! Lock and election leases: each operation is one short transaction on
//! the key's row in `locks`.
//!
//! A try reads the row with `SELECT ... FOR UPDATE NOWAIT` (a busy row means
//! somebody else is granting, renewing or releasing right now: the lock is
//! contended), decides by the database clock read in that same statement,
//! writes the lease and commits. A waiting acquire reads it with a plain
//! `FOR UPDATE` so that, if it cannot be granted, it joins the queue in the
//! same transaction. A free lock with queued waiters is not granted to a
//! newcomer: the queue goes first (waiters past their deadline or of dead
//! brokers do not count, and are cleared out on the way). Nothing is
//! reported granted before the commit returns.

use chrono::NaiveDateTime;

use super::{
    detach::{finish, Departure},
    plus_ms,
    queue::{Delivery, Queued},
    settle::Expect,
    Budget, DbFailure, Engine, EngineError, Handoff, LockRef,
};
use crate::store::{
    self, elections,
    locks::{self, LockRow, Locking},
    pool::Conn,
    Failure, Kind,
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
    /// A new grant (a new token), not a re-entry or a leader campaigning
    /// again.
    pub fresh: bool,
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
    /// Joined the queue.
    Queued(Queued),
}

/// What a row allows `owner`: re-entry, a new grant, or nothing. The
/// caller has settled the queue of a free row first (`queued` is 0 then,
/// unless a waiter was handed the lease).
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
            fresh: false,
        }),
        Some(_) => None,
        None if row.queued > 0 => None,
        None => Some(Grant {
            owner: owner.to_owned(),
            token: row.token + 1,
            hold_count: 1,
            ttl_ms,
            expires_at,
            fresh: true,
        }),
    }
}

/// What a commit of `grant` leaves in the row.
fn leaves(grant: &Grant) -> Expect {
    Expect::Lease {
        owner: grant.owner.clone(),
        token: grant.token,
        hold_count: grant.hold_count,
        expires_at: grant.expires_at,
        fresh: grant.fresh,
    }
}

/// Writes a grant to the row (the caller holds it). A new election term
/// is also logged, for observers.
async fn write(conn: &mut Conn, lock: &LockRef, grant: &Grant) -> Result<(), EngineError> {
    locks::write_lease(
        conn,
        lock.row(),
        &grant.owner,
        grant.token,
        grant.hold_count,
        grant.expires_at,
    )
    .await?;
    if grant.fresh && lock.kind == Kind::Election {
        elections::record(
            conn,
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
    /// (0: one try). Runs to its end even if the caller leaves; a grant
    /// nobody receives is given back.
    ///
    /// # Errors
    /// [`EngineError::LockHeld`] with the backoff policy's `retry_after_ms`;
    /// [`EngineError::TooManyWaiters`]; [`EngineError::ShuttingDown`];
    /// [`EngineError::Unavailable`].
    pub fn acquire(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    ) -> impl std::future::Future<Output = Result<Grant, EngineError>> + Send + 'static {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |departure| async move {
            engine
                .acquire_now(&lock, &owner, ttl_ms, wait_ms, priority, departure)
                .await
        })
    }

    async fn acquire_now(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
        mut departure: Departure,
    ) -> Result<Grant, EngineError> {
        let attempt = self.attempt(lock, owner, ttl_ms, wait_ms, priority).await?;
        let grant = match attempt {
            Attempt::Granted(grant) => grant,
            Attempt::Busy {
                remaining_ms,
                queued,
            } => {
                let hint = self.retry_after(lock, queued, remaining_ms, 0).await;
                return Err(EngineError::LockHeld {
                    retry_after_ms: hint,
                });
            }
            Attempt::Queued(queued) => {
                match self
                    .await_handoff(lock, queued, wait_ms, &mut departure)
                    .await?
                {
                    Some(handoff) => self.handed(lock, owner, ttl_ms, handoff),
                    None => {
                        let hint = self.retry_after(lock, 0, 0, wait_ms).await;
                        return Err(EngineError::LockHeld {
                            retry_after_ms: hint,
                        });
                    }
                }
            }
        };
        if departure.gone() {
            // Nobody will receive it: give it back (a re-entry gives back
            // its one hold; a leader campaigning again keeps its term).
            if grant.fresh || lock.kind == Kind::Lock {
                self.give_back(lock, owner, grant.token, None).await;
            }
            return Err(EngineError::ShuttingDown);
        }
        Ok(grant)
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
            fresh: true,
        }
    }

    fn granted(&self, lock: &LockRef, grant: &Grant) {
        let via = if grant.fresh { "direct" } else { "reentry" };
        self.metrics.inc(
            "lockbroker_lock_grants_total",
            &[("tenant", &lock.tenant.name), ("via", via)],
        );
    }

    /// One try (`wait_ms` 0: never waiting for another transaction) or a
    /// grant-or-enqueue (`wait_ms` > 0: the row is read with a waiting
    /// lock, and a busy key is joined in the same transaction).
    async fn attempt(
        &self,
        lock: &LockRef,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    ) -> Result<Attempt, EngineError> {
        let budget = self.budget();
        let locking = if wait_ms == 0 {
            Locking::NoWait
        } else {
            Locking::Wait
        };
        self.retry(budget, || async {
            let mut inserted = false;
            loop {
                let mut tx = self.begin(budget).await?;
                let row = match locks::select(&mut tx, lock.row(), locking).await {
                    Ok(row) => row,
                    Err(err)
                        if locking == Locking::NoWait
                            && store::classify(&err) == Failure::RowLocked =>
                    {
                        tx.rollback().await?;
                        return Ok(Attempt::Busy {
                            remaining_ms: 0,
                            queued: 0,
                        });
                    }
                    Err(err) => return Err(err.into()),
                };
                let Some(mut row) = row else {
                    tx.rollback().await?;
                    drop(tx);
                    self.create_row(lock, budget, &mut inserted).await?;
                    continue;
                };
                // A free lease with queued waiters goes to the next one that
                // can take it; waiters that cannot are cleared out.
                let mut delivery = None;
                if row.live_owner().is_none() && row.queued > 0 {
                    delivery = self.hand_on(&mut tx, lock, &mut row).await?;
                }
                if delivery.is_none() {
                    if let Some(grant) = decide(&row, lock, owner, ttl_ms) {
                        write(&mut tx, lock, &grant).await?;
                        self.commit(tx, lock, leaves(&grant)).await?;
                        self.granted(lock, &grant);
                        return Ok(Attempt::Granted(grant));
                    }
                }
                let attempt = if wait_ms == 0 {
                    Attempt::Busy {
                        remaining_ms: row.remaining_ms(),
                        queued: row.queued,
                    }
                } else {
                    let queued = self
                        .enqueue(&mut tx, lock, owner, priority, ttl_ms, wait_ms)
                        .await?;
                    Attempt::Queued(queued)
                };
                let expect = match (&attempt, &delivery) {
                    (Attempt::Queued(queued), _) => Expect::Waiter { id: queued.id() },
                    (_, Some(_)) => Expect::Ended {
                        token: row.token - 1,
                    },
                    _ => {
                        // Nothing was written.
                        tx.rollback().await?;
                        return Ok(attempt);
                    }
                };
                // If this fails, dropping a `Queued` takes the waiter out again.
                self.commit(tx, lock, expect).await?;
                self.deliver(delivery);
                return Ok(attempt);
            }
        })
        .await
    }

    /// Creates the row of a key never seen before (once per operation).
    async fn create_row(
        &self,
        lock: &LockRef,
        budget: Budget,
        inserted: &mut bool,
    ) -> Result<(), EngineError> {
        if *inserted {
            return Err(sqlx::Error::RowNotFound.into());
        }
        let mut conn = self.conn(budget).await?;
        // Idempotent: a lost answer is simply tried again.
        locks::insert_missing(&mut conn, lock.row()).await?;
        conn.done();
        *inserted = true;
        Ok(())
    }

    /// Hands a freed lease to the next eligible waiter, or frees it
    /// (clearing out waiters that can no longer take it). The caller holds
    /// the row, read as `row` (whose `queued` and `token` are kept up to
    /// date), commits, then delivers.
    pub(super) async fn hand_on(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        row: &mut LockRow,
    ) -> Result<Option<Delivery>, EngineError> {
        let chosen = if row.queued > 0 {
            self.choose(conn, lock).await?
        } else {
            None
        };
        let Some(waiter) = chosen else {
            if row.queued > 0 {
                row.queued = row.queued.saturating_sub(self.purge(conn, lock).await?);
            }
            locks::free(conn, lock.row()).await?;
            return Ok(None);
        };
        let grant = Grant {
            owner: String::from_utf8_lossy(&waiter.owner).into_owned(),
            token: row.token + 1,
            hold_count: 1,
            ttl_ms: waiter.ttl_ms,
            expires_at: plus_ms(row.now, waiter.ttl_ms),
            fresh: true,
        };
        write(conn, lock, &grant).await?;
        let delivery = self
            .record_handoff(conn, lock, waiter, grant.token, None, grant.expires_at)
            .await?;
        row.token = grant.token;
        row.queued = row.queued.saturating_sub(1);
        Ok(Some(delivery))
    }

    /// Releases one hold of `owner`'s lease with `token`; the last hold
    /// hands the lock to the next waiter, if any. Runs to its end even if
    /// the caller leaves.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that lease is not live (nothing
    /// changes); [`EngineError::Unavailable`] when the database failed.
    pub fn release(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
    ) -> impl std::future::Future<Output = Result<Released, EngineError>> + Send + 'static {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move { engine.release_now(&lock, &owner, token).await })
    }

    pub(super) async fn release_now(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
    ) -> Result<Released, EngineError> {
        let budget = self.budget();
        let freed = Released {
            released: true,
            hold_count: 0,
        };
        if let Some(released) = self.release_alone(lock, owner, token, budget).await? {
            return Ok(released);
        }
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let row = locks::select(&mut tx, lock.row(), Locking::Wait).await?;
            let Some(mut row) = row.filter(|r| owns(r, owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            if row.hold_count > 1 {
                let hold_count = row.hold_count - 1;
                let expires_at = row.expires_at.unwrap_or(row.now);
                locks::write_lease(&mut tx, lock.row(), owner, token, hold_count, expires_at)
                    .await?;
                let expect = Expect::Lease {
                    owner: owner.to_owned(),
                    token,
                    hold_count,
                    expires_at,
                    fresh: false,
                };
                self.commit(tx, lock, expect).await?;
                return Ok(Released {
                    released: false,
                    hold_count,
                });
            }
            let delivery = self.hand_on(&mut tx, lock, &mut row).await?;
            self.commit(tx, lock, Expect::Ended { token }).await?;
            self.deliver(delivery);
            Ok(freed)
        })
        .await
    }

    /// The common case of a release, a sole hold and no waiters, in one
    /// statement; `None` when it is not that case (re-entry, waiters, a
    /// lost lease, a collision): the full transaction follows.
    async fn release_alone(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        budget: Budget,
    ) -> Result<Option<Released>, EngineError> {
        let freed = Released {
            released: true,
            hold_count: 0,
        };
        let mut conn = self.conn(budget).await?;
        match locks::free_if_sole_holder(&mut conn, lock.row(), owner, token).await {
            Ok(done) => {
                conn.done();
                Ok(done.then_some(freed))
            }
            Err(err) if store::classify(&err) == Failure::Disconnected => {
                match self
                    .find_out(conn, err, lock, Expect::Ended { token })
                    .await
                {
                    Ok(()) => Ok(Some(freed)),
                    Err(EngineError::Unavailable(DbFailure::NotCommitted)) => Ok(None),
                    Err(err) => Err(err),
                }
            }
            Err(err) if store::classify(&err) == Failure::Other => Err(err.into()),
            // A collision: the full path waits its turn.
            Err(_) => Ok(None),
        }
    }

    /// Extends `owner`'s live lease with `token` to `ttl_ms` from now.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once the lease has expired by the database
    /// clock, even if nobody took the lock since.
    pub fn renew(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> impl std::future::Future<Output = Result<Grant, EngineError>> + Send + 'static {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move { engine.renew_now(&lock, &owner, token, ttl_ms).await })
    }

    async fn renew_now(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<Grant, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let row = locks::select(&mut tx, lock.row(), Locking::Wait).await?;
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
                fresh: false,
            };
            write(&mut tx, lock, &grant).await?;
            self.commit(tx, lock, leaves(&grant)).await?;
            Ok(grant)
        })
        .await
    }

    /// The lock's current state, without taking any row lock.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] when the database failed.
    pub fn inspect(
        &self,
        lock: &LockRef,
    ) -> impl std::future::Future<Output = Result<LockState, EngineError>> + Send + 'static {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.inspect_now(&lock).await })
    }

    pub(super) async fn inspect_now(&self, lock: &LockRef) -> Result<LockState, EngineError> {
        let row = self.read_row(lock).await?;
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

    /// A plain read of the key's row.
    async fn read_row(&self, lock: &LockRef) -> Result<Option<LockRow>, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let row = locks::select(&mut conn, lock.row(), Locking::None).await?;
            conn.done();
            Ok(row)
        })
        .await
    }

    /// The latest term (token) of an election or lock, live or not.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub(super) async fn last_term(&self, lock: &LockRef) -> Result<u64, EngineError> {
        Ok(self.read_row(lock).await?.map_or(0, |r| r.token))
    }

    /// An election's terms after `after`, oldest first.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub(super) async fn terms_since(
        &self,
        lock: &LockRef,
        after: u64,
    ) -> Result<Vec<elections::TermRow>, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let terms =
                elections::since(&mut conn, &lock.tenant.name, &lock.storage_key, after).await?;
            conn.done();
            Ok(terms)
        })
        .await
    }

    /// The reaper's work on one lock or election: take back grants that
    /// dead brokers never delivered, clear out waiters that can no longer
    /// take the lease and, if it is free or expired, hand it to the next
    /// waiter. Skips a row another transaction (or another broker's
    /// reaper) holds.
    pub(super) async fn reap_lock(&self, lock: &LockRef) -> Result<(), EngineError> {
        let budget = self.budget();
        let mut tx = self.begin(budget).await?;
        let Some(mut row) = locks::select(&mut tx, lock.row(), Locking::SkipLocked).await? else {
            tx.rollback().await?;
            return Ok(());
        };
        let mut abandoned = false;
        for grant in self.take_back(&mut tx, lock).await? {
            // The lease is still that undelivered grant: nobody holds it.
            abandoned |=
                row.token == grant.granted_token && row.owner.as_deref() == Some(&grant.owner[..]);
        }
        let mut delivery = None;
        if abandoned || row.live_owner().is_none() {
            delivery = self.hand_on(&mut tx, lock, &mut row).await?;
            if delivery.is_some() {
                self.metrics.inc("lockbroker_expiry_handoffs_total", &[]);
            }
        } else if row.queued > 0 {
            row.queued = row.queued.saturating_sub(self.purge(&mut tx, lock).await?);
        }
        self.commit(tx, lock, Expect::Unchecked).await?;
        self.deliver(delivery);
        Ok(())
    }
}

/// True when `row` is a live lease of `owner` with `token`.
fn owns(row: &LockRow, owner: &str, token: u64) -> bool {
    row.live_owner() == Some(owner.as_bytes()) && row.token == token
}
