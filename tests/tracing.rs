//! Tracing: a broker with `otlp_endpoint` exports its spans over OTLP/HTTP
//! to this test's own receiver (a hyper server decoding the protobuf
//! `ExportTraceServiceRequest` of opentelemetry-proto, as a collector
//! would). One acquire that waits, sent with a W3C `traceparent`, comes
//! back with a `traceparent` of the same trace naming the broker's request
//! span, and the receiver gets that span (a child of the caller's), the
//! wait as a `queue.wait` span as long as the wait, the database
//! transactions and the policy call, all in the caller's trace; the
//! request's log line carries the trace id; no secret reaches a span; and
//! background work starts no traces. Without `otlp_endpoint` nothing is
//! returned, yet the log line still names the caller's trace.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Method, Request};
use hyper_util::rt::TokioIo;
use lockbroker_api::{AcquireRequest, Lease, LeaseTerms, LockStatus};
use lockbroker_tests::{
    drop_db, eventually, eventually_some, fresh_db_name, BrokerProcess, Client, Reply, ADMIN, KEY,
};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{any_value, KeyValue},
    trace::v1::{span::SpanKind, Span},
};
use prost::Message;
use serde_json::Value;
use tokio::net::TcpListener;

/// The caller's trace and span, as its `traceparent` names them.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// How long the test waits for spans: the broker sends them in batches
/// every 5 s.
const SPANS_WITHIN: Duration = Duration::from_secs(30);

/// How long the holder keeps the key once the waiter is queued.
const HOLD: Duration = Duration::from_millis(300);

/// One span as received, with its resource's `service.name`.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }
    fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }
    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }
    fn duration(&self) -> Duration {
        Duration::from_nanos(
            self.span
                .end_time_unix_nano
                .saturating_sub(self.span.start_time_unix_nano),
        )
    }
    fn attr(&self, key: &str) -> Option<&any_value::Value> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }
    fn text(&self, key: &str) -> Option<&str> {
        match self.attr(key)? {
            any_value::Value::StringValue(text) => Some(text),
            _ => None,
        }
    }
    fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key)? {
            any_value::Value::IntValue(n) => Some(*n),
            _ => None,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP receiver of traces on a port of its own.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Received>>>,
    /// The `content-type` of each export request.
    content_types: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let content_types = Arc::new(Mutex::new(Vec::new()));
        let (s, c) = (spans.clone(), content_types.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (s, c) = (s.clone(), c.clone());
                let service = service_fn(move |req| receive(req, s.clone(), c.clone()));
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            url,
            spans,
            content_types,
        }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of trace `trace_id` received so far.
    fn trace(&self, trace_id: &str) -> Vec<Received> {
        self.spans()
            .into_iter()
            .filter(|r| r.trace_id() == trace_id)
            .collect()
    }
}

/// Answers one export: decodes it (400 if it is not an OTLP trace
/// export) and keeps its spans.
async fn receive(
    req: Request<Incoming>,
    spans: Arc<Mutex<Vec<Received>>>,
    content_types: Arc<Mutex<Vec<String>>>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let answer = |status: u16, body: Vec<u8>| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    if req.method() != Method::POST || req.uri().path() != "/v1/traces" {
        return Ok(answer(404, Vec::new()));
    }
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    content_types.lock().unwrap().push(content_type);
    let Ok(body) = req.into_body().collect().await else {
        return Ok(answer(400, Vec::new()));
    };
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return Ok(answer(400, Vec::new()));
    };
    let mut received = spans.lock().unwrap();
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(string_of)
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    Ok(answer(
        200,
        ExportTraceServiceResponse::default().encode_to_vec(),
    ))
}

fn string_of(kv: &KeyValue) -> Option<String> {
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        _ => None,
    }
}

/// A JSON acquire request.
fn acquire_body(owner: &str, wait_ms: u64) -> Bytes {
    let request = AcquireRequest {
        terms: LeaseTerms::new(30_000, wait_ms),
        ..AcquireRequest::new(owner)
    };
    Bytes::from(serde_json::to_vec(&request).unwrap())
}

/// `POST /v1/locks/{key}/acquire` with `headers`.
async fn acquire(
    c: &Client,
    key: &str,
    owner: &str,
    wait_ms: u64,
    headers: &[(&str, &str)],
) -> Reply {
    c.send(
        Method::POST,
        &format!("/v1/locks/{key}/acquire"),
        headers,
        acquire_body(owner, wait_ms),
        Duration::from_millis(wait_ms),
    )
    .await
    .unwrap()
}

/// The trace id and span id of a `traceparent` (version 00, 55 characters).
fn parse_traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00", "{value}");
    assert_eq!(
        (parts[1].len(), parts[2].len(), parts[3].len()),
        (32, 16, 2),
        "{value}"
    );
    assert!(
        value.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()),
        "{value}"
    );
    (parts[1].to_owned(), parts[2].to_owned())
}

