//! `/v1/sessions`: sessions (issue #30). `POST /v1/sessions` opens one,
//! `GET /v1/sessions` lists them, `GET|DELETE /v1/sessions/{id}` shows or
//! closes one, `POST /v1/sessions/{id}/keepalive` keeps it (and every
//! lease held in it) alive. A session of another tenant is 404, as one
//! that never existed.

use hyper::{body::Incoming, Method, Request, StatusCode};
use lockbroker_api::{
    CreateSessionRequest, Page, Session, SessionClosed, SessionKeepalive, SessionLease,
    SessionStatus, LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT, SESSION_DEFAULT_TTL_MS,
    SESSION_MAX_LOCK_DELAY_MS, SESSION_MAX_NAME_BYTES, SESSION_MAX_TTL_MS, SESSION_MIN_TTL_MS,
};
use percent_encoding::percent_decode_str;

use super::{
    access::Seen,
    json_response, listing, ok,
    request::{
        authenticate, check_len, check_range, limit_param, parse_json, query_pairs, read_body,
        unknown_param,
    },
    resource::rfc3339,
    responses::{KeyedErrors, ReadErrors, SessionNotFound},
    ApiError, Response,
};
use crate::{
    app::App,
    engine::{Scope, SessionInfo},
};

/// Routes `/v1/sessions/{tail}`.
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    tail: &[&str],
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let (action, allow) = match (tail, &method) {
        ([], &Method::POST) => ("open", ""),
        ([], &Method::GET) => ("list", ""),
        ([], _) => ("open", "GET, POST"),
        ([_], &Method::GET) => ("status", ""),
        ([_], &Method::DELETE) => ("close", ""),
        ([_], _) => ("status", "GET, DELETE"),
        ([_, "keepalive"], &Method::POST) => ("keepalive", ""),
        ([_, "keepalive"], _) => ("keepalive", "POST"),
        _ => return Err(ApiError::not_found("no such path")),
    };
    seen.action = action;
    if !allow.is_empty() {
        return Err(ApiError::method_not_allowed(allow));
    }
    let tenant = authenticate(app, req.headers()).await?;
    seen.tenant = Some(tenant.name.clone());
    let engine = app.engine(&tenant);
    let id = tail
        .first()
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned());
    match action {
        "open" => {
            let body = read_body(req, lockbroker_api::MAX_BODY_BYTES).await?;
            // An object: serde would read an array as the struct's fields.
            let value: serde_json::Value = parse_json(&body)?;
            if !value.is_object() {
                return Err(ApiError::bad_request(
                    "invalid JSON body: a JSON object is required",
                ));
            }
            let request: CreateSessionRequest = parse_json(&body)?;
            let session = open(engine, &tenant, request).await?;
            Ok(json_response(StatusCode::CREATED, &session))
        }
        "list" => Ok(ok(&list(engine, &tenant.name, req.uri().query()).await?)),
        "status" => Ok(ok(
            &status(engine, &tenant.name, &id.unwrap_or_default()).await?
        )),
        "close" => {
            let scope = Scope::of(&tenant);
            let closed = close(engine, scope, &id.unwrap_or_default()).await?;
            // Its leases no longer count toward `max_held`.
            tenant.held.released(closed.released).await;
            Ok(ok(&closed))
        }
        _ => Ok(ok(&keepalive(
            engine,
            &tenant.name,
            &id.unwrap_or_default(),
        )
        .await?)),
    }
}

/// A session as the API answers it.
fn session(info: SessionInfo) -> Session {
    Session {
        id: info.id,
        name: info.name,
        ttl_ms: info.ttl_ms,
        lock_delay_ms: info.lock_delay_ms,
        created_at: rfc3339(info.created_at),
        expires_at: rfc3339(info.expires_at),
    }
}

