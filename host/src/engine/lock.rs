//! Locks and elections: one lease per key, in the key's row in `locks`.
//!
//! A try reads the row with `SELECT ... FOR UPDATE NOWAIT` (a busy row means
//! somebody else is granting, renewing or releasing right now: the lock is
//! contended), decides by the database clock read in that same statement,
//! writes the lease and commits. A waiting acquire reads it with a plain
//! `FOR UPDATE` so that, if it cannot be granted, it joins the queue in the
//! same transaction. A free lock with queued waiters is not granted to a
//! newcomer: the queue goes first (stale waiters do not count, and are
//! cleared out on the way). Release, renewal, handoff and expiry are the
//! lease's own (`lease`).

use chrono::NaiveDateTime;

use super::{
    batch::Batched,
    delay,
    detach::{finish, Departure},
    held_here::InMemory,
    history,
    lease::{Attempt, Wish},
    plus_ms,
    seat::{Lease, LeaseRow, Seat},
    settle::Expect,
    Ask, Budget, Engine, EngineError, LockRef, Op,
};
use crate::store::{
    self, elections,
    listing::{self, Entry, LockEntry, Stretch},
    locks::{self},
    Failure, Kind, Locking,
};

/// A lock or election lease held by an owner (its seat is the key's row;
/// `hold_count` counts re-entries; an election's `token` is its term).
pub type Grant = Lease;

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
    /// The holder's re-entries (elections: 1).
    pub hold_count: Option<u32>,
    /// When the lease was granted, from the key's history (none for
    /// elections, or once pruned).
    pub acquired_at: Option<NaiveDateTime>,
    /// Its session's expiry for a lease held in a session.
    pub expires_at: Option<NaiveDateTime>,
    pub waiters: u64,
    /// The session the lease is held in, if it is.
    pub session: Option<String>,
}

impl LockState {
    /// The state a row of `store::listing` shows (read by the database
    /// clock, `live` telling whether its lease still runs).
    pub(super) fn of(live: bool, entry: &LockEntry) -> LockState {
        LockState {
            held: live,
            owner: entry
                .owner
                .as_deref()
                .filter(|_| live)
                .map(|o| String::from_utf8_lossy(o).into_owned()),
            token: live.then_some(entry.token),
            hold_count: live.then_some(entry.hold_count),
            acquired_at: entry.acquired_at,
            expires_at: entry.expires_at.filter(|_| live),
            waiters: u64::from(entry.queued),
            session: entry
                .session
                .as_deref()
                .filter(|_| live)
                .map(|s| String::from_utf8_lossy(s).into_owned()),
        }
    }
}

/// Whether a token is a lock's live grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub valid: bool,
    /// The live grant's token; `None` when the lock is not held.
    pub current: Option<u64>,
}

/// What a lock's row allows `owner`: re-entry, a new grant, or nothing.
/// The caller has settled the queue of a free row first (`queued` is 0
/// then, unless a waiter was handed the lease).
pub(super) fn decide(row: &LeaseRow, queued: u32, lock: &LockRef, wish: Wish<'_>) -> Option<Lease> {
    let expires_at = plus_ms(row.now, wish.ttl_ms);
    // Re-entry is by owner, within the same session (or none): a plain
    // acquire never re-enters a session's lease, nor the other way round.
    let same_session = row.session.as_deref() == wish.session.map(str::as_bytes);
    match row.live_owner() {
        Some(holder) if holder == wish.owner.as_bytes() && same_session => Some(Lease {
            seat: Seat::Whole,
            owner: wish.owner.to_owned(),
            token: row.token,
            // An election's leader campaigning again stays leader once.
            hold_count: if lock.kind == Kind::Election {
                row.hold_count
            } else {
                row.hold_count.saturating_add(1)
            },
            ttl_ms: wish.ttl_ms,
            expires_at,
            fresh: false,
            session: wish.session.map(str::to_owned),
        }),
        Some(_) => None,
        // Waiters queued, or in a live broker's memory (`standby`).
        None if queued > 0 || row.standby.is_some() => None,
        // A lock-delay or minimum hold is not over.
        None if delay::blocked_until(row, lock.delays).is_some() => None,
        None => Some(Lease {
            seat: Seat::Whole,
            owner: wish.owner.to_owned(),
            token: row.token + 1,
            hold_count: 1,
            ttl_ms: wish.ttl_ms,
            expires_at,
            fresh: true,
            session: wish.session.map(str::to_owned),
        }),
    }
}

pub(super) fn lock_held(retry_after_ms: u64) -> EngineError {
    EngineError::LockHeld { retry_after_ms }
}

impl Engine {
    /// Acquires `lock` as `ask` asks, waiting in the queue up to its
    /// `wait_ms` (0: one try). Runs to its end even if the caller leaves; a grant
    /// nobody receives is given back.
    ///
    /// # Errors
    /// [`EngineError::LockHeld`] with the backoff policy's `retry_after_ms`;
    /// [`EngineError::TooManyWaiters`]; [`EngineError::ShuttingDown`];
    /// [`EngineError::Unavailable`].
    pub fn acquire(&self, lock: &LockRef, ask: &Ask) -> Op<Grant> {
        let (engine, lock, ask) = (self.clone(), lock.clone(), ask.clone());
        finish(
            move |departure| async move { engine.acquire_now(&lock, ask.wish(), departure).await },
        )
    }

