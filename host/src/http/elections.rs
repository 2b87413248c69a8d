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
    engine::{Engine, Grant, LockRef, LockState},
    store::Kind,
    tenant::Tenant,
};

/// How often an observer looks at the election.
const OBSERVE_TICK: Duration = Duration::from_millis(50);
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
            } => leadership(
                &lock,
                &engine
                    .acquire(&lock, &candidate, ttl_ms, wait_ms, 0)
                    .await?,
            ),
            ElectionCommand::Renew {
                candidate,
                term,
                ttl_ms,
            } => leadership(&lock, &engine.renew(&lock, &candidate, term, ttl_ms).await?),
            ElectionCommand::Resign { candidate, term } => {
                engine.release(&lock, &candidate, term).await?;
                json!({"resigned": true})
            }
            ElectionCommand::Status => state_json(&lock, &engine.inspect(&lock).await?),
            ElectionCommand::Observe => {
                // Fail now (503) rather than inside the stream if the
                // database is down.
                let after = engine.last_term(&lock).await?;
                let first = engine.inspect(&lock).await?;
                return Ok(observe(engine.clone(), lock, first, after));
            }
        };
        Ok(json_response(StatusCode::OK, &body))
    }
}

fn leadership(lock: &LockRef, grant: &Grant) -> Value {
    json!({
        "name": lock.key,
        "leader": grant.owner,
        "term": grant.token,
        "ttl_ms": grant.ttl_ms,
        "expires_at": rfc3339(grant.expires_at),
    })
}

fn state_json(lock: &LockRef, state: &LockState) -> Value {
    json!({
        "name": lock.key,
        "leader": state.owner,
        "term": state.token,
        "expires_at": state.expires_at.map(rfc3339),
    })
}

/// Streams one `leader` event now and one per change of leader after:
/// every new term (from the election's term log, so a leader that lasted
/// less than a tick is seen too) and every vacancy (resignation or expiry,
/// `leader: null`), until the client leaves or the broker stops.
fn observe(engine: Engine, lock: LockRef, first: LockState, mut after: u64) -> Response {
    let (tx, response) = sse::stream();
    let mut stop = engine.stop_signal();
    tokio::spawn(async move {
        let mut vacant = !first.held;
        if tx
            .send(sse::event("leader", &state_json(&lock, &first)))
            .await
            .is_err()
        {
            return;
        }
        let mut quiet = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(OBSERVE_TICK) => {}
                () = tx.closed() => return,
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            let mut events = Vec::new();
            let Ok(terms) = engine.terms_since(&lock, after).await else {
                continue; // the database is away; try again next tick
            };
            for term in terms {
                after = term.term;
                vacant = false;
                events.push(json!({
                    "name": lock.key,
                    "leader": String::from_utf8_lossy(&term.leader),
                    "term": term.term,
                    "expires_at": rfc3339(term.expires_at),
                }));
            }
            if !vacant {
                if let Ok(state) = engine.inspect(&lock).await {
                    // A term newer than `after` shows up in the log next tick.
                    if !state.held {
                        vacant = true;
                        events.push(state_json(&lock, &state));
                    }
                }
            }
            let messages: Vec<Bytes> = if events.is_empty() && quiet.elapsed() >= KEEP_ALIVE {
                vec![Bytes::from_static(b": keep-alive\n\n")]
            } else {
                events.iter().map(|e| sse::event("leader", e)).collect()
            };
            if messages.is_empty() {
                continue;
            }
            quiet = tokio::time::Instant::now();
            for message in messages {
                if tx.send(message).await.is_err() {
                    return;
                }
            }
        }
    });
    response
}
