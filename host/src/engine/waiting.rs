//! Who waits (issue #32): a key's queue in the order it will be served,
//! and the tenant's wait-for graph, with its cycles.
//!
//! Waiters live in two places: the database queue (`waiters`, every kind,
//! every broker) and, for a contended lock whose lease was granted through
//! one broker, that broker's memory (`held_here`). The database's are read
//! with a plain query; the memory's are asked of every live broker
//! (`POST /internal/v1/waiting`, within a second). A broker that does not
//! answer is left out and the answer says it is not `complete`.
//!
//! The order of service is the engine's own: with the built-in FIFO
//! policy, the database waiters that arrived before the first waiter in
//! memory, then those in memory, then the rest; with a fairness policy,
//! the policy is asked as a handoff would ask it, once per place, on what
//! is left (a preview: a waiter that arrives or leaves changes it).
//!
//! The graph also lists the waits refused lately as deadlocks (their
//! `deadlock` events): a refused cycle never shows as edges.

use std::collections::{HashMap, HashSet};

use chrono::NaiveDateTime;

use lockbroker_api::{REFUSED_MAX, REFUSED_WINDOW_S};

use super::{deadlock::CycleLink, LockRef, Op};
use super::{detach::finish, held_here::MemoryWaiter, rwlock::RwMode, Engine, EngineError};
use crate::{
    policy::Waiter,
    store::{
        history,
        sessions::kind_of,
        waiting::{self, HolderRow, QueuedRow},
        Kind,
    },
};

/// Places of a queue whose order a fairness policy is asked for; the
/// rest follow in arrival order.
const PREVIEWED: usize = 100;

/// A waiter as `GET /v1/{kind}/{key}/waiters` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    pub owner: String,
    /// The session it asks to hold its lease in.
    pub session: Option<String>,
    pub priority: i32,
    /// When it started waiting (database clock for the database queue,
    /// its broker's clock for a waiter in memory), UTC.
    pub since: NaiveDateTime,
    /// When its wait runs out.
    pub deadline: NaiveDateTime,
    /// The broker its client waits on.
    pub broker: String,
    /// What a rwlock waiter asks for.
    pub mode: Option<RwMode>,
    /// It waits in its broker's memory, not in the database queue.
    pub in_memory: bool,
}

/// A key's queue, in the order it will be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyQueue {
    pub entries: Vec<QueueEntry>,
    /// More wait than `limit`.
    pub truncated: bool,
    /// Every broker that may keep waiters of the key in memory answered.
    pub complete: bool,
}

/// Who holds or waits: a session when the lease (or wait) is held in one,
/// else its owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Party {
    pub owner: String,
    pub session: Option<String>,
}

impl Party {
    fn of(owner: &[u8], session: Option<&[u8]>) -> Party {
        Party {
            owner: String::from_utf8_lossy(owner).into_owned(),
            session: session.map(|s| String::from_utf8_lossy(s).into_owned()),
        }
    }

    /// The node of the graph it is: its session's, or its owner's.
    fn node(&self) -> (bool, &str) {
        match &self.session {
            Some(session) => (true, session),
            None => (false, &self.owner),
        }
    }
}

/// One edge of the wait-for graph: `waiter` waits for `holder`'s lease of
/// the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitEdge {
    pub waiter: Party,
    pub holder: Party,
    pub kind: Kind,
    pub storage_key: String,
    /// When the waiter started waiting.
    pub since: NaiveDateTime,
    /// Both ends are in one cycle.
    pub in_cycle: bool,
}

/// The tenant's wait-for graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitGraph {
    pub edges: Vec<WaitEdge>,
    /// Each cycle's parties (a strongly connected part of the graph with
    /// more than one party, or one that waits for itself).
    pub cycles: Vec<Vec<Party>>,
    /// More waiters than `limit`: some edges are missing.
    pub truncated: bool,
    /// Every broker that may keep waiters in memory answered.
    pub complete: bool,
    /// The waits refused as deadlocks lately, newest first.
    pub refused: Vec<Refusal>,
}

/// A session's wait refused because it would have closed `cycle` (its
/// first step), at `at` by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub at: NaiveDateTime,
    pub cycle: Vec<CycleLink>,
}

/// `ms` since the Unix epoch as a UTC time.
fn at_ms(ms: u64) -> NaiveDateTime {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or_default()
        .naive_utc()
}

