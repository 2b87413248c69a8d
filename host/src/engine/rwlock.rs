//! Reader-writer locks: many readers or one writer per key.
//!
//! One header row per key (`rwlocks`) holds the token counter, the writer's
//! lease and the queue count; each reader's lease is a row of its own
//! (`rwlock_readers`). Every operation is one short transaction that locks
//! the header first (`FOR UPDATE`), then reads or writes the readers: one
//! lock order, and the header serializes grants, so the rules below are
//! decided on a consistent picture by the database clock read with it.
//!
//! - A read is granted when no writer holds the key *and nobody is
//!   queued*; a write when nobody holds it and nobody is queued. So a
//!   queued writer blocks new readers (they queue behind it) and writers
//!   are not starved by a stream of readers.
//! - Tokens: one counter per key, +1 for every grant, read or write, so
//!   tokens strictly increase per key across both modes (a reader's token
//!   orders it against every writer before and after it).
//! - Waiters are rows of the shared queue (`waiters`, kind 3, with their
//!   `mode`), ordered by the tenant's fairness policy, delivered and
//!   cleaned up by the same machinery as locks' (`queue`). When the key
//!   frees up, the transaction that freed it hands it on: the next waiter
//!   by fairness; if it is a reader, every next reader up to the next
//!   writer is granted with it, in the same transaction.
//! - A grant is written to the reader's row or the header's writer
//!   columns, never into a seat: rwlocks do not use `seat`'s lease rows;
//!   their handoffs go through `waiters` with `Seat::Whole` (no slot).
//! - No upgrades or downgrades: an owner holding a read that asks for a
//!   write waits like anyone else (until its read ends). The same owner
//!   asking again for the mode it holds gets its lease back renewed, same
//!   token (like a semaphore's permit).
//!
//! Every transaction writes a fresh mark of its own into the header
//! (`changed_by`; a release, its request's mark on every attempt), so a
//! COMMIT whose answer was lost is found out by reading it back
//! (`Expect::Marked`, `settle`): committed, answered as such; not, tried
//! again; unknown, `503`, and a new grant found later to have committed is
//! given back.
//!
//! Read acquires, releases and renewals of one key that arrive while a
//! transaction of that key runs in this broker are served together by the
//! next one (`rw_batch`): readers of a hot key share a header lock and a
//! commit instead of queueing on the header one transaction each. Each is
//! decided there by the rules above, on the state the ones before it left;
//! what does not fit (writes, a read that must queue) takes its own
//! transaction here, the individual path, which is also the fallback.

use chrono::NaiveDateTime;

use super::{
    detach::{finish, Departure},
    history,
    lease::{mark, Attempt, Wish},
    plus_ms,
    queue::Delivery,
    rw_batch::Combined,
    seat::{Lease, Seat},
    session::EndReason,
    settle::Expect,
    Ask, Budget, Engine, EngineError, LockRef, Op,
};
use crate::store::{
    self,
    history::EventKind,
    pool::Conn,
    rwlocks::{self, HeaderRow, ReaderRow},
    sessions::HeldRow,
    waiters::{self, Undelivered},
    Locking,
};

/// What a rwlock acquire asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwMode {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

impl RwMode {
    /// The `waiters.mode` code.
    fn code(self) -> u8 {
        match self {
            RwMode::Read => 0,
            RwMode::Write => 1,
        }
    }

    /// The mode a `waiters.mode` code names.
    pub(super) fn of_code(code: Option<u8>) -> RwMode {
        if code == Some(1) {
            RwMode::Write
        } else {
            RwMode::Read
        }
    }
}

/// A rwlock lease granted (or renewed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwGrant {
    pub owner: String,
    pub mode: RwMode,
    /// Strictly increases with every grant of this key, read or write.
    pub token: u64,
    pub ttl_ms: u64,
    pub expires_at: NaiveDateTime,
    /// Live readers right after this grant (this one included; 0 for a write).
    pub readers: u32,
    /// A new grant, not the owner's live lease handed back renewed.
    pub fresh: bool,
}

/// A live holder, as `GET /v1/rwlocks/{key}` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwHolder {
    pub owner: String,
    pub token: u64,
    /// Its session's expiry for a lease held in a session.
    pub expires_at: NaiveDateTime,
    /// The session the lease is held in, if it is.
    pub session: Option<String>,
}

/// What `GET /v1/rwlocks/{key}` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwState {
    pub writer: Option<RwHolder>,
    pub readers: Vec<RwHolder>,
    pub waiters: u64,
}

