//! `/v1/admin`: tenants and their policies (admin token only).

use std::{future::Future, pin::Pin};

use hyper::{body::Incoming, Method, Request};
use lockbroker_api::{
    ErrorBody, ErrorCode, ForceReleaseResponse, PolicyInfo, PolicyLoadedBy, PolicyShadow,
    PolicyVersion, PolicyVersions, ReloadAttempt, ReloadReport, ReloadStatus, RollbackRequest,
    ShadowCandidate, ShadowCount, ShadowCounts, ShadowDisagreement, ShadowExport, TenantInfo,
    TenantList,
};

use super::{
    ok,
    openapi::{PolicyUploadQuery, TenantKeyPath, TenantPath, WasmComponent},
    request::{authenticate_admin, name_lock, parse_json, query_pairs, read_body, unknown_param},
    resource::{list, with_kind, ForKind, Resource},
    responses::{
        AdminErrors, BadRequest, InvalidKey, NoShadow, NotFound, PolicyError, TooLarge, Unavailable,
    },
    waiting, ApiError, Response,
};
use crate::{
    app::App,
    policy::{reload::PromoteError, shadow, Loaded, LoadedBy, Shadow},
    reconfigure::{Attempt, Trigger},
    store::Kind,
    tenant::Tenant,
};

/// Routes `/v1/admin/...` after the admin token is checked.
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    tail: &[&str],
) -> Result<Response, ApiError> {
    authenticate_admin(app, req.headers())?;
    match (req.method(), tail) {
        (&Method::POST, ["reload"]) => Ok(ok(&reload(app).await?)),
        (&Method::GET, ["reload"]) => Ok(ok(&reload_status(app).await)),
        (_, ["reload"]) => Err(ApiError::method_not_allowed("GET, POST")),
        (&Method::GET, ["tenants"]) => Ok(ok(&tenants(app))),
        (_, ["tenants"]) => Err(ApiError::method_not_allowed("GET")),
        (&Method::PUT, ["tenants", name, "policy"]) => {
            let name = (*name).to_owned();
            Ok(ok(&upload_policy(app, req, &name).await?))
        }
        (_, ["tenants", _, "policy"]) => Err(ApiError::method_not_allowed("PUT")),
        (&Method::GET, ["tenants", name, "policy", "versions"]) => {
            Ok(ok(&policy_versions(app, name)?))
        }
        (_, ["tenants", _, "policy", "versions"]) => Err(ApiError::method_not_allowed("GET")),
        (&Method::POST, ["tenants", name, "policy", "rollback"]) => {
            let name = (*name).to_owned();
            Ok(ok(&rollback_policy(app, req, &name).await?))
        }
        (_, ["tenants", _, "policy", "rollback"]) => Err(ApiError::method_not_allowed("POST")),
        (&Method::GET, ["tenants", name, "policy", "shadow"]) => Ok(ok(&shadow_report(app, name)?)),
        (&Method::DELETE, ["tenants", name, "policy", "shadow"]) => {
            Ok(ok(&drop_shadow(app, name)?))
        }
        (_, ["tenants", _, "policy", "shadow"]) => Err(ApiError::method_not_allowed("GET, DELETE")),
        (&Method::POST, ["tenants", name, "policy", "promote"]) => {
            Ok(ok(&promote_policy(app, name).await?))
        }
        (_, ["tenants", _, "policy", "promote"]) => Err(ApiError::method_not_allowed("POST")),
        (&Method::POST, ["tenants", name, "locks", key, "release"]) => {
            Ok(ok(&force_release(app, name, key).await?))
        }
        (_, ["tenants", _, "locks", _, "release"]) => Err(ApiError::method_not_allowed("POST")),
        (&Method::DELETE, ["tenants", name, "sessions", id]) => {
            Ok(ok(&force_close_session(app, name, id).await?))
        }
        (_, ["tenants", _, "sessions", _]) => Err(ApiError::method_not_allowed("DELETE")),
        (&Method::GET, ["tenants", name, "contention"]) => {
            Ok(ok(&admin_contention(app, name, req.uri().query()).await?))
        }
        (_, ["tenants", _, "contention"]) => Err(ApiError::method_not_allowed("GET")),
        (&Method::GET, ["tenants", name, "waits-for"]) => {
            Ok(ok(&admin_waits_for(app, name, req.uri().query()).await?))
        }
        (_, ["tenants", _, "waits-for"]) => Err(ApiError::method_not_allowed("GET")),
        (method, ["tenants", name, kind, key, "waiters"]) => {
            let query = req.uri().query();
            let queue = TenantQueue {
                app,
                name,
                key,
                query,
            };
            match with_kind(kind, queue) {
                Some(_) if method != Method::GET => Err(ApiError::method_not_allowed("GET")),
                Some(shown) => shown.await,
                None => Err(ApiError::not_found("no such admin path")),
            }
        }
        (method, ["tenants", name, kind]) => {
            let query = req.uri().query();
            let list = TenantsList { app, name, query };
            match with_kind(kind, list) {
                Some(_) if method != Method::GET => Err(ApiError::method_not_allowed("GET")),
                Some(listed) => listed.await,
                None => Err(ApiError::not_found("no such admin path")),
            }
        }
        _ => Err(ApiError::not_found("no such admin path")),
    }
}