    async fn acquire_now(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        mut departure: Departure,
    ) -> Result<Grant, EngineError> {
        if wish.session.is_some() {
            return self.acquire_in_session(lock, wish, departure).await;
        }
        let started = tokio::time::Instant::now();
        let mut wish = wish;
        // A lease granted through this broker: wait here, in memory.
        let here = match self.wait_here(lock, wish, started, &mut departure).await? {
            InMemory::NotHere => None,
            InMemory::Granted(lease) => Some(Attempt::Granted(lease)),
            InMemory::TimedOut => {
                self.heat.saw(lock, super::heat::Seen::Refused);
                let hint = self.retry_after(lock, 0, 0, wish.wait_ms).await;
                return Err(lock_held(hint));
            }
            InMemory::Refused(waiting) => {
                self.heat.saw(lock, super::heat::Seen::Refused);
                let hint = self.retry_after(lock, waiting, 0, 0).await;
                return Err(lock_held(hint));
            }
            InMemory::Spilled => {
                let waited = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                wish.wait_ms = wish.wait_ms.saturating_sub(waited).max(1);
                None
            }
        };
        let from_here = here.is_some();
        let attempt = match here {
            Some(attempt) => attempt,
            None => match self.batch_acquire(lock, wish).await {
                Batched::Done(attempt) => attempt?,
                Batched::Alone(budget) => self.attempt(lock, wish, budget).await?,
            },
        };
        // A key's lease is remembered for waiters in memory once the key is
        // contended (handed on to a waiter), not for every lease held.
        let contended = from_here || matches!(attempt, Attempt::Queued(_));
        let lease = self
            .conclude(lock, attempt, wish, &mut departure, lock_held)
            .await?;
        self.held_here.record(lock, &lease, contended);
        self.time_grant(lock, started);
        Ok(lease)
    }

    /// An acquire in a session: the general path only (no group commit, no
    /// waiting in memory). Its answer carries the session's `expires_at`
    /// and `ttl_ms`, read after the grant.
    ///
    /// # Errors
    /// [`EngineError::SessionNotFound`] when the session is not live (nothing
    /// granted), or ended before the answer (its end releases the lease);
    /// as [`Engine::acquire`].
    async fn acquire_in_session(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        mut departure: Departure,
    ) -> Result<Grant, EngineError> {
        let started = tokio::time::Instant::now();
        let attempt = self.attempt(lock, wish, self.budget()).await?;
        let concluded = self
            .conclude(lock, attempt, wish, &mut departure, lock_held)
            .await;
        let lease = self.lease_answer(lock, wish.session, concluded).await?;
        self.time_grant(lock, started);
        Ok(lease)
    }

    /// One try (`wait_ms` 0: never waiting for another transaction) or a
    /// grant-or-enqueue (`wait_ms` > 0: the row is read with a waiting
    /// lock, and a busy key is joined in the same transaction), within
    /// `budget`.
    async fn attempt(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        budget: Budget,
    ) -> Result<Attempt, EngineError> {
        let locking = if wish.wait_ms == 0 {
            Locking::NoWait
        } else {
            Locking::Wait
        };
        // A waiting read queues behind the key's other waiting requests
        // here, not in the database holding a connection (`gate`).
        let _turn = if locking == Locking::Wait {
            Some(self.gates.turn(lock, budget).await?)
        } else {
            None
        };
        self.retry(budget, || async {
            let mut inserted = false;
            // Twice at most: `create_row` fails the second time.
            loop {
                let mut tx = self.begin(budget).await?;
                if !super::session::hold(&mut tx, &lock.tenant, wish.session).await? {
                    tx.rollback().await?;
                    return Err(EngineError::SessionNotFound);
                }
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
                let Some(row) = row else {
                    tx.rollback().await?;
                    drop(tx);
                    self.create_header(lock, budget, &mut inserted).await?;
                    continue;
                };
                let (mut queued, row) = LeaseRow::of_lock(row);
                // A free lease with queued waiters goes to the next one that
                // can take it; waiters that cannot are cleared out (and an
                // expired lease recorded).
                let mut deliveries = Vec::new();
                let filled = row.live_owner().is_none() && queued > 0;
                if filled {
                    deliveries = self.fill(&mut tx, lock, &mut queued).await?;
                }
                if deliveries.is_empty() {
                    if let Some(lease) = decide(&row, queued, lock, wish) {
                        if lease.fresh && !filled {
                            history::note_expired(&mut tx, lock, &row);
                        }
                        return self.commit_grant(tx, lock, lease).await;
                    }
                }
                // Free, but a lock-delay or minimum hold is not over: a try
                // is told when it ends; a waiter is handed the key then.
                let blocked = delay::blocked_until(&row, lock.delays)
                    .filter(|_| row.live_owner().is_none() && deliveries.is_empty());
                if let Some(until) = blocked {
                    let ms = delay::ms_until(&row, until);
                    if wish.wait_ms == 0 {
                        tx.rollback().await?;
                        return Ok(Attempt::Delayed { retry_after_ms: ms });
                    }
                    self.hand_on_later(lock, ms);
                }
                let busy = (row.remaining_ms(), queued);
                let handed = Expect::Ended {
                    seat: Seat::Whole,
                    token: row.token,
                };
                return self
                    .refuse_or_enqueue(tx, lock, wish, busy, deliveries, handed)
                    .await;
            }
        })
        .await
    }

