//! The tests' HTTP client: one request per call, no retries, every answer
//! (errors included) returned as a [`Reply`], so a test judges exactly what
//! the broker said. The Rust client crate (`lockbroker-client`) retries and
//! turns refusals into errors, which is right for users and wrong here; its
//! own behaviour is tested in `rust_client.rs`.
//!
//! Requests are the `lockbroker-api` types, serialized; answers are read
//! back into them with [`Reply::ok`] and [`Reply::parse`]. Raw bytes go
//! through [`Client::send`] only in tests of bad input.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::TokioExecutor,
};
use lockbroker_api::{
    AcquireRequest, ErrorBody, ErrorCode, ErrorDetail, LockEventKind, LockHistory, ReleaseRequest,
    RenewRequest,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{de::DeserializeOwned, Serialize};

/// Everything but RFC 3986's unreserved characters is encoded, so any key
/// (slashes, spaces, unicode) stays one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a key as one path segment.
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, SEGMENT).to_string()
}

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

/// A broker's answer, as received.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {} {}", self.status, self.text())
    }
}

impl Reply {
    pub fn is_ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (lossy), for messages and non-JSON answers.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as `T`, or `None` if it is not one.
    pub fn try_parse<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The body as `T`.
    ///
    /// # Panics
    /// The body is not a `T`; the message shows the answer.
    #[track_caller]
    pub fn parse<T: DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the answer is not a {}: {e}: {self:?}",
                std::any::type_name::<T>()
            )
        })
    }

    /// The body of a successful answer as `T`.
    ///
    /// # Panics
    /// The status is not 2xx, or the body is not a `T`.
    #[track_caller]
    pub fn ok<T: DeserializeOwned>(&self) -> T {
        assert!(self.is_ok(), "expected success: {self:?}");
        self.parse()
    }

    /// The body as JSON, for the tests that check the wire format itself
    /// (documents, schemas) rather than a typed answer.
    ///
    /// # Panics
    /// The body is not JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        self.parse()
    }

    /// The error envelope's detail, when the answer is one.
    pub fn error(&self) -> Option<ErrorDetail> {
        self.try_parse::<ErrorBody>().map(|body| body.error)
    }

    /// The error code, when the answer is an error envelope.
    pub fn code(&self) -> Option<ErrorCode> {
        self.error().map(|e| e.code)
    }

    /// The error's message, or the status if there is none.
    pub fn message(&self) -> String {
        self.error()
            .map_or_else(|| format!("HTTP {}", self.status), |e| e.message)
    }
}

/// A client for one broker and one bearer token.
#[derive(Clone)]
pub struct Client {
    base: String,
    bearer: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
    /// Added to a request's own wait before giving up on the broker.
    pub slack: Duration,
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

    /// Sends any request, `body` as it is. `path` starts with `/`; `wait`
    /// is how long the broker may legitimately take (the request's
    /// `wait_ms`), [`Client::slack`] is added to it.
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
            let body = body
                .collect()
                .await
                .map_err(|e| ClientError::Connect(e.to_string()))?
                .to_bytes();
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

    /// POSTs `body` (an API request type) as JSON. A `wait_ms` in it
    /// extends how long the answer may take.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn post<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<Reply, ClientError> {
        let json = serde_json::to_vec(body).expect("API requests serialize");
        let wait = Duration::from_millis(wait_ms_of(&json));
        self.send(Method::POST, path, &[], Bytes::from(json), wait)
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

    /// `POST /v1/sessions` with `body`, expected to answer 201: the session.
    ///
    /// # Panics
    /// When the broker does not answer 201.
    pub async fn open_session(&self, body: &serde_json::Value) -> lockbroker_api::Session {
        let reply = self
            .post("/v1/sessions", body)
            .await
            .expect("the broker answers");
        assert_eq!(reply.status, 201, "{reply:?}");
        reply.parse()
    }

    /// `DELETE /v1/sessions/{id}`.
    ///
    /// # Panics
    /// When the broker does not answer in time.
    pub async fn close_session(&self, id: &str) -> Reply {
        let path = format!("/v1/sessions/{id}");
        self.send(
            Method::DELETE,
            &path,
            &[],
            Bytes::new(),
            Duration::from_secs(5),
        )
        .await
        .expect("the broker answers")
    }

    /// `GET /v1/{kind}/{key}/history`, expected to answer 200: the events
    /// as `(event, owner, token)`, newest first, and the whole answer.
    ///
    /// # Panics
    /// When the broker does not answer 200.
    pub async fn history(
        &self,
        kind: &str,
        key: &str,
    ) -> (Vec<(LockEventKind, String, u64)>, LockHistory) {
        let reply = self
            .get(&format!("/v1/{kind}/{key}/history"))
            .await
            .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        let history: LockHistory = reply.parse();
        let events = history
            .events
            .iter()
            .map(|e| (e.event, e.owner.clone(), e.token))
            .collect();
        (events, history)
    }

    /// `POST /v1/locks/{key}/acquire` with any request.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn acquire_with(
        &self,
        key: &str,
        request: &AcquireRequest,
    ) -> Result<Reply, ClientError> {
        self.post(&format!("/v1/locks/{}/acquire", encode_key(key)), request)
            .await
    }

    /// `POST /v1/locks/{key}/acquire` for `owner` with a TTL and a wait.
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
        let request = AcquireRequest {
            terms: lockbroker_api::LeaseTerms::new(ttl_ms, wait_ms),
            ..AcquireRequest::new(owner)
        };
        self.acquire_with(key, &request).await
    }

    /// `POST /v1/locks/{key}/release`.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn release(&self, key: &str, owner: &str, token: u64) -> Result<Reply, ClientError> {
        let request = ReleaseRequest {
            owner: owner.to_owned(),
            token,
        };
        self.post(&format!("/v1/locks/{}/release", encode_key(key)), &request)
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
        let request = RenewRequest {
            owner: owner.to_owned(),
            token,
            ttl_ms: Some(ttl_ms),
        };
        self.post(&format!("/v1/locks/{}/renew", encode_key(key)), &request)
            .await
    }

    /// `GET /v1/locks/{key}`.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub async fn status(&self, key: &str) -> Result<Reply, ClientError> {
        self.get(&format!("/v1/locks/{}", encode_key(key))).await
    }

    /// A counter's value in the broker's `/metrics`: `series` is its name
    /// with its labels as printed (0 when absent).
    ///
    /// # Panics
    /// The broker does not answer.
    pub async fn counter(&self, series: &str) -> u64 {
        let text = self.get("/metrics").await.unwrap().text();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// The `wait_ms` of a serialized request (0 when it has none): every
/// request type that waits names the field so.
fn wait_ms_of(json: &[u8]) -> u64 {
    #[derive(serde::Deserialize)]
    struct Wait {
        wait_ms: Option<u64>,
    }
    serde_json::from_slice::<Wait>(json)
        .ok()
        .and_then(|w| w.wait_ms)
        .unwrap_or(0)
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

    #[test]
    fn the_wait_of_a_request_bounds_its_answer() {
        let request = AcquireRequest {
            terms: lockbroker_api::LeaseTerms {
                wait_ms: Some(1500),
                ..Default::default()
            },
            ..AcquireRequest::new("w")
        };
        assert_eq!(wait_ms_of(&serde_json::to_vec(&request).unwrap()), 1500);
        let release = ReleaseRequest {
            owner: "w".into(),
            token: 1,
        };
        assert_eq!(wait_ms_of(&serde_json::to_vec(&release).unwrap()), 0);
    }
}
