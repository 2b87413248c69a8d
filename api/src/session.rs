//! Sessions (`/v1/sessions`): one keepalive keeps every lease held in a
//! session, and when the session ends (closed, or expired by the database
//! clock) every lease in it ends at once, each key handed to its next
//! waiter. An acquire names the session (`LeaseTerms::session`) in place
//! of `ttl_ms`.

use serde::{Deserialize, Serialize};

/// `ttl_ms` of a session when the request gives none.
pub const SESSION_DEFAULT_TTL_MS: u64 = 15_000;
/// The shortest session TTL.
pub const SESSION_MIN_TTL_MS: u64 = 1_000;
/// The longest session TTL.
pub const SESSION_MAX_TTL_MS: u64 = 3_600_000;
/// The longest lock-delay of a session.
pub const SESSION_MAX_LOCK_DELAY_MS: u64 = 60_000;
/// The longest session name, in bytes.
pub const SESSION_MAX_NAME_BYTES: usize = 512;

/// `POST /v1/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateSessionRequest {
    /// How long the session lives without a keepalive, in milliseconds:
    /// 1000 to 3600000. Absent or null: 15000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1000, maximum = 3600000, default = 15000)
    )]
    pub ttl_ms: Option<u64>,
    /// A name for people and listings (`prefix` matches it): up to 512
    /// bytes. Absent, null or empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub name: Option<String>,
    /// After the session *expires*, its keys are not granted again for this
    /// long (a lock-delay, as Chubby's and Consul's); a close does not
    /// delay. 0 to 60000; absent or null: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 60000, default = 0))]
    pub lock_delay_ms: Option<u64>,
}

/// A session (the answer to `POST /v1/sessions`, and an item of `GET
/// /v1/sessions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    /// The session's id, chosen by the broker (32 hex characters,
    /// unguessable). Name it as `session` in an acquire.
    pub id: String,
    /// Its name; null when it has none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub name: Option<String>,
    /// How long it lives without a keepalive, in milliseconds.
    pub ttl_ms: u64,
    /// The lock-delay of its keys after an expiry, in milliseconds.
    pub lock_delay_ms: u64,
    /// When it was opened (database clock, UTC).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub created_at: String,
    /// When it expires without a keepalive (database clock, UTC).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// The answer to `POST /v1/sessions/{id}/keepalive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionKeepalive {
    pub id: String,
    /// The new expiry: now plus the session's TTL (database clock, UTC).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// The answer to `DELETE /v1/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionClosed {
    /// Always true.
    pub closed: bool,
    /// How many leases the close released.
    pub released: u64,
}

/// A lease held in a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionLease {
    /// `lock`, `election`, `semaphore` or `rwlock` (a multi-lock's keys
    /// are locks).
    pub kind: String,
    /// The key (the storage key: the broker does not keep the key clients
    /// sent).
    pub key: String,
    /// The storage key.
    pub storage_key: String,
    /// The lease's fencing token.
    pub token: u64,
    /// A semaphore lease's slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// A rwlock lease's mode: `read` or `write`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// The answer to `GET /v1/sessions/{id}`: the session and its leases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionStatus {
    #[serde(flatten)]
    pub session: Session,
    /// Every lease held in it (at most 10000), by kind and storage key.
    pub leases: Vec<SessionLease>,
}
