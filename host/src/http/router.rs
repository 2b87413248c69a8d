//! Path and method to handler, and the one pipeline every tenant call goes
//! through: route → auth → body → parse → naming policy → engine → response.

use std::future::Future;

use bytes::Bytes;
use hyper::{body::Incoming, Method, Request};

use super::{
    admin,
    elections::ElectionCommand,
    locks::LockCommand,
    ops,
    request::{authenticate, name_lock, read_body, MAX_BODY_BYTES},
    semaphores::SemaphoreCommand,
    ApiError, Response,
};
use crate::{app::App, engine::LockRef, store::Kind, tenant::Tenant};

/// A tenant resource's requests (locks, semaphores, elections): each parses
/// from a method, a path tail and a body, and applies to a named key.
pub trait Command: Sized {
    /// Which rows the resource's keys name.
    const KIND: Kind;
    /// The action a method and path tail name, checked before the body is
    /// read (404 or 405).
    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError>;
    /// The request, checked (400).
    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<Self, ApiError>;
    /// Carries it out.
    fn apply(
        self,
        app: &App,
        lock: LockRef,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send;
}

/// Answers one request. Never fails: errors become JSON error responses.
pub async fn handle(app: &App, req: Request<Incoming>) -> Response {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(&path).split('/').collect();
    let (route, result) = match segments.as_slice() {
        ["healthz"] => ("healthz", get_only(&req).map(|()| ops::healthz())),
        ["readyz"] => ("readyz", ready(app, &req).await),
        ["metrics"] => ("metrics", get_only(&req).map(|()| ops::metrics(app))),
        ["openapi.json"] => ("openapi", get_only(&req).map(|()| ops::openapi())),
        ["v1", "locks", key, tail @ ..] => {
            ("locks", call::<LockCommand>(app, req, key, tail).await)
        }
        ["v1", "semaphores", key, tail @ ..] => (
            "semaphores",
            call::<SemaphoreCommand>(app, req, key, tail).await,
        ),
        ["v1", "elections", key, tail @ ..] => (
            "elections",
            call::<ElectionCommand>(app, req, key, tail).await,
        ),
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

/// The tenant pipeline, the same for every resource.
async fn call<C: Command>(
    app: &App,
    req: Request<Incoming>,
    key: &str,
    tail: &[&str],
) -> Result<Response, ApiError> {
    let action = C::route(req.method(), tail)?;
    let tenant = authenticate(app, req.headers())?;
    let body = if req.method() == Method::POST {
        read_body(req, MAX_BODY_BYTES).await?
    } else {
        Bytes::new()
    };
    let command = C::parse(action, &body, &tenant)?;
    let lock = name_lock(tenant, C::KIND, key).await?;
    command.apply(app, lock).await
}
