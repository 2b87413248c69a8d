//! Semaphores: leases on one of `permits` slots of a key. The bodies are
//! the lock's ([`crate::lease`]) plus the size and the slot.

use serde::{Deserialize, Serialize};

use crate::{LeaseTerms, ReleaseRequest, RenewRequest};

/// `POST /v1/semaphores/{key}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreAcquireRequest {
    /// Identifies the holder (host, process, thread): 1 to 128 bytes of
    /// UTF-8, compared byte for byte. Any characters are accepted, control
    /// characters included. Required, unless `session` is given: then it
    /// defaults to the session id.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub owner: String,
    /// Size of the semaphore, 1 to 1000: required, never null. The first
    /// acquire fixes it; later ones must send the same (409
    /// `permits_mismatch`).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub permits: u32,
    #[serde(flatten)]
    pub terms: LeaseTerms,
}

impl SemaphoreAcquireRequest {
    /// A request with the defaults: NOWAIT, default TTL and priority.
    pub fn new(owner: impl Into<String>, permits: u32) -> SemaphoreAcquireRequest {
        SemaphoreAcquireRequest {
            owner: owner.into(),
            permits,
            terms: LeaseTerms::default(),
        }
    }
}

/// `POST /v1/semaphores/{key}/renew`: a lock's renewal of the slot held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreRenewRequest {
    /// The slot held, 0 to permits-1.
    #[cfg_attr(feature = "openapi", schema(maximum = 999))]
    pub slot: u32,
    #[serde(flatten)]
    pub lease: RenewRequest,
}

/// `POST /v1/semaphores/{key}/release`: a lock's release of the slot held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreReleaseRequest {
    /// The slot held, 0 to permits-1.
    #[cfg_attr(feature = "openapi", schema(maximum = 999))]
    pub slot: u32,
    #[serde(flatten)]
    pub lease: ReleaseRequest,
}

/// A granted (or renewed) semaphore slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Fencing token of the slot: strictly increases with every new grant
    /// of this slot and never repeats. Each slot counts on its own (slots
    /// are granted without a shared counter, so that holders never wait
    /// for each other), so two holders of one semaphore may carry equal
    /// tokens: fence with the pair (`slot`, `token`).
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
    /// The session the lease is held in (its `expires_at` is the
    /// session's); null when held on its own.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
}

/// `GET /v1/semaphores/{key}`: size, unexpired holders and waiters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