/// A key's state read under its header lock: the header and its live
/// readers, changed in memory as the transaction decides and written back
/// by [`Engine::rw_write`].
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) header: HeaderRow,
    /// Live readers only (expired rows are deleted when read).
    pub(super) readers: Vec<ReaderRow>,
}

/// What a request gets from the state it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// The owner already holds this mode: renewed, same token.
    Renew(u64),
    /// A new grant.
    Grant,
    /// Not now.
    Busy,
}

impl Held {
    pub(super) fn now(&self) -> NaiveDateTime {
        self.header.now
    }

    /// The writer, if its lease is live by the database clock.
    pub(super) fn writer(&self) -> Option<(&[u8], u64, NaiveDateTime)> {
        let h = &self.header;
        match (&h.writer, h.writer_token, h.writer_expires_at) {
            (Some(owner), Some(token), Some(at)) if at > h.now => Some((owner, token, at)),
            _ => None,
        }
    }

    pub(super) fn reader(&self, owner: &str) -> Option<&ReaderRow> {
        self.readers.iter().find(|r| r.owner == owner.as_bytes())
    }

    /// The session `owner`'s live lease in `mode` is held in, if it is.
    pub(super) fn session_of(&self, owner: &str, mode: RwMode) -> Option<&[u8]> {
        match mode {
            RwMode::Write => self.header.writer_session.as_deref(),
            RwMode::Read => self.reader(owner)?.session.as_deref(),
        }
    }

    /// The mode of `owner`'s live lease with `token`, if it has one.
    pub(super) fn held_by(&self, owner: &str, token: u64) -> Option<RwMode> {
        if self
            .writer()
            .is_some_and(|(w, t, _)| w == owner.as_bytes() && t == token)
        {
            Some(RwMode::Write)
        } else if self.reader(owner).is_some_and(|r| r.token == token) {
            Some(RwMode::Read)
        } else {
            None
        }
    }

    /// Whether `owner` may have `mode` now, held in `session` if `Some`
    /// (see the module docs). Its own lease is handed back renewed only
    /// within the same session (or none): held in another, it is another
    /// holder's, and the key busy.
    pub(super) fn decide(&self, owner: &str, mode: RwMode, session: Option<&str>) -> Decision {
        let writer = self.writer();
        let same = |held: Option<&[u8]>| held == session.map(str::as_bytes);
        match mode {
            RwMode::Write => match writer {
                Some((w, token, _))
                    if w == owner.as_bytes() && same(self.header.writer_session.as_deref()) =>
                {
                    Decision::Renew(token)
                }
                None if self.readers.is_empty() && self.header.queued == 0 => Decision::Grant,
                _ => Decision::Busy,
            },
            RwMode::Read => match self.reader(owner) {
                Some(r) if writer.is_none() && same(r.session.as_deref()) => {
                    Decision::Renew(r.token)
                }
                Some(_) => Decision::Busy,
                None if writer.is_none() && self.header.queued == 0 => Decision::Grant,
                None => Decision::Busy,
            },
        }
    }

    /// Milliseconds until the key may free up (the longest live lease),
    /// for the backoff hint.
    pub(super) fn remaining_ms(&self) -> u64 {
        let last = self
            .readers
            .iter()
            .map(|r| r.expires_at)
            .chain(self.writer().map(|(_, _, at)| at))
            .max();
        last.map_or(0, |at| {
            u64::try_from((at - self.now()).num_milliseconds()).unwrap_or(0)
        })
    }

    /// Grants `mode` to `owner` for `ttl_ms` with the next token, held in
    /// `session` if `Some`, in memory; the lease (the caller writes a
    /// reader's row).
    pub(super) fn grant(
        &mut self,
        owner: &str,
        mode: RwMode,
        ttl_ms: u64,
        session: Option<&str>,
    ) -> Lease {
        self.header.token += 1;
        let lease = Lease {
            seat: Seat::Whole,
            owner: owner.to_owned(),
            token: self.header.token,
            hold_count: 1,
            ttl_ms,
            expires_at: plus_ms(self.now(), ttl_ms),
            fresh: true,
            session: session.map(str::to_owned),
        };
        self.set(mode, &lease);
        lease
    }

    /// Puts `lease` in `mode` into the in-memory state.
    pub(super) fn set(&mut self, mode: RwMode, lease: &Lease) {
        match mode {
            RwMode::Write => {
                self.header.writer = Some(lease.owner.clone().into_bytes());
                self.header.writer_token = Some(lease.token);
                self.header.writer_expires_at = Some(lease.expires_at);
                self.header.writer_session = lease.session.clone().map(String::into_bytes);
            }
            RwMode::Read => {
                self.readers.retain(|r| r.owner != lease.owner.as_bytes());
                self.readers.push(ReaderRow {
                    owner: lease.owner.clone().into_bytes(),
                    token: lease.token,
                    expires_at: lease.expires_at,
                    session: lease.session.clone().map(String::into_bytes),
                });
            }
        }
    }

