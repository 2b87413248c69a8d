//! Multi-locks: up to [`MULTILOCK_MAX_KEYS`] lock keys granted all or none,
//! in one transaction, each with its own fencing token.
//!
//! The keys are ordinary lock rows and their leases ordinary leases: a
//! single-key client and a multi-lock exclude each other, tokens continue
//! per key, and release, renewal, handoff and expiry are the lease's own
//! (`lease`, `seat`). What is particular here is only how a set is taken:
//!
//! - **Lock order.** Every transaction over a set reads its rows with
//!   `FOR UPDATE`, one by one in storage-key byte order (the order of the
//!   primary key, whose `lock_key` is `VARBINARY`). Single-key operations
//!   hold one lock row at a time, so no two transactions ever wait for each
//!   other in a cycle.
//! - **All or none.** A try decides every key by the same rule as a
//!   single-key try (`lock::decide`: free and nobody queued, or re-entry by
//!   the same owner) and writes the leases only if every key can be
//!   granted; otherwise it writes none.
//! - **Waiting without a partial set.** A try that cannot grant joins the
//!   queue of the *first* busy key, in the same transaction (so no release
//!   slips between), and waits there in that key's fairness order like any
//!   waiter. When that key is handed to it, it tries the whole set at once
//!   with that key counted in: granted, or the handed key goes straight on
//!   to its next waiter (or is freed) in that same transaction, and after
//!   a short random pause (which breaks rings of multi-locks passing keys
//!   to each other, see [`PASS_ON_PAUSE_MS`]) it tries again and queues on
//!   the key that is busy then. So it holds one key at most, only between a
//!   handoff and the try that follows it, and is told of nothing until it
//!   has the whole set. Queued like every waiter, it is
//!   not starved by single-key traffic on a key (a newcomer never overtakes
//!   a queued waiter); under steady traffic on several of its keys it may
//!   move from queue to queue, each move after one holder of the key it
//!   waited for, until `wait_ms` runs out.

use std::time::Duration;

use tokio::time::Instant;

use super::{
    detach::{finish, Departure},
    history,
    lease::Wish,
    lock::{decide, lock_held, Grant, Released},
    plus_ms,
    queue::{Delivery, Queued},
    seat::{self, Lease, LeaseRow, Seat},
    settle::Expect,
    Ask, DbFailure, Engine, EngineError, LockRef, Op,
};
use crate::store::{self, history::EventKind, locks, pool::Conn, Failure, Locking};

/// Most keys in one multi-lock.
pub const MULTILOCK_MAX_KEYS: usize = lockbroker_api::MAX_MULTILOCK_KEYS;

/// What a multi-lock release did to one key: `None` when the token no
/// longer held it (nothing changed for that key).
pub type MultiRelease = Vec<(LockRef, Option<Released>)>;

/// A key of the set handed to this multi-lock by its queue: its index in
/// the set and the token of the lease it was handed.
#[derive(Debug, Clone, Copy)]
struct Handed {
    index: usize,
    token: u64,
}

/// One all-or-nothing try.
enum Try {
    Granted(Vec<Lease>),
    /// Not grantable (and not queued): the first busy key's lease time
    /// left and queue length, for the backoff hint.
    Busy {
        remaining_ms: u64,
        queued: u32,
    },
    /// Queued on the key at this index of the set.
    Queued(Queued, usize),
    /// The handed key was passed on because another key is busy: try
    /// again after a short random pause, not queued at once (see
    /// [`PASS_ON_PAUSE_MS`]).
    PassedOn,
}

/// Upper bound of the random pause (ms) after passing a handed key on.
/// Queueing again at once can livelock: multi-locks each handed one key of
/// a ring and each needing the next one's key would pass the keys round
/// the ring for ever, every try meeting a neighbour's transient hold (seen
/// in the stress test: four of them until `wait_ms` ran out). Passed on
/// without queueing, the ring's keys are freed (or go to waiters that are
/// not in it), and the first of them to try again after its pause finds
/// its keys free.
const PASS_ON_PAUSE_MS: u64 = 16;