/// A tenant's listing of one kind, as the admin asks for it.
struct TenantsList<'a> {
    app: &'a App,
    name: &'a str,
    query: Option<&'a str>,
}

impl<'a> ForKind for TenantsList<'a> {
    type Output = Pin<Box<dyn Future<Output = Result<Response, ApiError>> + Send + 'a>>;
    fn call<R: Resource>(self) -> Self::Output {
        Box::pin(async move {
            let tenant = self
                .app
                .live()
                .tenants
                .get(self.name)
                .cloned()
                .ok_or_else(|| ApiError::not_found(format!("no tenant {:?}", self.name)))?;
            list::<R>(self.app, &tenant, self.query).await
        })
    }
}

/// A tenant's queue of one key, as the admin asks for it.
struct TenantQueue<'a> {
    app: &'a App,
    name: &'a str,
    key: &'a str,
    query: Option<&'a str>,
}

impl<'a> ForKind for TenantQueue<'a> {
    type Output = Pin<Box<dyn Future<Output = Result<Response, ApiError>> + Send + 'a>>;
    fn call<R: Resource>(self) -> Self::Output {
        Box::pin(async move {
            let tenant = live_tenant(self.app, self.name)?;
            let limit = waiting::limit(self.query)?;
            let lock = name_lock(tenant.clone(), R::KIND, self.key).await?;
            Ok(ok(
                &waiting::queue(self.app.engine(&tenant), &lock, limit).await?
            ))
        })
    }
}

/// Show a tenant's most contended keys (admin)
///
/// `GET /v1/contention` for any tenant.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants/{tenant}/contention",
    operation_id = "adminGetContention",
    tag = "admin",
    params(
        ("tenant" = String, Path, description = "The tenant's name from the config.",
            example = "team-a"),
        ("prefix" = Option<String>, Query, description = "As `GET /v1/contention`."),
        ("window_s" = Option<u64>, Query, description = "As `GET /v1/contention`."),
        ("top" = Option<u32>, Query, description = "As `GET /v1/contention`."),
    ),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The hottest keys.", body = lockbroker_api::Contention),
        (status = 400, response = BadRequest),
        AdminErrors,
        (status = 404, response = NotFound),
        (status = 503, response = Unavailable),
    )
)]
async fn admin_contention(
    app: &App,
    name: &str,
    query: Option<&str>,
) -> Result<lockbroker_api::Contention, ApiError> {
    let tenant = live_tenant(app, name)?;
    waiting::hottest(app, &tenant, query).await
}

