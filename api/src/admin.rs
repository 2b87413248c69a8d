//! `/v1/admin`: tenants and the policies in force.

use serde::{Deserialize, Serialize};

/// `GET /v1/admin/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantList {
    /// Every configured tenant.
    pub tenants: Vec<TenantInfo>,
}

/// A tenant and the policy in force (also the answer to a policy upload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantInfo {
    /// The tenant's name.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9-]{1,64}$"))]
    pub name: String,
    /// Longest lease the tenant may ask for, in milliseconds.
    #[cfg_attr(feature = "openapi", schema(minimum = 100))]
    pub max_ttl_ms: u64,
    /// Most requests the tenant may have waiting at once.
    pub max_waiters: u64,
    /// The policy in force.
    pub policy: PolicyInfo,
    /// Why the last load of the tenant's policy failed (the previous policy
    /// stays in force); null when it succeeded.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_error: Option<String>,
    /// The shadow candidate running beside the policy in force (`PUT
    /// .../policy?mode=shadow`), deciding nothing; null when none is
    /// loaded.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub shadow: Option<ShadowCandidate>,
}

/// A tenant's policy in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyInfo {
    /// The component's file in `policy_dir`; null for the built-in policy.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub file: Option<String>,
    /// The name the policy gives itself (`meta.describe`); `builtin` for the
    /// built-in policy.
    pub name: String,
    /// The policy's own version.
    pub version: String,
    /// sha256 of the component, lowercase hex; null for the built-in policy.
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, pattern = "^[0-9a-f]{64}$")
    )]
    pub sha256: Option<String>,
    /// When the policy in force was loaded, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub loaded_at: String,
    /// The version's id (as in `GET .../policy/versions`): the first 12
    /// hex digits of `sha256`, `builtin` for the built-in policy; null
    /// while the tenant's policy file is loading or has never loaded.
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, pattern = "^([0-9a-f]{12}|builtin)$")
    )]
    #[serde(default)]
    pub id: Option<String>,
}

/// `GET /v1/admin/tenants/{tenant}/policy/versions` (and the answer to a
/// rollback): the versions of a tenant's policy the broker keeps, compiled,
/// to roll back to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyVersions {
    /// The tenant.
    pub tenant: String,
    /// At most 5, the one in force included, newest first (by when each
    /// was last put in force).
    pub versions: Vec<PolicyVersion>,
}

/// One kept version of a tenant's policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyVersion {
    /// The first 12 hex digits of `sha256`; `builtin` for the built-in
    /// policy. A rollback names a version by it (or by its `sha256`).
    #[cfg_attr(feature = "openapi", schema(pattern = "^([0-9a-f]{12}|builtin)$"))]
    pub id: String,
    /// sha256 of the component, lowercase hex; null for the built-in policy.
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, pattern = "^[0-9a-f]{64}$")
    )]
    pub sha256: Option<String>,
    /// The name the policy gives itself (`meta.describe`).
    pub name: String,
    /// The policy's own version.
    pub version: String,
    /// When it was last put in force, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub loaded_at: String,
    /// How it was last put in force.
    pub loaded_by: PolicyLoadedBy,
    /// True for the version in force.
    pub active: bool,
}

/// How a policy version was put in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PolicyLoadedBy {
    /// The broker's start (the policy file, or the built-in policy).
    Startup,
    /// A change of the policy file (hot reload or config reload).
    File,
    /// `PUT /v1/admin/tenants/{tenant}/policy`.
    Upload,
    /// `POST /v1/admin/tenants/{tenant}/policy/rollback`.
    Rollback,
    /// `POST /v1/admin/tenants/{tenant}/policy/promote`: a shadow
    /// candidate made active.
    Promote,
}

/// `POST /v1/admin/tenants/{tenant}/policy/rollback`: which kept version to
/// put back in force. The body may be absent: the previous version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RollbackRequest {
    /// A kept version's `id` (or `sha256`); absent or null: the previous
    /// version (the newest one not in force).
    #[serde(default)]
    pub version: Option<String>,
}

/// `GET /v1/admin/tenants/{tenant}/policy/shadow` (and, as its last
/// report, the answer to its `DELETE`): how a shadow candidate's answers
/// compare with those of the policy in force, on live traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyShadow {
    /// The tenant.
    pub tenant: String,
    /// The candidate.
    pub candidate: ShadowCandidate,
    /// The id of the version in force now (the one compared against);
    /// null while the tenant's policy file is loading or has never loaded.
    #[cfg_attr(
        feature = "openapi",
        schema(required = true, pattern = "^([0-9a-f]{12}|builtin)$")
    )]
    pub active: Option<String>,
    /// The candidate's answers so far, per export, since it was loaded.
    pub counts: ShadowCounts,
    /// The latest disagreements (at most 10), newest first.
    pub disagreements: Vec<ShadowDisagreement>,
}