    pub(super) fn readers_now(&self) -> u32 {
        u32::try_from(self.readers.len()).unwrap_or(u32::MAX)
    }

    /// Ends `owner`'s lease in `mode`, in memory (the caller deletes a
    /// reader's row).
    pub(super) fn end(&mut self, owner: &str, mode: RwMode) {
        match mode {
            RwMode::Write => {
                self.header.writer = None;
                self.header.writer_token = None;
                self.header.writer_expires_at = None;
                self.header.writer_session = None;
            }
            RwMode::Read => self.readers.retain(|r| r.owner != owner.as_bytes()),
        }
    }
}

fn lock_held(retry_after_ms: u64) -> EngineError {
    EngineError::LockHeld { retry_after_ms }
}

impl RwGrant {
    pub(super) fn new(lease: Lease, mode: RwMode, readers: u32) -> RwGrant {
        RwGrant {
            owner: lease.owner,
            mode,
            token: lease.token,
            ttl_ms: lease.ttl_ms,
            expires_at: lease.expires_at,
            readers: if mode == RwMode::Write { 0 } else { readers },
            fresh: lease.fresh,
        }
    }
}

impl Engine {
    /// Takes `lock` (a rwlock) in `mode` as `ask` asks, waiting in the
    /// queue up to its `wait_ms` (0: one try). Runs to its end even if the caller
    /// leaves; a grant nobody receives is given back.
    ///
    /// # Errors
    /// [`EngineError::LockHeld`], [`EngineError::TooManyWaiters`],
    /// [`EngineError::ShuttingDown`], [`EngineError::Unavailable`].
    pub fn acquire_rw(&self, lock: &LockRef, ask: &Ask, mode: RwMode) -> Op<RwGrant> {
        let (engine, lock, ask) = (self.clone(), lock.clone(), ask.clone());
        finish(move |departure| async move {
            engine
                .acquire_rw_now(&lock, ask.wish(), mode, departure)
                .await
        })
    }

    async fn acquire_rw_now(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        mode: RwMode,
        mut departure: Departure,
    ) -> Result<RwGrant, EngineError> {
        let started = tokio::time::Instant::now();
        // Reads try the key's combined transaction first (`rw_batch`);
        // writes, and reads it sends back, take their own.
        let (attempt, readers) = match self.rw_combined_acquire(lock, wish, mode).await {
            Combined::Done(done) => done?,
            Combined::Alone(budget) => self.rw_attempt(lock, wish, mode, budget).await?,
        };
        let handed = matches!(attempt, Attempt::Queued(_));
        let concluded = self
            .conclude(lock, attempt, wish, &mut departure, lock_held)
            .await;
        let lease = self.lease_answer(lock, wish.session, concluded).await?;
        // A handoff does not say how many read with it: a plain read does.
        let readers = if handed && mode == RwMode::Read {
            self.inspect_rw_now(lock)
                .await
                .map_or(1, |state| u32::try_from(state.readers.len()).unwrap_or(1))
        } else {
            readers
        };
        self.time_grant(lock, started);
        Ok(RwGrant::new(lease, mode, readers))
    }