impl QueueEntry {
    fn of_row(row: &QueuedRow) -> QueueEntry {
        QueueEntry {
            owner: String::from_utf8_lossy(&row.owner).into_owned(),
            session: row
                .session
                .as_deref()
                .map(|s| String::from_utf8_lossy(s).into_owned()),
            priority: row.priority,
            since: row.enqueued_at,
            deadline: row.deadline,
            broker: String::from_utf8_lossy(&row.broker).into_owned(),
            mode: row.mode.map(|m| RwMode::of_code(Some(m))),
            in_memory: false,
        }
    }

    fn of_memory(broker: String, w: &MemoryWaiter) -> QueueEntry {
        QueueEntry {
            owner: w.owner.clone(),
            session: None,
            priority: w.priority,
            since: at_ms(w.enqueued_ms),
            deadline: at_ms(w.deadline_ms),
            broker,
            mode: None,
            in_memory: true,
        }
    }
}

impl Engine {
    /// `lock`'s waiters in the order they will be served, up to `limit`.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn queue(&self, lock: &LockRef, limit: u32) -> Op<KeyQueue> {
        let (engine, lock) = (self.clone(), lock.clone());
        finish(move |_| async move { engine.queue_now(&lock, limit).await })
    }

    async fn queue_now(&self, lock: &LockRef, limit: u32) -> Result<KeyQueue, EngineError> {
        let budget = self.budget();
        let stale = self.stale();
        // One more than asked: whether there are more.
        let rows = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let rows = waiting::queue(&mut conn, lock.row(), stale, limit + 1).await?;
                conn.done();
                Ok(rows)
            })
            .await?;
        let (memory, complete) = if lock.kind == Kind::Lock {
            let (found, complete) = self
                .waiting_everywhere(&lock.tenant, &lock.storage_key)
                .await;
            let here: Vec<_> = found
                .into_iter()
                .filter(|(_, w)| w.storage_key == lock.storage_key)
                .collect();
            (here, complete)
        } else {
            (Vec::new(), true)
        };
        let rows = self.in_service_order(lock, rows).await;
        // Waiters in memory go after the database waiters that arrived
        // before the first of them.
        let after = memory.first().map_or(u64::MAX, |(_, w)| w.after_db);
        let (first, rest): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| r.id <= after);
        let mut entries: Vec<QueueEntry> = first.iter().map(QueueEntry::of_row).collect();
        entries.extend(
            memory
                .iter()
                .map(|(b, w)| QueueEntry::of_memory(b.clone(), w)),
        );
        entries.extend(rest.iter().map(QueueEntry::of_row));
        let truncated = entries.len() > limit as usize;
        entries.truncate(limit as usize);
        Ok(KeyQueue {
            entries,
            truncated,
            complete,
        })
    }

    /// The database waiters `rows` (oldest first) in the order handoffs
    /// take them: as they are under FIFO, else as the tenant's fairness
    /// policy picks, place by place, for the first [`PREVIEWED`].
    async fn in_service_order(&self, lock: &LockRef, rows: Vec<QueuedRow>) -> Vec<QueuedRow> {
        if lock.pacing.always_oldest() {
            return rows;
        }
        let mut rest = rows;
        let mut ordered = Vec::with_capacity(rest.len());
        while !rest.is_empty() && ordered.len() < PREVIEWED {
            let candidates = rest
                .iter()
                .map(|r| Waiter {
                    id: r.id,
                    owner: String::from_utf8_lossy(&r.owner).into_owned(),
                    priority: r.priority,
                    enqueued_at_ms: r.enqueued_ms,
                    attempts: r.attempts,
                })
                .collect();
            let index = lock.pacing.pick_next(&lock.key, candidates).await;
            let index = if index < rest.len() { index } else { 0 };
            ordered.push(rest.remove(index));
        }
        ordered.extend(rest);
        ordered
    }

    /// The wait-for graph of `tenant`'s keys that start with `prefix`: an
    /// edge from each waiter (up to `limit`) to each holder of its key
    /// that it waits for, and the cycles.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn waits_for(&self, tenant: &str, prefix: String, limit: u32) -> Op<WaitGraph> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move { engine.waits_for_now(&tenant, &prefix, limit).await })
    }

    async fn waits_for_now(
        &self,
        tenant: &str,
        prefix: &str,
        limit: u32,
    ) -> Result<WaitGraph, EngineError> {
        let budget = self.budget();
        let stale = self.stale();
        let (rows, refusals) = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let rows =
                    waiting::of_tenant(&mut conn, tenant, prefix.as_bytes(), stale, limit + 1)
                        .await?;
                let refusals = history::refusals(
                    &mut conn,
                    tenant,
                    prefix.as_bytes(),
                    REFUSED_WINDOW_S,
                    REFUSED_MAX,
                )
                .await?;
                conn.done();
                Ok((rows, refusals))
            })
            .await?;
        let refused = refusals
            .into_iter()
            .filter_map(|row| {
                let at = row.at;
                let cycle = row.cycle.as_deref().and_then(CycleLink::decode)?;
                Some(Refusal { at, cycle })
            })
            .collect();
        let (memory, complete) = self.waiting_everywhere(tenant, prefix).await;
        // Every waiter: (kind, key, party, since, mode).
        let mut waits: Vec<(Kind, String, Party, NaiveDateTime, Option<RwMode>)> = rows
            .iter()
            .filter_map(|r| {
                let kind = kind_of(r.kind)?;
                let key = String::from_utf8_lossy(&r.lock_key).into_owned();
                let party = Party::of(&r.owner, r.session.as_deref());
                let mode = r.mode.map(|m| RwMode::of_code(Some(m)));
                Some((kind, key, party, r.enqueued_at, mode))
            })
            .collect();
        waits.extend(memory.iter().map(|(_, w)| {
            let party = Party::of(w.owner.as_bytes(), None);
            (
                Kind::Lock,
                w.storage_key.clone(),
                party,
                at_ms(w.enqueued_ms),
                None,
            )
        }));
        let truncated = waits.len() > limit as usize;
        waits.truncate(limit as usize);
        let holders = self.holders_of(tenant, &waits).await?;
        let mut edges = Vec::new();
        for (kind, key, waiter, since, mode) in waits {
            for h in holders.get(&(kind, key.clone())).into_iter().flatten() {
                // A reader waits for a writer only (it waits behind a
                // queued writer otherwise, which holds nothing).
                if mode == Some(RwMode::Read) && h.mode != Some(1) {
                    continue;
                }
                edges.push(WaitEdge {
                    waiter: waiter.clone(),
                    holder: Party::of(&h.owner, h.session.as_deref()),
                    kind,
                    storage_key: key.clone(),
                    since,
                    in_cycle: false,
                });
            }
        }
        let cycles = mark_cycles(&mut edges);
        Ok(WaitGraph {
            edges,
            cycles,
            truncated,
            complete,
            refused,
        })
    }

    /// The live holders of the keys `waits` wait for, by (kind, key).
    async fn holders_of(
        &self,
        tenant: &str,
        waits: &[(Kind, String, Party, NaiveDateTime, Option<RwMode>)],
    ) -> Result<HashMap<(Kind, String), Vec<HolderRow>>, EngineError> {
        let mut keys: HashMap<Kind, HashSet<Vec<u8>>> = HashMap::new();
        for (kind, key, ..) in waits {
            keys.entry(*kind)
                .or_default()
                .insert(key.as_bytes().to_vec());
        }
        let budget = self.budget();
        let rows = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let mut rows = Vec::new();
                for (kind, keys) in &keys {
                    let keys: Vec<Vec<u8>> = keys.iter().cloned().collect();
                    rows.extend(waiting::holders(&mut conn, tenant, *kind, &keys).await?);
                }
                conn.done();
                Ok(rows)
            })
            .await?;
        let mut by_key: HashMap<(Kind, String), Vec<HolderRow>> = HashMap::new();
        for row in rows {
            if let Some(kind) = kind_of(row.kind) {
                let key = String::from_utf8_lossy(&row.lock_key).into_owned();
                by_key.entry((kind, key)).or_default().push(row);
            }
        }
        Ok(by_key)
    }
}

