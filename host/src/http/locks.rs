//! `/v1/locks/{key}`: acquire, release, renew, status.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    json_response,
    request::{check_len, check_range, parse_json},
    router::Command,
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{Grant, LockRef},
    store::Kind,
    tenant::Tenant,
};

/// Longest `owner`, in bytes.
pub const MAX_OWNER_BYTES: usize = 128;
/// Default lease length when `ttl_ms` is not given.
pub const DEFAULT_TTL_MS: u64 = 30_000;
/// Shortest lease.
pub const MIN_TTL_MS: u64 = 100;
/// Longest wait.
pub const MAX_WAIT_MS: u64 = 300_000;

#[derive(Debug, Deserialize)]
struct AcquireBody {
    owner: String,
    ttl_ms: Option<u64>,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    priority: i32,
}

#[derive(Debug, Deserialize)]
struct ReleaseBody {
    owner: String,
    token: u64,
}

#[derive(Debug, Deserialize)]
struct RenewBody {
    owner: String,
    token: u64,
    ttl_ms: Option<u64>,
}

/// One lock request, parsed and checked.
#[derive(Debug)]
pub enum LockCommand {
    Acquire {
        owner: String,
        ttl_ms: u64,
        wait_ms: u64,
        priority: i32,
    },
    Release {
        owner: String,
        token: u64,
    },
    Renew {
        owner: String,
        token: u64,
        ttl_ms: u64,
    },
    Status,
}

/// Which action a method and path tail name, before the body is read: `GET`
/// on the key itself is `status`, `POST` on `{key}/{action}` one of
/// `actions`, `GET` on `{key}/{action}` one of `get_actions`.
///
/// # Errors
/// 404 for an unknown action, 405 for a wrong method.
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
        return Err(ApiError::method_not_allowed());
    }
    Ok(action)
}

/// A lease length: the default (capped by the tenant's maximum) or checked.
pub fn ttl(tenant: &Tenant, ttl_ms: Option<u64>) -> Result<u64, ApiError> {
    match ttl_ms {
        None => Ok(DEFAULT_TTL_MS.min(tenant.max_ttl_ms)),
        Some(ms) => check_range("ttl_ms", ms, MIN_TTL_MS, tenant.max_ttl_ms),
    }
}

impl Command for LockCommand {
    const KIND: Kind = Kind::Lock;

    fn route(method: &Method, tail: &[&str]) -> Result<&'static str, ApiError> {
        route_action(method, tail, &["acquire", "release", "renew"], &[])
    }

    fn parse(action: &str, body: &Bytes, tenant: &Tenant) -> Result<LockCommand, ApiError> {
        Ok(match action {
            "acquire" => {
                let b: AcquireBody = parse_json(body)?;
                check_len("owner", &b.owner, MAX_OWNER_BYTES)?;
                LockCommand::Acquire {
                    ttl_ms: ttl(tenant, b.ttl_ms)?,
                    wait_ms: check_range("wait_ms", b.wait_ms, 0, MAX_WAIT_MS)?,
                    priority: b.priority,
                    owner: b.owner,
                }
            }
            "release" => {
                let b: ReleaseBody = parse_json(body)?;
                check_len("owner", &b.owner, MAX_OWNER_BYTES)?;
                LockCommand::Release {
                    owner: b.owner,
                    token: b.token,
                }
            }
            "renew" => {
                let b: RenewBody = parse_json(body)?;
                check_len("owner", &b.owner, MAX_OWNER_BYTES)?;
                LockCommand::Renew {
                    ttl_ms: ttl(tenant, b.ttl_ms)?,
                    owner: b.owner,
                    token: b.token,
                }
            }
            _ => LockCommand::Status,
        })
    }

    async fn apply(self, app: &App, lock: LockRef) -> Result<Response, ApiError> {
        let (engine, lock) = (app.engine(&lock.tenant), &lock);
        let body = match self {
            LockCommand::Acquire {
                owner,
                ttl_ms,
                wait_ms,
                priority,
            } => grant_json(
                lock,
                &engine
                    .acquire(lock, &owner, ttl_ms, wait_ms, priority)
                    .await?,
            ),
            LockCommand::Renew {
                owner,
                token,
                ttl_ms,
            } => grant_json(lock, &engine.renew(lock, &owner, token, ttl_ms).await?),
            LockCommand::Release { owner, token } => {
                let released = engine.release(lock, &owner, token).await?;
                json!({"released": released.released, "hold_count": released.hold_count})
            }
            LockCommand::Status => {
                let state = engine.inspect(lock).await?;
                json!({
                    "key": lock.key,
                    "storage_key": lock.storage_key,
                    "held": state.held,
                    "owner": state.owner,
                    "token": state.token,
                    "expires_at": state.expires_at.map(rfc3339),
                    "waiters": state.waiters,
                })
            }
        };
        Ok(json_response(StatusCode::OK, &body))
    }
}

fn grant_json(lock: &LockRef, grant: &Grant) -> Value {
    json!({
        "key": lock.key,
        "storage_key": lock.storage_key,
        "owner": grant.owner,
        "token": grant.token,
        "hold_count": grant.hold_count,
        "ttl_ms": grant.ttl_ms,
        "expires_at": rfc3339(grant.expires_at),
    })
}

/// A database time (UTC) as `2026-11-21T10:00:00.000Z`.
pub fn rfc3339(t: chrono::NaiveDateTime) -> String {
    t.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