/// Show who waits for whom in a tenant (admin)
///
/// `GET /v1/waits-for` for any tenant.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants/{tenant}/waits-for",
    operation_id = "adminGetWaitsFor",
    tag = "admin",
    params(
        ("tenant" = String, Path, description = "The tenant's name from the config.",
            example = "team-a"),
        ("prefix" = Option<String>, Query, description = "As `GET /v1/waits-for`."),
        ("limit" = Option<u32>, Query, description = "As `GET /v1/waits-for`."),
    ),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The graph.", body = lockbroker_api::WaitsFor),
        (status = 400, response = BadRequest),
        AdminErrors,
        (status = 404, response = NotFound),
        (status = 503, response = Unavailable),
    )
)]
async fn admin_waits_for(
    app: &App,
    name: &str,
    query: Option<&str>,
) -> Result<lockbroker_api::WaitsFor, ApiError> {
    let tenant = live_tenant(app, name)?;
    waiting::graph_of(app, &tenant, query).await
}

/// Replace a tenant's policy, or load a shadow candidate
///
/// Validates the WebAssembly component (the `lockbroker:policy@0.1.0`
/// world, then a self-check call of each export) and swaps it in without a
/// restart. Requests already in flight finish with the old policy.
///
/// With `?mode=shadow` the component, validated the same way, is loaded as
/// the tenant's shadow candidate instead (replacing any shadow before): it
/// runs beside the policy in force on live traffic and decides nothing.
/// Each naming, fairness and backoff call (and timing, while the policy in
/// force exports it) is also put to the candidate, off the request's path
/// (a bounded queue, and at most a tenth of a core on average; calls that
/// do not fit are dropped, counted), under
/// the tenant's time and memory limits; its answers are compared with
/// those of the policy in force (`GET .../policy/shadow`, and
/// `lockbroker_policy_shadow_total` in `/metrics`). A candidate that traps
/// or overruns is counted and never felt by requests. Promote it with
/// `POST .../policy/promote`. A shadow survives reloads of the policy in
/// force, not a restart of the broker.
#[utoipa::path(
    put,
    path = "/v1/admin/tenants/{tenant}/policy",
    operation_id = "putPolicy",
    tag = "admin",
    params(TenantPath, PolicyUploadQuery),
    request_body(content = WasmComponent, content_type = "application/wasm",
        description = "The policy component's bytes."),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The new policy is in force; `policy.sha256` is its digest \
(with `mode=shadow`: the policy in force is unchanged, and `shadow` is the candidate).",
            body = TenantInfo),
        AdminErrors,
        (status = 400, description = "`bad_request`: an empty body, a `mode` other than \
`active` or `shadow`, or another query parameter.",
            body = ErrorBody,
            example = json!({"error": {"code": "bad_request",
                "message": "mode must be active or shadow (got \"shadwo\")"}})),
        (status = 404, response = NotFound),
        (status = 413, response = TooLarge),
        (status = 422, description = "`invalid_policy`: the component is invalid, imports \
anything, traps in its self-check, or exports the wrong interface; the reason is the message. \
The old policy stays in force (and the reason shows as `last_error` in `GET \
/v1/admin/tenants`). An upload for a tenant with a `policy` file also replaces that file, so it \
survives a restart.",
            body = ErrorBody,
            example = json!({"error": {"code": "invalid_policy",
                "message": "the component does not export lockbroker:policy/naming@0.1.0"}})),
    )
)]
async fn upload_policy(
    app: &App,
    req: Request<Incoming>,
    name: &str,
) -> Result<TenantInfo, ApiError> {
    let tenant = live_tenant(app, name)?;
    // Before the body: a mistyped mode must not put a candidate in force.
    let mode = UploadMode::of(req.uri().query())?;
    let bytes = read_body(req, app.config.max_policy_bytes).await?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the body must be a policy component (application/wasm)",
        ));
    }
    if mode == UploadMode::Shadow {
        return load_shadow(app, &tenant, bytes.to_vec()).await;
    }
    let uploaded = app.reloader.upload(&tenant.policy, bytes.to_vec()).await;
    app.audit("policy_upload", uploaded.is_ok());
    match &uploaded {
        Ok(loaded) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_upload",
            tenant = %tenant.name,
            sha256 = loaded.sha256.as_deref().unwrap_or(""),
            "policy uploaded and in force"
        ),
        Err(err) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_upload",
            tenant = %tenant.name,
            error = %err.0,
            "policy upload refused"
        ),
    }
    uploaded?;
    Ok(tenant_info(&tenant))
}

