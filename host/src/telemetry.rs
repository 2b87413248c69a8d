//! Logs and traces: one subscriber for the process.
//!
//! **Logs** go to stderr as text or as one JSON object per line
//! (`--log-format`, `log_format`, `LOCKBROKER_LOG_FORMAT`), filtered by
//! `LOCKBROKER_LOG`. What is logged is chosen where it is logged; nothing
//! here adds fields. The one line per HTTP request is written by
//! `http::access` (target `lockbroker::access`, so
//! `LOCKBROKER_LOG=info,lockbroker::access=off` silences it). Secrets never
//! reach a log line: requests are logged by route, tenant name and key,
//! never by header, and database URLs only redacted.
//!
//! **Traces**, only when `otlp_endpoint` is set: the broker's `tracing`
//! spans become OpenTelemetry spans (tracing-opentelemetry), batched and
//! sent as OTLP/HTTP protobuf to `{otlp_endpoint}/v1/traces`. There are
//! four: the request's ([`REQUEST_SPAN`], `http::trace`, which also takes
//! and returns the W3C `traceparent`), a waiter's wait for its turn
//! (`queue.wait`, `engine::detach`), each database transaction
//! (`db.transaction`, `store::pool`) and each policy call (`policy.call`,
//! `policy`). Only spans inside a request are kept: background work (the
//! reaper, heartbeats, sweeps) starts no traces. Spans never reach the log
//! and log events never reach a span. Without `otlp_endpoint` the
//! OpenTelemetry layer is not installed: every span's callsite is then
//! disabled once, and creating one costs a load of that cached answer.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};
use opentelemetry::{trace::TracerProvider as _, KeyValue};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{trace::SdkTracerProvider, Resource};
use tokio::sync::oneshot;
use tracing::{subscriber::Interest, Metadata, Subscriber};
use tracing_subscriber::{
    filter::LevelFilter,
    layer::{Context, Filter, SubscriberExt},
    registry::LookupSpan,
    util::SubscriberInitExt,
    EnvFilter, Layer,
};

pub use crate::config::LogFormat;

/// The filter when `LOCKBROKER_LOG` is unset or invalid.
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// The name of the span of one HTTP request, the root of the broker's part
/// of a trace: spans are exported only under one.
pub const REQUEST_SPAN: &str = "request";

/// Bound on one export request, the answer's body included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to open a connection to the receiver.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read from the receiver (it says little).
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long the process waits at exit for the last spans to go out.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(3);

/// Where spans go: an OTLP/HTTP receiver (`otlp_endpoint`, its base URL)
/// and the `service.name` they carry.
#[derive(Debug, Clone, Copy)]
pub struct Otlp<'a> {
    pub endpoint: &'a str,
    pub service_name: &'a str,
}

/// The process's telemetry while it runs. Dropping it sends the spans
/// still buffered (waiting [`FLUSH_AT_EXIT`] at most).
#[must_use = "dropping it ends the export of spans"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(err) = provider.shutdown_with_timeout(FLUSH_AT_EXIT) {
                tracing::warn!(error = %err, "the last spans were not exported");
            }
        }
    }
}

/// Installs the process's subscriber: the log, and when `otlp` is given,
/// the export of spans. Call once, early in `main`, and keep the answer
/// until the end.
///
/// # Errors
/// The exporter cannot be set up (then nothing is installed).
pub fn init(format: LogFormat, otlp: Option<Otlp<'_>>) -> anyhow::Result<Telemetry> {
    let lines = Lines(
        EnvFilter::try_from_env("LOCKBROKER_LOG")
            .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER)),
    );
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = match format {
        LogFormat::Text => log.with_filter(lines).boxed(),
        // Event fields at the top level of each object (`request_id`,
        // `status`, ...), next to `timestamp`, `level`, `target`, `message`.
        LogFormat::Json => log.json().flatten_event(true).with_filter(lines).boxed(),
    };
    let logs = tracing_subscriber::registry().with(log);
    // No layer at all without an endpoint (a `None` one would leave span
    // callsites enabled, to be judged on every call).
    let Some(otlp) = otlp else {
        logs.init();
        return Ok(Telemetry { provider: None });
    };
    let provider = provider(otlp)?;
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("lockbroker"))
        .with_location(false)
        .with_target(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(InRequest);
    logs.with(spans).init();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// The tracer provider sending to `otlp`: spans batched (every 5 s, or
/// 512 at a time; `OTEL_BSP_*` may say otherwise) and sampled as the
/// caller's `traceparent` says, else all (`OTEL_TRACES_SAMPLER` may say
/// otherwise). `OTEL_EXPORTER_OTLP_HEADERS` adds headers to each export
/// (a receiver's credentials).
fn provider(otlp: Otlp<'_>) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", otlp.endpoint.trim_end_matches('/')))
        .with_http_client(Sender::start()?)
        .build()
        .context("cannot set up the OTLP exporter")?;
    let resource = Resource::builder()
        .with_service_name(otlp.service_name.to_owned())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

// Both filters below answer `sometimes`, never `always`, for what they may
// keep. A callsite cached as `always` skips `enabled` and is judged by the
// per-layer filter state that the last `enabled` call on its thread left:
// after a check at run time that no filter wanted (an `enabled!`, a `log`
// record below the level), that state says "disabled", and the next
// request's log line was lost (tracing-subscriber 0.3.23).

/// The log's filter: `LOCKBROKER_LOG`'s, for events only (spans are for
/// traces: a text line would be prefixed with them, a JSON one get fields).
struct Lines(EnvFilter);

impl<S> Filter<S> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        meta.is_event() && Filter::enabled(&self.0, meta, cx)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if meta.is_span() || Filter::<S>::callsite_enabled(&self.0, meta).is_never() {
            Interest::never()
        } else {
            Interest::sometimes()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Filter::<S>::max_level_hint(&self.0)
    }
}

/// Keeps the broker's own spans that belong to a request: the request's,
/// and those opened while one is current (not those of background tasks,
/// which would each start a trace of their own).
struct InRequest;

impl<S> Filter<S> for InRequest
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        ours(meta) && (meta.name() == REQUEST_SPAN || cx.lookup_current().is_some())
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if ours(meta) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    /// The broker's spans are all at `info`.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }
}

/// A span of the broker's (not of a library).
fn ours(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.target().starts_with("lockbroker")
}

/// The exporter's HTTP client: hyper (HTTP/1.1; `https://` with rustls and
/// the system's roots), on a thread and runtime of its own, so that a slow
/// receiver never holds up the broker's runtime and the last spans still
/// go out once it has stopped.
#[derive(Debug)]
struct Sender {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    /// Dropped with the exporter: the thread ends.
    _stop: oneshot::Sender<()>,
}

impl Sender {
    fn start() -> anyhow::Result<Sender> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the OTLP exporter's runtime")?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .context("cannot start the OTLP exporter's thread")?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.enforce_http(false);
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        Ok(Sender {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime: handle,
            _stop: stop,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for Sender {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exchange = async move {
            let answer = client.request(request.map(Full::new)).await?;
            let (head, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES).collect().await?;
            Ok::<_, HttpError>(http::Response::from_parts(head, body.to_bytes()))
        };
        self.runtime
            .spawn(async move {
                tokio::time::timeout(EXPORT_TIMEOUT, exchange)
                    .await
                    .unwrap_or_else(|_| Err("the OTLP receiver did not answer in time".into()))
            })
            .await?
    }
}
