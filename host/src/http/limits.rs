//! Limits on a request's head, checked before routing so that a request
//! over them gets the API's JSON error (414, 431) and the connection stays
//! usable. hyper's own limits (its read buffer, its 64 KiB request target,
//! 100 headers) lie above these; a request past those is answered by
//! hyper itself, made JSON by `parse_errors`.

use hyper::{HeaderMap, Uri};

use super::ApiError;

/// Longest request target (path and query), in bytes.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest header section (names, values and their `: ` and CRLF), in bytes.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// hyper's read buffer: it must hold a whole head, so it sits well above
/// [`MAX_URI_BYTES`] + [`MAX_HEADER_BYTES`] (and above hyper's own 64 KiB
/// bound on the request target, so that bound answers 414, not 431).
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Checks the request target's and the headers' sizes.
///
/// # Errors
/// 414 `uri_too_long`, 431 `headers_too_large`.
pub fn check(uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    let uri_len = uri.path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return Err(ApiError::uri_too_long(format!(
            "the request target has {uri_len} bytes; at most {MAX_URI_BYTES} are allowed"
        )));
    }
    let header_len: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if header_len > MAX_HEADER_BYTES {
        return Err(ApiError::headers_too_large(format!(
            "the headers have {header_len} bytes; at most {MAX_HEADER_BYTES} are allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::{header::HeaderValue, StatusCode};

    #[test]
    fn heads_within_the_limits_pass_and_others_get_414_or_431() {
        let ok: Uri = "/v1/locks/a?x=1".parse().unwrap();
        assert!(check(&ok, &HeaderMap::new()).is_ok());
        let long: Uri = format!("/v1/locks/{}", "a".repeat(MAX_URI_BYTES))
            .parse()
            .unwrap();
        let err = check(&long, &HeaderMap::new()).unwrap_err();
        assert_eq!(
            (err.status(), err.code.as_str()),
            (StatusCode::URI_TOO_LONG, "uri_too_long")
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-big",
            HeaderValue::from_str(&"v".repeat(MAX_HEADER_BYTES)).unwrap(),
        );
        let err = check(&ok, &headers).unwrap_err();
        assert_eq!(
            (err.status(), err.code.as_str()),
            (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large"
            )
        );
    }
}
