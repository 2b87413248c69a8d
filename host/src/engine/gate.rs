//! Turns per key on this broker: an operation that waits for a key's row
//! lock in the database (a waiting acquire, leaving a queue) first takes
//! the key's turn here, in memory. A hot key's row lock lets one
//! transaction through at a time anyway; without turns, every request for
//! it would hold a pooled connection while it waits its turn inside
//! InnoDB, and a few hot keys (or clients that send waiting acquires and
//! hang up, leaving their operations to finish) could hold every
//! connection and starve the other keys and tenants. With turns, a hot key
//! holds at most one of the broker's connections waiting on its row.
//!
//! A turn is waited for within the operation's budget: past it, the
//! operation answers 503 like one that found no free connection.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use tokio::sync::OwnedMutexGuard;

use super::{Budget, EngineError, LockRef};
use crate::store::{pool::ConnectError, Kind};

/// The turn of one key, held until dropped.
pub type Turn = OwnedMutexGuard<()>;

/// How many keys may be remembered before the forgotten ones are swept.
const SWEEP_ABOVE: usize = 1024;

/// A key: tenant, kind, storage key.
type Key = (String, Kind, String);

/// The turns of the keys operations are waiting for (only those: an entry
/// lives while someone holds or waits for it).
#[derive(Default)]
pub struct Gates {
    keys: Mutex<HashMap<Key, Weak<tokio::sync::Mutex<()>>>>,
}

impl Gates {
    /// Waits for `lock`'s turn within `budget`.
    ///
    /// # Errors
    /// The budget ran out first: [`ConnectError::Busy`] (the broker is
    /// loaded; nothing was done).
    pub async fn turn(&self, lock: &LockRef, budget: Budget) -> Result<Turn, EngineError> {
        let gate = self.gate(lock);
        tokio::time::timeout_at(budget.deadline, gate.lock_owned())
            .await
            .map_err(|_| EngineError::from(ConnectError::Busy))
    }

    fn gate(&self, lock: &LockRef) -> Arc<tokio::sync::Mutex<()>> {
        let mut keys = self.keys.lock().expect("gates lock");
        if keys.len() > SWEEP_ABOVE {
            keys.retain(|_, gate| gate.strong_count() > 0);
        }
        let id = (lock.tenant.clone(), lock.kind, lock.storage_key.clone());
        if let Some(gate) = keys.get(&id).and_then(Weak::upgrade) {
            return gate;
        }
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        keys.insert(id, Arc::downgrade(&gate));
        gate
    }
}