/// Finds the cycles of the graph of `edges` (Tarjan's strongly connected
/// components over parties), marks the edges inside one, and returns each
/// cycle's parties (a component of several parties, or one party that
/// waits for itself).
fn mark_cycles(edges: &mut [WaitEdge]) -> Vec<Vec<Party>> {
    let mut index_of: HashMap<(bool, String), usize> = HashMap::new();
    let mut parties: Vec<Party> = Vec::new();
    let mut node = |p: &Party, parties: &mut Vec<Party>| {
        let (is_session, id) = p.node();
        *index_of
            .entry((is_session, id.to_owned()))
            .or_insert_with(|| {
                parties.push(p.clone());
                parties.len() - 1
            })
    };
    let mut links: Vec<(usize, usize)> = Vec::with_capacity(edges.len());
    for e in edges.iter() {
        let from = node(&e.waiter, &mut parties);
        let to = node(&e.holder, &mut parties);
        links.push((from, to));
    }
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); parties.len()];
    for &(from, to) in &links {
        next[from].push(to);
    }
    let component = strongly_connected(&next);
    let mut size = vec![0usize; parties.len()];
    for &c in &component {
        size[c] += 1;
    }
    let cyclic = |from: usize, to: usize| {
        component[from] == component[to] && (size[component[from]] > 1 || from == to)
    };
    let mut cyclic_components: Vec<usize> = Vec::new();
    for (e, &(from, to)) in edges.iter_mut().zip(&links) {
        if cyclic(from, to) {
            e.in_cycle = true;
            if !cyclic_components.contains(&component[from]) {
                cyclic_components.push(component[from]);
            }
        }
    }
    cyclic_components
        .into_iter()
        .map(|c| {
            (0..parties.len())
                .filter(|&p| component[p] == c)
                .map(|p| parties[p].clone())
                .collect()
        })
        .collect()
}