/// What a policy upload is for (`?mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UploadMode {
    /// Put in force (the default).
    Active,
    /// Load as the shadow candidate.
    Shadow,
}

impl UploadMode {
    /// The mode a policy upload's query asks for.
    ///
    /// # Errors
    /// 400 for another mode or another parameter.
    fn of(query: Option<&str>) -> Result<UploadMode, ApiError> {
        let mut mode = UploadMode::Active;
        for (name, value) in query_pairs(query) {
            if name != "mode" {
                return Err(unknown_param(name, "mode"));
            }
            mode = match value {
                "active" => UploadMode::Active,
                "shadow" => UploadMode::Shadow,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "mode must be active or shadow (got {other:?})"
                    )))
                }
            };
        }
        Ok(mode)
    }
}

/// `PUT .../policy?mode=shadow`: loads `bytes` as `tenant`'s shadow.
async fn load_shadow(app: &App, tenant: &Tenant, bytes: Vec<u8>) -> Result<TenantInfo, ApiError> {
    let loaded = app.reloader.shadow(&tenant.policy, bytes).await;
    app.audit("policy_shadow", loaded.is_ok());
    match &loaded {
        Ok(shadow) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_shadow",
            tenant = %tenant.name,
            sha256 = shadow.candidate().sha256.as_deref().unwrap_or(""),
            "shadow policy loaded"
        ),
        Err(err) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_shadow",
            tenant = %tenant.name,
            error = %err.0,
            "shadow policy refused"
        ),
    }
    loaded?;
    Ok(tenant_info(tenant))
}

/// Show a tenant's shadow policy report
///
/// How the shadow candidate's answers compare with those of the policy in
/// force since it was loaded: per export, the calls it agreed on, disagreed
/// on, failed (trapped, overran its time or memory, answered out of range)
/// and the calls dropped because it fell behind or had used its share of
/// CPU; and the latest
/// disagreements (at most 10, newest first) with their inputs and both
/// answers, keys cut to 64 bytes. Counts are per broker.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants/{tenant}/policy/shadow",
    operation_id = "getPolicyShadow",
    tag = "admin",
    params(TenantPath),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The shadow candidate and its report.", body = PolicyShadow),
        AdminErrors,
        (status = 404, response = NoShadow),
    )
)]
fn shadow_report(app: &App, name: &str) -> Result<PolicyShadow, ApiError> {
    let tenant = live_tenant(app, name)?;
    let shadow = tenant.policy.shadow().ok_or_else(|| no_shadow(name))?;
    Ok(report_of(&tenant, &shadow))
}

/// Drop a tenant's shadow policy
///
/// Ends the shadow: the candidate is no longer asked. The policy in force
/// does not change. The answer is the shadow's last report.
#[utoipa::path(
    delete,
    path = "/v1/admin/tenants/{tenant}/policy/shadow",
    operation_id = "deletePolicyShadow",
    tag = "admin",
    params(TenantPath),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The shadow is dropped: its last report.", body = PolicyShadow),
        AdminErrors,
        (status = 404, response = NoShadow),
    )
)]
fn drop_shadow(app: &App, name: &str) -> Result<PolicyShadow, ApiError> {
    let tenant = live_tenant(app, name)?;
    let dropped = tenant.policy.set_shadow(None);
    app.audit("policy_shadow_drop", dropped.is_some());
    let shadow = dropped.ok_or_else(|| no_shadow(name))?;
    tracing::info!(
        target: "lockbroker::audit",
        action = "policy_shadow_drop",
        tenant = %tenant.name,
        sha256 = shadow.candidate().sha256.as_deref().unwrap_or(""),
        "shadow policy dropped"
    );
    Ok(report_of(&tenant, &shadow))
}

