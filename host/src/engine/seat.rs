//! Where a lease lives: a lock's (or election's) own row in `locks`, or one
//! slot row of a semaphore. The rest of the engine handles leases the same
//! way whatever their seat; this is the one place that tells the two kinds
//! of row apart and picks the statements for each.
//!
//! Every key also has a *header* row that serializes its queue: for a lock
//! it is the lease row itself, for a semaphore the `semaphores` row. Whoever
//! changes the queue or hands a lease on holds the header first, then the
//! seat: one lock order, no deadlocks.
//!
//! A rwlock (`rwlock`) has a header (its `rwlocks` row) but no seats: its
//! queue count is kept here like the others', its leases are its own.

use chrono::NaiveDateTime;

use super::{delay, LockRef};
use crate::store::{
    elections,
    locks::{self, LockRow},
    pool::Conn,
    rwlocks,
    semaphores::{self, SlotKey, SlotRow},
    Kind, Locking,
};

/// Which row of a key holds a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Seat {
    /// The key's own row (a lock or an election): one lease per key.
    Whole,
    /// Slot `n` of a semaphore: one lease per slot.
    Slot(u32),
}

impl Seat {
    /// The slot number, for a semaphore's seat.
    pub fn slot(self) -> Option<u32> {
        match self {
            Seat::Whole => None,
            Seat::Slot(n) => Some(n),
        }
    }

    /// The seat a waiter row's `granted_slot` names.
    pub(super) fn from_slot(slot: Option<u32>) -> Seat {
        slot.map_or(Seat::Whole, Seat::Slot)
    }
}

/// A lease row as read, whatever its seat, with the database clock it was
/// read with: every decision about it is made by that clock.
#[derive(Debug, Clone)]
pub(super) struct LeaseRow {
    pub seat: Seat,
    pub owner: Option<Vec<u8>>,
    pub token: u64,
    /// How many times the holder has it (a slot is held once).
    pub hold_count: u32,
    pub expires_at: Option<NaiveDateTime>,
    /// The mark of the release that last ended a lease in this row.
    pub released_by: Option<u64>,
    /// No new grant before this (`delay`; locks only).
    pub not_before: Option<NaiveDateTime>,
    /// The broker whose memory holds waiters for the key, as written in
    /// the row (`held_here`; locks only).
    pub waiting_at: Option<Vec<u8>>,
    /// `waiting_at` while that broker is alive: the key has waiters there,
    /// and only that broker hands it on.
    pub standby: Option<Vec<u8>>,
    /// The session the lease is held in (`None`: a plain lease, or a free
    /// row).
    pub session: Option<Vec<u8>>,
    pub now: NaiveDateTime,
}

impl LeaseRow {
    /// A lock row, and its count of pending waiters (it is its own header).
    pub fn of_lock(row: LockRow) -> (u32, LeaseRow) {
        let lease = LeaseRow {
            seat: Seat::Whole,
            owner: row.owner,
            token: row.token,
            hold_count: row.hold_count,
            expires_at: row.expires_at,
            released_by: row.released_by,
            not_before: row.not_before,
            waiting_at: row.waiting_at,
            standby: row.standby,
            session: row.session,
            now: row.now,
        };
        (row.queued, lease)
    }

    pub fn of_slot(row: SlotRow) -> LeaseRow {
        LeaseRow {
            seat: Seat::Slot(row.slot),
            hold_count: u32::from(row.owner.is_some()),
            owner: row.owner,
            token: row.token,
            expires_at: row.expires_at,
            released_by: row.released_by,
            not_before: None,
            waiting_at: None,
            standby: None,
            session: row.session,
            now: row.now,
        }
    }

    /// The holder, if the lease has not expired by the database clock.
    pub fn live_owner(&self) -> Option<&[u8]> {
        match (&self.owner, self.expires_at) {
            (Some(owner), Some(expires_at)) if expires_at > self.now => Some(owner),
            _ => None,
        }
    }

