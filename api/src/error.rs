//! The error envelope every failure answers with:
//! `{"error": {"code": "...", "message": "...", "retry_after_ms": 120}}`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The code, a message for people, and, for contention, when to retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Stable, machine-readable reason.
    pub code: ErrorCode,
    /// Human-readable detail (for `invalid_key`, the naming policy's reason).
    pub message: String,
    /// With `lock_held` and `semaphore_full` only: when to try again, in
    /// milliseconds, from the tenant's backoff policy (the `Retry-After`
    /// header carries it in whole seconds, rounded up, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// With `deadlock` only: the cycle the wait would have closed, each
    /// step a session (as an owner) waiting for a key the next step's
    /// session holds; the last step's key is held by the first's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<CycleStep>>,
}

/// One step of a deadlock's cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CycleStep {
    /// The session that waits (or would wait, for the first step).
    pub session: String,
    /// Its owner of that wait.
    pub owner: String,
    /// `lock`, `election`, `semaphore` or `rwlock`.
    pub kind: String,
    /// The key it waits for (its storage key).
    pub storage_key: String,
}

impl ErrorBody {
    /// An error without a retry hint.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
                retry_after_ms: None,
                cycle: None,
            },
        }
    }
}

/// Every error code of the API, with its HTTP status.
///
/// Codes may be added: a client should handle a code it does not know by
/// its HTTP status and message (the Rust types read it as `Unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: malformed JSON, a missing field, a value out of range.
    BadRequest,
    /// 401: no bearer token, or an unknown one.
    Unauthenticated,
    /// 403: a tenant's API key on the admin API.
    Forbidden,
    /// 404: no such path or resource.
    NotFound,
    /// 405: the path exists, not with this method (an `Allow` header lists
    /// the methods).
    MethodNotAllowed,
    /// 409: the lock is held by another owner and `wait_ms` ran out.
    LockHeld,
    /// 409: the owner and token do not hold the current lease.
    LeaseLost,
    /// 409: every permit of the semaphore is taken and `wait_ms` ran out.
    SemaphoreFull,
    /// 409: the semaphore exists with a different number of permits.
    PermitsMismatch,
    /// 413: the body is over 64 KiB (policies: over `max_policy_bytes`).
    TooLarge,
    /// 414: the request target (path and query) is over 8 KiB.
    UriTooLong,
    /// 431: the request's headers are over 16 KiB, or too many.
    HeadersTooLarge,
    /// 422: the key is not UTF-8, too long, or the naming policy rejected it.
    InvalidKey,
    /// 422: an uploaded policy component is invalid.
    InvalidPolicy,
    /// 422: a reloaded config file is invalid (the config in force stays,
    /// whole).
    InvalidConfig,
    /// 429: the tenant has `max_waiters` requests waiting already.
    TooManyWaiters,
    /// 429: the tenant has `max_streams` event streams open on this broker
    /// already.
    TooManyStreams,
    /// 429: the grant would take the tenant past `max_held` live leases
    /// (a multi-lock counts as a whole: none of it is granted).
    QuotaExceeded,
    /// 429: the tenant sent more than `max_requests_per_s` (with its
    /// burst) to this broker; `retry_after_ms` says when one more fits.
    RateLimited,
    /// 404: the session named is unknown, closed or expired (its leases
    /// are gone); an acquire naming it was not granted.
    SessionNotFound,
    /// 409: waiting would close a cycle of sessions waiting for each
    /// other; nothing was granted or queued (`cycle` says who waits for
    /// what). End a session of the cycle, or take the keys in one order.
    Deadlock,
    /// 500: the tenant's naming policy trapped or ran out of its budget.
    PolicyError,
    /// 503: the database is unavailable or the broker is shutting down;
    /// nothing was granted.
    Unavailable,
    /// Never sent by a broker: what a client reads for a code this version
    /// does not know (one added by a newer broker), so that it still reports
    /// the status and the message instead of failing to read the answer.
    /// Not one of the documented codes (skipped in the OpenAPI document),
    /// and refused when serializing, so a broker cannot answer with it.
    #[serde(other, skip_serializing)]
    Unknown,
}

