//! `/v1/multilock`: several lock keys at once, all or none: the typed calls
//! ([`MultiLocks`]), and [`MultiLock`], what the one generic guard and
//! builder need to hold them ([`Client::multilock`]).

use std::time::Duration;

use lockbroker_api::{
    ErrorCode, HeldKey, LeaseRequest, LeaseTerms, Lock, MultiLockAcquireRequest, MultiLockLease,
    MultiLockReleaseRequest, MultiLockReleaseResponse, MultiLockRenewRequest,
};

use crate::{
    builder::LeaseBuilder,
    client::{Client, Idempotent},
    error::Result,
    guard::{sealed::Sealed, Guard, Guarded, Renewable},
    kinds::Kind,
};

/// Several locks held as one lease: taken all or none, renewed and
/// released together.
#[derive(Debug, Clone, Copy)]
pub struct MultiLock;

/// A held multi-lock: one [`Guard`] over every key of a [`MultiLockLease`].
/// [`Guard::token`] is the token of the first key in storage-key order;
/// each key's own is [`Guard::token_of`].
pub type MultiLockGuard = Guard<MultiLock>;

/// Builds a [`MultiLockGuard`]; from [`Client::multilock`].
pub type MultiLockBuilder = LeaseBuilder<MultiLock>;

/// The multi-lock calls of a [`Client`], one per endpoint.
#[derive(Clone, Copy)]
pub struct MultiLocks<'a> {
    client: &'a Client,
}

impl Client {
    /// The multi-lock calls.
    pub fn multilocks(&self) -> MultiLocks<'_> {
        MultiLocks { client: self }
    }

    /// A guard builder for the locks `keys`, taken all or none:
    /// `client.multilock(["a", "b"]).acquire().await?`.
    pub fn multilock<I, K>(&self, keys: I) -> MultiLockBuilder
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        LeaseBuilder::new(self, keys.into_iter().map(Into::into).collect())
    }
}

impl MultiLocks<'_> {
    /// `POST /v1/multilock/acquire`. Not retried once it may have reached
    /// the broker (a second try would re-enter the keys).
    ///
    /// # Errors
    /// `lock_held` when some key stayed busy past `wait_ms` (none was
    /// granted); `bad_request` for 0 or more than 64 keys, or two keys
    /// naming one lock; every error of [`Error`](crate::Error).
    pub async fn acquire(&self, request: &MultiLockAcquireRequest) -> Result<MultiLockLease> {
        let wait = Duration::from_millis(request.terms().wait_ms.unwrap_or(0));
        self.client
            .post("/v1/multilock/acquire", request, wait, Idempotent::No)
            .await
    }

    /// `POST /v1/multilock/renew`: every lease or none.
    ///
    /// # Errors
    /// `lease_lost` when any key's lease is gone (nothing was renewed).
    pub async fn renew(&self, request: &MultiLockRenewRequest) -> Result<MultiLockLease> {
        self.client
            .post(
                "/v1/multilock/renew",
                request,
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `POST /v1/multilock/release`: what happened to each key.
    ///
    /// # Errors
    /// `lease_lost` when none of the keys was held by its token.
    pub async fn release(
        &self,
        request: &MultiLockReleaseRequest,
    ) -> Result<MultiLockReleaseResponse> {
        self.client
            .post(
                "/v1/multilock/release",
                request,
                Duration::ZERO,
                Idempotent::No,
            )
            .await
    }
}

impl MultiLockGuard {
    /// The fencing token of `key` (as the client named it), while held.
    pub fn token_of(&self, key: &str) -> Option<u64> {
        self.grant()?
            .locks
            .iter()
            .find(|l| l.key == key)
            .map(|l| l.token)
    }
}

/// Every key of `lease` with its token.
fn held(lease: &MultiLockLease) -> Vec<HeldKey> {
    lease
        .locks
        .iter()
        .map(|l| HeldKey {
            key: l.key.clone(),
            token: l.token,
        })
        .collect()
}

impl Sealed for MultiLock {}

impl Renewable for MultiLock {
    type Lease = MultiLockLease;

    /// The first key's token (storage-key order).
    fn token(lease: &MultiLockLease) -> u64 {
        lease.locks.first().map_or(0, |l| l.token)
    }

    fn ttl(lease: &MultiLockLease) -> Duration {
        Duration::from_millis(lease.ttl_ms)
    }

    async fn renew(client: &Client, lease: &MultiLockLease) -> Result<MultiLockLease> {
        let request = MultiLockRenewRequest {
            owner: lease.owner.clone(),
            ttl_ms: Some(lease.ttl_ms),
            locks: held(lease),
        };
        client.multilocks().renew(&request).await
    }

    async fn release(client: &Client, lease: &MultiLockLease) -> Result<()> {
        let request = MultiLockReleaseRequest {
            owner: lease.owner.clone(),
            locks: held(lease),
        };
        client.multilocks().release(&request).await.map(drop)
    }
}

impl Guarded for MultiLock {
    /// The keys.
    type Target = Vec<String>;
    const BUSY: ErrorCode = ErrorCode::LockHeld;

    async fn acquire(
        client: &Client,
        keys: &Vec<String>,
        owner: String,
        terms: LeaseTerms,
    ) -> Result<MultiLockLease> {
        let request = MultiLockAcquireRequest {
            keys: keys.clone(),
            owner,
            terms,
        };
        client.multilocks().acquire(&request).await
    }

    /// Each key `owner` holds, released together.
    async fn abandon(client: &Client, keys: &Vec<String>, owner: &str) -> Result<()> {
        let mut locks = Vec::new();
        for key in keys {
            let status = client.locks().status(key).await?;
            if let Some(held) = <Lock as Kind>::held_by(&status, owner) {
                locks.push(HeldKey {
                    key: key.clone(),
                    token: held.token,
                });
            }
        }
        if !locks.is_empty() {
            let request = MultiLockReleaseRequest {
                owner: owner.to_owned(),
                locks,
            };
            client.multilocks().release(&request).await?;
        }
        Ok(())
    }
}
