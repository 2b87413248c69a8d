//! Token validation (a sequencer check, as Chubby's): whether a fencing
//! token is still the live grant of a lock.

use serde::{Deserialize, Serialize};

/// `POST /v1/locks/{key}/validate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ValidateRequest {
    /// The fencing token to check.
    pub token: u64,
}

/// Whether the token is the live grant, and which token is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Validity {
    /// True when the token is the lock's current grant and its lease has
    /// not expired (by the database clock) at the time of the check.
    pub valid: bool,
    /// The live grant's token; null when nobody holds the lock.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub token: Option<u64>,
}
