//! The [`Client`]: one broker, one API key, a connection pool, and the one
//! place where a call is timed, retried and its answer decoded.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{body::Incoming, Method, Response};
use lockbroker_api::{ErrorBody, ErrorCode};
use serde::{de::DeserializeOwned, Serialize};

use crate::{
    error::{ApiError, Error, Result},
    owner,
    retry::RetryPolicy,
    transport::{Failure, Transport},
};

/// How long an answer may take beyond the request's own `wait_ms` by
/// default: the broker bounds its database work by `db_timeout_ms` (2 s by
/// default), so this is generous.
pub const DEFAULT_SLACK: Duration = Duration::from_secs(10);

/// A client of one broker with one API key (a tenant's, or the admin
/// token for [`Client::admin`]). Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    api_key: Option<String>,
    retry: RetryPolicy,
    slack: Duration,
    identity: String,
}

/// Builds a [`Client`].
#[must_use]
pub struct ClientBuilder {
    url: String,
    api_key: Option<String>,
    retry: RetryPolicy,
    slack: Duration,
    identity: Option<String>,
    tls: Option<rustls::ClientConfig>,
}

impl ClientBuilder {
    /// The bearer token: a tenant's API key, or the admin token.
    pub fn api_key(mut self, key: impl Into<String>) -> ClientBuilder {
        self.api_key = Some(key.into());
        self
    }

    /// How 503s and failed connections are retried
    /// (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> ClientBuilder {
        self.retry = policy;
        self
    }

    /// How long an answer may take beyond the request's own wait before the
    /// call fails with [`Error::Timeout`] (default [`DEFAULT_SLACK`]).
    pub fn slack(mut self, slack: Duration) -> ClientBuilder {
        self.slack = slack;
        self
    }

    /// The prefix of the owners guards make up (`{identity}:{n}`); default
    /// `host:pid`.
    pub fn identity(mut self, identity: impl Into<String>) -> ClientBuilder {
        self.identity = Some(identity.into());
        self
    }

    /// The TLS settings for `https://` (your own roots, client
    /// certificates); default: rustls with the system's root certificates.
    pub fn tls_config(mut self, config: rustls::ClientConfig) -> ClientBuilder {
        self.tls = Some(config);
        self
    }

    /// The client.
    ///
    /// # Errors
    /// [`Error::Url`] when the URL is not `http(s)://host[:port]`.
    pub fn build(self) -> Result<Client> {
        Ok(Client {
            inner: Arc::new(Inner {
                transport: Transport::new(&self.url, self.tls)?,
                api_key: self.api_key,
                retry: self.retry,
                slack: self.slack,
                identity: self.identity.unwrap_or_else(owner::default_identity),
            }),
        })
    }
}

/// Whether a request may be sent twice when its first try may have
/// reached the broker (a renewal may; an acquire may not: it would
/// re-enter the lock it got the first time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotent {
    Yes,
    No,
}

impl Client {
    /// A client of the broker at `url` with a tenant's `api_key`.
    ///
    /// # Errors
    /// [`Error::Url`] when the URL is not `http(s)://host[:port]`.
    pub fn new(url: &str, api_key: impl Into<String>) -> Result<Client> {
        Client::builder(url).api_key(api_key).build()
    }

    /// A client from `LOCKBROKER_URL` (default `http://127.0.0.1:7420`) and
    /// `LOCKBROKER_API_KEY`, as `lockctl` reads them.
    ///
    /// # Errors
    /// [`Error::Url`] when the URL is not `http(s)://host[:port]`.
    pub fn from_env() -> Result<Client> {
        let url =
            std::env::var("LOCKBROKER_URL").unwrap_or_else(|_| "http://127.0.0.1:7420".into());
        let mut builder = Client::builder(&url);
        if let Ok(key) = std::env::var("LOCKBROKER_API_KEY") {
            builder = builder.api_key(key);
        }
        builder.build()
    }

