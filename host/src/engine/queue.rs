//! The durable wait queue and direct handoff.
//!
//! A waiter (`wait_ms > 0` that could not be granted at once) is a row in
//! `waiters`, inserted in the same transaction that found the key busy, so
//! no release can slip between the check and the enqueue. The transaction
//! that frees a lease (release, or the reaper on expiry) asks the tenant's
//! fairness policy which eligible waiter is next and grants it the lease
//! right there: no barging, and only that waiter is woken. A waiter past
//! its deadline, or of a broker that stopped heartbeating, is stale: it is
//! never handed a lease nor counted against a newcomer, and the
//! transactions that meet it clear it out. Which waiter goes next is the
//! tenant's [`Pacing`](super::Pacing) to say.
//!
//! Waking: a grant to a waiter of this process is marked claimed and
//! delivered in-process at once (a oneshot per waiter). A grant to a
//! waiter of another process is marked granted; its broker claims it with
//! one batched query per tick ([`WAKE_TICK`]) before answering, so a grant
//! still unclaimed when its broker dies was never delivered and can be
//! taken back. The granting broker also pushes a hint to the waiter's
//! broker once the handoff committed (`wake`), which then makes the same
//! pass at once instead of at its next tick. Whoever takes a waiter's sender out of `local` delivers; a
//! waiter that times out or whose client leaves takes itself out of the
//! queue in a transaction on the key's header row, taking (and giving back)
//! a grant that raced with it: never a lease held by nobody.

use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::{
    detach::{Departure, Waited},
    lease::Wish,
    seat::{self, Lease, Seat},
    settle::Expect,
    wake::Via,
    Engine, EngineError, Handoff, LockRef,
};
use crate::{
    policy::Waiter,
    store::{
        pool::Conn,
        sessions,
        waiters::{self, NewWaiter, Order, Undelivered, WaiterRow},
        Locking,
    },
};

/// How often a broker looks for handoffs to its waiters made by others.
pub const WAKE_TICK: Duration = Duration::from_millis(10);
/// Waiters a fairness policy sees: the oldest ones plus the most urgent ones.
const WINDOW: u32 = 32;
/// How long the rows of waiters that received their grants wait to be
/// deleted together (a granted row is skipped by every queue scan).
const COLLECT_EVERY: Duration = Duration::from_millis(10);
/// Rows deleted by one statement at most.
const COLLECT_BATCH: usize = 500;

/// A handoff to deliver once its transaction committed.
pub(super) struct Delivery {
    /// The waiter is this broker's: delivered in-process.
    local: bool,
    /// The waiter's broker (to push to when not this one).
    broker: Vec<u8>,
    id: u64,
    /// The waiter's owner, now the holder.
    pub(super) owner: String,
    pub(super) handoff: Handoff,
}

