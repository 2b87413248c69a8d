//! Operations endpoints: liveness, readiness, metrics, the OpenAPI document.

use std::time::Duration;

use hyper::{header, StatusCode};
use serde_json::json;

use super::{full, json_response, ApiError, Response};
use crate::{app::App, policy::reload::NOT_LOADED, store};

/// The OpenAPI 3.1 description of this API.
const OPENAPI: &str = include_str!("../openapi.json");

/// The process is up.
pub fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// The database answers and every policy is loaded.
///
/// # Errors
/// 503 when the database does not answer within a second.
pub async fn readyz(app: &App) -> Result<Response, ApiError> {
    if !store::ping(app.engine.pool(), Duration::from_secs(1)).await {
        return Err(ApiError::unavailable("the database does not answer"));
    }
    let not_loaded: Vec<&str> = app
        .tenants
        .iter()
        .filter(|t| t.policy.current().descriptor.name == NOT_LOADED)
        .map(|t| t.name.as_str())
        .collect();
    if !not_loaded.is_empty() {
        return Err(ApiError::unavailable(format!(
            "the policy of tenant(s) {} did not load",
            not_loaded.join(", ")
        )));
    }
    Ok(json_response(StatusCode::OK, &json!({"status": "ready"})))
}

/// Prometheus text format.
pub fn metrics(app: &App) -> Response {
    let mut response = hyper::Response::new(full(app.metrics.render()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

pub fn openapi() -> Response {
    let mut response = hyper::Response::new(full(OPENAPI));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}
