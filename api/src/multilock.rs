//! Multi-locks: several lock keys granted all or none in one transaction,
//! each with its own fencing token. The keys are ordinary locks: a
//! multi-lock and single-key acquires of the same key exclude each other.

use serde::{Deserialize, Serialize};

use crate::LeaseTerms;

/// `POST /v1/multilock/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockAcquireRequest {
    /// The lock keys (as a client names them; each goes through the
    /// tenant's naming policy): 1 to 64, no two naming the same storage
    /// key (400).
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 64))]
    pub keys: Vec<String>,
    /// The holder of every key: 1 to 128 bytes, compared byte for byte. An
    /// owner that already holds one of the keys re-enters it (same token,
    /// `hold_count` + 1), as a single-key acquire would. Required, unless
    /// `session` is given: then it defaults to the session id.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub owner: String,
    /// Every key gets `ttl_ms`. Waiting (`wait_ms` > 0), the request queues
    /// on the first busy key with `priority`, never holding part of the set.
    #[serde(flatten)]
    pub terms: LeaseTerms,
}

/// One key of a multi-lock and the token its holder got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeldKey {
    /// The key as the client sent it.
    pub key: String,
    /// The key's fencing token, from the acquire's answer.
    pub token: u64,
}

/// `POST /v1/multilock/renew`: every key's lease extended, all or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockRenewRequest {
    /// The holder (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// New lease length from now (database clock) for every key: 100 to
    /// the tenant's `max_ttl_ms`. Absent or null: 30000 (or `max_ttl_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
    /// The keys and their tokens (1 to 64).
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 64))]
    pub locks: Vec<HeldKey>,
}

/// `POST /v1/multilock/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockReleaseRequest {
    /// The holder (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The keys and their tokens (1 to 64).
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 64))]
    pub locks: Vec<HeldKey>,
}

/// One key of a granted (or renewed) multi-lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockEntry {
    /// The key as the client sent it.
    pub key: String,
    /// The storage key the tenant's naming policy mapped it to; the keys
    /// were taken in this order (byte order).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 512))]
    pub storage_key: String,
    /// This key's fencing token: strictly increasing per key across every
    /// grant, single-key or multi-lock.
    pub token: u64,
    /// 1 for a new grant; more when the owner held the key already.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub hold_count: u32,
    /// End of this key's lease by the database clock, UTC with
    /// milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// A granted or renewed multi-lock: every key, in storage-key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockLease {
    /// The holder.
    pub owner: String,
    /// Lease length granted to every key, in milliseconds.
    pub ttl_ms: u64,
    /// Every key with its token, in storage-key order.
    pub locks: Vec<MultiLockEntry>,
}

/// What a multi-lock release did to one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockReleased {
    /// The key as the client sent it.
    pub key: String,
    /// True when the key is free (or handed to its next waiter).
    pub released: bool,
    /// Holds the owner still has (re-entered keys).
    pub hold_count: u32,
    /// True when that token no longer held the key (expired, re-granted
    /// or force-released): nothing changed for it, and the holder's work
    /// under it may have overlapped with another holder's.
    pub lost: bool,
}

/// `POST /v1/multilock/release`: one entry per key, in storage-key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLockReleaseResponse {
    /// Every key of the request.
    pub locks: Vec<MultiLockReleased>,
}
