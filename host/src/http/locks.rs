//! `/v1/locks/{key}`: acquire, release, renew, validate, status, history.

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    AcquireRequest, ErrorBody, Lease, LockEvent, LockEventKind, LockHistory, LockStatus,
    ReleaseRequest, ReleaseResponse, RenewRequest, ValidateRequest, Validity,
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT,
};

use super::{
    lease::{check_holder, lease, rfc3339, Terms},
    ok,
    openapi::{
        BadRequest, HistoryQuery, InvalidKey, KeyPath, MethodNotAllowed, PolicyError, TooLarge,
        TooManyWaiters, Unauthenticated, Unavailable,
    },
    request::parse_json,
    router::{route_action, Command},
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{Engine, LockRef},
    store::{history::EventKind, Kind},
    tenant::Tenant,
};

/// One lock request, parsed and checked.
#[derive(Debug)]
pub enum LockCommand {
    Acquire(Terms),
    Release(ReleaseRequest),
    Renew {
        terms: Terms,
        token: u64,
    },
    Validate(ValidateRequest),
    Status,
    /// The latest `limit` events.
    History {
        limit: u32,
    },
}

impl Command for LockCommand {
    const KIND: Kind = Kind::Lock;

    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError> {
        route_action(
            method,
            tail,
            &["acquire", "release", "renew", "validate"],
            &["history"],
        )
    }

    fn parse_with_query(
        action: &str,
        query: Option<&str>,
        body: &Bytes,
        tenant: &Tenant,
    ) -> Result<LockCommand, ApiError> {
        if action == "history" {
            return Ok(LockCommand::History {
                limit: history_limit(query)?,
            });
        }
        Self::parse(action, body, tenant)
    }

    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<LockCommand, ApiError> {
        Ok(match action {
            "acquire" => {
                LockCommand::Acquire(Terms::check(&parse_json::<AcquireRequest>(body)?, tenant)?)
            }
            "release" => {
                let request: ReleaseRequest = parse_json(body)?;
                check_holder("owner", &request.owner)?;
                LockCommand::Release(request)
            }
            "renew" => {
                let request: RenewRequest = parse_json(body)?;
                LockCommand::Renew {
                    terms: Terms::check(&request, tenant)?,
                    token: request.token,
                }
            }
            "validate" => LockCommand::Validate(parse_json(body)?),
            _ => LockCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let (engine, lock) = (app.engine(&lock.tenant), &lock);
        Ok(match self {
            LockCommand::Acquire(terms) => ok(&acquire(engine, lock, terms).await?),
            LockCommand::Release(request) => ok(&release(engine, lock, request).await?),
            LockCommand::Renew { terms, token } => ok(&renew(engine, lock, terms, token).await?),
            LockCommand::Validate(request) => ok(&validate(engine, lock, request).await?),
            LockCommand::Status => ok(&status(engine, lock).await?),
            LockCommand::History { limit } => ok(&history(engine, lock, limit).await?),
        })
    }
}

/// Acquire a lock
///
/// Grants the lock to `owner`, or re-enters it: an owner that already holds
/// the lock gets the same token, `hold_count` + 1 and a renewed lease. A new
/// grant gets a fencing token greater than every earlier one of the key.
/// With `wait_ms` > 0 the request waits in the queue the tenant's fairness
/// policy orders.
#[utoipa::path(
    post,
    path = "/v1/locks/{key}/acquire",
    operation_id = "acquireLock",
    tag = "locks",
    params(KeyPath),
    request_body = AcquireRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Granted or re-entered.", body = Lease),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, headers(("Retry-After" = u64, description = "Seconds before trying again: \
`retry_after_ms` rounded up, at least 1.")),
            description = "`lock_held`: another owner holds the lock and `wait_ms` \
ran out. `retry_after_ms` (and the `Retry-After` header) come from the tenant's backoff policy.",
            body = ErrorBody,
            example = json!({"error": {"code": "lock_held",
                "message": "the lock is held by another owner", "retry_after_ms": 120}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 429, response = TooManyWaiters),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn acquire(engine: &Engine, lock: &LockRef, terms: Terms) -> Result<Lease, ApiError> {
    let grant = engine
        .acquire(
            lock,
            &terms.holder,
            terms.ttl_ms,
            terms.wait_ms,
            terms.priority,
        )
        .await?;
    Ok(lease(lock, grant))
}

/// Release a lock
///
/// Drops one hold. The lock is free once `hold_count` reaches 0 (`released`
/// true), and is handed to the next waiter if any.
#[utoipa::path(
    post,
    path = "/v1/locks/{key}/release",
    operation_id = "releaseLock",
    tag = "locks",
    params(KeyPath),
    request_body = ReleaseRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "One hold dropped.", body = ReleaseResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: the token is not the current grant for that \
owner (expired and re-granted, released, or never held). Nothing changes.",
            body = ErrorBody,
            example = json!({"error": {"code": "lease_lost", "message": "this owner and token do \
not hold the current lease (expired, re-granted, released or never held)"}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn release(
    engine: &Engine,
    lock: &LockRef,
    request: ReleaseRequest,
) -> Result<ReleaseResponse, ApiError> {
    let released = engine.release(lock, &request.owner, request.token).await?;
    Ok(ReleaseResponse {
        released: released.released,
        hold_count: released.hold_count,
    })
}

/// Renew a lock
///
/// Extends the lease to `ttl_ms` from now (database clock). The token and
/// `hold_count` stay. Once the lease has expired the renewal is refused,
/// even if nobody took the lock since.
#[utoipa::path(
    post,
    path = "/v1/locks/{key}/renew",
    operation_id = "renewLock",
    tag = "locks",
    params(KeyPath),
    request_body = RenewRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Renewed: the new `expires_at`.", body = Lease),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: the lease expired (by the database clock) \
or the token is not the owner's current grant.",
            body = ErrorBody,
            example = json!({"error": {"code": "lease_lost", "message": "this owner and token do \
not hold the current lease (expired, re-granted, released or never held)"}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn renew(
    engine: &Engine,
    lock: &LockRef,
    terms: Terms,
    token: u64,
) -> Result<Lease, ApiError> {
    let grant = engine
        .renew(lock, &terms.holder, token, terms.ttl_ms)
        .await?;
    Ok(lease(lock, grant))
}

/// Show a lock
///
/// The lock's holder, as judged by the database clock, and its waiters.
#[utoipa::path(
    get,
    path = "/v1/locks/{key}",
    operation_id = "getLock",
    tag = "locks",
    params(KeyPath),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The lock now.", body = LockStatus),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn status(engine: &Engine, lock: &LockRef) -> Result<LockStatus, ApiError> {
    let state = engine.inspect(lock).await?;
    Ok(LockStatus {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        held: state.held,
        owner: state.owner,
        token: state.token,
        expires_at: state.expires_at.map(rfc3339),
        waiters: state.waiters,
    })
}

/// Validate a fencing token
///
/// Whether `token` is the lock's live grant now (its lease unexpired by the
/// database clock): a sequencer check before a protected write, as in
/// Chubby. The answer can be stale by the time it arrives; a store that
/// must refuse a stale holder for sure compares tokens itself, or, in the
/// same MySQL server, calls `lockbroker_token_valid(tenant, storage_key,
/// token)` inside its write's transaction (see the README).
#[utoipa::path(
    post,
    path = "/v1/locks/{key}/validate",
    operation_id = "validateLock",
    tag = "locks",
    params(KeyPath),
    request_body = ValidateRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "`valid`, and the live token (null when not held).",
            body = Validity),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn validate(
    engine: &Engine,
    lock: &LockRef,
    request: ValidateRequest,
) -> Result<Validity, ApiError> {
    let validity = engine.validate(lock, request.token).await?;
    Ok(Validity {
        valid: validity.valid,
        token: validity.current,
    })
}

/// The `limit` of a history query: 1 to [`HISTORY_MAX_LIMIT`], default
/// [`HISTORY_DEFAULT_LIMIT`]; other parameters are refused (400).
fn history_limit(query: Option<&str>) -> Result<u32, ApiError> {
    let mut limit = HISTORY_DEFAULT_LIMIT;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "limit" {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter {name:?} (only limit)"
            )));
        }
        limit = value
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=HISTORY_MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be a whole number from 1 to {HISTORY_MAX_LIMIT}"
                ))
            })?;
    }
    Ok(limit)
}

