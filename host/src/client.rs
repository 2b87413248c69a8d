//! A small HTTP client for the broker's API, used by `lockctl` and the
//! tests. It speaks JSON and returns every answer, errors included, as a
//! [`Reply`] so callers decide what a status means to them.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::TokioExecutor,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};

/// Everything but RFC 3986's unreserved characters is encoded, so any key
/// (slashes, spaces, unicode) stays one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Why no reply was received.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid broker URL {0:?}")]
    Url(String),
    #[error("cannot reach the broker: {0}")]
    Connect(String),
    #[error("the broker did not answer within {0:?}")]
    Timeout(Duration),
}

/// A broker's answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    /// The JSON body, or `Value::String` with the raw text if it was not JSON.
    pub body: Value,
}

impl Reply {
    /// The `error.code` of an error reply.
    pub fn code(&self) -> Option<&str> {
        self.body["error"]["code"].as_str()
    }

    /// `error.message`, or the status if there is none.
    pub fn message(&self) -> String {
        self.body["error"]["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {}", self.status), str::to_owned)
    }

    pub fn is_ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A client for one broker and one API key.
#[derive(Clone)]
pub struct Client {
    base: String,
    bearer: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
    /// Added to a request's own wait before giving up on the broker.
    pub slack: Duration,
}

/// Percent-encodes a key as one path segment.
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, SEGMENT).to_string()
}

impl Client {
    /// A client for `base_url` (e.g. `http://127.0.0.1:7420`).
    ///
    /// # Errors
    /// The URL is not `http://host[:port]`.
    pub fn new(base_url: &str, bearer: Option<&str>) -> Result<Client, ClientError> {
        let base = base_url.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") || base.parse::<hyper::Uri>().is_err() {
            return Err(ClientError::Url(base_url.to_owned()));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Client {
            base,
            bearer: bearer.map(str::to_owned),
            http: HyperClient::builder(TokioExecutor::new()).build(connector),
            slack: Duration::from_secs(15),
        })
    }

    /// The same client with another bearer token.
    pub fn with_bearer(&self, bearer: Option<&str>) -> Client {
        Client {
            bearer: bearer.map(str::to_owned),
            ..self.clone()
        }
    }

    /// Sends any request. `path` starts with `/`.
    ///
    /// # Errors
    /// The broker cannot be reached or does not answer in time.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        wait: Duration,
    ) -> Result<Reply, ClientError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(bearer) = &self.bearer {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        }
        if !body.is_empty() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| ClientError::Url(e.to_string()))?;
        let limit = wait + self.slack;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| ClientError::Connect(format!("{e:#}")))?;
            let (parts, body) = response.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|e| ClientError::Connect(e.to_string()))?
                .to_bytes();
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            Ok(Reply {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| ClientError::Timeout(limit))?
    }

    /// POSTs JSON.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn post(&self, path: &str, body: &Value) -> Result<Reply, ClientError> {
        let wait = Duration::from_millis(body["wait_ms"].as_u64().unwrap_or(0));
        self.send(Method::POST, path, &[], Bytes::from(body.to_string()), wait)
            .await
    }

    /// GETs a path.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn get(&self, path: &str) -> Result<Reply, ClientError> {
        self.send(Method::GET, path, &[], Bytes::new(), Duration::ZERO)
            .await
    }

    /// `POST /v1/locks/{key}/acquire`.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Result<Reply, ClientError> {
        let body = json!({"owner": owner, "ttl_ms": ttl_ms, "wait_ms": wait_ms});
        self.post(&format!("/v1/locks/{}/acquire", encode_key(key)), &body)
            .await
    }

    /// `POST /v1/locks/{key}/release`.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn release(&self, key: &str, owner: &str, token: u64) -> Result<Reply, ClientError> {
        let body = json!({"owner": owner, "token": token});
        self.post(&format!("/v1/locks/{}/release", encode_key(key)), &body)
            .await
    }

    /// `POST /v1/locks/{key}/renew`.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn renew(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<Reply, ClientError> {
        let body = json!({"owner": owner, "token": token, "ttl_ms": ttl_ms});
        self.post(&format!("/v1/locks/{}/renew", encode_key(key)), &body)
            .await
    }

    /// `GET /v1/locks/{key}`.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn status(&self, key: &str) -> Result<Reply, ClientError> {
        self.get(&format!("/v1/locks/{}", encode_key(key))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_segment() {
        assert_eq!(encode_key("a/b c"), "a%2Fb%20c");
        assert_eq!(encode_key("job-1_x.y~"), "job-1_x.y~");
        assert_eq!(encode_key("✓"), "%E2%9C%93");
    }

    #[test]
    fn rejects_non_http_urls() {
        assert!(Client::new("ftp://x", None).is_err());
        assert!(Client::new("http://127.0.0.1:7420/", None).is_ok());
    }
}
