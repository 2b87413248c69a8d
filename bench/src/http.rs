//! The bench's HTTP client: the API's request types serialized, one
//! request per call, no retries, every answer returned as a [`Reply`] so a
//! scenario counts refusals and failures itself. (The client crate retries
//! and adds guards; the bench measures single requests.) It speaks plain
//! HTTP, or HTTPS to a broker with `[tls]` ([`Client::https`]) for the cost
//! of TLS.

use std::{borrow::Cow, path::Path, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::TokioExecutor,
};
use lockbroker_api as api;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rustls::{
    client::Resumption,
    pki_types::{pem::PemObject, CertificateDer},
    ClientConfig, RootCertStore,
};
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

/// `url` without its trailing slashes, if it is `scheme` + `host[:port]`.
fn checked(url: &str, scheme: &str) -> Result<String, Error> {
    let base = url.trim_end_matches('/');
    if !base.starts_with(scheme) || base.parse::<hyper::Uri>().is_err() {
        return Err(Error::Url(url.to_owned()));
    }
    Ok(base.to_owned())
}

/// Percent-encodes a key as one path segment.
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, SEGMENT).to_string()
}

/// The body of an acquire held in `session`: no `ttl_ms` (the broker
/// refuses both; the lease lives as long as the session).
fn acquire_in_session(owner: &str, session: &str, wait_ms: u64) -> api::AcquireRequest {
    api::AcquireRequest {
        terms: lockbroker_api::LeaseTerms {
            ttl_ms: None,
            session: Some(session.to_owned()),
            ..lockbroker_api::LeaseTerms::new(0, wait_ms)
        },
        ..api::AcquireRequest::new(owner)
    }
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
    #[error("CA file {path}: {why}")]
    CaFile { path: String, why: String },
}

/// What an https client trusts: the certificates of one CA file (the
/// broker's own CA), through rustls with ring as the rest of the workspace.
///
/// Sessions are never resumed: every new connection pays a full handshake,
/// as a new process (a cron job, a CLI call) does. A client that keeps its
/// connection pays it once, before a scenario's timed part.
#[derive(Clone)]
pub struct Tls(Arc<ClientConfig>);

