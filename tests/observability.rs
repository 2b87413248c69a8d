//! What an operator sees: `/metrics` (histograms and counters that move
//! with traffic, the optional bearer token), request ids, the one log line
//! per request (JSON, without secrets), and JSON errors from the HTTP layer
//! itself (a malformed request line, a URI or headers too large), checked
//! over raw TCP.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{ErrorBody, ErrorCode, Lease};
use lockbroker_tests::{
    config, eventually, eventually_some, fresh_db_name, Broker, BrokerProcess, Client, Reply,
    ADMIN, KEY,
};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// A sample's labels: name and value.
type Labels = Vec<(String, String)>;

/// One scrape, parsed: every sample with its labels.
struct Scrape(Vec<(String, Labels, f64)>);

impl Scrape {
    /// Parses the text exposition format (enough of it for our output:
    /// label values without commas or braces).
    fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (series, value) = line.rsplit_once(' ').expect("a sample line has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let labels = rest
                        .strip_suffix('}')
                        .expect("labels end with }")
                        .split(',')
                        .filter(|l| !l.is_empty())
                        .map(|l| {
                            let (k, v) = l.split_once('=').expect("label=value");
                            (k.to_owned(), v.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, Vec::new()),
            };
            samples.push((name.to_owned(), labels, value.parse().expect("a number")));
        }
        Scrape(samples)
    }

    /// The sample `name` whose labels include all of `labels`; 0 if none.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching: Vec<f64> = self
            .0
            .iter()
            .filter(|(n, have, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            })
            .map(|(_, _, v)| *v)
            .collect();
        assert!(
            matching.len() <= 1,
            "{name} {labels:?} matches {} series",
            matching.len()
        );
        matching.first().copied().unwrap_or(0.0)
    }
}

async fn scrape(c: &Client) -> Scrape {
    let reply = c.get("/metrics").await.unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text; version=1.0.0"),
        "{:?}",
        reply.headers
    );
    let text = reply.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    Scrape::parse(&text)
}

#[tokio::test]
async fn metrics_move_with_traffic_by_route_and_status() {
    let broker = Broker::start().await;
    let c = broker.client();
    let ops = broker.client_with(None);
    let before = scrape(&ops).await;
    let latency = "lockbroker_http_request_duration_seconds";
    let acquired = [("route", "locks"), ("action", "acquire"), ("status", "200")];
    let refused = [("route", "locks"), ("action", "acquire"), ("status", "409")];
    assert_eq!(before.value(&format!("{latency}_count"), &acquired), 0.0);

    let held = c.acquire("m", "w1", 30_000, 0).await.unwrap();
    assert_eq!(held.status, 200, "{held:?}");
    let busy = c.acquire("m", "w2", 30_000, 0).await.unwrap();
    assert_eq!(busy.code(), Some(ErrorCode::LockHeld));
    let token = held.ok::<Lease>().token;
    assert_eq!(c.release("m", "w1", token).await.unwrap().status, 200);
    assert_eq!(
        c.release("m", "w1", token).await.unwrap().code(),
        Some(ErrorCode::LeaseLost)
    );

    let after = scrape(&ops).await;
    for (labels, n) in [(&acquired, 1.0), (&refused, 1.0)] {
        assert_eq!(
            after.value(&format!("{latency}_count"), labels),
            n,
            "{labels:?}"
        );
        let mut inf = labels.to_vec();
        inf.push(("le", "+Inf"));
        assert_eq!(
            after.value(&format!("{latency}_bucket"), &inf),
            n,
            "{labels:?}"
        );
        assert!(after.value(&format!("{latency}_sum"), labels) > 0.0);
    }
    // Buckets are cumulative and never above the count.
    let mut small = acquired.to_vec();
    small.push(("le", "0.001"));
    assert!(after.value(&format!("{latency}_bucket"), &small) <= 1.0);
    assert_eq!(
        after.value(
            "lockbroker_http_requests_total",
            &[("route", "locks"), ("status", "409")]
        ),
        2.0,
        "one lock_held and one lease_lost"
    );
    let by = |name: &str, result: &str| {
        after.value(
            name,
            &[
                ("tenant", "default"),
                ("resource", "locks"),
                ("result", result),
            ],
        )
    };
    assert_eq!(by("lockbroker_acquires_total", "ok"), 1.0);
    assert_eq!(by("lockbroker_acquires_total", "lock_held"), 1.0);
    assert_eq!(by("lockbroker_releases_total", "ok"), 1.0);
    assert_eq!(by("lockbroker_releases_total", "lease_lost"), 1.0);
    assert_eq!(
        after.value(
            "lockbroker_grant_latency_seconds_count",
            &[("tenant", "default"), ("kind", "lock")]
        ),
        1.0
    );
    assert_eq!(
        after.value(
            "lockbroker_lock_grants_total",
            &[("tenant", "default"), ("via", "direct")]
        ),
        1.0
    );
    let db_calls = "lockbroker_db_call_duration_seconds_count";
    assert!(after.value(db_calls, &[]) > before.value(db_calls, &[]));
    // The pool is read at scrape time: the connections used go back idle
    // (background tasks may hold one at a given instant).
    eventually(
        "an idle pooled connection shows",
        Duration::from_secs(5),
        || async {
            scrape(&ops)
                .await
                .value("lockbroker_db_pool_connections", &[("state", "idle")])
                >= 1.0
        },
    )
    .await;
    assert_eq!(after.value("lockbroker_waiters", &[]), 0.0);
    broker.stop().await;
}

