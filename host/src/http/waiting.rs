//! Who waits (issue #32), as the API answers it: a key's queue
//! (`GET /v1/{kind}/{key}/waiters`, through `resource`) and the tenant's
//! wait-for graph (`GET /v1/waits-for`).

use hyper::{body::Incoming, Method, Request};
use lockbroker_api::{
    Contention, HeldByKind, HotKey, KeyWaiters, QueuedWaiter, RefusedWait, WaitForEdge, WaitParty,
    WaitsFor, CONTENTION_DEFAULT_TOP, CONTENTION_DEFAULT_WINDOW_S, CONTENTION_MAX_TOP,
    CONTENTION_MAX_WINDOW_S, WAITERS_DEFAULT_LIMIT, WAITERS_MAX_LIMIT,
};
use percent_encoding::percent_decode_str;

use super::{
    access::Seen,
    error::cycle_steps,
    ok,
    request::{authenticate, limit_param, query_pairs, unknown_param},
    resource::rfc3339,
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{self, Engine, LockRef, RwMode},
    tenant::Tenant,
};

/// The `limit` of a queue: 1 to [`WAITERS_MAX_LIMIT`], default
/// [`WAITERS_DEFAULT_LIMIT`]; other parameters are refused (400).
///
/// # Errors
/// 400 for another parameter or a `limit` out of range.
pub fn limit(query: Option<&str>) -> Result<u32, ApiError> {
    let mut limit = WAITERS_DEFAULT_LIMIT;
    for (name, value) in query_pairs(query) {
        if name != "limit" {
            return Err(unknown_param(name, "limit"));
        }
        limit = limit_param(value, WAITERS_MAX_LIMIT)?;
    }
    Ok(limit)
}

/// `lock`'s queue in the order it will be served, up to `limit`.
///
/// # Errors
/// 503 when the database is unavailable.
pub async fn queue(engine: &Engine, lock: &LockRef, limit: u32) -> Result<KeyWaiters, ApiError> {
    let queue = engine.queue(lock, limit).await?;
    Ok(KeyWaiters {
        key: lock.key.clone(),
        storage_key: lock.storage_key.clone(),
        waiters: queue
            .entries
            .into_iter()
            .zip(0u32..)
            .map(|(w, position)| QueuedWaiter {
                position,
                owner: w.owner,
                session: w.session,
                priority: w.priority,
                waiting_since: rfc3339(w.since),
                deadline: rfc3339(w.deadline),
                broker: w.broker,
                mode: w.mode.map(|mode| match mode {
                    RwMode::Read => lockbroker_api::RwMode::Read,
                    RwMode::Write => lockbroker_api::RwMode::Write,
                }),
                in_memory: w.in_memory,
            })
            .collect(),
        truncated: queue.truncated,
        complete: queue.complete,
    })
}

/// Show who waits for whom
///
/// The wait-for graph of the tenant's keys that start with `prefix`: an
/// edge from each waiter (up to `limit`, oldest first; in the database
/// queue or in a broker's memory) to each holder of the key it waits for
/// (a read waiter only to a writer). A party is a session when the lease
/// or the wait is in one, else an owner. Cycles (parties that wait for
/// each other round: a deadlock until a wait runs out) are listed and
/// their edges flagged. A preview: it changes with every grant.
#[utoipa::path(
    get,
    path = "/v1/waits-for",
    operation_id = "getWaitsFor",
    tag = "contention",
    params(
        ("prefix" = Option<String>, Query, description = "Only keys (storage keys) that start \
with these bytes (percent-encoded; matched literally)."),
        ("limit" = Option<u32>, Query, description = "Waiters at most: 1 to 1000; default 100."),
    ),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The graph.", body = WaitsFor),
        (status = 400, response = super::responses::BadRequest),
        super::responses::ReadErrors,
    )
)]
pub async fn waits_for(
    app: &App,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    let (tenant, query) = tenant_get(app, &req, seen).await?;
    Ok(ok(&graph_of(app, &tenant, query.as_deref()).await?))
}

/// `tenant`'s wait-for graph as `query` asks (`prefix`, `limit`): the
/// tenant's own call and the admin's.
///
/// # Errors
/// 400 for a bad query; 503.
pub async fn graph_of(
    app: &App,
    tenant: &Tenant,
    query: Option<&str>,
) -> Result<WaitsFor, ApiError> {
    let (mut prefix, mut limit) = (String::new(), WAITERS_DEFAULT_LIMIT);
    for (name, value) in query_pairs(query) {
        match name {
            "prefix" => prefix = decode_prefix(value)?,
            "limit" => limit = limit_param(value, WAITERS_MAX_LIMIT)?,
            other => return Err(unknown_param(other, "prefix, limit")),
        }
    }
    let graph = app
        .engine(tenant)
        .waits_for(&tenant.name, prefix, limit)
        .await?;
    Ok(WaitsFor {
        edges: graph
            .edges
            .into_iter()
            .map(|e| WaitForEdge {
                waiter: party(e.waiter),
                holder: party(e.holder),
                kind: e.kind.name().to_owned(),
                storage_key: e.storage_key,
                since: rfc3339(e.since),
                in_cycle: e.in_cycle,
            })
            .collect(),
        cycles: graph
            .cycles
            .into_iter()
            .map(|c| c.into_iter().map(party).collect())
            .collect(),
        truncated: graph.truncated,
        complete: graph.complete,
        refused: graph
            .refused
            .into_iter()
            .map(|r| RefusedWait {
                at: r
                    .at
                    .and_utc()
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                cycle: cycle_steps(r.cycle),
            })
            .collect(),
    })
}