/// Open a session
///
/// A session holds many leases alive with one keepalive (every third of
/// its TTL is a good pace): name its `id` as `session` in an acquire, in
/// place of `ttl_ms`. When it ends, closed or expired by the database
/// clock, every lease in it ends at once, each key handed to its next
/// waiter. Sessions hold locks and elections' leaderships for now; the
/// other kinds answer 400 when given one. A tenant has at most `max_sessions` live sessions.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "openSession",
    tag = "sessions",
    request_body = CreateSessionRequest,
    security(("tenantKey" = [])),
    responses(
        (status = 201, description = "The session, open.", body = Session),
        (status = 429, description = "`quota_exceeded`: the tenant has `max_sessions` live \
sessions (tenant config, default 100,000; counted in the database), nothing was opened; \
`rate_limited`: the tenant sent more than its `max_requests_per_s` to this broker.",
            body = lockbroker_api::ErrorBody),
        KeyedErrors,
    )
)]
async fn open(
    engine: &crate::engine::Engine,
    tenant: &crate::tenant::Tenant,
    request: CreateSessionRequest,
) -> Result<Session, ApiError> {
    let ttl_ms = check_range(
        "ttl_ms",
        request.ttl_ms.unwrap_or(SESSION_DEFAULT_TTL_MS),
        SESSION_MIN_TTL_MS,
        SESSION_MAX_TTL_MS,
    )?;
    let lock_delay_ms = check_range(
        "lock_delay_ms",
        request.lock_delay_ms.unwrap_or(0),
        0,
        SESSION_MAX_LOCK_DELAY_MS,
    )?;
    let name = request.name.unwrap_or_default();
    if name.len() > SESSION_MAX_NAME_BYTES {
        check_len("name", &name, SESSION_MAX_NAME_BYTES)?;
    }
    let info = engine
        .open_session(
            &tenant.name,
            name,
            (ttl_ms, lock_delay_ms),
            tenant.max_sessions,
        )
        .await?;
    Ok(session(info))
}

/// Keep a session alive
///
/// Extends the session by its TTL from now (database clock): every lease
/// held in it lives on. 404 `session_not_found` once it has ended (closed,
/// or expired): its leases are gone.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/keepalive",
    operation_id = "keepSessionAlive",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.",
        example = "9f2c4e1a0b7d4c3e8f6a5b2d1c0e9f8a")),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The new expiry.", body = SessionKeepalive),
        (status = 404, response = SessionNotFound),
        ReadErrors,
    )
)]
async fn keepalive(
    engine: &crate::engine::Engine,
    tenant: &str,
    id: &str,
) -> Result<SessionKeepalive, ApiError> {
    let expires_at = engine.keepalive(tenant, id).await?;
    Ok(SessionKeepalive {
        id: id.to_owned(),
        expires_at: rfc3339(expires_at),
    })
}

/// Close a session
///
/// Ends the session and releases every lease held in it, each key handed
/// to its next waiter as a release would (no lock-delay: that is for
/// expiries). `released` counts them. 404 `session_not_found` when it had
/// ended already.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    operation_id = "closeSession",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.",
        example = "9f2c4e1a0b7d4c3e8f6a5b2d1c0e9f8a")),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "Closed; its leases released.", body = SessionClosed),
        (status = 404, response = SessionNotFound),
        ReadErrors,
    )
)]
async fn close(
    engine: &crate::engine::Engine,
    scope: Scope,
    id: &str,
) -> Result<SessionClosed, ApiError> {
    let released = engine.close_session(scope, id).await?;
    Ok(SessionClosed {
        closed: true,
        released,
    })
}

