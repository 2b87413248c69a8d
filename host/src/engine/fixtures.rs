//! What the engine's unit tests share: a clock, a lease row and a lock of
//! a tenant whose pacing is the built-in first-come order.

use std::sync::Arc;

use chrono::NaiveDateTime;

use super::{
    pacing::{Pacing, Pending},
    seat::{LeaseRow, Seat},
    LockRef, Scope,
};
use crate::{
    policy::{Contention, Decision, Waiter},
    store::Kind,
};

/// `ms` milliseconds after a fixed moment of the database clock.
pub fn at(ms: i64) -> NaiveDateTime {
    chrono::DateTime::from_timestamp_millis(1_800_000_000_000 + ms)
        .unwrap()
        .naive_utc()
}

/// A lock's row held once by `owner` (none: free) with `token`, expiring
/// `expires_ms` after [`at`]`(0)`, which is when it was read.
pub fn row(owner: Option<&str>, token: u64, expires_ms: Option<i64>) -> LeaseRow {
    LeaseRow {
        seat: Seat::Whole,
        owner: owner.map(|o| o.as_bytes().to_vec()),
        token,
        hold_count: 1,
        expires_at: expires_ms.map(at),
        released_by: None,
        not_before: None,
        waiting_at: None,
        standby: None,
        session: None,
        now: at(0),
    }
}

/// The oldest waiter first; give up rather than back off.
pub struct Fifo;

impl Pacing for Fifo {
    fn always_oldest(&self) -> bool {
        true
    }
    fn pick_next<'a>(&'a self, _: &'a str, _: Vec<Waiter>) -> Pending<'a, usize> {
        Box::pin(async { 0 })
    }
    fn next_delay(&self, _: Contention) -> Pending<'_, Decision> {
        Box::pin(async { Decision::GiveUp })
    }
}

/// Tenant `t`'s `kind` named `key` (stored as `storage_key`), paced by
/// [`Fifo`], without delays.
pub fn lock(kind: Kind, key: &str, storage_key: &str) -> LockRef {
    Scope {
        tenant: "t".into(),
        max_waiters: 10,
        pacing: Arc::new(Fifo),
        delays: Default::default(),
    }
    .lock(kind, key.into(), storage_key.into())
}
