//! The history of each lock: what its transactions did, appended by the
//! transaction itself (`lock_events`), so an event exists exactly when its
//! change does and a transaction that rolls back leaves none.
//!
//! The general path notes events on its transaction as it writes
//! (`note_*` here); [`Engine::commit`] appends them in one multi-row
//! INSERT just before the `COMMIT`. A batch appends its members' events the
//! same way in its own transaction (`batch`), the built-in policy's stored
//! procedures insert theirs themselves (migration
//! `20261125000003_history_routines.sql`).
//!
//! Locks, semaphores (each slot's leases) and rwlocks (the writer's and
//! each reader's) are recorded; elections are not (their terms are, for
//! `observe`). A re-entry, a renewal and a release of one of several holds
//! change no grant and are not recorded. An expiry is a non-event in the database (the lease just
//! runs out): it is recorded by the next transaction that changes the key
//! (a grant, a handoff, a reaper pass), with `at` the moment it ran out.

use chrono::NaiveDateTime;

use super::{
    detach::finish,
    micros,
    seat::{Lease, LeaseRow},
    Engine, EngineError, LockRef, Op,
};
use crate::store::{
    history::{self, EndCause, EventKind, NewEvent},
    pool::Conn,
    Kind,
};

/// Events deleted per pruning statement (a reaper pass runs one).
pub(super) const PRUNE_BATCH: u32 = 1000;

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEvent {
    pub event: EventKind,
    pub owner: String,
    pub token: u64,
    /// By the database clock (UTC).
    pub at: NaiveDateTime,
    /// The id of the policy version that decided it, if one did.
    pub policy: Option<String>,
    /// The session the lease was held in, if it was.
    pub session: Option<String>,
    /// Why a session's end released it, if one did.
    pub reason: Option<EndCause>,
}

/// The event `event` of `owner`'s lease `token` on `lock`, at `at` (`None`:
/// the database's `NOW(6)` when appended); `None` for an election. A grant
/// names the policy version that named the key, a handoff the one whose
/// fairness picked the waiter (the one in force).
pub(super) fn event(
    lock: &LockRef,
    event: EventKind,
    owner: &[u8],
    token: u64,
    at: Option<NaiveDateTime>,
) -> Option<NewEvent> {
    (lock.kind != Kind::Election).then(|| NewEvent {
        tenant: lock.tenant.clone(),
        kind: Some(lock.kind),
        lock_key: lock.storage_key.clone(),
        event,
        owner: String::from_utf8_lossy(owner).into_owned(),
        token,
        at,
        policy: match event {
            EventKind::Granted => lock.named_by.clone().or_else(|| lock.pacing.version()),
            EventKind::HandedOff => lock.pacing.version(),
            _ => None,
        },
        session: None,
        reason: None,
        cycle: None,
    })
}

/// The `session_ended` event of `tenant`'s session `id`, which ended for
/// `cause` (at the insert's `NOW(6)`).
pub(super) fn session_ended(tenant: &str, id: &str, cause: EndCause) -> NewEvent {
    NewEvent {
        tenant: tenant.to_owned(),
        kind: None,
        lock_key: id.to_owned(),
        event: EventKind::SessionEnded,
        owner: String::new(),
        token: 0,
        at: None,
        policy: None,
        session: Some(id.to_owned()),
        reason: Some(cause),
        cycle: None,
    }
}

/// `e`, naming the session its lease is held in (`session`, as a lease
/// row stores it), if it is.
pub(super) fn in_session(e: Option<NewEvent>, session: Option<&[u8]>) -> Option<NewEvent> {
    e.map(|mut e| {
        e.session = session.map(|s| String::from_utf8_lossy(s).into_owned());
        e
    })
}

/// The `granted` event of a fresh `lease`, at its grant by the database
/// clock.
pub(super) fn granted(lock: &LockRef, lease: &Lease) -> Option<NewEvent> {
    let owner = lease.owner.as_bytes();
    let e = event(
        lock,
        EventKind::Granted,
        owner,
        lease.token,
        Some(lease.granted_at()),
    );
    in_session(e, lease.session.as_deref().map(str::as_bytes))
}

