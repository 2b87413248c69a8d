//! Retries against a scripted HTTP server: 503s are retried (after the
//! broker's `retry_after_ms` when it gives one), a refused connection is
//! retried, a 4xx never is, and the tries are bounded; 429 `rate_limited`
//! and `quota_exceeded` are waited out (`retry_after_ms`, else
//! `Retry-After`) within the call's deadline, or returned with their hint;
//! an acquire whose connection broke is not sent again; an error code this
//! client does not know is still read as the broker's refusal.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use lockbroker_client::{
    api::{AcquireRequest, Lease},
    Client, Error, ErrorCode, RetryPolicy,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

const LEASE: &str = r#"{"key":"k","storage_key":"k","owner":"o","token":7,"hold_count":1,"ttl_ms":30000,"expires_at":"2026-11-21T10:00:00.000Z"}"#;

/// A server that answers its n-th request with `answers[n]` (the last one
/// over and over), one connection per request, and notes when each came.
/// Status 0: the connection is closed without an answer.
struct Scripted {
    url: String,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

/// An answer that closes the connection instead.
const CLOSE: (u16, &str) = (0, "");

impl Scripted {
    async fn start(answers: Vec<(u16, &'static str)>) -> Scripted {
        let answers = answers.into_iter().map(|(s, b)| (s, b, "")).collect();
        Scripted::with_headers(answers).await
    }

    /// [`Scripted::start`] with extra header lines (`name: value\r\n`).
    async fn with_headers(answers: Vec<(u16, &'static str, &'static str)>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = arrivals.clone();
        tokio::spawn(async move {
            // Bounded: a test makes a handful of requests.
            for n in 0..64 {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                read_request(&mut socket).await;
                seen.lock().unwrap().push(Instant::now());
                let (status, body, headers) = answers[n.min(answers.len() - 1)];
                if status == 0 {
                    continue;
                }
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        Scripted { url, arrivals }
    }

    fn client(&self) -> Client {
        self.client_with_deadline(Duration::from_secs(10))
    }

    /// [`Scripted::client`] whose calls end by `deadline`.
    fn client_with_deadline(&self, deadline: Duration) -> Client {
        Client::builder(&self.url)
            .api_key("k")
            .retry(RetryPolicy {
                attempts: 4,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_secs(1),
            })
            .slack(deadline)
            .build()
            .unwrap()
    }

    /// One acquire of the lock `k` by `o`, through [`Scripted::client`].
    async fn acquire(&self) -> lockbroker_client::Result<Lease> {
        let request = AcquireRequest::new("o");
        self.client().locks().acquire("k", &request).await
    }

    fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().clone()
    }
}

/// Reads the head and the `content-length` body of one request.
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.len() < 1 << 20 {
        let Ok(n) = socket.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return;
            }
        }
    }
}

#[tokio::test]
async fn unavailable_is_retried_after_the_brokers_hint() {
    let server = Scripted::start(vec![
        (
            503,
            r#"{"error":{"code":"unavailable","message":"db down","retry_after_ms":150}}"#,
        ),
        (
            503,
            r#"{"error":{"code":"unavailable","message":"db down"}}"#,
        ),
        (200, LEASE),
    ])
    .await;
    let lease = server.acquire().await.unwrap();
    assert_eq!(lease.token, 7);
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 3, "two 503s, then the grant");
    assert!(
        arrivals[1] - arrivals[0] >= Duration::from_millis(150),
        "the hint was honoured: {:?}",
        arrivals[1] - arrivals[0]
    );
}

#[tokio::test]
async fn retries_are_bounded() {
    let server = Scripted::start(vec![(
        503,
        r#"{"error":{"code":"unavailable","message":"db down"}}"#,
    )])
    .await;
    let err = server.acquire().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unavailable), "{err}");
    assert_eq!(server.arrivals().len(), 4, "the policy's 4 tries");
}

#[tokio::test]
async fn a_refusal_is_never_retried() {
    let server = Scripted::start(vec![(
        409,
        r#"{"error":{"code":"lock_held","message":"held","retry_after_ms":5}}"#,
    )])
    .await;
    let err = server.acquire().await.unwrap_err();
    let api = err.api().expect("the broker's refusal");
    assert_eq!(api.code, ErrorCode::LockHeld);
    assert_eq!(api.retry_after, Some(Duration::from_millis(5)));
    assert_eq!(server.arrivals().len(), 1);
}

