//! The one place where failures become HTTP statuses and JSON errors:
//! `{"error": {"code": "...", "message": "..."}}` ([`ErrorBody`]; each
//! [`ErrorCode`] carries its status).

use hyper::{header, StatusCode};
use lockbroker_api::{ErrorBody, ErrorCode, ErrorDetail};

use super::{json_response, Response};
use crate::{
    engine::{DbFailure, EngineError},
    policy::{
        reload::{PromoteError, RollbackError},
        wasm::LoadError,
        NamingError, PolicyFault,
    },
};

/// The retry hint while a tenant's first policy loads: a large component
/// compiles in seconds.
const LOADING_RETRY_AFTER_MS: u64 = 1000;

/// Declares `ApiError::name(message)`, an error of `code`, for each
/// `name: code`.
macro_rules! constructors {
    ($($name:ident: $code:ident,)*) => {$(
        #[doc = concat!("A `", stringify!($name), "` error with `message`.")]
        pub fn $name(message: impl Into<String>) -> ApiError {
            ApiError::new(ErrorCode::$code, message)
        }
    )*};
}

/// An error answer. Build one with the constructors; map library errors
/// with `From`.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub retry_after_ms: Option<u64>,
    /// With `deadlock`: the cycle.
    pub cycle: Option<Vec<lockbroker_api::CycleStep>>,
    /// For 405: the methods the path takes (the `Allow` header).
    pub allow: Option<&'static str>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after_ms: None,
            cycle: None,
            allow: None,
        }
    }

    constructors! {
        bad_request: BadRequest,
        unauthenticated: Unauthenticated,
        forbidden: Forbidden,
        not_found: NotFound,
        too_large: TooLarge,
        invalid_key: InvalidKey,
        unavailable: Unavailable,
        uri_too_long: UriTooLong,
        headers_too_large: HeadersTooLarge,
    }

    /// 429 `rate_limited`: one more request fits in `wait`.
    pub fn rate_limited(wait: std::time::Duration) -> ApiError {
        ApiError {
            retry_after_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1)),
            ..ApiError::new(
                ErrorCode::RateLimited,
                "the tenant sent more than max_requests_per_s to this broker",
            )
        }
    }

    /// 429 `quota_exceeded`: the grant would pass `max_held`.
    pub fn quota_exceeded() -> ApiError {
        ApiError {
            retry_after_ms: Some(crate::quota::OVER_QUOTA_RETRY_AFTER.as_millis() as u64),
            ..ApiError::new(
                ErrorCode::QuotaExceeded,
                "the grant would take the tenant past max_held live leases; nothing was granted",
            )
        }
    }

    /// 405 for a path that takes only `allow` (`"GET"`, `"POST"`, ...).
    pub fn method_not_allowed(allow: &'static str) -> ApiError {
        ApiError {
            allow: Some(allow),
            ..ApiError::new(
                ErrorCode::MethodNotAllowed,
                "this method is not allowed on this path",
            )
        }
    }

    /// The error for a request that hyper refused before it reached the
    /// router (it answers these itself; `parse_errors` swaps in this body).
    pub fn from_parse_status(status: StatusCode) -> Option<ApiError> {
        match status {
            StatusCode::BAD_REQUEST => Some(ApiError::bad_request(
                "malformed HTTP request (request line or headers)",
            )),
            StatusCode::URI_TOO_LONG => Some(ApiError::uri_too_long(
                "the request target is longer than the server accepts",
            )),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => Some(ApiError::headers_too_large(
                "the request head is larger than the server accepts, or has too many headers",
            )),
            _ => None,
        }
    }

    /// The JSON document of this error.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message.clone(),
                retry_after_ms: self.retry_after_ms,
                cycle: self.cycle.clone(),
            },
        }
    }

    /// The HTTP status of this error, from its code.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).expect("every code has a valid status")
    }

    /// The response for this error.
    pub fn into_response(self) -> Response {
        let mut response = json_response(self.status(), &self.body());
        if let Some(ms) = self.retry_after_ms {
            let secs = ms.div_ceil(1000).max(1);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                secs.to_string().parse().expect("digits"),
            );
        }
        if let Some(allow) = self.allow {
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static(allow));
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> ApiError {
        match err {
            EngineError::LockHeld { retry_after_ms } => ApiError {
                retry_after_ms: Some(retry_after_ms),
                ..ApiError::new(
                    ErrorCode::LockHeld,
                    "the lock is held by another owner",
                )
            },
            EngineError::SemaphoreFull { retry_after_ms } => ApiError {
                retry_after_ms: Some(retry_after_ms),
                ..ApiError::new(
                    ErrorCode::SemaphoreFull,
                    "every permit of the semaphore is taken",
                )
            },
            EngineError::PermitsMismatch { permits } => ApiError::new(
                ErrorCode::PermitsMismatch,
                format!("the semaphore exists with {permits} permits"),
            ),
            EngineError::LeaseLost => ApiError::new(
                ErrorCode::LeaseLost,
                "this owner and token do not hold the current lease (expired, re-granted, released or never held)",
            ),
            EngineError::TooManyStreams => ApiError::new(
                ErrorCode::TooManyStreams,
                "the tenant has max_streams event streams open on this broker already",
            ),
            EngineError::TooManyWaiters => ApiError::new(
                ErrorCode::TooManyWaiters,
                "the tenant has max_waiters requests waiting already",
            ),
            EngineError::NotHeld => ApiError::not_found("nobody holds the lock"),
            EngineError::DuplicateKey { key, storage_key } => ApiError::bad_request(format!(
                "keys must name distinct locks: {key:?} names {storage_key:?} like another key"
            )),
            EngineError::TooManySessions => ApiError {
                retry_after_ms: Some(crate::quota::OVER_QUOTA_RETRY_AFTER.as_millis() as u64),
                ..ApiError::new(
                    ErrorCode::QuotaExceeded,
                    "the tenant has max_sessions live sessions already; nothing was opened",
                )
            },
            EngineError::Deadlock { cycle } => ApiError {
                cycle: Some(cycle_steps(cycle)),
                ..ApiError::new(
                    ErrorCode::Deadlock,
                    "waiting would close a cycle of sessions waiting for each other (a deadlock): \
                     nothing was granted or queued",
                )
            },
            EngineError::SessionNotFound => ApiError::new(
                ErrorCode::SessionNotFound,
                "no such session: it ended (closed or expired) or never existed; its leases are gone",
            ),
            EngineError::InSession => ApiError::bad_request(
                "the lease is held in a session and lives as long as the session: keep the session alive (POST /v1/sessions/{id}/keepalive) instead of renewing",
            ),
            EngineError::ShuttingDown => ApiError::unavailable("the broker is shutting down; nothing was granted"),
            EngineError::Unavailable(err) => {
                tracing::warn!(error = %err, "database unavailable");
                let message = match err {
                    DbFailure::Unknown => "the database stopped answering while a change was being committed; if it took effect it is undone or handed on",
                    _ => "the database is unavailable; nothing was granted",
                };
                ApiError::unavailable(message)
            }
        }
    }
}

