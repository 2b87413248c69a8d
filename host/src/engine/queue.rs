//! The durable wait queue and direct handoff.
//!
//! A waiter (`wait_ms > 0` that could not be granted at once) is a row in
//! `waiters`, inserted in the same transaction that found the key busy, so
//! no release can slip between the check and the enqueue. The transaction
//! that frees a lease (release, or the reaper on expiry) asks the tenant's
//! fairness policy which waiter is next and grants it the lease right there:
//! no barging, and only that waiter is woken.
//!
//! Waking: a waiter of this process gets the handoff in-process at once (a
//! oneshot per waiter; its row is removed by the handoff itself). A waiter
//! of another process is marked granted; its broker finds it with one
//! batched query per tick ([`WAKE_TICK`]). A waiter that times out or whose
//! client goes away leaves the queue in a transaction on the key's header
//! row; a grant that raced with its departure is released (handed on),
//! never left held by nobody.

use std::time::Duration;

use sqlx::MySqlConnection;
use tokio::sync::{oneshot, watch};

use super::{Engine, EngineError, Handoff, LockRef};
use crate::{
    policy::Waiter,
    store::{
        locks::{self, Locking},
        semaphores,
        waiters::{self, NewWaiter, Order, WaiterRow},
        Kind,
    },
};

/// How often a broker looks for handoffs to its waiters made by others.
pub const WAKE_TICK: Duration = Duration::from_millis(10);
/// Waiters a fairness policy sees: the oldest ones plus the most urgent ones.
const WINDOW: u32 = 32;

/// A handoff to deliver once its transaction committed.
pub(super) struct Delivery {
    broker: Vec<u8>,
    id: u64,
    handoff: Handoff,
    lock: LockRef,
    owner: String,
}

