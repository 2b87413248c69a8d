//! Path and method to handler, and the one pipeline every tenant call goes
//! through: route → auth → body → parse → naming policy → engine → response.

use std::future::Future;

use bytes::Bytes;
use hyper::{body::Incoming, Method, Request};

use super::{
    access::{Access, Seen},
    admin,
    elections::ElectionCommand,
    internal, limits,
    locks::LockCommand,
    multilock, ops,
    request::{authenticate, name_lock, read_body},
    request_id::RequestId,
    rwlocks::RwLockCommand,
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
    /// The request with its URI's query string (`GET` actions that take
    /// parameters, such as a lock's `history?limit=`); by default the
    /// query is not looked at.
    fn parse_with_query(
        action: &str,
        query: Option<&str>,
        body: &Bytes,
        tenant: &Tenant,
    ) -> Result<Self, ApiError> {
        let _ = query;
        Self::parse(action, body, tenant)
    }
    /// Carries it out.
    fn apply(
        self,
        app: &App,
        lock: LockRef,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send;
}

/// Answers one request. Never fails: errors become JSON error responses.
/// Every answer carries the request's `x-request-id` and is logged and
/// counted once (`access`).
pub async fn handle(app: &App, req: Request<Incoming>) -> Response {
    let mut access = Access::begin(RequestId::of(req.headers()), req.method().clone());
    let (route, result) = match limits::check(req.uri(), req.headers()) {
        Ok(()) => route(app, req, &mut access.seen).await,
        Err(err) => ("unparsed", Err(err)),
    };
    access.finish(&app.metrics, route, result)
}

/// The route's name (a metric label) and its answer.
async fn route(
    app: &App,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> (&'static str, Result<Response, ApiError>) {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(&path).split('/').collect();
    match segments.as_slice() {
        ["healthz"] => ("healthz", get_only(&req).map(|()| ops::healthz())),
        ["readyz"] => ("readyz", ready(app, &req).await),
        ["metrics"] => (
            "metrics",
            get_only(&req).and_then(|()| ops::metrics(app, req.headers())),
        ),
        ["openapi.json"] => ("openapi", get_only(&req).map(|()| ops::openapi())),
        ["v1", "locks", key, tail @ ..] => (
            "locks",
            call::<LockCommand>(app, req, key, tail, seen).await,
        ),
        ["v1", "semaphores", key, tail @ ..] => (
            "semaphores",
            call::<SemaphoreCommand>(app, req, key, tail, seen).await,
        ),
        ["v1", "rwlocks", key, tail @ ..] => (
            "rwlocks",
            call::<RwLockCommand>(app, req, key, tail, seen).await,
        ),
        ["v1", "elections", key, tail @ ..] => (
            "elections",
            call::<ElectionCommand>(app, req, key, tail, seen).await,
        ),
        ["v1", "multilock", tail @ ..] => {
            ("multilock", multilock::handle(app, req, tail, seen).await)
        }
        ["v1", "admin", tail @ ..] => ("admin", admin::handle(app, req, tail).await),
        ["internal", "v1", tail @ ..] => ("internal", internal::handle(app, req, tail, seen).await),
        _ => ("unknown", Err(ApiError::not_found("no such path"))),
    }
}

fn get_only(req: &Request<Incoming>) -> Result<(), ApiError> {
    if req.method() == Method::GET {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed("GET"))
    }
}

/// Which action a method and path tail name, before the body is read: `GET`
/// on the key itself is `status`, `POST` on `{key}/{action}` one of
/// `actions`, `GET` on `{key}/{action}` one of `get_actions`.
///
/// # Errors
/// 404 for an unknown action, 405 (with `Allow`) for a wrong method.
pub fn route_action(
    method: &Method,
    tail: &[&str],
    actions: &[&'static str],
    get_actions: &[&'static str],
) -> Result<&'static str, ApiError> {
    let (action, expected) = match tail {
        [] => ("status", Method::GET),
        [name] => match actions.iter().find(|a| *a == name) {
            Some(action) => (*action, Method::POST),
            None => match get_actions.iter().find(|a| *a == name) {
                Some(action) => (*action, Method::GET),
                None => return Err(ApiError::not_found("no such action")),
            },
        },
        _ => return Err(ApiError::not_found("no such action")),
    };
    if *method != expected {
        let allow = if expected == Method::GET {
            "GET"
        } else {
            "POST"
        };
        return Err(ApiError::method_not_allowed(allow));
    }
    Ok(action)
}

async fn ready(app: &App, req: &Request<Incoming>) -> Result<Response, ApiError> {
    get_only(req)?;
    ops::readyz(app).await
}

/// The tenant pipeline, the same for every resource; what it learns on
/// the way goes into `seen`, for the request's log line and metrics.
async fn call<C: Command>(
    app: &App,
    req: Request<Incoming>,
    key: &str,
    tail: &[&str],
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    seen.key(key);
    let action = C::route(req.method(), tail)?;
    seen.action = action;
    let tenant = authenticate(app, req.headers())?;
    seen.tenant = Some(tenant.name.clone());
    let query = req.uri().query().map(str::to_owned);
    let body = if req.method() == Method::POST {
        read_body(req, lockbroker_api::MAX_BODY_BYTES).await?
    } else {
        Bytes::new()
    };
    let command = C::parse_with_query(action, query.as_deref(), &body, &tenant)?;
    let lock = name_lock(tenant, C::KIND, key).await?;
    command.apply(app, lock).await
}
