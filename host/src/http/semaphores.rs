//! `/v1/semaphores/{key}`: up to `permits` holders at once, each in its own
//! slot. What a semaphore adds to every kind's lease: its size, checked on
//! acquire, and the slot that names a lease.

use lockbroker_api::{
    Page, ReleaseResponse, Semaphore, SemaphoreAcquireRequest, SemaphoreHolder, SemaphoreLease,
    SemaphoreReleaseRequest, SemaphoreRenewRequest, SemaphoreStatus, MAX_PERMITS,
};

use super::{
    request::check_range,
    resource::{page, rfc3339, Resource},
    ApiError,
};
use crate::{
    engine::{Ask, Engine, LockRef, SemaphoreGrant, SemaphoreState, Span},
    store::Kind,
};

impl Resource for Semaphore {
    const KIND: Kind = Kind::Semaphore;
    type Extra = ();

    async fn acquire(
        engine: &Engine,
        lock: &LockRef,
        request: SemaphoreAcquireRequest,
        ask: Ask,
    ) -> Result<SemaphoreLease, ApiError> {
        let permits = check_range("permits", request.permits.into(), 1, MAX_PERMITS.into())?;
        let permits = u32::try_from(permits).expect("at most MAX_PERMITS");
        let grant = engine.acquire_permit(lock, &ask, permits).await?;
        Ok(lease(lock, grant))
    }

    async fn renew(
        engine: &Engine,
        lock: &LockRef,
        request: SemaphoreRenewRequest,
        ask: Ask,
    ) -> Result<SemaphoreLease, ApiError> {
        let slot = slot(request.slot)?;
        let grant = engine
            .renew_slot(lock, &ask.owner, slot, request.lease.token, ask.ttl_ms)
            .await?;
        Ok(lease(lock, grant))
    }

    async fn release(
        engine: &Engine,
        lock: &LockRef,
        request: SemaphoreReleaseRequest,
    ) -> Result<ReleaseResponse, ApiError> {
        let slot = slot(request.slot)?;
        let held = &request.lease;
        engine
            .release_slot(lock, &held.owner, slot, held.token)
            .await?;
        Ok(ReleaseResponse {
            released: true,
            hold_count: 0,
        })
    }

    async fn status(engine: &Engine, lock: &LockRef) -> Result<SemaphoreStatus, ApiError> {
        let state = engine.inspect_semaphore(lock).await?;
        Ok(status(lock.key.clone(), lock.storage_key.clone(), state))
    }

    async fn list(
        engine: &Engine,
        tenant: &str,
        span: Span,
    ) -> Result<Page<SemaphoreStatus>, ApiError> {
        let listing = engine.list_semaphores(tenant, span).await?;
        Ok(page(listing, |key, state| status(key.clone(), key, state)))
    }
}

/// A semaphore's state as the API answers it.
fn status(key: String, storage_key: String, state: SemaphoreState) -> SemaphoreStatus {
    {
        SemaphoreStatus {
            key,
            storage_key,
            permits: state.permits,
            holders: state
                .holders
                .into_iter()
                .map(|h| SemaphoreHolder {
                    slot: h.slot,
                    owner: h.owner,
                    token: h.token,
                    expires_at: rfc3339(h.expires_at),
                    session: h.session,
                })
                .collect(),
            waiters: state.waiters,
        }
    }
}

/// A slot as a request names it: 0 to `MAX_PERMITS` - 1.
fn slot(slot: u32) -> Result<u32, ApiError> {
    let slot = check_range("slot", slot.into(), 0, (MAX_PERMITS - 1).into())?;
    Ok(u32::try_from(slot).expect("below MAX_PERMITS"))
}

/// A semaphore grant as the API answers it.
fn lease(lock: &LockRef, grant: SemaphoreGrant) -> SemaphoreLease {
    SemaphoreLease {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        owner: grant.owner,
        slot: grant.slot,
        permits: grant.permits,
        token: grant.token,
        ttl_ms: grant.ttl_ms,
        expires_at: rfc3339(grant.expires_at),
    }
}
