//! Path and method to handler, and the tenant request pipeline.

use bytes::Bytes;
use hyper::{body::Incoming, Method, Request};

use super::{
    admin,
    locks::{self, LockCommand},
    ops,
    request::{authenticate, name_lock, read_body, MAX_BODY_BYTES},
    ApiError, Response,
};
use crate::app::App;

/// Answers one request. Never fails: errors become JSON error responses.
pub async fn handle(app: &App, req: Request<Incoming>) -> Response {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(&path).split('/').collect();
    let (route, result) = match segments.as_slice() {
        ["healthz"] => ("healthz", get_only(&req).map(|()| ops::healthz())),
        ["readyz"] => ("readyz", ready(app, &req).await),
        ["metrics"] => ("metrics", get_only(&req).map(|()| ops::metrics(app))),
        ["openapi.json"] => ("openapi", get_only(&req).map(|()| ops::openapi())),
        ["v1", "locks", key, tail @ ..] => ("locks", lock_call(app, req, key, tail).await),
        ["v1", "admin", tail @ ..] => ("admin", admin::handle(app, req, tail).await),
        _ => ("unknown", Err(ApiError::not_found("no such path"))),
    };
    let response = result.unwrap_or_else(ApiError::into_response);
    app.metrics.inc(
        "lockbroker_http_requests_total",
        &[("route", route), ("status", response.status().as_str())],
    );
    response
}

fn get_only(req: &Request<Incoming>) -> Result<(), ApiError> {
    if req.method() == Method::GET {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed())
    }
}

async fn ready(app: &App, req: &Request<Incoming>) -> Result<Response, ApiError> {
    get_only(req)?;
    ops::readyz(app).await
}

/// auth → body → parse → naming policy → engine → response.
async fn lock_call(
    app: &App,
    req: Request<Incoming>,
    key: &str,
    tail: &[&str],
) -> Result<Response, ApiError> {
    let action = locks::route(req.method(), tail)?;
    let tenant = authenticate(app, req.headers())?;
    let body = if req.method() == Method::POST {
        read_body(req, MAX_BODY_BYTES).await?
    } else {
        Bytes::new()
    };
    let command = LockCommand::parse(action, &body, &tenant)?;
    let lock = name_lock(tenant, key).await?;
    command.apply(&app.engine, &lock).await
}