/// Promote a tenant's shadow policy
///
/// Puts the shadow candidate in force, as an upload of it would: it is
/// kept as a version (`loaded_by` `promote`; a rollback goes back to the
/// version it replaced), a tenant with a `policy` file gets its bytes in
/// that file (so it survives a restart), and history events name its
/// version from now on. The shadow ends. Requests in flight finish with
/// the policy they started with.
#[utoipa::path(
    post,
    path = "/v1/admin/tenants/{tenant}/policy/promote",
    operation_id = "promotePolicy",
    tag = "admin",
    params(TenantPath),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The candidate is in force: the kept versions, it first and \
`active`.", body = PolicyVersions),
        AdminErrors,
        (status = 404, response = NoShadow),
        (status = 422, description = "`invalid_policy`: the tenant's policy file could not be \
written. The policy in force and the shadow stay.",
            body = ErrorBody,
            example = json!({"error": {"code": "invalid_policy",
                "message": "cannot write plugins/dist/team-a.wasm: permission denied"}})),
    )
)]
async fn promote_policy(app: &App, name: &str) -> Result<PolicyVersions, ApiError> {
    let tenant = live_tenant(app, name)?;
    let promoted = app.reloader.promote(&tenant.policy).await;
    app.audit("policy_promote", promoted.is_ok());
    match &promoted {
        Ok(loaded) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_promote",
            tenant = %tenant.name,
            version = %loaded.id(),
            "shadow policy promoted"
        ),
        Err(err) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_promote",
            tenant = %tenant.name,
            error = %err,
            "shadow policy promote refused"
        ),
    }
    promoted?;
    Ok(versions_of(&tenant))
}

fn no_shadow(tenant: &str) -> ApiError {
    PromoteError::NoShadow(tenant.to_owned()).into()
}

/// A shadow candidate, as the admin API shows it.
fn candidate_of(loaded: &Loaded) -> ShadowCandidate {
    ShadowCandidate {
        id: loaded.id(),
        sha256: loaded.sha256.clone().unwrap_or_default(),
        name: loaded.descriptor.name.clone(),
        version: loaded.descriptor.version.clone(),
        loaded_at: loaded.loaded_at.clone(),
    }
}

/// `tenant`'s shadow and what it saw, as the admin API shows it.
fn report_of(tenant: &Tenant, shadow: &Shadow) -> PolicyShadow {
    let count = |export| {
        let c = shadow.counts(export);
        ShadowCount {
            agree: c.agree,
            disagree: c.disagree,
            failed: c.failed,
            dropped: c.dropped,
        }
    };
    let export = |e| match e {
        shadow::Export::Naming => ShadowExport::Naming,
        shadow::Export::Fairness => ShadowExport::Fairness,
        shadow::Export::Backoff => ShadowExport::Backoff,
        shadow::Export::Timing => ShadowExport::Timing,
        shadow::Export::Deadlocks => ShadowExport::Deadlocks,
    };
    let current = tenant.policy.current();
    PolicyShadow {
        tenant: tenant.name.clone(),
        candidate: candidate_of(shadow.candidate()),
        active: (!current.stand_in).then(|| current.id()),
        counts: ShadowCounts {
            naming: count(shadow::Export::Naming),
            fairness: count(shadow::Export::Fairness),
            backoff: count(shadow::Export::Backoff),
            timing: count(shadow::Export::Timing),
            deadlocks: count(shadow::Export::Deadlocks),
        },
        disagreements: shadow
            .examples()
            .into_iter()
            .map(|e| ShadowDisagreement {
                export: export(e.export),
                at: e.at,
                input: e.input,
                active: e.active,
                candidate: e.candidate,
            })
            .collect(),
    }
}

/// List a tenant's policy versions
///
/// The versions of the tenant's policy the broker keeps compiled (at most
/// 5, the one in force included), newest first by when each was last put
/// in force, to roll back to. Versions are per broker: each broker keeps
/// those it loaded (and, for a tenant with a `policy` file, those recorded
/// beside it in `policy_dir`).
#[utoipa::path(
    get,
    path = "/v1/admin/tenants/{tenant}/policy/versions",
    operation_id = "listPolicyVersions",
    tag = "admin",
    params(TenantPath),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The kept versions, newest first.", body = PolicyVersions),
        AdminErrors,
        (status = 404, response = NotFound),
    )
)]
fn policy_versions(app: &App, name: &str) -> Result<PolicyVersions, ApiError> {
    Ok(versions_of(&*live_tenant(app, name)?))
}

