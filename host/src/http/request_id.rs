//! The request id: taken from a sane incoming `x-request-id` (so a proxy's
//! or a client's id follows the request into our logs), else made here;
//! returned as `x-request-id` on every answer and written in the request's
//! log line.

use hyper::{header::HeaderValue, HeaderMap};

/// The header carrying the id, both ways.
pub const HEADER: &str = "x-request-id";
/// Longest incoming id kept; a longer one is replaced.
const MAX_LEN: usize = 128;

/// One request's id: 1 to 128 of `A-Z a-z 0-9 - _ . :`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// The incoming id if it is sane, else a fresh one. Anything else
    /// (control characters, spaces, quotes, non-ASCII, a huge value) is
    /// not echoed, so it can neither forge log lines nor headers.
    pub fn of(headers: &HeaderMap) -> RequestId {
        headers
            .get(HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| sane(v))
            .map(|v| RequestId(v.to_owned()))
            .unwrap_or_else(RequestId::fresh)
    }

    /// 128 random bits in hex.
    pub fn fresh() -> RequestId {
        RequestId(format!("{:032x}", rand::random::<u128>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn header_value(&self) -> HeaderValue {
        HeaderValue::from_str(&self.0).expect("a sane id is a valid header value")
    }
}

fn sane(id: &str) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_bytes(value).unwrap());
        headers
    }

    #[test]
    fn a_sane_incoming_id_is_kept() {
        for id in ["abc", "0af7651916cd43dd8448eb211c80319c", "req-1.2_x:y"] {
            assert_eq!(RequestId::of(&with(id.as_bytes())).as_str(), id);
        }
    }

    #[test]
    fn anything_else_is_replaced_by_a_fresh_id() {
        let long = "a".repeat(MAX_LEN + 1);
        for bad in [
            &b"has space"[..],
            b"quote\"",
            b"tab\t",
            b"\xc3\xa9t\xc3\xa9",
            long.as_bytes(),
            b"{json}",
        ] {
            let id = RequestId::of(&with(bad));
            assert_ne!(id.as_str().as_bytes(), bad);
            assert_eq!(id.as_str().len(), 32);
            assert!(sane(id.as_str()));
        }
        let a = RequestId::of(&HeaderMap::new());
        let b = RequestId::of(&HeaderMap::new());
        assert_ne!(a, b, "fresh ids differ");
    }
}