/// The set's rows, read and row-locked in order: (pending waiters, row).
type Rows = Vec<(u32, LeaseRow)>;

impl Engine {
    /// Acquires every lock of `set` as `ask` asks, all or none, waiting up
    /// to its `wait_ms` (0: one try; waiting, queued on the first busy key
    /// with its `priority`). The set is taken in storage-key order
    /// whatever order it comes in; the grants come back in that order.
    /// Runs to its end even if the caller leaves; a grant nobody receives
    /// is given back.
    ///
    /// # Errors
    /// [`EngineError::DuplicateKey`] when two keys name one storage key;
    /// [`EngineError::LockHeld`]; [`EngineError::TooManyWaiters`];
    /// [`EngineError::ShuttingDown`]; [`EngineError::Unavailable`].
    pub fn multi_acquire(&self, set: Vec<LockRef>, ask: &Ask) -> Op<Vec<(LockRef, Grant)>> {
        let (engine, ask) = (self.clone(), ask.clone());
        finish(move |departure| async move {
            let set = in_lock_order(set)?;
            let concluded = engine.multi_acquire_now(&set, ask.wish(), departure).await;
            let (Some(session), Some(first)) = (ask.session.as_deref(), set.first()) else {
                return concluded;
            };
            let held = |grants: &mut Vec<(LockRef, Grant)>, at, ttl_ms| {
                for (_, grant) in grants {
                    grant.in_session_until(at, ttl_ms);
                }
            };
            engine
                .session_answer(&first.tenant, session, concluded, held)
                .await
        })
    }

