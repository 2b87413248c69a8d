//! What every lease does, whatever its [`Seat`]: the outcome of a try
//! (granted, busy, queued) turned into an answer, release, renewal, the
//! handoff of a freed lease to the next waiter, and the reaping of expired
//! leases. `lock` and `semaphore` only find a seat for a try; the rest is
//! here, once.
//!
//! Each operation is one short transaction on the key's header and the
//! seat's row, decided by the database clock read with the row. Nothing is
//! reported granted or released before the commit returns.

use super::{
    delay,
    detach::Departure,
    heat, history, plus_ms,
    queue::{Delivery, Queued},
    seat::{self, Lease, LeaseRow, Seat},
    settle::Expect,
    Budget, DbFailure, Engine, EngineError, Handoff, LockRef, Released,
};
use crate::store::{self, history::EventKind, locks, pool::Conn, Failure, Kind, Locking};

/// One try at a lease.
pub(super) enum Attempt {
    Granted(Lease),
    /// Not grantable now (held, every slot taken, or queued waiters go
    /// first): milliseconds left on the lease and queue length, for the
    /// backoff hint (0 when unknown).
    Busy {
        remaining_ms: u64,
        queued: u32,
    },
    /// Joined the queue.
    Queued(Queued),
    /// Free, but not grantable before its lock-delay or minimum hold ends,
    /// in `retry_after_ms`.
    Delayed {
        retry_after_ms: u64,
    },
}

/// What an acquire asks for: who, for how long, how long it may wait in
/// the queue (0: one try, never waiting), and how urgent it is to the
/// tenant's fairness policy. A renewal asks for `ttl_ms` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub owner: String,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub priority: i32,
    /// The session to hold the lease in (locks only): then `ttl_ms` is
    /// [`super::seat::SESSION_LEASE_TTL_MS`] and the lease lives as long as
    /// the session.
    pub session: Option<String>,
}

impl Ask {
    /// `owner` asks for `ttl_ms`, trying once, at priority 0.
    pub fn new(owner: impl Into<String>, ttl_ms: u64) -> Ask {
        Ask {
            owner: owner.into(),
            ttl_ms,
            wait_ms: 0,
            priority: 0,
            session: None,
        }
    }

    /// Held in `session` (its lease lives as long as the session).
    #[must_use]
    pub fn in_session(self, session: impl Into<String>) -> Ask {
        Ask {
            session: Some(session.into()),
            ttl_ms: super::seat::SESSION_LEASE_TTL_MS,
            ..self
        }
    }

    /// Waiting up to `wait_ms` in the queue.
    #[must_use]
    pub fn wait(self, wait_ms: u64) -> Ask {
        Ask { wait_ms, ..self }
    }

    /// At `priority` (higher is more urgent to policies that use it).
    #[must_use]
    pub fn priority(self, priority: i32) -> Ask {
        Ask { priority, ..self }
    }

    /// The borrowed view the engine's steps pass along.
    pub(super) fn wish(&self) -> Wish<'_> {
        Wish {
            owner: &self.owner,
            ttl_ms: self.ttl_ms,
            wait_ms: self.wait_ms,
            priority: self.priority,
            session: self.session.as_deref(),
        }
    }
}

/// An [`Ask`], borrowed: what the steps of an acquire pass along.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wish<'a> {
    pub owner: &'a str,
    pub ttl_ms: u64,
    /// 0: one try, never waiting.
    pub wait_ms: u64,
    pub priority: i32,
    /// The session to hold the lease in.
    pub session: Option<&'a str>,
}

impl Expect {
    /// What a commit of `lease` leaves in its seat.
    pub(super) fn lease(lease: &Lease) -> Expect {
        Expect::Lease {
            seat: lease.seat,
            owner: lease.owner.clone(),
            token: lease.token,
            hold_count: lease.hold_count,
            expires_at: lease.expires_at,
            fresh: lease.fresh,
        }
    }
}