    /// One transaction on the header: hands a freed key on to the queue,
    /// then grants, renews, enqueues (`wait_ms` > 0) or answers busy. With
    /// the grant, the live readers after it.
    async fn rw_attempt(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        mode: RwMode,
        budget: Budget,
    ) -> Result<(Attempt, u32), EngineError> {
        let _turn = self.gates.turn(lock, budget).await?;
        self.retry(budget, || async {
            let mut inserted = false;
            // Twice at most: the second `create_rw_row` fails.
            loop {
                let mut tx = self.begin(budget).await?;
                if !super::session::hold(&mut tx, &lock.tenant, wish.session).await? {
                    tx.rollback().await?;
                    return Err(EngineError::SessionNotFound);
                }
                let Some(mut held) = self.rw_read(&mut tx, lock, Locking::Wait).await? else {
                    tx.rollback().await?;
                    drop(tx);
                    self.create_header(lock, budget, &mut inserted).await?;
                    continue;
                };
                let deliveries = self.rw_fill(&mut tx, lock, &mut held).await?;
                let lease = match held.decide(wish.owner, mode, wish.session) {
                    Decision::Renew(token) => {
                        let lease = Lease {
                            seat: Seat::Whole,
                            owner: wish.owner.to_owned(),
                            token,
                            hold_count: 1,
                            ttl_ms: wish.ttl_ms,
                            expires_at: plus_ms(held.now(), wish.ttl_ms),
                            fresh: false,
                            session: wish.session.map(str::to_owned),
                        };
                        held.set(mode, &lease);
                        lease
                    }
                    Decision::Grant => {
                        let lease = held.grant(wish.owner, mode, wish.ttl_ms, wish.session);
                        if let Some(e) = history::granted(lock, &lease) {
                            tx.note(e);
                        }
                        lease
                    }
                    Decision::Busy => {
                        let busy = Attempt::Busy {
                            remaining_ms: held.remaining_ms(),
                            queued: held.header.queued,
                        };
                        return self
                            .rw_refuse_or_enqueue(tx, lock, wish, mode, &held, deliveries, busy)
                            .await
                            .map(|attempt| (attempt, 0));
                    }
                };
                if mode == RwMode::Read {
                    self.rw_put_reader(&mut tx, lock, &lease).await?;
                }
                let mark = mark();
                self.rw_write(&mut tx, lock, &held, mark).await?;
                let grants = if lease.fresh {
                    vec![(lease.owner.clone(), lease.token)]
                } else {
                    Vec::new()
                };
                self.commit(tx, lock, Expect::Marked { mark, grants })
                    .await?;
                self.deliver(deliveries);
                self.count_grant(lock, if lease.fresh { "direct" } else { "reentry" });
                return Ok((Attempt::Granted(lease), held.readers_now()));
            }
        })
        .await
    }

    /// The end of a try that could not grant: joins the queue as a waiter
    /// for `mode` (`wait_ms` > 0) or answers `busy`, committing the handoffs
    /// the transaction made, then delivering them.
    #[allow(clippy::too_many_arguments)]
    async fn rw_refuse_or_enqueue(
        &self,
        mut tx: Conn,
        lock: &LockRef,
        wish: Wish<'_>,
        mode: RwMode,
        held: &Held,
        deliveries: Vec<Delivery>,
        busy: Attempt,
    ) -> Result<Attempt, EngineError> {
        let mark = mark();
        if wish.wait_ms == 0 {
            if deliveries.is_empty() {
                tx.rollback().await?;
            } else {
                self.rw_write(&mut tx, lock, held, mark).await?;
                let expect = Expect::Marked {
                    mark,
                    grants: Vec::new(),
                };
                self.commit(tx, lock, expect).await?;
                self.deliver(deliveries);
            }
            return Ok(busy);
        }
        self.rw_write(&mut tx, lock, held, mark).await?;
        let waiter = self.enqueue(&mut tx, lock, wish).await?;
        waiters::set_mode(&mut tx, waiter.id(), mode.code()).await?;
        // If this fails, dropping `waiter` takes it out again.
        self.commit(tx, lock, Expect::Waiter { id: waiter.id() })
            .await?;
        self.deliver(deliveries);
        Ok(Attempt::Queued(waiter))
    }

    /// The header, locked as asked, and the live readers; expired reader
    /// rows are deleted on the way. `None` for a key never used (or, with
    /// `SkipLocked`, one another transaction holds).
    pub(super) async fn rw_read(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        locking: Locking,
    ) -> Result<Option<Held>, EngineError> {
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        let Some(header) = rwlocks::header(tx, tenant, key, locking).await? else {
            return Ok(None);
        };
        // Committed: proof for a commit of this broker still in doubt.
        self.marks.saw(header.changed_by);
        let mut header = header;
        let mut readers = rwlocks::readers(tx, tenant, key).await?;
        // Leases that ran out end here, recorded with the transaction: the
        // expired readers' rows are deleted, an expired writer cleared
        // (every transaction that commits writes the header back).
        let (live, expired): (Vec<_>, Vec<_>) =
            readers.drain(..).partition(|r| r.expires_at > header.now);
        readers = live;
        for r in &expired {
            let owner = String::from_utf8_lossy(&r.owner);
            history::note(tx, lock, EventKind::Expired, &owner, r.token, r.expires_at);
        }
        if !expired.is_empty() {
            rwlocks::delete_expired_readers(tx, tenant, key).await?;
        }
        if let (Some(owner), Some(token), Some(at)) = (
            &header.writer,
            header.writer_token,
            header.writer_expires_at,
        ) {
            if at <= header.now {
                let owner = String::from_utf8_lossy(owner).into_owned();
                history::note(tx, lock, EventKind::Expired, &owner, token, at);
                header.writer = None;
                header.writer_token = None;
                header.writer_expires_at = None;
            }
        }
        Ok(Some(Held { header, readers }))
    }