impl From<NamingError> for ApiError {
    fn from(err: NamingError) -> ApiError {
        match err {
            NamingError::Rejected(reason) => ApiError::invalid_key(reason),
            NamingError::Fault(fault) => fault.into(),
            NamingError::Loading => ApiError {
                retry_after_ms: Some(LOADING_RETRY_AFTER_MS),
                ..ApiError::unavailable(
                    "the tenant's policy is still loading (the broker has just started); nothing was granted",
                )
            },
        }
    }
}

impl From<PolicyFault> for ApiError {
    fn from(fault: PolicyFault) -> ApiError {
        ApiError::new(
            ErrorCode::PolicyError,
            format!("the tenant's naming policy failed: {fault}"),
        )
    }
}

/// A component refused (an upload, a shadow, or a version that had to be
/// compiled again): 422 `invalid_policy` with the reason.
impl From<LoadError> for ApiError {
    fn from(err: LoadError) -> ApiError {
        ApiError::new(ErrorCode::InvalidPolicy, err.0)
    }
}

impl From<RollbackError> for ApiError {
    fn from(err: RollbackError) -> ApiError {
        match err {
            RollbackError::NotFound(why) => ApiError::not_found(why),
            RollbackError::Load(err) => err.into(),
        }
    }
}

impl From<PromoteError> for ApiError {
    fn from(err: PromoteError) -> ApiError {
        match err {
            PromoteError::NoShadow(_) => ApiError::not_found(err.to_string()),
            PromoteError::Load(err) => err.into(),
        }
    }
}

/// A deadlock's cycle as the API shows it (the error, the `deadlock`
/// event, `GET /v1/waits-for`'s `refused`).
pub fn cycle_steps(cycle: Vec<crate::engine::CycleLink>) -> Vec<lockbroker_api::CycleStep> {
    cycle
        .into_iter()
        .map(|link| lockbroker_api::CycleStep {
            session: link.session,
            owner: link.owner,
            kind: link.kind.name().to_owned(),
            storage_key: link.storage_key,
        })
        .collect()
}