    /// Whether another live broker than `here` holds waiters for the key
    /// in its memory: the key is that broker's to hand on.
    pub fn standby_elsewhere(&self, here: &str) -> bool {
        self.standby
            .as_deref()
            .is_some_and(|b| b != here.as_bytes())
    }

    /// True when this is a live lease of `owner` with `token`.
    pub fn owned_by(&self, owner: &str, token: u64) -> bool {
        self.live_owner() == Some(owner.as_bytes()) && self.token == token
    }

    /// `owner`'s live lease of this row after one of its several holds is
    /// released (the row is `owned_by` it, with a `hold_count` over 1).
    pub fn less_one_hold(&self, owner: &str) -> Lease {
        Lease {
            seat: self.seat,
            owner: owner.to_owned(),
            token: self.token,
            hold_count: self.hold_count - 1,
            ttl_ms: self.remaining_ms(),
            expires_at: self.expires_at.unwrap_or(self.now),
            fresh: false,
            session: self
                .session
                .as_deref()
                .map(|s| String::from_utf8_lossy(s).into_owned()),
        }
    }

    /// Milliseconds left on a live lease, 0 otherwise.
    pub fn remaining_ms(&self) -> u64 {
        match (self.live_owner(), self.expires_at) {
            (Some(_), Some(expires_at)) => {
                u64::try_from((expires_at - self.now).num_milliseconds()).unwrap_or(0)
            }
            _ => 0,
        }
    }
}

/// A lease as the engine grants, renews and hands it on, whatever its seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub seat: Seat,
    pub owner: String,
    /// The fencing token: strictly increasing per seat across all grants.
    pub token: u64,
    pub hold_count: u32,
    pub ttl_ms: u64,
    /// When it ends, by the database clock (UTC).
    pub expires_at: NaiveDateTime,
    /// A new grant (a new token), not a re-entry or a renewal.
    pub fresh: bool,
    /// The session it is held in: then it lives as long as the session,
    /// its `expires_at` far ahead ([`SESSION_LEASE_TTL_MS`]).
    pub session: Option<String>,
}

/// The TTL of a lease held in a session: a century. It never runs out on
/// its own; it ends by its release or its session's end.
pub const SESSION_LEASE_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

impl Lease {
    /// Answered as held in a session that lives until `expires_at` with
    /// `ttl_ms` (the lease's own row says a century).
    pub fn in_session_until(&mut self, expires_at: NaiveDateTime, ttl_ms: u64) {
        self.expires_at = expires_at;
        self.ttl_ms = ttl_ms;
    }

    /// When a fresh lease was granted, by the database clock: its expiry
    /// less its TTL (both from the clock read with its row).
    pub fn granted_at(&self) -> NaiveDateTime {
        self.expires_at - chrono::Duration::milliseconds(i64::try_from(self.ttl_ms).unwrap_or(0))
    }
}

/// Slot `n` of the semaphore `lock`.
fn slot_key(lock: &LockRef, n: u32) -> SlotKey<'_> {
    SlotKey {
        tenant: &lock.tenant,
        key: &lock.storage_key,
        slot: n,
    }
}

/// The key's header, locked as asked: its count of pending waiters, or
/// `None` for a key never used.
pub(super) async fn header(
    conn: &mut Conn,
    lock: &LockRef,
    locking: Locking,
) -> sqlx::Result<Option<u32>> {
    Ok(match lock.kind {
        Kind::Semaphore => semaphores::header(conn, &lock.tenant, &lock.storage_key, locking)
            .await?
            .map(|h| h.queued),
        Kind::Lock | Kind::Election => locks::select(conn, lock.row(), locking)
            .await?
            .map(|row| row.queued),
        Kind::RwLock => rwlocks::header(conn, &lock.tenant, &lock.storage_key, locking)
            .await?
            .map(|h| h.queued),
    })
}

