//! A guard's acquire in flight, and what becomes of a lease it may have
//! been granted without the guard ever seeing it: when the acquire is
//! cancelled (its future dropped: a `select!`, a timeout, an aborted task)
//! or ends with an unknown outcome ([`Error::OutcomeUnknown`],
//! [`Error::Timeout`]), a background task looks for a lease of its owner
//! and gives it back ([`Guarded::abandon`]).
//!
//! The broker, for its part, releases a grant whose request's connection
//! closed before it was answered; this covers the answer that was on its
//! way when the caller gave up. It is done only for owners the client made
//! up (unique to the acquire): a caller's own owner may hold the key
//! already (re-entry), and that lease is not this acquire's to give back.

use std::time::Duration;

use crate::{client::Client, error::Error, guard::Guarded};

/// How long after the first look a second one is made: a grant committed
/// just as the caller gave up may show only then.
const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Gives back `owner`'s lease of `target` when dropped while armed.
pub(crate) struct Pending<K: Guarded> {
    client: Client,
    target: Option<K::Target>,
    owner: String,
    armed: bool,
}

impl<K: Guarded> Pending<K> {
    /// An acquire of `target` by `owner`; `made_up`: the client made the
    /// owner up for this acquire alone (only then is it armed).
    pub(crate) fn new(client: Client, target: K::Target, owner: String, made_up: bool) -> Self {
        Pending {
            client,
            target: Some(target),
            owner,
            armed: made_up,
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn target(&self) -> &K::Target {
        self.target.as_ref().expect("taken only on drop")
    }

    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The acquire returned `outcome`: nothing is left to give back unless
    /// its outcome is unknown.
    pub(crate) fn settle<T>(mut self, outcome: &Result<T, Error>) {
        self.armed = matches!(outcome, Err(Error::OutcomeUnknown(_) | Error::Timeout(_)));
    }
}

impl<K: Guarded> Drop for Pending<K> {
    fn drop(&mut self) {
        let (true, Some(target)) = (self.armed, self.target.take()) else {
            return;
        };
        // Without a runtime (it is shutting down) the lease runs out by
        // itself.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let owner = std::mem::take(&mut self.owner);
        runtime.spawn(async move {
            // Best effort: a failure leaves the lease to run out.
            if K::abandon(&client, &target, &owner).await.is_ok() {
                tokio::time::sleep(LOOK_AGAIN_AFTER).await;
                let _ = K::abandon(&client, &target, &owner).await;
            }
        });
    }
}