/// A code added by a newer broker is still the broker's refusal, with its
/// status and message, not an unreadable answer.
#[tokio::test]
async fn an_unknown_error_code_is_still_a_refusal() {
    let server = Scripted::start(vec![(
        429,
        r#"{"error":{"code":"from_a_newer_broker","message":"over the tenant's quota","retry_after_ms":40}}"#,
    )])
    .await;
    let err = server.acquire().await.unwrap_err();
    let api = err
        .api()
        .unwrap_or_else(|| panic!("not read as a refusal: {err}"));
    assert_eq!(api.status, 429);
    assert_eq!(api.code, ErrorCode::Unknown);
    assert_eq!(api.message, "over the tenant's quota");
    assert_eq!(api.retry_after, Some(Duration::from_millis(40)));
    assert_eq!(err.code(), Some(ErrorCode::Unknown));
    assert_eq!(server.arrivals().len(), 1, "a 4xx is not retried");
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported_unreachable() {
    // A port nobody listens on: bound, then closed.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = Client::builder(&format!("http://127.0.0.1:{port}"))
        .retry(RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_millis(40),
            max_delay: Duration::from_secs(1),
        })
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.locks().status("k").await.unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    // Two waits between three tries: at least 20 + 40 ms with jitter.
    assert!(started.elapsed() >= Duration::from_millis(60), "it retried");
}

#[tokio::test]
async fn rate_limited_is_waited_out_even_for_an_acquire() {
    let server = Scripted::start(vec![
        (
            429,
            r#"{"error":{"code":"rate_limited","message":"slow down","retry_after_ms":300}}"#,
        ),
        (200, LEASE),
    ])
    .await;
    // Nothing was done by the 429: the acquire may be sent again.
    let lease = server.acquire().await.unwrap();
    assert_eq!(lease.token, 7);
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(
        arrivals[1] - arrivals[0] >= Duration::from_millis(300),
        "retried after {:?}",
        arrivals[1] - arrivals[0]
    );
}

#[tokio::test]
async fn without_retry_after_ms_the_retry_after_header_is_honoured() {
    let server = Scripted::with_headers(vec![
        (
            429,
            r#"{"error":{"code":"quota_exceeded","message":"max_held"}}"#,
            "retry-after: 1\r\n",
        ),
        (200, LEASE, ""),
    ])
    .await;
    server.acquire().await.unwrap();
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(
        arrivals[1] - arrivals[0] >= Duration::from_secs(1),
        "retried after {:?}",
        arrivals[1] - arrivals[0]
    );
}

#[tokio::test]
async fn a_hint_past_the_deadline_fails_at_once_with_the_hint() {
    let server = Scripted::with_headers(vec![(
        429,
        r#"{"error":{"code":"rate_limited","message":"slow down","retry_after_ms":4500}}"#,
        "retry-after: 5\r\n",
    )])
    .await;
    let client = server.client_with_deadline(Duration::from_millis(300));
    let started = Instant::now();
    let err = client.locks().status("k").await.unwrap_err();
    assert!(err.is_throttled(), "{err}");
    assert_eq!(err.code(), Some(ErrorCode::RateLimited));
    // The body's hint, not the header's rounded seconds.
    assert_eq!(err.retry_after(), Some(Duration::from_millis(4500)));
    assert!(started.elapsed() < Duration::from_millis(300), "not waited");
    assert_eq!(server.arrivals().len(), 1);
}

#[tokio::test]
async fn other_429s_are_not_retried() {
    let server = Scripted::start(vec![(
        429,
        r#"{"error":{"code":"too_many_waiters","message":"queue full","retry_after_ms":10}}"#,
    )])
    .await;
    let err = server.acquire().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TooManyWaiters));
    assert!(!err.is_throttled());
    assert_eq!(server.arrivals().len(), 1);
}

#[tokio::test]
async fn an_acquire_cut_off_is_not_sent_again_a_read_is() {
    let server = Scripted::start(vec![CLOSE]).await;
    let err = server.acquire().await.unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown(_)), "{err}");
    assert_eq!(server.arrivals().len(), 1, "the acquire once");
    let err = server.client().locks().status("k").await.unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err}");
    assert_eq!(
        server.arrivals().len(),
        1 + 4,
        "a read: the policy's 4 tries"
    );
}

#[tokio::test]
async fn a_throttled_renewal_is_tried_again_not_lost() {
    const SHORT: &str = r#"{"key":"k","storage_key":"k","owner":"o","token":7,"hold_count":1,"ttl_ms":600,"expires_at":"2026-11-21T10:00:00.000Z"}"#;
    let server = Scripted::start(vec![
        (200, SHORT),
        (
            429,
            r#"{"error":{"code":"rate_limited","message":"slow down","retry_after_ms":60}}"#,
        ),
        (200, SHORT),
    ])
    .await;
    let guard = server
        .client()
        .lock("k")
        .try_acquire()
        .await
        .unwrap()
        .expect("granted");
    // The acquire, the throttled renewal, and two renewals after it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.arrivals().len() < 4 {
        assert!(Instant::now() < deadline, "{:?}", server.arrivals());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let arrivals = server.arrivals();
    assert!(
        arrivals[2] - arrivals[1] >= Duration::from_millis(60),
        "renewed again after the hint: {:?}",
        arrivals[2] - arrivals[1]
    );
    assert!(!guard.is_lost(), "a 429 is not the lease's end");
    drop(guard);
}
