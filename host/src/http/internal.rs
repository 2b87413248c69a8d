//! `/internal/v1`: calls between the brokers sharing a database, never a
//! tenant's. Each is authenticated by this broker's own secret, which only
//! its heartbeat row in the database says (`engine::Push`): a tenant's API
//! key, the admin token or no token at all get 401. Not in the OpenAPI
//! document, which describes the public API.
//!
//! `POST /internal/v1/wake` `{"waiters": [ids]}`: another broker handed
//! leases to these waiters of this broker; look for their grants now
//! rather than at the next poll. A hint only: the grants are still claimed
//! through the database, so a wake for ids that do not wait here (gone,
//! already served) does nothing. Answers `{"waiting": n}`.
//!
//! `POST /internal/v1/waiting` `{"tenant", "prefix"}`: this broker's
//! waiters in memory for the tenant's locks whose storage key starts with
//! `prefix` (another broker answering `GET /v1/locks/{key}/waiters` or
//! `GET /v1/waits-for` asks every live broker). Answers `{"waiters": [...]}`.
//!
//! `POST /internal/v1/heat` `{"tenant", "prefix", "window_s"}`: how hot
//! this broker saw the tenant's keys (grants, handoffs, refusals, waits;
//! for `GET /v1/contention`). Answers `{"keys": [...]}`.

use hyper::{body::Incoming, Method, Request};

use super::{
    access::Seen,
    ok,
    request::{bearer, parse_json, read_body},
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{HeatRequest, WaitingRequest, WakeReply, WakeRequest},
};

/// The largest wake body taken: a push names the waiters granted by one
/// transaction (at most a semaphore's permits), a few bytes each.
const MAX_WAKE_BYTES: usize = 64 * 1024;

/// Routes `/internal/v1/...` once the caller proved it is a broker.
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    tail: &[&str],
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    let presented = bearer(req.headers()).ok_or_else(|| {
        ApiError::unauthenticated("missing Authorization: Bearer <broker secret>")
    })?;
    if !app.push.accepts(presented) {
        return Err(ApiError::unauthenticated(
            "internal calls take this broker's own secret",
        ));
    }
    match tail {
        ["wake"] if req.method() == Method::POST => {
            seen.action = "wake";
            wake(app, req).await
        }
        ["wake"] => Err(ApiError::method_not_allowed("POST")),
        ["waiting"] if req.method() == Method::POST => {
            seen.action = "waiting";
            waiting(app, req).await
        }
        ["waiting"] => Err(ApiError::method_not_allowed("POST")),
        ["heat"] if req.method() == Method::POST => {
            seen.action = "heat";
            heat(app, req).await
        }
        ["heat"] => Err(ApiError::method_not_allowed("POST")),
        _ => Err(ApiError::not_found("no such internal path")),
    }
}

/// This broker's waiters in memory of a tenant's locks under a prefix.
async fn waiting(app: &App, req: Request<Incoming>) -> Result<Response, ApiError> {
    let body = read_body(req, MAX_WAKE_BYTES).await?;
    let ask: WaitingRequest = parse_json(&body)?;
    Ok(ok(&app.waiting_here(&ask)))
}

/// How hot this broker saw a tenant's keys under a prefix.
async fn heat(app: &App, req: Request<Incoming>) -> Result<Response, ApiError> {
    let body = read_body(req, MAX_WAKE_BYTES).await?;
    let ask: HeatRequest = parse_json(&body)?;
    Ok(ok(&app.heat_here(&ask)))
}

/// Nudges the wake loop of every engine where one of the waiters waits.
async fn wake(app: &App, req: Request<Incoming>) -> Result<Response, ApiError> {
    let body = read_body(req, MAX_WAKE_BYTES).await?;
    let WakeRequest { waiters } = parse_json(&body)?;
    let waiting = app.woken(&waiters);
    Ok(ok(&WakeReply { waiting }))
}
