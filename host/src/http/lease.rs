//! The lease model the three resources share: one check of who asks, for
//! how long and how long to wait (whatever the resource calls its holder),
//! and one conversion of the engine's grants into the API's answers.

use lockbroker_api::{
    AcquireRequest, CampaignRequest, ElectionRenewRequest, Leadership, Lease, RenewRequest,
    SemaphoreAcquireRequest, SemaphoreLease, SemaphoreRenewRequest, DEFAULT_TTL_MS,
    MAX_OWNER_BYTES, MAX_WAIT_MS, MIN_TTL_MS,
};

use super::{
    request::{check_len, check_range},
    ApiError,
};
use crate::{
    engine::{Grant, LockRef, SemaphoreGrant},
    tenant::Tenant,
};

/// A request for a lease (acquire, campaign) or a longer one (renew), as
/// its resource names the fields.
pub trait LeaseRequest {
    /// The holder's field name (`owner`, `candidate`) and value.
    fn holder(&self) -> (&'static str, &str);
    fn ttl_ms(&self) -> Option<u64>;
    fn wait_ms(&self) -> Option<u64> {
        None
    }
    fn priority(&self) -> Option<i32> {
        None
    }
}

/// A lease request, checked, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub holder: String,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub priority: i32,
}

impl Terms {
    /// Checks `request` against the API's and the tenant's limits.
    ///
    /// # Errors
    /// 400 naming the field out of range.
    pub fn check(request: &impl LeaseRequest, tenant: &Tenant) -> Result<Terms, ApiError> {
        let (field, holder) = request.holder();
        Ok(Terms {
            holder: check_holder(field, holder)?.to_owned(),
            ttl_ms: ttl(tenant, request.ttl_ms())?,
            wait_ms: check_range("wait_ms", request.wait_ms().unwrap_or(0), 0, MAX_WAIT_MS)?,
            priority: request.priority().unwrap_or(0),
        })
    }
}

/// Checks an `owner` or `candidate`: 1 to [`MAX_OWNER_BYTES`] bytes.
///
/// # Errors
/// 400 naming the field.
pub fn check_holder<'a>(field: &str, value: &'a str) -> Result<&'a str, ApiError> {
    check_len(field, value, MAX_OWNER_BYTES)?;
    Ok(value)
}

/// A lease length: the default (capped by the tenant's maximum) when none
/// is given, else checked against `MIN_TTL_MS..=max_ttl_ms`.
fn ttl(tenant: &Tenant, ttl_ms: Option<u64>) -> Result<u64, ApiError> {
    match ttl_ms {
        None => Ok(DEFAULT_TTL_MS.min(tenant.max_ttl_ms)),
        Some(ms) => check_range("ttl_ms", ms, MIN_TTL_MS, tenant.max_ttl_ms),
    }
}

impl LeaseRequest for AcquireRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("owner", &self.owner)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
    fn wait_ms(&self) -> Option<u64> {
        self.wait_ms
    }
    fn priority(&self) -> Option<i32> {
        self.priority
    }
}

impl LeaseRequest for RenewRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("owner", &self.owner)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
}

impl LeaseRequest for SemaphoreAcquireRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("owner", &self.owner)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
    fn wait_ms(&self) -> Option<u64> {
        self.wait_ms
    }
    fn priority(&self) -> Option<i32> {
        self.priority
    }
}

impl LeaseRequest for SemaphoreRenewRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("owner", &self.owner)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
}

impl LeaseRequest for CampaignRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("candidate", &self.candidate)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
    fn wait_ms(&self) -> Option<u64> {
        self.wait_ms
    }
}

impl LeaseRequest for ElectionRenewRequest {
    fn holder(&self) -> (&'static str, &str) {
        ("candidate", &self.candidate)
    }
    fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
}

/// A lock grant as the API answers it.
pub fn lease(lock: &LockRef, grant: Grant) -> Lease {
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

/// A semaphore grant as the API answers it.
pub fn semaphore_lease(lock: &LockRef, grant: SemaphoreGrant) -> SemaphoreLease {
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

/// An election grant (the leader's lease) as the API answers it.
pub fn leadership(lock: &LockRef, grant: Grant) -> Leadership {
    Leadership {
        name: lock.key.clone(),
        leader: grant.owner,
        term: grant.token,
        ttl_ms: grant.ttl_ms,
        expires_at: rfc3339(grant.expires_at),
    }
}

/// A database time (UTC) as `2026-11-21T10:00:00.000Z`.
pub fn rfc3339(t: chrono::NaiveDateTime) -> String {
    t.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
