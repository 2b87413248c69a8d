//! HTTP/1.1 with hyper: the accept loop with graceful shutdown, the router,
//! and the request pipeline every tenant call goes through
//! (auth → body → naming policy → engine → response).
//!
//! - `router`: path and method to handler.
//! - `resource`: the one model of every lease kind ([`resource::Resource`])
//!   and the one pipeline they all go through; `locks`, `semaphores`,
//!   `rwlocks`, `elections` implement it, each with only what is its own
//!   (`sse` is the event stream of an election's `observe`).
//! - `history`: a kind's recorded events, as the API shows them;
//!   `listing`: a listing's query and cursor.
//! - `request`: the steps every call shares (auth, body limits, JSON, key).
//! - `events`: the stream of every change (`GET /v1/events`).
//! - `sessions`: sessions, which keep many leases alive with one
//!   keepalive and end them all at once;
//! - `multilock`: several lock keys at once; `admin`: tenants, policies and
//!   force-release; `ops`: health, readiness, metrics, OpenAPI;
//!   `internal`: calls between brokers (push wake-ups), on their own secret.
//! - `error`: every failure's status and JSON shape, in one place.
//! - `openapi`: the OpenAPI document, generated from the kinds' models,
//!   the handlers' annotations and the `lockbroker_api` types;
//!   `responses`: the error answers it shares between operations.
//! - `limits`: the request head's size limits (414, 431), checked before
//!   routing; `parse_errors`: JSON bodies for what hyper refuses itself.
//! - `request_id` and `access`: each request's id, log line and metrics;
//!   `trace`: its span and W3C trace context.

mod access;
mod admin;
mod elections;
mod error;
mod events;
mod history;
mod internal;
mod limits;
mod listing;
mod locks;
mod multilock;
mod openapi;
mod ops;
mod parse_errors;
mod request;
mod request_id;
mod resource;
mod responses;
mod router;
mod rwlocks;
mod semaphores;
mod sessions;
mod sse;
mod trace;
mod waiting;

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{header, server::conn::http1, service::service_fn, StatusCode};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
};
use tokio::{
    net::TcpListener,
    sync::{mpsc, watch},
};

pub use error::ApiError;

use crate::app::App;

/// Response body: whole JSON documents, or a stream for Server-Sent Events.
pub type Body = BoxBody<Bytes, Infallible>;
pub type Response = hyper::Response<Body>;

/// Time in-flight requests get to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A whole-body response.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A JSON response: one of the `lockbroker_api` types.
pub fn json_response<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    let body = serde_json::to_vec(value).expect("API types always serialize");
    let mut response = hyper::Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A 200 answer with a JSON body.
pub fn ok<T: serde::Serialize>(body: &T) -> Response {
    json_response(StatusCode::OK, body)
}

/// Serves `app` on `listener` until `stop` turns true, then stops accepting
/// and lets in-flight requests finish (for at most [`DRAIN_TIMEOUT`]).
/// Serves HTTP/1.1 on one accepted connection (plain or TLS), in a task of
/// its own that `graceful` waits for at shutdown.
fn serve_connection<S>(
    app: &Arc<App>,
    graceful: &GracefulShutdown,
    builder: &http1::Builder,
    stream: S,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let metrics = app.metrics.clone();
    let app = app.clone();
    let service = service_fn(move |req| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(router::handle(&app, req).await) }
    });
    let (io, rewritten) = parse_errors::JsonParseErrors::new(stream);
    let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
    tokio::spawn(async move {
        if let Err(err) = conn.await {
            tracing::debug!(error = %err, "connection ended with an error");
        }
        // A request hyper refused itself is logged and counted here.
        if let Some((status, id)) = rewritten.lock().expect("rewritten").take() {
            access::refused(&metrics, status, id);
        }
    });
}

pub async fn serve(listener: TcpListener, app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(app.config.header_read_timeout_ms))
        .keep_alive(true)
        // Heads up to our own limits reach the router, which answers JSON.
        .max_buf_size(limits::READ_BUFFER_BYTES)
        // One buffer per response head: `parse_errors` recognises hyper's
        // own error answers as one write.
        .writev(false);
    // TLS handshakes run in tasks of their own, bounded like a request's
    // headers (a slow client holds up no other), and come back here.
    let (handshaken, mut secured) = mpsc::unbounded_channel();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(err) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            Some(stream) = secured.recv() => {
                serve_connection(&app, &graceful, &builder, stream);
                continue;
            }
            () = crate::shutdown::stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let Some(tls) = app.tls.clone() else {
            serve_connection(&app, &graceful, &builder, stream);
            continue;
        };
        let within = Duration::from_millis(app.config.header_read_timeout_ms);
        let handshaken = handshaken.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(within, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = handshaken.send(stream);
                }
                Ok(Err(err)) => tracing::debug!(error = %err, "TLS handshake refused"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("drain timed out; closing"),
    }
}