/// Creates the header of a key never seen before, in its own autocommit
/// statement (two first acquirers racing both succeed; they then meet on
/// the row lock as usual). Idempotent: a lost answer is simply tried again.
/// A semaphore's header is made with its size (`Engine::ensure`).
pub(super) async fn create_header(conn: &mut Conn, lock: &LockRef) -> sqlx::Result<()> {
    match lock.kind {
        Kind::Lock | Kind::Election => locks::insert_missing(conn, lock.row()).await?,
        Kind::RwLock => rwlocks::insert_missing(conn, &lock.tenant, &lock.storage_key).await?,
        Kind::Semaphore => unreachable!("a semaphore is created with its size"),
    };
    Ok(())
}

/// The seat's row, row-locked.
pub(super) async fn read(
    conn: &mut Conn,
    lock: &LockRef,
    seat: Seat,
) -> sqlx::Result<Option<LeaseRow>> {
    Ok(match seat {
        Seat::Whole => locks::select(conn, lock.row(), Locking::Wait)
            .await?
            .map(|row| LeaseRow::of_lock(row).1),
        Seat::Slot(n) => semaphores::slot_for_update(conn, slot_key(lock, n))
            .await?
            .map(LeaseRow::of_slot),
    })
}

/// The header and the seat, locked in that order: the pending waiters and
/// the seat's row, or `None` if either is missing.
pub(super) async fn read_with_header(
    conn: &mut Conn,
    lock: &LockRef,
    seat: Seat,
) -> sqlx::Result<Option<(u32, LeaseRow)>> {
    match seat {
        // The row is its own header: one statement.
        Seat::Whole => Ok(locks::select(conn, lock.row(), Locking::Wait)
            .await?
            .map(LeaseRow::of_lock)),
        Seat::Slot(_) => {
            let Some(queued) = header(conn, lock, Locking::Wait).await? else {
                return Ok(None);
            };
            Ok(read(conn, lock, seat).await?.map(|row| (queued, row)))
        }
    }
}

/// A seat whose lease is free or expired, row-locked (the caller holds the
/// header): the lock's row if it is not held, or a free slot claimed with
/// `SKIP LOCKED`.
pub(super) async fn free_one(conn: &mut Conn, lock: &LockRef) -> sqlx::Result<Option<LeaseRow>> {
    match lock.kind {
        Kind::Semaphore => Ok(
            semaphores::claim_free_slot(conn, &lock.tenant, &lock.storage_key)
                .await?
                .map(LeaseRow::of_slot),
        ),
        Kind::Lock | Kind::Election => Ok(read(conn, lock, Seat::Whole)
            .await?
            .filter(|row| row.live_owner().is_none())),
        // A rwlock has no seats: `rwlock` hands it on itself.
        Kind::RwLock => Ok(None),
    }
}

/// Writes `lease` into its seat (the caller holds the row). A new term of
/// an election is also logged, for observers.
pub(super) async fn write(conn: &mut Conn, lock: &LockRef, lease: &Lease) -> sqlx::Result<()> {
    write_marked(conn, lock, lease, None).await
}

/// [`write`], by the release marked `released_by` (a handoff) if `Some`.
pub(super) async fn write_marked(
    conn: &mut Conn,
    lock: &LockRef,
    lease: &Lease,
    released_by: Option<u64>,
) -> sqlx::Result<()> {
    match lease.seat {
        Seat::Whole => {
            let write = locks::LeaseWrite {
                owner: &lease.owner,
                token: lease.token,
                hold_count: lease.hold_count,
                expires_at: lease.expires_at,
                released_by,
                not_before: delay::after_grant(lease, lock.delays),
                session: lease.session.as_deref(),
            };
            locks::write_lease(conn, lock.row(), write).await?;
        }
        Seat::Slot(n) => {
            let holder = (
                lease.owner.as_str(),
                lease.token,
                lease.expires_at,
                lease.session.as_deref(),
            );
            semaphores::write_slot(conn, slot_key(lock, n), holder, released_by).await?;
        }
    }
    if lease.fresh && lock.kind == Kind::Election {
        elections::record(
            conn,
            &lock.tenant,
            &lock.storage_key,
            lease.token,
            &lease.owner,
            lease.expires_at,
        )
        .await?;
    }
    Ok(())
}

