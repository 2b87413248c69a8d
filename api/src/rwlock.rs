//! Reader-writer locks: many readers or one writer per key, in their own
//! namespace (a rwlock `k` and a lock `k` are unrelated). Release and renew
//! take the lock's bodies ([`crate::ReleaseRequest`],
//! [`crate::RenewRequest`]): a lease is named by its owner and token,
//! whatever its mode.

use serde::{Deserialize, Serialize};

use crate::LeaseTerms;

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
pub struct RwAcquireRequest {
    /// Identifies the holder (host, process, thread): 1 to 128 bytes of
    /// UTF-8, compared byte for byte. Required, unless `session` is given:
    /// then it defaults to the session id.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub owner: String,
    /// `read` (shared) or `write` (alone): required.
    pub mode: RwMode,
    #[serde(flatten)]
    pub terms: LeaseTerms,
}

impl RwAcquireRequest {
    /// A request with the defaults: NOWAIT, default TTL and priority.
    pub fn new(owner: impl Into<String>, mode: RwMode) -> RwAcquireRequest {
        RwAcquireRequest {
            owner: owner.into(),
            mode,
            terms: LeaseTerms::default(),
        }
    }
}

/// A granted (or renewed) rwlock lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The session the lease is held in (its `expires_at` is the
    /// session's); null when held on its own.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
}

/// `GET /v1/rwlocks/{key}`: the writer or the readers, and the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
