//! `/v1/semaphores/{key}`: acquire, release, renew, status.

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    ErrorBody, ReleaseResponse, SemaphoreAcquireRequest, SemaphoreHolder, SemaphoreLease,
    SemaphoreReleaseRequest, SemaphoreRenewRequest, SemaphoreStatus, MAX_PERMITS,
};

use super::{
    lease::{check_holder, rfc3339, semaphore_lease, Terms},
    ok,
    openapi::{
        BadRequest, InvalidKey, KeyPath, MethodNotAllowed, PolicyError, TooLarge, TooManyWaiters,
        Unauthenticated, Unavailable,
    },
    request::{check_range, parse_json},
    router::{route_action, Command},
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{Engine, LockRef},
    store::Kind,
    tenant::Tenant,
};

/// One semaphore request, parsed and checked.
#[derive(Debug)]
pub enum SemaphoreCommand {
    Acquire { terms: Terms, permits: u32 },
    Release(SemaphoreReleaseRequest),
    Renew { terms: Terms, slot: u32, token: u64 },
    Status,
}

impl Command for SemaphoreCommand {
    const KIND: Kind = Kind::Semaphore;

    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError> {
        route_action(method, tail, &["acquire", "release", "renew"], &[])
    }

    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<Self, ApiError> {
        Ok(match action {
            "acquire" => {
                let request: SemaphoreAcquireRequest = parse_json(body)?;
                let terms = Terms::check(&request, tenant)?;
                let permits =
                    check_range("permits", request.permits.into(), 1, MAX_PERMITS.into())?;
                SemaphoreCommand::Acquire {
                    terms,
                    permits: u32::try_from(permits).expect("at most MAX_PERMITS"),
                }
            }
            "release" => {
                let request: SemaphoreReleaseRequest = parse_json(body)?;
                check_holder("owner", &request.owner)?;
                SemaphoreCommand::Release(request)
            }
            "renew" => {
                let request: SemaphoreRenewRequest = parse_json(body)?;
                SemaphoreCommand::Renew {
                    terms: Terms::check(&request, tenant)?,
                    slot: request.slot,
                    token: request.token,
                }
            }
            _ => SemaphoreCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let (engine, lock) = (app.engine(&lock.tenant), &lock);
        Ok(match self {
            SemaphoreCommand::Acquire { terms, permits } => {
                ok(&acquire(engine, lock, terms, permits).await?)
            }
            SemaphoreCommand::Release(request) => ok(&release(engine, lock, request).await?),
            SemaphoreCommand::Renew { terms, slot, token } => {
                ok(&renew(engine, lock, terms, slot, token).await?)
            }
            SemaphoreCommand::Status => ok(&status(engine, lock).await?),
        })
    }
}

/// Acquire a semaphore slot
///
/// Claims a free slot (0 to `permits`-1) of a semaphore that admits
/// `permits` holders at once. The first acquire fixes the size; later ones
/// must send the same `permits`. With `wait_ms` > 0 the request waits for a
/// slot in the queue the tenant's fairness policy orders.
#[utoipa::path(
    post,
    path = "/v1/semaphores/{key}/acquire",
    operation_id = "acquireSemaphore",
    tag = "semaphores",
    params(KeyPath),
    request_body = SemaphoreAcquireRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "A slot granted.", body = SemaphoreLease),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, headers(("Retry-After" = u64, description = "With `semaphore_full`: seconds before \
trying again, `retry_after_ms` rounded up, at least 1.")),
            description = "`semaphore_full`: every slot is taken and `wait_ms` ran \
out (`retry_after_ms` and `Retry-After` from the tenant's backoff policy); or \
`permits_mismatch`: the semaphore exists with another size.",
            body = ErrorBody,
            examples(
                ("semaphore_full" = (value = json!({"error": {"code": "semaphore_full",
                    "message": "every permit of the semaphore is taken", "retry_after_ms": 120}}))),
                ("permits_mismatch" = (value = json!({"error": {"code": "permits_mismatch",
                    "message": "the semaphore exists with 5 permits"}}))),
            )),
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
    permits: u32,
) -> Result<SemaphoreLease, ApiError> {
    let grant = engine
        .acquire_permit(
            lock,
            &terms.holder,
            permits,
            terms.ttl_ms,
            terms.wait_ms,
            terms.priority,
        )
        .await?;
    Ok(semaphore_lease(lock, grant))
}

/// Release a semaphore slot
///
/// Frees the slot (handed to the next waiter if any). `hold_count` is
/// always 0: slots are not re-entrant.
#[utoipa::path(
    post,
    path = "/v1/semaphores/{key}/release",
    operation_id = "releaseSemaphore",
    tag = "semaphores",
    params(KeyPath),
    request_body = SemaphoreReleaseRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The slot is free.", body = ReleaseResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: that owner, slot and token do not hold a \
live lease. Nothing changes.",
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
    request: SemaphoreReleaseRequest,
) -> Result<ReleaseResponse, ApiError> {
    engine
        .release_slot(lock, &request.owner, request.slot, request.token)
        .await?;
    Ok(ReleaseResponse {
        released: true,
        hold_count: 0,
    })
}

/// Renew a semaphore slot
///
/// Extends the slot's lease to `ttl_ms` from now (database clock); the
/// token stays.
#[utoipa::path(
    post,
    path = "/v1/semaphores/{key}/renew",
    operation_id = "renewSemaphore",
    tag = "semaphores",
    params(KeyPath),
    request_body = SemaphoreRenewRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Renewed: the new `expires_at`.", body = SemaphoreLease),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: the slot's lease expired or is not this \
owner's and token's.",
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
    slot: u32,
    token: u64,
) -> Result<SemaphoreLease, ApiError> {
    let grant = engine
        .renew_slot(lock, &terms.holder, slot, token, terms.ttl_ms)
        .await?;
    Ok(semaphore_lease(lock, grant))
}

/// Show a semaphore
///
/// Its size, unexpired holders and waiters.
#[utoipa::path(
    get,
    path = "/v1/semaphores/{key}",
    operation_id = "getSemaphore",
    tag = "semaphores",
    params(KeyPath),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The semaphore now (`permits` null if it does not exist).",
            body = SemaphoreStatus),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn status(engine: &Engine, lock: &LockRef) -> Result<SemaphoreStatus, ApiError> {
    let state = engine.inspect_semaphore(lock).await?;
    Ok(SemaphoreStatus {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        permits: state.permits,
        holders: state
            .holders
            .into_iter()
            .map(|h| SemaphoreHolder {
                slot: h.slot,
                owner: h.owner,
                token: h.token,
                expires_at: rfc3339(h.expires_at),
            })
            .collect(),
        waiters: state.waiters,
    })
}