/// A session and its leases
///
/// The session (by the database clock) and every lease held in it.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    operation_id = "getSession",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.",
        example = "9f2c4e1a0b7d4c3e8f6a5b2d1c0e9f8a")),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "The session and its leases.", body = SessionStatus),
        (status = 404, response = SessionNotFound),
        ReadErrors,
    )
)]
async fn status(
    engine: &crate::engine::Engine,
    tenant: &str,
    id: &str,
) -> Result<SessionStatus, ApiError> {
    let (info, held) = engine.session(tenant, id).await?;
    Ok(SessionStatus {
        session: session(info),
        leases: held
            .into_iter()
            .map(|lease| SessionLease {
                kind: lease.kind.name().to_owned(),
                key: lease.storage_key.clone(),
                storage_key: lease.storage_key,
                token: lease.token,
                slot: lease.slot,
                mode: lease.mode.map(|mode| {
                    match mode {
                        crate::engine::RwMode::Read => "read",
                        crate::engine::RwMode::Write => "write",
                    }
                    .to_owned()
                }),
            })
            .collect(),
    })
}

/// List sessions
///
/// The tenant's live sessions whose name starts with `prefix` (bytes,
/// matched literally), ordered by name then id, a page at a time (`next`
/// is the cursor of the next page, null after the last).
#[utoipa::path(
    get,
    path = "/v1/sessions",
    operation_id = "listSessions",
    tag = "sessions",
    params(
        ("prefix" = Option<String>, Query, description = "Only sessions whose name starts with \
these bytes (percent-encoded; matched literally)."),
        ("limit" = Option<u32>, Query, description = "1 to 1000; default 100."),
        ("cursor" = Option<String>, Query, description = "The previous page's `next`."),
    ),
    security(("tenantKey" = [])),
    responses(
        (status = 200, description = "A page of sessions.", body = SessionPage),
        (status = 400, response = super::responses::BadRequest),
        ReadErrors,
    )
)]
async fn list(
    engine: &crate::engine::Engine,
    tenant: &str,
    query: Option<&str>,
) -> Result<Page<Session>, ApiError> {
    let (mut prefix, mut after, mut limit) = (Vec::new(), None, LIST_DEFAULT_LIMIT);
    for (name, value) in query_pairs(query) {
        match name {
            "prefix" => prefix = percent_decode_str(&value.replace('+', " ")).collect(),
            "limit" => limit = limit_param(value, LIST_MAX_LIMIT)?,
            "cursor" => after = Some(cursor_of(value)?),
            _ => return Err(unknown_param(name, "prefix, limit, cursor")),
        }
    }
    let (items, next) = engine.list_sessions(tenant, prefix, after, limit).await?;
    Ok(Page {
        items: items.into_iter().map(session).collect(),
        next: next.map(|(name, id)| format!("{}.{}", listing::cursor(&name), listing::cursor(&id))),
    })
}

/// The (name, id) a session listing's cursor goes on after.
fn cursor_of(cursor: &str) -> Result<(Vec<u8>, Vec<u8>), ApiError> {
    let malformed = || ApiError::bad_request("the cursor is not one a listing gave");
    let (name, id) = cursor.split_once('.').ok_or_else(malformed)?;
    let hex = |s: &str| -> Result<Vec<u8>, ApiError> {
        if !s.len().is_multiple_of(2) || s.len() > 2 * 512 {
            return Err(malformed());
        }
        (0..s.len())
            .step_by(2)
            .map(|i| {
                s.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
                    .ok_or_else(malformed)
            })
            .collect()
    };
    let id = hex(id)?;
    if id.is_empty() {
        return Err(malformed());
    }
    Ok((hex(name)?, id))
}

/// A page of sessions (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SessionPage {
    /// The live sessions of this page, by name then id.
    items: Vec<Session>,
    /// The cursor of the next page (`cursor=`), opaque; null after the last.
    #[schema(required = true)]
    next: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_the_session_a_page_ended_at() {
        let cursor = format!("{}.{}", listing::cursor(b"job a"), listing::cursor(b"ab12"));
        assert_eq!(
            cursor_of(&cursor).unwrap(),
            (b"job a".to_vec(), b"ab12".to_vec())
        );
        assert_eq!(cursor_of(".00").unwrap(), (Vec::new(), vec![0]));
        for bad in ["", "abc", "zz.00", "00.", "0.00"] {
            assert!(cursor_of(bad).is_err(), "{bad}");
        }
    }
}