impl Engine {
    /// The answer to an attempt: a grant, a refusal made by `busy` from the
    /// backoff hint, or (queued) the handoff awaited up to `wait_ms`. A
    /// grant whose caller has left is given back.
    ///
    /// # Errors
    /// `busy(retry_after_ms)`; [`EngineError::ShuttingDown`] when the broker
    /// stops or the caller left; [`EngineError::Unavailable`].
    pub(super) async fn conclude(
        &self,
        lock: &LockRef,
        attempt: Attempt,
        wish: Wish<'_>,
        departure: &mut Departure,
        busy: fn(u64) -> EngineError,
    ) -> Result<Lease, EngineError> {
        let lease = match attempt {
            Attempt::Granted(lease) => lease,
            Attempt::Busy {
                remaining_ms,
                queued,
            } => {
                self.heat.saw(lock, heat::Seen::Refused);
                return Err(busy(self.retry_after(lock, queued, remaining_ms, 0).await));
            }
            Attempt::Delayed { retry_after_ms } => {
                self.heat.saw(lock, heat::Seen::Refused);
                return Err(busy(retry_after_ms));
            }
            Attempt::Queued(queued) => {
                match self
                    .await_handoff(lock, queued, wish.wait_ms, departure)
                    .await?
                {
                    Some(handoff) => {
                        self.count_grant(lock, "handoff");
                        handed(wish, handoff)
                    }
                    None => {
                        self.heat.saw(lock, heat::Seen::Refused);
                        let hint = self.retry_after(lock, 0, 0, wish.wait_ms).await;
                        return Err(busy(hint));
                    }
                }
            }
        };
        if departure.gone() {
            // Nobody will receive it: give it back. A re-entered lock gives
            // back its one hold; a leader campaigning again keeps its term,
            // an owner asking again keeps its permit.
            if lease.fresh || lock.kind == Kind::Lock {
                self.give_back(lock, lease.seat, wish.owner, lease.token)
                    .await;
            }
            return Err(EngineError::ShuttingDown);
        }
        Ok(lease)
    }

    /// Records how long an acquire took from its request to its grant
    /// (queueing included), by resource kind.
    pub(super) fn time_grant(&self, lock: &LockRef, started: tokio::time::Instant) {
        self.heat.saw(lock, heat::Seen::Granted(started.elapsed()));
        let kind = lock.kind.name();
        self.metrics.observe(
            "lockbroker_grant_latency_seconds",
            &[("tenant", &lock.tenant), ("kind", kind)],
            started.elapsed().as_secs_f64(),
        );
    }

    /// Counts a grant of a lock or election by how it came (`direct`,
    /// `reentry`, `handoff`); permits and rwlock leases are not counted as
    /// lock grants.
    pub(super) fn count_grant(&self, lock: &LockRef, via: &str) {
        if via == "handoff" {
            self.heat.saw(lock, heat::Seen::HandedOff);
        }
        if matches!(lock.kind, Kind::Lock | Kind::Election) {
            self.metrics.inc(
                "lockbroker_lock_grants_total",
                &[("tenant", &lock.tenant), ("via", via)],
            );
        }
    }

    /// Writes `lease` and commits the try's transaction.
    pub(super) async fn commit_grant(
        &self,
        mut tx: Conn,
        lock: &LockRef,
        lease: Lease,
    ) -> Result<Attempt, EngineError> {
        seat::write(&mut tx, lock, &lease).await?;
        if let Some(e) = history::granted(lock, &lease).filter(|_| lease.fresh) {
            tx.note(e);
        }
        self.commit(tx, lock, Expect::lease(&lease)).await?;
        self.count_grant(lock, if lease.fresh { "direct" } else { "reentry" });
        Ok(Attempt::Granted(lease))
    }

