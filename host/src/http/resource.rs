//! One model for every lease kind: [`Resource`] is what the broker adds to
//! a kind's wire description ([`LeaseKind`]: its URL segment, action names
//! and types) — which rows hold it, and what each action does with the
//! engine — and [`serve`] is the one pipeline all kinds go through:
//!
//! route (404/405) → authenticate (401) → body (413) → JSON and lease terms
//! (400) → naming policy (422/500) → engine → answer.
//!
//! A kind adds only what is its own: a semaphore's permits, an rwlock's
//! mode, an election's `observe`, a lock's `validate` and `history`
//! ([`Resource::Extra`]). Its OpenAPI operations are generated from the
//! same description (`openapi`), so a new kind is one `impl LeaseKind` in
//! the api crate, one `impl Resource` here, its entry in the router and its
//! prose in `operations.toml`.

use std::future::Future;

use bytes::Bytes;
use hyper::{body::Incoming, Method, Request};
use lockbroker_api::{
    Election, LeaseKind, LeaseRequest, Lock, Page, RwLock, Semaphore, DEFAULT_TTL_MS,
    MAX_OWNER_BYTES, MAX_WAIT_MS, MIN_TTL_MS,
};
use utoipa::ToSchema;

use super::{
    access::Seen,
    history, listing, ok,
    request::{authenticate, check_len, check_range, name_lock, parse_json, read_body},
    waiting, ApiError, Response,
};
use crate::{
    app::App,
    engine::{Ask, Engine, Listing, LockRef, Span},
    quota::Refused,
    store::Kind,
    tenant::Tenant,
};

/// A lease kind as the broker serves it. The wire types come from
/// [`LeaseKind`]; every one has an OpenAPI schema.
pub trait Resource:
    LeaseKind<
    Acquire: ToSchema,
    Renew: ToSchema,
    Release: ToSchema,
    Lease: ToSchema,
    Released: ToSchema,
    Status: ToSchema,
>
{
    /// Which rows hold this kind's leases (its own namespace of keys).
    const KIND: Kind;
    /// The path parameter that names one (`key`; elections: `name`).
    const PARAM: &'static str = "key";
    /// Whether its leases' events are recorded (`GET {key}/history`).
    const HISTORY: bool = true;
    /// The actions of this kind alone, `{key}/{action}`: `(method, name)`.
    const EXTRAS: &'static [(Verb, &'static str)] = &[];

    /// A request of one of [`Resource::EXTRAS`], parsed and checked.
    type Extra: Send;

    /// Grants a lease as `ask` asks (checked).
    fn acquire(
        engine: &Engine,
        lock: &LockRef,
        request: Self::Acquire,
        ask: Ask,
    ) -> impl Future<Output = Result<Self::Lease, ApiError>> + Send;

    /// Extends a lease.
    fn renew(
        engine: &Engine,
        lock: &LockRef,
        request: Self::Renew,
        ask: Ask,
    ) -> impl Future<Output = Result<Self::Lease, ApiError>> + Send;

    /// Gives a lease back.
    fn release(
        engine: &Engine,
        lock: &LockRef,
        request: Self::Release,
    ) -> impl Future<Output = Result<Self::Released, ApiError>> + Send;

    /// The resource now, by the database clock.
    fn status(
        engine: &Engine,
        lock: &LockRef,
    ) -> impl Future<Output = Result<Self::Status, ApiError>> + Send;

    /// A page of the tenant's live resources of this kind, each as its
    /// status (`key` being the storage key: the broker does not keep the
    /// keys clients sent).
    fn list(
        engine: &Engine,
        tenant: &str,
        span: Span,
    ) -> impl Future<Output = Result<Page<Self::Status>, ApiError>> + Send;

    /// Parses a request of one of [`Resource::EXTRAS`] (before the key is
    /// named, so a bad request is 400 whatever its key).
    ///
    /// # Errors
    /// 400 for a malformed body or query.
    fn parse_extra(
        action: &'static str,
        body: &Bytes,
        query: Option<&str>,
    ) -> Result<Self::Extra, ApiError> {
        let _ = (body, query);
        Err(ApiError::not_found(format!("no action {action}")))
    }

    /// Carries out a request of one of [`Resource::EXTRAS`].
    fn extra(
        engine: &Engine,
        lock: LockRef,
        request: Self::Extra,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send {
        let _ = (engine, lock, request);
        async { Err(ApiError::not_found("no such action")) }
    }
}

/// The method of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
}

impl Verb {
    fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
        }
    }
}

