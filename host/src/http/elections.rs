//! `/v1/elections/{name}`: campaign, resign, renew, current leader, and
//! `observe` (Server-Sent Events, one event per change of leader).
//!
//! An election is a lease like a lock, in its own namespace: the leader is
//! the holder and the term is the fencing token. A leader campaigning again
//! stays leader with the same term (no hold count).

use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    json_response,
    locks::{rfc3339, route_action, ttl, MAX_OWNER_BYTES, MAX_WAIT_MS},
    request::{check_len, check_range, parse_json},
    router::Command,
    sse, ApiError, Response,
};
use crate::{
    app::App,
    engine::{Engine, Grant, Leadership, LockRef, Observation},
    store::Kind,
    tenant::Tenant,
};

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize)]
struct CampaignBody {
    candidate: String,
    ttl_ms: Option<u64>,
    #[serde(default)]
    wait_ms: u64,
}

#[derive(Debug, Deserialize)]
struct TermBody {
    candidate: String,
    term: u64,
    ttl_ms: Option<u64>,
}

/// One election request, parsed and checked.
#[derive(Debug)]
pub enum ElectionCommand {
    Campaign {
        candidate: String,
        ttl_ms: u64,
        wait_ms: u64,
    },
    Resign {
        candidate: String,
        term: u64,
    },
    Renew {
        candidate: String,
        term: u64,
        ttl_ms: u64,
    },
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
            "campaign" => {
                let b: CampaignBody = parse_json(body)?;
                check_len("candidate", &b.candidate, MAX_OWNER_BYTES)?;
                ElectionCommand::Campaign {
                    ttl_ms: ttl(tenant, b.ttl_ms)?,
                    wait_ms: check_range("wait_ms", b.wait_ms, 0, MAX_WAIT_MS)?,
                    candidate: b.candidate,
                }
            }
            "resign" | "renew" => {
                let b: TermBody = parse_json(body)?;
                check_len("candidate", &b.candidate, MAX_OWNER_BYTES)?;
                if action == "resign" {
                    ElectionCommand::Resign {
                        candidate: b.candidate,
                        term: b.term,
                    }
                } else {
                    ElectionCommand::Renew {
                        ttl_ms: ttl(tenant, b.ttl_ms)?,
                        candidate: b.candidate,
                        term: b.term,
                    }
                }
            }
            "observe" => ElectionCommand::Observe,
            _ => ElectionCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let engine = app.engine(&lock.tenant);
        let body = match self {
            ElectionCommand::Campaign {
                candidate,
                ttl_ms,
                wait_ms,
            } => term_json(
                &lock,
                &engine
                    .acquire(&lock, &candidate, ttl_ms, wait_ms, 0)
                    .await?,
            ),
            ElectionCommand::Renew {
                candidate,
                term,
                ttl_ms,
            } => term_json(&lock, &engine.renew(&lock, &candidate, term, ttl_ms).await?),
            ElectionCommand::Resign { candidate, term } => {
                engine.release(&lock, &candidate, term).await?;
                json!({"resigned": true})
            }
            ElectionCommand::Status => {
                leadership(&lock, &Leadership::from(&engine.inspect(&lock).await?))
            }
            ElectionCommand::Observe => {
                // Fail now (503) rather than inside the stream if the
                // database is down.
                let observation = engine.observe(&lock).await?;
                return Ok(observe(engine, lock, observation));
            }
        };
        Ok(json_response(StatusCode::OK, &body))
    }
}

/// A campaign's or a renewal's answer.
fn term_json(lock: &LockRef, grant: &Grant) -> Value {
    json!({
        "name": lock.key,
        "leader": grant.owner,
        "term": grant.token,
        "ttl_ms": grant.ttl_ms,
        "expires_at": rfc3339(grant.expires_at),
    })
}

/// The leadership of an election (status, and each observed event).
fn leadership(lock: &LockRef, now: &Leadership) -> Value {
    json!({
        "name": lock.key,
        "leader": now.leader,
        "term": now.term,
        "expires_at": now.expires_at.map(rfc3339),
    })
}

/// Streams one `leader` event now and one per change of leader after
/// (every new term, every vacancy), until the client leaves or the broker
/// stops; a comment line keeps an idle stream alive.
fn observe(engine: &Engine, lock: LockRef, mut observation: Observation) -> Response {
    let (tx, response) = sse::stream();
    let mut stop = engine.stop_signal();
    tokio::spawn(async move {
        let first = sse::event("leader", &leadership(&lock, &observation.first));
        if tx.send(first).await.is_err() {
            return;
        }
        loop {
            let message = tokio::select! {
                change = observation.next() => match change {
                    Ok(change) => sse::event("leader", &leadership(&lock, &change)),
                    Err(_) => return,
                },
                () = tokio::time::sleep(KEEP_ALIVE) => Bytes::from_static(b": keep-alive\n\n"),
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