impl Tls {
    /// Trusts the CA certificates of the PEM file at `path`.
    ///
    /// # Errors
    /// The file cannot be read, holds no certificate, or one is not a CA
    /// certificate rustls can use.
    pub fn from_ca_file(path: &Path) -> Result<Tls, Error> {
        let fail = |why: String| Error::CaFile {
            path: path.display().to_string(),
            why,
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| fail(e.to_string()))? {
            let cert = cert.map_err(|e| fail(e.to_string()))?;
            roots.add(cert).map_err(|e| fail(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(fail("no certificate".into()));
        }
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| fail(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.resumption = Resumption::disabled();
        Ok(Tls(Arc::new(config)))
    }
}

/// How a [`Client`] connects; kept so that [`Client::fresh`] can build a
/// new pool on the same settings.
#[derive(Clone)]
enum Connector {
    Plain(HttpConnector),
    Tls(HttpsConnector<HttpConnector>),
}

/// A hyper client over one of the [`Connector`]s: its pool keeps one
/// connection for sequential requests.
#[derive(Clone)]
enum Transport {
    Plain(HyperClient<HttpConnector, Full<Bytes>>),
    Tls(HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl Connector {
    fn transport(&self) -> Transport {
        let builder = HyperClient::builder(TokioExecutor::new());
        match self {
            Connector::Plain(c) => Transport::Plain(builder.build(c.clone())),
            Connector::Tls(c) => Transport::Tls(builder.build(c.clone())),
        }
    }
}

/// A TCP connector with Nagle off (requests are small and sequential).
fn tcp() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector
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
/// for sequential requests (clones share it).
#[derive(Clone)]
pub struct Client {
    base: String,
    bearer: Option<String>,
    connector: Connector,
    http: Transport,
}

impl Client {
    /// A client for `base_url` (`http://host:port`).
    ///
    /// # Errors
    /// The URL is not `http://host[:port]`.
    pub fn new(base_url: &str, bearer: Option<&str>) -> Result<Client, Error> {
        let base = checked(base_url, "http://")?;
        Ok(Client::on(base, bearer, Connector::Plain(tcp())))
    }

    /// A client for `base_url` (`https://host:port`) that trusts `tls`.
    ///
    /// # Errors
    /// The URL is not `https://host[:port]`.
    pub fn https(base_url: &str, bearer: Option<&str>, tls: &Tls) -> Result<Client, Error> {
        let base = checked(base_url, "https://")?;
        let mut tcp = tcp();
        tcp.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(ClientConfig::clone(&tls.0))
            .https_only()
            .enable_http1()
            .wrap_connector(tcp);
        Ok(Client::on(base, bearer, Connector::Tls(connector)))
    }

    fn on(base: String, bearer: Option<&str>, connector: Connector) -> Client {
        Client {
            base,
            bearer: bearer.map(str::to_owned),
            http: connector.transport(),
            connector,
        }
    }

    /// The same client with a pool of its own: its first request opens a
    /// new connection (and, over https, pays a full handshake). The old
    /// connection closes when the last clone of the old client is dropped.
    pub fn fresh(&self) -> Client {
        Client {
            base: self.base.clone(),
            bearer: self.bearer.clone(),
            connector: self.connector.clone(),
            http: self.connector.transport(),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        wait_ms: u64,
    ) -> Result<Reply, Error> {
        let json = (!body.is_empty()).then_some("application/json");
        self.exchange(method, path, json, body, wait_ms).await
    }

    /// `method` on `path` with `body` of `content_type` (an admin call: a
    /// policy component's upload, a `DELETE`).
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Reply, Error> {
        self.exchange(method, path, content_type, body, 0).await
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
        wait_ms: u64,
    ) -> Result<Reply, Error> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(bearer) = &self.bearer {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        }
        if let Some(content_type) = content_type {
            builder = builder.header(header::CONTENT_TYPE, content_type);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| Error::Url(e.to_string()))?;
        let limit = Duration::from_millis(wait_ms) + SLACK;
        let exchange = async {
            let response = match &self.http {
                Transport::Plain(http) => http.request(request),
                Transport::Tls(http) => http.request(request),
            }
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

    /// `POST /v1/locks/{key}/acquire` held in `session`
    /// ([`acquire_in_session`]).
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn acquire_in(
        &self,
        key: &str,
        owner: &str,
        session: &str,
        wait_ms: u64,
    ) -> Result<Reply, Error> {
        let request = acquire_in_session(owner, session, wait_ms);
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
    fn each_constructor_takes_its_own_scheme() {
        assert!(Client::new("http://127.0.0.1:7420/", None).is_ok());
        assert!(Client::new("https://127.0.0.1:7420", None).is_err());
        let tls = Tls(Arc::new(
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        ));
        assert!(Client::https("https://127.0.0.1:7421", None, &tls).is_ok());
        assert!(Client::https("http://127.0.0.1:7421", None, &tls).is_err());
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let path = std::env::temp_dir().join(format!("lockbench-empty-ca-{}", std::process::id()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = Tls::from_ca_file(&path).err().expect("refused");
        std::fs::remove_file(&path).unwrap();
        assert!(err.to_string().contains("no certificate"), "{err}");
        assert!(Tls::from_ca_file(Path::new("/nonexistent/ca.pem")).is_err());
    }

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

    /// `contended-session`'s acquire names the session in place of a TTL.
    #[test]
    fn an_acquire_in_a_session_has_no_ttl() {
        assert_eq!(
            serde_json::to_string(&acquire_in_session("bench-1", "s1", 5000)).unwrap(),
            r#"{"owner":"bench-1","wait_ms":5000,"session":"s1"}"#
        );
    }
}
