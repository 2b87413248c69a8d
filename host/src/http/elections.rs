//! `/v1/elections/{name}`: leader election, a lease in its own namespace
//! where the leader is the holder and the term is the fencing token (a
//! leader campaigning again stays leader with the same term, no hold
//! count). What an election adds to every kind's lease: `observe`, a
//! Server-Sent Events stream with one event per change of leader.

use std::time::Duration;

use bytes::Bytes;
use lockbroker_api::{
    CampaignRequest, Election, ElectionEvent, ElectionRenewRequest, ElectionStatus, Leadership,
    Page, ResignRequest, ResignResponse,
};

use super::{
    resource::{page, rfc3339, Resource, Verb},
    responses::ReadErrors,
    sse, ApiError, Response,
};
use crate::{
    engine::{self, Ask, Engine, Grant, LockRef, Span},
    store::Kind,
};

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `observe`, the one action of an election's own.
pub struct Observe;

impl Resource for Election {
    const KIND: Kind = Kind::Election;
    const PARAM: &'static str = "name";
    const HISTORY: bool = false;
    const EXTRAS: &'static [(Verb, &'static str)] = &[(Verb::Get, "observe")];
    type Extra = Observe;

    async fn acquire(
        engine: &Engine,
        lock: &LockRef,
        _: CampaignRequest,
        ask: Ask,
    ) -> Result<Leadership, ApiError> {
        let grant = engine.acquire(lock, &ask).await?;
        Ok(leadership(lock, grant))
    }

    async fn renew(
        engine: &Engine,
        lock: &LockRef,
        request: ElectionRenewRequest,
        ask: Ask,
    ) -> Result<Leadership, ApiError> {
        let grant = engine
            .renew(lock, &ask.owner, request.term, ask.ttl_ms)
            .await?;
        Ok(leadership(lock, grant))
    }

    async fn release(
        engine: &Engine,
        lock: &LockRef,
        request: ResignRequest,
    ) -> Result<ResignResponse, ApiError> {
        engine
            .release(lock, &request.candidate, request.term)
            .await?;
        Ok(ResignResponse { resigned: true })
    }

    async fn status(engine: &Engine, lock: &LockRef) -> Result<ElectionStatus, ApiError> {
        let now = engine::Leadership::from(&engine.inspect(lock).await?);
        Ok(election_status(
            lock.key.clone(),
            lock.storage_key.clone(),
            now,
        ))
    }

    async fn list(
        engine: &Engine,
        tenant: &str,
        span: Span,
    ) -> Result<Page<ElectionStatus>, ApiError> {
        let listing = engine.list_locks(tenant, Kind::Election, span).await?;
        Ok(page(listing, |key, state| {
            election_status(key.clone(), key, engine::Leadership::from(&state))
        }))
    }

    fn parse_extra(_: &'static str, _: &Bytes, _: Option<&str>) -> Result<Observe, ApiError> {
        Ok(Observe)
    }

    async fn extra(engine: &Engine, lock: LockRef, _: Observe) -> Result<Response, ApiError> {
        observe(engine, lock).await
    }
}

/// An election grant (the leader's lease) as the API answers it.
fn leadership(lock: &LockRef, grant: Grant) -> Leadership {
    Leadership {
        name: lock.key.clone(),
        leader: grant.owner,
        term: grant.token,
        ttl_ms: grant.ttl_ms,
        expires_at: rfc3339(grant.expires_at),
    }
}

/// The leadership of an election (status, listing, and each observed
/// event).
fn election_status(name: String, storage_key: String, now: engine::Leadership) -> ElectionStatus {
    ElectionStatus {
        name,
        storage_key,
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
    params(super::openapi::ElectionPath),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "An open event stream.",
            content_type = "text/event-stream", body = ElectionEvent,
            example = "event: leader\ndata: {\"name\":\"scheduler\",\"leader\":\"node-2\",\"term\":7,\"expires_at\":\"2026-11-21T10:00:00.000Z\"}\n\n"),
        ReadErrors,
    )
)]
async fn observe(engine: &Engine, lock: LockRef) -> Result<Response, ApiError> {
    // Fail now (503) rather than inside the stream if the database is down.
    let mut observation = engine.observe(&lock).await?;
    let (tx, response) = sse::stream();
    let mut stop = engine.stop_signal();
    let event = move |now| {
        let status = election_status(lock.key.clone(), lock.storage_key.clone(), now);
        sse::event(&ElectionEvent::Leader(status))
    };
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
    Ok(response)
}
