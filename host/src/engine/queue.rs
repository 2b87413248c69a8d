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
//! oneshot per waiter). Waiters of other processes are found by their
//! broker's one batched query per tick ([`WAKE_TICK`]). A waiter that times
//! out or whose client goes away leaves the queue in a transaction on the
//! key's header row; a grant that raced with its departure is released
//! (handed on), never left held by nobody.

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
    pub broker: Vec<u8>,
    pub id: u64,
    pub handoff: Handoff,
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
        let guard = Departure {
            engine: self.clone(),
            lock: lock.clone(),
            id,
            owner: owner.to_owned(),
            armed: true,
        };
        self.add_queued(conn, lock, 1).await?;
        Ok(Queued { id, rx, guard })
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

    /// Delivers committed handoffs: in-process at once to our own waiters;
    /// other brokers' waiters are found by their wake loop.
    pub(super) fn deliver(&self, deliveries: Vec<Delivery>) {
        for d in deliveries {
            self.metrics.inc("lockbroker_handoffs_total", &[]);
            if d.broker != self.broker.as_bytes() {
                continue;
            }
            let sender = self.local.lock().expect("local waiters").remove(&d.id);
            if let Some(sender) = sender {
                let _ = sender.send(d.handoff);
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
                queued.guard.armed = false;
                self.abandon(lock, id, &queued.guard.owner).await;
                return Err(EngineError::ShuttingDown);
            }
        };
        if let Some(handoff) = outcome {
            queued.guard.armed = false;
            let engine = self.clone();
            // The row only told us our grant; remove it off the reply path.
            tokio::spawn(async move {
                let _ = waiters::delete(&engine.pool, id).await;
            });
            return Ok(Some(handoff));
        }
        // Timed out: leave the queue, unless a handoff won the race. Still
        // guarded: if the client goes away meanwhile, the guard finishes it.
        let left = self.leave(lock, id).await;
        queued.guard.armed = false;
        left
    }

    /// Removes waiter `id` from the queue. A handoff that happened first is
    /// returned (the caller now holds that lease).
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
            }),
            _ => {
                self.add_queued(&mut tx, lock, -1).await?;
                None
            }
        };
        tx.commit().await?;
        Ok(handoff)
    }

    /// A waiter whose client went away: leave the queue, and release a
    /// lease that was handed over in the meantime (handing it on).
    pub(super) async fn abandon(&self, lock: &LockRef, id: u64, owner: &str) {
        let result = async {
            if let Some(handoff) = self.leave(lock, id).await? {
                match handoff.slot {
                    Some(slot) => {
                        self.release_slot(lock, owner, slot, handoff.token).await?;
                    }
                    None => {
                        self.release(lock, owner, handoff.token).await?;
                    }
                }
            }
            Ok::<_, EngineError>(())
        }
        .await;
        if let Err(err) = result {
            // The row stays; the reaper removes it after its deadline and
            // the lease, if any, runs out by its TTL.
            tracing::warn!(error = %err, waiter = id, "could not remove a departed waiter");
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
                    if let Some(sender) = local.remove(&row.id) {
                        let _ = sender.send(Handoff {
                            token,
                            slot: row.granted_slot,
                            expires_at,
                        });
                    }
                }
            }
        }
    }
}

/// A waiter in the queue: its id, where its handoff arrives, and its guard.
pub(super) struct Queued {
    id: u64,
    rx: oneshot::Receiver<Handoff>,
    guard: Departure,
}

/// Leaves the queue if the waiting request is dropped (client gone).
struct Departure {
    engine: Engine,
    lock: LockRef,
    id: u64,
    owner: String,
    armed: bool,
}

impl Drop for Departure {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.engine
            .local
            .lock()
            .expect("local waiters")
            .remove(&self.id);
        let (engine, lock, id, owner) = (
            self.engine.clone(),
            self.lock.clone(),
            self.id,
            std::mem::take(&mut self.owner),
        );
        engine.metrics.inc("lockbroker_waiters_departed_total", &[]);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { engine.abandon(&lock, id, &owner).await });
        }
    }
}