    async fn multi_acquire_now(
        &self,
        set: &[LockRef],
        wish: Wish<'_>,
        mut departure: Departure,
    ) -> Result<Vec<(LockRef, Grant)>, EngineError> {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(wish.wait_ms);
        let locking = if wish.wait_ms == 0 {
            Locking::NoWait
        } else {
            Locking::Wait
        };
        let mut handed: Option<Handed> = None;
        let leases = loop {
            let left = u64::try_from(
                deadline
                    .saturating_duration_since(Instant::now())
                    .as_millis(),
            )
            .unwrap_or(u64::MAX);
            let now = Wish {
                wait_ms: left,
                ..wish
            };
            let attempt = match self.multi_try(set, now, locking, handed).await {
                Ok(attempt) => attempt,
                Err(err) => {
                    // The try did not happen: a key handed to us is still
                    // ours, and nobody will use it.
                    if let Some(h) = handed {
                        self.give_back(&set[h.index], Seat::Whole, wish.owner, h.token)
                            .await;
                    }
                    return Err(err);
                }
            };
            // From here the try has either granted the handed key with the
            // set or passed it on: `handed` is set again only by a handoff.
            match attempt {
                Try::Granted(leases) => break leases,
                Try::Busy {
                    remaining_ms,
                    queued,
                } => {
                    self.heat.saw(&set[0], super::heat::Seen::Refused);
                    let hint = self
                        .retry_after(&set[0], queued, remaining_ms, wish.wait_ms)
                        .await;
                    return Err(lock_held(hint));
                }
                Try::PassedOn => {
                    let pause = Duration::from_millis(1 + rand::random::<u64>() % PASS_ON_PAUSE_MS);
                    tokio::time::sleep(
                        pause.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                }
                Try::Queued(queued, index) => {
                    let lock = &set[index];
                    match self
                        .await_handoff(lock, queued, left, &mut departure)
                        .await?
                    {
                        Some(handoff) => {
                            self.count_grant(lock, "handoff");
                            handed = Some(Handed {
                                index,
                                token: handoff.token,
                            });
                        }
                        None => {
                            self.heat.saw(lock, super::heat::Seen::Refused);
                            let hint = self.retry_after(lock, 0, 0, wish.wait_ms).await;
                            return Err(lock_held(hint));
                        }
                    }
                }
            }
        };
        if departure.gone() {
            // Nobody will receive them: give every key back (one hold of a
            // re-entered key, as a single-key acquire does).
            for (lock, lease) in set.iter().zip(&leases) {
                self.give_back(lock, Seat::Whole, wish.owner, lease.token)
                    .await;
            }
            return Err(EngineError::ShuttingDown);
        }
        self.time_grant(&set[0], started);
        Ok(set.iter().cloned().zip(leases).collect())
    }

    /// One all-or-nothing try at `set` (in lock order), `handed` counted
    /// in: grants every key, or queues on the first busy key when it may
    /// wait, or answers busy. A handed key not granted with the set is
    /// handed on in the same transaction (and the try does not queue).
    async fn multi_try(
        &self,
        set: &[LockRef],
        wish: Wish<'_>,
        locking: Locking,
        handed: Option<Handed>,
    ) -> Result<Try, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let Some((mut tx, rows)) = self.read_set(set, locking, budget).await? else {
                return Ok(Try::Busy {
                    remaining_ms: 0,
                    queued: 0,
                });
            };
            if !super::session::hold(&mut tx, &set[0].tenant, wish.session).await? {
                tx.rollback().await?;
                return Err(EngineError::SessionNotFound);
            }
            let mut leases = Vec::with_capacity(set.len());
            // The history of the grants, noted only if they are written.
            let mut events = Vec::new();
            let mut deliveries: Vec<Delivery> = Vec::new();
            // The first key that cannot be granted: index, lease time left,
            // queue length (after any handoff made here).
            let mut busy: Option<(usize, u64, u32)> = None;
            // A key whose lease this transaction ends (a handoff it made, or
            // the handed key passed on): what settles a lost commit.
            let mut ended: Option<(usize, u64)> = None;
            for (index, (lock, (queued, row))) in set.iter().zip(&rows).enumerate() {
                let mut queued = *queued;
                if let Some(h) = handed.filter(|h| h.index == index) {
                    if row.owned_by(wish.owner, h.token) {
                        // Ours since the handoff: granted with the set, as
                        // the new lease it is.
                        leases.push(Lease {
                            seat: Seat::Whole,
                            owner: wish.owner.to_owned(),
                            token: h.token,
                            hold_count: 1,
                            ttl_ms: wish.ttl_ms,
                            expires_at: plus_ms(row.now, wish.ttl_ms),
                            fresh: true,
                            session: wish.session.map(str::to_owned),
                        });
                        continue;
                    }
                }
                let filled = row.live_owner().is_none() && queued > 0;
                if filled {
                    // A free key with waiters goes to them, as for a single
                    // key: the queue goes first.
                    let handoffs = self.fill(&mut tx, lock, &mut queued).await?;
                    if !handoffs.is_empty() {
                        deliveries.extend(handoffs);
                        ended.get_or_insert((index, row.token));
                        busy.get_or_insert((index, 0, queued));
                        continue;
                    }
                }
                match decide(row, queued, lock, wish) {
                    Some(lease) => {
                        if lease.fresh {
                            if !filled {
                                events.extend(history::expiry(lock, row));
                            }
                            events.extend(history::granted(lock, &lease));
                        }
                        leases.push(lease);
                    }
                    None => {
                        busy.get_or_insert((index, row.remaining_ms(), queued));
                    }
                }
            }
            let Some((first_busy, remaining_ms, queued)) = busy else {
                for event in events {
                    tx.note(event);
                }
                return self.commit_set(tx, set, leases).await;
            };
            if let Some(h) = handed {
                let (mut queued, row) = rows[h.index].clone();
                if row.owned_by(wish.owner, h.token) {
                    let lock = &set[h.index];
                    // Handed to this waiter, passed on unused: its end.
                    history::note(
                        &mut tx,
                        lock,
                        EventKind::Released,
                        wish.owner,
                        h.token,
                        row.now,
                    );
                    deliveries.extend(self.hand_on(&mut tx, lock, &row, &mut queued).await?);
                    ended = Some((h.index, h.token));
                }
            }
            let passed_on = handed.is_some_and(|h| ended.is_some_and(|(i, _)| i == h.index));
            if wish.wait_ms == 0 || passed_on {
                match ended {
                    None => tx.rollback().await?,
                    Some((index, token)) => {
                        let expect = Expect::Ended {
                            seat: Seat::Whole,
                            token,
                        };
                        self.commit(tx, &set[index], expect).await?;
                    }
                }
                self.deliver(deliveries);
                if wish.wait_ms > 0 {
                    return Ok(Try::PassedOn);
                }
                return Ok(Try::Busy {
                    remaining_ms,
                    queued,
                });
            }
            let lock = &set[first_busy];
            let waiter = self.enqueue(&mut tx, lock, wish).await?;
            self.commit(tx, lock, Expect::Waiter { id: waiter.id() })
                .await?;
            self.deliver(deliveries);
            Ok(Try::Queued(waiter, first_busy))
        })
        .await
    }

    /// Begins a transaction and reads the set's rows in order, each
    /// row-locked as `locking` says; creates missing rows first (once).
    /// `None` when a `NOWAIT` read met a row another transaction holds
    /// (rolled back: contended).
    async fn read_set(
        &self,
        set: &[LockRef],
        locking: Locking,
        budget: super::Budget,
    ) -> Result<Option<(Conn, Rows)>, EngineError> {
        let mut inserted = false;
        // Twice at most: a row still missing after the inserts is an error.
        loop {
            let mut tx = self.begin(budget).await?;
            let mut rows = Vec::with_capacity(set.len());
            let mut missing = Vec::new();
            for lock in set {
                match locks::select(&mut tx, lock.row(), locking).await {
                    Ok(Some(row)) => rows.push(LeaseRow::of_lock(row)),
                    Ok(None) => missing.push(lock),
                    Err(err)
                        if locking == Locking::NoWait
                            && store::classify(&err) == Failure::RowLocked =>
                    {
                        tx.rollback().await?;
                        return Ok(None);
                    }
                    Err(err) => return Err(err.into()),
                }
            }
            if missing.is_empty() {
                return Ok(Some((tx, rows)));
            }
            tx.rollback().await?;
            drop(tx);
            if inserted {
                return Err(sqlx::Error::RowNotFound.into());
            }
            let mut conn = self.conn(budget).await?;
            for lock in missing {
                // Idempotent: a lost answer is simply tried again.
                locks::insert_missing(&mut conn, lock.row()).await?;
            }
            conn.done();
            inserted = true;
        }
    }

    /// Writes every lease of the set and commits. A commit whose outcome
    /// cannot be found out is answered 503; its new grants are then given
    /// back in the background (a release of a grant that never committed
    /// changes nothing).
    async fn commit_set(
        &self,
        mut tx: Conn,
        set: &[LockRef],
        leases: Vec<Lease>,
    ) -> Result<Try, EngineError> {
        for (lock, lease) in set.iter().zip(&leases) {
            seat::write(&mut tx, lock, lease).await?;
        }
        // One commit for all: the first key's row tells whether it happened.
        match self.commit(tx, &set[0], Expect::lease(&leases[0])).await {
            Ok(()) => {}
            Err(err @ EngineError::Unavailable(DbFailure::Unknown)) => {
                self.give_back_later(set, &leases);
                return Err(err);
            }
            Err(err) => return Err(err),
        }
        for (lock, lease) in set.iter().zip(&leases) {
            self.count_grant(lock, if lease.fresh { "direct" } else { "reentry" });
        }
        Ok(Try::Granted(leases))
    }

    /// Gives back, in the background, the new grants of a set whose commit
    /// was answered 503.
    fn give_back_later(&self, set: &[LockRef], leases: &[Lease]) {
        for (lock, lease) in set.iter().zip(leases).filter(|(_, l)| l.fresh) {
            let (engine, lock, owner, token) =
                (self.clone(), lock.clone(), lease.owner.clone(), lease.token);
            tokio::spawn(async move {
                engine.give_back(&lock, Seat::Whole, &owner, token).await;
            });
        }
    }

    /// Extends every lease of `held` (lock, token) of `owner` to `ttl_ms`
    /// from now, all or none.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when any of them is not live (nothing
    /// changes); [`EngineError::DuplicateKey`];
    /// [`EngineError::Unavailable`].
    pub fn multi_renew(
        &self,
        held: Vec<(LockRef, u64)>,
        owner: &str,
        ttl_ms: u64,
    ) -> Op<Vec<(LockRef, Grant)>> {
        let (engine, owner) = (self.clone(), owner.to_owned());
        finish(move |_| async move {
            let held = held_in_lock_order(held)?;
            let set: Vec<LockRef> = held.iter().map(|(l, _)| l.clone()).collect();
            let budget = engine.budget();
            let leases = engine
                .retry(budget, || async {
                    let Some((mut tx, rows)) = engine.read_set(&set, Locking::Wait, budget).await?
                    else {
                        return Err(EngineError::LeaseLost);
                    };
                    let mut leases = Vec::with_capacity(held.len());
                    for ((lock, token), (_, row)) in held.iter().zip(&rows) {
                        if !row.owned_by(&owner, *token) {
                            tx.rollback().await?;
                            return Err(EngineError::LeaseLost);
                        }
                        if row.session.is_some() {
                            tx.rollback().await?;
                            return Err(EngineError::InSession);
                        }
                        let lease = Lease {
                            seat: Seat::Whole,
                            owner: owner.clone(),
                            token: *token,
                            hold_count: row.hold_count,
                            ttl_ms,
                            expires_at: plus_ms(row.now, ttl_ms),
                            fresh: false,
                            session: None,
                        };
                        seat::write(&mut tx, lock, &lease).await?;
                        leases.push(lease);
                    }
                    engine
                        .commit(tx, &set[0], Expect::lease(&leases[0]))
                        .await?;
                    Ok(leases)
                })
                .await?;
            Ok(set.into_iter().zip(leases).collect())
        })
    }

    /// Releases one hold of each lease of `held` (lock, token) that
    /// `owner` still holds, in one transaction; each key's last hold hands
    /// it to its next waiter, as a single release does. Keys no longer
    /// held by that token are left alone (`None`).
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when none of them is held (nothing
    /// changes); [`EngineError::DuplicateKey`];
    /// [`EngineError::Unavailable`].
    pub fn multi_release(&self, held: Vec<(LockRef, u64)>, owner: &str) -> Op<MultiRelease> {
        let (engine, owner) = (self.clone(), owner.to_owned());
        finish(move |_| async move {
            let held = held_in_lock_order(held)?;
            let set: Vec<LockRef> = held.iter().map(|(l, _)| l.clone()).collect();
            let budget = engine.budget();
            let results = engine
                .retry(budget, || async {
                    let Some((mut tx, rows)) = engine.read_set(&set, Locking::Wait, budget).await?
                    else {
                        return Err(EngineError::LeaseLost);
                    };
                    let mut results = Vec::with_capacity(held.len());
                    let mut deliveries = Vec::new();
                    let mut expect = None;
                    for ((lock, token), (queued, row)) in held.iter().zip(&rows) {
                        if !row.owned_by(&owner, *token) {
                            results.push(None);
                            continue;
                        }
                        if row.hold_count > 1 {
                            let lease = row.less_one_hold(&owner);
                            seat::write(&mut tx, lock, &lease).await?;
                            expect.get_or_insert((lock, Expect::lease(&lease)));
                            results.push(Some(Released {
                                released: false,
                                hold_count: lease.hold_count,
                            }));
                            continue;
                        }
                        let mut queued = *queued;
                        history::note(&mut tx, lock, EventKind::Released, &owner, *token, row.now);
                        deliveries.extend(engine.hand_on(&mut tx, lock, row, &mut queued).await?);
                        let ended = Expect::Ended {
                            seat: Seat::Whole,
                            token: *token,
                        };
                        expect.get_or_insert((lock, ended));
                        results.push(Some(Released {
                            released: true,
                            hold_count: 0,
                        }));
                    }
                    let Some((lock, expect)) = expect else {
                        tx.rollback().await?;
                        return Err(EngineError::LeaseLost);
                    };
                    engine.commit(tx, lock, expect).await?;
                    engine.deliver(deliveries);
                    Ok(results)
                })
                .await?;
            Ok(set.into_iter().zip(results).collect())
        })
    }
}

