//! The OpenAPI 3.1 document of the API, generated. The operations every
//! lease kind serves alike (acquire, renew, release, status) are built
//! here from each kind's [`Resource`] (its path, parameter, request and
//! answer types) with the shared error answers (`responses`) and the prose
//! of `operations.toml`; every other operation comes from the
//! `#[utoipa::path]` on its handler; every schema from the
//! `lockbroker_api` types, with one example each from `examples.json`.
//! `GET /openapi.json` serves it, and `host/src/openapi.json` is a
//! checked-in copy for readers and tools; a test fails when that copy is
//! stale (regenerate with `UPDATE_OPENAPI=1 cargo test -p lockbroker --lib
//! openapi`).

use std::{collections::BTreeMap, sync::OnceLock};

use lockbroker_api::{self as api, Election, Lock, RwLock, Semaphore};
use serde::Deserialize;
use utoipa::{
    openapi::{
        header::HeaderBuilder,
        path::{HttpMethod, OperationBuilder, ParameterIn, Paths},
        request_body::RequestBodyBuilder,
        schema::Schema,
        security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme},
        Components, ContentBuilder, Ref, RefOr, Required, Response, ResponseBuilder,
    },
    IntoParams, IntoResponses, Modify, OpenApi, ToSchema,
};

use super::{
    admin, elections, events, locks, multilock, ops,
    resource::{Action, Resource},
    responses::{self, error_response, AcquireErrors, AdminErrors, KeyedErrors, ReadErrors},
    sessions, waiting, ApiError,
};
use crate::engine::EngineError;

/// The document as served, built once.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut json = build().to_pretty_json().expect("the document serializes");
        json.push('\n');
        json
    })
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lockbroker",
        description = "Distributed locks, semaphores, reader-writer locks and leader election for \
many tenants, stored in MySQL/MariaDB.

- Tenant calls carry `Authorization: Bearer <api key>`; the key decides the tenant, and a \
tenant never reaches another tenant's locks.
- Every grant carries a fencing token (a u64) that strictly increases per key and never repeats.
- Leases expire by the database's clock, never by a client's or a broker's.
- Request bodies are JSON of at most 64 KiB. Integer fields accept any JSON number that is a \
whole number (`30000.0` is `30000`), up to the maximum of their format (int64: \
9223372036854775807; int32: 2147483647); optional fields may be absent or `null`, both meaning \
the default; unknown fields are ignored.
- Every error is `{\"error\": {\"code\", \"message\"}}`; a known path with the wrong method gets \
405 `method_not_allowed` with an `Allow` header.
- 503 `unavailable` means nothing was granted: no grant is reported that the database did not \
commit."
    ),
    servers((url = "http://127.0.0.1:7420")),
    paths(
        locks::validate,
        multilock::acquire,
        multilock::renew,
        multilock::release,
        elections::observe,
        sessions::open,
        sessions::list,
        sessions::status,
        sessions::close,
        sessions::keepalive,
        waiting::waits_for,
        waiting::contention,
        events::handle,
        admin::tenants,
        admin::upload_policy,
        admin::policy_versions,
        admin::rollback_policy,
        admin::shadow_report,
        admin::drop_shadow,
        admin::promote_policy,
        admin::force_release,
        admin::force_close_session,
        admin::admin_contention,
        admin::admin_waits_for,
        admin::reload,
        admin::reload_status,
        ops::healthz,
        ops::readyz,
        metrics,
        ops::openapi,
    ),
    components(schemas(api::ErrorCode, api::ElectionEvent, api::ErrorBody)),
    modifiers(&SecuritySchemes),
    tags(
        (name = "locks", description = "Exclusive, re-entrant locks with fencing tokens; several \
at once (multi-lock); token validation; history."),
        (name = "semaphores", description = "Up to `permits` holders at once, each in its own slot."),
        (name = "rwlocks", description = "Reader-writer locks: many readers or one writer; a \
queued writer blocks new readers."),
        (name = "elections", description = "Leader election; the term is the fencing token."),
        (name = "sessions", description = "Sessions: one keepalive keeps many leases alive; \
when a session ends (closed, or expired) every lease in it ends at once. Every kind holds \
its lease in one."),
        (name = "contention", description = "Contention: the hottest keys of the last \
minutes, each key's queue (`GET /v1/{kind}/{key}/waiters`) and who waits for whom."),
        (name = "admin", description = "Tenants, their policies, stuck leases and config \
reloads (admin token)."),
        (name = "operations", description = "Health, readiness, metrics, this document."),
    )
)]
struct ApiDoc;

