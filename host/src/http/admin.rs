//! `/v1/admin`: tenants and their policies (admin token only).

use hyper::{body::Incoming, Method, Request, StatusCode};
use serde_json::{json, Value};

use super::{
    json_response,
    request::{authenticate_admin, read_body},
    ApiError, Response,
};
use crate::{app::App, tenant::Tenant};

/// Routes `/v1/admin/...` after the admin token is checked.
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    tail: &[&str],
) -> Result<Response, ApiError> {
    authenticate_admin(app, req.headers())?;
    match (req.method(), tail) {
        (&Method::GET, ["tenants"]) => Ok(tenants(app)),
        (_, ["tenants"]) => Err(ApiError::method_not_allowed()),
        (&Method::PUT, ["tenants", name, "policy"]) => {
            let name = (*name).to_owned();
            upload_policy(app, req, &name).await
        }
        (_, ["tenants", _, "policy"]) => Err(ApiError::method_not_allowed()),
        _ => Err(ApiError::not_found("no such admin path")),
    }
}

/// `PUT /v1/admin/tenants/{tenant}/policy`: validate, then swap in.
async fn upload_policy(
    app: &App,
    req: Request<Incoming>,
    name: &str,
) -> Result<Response, ApiError> {
    let tenant = app
        .tenants
        .get(name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no tenant {name:?}")))?;
    let bytes = read_body(req, app.config.max_policy_bytes).await?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the body must be a policy component (application/wasm)",
        ));
    }
    app.reloader
        .upload(&tenant, bytes.to_vec())
        .await
        .map_err(|err| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_policy", err.0))?;
    Ok(json_response(StatusCode::OK, &tenant_json(&tenant)))
}

fn tenants(app: &App) -> Response {
    let list: Vec<Value> = app.tenants.iter().map(|t| tenant_json(t)).collect();
    json_response(StatusCode::OK, &json!({ "tenants": list }))
}

/// A tenant and the policy in force, as the admin API shows it.
pub fn tenant_json(tenant: &Tenant) -> Value {
    let loaded = tenant.policy.current();
    json!({
        "name": tenant.name,
        "max_ttl_ms": tenant.max_ttl_ms,
        "max_waiters": tenant.max_waiters,
        "policy": {
            "file": tenant.policy_file,
            "name": loaded.descriptor.name,
            "version": loaded.descriptor.version,
            "sha256": loaded.sha256,
            "loaded_at": loaded.loaded_at,
        },
        "last_error": tenant.policy.last_error(),
    })
}