    /// Writes the header as `held` has it (token counter, writer), marked
    /// by the transaction's `mark`.
    pub(super) async fn rw_write(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        held: &Held,
        mark: u64,
    ) -> Result<(), EngineError> {
        let h = &held.header;
        let writer = match (&h.writer, h.writer_token, h.writer_expires_at) {
            (Some(owner), Some(token), Some(at)) => Some((
                std::str::from_utf8(owner).unwrap_or_default(),
                token,
                at,
                h.writer_session.as_deref(),
            )),
            _ => None,
        };
        rwlocks::write_header(tx, &lock.tenant, &lock.storage_key, h.token, writer, mark).await?;
        Ok(())
    }

    async fn rw_put_reader(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        lease: &Lease,
    ) -> Result<(), EngineError> {
        rwlocks::put_reader(
            tx,
            &lock.tenant,
            &lock.storage_key,
            (&lease.owner, lease.token, lease.expires_at),
            lease.session.as_deref(),
        )
        .await?;
        Ok(())
    }

    /// Hands the key on to its queue as far as it goes: while no writer
    /// holds it, the next waiter by the tenant's fairness is granted if it
    /// is a reader, or a writer while no reader holds it; a writer that
    /// cannot be granted stops the handoff (it stays first). Stale waiters
    /// met on the way are cleared out. Bounded by `queued`, which each
    /// handoff lowers. The caller holds the header, writes `held` back and
    /// commits, then delivers.
    ///
    /// A fairness policy that picks a writer while readers still hold
    /// counts its pass-over of older waiters (`choose`) although nobody is
    /// granted yet; the built-in FIFO policy counts none.
    pub(super) async fn rw_fill(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        held: &mut Held,
    ) -> Result<Vec<Delivery>, EngineError> {
        let mut deliveries = Vec::new();
        while held.header.queued > 0 && held.writer().is_none() {
            // A waiter of a session that ended is taken out on the way.
            let Some(waiter) = self.choose_live(tx, lock, &mut held.header.queued).await? else {
                let purged = self.purge(tx, lock).await?;
                held.header.queued = held.header.queued.saturating_sub(purged);
                break;
            };
            let mode = RwMode::of_code(waiter.mode);
            if mode == RwMode::Write && !held.readers.is_empty() {
                break;
            }
            let owner = String::from_utf8_lossy(&waiter.owner).into_owned();
            let session = waiter.session.as_deref().map(String::from_utf8_lossy);
            let lease = held.grant(&owner, mode, waiter.ttl_ms, session.as_deref());
            let now = held.now();
            let holder = (owner.as_str(), lease.token);
            let in_session = waiter.session.as_deref();
            history::note_in(tx, lock, EventKind::HandedOff, holder, now, in_session);
            if mode == RwMode::Read {
                self.rw_put_reader(tx, lock, &lease).await?;
            }
            deliveries.push(self.record_handoff(tx, lock, waiter, &lease).await?);
            held.header.queued = held.header.queued.saturating_sub(1);
        }
        Ok(deliveries)
    }

