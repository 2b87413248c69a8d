//! Who waits (issue #32): a key's queue in the order it will be served
//! (`GET /v1/{kind}/{key}/waiters`) and the tenant's wait-for graph
//! (`GET /v1/waits-for`).

use serde::{Deserialize, Serialize};

use crate::RwMode;

/// How many waiters a queue or graph shows unless asked (`limit`).
pub const WAITERS_DEFAULT_LIMIT: u32 = 100;
/// The most waiters a queue or graph shows (`limit`).
pub const WAITERS_MAX_LIMIT: u32 = 1000;

/// One waiter of a key's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueuedWaiter {
    /// Its place in the queue: 0 is served next.
    pub position: u32,
    /// Who waits.
    pub owner: String,
    /// The session it asks to hold its lease in; null for none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
    /// Its priority (what a fairness policy may use).
    pub priority: i32,
    /// When it started waiting, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub waiting_since: String,
    /// When its wait runs out (`wait_ms` after it started).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub deadline: String,
    /// The broker its client waits on.
    pub broker: String,
    /// What a rwlock waiter asks for; absent for the other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<RwMode>,
    /// It waits in its broker's memory (a contended lock whose lease was
    /// granted through that broker), not in the database queue.
    pub in_memory: bool,
}

/// `GET /v1/{kind}/{key}/waiters`: the queue in the order it will be
/// served (a preview: arrivals, departures and a fairness policy's
/// choices change it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyWaiters {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to.
    pub storage_key: String,
    /// The waiters, first served first.
    pub waiters: Vec<QueuedWaiter>,
    /// More wait than `limit`: the queue goes on after these.
    pub truncated: bool,
    /// Every broker that may keep waiters of this key in memory answered
    /// (false: one did not within a second, and its are missing).
    pub complete: bool,
}

/// Who holds or waits: a session when the lease (or the wait) is in one,
/// else an owner. The graph's node is the session if there is one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitParty {
    pub owner: String,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
}

/// One edge of the wait-for graph: `waiter` waits for `holder`'s lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitForEdge {
    pub waiter: WaitParty,
    pub holder: WaitParty,
    /// `lock`, `election`, `semaphore` or `rwlock`.
    pub kind: String,
    /// The key waited for (its storage key).
    pub storage_key: String,
    /// When the waiter started waiting, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub since: String,
    /// Both ends are in one cycle (a deadlock, until a wait runs out).
    pub in_cycle: bool,
}

/// `GET /v1/waits-for`: who waits for whom among the tenant's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitsFor {
    /// An edge from each waiter to each holder it waits for.
    pub edges: Vec<WaitForEdge>,
    /// The cycles: each one's parties (several that wait for each other
    /// round, or one that waits for itself).
    pub cycles: Vec<Vec<WaitParty>>,
    /// More waiters than `limit`: some edges are missing.
    pub truncated: bool,
    /// Every broker that may keep waiters in memory answered.
    pub complete: bool,
}
