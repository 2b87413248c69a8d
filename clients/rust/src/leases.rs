//! `/v1/{kind}`: the typed calls of every lease kind, written once over
//! the API's [`LeaseKind`] ([`Leases`], from [`Client::leases`] or its
//! per-kind shorthands [`Client::locks`], [`Client::semaphores`],
//! [`Client::rwlocks`], [`Client::elections`]), as kube-rs serves every
//! Kubernetes kind through one `Api<K>`. A kind's own calls (a lock's
//! `validate`, an election's `observe`) are its own `impl` blocks here.

use std::{marker::PhantomData, time::Duration};

use lockbroker_api::{
    CampaignRequest, Election, KeyWaiters, Leadership, LeaseKind, LeaseRequest, Lock, LockHistory,
    Page, ResignRequest, ResignResponse, RwLock, Semaphore, ValidateRequest, Validity,
    LIST_MAX_LIMIT,
};

use crate::{
    client::{Client, Idempotent},
    error::Result,
    kinds::Recorded,
    observe::LeaderEvents,
    transport::segment,
};

/// The calls of one lease kind `K`, one per endpoint, with the API's
/// types: `client.locks().status("job")`,
/// `client.leases::<Semaphore>().list("pool/", None, None)`.
pub struct Leases<'a, K> {
    client: &'a Client,
    kind: PhantomData<K>,
}

// Not derived: `K` (a marker) need not be `Clone`.
impl<K> Clone for Leases<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Leases<'_, K> {}

/// The lock calls.
pub type Locks<'a> = Leases<'a, Lock>;
/// The semaphore calls.
pub type Semaphores<'a> = Leases<'a, Semaphore>;
/// The rwlock calls.
pub type RwLocks<'a> = Leases<'a, RwLock>;
/// The election calls.
pub type Elections<'a> = Leases<'a, Election>;

impl Client {
    /// The calls of the lease kind `K`.
    pub fn leases<K: LeaseKind>(&self) -> Leases<'_, K> {
        Leases {
            client: self,
            kind: PhantomData,
        }
    }

    /// The lock calls.
    pub fn locks(&self) -> Locks<'_> {
        self.leases()
    }

    /// The semaphore calls.
    pub fn semaphores(&self) -> Semaphores<'_> {
        self.leases()
    }

    /// The rwlock calls.
    pub fn rwlocks(&self) -> RwLocks<'_> {
        self.leases()
    }

    /// The election calls.
    pub fn elections(&self) -> Elections<'_> {
        self.leases()
    }
}

