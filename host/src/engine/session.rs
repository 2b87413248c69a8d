//! Sessions (issue #30): one keepalive keeps all of a client's leases, and
//! the session's end (closed, or expired by the database clock) ends them
//! all at once.
//!
//! A session is a row of `sessions`; a lease held in it is an ordinary
//! lease whose row names the session (`locks.session`) and whose expiry is
//! far ahead ([`super::SESSION_LEASE_TTL_MS`]): it never runs out on its own. An
//! acquire in a session reads the session's row `LOCK IN SHARE MODE` in its
//! own transaction (`lock::attempt`), and so does a handoff to a waiter of
//! a session (`queue::choose_live`).
//!
//! The end: one short statement marks the session ended (`ending`, taking
//! its row exclusively, so it waits for the acquires in flight and every
//! later one sees it ended); then its leases are released in chunks of
//! [`CHUNK`] keys per transaction, each as a release would (its history
//! event, the key handed to its next waiter via `hand_on`), its pending
//! waiters are taken out of the queue, and its row is deleted. A close
//! does it in the request; an expiry is found by the reaper of any broker
//! (`SKIP LOCKED`: one broker ends it), which hands the pass to a task. An
//! end whose pass never finished (its broker died) is found again by any
//! reaper after [`STUCK_AFTER`] and carried out again (every step is
//! idempotent).

use std::time::Duration;

use chrono::NaiveDateTime;
use futures_util::StreamExt;

use super::{
    delay,
    detach::finish,
    history, micros, plus_ms,
    rwlock::RwMode,
    seat::{self, Lease, LeaseRow, Seat},
    settle::Expect,
    Engine, EngineError, LockRef, Op, Scope, Scopes,
};
use crate::store::{
    self,
    history::{EndCause, EventKind, NewEvent},
    pool::Conn,
    sessions::{self, SessionRow},
    Kind, Locking,
};

/// Keys released per transaction by a session's end.
pub const CHUNK: u32 = 100;
/// Transactions a session's end runs at once (each on its own chunk).
const LANES: u32 = 4;
/// Sessions the reaper ends per pass at most.
const ENDED_PER_PASS: u32 = 100;
/// How long an end may take before another broker's reaper carries it
/// out again.
const STUCK_AFTER: Duration = Duration::from_secs(30);
/// Leases of a session shown by `GET /v1/sessions/{id}` at most.
pub const SHOWN_LEASES: u32 = 10_000;

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Its client closed it.
    Closed,
    /// No keepalive came within its TTL.
    Expired,
}

impl EndReason {
    fn of(ending: u8) -> EndReason {
        if ending == sessions::CLOSED {
            EndReason::Closed
        } else {
            EndReason::Expired
        }
    }

    /// The reason its leases' events give.
    fn cause(self) -> EndCause {
        match self {
            EndReason::Closed => EndCause::SessionClosed,
            EndReason::Expired => EndCause::SessionExpired,
        }
    }

    /// The `reason` label of `lockbroker_sessions_ended_total`.
    fn label(self) -> &'static str {
        match self {
            EndReason::Closed => "closed",
            EndReason::Expired => "expired",
        }
    }
}

/// The gauge of each tenant's live sessions (read from the database).
const SESSIONS: &str = "lockbroker_sessions";
/// The counter of sessions ended, by tenant and reason.
const ENDED: &str = "lockbroker_sessions_ended_total";

/// A session as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    /// None when the client gave none.
    pub name: Option<String>,
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
    pub created_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
}

impl SessionInfo {
    fn of(row: SessionRow) -> SessionInfo {
        SessionInfo {
            id: String::from_utf8_lossy(&row.id).into_owned(),
            name: (!row.name.is_empty()).then(|| String::from_utf8_lossy(&row.name).into_owned()),
            ttl_ms: row.ttl_ms,
            lock_delay_ms: row.lock_delay_ms,
            created_at: row.created_at,
            expires_at: row.expires_at,
        }
    }
}