#[tokio::test]
async fn a_handoff_is_timed() {
    let broker = Broker::start().await;
    let c = broker.client();
    let held = c.acquire("h", "a", 30_000, 0).await.unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("h", "b", 30_000, 10_000).await.unwrap() })
    };
    let ops = broker.client_with(None);
    eventually("b waits on this broker", Duration::from_secs(5), || async {
        scrape(&ops).await.value("lockbroker_waiters", &[]) == 1.0
    })
    .await;
    let token = held.ok::<Lease>().token;
    assert_eq!(c.release("h", "a", token).await.unwrap().status, 200);
    assert_eq!(waiter.await.unwrap().status, 200);
    let after = scrape(&ops).await;
    assert_eq!(
        after.value(
            "lockbroker_handoff_latency_seconds_count",
            &[("tenant", "default")]
        ),
        1.0
    );
    assert_eq!(
        after.value(
            "lockbroker_lock_grants_total",
            &[("tenant", "default"), ("via", "handoff")]
        ),
        1.0
    );
    assert_eq!(after.value("lockbroker_waiters", &[]), 0.0);
    broker.stop().await;
}

#[tokio::test]
async fn held_leases_are_counted_by_tenant_and_kind() {
    let broker = Broker::start().await;
    let c = broker.client();
    for key in ["held-a", "held-b"] {
        assert_eq!(c.acquire(key, "a", 60_000, 0).await.unwrap().status, 200);
    }
    let permit = c
        .post(
            "/v1/semaphores/held-pool/acquire",
            &serde_json::json!({"owner": "a", "permits": 3, "ttl_ms": 60_000}),
        )
        .await
        .unwrap();
    assert_eq!(permit.status, 200, "{permit:?}");
    for owner in ["r1", "r2"] {
        let read = c
            .post(
                "/v1/rwlocks/held-rw/acquire",
                &serde_json::json!({"owner": owner, "mode": "read", "ttl_ms": 60_000}),
            )
            .await
            .unwrap();
        assert_eq!(read.status, 200, "{read:?}");
    }
    let leader = c
        .post(
            "/v1/elections/held-e/campaign",
            &serde_json::json!({"candidate": "n1", "ttl_ms": 60_000}),
        )
        .await
        .unwrap();
    assert_eq!(leader.status, 200, "{leader:?}");
    // Another tenant's lease is its own series.
    let other = broker.client_with(Some(lockbroker_tests::OTHER_KEY));
    assert_eq!(
        other
            .acquire("held-a", "o", 60_000, 0)
            .await
            .unwrap()
            .status,
        200
    );
    // The reaper counts every 15 s (and at its first pass, before these).
    let ops = broker.client_with(None);
    let want = [
        ("lock", 2.0),
        ("semaphore", 1.0),
        ("rwlock", 2.0),
        ("election", 1.0),
    ];
    eventually(
        "the held leases are counted",
        Duration::from_secs(20),
        || async {
            let now = scrape(&ops).await;
            want.iter().all(|(kind, n)| {
                now.value(
                    "lockbroker_held_leases",
                    &[("tenant", "default"), ("kind", kind)],
                ) == *n
            }) && now.value(
                "lockbroker_held_leases",
                &[("tenant", "other"), ("kind", "lock")],
            ) == 1.0
        },
    )
    .await;
    broker.stop().await;
}

