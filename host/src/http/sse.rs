//! Server-Sent Events: a response body fed by a channel.

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{
    body::{Body as HttpBody, Frame},
    header, StatusCode,
};
use lockbroker_api::ElectionEvent;
use tokio::sync::mpsc;

use super::Response;

/// A body that streams whatever the sender sends, until it is dropped.
struct Events(mpsc::Receiver<Bytes>);

impl HttpBody for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|b| Ok(Frame::data(b))))
    }
}

/// An event-stream response and the sender that feeds it. The sender's
/// `closed()` resolves when the client goes away.
pub fn stream() -> (mpsc::Sender<Bytes>, Response) {
    let (tx, rx) = mpsc::channel(16);
    let mut response = hyper::Response::new(Events(rx).boxed());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    (tx, response)
}

/// One event in the wire format: its name on the `event:` line, its data
/// as one line of JSON (serde_json escapes newlines inside strings).
pub fn event(event: &ElectionEvent) -> Bytes {
    match event {
        ElectionEvent::Leader(status) => frame(event.name(), None, status),
    }
}

/// An event named `name` with `data` (one line of JSON) and, if given, the
/// `id:` a client resumes after.
pub fn frame(name: &str, id: Option<u64>, data: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(data).expect("API types always serialize");
    let id = id.map_or(String::new(), |id| format!("id: {id}\n"));
    Bytes::from(format!("{id}event: {name}\ndata: {data}\n\n"))
}

/// A comment line: keeps an idle stream (and proxies on the way) open.
pub fn keep_alive() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}
