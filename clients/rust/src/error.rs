//! What can go wrong, as one enum: the broker's own answers keep their
//! [`ErrorCode`] so callers match on codes, never on messages.

use std::{path::PathBuf, time::Duration};

use lockbroker_api::{CycleStep, ErrorBody, ErrorCode};

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
    /// When trying again makes sense: with `lock_held` and
    /// `semaphore_full`, the tenant's backoff policy's hint; with
    /// `rate_limited` and `quota_exceeded` (429), when the broker expects
    /// one more to fit; with `unavailable`, when the broker expects to be
    /// back. From the body's `retry_after_ms`, else the `Retry-After`
    /// header.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    /// The refusal in `body`; `header` is the answer's `Retry-After`, used
    /// when the body has no `retry_after_ms`.
    pub(crate) fn from_body(status: u16, body: ErrorBody, header: Option<Duration>) -> ApiError {
        ApiError {
            status,
            code: body.error.code,
            message: body.error.message,
            retry_after: body
                .error
                .retry_after_ms
                .map(Duration::from_millis)
                .or(header),
        }
    }

    /// The refusal in `body` as the client's error: [`Error::Deadlock`]
    /// with its cycle for `deadlock`, else [`Error::Api`].
    pub(crate) fn into_error(status: u16, mut body: ErrorBody, header: Option<Duration>) -> Error {
        let cycle = body.error.cycle.take();
        let refusal = ApiError::from_body(status, body, header);
        if refusal.code == ErrorCode::Deadlock {
            Error::Deadlock {
                cycle: cycle.unwrap_or_default(),
                refusal,
            }
        } else {
            Error::Api(refusal)
        }
    }

    /// True for the 429s that say "not now, later": `rate_limited` (the
    /// tenant's request rate) and `quota_exceeded` (its live leases).
    /// Nothing was done; the same request may be sent again after
    /// [`retry_after`](Self::retry_after).
    pub fn is_throttled(&self) -> bool {
        matches!(self.code, ErrorCode::RateLimited | ErrorCode::QuotaExceeded)
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
    /// (`lease_lost`), or the key was refused (any other 4xx but a 429,
    /// whose renewal is tried again after the broker's hint).
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
    /// The broker could not be reached (nothing was sent), or the
    /// connection of a request that may be sent again broke and the tries
    /// ran out.
    #[error("cannot reach the broker: {0}")]
    Connect(String),
    /// The connection broke after a request that must not be sent twice
    /// (an acquire, a release) may have reached the broker: it may or may
    /// not have taken effect. A guard's acquire that ends so gives back
    /// whatever its owner got (see [`LeaseBuilder`](crate::LeaseBuilder)).
    #[error("the connection broke after the request was sent; its outcome is unknown: {0}")]
    OutcomeUnknown(String),
    /// The TLS handshake failed: the broker's certificate is not trusted
    /// (or names another host), or the broker refused the client's
    /// certificate (or its absence). Not retried: it would fail again.
    #[error("TLS with the broker failed: {0}")]
    Tls(String),
    /// A TLS file given to the client (CA, client certificate, its key)
    /// cannot be read or used.
    #[error("TLS file {}: {reason}", path.display())]
    TlsFile {
        /// The file, as it was given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No answer within the call's deadline: its wait plus the client's
    /// slack, retries included. It may or may not have taken effect.
    #[error("the broker did not answer within {0:?}")]
    Timeout(Duration),
    /// A guard's lease is gone (it was lost before `release`).
    #[error("the lease was lost: {0}")]
    LeaseLost(LostReason),
    /// `409 deadlock`: a session's acquire that would wait was refused at
    /// once, because waiting would close a cycle of sessions waiting for
    /// each other. Nothing was granted or queued, and it is not retried
    /// (it would be refused again while the cycle stands): end one of the
    /// sessions, or take keys in one order. [`Error::code`] is
    /// [`ErrorCode::Deadlock`] and [`Error::api`] the refusal, as for any
    /// other.
    #[error("the broker refused a wait that would deadlock: {}", Cycle(cycle))]
    Deadlock {
        /// The cycle the wait would have closed, from the refused
        /// acquire's own session: each step a session (as an owner)
        /// waiting for a key the next step's session holds; the last
        /// step's key is held by the first step's session.
        cycle: Vec<CycleStep>,
        /// The refusal itself: status 409, code `deadlock`, the broker's
        /// message.
        refusal: ApiError,
    },
}

/// A deadlock's cycle for people: `session s1 (owner o1) waits for lock
/// k2 -> session s2 (...) waits for lock k1`.
struct Cycle<'a>(&'a [CycleStep]);

