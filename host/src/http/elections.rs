//! `/v1/elections/{name}`: campaign, resign, renew, current leader, and
//! `observe` (Server-Sent Events, one event per change of leader).
//!
//! An election is a lease like a lock, in its own namespace: the leader is
//! the holder and the term is the fencing token. A leader campaigning again
//! stays leader with the same term (no hold count).

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    CampaignRequest, ElectionEvent, ElectionRenewRequest, ElectionStatus, ErrorBody, Leadership,
    ResignRequest, ResignResponse,
};

use super::{
    lease::{check_holder, leadership, rfc3339, Terms},
    ok,
    openapi::{
        BadRequest, ElectionPath, InvalidKey, MethodNotAllowed, PolicyError, TooLarge,
        TooManyWaiters, Unauthenticated, Unavailable,
    },
    request::parse_json,
    router::{route_action, Command},
    sse, ApiError, Response,
};
use crate::{
    app::App,
    engine::{self, Engine, LockRef, Observation},
    store::Kind,
    tenant::Tenant,
};

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One election request, parsed and checked.
#[derive(Debug)]
pub enum ElectionCommand {
    Campaign(Terms),
    Resign(ResignRequest),
    Renew { terms: Terms, term: u64 },
    Status,
    Observe,
}

impl Command for ElectionCommand {
    const KIND: Kind = Kind::Election;

    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError> {
        route_action(method, tail, &["campaign", "resign", "renew"], &["observe"])
    }

    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<Self, ApiError> {
        Ok(match action {
            "campaign" => ElectionCommand::Campaign(Terms::check(
                &parse_json::<CampaignRequest>(body)?,
                tenant,
            )?),
            "resign" => {
                let request: ResignRequest = parse_json(body)?;
                check_holder("candidate", &request.candidate)?;
                ElectionCommand::Resign(request)
            }
            "renew" => {
                let request: ElectionRenewRequest = parse_json(body)?;
                ElectionCommand::Renew {
                    terms: Terms::check(&request, tenant)?,
                    term: request.term,
                }
            }
            "observe" => ElectionCommand::Observe,
            _ => ElectionCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let engine = app.engine(&lock.tenant);
        Ok(match self {
            ElectionCommand::Campaign(terms) => ok(&campaign(engine, &lock, terms).await?),
            ElectionCommand::Renew { terms, term } => ok(&renew(engine, &lock, terms, term).await?),
            ElectionCommand::Resign(request) => ok(&resign(engine, &lock, request).await?),
            ElectionCommand::Status => ok(&status(engine, &lock).await?),
            ElectionCommand::Observe => observe(engine, lock).await?,
        })
    }
}

/// Campaign for leadership
///
/// Makes `candidate` the leader when nobody leads (a new, greater term) and
/// answers 200 while it leads (a leader campaigning again keeps its term).
/// With `wait_ms` > 0 the request waits for the leadership.
#[utoipa::path(
    post,
    path = "/v1/elections/{name}/campaign",
    operation_id = "campaign",
    tag = "elections",
    params(ElectionPath),
    request_body = CampaignRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "`candidate` leads.", body = Leadership),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, headers(("Retry-After" = u64, description = "Seconds before trying again: \
`retry_after_ms` rounded up, at least 1.")),
            description = "`lock_held`: another candidate leads and `wait_ms` ran out.",
            body = ErrorBody,
            example = json!({"error": {"code": "lock_held",
                "message": "the lock is held by another owner", "retry_after_ms": 120}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 429, response = TooManyWaiters),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn campaign(
    engine: &Engine,
    lock: &LockRef,
    terms: Terms,
) -> Result<Leadership, ApiError> {
    let grant = engine
        .acquire(lock, &terms.holder, terms.ttl_ms, terms.wait_ms, 0)
        .await?;
    Ok(leadership(lock, grant))
}

/// Resign leadership
///
/// Ends the term; the election is open again.
#[utoipa::path(
    post,
    path = "/v1/elections/{name}/resign",
    operation_id = "resign",
    tag = "elections",
    params(ElectionPath),
    request_body = ResignRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Resigned.", body = ResignResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: `candidate` does not lead in `term` (the \
term expired or was never held). Nothing changes.",
            body = ErrorBody,
            example = json!({"error": {"code": "lease_lost", "message": "this owner and token do \
not hold the current lease (expired, re-granted, released or never held)"}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn resign(
    engine: &Engine,
    lock: &LockRef,
    request: ResignRequest,
) -> Result<ResignResponse, ApiError> {
    engine
        .release(lock, &request.candidate, request.term)
        .await?;
    Ok(ResignResponse { resigned: true })
}

/// Renew leadership
///
/// Extends the leader's lease to `ttl_ms` from now (database clock); the
/// term stays.
#[utoipa::path(
    post,
    path = "/v1/elections/{name}/renew",
    operation_id = "renewLeadership",
    tag = "elections",
    params(ElectionPath),
    request_body = ElectionRenewRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Renewed: the new `expires_at`.", body = Leadership),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 409, description = "`lease_lost`: the term expired (database clock) or is not \
`candidate`'s.",
            body = ErrorBody,
            example = json!({"error": {"code": "lease_lost", "message": "this owner and token do \
not hold the current lease (expired, re-granted, released or never held)"}})),
        (status = 413, response = TooLarge),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn renew(
    engine: &Engine,
    lock: &LockRef,
    terms: Terms,
    term: u64,
) -> Result<Leadership, ApiError> {
    let grant = engine
        .renew(lock, &terms.holder, term, terms.ttl_ms)
        .await?;
    Ok(leadership(lock, grant))
}

/// Show an election
///
/// The current leader and term, if any.
#[utoipa::path(
    get,
    path = "/v1/elections/{name}",
    operation_id = "getElection",
    tag = "elections",
    params(ElectionPath),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The election now.", body = ElectionStatus),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn status(engine: &Engine, lock: &LockRef) -> Result<ElectionStatus, ApiError> {
    let now = engine::Leadership::from(&engine.inspect(lock).await?);
    Ok(election_status(lock, now))
}

/// The leadership of an election (status, and each observed event).
fn election_status(lock: &LockRef, now: engine::Leadership) -> ElectionStatus {
    ElectionStatus {
        name: lock.key.clone(),
        leader: now.leader,
        term: now.term,
        expires_at: now.expires_at.map(rfc3339),
    }
}

/// Watch an election
///
/// Server-Sent Events: a `leader` event with the leadership now, then one
/// per change of leader (every new term, every vacancy), until the client
/// leaves. Each event's `data` is one line of JSON, an `ElectionStatus`
/// (`leader`, `term` and `expires_at` are null when nobody leads); comment
/// lines (`: keep-alive`) keep an idle stream open. The schema below is one
/// event, its `event:` name and its parsed `data:`.
#[utoipa::path(
    get,
    path = "/v1/elections/{name}/observe",
    operation_id = "observeElection",
    tag = "elections",
    params(ElectionPath),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "An open event stream.",
            content_type = "text/event-stream", body = ElectionEvent,
            example = "event: leader\ndata: {\"name\":\"scheduler\",\"leader\":\"node-2\",\"term\":7,\"expires_at\":\"2026-11-21T10:00:00.000Z\"}\n\n"),
        (status = 401, response = Unauthenticated),
        (status = 405, response = MethodNotAllowed),
        (status = 422, response = InvalidKey),
        (status = 500, response = PolicyError),
        (status = 503, response = Unavailable),
    )
)]
pub async fn observe(engine: &Engine, lock: LockRef) -> Result<Response, ApiError> {
    // Fail now (503) rather than inside the stream if the database is down.
    let observation = engine.observe(&lock).await?;
    Ok(stream(engine, lock, observation))
}

/// Streams one `leader` event now and one per change of leader after,
/// until the client leaves or the broker stops; a comment line keeps an
/// idle stream alive.
fn stream(engine: &Engine, lock: LockRef, mut observation: Observation) -> Response {
    let (tx, response) = sse::stream();
    let mut stop = engine.stop_signal();
    let event = move |now| sse::event(&ElectionEvent::Leader(election_status(&lock, now)));
    tokio::spawn(async move {
        if tx.send(event(observation.first.clone())).await.is_err() {
            return;
        }
        loop {
            let message = tokio::select! {
                change = observation.next() => match change {
                    Ok(change) => event(change),
                    Err(_) => return,
                },
                () = tokio::time::sleep(KEEP_ALIVE) => sse::keep_alive(),
                () = tx.closed() => return,
                () = crate::shutdown::stopped(&mut stop) => return,
            };
            if tx.send(message).await.is_err() {
                return;
            }
        }
    });
    response
}
