//! Operations endpoints: liveness, readiness, metrics, the OpenAPI document.

use hyper::{header, HeaderMap};
use lockbroker_api::Status;

use super::{full, ok, request::bearer, responses::Unavailable, ApiError, Response};
use crate::{app::App, metrics, secret};

/// Liveness
///
/// The process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    security(()),
    responses((status = 200, description = "Up.", body = Status,
        example = json!({"status": "ok"})))
)]
pub fn healthz() -> Response {
    ok(&Status {
        status: "ok".into(),
    })
}

/// Readiness
///
/// Every database answers and every tenant's policy is loaded.
///
/// # Errors
/// 503 saying what is not ready.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "Ready.", body = Status, example = json!({"status": "ready"})),
        (status = 503, response = Unavailable),
    )
)]
pub async fn readyz(app: &App) -> Result<Response, ApiError> {
    app.ready().await.map_err(ApiError::unavailable)?;
    Ok(ok(&Status {
        status: "ready".into(),
    }))
}

/// Every metric, in the OpenMetrics text format (which Prometheus
/// scrapes). Label values name tenants, so with `metrics_token` set the
/// request must carry it as a bearer token. (Its OpenAPI description is in
/// `openapi.rs`.)
///
/// # Errors
/// 401 when `metrics_token` is set and the request does not carry it.
pub fn metrics(app: &App, headers: &HeaderMap) -> Result<Response, ApiError> {
    if let Some(expected) = &app.live().config.metrics_token {
        let presented = bearer(headers).ok_or_else(|| {
            ApiError::unauthenticated("missing Authorization: Bearer <metrics token>")
        })?;
        if !expected.matches(&secret::digest(presented)) {
            return Err(ApiError::unauthenticated("unknown metrics token"));
        }
    }
    refresh(app);
    let mut response = hyper::Response::new(full(app.metrics.render()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(metrics::CONTENT_TYPE),
    );
    Ok(response)
}

/// Sets the gauges that are read rather than counted: connections of
/// each database pool (and its most), waiters queued on this broker, the
/// TLS certificate's expiry.
fn refresh(app: &App) {
    if let Some(tls) = &app.tls {
        app.metrics.set_gauge(
            "lockbroker_tls_certificate_expiry_timestamp_seconds",
            &[],
            tls.not_after(),
        );
    }
    let mut waiters = 0;
    for engine in &app.engines {
        waiters += engine.local_waiters();
        for pool in engine.db().pools() {
            let (in_use, idle) = (pool.in_use(), pool.idle());
            app.metrics.set_gauge(
                "lockbroker_db_pool_max_connections",
                &[("server", pool.name())],
                i64::try_from(pool.max()).unwrap_or(i64::MAX),
            );
            for (state, n) in [("in_use", in_use), ("idle", idle)] {
                app.metrics.set_gauge(
                    "lockbroker_db_pool_connections",
                    &[("server", pool.name()), ("state", state)],
                    i64::try_from(n).unwrap_or(i64::MAX),
                );
            }
        }
    }
    app.metrics.set_gauge(
        "lockbroker_waiters",
        &[],
        i64::try_from(waiters).unwrap_or(i64::MAX),
    );
}

/// This document
///
/// The OpenAPI 3.1 description of this API, generated from the broker's
/// own types.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    security(()),
    responses((status = 200, description = "OpenAPI 3.1 (JSON).",
        content_type = "application/json", body = Object))
)]
pub fn openapi() -> Response {
    let mut response = hyper::Response::new(full(super::openapi::document()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}