#[tokio::test]
async fn the_metrics_token_is_required_when_set() {
    let db = fresh_db_name();
    let mut config = config(&db);
    config.metrics_token = Some("scrape-secret".try_into().unwrap());
    let broker = Broker::start_with(db, config).await;
    for bearer in [None, Some("wrong"), Some(KEY), Some(ADMIN)] {
        let reply = broker.client_with(bearer).get("/metrics").await.unwrap();
        assert_eq!(reply.status, 401, "{bearer:?}: {reply:?}");
        assert_eq!(reply.code(), Some(ErrorCode::Unauthenticated), "{reply:?}");
        assert_eq!(reply.headers["content-type"], "application/json");
    }
    scrape(&broker.client_with(Some("scrape-secret"))).await;
    // Health and readiness stay open.
    assert_eq!(
        broker
            .client_with(None)
            .get("/healthz")
            .await
            .unwrap()
            .status,
        200
    );
    broker.stop().await;
}

#[tokio::test]
async fn request_ids_are_returned_and_sane_ones_echoed() {
    let broker = Broker::start().await;
    let c = broker.client();
    let id_of = |reply: &Reply| reply.headers["x-request-id"].to_str().unwrap().to_owned();
    let with = |id: &'static str| {
        let c = c.clone();
        async move {
            c.send(
                Method::GET,
                "/v1/locks/r",
                &[("x-request-id", id)],
                Bytes::new(),
                Duration::ZERO,
            )
            .await
            .unwrap()
        }
    };
    let a = id_of(&c.get("/healthz").await.unwrap());
    let b = id_of(&c.get("/healthz").await.unwrap());
    assert_eq!(a.len(), 32, "{a}");
    assert!(a.bytes().all(|x| x.is_ascii_hexdigit()), "{a}");
    assert_ne!(a, b);
    assert_eq!(id_of(&with("trace-42.a:b").await), "trace-42.a:b");
    let replaced = id_of(&with("no spaces allowed").await);
    assert_eq!(replaced.len(), 32, "{replaced}");
    // Errors carry it too.
    let err = broker.client_with(None).get("/v1/locks/r").await.unwrap();
    assert_eq!(err.status, 401);
    assert_eq!(id_of(&err).len(), 32);
    broker.stop().await;
}

