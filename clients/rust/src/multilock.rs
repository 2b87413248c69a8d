//! `/v1/multilock`: several lock keys at once, all or none: the typed calls
//! ([`MultiLocks`]) and the guard builder ([`MultiLockBuilder`], from
//! [`Client::multilock`]).

use std::time::Duration;

use hyper::Method;
use lockbroker_api::{
    ErrorCode, HeldKey, MultiLockAcquireRequest, MultiLockLease, MultiLockReleaseRequest,
    MultiLockReleaseResponse, MultiLockRenewRequest,
};
use tokio::time::Instant;

use crate::{
    client::{Client, Idempotent},
    error::Result,
    guard::{sealed::Renewable, Grant, Guard},
    options::{lease_options, millis, LeaseOptions},
};

/// A held multi-lock: one [`Guard`] over every key of a [`MultiLockLease`],
/// renewed and released together. [`Guard::token`] is the token of the
/// first key in storage-key order; each key's own token is in
/// [`Guard::grant`]'s `locks` (see [`MultiLockGuardExt::token_of`]).
pub type MultiLockGuard = Guard<MultiLockLease>;

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
        MultiLockBuilder {
            client: self.clone(),
            keys: keys.into_iter().map(Into::into).collect(),
            options: LeaseOptions::default(),
        }
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
        let wait = Duration::from_millis(request.terms.wait_ms.unwrap_or(0));
        self.client
            .call(
                Method::POST,
                "/v1/multilock/acquire",
                Some(request),
                wait,
                Idempotent::No,
            )
            .await
    }

    /// `POST /v1/multilock/renew`: every lease or none.
    ///
    /// # Errors
    /// `lease_lost` when any key's lease is gone (nothing was renewed).
    pub async fn renew(&self, request: &MultiLockRenewRequest) -> Result<MultiLockLease> {
        self.client
            .call(
                Method::POST,
                "/v1/multilock/renew",
                Some(request),
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
            .call(
                Method::POST,
                "/v1/multilock/release",
                Some(request),
                Duration::ZERO,
                Idempotent::No,
            )
            .await
    }
}

/// Builds a [`MultiLockGuard`]; from [`Client::multilock`].
#[must_use]
pub struct MultiLockBuilder {
    client: Client,
    keys: Vec<String>,
    options: LeaseOptions,
}

lease_options!(MultiLockBuilder, "owner");

impl MultiLockBuilder {
    /// Waits up to `wait` for every key and guards them.
    ///
    /// # Errors
    /// `lock_held` (as [`Error::Api`](crate::Error::Api)) when the wait ran
    /// out, and every other error of [`Error`](crate::Error).
    pub async fn acquire(self) -> Result<MultiLockGuard> {
        let wait = self.options.wait;
        self.request(wait).await
    }

    /// Tries once, without waiting: `None` when some key is busy.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error) but `lock_held`.
    pub async fn try_acquire(self) -> Result<Option<MultiLockGuard>> {
        match self.request(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.code() == Some(ErrorCode::LockHeld) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn request(self, wait: Duration) -> Result<MultiLockGuard> {
        let owner = self
            .options
            .owner
            .clone()
            .unwrap_or_else(|| self.client.unique_owner());
        let request = MultiLockAcquireRequest {
            keys: self.keys,
            owner,
            terms: lockbroker_api::LeaseTerms {
                ttl_ms: self.options.ttl_ms(),
                wait_ms: Some(millis(wait)),
                ..Default::default()
            },
        };
        let sent = Instant::now();
        let lease = self.client.multilocks().acquire(&request).await?;
        Ok(Guard::start(
            self.client,
            lease,
            sent,
            Instant::now(),
            !wait.is_zero(),
        ))
    }
}

/// Per-key tokens of a [`MultiLockGuard`].
pub trait MultiLockGuardExt {
    /// The fencing token of `key` (as the client named it), while held.
    fn token_of(&self, key: &str) -> Option<u64>;
}

impl MultiLockGuardExt for MultiLockGuard {
    fn token_of(&self, key: &str) -> Option<u64> {
        self.grant()?
            .locks
            .iter()
            .find(|l| l.key == key)
            .map(|l| l.token)
    }
}

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

impl Grant for MultiLockLease {
    /// The first key's token (storage-key order).
    fn token(&self) -> u64 {
        self.locks.first().map_or(0, |l| l.token)
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl Renewable for MultiLockLease {
    async fn renew(&self, client: &Client) -> Result<MultiLockLease> {
        let request = MultiLockRenewRequest {
            owner: self.owner.clone(),
            ttl_ms: Some(self.ttl_ms),
            locks: held(self),
        };
        client.multilocks().renew(&request).await
    }

    async fn release(&self, client: &Client) -> Result<()> {
        let request = MultiLockReleaseRequest {
            owner: self.owner.clone(),
            locks: held(self),
        };
        client.multilocks().release(&request).await.map(drop)
    }
}
