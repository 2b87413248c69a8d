//! `/v1/rwlocks/{key}`: many readers or one writer. What an rwlock adds to
//! every kind's lease: the mode asked for, and the readers sharing it.
//! Rwlock keys go through the tenant's naming policy like lock keys, and
//! live in their own namespace (a rwlock and a lock of one name are
//! unrelated).

use lockbroker_api::{
    Page, ReleaseRequest, ReleaseResponse, RenewRequest, RwAcquireRequest, RwHolder, RwLease,
    RwLock, RwLockStatus, RwMode,
};

use super::{
    resource::{page, rfc3339, Resource},
    ApiError,
};
use crate::{
    engine::{self, Ask, Engine, LockRef, RwGrant, Span},
    store::Kind,
};

impl Resource for RwLock {
    const KIND: Kind = Kind::RwLock;
    type Extra = ();

    async fn acquire(
        engine: &Engine,
        lock: &LockRef,
        request: RwAcquireRequest,
        ask: Ask,
    ) -> Result<RwLease, ApiError> {
        let mode = match request.mode {
            RwMode::Read => engine::RwMode::Read,
            RwMode::Write => engine::RwMode::Write,
        };
        let grant = engine.acquire_rw(lock, &ask, mode).await?;
        Ok(lease(lock, grant))
    }

    async fn renew(
        engine: &Engine,
        lock: &LockRef,
        request: RenewRequest,
        ask: Ask,
    ) -> Result<RwLease, ApiError> {
        let grant = engine
            .renew_rw(lock, &ask.owner, request.token, ask.ttl_ms)
            .await?;
        Ok(lease(lock, grant))
    }

    async fn release(
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

    async fn status(engine: &Engine, lock: &LockRef) -> Result<RwLockStatus, ApiError> {
        let state = engine.inspect_rw(lock).await?;
        Ok(status(lock.key.clone(), lock.storage_key.clone(), state))
    }

    async fn list(
        engine: &Engine,
        tenant: &str,
        span: Span,
    ) -> Result<Page<RwLockStatus>, ApiError> {
        let listing = engine.list_rwlocks(tenant, span).await?;
        Ok(page(listing, |key, state| status(key.clone(), key, state)))
    }
}

/// A rwlock's state as the API answers it.
fn status(key: String, storage_key: String, state: engine::RwState) -> RwLockStatus {
    let holder = |h: engine::RwHolder| RwHolder {
        owner: h.owner,
        token: h.token,
        expires_at: rfc3339(h.expires_at),
        session: h.session,
    };
    RwLockStatus {
        key,
        storage_key,
        writer: state.writer.map(holder),
        readers: state.readers.into_iter().map(holder).collect(),
        waiters: state.waiters,
    }
}

/// A rwlock grant as the API answers it.
fn lease(lock: &LockRef, grant: RwGrant) -> RwLease {
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