    /// A builder for the broker at `url`.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            api_key: None,
            retry: RetryPolicy::default(),
            slack: DEFAULT_SLACK,
            identity: None,
            tls: None,
        }
    }

    /// The same broker and pool with another bearer token (the admin
    /// token, another tenant's key).
    pub fn with_api_key(&self, key: impl Into<String>) -> Client {
        Client {
            inner: Arc::new(Inner {
                transport: self.inner.transport.clone(),
                api_key: Some(key.into()),
                retry: self.inner.retry.clone(),
                slack: self.inner.slack,
                identity: self.inner.identity.clone(),
            }),
        }
    }

    /// How this client retries (also how a stream waits to reconnect).
    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.inner.retry
    }

    /// A fresh owner name for a guard: `{identity}:{n}`.
    pub(crate) fn unique_owner(&self) -> String {
        owner::unique(&self.inner.identity)
    }

    /// Sends JSON `body` (or nothing) and decodes a 2xx answer as `T`.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
        wait: Duration,
        idempotent: Idempotent,
    ) -> Result<T> {
        let (content_type, bytes) = match body {
            Some(body) => (
                Some("application/json"),
                Bytes::from(serde_json::to_vec(body).expect("API types serialize")),
            ),
            None => (None, Bytes::new()),
        };
        let bytes = self
            .call_bytes(method, path, content_type, bytes, wait, idempotent)
            .await?;
        decode(200, &bytes)
    }

    /// `POST`s JSON `body` and decodes a 2xx answer as `T`; `wait` is how
    /// long the broker may hold the request (a waiting acquire).
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
        wait: Duration,
        idempotent: Idempotent,
    ) -> Result<T> {
        self.call(Method::POST, path, Some(body), wait, idempotent)
            .await
    }

    /// `GET`s `path` and decodes a 2xx answer as `T`.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call(
            Method::GET,
            path,
            None::<&()>,
            Duration::ZERO,
            Idempotent::Yes,
        )
        .await
    }

    /// Sends `body` with `content_type`; the body of a 2xx answer.
    pub(crate) async fn call_bytes(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
        wait: Duration,
        idempotent: Idempotent,
    ) -> Result<Bytes> {
        let limit = wait + self.inner.slack;
        let (status, bytes) = self
            .with_retries(
                idempotent,
                limit,
                || async {
                    let response = self
                        .send(method.clone(), path, content_type, &[], body.clone())
                        .await?;
                    let status = response.status().as_u16();
                    Ok((status, read_body(response).await?))
                },
                |bytes| retry_after(bytes),
            )
            .await?;
        if (200..300).contains(&status) {
            Ok(bytes)
        } else {
            Err(refusal(status, &bytes))
        }
    }

    /// Opens a streaming GET (Server-Sent Events): the response once its
    /// headers are in and its status is 2xx. Only the wait for the headers
    /// is bounded; the stream lasts as long as the broker sends. `resume`:
    /// the `Last-Event-ID` to resume after.
    pub(crate) async fn open_stream(
        &self,
        path: &str,
        resume: Option<u64>,
    ) -> Result<Response<Incoming>> {
        let resume = resume.map(|id| id.to_string());
        let headers: Vec<(&str, &str)> = resume
            .as_deref()
            .map(|id| ("last-event-id", id))
            .into_iter()
            .collect();
        let (status, opened) = self
            .with_retries(
                Idempotent::Yes,
                self.inner.slack,
                || async {
                    let response = self
                        .send(Method::GET, path, None, &headers, Bytes::new())
                        .await?;
                    let status = response.status().as_u16();
                    if (200..300).contains(&status) {
                        Ok((status, Ok(response)))
                    } else {
                        Ok((status, Err(read_body(response).await?)))
                    }
                },
                |opened| opened.as_ref().err().and_then(|bytes| retry_after(bytes)),
            )
            .await?;
        opened.map_err(|bytes| refusal(status, &bytes))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Response<Incoming>, Failure> {
        self.inner
            .transport
            .send(
                method,
                path,
                self.inner.api_key.as_deref(),
                content_type,
                headers,
                body,
            )
            .await
    }

    /// Runs `exchange` (one HTTP exchange giving a status and what the
    /// caller keeps of the answer) under the retry policy: again after a
    /// 503 (after the answer's `retry_after_ms` if `hint` finds one) or a
    /// connection that could not be made, and after a broken connection or
    /// a timeout only if `idempotent`; each try bounded by `limit`.
    async fn with_retries<T, F, Fut>(
        &self,
        idempotent: Idempotent,
        limit: Duration,
        mut exchange: F,
        hint: impl Fn(&T) -> Option<Duration>,
    ) -> Result<(u16, T)>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(u16, T), Failure>>,
    {
        let policy = &self.inner.retry;
        let attempts = policy.attempts.max(1);
        let retry_any = idempotent == Idempotent::Yes;
        let mut tries = 0;
        loop {
            tries += 1;
            let last = tries >= attempts;
            let suggested = match tokio::time::timeout(limit, exchange()).await {
                Ok(Ok((503, answer))) if !last => hint(&answer),
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(Failure::NotSent(_))) if !last => None,
                Ok(Err(Failure::Broken(_))) if !last && retry_any => None,
                Err(_) if !last && retry_any => None,
                Ok(Err(failure)) => return Err(failure.into()),
                Err(_) => return Err(Error::Timeout(limit)),
            };
            tokio::time::sleep(policy.delay(tries, suggested)).await;
        }
    }
}

/// The whole body of an answer.
async fn read_body(response: Response<Incoming>) -> Result<Bytes, Failure> {
    Ok(response
        .into_body()
        .collect()
        .await
        .map_err(|e| Failure::Broken(format!("reading the answer: {e}")))?
        .to_bytes())
}

/// The `retry_after_ms` of an error answer, if it has one.
fn retry_after(bytes: &[u8]) -> Option<Duration> {
    serde_json::from_slice::<ErrorBody>(bytes)
        .ok()?
        .error
        .retry_after_ms
        .map(Duration::from_millis)
}

/// A 2xx body as `T`.
pub(crate) fn decode<T: DeserializeOwned>(status: u16, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Unexpected {
        status,
        detail: format!(
            "{e}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ),
    })
}

/// A non-2xx answer as an error: the API's envelope when it is one.
fn refusal(status: u16, bytes: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => Error::Api(ApiError::from_body(status, body)),
        Err(_) if status == 503 => Error::Api(ApiError {
            status,
            code: ErrorCode::Unavailable,
            message: String::from_utf8_lossy(bytes).into_owned(),
            retry_after: None,
        }),
        Err(_) => Error::Unexpected {
            status,
            detail: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
        },
    }
}