    /// The end of a try that holds the key's header and could not grant:
    /// joins the queue (`wait_ms` > 0) or answers busy. Commits what the
    /// transaction wrote (the handoffs it made, `handed` saying what they
    /// leave), then delivers them.
    pub(super) async fn refuse_or_enqueue(
        &self,
        mut tx: Conn,
        lock: &LockRef,
        wish: Wish<'_>,
        busy: (u64, u32),
        deliveries: Vec<Delivery>,
        handed: Expect,
    ) -> Result<Attempt, EngineError> {
        let (remaining_ms, queued) = busy;
        if wish.wait_ms == 0 {
            if deliveries.is_empty() {
                // Nothing was written.
                tx.rollback().await?;
            } else {
                self.commit(tx, lock, handed).await?;
                self.deliver(deliveries);
            }
            return Ok(Attempt::Busy {
                remaining_ms,
                queued,
            });
        }
        let waiter = self.enqueue(&mut tx, lock, wish).await?;
        // If this fails, dropping `waiter` takes it out again.
        self.commit(tx, lock, Expect::Waiter { id: waiter.id() })
            .await?;
        self.deliver(deliveries);
        Ok(Attempt::Queued(waiter))
    }

    /// Hands the freed seat `row` to the next eligible waiter, or frees it
    /// (clearing out stale waiters). The caller holds the key's header
    /// (whose count of pending waiters `queued` is kept up to date) and the
    /// row, commits, then delivers.
    pub(super) async fn hand_on(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        row: &LeaseRow,
        queued: &mut u32,
    ) -> Result<Option<Delivery>, EngineError> {
        self.hand_on_marked(conn, lock, row, queued, None).await
    }

    /// [`Engine::hand_on`] for the release marked `released_by` (see
    /// [`Engine::release_seat`]).
    pub(super) async fn hand_on_marked(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        row: &LeaseRow,
        queued: &mut u32,
        released_by: Option<u64>,
    ) -> Result<Option<Delivery>, EngineError> {
        history::note_expired(conn, lock, row);
        if let Some(standby) = row.standby.as_deref() {
            let here = standby == self.broker.as_bytes();
            if !here || self.held_here.is_marked(lock) {
                // Waiters in a broker's memory (`standby`): that broker
                // hands the key on when its tick finds the row free,
                // to them or to older waiters of the queue.
                if row.owner.is_some() {
                    seat::free(conn, lock, row, released_by).await?;
                }
                return Ok(None);
            }
            // This broker's own mark, which it no longer stands behind.
            locks::clear_standby(conn, lock.row(), &self.broker).await?;
        }
        // Under a lock-delay or minimum hold, waiters wait for its end (a
        // timer hands the key on then).
        let blocked = delay::blocked_until(row, lock.delays);
        let chosen = if *queued > 0 && blocked.is_none() {
            self.choose_live(conn, lock, queued).await?
        } else {
            None
        };
        let Some(waiter) = chosen else {
            match blocked {
                Some(until) if *queued > 0 => {
                    self.hand_on_later(lock, delay::ms_until(row, until));
                }
                None if *queued > 0 => {
                    *queued = queued.saturating_sub(self.purge(conn, lock).await?);
                }
                _ => {}
            }
            // A seat already free has nothing to write (a blocked key the
            // reaper meets again).
            if row.owner.is_some() {
                seat::free(conn, lock, row, released_by).await?;
            }
            return Ok(None);
        };
        let lease = Lease {
            seat: row.seat,
            owner: String::from_utf8_lossy(&waiter.owner).into_owned(),
            token: row.token + 1,
            hold_count: 1,
            ttl_ms: waiter.ttl_ms,
            expires_at: plus_ms(row.now, waiter.ttl_ms),
            fresh: true,
            session: waiter
                .session
                .as_deref()
                .map(|s| String::from_utf8_lossy(s).into_owned()),
        };
        seat::write_marked(conn, lock, &lease, released_by).await?;
        history::note_in(
            conn,
            lock,
            EventKind::HandedOff,
            (&lease.owner, lease.token),
            row.now,
            waiter.session.as_deref(),
        );
        let delivery = self.record_handoff(conn, lock, waiter, &lease).await?;
        *queued = queued.saturating_sub(1);
        Ok(Some(delivery))
    }

