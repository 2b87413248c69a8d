//! A request's span and its W3C trace context (`traceparent`).
//!
//! With tracing on (`otlp_endpoint`, see `telemetry`), each request has a
//! span: a child of the caller's span when a valid `traceparent` names
//! one, else the root of a new trace. The answer carries a `traceparent`
//! naming the request's span (and the caller's `tracestate`), so a caller
//! finds the broker's part of its trace. The span's attributes are the
//! method, route, action, tenant, key, status, result and request id:
//! never a header (API keys and tokens travel there), never a body.
//!
//! With tracing off the span is disabled (it costs nothing) and no
//! `traceparent` is returned; the trace id of a valid incoming one is
//! still written in the request's log line, so a caller's trace and the
//! broker's log meet either way.

use hyper::{header::HeaderName, HeaderMap, Method, StatusCode};
use opentelemetry::{
    propagation::TextMapPropagator,
    trace::{TraceContextExt, TraceId},
};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::{field::Empty, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{access::Seen, request_id::RequestId};
use crate::telemetry::REQUEST_SPAN;

/// The header of the W3C trace context, both ways.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// One request's place in a trace.
pub struct Trace {
    span: Span,
    /// With tracing off: the trace id of the incoming `traceparent`.
    incoming: Option<TraceId>,
}

impl Trace {
    /// The span of a request with `headers`, under the caller's span if
    /// its `traceparent` is valid.
    pub fn begin(method: &Method, headers: &HeaderMap, id: &RequestId) -> Trace {
        let span = tracing::info_span!(
            REQUEST_SPAN,
            otel.kind = "server",
            otel.status_code = Empty,
            http.request.method = method.as_str(),
            http.route = Empty,
            http.response.status_code = Empty,
            lockbroker.action = Empty,
            lockbroker.tenant = Empty,
            lockbroker.key = Empty,
            lockbroker.result = Empty,
            lockbroker.request_id = id.as_str(),
        );
        let caller = headers
            .contains_key(TRACEPARENT)
            .then(|| TraceContextPropagator::new().extract(&HeaderExtractor(headers)));
        let mut incoming = None;
        if let Some(caller) = caller {
            if span.is_disabled() {
                incoming = Some(caller.span().span_context().trace_id())
                    .filter(|id| *id != TraceId::INVALID);
            } else {
                // An invalid one leaves the span the root of a new trace.
                let _ = span.set_parent(caller);
            }
        }
        Trace { span, incoming }
    }

    /// No trace: a request hyper refused before the broker saw it.
    pub fn none() -> Trace {
        Trace {
            span: Span::none(),
            incoming: None,
        }
    }

    /// The request's span, to run its handling in.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Records how the request went on its span, and names the span in
    /// the answer's `traceparent` (with tracing on). The trace id, for the
    /// log line: the span's, or with tracing off the caller's.
    pub fn end(
        &self,
        route: &str,
        seen: &Seen,
        status: StatusCode,
        result: &str,
        headers: &mut HeaderMap,
    ) -> Option<String> {
        if self.span.is_disabled() {
            return self.incoming.map(|id| id.to_string());
        }
        let span = &self.span;
        span.record("http.route", route);
        // An i64: OpenTelemetry has no unsigned integers.
        span.record("http.response.status_code", i64::from(status.as_u16()));
        span.record("lockbroker.action", seen.action);
        if let Some(tenant) = &seen.tenant {
            span.record("lockbroker.tenant", tenant.as_str());
        }
        if let Some(key) = &seen.key {
            span.record("lockbroker.key", key.as_str());
        }
        span.record("lockbroker.result", result);
        // A server span is an error when the server failed, not the client.
        if status.is_server_error() {
            span.record("otel.status_code", "error");
        }
        let context = span.context();
        let trace_id = context.span().span_context().trace_id();
        if trace_id == TraceId::INVALID {
            return None;
        }
        // Named once the route is known (the span has begun by now, so
        // through OpenTelemetry: an `otel.name` field would come too late).
        context.span().update_name(match seen.action {
            "" => route.to_owned(),
            action => format!("{route} {action}"),
        });
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
        Some(trace_id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    /// The trace id a request with `traceparent` logs, and whether its
    /// answer carries one, with tracing off (no subscriber here).
    fn untraced(traceparent: Option<&str>) -> (Option<String>, bool) {
        let mut headers = HeaderMap::new();
        if let Some(value) = traceparent {
            headers.insert(TRACEPARENT, HeaderValue::from_str(value).unwrap());
        }
        let trace = Trace::begin(&Method::POST, &headers, &RequestId::fresh());
        assert!(trace.span().is_disabled());
        let mut answer = HeaderMap::new();
        let id = trace.end("locks", &Seen::default(), StatusCode::OK, "ok", &mut answer);
        (id, answer.contains_key(TRACEPARENT))
    }

    #[test]
    fn with_tracing_off_the_callers_trace_id_is_logged_and_nothing_returned() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            untraced(Some(valid)),
            (Some("4bf92f3577b34da6a3ce929d0e0e4736".into()), false)
        );
        for invalid in [
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(untraced(Some(invalid)), (None, false), "{invalid}");
        }
        assert_eq!(untraced(None), (None, false));
    }
}