/// A lease held in a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLease {
    pub kind: Kind,
    pub storage_key: String,
    pub token: u64,
    /// A semaphore's slot.
    pub slot: Option<u32>,
    /// A rwlock's mode.
    pub mode: Option<RwMode>,
}

/// Whether `id` can name a session at all (32 hex characters as the
/// broker makes them; anything up to the column's 64 bytes is looked up).
fn plausible(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64
}

/// Holds `tenant`'s session `session` shared in the transaction `tx` of
/// an acquire in it (the session's end waits for that transaction, or it
/// sees the session ended): whether the session lives. An acquire outside
/// any session (`None`) needs nothing: true.
pub(super) async fn hold(tx: &mut Conn, tenant: &str, session: Option<&str>) -> sqlx::Result<bool> {
    let Some(id) = session else {
        return Ok(true);
    };
    Ok(sessions::get(tx, tenant, id, true)
        .await?
        .is_some_and(|s| s.live()))
}

/// The event of `row`'s lease (held in session `id`) released by the
/// session's end for `reason`: `released`, or `expired` after an expiry,
/// naming the session and why, at the row's database clock.
pub(super) fn end_event(
    lock: &LockRef,
    row: &LeaseRow,
    id: &str,
    reason: EndReason,
) -> Option<NewEvent> {
    let owner = row.owner.as_deref()?;
    end_event_of(lock, (owner, row.token), row.now, id, reason)
}

/// [`end_event`] of `owner`'s lease `token`, at `at`.
pub(super) fn end_event_of(
    lock: &LockRef,
    (owner, token): (&[u8], u64),
    at: NaiveDateTime,
    id: &str,
    reason: EndReason,
) -> Option<NewEvent> {
    let event = match reason {
        EndReason::Closed => EventKind::Released,
        EndReason::Expired => EventKind::Expired,
    };
    let e = history::event(lock, event, owner, token, Some(at));
    history::in_session(e, Some(id.as_bytes())).map(|mut e| {
        e.reason = Some(reason.cause());
        e
    })
}

/// The expiry `expiries` (as `store::sessions::expiries` reads them)
/// give the session `id`, if any: a status shows it for a lease held in
/// it.
pub(super) fn expiry_of(
    expiries: &[(Vec<u8>, NaiveDateTime)],
    id: Option<&[u8]>,
) -> Option<NaiveDateTime> {
    let id = id?;
    expiries.iter().find(|(s, _)| s == id).map(|(_, at)| *at)
}

/// Whether `err` refuses an acquire because the key is held (its one try
/// failed, or its wait ran out).
fn refused(err: &EngineError) -> bool {
    matches!(
        err,
        EngineError::LockHeld { .. } | EngineError::SemaphoreFull { .. }
    )
}

