//! `/v1/rwlocks/{key}`: acquire (read or write), release, renew, status.
//! Rwlock keys go through the tenant's naming policy like lock keys, and
//! live in their own namespace (a rwlock and a lock of one name are
//! unrelated).

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    ErrorBody, ReleaseRequest, ReleaseResponse, RenewRequest, RwAcquireRequest, RwHolder, RwLease,
    RwLockStatus, RwMode,
};

use super::{
    lease::{check_holder, rfc3339, LeaseRequest, Terms},
    ok,
    openapi::{
        BadRequest, InvalidKey, KeyPath, MethodNotAllowed, PolicyError, TooLarge, TooManyWaiters,
        Unauthenticated, Unavailable,
    },
    request::parse_json,
    router::{route_action, Command},
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{self, Engine, LockRef, RwGrant},
    store::Kind,
    tenant::Tenant,
};

/// One rwlock request, parsed and checked.
#[derive(Debug)]
pub enum RwLockCommand {
    Acquire { terms: Terms, mode: RwMode },
    Release(ReleaseRequest),
    Renew { terms: Terms, token: u64 },
    Status,
}

impl LeaseRequest for RwAcquireRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("owner", &self.owner)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
    fn wait_ms(&self) -> Option<u64> {
        self.wait_ms
    }
    fn priority(&self) -> Option<i32> {
        self.priority
    }
}

impl Command for RwLockCommand {
    const KIND: Kind = Kind::RwLock;

    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError> {
        route_action(method, tail, &["acquire", "release", "renew"], &[])
    }

    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<Self, ApiError> {
        Ok(match action {
            "acquire" => {
                let request: RwAcquireRequest = parse_json(body)?;
                RwLockCommand::Acquire {
                    terms: Terms::check(&request, tenant)?,
                    mode: request.mode,
                }
            }
            "release" => {
                let request: ReleaseRequest = parse_json(body)?;
                check_holder("owner", &request.owner)?;
                RwLockCommand::Release(request)
            }
            "renew" => {
                let request: RenewRequest = parse_json(body)?;
                RwLockCommand::Renew {
                    terms: Terms::check(&request, tenant)?,
                    token: request.token,
                }
            }
            _ => RwLockCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let (engine, lock) = (app.engine(&lock.tenant), &lock);
        Ok(match self {
            RwLockCommand::Acquire { terms, mode } => {
                ok(&acquire(engine, lock, terms, mode).await?)
            }
            RwLockCommand::Release(request) => ok(&release(engine, lock, request).await?),
            RwLockCommand::Renew { terms, token } => ok(&renew(engine, lock, terms, token).await?),
            RwLockCommand::Status => ok(&status(engine, lock).await?),
        })
    }
}

fn engine_mode(mode: RwMode) -> engine::RwMode {
    match mode {
        RwMode::Read => engine::RwMode::Read,
        RwMode::Write => engine::RwMode::Write,
    }
}

/// A rwlock grant as the API answers it.
fn rw_lease(lock: &LockRef, grant: RwGrant) -> RwLease {
    RwLease {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        owner: grant.owner,
        mode: match grant.mode {
            engine::RwMode::Read => RwMode::Read,
            engine::RwMode::Write => RwMode::Write,
        },
        token: grant.token,
        ttl_ms: grant.ttl_ms,
        expires_at: rfc3339(grant.expires_at),
        readers: grant.readers,
    }
}

/// Acquire a reader-writer lock
///
/// `read`: shared with other readers, granted while no writer holds the
/// key and nobody is queued. `write`: alone, granted while nobody holds it
/// and nobody is queued. So a queued writer blocks new readers (writers
/// are not starved). With `wait_ms` > 0 the request waits in the queue the
/// tenant's fairness policy orders; when the key frees up, the next waiter
/// is granted, and with a reader every next reader up to the next writer.
/// The same owner asking again for the mode it holds gets its lease back
/// renewed, with the same token; there are no upgrades or downgrades.
#[utoipa::path(
    post,
    path = "/v1/rwlocks/{key}/acquire",
    operation_id = "acquireRwLock",
    tag = "rwlocks",
    params(KeyPath),
    request_body = RwAcquireRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Granted (or the owner's live lease of that mode, renewed).",
            body = RwLease),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, headers(("Retry-After" = u64, description = "Seconds before trying \
again, `retry_after_ms` rounded up, at least 1.")),
            description = "`lock_held`: the mode asked for is not available and `wait_ms` ran \
out (`retry_after_ms` and `Retry-After` from the tenant's backoff policy).",
            body = ErrorBody,
            example = json!({"error": {"code": "lock_held", "message": "the lock is held by \
another owner", "retry_after_ms": 120}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 429, response = TooManyWaiters),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn acquire(
    engine: &Engine,
    lock: &LockRef,
    terms: Terms,
    mode: RwMode,
) -> Result<RwLease, ApiError> {
    let grant = engine
        .acquire_rw(
            lock,
            &terms.holder,
            engine_mode(mode),
            terms.ttl_ms,
            terms.wait_ms,
            terms.priority,
        )
        .await?;
    Ok(rw_lease(lock, grant))
}

/// Release a reader-writer lock
///
/// Ends the lease of that owner and token (read or write); the key is
/// handed to the waiters it frees. `hold_count` is always 0.
#[utoipa::path(
    post,
    path = "/v1/rwlocks/{key}/release",
    operation_id = "releaseRwLock",
    tag = "rwlocks",
    params(KeyPath),
    request_body = ReleaseRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The lease has ended.", body = ReleaseResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: that owner and token do not hold a live \
lease of this rwlock. Nothing changes.",
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
    engine
        .release_rw(lock, &request.owner, request.token)
        .await?;
    Ok(ReleaseResponse {
        released: true,
        hold_count: 0,
    })
}

/// Renew a reader-writer lock
///
/// Extends the lease of that owner and token (read or write) to `ttl_ms`
/// from now (database clock); the token stays.
#[utoipa::path(
    post,
    path = "/v1/rwlocks/{key}/renew",
    operation_id = "renewRwLock",
    tag = "rwlocks",
    params(KeyPath),
    request_body = RenewRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Renewed: the new `expires_at`.", body = RwLease),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: the lease expired (by the database clock) \
or is not this owner's and token's.",
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
) -> Result<RwLease, ApiError> {
    let grant = engine
        .renew_rw(lock, &terms.holder, token, terms.ttl_ms)
        .await?;
    Ok(rw_lease(lock, grant))
}

/// Show a reader-writer lock
///
/// Its unexpired writer or readers, and how many wait.
#[utoipa::path(
    get,
    path = "/v1/rwlocks/{key}",
    operation_id = "getRwLock",
    tag = "rwlocks",
    params(KeyPath),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The rwlock now.", body = RwLockStatus),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn status(engine: &Engine, lock: &LockRef) -> Result<RwLockStatus, ApiError> {
    let state = engine.inspect_rw(lock).await?;
    let holder = |h: engine::RwHolder| RwHolder {
        owner: h.owner,
        token: h.token,
        expires_at: rfc3339(h.expires_at),
    };
    Ok(RwLockStatus {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        writer: state.writer.map(holder),
        readers: state.readers.into_iter().map(holder).collect(),
        waiters: state.waiters,
    })
}
