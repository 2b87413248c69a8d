//! `/v1/rwlocks/{key}`: the typed calls ([`RwLocks`]) and the guard builder
//! ([`RwLockBuilder`], from [`Client::read_lock`] and
//! [`Client::write_lock`]).

use std::time::Duration;

use hyper::Method;
use lockbroker_api::{
    ErrorCode, ReleaseRequest, ReleaseResponse, RenewRequest, RwAcquireRequest, RwLease,
    RwLockStatus, RwMode,
};
use tokio::time::Instant;

use crate::{
    client::{Client, Idempotent},
    error::Result,
    guard::{sealed::Renewable, Grant, Guard},
    options::{lease_options, millis, LeaseOptions},
    transport::segment,
};

/// A held read or write lease of a rwlock: [`Guard`] over an [`RwLease`].
pub type RwLockGuard = Guard<RwLease>;

/// The rwlock calls of a [`Client`], one per endpoint.
#[derive(Clone, Copy)]
pub struct RwLocks<'a> {
    client: &'a Client,
}

impl Client {
    /// The rwlock calls.
    pub fn rwlocks(&self) -> RwLocks<'_> {
        RwLocks { client: self }
    }

    /// A guard builder for a read (shared) lease of the rwlock `key`:
    /// `client.read_lock("config").acquire().await?`.
    pub fn read_lock(&self, key: impl Into<String>) -> RwLockBuilder {
        self.rwlock(key, RwMode::Read)
    }

    /// A guard builder for a write (exclusive) lease of the rwlock `key`.
    pub fn write_lock(&self, key: impl Into<String>) -> RwLockBuilder {
        self.rwlock(key, RwMode::Write)
    }

    /// A guard builder for a lease of the rwlock `key` in `mode`.
    pub fn rwlock(&self, key: impl Into<String>, mode: RwMode) -> RwLockBuilder {
        RwLockBuilder {
            client: self.clone(),
            key: key.into(),
            mode,
            options: LeaseOptions::default(),
        }
    }
}

fn path(key: &str, action: &str) -> String {
    format!("/v1/rwlocks/{}{action}", segment(key))
}

impl RwLocks<'_> {
    /// `POST /v1/rwlocks/{key}/acquire`.
    ///
    /// # Errors
    /// `lock_held` when the mode was not available within `wait_ms`.
    pub async fn acquire(&self, key: &str, request: &RwAcquireRequest) -> Result<RwLease> {
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

    /// `POST /v1/rwlocks/{key}/renew`.
    ///
    /// # Errors
    /// `lease_lost` once the lease expired.
    pub async fn renew(&self, key: &str, request: &RenewRequest) -> Result<RwLease> {
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

    /// `POST /v1/rwlocks/{key}/release`.
    ///
    /// # Errors
    /// `lease_lost` when the owner and token hold no live lease.
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

    /// `GET /v1/rwlocks/{key}`: writer, readers, waiters.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn status(&self, key: &str) -> Result<RwLockStatus> {
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

/// Builds a [`RwLockGuard`]; from [`Client::read_lock`],
/// [`Client::write_lock`] or [`Client::rwlock`].
#[must_use]
pub struct RwLockBuilder {
    client: Client,
    key: String,
    mode: RwMode,
    options: LeaseOptions,
}

lease_options!(RwLockBuilder, "owner");

impl RwLockBuilder {
    /// Handed to the tenant's fairness policy.
    pub fn priority(mut self, priority: i32) -> RwLockBuilder {
        self.options.priority = Some(priority);
        self
    }

    /// Waits up to `wait` for the lease and guards it.
    ///
    /// # Errors
    /// `lock_held` when the wait ran out, and every other error of
    /// [`Error`](crate::Error).
    pub async fn acquire(self) -> Result<RwLockGuard> {
        let wait = self.options.wait;
        self.request(wait).await
    }

    /// Tries once: `None` when the mode is not available now.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error) but `lock_held`.
    pub async fn try_acquire(self) -> Result<Option<RwLockGuard>> {
        match self.request(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.code() == Some(ErrorCode::LockHeld) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn request(self, wait: Duration) -> Result<RwLockGuard> {
        let owner = self
            .options
            .owner
            .clone()
            .unwrap_or_else(|| self.client.unique_owner());
        let request = RwAcquireRequest {
            owner,
            mode: self.mode,
            terms: lockbroker_api::LeaseTerms {
                ttl_ms: self.options.ttl_ms(),
                wait_ms: Some(millis(wait)),
                priority: self.options.priority,
            },
        };
        let sent = Instant::now();
        let lease = self.client.rwlocks().acquire(&self.key, &request).await?;
        Ok(Guard::start(
            self.client,
            lease,
            sent,
            Instant::now(),
            !wait.is_zero(),
        ))
    }
}

impl Grant for RwLease {
    fn token(&self) -> u64 {
        self.token
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl Renewable for RwLease {
    async fn renew(&self, client: &Client) -> Result<RwLease> {
        let request = RenewRequest {
            owner: self.owner.clone(),
            token: self.token,
            ttl_ms: Some(self.ttl_ms),
        };
        client.rwlocks().renew(&self.key, &request).await
    }

    async fn release(&self, client: &Client) -> Result<()> {
        let request = ReleaseRequest {
            owner: self.owner.clone(),
            token: self.token,
        };
        client
            .rwlocks()
            .release(&self.key, &request)
            .await
            .map(drop)
    }
}