impl Engine {
    /// Opens a session of `tenant` with `ttl_ms` (by the database clock)
    /// and `lock_delay_ms`, named `name` (empty: none), if the tenant has
    /// fewer than `max_sessions` live sessions (counted in the database
    /// first: sessions opened at the same moment through several brokers
    /// may pass it by a few, as `max_held` may).
    ///
    /// # Errors
    /// [`EngineError::TooManySessions`]; [`EngineError::Unavailable`].
    pub fn open_session(
        &self,
        tenant: &str,
        name: String,
        (ttl_ms, lock_delay_ms): (u64, u64),
        max_sessions: u64,
    ) -> Op<SessionInfo> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move {
            let id = format!("{:032x}", rand::random::<u128>());
            let budget = engine.budget();
            let live = engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    let n = sessions::count_live(&mut conn, &tenant).await?;
                    conn.done();
                    Ok(n)
                })
                .await?;
            if live >= max_sessions {
                return Err(EngineError::TooManySessions);
            }
            engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    // A lost answer tried again meets its own row: fine.
                    let inserted =
                        sessions::insert(&mut conn, &tenant, &id, &name, ttl_ms, lock_delay_ms)
                            .await;
                    match inserted {
                        Ok(()) => {}
                        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
                        Err(e) => return Err(e.into()),
                    }
                    let row = sessions::get(&mut conn, &tenant, &id, false).await?;
                    conn.done();
                    row.map(SessionInfo::of).ok_or(EngineError::SessionNotFound)
                })
                .await
        })
    }

    /// Extends `tenant`'s session `id` by its TTL from now: its new expiry.
    ///
    /// # Errors
    /// [`EngineError::SessionNotFound`] once it ended or expired by the
    /// database clock; [`EngineError::Unavailable`].
    pub fn keepalive(&self, tenant: &str, id: &str) -> Op<NaiveDateTime> {
        let (engine, tenant, id) = (self.clone(), tenant.to_owned(), id.to_owned());
        finish(move |_| async move {
            if !plausible(&id) {
                return Err(EngineError::SessionNotFound);
            }
            let budget = engine.budget();
            engine
                .retry(budget, || async {
                    let mut tx = engine.begin(budget).await?;
                    if !sessions::keepalive(&mut tx, &tenant, &id).await? {
                        tx.rollback().await?;
                        return Err(EngineError::SessionNotFound);
                    }
                    let row = sessions::get(&mut tx, &tenant, &id, false).await?;
                    tx.commit().await?;
                    tx.done();
                    row.map(|r| r.expires_at)
                        .ok_or(EngineError::SessionNotFound)
                })
                .await
        })
    }

    /// `tenant`'s live session `id` and the leases held in it (at most
    /// [`SHOWN_LEASES`]).
    ///
    /// # Errors
    /// [`EngineError::SessionNotFound`]; [`EngineError::Unavailable`].
    pub fn session(&self, tenant: &str, id: &str) -> Op<(SessionInfo, Vec<SessionLease>)> {
        let (engine, tenant, id) = (self.clone(), tenant.to_owned(), id.to_owned());
        finish(move |_| async move {
            let Some(row) = engine.session_row(&tenant, &id).await? else {
                return Err(EngineError::SessionNotFound);
            };
            if !row.live() {
                return Err(EngineError::SessionNotFound);
            }
            let budget = engine.budget();
            let held = engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    let held = sessions::leases(&mut conn, &tenant, &id, SHOWN_LEASES).await?;
                    conn.done();
                    Ok(held)
                })
                .await?;
            let leases = held
                .into_iter()
                .filter_map(|h| {
                    Some(SessionLease {
                        kind: sessions::kind_of(h.kind)?,
                        storage_key: String::from_utf8_lossy(&h.lock_key).into_owned(),
                        token: h.token,
                        slot: h.slot,
                        mode: h.mode.map(|m| RwMode::of_code(Some(m))),
                    })
                })
                .collect();
            Ok((SessionInfo::of(row), leases))
        })
    }

    /// A page of `tenant`'s live sessions whose name starts with `prefix`,
    /// after the (name, id) `after`: up to `limit`, and where the next page
    /// starts (none after the last).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    #[allow(clippy::type_complexity)]
    pub fn list_sessions(
        &self,
        tenant: &str,
        prefix: Vec<u8>,
        after: Option<(Vec<u8>, Vec<u8>)>,
        limit: u32,
    ) -> Op<(Vec<SessionInfo>, Option<(Vec<u8>, Vec<u8>)>)> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move {
            let budget = engine.budget();
            let rows = engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    let after = after.as_ref().map(|(n, i)| (&n[..], &i[..]));
                    let rows = sessions::list(&mut conn, &tenant, &prefix, after, limit).await?;
                    conn.done();
                    Ok(rows)
                })
                .await?;
            let next = (rows.len() == limit as usize)
                .then(|| rows.last().map(|r| (r.name.clone(), r.id.clone())))
                .flatten();
            Ok((rows.into_iter().map(SessionInfo::of).collect(), next))
        })
    }

    /// Closes `scope`'s session `id`: marks it ended, then releases every
    /// lease of it (each key handed to its next waiter), takes its waiters
    /// out of the queue and removes it. How many leases it released. Runs
    /// to its end even if the caller leaves.
    ///
    /// # Errors
    /// [`EngineError::SessionNotFound`] when it had ended or expired
    /// already; [`EngineError::Unavailable`] (an end begun is finished by
    /// a reaper later).
    pub fn close_session(&self, scope: Scope, id: &str) -> Op<u64> {
        let (engine, id) = (self.clone(), id.to_owned());
        finish(move |_| async move {
            if !plausible(&id) {
                return Err(EngineError::SessionNotFound);
            }
            let budget = engine.budget();
            let row = engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    let row = sessions::get(&mut conn, &scope.tenant, &id, false).await?;
                    conn.done();
                    Ok(row)
                })
                .await?;
            let Some(row) = row.filter(SessionRow::live) else {
                return Err(EngineError::SessionNotFound);
            };
            let ended = engine
                .retry(budget, || async {
                    let mut conn = engine.conn(budget).await?;
                    let ended =
                        sessions::end(&mut conn, &scope.tenant, &id, sessions::CLOSED).await?;
                    conn.done();
                    Ok(ended)
                })
                .await?;
            if !ended {
                return Err(EngineError::SessionNotFound);
            }
            engine
                .end_pass(&scope, &id, EndReason::Closed, row.lock_delay_ms)
                .await
        })
    }

    /// The answer of an acquire in `tenant`'s session `id`, `concluded`:
    /// a grant carries the session's `expires_at` and `ttl_ms` (read after
    /// it: a session that ended before the answer released the lease, and
    /// says so); a refusal, or a wait that ended without a grant, because
    /// the session ended meanwhile (its end took the waiter out of the
    /// queue) says that.
    ///
    /// # Errors
    /// [`EngineError::SessionNotFound`]; `concluded`'s own.
    pub(super) async fn session_answer<T>(
        &self,
        tenant: &str,
        id: &str,
        concluded: Result<T, EngineError>,
        expiry: impl FnOnce(&mut T, NaiveDateTime, u64),
    ) -> Result<T, EngineError> {
        let live = |row: Option<SessionRow>| row.filter(SessionRow::live);
        match concluded {
            Ok(mut granted) => {
                let row = live(self.session_row(tenant, id).await?)
                    .ok_or(EngineError::SessionNotFound)?;
                expiry(&mut granted, row.expires_at, row.ttl_ms);
                Ok(granted)
            }
            Err(err) if refused(&err) => match live(self.session_row(tenant, id).await?) {
                Some(_) => Err(err),
                None => Err(EngineError::SessionNotFound),
            },
            Err(err) => Err(err),
        }
    }

    /// [`Engine::session_answer`] for one lease, if it was asked for in
    /// `session`; `concluded` as it is otherwise.
    pub(super) async fn lease_answer(
        &self,
        lock: &LockRef,
        session: Option<&str>,
        concluded: Result<Lease, EngineError>,
    ) -> Result<Lease, EngineError> {
        match session {
            Some(id) => {
                self.session_answer(&lock.tenant, id, concluded, Lease::in_session_until)
                    .await
            }
            None => concluded,
        }
    }

    /// A plain read of `tenant`'s session `id`.
    pub(super) async fn session_row(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<SessionRow>, EngineError> {
        if !plausible(id) {
            return Ok(None);
        }
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let row = sessions::get(&mut conn, tenant, id, false).await?;
            conn.done();
            Ok(row)
        })
        .await
    }

    /// Sets `lockbroker_sessions` of each tenant of `tenants` to its
    /// count of live sessions in the database (one grouped read).
    pub(super) async fn count_sessions(&self, tenants: &Scopes) -> Result<(), EngineError> {
        let mut conn = self.conn(self.budget()).await?;
        let counts = sessions::live_by_tenant(&mut conn).await?;
        conn.done();
        for (name, scope) in tenants {
            let n = counts
                .iter()
                .find(|(t, _)| t == name)
                .map_or(0, |(_, n)| *n);
            self.metrics
                .set_gauge(SESSIONS, &[("tenant", &scope.tenant)], n);
        }
        Ok(())
    }

    /// The reaper's part: marks expired sessions ended (those no other
    /// broker's reaper holds) and starts their end passes, and starts again
    /// the passes of ends left unfinished for [`STUCK_AFTER`]; `stuck` says
    /// whether to look for those this time.
    pub(super) async fn end_expired_sessions(
        &self,
        tenants: &Scopes,
        stuck: bool,
    ) -> Result<(), EngineError> {
        let budget = self.budget();
        let served: Vec<&[u8]> = tenants.keys().map(Vec::as_slice).collect();
        // A plain look first: most passes find none, and take no lock.
        let mut conn = self.conn(budget).await?;
        let any = sessions::any_expired(&mut conn, &served).await?;
        conn.done();
        drop(conn);
        if !any && !stuck {
            return Ok(());
        }
        let mut ended = self
            .retry(budget, || async {
                if !any {
                    return Ok(Vec::new());
                }
                let mut tx = self.begin(budget).await?;
                let ended = sessions::end_expired(&mut tx, &served, ENDED_PER_PASS).await?;
                if ended.is_empty() {
                    tx.rollback().await?;
                } else {
                    tx.commit().await?;
                }
                tx.done();
                Ok(ended)
            })
            .await?;
        if stuck {
            let mut conn = self.conn(budget).await?;
            let after = micros(STUCK_AFTER);
            ended.extend(sessions::stuck(&mut conn, &served, after, ENDED_PER_PASS).await?);
            conn.done();
        }
        for s in ended {
            let Some(scope) = tenants.get(&s.tenant).cloned() else {
                continue;
            };
            let id = String::from_utf8_lossy(&s.id).into_owned();
            let engine = self.clone();
            let reason = EndReason::of(s.ending);
            tokio::spawn(async move {
                if let Err(err) = engine.end_pass(&scope, &id, reason, s.lock_delay_ms).await {
                    tracing::warn!(error = %err, session = %id, "ending a session failed; a reaper finishes it later");
                }
            });
        }
        Ok(())
    }

    /// Carries out the end of `scope`'s session `id`, marked ended: its
    /// leases released in chunks, its waiters taken out, its row deleted.
    /// How many leases it released: those it held when the pass began (a
    /// chunk whose commit's answer was lost is found out by reading what
    /// is left, so the count is taken first).
    pub(super) async fn end_pass(
        &self,
        scope: &Scope,
        id: &str,
        reason: EndReason,
        lock_delay_ms: u64,
    ) -> Result<u64, EngineError> {
        let budget = self.budget();
        let released = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let n = sessions::count_leases(&mut conn, &scope.tenant, id).await?;
                conn.done();
                Ok(n)
            })
            .await?;
        let mut stalled = 0;
        loop {
            let budget = self.budget();
            let held = self
                .retry(budget, || async {
                    let mut conn = self.conn(budget).await?;
                    let held =
                        sessions::leases(&mut conn, &scope.tenant, id, CHUNK * LANES).await?;
                    conn.done();
                    Ok(held)
                })
                .await?;
            if held.is_empty() {
                break;
            }
            // Lock and election rows go in chunks of disjoint keys, each
            // chunk in one transaction, at once; a semaphore's or rwlock's
            // lease in a transaction of its own (on its key's header).
            let mut locks = Vec::with_capacity(held.len());
            let mut others = Vec::new();
            for h in held {
                let Some(kind) = sessions::kind_of(h.kind) else {
                    continue;
                };
                let key = String::from_utf8_lossy(&h.lock_key).into_owned();
                let lock = scope.resolve(kind, key.clone(), key).await;
                match kind {
                    Kind::Lock | Kind::Election => locks.push(lock),
                    Kind::Semaphore | Kind::RwLock => others.push((lock, h)),
                }
            }
            let chunks = locks
                .chunks(CHUNK as usize)
                .map(|chunk| self.release_in_session(chunk, id, reason, lock_delay_ms))
                .collect::<Vec<_>>();
            let mut singles = Vec::with_capacity(others.len());
            for (lock, h) in &others {
                singles.push(self.release_one_in_session(lock, h, id, reason));
            }
            let mut n = 0;
            let mut counted = |done: Result<u64, EngineError>| match done {
                Ok(k) => {
                    n += k;
                    Ok(())
                }
                // A commit's answer was lost: what is left says whether it
                // happened.
                Err(EngineError::Unavailable(super::DbFailure::Unknown)) => Ok(()),
                Err(err) => Err(err),
            };
            for done in futures_util::future::join_all(chunks).await {
                counted(done)?;
            }
            let mut singles = futures_util::stream::iter(singles).buffer_unordered(LANES as usize);
            while let Some(done) = singles.next().await {
                counted(done)?;
            }
            if n == 0 {
                // Nothing of it was the session's any more, or unknown:
                // read again (a few times: rows it cannot release are left
                // to the reaper's next look).
                stalled += 1;
                if stalled > 3 {
                    return Err(EngineError::Unavailable(super::DbFailure::Unknown));
                }
            }
        }
        self.drop_session_waiters(scope, id).await?;
        // The row goes with the `session_ended` event, once: a pass carried
        // out again finds no row and records nothing.
        let budget = self.budget();
        let deleted = self
            .retry(budget, || async {
                let mut tx = self.begin(budget).await?;
                let deleted = sessions::delete(&mut tx, &scope.tenant, id).await?;
                if deleted {
                    let ended = history::session_ended(&scope.tenant, id, reason.cause());
                    crate::store::history::append(&mut tx, &[ended]).await?;
                }
                tx.commit().await?;
                tx.done();
                Ok(deleted)
            })
            .await?;
        if deleted {
            self.metrics.inc(
                ENDED,
                &[("tenant", &scope.tenant), ("reason", reason.label())],
            );
        }
        tracing::debug!(session = %id, released, reason = reason.label(), "session ended");
        Ok(released)
    }

    /// Releases the leases of session `id` among `chunk` (keys in storage
    /// order) in one transaction, each as a release would: its event, the
    /// key handed to its next waiter. After an expiry, each key is not
    /// granted again for `lock_delay_ms`. How many it released.
    async fn release_in_session(
        &self,
        chunk: &[LockRef],
        id: &str,
        reason: EndReason,
        lock_delay_ms: u64,
    ) -> Result<u64, EngineError> {
        let Some(first) = chunk.first() else {
            return Ok(0);
        };
        let budget = self.budget();
        let keys: Vec<_> = chunk.iter().map(LockRef::row).collect();
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            // Every row of the chunk in one locking read (in key order).
            let rows = store::batch::lock_rows_waiting(&mut tx, &keys).await?;
            let mut deliveries = Vec::new();
            let mut quiet = Vec::new();
            let mut released = 0u64;
            for lock in chunk {
                let Some(keyed) = rows.iter().find(|r| r.is(lock.row())) else {
                    continue;
                };
                let (mut queued, mut row) = LeaseRow::of_lock(keyed.row.clone());
                if row.session.as_deref() != Some(id.as_bytes()) {
                    continue;
                }
                if row.owner.is_none() {
                    continue;
                }
                if let Some(e) = end_event(lock, &row, id, reason) {
                    tx.note(e);
                }
                released += 1;
                let delayed = reason == EndReason::Expired && lock_delay_ms > 0;
                if queued == 0
                    && row.standby.is_none()
                    && !delayed
                    && delay::after_free(&row, lock.delays).is_none()
                {
                    // Nobody to hand it to, nothing to delay: freed with
                    // the others in one statement.
                    quiet.push(lock.row());
                    continue;
                }
                if delayed {
                    // The session's lock-delay: the key is not granted
                    // again before it ends (`not_before`).
                    let until = plus_ms(row.now, lock_delay_ms);
                    row.not_before = row.not_before.max(Some(until));
                }
                if let Some(d) = self
                    .hand_on_marked(&mut tx, lock, &row, &mut queued, None)
                    .await?
                {
                    deliveries.push(d);
                }
            }
            store::batch::free_rows(&mut tx, &quiet).await?;
            self.commit(tx, first, Expect::Unchecked).await?;
            self.deliver(deliveries);
            Ok(released)
        })
        .await
    }

    /// Releases `h`, one lease of session `id` of a semaphore or a
    /// rwlock (`lock`), as a release would (its event, the key handed to
    /// its next waiters), in one transaction on its key's header; 1 if it
    /// did, 0 if it was no longer the session's. A lock-delay is kept by
    /// lock rows only: a semaphore's slot or a rwlock is free at once.
    async fn release_one_in_session(
        &self,
        lock: &LockRef,
        h: &sessions::HeldRow,
        id: &str,
        reason: EndReason,
    ) -> Result<u64, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut tx = self.begin(budget).await?;
            let deliveries = match h.slot {
                Some(slot) => {
                    let read = seat::read_with_header(&mut tx, lock, Seat::Slot(slot)).await?;
                    let Some((mut queued, row)) = read.filter(|(_, row)| {
                        row.session.as_deref() == Some(id.as_bytes()) && row.owner.is_some()
                    }) else {
                        tx.rollback().await?;
                        return Ok(0);
                    };
                    if let Some(e) = end_event(lock, &row, id, reason) {
                        tx.note(e);
                    }
                    self.hand_on_marked(&mut tx, lock, &row, &mut queued, None)
                        .await?
                        .into_iter()
                        .collect()
                }
                None => {
                    let ended = self.rw_end_in_session(&mut tx, lock, h, id, reason).await?;
                    let Some(deliveries) = ended else {
                        tx.rollback().await?;
                        return Ok(0);
                    };
                    deliveries
                }
            };
            self.commit(tx, lock, Expect::Unchecked).await?;
            self.deliver(deliveries);
            Ok(1)
        })
        .await
    }

    /// Takes session `id`'s pending waiters out of the queue (each in a
    /// transaction on its key's header). Their requests answer that the
    /// session ended: at once here, after a push on other brokers.
    async fn drop_session_waiters(&self, scope: &Scope, id: &str) -> Result<(), EngineError> {
        let budget = self.budget();
        let waiting = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let waiting = sessions::waiters(&mut conn, &scope.tenant, id).await?;
                conn.done();
                Ok(waiting)
            })
            .await?;
        let mut elsewhere = Vec::new();
        for w in waiting {
            let Some(kind) = sessions::kind_of(w.kind) else {
                continue;
            };
            let key = String::from_utf8_lossy(&w.lock_key).into_owned();
            let lock = scope.lock(kind, key.clone(), key);
            let budget = self.budget();
            let dropped = self
                .retry(budget, || async {
                    let mut tx = self.begin(budget).await?;
                    super::seat::header(&mut tx, &lock, Locking::Wait).await?;
                    let dropped = sessions::drop_waiter(&mut tx, w.id).await?;
                    if dropped {
                        super::seat::add_queued(&mut tx, &lock, -1).await?;
                    }
                    self.commit(tx, &lock, Expect::Unchecked).await?;
                    Ok(dropped)
                })
                .await?;
            if dropped && w.broker == self.broker.as_bytes() {
                // A waiter of this broker stops waiting at once (its
                // request finds its row gone and answers that the session
                // ended).
                self.local.lock().expect("local waiters").remove(&w.id);
            } else if dropped {
                // Another broker's is told to look: it finds the row gone
                // (without pushes, it waits out its `wait_ms`).
                elsewhere.push((w.broker.clone(), w.id));
            }
        }
        self.push_wakeups(elsewhere);
        Ok(())
    }
}