/// The document: every lease kind's operations, each followed by the
/// operations of its own; then multi-locks, admin and operations.
fn build() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let prose: BTreeMap<String, KindProse> =
        toml::from_str(include_str!("operations.toml")).expect("operations.toml is valid");
    let mut rest = std::mem::take(&mut doc.paths);
    let components = doc.components.get_or_insert_with(Components::default);
    components.responses.extend(
        responses::all()
            .into_iter()
            .map(|(name, response)| (name.to_owned(), response)),
    );
    let mut paths = Paths::new();
    kind::<Lock>(&mut paths, components, &prose);
    take_under(&mut paths, &mut rest, "/v1/locks/");
    take_under(&mut paths, &mut rest, "/v1/multilock/");
    kind::<Semaphore>(&mut paths, components, &prose);
    kind::<RwLock>(&mut paths, components, &prose);
    kind::<Election>(&mut paths, components, &prose);
    take_under(&mut paths, &mut rest, "/v1/elections/");
    paths.paths.extend(rest.paths);
    doc.paths = paths;
    add_examples(components);
    doc
}

/// Moves the paths of `from` that start with `prefix` to the end of `to`.
fn take_under(to: &mut Paths, from: &mut Paths, prefix: &str) {
    let (under, others): (Vec<_>, Vec<_>) = std::mem::take(&mut from.paths)
        .into_iter()
        .partition(|(p, _)| p.starts_with(prefix));
    to.paths.extend(under);
    from.paths.extend(others);
}

/// The prose of one kind's operations (`operations.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KindProse {
    acquire: Prose,
    renew: Prose,
    release: Prose,
    status: Prose,
    /// For the kinds whose events are recorded.
    history: Option<Prose>,
    /// `GET {key}/waiters`.
    waiters: Prose,
    /// `GET /v1/{kind}` (its admin variant is described from it).
    list: Prose,
}

/// The prose of one operation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Prose {
    id: String,
    summary: String,
    description: String,
    /// The 200 answer.
    ok: String,
    /// The 409 answer, for actions that have one.
    conflict: Option<String>,
}

