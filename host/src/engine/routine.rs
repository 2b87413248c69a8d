//! The built-in (FIFO) policy's path for locks, server-side: a waiting
//! acquire and a release each in one `CALL` of a stored procedure
//! (`store::routines`) plus the engine's own `COMMIT`, where the general
//! path (`lock`, `lease`, `queue`) takes 6 to 8 statements. A contended
//! handoff (the release that hands on, and the holder's next enqueue) costs
//! 4 round trips instead of 15.
//!
//! The procedures make the same decisions as the general path, by the
//! database clock read with the row, and keep the same invariants (header
//! row first, `queued` exact, a grant recorded in the waiter's row). They
//! leave the transaction open, so that the engine registers a new waiter
//! before its commit and settles a lost `COMMIT` answer as for every
//! transaction; only a release with nobody waiting commits itself (one
//! autocommitted statement, settled the same way). Whatever they do not
//! handle (a key never seen, a free lock with waiters still counted) they
//! hand back untouched, and the general path runs.
//!
//! Only for tenants whose fairness is the built-in FIFO (the policy says
//! `always_oldest`) and for locks: a policy that chooses among waiters, and
//! elections and semaphores, keep the general path. So does the one-try
//! acquire (`wait_ms` 0): `NOWAIT` is not allowed inside a procedure.
//! And so does every broker on a Galera node: the procedures start their
//! transaction themselves, and whether Galera's causal wait
//! (`wsrep_sync_wait`) covers a transaction begun inside a routine was not
//! established; the general path begins with `BEGIN`, which it covers.

use super::{
    lease::{Attempt, Wish},
    seat::{Lease, Seat},
    settle::Expect,
    Engine, EngineError, LockRef, Released,
};
use crate::store::{
    self,
    routines::{self, AcquireCall, Outcome},
    Failure, Kind,
};

impl Engine {
    /// Whether `lock` takes the routine path: a lock of a tenant on the
    /// built-in FIFO fairness, without lock-delay or minimum hold by its
    /// effective values (the procedures know nothing of them).
    pub(super) fn on_routine_path(&self, lock: &LockRef) -> bool {
        lock.kind == Kind::Lock
            && lock.pacing.always_oldest()
            && lock.delays.is_none()
            && !self.db().galera()
    }

    /// A waiting acquire (`wish.wait_ms` > 0) in one `CALL` and a `COMMIT`:
    /// granted, or queued; `None` when the general path must decide.
    ///
    /// # Errors
    /// [`EngineError::TooManyWaiters`]; [`EngineError::Unavailable`].
    pub(super) async fn attempt_routine(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
    ) -> Result<Option<Attempt>, EngineError> {
        let budget = self.budget();
        let call = AcquireCall {
            owner: wish.owner,
            ttl_ms: wish.ttl_ms,
            wait_ms: wish.wait_ms,
            priority: wish.priority,
            broker: &self.broker,
            alive_us: self.alive_us(),
            max_waiters: lock.max_waiters,
        };
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let out = routines::acquire(&mut conn, lock.row(), call).await?;
            if out.is("granted") {
                let lease = lease(&out, wish.owner, wish.ttl_ms)?;
                self.commit(conn, lock, Expect::lease(&lease)).await?;
                self.count_grant(lock, if lease.fresh { "direct" } else { "reentry" });
                return Ok(Some(Attempt::Granted(lease)));
            }
            if out.is("queued") {
                let id = out.waiter_id.ok_or(sqlx::Error::RowNotFound)?;
                // If the commit fails, dropping `waiter` takes it out again.
                let waiter = self.register(lock, id, wish.owner);
                self.commit(conn, lock, Expect::Waiter { id }).await?;
                return Ok(Some(Attempt::Queued(waiter)));
            }
            conn.rollback().await?;
            if out.is("too_many") {
                return Err(EngineError::TooManyWaiters);
            }
            Ok(None)
        })
        .await
    }

    /// Releases one hold of `owner`'s lock with `token` in one `CALL` (and
    /// a `COMMIT` unless nobody waited); the last hold hands the lock to
    /// the oldest eligible waiter, if any. Every write is marked with
    /// `mark`, as on the general path ([`Engine::release_seat`]): an
    /// attempt tried again that finds its mark answers what the earlier,
    /// committed one did.
    ///
    /// Within `budget` (a release sent out of a batch keeps what it has left).
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that lease is not live (nothing
    /// changes); [`EngineError::Unavailable`].
    pub(super) async fn release_routine(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
        budget: super::Budget,
    ) -> Result<Released, EngineError> {
        let ended = Expect::Ended {
            seat: Seat::Whole,
            token,
        };
        let freed = Released {
            released: true,
            hold_count: 0,
        };
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let call = routines::release(
                &mut conn,
                lock.row(),
                owner,
                token,
                mark,
                &self.broker,
                self.alive_us(),
            )
            .await;
            let out = match call {
                Ok(out) => out,
                // The one-statement release may have committed: find out
                // (a transaction the procedure left open dies with its
                // session, which is ended first).
                Err(err) if store::classify(&err) == Failure::Disconnected => {
                    self.find_out(conn, err, lock, ended.clone()).await?;
                    return Ok(freed);
                }
                Err(err) => return Err(err.into()),
            };
            if out.committed == Some(1) {
                conn.done();
                return Ok(freed);
            }
            if out.is("lost") {
                conn.rollback().await?;
                return Err(EngineError::LeaseLost);
            }
            if out.is("already") {
                // An earlier attempt of this release committed, though it
                // answered otherwise.
                conn.rollback().await?;
                tracing::warn!(key = %lock.storage_key, owner, token, "a release found that its earlier attempt had committed");
                self.metrics
                    .inc("lockbroker_releases_found_committed_total", &[]);
                let hold_count = out.hold_count.unwrap_or(0);
                return Ok(Released {
                    released: hold_count == 0,
                    hold_count: u32::try_from(hold_count).unwrap_or(u32::MAX),
                });
            }
            if out.is("held") {
                let lease = lease(&out, owner, out.remaining_ms.unwrap_or(0))?;
                self.commit(conn, lock, Expect::lease(&lease)).await?;
                return Ok(Released {
                    released: false,
                    hold_count: lease.hold_count,
                });
            }
            let handed = if out.is("handed") {
                let id = out.waiter_id.ok_or(sqlx::Error::RowNotFound)?;
                let broker = out.waiter_broker.clone().unwrap_or_default();
                // The waiter's owner is not needed to deliver.
                Some(self.delivery(broker, id, &lease(&out, "", 0)?))
            } else {
                None
            };
            self.commit(conn, lock, ended.clone()).await?;
            if let Some(purged) = out.purged.filter(|&n| n > 0) {
                self.metrics
                    .add_counter("lockbroker_waiters_purged_total", &[], purged);
            }
            self.deliver(handed);
            Ok(freed)
        })
        .await
    }
}

/// The lease an outcome describes (`granted`, `held`, `handed`), held by
/// `owner` for `ttl_ms`.
fn lease(out: &Outcome, owner: &str, ttl_ms: u64) -> Result<Lease, EngineError> {
    let (Some(token), Some(hold_count), Some(expires_at)) =
        (out.token, out.hold_count, out.expires_at)
    else {
        return Err(sqlx::Error::RowNotFound.into());
    };
    Ok(Lease {
        seat: Seat::Whole,
        owner: owner.to_owned(),
        token,
        hold_count: u32::try_from(hold_count).unwrap_or(u32::MAX),
        ttl_ms,
        expires_at,
        fresh: out.fresh == Some(1),
    })
}
