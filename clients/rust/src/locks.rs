//! `/v1/locks/{key}`: the typed calls ([`Locks`]) and the guard builder
//! ([`LockBuilder`], from [`Client::lock`]).

use std::time::Duration;

use hyper::Method;
use lockbroker_api::{
    AcquireRequest, ErrorCode, Lease, LockHistory, LockStatus, ReleaseRequest, ReleaseResponse,
    RenewRequest, ValidateRequest, Validity,
};
use tokio::time::Instant;

use crate::{
    client::{Client, Idempotent},
    error::Result,
    guard::{sealed::Renewable, Grant, Guard},
    options::{lease_options, millis, LeaseOptions},
    transport::segment,
};

/// A held lock: [`Guard`] over a [`Lease`].
pub type LockGuard = Guard<Lease>;

/// The lock calls of a [`Client`], one per endpoint, with the API's types.
#[derive(Clone, Copy)]
pub struct Locks<'a> {
    client: &'a Client,
}

impl Client {
    /// The lock calls.
    pub fn locks(&self) -> Locks<'_> {
        Locks { client: self }
    }

    /// A guard builder for the lock `key`:
    /// `client.lock("job").ttl(..).acquire().await?`.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LockBuilder {
            client: self.clone(),
            key: key.into(),
            options: LeaseOptions::default(),
        }
    }
}

fn path(key: &str, action: &str) -> String {
    format!("/v1/locks/{}{action}", segment(key))
}

impl Locks<'_> {
    /// `POST /v1/locks/{key}/acquire`. Not retried once it may have reached
    /// the broker (a second try would re-enter the lock).
    ///
    /// # Errors
    /// `lock_held` when another owner holds it past `wait_ms`, and every
    /// error of [`Error`](crate::Error).
    pub async fn acquire(&self, key: &str, request: &AcquireRequest) -> Result<Lease> {
        let wait = Duration::from_millis(request.terms.wait_ms.unwrap_or(0));
        self.client
            .call(
                Method::POST,
                &path(key, "/acquire"),
                Some(request),
                wait,
                Idempotent::No,
            )
            .await
    }

    /// `POST /v1/locks/{key}/renew`.
    ///
    /// # Errors
    /// `lease_lost` once the lease expired or was never this owner's.
    pub async fn renew(&self, key: &str, request: &RenewRequest) -> Result<Lease> {
        self.client
            .call(
                Method::POST,
                &path(key, "/renew"),
                Some(request),
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `POST /v1/locks/{key}/release`.
    ///
    /// # Errors
    /// `lease_lost` when the token is not the owner's current grant.
    pub async fn release(&self, key: &str, request: &ReleaseRequest) -> Result<ReleaseResponse> {
        self.client
            .call(
                Method::POST,
                &path(key, "/release"),
                Some(request),
                Duration::ZERO,
                Idempotent::No,
            )
            .await
    }

    /// `POST /v1/locks/{key}/validate`: whether `token` is the live grant
    /// now (a sequencer check; the answer may be stale on arrival).
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn validate(&self, key: &str, token: u64) -> Result<Validity> {
        self.client
            .call(
                Method::POST,
                &path(key, "/validate"),
                Some(&ValidateRequest { token }),
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `GET /v1/locks/{key}/history?limit=`: the lock's latest events
    /// (grants, releases, expiries, handoffs, force-releases), newest
    /// first; `limit` 1 to 1000, `None` for the broker's default (100).
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error); `bad_request` for a `limit`
    /// out of range.
    pub async fn history(&self, key: &str, limit: Option<u32>) -> Result<LockHistory> {
        let query = limit.map_or_else(String::new, |n| format!("?limit={n}"));
        self.client
            .call(
                Method::GET,
                &path(key, &format!("/history{query}")),
                None::<&()>,
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `GET /v1/locks/{key}`.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn status(&self, key: &str) -> Result<LockStatus> {
        self.client
            .call(
                Method::GET,
                &path(key, ""),
                None::<&()>,
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }
}

/// Builds a [`LockGuard`]; from [`Client::lock`].
#[must_use]
pub struct LockBuilder {
    client: Client,
    key: String,
    options: LeaseOptions,
}

lease_options!(LockBuilder, "owner");

impl LockBuilder {
    /// Handed to the tenant's fairness policy (higher is more urgent for
    /// policies that use it).
    pub fn priority(mut self, priority: i32) -> LockBuilder {
        self.options.priority = Some(priority);
        self
    }

    /// Waits up to `wait` for the lock and guards it.
    ///
    /// # Errors
    /// `lock_held` (as [`Error::Api`](crate::Error::Api)) when the wait ran
    /// out, and every other error of [`Error`](crate::Error).
    pub async fn acquire(self) -> Result<LockGuard> {
        let wait = self.options.wait;
        self.request(wait).await
    }

    /// Tries once, without waiting: `None` when another owner holds it.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error) but `lock_held`.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        match self.request(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.code() == Some(ErrorCode::LockHeld) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn request(self, wait: Duration) -> Result<LockGuard> {
        let owner = self
            .options
            .owner
            .clone()
            .unwrap_or_else(|| self.client.unique_owner());
        let request = AcquireRequest {
            owner,
            terms: lockbroker_api::LeaseTerms {
                ttl_ms: self.options.ttl_ms(),
                wait_ms: Some(millis(wait)),
                priority: self.options.priority,
            },
        };
        let sent = Instant::now();
        let lease = self.client.locks().acquire(&self.key, &request).await?;
        Ok(Guard::start(
            self.client,
            lease,
            sent,
            Instant::now(),
            !wait.is_zero(),
        ))
    }
}

impl Grant for Lease {
    fn token(&self) -> u64 {
        self.token
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl Renewable for Lease {
    async fn renew(&self, client: &Client) -> Result<Lease> {
        let request = RenewRequest {
            owner: self.owner.clone(),
            token: self.token,
            ttl_ms: Some(self.ttl_ms),
        };
        client.locks().renew(&self.key, &request).await
    }

    async fn release(&self, client: &Client) -> Result<()> {
        let request = ReleaseRequest {
            owner: self.owner.clone(),
            token: self.token,
        };
        client.locks().release(&self.key, &request).await.map(drop)
    }
}
