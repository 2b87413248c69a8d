//! Lock history: `GET /v1/locks/{key}/history?limit=N`.

use serde::{Deserialize, Serialize};

/// `limit` when the query gives none.
pub const HISTORY_DEFAULT_LIMIT: u32 = 100;
/// The largest `limit` accepted.
pub const HISTORY_MAX_LIMIT: u32 = 1000;

/// What happened to a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LockEventKind {
    /// A new grant (a new token) to a requester that found the key free.
    Granted,
    /// The holder released its last hold.
    Released,
    /// The lease ran out without a release; `at` is when it ran out
    /// (recorded by the next change of the key).
    Expired,
    /// A new grant to a queued waiter, by the change that freed the key.
    HandedOff,
    /// An operator ended the lease (`POST /v1/admin/tenants/{t}/locks/{key}/release`).
    ForceReleased,
    /// A session ended (event streams only: `kind` is `session`,
    /// `storage_key` and `session` the session's id, `reason` why). Each of
    /// its leases has its own `released` or `expired` event first.
    SessionEnded,
    /// A session's wait was refused (`409 deadlock`) because it would have
    /// closed a cycle of sessions waiting for each other (event streams
    /// only, not a key's history: no lease changed). `storage_key`,
    /// `owner` and `session` are the refused wait's, `token` is 0 and
    /// `cycle` the cycle as the error carried it.
    Deadlock,
}

/// Why a lease ended without its holder's release: its session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Its session was closed (`DELETE /v1/sessions/{id}`).
    SessionClosed,
    /// Its session expired (no keepalive within its TTL).
    SessionExpired,
}

/// One event of a lock's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockEvent {
    pub event: LockEventKind,
    /// The lease's holder.
    pub owner: String,
    /// The lease's fencing token.
    pub token: u64,
    /// When, by the database clock (RFC 3339, UTC, microseconds).
    pub at: String,
    /// The id of the tenant's policy version that decided it (as in `GET
    /// /v1/admin/tenants/{tenant}/policy/versions`): for `granted` the one
    /// that named the key, for `handed_off` the one whose fairness picked
    /// the waiter. Null for other events, for events decided by the
    /// built-in policy, and for events recorded before versions were.
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, pattern = "^[0-9a-f]{12}$")
    )]
    #[serde(default)]
    pub policy: Option<String>,
    /// The session the lease was held in; null for a lease of its own.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
    /// Set on the `released` or `expired` event of a lease that its
    /// session's end released; null otherwise.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub reason: Option<EndReason>,
}

/// `GET /v1/locks/{key}/history`: newest first. Events are written in the
/// same transaction as the change they record; re-entries, renewals and
/// releases of one of several holds are not events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockHistory {
    pub events: Vec<LockEvent>,
}

/// What kind of resource an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    Lock,
    Semaphore,
    Rwlock,
    /// A session (its `session_ended` event).
    Session,
    /// An election (only its `deadlock` events: its terms are not events).
    Election,
}

/// The data of one event of `GET /v1/events` (its SSE `event:` line is
/// `event`, its `id:` line `id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamEvent {
    /// The event's id: increasing in the order a broker sends events; a
    /// client resumes after the last it received (`Last-Event-ID`).
    pub id: u64,
    pub event: LockEventKind,
    pub kind: ResourceKind,
    /// The storage key of the lock, semaphore or rwlock (a session's id
    /// for `session_ended`).
    pub storage_key: String,
    /// The lease's holder (empty for `session_ended`).
    pub owner: String,
    /// The lease's fencing token (0 for `session_ended`).
    pub token: u64,
    /// When, by the database clock (RFC 3339, UTC, microseconds).
    pub at: String,
    /// The session the lease was held in (the session that ended, for
    /// `session_ended`); null for a lease of its own.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
    /// Why its session's end released it (and why the session ended, for
    /// `session_ended`); null otherwise.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub reason: Option<EndReason>,
    /// For `deadlock`: the cycle the refused wait would have closed (its
    /// first step is that wait), as the `409 deadlock` error carried it;
    /// null for every other event.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub cycle: Option<Vec<crate::CycleStep>>,
}
