//! Bounds on the connections held by operations that wait on a key's row
//! lock in the database (a waiting acquire, leaving a queue). Such an
//! operation first takes a place of its key ([`PER_KEY`] at once) and a
//! place among all of them (half the pool), in memory; only then a pooled
//! connection. A hot key's row lets one transaction through at a time
//! anyway, but without bounds every request for it would hold a
//! connection while it waits inside InnoDB, and a few hot keys (or clients
//! that send waiting acquires and hang up, leaving their operations to
//! finish) could hold every connection and starve the other keys and
//! tenants. A few places per key, not one: InnoDB releases a row lock
//! before the commit's log flush, so the next transaction on the key runs
//! while the last one's commit is being made durable.
//!
//! Places are waited for within the operation's budget: past it, the
//! operation answers 503 like one that found no free connection.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Budget, EngineError, LockRef};
use crate::store::{pool::ConnectError, Kind};

/// Operations of one key that may hold connections at once.
pub const PER_KEY: usize = 4;

/// How many keys may be remembered before the forgotten ones are swept.
const SWEEP_ABOVE: usize = 1024;

/// A key: tenant, kind, storage key.
type Key = (String, Kind, String);

/// An operation's places, held until dropped.
pub struct Turn {
    _key: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

/// The places of the keys operations wait for (an entry lives while
/// someone holds or waits for one of its places), and the places of all.
pub struct Gates {
    keys: Mutex<HashMap<Key, Weak<Semaphore>>>,
    all: Arc<Semaphore>,
}

impl Gates {
    /// Places for a pool of `connections`: half of them for operations
    /// that wait on rows (at least one).
    pub fn new(connections: usize) -> Gates {
        Gates {
            keys: Mutex::default(),
            all: Arc::new(Semaphore::new((connections / 2).max(1))),
        }
    }

    /// Waits for a place of `lock`'s key, then one among all, within
    /// `budget`.
    ///
    /// # Errors
    /// The budget ran out first: [`ConnectError::Busy`] (the broker is
    /// loaded; nothing was done).
    pub async fn turn(&self, lock: &LockRef, budget: Budget) -> Result<Turn, EngineError> {
        let key = self.places(lock);
        let places = async {
            let key = key.acquire_owned().await.ok()?;
            let all = self.all.clone().acquire_owned().await.ok()?;
            Some(Turn {
                _key: key,
                _all: all,
            })
        };
        tokio::time::timeout_at(budget.deadline, places)
            .await
            .ok()
            .flatten()
            .ok_or_else(|| EngineError::from(ConnectError::Busy))
    }

    fn places(&self, lock: &LockRef) -> Arc<Semaphore> {
        let mut keys = self.keys.lock().expect("gates lock");
        if keys.len() > SWEEP_ABOVE {
            keys.retain(|_, places| places.strong_count() > 0);
        }
        let id = (lock.tenant.clone(), lock.kind, lock.storage_key.clone());
        if let Some(places) = keys.get(&id).and_then(Weak::upgrade) {
            return places;
        }
        let places = Arc::new(Semaphore::new(PER_KEY));
        keys.insert(id, Arc::downgrade(&places));
        places
    }
}
