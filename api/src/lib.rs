//! The wire format of lockbroker's HTTP API (`/work/shared/API.md`), as
//! types: one definition that the broker parses into and answers with,
//! that clients send and read, and from which the OpenAPI document is
//! generated (feature `openapi`), so the three cannot drift apart.
//!
//! - [`kind`]: every lease kind as the wire sees it ([`LeaseKind`]: its
//!   URL segment, actions and types), and what every request says
//!   ([`LeaseRequest`]) and every grant is ([`Granted`]).
//! - [`lease`]: the lease terms every acquire carries ([`LeaseTerms`]),
//!   and the lock's requests and answers ([`semaphore`], [`rwlock`] and
//!   [`election`] build theirs from the same parts).
//! - [`semaphore`], [`election`]: the semaphore and election bodies,
//!   including the Server-Sent Event of `observe`.
//! - [`multilock`]: several lock keys at once, all or none.
//! - [`rwlock`]: reader-writer locks (many readers or one writer).
//! - [`session`]: sessions, which hold many leases alive with one
//!   keepalive and end them all at once.
//! - [`fencing`]: whether a token is still the live grant (validate).
//! - [`history`]: a lock's recorded grants, releases, expiries, handoffs.
//! - [`admin`], [`ops`]: tenants and policies (and force-release); health
//!   and readiness.
//! - [`error`]: the error envelope and every error code.
//! - [`limits`]: the numeric limits the broker enforces (one constant each).
//!
//! Optional fields may be absent or `null`; both mean the default. The
//! broker also reads a whole-number float (`30000.0`) as an integer, since
//! JSON Schema counts it as one (its `http::json`).

pub mod admin;
pub mod election;
pub mod error;
pub mod fencing;
pub mod history;
pub mod kind;
pub mod lease;
pub mod limits;
pub mod multilock;
pub mod ops;
pub mod rwlock;
pub mod semaphore;
pub mod session;
pub mod waiting;

pub use admin::{
    ForceReleaseResponse, PolicyInfo, PolicyLoadedBy, PolicyShadow, PolicyVersion, PolicyVersions,
    ReloadAttempt, ReloadReport, ReloadStatus, RollbackRequest, ShadowCandidate, ShadowCount,
    ShadowCounts, ShadowDisagreement, ShadowExport, TenantInfo, TenantList,
};
pub use election::{
    CampaignRequest, ElectionEvent, ElectionRenewRequest, ElectionStatus, LeaderEvent, Leadership,
    ResignRequest, ResignResponse,
};
pub use error::{CycleStep, ErrorBody, ErrorCode, ErrorDetail};
pub use fencing::{ValidateRequest, Validity};
pub use history::{
    EndReason, LockEvent, LockEventKind, LockHistory, ResourceKind, StreamEvent,
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT,
};
pub use kind::{Election, Granted, LeaseKind, LeaseRequest, Lock, RwLock, Semaphore, Wire};
pub use lease::{
    AcquireRequest, Lease, LeaseTerms, LockStatus, Page, ReleaseRequest, ReleaseResponse,
    RenewRequest,
};
pub use limits::*;
pub use multilock::{
    HeldKey, MultiLockAcquireRequest, MultiLockEntry, MultiLockLease, MultiLockReleaseRequest,
    MultiLockReleaseResponse, MultiLockReleased, MultiLockRenewRequest,
};
pub use ops::Status;
pub use rwlock::{RwAcquireRequest, RwHolder, RwLease, RwLockStatus, RwMode};
pub use semaphore::{
    SemaphoreAcquireRequest, SemaphoreHolder, SemaphoreLease, SemaphoreReleaseRequest,
    SemaphoreRenewRequest, SemaphoreStatus,
};
pub use session::{
    CreateSessionRequest, Session, SessionClosed, SessionKeepalive, SessionLease, SessionStatus,
    SESSION_DEFAULT_TTL_MS, SESSION_MAX_LOCK_DELAY_MS, SESSION_MAX_NAME_BYTES, SESSION_MAX_TTL_MS,
    SESSION_MIN_TTL_MS,
};
pub use waiting::{
    Contention, HeldByKind, HotKey, KeyWaiters, QueuedWaiter, RefusedWait, WaitForEdge, WaitParty,
    WaitsFor, CONTENTION_DEFAULT_TOP, CONTENTION_DEFAULT_WINDOW_S, CONTENTION_MAX_TOP,
    CONTENTION_MAX_WINDOW_S, REFUSED_MAX, REFUSED_WINDOW_S, WAITERS_DEFAULT_LIMIT,
    WAITERS_MAX_LIMIT,
};
