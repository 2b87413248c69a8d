//! A Server-Sent Events reader for tests: opens a stream over one HTTP/1.1
//! connection (hyper) and hands each event on as it arrives.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpStream, sync::mpsc, task::JoinHandle};

/// One event: its `id:`, `event:` and `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

impl SseEvent {
    /// The data, parsed.
    ///
    /// # Panics
    /// When the data is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {:?}", self.data))
    }
}

/// An open stream: its status, its events as they arrive, and the task
/// reading it (abort it, or drop the stream, to hang up).
pub struct SseStream {
    pub status: u16,
    pub events: mpsc::UnboundedReceiver<SseEvent>,
    task: JoinHandle<()>,
}

impl Drop for SseStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SseStream {
    /// `GET path` on the broker at `url` (`http://host:port`) with the
    /// bearer token and `headers`.
    ///
    /// # Panics
    /// When the connection or the request fails.
    pub async fn open(url: &str, path: &str, bearer: &str, headers: &[(&str, &str)]) -> SseStream {
        let addr = url.trim_start_matches("http://");
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        let mut request = Request::get(path)
            .header(header::HOST, addr)
            .header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::<Bytes>::new()).expect("request");
        let (tx, events) = mpsc::unbounded_channel();
        let response = {
            let driving = tokio::spawn(conn);
            let response = sender.send_request(request).await.expect("response");
            (response, driving)
        };
        let (response, driving) = response;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let task = tokio::spawn(async move {
            let _driving = driving;
            let mut buffer = String::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buffer.push_str(&String::from_utf8_lossy(&data));
                while let Some(end) = buffer.find("\n\n") {
                    let block: String = buffer.drain(..end + 2).collect();
                    if let Some(event) = parse(&block) {
                        if tx.send(event).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        SseStream {
            status,
            events,
            task,
        }
    }

    /// The next event, waiting at most `within`.
    ///
    /// # Panics
    /// When none arrives in time or the stream ended.
    pub async fn next(&mut self, within: std::time::Duration) -> SseEvent {
        tokio::time::timeout(within, self.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no event within {within:?}"))
            .expect("the stream ended")
    }
}

/// An event block (comment-only blocks, keep-alives, are none).
fn parse(block: &str) -> Option<SseEvent> {
    let (mut id, mut event, mut data) = (None, None, Vec::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push(v);
        }
    }
    Some(SseEvent {
        id,
        event: event?,
        data: data.join("\n"),
    })
}
