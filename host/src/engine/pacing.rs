//! The engine's narrow handle on a tenant's policy: which waiter goes next,
//! how long a refused client should wait, and (if the policy exports
//! `timing`) a lock's delays. The engine asks nothing else of a tenant
//! (naming happens before it), so it can be driven with any [`Pacing`], a
//! tenant's or a test's.

use std::{future::Future, pin::Pin, sync::Arc};

use crate::{
    policy::{Contention, Decision, Delays, Waiter},
    tenant::Tenant,
};

/// A boxed future, so that [`Pacing`] can be a trait object.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Fairness, backoff and a lock's delays, as the engine uses them.
pub trait Pacing: Send + Sync + 'static {
    /// True when [`Pacing::pick_next`] always picks the oldest waiter, so
    /// the engine need not read the queue to ask it.
    fn always_oldest(&self) -> bool;
    /// Index into `waiters` (never empty, oldest first) of the next grant.
    fn pick_next<'a>(&'a self, key: &'a str, waiters: Vec<Waiter>) -> Pending<'a, usize>;
    /// The delay before the next try, or give up (the `retry_after_ms` hint).
    fn next_delay(&self, contention: Contention) -> Pending<'_, Decision>;
    /// The lock-delay and minimum hold of the lock stored as `storage_key`:
    /// `config` (the tenant's) as its policy overrides it. `None` when the
    /// policy overrides nothing (no `timing` export): `config` stands, and
    /// there is nothing to box or await.
    fn delays<'a>(&'a self, storage_key: &'a str, config: Delays) -> Option<Pending<'a, Delays>> {
        let _ = (storage_key, config);
        None
    }
    /// The id of the policy version in force (the history names it);
    /// none for the built-in policy.
    fn version(&self) -> Option<Arc<str>> {
        None
    }
    /// Whether a session's wait for the key stored as `storage_key` is
    /// refused when it would close a cycle (issue #33; the policy's
    /// `deadlocks` may turn it off key by key). `None`: yes, with nothing
    /// to box or await (no `deadlocks` export).
    fn detects_deadlocks<'a>(&'a self, storage_key: &'a str) -> Option<Pending<'a, bool>> {
        let _ = storage_key;
        None
    }
}

/// A tenant paces by its policy in force (with the policy's fallbacks).
impl Pacing for Tenant {
    fn always_oldest(&self) -> bool {
        self.policy.always_oldest()
    }

    fn pick_next<'a>(&'a self, key: &'a str, waiters: Vec<Waiter>) -> Pending<'a, usize> {
        Box::pin(self.policy.pick_next(key, waiters))
    }

    fn next_delay(&self, contention: Contention) -> Pending<'_, Decision> {
        Box::pin(self.policy.next_delay(contention))
    }

    fn delays<'a>(&'a self, storage_key: &'a str, config: Delays) -> Option<Pending<'a, Delays>> {
        if !self.policy.has_timing() {
            return None;
        }
        Some(Box::pin(async move {
            config.overridden_by(self.policy.timing(storage_key).await)
        }))
    }

    fn version(&self) -> Option<Arc<str>> {
        self.policy.version_id()
    }

    fn detects_deadlocks<'a>(&'a self, storage_key: &'a str) -> Option<Pending<'a, bool>> {
        if !self.policy.has_deadlocks() {
            return None;
        }
        Some(Box::pin(self.policy.detects_deadlocks(storage_key)))
    }
}

/// The tenant's handle, shared.
pub fn of(tenant: &Arc<Tenant>) -> Arc<dyn Pacing> {
    tenant.clone()
}
