//! `/v1/semaphores/{key}`: acquire, release, renew, status.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    json_response,
    locks::{rfc3339, route_action, ttl, MAX_OWNER_BYTES, MAX_WAIT_MS},
    request::{check_len, check_range, parse_json},
    router::Command,
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{LockRef, SemaphoreGrant},
    store::Kind,
    tenant::Tenant,
};

/// Largest semaphore.
pub const MAX_PERMITS: u64 = 1000;

#[derive(Debug, Deserialize)]
struct AcquireBody {
    owner: String,
    permits: u64,
    ttl_ms: Option<u64>,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    priority: i32,
}

#[derive(Debug, Deserialize)]
struct SlotBody {
    owner: String,
    slot: u32,
    token: u64,
    ttl_ms: Option<u64>,
}

/// One semaphore request, parsed and checked.
#[derive(Debug)]
pub enum SemaphoreCommand {
    Acquire {
        owner: String,
        permits: u32,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    },
    Release {
        owner: String,
        slot: u32,
        token: u64,
    },
    Renew {
        owner: String,
        slot: u32,
        token: u64,
        ttl_ms: u64,
    },
    Status,
}

impl Command for SemaphoreCommand {
    const KIND: Kind = Kind::Semaphore;

    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError> {
        route_action(method, tail, &["acquire", "release", "renew"], &[])
    }

    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<Self, ApiError> {
        Ok(match action {
            "acquire" => {
                let b: AcquireBody = parse_json(body)?;
                check_len("owner", &b.owner, MAX_OWNER_BYTES)?;
                let permits = check_range("permits", b.permits, 1, MAX_PERMITS)?;
                SemaphoreCommand::Acquire {
                    permits: u32::try_from(permits).expect("at most 1000"),
                    ttl_ms: ttl(tenant, b.ttl_ms)?,
                    wait_ms: check_range("wait_ms", b.wait_ms, 0, MAX_WAIT_MS)?,
                    priority: b.priority,
                    owner: b.owner,
                }
            }
            "release" | "renew" => {
                let b: SlotBody = parse_json(body)?;
                check_len("owner", &b.owner, MAX_OWNER_BYTES)?;
                if action == "release" {
                    SemaphoreCommand::Release {
                        owner: b.owner,
                        slot: b.slot,
                        token: b.token,
                    }
                } else {
                    SemaphoreCommand::Renew {
                        ttl_ms: ttl(tenant, b.ttl_ms)?,
                        owner: b.owner,
                        slot: b.slot,
                        token: b.token,
                    }
                }
            }
            _ => SemaphoreCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let (engine, lock) = (app.engine(&lock.tenant), &lock);
        let body = match self {
            SemaphoreCommand::Acquire {
                owner,
                permits,
                ttl_ms,
                wait_ms,
                priority,
            } => {
                let grant = engine
                    .acquire_permit(lock, &owner, permits, ttl_ms, wait_ms, priority)
                    .await?;
                grant_json(lock, &grant)
            }
            SemaphoreCommand::Release { owner, slot, token } => {
                engine.release_slot(lock, &owner, slot, token).await?;
                json!({"released": true, "hold_count": 0})
            }
            SemaphoreCommand::Renew {
                owner,
                slot,
                token,
                ttl_ms,
            } => grant_json(
                lock,
                &engine.renew_slot(lock, &owner, slot, token, ttl_ms).await?,
            ),
            SemaphoreCommand::Status => {
                let state = engine.inspect_semaphore(lock).await?;
                let holders: Vec<Value> = state
                    .holders
                    .iter()
                    .map(|h| {
                        json!({"slot": h.slot, "owner": h.owner, "token": h.token,
                               "expires_at": rfc3339(h.expires_at)})
                    })
                    .collect();
                json!({
                    "key": lock.key,
                    "storage_key": lock.storage_key,
                    "permits": state.permits,
                    "holders": holders,
                    "waiters": state.waiters,
                })
            }
        };
        Ok(json_response(StatusCode::OK, &body))
    }
}

fn grant_json(lock: &LockRef, grant: &SemaphoreGrant) -> Value {
    json!({
        "key": lock.key,
        "storage_key": lock.storage_key,
        "owner": grant.owner,
        "slot": grant.slot,
        "permits": grant.permits,
        "token": grant.token,
        "ttl_ms": grant.ttl_ms,
        "expires_at": rfc3339(grant.expires_at),
    })
}
