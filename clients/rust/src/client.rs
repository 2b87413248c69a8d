//! The [`Client`]: one broker, one API key, a connection pool, and the one
//! place where a call is timed, retried and its answer decoded.

use std::{path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{body::Incoming, header, Method, Response};
use lockbroker_api::{ErrorBody, ErrorCode};
use serde::{de::DeserializeOwned, Serialize};
use tokio::time::Instant;

use crate::{
    error::{ApiError, Error, Result},
    owner,
    retry::RetryPolicy,
    tls::TlsFiles,
    transport::{Failure, Transport},
};

/// How long a call may take beyond the request's own `wait_ms` by
/// default, retries included: the broker bounds its database work by
/// `db_timeout_ms` (2 s by default), so this is generous.
pub const DEFAULT_SLACK: Duration = Duration::from_secs(10);

// The environment variables `Client::from_env` reads (and `lockctl`).
const ENV_URL: &str = "LOCKBROKER_URL";
const ENV_API_KEY: &str = "LOCKBROKER_API_KEY";
const ENV_CA_FILE: &str = "LOCKBROKER_CA_FILE";
const ENV_CLIENT_CERT: &str = "LOCKBROKER_CLIENT_CERT";
const ENV_CLIENT_KEY: &str = "LOCKBROKER_CLIENT_KEY";

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
    tls_files: TlsFiles,
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

    /// Every call's deadline, beyond the request's own wait (default
    /// [`DEFAULT_SLACK`]): its tries and the waits between them (after a
    /// 503, a 429, a failed connection) all fit in it. A retry whose wait
    /// would pass the deadline is not made: the call fails at once with
    /// what the last try got (`unavailable`, `rate_limited` with its
    /// `retry_after`, ...); a try still unanswered at the deadline fails
    /// with [`Error::Timeout`].
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

    /// Trust the CA certificates of this PEM file for `https://` (instead
    /// of the system's roots): the broker's own CA. `LOCKBROKER_CA_FILE`
    /// for [`Client::from_env`].
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> ClientBuilder {
        self.tls_files.ca_file = Some(path.into());
        self
    }

    /// Present this client certificate (PEM, chain allowed) with its
    /// private key (PEM: PKCS#8, PKCS#1 or SEC1) to a broker that asks for
    /// one (mutual TLS). `LOCKBROKER_CLIENT_CERT` and
    /// `LOCKBROKER_CLIENT_KEY` for [`Client::from_env`].
    pub fn client_cert(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> ClientBuilder {
        self.tls_files.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// The TLS settings for `https://`, whole (roots, client certificates,
    /// protocol versions): [`ca_file`](Self::ca_file) and
    /// [`client_cert`](Self::client_cert) are then ignored. Default: rustls
    /// with the system's root certificates.
    pub fn tls_config(mut self, config: rustls::ClientConfig) -> ClientBuilder {
        self.tls = Some(config);
        self
    }

    /// The client.
    ///
    /// # Errors
    /// [`Error::Url`] when the URL is not `http(s)://host[:port]`;
    /// [`Error::TlsFile`] naming a CA file, client certificate or key that
    /// cannot be read or used.
    pub fn build(self) -> Result<Client> {
        let tls = match self.tls {
            Some(config) => Some(config),
            None if self.tls_files.is_empty() => None,
            None => Some(self.tls_files.config()?),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                transport: Transport::new(&self.url, tls)?,
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

    /// A client from the environment, as `lockctl` reads it (an empty
    /// variable counts as unset):
    ///
    /// - `LOCKBROKER_URL` (default `http://127.0.0.1:7420`),
    /// - `LOCKBROKER_API_KEY`,
    /// - `LOCKBROKER_CA_FILE`: see [`ClientBuilder::ca_file`],
    /// - `LOCKBROKER_CLIENT_CERT` and `LOCKBROKER_CLIENT_KEY` (both or
    ///   neither): see [`ClientBuilder::client_cert`].
    ///
    /// # Errors
    /// [`Error::Url`] when the URL is not `http(s)://host[:port]`;
    /// [`Error::TlsFile`] naming a TLS file that cannot be read or used, or
    /// a client certificate given without its key (or the reverse).
    pub fn from_env() -> Result<Client> {
        let url = env(ENV_URL).unwrap_or_else(|| "http://127.0.0.1:7420".into());
        let mut builder = Client::builder(&url);
        if let Some(key) = env(ENV_API_KEY) {
            builder = builder.api_key(key);
        }
        if let Some(ca) = env(ENV_CA_FILE) {
            builder = builder.ca_file(ca);
        }
        match (env(ENV_CLIENT_CERT), env(ENV_CLIENT_KEY)) {
            (Some(cert), Some(key)) => builder = builder.client_cert(cert, key),
            (None, None) => {}
            (Some(cert), None) => return Err(half_pair(cert, ENV_CLIENT_KEY)),
            (None, Some(key)) => return Err(half_pair(key, ENV_CLIENT_CERT)),
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
            tls_files: TlsFiles::default(),
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
        let answer = self
            .with_retries(
                idempotent,
                wait + self.inner.slack,
                || async {
                    let response = self
                        .send(method.clone(), path, content_type, &[], body.clone())
                        .await?;
                    let (status, retry_after) = head(&response);
                    Ok(Answer {
                        status,
                        retry_after,
                        body: read_body(response).await?,
                    })
                },
                whole,
            )
            .await?;
        if (200..300).contains(&answer.status) {
            Ok(answer.body)
        } else {
            Err(refusal(answer.status, &answer.body, answer.retry_after))
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
        let answer = self
            .with_retries(
                Idempotent::Yes,
                self.inner.slack,
                || async {
                    let response = self
                        .send(Method::GET, path, None, &headers, Bytes::new())
                        .await?;
                    let (status, retry_after) = head(&response);
                    let body = if (200..300).contains(&status) {
                        Ok(response)
                    } else {
                        Err(read_body(response).await?)
                    };
                    Ok(Answer {
                        status,
                        retry_after,
                        body,
                    })
                },
                unopened,
            )
            .await?;
        answer
            .body
            .map_err(|bytes| refusal(answer.status, &bytes, answer.retry_after))
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

    /// Runs `exchange` (one HTTP exchange) under the retry policy until
    /// `budget` from now, the call's deadline:
    ///
    /// - again after a 503 or a connection that could not be made, up to
    ///   the policy's attempts, after the broker's hint or a growing,
    ///   jittered delay;
    /// - again after a 429 `rate_limited` or `quota_exceeded` once the
    ///   broker's `retry_after_ms` (or `Retry-After`) has passed, as often
    ///   as the deadline allows (unless the policy makes one try only):
    ///   nothing was done, and the broker said when to come back;
    /// - after a broken connection, again only if `idempotent`; otherwise
    ///   [`Error::OutcomeUnknown`] (the request may have taken effect);
    /// - never after a TLS refusal or any other answer.
    ///
    /// A retry whose wait would pass the deadline is not made: the last
    /// try's answer or failure is the call's, at once. A try still running
    /// at the deadline is [`Error::Timeout`], unless the call is idempotent
    /// and an earlier try failed: then that failure, which says more than
    /// "no answer" (a retry that had not connected by the deadline on a
    /// loaded machine turned "connection refused" into a timeout).
    /// `refused` finds the body of an error answer in what `exchange` keeps
    /// of it.
    async fn with_retries<T, F, Fut>(
        &self,
        idempotent: Idempotent,
        budget: Duration,
        mut exchange: F,
        refused: impl Fn(&T) -> Option<&Bytes>,
    ) -> Result<Answer<T>>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Answer<T>, Failure>>,
    {
        let deadline = Instant::now() + budget;
        let policy = &self.inner.retry;
        let attempts = policy.attempts.max(1);
        // Tries that met a 503 or no connection; 429s that were waited out.
        let (mut failed, mut throttled) = (0, 0);
        // What the try before this one got, if it is to be retried.
        let mut earlier = None;
        loop {
            let Ok(outcome) = tokio::time::timeout_at(deadline, exchange()).await else {
                return match earlier {
                    Some(earlier) if idempotent == Idempotent::Yes => earlier,
                    _ => Err(Error::Timeout(budget)),
                };
            };
            let (wait, otherwise) = match outcome {
                Ok(answer) if answer.status == 503 => {
                    failed += 1;
                    let hint = refused(&answer.body)
                        .and_then(|bytes| error_body(bytes))
                        .and_then(|body| body.error.retry_after_ms)
                        .map(Duration::from_millis)
                        .or(answer.retry_after);
                    (
                        (failed < attempts).then(|| policy.delay(failed, hint)),
                        Ok(answer),
                    )
                }
                Ok(answer) if answer.status == 429 => {
                    let refusal = refused(&answer.body)
                        .and_then(|bytes| error_body(bytes))
                        .map(|body| ApiError::from_body(429, body, answer.retry_after));
                    let wait = match refusal {
                        Some(refusal) if refusal.is_throttled() && attempts > 1 => {
                            throttled += 1;
                            Some(policy.throttled_delay(throttled, refusal.retry_after))
                        }
                        _ => None,
                    };
                    (wait, Ok(answer))
                }
                Ok(answer) => return Ok(answer),
                Err(Failure::Tls(why)) => return Err(Error::Tls(why)),
                Err(Failure::Broken(why)) if idempotent == Idempotent::No => {
                    return Err(Error::OutcomeUnknown(why))
                }
                Err(Failure::NotSent(why) | Failure::Broken(why)) => {
                    failed += 1;
                    (
                        (failed < attempts).then(|| policy.delay(failed, None)),
                        Err(Error::Connect(why)),
                    )
                }
            };
            match wait {
                Some(wait) if Instant::now() + wait < deadline => {
                    earlier = Some(otherwise);
                    tokio::time::sleep(wait).await
                }
                _ => return otherwise,
            }
        }
    }
}

/// What one exchange got: the status, the `Retry-After` header's wait, and
/// what the caller keeps of the body.
struct Answer<T> {
    status: u16,
    retry_after: Option<Duration>,
    body: T,
}

/// The status of an answer and its `Retry-After` (whole seconds; the
/// broker sends it with every `retry_after_ms`, and a proxy may send it
/// alone).
fn head(response: &Response<Incoming>) -> (u16, Option<Duration>) {
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    (response.status().as_u16(), retry_after)
}

/// The body of an answer kept whole: an error's envelope if it is one.
fn whole(bytes: &Bytes) -> Option<&Bytes> {
    Some(bytes)
}

/// The body of a stream that did not open: its error's envelope.
fn unopened(opened: &Result<Response<Incoming>, Bytes>) -> Option<&Bytes> {
    opened.as_ref().err()
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

/// The API's error envelope, if `bytes` is one.
fn error_body(bytes: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(bytes).ok()
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

/// A non-2xx answer as an error: the API's envelope when it is one;
/// `retry_after` is the answer's `Retry-After`.
fn refusal(status: u16, bytes: &[u8], retry_after: Option<Duration>) -> Error {
    match error_body(bytes) {
        Some(body) => ApiError::into_error(status, body, retry_after),
        None if status == 503 => Error::Api(ApiError {
            status,
            code: ErrorCode::Unavailable,
            message: String::from_utf8_lossy(bytes).into_owned(),
            retry_after,
        }),
        None => Error::Unexpected {
            status,
            detail: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
        },
    }
}

/// An environment variable, `None` when unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// A client certificate without its key, or the reverse (`missing` is the
/// variable that is not set).
fn half_pair(given: String, missing: &str) -> Error {
    Error::TlsFile {
        path: given.into(),
        reason: format!("{missing} is not set: a client certificate needs its key and the reverse"),
    }
}