    /// Hands free or expired seats to eligible waiters while there are
    /// any; when none is eligible, stale waiters are cleared out. Bounded
    /// by `queued`, which each handoff lowers. The caller holds the header.
    pub(super) async fn fill(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        queued: &mut u32,
    ) -> Result<Vec<Delivery>, EngineError> {
        let mut deliveries = Vec::new();
        while *queued > 0 {
            let Some(row) = seat::free_one(conn, lock).await? else {
                break;
            };
            match self.hand_on(conn, lock, &row, queued).await? {
                Some(delivery) => deliveries.push(delivery),
                None => break,
            }
        }
        Ok(deliveries)
    }

    /// Releases one hold of `owner`'s lease in `seat` with `token`; the
    /// last hold hands it to the next waiter, if any.
    ///
    /// Every write of the release marks the row with a number of its own
    /// (`released_by`), so an attempt that must be tried again (its
    /// statement or COMMIT answered an error) learns from the row whether an
    /// earlier attempt committed after all, and answers that instead of
    /// `409`: on Galera a release was seen to take effect while its answer
    /// said otherwise.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that lease is not live (nothing
    /// changes); [`EngineError::Unavailable`].
    pub(super) async fn release_seat(
        &self,
        lock: &LockRef,
        seat: Seat,
        owner: &str,
        token: u64,
        mark: u64,
    ) -> Result<Released, EngineError> {
        self.release_seat_by(lock, seat, owner, token, mark, self.budget())
            .await
    }

    /// [`Engine::release_seat`] within `budget`.
    pub(super) async fn release_seat_by(
        &self,
        lock: &LockRef,
        seat: Seat,
        owner: &str,
        token: u64,
        mark: u64,
        budget: Budget,
    ) -> Result<Released, EngineError> {
        let freed = Released {
            released: true,
            hold_count: 0,
        };
        if self
            .release_alone(lock, seat, owner, token, mark, budget)
            .await?
        {
            return Ok(freed);
        }
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let read = seat::read_with_header(&mut tx, lock, seat).await?;
            if let Some((_, row)) = read.as_ref().filter(|(_, row)| row.released_by == Some(mark)) {
                // An earlier attempt of this release committed, though it
                // answered otherwise.
                tx.rollback().await?;
                tracing::warn!(key = %lock.storage_key, owner, token, "a release found that its earlier attempt had committed");
                self.metrics.inc("lockbroker_releases_found_committed_total", &[]);
                return Ok(if row.owned_by(owner, token) {
                    Released {
                        released: false,
                        hold_count: row.hold_count,
                    }
                } else {
                    freed
                });
            }
            let Some((mut queued, row)) = read.filter(|(_, row)| row.owned_by(owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            if row.hold_count > 1 {
                let hold_count = self.release_one_hold(tx, lock, &row, owner, mark).await?;
                return Ok(Released {
                    released: false,
                    hold_count,
                });
            }
            let session = row.session.as_deref();
            history::note_in(&mut tx, lock, EventKind::Released, (owner, token), row.now, session);
            let delivery = self
                .hand_on_marked(&mut tx, lock, &row, &mut queued, Some(mark))
                .await?;
            self.commit(tx, lock, Expect::Ended { seat, token }).await?;
            self.deliver(delivery);
            Ok(freed)
        })
        .await
    }

    /// Releases one of `owner`'s several holds of `row` (the caller holds
    /// the row; its `hold_count` is over 1), marked `mark`, and commits:
    /// the holds left.
    pub(super) async fn release_one_hold(
        &self,
        mut tx: Conn,
        lock: &LockRef,
        row: &LeaseRow,
        owner: &str,
        mark: u64,
    ) -> Result<u32, EngineError> {
        let lease = row.less_one_hold(owner);
        seat::write_marked(&mut tx, lock, &lease, Some(mark)).await?;
        self.commit(tx, lock, Expect::lease(&lease)).await?;
        Ok(lease.hold_count)
    }