    /// Ends `owner`'s lease with `token` (read or write) and hands the key
    /// on. Runs to its end even if the caller leaves.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] when that lease is not live (nothing
    /// changes); [`EngineError::Unavailable`].
    pub fn release_rw(&self, lock: &LockRef, owner: &str, token: u64) -> Op<()> {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move {
            let mark = mark();
            match engine.rw_combined_release(&lock, &owner, token).await {
                Combined::Done(done) => done,
                Combined::Alone(budget) => {
                    engine
                        .release_rw_in(&lock, &owner, token, mark, budget)
                        .await
                }
            }
        })
    }

    /// [`Engine::release_rw`], marked `mark`: an attempt tried again after
    /// an error finds the mark on the header if an earlier one committed.
    pub(super) async fn release_rw_now(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
    ) -> Result<(), EngineError> {
        self.release_rw_in(lock, owner, token, mark, self.budget())
            .await
    }

    /// [`Engine::release_rw_now`] within `budget` (what is left of a
    /// release that a combined transaction sent back).
    async fn release_rw_in(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
        budget: Budget,
    ) -> Result<(), EngineError> {
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let read = self.rw_read(&mut tx, lock, Locking::Wait).await?;
            if read
                .as_ref()
                .is_some_and(|h| h.header.changed_by == Some(mark))
            {
                // An earlier attempt of this release committed.
                tx.rollback().await?;
                return Ok(());
            }
            let held = read.and_then(|h| h.held_by(owner, token).map(|mode| (h, mode)));
            let Some((mut held, mode)) = held else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            let session = held.session_of(owner, mode).map(<[u8]>::to_vec);
            let (holder, now) = ((owner, token), held.now());
            history::note_in(
                &mut tx,
                lock,
                EventKind::Released,
                holder,
                now,
                session.as_deref(),
            );
            if mode == RwMode::Read {
                rwlocks::delete_reader(&mut tx, &lock.tenant, &lock.storage_key, owner).await?;
            }
            held.end(owner, mode);
            let deliveries = self.rw_fill(&mut tx, lock, &mut held).await?;
            self.rw_write(&mut tx, lock, &held, mark).await?;
            let expect = Expect::Marked {
                mark,
                grants: Vec::new(),
            };
            self.commit(tx, lock, expect).await?;
            self.deliver(deliveries);
            Ok(())
        })
        .await
    }

    /// The end of `h`, a rwlock lease of session `id`, in the caller's
    /// transaction (a session's end pass): the lease ended as a release
    /// ends it (its event naming the session and `reason`), the key handed
    /// on; the handoffs to deliver after the commit, or `None` when the
    /// lease is no longer the session's (nothing written).
    pub(super) async fn rw_end_in_session(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        h: &HeldRow,
        id: &str,
        reason: EndReason,
    ) -> Result<Option<Vec<Delivery>>, EngineError> {
        let Some(mut held) = self.rw_read(tx, lock, Locking::Wait).await? else {
            return Ok(None);
        };
        let mode = RwMode::of_code(h.mode);
        let owner = match mode {
            RwMode::Write => held.writer().map(|(w, _, _)| w.to_vec()),
            RwMode::Read => h.owner.clone(),
        };
        let Some(owner) = owner.map(|o| String::from_utf8_lossy(&o).into_owned()) else {
            return Ok(None);
        };
        let ours = held.held_by(&owner, h.token) == Some(mode)
            && held.session_of(&owner, mode) == Some(id.as_bytes());
        if !ours {
            return Ok(None);
        }
        let holder = (owner.as_bytes(), h.token);
        if let Some(e) = super::session::end_event_of(lock, holder, held.now(), id, reason) {
            tx.note(e);
        }
        if mode == RwMode::Read {
            rwlocks::delete_reader(tx, &lock.tenant, &lock.storage_key, &owner).await?;
        }
        held.end(&owner, mode);
        let deliveries = self.rw_fill(tx, lock, &mut held).await?;
        self.rw_write(tx, lock, &held, mark()).await?;
        Ok(Some(deliveries))
    }

    /// Extends `owner`'s live lease with `token` (read or write) to
    /// `ttl_ms` from now, by the database clock; the token stays.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`] once it has expired, even if nobody took
    /// the key since.
    pub fn renew_rw(&self, lock: &LockRef, owner: &str, token: u64, ttl_ms: u64) -> Op<RwGrant> {
        let (engine, lock, owner) = (self.clone(), lock.clone(), owner.to_owned());
        finish(move |_| async move {
            match engine.rw_combined_renew(&lock, &owner, token, ttl_ms).await {
                Combined::Done(done) => done,
                Combined::Alone(budget) => {
                    engine
                        .renew_rw_in(&lock, &owner, token, ttl_ms, budget)
                        .await
                }
            }
        })
    }

    /// A renewal in its own transaction, within `budget`.
    async fn renew_rw_in(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        ttl_ms: u64,
        budget: Budget,
    ) -> Result<RwGrant, EngineError> {
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let read = self.rw_read(&mut tx, lock, Locking::Wait).await?;
            let held = read.and_then(|h| h.held_by(owner, token).map(|mode| (h, mode)));
            let Some((mut held, mode)) = held else {
                tx.rollback().await?;
                return Err(EngineError::LeaseLost);
            };
            if held.session_of(owner, mode).is_some() {
                // It lives as long as its session: nothing to renew.
                tx.rollback().await?;
                return Err(EngineError::InSession);
            }
            let lease = Lease {
                seat: Seat::Whole,
                owner: owner.to_owned(),
                token,
                hold_count: 1,
                ttl_ms,
                expires_at: plus_ms(held.now(), ttl_ms),
                fresh: false,
                session: None,
            };
            held.set(mode, &lease);
            if mode == RwMode::Read {
                self.rw_put_reader(&mut tx, lock, &lease).await?;
            }
            let mark = mark();
            self.rw_write(&mut tx, lock, &held, mark).await?;
            let expect = Expect::Marked {
                mark,
                grants: Vec::new(),
            };
            self.commit(tx, lock, expect).await?;
            let readers = held.readers_now();
            Ok(RwGrant::new(lease, mode, readers))
        })
        .await
    }

    /// Whether the transaction marked `mark` is the last that changed the
    /// rwlock (for `settle`: a lost commit found to have happened). Locks
    /// the header, waiting for a transaction still holding it.
    pub(super) async fn rw_marked(
        conn: &mut Conn,
        lock: &LockRef,
        mark: u64,
    ) -> sqlx::Result<bool> {
        let header = rwlocks::header(conn, &lock.tenant, &lock.storage_key, Locking::Wait).await?;
        Ok(header.is_some_and(|h| h.changed_by == Some(mark)))
    }

    /// Gives back a rwlock lease nobody will receive (its request is gone),
    /// trying again a few times if the database is away.
    pub(super) async fn give_back_rw(&self, lock: &LockRef, owner: &str, token: u64) {
        let mark = mark();
        for _ in 0..super::lease::GIVE_BACK_TRIES {
            match self.release_rw_now(lock, owner, token, mark).await {
                Ok(()) | Err(EngineError::LeaseLost) => return,
                Err(err) => {
                    tracing::debug!(error = %err, "could not give back a departed client's rwlock lease yet");
                    tokio::time::sleep(self.settings.db_timeout).await;
                }
            }
        }
        tracing::warn!(key = %lock.storage_key, "could not give back a departed client's rwlock lease");
    }

    /// The reaper's work on one rwlock: take back grants that gone brokers
    /// never delivered, hand the key on to eligible waiters, clear out
    /// stale ones. Skips a key whose header another transaction holds.
    pub(super) async fn reap_rw(&self, lock: &LockRef) -> Result<(), EngineError> {
        let budget = self.budget();
        let mut tx = self.begin(budget).await?;
        let Some(mut held) = self.rw_read(&mut tx, lock, Locking::SkipLocked).await? else {
            tx.rollback().await?;
            return Ok(());
        };
        for grant in self.take_back(&mut tx, lock).await? {
            self.rw_drop_grant(&mut tx, lock, &mut held, &grant).await?;
        }
        let deliveries = self.rw_fill(&mut tx, lock, &mut held).await?;
        if held.header.queued > 0 {
            self.purge(&mut tx, lock).await?;
        }
        self.rw_write(&mut tx, lock, &held, mark()).await?;
        // Background work: nobody waits for the answer.
        self.commit(tx, lock, Expect::Unchecked).await?;
        if !deliveries.is_empty() {
            self.metrics.inc("lockbroker_expiry_handoffs_total", &[]);
        }
        self.deliver(deliveries);
        Ok(())
    }

    /// Ends the lease of an undelivered grant taken back, if the key still
    /// holds it (nobody received it).
    async fn rw_drop_grant(
        &self,
        tx: &mut Conn,
        lock: &LockRef,
        held: &mut Held,
        grant: &Undelivered,
    ) -> Result<(), EngineError> {
        let owner = String::from_utf8_lossy(&grant.owner).into_owned();
        let Some(mode) = held.held_by(&owner, grant.granted_token) else {
            return Ok(());
        };
        // Its `handed_off` was recorded: record its end.
        let now = held.now();
        history::note(
            tx,
            lock,
            EventKind::Released,
            &owner,
            grant.granted_token,
            now,
        );
        if mode == RwMode::Write {
            let h = &mut held.header;
            h.writer = None;
            h.writer_token = None;
            h.writer_expires_at = None;
        } else {
            rwlocks::delete_reader(tx, &lock.tenant, &lock.storage_key, &owner).await?;
            held.readers.retain(|r| r.owner != grant.owner);
        }
        Ok(())
    }

    /// The rwlock's live writer, readers and queue, without locking.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn inspect_rw(&self, lock: &LockRef) -> Op<RwState> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.inspect_rw_now(&lock).await })
    }

    async fn inspect_rw_now(&self, lock: &LockRef) -> Result<RwState, EngineError> {
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        let budget = self.budget();
        let read = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let header = rwlocks::header(&mut conn, tenant, key, Locking::None).await?;
                let readers = match header {
                    Some(_) => rwlocks::readers(&mut conn, tenant, key).await?,
                    None => Vec::new(),
                };
                let sessions: Vec<_> = readers
                    .iter()
                    .filter_map(|r| r.session.clone())
                    .chain(header.as_ref().and_then(|h| h.writer_session.clone()))
                    .collect();
                let expiries = store::sessions::expiries(&mut conn, tenant, &sessions).await?;
                conn.done();
                Ok(header.map(|header| (Held { header, readers }, expiries)))
            })
            .await?;
        let Some((mut held, expiries)) = read else {
            return Ok(RwState {
                writer: None,
                readers: Vec::new(),
                waiters: 0,
            });
        };
        let now = held.now();
        held.readers.retain(|r| r.expires_at > now);
        // Live by its own row; shown with its session's expiry if in one.
        let holder = |owner: &[u8], token, expires_at, session: Option<&[u8]>| RwHolder {
            owner: String::from_utf8_lossy(owner).into_owned(),
            token,
            expires_at: super::session::expiry_of(&expiries, session).unwrap_or(expires_at),
            session: session.map(|s| String::from_utf8_lossy(s).into_owned()),
        };
        let writer_session = held.header.writer_session.as_deref();
        Ok(RwState {
            writer: held
                .writer()
                .map(|(w, t, at)| holder(w, t, at, writer_session)),
            readers: held
                .readers
                .iter()
                .map(|r| holder(&r.owner, r.token, r.expires_at, r.session.as_deref()))
                .collect(),
            waiters: u64::from(held.header.queued),
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::engine::fixtures::at;

    /// A key's state for tests: header token 10, `writer` (owner, token,
    /// expiry in ms), live `readers` (owner, token), `queued` waiters.
    pub(in crate::engine) fn held(
        writer: Option<(&str, u64, i64)>,
        readers: &[(&str, u64)],
        queued: u32,
    ) -> Held {
        Held {
            header: HeaderRow {
                token: 10,
                writer: writer.map(|(w, _, _)| w.as_bytes().to_vec()),
                writer_token: writer.map(|(_, t, _)| t),
                writer_expires_at: writer.map(|(_, _, ms)| at(ms)),
                queued,
                changed_by: None,
                writer_session: None,
                now: at(0),
            },
            readers: readers
                .iter()
                .map(|(o, t)| ReaderRow {
                    owner: o.as_bytes().to_vec(),
                    token: *t,
                    expires_at: at(1000),
                    session: None,
                })
                .collect(),
        }
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let free = held(None, &[], 0);
        assert_eq!(free.decide("a", RwMode::Read, None), Decision::Grant);
        assert_eq!(free.decide("a", RwMode::Write, None), Decision::Grant);
        let reading = held(None, &[("r", 3)], 0);
        assert_eq!(reading.decide("a", RwMode::Read, None), Decision::Grant);
        assert_eq!(reading.decide("a", RwMode::Write, None), Decision::Busy);
        let writing = held(Some(("w", 4, 500)), &[], 0);
        assert_eq!(writing.decide("a", RwMode::Read, None), Decision::Busy);
        assert_eq!(writing.decide("a", RwMode::Write, None), Decision::Busy);
    }

    #[test]
    fn a_queue_blocks_new_readers() {
        // A writer queued behind readers: a new reader waits behind it.
        let reading = held(None, &[("r", 3)], 1);
        assert_eq!(reading.decide("a", RwMode::Read, None), Decision::Busy);
        // A reader already in keeps its lease (renewed).
        assert_eq!(reading.decide("r", RwMode::Read, None), Decision::Renew(3));
    }

    #[test]
    fn an_expired_writer_holds_nothing() {
        let expired = held(Some(("w", 4, 0)), &[], 0);
        assert_eq!(expired.decide("a", RwMode::Write, None), Decision::Grant);
        let live = held(Some(("w", 4, 1)), &[], 0);
        assert_eq!(live.decide("w", RwMode::Write, None), Decision::Renew(4));
        // No downgrade or upgrade.
        assert_eq!(live.decide("w", RwMode::Read, None), Decision::Busy);
        assert_eq!(
            held(None, &[("r", 3)], 0).decide("r", RwMode::Write, None),
            Decision::Busy
        );
    }

    #[test]
    fn every_grant_takes_the_next_token() {
        let mut h = held(None, &[], 0);
        let a = h.grant("a", RwMode::Read, 1000, None);
        let b = h.grant("b", RwMode::Read, 1000, None);
        assert_eq!((a.token, b.token), (11, 12));
        assert_eq!(h.readers_now(), 2);
        assert_eq!(h.remaining_ms(), 1000);
        let mut w = held(None, &[], 0);
        let c = w.grant("c", RwMode::Write, 500, None);
        assert_eq!(c.token, 11);
        assert_eq!(
            w.writer().map(|(o, t, _)| (o.to_vec(), t)),
            Some((b"c".to_vec(), 11))
        );
    }
}
