//! The reaper: hands expired leases on to their waiters, takes back
//! grants that dead brokers never delivered, and clears out waiters past
//! their deadline or of dead brokers.
//!
//! Every broker runs one. Each tick it lists keys that need work with a
//! plain read, then works on each in its own transaction that takes the
//! key's header row with `SKIP LOCKED`: several brokers' reapers never wait
//! for each other, and never for a grant in progress.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::sync::watch;

use super::{Engine, EngineError, LockRef};
use crate::{
    store::{
        waiters::{self, ReapKey},
        Kind,
    },
    tenant::Tenant,
};

/// Keys looked at per tick.
const BATCH: u32 = 100;
/// Ticks between sweeps of granted rows nobody collected.
const SWEEP_EVERY: u32 = 400;
/// How long past its deadline a waiter is left for its own broker to take
/// out of the queue before the reaper does (it is not eligible meanwhile).
const GRACE: Duration = Duration::from_secs(1);

impl Engine {
    /// Runs until `stop`, once every `interval`.
    pub async fn run_reaper(
        self,
        tenants: Vec<Arc<Tenant>>,
        interval: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let tenants: HashMap<Vec<u8>, Arc<Tenant>> = tenants
            .into_iter()
            .map(|t| (t.name.clone().into_bytes(), t))
            .collect();
        let mut tick = 0u32;
        let mut last_warning: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            tick = tick.wrapping_add(1);
            if let Err(err) = self
                .reap_once(&tenants, tick.is_multiple_of(SWEEP_EVERY))
                .await
            {
                self.metrics.inc("lockbroker_reaper_errors_total", &[]);
                // At most one warning every 10 s: the database may be down.
                if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    tracing::warn!(error = %err, "reaper pass failed");
                    last_warning = Some(tokio::time::Instant::now());
                }
            }
        }
    }

    async fn reap_once(
        &self,
        tenants: &HashMap<Vec<u8>, Arc<Tenant>>,
        sweep: bool,
    ) -> Result<(), EngineError> {
        let (alive, grace) = (self.alive_us(), GRACE.as_micros() as u64);
        let mut conn = self.conn(self.budget()).await?;
        let mut keys = waiters::lock_keys_to_reap(&mut conn, BATCH, alive, grace).await?;
        keys.extend(waiters::semaphore_keys_to_reap(&mut conn, BATCH, alive, grace).await?);
        if sweep {
            waiters::delete_uncollected(&mut conn).await?;
        }
        conn.done();
        drop(conn);
        for key in keys {
            let Some(lock) = lock_ref(tenants, &key) else {
                continue;
            };
            let result = match lock.kind {
                Kind::Semaphore => self.reap_semaphore(&lock).await,
                Kind::Lock | Kind::Election => self.reap_lock(&lock).await,
            };
            if let Err(err) = result {
                self.metrics.inc("lockbroker_reaper_errors_total", &[]);
                tracing::debug!(error = %err, key = %lock.storage_key, "reaping a key failed");
            }
        }
        Ok(())
    }
}

/// The lock a reaped row is about (its tenant must still be configured).
fn lock_ref(tenants: &HashMap<Vec<u8>, Arc<Tenant>>, key: &ReapKey) -> Option<LockRef> {
    let tenant = tenants.get(&key.tenant)?.clone();
    let kind = match key.kind {
        0 => Kind::Lock,
        1 => Kind::Election,
        2 => Kind::Semaphore,
        _ => return None,
    };
    let storage_key = String::from_utf8(key.lock_key.clone()).ok()?;
    Some(LockRef {
        tenant,
        kind,
        // The reaper has no client key; fairness policies get the storage key.
        key: storage_key.clone(),
        storage_key,
    })
}
