//! The steps every tenant request shares: authenticate, read a bounded
//! body, parse JSON, decode and name the key.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::{body::Incoming, header, HeaderMap, Request};
use lockbroker_api::MAX_RAW_KEY_BYTES;
use percent_encoding::percent_decode_str;
use serde::de::DeserializeOwned;

use super::ApiError;
use crate::{app::App, engine::LockRef, secret, store::Kind, tenant::Tenant};

/// Time a client has to send its body once the headers are in.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The bearer token of a request, if it has one.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The tenant whose API key the request carries, once its rate
/// (`max_requests_per_s`) admits one more request.
///
/// # Errors
/// 401 when there is no bearer token or it is no tenant's key; 429
/// `rate_limited`.
pub async fn authenticate(app: &App, headers: &HeaderMap) -> Result<Arc<Tenant>, ApiError> {
    let token = bearer(headers)
        .ok_or_else(|| ApiError::unauthenticated("missing Authorization: Bearer <api key>"))?;
    let tenant = app
        .live()
        .tenants
        .authenticate(token)
        .ok_or_else(|| ApiError::unauthenticated("unknown API key"))?;
    if let Some(rate) = &tenant.rate {
        rate.admit().await.map_err(ApiError::rate_limited)?;
    }
    Ok(tenant)
}

/// Checks the admin token.
///
/// # Errors
/// 401 without a valid admin token; 403 for a tenant's key.
pub fn authenticate_admin(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let token = bearer(headers)
        .ok_or_else(|| ApiError::unauthenticated("missing Authorization: Bearer <admin token>"))?;
    let presented = secret::digest(token);
    let live = app.live();
    if live
        .config
        .admin_token
        .as_ref()
        .is_some_and(|expected| expected.matches(&presented))
    {
        return Ok(());
    }
    if live.tenants.authenticate(token).is_some() {
        return Err(ApiError::forbidden(
            "a tenant's API key cannot use the admin API",
        ));
    }
    Err(ApiError::unauthenticated("unknown admin token"))
}

/// Reads the whole body, at most `limit` bytes.
///
/// # Errors
/// 413 over the limit (by `Content-Length` or by counting), 400 when the
/// body does not arrive in time or the connection fails.
pub async fn read_body(req: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::too_large(format!("the body is over {limit} bytes"));
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(req.into_body(), limit).collect();
    match tokio::time::timeout(BODY_READ_TIMEOUT, collect).await {
        Err(_) => Err(ApiError::bad_request("the body did not arrive in time")),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(err)) => Err(ApiError::bad_request(format!(
            "cannot read the body: {err}"
        ))),
    }
}

/// Parses a JSON body into `T` (one of the `lockbroker_api` requests),
/// reading its numbers as the OpenAPI document describes them ([`whole`]).
///
/// # Errors
/// 400 with serde's description (which names the field), or naming the
/// number out of range.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("a JSON body is required"));
    }
    let mut value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|err| ApiError::bad_request(format!("invalid JSON body: {err}")))?;
    whole(&mut value)?;
    serde_json::from_value(value)
        .map_err(|err| ApiError::bad_request(format!("invalid JSON body: {err}")))
}

/// Makes every number of a request what JSON Schema (and so the OpenAPI
/// document, and the tools that generate requests from it) takes it to be:
/// a whole-number float is an integer (`30000.0` is `30000`), and no
/// integer is above int64's maximum (the document's `u64` fields are
/// `format: int64`). Fractions stay fractions, for serde to refuse where an
/// integer is due.
///
/// # Errors
/// 400 for an integer above 9223372036854775807.
fn whole(value: &mut serde_json::Value) -> Result<(), ApiError> {
    use serde_json::Value;
    /// 2^63: every whole f64 in -2^63..2^63 converts exactly.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    match value {
        Value::Number(n) if n.as_u64().is_some_and(|v| v > i64::MAX as u64) => {
            Err(ApiError::bad_request(format!(
                "the number {n} is above 9223372036854775807, the largest integer taken"
            )))
        }
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f) {
                    #[allow(clippy::cast_possible_truncation)]
                    let whole = f as i64;
                    *value = Value::from(whole);
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter_mut().try_for_each(whole),
        Value::Object(fields) => fields.values_mut().try_for_each(whole),
        _ => Ok(()),
    }
}

/// Decodes a percent-encoded path segment into the client's key.
///
/// # Errors
/// 422 when the key is not UTF-8 or is absurdly long.
pub fn decode_key(segment: &str) -> Result<String, ApiError> {
    let key = percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| ApiError::invalid_key("the key is not valid UTF-8"))?;
    if key.len() > MAX_RAW_KEY_BYTES {
        return Err(ApiError::invalid_key(format!(
            "the key is {} bytes; at most {MAX_RAW_KEY_BYTES} are accepted",
            key.len()
        )));
    }
    Ok(key.into_owned())
}

/// Decodes the key and asks the tenant's naming policy for its storage key.
///
/// # Errors
/// 422 when decoding or the policy rejects the key; 500 `policy_error` when
/// the policy fails (fail closed).
pub async fn name_lock(
    tenant: Arc<Tenant>,
    kind: Kind,
    segment: &str,
) -> Result<LockRef, ApiError> {
    let key = decode_key(segment)?;
    name_key(&tenant, kind, key).await
}

