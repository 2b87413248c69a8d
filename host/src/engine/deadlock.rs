//! Deadlocks between sessions (issue #33): a session's acquire that would
//! wait, and whose wait would close a cycle of the wait-for graph (its key
//! held by a session that waits, through other sessions, for a key this
//! session holds), is refused at once (`409 deadlock`, with the cycle), as
//! InnoDB refuses the transaction that closes a cycle. Nothing else in the
//! cycle is disturbed.
//!
//! The graph's parties are sessions: a lease or a wait outside any session
//! is outside the graph, and a session waiting for a key it holds itself
//! (two tasks of one process sharing it) is not a cycle. The graph lives
//! in the database (pending waiter rows name their session, lease rows
//! theirs), so a cycle through several brokers is seen by any of them.
//! The check runs in the transaction that enqueues the wait, which holds
//! its own session's row (shared, as every acquire in a session does:
//! `session::hold`; on Galera, where locks are per node, it also writes
//! the row, `store::sessions::pin_for_galera`), and every check *pins* a
//! session (writes its row, `store::sessions::PIN`) before it reads that
//! session's waits, so a check that reaches a session whose wait is being
//! enqueued waits for that transaction and then sees the wait. Two waits
//! that would close one cycle at the same moment, on two brokers, are
//! checked one after the other (the second pins a session whose
//! transaction holds it, and waits for it; or the database breaks their
//! deadlock and the retry comes second), and the second one sees the
//! first and is refused; exactly one. A session that holds nothing cannot
//! close a cycle: its wait is enqueued unchecked (its row still held).
//!
//! A tenant's policy may turn the check off key by key (its `deadlocks`
//! export, `wit/deadlocks.wit`): a wait for such a key is never refused
//! (it waits out its `wait_ms`), though it still counts as an edge of a
//! cycle that a checked wait closes.
//!
//! Each refusal is recorded as a `deadlock` event (with its cycle) in a
//! transaction of its own, after the refusing one rolled back: event
//! streams and `GET /v1/waits-for` (its `refused`) show it.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{lease::Wish, Engine, EngineError, LockRef};
use crate::store::{
    history::{self, EventKind, NewEvent},
    pool::Conn,
    sessions::kind_of,
    waiting::{self, SessionWait},
    Kind,
};

/// How far the walk goes (sessions in a cycle at most).
const MAX_DEPTH: usize = 64;
/// Sessions the walk looks at, at most.
const MAX_VISITED: usize = 10_000;

/// One step of a cycle: `session` (as `owner`) waits for `storage_key`,
/// which the next step's session holds (the last step's key is held by
/// the first step's session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleLink {
    pub session: String,
    pub owner: String,
    pub kind: Kind,
    pub storage_key: String,
}

/// A [`CycleLink`] as a `deadlock` event stores it (JSON).
#[derive(Serialize, Deserialize)]
struct StoredLink {
    session: String,
    owner: String,
    kind: String,
    storage_key: String,
}

impl CycleLink {
    /// `cycle` as a `deadlock` event's row stores it.
    pub(super) fn encode(cycle: &[CycleLink]) -> String {
        let links: Vec<StoredLink> = cycle
            .iter()
            .map(|l| StoredLink {
                session: l.session.clone(),
                owner: l.owner.clone(),
                kind: l.kind.name().to_owned(),
                storage_key: l.storage_key.clone(),
            })
            .collect();
        serde_json::to_string(&links).unwrap_or_default()
    }

    /// A stored cycle; `None` if it does not read as one.
    pub(super) fn decode(stored: &[u8]) -> Option<Vec<CycleLink>> {
        let links: Vec<StoredLink> = serde_json::from_slice(stored).ok()?;
        links
            .into_iter()
            .map(|l| {
                Some(CycleLink {
                    kind: Kind::of_name(&l.kind)?,
                    session: l.session,
                    owner: l.owner,
                    storage_key: l.storage_key,
                })
            })
            .collect()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Engine {
    /// Records the refusal of `cycle`'s first wait (on `lock`) as a
    /// `deadlock` event, in a transaction of its own and off the answer's
    /// path (the refusing transaction rolls back whatever else it did).
    /// Best effort: a refusal whose event cannot be written is still
    /// refused, counted and logged.
    pub(super) fn record_refusal(&self, lock: &LockRef, cycle: &[CycleLink]) {
        let Some(first) = cycle.first() else { return };
        let event = NewEvent {
            tenant: lock.tenant.clone(),
            kind: Some(lock.kind),
            lock_key: lock.storage_key.clone(),
            event: EventKind::Deadlock,
            owner: first.owner.clone(),
            token: 0,
            at: None,
            policy: None,
            session: Some(first.session.clone()),
            reason: None,
            cycle: Some(CycleLink::encode(cycle)),
        };
        let engine = self.clone();
        tokio::spawn(async move {
            let budget = engine.budget();
            let written = engine
                .retry(budget, || async {
                    let mut tx = engine.begin(budget).await?;
                    history::append(&mut tx, std::slice::from_ref(&event)).await?;
                    tx.commit().await?;
                    Ok(())
                })
                .await;
            if let Err(err) = written {
                tracing::warn!(tenant = %event.tenant, error = %err, "a deadlock refusal's event was not recorded");
            }
        });
    }

    /// The session whose wait for `lock` is to be checked: `wish`'s, unless
    /// it has none or the tenant's policy leaves the key to its timeouts.
    /// `Engine::check_room` says whether it holds anything (in the
    /// statement it sends anyway): one that holds nothing closes no cycle,
    /// and a check that reaches it later pins its row, which this
    /// transaction holds, so runs after it and sees this wait.
    pub(super) async fn session_to_check<'w>(
        &self,
        lock: &LockRef,
        wish: Wish<'w>,
    ) -> Option<&'w str> {
        let me = wish.session?;
        if let Some(detect) = lock.pacing.detects_deadlocks(&lock.storage_key) {
            if !detect.await {
                return None;
            }
        }
        Some(me)
    }

