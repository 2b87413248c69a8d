//! One HTTP exchange with the broker, over http or https (rustls): build
//! the request, send it, hand back the status and the body. Timeouts,
//! retries and the meaning of statuses are the caller's ([`crate::Client`]).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, header, Method, Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::TokioExecutor,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::error::Error;

/// Everything but RFC 3986's unreserved characters is encoded, so any key
/// (slashes, spaces, unicode) stays one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a key as one path segment.
pub(crate) fn segment(key: &str) -> String {
    utf8_percent_encode(key, SEGMENT).to_string()
}

/// Why an exchange got no answer, and whether the request may have reached
/// the broker: a retry is safe for any request only when it did not.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection could not be made: nothing was sent.
    NotSent(String),
    /// The connection broke after (part of) the request may have gone out.
    Broken(String),
}

impl From<Failure> for Error {
    fn from(failure: Failure) -> Error {
        match failure {
            Failure::NotSent(why) | Failure::Broken(why) => Error::Connect(why),
        }
    }
}

type Connector = HttpsConnector<HttpConnector>;

/// A connection pool to one broker.
#[derive(Clone)]
pub(crate) struct Transport {
    /// `scheme://authority`, without a trailing slash.
    base: Arc<str>,
    http: HyperClient<Connector, Full<Bytes>>,
}

impl Transport {
    /// A pool for `base_url` (`http://` or `https://host[:port]`), with
    /// `tls` for https (the system's roots when `None`).
    pub(crate) fn new(
        base_url: &str,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Transport, Error> {
        let base = base_url.trim_end_matches('/');
        let uri: hyper::Uri = base.parse().map_err(|_| Error::Url(base_url.into()))?;
        let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
        let bare = uri.path() == "/" || uri.path().is_empty();
        if !scheme_ok || uri.authority().is_none() || !bare || uri.query().is_some() {
            return Err(Error::Url(base_url.into()));
        }
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let tls = tls.unwrap_or_else(|| system_tls().as_ref().clone());
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Transport {
            base: base.into(),
            http: HyperClient::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// Sends one request and returns the response once its headers are in
    /// (the body is the caller's to read, or to stream).
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        content_type: Option<&str>,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Response<Incoming>, Failure> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(bearer) = bearer {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        }
        if let Some(content_type) = content_type {
            builder = builder.header(header::CONTENT_TYPE, content_type);
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| Failure::NotSent(format!("cannot build the request: {e}")))?;
        self.http.request(request).await.map_err(|e| {
            let why = error_chain(&e);
            if e.is_connect() {
                Failure::NotSent(why)
            } else {
                Failure::Broken(why)
            }
        })
    }
}

/// rustls with ring and the system's root certificates, built once per
/// process (reading the roots takes a few milliseconds). A system without
/// roots gets an empty store: http still works, https to a public CA fails
/// with a certificate error rather than the client failing to build.
fn system_tls() -> &'static Arc<rustls::ClientConfig> {
    static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        Arc::new(config)
    })
}

/// An error and its sources on one line (hyper's own `Display` says only
/// "client error (Connect)").
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    // Bounded: error chains are short, but a cycle must not hang us.
    for _ in 0..8 {
        let Some(next) = source else { break };
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_segment() {
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(segment("job-1_x.y~"), "job-1_x.y~");
        assert_eq!(segment("✓"), "%E2%9C%93");
    }

    #[test]
    fn only_bare_http_and_https_urls_are_accepted() {
        for good in [
            "http://127.0.0.1:7420",
            "http://127.0.0.1:7420/",
            "https://broker.example:443",
            "https://broker.example",
        ] {
            assert!(Transport::new(good, None).is_ok(), "{good}");
        }
        for bad in [
            "ftp://x",
            "127.0.0.1:7420",
            "http://",
            "http://h/v1",
            "http://h?x=1",
            "",
        ] {
            assert!(
                matches!(Transport::new(bad, None), Err(Error::Url(_))),
                "{bad}"
            );
        }
    }
}
