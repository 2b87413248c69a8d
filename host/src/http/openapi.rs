//! The OpenAPI 3.1 document of the API, generated: paths from the
//! `#[utoipa::path]` on each handler, schemas from the `lockbroker_api`
//! types, and here what they share (path parameters, the error answers,
//! security schemes, tags). `GET /openapi.json` serves it, and
//! `host/src/openapi.json` is a checked-in copy for readers and tools; a
//! test fails when that copy is stale (regenerate with
//! `UPDATE_OPENAPI=1 cargo test -p lockbroker --lib openapi`).

use std::sync::OnceLock;

use lockbroker_api as api;
use utoipa::{
    openapi::{
        security::{Http, HttpAuthScheme, SecurityScheme},
        ContentBuilder, RefOr, Response, ResponseBuilder,
    },
    IntoParams, Modify, OpenApi, ToResponse,
};

use super::{admin, elections, locks, multilock, ops, rwlocks, semaphores};

/// The document as served, built once.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut json = ApiDoc::openapi()
            .to_pretty_json()
            .expect("the document serializes");
        json.push('\n');
        json
    })
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lockbroker",
        description = "Distributed locks, semaphores and leader election for many tenants, \
stored in MySQL/MariaDB.

- Tenant calls carry `Authorization: Bearer <api key>`; the key decides the tenant, and a \
tenant never reaches another tenant's locks.
- Every grant carries a fencing token (a u64) that strictly increases per key and never repeats.
- Leases expire by the database's clock, never by a client's or a broker's.
- Request bodies are JSON of at most 64 KiB. Integer fields accept any JSON number that is a \
whole number (`30000.0` is `30000`); optional fields may be absent or `null`, both meaning the \
default; unknown fields are ignored.
- Every error is `{\"error\": {\"code\", \"message\"}}`; a known path with the wrong method gets \
405 `method_not_allowed` with an `Allow` header.
- 503 `unavailable` means nothing was granted: no grant is reported that the database did not \
commit."
    ),
    servers((url = "http://127.0.0.1:7420")),
    paths(
        locks::acquire,
        locks::release,
        locks::renew,
        locks::status,
        locks::validate,
        locks::history,
        multilock::acquire,
        multilock::renew,
        multilock::release,
        semaphores::acquire,
        semaphores::release,
        semaphores::renew,
        semaphores::status,
        rwlocks::acquire,
        rwlocks::release,
        rwlocks::renew,
        rwlocks::status,
        elections::campaign,
        elections::resign,
        elections::renew,
        elections::status,
        elections::observe,
        admin::tenants,
        admin::upload_policy,
        admin::force_release,
        ops::healthz,
        ops::readyz,
        metrics,
        ops::openapi,
    ),
    components(
        schemas(api::ErrorCode, api::ElectionEvent),
        responses(
            BadRequest,
            Unauthenticated,
            Forbidden,
            NotFound,
            MethodNotAllowed,
            TooLarge,
            UriTooLong,
            HeadersTooLarge,
            InvalidKey,
            TooManyWaiters,
            PolicyError,
            Unavailable
        )
    ),
    modifiers(&SecuritySchemes),
    tags(
        (name = "locks", description = "Exclusive, re-entrant locks with fencing tokens; several \
at once (multi-lock); token validation; history."),
        (name = "semaphores", description = "Up to `permits` holders at once, each in its own slot."),
        (name = "rwlocks", description = "Reader-writer locks: many readers or one writer; a \
queued writer blocks new readers."),
        (name = "elections", description = "Leader election; the term is the fencing token."),
        (name = "admin", description = "Tenants, their policies and stuck leases (admin token)."),
        (name = "operations", description = "Health, readiness, metrics, this document."),
    )
)]
struct ApiDoc;

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
        (status = 401, response = Unauthenticated),
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

/// An error answer with `code`, its description and an example message.
fn error_response(code: api::ErrorCode, description: &str, message: &str) -> RefOr<Response> {
    let example = serde_json::to_value(api::ErrorBody::new(code, message)).expect("serializes");
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                .example(Some(example))
                .build(),
        )
        .build()
        .into()
}

/// Declares reusable error responses (`components/responses`), one per
/// error code that many paths share.
macro_rules! error_responses {
    ($($name:ident: $code:ident, $description:literal, $message:literal;)*) => {$(
        pub struct $name;
        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                (stringify!($name), error_response(api::ErrorCode::$code, $description, $message))
            }
        }
    )*};
}

error_responses! {
    BadRequest: BadRequest,
        "`bad_request`: malformed JSON, a missing field, a field of the wrong type (a fraction or \
a string for an integer), or a value out of range.",
        "ttl_ms must be 100 to 3600000 (got 5)";
    Unauthenticated: Unauthenticated,
        "`unauthenticated`: no `Authorization: Bearer` token, or an unknown one.",
        "unknown API key";
    Forbidden: Forbidden,
        "`forbidden`: a tenant's API key was sent to the admin API.",
        "a tenant's API key cannot use the admin API";
    NotFound: NotFound,
        "`not_found`: no such path or resource.",
        "no such path";
    MethodNotAllowed: MethodNotAllowed,
        "`method_not_allowed`: the path exists but not with this method; the `Allow` header \
names the method it takes.",
        "this method is not allowed on this path";
    TooLarge: TooLarge,
        "`too_large`: the body is over 64 KiB (policy components: over the configured \
`max_policy_bytes`).",
        "the body is over 65536 bytes";
    UriTooLong: UriTooLong,
        "`uri_too_long`: the request target (path and query) is over 8 KiB.",
        "the request target has 9000 bytes; at most 8192 are allowed";
    HeadersTooLarge: HeadersTooLarge,
        "`headers_too_large`: the request's headers are over 16 KiB, or more than 100.",
        "the headers have 17000 bytes; at most 16384 are allowed";
    InvalidKey: InvalidKey,
        "`invalid_key`: the key is not UTF-8, is over 1024 bytes, or the tenant's naming policy \
rejected it (its reason is the message; the built-in policy rejects empty keys, keys over 255 \
bytes and control characters).",
        "key contains a control character (U+000A) at byte 3";
    TooManyWaiters: TooManyWaiters,
        "`too_many_waiters`: the tenant already has `max_waiters` requests waiting.",
        "the tenant has max_waiters requests waiting already";
    PolicyError: PolicyError,
        "`policy_error`: the tenant's naming policy trapped, ran out of its time or memory \
budget, or returned a storage key that is empty or over 512 bytes. Naming fails closed.",
        "the tenant's naming policy failed: deadline exceeded";
    Unavailable: Unavailable,
        "`unavailable`: the database is unavailable or the broker is shutting down. Nothing was \
granted: the broker never reports a grant the database did not commit.",
        "the database is unavailable; nothing was granted";
}

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