/// Adds the four operations of the kind `R`, and the schemas of its types.
fn kind<R: Resource>(
    paths: &mut Paths,
    components: &mut Components,
    prose: &BTreeMap<String, KindProse>,
) {
    let prose = prose
        .get(R::PATH)
        .unwrap_or_else(|| panic!("operations.toml has no [{}]", R::PATH));
    for schemas in [
        schema::<R::Acquire>,
        schema::<R::Renew>,
        schema::<R::Release>,
        schema::<R::Lease>,
        schema::<R::Released>,
        schema::<R::Status>,
    ] {
        schemas(components);
    }
    let base = format!("/v1/{}/{{{}}}", R::PATH, R::PARAM);
    for action in Action::LEASE {
        let (prose, request, answer, mut errors) = match action {
            Action::Acquire => {
                let (request, answer) = (R::Acquire::name(), R::Lease::name());
                (
                    &prose.acquire,
                    Some(request),
                    answer,
                    AcquireErrors::responses(),
                )
            }
            Action::Renew => {
                let (request, answer) = (R::Renew::name(), R::Lease::name());
                (
                    &prose.renew,
                    Some(request),
                    answer,
                    KeyedErrors::responses(),
                )
            }
            Action::Release => {
                let (request, answer) = (R::Release::name(), R::Released::name());
                (
                    &prose.release,
                    Some(request),
                    answer,
                    KeyedErrors::responses(),
                )
            }
            _ => (
                &prose.status,
                None,
                R::Status::name(),
                ReadErrors::responses(),
            ),
        };
        if let Some(description) = &prose.conflict {
            let refusals = match action {
                Action::Acquire => busy::<R>(),
                _ => vec![ApiError::from(EngineError::LeaseLost)],
            };
            let refused = conflict(description, &refusals, action == Action::Acquire);
            errors.insert("409".into(), refused);
        }
        let parameters = path_parameter(R::PARAM);
        let mut operation = operation::<R>(prose, parameters, &answer, errors, "tenantKey");
        if let Some(request) = request {
            operation = operation.request_body(Some(json_body(&request)));
        }
        let (path, method) = match action {
            Action::Status => (base.clone(), HttpMethod::Get),
            action => (format!("{base}/{}", action.name::<R>()), HttpMethod::Post),
        };
        paths.add_path_operation(path, vec![method], operation.build());
    }
    if R::HISTORY {
        schema::<api::LockHistory>(components);
        let prose = prose
            .history
            .as_ref()
            .unwrap_or_else(|| panic!("operations.toml has no [{}.history]", R::PATH));
        let errors = responses::refs(&[&[(400, "BadRequest")]]);
        let mut parameters = path_parameter(R::PARAM);
        parameters.extend(HistoryQuery::into_params(|| Some(ParameterIn::Query)));
        let mut errors_and_reads = ReadErrors::responses();
        errors_and_reads.extend(errors);
        let answer = api::LockHistory::name();
        let operation = operation::<R>(prose, parameters, &answer, errors_and_reads, "tenantKey");
        let path = format!("{base}/history");
        paths.add_path_operation(path, vec![HttpMethod::Get], operation.build());
    }
    schema::<api::KeyWaiters>(components);
    let mut parameters = path_parameter(R::PARAM);
    parameters.extend(WaitersQuery::into_params(|| Some(ParameterIn::Query)));
    let mut errors = ReadErrors::responses();
    errors.extend(responses::refs(&[&[(400, "BadRequest")]]));
    let answer = api::KeyWaiters::name();
    let tenant_op = operation::<R>(&prose.waiters, parameters, &answer, errors, "tenantKey");
    let path = format!("{base}/waiters");
    paths.add_path_operation(path, vec![HttpMethod::Get], tenant_op.build());
    // The admin's: the same for any tenant.
    let admin = Prose {
        id: format!(
            "admin{}{}",
            prose.waiters.id[..1].to_uppercase(),
            &prose.waiters.id[1..]
        ),
        summary: format!("{} (admin)", prose.waiters.summary),
        description: format!(
            "`GET /v1/{}/{{{}}}/waiters` for any tenant.",
            R::PATH,
            R::PARAM
        ),
        ok: prose.waiters.ok.clone(),
        conflict: None,
    };
    let mut parameters = TenantPath::into_params(|| Some(ParameterIn::Path));
    parameters.extend(path_parameter(R::PARAM));
    parameters.extend(WaitersQuery::into_params(|| Some(ParameterIn::Query)));
    let mut errors = responses::refs(&[&[
        (400, "BadRequest"),
        (404, "NotFound"),
        (405, "MethodNotAllowed"),
        (422, "InvalidKey"),
        (503, "Unavailable"),
    ]]);
    errors.extend(AdminErrors::responses());
    let admin_op = operation::<R>(&admin, parameters, &answer, errors, "adminToken").tag("admin");
    let path = format!(
        "/v1/admin/tenants/{{tenant}}/{}/{{{}}}/waiters",
        R::PATH,
        R::PARAM
    );
    paths.add_path_operation(path, vec![HttpMethod::Get], admin_op.build());
    list::<R>(paths, components, &prose.list);
}