/// The set in storage-key byte order, the one order every transaction over
/// several lock rows takes them in.
///
/// # Errors
/// [`EngineError::DuplicateKey`] when two keys name one storage key.
fn in_lock_order(mut set: Vec<LockRef>) -> Result<Vec<LockRef>, EngineError> {
    set.sort_by(|a, b| a.storage_key.as_bytes().cmp(b.storage_key.as_bytes()));
    if let Some(pair) = set
        .windows(2)
        .find(|w| w[0].storage_key == w[1].storage_key)
    {
        return Err(EngineError::DuplicateKey {
            key: pair[1].key.clone(),
            storage_key: pair[1].storage_key.clone(),
        });
    }
    Ok(set)
}

/// [`in_lock_order`] for (lock, token) pairs.
fn held_in_lock_order(held: Vec<(LockRef, u64)>) -> Result<Vec<(LockRef, u64)>, EngineError> {
    let (set, tokens): (Vec<LockRef>, Vec<u64>) = held.into_iter().unzip();
    let mut paired: Vec<(LockRef, u64)> = set.into_iter().zip(tokens).collect();
    paired.sort_by(|a, b| a.0.storage_key.as_bytes().cmp(b.0.storage_key.as_bytes()));
    let ordered = in_lock_order(paired.iter().map(|(l, _)| l.clone()).collect())?;
    Ok(ordered
        .into_iter()
        .zip(paired.into_iter().map(|(_, t)| t))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Kind;

    fn lock(key: &str, storage_key: &str) -> LockRef {
        crate::engine::fixtures::lock(Kind::Lock, key, storage_key)
    }

    #[test]
    fn sets_are_taken_in_storage_key_byte_order() {
        let set = vec![
            lock("b", "b"),
            lock("B", "B"),
            lock("a ", "a "),
            lock("a", "a"),
        ];
        let keys: Vec<String> = in_lock_order(set)
            .unwrap()
            .into_iter()
            .map(|l| l.storage_key)
            .collect();
        assert_eq!(keys, ["B", "a", "a ", "b"]);
    }

    #[test]
    fn two_keys_naming_one_storage_key_are_refused() {
        let err = in_lock_order(vec![lock("x", "team/x"), lock("X", "team/x")]).unwrap_err();
        assert!(
            matches!(&err, EngineError::DuplicateKey { storage_key, .. } if storage_key == "team/x"),
            "{err}"
        );
        assert!(in_lock_order(vec![lock("x", "x"), lock("X", "X")]).is_ok());
    }

    #[test]
    fn tokens_follow_their_keys_into_lock_order() {
        let held = held_in_lock_order(vec![(lock("z", "z"), 9), (lock("m", "m"), 4)]).unwrap();
        let pairs: Vec<(String, u64)> = held.into_iter().map(|(l, t)| (l.key, t)).collect();
        assert_eq!(pairs, [("m".to_owned(), 4), ("z".to_owned(), 9)]);
    }
}
