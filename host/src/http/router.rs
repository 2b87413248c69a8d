//! Path and method to handler. Every lease kind is served by the one
//! pipeline of `resource`; multi-locks, admin, operations and the calls
//! between brokers have handlers of their own.

use hyper::{body::Incoming, Method, Request};
use tracing::Instrument;

use super::{
    access::{Access, Seen},
    admin, events, internal, limits, multilock, ops,
    resource::{serve_kind, with_kind, ForKind, Resource},
    sessions, waiting, ApiError, Response,
};
use crate::{app::App, ui};

/// Answers one request. Never fails: errors become JSON error responses.
/// Every answer carries the request's `x-request-id` and is logged and
/// counted once (`access`); it is handled in the request's span (`trace`).
pub async fn handle(app: &App, req: Request<Incoming>) -> Response {
    let mut access = Access::begin(req.method().clone(), req.headers());
    let span = access.span();
    let (route, result) = match limits::check(req.uri(), req.headers()) {
        Ok(()) => route(app, req, &mut access.seen).instrument(span).await,
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
        ["ui", tail @ ..] => ("ui", ui::serve(req.method(), tail)),
        ["v1", "multilock", tail @ ..] => {
            ("multilock", multilock::handle(app, req, tail, seen).await)
        }
        ["v1", "admin", tail @ ..] => ("admin", admin::handle(app, req, tail).await),
        ["v1", "events"] => ("events", events::handle(app, req, seen).await),
        ["v1", "sessions", tail @ ..] => ("sessions", sessions::handle(app, req, tail, seen).await),
        ["v1", "waits-for"] => ("waits_for", waiting::waits_for(app, req, seen).await),
        ["v1", "contention"] => ("contention", waiting::contention(app, req, seen).await),
        ["v1", kind, rest @ ..] => match with_kind(
            kind,
            Lease {
                app,
                req,
                rest,
                seen,
            },
        ) {
            Some((kind, served)) => (kind, served.await),
            None => ("unknown", Err(ApiError::not_found("no such path"))),
        },
        ["internal", "v1", tail @ ..] => ("internal", internal::handle(app, req, tail, seen).await),
        _ => ("unknown", Err(ApiError::not_found("no such path"))),
    }
}

/// A call under `/v1/{kind}/...`, served by the kind's model.
struct Lease<'a> {
    app: &'a App,
    req: Request<Incoming>,
    rest: &'a [&'a str],
    seen: &'a mut Seen,
}

impl<'a> ForKind for Lease<'a> {
    type Output = (&'static str, Served<'a>);
    fn call<R: Resource>(self) -> Self::Output {
        let served = serve_kind::<R>(self.app, self.req, self.rest, self.seen);
        (R::PATH, Box::pin(served))
    }
}

/// An answer under way.
type Served<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, ApiError>> + Send + 'a>>;

fn get_only(req: &Request<Incoming>) -> Result<(), ApiError> {
    if req.method() == Method::GET {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed("GET"))
    }
}

async fn ready(app: &App, req: &Request<Incoming>) -> Result<Response, ApiError> {
    get_only(req)?;
    ops::readyz(app).await
}