    /// The common case of a release, a sole hold and nobody waiting, in one
    /// statement that does not serialize on the header (for a lock, with
    /// its `released` event in the same short transaction); false when it
    /// is not that case (re-entry, waiters, a lost lease, a collision): the
    /// full transaction follows.
    async fn release_alone(
        &self,
        lock: &LockRef,
        seat: Seat,
        owner: &str,
        token: u64,
        mark: u64,
        budget: Budget,
    ) -> Result<bool, EngineError> {
        let Some(released) =
            history::event(lock, EventKind::Released, owner.as_bytes(), token, None)
        else {
            // An election: no history, one autocommit statement.
            let mut conn = self.conn(budget).await?;
            return match seat::free_alone(&mut conn, lock, seat, owner, token, mark).await {
                Ok(done) => {
                    conn.done();
                    Ok(done)
                }
                Err(err) => self.alone_failed(conn, err, lock, seat, token).await,
            };
        };
        // A lock: the release and its event in one transaction. Whatever
        // fails here before its commit is tried again by the full path
        // (which retries collisions within the budget): on Galera a
        // transaction aborted by a replicated write fails its next
        // statement with 1213, whichever it is.
        let mut tx = match self.begin(budget).await {
            Ok(tx) => tx,
            Err(err) if err.retry().is_some() => return Ok(false),
            Err(err) => return Err(err),
        };
        match seat::free_alone(&mut tx, lock, seat, owner, token, mark).await {
            Ok(true) => {
                tx.note(released);
                match self.commit(tx, lock, Expect::Ended { seat, token }).await {
                    Ok(()) => Ok(true),
                    // Not committed (a collision, or a lost answer found not
                    // to have happened): the full path follows.
                    Err(err) if err.retry().is_some() => Ok(false),
                    Err(err) => Err(err),
                }
            }
            Ok(false) => {
                // A failed rollback closes the connection on drop.
                let _ = tx.rollback().await;
                Ok(false)
            }
            Err(err) if store::classify(&err) == Failure::Other => Err(err.into()),
            // A collision or a broken connection before the commit:
            // nothing happened, the full path follows (a broken
            // connection fails its rollback and is closed).
            Err(_) => {
                let _ = tx.rollback().await;
                Ok(false)
            }
        }
    }

    /// The failure `err` of [`Engine::release_alone`]'s autocommit
    /// statement: found out if the connection broke, the full path after a
    /// collision.
    async fn alone_failed(
        &self,
        conn: Conn,
        err: sqlx::Error,
        lock: &LockRef,
        seat: Seat,
        token: u64,
    ) -> Result<bool, EngineError> {
        match err {
            err if store::classify(&err) == Failure::Disconnected => {
                match self
                    .find_out(conn, err, lock, Expect::Ended { seat, token })
                    .await
                {
                    Ok(()) => Ok(true),
                    Err(EngineError::Unavailable(DbFailure::NotCommitted)) => Ok(false),
                    Err(err) => Err(err),
                }
            }
            err if store::classify(&err) == Failure::Other => Err(err.into()),
            // A collision: the full path waits its turn.
            _ => Ok(false),
        }
    }

