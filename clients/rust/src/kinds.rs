//! What each lease kind adds to the one generic model: the body of its
//! acquire (a semaphore's size, an rwlock's mode) and the refusal that
//! means "taken now". Everything else (paths, renewals, releases, status,
//! listing) comes from the API's [`LeaseKind`].

use lockbroker_api::{
    AcquireRequest, CampaignRequest, Election, ErrorCode, LeaseKind, LeaseTerms, Lock,
    RwAcquireRequest, RwLock, RwMode, Semaphore, SemaphoreAcquireRequest,
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
}

impl Kind for Lock {
    type Extra = ();

    fn request(owner: String, terms: LeaseTerms, (): &()) -> AcquireRequest {
        AcquireRequest { owner, terms }
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
}

impl Kind for Election {
    type Extra = ();

    fn request(candidate: String, terms: LeaseTerms, (): &()) -> CampaignRequest {
        CampaignRequest { candidate, terms }
    }
}

/// Kinds whose leases' events are recorded: `GET /v1/{kind}/{key}/history`
/// (not elections).
pub trait Recorded: Kind {}

impl Recorded for Lock {}
impl Recorded for Semaphore {}
impl Recorded for RwLock {}