/// Roll a tenant's policy back
///
/// Puts a kept version of the tenant's policy back in force: the one the
/// body names, else the previous one (the newest not in force). The kept
/// compiled version is swapped in at once, without compiling (after a
/// restart, a kept version is compiled from its recorded bytes on first
/// use, from the compile cache); requests in flight finish with the policy
/// they started with. For a tenant with a `policy` file the file gets the
/// version's bytes, so the rollback survives a restart.
#[utoipa::path(
    post,
    path = "/v1/admin/tenants/{tenant}/policy/rollback",
    operation_id = "rollbackPolicy",
    tag = "admin",
    params(TenantPath),
    request_body(content = RollbackRequest, description = "Optional: the version to put back \
in force (absent: the previous one)."),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The version is in force: the kept versions, the one \
rolled back to first and `active`.", body = PolicyVersions),
        AdminErrors,
        (status = 400, response = BadRequest),
        (status = 404, description = "`not_found`: no such tenant, no such version kept, or no \
previous version to roll back to.",
            body = ErrorBody,
            example = json!({"error": {"code": "not_found",
                "message": "no version \"0123456789ab\" is kept"}})),
        (status = 422, description = "`invalid_policy`: the version had to be compiled from its \
recorded bytes and could not be (they are gone or damaged), or the policy file could not be \
written. The policy in force stays.",
            body = ErrorBody,
            example = json!({"error": {"code": "invalid_policy",
                "message": "the bytes of version 0123456789ab are gone"}})),
    )
)]
async fn rollback_policy(
    app: &App,
    req: Request<Incoming>,
    name: &str,
) -> Result<PolicyVersions, ApiError> {
    let tenant = live_tenant(app, name)?;
    let body = read_body(req, lockbroker_api::MAX_BODY_BYTES).await?;
    let request: RollbackRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RollbackRequest::default()
    } else {
        parse_json(&body)?
    };
    let rolled = app
        .reloader
        .rollback(&tenant.policy, request.version.as_deref())
        .await;
    app.audit("policy_rollback", rolled.is_ok());
    match &rolled {
        Ok(loaded) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_rollback",
            tenant = %tenant.name,
            version = %loaded.id(),
            "policy rolled back"
        ),
        Err(err) => tracing::info!(
            target: "lockbroker::audit",
            action = "policy_rollback",
            tenant = %tenant.name,
            error = %err,
            "policy rollback refused"
        ),
    }
    rolled?;
    Ok(versions_of(&tenant))
}

/// A configured tenant, or 404.
fn live_tenant(app: &App, name: &str) -> Result<std::sync::Arc<Tenant>, ApiError> {
    app.live()
        .tenants
        .get(name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no tenant {name:?}")))
}

/// A tenant's kept policy versions, as the admin API shows them.
pub fn versions_of(tenant: &Tenant) -> PolicyVersions {
    let current = tenant.policy.current();
    let active = (!current.stand_in).then(|| current.id());
    PolicyVersions {
        tenant: tenant.name.clone(),
        versions: tenant
            .policy
            .versions()
            .list()
            .iter()
            .map(|v| PolicyVersion {
                id: v.id.clone(),
                sha256: v.sha256.clone(),
                name: v.name.clone(),
                version: v.version.clone(),
                loaded_at: v.loaded_at.clone(),
                loaded_by: match v.loaded_by {
                    LoadedBy::Startup => PolicyLoadedBy::Startup,
                    LoadedBy::File => PolicyLoadedBy::File,
                    LoadedBy::Upload => PolicyLoadedBy::Upload,
                    LoadedBy::Rollback => PolicyLoadedBy::Rollback,
                    LoadedBy::Promote => PolicyLoadedBy::Promote,
                },
                active: active.as_deref() == Some(v.id.as_str()),
            })
            .collect(),
    }
}

/// Force-release a stuck lock
///
/// Ends the live lease of a tenant's lock, whoever holds it (every hold of
/// a re-entered lock). The key goes through the tenant's naming policy as
/// in the tenant's own calls. A queued waiter gets the lock at once, by the
/// same handoff a release makes; otherwise it is free. The next grant's
/// token is greater than the ended one, so the old holder's writes are
/// fenced off; its renew and release get `lease_lost`.
#[utoipa::path(
    post,
    path = "/v1/admin/tenants/{tenant}/locks/{key}/release",
    operation_id = "forceReleaseLock",
    tag = "admin",
    params(TenantKeyPath),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The lease was ended: its holder and token.",
            body = ForceReleaseResponse),
        AdminErrors,
        (status = 404, description = "`not_found`: no such tenant, or nobody holds the lock.",
            body = ErrorBody,
            example = json!({"error": {"code": "not_found", "message": "nobody holds the lock"}})),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