impl<K: LeaseKind> Leases<'_, K> {
    /// `/v1/{kind}/{key}{action}`.
    fn path(key: &str, action: &str) -> String {
        format!("/v1/{}/{}{action}", K::PATH, segment(key))
    }

    /// `POST /v1/{kind}/{key}/acquire` (elections: `campaign`). Not retried
    /// once it may have reached the broker (a second try would re-enter
    /// the lease it got the first time).
    ///
    /// # Errors
    /// `lock_held` (semaphores: `semaphore_full`) when the lease stayed
    /// taken past `wait_ms`; `permits_mismatch` for a semaphore of another
    /// size; every error of [`Error`](crate::Error).
    pub async fn acquire(&self, key: &str, request: &K::Acquire) -> Result<K::Lease> {
        let wait = Duration::from_millis(request.terms().wait_ms.unwrap_or(0));
        let path = Self::path(key, &format!("/{}", K::ACQUIRE));
        self.client.post(&path, request, wait, Idempotent::No).await
    }

    /// `POST /v1/{kind}/{key}/renew`.
    ///
    /// # Errors
    /// `lease_lost` once the lease expired or was never this holder's.
    pub async fn renew(&self, key: &str, request: &K::Renew) -> Result<K::Lease> {
        let path = Self::path(key, &format!("/{}", K::RENEW));
        self.client
            .post(&path, request, Duration::ZERO, Idempotent::Yes)
            .await
    }

    /// `POST /v1/{kind}/{key}/release` (elections: `resign`).
    ///
    /// # Errors
    /// `lease_lost` when the token is not the holder's current grant.
    pub async fn release(&self, key: &str, request: &K::Release) -> Result<K::Released> {
        let path = Self::path(key, &format!("/{}", K::RELEASE));
        self.client
            .post(&path, request, Duration::ZERO, Idempotent::No)
            .await
    }

    /// `GET /v1/{kind}/{key}`: the holders and waiters now.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn status(&self, key: &str) -> Result<K::Status> {
        self.client.get(&Self::path(key, "")).await
    }

    /// `GET /v1/{kind}/{key}/waiters`: who waits for the key, in the order
    /// they will be served (a preview: arrivals, departures and a fairness
    /// policy's choices change it), each with the session it waits in.
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn waiters(&self, key: &str) -> Result<KeyWaiters> {
        self.client.get(&Self::path(key, "/waiters")).await
    }

    /// `GET /v1/{kind}?prefix=&limit=&cursor=`: one page of the tenant's
    /// live leases of this kind whose storage key starts with `prefix`
    /// (matched literally), in storage-key order. `limit` 1 to 1000 (`None`:
    /// the broker's 100); `cursor`: the previous page's `next`. A page may
    /// hold fewer than `limit`: follow `next` until it is `None` (or use
    /// [`Leases::list_all`]).
    ///
    /// # Errors
    /// `bad_request` for a `limit` out of range or a malformed cursor.
    pub async fn list(
        &self,
        prefix: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<K::Status>> {
        let mut query = format!("?prefix={}", segment(prefix));
        if let Some(limit) = limit {
            query.push_str(&format!("&limit={limit}"));
        }
        if let Some(cursor) = cursor {
            query.push_str(&format!("&cursor={}", segment(cursor)));
        }
        self.client.get(&format!("/v1/{}{query}", K::PATH)).await
    }

    /// The first `max` live leases whose storage key starts with `prefix`,
    /// following the pages' cursors (each live lease once).
    ///
    /// # Errors
    /// As [`Leases::list`].
    pub async fn list_all(&self, prefix: &str, max: usize) -> Result<Vec<K::Status>> {
        let mut items = Vec::new();
        let mut cursor = None;
        while items.len() < max {
            let left = u32::try_from(max - items.len()).unwrap_or(u32::MAX);
            let page = self
                .list(prefix, Some(left.min(LIST_MAX_LIMIT)), cursor.as_deref())
                .await?;
            items.extend(page.items);
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        items.truncate(max);
        Ok(items)
    }
}

impl<K: Recorded> Leases<'_, K> {
    /// `GET /v1/{kind}/{key}/history?limit=`: the latest events of the
    /// lease (grants, releases, expiries, handoffs, force-releases), newest
    /// first; `limit` 1 to 1000, `None` for the broker's default (100).
    ///
    /// # Errors
    /// `bad_request` for a `limit` out of range, and every error of
    /// [`Error`](crate::Error).
    pub async fn history(&self, key: &str, limit: Option<u32>) -> Result<LockHistory> {
        let query = limit.map_or_else(String::new, |n| format!("?limit={n}"));
        self.client
            .get(&Self::path(key, &format!("/history{query}")))
            .await
    }
}

impl Locks<'_> {
    /// `POST /v1/locks/{key}/validate`: whether `token` is the live grant
    /// now (a sequencer check; the answer may be stale on arrival).
    ///
    /// # Errors
    /// Every error of [`Error`](crate::Error).
    pub async fn validate(&self, key: &str, token: u64) -> Result<Validity> {
        let path = Self::path(key, "/validate");
        self.client
            .post(
                &path,
                &ValidateRequest { token },
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }
}

impl Elections<'_> {
    /// [`Leases::acquire`] by the election's name for it.
    ///
    /// # Errors
    /// As [`Leases::acquire`].
    pub async fn campaign(&self, name: &str, request: &CampaignRequest) -> Result<Leadership> {
        self.acquire(name, request).await
    }

    /// [`Leases::release`] by the election's name for it.
    ///
    /// # Errors
    /// As [`Leases::release`].
    pub async fn resign(&self, name: &str, request: &ResignRequest) -> Result<ResignResponse> {
        self.release(name, request).await
    }

    /// `GET /v1/elections/{name}/observe`: the leadership now, then one
    /// event per change of leader, as a [`Stream`](futures_core::Stream)
    /// that reconnects when its connection ends or breaks (and yields a
    /// change made meanwhile, never one it already yielded).
    ///
    /// # Errors
    /// When the stream cannot be opened (as any call).
    pub async fn observe(&self, name: &str) -> Result<LeaderEvents> {
        LeaderEvents::open(self.client, Self::path(name, "/observe")).await
    }
}
