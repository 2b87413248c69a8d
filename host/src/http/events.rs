//! `GET /v1/events`: a Server-Sent Events stream of every change of the
//! tenant's locks, semaphores and rwlocks whose storage key starts with a
//! prefix, made through any broker (`engine::events`). A client that
//! reconnects with `Last-Event-ID` (or `?after=`) gets what it missed while
//! the history keeps it, after one `reset` event if the history no longer
//! reaches back that far.

use std::{collections::HashSet, time::Duration};

use hyper::{body::Incoming, Method, Request};
use lockbroker_api::{ResourceKind, StreamEvent};
use percent_encoding::percent_decode_str;
use tokio::sync::{broadcast::error::RecvError, mpsc};

use super::{
    access::Seen,
    history,
    request::{authenticate, query_pairs, unknown_param},
    responses::ReadErrors,
    sse, ApiError, Response,
};
use crate::{
    app::App,
    engine::{Engine, Event, Subscription},
    store::Kind,
};

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How many sent ids a stream remembers, to send an event that arrives
/// late only once.
const REMEMBERED: usize = 4096;

/// Which events a stream sends: the tenant's, whose storage key starts
/// with `prefix`, after the id `after` (none: from now on).
struct Filter {
    tenant: String,
    prefix: Vec<u8>,
}

impl Filter {
    /// A session's end reaches every stream of its tenant, whatever its
    /// prefix: the keys it released may be any.
    fn wants(&self, event: &Event) -> bool {
        event.tenant == self.tenant
            && (event.kind.is_none() || event.storage_key.as_bytes().starts_with(&self.prefix))
    }
}

/// Watch changes
///
/// Server-Sent Events: every grant, release, expiry, handoff and
/// force-release of the tenant's locks, semaphores and rwlocks whose
/// storage key starts with `prefix` (bytes, matched literally), made
/// through any broker, within a second; also every session's end
/// (`session_ended`) and every session wait refused as a deadlock
/// (`deadlock`, with its `cycle`). Each event's `id:` increases; a
/// client that reconnects with `Last-Event-ID` (or `after=`) receives what
/// it missed as long as the history keeps it (`history_retention_hours`),
/// after an `event: reset` when the history no longer reaches back to that
/// id. Without either, the stream starts with the next change. A comment
/// line (`: keep-alive`) every 15 s keeps an idle stream open. At most
/// `max_streams` (tenant config, default 16) streams per tenant per
/// broker: 429 `too_many_streams` beyond.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "events",
    tag = "operations",
    params(
        ("prefix" = Option<String>, Query, description = "Only storage keys that start with \
these bytes (percent-encoded; matched literally)."),
        ("after" = Option<u64>, Query, description = "Resume after this event id (as \
`Last-Event-ID` does)."),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event id."),
    ),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "An open event stream.",
            content_type = "text/event-stream", body = StreamEvent,
            example = "id: 42\nevent: granted\ndata: {\"id\":42,\"event\":\"granted\",\"kind\":\"lock\",\"storage_key\":\"nightly-report\",\"owner\":\"worker-7\",\"token\":9,\"at\":\"2026-11-21T10:00:00.123456Z\"}\n\n"),
        (status = 400, response = super::responses::BadRequest),
        (status = 429, description = "`too_many_streams`: the tenant has `max_streams` streams \
open on this broker.", body = lockbroker_api::ErrorBody),
        ReadErrors,
    )
)]
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    seen.action = "events";
    if req.method() != Method::GET {
        return Err(ApiError::method_not_allowed("GET"));
    }
    let tenant = authenticate(app, req.headers()).await?;
    seen.tenant = Some(tenant.name.clone());
    let mut prefix = Vec::new();
    let mut after = None;
    for (name, value) in query_pairs(req.uri().query()) {
        match name {
            "prefix" => prefix = percent_decode_str(&value.replace('+', " ")).collect(),
            "after" => after = Some(event_id(value)?),
            _ => return Err(unknown_param(name, "prefix, after")),
        }
    }
    if let Some(last) = req.headers().get("last-event-id") {
        after = Some(event_id(last.to_str().unwrap_or_default())?);
    }
    let engine = app.engine(&tenant).clone();
    let subscription = engine.subscribe_events(&tenant.name, tenant.max_streams)?;
    // Fail now (503) rather than inside the stream if the database is down.
    let reset = match after {
        Some(after) => behind(&engine, after, subscription.horizon).await?,
        None => false,
    };
    let filter = Filter {
        tenant: tenant.name.clone(),
        prefix,
    };
    let (tx, response) = sse::stream();
    let start = after.unwrap_or(subscription.horizon);
    tokio::spawn(async move {
        if reset
            && tx
                .send(sse::frame("reset", None, &serde_json::json!({})))
                .await
                .is_err()
        {
            return;
        }
        let _ = follow(&engine, subscription, &filter, start, &tx).await;
    });
    Ok(response)
}

