//! Semaphores: leases on one of `permits` slots of a key. The bodies are
//! the lock's ([`crate::lease`]) plus the size and the slot.

use serde::{Deserialize, Serialize};

/// `POST /v1/semaphores/{key}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "permits": 5, "ttl_ms": 30000, "wait_ms": 0})))
)]
pub struct SemaphoreAcquireRequest {
    /// Identifies the holder (host, process, thread): 1 to 128 bytes of
    /// UTF-8, compared byte for byte. Any characters are accepted, control
    /// characters included.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// Size of the semaphore, 1 to 1000: required, never null. The first
    /// acquire fixes it; later ones must send the same (409
    /// `permits_mismatch`).
    #[serde(deserialize_with = "crate::num::u32")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub permits: u32,
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
    /// most 300000) for a slot. Absent or null: 0.
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

impl SemaphoreAcquireRequest {
    /// A request with the defaults: NOWAIT, default TTL and priority.
    pub fn new(owner: impl Into<String>, permits: u32) -> SemaphoreAcquireRequest {
        SemaphoreAcquireRequest {
            owner: owner.into(),
            permits,
            ttl_ms: None,
            wait_ms: None,
            priority: None,
        }
    }
}

/// `POST /v1/semaphores/{key}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "slot": 2, "token": 17, "ttl_ms": 30000})))
)]
pub struct SemaphoreRenewRequest {
    /// The holder (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The slot held, 0 to permits-1.
    #[serde(deserialize_with = "crate::num::u32")]
    pub slot: u32,
    /// The fencing token of the grant.
    #[serde(deserialize_with = "crate::num::u64")]
    pub token: u64,
    /// New lease length from now, in milliseconds: 100 to the tenant's
    /// `max_ttl_ms`. Absent or null: 30000 (or `max_ttl_ms` if smaller).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::num::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
}

/// `POST /v1/semaphores/{key}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"owner": "worker-7", "slot": 2, "token": 17})))
)]
pub struct SemaphoreReleaseRequest {
    /// The holder (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The slot held, 0 to permits-1.
    #[serde(deserialize_with = "crate::num::u32")]
    pub slot: u32,
    /// The fencing token of the grant.
    #[serde(deserialize_with = "crate::num::u64")]
    pub token: u64,
}

/// A granted (or renewed) semaphore slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"key": "pool", "storage_key": "pool", "owner": "worker-7",
        "slot": 2, "permits": 5, "token": 17, "ttl_ms": 30000,
        "expires_at": "2026-11-21T10:00:00.000Z"})))
)]
pub struct SemaphoreLease {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// The holder.
    pub owner: String,
    /// The slot held, 0 to permits-1.
    pub slot: u32,
    /// Size of the semaphore: how many holders it admits at once.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub permits: u32,
    /// Fencing token: strictly increases with every new grant on this
    /// semaphore and never repeats.
    pub token: u64,
    /// Lease length granted, in milliseconds.
    pub ttl_ms: u64,
    /// End of the lease by the database clock, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// One unexpired slot lease, in [`SemaphoreStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreHolder {
    /// The slot held, 0 to permits-1.
    pub slot: u32,
    /// The holder.
    pub owner: String,
    /// The fencing token of the grant.
    pub token: u64,
    /// End of the lease by the database clock, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// `GET /v1/semaphores/{key}`: size, unexpired holders and waiters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(examples(json!({"key": "pool", "storage_key": "pool", "permits": 5, "waiters": 0,
        "holders": [{"slot": 2, "owner": "worker-7", "token": 17,
                     "expires_at": "2026-11-21T10:00:00.000Z"}]})))
)]
pub struct SemaphoreStatus {
    /// The key as the client sent it (decoded).
    pub key: String,
    /// The storage key the tenant's naming policy mapped the key to.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// Size of the semaphore; null when no semaphore of this key exists
    /// (it is created by its first acquire).
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, minimum = 1, maximum = 1000)
    )]
    pub permits: Option<u32>,
    /// Unexpired leases, by slot.
    pub holders: Vec<SemaphoreHolder>,
    /// Requests waiting for a slot.
    pub waiters: u64,
}
