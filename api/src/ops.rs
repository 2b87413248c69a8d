//! Operations: liveness and readiness.

use serde::{Deserialize, Serialize};

/// `GET /healthz` (`ok`) and `GET /readyz` (`ready`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Status {
    /// `ok` (the process is up) or `ready` (database reachable, policies
    /// loaded).
    pub status: String,
}