/// What `request` asks of the engine: who (`owner`, `candidate`: 1 to
/// [`MAX_OWNER_BYTES`] bytes) and on what terms, checked against the API's
/// and the tenant's limits, defaults filled in.
///
/// # Errors
/// 400 naming the field out of range.
pub fn ask(request: &impl LeaseRequest, tenant: &Tenant) -> Result<Ask, ApiError> {
    let (field, holder) = request.holder();
    let terms = request.terms();
    if let Some(session) = terms.session {
        // A lease in a session: it lives as long as the session.
        if terms.ttl_ms.is_some() {
            return Err(ApiError::bad_request(
                "ttl_ms and session exclude each other: a lease held in a session lives as long as the session",
            ));
        }
        let owner = if holder.is_empty() {
            session.clone()
        } else {
            holder.to_owned()
        };
        check_len(field, &owner, MAX_OWNER_BYTES)?;
        let wait_ms = check_range("wait_ms", terms.wait_ms.unwrap_or(0), 0, MAX_WAIT_MS)?;
        return Ok(Ask::new(owner, 0)
            .wait(wait_ms)
            .priority(terms.priority.unwrap_or(0))
            .in_session(session));
    }
    check_len(field, holder, MAX_OWNER_BYTES)?;
    Ok(Ask {
        owner: holder.to_owned(),
        ttl_ms: match terms.ttl_ms {
            None => DEFAULT_TTL_MS.min(tenant.max_ttl_ms),
            Some(ms) => check_range("ttl_ms", ms, MIN_TTL_MS, tenant.max_ttl_ms)?,
        },
        wait_ms: check_range("wait_ms", terms.wait_ms.unwrap_or(0), 0, MAX_WAIT_MS)?,
        priority: terms.priority.unwrap_or(0),
        session: None,
    })
}

/// What a method and path tail ask of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Acquire,
    Renew,
    Release,
    Status,
    History,
    /// The key's queue (`GET {key}/waiters`).
    Waiters,
    Extra(&'static str),
}

impl Action {
    /// The actions every kind serves.
    pub const LEASE: [Action; 4] = [
        Action::Acquire,
        Action::Renew,
        Action::Release,
        Action::Status,
    ];

    /// Which action `method` on `{key}/{tail}` names.
    ///
    /// # Errors
    /// 404 for an unknown action, 405 (with `Allow`) for a wrong method.
    fn of<R: Resource>(method: &Method, tail: &[&str]) -> Result<Action, ApiError> {
        let (action, verb) = match tail {
            [] => (Action::Status, Verb::Get),
            [name] if *name == R::ACQUIRE => (Action::Acquire, Verb::Post),
            [name] if *name == R::RENEW => (Action::Renew, Verb::Post),
            [name] if *name == R::RELEASE => (Action::Release, Verb::Post),
            ["history"] if R::HISTORY => (Action::History, Verb::Get),
            ["waiters"] => (Action::Waiters, Verb::Get),
            [name] => match R::EXTRAS.iter().find(|(_, extra)| extra == name) {
                Some(&(verb, extra)) => (Action::Extra(extra), verb),
                None => return Err(ApiError::not_found("no such action")),
            },
            _ => return Err(ApiError::not_found("no such action")),
        };
        if *method != verb.method() {
            return Err(ApiError::method_not_allowed(match verb {
                Verb::Get => "GET",
                Verb::Post => "POST",
            }));
        }
        Ok(action)
    }

    /// Its name, in the path and for the request's log line and metrics.
    pub fn name<R: Resource>(self) -> &'static str {
        match self {
            Action::Acquire => R::ACQUIRE,
            Action::Renew => R::RENEW,
            Action::Release => R::RELEASE,
            Action::Status => "status",
            Action::History => "history",
            Action::Waiters => "waiters",
            Action::Extra(name) => name,
        }
    }
}

/// A request parsed, checked and ready to be carried out once its key is
/// named.
enum Parsed<R: Resource> {
    Acquire(R::Acquire, Ask),
    Renew(R::Renew, Ask),
    Release(R::Release),
    Status,
    History { limit: u32 },
    Waiters { limit: u32 },
    Extra(R::Extra),
}

/// Parses a body into `T`, and what it asks.
fn checked<T: LeaseRequest + serde::de::DeserializeOwned>(
    body: &Bytes,
    tenant: &Tenant,
) -> Result<(T, Ask), ApiError> {
    let request: T = parse_json(body)?;
    let ask = ask(&request, tenant)?;
    Ok((request, ask))
}