impl ErrorCode {
    /// Every code a broker sends, in the order above ([`ErrorCode::Unknown`]
    /// is not one).
    pub const ALL: [ErrorCode; 23] = [
        ErrorCode::BadRequest,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::LockHeld,
        ErrorCode::LeaseLost,
        ErrorCode::SemaphoreFull,
        ErrorCode::PermitsMismatch,
        ErrorCode::TooLarge,
        ErrorCode::UriTooLong,
        ErrorCode::HeadersTooLarge,
        ErrorCode::InvalidKey,
        ErrorCode::InvalidPolicy,
        ErrorCode::InvalidConfig,
        ErrorCode::TooManyWaiters,
        ErrorCode::TooManyStreams,
        ErrorCode::QuotaExceeded,
        ErrorCode::RateLimited,
        ErrorCode::SessionNotFound,
        ErrorCode::Deadlock,
        ErrorCode::PolicyError,
        ErrorCode::Unavailable,
    ];

    /// The HTTP status this code is answered with (500 for
    /// [`ErrorCode::Unknown`], which no broker sends: a client has the
    /// status it received).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound | ErrorCode::SessionNotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::LockHeld
            | ErrorCode::LeaseLost
            | ErrorCode::SemaphoreFull
            | ErrorCode::PermitsMismatch
            | ErrorCode::Deadlock => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::UriTooLong => 414,
            ErrorCode::HeadersTooLarge => 431,
            ErrorCode::InvalidKey | ErrorCode::InvalidPolicy | ErrorCode::InvalidConfig => 422,
            ErrorCode::TooManyWaiters
            | ErrorCode::TooManyStreams
            | ErrorCode::QuotaExceeded
            | ErrorCode::RateLimited => 429,
            ErrorCode::PolicyError | ErrorCode::Unknown => 500,
            ErrorCode::Unavailable => 503,
        }
    }

    /// The code as it appears on the wire (`lock_held`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::LockHeld => "lock_held",
            ErrorCode::LeaseLost => "lease_lost",
            ErrorCode::SemaphoreFull => "semaphore_full",
            ErrorCode::PermitsMismatch => "permits_mismatch",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UriTooLong => "uri_too_long",
            ErrorCode::HeadersTooLarge => "headers_too_large",
            ErrorCode::InvalidKey => "invalid_key",
            ErrorCode::InvalidPolicy => "invalid_policy",
            ErrorCode::InvalidConfig => "invalid_config",
            ErrorCode::TooManyWaiters => "too_many_waiters",
            ErrorCode::TooManyStreams => "too_many_streams",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::SessionNotFound => "session_not_found",
            ErrorCode::Deadlock => "deadlock",
            ErrorCode::PolicyError => "policy_error",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_their_names() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn an_unknown_code_is_read_not_refused() {
        assert_eq!(
            serde_json::from_str::<ErrorCode>(r#""from_a_newer_broker""#).unwrap(),
            ErrorCode::Unknown
        );
        let body: ErrorBody = serde_json::from_str(
            r#"{"error": {"code": "from_a_newer_broker", "message": "over quota", "retry_after_ms": 5}}"#,
        )
        .unwrap();
        assert_eq!(body.error.code, ErrorCode::Unknown);
        assert_eq!(body.error.message, "over quota");
        assert_eq!(body.error.retry_after_ms, Some(5));
        // Not a code to send: serializing it fails.
        assert!(serde_json::to_string(&ErrorCode::Unknown).is_err());
        assert!(!ErrorCode::ALL.contains(&ErrorCode::Unknown));
    }

    #[test]
    fn the_envelope_matches_the_wire_format() {
        let body = ErrorBody {
            error: ErrorDetail {
                code: ErrorCode::LockHeld,
                message: "held".into(),
                retry_after_ms: Some(120),
                cycle: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"error":{"code":"lock_held","message":"held","retry_after_ms":120}}"#
        );
        let plain = ErrorBody::new(ErrorCode::NotFound, "no such path");
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"error":{"code":"not_found","message":"no such path"}}"#
        );
    }
}