/// Asks the tenant's naming policy for the storage key of `key`, a key
/// sent in a body (not percent-encoded).
///
/// # Errors
/// 422 when the key is absurdly long or the policy rejects it; 500
/// `policy_error` when the policy fails (fail closed).
pub async fn name_key(tenant: &Arc<Tenant>, kind: Kind, key: String) -> Result<LockRef, ApiError> {
    if key.len() > MAX_RAW_KEY_BYTES {
        return Err(ApiError::invalid_key(format!(
            "the key is {} bytes; at most {MAX_RAW_KEY_BYTES} are accepted",
            key.len()
        )));
    }
    let (storage_key, named_by) = tenant.policy.name(&key).await?;
    let mut lock = LockRef::new(tenant, kind, key, storage_key).await;
    lock.named_by = named_by;
    Ok(lock)
}

/// The `name=value` pairs of a query string (empty pairs skipped).
pub fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// A `limit` query parameter: a whole number from 1 to `max`.
///
/// # Errors
/// 400 otherwise.
pub fn limit_param(value: &str, max: u32) -> Result<u32, ApiError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(format!("limit must be a whole number from 1 to {max}"))
        })
}

/// The 400 of a query parameter `name` that an endpoint does not take
/// (`takes` says which it does).
pub fn unknown_param(name: &str, takes: &str) -> ApiError {
    ApiError::bad_request(format!("unknown query parameter {name:?} (only {takes})"))
}

/// Checks that a string field has 1 to `max` bytes.
///
/// # Errors
/// 400 naming the field.
pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > max {
        return Err(ApiError::bad_request(format!(
            "{field} must be 1 to {max} bytes (got {})",
            value.len()
        )));
    }
    Ok(())
}

/// Checks that a number lies in `min..=max`.
///
/// # Errors
/// 400 naming the field and the range.
pub fn check_range(field: &str, value: u64, min: u64, max: u64) -> Result<u64, ApiError> {
    if value < min || value > max {
        return Err(ApiError::bad_request(format!(
            "{field} must be {min} to {max} (got {value})"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use lockbroker_api::ErrorCode;

    use super::*;

    #[test]
    fn bearer_tokens() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&headers), None);
    }

    #[test]
    fn keys_decode_byte_for_byte() {
        assert_eq!(decode_key("job%201").unwrap(), "job 1");
        assert_eq!(decode_key("a%2Fb").unwrap(), "a/b");
        assert_eq!(decode_key("%E2%9C%93").unwrap(), "✓");
        assert_eq!(decode_key("Job%20").unwrap(), "Job ");
        assert_eq!(decode_key("%FF").unwrap_err().code, ErrorCode::InvalidKey);
        assert_eq!(
            decode_key(&"k".repeat(2000)).unwrap_err().code,
            ErrorCode::InvalidKey
        );
    }

    #[test]
    fn json_errors_are_400() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Body {
            owner: String,
        }
        assert_eq!(
            parse_json::<Body>(b"").unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            parse_json::<Body>(b"{").unwrap_err().code,
            ErrorCode::BadRequest
        );
        let err = parse_json::<Body>(b"{}").unwrap_err();
        assert!(err.message.contains("owner"), "{}", err.message);
        assert!(parse_json::<Body>(br#"{"owner":"a"}"#).is_ok());
    }

    #[test]
    fn whole_floats_are_integers_up_to_int64() {
        #[derive(serde::Deserialize, Debug)]
        struct Numbers {
            n: u64,
            p: Option<i32>,
            s: Option<u32>,
        }
        let parse = |json: &str| parse_json::<Numbers>(json.as_bytes());
        let p = parse(r#"{"n": 1283.0, "p": -5.0, "s": 7.0}"#).unwrap();
        assert_eq!((p.n, p.p, p.s), (1283, Some(-5), Some(7)));
        assert_eq!(parse(r#"{"n": 1e3}"#).unwrap().n, 1000);
        assert_eq!(
            parse(r#"{"n": 9223372036854775807}"#).unwrap().n,
            i64::MAX as u64
        );
        assert_eq!(parse(r#"{"n": 1, "p": null}"#).unwrap().p, None);
        for bad in [
            r#"{"n": 1.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": -1.0}"#,
            r#"{"n": 1e20}"#,
            r#"{"n": 9223372036854775808}"#,
            r#"{"n": 18446744073709551615}"#,
            r#"{"n": 9223372036854775808.0}"#,
            r#"{"n": "1"}"#,
            r#"{"n": null}"#,
            r#"{"n": 1, "p": 2147483648}"#,
            r#"{"n": 1, "s": 4294967296.0}"#,
            r#"{"n": 1, "p": true}"#,
            r#"{"n": 1, "other": [{"deep": 9223372036854775808}]}"#,
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest, "{bad}");
        }
    }

    #[test]
    fn ranges() {
        assert!(check_range("ttl_ms", 99, 100, 200).is_err());
        assert_eq!(check_range("ttl_ms", 100, 100, 200).unwrap(), 100);
        assert!(check_len("owner", "", 128).is_err());
        assert!(check_len("owner", &"x".repeat(129), 128).is_err());
    }
}