/// Adds the listing of the kind `R` (`GET /v1/{kind}`), its admin variant
/// (`GET /v1/admin/tenants/{tenant}/{kind}`), and the schema of its page.
fn list<R: Resource>(paths: &mut Paths, components: &mut Components, prose: &Prose) {
    let status = R::Status::name();
    let page = format!("{status}Page");
    components
        .schemas
        .insert(page.clone(), page_schema(&status));
    let query = || ListQuery::into_params(|| Some(ParameterIn::Query));
    let mut errors = responses::refs(&[&[
        (400, "BadRequest"),
        (401, "Unauthenticated"),
        (405, "MethodNotAllowed"),
        (503, "Unavailable"),
    ]]);
    let tenant = operation::<R>(prose, query(), &page, errors.clone(), "tenantKey");
    let path = format!("/v1/{}", R::PATH);
    paths.add_path_operation(path, vec![HttpMethod::Get], tenant.build());
    let admin = Prose {
        id: format!("admin{}{}", prose.id[..1].to_uppercase(), &prose.id[1..]),
        summary: format!("{} of a tenant (admin)", prose.summary),
        description: format!("The listing of `GET /v1/{}` for any tenant.", R::PATH),
        ok: prose.ok.clone(),
        conflict: None,
    };
    let mut parameters = TenantPath::into_params(|| Some(ParameterIn::Path));
    parameters.extend(query());
    errors.extend(AdminErrors::responses());
    errors.extend(responses::refs(&[&[(404, "NotFound")]]));
    let admin = operation::<R>(&admin, parameters, &page, errors, "adminToken").tag("admin");
    let path = format!("/v1/admin/tenants/{{tenant}}/{}", R::PATH);
    paths.add_path_operation(path, vec![HttpMethod::Get], admin.build());
}

/// The schema of a page of a listing of `item`s.
fn page_schema(item: &str) -> RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::{
        schema::{ArrayBuilder, SchemaType},
        ObjectBuilder, Type,
    };
    let next = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .description(Some(
            "The cursor of the next page (`cursor=`), opaque; null after the last.",
        ));
    ObjectBuilder::new()
        .description(Some(
            "One page of a listing: live resources in storage-key (byte) order. A page may \
hold fewer than `limit` (a scan examines a bounded stretch of keys): follow `next` until it \
is null.",
        ))
        .property(
            "items",
            ArrayBuilder::new().items(Ref::from_schema_name(item)),
        )
        .required("items")
        .property("next", next)
        .required("next")
        .into()
}

/// An operation of the kind `R` as `prose` describes it: its parameters,
/// its 200 answer of the schema `answer`, its `errors`, and the bearer
/// token it takes (`security`).
fn operation<R: Resource>(
    prose: &Prose,
    parameters: Vec<utoipa::openapi::path::Parameter>,
    answer: &str,
    errors: BTreeMap<String, RefOr<Response>>,
    security: &str,
) -> OperationBuilder {
    OperationBuilder::new()
        .tag(R::PATH)
        .operation_id(Some(prose.id.clone()))
        .summary(Some(prose.summary.clone()))
        .description(Some(prose.description.clone()))
        .parameters(Some(parameters))
        .responses(answers(&prose.ok, answer, errors))
        .security(SecurityRequirement::new(security, Vec::<String>::new()))
}

/// The refusals of an acquire of the kind `R` for contention (409).
fn busy<R: Resource>() -> Vec<ApiError> {
    let mut refusals = match R::KIND {
        crate::store::Kind::Semaphore => vec![
            EngineError::SemaphoreFull {
                retry_after_ms: 120,
            },
            EngineError::PermitsMismatch { permits: 5 },
        ],
        _ => vec![EngineError::LockHeld {
            retry_after_ms: 120,
        }],
    };
    // A wait in a session that would close a cycle of sessions.
    let link = |session: &str, owner: &str, key: &str| crate::engine::CycleLink {
        session: session.to_owned(),
        owner: owner.to_owned(),
        kind: R::KIND,
        storage_key: key.to_owned(),
    };
    refusals.push(EngineError::Deadlock {
        cycle: vec![
            link("9f2c4e1a0b7d4c3e8f6a5b2d1c0e9f8a", "worker-1", "account-2"),
            link("3b1d7e2f9a0c4b5d8e6f1a2b3c4d5e6f", "worker-2", "account-1"),
        ],
    });
    refusals.into_iter().map(ApiError::from).collect()
}

