//! Leases: what a client sends to acquire, renew and release one, and what
//! it gets back. Locks use these as they are; semaphores and elections use
//! the same fields under their own names (see [`crate::semaphore`],
//! [`crate::election`]).

use serde::{Deserialize, Serialize};

/// `POST /v1/locks/{key}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "ttl_ms": 30000, "wait_ms": 0, "priority": 0})))
)]
pub struct AcquireRequest {
    /// Identifies the holder (host, process, thread): 1 to 128 bytes of
    /// UTF-8, compared byte for byte. Any characters are accepted, control
    /// characters included.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// Lease length in milliseconds: 100 to the tenant's `max_ttl_ms`
    /// (3600000 unless configured). Absent or null: 30000 (or `max_ttl_ms`
    /// if that is smaller).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
    /// 0: try once and answer at once (NOWAIT). More: wait up to this many
    /// milliseconds (at most 300000) in the queue the tenant's fairness
    /// policy orders. Absent or null: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 300000, default = 0))]
    pub wait_ms: Option<u64>,
    /// Handed to the tenant's fairness policy; higher is more urgent for
    /// policies that use it. Absent or null: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_i32"
    )]
    #[cfg_attr(feature = "openapi", schema(default = 0))]
    pub priority: Option<i32>,
}

impl AcquireRequest {
    /// A request with the defaults: NOWAIT, default TTL and priority.
    pub fn new(owner: impl Into<String>) -> AcquireRequest {
        AcquireRequest {
            owner: owner.into(),
            ttl_ms: None,
            wait_ms: None,
            priority: None,
        }
    }
}

/// `POST /v1/locks/{key}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "token": 42, "ttl_ms": 30000})))
)]
pub struct RenewRequest {
    /// The holder, as it acquired the lock (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The fencing token of the grant.
    #[serde(deserialize_with = "crate::num::u64")]
    pub token: u64,
    /// New lease length from now (database clock), in milliseconds: 100 to
    /// the tenant's `max_ttl_ms`. Absent or null: 30000 (or `max_ttl_ms` if
    /// that is smaller).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
}

/// `POST /v1/locks/{key}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "token": 42})))
)]
pub struct ReleaseRequest {
    /// The holder, as it acquired the lock (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The fencing token of the grant.
    #[serde(deserialize_with = "crate::num::u64")]
    pub token: u64,
}

/// A granted (or re-entered, or renewed) lock lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"key": "job-1", "storage_key": "job-1", "owner": "worker-7",
        "token": 42, "hold_count": 1, "ttl_ms": 30000,
        "expires_at": "2026-11-21T10:00:00.000Z"})))
)]
pub struct Lease {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to (the
    /// built-in policy keeps it unchanged); 1 to 512 bytes. Storage is
    /// scoped by tenant in addition.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// The holder.
    pub owner: String,
    /// Fencing token: strictly increases with every new grant of the key
    /// (never repeats, also after release, expiry, broker restart, or many
    /// brokers sharing the database). Pass it to whatever the lock protects.
    pub token: u64,
    /// How many times the owner has acquired the lock without releasing
    /// it: 1 for a new grant, +1 for each re-entry.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub hold_count: u32,
    /// Lease length granted, in milliseconds.
    pub ttl_ms: u64,
    /// End of the lease by the database clock, UTC with milliseconds
    /// (`2026-11-21T10:00:00.000Z`).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// What a release did (locks and semaphores).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"released": true, "hold_count": 0})))
)]
pub struct ReleaseResponse {
    /// True when the hold count reached 0 and the lock (or slot) is free.
    pub released: bool,
    /// Holds left; the lock stays with the owner until it reaches 0.
    /// Always 0 for semaphores.
    pub hold_count: u32,
}

/// `GET /v1/locks/{key}`: the holder as judged by the database clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"key": "job-1", "storage_key": "job-1", "held": true,
        "owner": "worker-7", "token": 42, "expires_at": "2026-11-21T10:00:00.000Z",
        "waiters": 0})))
)]
pub struct LockStatus {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// True while an unexpired lease exists.
    pub held: bool,
    /// The holder; null when not held.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub owner: Option<String>,
    /// The current fencing token; null when not held.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub token: Option<u64>,
    /// End of the lease (database clock, UTC); null when not held.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub expires_at: Option<String>,
    /// Requests waiting for the lock.
    pub waiters: u64,
}
