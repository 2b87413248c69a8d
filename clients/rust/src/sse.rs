//! Server-Sent Events, the wire format of `observe` and `/v1/events`: a
//! line parser that turns bytes as they arrive into `(event, id, data)`,
//! per the HTML spec's rules that matter here (`event:`, `id:` and `data:`
//! fields, several `data:` lines joined by `\n`, `:` comments, a blank line
//! ends an event, `\n`, `\r\n` or `\r` end a line), and [`EventBody`], a
//! response body read as a [`Stream`] of typed events.

use std::{
    collections::VecDeque,
    pin::Pin,
    task::{Context, Poll},
};

use futures_core::Stream;
use hyper::body::{Body, Incoming};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEvent {
    /// `message` when the event named none.
    pub name: String,
    /// Its `id:` field, if it had one.
    pub id: Option<String>,
    pub data: String,
}

/// An event longer than this is refused, so a broken stream cannot grow
/// the buffer without bound.
pub(crate) const MAX_EVENT_BYTES: usize = 1 << 20;

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` first in the next one ends
    /// nothing.
    after_cr: bool,
    name: Option<String>,
    id: Option<String>,
    data: Option<String>,
    /// Bytes in `name` and `data` so far.
    size: usize,
}

/// The stream broke the format (an event over [`MAX_EVENT_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooLong;

impl Parser {
    /// Feeds a chunk; returns the events it completed, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<RawEvent>, TooLong> {
        let mut events = Vec::new();
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.end_line(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    self.line.push(byte);
                    if self.line.len() + self.size > MAX_EVENT_BYTES {
                        return Err(TooLong);
                    }
                }
            }
        }
        Ok(events)
    }

    fn end_line(&mut self, line: &[u8]) -> Option<RawEvent> {
        if line.is_empty() {
            self.size = 0;
            let name = self.name.take();
            let id = self.id.take();
            return self.data.take().map(|data| RawEvent {
                name: name.unwrap_or_else(|| "message".into()),
                id,
                data,
            });
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        self.size += value.len();
        match field {
            "event" => self.name = Some(value.to_owned()),
            "id" => self.id = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        None
    }
}

/// An event's data as `T`.
///
/// # Errors
/// [`Error::Unexpected`] when it is not one.
pub(crate) fn data<T: DeserializeOwned>(raw: &RawEvent) -> Result<T> {
    serde_json::from_str(&raw.data).map_err(|e| Error::Unexpected {
        status: 200,
        detail: format!("a {} event that is not one ({e}): {}", raw.name, raw.data),
    })
}

/// Body frames read in one poll before yielding to other tasks.
const FRAMES_PER_POLL: usize = 64;

/// A response body read as a [`Stream`] of events of type `T`: each
/// decoded by the function it was made with, which skips those it does
/// not know (`None`); keep-alive comments are skipped. The stream ends
/// (after an error item if the connection broke) when the body does.
pub struct EventBody<T> {
    body: Incoming,
    parser: Parser,
    ready: VecDeque<Result<T>>,
    decode: fn(&RawEvent) -> Option<Result<T>>,
    done: bool,
}

impl<T> EventBody<T> {
    pub(crate) fn new(body: Incoming, decode: fn(&RawEvent) -> Option<Result<T>>) -> Self {
        EventBody {
            body,
            parser: Parser::default(),
            ready: VecDeque::new(),
            decode,
            done: false,
        }
    }

    /// The next event; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Result<T>>
    where
        T: Unpin,
    {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    fn take(&mut self, chunk: &[u8]) {
        match self.parser.feed(chunk) {
            Ok(events) => self
                .ready
                .extend(events.iter().filter_map(|raw| (self.decode)(raw))),
            Err(TooLong) => {
                self.done = true;
                self.ready.push_back(Err(Error::Unexpected {
                    status: 200,
                    detail: format!("an event longer than {MAX_EVENT_BYTES} bytes"),
                }));
            }
        }
    }
}

impl<T: Unpin> Stream for EventBody<T> {
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        for _ in 0..FRAMES_PER_POLL {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(event));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.done = true,
                Poll::Ready(Some(Err(err))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(Error::Connect(format!(
                        "the event stream broke: {err}"
                    )))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(chunk) = frame.data_ref() {
                        this.take(chunk);
                    }
                }
            }
        }
        // Many frames without an event: let other tasks run, then go on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> RawEvent {
        RawEvent {
            name: name.into(),
            id: None,
            data: data.into(),
        }
    }

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let wire = b": keep-alive\n\nevent: leader\ndata: {\"a\":1}\n\nevent: leader\r\ndata: x\r\ndata: y\r\n\r\ndata: plain\r\r";
        for split in 0..wire.len() {
            let mut parser = Parser::default();
            let mut got = parser.feed(&wire[..split]).unwrap();
            got.extend(parser.feed(&wire[split..]).unwrap());
            assert_eq!(
                got,
                vec![
                    event("leader", "{\"a\":1}"),
                    event("leader", "x\ny"),
                    event("message", "plain"),
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn an_events_id_is_its_own() {
        let mut parser = Parser::default();
        let got = parser
            .feed(b"id: 42\nevent: granted\ndata: {}\n\nevent: reset\ndata: {}\n\n")
            .unwrap();
        assert_eq!(got[0].id.as_deref(), Some("42"));
        assert_eq!(got[0].name, "granted");
        assert_eq!(
            (got[1].name.as_str(), got[1].id.as_deref()),
            ("reset", None)
        );
    }

    #[test]
    fn an_endless_event_is_refused() {
        let mut parser = Parser::default();
        let chunk = vec![b'x'; 64 * 1024];
        let mut refused = false;
        for _ in 0..(MAX_EVENT_BYTES / chunk.len() + 2) {
            if parser.feed(&chunk).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
