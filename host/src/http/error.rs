//! The one place where failures become HTTP statuses and JSON errors:
//! `{"error": {"code": "...", "message": "..."}}`.

use hyper::{header, StatusCode};
use serde_json::json;

use super::{json_response, Response};
use crate::{
    engine::{DbFailure, EngineError},
    policy::{NamingError, PolicyFault},
};

/// An error answer. Build one with the constructors; map library errors
/// with `From`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retry_after_ms: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this method is not allowed on this path",
        )
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    pub fn invalid_key(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_key", message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// The response for this error.
    pub fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(ms) = self.retry_after_ms {
            error["retry_after_ms"] = ms.into();
        }
        let mut response = json_response(self.status, &json!({ "error": error }));
        if let Some(ms) = self.retry_after_ms {
            let secs = ms.div_ceil(1000).max(1);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                secs.to_string().parse().expect("digits"),
            );
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
                    StatusCode::CONFLICT,
                    "lock_held",
                    "the lock is held by another owner",
                )
            },
            EngineError::SemaphoreFull { retry_after_ms } => ApiError {
                retry_after_ms: Some(retry_after_ms),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    "semaphore_full",
                    "every permit of the semaphore is taken",
                )
            },
            EngineError::PermitsMismatch { permits } => ApiError::new(
                StatusCode::CONFLICT,
                "permits_mismatch",
                format!("the semaphore exists with {permits} permits"),
            ),
            EngineError::LeaseLost => ApiError::new(
                StatusCode::CONFLICT,
                "lease_lost",
                "this owner and token do not hold the current lease (expired, re-granted, released or never held)",
            ),
            EngineError::TooManyWaiters => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_waiters",
                "the tenant has max_waiters requests waiting already",
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
        }
    }
}

impl From<PolicyFault> for ApiError {
    fn from(fault: PolicyFault) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "policy_error",
            format!("the tenant's naming policy failed: {fault}"),
        )
    }
}
