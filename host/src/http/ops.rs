//! Operations endpoints: liveness, readiness, metrics, the OpenAPI document.

use hyper::{header, StatusCode};
use serde_json::json;

use super::{full, json_response, ApiError, Response};
use crate::app::App;

/// The OpenAPI 3.1 description of this API.
const OPENAPI: &str = include_str!("../openapi.json");

/// The process is up.
pub fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// Every database answers and every policy is loaded.
///
/// # Errors
/// 503 saying what is not ready.
pub async fn readyz(app: &App) -> Result<Response, ApiError> {
    app.ready().await.map_err(ApiError::unavailable)?;
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