impl Engine {
    /// Picks the next eligible waiter of `lock` by the tenant's fairness
    /// and counts a pass-over for older waiters it skipped. The caller
    /// holds the key's header row.
    pub(super) async fn choose(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
    ) -> Result<Option<WaiterRow>, EngineError> {
        let stale = self.stale();
        if lock.pacing.always_oldest() {
            // FIFO (the built-in policy): the oldest waiter is all we need.
            let mut oldest = waiters::pending(conn, lock.row(), Order::Oldest, 1, stale).await?;
            return Ok(oldest.pop());
        }
        let mut rows = waiters::pending(conn, lock.row(), Order::Oldest, WINDOW, stale).await?;
        if rows.len() == WINDOW as usize {
            // More may wait beyond the window: add the most urgent ones so a
            // priority policy sees them.
            for row in waiters::pending(conn, lock.row(), Order::MostUrgent, WINDOW, stale).await? {
                if !rows.iter().any(|r| r.id == row.id) {
                    rows.push(row);
                }
            }
            rows.sort_by_key(|r| r.id);
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let candidates: Vec<Waiter> = rows
            .iter()
            .map(|r| Waiter {
                id: r.id,
                owner: String::from_utf8_lossy(&r.owner).into_owned(),
                priority: r.priority,
                enqueued_at_ms: r.enqueued_ms,
                attempts: r.attempts,
            })
            .collect();
        let index = lock.pacing.pick_next(&lock.key, candidates).await;
        // A pacing that answers out of range gets the oldest.
        let index = if index < rows.len() { index } else { 0 };
        let skipped: Vec<u64> = rows[..index].iter().map(|r| r.id).collect();
        waiters::passed_over(conn, &skipped).await?;
        Ok(Some(rows.swap_remove(index)))
    }

    /// [`Engine::choose`], skipping (and removing from the queue) waiters
    /// whose session is no longer live: the session of the waiter chosen is
    /// read `LOCK IN SHARE MODE`, so its end waits for this transaction
    /// (and then releases the lease handed here). `queued` is lowered by
    /// the waiters removed. The caller holds the key's header row.
    pub(super) async fn choose_live(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        queued: &mut u32,
    ) -> Result<Option<WaiterRow>, EngineError> {
        while *queued > 0 {
            let Some(waiter) = self.choose(conn, lock).await? else {
                return Ok(None);
            };
            let Some(session) = waiter.session.as_deref() else {
                return Ok(Some(waiter));
            };
            let session = String::from_utf8_lossy(session);
            let row = sessions::get(conn, &lock.tenant, &session, true).await?;
            if row.is_some_and(|r| r.live()) {
                return Ok(Some(waiter));
            }
            if sessions::drop_waiter(conn, waiter.id).await? {
                seat::add_queued(conn, lock, -1).await?;
                *queued = queued.saturating_sub(1);
            }
        }
        Ok(None)
    }

    /// Clears out the key's stale waiters (deadline passed, or broker
    /// gone); how many. The caller holds the key's header row.
    pub(super) async fn purge(&self, conn: &mut Conn, lock: &LockRef) -> Result<u32, EngineError> {
        let purged = waiters::delete_stale(conn, lock.row(), self.stale()).await?;
        if purged > 0 {
            seat::add_queued(conn, lock, -i64::try_from(purged).unwrap_or(0)).await?;
            self.metrics
                .add_counter("lockbroker_waiters_purged_total", &[], purged);
        }
        Ok(u32::try_from(purged).unwrap_or(u32::MAX))
    }

    /// Takes back the key's grants that dead brokers never claimed (nobody
    /// received them); the ones taken. The caller holds the key's header
    /// row and frees or hands on the leases that are still those grants.
    pub(super) async fn take_back(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
    ) -> Result<Vec<Undelivered>, EngineError> {
        let mut taken = Vec::new();
        for grant in waiters::undelivered(conn, lock.row(), self.alive_us()).await? {
            if waiters::revoke(conn, grant.id).await? {
                self.metrics
                    .inc("lockbroker_undelivered_grants_taken_back_total", &[]);
                taken.push(grant);
            }
        }
        Ok(taken)
    }

    /// Fails with 429 when the tenant has `max_waiters` eligible waiters;
    /// with `session` (a wait to be checked for a deadlock, whose
    /// transaction holds the session's row: `session::hold`), says in the
    /// same statement whether it holds any lease (on Galera after a write
    /// of the row).
    pub(super) async fn check_room(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        session: Option<&str>,
    ) -> Result<bool, EngineError> {
        let (pending, holding) = match session {
            Some(id) => {
                waiters::pending_for_tenant_and_holding(
                    conn,
                    &lock.tenant,
                    self.stale(),
                    id.as_bytes(),
                )
                .await?
            }
            None => (
                waiters::pending_for_tenant(conn, &lock.tenant, self.stale()).await?,
                false,
            ),
        };
        self.held_here.note_db_count(&lock.tenant, pending);
        // Waiters in memory here count too (`held_here`).
        let pending = pending.saturating_add(self.held_here.waiting_in(&lock.tenant));
        if pending >= lock.max_waiters {
            return Err(EngineError::TooManyWaiters);
        }
        Ok(holding)
    }

    /// Enqueues a waiter (the caller holds the key's header row and
    /// commits). From here on the waiter is guarded: if the request is
    /// dropped (client gone, or the commit failed) at any point before it
    /// has its answer, the waiter leaves the queue and a lease handed to it
    /// is released. A session's wait is checked for a deadlock first
    /// (`deadlock`): refused if it would close a cycle.
    pub(super) async fn enqueue(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        wish: Wish<'_>,
    ) -> Result<Queued, EngineError> {
        let checked = self.session_to_check(lock, wish).await;
        let holding = self.check_room(conn, lock, checked).await?;
        if holding {
            if let Some(cycle) = self.closes_cycle(conn, lock, wish).await? {
                self.metrics
                    .inc("lockbroker_deadlocks_total", &[("tenant", &lock.tenant)]);
                self.record_refusal(lock, &cycle);
                return Err(EngineError::Deadlock { cycle });
            }
        }
        let waiter = NewWaiter {
            owner: wish.owner,
            priority: wish.priority,
            ttl_ms: wish.ttl_ms,
            broker: &self.broker,
            wait_ms: wish.wait_ms,
            session: wish.session,
        };
        let id = waiters::insert(conn, lock.row(), waiter).await?;
        let queued = self.register(lock, id, wish.owner);
        seat::add_queued(conn, lock, 1).await?;
        Ok(queued)
    }

    /// Registers waiter `id`, just inserted by the caller's transaction,
    /// for in-process delivery: before the commit, so that a handoff right
    /// after it finds the waiter. Guarded from here on (see [`Queued`]).
    pub(super) fn register(&self, lock: &LockRef, id: u64, owner: &str) -> Queued {
        let (tx, rx) = oneshot::channel();
        self.local.lock().expect("local waiters").insert(id, tx);
        Queued {
            engine: self.clone(),
            lock: lock.clone(),
            id,
            owner: owner.to_owned(),
            rx,
            armed: true,
        }
    }

    /// Records the handoff of `lease` to `waiter` in the freeing
    /// transaction (which has already written the lease). A grant to a
    /// waiter of this broker is claimed at once and delivered in-process
    /// after the commit; one to another broker's waiter is left for that
    /// broker to claim.
    pub(super) async fn record_handoff(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        waiter: WaiterRow,
        lease: &Lease,
    ) -> Result<Delivery, EngineError> {
        let local = waiter.broker == self.broker.as_bytes();
        let (token, seat, expires_at) = (lease.token, lease.seat, lease.expires_at);
        waiters::grant(conn, waiter.id, token, seat.slot(), expires_at, local).await?;
        seat::add_queued(conn, lock, -1).await?;
        Ok(self.delivery(waiter.broker, waiter.id, lease))
    }

    /// The delivery of `lease`, handed to waiter `id` of `broker` by a
    /// transaction that marked the grant claimed when `broker` is this one.
    pub(super) fn delivery(&self, broker: Vec<u8>, id: u64, lease: &Lease) -> Delivery {
        Delivery {
            local: broker == self.broker.as_bytes(),
            broker,
            id,
            owner: lease.owner.clone(),
            handoff: Handoff {
                token: lease.token,
                seat: lease.seat,
                expires_at: lease.expires_at,
            },
        }
    }

    /// Delivers committed handoffs: in-process to this broker's waiters;
    /// for other brokers' waiters, a push tells their broker to look now.
    pub(super) fn deliver(&self, deliveries: impl IntoIterator<Item = Delivery>) {
        let mut elsewhere = Vec::new();
        for d in deliveries {
            self.metrics.inc("lockbroker_handoffs_total", &[]);
            if d.local {
                self.hand_to_waiter(d.id, d.handoff, Via::Local);
            } else {
                elsewhere.push((d.broker, d.id));
            }
        }
        self.push_wakeups(elsewhere);
    }

    /// Hands a claimed grant to waiter `id` of this broker, if nobody else
    /// (its own leaving, or the other delivery path) took its sender first.
    /// The waiter's row stays until the waiter has its answer: whoever
    /// deletes a granted row owns its lease.
    fn hand_to_waiter(&self, id: u64, handoff: Handoff, via: Via) {
        let sender = self.local.lock().expect("local waiters").remove(&id);
        // No sender, or nobody listening any more: the waiter is leaving
        // and finds the grant in its row, which it takes and gives back.
        if let Some(sender) = sender {
            if sender.send(handoff).is_ok() {
                self.metrics
                    .inc("lockbroker_wakeups_total", &[("via", via.label())]);
            }
        }
    }

    /// Waits for the handoff to a queued waiter until `wait_ms` runs out.
    ///
    /// # Errors
    /// `Ok(None)` is a timeout (the waiter has left the queue);
    /// [`EngineError::ShuttingDown`] when the broker stops or the caller
    /// leaves first (the waiter has left, and a grant has been given back).
    pub(super) async fn await_handoff(
        &self,
        lock: &LockRef,
        mut queued: Queued,
        wait_ms: u64,
        departure: &mut Departure,
    ) -> Result<Option<Handoff>, EngineError> {
        let (id, queued_at) = (queued.id, tokio::time::Instant::now());
        let timeout = tokio::time::sleep(Duration::from_millis(wait_ms));
        let outcome = match self.wait_turn(&mut queued.rx, timeout, departure).await {
            Waited::Turn(handoff) => handoff.ok(),
            Waited::TimedOut => None,
            Waited::Left => {
                queued.armed = false;
                let handed = queued.rx.try_recv().ok();
                self.clean_up(lock, id, &queued.owner, handed).await;
                return Err(EngineError::ShuttingDown);
            }
        };
        if let Some(handoff) = outcome {
            self.metrics.observe(
                "lockbroker_handoff_latency_seconds",
                &[("tenant", &lock.tenant)],
                queued_at.elapsed().as_secs_f64(),
            );
            queued.armed = false;
            self.collect(id);
            return Ok(Some(handoff));
        }
        // Timed out: leave the queue, unless a handoff won the race. Still
        // guarded: if the task is dropped meanwhile, the guard finishes it.
        let left = self.leave(lock, id).await;
        queued.armed = false;
        match left {
            // Handed over in-process while we were leaving: it is ours.
            Ok(None) => match queued.rx.try_recv() {
                Ok(handoff) => {
                    self.collect(id);
                    Ok(Some(handoff))
                }
                Err(_) => Ok(None),
            },
            other => other,
        }
    }

    /// Removes the row of a waiter that received its grant (off the reply
    /// path: it only recorded the grant), batched: the rows collected
    /// within [`COLLECT_EVERY`] go in one statement (one commit), not one
    /// each. The reaper sweeps what this misses.
    fn collect(&self, id: u64) {
        let first = {
            let mut ids = self.collected.lock().expect("collected waiters");
            ids.push(id);
            ids.len() == 1
        };
        if !first {
            // A batch is already due.
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(COLLECT_EVERY).await;
            let ids = std::mem::take(&mut *engine.collected.lock().expect("collected waiters"));
            for batch in ids.chunks(COLLECT_BATCH) {
                let Ok(mut conn) = engine.conn(engine.budget()).await else {
                    return;
                };
                if waiters::delete_many(&mut conn, batch).await.is_ok() {
                    conn.done();
                }
            }
        });
    }

