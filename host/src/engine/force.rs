//! An operator ending a stuck lease (`POST /v1/admin/tenants/{tenant}/
//! locks/{key}/release`): whoever holds the lock loses it at once, as if
//! its lease had expired; the key goes to its next waiter by the same
//! handoff a release makes, or is freed. The token is never reused: the
//! next grant continues from it, so the old holder's writes are fenced off.

use super::{
    detach::finish,
    history,
    seat::{LeaseRow, Seat},
    settle::Expect,
    Engine, EngineError, LockRef, Op,
};
use crate::store::{history::EventKind, locks, Locking};

/// The lease a force-release ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    /// Its holder.
    pub owner: String,
    /// Its token; the next grant's is greater.
    pub token: u64,
    /// True when the key went straight to a queued waiter.
    pub handed_off: bool,
}

impl Engine {
    /// Ends the live lease of `lock`, whoever holds it (every hold of a
    /// re-entered lock), and hands the key on. Runs to its end even if the
    /// caller leaves.
    ///
    /// # Errors
    /// [`EngineError::NotHeld`] when no lease is live (nothing changes);
    /// [`EngineError::Unavailable`].
    pub fn force_release(&self, lock: &LockRef) -> Op<Forced> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.force_release_now(&lock).await })
    }

    async fn force_release_now(&self, lock: &LockRef) -> Result<Forced, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let read = locks::select(&mut tx, lock.row(), Locking::Wait).await?;
            let Some((mut queued, row)) = read.map(LeaseRow::of_lock) else {
                tx.rollback().await?;
                return Err(EngineError::NotHeld);
            };
            let Some(owner) = row.live_owner().map(|o| String::from_utf8_lossy(o).into_owned())
            else {
                tx.rollback().await?;
                return Err(EngineError::NotHeld);
            };
            // Recorded in this transaction: it exists exactly when the
            // change does (then the handoff's own event, if any).
            let token = row.token;
            history::note(&mut tx, lock, EventKind::ForceReleased, &owner, token, row.now);
            let delivery = self.hand_on(&mut tx, lock, &row, &mut queued).await?;
            self.commit(
                tx,
                lock,
                Expect::Ended {
                    seat: Seat::Whole,
                    token,
                },
            )
            .await?;
            let handed_off = delivery.is_some();
            self.deliver(delivery);
            tracing::warn!(tenant = %lock.tenant, key = %lock.storage_key, %owner, token, "lease force-released by an operator");
            Ok(Forced {
                owner,
                token,
                handed_off,
            })
        })
        .await
    }
}