impl std::fmt::Display for Cycle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(no cycle given)");
        }
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" -> ")?;
            }
            write!(
                f,
                "session {} (owner {}) waits for {} {}",
                step.session, step.owner, step.kind, step.storage_key
            )?;
        }
        Ok(())
    }
}

impl Error {
    /// The broker's error code, when the broker answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api(api) | Error::Deadlock { refusal: api, .. } => Some(api.code),
            _ => None,
        }
    }

    /// The broker's refusal, when it refused.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(api) | Error::Deadlock { refusal: api, .. } => Some(api),
            _ => None,
        }
    }

    /// When the broker suggests trying again (see
    /// [`ApiError::retry_after`]): a 429's, a `lock_held`'s, a 503's.
    pub fn retry_after(&self) -> Option<Duration> {
        self.api()?.retry_after
    }

    /// The cycle of a [`Error::Deadlock`] refusal.
    pub fn deadlock_cycle(&self) -> Option<&[CycleStep]> {
        match self {
            Error::Deadlock { cycle, .. } => Some(cycle),
            _ => None,
        }
    }

    /// True for a 429 `rate_limited` or `quota_exceeded` (see
    /// [`ApiError::is_throttled`]): the call's deadline was too short for
    /// the wait the broker asked for.
    pub fn is_throttled(&self) -> bool {
        self.api().is_some_and(ApiError::is_throttled)
    }

    /// True when no answer came from the broker (unreachable, TLS refused,
    /// cut off, timed out). [`Error::OutcomeUnknown`] and
    /// [`Error::Timeout`]: the call may or may not have taken effect;
    /// [`Error::Tls`] and [`Error::Connect`]: it did not, or it was one
    /// that may be repeated (a read, a renewal).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Error::Connect(_) | Error::OutcomeUnknown(_) | Error::Tls(_) | Error::Timeout(_)
        )
    }
}

/// A client call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> ErrorBody {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_deadlock_refusal_carries_its_cycle() {
        let err = ApiError::into_error(
            409,
            body(
                r#"{"error": {"code": "deadlock", "message": "cycle", "cycle": [
                    {"session": "sb", "owner": "ob", "kind": "lock", "storage_key": "k1"},
                    {"session": "sa", "owner": "oa", "kind": "lock", "storage_key": "k2"}]}}"#,
            ),
            None,
        );
        let Error::Deadlock { cycle, refusal } = &err else {
            panic!("{err:?}");
        };
        assert_eq!((refusal.status, refusal.code), (409, ErrorCode::Deadlock));
        assert_eq!(cycle.len(), 2);
        assert_eq!(
            (cycle[0].session.as_str(), cycle[0].owner.as_str()),
            ("sb", "ob")
        );
        assert_eq!(
            (cycle[1].kind.as_str(), cycle[1].storage_key.as_str()),
            ("lock", "k2")
        );
        assert_eq!(err.code(), Some(ErrorCode::Deadlock));
        assert_eq!(err.deadlock_cycle().map(<[_]>::len), Some(2));
        assert!(!err.is_throttled() && !err.is_unreachable());
        assert!(
            err.to_string()
                .contains("session sb (owner ob) waits for lock k1 -> session sa"),
            "{err}"
        );
    }

    #[test]
    fn other_refusals_stay_api_errors() {
        let err = ApiError::into_error(
            409,
            body(r#"{"error": {"code": "lock_held", "message": "held"}}"#),
            None,
        );
        assert!(matches!(&err, Error::Api(api) if api.code == ErrorCode::LockHeld));
        assert_eq!(err.deadlock_cycle(), None);
    }
}