/// Registers the schema of `T` and of the types it refers to.
fn schema<T: ToSchema>(components: &mut Components) {
    let mut schemas = vec![(T::name().into_owned(), T::schema())];
    T::schemas(&mut schemas);
    components.schemas.extend(schemas);
}

/// The path parameter that names a resource: a lock's `key` (every kind
/// but elections) or an election's `name`.
fn path_parameter(name: &str) -> Vec<utoipa::openapi::path::Parameter> {
    match name {
        "name" => ElectionPath::into_params(|| Some(ParameterIn::Path)),
        _ => KeyPath::into_params(|| Some(ParameterIn::Path)),
    }
}

/// A required JSON request body of the schema `name`.
fn json_body(name: &str) -> utoipa::openapi::request_body::RequestBody {
    RequestBodyBuilder::new()
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(name)))
                .build(),
        )
        .required(Some(Required::True))
        .build()
}

/// The answers of an operation: 200 with the schema `answer`, and `errors`.
fn answers(
    ok: &str,
    answer: &str,
    errors: BTreeMap<String, RefOr<Response>>,
) -> utoipa::openapi::Responses {
    let ok = ResponseBuilder::new().description(ok).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(answer)))
            .build(),
    );
    let mut responses = utoipa::openapi::Responses::new();
    responses
        .responses
        .insert("200".into(), RefOr::T(ok.build()));
    responses.responses.extend(errors);
    responses
}

/// The 409 of an action: `description` with `examples`, and for a refused
/// acquire the `Retry-After` header.
fn conflict(description: &str, examples: &[ApiError], retry_after: bool) -> RefOr<Response> {
    let mut response = error_response(description, examples);
    if let (true, RefOr::T(response)) = (retry_after, &mut response) {
        let header = HeaderBuilder::new()
            .schema(Some(<u64 as utoipa::PartialSchema>::schema()))
            .description(Some(
                "Seconds before trying again: `retry_after_ms` rounded up, at least 1.",
            ))
            .build();
        response
            .headers
            .insert("Retry-After".into(), RefOr::T(header));
    }
    response
}

/// Puts the example of each schema (`examples.json`) on it.
fn add_examples(components: &mut Components) {
    let examples: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(include_str!("examples.json")).expect("examples.json is valid");
    for (name, example) in examples {
        match components.schemas.get_mut(&name) {
            Some(RefOr::T(Schema::Object(object))) => object.examples = vec![example],
            Some(RefOr::T(Schema::AllOf(all))) => all.examples = vec![example],
            Some(RefOr::T(Schema::OneOf(one))) => one.examples = vec![example],
            _ => panic!("examples.json: no schema {name} to give an example"),
        }
    }
}

/// Prometheus metrics
///
/// Counters, gauges and latency histograms in the OpenMetrics text format
/// (which Prometheus scrapes). Label values name tenants: with
/// `metrics_token` set in the config, the request must carry it as a bearer
/// token; without one, the endpoint is open.
// The handler is `ops::metrics`; its description lives here so that the
// metrics work there and this document change independently.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    security((), ("metricsToken" = [])),
    responses(
        (status = 200, description = "OpenMetrics text exposition format 1.0.0.",
            content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String,
            example = "lockbroker_lock_grants_total{tenant=\"default\",via=\"direct\"} 1\n# EOF\n"),
        (status = 401, response = responses::Unauthenticated),
    )
)]
#[allow(dead_code)]
fn metrics() {}

/// `tenantKey` and `adminToken`, the two bearer tokens.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, description) in [
            ("tenantKey", "The tenant's `api_key` from the config."),
            ("adminToken", "The `admin_token` from the config."),
            (
                "metricsToken",
                "The `metrics_token` from the config, when one is set.",
            ),
        ] {
            let mut http = Http::new(HttpAuthScheme::Bearer);
            http.description = Some(description.to_owned());
            components.add_security_scheme(name, SecurityScheme::Http(http));
        }
    }
}

