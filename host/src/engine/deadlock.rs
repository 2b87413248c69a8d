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
//! A wait that could close one (its key is held in another session) is
//! checked while its transaction holds the tenant's wait guard (a row
//! written, see `store::waiting::guarded_holders`), and is enqueued in that same
//! transaction: two waits that would close one cycle at the same moment,
//! on two brokers, are checked one after the other, and the second one
//! sees the first and is refused; exactly one.
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

    /// The cycle `wish`'s wait for `lock` would close, if it would, checked
    /// in the caller's transaction (which then holds the tenant's wait
    /// guard until it ends, and enqueues the wait if it is not refused).
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
        // The tenant's policy may leave this key's waits to their timeouts.
        if let Some(detect) = lock.pacing.detects_deadlocks(&lock.storage_key) {
            if !detect.await {
                return Ok(None);
            }
        }
        let stale = self.stale();
        // One round trip: the guard, taken only if another session holds
        // the key, and those sessions' waits, read under it (a wait
        // checked before this one committed is seen now). The key's
        // holders need no second read: the caller's transaction holds the
        // key's header row, which every change of its leases takes.
        let step = waiting::guarded_holders(
            conn,
            tenant,
            lock.kind,
            lock.storage_key.as_bytes(),
            me.as_bytes(),
            stale,
        )
        .await?;
        if step.is_empty() {
            return Ok(None); // held by no other session: no cycle, no guard
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
        // The first step's waits came with the guard.
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
                    let sessions: Vec<Vec<u8>> = frontier.keys().cloned().collect();
                    waiting::waits_of(conn, tenant, &sessions, stale).await?
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