/// Show the most contended keys
///
/// The tenant's keys that start with `prefix` ranked by contention over
/// the last `window_s` seconds (handoffs plus refusals, then grants),
/// the `top` first: their grants, handoffs and refusals and how long
/// grants waited, every live broker's counts added up (each broker keeps
/// its own, in ten-second buckets, for five minutes, in memory), and who
/// holds and how many wait now.
#[utoipa::path(
    get,
    path = "/v1/contention",
    operation_id = "getContention",
    tag = "contention",
    params(
        ("prefix" = Option<String>, Query, description = "Only keys (storage keys) that start \
with these bytes (percent-encoded; matched literally)."),
        ("window_s" = Option<u64>, Query, description = "The window in seconds: 1 to 300, \
rounded up to a multiple of 10; default 60."),
        ("top" = Option<u32>, Query, description = "Keys at most: 1 to 100; default 10."),
    ),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The hottest keys.", body = Contention),
        (status = 400, response = super::responses::BadRequest),
        super::responses::ReadErrors,
    )
)]
pub async fn contention(
    app: &App,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    let (tenant, query) = tenant_get(app, &req, seen).await?;
    Ok(ok(&hottest(app, &tenant, query.as_deref()).await?))
}

/// `tenant`'s most contended keys as `query` asks (`prefix`,
/// `window_s`, `top`): the tenant's own call and the admin's.
///
/// # Errors
/// 400 for a bad query; 503.
pub async fn hottest(
    app: &App,
    tenant: &Tenant,
    query: Option<&str>,
) -> Result<Contention, ApiError> {
    let (mut prefix, mut window_s, mut top) = (
        String::new(),
        CONTENTION_DEFAULT_WINDOW_S,
        CONTENTION_DEFAULT_TOP,
    );
    for (name, value) in query_pairs(query) {
        match name {
            "prefix" => prefix = decode_prefix(value)?,
            "window_s" => {
                window_s =
                    u64::from(limit_param(value, CONTENTION_MAX_WINDOW_S as u32).map_err(
                        |_| ApiError::bad_request("window_s must be 1 to 300 (seconds)"),
                    )?);
            }
            "top" => top = limit_param(value, CONTENTION_MAX_TOP)?,
            other => return Err(unknown_param(other, "prefix, window_s, top")),
        }
    }
    let window_s = window_s.div_ceil(10) * 10;
    let engine = app.engine(tenant);
    let hot = engine
        .contention(&tenant.name, prefix, window_s, top as usize)
        .await?;
    Ok(Contention {
        window_s,
        keys: hot
            .keys
            .into_iter()
            .map(|k| HotKey {
                kind: k.kind.name().to_owned(),
                storage_key: k.storage_key,
                grants: k.counts.grants,
                handoffs: k.counts.handoffs,
                refusals: k.counts.refusals,
                wait_p50_ms: k.counts.wait_quantile_ms(0.5),
                wait_p99_ms: k.counts.wait_quantile_ms(0.99),
                waiters: k.waiters,
                holders: k.holders.into_iter().map(party).collect(),
            })
            .collect(),
        complete: hot.complete,
        held: hot.held.map(|h| HeldByKind {
            lock: h.locks,
            election: h.elections,
            semaphore: h.semaphores,
            rwlock: h.rwlocks,
        }),
    })
}

/// A `GET` of a tenant: its tenant (authenticated) and its query.
///
/// # Errors
/// 405 for another method; 401.
async fn tenant_get(
    app: &App,
    req: &Request<Incoming>,
    seen: &mut Seen,
) -> Result<(std::sync::Arc<Tenant>, Option<String>), ApiError> {
    if req.method() != Method::GET {
        return Err(ApiError::method_not_allowed("GET"));
    }
    let tenant = authenticate(app, req.headers()).await?;
    seen.tenant = Some(tenant.name.clone());
    Ok((tenant, req.uri().query().map(str::to_owned)))
}

/// A party as the API shows it.
fn party(p: engine::Party) -> WaitParty {
    WaitParty {
        owner: p.owner,
        session: p.session,
    }
}

/// A `prefix` query value: percent-encoded (`+` a space), as a listing's.
fn decode_prefix(value: &str) -> Result<String, ApiError> {
    Ok(percent_decode_str(&value.replace('+', " "))
        .decode_utf8()
        .map_err(|_| ApiError::bad_request("prefix is not UTF-8"))?
        .into_owned())
}