fn traceparent_of(reply: &Reply) -> Option<String> {
    reply
        .headers
        .get("traceparent")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// The JSON log line of the request with id `request_id`.
async fn log_line(log: &lockbroker_tests::LogLines, request_id: &str) -> Value {
    eventually_some("the request's log line", Duration::from_secs(10), || {
        let lines = log.lines();
        async move {
            lines
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["request_id"] == request_id)
        }
    })
    .await
}

#[tokio::test]
async fn a_waiting_acquire_is_traced_with_its_wait_on_the_queue_span() {
    let receiver = Receiver::start().await;
    let db = fresh_db_name();
    let (broker, log) = BrokerProcess::start_logged(
        &db,
        &format!(
            "otlp_endpoint = \"{}\"\notlp_service_name = \"lockbroker-test\"",
            receiver.url
        ),
        &["--log-format", "json"],
    )
    .await;
    let c = broker.client();

    // Another owner holds the key (a request without a traceparent: a
    // trace of its own).
    let held = acquire(&c, "traced", "holder", 0, &[]).await;
    assert_eq!(held.status, 200, "{held:?}");
    let holder_token = held.ok::<Lease>().token;
    let (holder_trace, _) = parse_traceparent(&traceparent_of(&held).expect("a traceparent"));
    assert_ne!(holder_trace, TRACE_ID);

    // Once the waiter is queued, the holder lets go after HOLD.
    let releaser = {
        let c = c.clone();
        tokio::spawn(async move {
            eventually("the waiter is queued", Duration::from_secs(10), || {
                let c = c.clone();
                async move {
                    let status = c.status("traced").await.unwrap();
                    status.status == 200 && status.ok::<LockStatus>().waiters == 1
                }
            })
            .await;
            tokio::time::sleep(HOLD).await;
            let released = c.release("traced", "holder", holder_token).await.unwrap();
            assert_eq!(released.status, 200, "{released:?}");
        })
    };
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let waited = acquire(
        &c,
        "traced",
        "waiter",
        10_000,
        &[
            ("traceparent", &traceparent),
            ("x-request-id", "traced-waiter"),
        ],
    )
    .await;
    assert_eq!(waited.status, 200, "{waited:?}");
    releaser.await.unwrap();

    // The answer names the broker's span in the caller's trace.
    let returned = traceparent_of(&waited).expect("the answer carries a traceparent");
    let (trace_id, request_span) = parse_traceparent(&returned);
    assert_eq!(trace_id, TRACE_ID, "{returned}");
    assert_ne!(request_span, CALLER_SPAN, "{returned}");
    assert!(
        returned.ends_with("-01"),
        "sampled, as the caller asked: {returned}"
    );

    // The receiver gets the request span and the wait.
    let trace = eventually_some("the waiter's spans are exported", SPANS_WITHIN, || {
        let trace = receiver.trace(TRACE_ID);
        let complete = trace.iter().any(|r| r.span_id() == request_span)
            && trace.iter().any(|r| r.span.name == "queue.wait");
        async move { complete.then_some(trace) }
    })
    .await;
    let names: Vec<&str> = trace.iter().map(|r| r.span.name.as_str()).collect();
    let request = trace.iter().find(|r| r.span_id() == request_span).unwrap();
    assert_eq!(request.span.name, "locks acquire", "{names:?}");
    assert_eq!(
        request.parent(),
        CALLER_SPAN,
        "a child of the caller's span"
    );
    assert_eq!(request.span.kind, SpanKind::Server as i32);
    assert_eq!(request.service, "lockbroker-test");
    assert_eq!(request.text("http.route"), Some("locks"));
    assert_eq!(request.text("http.request.method"), Some("POST"));
    assert_eq!(request.int("http.response.status_code"), Some(200));
    assert_eq!(request.text("lockbroker.action"), Some("acquire"));
    assert_eq!(request.text("lockbroker.tenant"), Some("default"));
    assert_eq!(request.text("lockbroker.key"), Some("traced"));
    assert_eq!(request.text("lockbroker.result"), Some("ok"));
    assert_eq!(request.text("lockbroker.request_id"), Some("traced-waiter"));

    // The wait is on the queue span, under the request's: as long as the
    // holder held on after the waiter was queued.
    let wait = trace.iter().find(|r| r.span.name == "queue.wait").unwrap();
    assert_eq!(wait.parent(), request_span, "{names:?}");
    assert_eq!(wait.text("lockbroker.outcome"), Some("turn"));
    assert!(
        wait.duration() >= HOLD - Duration::from_millis(50),
        "the wait took {:?}",
        wait.duration()
    );
    assert!(wait.duration() <= request.duration());
    assert!(wait.span.start_time_unix_nano >= request.span.start_time_unix_nano);
    assert!(wait.span.end_time_unix_nano <= request.span.end_time_unix_nano);

    // Its database transactions (the enqueue at least), each begun and
    // ended inside the request.
    let transactions: Vec<&Received> = trace
        .iter()
        .filter(|r| r.span.name == "db.transaction")
        .collect();
    assert!(!transactions.is_empty(), "{names:?}");
    for tx in &transactions {
        assert_eq!(tx.parent(), request_span, "{names:?}");
        assert!(
            matches!(tx.text("lockbroker.outcome"), Some("commit" | "rollback")),
            "{:?}",
            tx.span.attributes
        );
        assert!(tx.text("server.address").is_some_and(|a| a.contains(':')));
        assert!(tx.span.start_time_unix_nano >= request.span.start_time_unix_nano);
        assert!(tx.span.end_time_unix_nano <= request.span.end_time_unix_nano);
    }
    // And its policy call: the built-in policy naming the key.
    let naming = trace
        .iter()
        .find(|r| {
            r.span.name == "policy.call" && r.text("lockbroker.policy.export") == Some("naming")
        })
        .unwrap_or_else(|| panic!("no naming call: {names:?}"));
    assert_eq!(naming.parent(), request_span);
    assert_eq!(naming.text("lockbroker.policy.version"), Some("builtin"));
    assert_eq!(naming.text("lockbroker.outcome"), Some("ok"));

    // The request's log line names the trace.
    let line = log_line(&log, "traced-waiter").await;
    assert_eq!(line["trace_id"], TRACE_ID, "{line}");

    // The holder's acquire is a trace of its own, with its root there.
    let holder = eventually_some("the holder's spans are exported", SPANS_WITHIN, || {
        let root = receiver
            .trace(&holder_trace)
            .into_iter()
            .find(|r| r.span.name == "locks acquire");
        async move { root }
    })
    .await;
    assert_eq!(holder.parent(), "", "the root of its trace");

    // A malformed traceparent is ignored: a new trace.
    let fresh = acquire(&c, "other", "x", 0, &[("traceparent", "00-zz-not-a-trace")]).await;
    assert_eq!(fresh.status, 200, "{fresh:?}");
    let (fresh_trace, _) = parse_traceparent(&traceparent_of(&fresh).expect("a traceparent"));
    assert_ne!(fresh_trace, "0".repeat(32));

    // Every answer carries one, errors too.
    let refused = c
        .with_bearer(Some("not-a-key"))
        .get("/v1/locks/traced")
        .await
        .unwrap();
    assert_eq!(refused.status, 401);
    assert!(traceparent_of(&refused).is_some());

    broker.stop().await;
    let spans = receiver.spans();
    // Protobuf, as configured.
    assert!(receiver
        .content_types
        .lock()
        .unwrap()
        .iter()
        .all(|t| t == "application/x-protobuf"));
    // Only requests start traces: the reaper's transactions (every 25 ms)
    // and the other background work are not exported.
    for root in spans.iter().filter(|r| r.parent().is_empty()) {
        assert!(
            root.text("http.route").is_some(),
            "a trace not started by a request: {:?}",
            root.span.name
        );
    }
    // No secret reaches a span: no key, token or database URL.
    for received in &spans {
        for kv in &received.span.attributes {
            let value = format!("{:?}", kv.value);
            for secret in [KEY, ADMIN, "not-a-key", "mysql://", "Bearer"] {
                assert!(
                    !value.contains(secret),
                    "{secret} in {}.{}: {value}",
                    received.span.name,
                    kv.key
                );
            }
        }
    }
    drop_db(&db).await;
}

#[tokio::test]
async fn without_tracing_nothing_is_returned_but_the_log_names_the_callers_trace() {
    let db = fresh_db_name();
    let (broker, log) = BrokerProcess::start_logged(&db, "", &["--log-format", "json"]).await;
    let c = broker.client();
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let traced = acquire(
        &c,
        "untraced",
        "a",
        0,
        &[
            ("traceparent", &traceparent),
            ("x-request-id", "untraced-1"),
        ],
    )
    .await;
    assert_eq!(traced.status, 200, "{traced:?}");
    assert_eq!(traceparent_of(&traced), None);
    let plain = acquire(&c, "untraced", "a", 0, &[("x-request-id", "untraced-2")]).await;
    assert_eq!(plain.status, 200, "{plain:?}");
    assert_eq!(traceparent_of(&plain), None);
    let line = log_line(&log, "untraced-1").await;
    assert_eq!(line["trace_id"], TRACE_ID, "{line}");
    let line = log_line(&log, "untraced-2").await;
    assert!(line.get("trace_id").is_none(), "{line}");
    broker.stop().await;
    drop_db(&db).await;
}
