//! The error answers of the OpenAPI document: one reusable response per
//! error code many paths share (`components/responses`), and the sets of
//! them that whole families of operations answer with, so that no
//! operation lists them again.

use std::collections::BTreeMap;

use lockbroker_api::ErrorCode;
use utoipa::{
    openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder},
    IntoResponses, ToResponse,
};

use super::ApiError;

/// An error answer with `code`, its description and an example message.
pub fn error_response(description: &str, examples: &[ApiError]) -> RefOr<Response> {
    let mut content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody")));
    content = match examples {
        [one] => content.example(Some(example(one))),
        many => content.examples_from_iter(many.iter().map(|e| {
            let example = utoipa::openapi::example::ExampleBuilder::new().value(Some(example(e)));
            (e.code.as_str(), example.build())
        })),
    };
    ResponseBuilder::new()
        .description(description)
        .content("application/json", content.build())
        .build()
        .into()
}

fn example(err: &ApiError) -> serde_json::Value {
    serde_json::to_value(err.body()).expect("serializes")
}

/// Declares reusable error responses (`components/responses`), one per
/// error code that many paths share.
macro_rules! error_responses {
    ($($name:ident: $code:ident, $description:literal, $message:literal;)*) => {
        $(
            pub struct $name;
            impl<'r> ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<Response>) {
                    let example = ApiError::new(ErrorCode::$code, $message);
                    (stringify!($name), error_response($description, &[example]))
                }
            }
        )*
        /// Every reusable error response, for `components/responses`.
        pub fn all() -> Vec<(&'static str, RefOr<Response>)> {
            vec![$(<$name as ToResponse>::response()),*, Throttled::response()]
        }
    };
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
    NoShadow: NotFound,
        "`not_found`: no such tenant, or no shadow policy is loaded for it.",
        "no shadow policy is loaded for tenant \"team-a\"";
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
    RateLimited: RateLimited,
        "`rate_limited`: the tenant sent more than its `max_requests_per_s` (and burst) to this \
broker; `retry_after_ms` and the `Retry-After` header say when one more fits.",
        "the tenant sent more than max_requests_per_s to this broker";
    SessionNotFound: SessionNotFound,
        "`session_not_found`: the session named is unknown, closed or expired (by the database \
clock), or another tenant's; its leases are gone. An acquire naming it granted nothing.",
        "no such session: it ended (closed or expired) or never existed; its leases are gone";
    Unavailable: Unavailable,
        "`unavailable`: the database is unavailable or the broker is shutting down. Nothing was \
granted: the broker never reports a grant the database did not commit.",
        "the database is unavailable; nothing was granted";
}

/// The 429 of a grant: its queue is full, the tenant's `max_held` would be
/// passed, or its rate is spent.
pub struct Throttled;

impl<'r> ToResponse<'r> for Throttled {
    fn response() -> (&'r str, RefOr<Response>) {
        let examples = [
            ApiError::new(
                ErrorCode::TooManyWaiters,
                "the tenant has max_waiters requests waiting already",
            ),
            ApiError::quota_exceeded(),
            ApiError::rate_limited(std::time::Duration::from_millis(40)),
        ];
        let description = "`too_many_waiters`: the tenant already has `max_waiters` requests \
waiting; `quota_exceeded`: the grant would take the tenant past `max_held` live leases (a \
multi-lock counts whole; nothing was granted); `rate_limited`: the tenant sent more than its \
`max_requests_per_s` to this broker (`retry_after_ms` and `Retry-After` say when to try again).";
        ("Throttled", error_response(description, &examples))
    }
}

/// References to reusable responses, by status (a later set's response
/// for a status replaces an earlier one's).
pub fn refs(entries: &[&[(u16, &str)]]) -> BTreeMap<String, RefOr<Response>> {
    entries
        .iter()
        .flat_map(|set| set.iter())
        .map(|(status, name)| {
            let reference = Ref::new(format!("#/components/responses/{name}"));
            (status.to_string(), RefOr::Ref(reference))
        })
        .collect()
}

/// What any tenant call on a key may answer.
const READ: &[(u16, &str)] = &[
    (401, "Unauthenticated"),
    (429, "RateLimited"),
    (405, "MethodNotAllowed"),
    (422, "InvalidKey"),
    (500, "PolicyError"),
    (503, "Unavailable"),
];
/// What a call with a body adds.
const BODY: &[(u16, &str)] = &[(400, "BadRequest"), (413, "TooLarge")];
/// What an acquire adds (it may queue).
const QUEUE: &[(u16, &str)] = &[(429, "Throttled"), (404, "SessionNotFound")];
/// What every admin call may answer.
const ADMIN: &[(u16, &str)] = &[
    (401, "Unauthenticated"),
    (403, "Forbidden"),
    (405, "MethodNotAllowed"),
];

/// The errors of a `GET` on a key: 401, 405, 422, 429, 500, 503.
pub struct ReadErrors;
/// The errors of a `POST` with a body on a key: those of [`ReadErrors`],
/// 400 and 413.
pub struct KeyedErrors;
/// The errors of an acquire, but its 409: those of [`KeyedErrors`], 429,
/// and 404 `session_not_found` (an acquire in a session).
pub struct AcquireErrors;
/// The errors every admin call may answer: 401, 403, 405.
pub struct AdminErrors;

impl IntoResponses for ReadErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&[READ])
    }
}

impl IntoResponses for KeyedErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&[READ, BODY])
    }
}

impl IntoResponses for AcquireErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&[READ, BODY, QUEUE])
    }
}

impl IntoResponses for AdminErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&[ADMIN])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_set_names_a_declared_response() {
        let declared: Vec<&str> = all().into_iter().map(|(name, _)| name).collect();
        for set in [READ, BODY, QUEUE, ADMIN] {
            for (_, name) in set {
                assert!(declared.contains(name), "{name} is not declared");
            }
        }
    }
}
