//! `/v1/multilock/{acquire,renew,release}`: several lock keys at once, all
//! or none. The keys travel in the body, so this resource has its own
//! small pipeline (auth → body → JSON → naming of each key → engine)
//! rather than the per-key one of `router::call`.

use std::sync::Arc;

use hyper::{body::Incoming, Method, Request};
use lockbroker_api::{
    ErrorBody, HeldKey, MultiLockAcquireRequest, MultiLockEntry, MultiLockLease,
    MultiLockReleaseRequest, MultiLockReleaseResponse, MultiLockReleased, MultiLockRenewRequest,
    MAX_MULTILOCK_KEYS,
};

use super::{
    access::Seen,
    ok,
    request::{authenticate, name_key, parse_json, read_body},
    resource::{ask, rfc3339, within_quota},
    responses::{AcquireErrors, KeyedErrors},
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{Ask, Grant, LockRef},
    store::Kind,
    tenant::Tenant,
};

/// Routes `/v1/multilock/{action}`.
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    tail: &[&str],
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    let action = match tail {
        ["acquire"] => "acquire",
        ["renew"] => "renew",
        ["release"] => "release",
        _ => return Err(ApiError::not_found("no such action")),
    };
    seen.action = action;
    if req.method() != Method::POST {
        return Err(ApiError::method_not_allowed("POST"));
    }
    let tenant = authenticate(app, req.headers()).await?;
    seen.tenant = Some(tenant.name.clone());
    let body = read_body(req, lockbroker_api::MAX_BODY_BYTES).await?;
    Ok(match action {
        "acquire" => ok(&acquire(app, &tenant, parse_json(&body)?).await?),
        "renew" => ok(&renew(app, &tenant, parse_json(&body)?).await?),
        _ => ok(&release(app, &tenant, parse_json(&body)?).await?),
    })
}

/// Checks the number of keys: 1 to [`MAX_MULTILOCK_KEYS`].
fn check_count(field: &str, n: usize) -> Result<(), ApiError> {
    if n == 0 || n > MAX_MULTILOCK_KEYS {
        return Err(ApiError::bad_request(format!(
            "{field} must list 1 to {MAX_MULTILOCK_KEYS} keys (got {n})"
        )));
    }
    Ok(())
}

/// Names every key by the tenant's naming policy.
async fn name_all(tenant: &Arc<Tenant>, keys: Vec<String>) -> Result<Vec<LockRef>, ApiError> {
    let mut set = Vec::with_capacity(keys.len());
    for key in keys {
        set.push(name_key(tenant, Kind::Lock, key).await?);
    }
    Ok(set)
}

/// Names every key of `held`, keeping its token.
async fn name_held(
    tenant: &Arc<Tenant>,
    held: Vec<HeldKey>,
) -> Result<Vec<(LockRef, u64)>, ApiError> {
    let mut named = Vec::with_capacity(held.len());
    for HeldKey { key, token } in held {
        named.push((name_key(tenant, Kind::Lock, key).await?, token));
    }
    Ok(named)
}

/// A set granted or renewed as `ask` asked, as the API answers it (in a
/// session, the grants carry the session's TTL).
fn lease(ask: Ask, grants: Vec<(LockRef, Grant)>) -> MultiLockLease {
    MultiLockLease {
        owner: ask.owner,
        ttl_ms: grants.first().map_or(ask.ttl_ms, |(_, g)| g.ttl_ms),
        locks: grants
            .into_iter()
            .map(|(lock, grant)| MultiLockEntry {
                key: lock.key,
                storage_key: lock.storage_key,
                token: grant.token,
                hold_count: grant.hold_count,
                expires_at: rfc3339(grant.expires_at),
            })
            .collect(),
    }
}

