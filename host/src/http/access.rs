//! One record per request: its log line (target `lockbroker::access`) and
//! its metrics (count, latency by route, action and status; acquires and
//! releases by tenant and result), written when the response is ready.
//!
//! The line names the request id, method, route, action, tenant, key,
//! status, error code and latency, and the trace id when there is one
//! (`trace`: the request's, or with tracing off the caller's
//! `traceparent`'s). Never a header (API keys and tokens travel there),
//! never a body; the key is the path segment as sent (percent-encoded, so
//! it cannot break a line), cut at 256 bytes.

use std::time::Instant;

use hyper::{header::HeaderName, HeaderMap, Method, StatusCode};

use super::{request_id::RequestId, trace::Trace, ApiError, Response};
use crate::metrics::Metrics;

/// Longest key written to a log line.
const MAX_LOGGED_KEY: usize = 256;

/// What the pipeline learned of a request on its way, for its record.
#[derive(Debug, Default)]
pub struct Seen {
    /// The action its method and path name (`acquire`, `status`, ...).
    pub action: &'static str,
    /// The tenant its key authenticated, once it did.
    pub tenant: Option<String>,
    /// The key's path segment as sent.
    pub key: Option<String>,
}

impl Seen {
    pub fn key(&mut self, segment: &str) {
        let mut end = segment.len().min(MAX_LOGGED_KEY);
        while !segment.is_char_boundary(end) {
            end -= 1;
        }
        self.key = Some(segment[..end].to_owned());
    }
}

/// A request being answered.
pub struct Access {
    pub id: RequestId,
    /// None for a request hyper could not parse.
    method: Option<Method>,
    started: Instant,
    pub seen: Seen,
    trace: Trace,
}

impl Access {
    /// A request with `method` and `headers` begins: its id and its span.
    pub fn begin(method: Method, headers: &HeaderMap) -> Access {
        let id = RequestId::of(headers);
        let trace = Trace::begin(&method, headers, &id);
        Access {
            id,
            method: Some(method),
            started: Instant::now(),
            seen: Seen::default(),
            trace,
        }
    }

    /// The request's span (disabled with tracing off), to handle it in.
    pub fn span(&self) -> tracing::Span {
        self.trace.span().clone()
    }

    /// The response for `result`, with its `x-request-id` (and
    /// `traceparent`, with tracing on); logged and counted under `route`.
    pub fn finish(
        self,
        metrics: &Metrics,
        route: &'static str,
        result: Result<Response, ApiError>,
    ) -> Response {
        let (mut response, code) = match result {
            Ok(response) => (response, None),
            Err(err) => {
                let code = err.code.as_str();
                (err.into_response(), Some(code))
            }
        };
        response.headers_mut().insert(
            HeaderName::from_static(super::request_id::HEADER),
            self.id.header_value(),
        );
        let status = response.status();
        let result = code.unwrap_or("ok");
        let trace_id = self
            .trace
            .end(route, &self.seen, status, result, response.headers_mut());
        self.record(metrics, route, status, code, trace_id.as_deref());
        response
    }

    fn record(
        &self,
        metrics: &Metrics,
        route: &'static str,
        status: StatusCode,
        code: Option<&'static str>,
        trace_id: Option<&str>,
    ) {
        let elapsed = self.started.elapsed();
        let status_text = status.as_str();
        let action = self.seen.action;
        metrics.inc(
            "lockbroker_http_requests_total",
            &[("route", route), ("status", status_text)],
        );
        metrics.observe(
            "lockbroker_http_request_duration_seconds",
            &[
                ("route", route),
                ("action", action),
                ("status", status_text),
            ],
            elapsed.as_secs_f64(),
        );
        let result = code.unwrap_or("ok");
        if let Some(tenant) = &self.seen.tenant {
            let counted = match action {
                "acquire" | "campaign" => Some("lockbroker_acquires_total"),
                "release" | "resign" => Some("lockbroker_releases_total"),
                _ => None,
            };
            if let Some(name) = counted {
                metrics.inc(
                    name,
                    &[("tenant", tenant), ("resource", route), ("result", result)],
                );
            }
        }
        tracing::info!(
            target: "lockbroker::access",
            request_id = self.id.as_str(),
            method = self.method.as_ref().map_or("-", Method::as_str),
            route,
            action,
            tenant = self.seen.tenant.as_deref().unwrap_or(""),
            key = self.seen.key.as_deref().unwrap_or(""),
            status = status.as_u16(),
            result,
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            trace_id,
            "request"
        );
    }
}

/// Records a request that hyper refused before routing (see
/// `parse_errors`): route `unparsed`, no method known.
pub fn refused(metrics: &Metrics, status: StatusCode, id: RequestId) {
    let access = Access {
        id,
        method: None,
        started: Instant::now(),
        seen: Seen::default(),
        trace: Trace::none(),
    };
    let code = ApiError::from_parse_status(status).map(|e| e.code.as_str());
    access.record(metrics, "unparsed", status, code, None);
}
