//! Who waits (issue #32): a key's queue in the order it will be served
//! (`GET /v1/{kind}/{key}/waiters`) and the tenant's wait-for graph
//! (`GET /v1/waits-for`).

use serde::{Deserialize, Serialize};

use crate::RwMode;

/// The window of `GET /v1/contention` unless asked (`window_s`).
pub const CONTENTION_DEFAULT_WINDOW_S: u64 = 60;
/// The longest window of `GET /v1/contention`.
pub const CONTENTION_MAX_WINDOW_S: u64 = 300;
/// How many keys `GET /v1/contention` shows unless asked (`top`).
pub const CONTENTION_DEFAULT_TOP: u32 = 10;
/// The most keys `GET /v1/contention` shows (`top`).
pub const CONTENTION_MAX_TOP: u32 = 100;

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

/// One key of `GET /v1/contention`: what happened to it over the window,
/// every broker's added up, and who holds and waits now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HotKey {
    /// `lock`, `election`, `semaphore` or `rwlock`.
    pub kind: String,
    pub storage_key: String,
    /// Acquires granted (directly, re-entered or handed off).
    pub grants: u64,
    /// Of those, leases handed to a queued waiter by a release or expiry.
    pub handoffs: u64,
    /// Acquires refused because the key was held (a try, or a wait that
    /// ran out).
    pub refusals: u64,
    /// How long grants waited (from request to grant), median and 99th
    /// percentile, in ms (each the upper end of a doubling bucket: at most
    /// twice the true value); 0 without grants.
    pub wait_p50_ms: u64,
    pub wait_p99_ms: u64,
    /// Waiting now (database queue and brokers' memory).
    pub waiters: u64,
    /// Holding now (several for a semaphore or a rwlock's readers).
    pub holders: Vec<WaitParty>,
}

/// `GET /v1/contention`: the tenant's most contended keys of the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Contention {
    /// The window, in seconds (a multiple of 10).
    pub window_s: u64,
    /// Most contended first: by handoffs plus refusals, then grants.
    pub keys: Vec<HotKey>,
    /// Every live broker answered (false: one did not within a second,
    /// and its counts are missing).
    pub complete: bool,
    /// The tenant's live leases by kind, as the broker last counted them
    /// in the database (every 15 s); null until it has.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub held: Option<HeldByKind>,
}

/// Live leases by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeldByKind {
    pub lock: u64,
    pub election: u64,
    pub semaphore: u64,
    pub rwlock: u64,
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
    /// The waits refused as deadlocks (`409 deadlock`) in the last
    /// [`REFUSED_WINDOW_S`] seconds whose key starts with `prefix`, newest
    /// first, at most [`REFUSED_MAX`]: the cycles that did not form.
    #[serde(default)]
    pub refused: Vec<RefusedWait>,
}

/// How far back `GET /v1/waits-for` lists refused waits, in seconds.
pub const REFUSED_WINDOW_S: u32 = 600;
/// How many refused waits `GET /v1/waits-for` lists at most.
pub const REFUSED_MAX: u32 = 10;

/// A session's wait refused because it would have closed a cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RefusedWait {
    /// When, by the database clock (RFC 3339, UTC, microseconds).
    pub at: String,
    /// The cycle it would have closed, as the error carried it: the first
    /// step is the refused wait (its session, owner and key); each step's
    /// key is held by the next step's session, the last step's by the
    /// first's.
    pub cycle: Vec<crate::CycleStep>,
}
