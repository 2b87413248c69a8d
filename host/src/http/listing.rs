//! The query of a listing (`GET /v1/{kind}?prefix=&limit=&cursor=`) and
//! its cursor: the storage key the previous page ended at, as hex, opaque
//! to clients.

use lockbroker_api::{LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT};
use percent_encoding::percent_decode_str;

use super::{
    request::{limit_param, query_pairs, unknown_param},
    ApiError,
};
use crate::engine::Span;

/// The page a listing's query asks for: `prefix` (percent-encoded bytes,
/// matched literally), `limit` (1 to [`LIST_MAX_LIMIT`], default
/// [`LIST_DEFAULT_LIMIT`]) and `cursor` (a previous page's `next`).
///
/// # Errors
/// 400 for another parameter, a `limit` out of range or a malformed
/// `cursor`.
pub fn span(query: Option<&str>) -> Result<Span, ApiError> {
    let mut span = Span {
        prefix: Vec::new(),
        after: None,
        limit: LIST_DEFAULT_LIMIT,
    };
    for (name, value) in query_pairs(query) {
        match name {
            "prefix" => span.prefix = percent_decode_str(&value.replace('+', " ")).collect(),
            "limit" => span.limit = limit_param(value, LIST_MAX_LIMIT)?,
            "cursor" => span.after = Some(after(value)?),
            _ => return Err(unknown_param(name, "prefix, limit, cursor")),
        }
    }
    Ok(span)
}

/// The cursor that goes on after the storage key `key`.
pub fn cursor(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The storage key a cursor goes on after.
fn after(cursor: &str) -> Result<Vec<u8>, ApiError> {
    let malformed = || ApiError::bad_request("the cursor is not one a listing gave");
    if cursor.is_empty() || !cursor.len().is_multiple_of(2) || cursor.len() > 2 * 512 {
        return Err(malformed());
    }
    (0..cursor.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(cursor.get(i..i + 2).ok_or_else(malformed)?, 16)
                .map_err(|_| malformed())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_the_key_a_page_ended_at() {
        for key in [&b"job-1"[..], b"a/b \xff", b"x"] {
            assert_eq!(after(&cursor(key)).unwrap(), key);
        }
        for bad in ["", "abc", "zz", "0g"] {
            assert!(after(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_query_gives_prefix_limit_and_cursor() {
        let span = span(Some("prefix=team%2Fa%25_&limit=5&cursor=6162")).unwrap();
        assert_eq!(span.prefix, b"team/a%_");
        assert_eq!((span.limit, span.after.as_deref()), (5, Some(&b"ab"[..])));
        assert_eq!(super::span(None).unwrap().limit, LIST_DEFAULT_LIMIT);
        for bad in ["limit=0", "limit=1001", "limit=x", "cursor=q", "other=1"] {
            assert!(super::span(Some(bad)).is_err(), "{bad}");
        }
    }
}
