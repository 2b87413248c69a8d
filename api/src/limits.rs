//! The limits of the API, one constant each: the broker enforces these, the
//! OpenAPI document states them, and policies (`plugins/`) build on them.

/// Largest request body, in bytes (413 `too_large` above it).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest client key (decoded path segment) handed to a naming policy, in
/// bytes (422 `invalid_key` above it).
pub const MAX_RAW_KEY_BYTES: usize = 1024;
/// Longest storage key a naming policy may return, in bytes: the width of
/// the `lock_key`/`sem_key` `VARBINARY(512)` columns in `migrations/`. A
/// policy returning an empty or longer key fails (500 `policy_error`).
pub const MAX_STORAGE_KEY_BYTES: usize = 512;
/// Longest `owner` or `candidate`, in bytes (the `owner VARBINARY(128)`
/// columns).
pub const MAX_OWNER_BYTES: usize = 128;
/// Lease length when a request gives no `ttl_ms` (capped by the tenant's
/// `max_ttl_ms`).
pub const DEFAULT_TTL_MS: u64 = 30_000;
/// Shortest lease, in milliseconds.
pub const MIN_TTL_MS: u64 = 100;
/// Longest `wait_ms`.
pub const MAX_WAIT_MS: u64 = 300_000;
/// Largest semaphore.
pub const MAX_PERMITS: u32 = 1000;
/// Most keys in one multi-lock.
pub const MAX_MULTILOCK_KEYS: usize = 64;
/// `limit` of a listing when the query gives none.
pub const LIST_DEFAULT_LIMIT: u32 = 100;
/// The largest `limit` of a listing.
pub const LIST_MAX_LIMIT: u32 = 1000;
