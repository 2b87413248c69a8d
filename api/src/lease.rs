//! Leases: what a client sends to acquire, renew and release one, and what
//! it gets back. Locks use these as they are, rwlocks their renew and
//! release; every kind's acquire carries [`LeaseTerms`], and semaphores
//! and elections build the rest from the same fields (see
//! [`crate::semaphore`], [`crate::election`]).

use serde::{Deserialize, Serialize};

/// What every acquire asks besides who asks: how long the lease should
/// last, how long to wait for it, and how urgent the request is. Flattened
/// into each kind's acquire request (its fields sit beside `owner`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseTerms {
    /// Lease length in milliseconds: 100 to the tenant's `max_ttl_ms`
    /// (3600000 unless configured). Absent or null: 30000 (or `max_ttl_ms`
    /// if that is smaller). Not with `session` (400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
    /// 0: try once and answer at once (NOWAIT). More: wait up to this many
    /// milliseconds (at most 300000) in the queue the tenant's fairness
    /// policy orders. Absent or null: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 300000, default = 0))]
    pub wait_ms: Option<u64>,
    /// Handed to the tenant's fairness policy; higher is more urgent for
    /// policies that use it. Absent or null: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = 0))]
    pub priority: Option<i32>,
    /// Hold the lease in this session (`POST /v1/sessions`), in place of
    /// `ttl_ms`: it lives as long as the session, and ends with it; the
    /// answer's `expires_at` and `ttl_ms` are the session's. The owner
    /// defaults to the session id. Every kind (lock, semaphore, rwlock,
    /// multi-lock, election). An ended or unknown session: 404
    /// `session_not_found`, nothing granted. A wait in a session that
    /// would close a cycle of sessions waiting for each other: 409
    /// `deadlock` at once, with the cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

impl LeaseTerms {
    /// A lease of `ttl_ms`, waiting up to `wait_ms` for it, at the default
    /// priority.
    pub fn new(ttl_ms: u64, wait_ms: u64) -> LeaseTerms {
        LeaseTerms {
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            priority: None,
            session: None,
        }
    }

    /// Terms that give only a lease length (a renewal's).
    pub fn ttl(ttl_ms: Option<u64>) -> LeaseTerms {
        LeaseTerms {
            ttl_ms,
            ..LeaseTerms::default()
        }
    }
}

/// `POST /v1/locks/{key}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AcquireRequest {
    /// Identifies the holder (host, process, thread): 1 to 128 bytes of
    /// UTF-8, compared byte for byte. Any characters are accepted, control
    /// characters included. Required, unless `session` is given: then it
    /// defaults to the session id.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub owner: String,
    #[serde(flatten)]
    pub terms: LeaseTerms,
}

impl AcquireRequest {
    /// A request with the defaults: NOWAIT, default TTL and priority.
    pub fn new(owner: impl Into<String>) -> AcquireRequest {
        AcquireRequest {
            owner: owner.into(),
            terms: LeaseTerms::default(),
        }
    }
}

/// `POST /v1/locks/{key}/renew` (and `/v1/rwlocks/{key}/renew`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenewRequest {
    /// The holder, as it acquired the lease (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The fencing token of the grant.
    pub token: u64,
    /// New lease length from now (database clock), in milliseconds: 100 to
    /// the tenant's `max_ttl_ms`. Absent or null: 30000 (or `max_ttl_ms` if
    /// that is smaller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
}

/// `POST /v1/locks/{key}/release` (and `/v1/rwlocks/{key}/release`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseRequest {
    /// The holder, as it acquired the lease (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub owner: String,
    /// The fencing token of the grant.
    pub token: u64,
}

/// A granted (or re-entered, or renewed) lock lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
pub struct ReleaseResponse {
    /// True when the hold count reached 0 and the lock (or slot) is free.
    pub released: bool,
    /// Holds left; the lock stays with the owner until it reaches 0.
    /// Always 0 for semaphores.
    pub hold_count: u32,
}

/// `GET /v1/locks/{key}`: the holder as judged by the database clock (and
/// one item of `GET /v1/locks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// How many times the holder has it (re-entries); null when not held.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub hold_count: Option<u32>,
    /// When the lease was granted (database clock, UTC), from the lock's
    /// history; null when not held, or granted before the history kept.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub acquired_at: Option<String>,
    /// End of the lease (database clock, UTC); null when not held.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub expires_at: Option<String>,
    /// Requests waiting for the lock.
    pub waiters: u64,
    /// The session the lease is held in (its `expires_at` is the
    /// session's); null when not held or held on its own.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub session: Option<String>,
}

/// One page of a listing (`GET /v1/locks`, `/v1/semaphores`, ...): the
/// tenant's live leases, by storage key. (Its schema, one per kind, is
/// made by the broker's OpenAPI document: `LockStatusPage`, ...)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The live resources of this page, in storage-key (byte) order. A page
    /// may hold fewer than `limit` (a scan examines a bounded stretch of
    /// keys): follow `next` until it is null.
    pub items: Vec<T>,
    /// The cursor of the next page (`cursor=`), opaque; null after the last.
    pub next: Option<String>,
}
