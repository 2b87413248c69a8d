//! The bench's HTTP client: the API's request types serialized, one
//! request per call, no retries, every answer returned as a [`Reply`] so a
//! scenario counts refusals and failures itself. (The client crate retries
//! and adds guards; the bench measures single requests.)

use std::{borrow::Cow, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::TokioExecutor,
};
use lockbroker_api as api;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{de::DeserializeOwned, Serialize};

/// Everything but RFC 3986's unreserved characters is encoded, so any key
/// stays one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// How long an answer may take beyond the request's own `wait_ms`.
const SLACK: Duration = Duration::from_secs(15);

/// Percent-encodes a key as one path segment.
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, SEGMENT).to_string()
}

/// Why no reply was received.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid broker URL {0:?}")]
    Url(String),
    #[error("cannot reach the broker: {0}")]
    Connect(String),
    #[error("the broker did not answer within {0:?}")]
    Timeout(Duration),
}

/// A broker's answer, as received.
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

impl Reply {
    /// The body as text, for logs and the metrics page.
    /// The body as untyped JSON (`Null` if it is not JSON), for the
    /// baselines that speak other services' APIs (etcd's JSON gateway).
    pub fn json(&self) -> serde_json::Value {
        self.parse().unwrap_or(serde_json::Value::Null)
    }

    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The body as `T`, or why it is not one.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("{e}: {}", self.text()))
    }
}

/// A client for one broker and one API key; its pool keeps one connection
/// for sequential requests.
#[derive(Clone)]
pub struct Client {
    base: String,
    bearer: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    /// A client for `base_url` (`http://host:port`).
    ///
    /// # Errors
    /// The URL is not `http://host[:port]`.
    pub fn new(base_url: &str, bearer: Option<&str>) -> Result<Client, Error> {
        let base = base_url.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") || base.parse::<hyper::Uri>().is_err() {
            return Err(Error::Url(base_url.to_owned()));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Client {
            base,
            bearer: bearer.map(str::to_owned),
            http: HyperClient::builder(TokioExecutor::new()).build(connector),
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        wait_ms: u64,
    ) -> Result<Reply, Error> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(bearer) = &self.bearer {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        }
        if !body.is_empty() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| Error::Url(e.to_string()))?;
        let limit = Duration::from_millis(wait_ms) + SLACK;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| Error::Connect(format!("{e:#}")))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| Error::Connect(e.to_string()))?
                .to_bytes();
            Ok(Reply {
                status: parts.status.as_u16(),
                body,
            })
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| Error::Timeout(limit))?
    }

    /// GETs a path.
    ///
    /// # Errors
    /// The broker cannot be reached or does not answer in time.
    pub async fn get(&self, path: &str) -> Result<Reply, Error> {
        self.send(Method::GET, path, Bytes::new(), 0).await
    }

    /// POSTs an API request; `wait_ms` is the wait it asks for, which the
    /// answer may take on top of the slack.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn post<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        wait_ms: u64,
    ) -> Result<Reply, Error> {
        let json = serde_json::to_vec(body).expect("API requests serialize");
        self.send(Method::POST, path, Bytes::from(json), wait_ms)
            .await
    }

    /// `POST /v1/locks/{key}/acquire`.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Result<Reply, Error> {
        let request = api::AcquireRequest {
            terms: lockbroker_api::LeaseTerms::new(ttl_ms, wait_ms),
            ..api::AcquireRequest::new(owner)
        };
        let path = format!("/v1/locks/{}/acquire", encode_key(key));
        self.post(&path, &request, wait_ms).await
    }

    /// `POST /v1/locks/{key}/release`.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn release(&self, key: &str, owner: &str, token: u64) -> Result<Reply, Error> {
        let request = api::ReleaseRequest {
            owner: owner.to_owned(),
            token,
        };
        let path = format!("/v1/locks/{}/release", encode_key(key));
        self.post(&path, &request, 0).await
    }

    /// `POST /v1/locks/{key}/renew`.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn renew(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Result<Reply, Error> {
        let request = api::RenewRequest {
            owner: owner.to_owned(),
            token,
            ttl_ms: Some(ttl_ms),
        };
        let path = format!("/v1/locks/{}/renew", encode_key(key));
        self.post(&path, &request, 0).await
    }

    /// `GET /v1/locks/{key}`.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn status(&self, key: &str) -> Result<Reply, Error> {
        self.get(&format!("/v1/locks/{}", encode_key(key))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_segment() {
        assert_eq!(encode_key("a/b c"), "a%2Fb%20c");
        assert_eq!(encode_key("bench-1_x.y~"), "bench-1_x.y~");
    }

    /// The bytes on the wire are the ones the bench always sent (the
    /// fields in this order, no priority): results stay comparable.
    #[test]
    fn an_acquire_is_the_same_json_as_before() {
        let request = api::AcquireRequest {
            terms: lockbroker_api::LeaseTerms::new(30_000, 0),
            ..api::AcquireRequest::new("bench-1")
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"owner":"bench-1","ttl_ms":30000,"wait_ms":0}"#
        );
    }
}
