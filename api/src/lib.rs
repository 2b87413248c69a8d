//! The wire format of lockbroker's HTTP API (`/work/shared/API.md`), as
//! types: one definition that the broker parses into and answers with,
//! that clients send and read, and from which the OpenAPI document is
//! generated (feature `openapi`), so the three cannot drift apart.
//!
//! - [`lease`]: the lease requests and answers the three resources share in
//!   shape (locks here; [`semaphore`] and [`election`] add their fields).
//! - [`semaphore`], [`election`]: the semaphore and election bodies,
//!   including the Server-Sent Event of `observe`.
//! - [`multilock`]: several lock keys at once, all or none.
//! - [`rwlock`]: reader-writer locks (many readers or one writer).
//! - [`fencing`]: whether a token is still the live grant (validate).
//! - [`history`]: a lock's recorded grants, releases, expiries, handoffs.
//! - [`admin`], [`ops`]: tenants and policies (and force-release); health
//!   and readiness.
//! - [`error`]: the error envelope and every error code.
//! - [`limits`]: the numeric limits the broker enforces (one constant each).
//! - `num`: integer fields that also accept whole-number floats (`1283.0`),
//!   since JSON Schema counts those as integers.
//!
//! Optional fields may be absent or `null`; both mean the default.

pub mod admin;
pub mod election;
pub mod error;
pub mod fencing;
pub mod history;
pub mod lease;
pub mod limits;
pub mod multilock;
mod num;
pub mod ops;
pub mod rwlock;
pub mod semaphore;

pub use admin::{ForceReleaseResponse, PolicyInfo, TenantInfo, TenantList};
pub use election::{
    CampaignRequest, ElectionEvent, ElectionRenewRequest, ElectionStatus, LeaderEvent, Leadership,
    ResignRequest, ResignResponse,
};
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use fencing::{ValidateRequest, Validity};
pub use history::{
    LockEvent, LockEventKind, LockHistory, HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT,
};
pub use lease::{AcquireRequest, Lease, LockStatus, ReleaseRequest, ReleaseResponse, RenewRequest};
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