    /// Extends `owner`'s live lease in `seat` with `token` to `ttl_ms` from
    /// now (by the database clock).
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once the lease has expired, even if nobody
    /// took it since.
    pub(super) async fn renew_seat(
        &self,
        lock: &LockRef,
        seat: Seat,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<Lease, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let row = seat::read(&mut tx, lock, seat).await?;
            let Some(row) = row.filter(|r| r.owned_by(owner, token)) else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            if row.session.is_some() {
                // It lives as long as its session: nothing to renew.
                tx.rollback().await?;
                return Err(EngineError::InSession);
            }
            let lease = Lease {
                seat,
                owner: owner.to_owned(),
                token,
                hold_count: row.hold_count,
                ttl_ms,
                expires_at: plus_ms(row.now, ttl_ms),
                fresh: false,
                session: None,
            };
            seat::write(&mut tx, lock, &lease).await?;
            self.commit(tx, lock, Expect::lease(&lease)).await?;
            Ok(lease)
        })
        .await
    }

    /// Releases (hands on) a lease granted to a request that is gone,
    /// trying again a few times if the database is away: otherwise the
    /// lease would only end with its TTL.
    ///
    /// Boxed: a release may hand the lease to a waiter whose request ended
    /// meanwhile, which gives it back in turn (`held_here`), and a future
    /// that contains itself needs a name with its `Send` bound.
    pub(super) fn give_back<'a>(
        &'a self,
        lock: &'a LockRef,
        seat: Seat,
        owner: &'a str,
        token: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(self.give_back_now(lock, seat, owner, token))
    }

    async fn give_back_now(&self, lock: &LockRef, seat: Seat, owner: &str, token: u64) {
        if lock.kind == Kind::RwLock {
            return self.give_back_rw(lock, owner, token).await;
        }
        // One mark for every try: a try whose answer was lost is found out.
        let mark = mark();
        for _ in 0..GIVE_BACK_TRIES {
            let released = if lock.kind == Kind::Lock {
                self.release_lock(lock, owner, token, mark).await
            } else {
                self.release_seat(lock, seat, owner, token, mark).await
            };
            match released {
                Ok(_) | Err(EngineError::LeaseLost) => return,
                Err(err) => {
                    tracing::debug!(error = %err, "could not give back a departed client's lease yet");
                    tokio::time::sleep(self.settings.db_timeout).await;
                }
            }
        }
        // The lease runs out by its TTL and goes to the next waiter then.
        tracing::warn!(key = %lock.storage_key, "could not give back a departed client's lease");
    }

    /// The reaper's work on one key: take back grants that gone brokers
    /// never delivered, hand free or expired seats to eligible waiters,
    /// clear out stale waiters. Skips a key whose header another
    /// transaction (or another broker's reaper) holds.
    pub(super) async fn reap(&self, lock: &LockRef) -> Result<(), EngineError> {
        if lock.kind == Kind::RwLock {
            return self.reap_rw(lock).await;
        }
        self.reap_with(lock, Locking::SkipLocked).await
    }

    /// [`Engine::reap`], taking the key's header as `locking` says (a
    /// timer at the end of a lock-delay waits its turn: `Wait`).
    pub(super) async fn reap_with(
        &self,
        lock: &LockRef,
        locking: Locking,
    ) -> Result<(), EngineError> {
        let budget = self.budget();
        let mut tx = self.begin(budget).await?;
        let Some(mut queued) = seat::header(&mut tx, lock, locking).await? else {
            tx.rollback().await?;
            return Ok(());
        };
        for grant in self.take_back(&mut tx, lock).await? {
            let seat = Seat::from_slot(grant.granted_slot);
            // The seat still holds that undelivered grant: nobody holds it.
            // Freed, it is handed on below.
            if let Some(row) = seat::read(&mut tx, lock, seat).await? {
                if row.token == grant.granted_token
                    && row.owner.as_deref() == Some(&grant.owner[..])
                {
                    // Its `handed_off` was recorded: record its end.
                    if let Some(e) = history::event(
                        lock,
                        EventKind::Released,
                        &grant.owner,
                        grant.granted_token,
                        Some(row.now),
                    ) {
                        tx.note(e);
                    }
                    seat::free(&mut tx, lock, &row, None).await?;
                }
            }
        }
        let deliveries = self.fill(&mut tx, lock, &mut queued).await?;
        if queued > 0 {
            // Every seat is held: still clear out waiters that cannot take one.
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

/// A fresh mark for a release's writes (never 0, so it cannot be mistaken
/// for a row never released).
pub(super) fn mark() -> u64 {
    rand::random::<u64>() | 1
}

/// Rounds of database budget a departed client's lease gets to be given back.
pub(super) const GIVE_BACK_TRIES: u32 = 5;

/// The lease a handoff granted to the waiter `wish`.
pub(super) fn handed(wish: Wish<'_>, handoff: Handoff) -> Lease {
    Lease {
        seat: handoff.seat,
        owner: wish.owner.to_owned(),
        token: handoff.token,
        hold_count: 1,
        ttl_ms: wish.ttl_ms,
        expires_at: handoff.expires_at,
        fresh: true,
        session: wish.session.map(str::to_owned),
    }
}