impl Engine {
    /// Picks the next waiter of `lock` by the tenant's fairness policy and
    /// counts a pass-over for older waiters it skipped. The caller holds the
    /// key's header row.
    pub(super) async fn choose(
        &self,
        conn: &mut MySqlConnection,
        lock: &LockRef,
    ) -> Result<Option<WaiterRow>, EngineError> {
        if lock.tenant.policy.always_oldest() {
            // FIFO (the built-in policy): the oldest waiter is all we need.
            let mut oldest = waiters::pending(&mut *conn, lock.row(), Order::Oldest, 1).await?;
            return Ok(oldest.pop());
        }
        let mut rows = waiters::pending(&mut *conn, lock.row(), Order::Oldest, WINDOW).await?;
        if rows.len() == WINDOW as usize {
            // More may wait beyond the window: add the most urgent ones so a
            // priority policy sees them.
            for row in waiters::pending(&mut *conn, lock.row(), Order::MostUrgent, WINDOW).await? {
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
        let index = lock.tenant.policy.pick_next(&lock.key, candidates).await;
        let skipped: Vec<u64> = rows[..index].iter().map(|r| r.id).collect();
        waiters::passed_over(&mut *conn, &skipped).await?;
        Ok(Some(rows.swap_remove(index)))
    }

    /// Fails with 429 when the tenant has `max_waiters` pending waiters.
    pub(super) async fn check_room(
        &self,
        conn: &mut MySqlConnection,
        lock: &LockRef,
    ) -> Result<(), EngineError> {
        let pending = waiters::pending_for_tenant(&mut *conn, &lock.tenant.name).await?;
        if pending >= lock.tenant.max_waiters {
            return Err(EngineError::TooManyWaiters);
        }
        Ok(())
    }

    /// Enqueues a waiter (the caller holds the key's header row and
    /// commits). From here on the waiter is guarded: if the request is
    /// dropped (client gone, or the commit failed) at any point before it
    /// has its answer, the waiter leaves the queue and a lease handed to it
    /// is released.
    pub(super) async fn enqueue(
        &self,
        conn: &mut MySqlConnection,
        lock: &LockRef,
        owner: &str,
        priority: i32,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Result<Queued, EngineError> {
        self.check_room(conn, lock).await?;
        let waiter = NewWaiter {
            owner,
            priority,
            ttl_ms,
            broker: &self.broker,
            wait_ms,
        };
        let id = waiters::insert(&mut *conn, lock.row(), waiter).await?;
        // Registered before the commit: a handoff right after it finds us.
        let (tx, rx) = oneshot::channel();
        self.local.lock().expect("local waiters").insert(id, tx);
        let queued = Queued {
            engine: self.clone(),
            lock: lock.clone(),
            id,
            owner: owner.to_owned(),
            rx,
            armed: true,
        };
        self.add_queued(conn, lock, 1).await?;
        Ok(queued)
    }

    /// Adds `delta` to the header row's count of pending waiters.
    pub(super) async fn add_queued(
        &self,
        conn: &mut MySqlConnection,
        lock: &LockRef,
        delta: i64,
    ) -> Result<(), EngineError> {
        match lock.kind {
            Kind::Semaphore => {
                semaphores::add_queued(&mut *conn, &lock.tenant.name, &lock.storage_key, delta)
                    .await?
            }
            Kind::Lock | Kind::Election => locks::add_queued(&mut *conn, lock.row(), delta).await?,
        };
        Ok(())
    }

    /// Records the handoff of a lease to `waiter` in the freeing
    /// transaction (which has already written the lease). A waiter of this
    /// broker leaves the queue right here and gets the lease in-process; a
    /// waiter of another broker is marked granted for its wake loop.
    pub(super) async fn record_handoff(
        &self,
        conn: &mut MySqlConnection,
        lock: &LockRef,
        waiter: WaiterRow,
        token: u64,
        slot: Option<u32>,
        expires_at: chrono::NaiveDateTime,
    ) -> Result<Delivery, EngineError> {
        let local = waiter.broker == self.broker.as_bytes();
        if local {
            waiters::delete(&mut *conn, waiter.id).await?;
        } else {
            waiters::grant(&mut *conn, waiter.id, token, slot, expires_at).await?;
        }
        self.add_queued(conn, lock, -1).await?;
        Ok(Delivery {
            broker: waiter.broker,
            id: waiter.id,
            handoff: Handoff {
                token,
                slot,
                expires_at,
                collected: local,
            },
            lock: lock.clone(),
            owner: String::from_utf8_lossy(&waiter.owner).into_owned(),
        })
    }

    /// Delivers committed handoffs to this broker's waiters. One whose
    /// request is gone gets its lease released (handed on) instead.
    pub(super) fn deliver(&self, deliveries: Vec<Delivery>) {
        for d in deliveries {
            self.metrics.inc("lockbroker_handoffs_total", &[]);
            if d.broker != self.broker.as_bytes() {
                continue;
            }
            let sender = self.local.lock().expect("local waiters").remove(&d.id);
            let undelivered = match sender {
                Some(sender) => sender.send(d.handoff).err(),
                None => Some(d.handoff),
            };
            if let Some(handoff) = undelivered {
                let engine = self.clone();
                tokio::spawn(async move { engine.give_back(&d.lock, &d.owner, handoff).await });
            }
        }
    }

    /// Waits for the handoff to a queued waiter until `wait_ms` runs out.
    ///
    /// # Errors
    /// `Ok(None)` is a timeout (the waiter has left the queue);
    /// [`EngineError::ShuttingDown`] when the broker stops first.
    pub(super) async fn await_handoff(
        &self,
        lock: &LockRef,
        mut queued: Queued,
        wait_ms: u64,
    ) -> Result<Option<Handoff>, EngineError> {
        let id = queued.id;
        let mut stop = self.shutdown.clone();
        let outcome = tokio::select! {
            handoff = &mut queued.rx => handoff.ok(),
            () = tokio::time::sleep(Duration::from_millis(wait_ms)) => None,
            () = crate::shutdown::stopped(&mut stop) => {
                queued.armed = false;
                let handed = queued.rx.try_recv().ok();
                self.clean_up(lock, id, &queued.owner, handed).await;
                return Err(EngineError::ShuttingDown);
            }
        };
        if let Some(handoff) = outcome {
            queued.armed = false;
            self.collect(id, handoff);
            return Ok(Some(handoff));
        }
        // Timed out: leave the queue, unless a handoff won the race. Still
        // guarded: if the client goes away meanwhile, the guard finishes it.
        let left = self.leave(lock, id).await;
        queued.armed = false;
        match left {
            // Handed over in-process while we were leaving: it is ours.
            Ok(None) => Ok(queued.rx.try_recv().ok()),
            other => other,
        }
    }

    /// Removes the row of a waiter granted by another broker (off the reply
    /// path: the row only told us our grant).
    fn collect(&self, id: u64, handoff: Handoff) {
        if !handoff.collected {
            let engine = self.clone();
            tokio::spawn(async move {
                let _ = waiters::delete(&engine.pool, id).await;
            });
        }
    }

    /// Removes waiter `id` from the queue. A handoff another broker made
    /// first is returned (the caller now holds that lease); one made by this
    /// broker arrives on the waiter's channel instead.
    pub(super) async fn leave(
        &self,
        lock: &LockRef,
        id: u64,
    ) -> Result<Option<Handoff>, EngineError> {
        self.local.lock().expect("local waiters").remove(&id);
        let mut tx = self.pool.begin().await?;
        match lock.kind {
            Kind::Semaphore => {
                semaphores::header_for_update(&mut *tx, &lock.tenant.name, &lock.storage_key)
                    .await?;
            }
            Kind::Lock | Kind::Election => {
                locks::select(&mut *tx, lock.row(), Locking::Wait).await?;
            }
        }
        let Some(row) = waiters::get(&mut *tx, id).await? else {
            tx.commit().await?;
            return Ok(None);
        };
        waiters::delete(&mut *tx, id).await?;
        let handoff = match (row.granted_token, row.granted_expires_at) {
            (Some(token), Some(expires_at)) => Some(Handoff {
                token,
                slot: row.granted_slot,
                expires_at,
                collected: true,
            }),
            _ => {
                self.add_queued(&mut tx, lock, -1).await?;
                None
            }
        };
        tx.commit().await?;
        Ok(handoff)
    }

    /// Releases (hands on) a lease handed to a waiter whose request is gone.
    async fn give_back(&self, lock: &LockRef, owner: &str, handoff: Handoff) {
        let released = match handoff.slot {
            Some(slot) => self.release_slot(lock, owner, slot, handoff.token).await,
            None => self.release(lock, owner, handoff.token).await.map(|_| ()),
        };
        if let Err(err) = released {
            // The lease runs out by its TTL and goes to the next waiter then.
            tracing::warn!(error = %err, "could not release a departed waiter's lease");
        }
    }

    /// A waiter whose request is gone: release what was handed to it, or
    /// leave the queue (releasing a grant another broker made meanwhile).
    async fn clean_up(&self, lock: &LockRef, id: u64, owner: &str, handed: Option<Handoff>) {
        if let Some(handoff) = handed {
            self.collect(id, handoff);
            return self.give_back(lock, owner, handoff).await;
        }
        match self.leave(lock, id).await {
            Ok(Some(handoff)) => self.give_back(lock, owner, handoff).await,
            Ok(None) => {}
            // The row stays; the reaper removes it after its deadline and a
            // lease handed to it meanwhile runs out by its TTL.
            Err(err) => {
                tracing::warn!(error = %err, waiter = id, "could not remove a departed waiter")
            }
        }
    }

    /// This broker's wake loop: one query per tick for handoffs to its
    /// waiters made by other brokers, while it has waiters.
    pub async fn run_waker(self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(WAKE_TICK) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            if self.local.lock().expect("local waiters").is_empty() {
                continue;
            }
            let granted = match waiters::granted_for_broker(&self.pool, &self.broker).await {
                Ok(granted) => granted,
                Err(err) => {
                    tracing::debug!(error = %err, "wake check failed");
                    continue;
                }
            };
            let mut local = self.local.lock().expect("local waiters");
            for row in granted {
                if let (Some(token), Some(expires_at)) = (row.granted_token, row.granted_expires_at)
                {
                    // A waiter no longer registered left (or is leaving) and
                    // finds the grant in its row itself.
                    if let Some(sender) = local.remove(&row.id) {
                        let _ = sender.send(Handoff {
                            token,
                            slot: row.granted_slot,
                            expires_at,
                            collected: false,
                        });
                    }
                }
            }
        }
    }
}

/// A waiter in the queue, guarded: if its request is dropped before it has
/// its answer (client gone), the waiter leaves the queue and a lease handed
/// to it is released.
pub(super) struct Queued {
    engine: Engine,
    lock: LockRef,
    id: u64,
    owner: String,
    rx: oneshot::Receiver<Handoff>,
    armed: bool,
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
        self.engine
            .metrics
            .inc("lockbroker_waiters_departed_total", &[]);
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
