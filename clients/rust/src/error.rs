//! What can go wrong, as one enum: the broker's own answers keep their
//! [`ErrorCode`] so callers match on codes, never on messages.

use std::time::Duration;

use lockbroker_api::{ErrorBody, ErrorCode};

/// A refusal by the broker: its error envelope, with the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status (409, 503, ...).
    pub status: u16,
    /// The stable reason; [`ErrorCode::Unknown`] for a code this version of
    /// the client does not know (added by a newer broker): the status and
    /// the message still say what happened.
    pub code: ErrorCode,
    /// The broker's words for people.
    pub message: String,
    /// With `lock_held` and `semaphore_full`: when the tenant's backoff
    /// policy suggests trying again.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn from_body(status: u16, body: ErrorBody) -> ApiError {
        ApiError {
            status,
            code: body.error.code,
            message: body.error.message,
            retry_after: body.error.retry_after_ms.map(Duration::from_millis),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.as_str(),
            self.status,
            self.message
        )
    }
}

/// Why a lease held by a guard ended without being released.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// The broker refused the renewal: the lease is gone or no longer ours
    /// (`lease_lost`), or the key was refused (any other 4xx).
    #[error("the broker refused the renewal: {0}")]
    Refused(ApiError),
    /// No renewal succeeded before the lease would have run out (by this
    /// process's clock, counted from when the last successful request was
    /// sent): the broker was unreachable or unavailable for too long.
    #[error("no renewal succeeded before the lease ran out (last error: {last_error})")]
    Expired {
        /// The last renewal failure seen, for the log.
        last_error: String,
    },
}

/// Every failure of a client call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The broker answered with its JSON error envelope.
    #[error("the broker refused: {0}")]
    Api(ApiError),
    /// The broker answered something that is not the API's JSON (a proxy's
    /// error page, a truncated body).
    #[error("unexpected answer (HTTP {status}): {detail}")]
    Unexpected { status: u16, detail: String },
    /// The base URL is not `http://` or `https://host[:port]`.
    #[error("invalid broker URL {0:?}")]
    Url(String),
    /// The broker could not be reached, or the connection broke.
    #[error("cannot reach the broker: {0}")]
    Connect(String),
    /// No answer within the request's wait plus the client's slack.
    #[error("the broker did not answer within {0:?}")]
    Timeout(Duration),
    /// A guard's lease is gone (it was lost before `release`).
    #[error("the lease was lost: {0}")]
    LeaseLost(LostReason),
}

impl Error {
    /// The broker's error code, when the broker answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api(api) => Some(api.code),
            _ => None,
        }
    }

    /// The broker's refusal, when it refused.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(api) => Some(api),
            _ => None,
        }
    }

    /// True when no answer came from the broker (unreachable, cut off,
    /// timed out): the call may or may not have taken effect.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Connect(_) | Error::Timeout(_))
    }
}

/// A client call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
