//! Reader-writer locks: many readers or one writer per key, in their own
//! namespace (a rwlock `k` and a lock `k` are unrelated). Release and renew
//! take the lock's bodies ([`crate::ReleaseRequest`],
//! [`crate::RenewRequest`]): a lease is named by its owner and token,
//! whatever its mode.

use serde::{Deserialize, Serialize};

/// Whether a rwlock lease is shared with other readers or held alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RwMode {
    /// Shared: any number of readers at once, while no writer holds it.
    Read,
    /// Alone: no other reader or writer.
    Write,
}

impl RwMode {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

/// `POST /v1/rwlocks/{key}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "mode": "read", "ttl_ms": 30000, "wait_ms": 0})))
)]
pub struct RwAcquireRequest {
    /// Identifies the holder (host, process, thread): 1 to 128 bytes of
    /// UTF-8, compared byte for byte.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// `read` (shared) or `write` (alone): required.
    pub mode: RwMode,
    /// Lease length in milliseconds: 100 to the tenant's `max_ttl_ms`.
    /// Absent or null: 30000 (or `max_ttl_ms` if that is smaller).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
    /// 0: try once (NOWAIT). More: wait up to this many milliseconds (at
    /// most 300000) in the queue. Absent or null: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 300000, default = 0))]
    pub wait_ms: Option<u64>,
    /// Handed to the tenant's fairness policy. Absent or null: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_i32"
    )]
    #[cfg_attr(feature = "openapi", schema(default = 0))]
    pub priority: Option<i32>,
}

impl RwAcquireRequest {
    /// A request with the defaults: NOWAIT, default TTL and priority.
    pub fn new(owner: impl Into<String>, mode: RwMode) -> RwAcquireRequest {
        RwAcquireRequest {
            owner: owner.into(),
            mode,
            ttl_ms: None,
            wait_ms: None,
            priority: None,
        }
    }
}

/// A granted (or renewed) rwlock lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"key": "config", "storage_key": "config", "owner": "worker-7",
        "mode": "read", "token": 42, "ttl_ms": 30000,
        "expires_at": "2026-11-21T10:00:00.000Z", "readers": 3})))
)]
pub struct RwLease {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// The holder.
    pub owner: String,
    pub mode: RwMode,
    /// Fencing token: strictly increases with every new grant of this key,
    /// read or write, and never repeats. The same owner asking again for
    /// the mode it holds gets the same token (renewed).
    pub token: u64,
    /// Lease length granted, in milliseconds.
    pub ttl_ms: u64,
    /// End of the lease by the database clock, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
    /// Live readers with this lease (this one included); 0 for a write.
    pub readers: u32,
}

/// One unexpired rwlock lease, in [`RwLockStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RwHolder {
    /// The holder.
    pub owner: String,
    /// The fencing token of the grant.
    pub token: u64,
    /// End of the lease by the database clock, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// `GET /v1/rwlocks/{key}`: the writer or the readers, and the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"key": "config", "storage_key": "config", "writer": null,
        "readers": [{"owner": "worker-7", "token": 42,
                     "expires_at": "2026-11-21T10:00:00.000Z"}], "waiters": 1})))
)]
pub struct RwLockStatus {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// The writer's unexpired lease; null when nobody writes.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub writer: Option<RwHolder>,
    /// Unexpired read leases, oldest grant first.
    pub readers: Vec<RwHolder>,
    /// Requests waiting (readers and writers).
    pub waiters: u64,
}
