//! JSON bodies for the errors hyper answers itself.
//!
//! A request hyper cannot parse (a malformed request line or header, a
//! request target over 64 KiB, more than 100 headers, a head larger than
//! its read buffer) never reaches the router: hyper's HTTP/1 server writes
//! a bare `400`, `414` or `431` with an empty body and closes the
//! connection, and offers no hook to change that answer (hyperium/hyper
//! issue 3844; the pull request adding one, 3911, is not merged). API.md
//! wants JSON errors from the HTTP layer too, so this socket wrapper
//! recognises exactly those answers as hyper writes them and sends the
//! API's JSON error in their place:
//!
//! - a write that is a whole response head and nothing else, whose status
//!   is 400, 414 or 431 and which says `content-length: 0` (the router
//!   never answers these statuses without a JSON body, so none of its
//!   responses matches);
//! - hyper writes it in one piece: the connection writes flattened
//!   (`writev(false)`, and this wrapper is not vectored), so a head is one
//!   buffer.
//!
//! The replacement keeps hyper's status line and `date`, adds the JSON
//! body, `content-type`, `connection: close` and an `x-request-id`, and is
//! recorded (status and id) for the caller to log and count.

use std::{
    io,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{ready, Context, Poll},
};

use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{request_id::RequestId, ApiError};

/// What the wrapper answered in hyper's place, if anything.
pub type Rewritten = Arc<Mutex<Option<(StatusCode, RequestId)>>>;

/// A connection's socket whose bare parse-error answers become JSON.
pub struct JsonParseErrors<T> {
    inner: T,
    /// A replacement answer not yet fully written, and how much of it is.
    pending: Vec<u8>,
    written: usize,
    rewritten: Rewritten,
}

impl<T> JsonParseErrors<T> {
    pub fn new(inner: T) -> (JsonParseErrors<T>, Rewritten) {
        let rewritten = Rewritten::default();
        let io = JsonParseErrors {
            inner,
            pending: Vec::new(),
            written: 0,
            rewritten: rewritten.clone(),
        };
        (io, rewritten)
    }
}

impl<T: AsyncWrite + Unpin> JsonParseErrors<T> {
    /// Writes what is left of a replacement answer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        if let Some((status, id, answer)) = rewrite(buf) {
            *this.rewritten.lock().expect("rewritten") = Some((status, id));
            this.pending = answer;
            // Taken whole; what the socket does not take now is written
            // by the next write, flush or shutdown.
            if let Poll::Ready(Err(err)) = this.poll_drain(cx) {
                return Poll::Ready(Err(err));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The JSON answer in place of `buf`, if `buf` is one of hyper's own
/// parse-error answers.
fn rewrite(buf: &[u8]) -> Option<(StatusCode, RequestId, Vec<u8>)> {
    let head = buf.strip_suffix(b"\r\n\r\n")?;
    if !(head.starts_with(b"HTTP/1.1 ") || head.starts_with(b"HTTP/1.0 ")) {
        return None;
    }
    let head = std::str::from_utf8(head).ok()?;
    if head.contains("\r\n\r\n") {
        return None; // a body follows the head
    }
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let status = StatusCode::from_bytes(status_line.get(9..12)?.as_bytes()).ok()?;
    let error = ApiError::from_parse_status(status)?;
    let mut empty = false;
    let mut kept = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-length") {
            empty = value.trim() == "0";
        } else if !name.eq_ignore_ascii_case("connection") {
            kept.push(line);
        }
    }
    if !empty {
        return None;
    }
    let id = RequestId::fresh();
    let body = serde_json::to_string(&error.body()).expect("an error body serializes");
    let mut answer = format!("{status_line}\r\n");
    for line in kept {
        answer.push_str(line);
        answer.push_str("\r\n");
    }
    answer.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{}: {}\r\n\r\n{body}",
        body.len(),
        super::request_id::HEADER,
        id.as_str(),
    ));
    Some((status, id, answer.into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_bare_answers_become_json() {
        for (status, code) in [
            (400, "bad_request"),
            (414, "uri_too_long"),
            (431, "headers_too_large"),
        ] {
            let bare = format!(
                "HTTP/1.1 {status} Whatever\r\ncontent-length: 0\r\ndate: Sun, 22 Nov 2026 10:00:00 GMT\r\n\r\n"
            );
            let (got, id, answer) = rewrite(bare.as_bytes()).expect("rewritten");
            assert_eq!(got.as_u16(), status);
            let answer = String::from_utf8(answer).unwrap();
            let (head, body) = answer.split_once("\r\n\r\n").unwrap();
            assert!(
                head.starts_with(&format!("HTTP/1.1 {status} Whatever\r\n")),
                "{head}"
            );
            assert!(
                head.contains("date: Sun, 22 Nov 2026 10:00:00 GMT"),
                "{head}"
            );
            assert!(head.contains("content-type: application/json"), "{head}");
            assert!(
                head.contains(&format!("content-length: {}\r\n", body.len())),
                "{head}"
            );
            assert!(
                head.contains(&format!("x-request-id: {}", id.as_str())),
                "{head}"
            );
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(json["error"]["code"], code, "{body}");
        }
    }

    #[test]
    fn other_writes_pass_untouched() {
        let keep: [&[u8]; 5] = [
            // The router's own 400, with its JSON body.
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            // A head whose body comes in a later write.
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 57\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"{\"error\": {\"code\": \"x\"}}",
        ];
        for buf in keep {
            assert!(rewrite(buf).is_none(), "{}", String::from_utf8_lossy(buf));
        }
    }
}
