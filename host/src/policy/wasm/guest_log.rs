//! Where a WASI guest's stdout and stderr go: the broker's log, one event
//! per line, tagged with the tenant and the stream.
//!
//! A guest is untrusted, so its output is bounded three ways: a line is cut
//! at [`MAX_LINE`] bytes, a partial line is held up to that size only, and
//! lines are rate-limited per policy (a token bucket of [`BURST`] lines,
//! refilled at [`LINES_PER_SECOND`]); lines over the rate are dropped and
//! counted, and the count is logged with the next line that gets through.
//! Writing never blocks and never fails: a guest that prints too much loses
//! lines, not its call.

use std::{
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::{
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamResult},
};

/// Longest line logged, in bytes; the rest is cut.
pub const MAX_LINE: usize = 1024;
/// Lines a policy may log at once after a quiet spell.
pub const BURST: f64 = 20.0;
/// Lines a policy may log per second, sustained.
pub const LINES_PER_SECOND: f64 = 10.0;
/// What one `write` may hand over: anything a 32-bit guest can hold. A
/// line is cut at [`MAX_LINE`] anyway, so a large write costs the copy out
/// of guest memory (bounded by the policy's memory limit) and no more.
/// A smaller permit lost output: CPython in a componentize-py component
/// writes `sys.stdout` to a raw `FileIO`, whose short writes its text
/// layer ignores, so a 1 MB `print` lost all but the first 64 KiB, its
/// newline included.
const WRITE_BUDGET: usize = u32::MAX as usize;

/// The log target of guest output, for filters (`LOCKBROKER_LOG`).
pub const TARGET: &str = "lockbroker::policy::guest";

/// The line budget of one policy, shared by all its instances.
#[derive(Debug)]
pub struct RateLimit {
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
    dropped: u64,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            state: Mutex::new(Bucket {
                tokens: BURST,
                refilled: Instant::now(),
                dropped: 0,
            }),
        }
    }
}

impl RateLimit {
    /// `Some(lines dropped since the last one let through)` if a line may
    /// be logged now; `None` (and the line counted as dropped) if not.
    fn admit(&self) -> Option<u64> {
        let mut b = self.state.lock().expect("guest log bucket");
        let now = Instant::now();
        let refill = now.duration_since(b.refilled).as_secs_f64() * LINES_PER_SECOND;
        b.tokens = (b.tokens + refill).min(BURST);
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Some(std::mem::take(&mut b.dropped))
        } else {
            b.dropped += 1;
            None
        }
    }
}

/// One stream (stdout or stderr) of one store: the partial line it holds,
/// and the policy's shared rate limit. Cheap to clone: every `get-stdout`
/// of the guest gets a clone writing into the same line.
#[derive(Clone)]
pub struct GuestLog {
    tenant: Arc<str>,
    stream: &'static str,
    limit: Arc<RateLimit>,
    partial: Arc<Mutex<Partial>>,
}

/// The line being assembled. A last line the guest never ends with a
/// newline is dropped with its store (a fragment is rarely worth a line).
#[derive(Default)]
struct Partial {
    line: Vec<u8>,
    /// Bytes of the current line cut off beyond [`MAX_LINE`].
    cut: usize,
}

impl GuestLog {
    pub fn new(tenant: Arc<str>, stream: &'static str, limit: Arc<RateLimit>) -> GuestLog {
        GuestLog {
            tenant,
            stream,
            limit,
            partial: Arc::default(),
        }
    }

    /// Appends guest bytes, logging every line they complete.
    fn push(&self, mut bytes: &[u8]) {
        let mut partial = self.partial.lock().expect("guest log line");
        while !bytes.is_empty() {
            let (chunk, rest, ends_line) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            let room = MAX_LINE - partial.line.len();
            let kept = chunk.len().min(room);
            partial.line.extend_from_slice(&chunk[..kept]);
            partial.cut += chunk.len() - kept;
            if ends_line {
                self.emit(&mut partial);
            }
            bytes = rest;
        }
    }

    fn emit(&self, partial: &mut Partial) {
        let line = std::mem::take(&mut partial.line);
        let cut = std::mem::take(&mut partial.cut);
        let Some(dropped) = self.limit.admit() else {
            return;
        };
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\r');
        tracing::info!(
            target: TARGET,
            tenant = %self.tenant,
            stream = self.stream,
            cut_bytes = cut,
            dropped_lines = dropped,
            "{text}"
        );
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestLog {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_BUDGET)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestLog {
    /// Always ready: writing never waits.
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestLog {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_and_rate_limited() {
        let limit = Arc::new(RateLimit::default());
        let log = GuestLog::new("t".into(), "stdout", limit.clone());
        // Split across writes, and longer than a line may be.
        log.push(b"abc");
        log.push(&vec![b'x'; 2 * MAX_LINE]);
        {
            let partial = log.partial.lock().unwrap();
            assert_eq!(partial.line.len(), MAX_LINE);
            assert_eq!(partial.cut, 2 * MAX_LINE + 3 - MAX_LINE);
        }
        log.push(b"\nnext");
        {
            let partial = log.partial.lock().unwrap();
            assert_eq!(partial.line, b"next");
            assert_eq!(partial.cut, 0);
        }
        // One line used a token: BURST - 1 more pass, then lines drop.
        for _ in 0..(BURST as usize - 1) {
            assert_eq!(limit.admit(), Some(0));
        }
        assert_eq!(limit.admit(), None);
        assert_eq!(limit.admit(), None);
        limit.state.lock().unwrap().tokens = 1.0;
        assert_eq!(limit.admit(), Some(2), "the dropped lines are reported");
    }

    /// A guest may hand over a 1 MB line in one write (CPython does, and
    /// loses what a short permit leaves out); only its first bytes are kept.
    #[test]
    fn a_large_write_is_taken_whole() {
        let mut log = GuestLog::new("t".into(), "stdout", Arc::default());
        let line = [vec![b'p'; 1_000_000], b"\n".to_vec()].concat();
        assert!(log.check_write().unwrap() >= line.len());
        log.write(Bytes::from(line)).unwrap();
        let partial = log.partial.lock().unwrap();
        assert!(
            partial.line.is_empty() && partial.cut == 0,
            "the line was ended"
        );
    }
}
