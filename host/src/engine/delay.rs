//! Lock-delay and minimum hold, per tenant: when a key may be granted
//! again, judged by the database clock read with its row.
//!
//! - `lock_delay_ms` (Chubby, Consul): after a lease *expires* (its holder
//!   may still be working, unaware), the key is not granted again until
//!   that long after the expiry. A clean release does not delay.
//! - `min_hold_ms` (ShedLock's `lockAtLeastFor`): a key is not granted
//!   again until that long after its last grant, released or not, so a job
//!   run by whoever holds it runs at most once per period.
//!
//! Both are the tenant's config, unless its policy exports `timing`: then
//! the policy's answer for the key's storage key overrides them, key by
//! key ([`Delays::overridden_by`]), asked once when the operation's
//! [`LockRef`] is made ([`super::Scope::resolve`]), by the reaper too. The
//! [`LockRef`] carries the effective values through the operation (and the
//! delay timer it may start), so the policy is asked once per operation.
//!
//! A grant under `min_hold_ms` writes the moment into the row
//! (`locks.not_before`); an expired lease still in its row is judged by its
//! `expires_at`; freeing an expired lease carries its delay into
//! `not_before`. A key that is blocked with waiters queued is handed on by a
//! timer when the block ends ([`Engine::hand_on_later`]), the reaper's pass
//! being the fallback. Keys with delays (by their effective values) take
//! the general path only (not batches, not the stored procedures, which
//! know nothing of them).

use std::time::Duration;

use chrono::NaiveDateTime;

use super::{plus_ms, seat::Lease, seat::LeaseRow, Engine, LockRef};
use crate::{policy::Delays, store::Locking};

/// When the key of `row` may be granted next, if that is later than the
/// row's `now`: the `not_before` a grant or an expiry left, or the expiry
/// of a lease still in the row plus `lock_delay_ms`.
pub(super) fn blocked_until(row: &LeaseRow, delays: Delays) -> Option<NaiveDateTime> {
    let mut until = row.not_before;
    if let (Some(_), Some(expires_at), None) = (&row.owner, row.expires_at, row.live_owner()) {
        if delays.lock_delay_ms > 0 {
            until = until.max(Some(plus_ms(expires_at, delays.lock_delay_ms)));
        }
    }
    until.filter(|until| *until > row.now)
}

/// Milliseconds from the row's `now` to `until`, rounded up (at least 1).
pub(super) fn ms_until(row: &LeaseRow, until: NaiveDateTime) -> u64 {
    let us = (until - row.now).num_microseconds().unwrap_or(i64::MAX);
    u64::try_from(us).unwrap_or(0).div_ceil(1000).max(1)
}

/// The `not_before` to leave when freeing `row`: an expired lease's delay
/// is carried into it (its expiry is gone from the row once freed).
pub(super) fn after_free(row: &LeaseRow, delays: Delays) -> Option<NaiveDateTime> {
    blocked_until(row, delays)
}

/// The `not_before` a fresh grant of `lease` writes under `min_hold_ms`
/// (`None` keeps the row's, which does not block any more since the grant
/// was allowed).
pub(super) fn after_grant(lease: &Lease, delays: Delays) -> Option<NaiveDateTime> {
    if !lease.fresh || delays.min_hold_ms == 0 {
        return None;
    }
    Some(plus_ms(lease.granted_at(), delays.min_hold_ms))
}

impl Engine {
    /// Hands `lock` on to its next waiter once a block of `ms` ends (one
    /// timer per key at a time on this broker; the reaper's pass is the
    /// fallback if this broker stops). Harmless if nothing is left to hand
    /// on by then.
    pub(super) fn hand_on_later(&self, lock: &LockRef, ms: u64) {
        let key = (lock.tenant.clone(), lock.storage_key.clone());
        if !self
            .delayed
            .lock()
            .expect("delayed keys")
            .insert(key.clone())
        {
            return;
        }
        let (engine, lock) = (self.clone(), lock.clone());
        let mut stop = self.shutdown.clone();
        tokio::spawn(async move {
            // One ms more: the database clock must be past the block.
            let pause = Duration::from_millis(ms.saturating_add(1));
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            engine.delayed.lock().expect("delayed keys").remove(&key);
            if let Err(err) = engine.reap_with(&lock, Locking::Wait).await {
                tracing::debug!(error = %err, key = %lock.storage_key, "handing on after a lock delay failed; the reaper retries");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        fixtures::{self, at},
        seat::Seat,
    };

    fn row(owner: Option<&str>, expires_ms: Option<i64>, not_before: Option<i64>) -> LeaseRow {
        LeaseRow {
            not_before: not_before.map(at),
            ..fixtures::row(owner, 3, expires_ms)
        }
    }

    const DELAY: Delays = Delays {
        lock_delay_ms: 500,
        min_hold_ms: 0,
    };

    #[test]
    fn an_expired_lease_blocks_for_the_lock_delay_after_its_expiry() {
        assert_eq!(
            blocked_until(&row(Some("a"), Some(-100), None), DELAY),
            Some(at(400))
        );
        assert_eq!(
            blocked_until(&row(Some("a"), Some(-500), None), DELAY),
            None
        );
        assert_eq!(ms_until(&row(Some("a"), Some(-100), None), at(400)), 400);
        // No delay configured: nothing blocks.
        assert_eq!(
            blocked_until(&row(Some("a"), Some(-100), None), Delays::default()),
            None
        );
    }

    #[test]
    fn a_clean_release_does_not_delay_but_not_before_does() {
        assert_eq!(blocked_until(&row(None, None, None), DELAY), None);
        assert_eq!(
            blocked_until(&row(None, None, Some(10)), DELAY),
            Some(at(10))
        );
        assert_eq!(blocked_until(&row(None, None, Some(0)), DELAY), None);
        // The later of both.
        assert_eq!(
            blocked_until(&row(Some("a"), Some(-100), Some(900)), DELAY),
            Some(at(900))
        );
    }

    #[test]
    fn a_fresh_grant_under_min_hold_blocks_from_its_grant_time() {
        let lease = Lease {
            seat: Seat::Whole,
            owner: "a".into(),
            token: 4,
            hold_count: 1,
            ttl_ms: 1000,
            expires_at: at(1000),
            fresh: true,
            session: None,
        };
        let hold = Delays {
            lock_delay_ms: 0,
            min_hold_ms: 300,
        };
        assert_eq!(after_grant(&lease, hold), Some(at(300)));
        assert_eq!(after_grant(&lease, Delays::default()), None);
        let renewal = Lease {
            fresh: false,
            ..lease
        };
        assert_eq!(after_grant(&renewal, hold), None);
    }
}