/// The `expired` event of the lease in `row`, if one ran out there.
pub(super) fn expiry(lock: &LockRef, row: &LeaseRow) -> Option<NewEvent> {
    match (&row.owner, row.expires_at) {
        (Some(owner), Some(expires_at)) if row.live_owner().is_none() => in_session(
            event(lock, EventKind::Expired, owner, row.token, Some(expires_at)),
            row.session.as_deref(),
        ),
        _ => None,
    }
}

/// Notes on `conn`'s transaction that `row`'s lease ended by itself, if
/// it did (see [`expiry`]); the caller is about to overwrite or free it.
pub(super) fn note_expired(conn: &mut Conn, lock: &LockRef, row: &LeaseRow) {
    if let Some(e) = expiry(lock, row) {
        conn.note(e);
    }
}

/// Notes `event` of `owner`'s lease `token` on `conn`'s transaction.
pub(super) fn note(
    conn: &mut Conn,
    lock: &LockRef,
    kind: EventKind,
    owner: &str,
    token: u64,
    at: NaiveDateTime,
) {
    note_in(conn, lock, kind, (owner, token), at, None);
}

/// [`note`] for a lease held in `session` (as its row stores it), if it is.
pub(super) fn note_in(
    conn: &mut Conn,
    lock: &LockRef,
    kind: EventKind,
    (owner, token): (&str, u64),
    at: NaiveDateTime,
    session: Option<&[u8]>,
) {
    if let Some(e) = in_session(
        event(lock, kind, owner.as_bytes(), token, Some(at)),
        session,
    ) {
        conn.note(e);
    }
}

impl Engine {
    /// The latest `limit` events of `lock`, newest first.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn history(&self, lock: &LockRef, limit: u32) -> Op<Vec<LockEvent>> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move {
            let budget = engine.budget();
            let rows = engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    let rows = history::latest(&mut conn, lock.row(), limit).await?;
                    conn.done();
                    Ok(rows)
                })
                .await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| {
                    Some(LockEvent {
                        event: EventKind::from_code(r.event)?,
                        owner: String::from_utf8_lossy(&r.owner).into_owned(),
                        token: r.token,
                        at: r.at,
                        policy: r.policy.map(|p| String::from_utf8_lossy(&p).into_owned()),
                        session: r.session.map(|s| String::from_utf8_lossy(&s).into_owned()),
                        reason: r.reason.and_then(EndCause::from_code),
                    })
                })
                .collect())
        })
    }

    /// Deletes one batch of events older than `retention` (the reaper's,
    /// once per pass), in one autocommit statement; how many.
    pub(super) async fn prune_history(
        &self,
        retention: std::time::Duration,
    ) -> Result<u64, EngineError> {
        let mut conn = self.conn(self.budget()).await?;
        let pruned = history::prune(&mut conn, micros(retention), PRUNE_BATCH).await?;
        conn.done();
        if pruned > 0 {
            self.metrics
                .add_counter("lockbroker_history_pruned_total", &[], pruned);
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fixtures::{self, at};

    fn lock(kind: Kind) -> LockRef {
        fixtures::lock(kind, "k", "k")
    }

    fn row(owner: Option<&str>, expires_ms: Option<i64>) -> LeaseRow {
        fixtures::row(owner, 3, expires_ms)
    }

    #[test]
    fn an_expiry_is_a_lease_still_in_its_row_past_its_end_at_that_end() {
        let e = expiry(&lock(Kind::Lock), &row(Some("a"), Some(-20))).unwrap();
        assert_eq!(
            (e.event, e.owner.as_str(), e.token, e.at),
            (EventKind::Expired, "a", 3, Some(at(-20)))
        );
        // Live, freed (released), or never held: no expiry.
        assert!(expiry(&lock(Kind::Lock), &row(Some("a"), Some(20))).is_none());
        assert!(expiry(&lock(Kind::Lock), &row(None, None)).is_none());
    }

    #[test]
    fn every_kind_but_elections_has_a_history() {
        let expired = row(Some("a"), Some(-20));
        assert!(expiry(&lock(Kind::Election), &expired).is_none());
        assert!(event(&lock(Kind::Election), EventKind::Granted, b"a", 1, None).is_none());
        for kind in [Kind::Lock, Kind::Semaphore, Kind::RwLock] {
            assert!(event(&lock(kind), EventKind::Granted, b"a", 1, None).is_some());
            assert!(expiry(&lock(kind), &expired).is_some());
        }
    }
}