/// Tarjan's algorithm, iterative: each node's component number.
fn strongly_connected(next: &[Vec<usize>]) -> Vec<usize> {
    let n = next.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let mut component = vec![usize::MAX; n];
    let (mut counter, mut components) = (0, 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, next edge to look at)
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut at)) = work.last_mut() {
            if *at == 0 && index[v] == usize::MAX {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = next[v].get(*at) {
                *at += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = components;
                    if w == v {
                        break;
                    }
                }
                components += 1;
            }
        }
    }
    component
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: &str, to: &str) -> WaitEdge {
        let party = |name: &str| Party {
            owner: name.to_owned(),
            session: None,
        };
        WaitEdge {
            waiter: party(from),
            holder: party(to),
            kind: Kind::Lock,
            storage_key: format!("{from}->{to}"),
            since: NaiveDateTime::default(),
            in_cycle: false,
        }
    }

    #[test]
    fn cycles_are_found_and_their_edges_marked() {
        // a -> b -> c -> a is a cycle; d -> a leads into it; e waits for
        // itself; f -> g is a plain wait.
        let mut edges = vec![
            edge("a", "b"),
            edge("b", "c"),
            edge("c", "a"),
            edge("d", "a"),
            edge("e", "e"),
            edge("f", "g"),
        ];
        let cycles = mark_cycles(&mut edges);
        let marked: Vec<bool> = edges.iter().map(|e| e.in_cycle).collect();
        assert_eq!(marked, [true, true, true, false, true, false]);
        let mut names: Vec<Vec<String>> = cycles
            .iter()
            .map(|c| {
                let mut n: Vec<_> = c.iter().map(|p| p.owner.clone()).collect();
                n.sort();
                n
            })
            .collect();
        names.sort();
        assert_eq!(names, [vec!["a", "b", "c"], vec!["e"]]);
    }

    #[test]
    fn a_session_is_one_party_whatever_its_owners() {
        // Two owners in one session: s holds x and waits for y; t holds y
        // and waits for x (owners differ per lease).
        let party = |owner: &str, session: &str| Party {
            owner: owner.to_owned(),
            session: Some(session.to_owned()),
        };
        let mut edges = vec![
            WaitEdge {
                waiter: party("s-1", "s"),
                holder: party("t-1", "t"),
                ..edge("x", "y")
            },
            WaitEdge {
                waiter: party("t-2", "t"),
                holder: party("s-2", "s"),
                ..edge("y", "x")
            },
        ];
        let cycles = mark_cycles(&mut edges);
        assert_eq!(cycles.len(), 1);
        assert!(edges.iter().all(|e| e.in_cycle));
    }

    #[test]
    fn a_long_chain_is_no_cycle() {
        let mut edges: Vec<_> = (0..5000)
            .map(|i| edge(&i.to_string(), &(i + 1).to_string()))
            .collect();
        assert!(mark_cycles(&mut edges).is_empty());
        assert!(edges.iter().all(|e| !e.in_cycle));
    }
}