/// Sends `request` as raw bytes and reads the answer until the server
/// closes: status, lower-cased head and body.
async fn raw(addr: &str, request: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    let status = head[9..12].parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn errors_of_the_http_layer_are_json() {
    let broker = Broker::start().await;
    let addr = broker.url().trim_start_matches("http://").to_owned();
    let long_uri = |n: usize| format!("/v1/locks/{}", "a".repeat(n));
    let big_header = format!("x-big: {}\r\n", "v".repeat(20 * 1024));
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let cases: Vec<(&str, String, u16, ErrorCode)> = vec![
        (
            "a malformed request line",
            "THIS IS NOT HTTP\r\n\r\n".into(),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "a bad header line",
            "GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n".into(),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "a URI over our 8 KiB",
            format!(
                "GET {} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
                long_uri(10_000)
            ),
            414,
            ErrorCode::UriTooLong,
        ),
        (
            "a URI over hyper's 64 KiB",
            format!(
                "GET {} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
                long_uri(70_000)
            ),
            414,
            ErrorCode::UriTooLong,
        ),
        (
            "headers over our 16 KiB",
            format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{big_header}connection: close\r\n\r\n"),
            431,
            ErrorCode::HeadersTooLarge,
        ),
        (
            "more headers than hyper takes",
            format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{many_headers}connection: close\r\n\r\n"),
            431,
            ErrorCode::HeadersTooLarge,
        ),
    ];
    for (what, request, status, code) in cases {
        let (got, head, body) = raw(&addr, request.as_bytes()).await;
        assert_eq!(got, status, "{what}: {head}");
        assert!(
            head.contains("content-type: application/json"),
            "{what}: {head}"
        );
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{what}: {head}"
        );
        assert!(head.contains("x-request-id: "), "{what}: {head}");
        let error = serde_json::from_str::<ErrorBody>(&body)
            .unwrap_or_else(|e| panic!("{what}: {e}: {body:?}"))
            .error;
        assert_eq!(error.code, code, "{what}: {body}");
        assert!(!error.message.is_empty(), "{what}");
    }
    // Counted: hyper's refusals under route "unparsed", as our own are.
    let after = scrape(&broker.client_with(None)).await;
    let unparsed = |status| {
        after.value(
            "lockbroker_http_requests_total",
            &[("route", "unparsed"), ("status", status)],
        )
    };
    assert_eq!(
        (unparsed("400"), unparsed("414"), unparsed("431")),
        (2.0, 2.0, 2.0)
    );
    // And the broker still serves.
    assert_eq!(broker.client().status("fine").await.unwrap().status, 200);
    broker.stop().await;
}

#[tokio::test]
async fn each_request_is_one_json_log_line_without_secrets() {
    let db = fresh_db_name();
    let (broker, log) = BrokerProcess::start_logged(
        &db,
        "metrics_token = \"metrics-secret\"",
        &["--log-format", "json"],
    )
    .await;
    let c = broker.client();
    let reply = c
        .send(
            Method::POST,
            "/v1/locks/log%2Fme/acquire",
            &[("x-request-id", "find-me-7")],
            Bytes::from_static(br#"{"owner": "w", "ttl_ms": 30000}"#),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    let unauthorized = broker
        .client()
        .with_bearer(Some("not-a-key"))
        .get("/v1/locks/x")
        .await
        .unwrap();
    assert_eq!(unauthorized.status, 401);
    let line: Value = eventually_some("the request's log line", Duration::from_secs(10), || {
        let lines = log.lines();
        async move {
            lines
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["request_id"] == "find-me-7")
        }
    })
    .await;
    assert_eq!(line["message"], "request", "{line}");
    assert_eq!(line["target"], "lockbroker::access", "{line}");
    assert_eq!(line["method"], "POST", "{line}");
    assert_eq!(line["route"], "locks", "{line}");
    assert_eq!(line["action"], "acquire", "{line}");
    assert_eq!(line["tenant"], "default", "{line}");
    assert_eq!(line["key"], "log%2Fme", "{line}");
    assert_eq!(line["status"], 200, "{line}");
    assert_eq!(line["result"], "ok", "{line}");
    assert!(line["latency_ms"].as_f64().unwrap() > 0.0, "{line}");
    let unauthorized_id = unauthorized.headers["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let refused: Value = eventually_some("the 401's log line", Duration::from_secs(10), || {
        let lines = log.lines();
        let id = unauthorized_id.clone();
        async move {
            lines
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["request_id"] == id.as_str())
        }
    })
    .await;
    assert_eq!(
        (refused["status"].as_u64(), refused["result"].as_str()),
        (Some(401), Some("unauthenticated"))
    );
    broker.stop().await;
    let lines = log.lines();
    assert!(lines.len() >= 3, "{lines:#?}");
    for line in &lines {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "not JSON: {line}"
        );
        for secret in [KEY, ADMIN, "metrics-secret", "not-a-key"] {
            assert!(!line.contains(secret), "{secret} logged: {line}");
        }
    }
    lockbroker_tests::drop_db(&db).await;
}