async fn force_release(app: &App, name: &str, key: &str) -> Result<ForceReleaseResponse, ApiError> {
    let tenant = live_tenant(app, name)?;
    let engine = app.engine(&tenant);
    let lock = name_lock(tenant.clone(), Kind::Lock, key).await?;
    let forced = engine.force_release(&lock).await;
    app.audit("force_release", forced.is_ok());
    let forced = forced?;
    tracing::info!(
        target: "lockbroker::audit",
        action = "force_release",
        tenant = %lock.tenant,
        storage_key = %lock.storage_key,
        owner = %forced.owner,
        token = forced.token,
        handed_off = forced.handed_off,
        "lease ended by the admin"
    );
    Ok(ForceReleaseResponse {
        tenant: lock.tenant,
        key: lock.key,
        storage_key: lock.storage_key,
        owner: forced.owner,
        token: forced.token,
        handed_off: forced.handed_off,
    })
}

/// Force-close a session
///
/// Ends a tenant's live session as its client's close would: every lease
/// held in it released (each key handed to its next waiter; history
/// reason `session_closed`), its waiters taken out of the queue, one
/// `session_ended` event. For a process that is gone but whose session a
/// stuck keepalive keeps alive. The client's next keepalive gets `404
/// session_not_found`: its leases are gone.
#[utoipa::path(
    delete,
    path = "/v1/admin/tenants/{tenant}/sessions/{id}",
    operation_id = "forceCloseSession",
    tag = "admin",
    params(
        ("tenant" = String, Path, description = "The tenant's name from the config.",
            example = "team-a"),
        ("id" = String, Path, description = "The session's id.",
            example = "9f2c4e1a0b7d4c3e8f6a5b2d1c0e9f8a"),
    ),
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Closed; its leases released.",
            body = lockbroker_api::SessionClosed),
        AdminErrors,
        (status = 404, description = "`not_found`: no such tenant; `session_not_found`: no \
such live session of that tenant.", body = ErrorBody),
        (status = 503, response = Unavailable),
    )
)]
async fn force_close_session(
    app: &App,
    name: &str,
    id: &str,
) -> Result<lockbroker_api::SessionClosed, ApiError> {
    let tenant = live_tenant(app, name)?;
    let id = percent_encoding::percent_decode_str(id)
        .decode_utf8_lossy()
        .into_owned();
    let engine = app.engine(&tenant);
    let closed = engine
        .close_session(crate::engine::Scope::of(&tenant), &id)
        .await;
    app.audit("force_close_session", closed.is_ok());
    let released = closed?;
    // Its leases no longer count toward `max_held`.
    tenant.held.released(released).await;
    tracing::info!(
        target: "lockbroker::audit",
        action = "force_close_session",
        tenant = %tenant.name,
        released,
        "session closed by the admin"
    );
    Ok(lockbroker_api::SessionClosed {
        closed: true,
        released,
    })
}