    /// Removes waiter `id` from the queue. A grant made to it meanwhile is
    /// returned (the caller now holds that lease); a grant this broker
    /// delivers in-process arrives on the waiter's channel instead.
    pub(super) async fn leave(
        &self,
        lock: &LockRef,
        id: u64,
    ) -> Result<Option<Handoff>, EngineError> {
        self.local.lock().expect("local waiters").remove(&id);
        let budget = self.budget();
        let _turn = self.gates.turn(lock, budget).await?;
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            seat::header(&mut tx, lock, Locking::Wait).await?;
            let Some(row) = waiters::get(&mut tx, id).await? else {
                tx.rollback().await?;
                return Ok(None);
            };
            waiters::delete(&mut tx, id).await?;
            let handoff = match (row.granted_token, row.granted_expires_at) {
                (Some(token), Some(expires_at)) => Some(Handoff {
                    token,
                    seat: Seat::from_slot(row.granted_slot),
                    expires_at,
                }),
                _ => {
                    seat::add_queued(&mut tx, lock, -1).await?;
                    None
                }
            };
            self.commit(tx, lock, Expect::WaiterGone { id }).await?;
            Ok(handoff)
        })
        .await
    }

    /// A waiter whose request is gone: release what was handed to it, or
    /// leave the queue (releasing a grant made meanwhile).
    async fn clean_up(&self, lock: &LockRef, id: u64, owner: &str, handed: Option<Handoff>) {
        if let Some(handoff) = handed {
            self.collect(id);
            return self
                .give_back(lock, handoff.seat, owner, handoff.token)
                .await;
        }
        match self.leave(lock, id).await {
            Ok(Some(handoff)) => {
                self.give_back(lock, handoff.seat, owner, handoff.token)
                    .await
            }
            Ok(None) => {}
            // The row stays; it stops counting at its deadline and the
            // reaper removes it. A lease handed to it meanwhile runs out by
            // its TTL.
            Err(err) => {
                tracing::warn!(error = %err, waiter = id, "could not remove a departed waiter")
            }
        }
    }

    /// This broker's wake loop: once per tick, and at once when another
    /// broker pushes, while it has waiters, claim and deliver the grants
    /// other brokers made to them.
    pub async fn run_waker(self, mut stop: watch::Receiver<bool>) {
        let mut tick = 0u32;
        loop {
            let via = tokio::select! {
                () = tokio::time::sleep(WAKE_TICK) => Via::Poll,
                () = self.wake.nudge.notified() => Via::Push,
                () = crate::shutdown::stopped(&mut stop) => return,
            };
            tick = tick.wrapping_add(1);
            if let Err(err) = self.check_held_here(tick).await {
                tracing::debug!(error = %err, "check of waiters in memory failed");
            }
            if self.local.lock().expect("local waiters").is_empty() {
                continue;
            }
            if let Err(err) = self.wake_once(via).await {
                tracing::debug!(error = %err, "wake check failed");
            }
        }
    }

    /// One pass: claims this broker's unclaimed grants and delivers them.
    /// A pass made on a push claims first (a grant is known to be there);
    /// a poll reads first and claims only what it found.
    async fn wake_once(&self, via: Via) -> Result<(), EngineError> {
        let mut conn = self.conn(self.budget()).await?;
        let granted = if via == Via::Push {
            waiters::claim_for_broker(&mut conn, &self.broker).await?;
            waiters::granted_for_broker(&mut conn, &self.broker).await?
        } else {
            let granted = waiters::granted_for_broker(&mut conn, &self.broker).await?;
            if granted.iter().any(|row| row.claimed == 0) {
                waiters::claim_for_broker(&mut conn, &self.broker).await?;
                waiters::granted_for_broker(&mut conn, &self.broker).await?
            } else {
                granted
            }
        };
        // Waiters a push named that no grant answered: one whose row is
        // gone was taken out of the queue by another broker (its session
        // ended) and can never be granted; it stops waiting now.
        let named = std::mem::take(&mut *self.wake.pushed.lock().expect("pushed"));
        let named: Vec<u64> = named
            .into_iter()
            .filter(|id| !granted.iter().any(|row| row.id == *id))
            .collect();
        let gone = if named.is_empty() {
            Vec::new()
        } else {
            let present = waiters::present(&mut conn, &named).await?;
            named
                .into_iter()
                .filter(|id| !present.contains(id))
                .collect()
        };
        conn.done();
        if !gone.is_empty() {
            let mut local = self.local.lock().expect("local waiters");
            for id in gone {
                // Its request finds its row gone and answers so.
                local.remove(&id);
            }
        }
        for row in granted.into_iter().filter(|row| row.claimed != 0) {
            let (Some(token), Some(expires_at)) = (row.granted_token, row.granted_expires_at)
            else {
                continue;
            };
            let handoff = Handoff {
                token,
                seat: Seat::from_slot(row.granted_slot),
                expires_at,
            };
            self.hand_to_waiter(row.id, handoff, via);
        }
        Ok(())
    }
}

/// A waiter in the queue, guarded: if its request is dropped before it has
/// its answer, the waiter leaves the queue and a lease handed to it is
/// released.
pub(super) struct Queued {
    engine: Engine,
    lock: LockRef,
    id: u64,
    owner: String,
    rx: oneshot::Receiver<Handoff>,
    armed: bool,
}

impl Queued {
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.engine
            .local
            .lock()
            .expect("local waiters")
            .remove(&self.id);
        let handed = self.rx.try_recv().ok();
        let (engine, lock, id, owner) = (
            self.engine.clone(),
            self.lock.clone(),
            self.id,
            std::mem::take(&mut self.owner),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { engine.clean_up(&lock, id, &owner, handed).await });
        }
    }
}