/// Serves `{key}/{tail}` of the kind `R`; what it learns on the way goes
/// into `seen`, for the request's log line and metrics.
pub async fn serve<R: Resource>(
    app: &App,
    req: Request<Incoming>,
    key: &str,
    tail: &[&str],
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    seen.key(key);
    let action = Action::of::<R>(req.method(), tail)?;
    seen.action = action.name::<R>();
    let tenant = authenticate(app, req.headers()).await?;
    seen.tenant = Some(tenant.name.clone());
    let query = req.uri().query().map(str::to_owned);
    let body = if req.method() == Method::POST {
        read_body(req, lockbroker_api::MAX_BODY_BYTES).await?
    } else {
        Bytes::new()
    };
    let parsed = match action {
        Action::Acquire => {
            let (request, ask) = checked(&body, &tenant)?;
            Parsed::<R>::Acquire(request, ask)
        }
        Action::Renew => {
            let (request, ask) = checked(&body, &tenant)?;
            Parsed::Renew(request, ask)
        }
        Action::Release => Parsed::Release(checked(&body, &tenant)?.0),
        Action::Status => Parsed::Status,
        Action::History => Parsed::History {
            limit: history::limit(query.as_deref())?,
        },
        Action::Waiters => Parsed::Waiters {
            limit: waiting::limit(query.as_deref())?,
        },
        Action::Extra(name) => Parsed::Extra(R::parse_extra(name, &body, query.as_deref())?),
    };
    let engine = app.engine(&tenant);
    let lock = name_lock(tenant.clone(), R::KIND, key).await?;
    Ok(match parsed {
        Parsed::Acquire(request, ask) => {
            let grant = R::acquire(engine, &lock, request, ask);
            ok(&within_quota(engine, &tenant, 1, grant).await?)
        }
        Parsed::Renew(request, ask) => ok(&R::renew(engine, &lock, request, ask).await?),
        Parsed::Release(request) => {
            let released = R::release(engine, &lock, request).await?;
            tenant.held.released(1).await;
            ok(&released)
        }
        Parsed::Status => ok(&R::status(engine, &lock).await?),
        Parsed::History { limit } => ok(&history::latest(engine, &lock, limit).await?),
        Parsed::Waiters { limit } => ok(&waiting::queue(engine, &lock, limit).await?),
        Parsed::Extra(request) => R::extra(engine, lock, request).await?,
    })
}

/// Makes the grant of `n` leases (`grant`) if the tenant's `max_held`
/// admits it (see `crate::quota`): a multi-lock is admitted whole or
/// refused whole, before any of it is tried.
///
/// # Errors
/// 429 `quota_exceeded`; 503 when the count cannot be read; the grant's.
pub async fn within_quota<T>(
    engine: &Engine,
    tenant: &Tenant,
    n: u64,
    grant: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tenant
        .held
        .admit(n, || engine.count_held(&tenant.name))
        .await
        .map_err(|refused| match refused {
            Refused::OverQuota => ApiError::quota_exceeded(),
            Refused::Count(err) => err.into(),
        })?;
    let result = grant.await;
    tenant.held.settle(n, result.is_ok()).await;
    result
}

/// Something done with one lease kind, chosen by its URL segment
/// ([`with_kind`]).
pub trait ForKind {
    type Output;
    fn call<R: Resource>(self) -> Self::Output;
}

/// Does `f` with the kind whose URL segment is `path`: the one place where
/// the kinds the broker serves are listed. `None` for no such kind.
pub fn with_kind<F: ForKind>(path: &str, f: F) -> Option<F::Output> {
    Some(match path {
        Lock::PATH => f.call::<Lock>(),
        Semaphore::PATH => f.call::<Semaphore>(),
        RwLock::PATH => f.call::<RwLock>(),
        Election::PATH => f.call::<Election>(),
        _ => return None,
    })
}

/// Serves `/v1/{kind}/{rest}` of the kind `R`: a listing (`GET /v1/{kind}`)
/// or a call on one key.
pub async fn serve_kind<R: Resource>(
    app: &App,
    req: Request<Incoming>,
    rest: &[&str],
    seen: &mut Seen,
) -> Result<Response, ApiError> {
    let [key, tail @ ..] = rest else {
        seen.action = "list";
        if req.method() != Method::GET {
            return Err(ApiError::method_not_allowed("GET"));
        }
        let tenant = authenticate(app, req.headers()).await?;
        seen.tenant = Some(tenant.name.clone());
        return list::<R>(app, &tenant, req.uri().query()).await;
    };
    serve::<R>(app, req, key, tail, seen).await
}

/// Lists the live resources of the kind `R` of `tenant`, as `query` asks
/// (`GET /v1/{kind}`, and the admin's `GET /v1/admin/tenants/{t}/{kind}`).
///
/// # Errors
/// 400 for a bad query; 503 when the database is unavailable.
pub async fn list<R: Resource>(
    app: &App,
    tenant: &Tenant,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let span = listing::span(query)?;
    let page = R::list(app.engine(tenant), &tenant.name, span).await?;
    Ok(ok(&page))
}

/// A page of a listing as the API answers it: each item made by `item`
/// from its storage key and state, and the cursor of the next page.
pub fn page<T, S>(listing: Listing<S>, item: impl Fn(String, S) -> T) -> Page<T> {
    Page {
        items: listing
            .items
            .into_iter()
            .map(|(key, state)| item(key, state))
            .collect(),
        next: listing.next.map(|key| listing::cursor(&key)),
    }
}

/// A database time (UTC) as `2026-11-21T10:00:00.000Z`.
pub fn rfc3339(t: chrono::NaiveDateTime) -> String {
    t.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