/// List tenants
///
/// Every tenant with the policy in force and the last policy load error,
/// if any.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants",
    operation_id = "listTenants",
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The tenants.", body = TenantList),
        AdminErrors,
    )
)]
fn tenants(app: &App) -> TenantList {
    TenantList {
        tenants: app.live().tenants.iter().map(|t| tenant_info(t)).collect(),
    }
}

/// A tenant and the policy in force, as the admin API shows it.
pub fn tenant_info(tenant: &Tenant) -> TenantInfo {
    let loaded = tenant.policy.current();
    TenantInfo {
        name: tenant.name.clone(),
        max_ttl_ms: tenant.max_ttl_ms,
        max_waiters: tenant.max_waiters,
        policy: PolicyInfo {
            file: tenant.policy.file().map(str::to_owned),
            name: loaded.descriptor.name.clone(),
            version: loaded.descriptor.version.clone(),
            sha256: loaded.sha256.clone(),
            loaded_at: loaded.loaded_at.clone(),
            id: (!loaded.stand_in).then(|| loaded.id()),
        },
        last_error: tenant.policy.last_error(),
        shadow: tenant
            .policy
            .shadow()
            .map(|shadow| candidate_of(shadow.candidate())),
    }
}

/// Reload the config file
///
/// Reads the broker's config file again (as SIGHUP does) and puts in force
/// what can change live: tenants added and removed (a removed tenant's
/// leases stay in the database and are served again if it returns), API
/// keys, limits and policy files, the admin and metrics tokens, and the
/// TLS files (re-read). Settings read only at start (`listen`,
/// `database_url`, a tenant's `database_url`, pools and timeouts) are
/// listed in `needs_restart` and not applied. Requests in flight finish
/// under the config they started with. A config that does not parse or
/// validate, or whose TLS files or newly named policy files do not load,
/// is refused whole: 422 `invalid_config`, and the config in force stays.
#[utoipa::path(
    post,
    path = "/v1/admin/reload",
    operation_id = "reloadConfig",
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The new config is in force (what could change live).",
            body = ReloadReport,
            example = json!({"reloaded": true, "changed": ["tenant team-b added",
                "tenant team-a: api_keys"], "needs_restart": []})),
        AdminErrors,
        (status = 422, description = "`invalid_config`: the file does not parse or validate, or \
a TLS or policy file it names does not load; the message says why. Nothing changed.",
            body = ErrorBody,
            example = json!({"error": {"code": "invalid_config",
                "message": "invalid config: tenant team-b: max_held must be at least 1"}})),
    )
)]
async fn reload(app: &App) -> Result<ReloadReport, ApiError> {
    let outcome = app
        .reload(Trigger::Api)
        .await
        .map_err(|err| ApiError::new(ErrorCode::InvalidConfig, err.0))?;
    Ok(ReloadReport {
        reloaded: true,
        changed: outcome.changed,
        needs_restart: outcome.needs_restart,
    })
}

/// The config in force and the last reload
///
/// Which file reloads read, when the config in force was read, and how the
/// last reload (by SIGHUP or `POST /v1/admin/reload`) went: what it
/// changed, or why it was refused.
#[utoipa::path(
    get,
    path = "/v1/admin/reload",
    operation_id = "reloadStatus",
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The config in force and the last reload.",
            body = ReloadStatus),
        AdminErrors,
    )
)]
async fn reload_status(app: &App) -> ReloadStatus {
    let last = app.last_reload().await.map(|attempt| {
        let Attempt { at, by, result } = attempt;
        let (reloaded, (changed, needs_restart), error) = match result {
            Ok(outcome) => (true, (outcome.changed, outcome.needs_restart), None),
            Err(why) => (false, (Vec::new(), Vec::new()), Some(why)),
        };
        ReloadAttempt {
            at,
            by: by.as_str().to_owned(),
            reloaded,
            changed,
            needs_restart,
            error,
        }
    });
    ReloadStatus {
        file: app.config.source.as_ref().map(|p| p.display().to_string()),
        loaded_at: app.live().loaded_at.clone(),
        last,
    }
}