/// Frees the seat of `row` (the caller holds the row), by the release
/// marked `released_by` if `Some`. Its token stays: the next grant
/// continues from it; so does a lock-delay the row's expired lease
/// started (`delay::after_free`).
pub(super) async fn free(
    conn: &mut Conn,
    lock: &LockRef,
    row: &LeaseRow,
    released_by: Option<u64>,
) -> sqlx::Result<()> {
    match row.seat {
        Seat::Whole => {
            let not_before = delay::after_free(row, lock.delays);
            locks::free(conn, lock.row(), released_by, not_before).await?
        }
        Seat::Slot(n) => semaphores::free_slot(conn, slot_key(lock, n), released_by).await?,
    };
    Ok(())
}

/// Frees `owner`'s live lease with `token`, held once, in one autocommit
/// statement marked `released_by`, if no waiter is queued for the key;
/// whether it did.
pub(super) async fn free_alone(
    conn: &mut Conn,
    lock: &LockRef,
    seat: Seat,
    owner: &str,
    token: u64,
    released_by: u64,
) -> sqlx::Result<bool> {
    match seat {
        Seat::Whole => locks::free_if_alone(conn, lock.row(), owner, token, 1, released_by).await,
        Seat::Slot(n) => {
            semaphores::free_if_alone(conn, slot_key(lock, n), (owner, token), released_by).await
        }
    }
}

/// Adds `delta` to the header's count of pending waiters (the caller holds
/// the header).
pub(super) async fn add_queued(conn: &mut Conn, lock: &LockRef, delta: i64) -> sqlx::Result<()> {
    crate::store::add_queued(conn, lock.row(), delta).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fixtures::{at, row};

    #[test]
    fn a_lease_is_live_until_its_expiry_by_the_database_clock() {
        assert_eq!(row(Some("a"), 3, Some(1)).live_owner(), Some(&b"a"[..]));
        assert_eq!(row(Some("a"), 3, Some(0)).live_owner(), None);
        assert_eq!(row(Some("a"), 3, Some(-5)).live_owner(), None);
        assert_eq!(row(None, 3, None).live_owner(), None);
        assert_eq!(row(Some("a"), 3, Some(1500)).remaining_ms(), 1500);
        assert_eq!(row(Some("a"), 3, Some(-1500)).remaining_ms(), 0);
    }

    #[test]
    fn owned_by_needs_owner_token_and_life() {
        let live = row(Some("a"), 3, Some(10));
        assert!(live.owned_by("a", 3));
        assert!(!live.owned_by("a", 2));
        assert!(!live.owned_by("b", 3));
        assert!(!row(Some("a"), 3, Some(0)).owned_by("a", 3));
    }

    #[test]
    fn a_slot_row_is_held_once_or_not_at_all() {
        let slot = |owner: Option<&[u8]>| SlotRow {
            slot: 4,
            owner: owner.map(<[u8]>::to_vec),
            token: 9,
            expires_at: Some(at(10)),
            released_by: None,
            session: None,
            now: at(0),
        };
        let held = LeaseRow::of_slot(slot(Some(b"w")));
        assert_eq!((held.seat, held.hold_count), (Seat::Slot(4), 1));
        assert_eq!(LeaseRow::of_slot(slot(None)).hold_count, 0);
        assert_eq!(Seat::from_slot(Some(4)), Seat::Slot(4));
        assert_eq!(Seat::from_slot(None), Seat::Whole);
    }
}
