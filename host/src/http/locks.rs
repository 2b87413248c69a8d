//! `/v1/locks/{key}`: exclusive, re-entrant locks; beyond what every kind
//! serves, `validate` (is a token the live grant?).

use bytes::Bytes;
use lockbroker_api::{
    Lease, Lock, LockStatus, Page, ReleaseRequest, ReleaseResponse, ValidateRequest, Validity,
};

use super::{
    ok,
    request::parse_json,
    resource::{page, rfc3339, Resource, Verb},
    responses::KeyedErrors,
    ApiError, Response,
};
use crate::{
    engine::{Ask, Engine, Grant, LockRef, LockState, Span},
    store::Kind,
};

/// A lock's own action: validating a token.
pub struct Validate(ValidateRequest);

impl Resource for Lock {
    const KIND: Kind = Kind::Lock;
    const EXTRAS: &'static [(Verb, &'static str)] = &[(Verb::Post, "validate")];
    type Extra = Validate;

    async fn acquire(
        engine: &Engine,
        lock: &LockRef,
        _: lockbroker_api::AcquireRequest,
        ask: Ask,
    ) -> Result<Lease, ApiError> {
        let grant = engine.acquire(lock, &ask).await?;
        Ok(lease(lock, grant))
    }

    async fn renew(
        engine: &Engine,
        lock: &LockRef,
        request: lockbroker_api::RenewRequest,
        ask: Ask,
    ) -> Result<Lease, ApiError> {
        let grant = engine
            .renew(lock, &ask.owner, request.token, ask.ttl_ms)
            .await?;
        Ok(lease(lock, grant))
    }

    async fn release(
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

    async fn status(engine: &Engine, lock: &LockRef) -> Result<LockStatus, ApiError> {
        let state = engine.inspect(lock).await?;
        Ok(status(lock.key.clone(), lock.storage_key.clone(), state))
    }

    async fn list(engine: &Engine, tenant: &str, span: Span) -> Result<Page<LockStatus>, ApiError> {
        let listing = engine.list_locks(tenant, Kind::Lock, span).await?;
        Ok(page(listing, |key, state| status(key.clone(), key, state)))
    }

    fn parse_extra(_: &'static str, body: &Bytes, _: Option<&str>) -> Result<Validate, ApiError> {
        Ok(Validate(parse_json(body)?))
    }

    async fn extra(
        engine: &Engine,
        lock: LockRef,
        request: Validate,
    ) -> Result<Response, ApiError> {
        Ok(ok(&validate(engine, &lock, request.0).await?))
    }
}

/// A lock's state as the API answers it.
fn status(key: String, storage_key: String, state: LockState) -> LockStatus {
    LockStatus {
        key,
        storage_key,
        held: state.held,
        owner: state.owner,
        token: state.token,
        hold_count: state.hold_count,
        acquired_at: state.acquired_at.map(rfc3339),
        expires_at: state.expires_at.map(rfc3339),
        waiters: state.waiters,
        session: state.session,
    }
}

/// A lock grant as the API answers it.
fn lease(lock: &LockRef, grant: Grant) -> Lease {
    Lease {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        owner: grant.owner,
        token: grant.token,
        hold_count: grant.hold_count,
        ttl_ms: grant.ttl_ms,
        expires_at: rfc3339(grant.expires_at),
    }
}

/// Validate a fencing token
///
/// Whether `token` is the lock's live grant now (its lease unexpired by the
/// database clock): a sequencer check before a protected write, as in
/// Chubby. The answer can be stale by the time it arrives; a store that
/// must refuse a stale holder for sure compares tokens itself, or, in the
/// same MySQL server, calls `lockbroker_token_valid(tenant, storage_key,
/// token)` inside its write's transaction (see the docs).
#[utoipa::path(
    post,
    path = "/v1/locks/{key}/validate",
    operation_id = "validateLock",
    tag = "locks",
    params(super::openapi::KeyPath),
    request_body = ValidateRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "`valid`, and the live token (null when not held).",
            body = Validity),
        KeyedErrors,
    )
)]
async fn validate(
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