/// A shadow candidate: a policy version loaded to run beside the one in
/// force without deciding anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowCandidate {
    /// The first 12 hex digits of `sha256`: its version id once promoted.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{12}$"))]
    pub id: String,
    /// sha256 of the component, lowercase hex.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{64}$"))]
    pub sha256: String,
    /// The name the policy gives itself (`meta.describe`).
    pub name: String,
    /// The policy's own version.
    pub version: String,
    /// When it was loaded as the shadow, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub loaded_at: String,
}

/// A shadow candidate's answers so far, per export of the policy world.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowCounts {
    /// `storage-key`: the storage key (or the rejection) of a client's key.
    pub naming: ShadowCount,
    /// `pick-next`: which waiter is granted next.
    pub fairness: ShadowCount,
    /// `next-delay`: how long a refused client waits before trying again.
    pub backoff: ShadowCount,
    /// `timing`: a key's lock-delay and minimum hold (asked only while the
    /// policy in force exports `timing`).
    pub timing: ShadowCount,
    /// `detect`: whether a session's wait for a key is checked for a
    /// deadlock (asked only while the policy in force exports
    /// `deadlocks`).
    pub deadlocks: ShadowCount,
}

/// How one export's calls went for a shadow candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowCount {
    /// Calls the candidate answered as the policy in force did (two
    /// rejections of a key agree, whatever their reasons).
    pub agree: u64,
    /// Calls it answered otherwise.
    pub disagree: u64,
    /// Calls it trapped, overran its time or memory budget, or answered
    /// out of range on (never felt by requests).
    pub failed: u64,
    /// Calls not put to it because it fell behind (its queue was full) or
    /// had used its share of CPU (a tenth of a core on average).
    pub dropped: u64,
}

/// An export of the policy world, as shadow reports name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ShadowExport {
    Naming,
    Fairness,
    Backoff,
    Timing,
    Deadlocks,
}

/// One call on which a shadow candidate disagreed with the policy in
/// force: its input and both answers, in words (keys cut to 64 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowDisagreement {
    /// The export called.
    pub export: ShadowExport,
    /// When the candidate answered, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub at: String,
    /// The call's input: the key, the waiters, the contention.
    pub input: String,
    /// The answer of the policy in force (the one used).
    pub active: String,
    /// The candidate's answer.
    pub candidate: String,
}

/// `POST /v1/admin/tenants/{tenant}/locks/{key}/release`: the lease that
/// was ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForceReleaseResponse {
    /// The tenant.
    pub tenant: String,
    /// The key as sent.
    pub key: String,
    /// The storage key the tenant's naming policy mapped it to.
    pub storage_key: String,
    /// The holder whose lease was ended.
    pub owner: String,
    /// The token of the ended lease; the next grant's token is greater.
    pub token: u64,
    /// True when the key went straight to a queued waiter.
    pub handed_off: bool,
}

/// `POST /v1/admin/reload`: the config file was read again and what could
/// change live is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReloadReport {
    /// Always true in a 200 answer (a refused config is a 422).
    pub reloaded: bool,
    /// What changed and is in force now, in words: `tenant team-b added`,
    /// `tenant team-a removed`, `tenant team-a: api_keys, max_held`,
    /// `admin_token`, `metrics_token`, `tls files`. Empty when nothing did.
    pub changed: Vec<String>,
    /// Settings that changed in the file but take a restart to apply
    /// (`listen`, `database_url`, `tenant team-a: database_url`, ...): not
    /// applied, the old values stay in force.
    pub needs_restart: Vec<String>,
}

/// `GET /v1/admin/reload`: the config in force and how the last reload
/// went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReloadStatus {
    /// The config file reloads read; null when the broker started without
    /// one (development defaults: nothing to reload).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub file: Option<String>,
    /// When the config in force was read (start or the last reload that
    /// succeeded), UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub loaded_at: String,
    /// The last reload since start, null if none.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last: Option<ReloadAttempt>,
}

/// One reload (by SIGHUP or `POST /v1/admin/reload`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReloadAttempt {
    /// When it was made, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub at: String,
    /// `sighup` or `api`.
    pub by: String,
    /// Whether the new config was taken.
    pub reloaded: bool,
    /// As in [`ReloadReport`] (empty when refused).
    pub changed: Vec<String>,
    /// As in [`ReloadReport`] (empty when refused).
    pub needs_restart: Vec<String>,
    /// Why the new config was refused; null when it was taken.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<String>,
}