    /// Releases one hold of `owner`'s lease with `token`; the last hold
    /// hands the lock to the next waiter, if any. Runs to its end even if
    /// the caller leaves.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that lease is not live (nothing
    /// changes); [`EngineError::Unavailable`] when the database failed.
    pub fn release(&self, lock: &LockRef, owner: &str, token: u64) -> Op<Released> {
        self.release_marked(lock, owner, token, super::lease::mark())
    }

    /// [`Engine::release`] with the mark its writes leave in the row (see
    /// [`Engine::release_seat`]): an attempt that finds its own mark knows
    /// an earlier one committed. Public for tests that play a release whose
    /// answer was lost; everything else uses `release`.
    #[doc(hidden)]
    pub fn release_marked(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
    ) -> Op<Released> {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move { engine.release_lock(&lock, &owner, token, mark).await })
    }

    /// [`Engine::release_marked`], in the caller's task: handed to the next
    /// waiter here if there is one (`held_here`), else in a batch or alone.
    pub(super) async fn release_lock(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
    ) -> Result<Released, EngineError> {
        if self.held_here.waiting_behind(lock, owner, token) {
            return self.release_here(lock, owner, token, mark).await;
        }
        let released = match self.batch_release(lock, owner, token, mark).await {
            Batched::Done(released) => released,
            Batched::Alone(budget) => {
                self.release_seat_by(lock, Seat::Whole, owner, token, mark, budget)
                    .await
            }
        };
        if let Ok(r) = &released {
            if !r.released {
                self.held_here
                    .released_one(lock, owner, token, r.hold_count);
            }
        }
        released
    }

    /// Extends `owner`'s live lease with `token` to `ttl_ms` from now.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once the lease has expired by the database
    /// clock, even if nobody took the lock since.
    pub fn renew(&self, lock: &LockRef, owner: &str, token: u64, ttl_ms: u64) -> Op<Grant> {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move {
            let lease = engine
                .renew_seat(&lock, Seat::Whole, &owner, token, ttl_ms)
                .await?;
            engine.held_here.renewed(&lock, &lease);
            Ok(lease)
        })
    }

    /// The lock's current state, without taking any row lock.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] when the database failed.
    pub fn inspect(&self, lock: &LockRef) -> Op<LockState> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.inspect_now(&lock).await })
    }

    pub(super) async fn inspect_now(&self, lock: &LockRef) -> Result<LockState, EngineError> {
        // The key's row as a listing reads it: the first of the stretch of
        // keys that start with it, if that is the key itself.
        let stretch = Stretch {
            tenant: &lock.tenant,
            after: None,
            prefix: lock.storage_key.as_bytes(),
            limit: 1,
        };
        let sql = listing::locks(lock.kind, &stretch);
        let entries: Vec<Entry<LockEntry>> = self.stretch(&sql, stretch).await?;
        let key = lock.storage_key.as_bytes();
        let here = self
            .held_here
            .waiting_for(&lock.tenant, lock.kind, &lock.storage_key);
        Ok(match entries.iter().find(|e| e.entry_key == key) {
            Some(entry) => {
                let mut state = LockState::of(entry.live, &entry.row);
                state.waiters += here;
                state
            }
            None => LockState {
                held: false,
                owner: None,
                token: None,
                hold_count: None,
                acquired_at: None,
                expires_at: None,
                waiters: here,
                session: None,
            },
        })
    }

    /// Whether `token` is the lock's live grant (a sequencer check), judged
    /// by the database clock at the time of the read; no row lock is
    /// taken, so the answer can be stale by the time it arrives (a fenced
    /// write checks inside its own transaction instead: the
    /// `lockbroker_token_valid` SQL function).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] when the database failed.
    pub fn validate(&self, lock: &LockRef, token: u64) -> Op<Validity> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move {
            let state = engine.inspect_now(&lock).await?;
            Ok(Validity {
                valid: state.token == Some(token),
                current: state.token,
            })
        })
    }

    /// A plain read of the key's row.
    pub(super) async fn read_row(
        &self,
        lock: &LockRef,
    ) -> Result<Option<locks::LockRow>, EngineError> {
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
            let terms = elections::since(&mut conn, &lock.tenant, &lock.storage_key, after).await?;
            conn.done();
            Ok(terms)
        })
        .await
    }
}