/// An event id of a query or header.
fn event_id(value: &str) -> Result<u64, ApiError> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|id| *id <= i64::MAX as u64)
        .ok_or_else(|| ApiError::bad_request("an event id is a whole number"))
}

/// Whether the history no longer reaches back to the event after `after`
/// (it was pruned): the stream starts with a `reset`.
async fn behind(engine: &Engine, after: u64, horizon: u64) -> Result<bool, ApiError> {
    let oldest = engine.oldest_event().await?;
    Ok(match oldest {
        Some(oldest) => oldest > after.saturating_add(1),
        None => after < horizon,
    })
}

/// Sends the events after `last` up to the subscription's horizon from the
/// history, then the feed's, until the client leaves or the broker stops.
/// A stream that falls behind the feed's buffer catches up again from the
/// history. `Err` when the client left.
async fn follow(
    engine: &Engine,
    mut subscription: Subscription,
    filter: &Filter,
    mut last: u64,
    tx: &mpsc::Sender<bytes::Bytes>,
) -> Result<(), ()> {
    let mut sent: HashSet<u64> = HashSet::new();
    let mut stop = engine.stop_signal();
    loop {
        // Catch up from the history to the horizon.
        while last < subscription.horizon {
            let Ok(batch) = engine
                .events_of(&filter.tenant, last, subscription.horizon)
                .await
            else {
                // The database is away: try again shortly, while anyone listens.
                if tx.is_closed() {
                    return Err(());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let Some(newest) = batch.last().map(|e| e.id) else {
                break;
            };
            for event in batch.iter().filter(|e| filter.wants(e)) {
                send(tx, event, &mut sent).await?;
            }
            last = newest;
        }
        // Then the feed, as it comes.
        loop {
            let received = tokio::select! {
                received = subscription.live.recv() => received,
                () = tokio::time::sleep(KEEP_ALIVE) => {
                    tx.send(sse::keep_alive()).await.map_err(|_| ())?;
                    continue;
                }
                () = tx.closed() => return Err(()),
                () = crate::shutdown::stopped(&mut stop) => return Ok(()),
            };
            match received {
                Ok(event) if filter.wants(&event) => {
                    last = last.max(event.id);
                    send(tx, &event, &mut sent).await?;
                }
                Ok(event) => last = last.max(event.id),
                Err(RecvError::Lagged(_)) => {
                    subscription.resubscribe(engine);
                    break;
                }
                Err(RecvError::Closed) => return Ok(()),
            }
        }
    }
}

/// Sends `event` unless it was sent already (one that arrived late may
/// also have been caught up from the history).
async fn send(
    tx: &mpsc::Sender<bytes::Bytes>,
    event: &Event,
    sent: &mut HashSet<u64>,
) -> Result<(), ()> {
    if !sent.insert(event.id) {
        return Ok(());
    }
    if sent.len() > REMEMBERED {
        let oldest = sent.iter().copied().min().unwrap_or_default();
        sent.remove(&oldest);
    }
    let data = StreamEvent {
        id: event.id,
        event: history::kind(event.event),
        kind: match event.kind {
            Some(Kind::Semaphore) => ResourceKind::Semaphore,
            Some(Kind::RwLock) => ResourceKind::Rwlock,
            Some(Kind::Election) => ResourceKind::Election,
            Some(Kind::Lock) => ResourceKind::Lock,
            None => ResourceKind::Session,
        },
        storage_key: event.storage_key.clone(),
        owner: event.owner.clone(),
        token: event.token,
        at: event
            .at
            .and_utc()
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        session: event.session.clone(),
        reason: event.reason.map(history::reason),
        cycle: event.cycle.clone().map(super::error::cycle_steps),
    };
    let name = event.event.name();
    tx.send(sse::frame(name, Some(event.id), &data))
        .await
        .map_err(|_| ())
}
