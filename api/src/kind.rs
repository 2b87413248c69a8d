//! The lease kinds as the wire sees them: one [`LeaseKind`] per resource
//! served under `/v1/{kind}/{key}` (locks, semaphores, rwlocks, elections),
//! naming its URL segment, its actions and the types each action sends and
//! answers. The broker serves every kind through one generic set of
//! handlers over this trait, and the Rust client calls every kind through
//! one generic set of calls and one guard (as kube-rs serves every
//! Kubernetes kind through one `Api<K>`): a new kind implements it once.
//!
//! [`LeaseRequest`] is what every request says whatever its kind calls it
//! (who asks, and on what terms), so the terms are checked once for all.

use serde::{de::DeserializeOwned, Serialize};

use crate::{
    AcquireRequest, CampaignRequest, ElectionRenewRequest, ElectionStatus, Leadership, Lease,
    LeaseTerms, LockStatus, MultiLockAcquireRequest, MultiLockReleaseRequest,
    MultiLockRenewRequest, ReleaseRequest, ReleaseResponse, RenewRequest, ResignRequest,
    ResignResponse, RwAcquireRequest, RwLease, RwLockStatus, SemaphoreAcquireRequest,
    SemaphoreLease, SemaphoreReleaseRequest, SemaphoreRenewRequest, SemaphoreStatus,
};

/// A wire type: what every request and answer of a kind is.
pub trait Wire: Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Wire for T {}

/// One kind of lease resource, served at `/v1/{PATH}/{key}`: `POST
/// {key}/{ACQUIRE}`, `{key}/{RENEW}`, `{key}/{RELEASE}` and `GET {key}`.
pub trait LeaseKind: Send + Sync + 'static {
    /// The URL segment: `locks`, `semaphores`, `rwlocks`, `elections`.
    const PATH: &'static str;
    /// The action that takes a lease: `acquire` (elections: `campaign`).
    const ACQUIRE: &'static str = "acquire";
    /// The action that extends it.
    const RENEW: &'static str = "renew";
    /// The action that gives it back: `release` (elections: `resign`).
    const RELEASE: &'static str = "release";

    /// The body of an acquire.
    type Acquire: LeaseRequest + Wire;
    /// The body of a renewal: made from the lease, for as long again as
    /// it was granted.
    type Renew: LeaseRequest + Wire + for<'a> From<&'a Self::Lease>;
    /// The body of a release: made from the lease.
    type Release: LeaseRequest + Wire + for<'a> From<&'a Self::Lease>;
    /// The answer to an acquire and to a renewal: the lease held.
    type Lease: Granted + Clone + Wire;
    /// The answer to a release.
    type Released: Wire;
    /// The answer to `GET {key}`.
    type Status: Wire;
}

