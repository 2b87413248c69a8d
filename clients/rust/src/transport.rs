//! One HTTP exchange with the broker, over http or https (rustls): build
//! the request, send it, hand back the status and the body. Timeouts,
//! retries and the meaning of statuses are the caller's ([`crate::Client`]).

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, header, Method, Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::{TokioExecutor, TokioTimer},
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::{error::Error, tls};

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
    /// TLS refused: the broker's certificate is not trusted, or the broker
    /// refused ours (with TLS 1.3 that may come after the request went
    /// out, but the broker never read it). Trying again would fail again.
    Tls(String),
}

type Connector = HttpsConnector<HttpConnector>;

/// A pooled connection idle this long is not used again. The broker closes
/// a connection idle for its `header_read_timeout_ms` (10 s by default); a
/// request sent just as it does is lost on the way, and an acquire's
/// outcome is then unknown. Well under the broker's, so that never happens.
pub(crate) const IDLE_AT_MOST: Duration = Duration::from_secs(5);

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
        let tls = tls.unwrap_or_else(|| tls::system().clone());
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Transport {
            base: base.into(),
            http: HyperClient::builder(TokioExecutor::new())
                .pool_idle_timeout(IDLE_AT_MOST)
                .pool_timer(TokioTimer::new())
                .build(connector),
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
            if is_tls(&e) {
                Failure::Tls(why)
            } else if e.is_connect() {
                Failure::NotSent(why)
            } else {
                Failure::Broken(why)
            }
        })
    }
}

/// True when rustls is among `err`'s sources: a handshake that failed, or
/// an alert the broker sent (it refused our certificate).
fn is_tls(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    // Bounded: error chains are short, but a cycle must not hang us.
    for _ in 0..16 {
        let Some(err) = next else { break };
        if err.is::<rustls::Error>() {
            return true;
        }
        // An `io::Error` hides what it wraps from `source()` (it answers
        // the wrapped error's own source): look at the wrapped one itself.
        next = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    false
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
