//! The reaper: hands expired leases on to their waiters, takes back
//! grants that dead brokers never delivered, clears out waiters past
//! their deadline or of dead brokers, and prunes lock history older than
//! its retention (one bounded batch every [`PRUNE_EVERY`] ticks, or every
//! tick while batches come back full).
//!
//! Every broker runs one. Each tick it decides which keys need work: those
//! with pending waiters but a free or expired lease (nobody handed it on),
//! and those whose queue holds stale waiters (past their deadline by
//! [`GRACE`], or of a gone broker) or grants a gone broker never claimed.
//! It finds them with plain reads, then reaps each (`Engine::reap`, the
//! same for every kind of lease) in its own transaction that takes the
//! key's header row with `SKIP LOCKED`: several brokers' reapers never wait
//! for each other, and never for a grant in progress.

use std::{sync::atomic::Ordering, time::Duration};

use tokio::sync::watch;

use super::{
    history::PRUNE_BATCH, listing::HELD_COUNT_EVERY, micros, Engine, EngineError, LockRef, Scopes,
};
use crate::store::{
    locks, rwlocks, semaphores,
    waiters::{self, Staleness},
    KeyRow, Kind,
};

/// Keys looked at per tick.
const BATCH: u32 = 100;
/// Ticks between sweeps of granted rows nobody collected.
const SWEEP_EVERY: u32 = 400;
/// How long past its deadline a waiter is left for its own broker to take
/// out of the queue before the reaper does (it is not eligible meanwhile).
const GRACE: Duration = Duration::from_secs(1);
/// How long after its lease ended a granted row nobody collected is swept.
const UNCOLLECTED_AFTER: Duration = Duration::from_secs(60);
/// Granted rows swept per sweep.
const SWEEP_BATCH: u32 = 1000;
/// Ticks between prunings of old history (sooner while there is a backlog).
const PRUNE_EVERY: u32 = 40;

impl Engine {
    /// Runs until `stop`, once every `interval`, on the keys of the
    /// tenants of [`Engine::set_scopes`] as they are at each pass (keys of
    /// other tenants are left alone).
    pub async fn run_reaper(
        self,
        interval: Duration,
        retention: Duration,
        stop: watch::Receiver<bool>,
    ) {
        // A pruning that deleted a full batch prunes again next tick.
        let backlog = std::sync::atomic::AtomicBool::new(false);
        let errors = "lockbroker_reaper_errors_total";
        // The first pass counts too, so the gauge has a value at once.
        let count_every = u32::try_from(HELD_COUNT_EVERY.as_millis() / interval.as_millis().max(1))
            .unwrap_or(u32::MAX)
            .max(1);
        let (engine, backlog) = (&self, &backlog);
        self.every(
            interval,
            stop,
            errors,
            "reaper pass failed",
            |tick| async move {
                let prune = (backlog.load(Ordering::Relaxed) || tick.is_multiple_of(PRUNE_EVERY))
                    .then_some(retention);
                let sweep = tick.is_multiple_of(SWEEP_EVERY);
                let tenants = engine.scopes();
                let full = engine.reap_once(&tenants, sweep, prune).await?;
                if tick.wrapping_sub(1).is_multiple_of(count_every) {
                    engine.heat.prune();
                    // Each tenant's held leases, for the gauge: last, and
                    // on its own (a failed count delays nothing).
                    if let Err(err) = engine.count_held_leases(&tenants).await {
                        engine.metrics.inc(errors, &[]);
                        tracing::debug!(error = %err, "counting held leases failed");
                    }
                }
                backlog.store(full, Ordering::Relaxed);
                Ok(())
            },
        )
        .await;
    }

    /// One pass; whether a pruning deleted a full batch (more may be due).
    async fn reap_once(
        &self,
        tenants: &Scopes,
        sweep: bool,
        prune: Option<Duration>,
    ) -> Result<bool, EngineError> {
        let stale = Staleness {
            alive_us: self.alive_us(),
            grace_us: micros(GRACE),
        };
        let mut conn = self.conn(self.budget()).await?;
        let mut keys = locks::free_with_waiters(&mut conn, BATCH).await?;
        keys.extend(semaphores::free_with_waiters(&mut conn, BATCH).await?);
        keys.extend(rwlocks::free_with_waiters(&mut conn, BATCH).await?);
        keys.extend(waiters::keys_to_clean(&mut conn, stale, BATCH).await?);
        if sweep {
            waiters::delete_uncollected(&mut conn, micros(UNCOLLECTED_AFTER), SWEEP_BATCH).await?;
        }
        conn.done();
        drop(conn);
        keys.sort_by(|a, b| {
            (a.kind, &a.tenant, &a.lock_key).cmp(&(b.kind, &b.tenant, &b.lock_key))
        });
        keys.dedup_by(|a, b| (a.kind, &a.tenant, &a.lock_key) == (b.kind, &b.tenant, &b.lock_key));
        for key in keys {
            let Some(lock) = lock_ref(tenants, &key).await else {
                continue;
            };
            if let Err(err) = self.reap(&lock).await {
                self.metrics.inc("lockbroker_reaper_errors_total", &[]);
                tracing::debug!(error = %err, key = %lock.storage_key, "reaping a key failed");
            }
        }
        // Sessions expired by the database clock: each ended by one broker.
        let stuck = prune.is_some();
        if let Err(err) = self.end_expired_sessions(tenants, stuck).await {
            self.metrics.inc("lockbroker_reaper_errors_total", &[]);
            tracing::debug!(error = %err, "ending expired sessions failed");
        }
        // Each tenant's live sessions, for the gauge (about once a second
        // at the default interval).
        if prune.is_some() {
            if let Err(err) = self.count_sessions(tenants).await {
                self.metrics.inc("lockbroker_reaper_errors_total", &[]);
                tracing::debug!(error = %err, "counting sessions failed");
            }
        }
        // Last, and on its own: a failed pruning (another broker's pruning
        // deadlocked with it) delays no handoff, and is tried again.
        let Some(retention) = prune else {
            return Ok(false);
        };
        match self.prune_history(retention).await {
            Ok(pruned) => Ok(pruned == u64::from(PRUNE_BATCH)),
            Err(err) => {
                self.metrics.inc("lockbroker_reaper_errors_total", &[]);
                tracing::debug!(error = %err, "pruning lock history failed");
                Ok(false)
            }
        }
    }
}

/// The lock a reaped row is about (its tenant must still be configured),
/// with its delays as the tenant's policy gives them.
async fn lock_ref(tenants: &Scopes, key: &KeyRow) -> Option<LockRef> {
    let tenant = tenants.get(&key.tenant)?;
    let kind = match key.kind {
        0 => Kind::Lock,
        1 => Kind::Election,
        2 => Kind::Semaphore,
        3 => Kind::RwLock,
        _ => return None,
    };
    let storage_key = String::from_utf8(key.lock_key.clone()).ok()?;
    // The reaper has no client key; fairness policies get the storage key.
    Some(tenant.resolve(kind, storage_key.clone(), storage_key).await)
}