/// What every lease request says, whatever its kind names it: who asks,
/// and on what terms. The broker checks these alike for every kind.
pub trait LeaseRequest {
    /// The holder's field name (`owner`, or an election's `candidate`) and
    /// its value.
    fn holder(&self) -> (&'static str, &str);
    /// The terms asked for: an acquire's TTL, wait and priority; a
    /// renewal's TTL; none for a release.
    fn terms(&self) -> LeaseTerms;
}

/// A lease as granted: what a guard needs to keep it.
pub trait Granted {
    /// The key as the client sent it (an election's name).
    fn key(&self) -> &str;
    /// Who holds it (an election's leader).
    fn holder(&self) -> &str;
    /// The fencing token (an election's term).
    fn token(&self) -> u64;
    /// The lease length granted, in milliseconds.
    fn ttl_ms(&self) -> u64;
}

/// Exclusive, re-entrant locks: `/v1/locks/{key}`.
#[derive(Debug, Clone, Copy)]
pub struct Lock;
/// Semaphores, `permits` holders at once: `/v1/semaphores/{key}`.
#[derive(Debug, Clone, Copy)]
pub struct Semaphore;
/// Reader-writer locks: `/v1/rwlocks/{key}`.
#[derive(Debug, Clone, Copy)]
pub struct RwLock;
/// Leader election: `/v1/elections/{name}`.
#[derive(Debug, Clone, Copy)]
pub struct Election;

impl LeaseKind for Lock {
    const PATH: &'static str = "locks";
    type Acquire = AcquireRequest;
    type Renew = RenewRequest;
    type Release = ReleaseRequest;
    type Lease = Lease;
    type Released = ReleaseResponse;
    type Status = LockStatus;
}

impl LeaseKind for Semaphore {
    const PATH: &'static str = "semaphores";
    type Acquire = SemaphoreAcquireRequest;
    type Renew = SemaphoreRenewRequest;
    type Release = SemaphoreReleaseRequest;
    type Lease = SemaphoreLease;
    type Released = ReleaseResponse;
    type Status = SemaphoreStatus;
}

impl LeaseKind for RwLock {
    const PATH: &'static str = "rwlocks";
    type Acquire = RwAcquireRequest;
    type Renew = RenewRequest;
    type Release = ReleaseRequest;
    type Lease = RwLease;
    type Released = ReleaseResponse;
    type Status = RwLockStatus;
}

impl LeaseKind for Election {
    const PATH: &'static str = "elections";
    const ACQUIRE: &'static str = "campaign";
    const RELEASE: &'static str = "resign";
    type Acquire = CampaignRequest;
    type Renew = ElectionRenewRequest;
    type Release = ResignRequest;
    type Lease = Leadership;
    type Released = ResignResponse;
    type Status = ElectionStatus;
}

impl<L: Granted> From<&L> for RenewRequest {
    fn from(lease: &L) -> RenewRequest {
        RenewRequest {
            owner: lease.holder().to_owned(),
            token: lease.token(),
            ttl_ms: Some(lease.ttl_ms()),
        }
    }
}

impl<L: Granted> From<&L> for ReleaseRequest {
    fn from(lease: &L) -> ReleaseRequest {
        ReleaseRequest {
            owner: lease.holder().to_owned(),
            token: lease.token(),
        }
    }
}

impl From<&SemaphoreLease> for SemaphoreRenewRequest {
    fn from(lease: &SemaphoreLease) -> SemaphoreRenewRequest {
        SemaphoreRenewRequest {
            slot: lease.slot,
            lease: lease.into(),
        }
    }
}

impl From<&SemaphoreLease> for SemaphoreReleaseRequest {
    fn from(lease: &SemaphoreLease) -> SemaphoreReleaseRequest {
        SemaphoreReleaseRequest {
            slot: lease.slot,
            lease: lease.into(),
        }
    }
}

impl From<&Leadership> for ElectionRenewRequest {
    fn from(lease: &Leadership) -> ElectionRenewRequest {
        let RenewRequest {
            owner,
            token,
            ttl_ms,
        } = lease.into();
        ElectionRenewRequest {
            candidate: owner,
            term: token,
            ttl_ms,
        }
    }
}

impl From<&Leadership> for ResignRequest {
    fn from(lease: &Leadership) -> ResignRequest {
        let ReleaseRequest { owner, token } = lease.into();
        ResignRequest {
            candidate: owner,
            term: token,
        }
    }
}

/// Implements [`LeaseRequest`]: `Type(holder field, |request| holder
/// value, terms)`.
macro_rules! lease_requests {
    ($($ty:ident($field:literal, |$r:ident| $holder:expr, $terms:expr);)*) => {$(
        impl LeaseRequest for $ty {
            fn holder(&self) -> (&'static str, &str) {
                let $r = self;
                ($field, &$holder)
            }
            #[allow(unused_variables)]
            fn terms(&self) -> LeaseTerms {
                let $r = self;
                $terms
            }
        }
    )*};
}

lease_requests! {
    AcquireRequest("owner", |r| r.owner, r.terms.clone());
    SemaphoreAcquireRequest("owner", |r| r.owner, r.terms.clone());
    RwAcquireRequest("owner", |r| r.owner, r.terms.clone());
    CampaignRequest("candidate", |r| r.candidate, r.terms.clone());
    MultiLockAcquireRequest("owner", |r| r.owner, r.terms.clone());
    RenewRequest("owner", |r| r.owner, LeaseTerms::ttl(r.ttl_ms));
    SemaphoreRenewRequest("owner", |r| r.lease.owner, LeaseTerms::ttl(r.lease.ttl_ms));
    ElectionRenewRequest("candidate", |r| r.candidate, LeaseTerms::ttl(r.ttl_ms));
    MultiLockRenewRequest("owner", |r| r.owner, LeaseTerms::ttl(r.ttl_ms));
    ReleaseRequest("owner", |r| r.owner, LeaseTerms::default());
    SemaphoreReleaseRequest("owner", |r| r.lease.owner, LeaseTerms::default());
    ResignRequest("candidate", |r| r.candidate, LeaseTerms::default());
    MultiLockReleaseRequest("owner", |r| r.owner, LeaseTerms::default());
}

/// Implements [`Granted`]: `Type(key, holder, token, ttl_ms fields)`.
macro_rules! granted {
    ($($ty:ident($key:ident, $holder:ident, $token:ident, $ttl:ident);)*) => {$(
        impl Granted for $ty {
            fn key(&self) -> &str {
                &self.$key
            }
            fn holder(&self) -> &str {
                &self.$holder
            }
            fn token(&self) -> u64 {
                self.$token
            }
            fn ttl_ms(&self) -> u64 {
                self.$ttl
            }
        }
    )*};
}

granted! {
    Lease(key, owner, token, ttl_ms);
    SemaphoreLease(key, owner, token, ttl_ms);
    RwLease(key, owner, token, ttl_ms);
    Leadership(name, leader, term, ttl_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_renews_and_releases_by_its_own_owner_and_token() {
        let lease = SemaphoreLease {
            key: "pool".into(),
            storage_key: "pool".into(),
            owner: "w".into(),
            slot: 3,
            permits: 5,
            token: 9,
            ttl_ms: 1000,
            expires_at: "2026-11-21T10:00:00.000Z".into(),
        };
        let renewal = serde_json::to_value(SemaphoreRenewRequest::from(&lease)).unwrap();
        assert_eq!(
            renewal,
            serde_json::json!({"slot": 3, "owner": "w", "token": 9, "ttl_ms": 1000})
        );
        let release = serde_json::to_value(SemaphoreReleaseRequest::from(&lease)).unwrap();
        assert_eq!(
            release,
            serde_json::json!({"slot": 3, "owner": "w", "token": 9})
        );
        assert_eq!(
            (lease.token(), lease.ttl_ms(), lease.key()),
            (9, 1000, "pool")
        );
    }

    #[test]
    fn requests_say_who_asks_and_on_what_terms() {
        let campaign: CampaignRequest = serde_json::from_str(
            r#"{"candidate": "n", "ttl_ms": 500, "wait_ms": null, "priority": 3}"#,
        )
        .unwrap();
        assert_eq!(campaign.holder(), ("candidate", "n"));
        assert_eq!(
            campaign.terms(),
            LeaseTerms {
                ttl_ms: Some(500),
                wait_ms: None,
                priority: Some(3),
                session: None,
            }
        );
        let renew: SemaphoreRenewRequest =
            serde_json::from_str(r#"{"owner": "o", "slot": 1, "token": 2, "ttl_ms": 700}"#)
                .unwrap();
        assert_eq!(renew.holder(), ("owner", "o"));
        assert_eq!(renew.terms(), LeaseTerms::ttl(Some(700)));
    }
}