/// Show a lock's history
///
/// The lock's latest events, newest first: grants, releases, expiries,
/// handoffs to waiters and operators' force-releases, each written in the
/// same transaction as the change it records (a change that rolled back
/// left none). Re-entries, renewals and releases of one of several holds
/// are not events; an expiry is recorded by the next change of the key,
/// with `at` the moment the lease ran out. Kept for the broker's
/// `history_retention_hours` (168 unless configured).
#[utoipa::path(
    get,
    path = "/v1/locks/{key}/history",
    operation_id = "getLockHistory",
    tag = "locks",
    params(KeyPath, HistoryQuery),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The latest events, newest first.", body = LockHistory),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn history(engine: &Engine, lock: &LockRef, limit: u32) -> Result<LockHistory, ApiError> {
    let events = engine.history(lock, limit).await?;
    Ok(LockHistory {
        events: events
            .into_iter()
            .map(|e| LockEvent {
                event: event_kind(e.event),
                owner: e.owner,
                token: e.token,
                at: e
                    .at
                    .and_utc()
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            })
            .collect(),
    })
}

/// The wire name of a stored event kind.
fn event_kind(kind: EventKind) -> LockEventKind {
    match kind {
        EventKind::Granted => LockEventKind::Granted,
        EventKind::Released => LockEventKind::Released,
        EventKind::Expired => LockEventKind::Expired,
        EventKind::HandedOff => LockEventKind::HandedOff,
        EventKind::ForceReleased => LockEventKind::ForceReleased,
    }
}
