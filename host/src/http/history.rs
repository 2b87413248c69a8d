//! A lease kind's history (`GET /v1/{kind}/{key}/history`): the events its
//! transactions recorded (`engine::history`), newest first, as the API
//! answers them.

use lockbroker_api::{
    EndReason, LockEvent, LockEventKind, LockHistory, HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT,
};

use super::{
    request::{limit_param, query_pairs, unknown_param},
    ApiError,
};
use crate::{
    engine::{self, Engine, LockRef},
    store::history::{EndCause, EventKind},
};

/// The `limit` of a history query: 1 to [`HISTORY_MAX_LIMIT`], default
/// [`HISTORY_DEFAULT_LIMIT`]; other parameters are refused (400).
///
/// # Errors
/// 400 for another parameter or a `limit` out of range.
pub fn limit(query: Option<&str>) -> Result<u32, ApiError> {
    let mut limit = HISTORY_DEFAULT_LIMIT;
    for (name, value) in query_pairs(query) {
        if name != "limit" {
            return Err(unknown_param(name, "limit"));
        }
        limit = limit_param(value, HISTORY_MAX_LIMIT)?;
    }
    Ok(limit)
}

/// The latest `limit` events of `lock`, newest first.
///
/// # Errors
/// 503 when the database is unavailable.
pub async fn latest(engine: &Engine, lock: &LockRef, limit: u32) -> Result<LockHistory, ApiError> {
    let events = engine.history(lock, limit).await?;
    Ok(LockHistory {
        events: events.into_iter().map(event).collect(),
    })
}

/// A recorded event as the API shows it.
pub fn event(e: engine::LockEvent) -> LockEvent {
    LockEvent {
        event: kind(e.event),
        owner: e.owner,
        token: e.token,
        at: e
            .at
            .and_utc()
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        policy: e.policy,
        session: e.session,
        reason: e.reason.map(reason),
    }
}

/// The API's name of why a session's end released a lease.
pub fn reason(cause: EndCause) -> EndReason {
    match cause {
        EndCause::SessionClosed => EndReason::SessionClosed,
        EndCause::SessionExpired => EndReason::SessionExpired,
    }
}

/// The API's name of a stored event kind.
pub fn kind(kind: EventKind) -> LockEventKind {
    match kind {
        EventKind::Granted => LockEventKind::Granted,
        EventKind::Released => LockEventKind::Released,
        EventKind::Expired => LockEventKind::Expired,
        EventKind::HandedOff => LockEventKind::HandedOff,
        EventKind::ForceReleased => LockEventKind::ForceReleased,
        EventKind::SessionEnded => LockEventKind::SessionEnded,
        EventKind::Deadlock => LockEventKind::Deadlock,
    }
}