    /// The cycle `wish`'s wait for `lock` would close, if it would, checked
    /// in the caller's transaction, which holds `wish`'s session's row
    /// (`Engine::check_room`), found it holds something, holds the
    /// pins of the sessions read here until it ends, and enqueues the wait
    /// if it is not refused.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub(super) async fn closes_cycle(
        &self,
        conn: &mut Conn,
        lock: &LockRef,
        wish: Wish<'_>,
    ) -> Result<Option<Vec<CycleLink>>, EngineError> {
        let Some(me) = wish.session else {
            return Ok(None);
        };
        let tenant = lock.tenant.as_str();
        let stale = self.stale();
        // One round trip: the sessions that hold the key, pinned, and their
        // waits. The key's holders need no second read: the caller's
        // transaction holds the key's header row, which every change of
        // its leases takes.
        let step = waiting::pinned_holders(
            conn,
            tenant,
            lock.kind,
            lock.storage_key.as_bytes(),
            me.as_bytes(),
            stale,
        )
        .await?;
        if step.is_empty() {
            return Ok(None); // held by no other session: no cycle
        }
        let first = CycleLink {
            session: me.to_owned(),
            owner: wish.owner.to_owned(),
            kind: lock.kind,
            storage_key: lock.storage_key.clone(),
        };
        let mut frontier: HashMap<Vec<u8>, Vec<CycleLink>> = step
            .iter()
            .map(|h| (h.holder.clone(), vec![first.clone()]))
            .collect();
        // The first step's waits came with its pins.
        let mut known: Option<Vec<SessionWait>> = Some(
            step.into_iter()
                .filter_map(|h| {
                    Some(SessionWait {
                        session: h.holder,
                        owner: h.owner?,
                        kind: h.kind?,
                        lock_key: h.lock_key?,
                        mode: h.mode,
                    })
                })
                .collect(),
        );
        let mut visited: HashSet<Vec<u8>> = frontier.keys().cloned().collect();
        visited.insert(me.as_bytes().to_vec());
        for _ in 0..MAX_DEPTH {
            if frontier.is_empty() || visited.len() > MAX_VISITED {
                break;
            }
            let waits = match known.take() {
                Some(waits) => waits,
                None => {
                    let ids: Vec<Vec<u8>> = frontier.keys().cloned().collect();
                    waiting::pinned_waits_of(conn, tenant, &ids, stale).await?
                }
            };
            let mut keys: HashMap<u8, HashSet<Vec<u8>>> = HashMap::new();
            for w in &waits {
                keys.entry(w.kind).or_default().insert(w.lock_key.clone());
            }
            let mut holders: HashMap<(u8, Vec<u8>), Vec<Vec<u8>>> = HashMap::new();
            for (code, keys) in keys {
                let Some(kind) = kind_of(code) else { continue };
                let keys: Vec<Vec<u8>> = keys.into_iter().collect();
                for h in waiting::holders(conn, tenant, kind, &keys).await? {
                    if let Some(s) = h.session {
                        holders.entry((code, h.lock_key)).or_default().push(s);
                    }
                }
            }
            let mut next: HashMap<Vec<u8>, Vec<CycleLink>> = HashMap::new();
            for w in waits {
                let Some(path) = frontier.get(&w.session) else {
                    continue;
                };
                let Some(kind) = kind_of(w.kind) else {
                    continue;
                };
                for holder in holders
                    .get(&(w.kind, w.lock_key.clone()))
                    .into_iter()
                    .flatten()
                {
                    if *holder == w.session {
                        continue; // a session waiting for itself: not a cycle
                    }
                    let mut path = path.clone();
                    path.push(CycleLink {
                        session: text(&w.session),
                        owner: text(&w.owner),
                        kind,
                        storage_key: text(&w.lock_key),
                    });
                    if holder == me.as_bytes() {
                        return Ok(Some(path));
                    }
                    if visited.insert(holder.clone()) {
                        next.insert(holder.clone(), path);
                    }
                }
            }
            frontier = next;
        }
        Ok(None)
    }
}