/// Acquire several locks, all or none
///
/// Grants every key to `owner` in one transaction, or none. Keys are taken
/// in storage-key (byte) order, so two multi-locks never deadlock; each key
/// is an ordinary lock (single-key acquires of it wait for the multi-lock
/// and the other way round) and gets its own fencing token. With `wait_ms`
/// > 0 the request queues on the first busy key, in that key's fairness
/// order, and never holds part of the set while it waits.
#[utoipa::path(
    post,
    path = "/v1/multilock/acquire",
    operation_id = "acquireMultiLock",
    tag = "locks",
    request_body = MultiLockAcquireRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Every key granted (or re-entered), in storage-key order.",
            body = MultiLockLease),
        AcquireErrors,
        (status = 409, headers(("Retry-After" = u64, description = "Seconds before trying again: \
`retry_after_ms` rounded up, at least 1.")),
            description = "`lock_held`: some key is held by another owner (or has waiters \
before this request) and `wait_ms` ran out. None of the keys was granted.",
            body = ErrorBody,
            example = json!({"error": {"code": "lock_held",
                "message": "the lock is held by another owner", "retry_after_ms": 120}})),
    )
)]
pub async fn acquire(
    app: &App,
    tenant: &Arc<Tenant>,
    request: MultiLockAcquireRequest,
) -> Result<MultiLockLease, ApiError> {
    check_count("keys", request.keys.len())?;
    let ask = ask(&request, tenant)?;
    let set = name_all(tenant, request.keys).await?;
    let engine = app.engine(tenant);
    let n = set.len() as u64;
    let grant = async { Ok(engine.multi_acquire(set, &ask).await?) };
    let grants = within_quota(engine, tenant, n, grant).await?;
    Ok(lease(ask, grants))
}

/// Renew a multi-lock
///
/// Extends every key's lease to `ttl_ms` from now (database clock), all or
/// none: if any key's lease is lost, nothing changes.
#[utoipa::path(
    post,
    path = "/v1/multilock/renew",
    operation_id = "renewMultiLock",
    tag = "locks",
    request_body = MultiLockRenewRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Every lease renewed: the new `expires_at`s.",
            body = MultiLockLease),
        KeyedErrors,
        (status = 409, description = "`lease_lost`: some key's lease expired (by the database \
clock) or its token is not the owner's current grant. Nothing changes.",
            body = ErrorBody,
            example = json!({"error": {"code": "lease_lost", "message": "this owner and token do \
not hold the current lease (expired, re-granted, released or never held)"}})),
    )
)]
pub async fn renew(
    app: &App,
    tenant: &Arc<Tenant>,
    request: MultiLockRenewRequest,
) -> Result<MultiLockLease, ApiError> {
    check_count("locks", request.locks.len())?;
    let ask = ask(&request, tenant)?;
    let held = name_held(tenant, request.locks).await?;
    let grants = app
        .engine(tenant)
        .multi_renew(held, &ask.owner, ask.ttl_ms)
        .await?;
    Ok(lease(ask, grants))
}

/// Release a multi-lock
///
/// Drops one hold of every key the owner still holds with the given token,
/// in one transaction; each freed key goes to its next waiter, as a
/// single-key release does. A key no longer held by that token (expired,
/// re-granted, force-released) is reported `lost` and left alone.
#[utoipa::path(
    post,
    path = "/v1/multilock/release",
    operation_id = "releaseMultiLock",
    tag = "locks",
    request_body = MultiLockReleaseRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "One entry per key, in storage-key order.",
            body = MultiLockReleaseResponse),
        KeyedErrors,
        (status = 409, description = "`lease_lost`: none of the keys is held by its token. \
Nothing changes.",
            body = ErrorBody,
            example = json!({"error": {"code": "lease_lost", "message": "this owner and token do \
not hold the current lease (expired, re-granted, released or never held)"}})),
    )
)]
pub async fn release(
    app: &App,
    tenant: &Arc<Tenant>,
    request: MultiLockReleaseRequest,
) -> Result<MultiLockReleaseResponse, ApiError> {
    check_count("locks", request.locks.len())?;
    let ask = ask(&request, tenant)?;
    let held = name_held(tenant, request.locks).await?;
    let results = app.engine(tenant).multi_release(held, &ask.owner).await?;
    let freed = results.iter().filter(|(_, r)| r.is_some()).count();
    tenant.held.released(freed as u64).await;
    Ok(MultiLockReleaseResponse {
        locks: results
            .into_iter()
            .map(|(lock, result)| MultiLockReleased {
                key: lock.key,
                released: result.is_some_and(|r| r.released),
                hold_count: result.map_or(0, |r| r.hold_count),
                lost: result.is_none(),
            })
            .collect(),
    })
}