/// The `{key}` of a lock or semaphore.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct KeyPath {
    /// The client's key: one percent-encoded path segment (`a%2Fb` is the
    /// key `a/b`). It must decode to UTF-8 of at most 1024 bytes; the
    /// tenant's naming policy then maps it to a storage key of 1 to 512
    /// bytes or rejects it (422 `invalid_key`). The built-in policy keeps
    /// the key as is and rejects empty keys, keys over 255 bytes and keys
    /// with a control character (U+0000 to U+001F, U+007F to U+009F; the
    /// message names it and its byte offset).
    #[param(example = "job-1")]
    key: String,
}

/// The `limit` query parameter of a history read.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct HistoryQuery {
    /// How many events at most, newest first: 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    limit: Option<u32>,
}

/// The `limit` query parameter of a queue.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct WaitersQuery {
    /// How many waiters at most, first served first: 1 to 1000 (default
    /// 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    limit: Option<u32>,
}

/// The query of a listing.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ListQuery {
    /// Only storage keys that start with these bytes (percent-encoded;
    /// matched literally: `%`, `_` and `\` are not wildcards).
    #[param(example = "job-")]
    prefix: Option<String>,
    /// How many items at most: 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    limit: Option<u32>,
    /// The previous page's `next`, to go on from.
    cursor: Option<String>,
}

/// The `{name}` of an election.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct ElectionPath {
    /// The election's name: one percent-encoded path segment, mapped to a
    /// storage key by the tenant's naming policy like a lock key (422
    /// `invalid_key` when rejected; the built-in policy rejects empty
    /// names, names over 255 bytes and names with a control character).
    #[param(example = "scheduler")]
    name: String,
}

/// The `{tenant}` and `{key}` of an admin force-release.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct TenantKeyPath {
    /// The tenant's name from the config.
    #[param(example = "team-a", pattern = "^[a-z0-9-]{1,64}$")]
    tenant: String,
    /// The lock's key as that tenant's clients send it (one percent-encoded
    /// path segment), mapped by the tenant's naming policy.
    #[param(example = "job-1")]
    key: String,
}

/// The `{tenant}` of an admin call.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct TenantPath {
    /// The tenant's name from the config.
    #[param(example = "team-a", pattern = "^[a-z0-9-]{1,64}$")]
    tenant: String,
}

/// The query of a policy upload.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PolicyUploadQuery {
    /// `active` (the default): put the component in force. `shadow`: load
    /// it as the tenant's shadow candidate, which runs beside the policy
    /// in force and decides nothing (see `GET .../policy/shadow`).
    #[param(inline)]
    mode: Option<PolicyMode>,
}

/// What a policy upload is for.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
enum PolicyMode {
    Active,
    Shadow,
}

/// A policy upload's body: the bytes of a WebAssembly component.
pub struct WasmComponent;

impl utoipa::PartialSchema for WasmComponent {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .content_media_type("application/wasm")
            .description(Some("A WebAssembly component (binary)."))
            .into()
    }
}

impl utoipa::ToSchema for WasmComponent {}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// The checked-in `host/src/openapi.json` is what the types and
    /// annotations generate; with `UPDATE_OPENAPI=1` the test rewrites it.
    #[test]
    fn openapi_json_is_current() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/openapi.json");
        let generated = document();
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, generated).expect("write openapi.json");
            return;
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "{} is stale: the API types or #[utoipa::path] annotations changed. Regenerate it \
             with `UPDATE_OPENAPI=1 cargo test -p lockbroker --lib openapi` and commit it.",
            path.display()
        );
    }

    #[test]
    fn every_error_code_is_in_the_document() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        let codes = &doc["components"]["schemas"]["ErrorCode"]["enum"];
        for code in api::ErrorCode::ALL {
            assert!(
                codes
                    .as_array()
                    .is_some_and(|c| c.iter().any(|v| v == code.as_str())),
                "{code} missing from {codes}"
            );
        }
        assert_eq!(doc["openapi"], "3.1.0");
    }
}
