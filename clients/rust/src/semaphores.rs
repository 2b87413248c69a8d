//! `/v1/semaphores/{key}`: the typed calls ([`Semaphores`]) and the guard
//! builder ([`SemaphoreBuilder`], from [`Client::semaphore`]).

use std::time::Duration;

use hyper::Method;
use lockbroker_api::{
    ErrorCode, ReleaseResponse, SemaphoreAcquireRequest, SemaphoreLease, SemaphoreReleaseRequest,
    SemaphoreRenewRequest, SemaphoreStatus,
};
use tokio::time::Instant;

use crate::{
    client::{Client, Idempotent},
    error::Result,
    guard::{sealed::Renewable, Grant, Guard},
    options::{lease_options, millis, LeaseOptions},
    transport::segment,
};

/// A held semaphore permit: [`Guard`] over a [`SemaphoreLease`].
pub type PermitGuard = Guard<SemaphoreLease>;

/// The semaphore calls of a [`Client`], one per endpoint.
#[derive(Clone, Copy)]
pub struct Semaphores<'a> {
    client: &'a Client,
}

impl Client {
    /// The semaphore calls.
    pub fn semaphores(&self) -> Semaphores<'_> {
        Semaphores { client: self }
    }

    /// A guard builder for one permit of the semaphore `key` of `permits`
    /// slots: `client.semaphore("pool", 5).acquire().await?`.
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> SemaphoreBuilder {
        SemaphoreBuilder {
            client: self.clone(),
            key: key.into(),
            permits,
            options: LeaseOptions::default(),
        }
    }
}

fn path(key: &str, action: &str) -> String {
    format!("/v1/semaphores/{}{action}", segment(key))
}

impl Semaphores<'_> {
    /// `POST /v1/semaphores/{key}/acquire`.
    ///
    /// # Errors
    /// `semaphore_full` when no slot freed within `wait_ms`,
    /// `permits_mismatch` when the semaphore has another size.
    pub async fn acquire(
        &self,
        key: &str,
        request: &SemaphoreAcquireRequest,
    ) -> Result<SemaphoreLease> {
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

    /// `POST /v1/semaphores/{key}/renew`.
    ///
    /// # Errors
    /// `lease_lost` once the slot's lease expired.
    pub async fn renew(
        &self,
        key: &str,
        request: &SemaphoreRenewRequest,
    ) -> Result<SemaphoreLease> {
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

    /// `POST /v1/semaphores/{key}/release`.
    ///
    /// # Errors
    /// `lease_lost` when the slot and token are not the owner's.
    pub async fn release(
        &self,
        key: &str,
        request: &SemaphoreReleaseRequest,
    ) -> Result<ReleaseResponse> {
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

    /// `GET /v1/semaphores/{key}`: size, holders, waiters.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn status(&self, key: &str) -> Result<SemaphoreStatus> {
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

/// Builds a [`PermitGuard`]; from [`Client::semaphore`].
#[must_use]
pub struct SemaphoreBuilder {
    client: Client,
    key: String,
    permits: u32,
    options: LeaseOptions,
}

lease_options!(SemaphoreBuilder, "owner");

impl SemaphoreBuilder {
    /// Handed to the tenant's fairness policy.
    pub fn priority(mut self, priority: i32) -> SemaphoreBuilder {
        self.options.priority = Some(priority);
        self
    }

    /// Waits up to `wait` for a permit and guards it.
    ///
    /// # Errors
    /// `semaphore_full` when the wait ran out, and every other error of
    /// [`Error`](crate::Error).
    pub async fn acquire(self) -> Result<PermitGuard> {
        let wait = self.options.wait;
        self.request(wait).await
    }

    /// Tries once: `None` when every permit is taken.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error) but `semaphore_full`.
    pub async fn try_acquire(self) -> Result<Option<PermitGuard>> {
        match self.request(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.code() == Some(ErrorCode::SemaphoreFull) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn request(self, wait: Duration) -> Result<PermitGuard> {
        let owner = self
            .options
            .owner
            .clone()
            .unwrap_or_else(|| self.client.unique_owner());
        let request = SemaphoreAcquireRequest {
            owner,
            permits: self.permits,
            terms: lockbroker_api::LeaseTerms {
                ttl_ms: self.options.ttl_ms(),
                wait_ms: Some(millis(wait)),
                priority: self.options.priority,
            },
        };
        let sent = Instant::now();
        let lease = self
            .client
            .semaphores()
            .acquire(&self.key, &request)
            .await?;
        Ok(Guard::start(
            self.client,
            lease,
            sent,
            Instant::now(),
            !wait.is_zero(),
        ))
    }
}

impl Grant for SemaphoreLease {
    fn token(&self) -> u64 {
        self.token
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl Renewable for SemaphoreLease {
    async fn renew(&self, client: &Client) -> Result<SemaphoreLease> {
        let request = SemaphoreRenewRequest::from(self);
        client.semaphores().renew(&self.key, &request).await
    }

    async fn release(&self, client: &Client) -> Result<()> {
        let request = SemaphoreReleaseRequest::from(self);
        client
            .semaphores()
            .release(&self.key, &request)
            .await
            .map(drop)
    }
}
