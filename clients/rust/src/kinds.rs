//! What each lease kind adds to the one generic model: the body of its
//! acquire (a semaphore's size, an rwlock's mode), the refusal that means
//! "taken now", and where its status shows a holder's lease. Everything
//! else (paths, renewals, releases, status, listing) comes from the API's
//! [`LeaseKind`].

use lockbroker_api::{
    AcquireRequest, CampaignRequest, Election, ElectionStatus, ErrorCode, LeaseKind, LeaseTerms,
    Lock, LockStatus, ReleaseRequest, ResignRequest, RwAcquireRequest, RwLock, RwLockStatus,
    RwMode, Semaphore, SemaphoreAcquireRequest, SemaphoreReleaseRequest, SemaphoreStatus,
};

/// A [`LeaseKind`] the client can acquire, guard and list: [`Lock`],
/// [`Semaphore`], [`RwLock`], [`Election`].
pub trait Kind: LeaseKind {
    /// What an acquire asks besides the owner and the terms: a semaphore's
    /// `permits`, an rwlock's [`RwMode`]; nothing for locks and elections.
    type Extra: Send + Sync + 'static;
    /// The refusal that means the lease is taken now (`lock_held`;
    /// semaphores: `semaphore_full`).
    const BUSY: ErrorCode = ErrorCode::LockHeld;

    /// The acquire request of `owner` on `terms`.
    fn request(owner: String, terms: LeaseTerms, extra: &Self::Extra) -> Self::Acquire;

    /// The release of the lease `owner` holds in `status`, if it holds
    /// one: how an acquire whose answer never came gives back what it may
    /// have been granted.
    fn held_by(status: &Self::Status, owner: &str) -> Option<Self::Release>;
}

/// The release of `owner`'s lease of `token`.
fn release(owner: &str, token: u64) -> ReleaseRequest {
    ReleaseRequest {
        owner: owner.to_owned(),
        token,
    }
}

impl Kind for Lock {
    type Extra = ();

    fn request(owner: String, terms: LeaseTerms, (): &()) -> AcquireRequest {
        AcquireRequest { owner, terms }
    }

    fn held_by(status: &LockStatus, owner: &str) -> Option<ReleaseRequest> {
        match (&status.owner, status.token) {
            (Some(holder), Some(token)) if status.held && holder == owner => {
                Some(release(owner, token))
            }
            _ => None,
        }
    }
}

impl Kind for Semaphore {
    /// The semaphore's size.
    type Extra = u32;
    const BUSY: ErrorCode = ErrorCode::SemaphoreFull;

    fn request(owner: String, terms: LeaseTerms, permits: &u32) -> SemaphoreAcquireRequest {
        SemaphoreAcquireRequest {
            owner,
            permits: *permits,
            terms,
        }
    }

    fn held_by(status: &SemaphoreStatus, owner: &str) -> Option<SemaphoreReleaseRequest> {
        let holder = status.holders.iter().find(|h| h.owner == owner)?;
        Some(SemaphoreReleaseRequest {
            slot: holder.slot,
            lease: release(owner, holder.token),
        })
    }
}

impl Kind for RwLock {
    type Extra = RwMode;

    fn request(owner: String, terms: LeaseTerms, mode: &RwMode) -> RwAcquireRequest {
        RwAcquireRequest {
            owner,
            mode: *mode,
            terms,
        }
    }

    fn held_by(status: &RwLockStatus, owner: &str) -> Option<ReleaseRequest> {
        let holder = status
            .writer
            .iter()
            .chain(&status.readers)
            .find(|h| h.owner == owner)?;
        Some(release(owner, holder.token))
    }
}

impl Kind for Election {
    type Extra = ();

    fn request(candidate: String, terms: LeaseTerms, (): &()) -> CampaignRequest {
        CampaignRequest { candidate, terms }
    }

    fn held_by(status: &ElectionStatus, candidate: &str) -> Option<ResignRequest> {
        match (&status.leader, status.term) {
            (Some(leader), Some(term)) if leader == candidate => Some(ResignRequest {
                candidate: candidate.to_owned(),
                term,
            }),
            _ => None,
        }
    }
}

/// Kinds whose leases' events are recorded: `GET /v1/{kind}/{key}/history`
/// (not elections).
pub trait Recorded: Kind {}

impl Recorded for Lock {}
impl Recorded for Semaphore {}
impl Recorded for RwLock {}
