//! Bad input gets a clear JSON error with the documented status, never a
//! 500, a panic or a hang.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{AcquireRequest, ErrorCode, LockStatus};
use lockbroker_tests::{Broker, Client, Reply, ADMIN, KEY, OTHER_KEY};

/// POSTs any bytes as the body, as a misbehaving client would.
async fn post_raw(c: &Client, path: &str, body: impl Into<Bytes>) -> Reply {
    c.send(Method::POST, path, &[], body.into(), Duration::ZERO)
        .await
        .unwrap()
}

fn assert_error(reply: &Reply, status: u16, code: ErrorCode) {
    assert_eq!(reply.status, status, "body: {reply:?}");
    let error = reply
        .error()
        .unwrap_or_else(|| panic!("not an error envelope: {reply:?}"));
    assert_eq!(error.code, code, "body: {reply:?}");
    assert_eq!(code.http_status(), status, "the code's own status");
    assert!(!error.message.is_empty());
    assert_eq!(
        reply.headers.get("content-type").unwrap(),
        "application/json"
    );
}

#[tokio::test]
async fn malformed_and_missing_fields_are_400() {
    let broker = Broker::start().await;
    let c = broker.client();
    let cases: &[(&str, &[u8], &str)] = &[
        ("acquire", b"", "body required"),
        ("acquire", b"{", "truncated"),
        ("acquire", b"not json", "not json"),
        ("acquire", b"[]", "array"),
        ("acquire", b"{}", "owner missing"),
        ("acquire", br#"{"owner": 7}"#, "owner not a string"),
        ("acquire", br#"{"owner": ""}"#, "owner empty"),
        (
            "acquire",
            br#"{"owner": "w", "ttl_ms": 99}"#,
            "ttl too small",
        ),
        (
            "acquire",
            br#"{"owner": "w", "ttl_ms": 3600001}"#,
            "ttl over max",
        ),
        (
            "acquire",
            br#"{"owner": "w", "ttl_ms": -5}"#,
            "ttl negative",
        ),
        (
            "acquire",
            br#"{"owner": "w", "ttl_ms": 1.5}"#,
            "ttl fractional",
        ),
        (
            "acquire",
            br#"{"owner": "w", "ttl_ms": "1000"}"#,
            "ttl a string",
        ),
        (
            "acquire",
            br#"{"owner": "w", "ttl_ms": 18446744073709551616}"#,
            "ttl overflows",
        ),
        (
            "acquire",
            br#"{"owner": "w", "wait_ms": 300001}"#,
            "wait over max",
        ),
        (
            "acquire",
            br#"{"owner": "w", "priority": 2147483648}"#,
            "priority overflows",
        ),
        ("release", br#"{"owner": "w"}"#, "token missing"),
        ("release", br#"{"token": 1}"#, "owner missing"),
        (
            "release",
            br#"{"owner": "w", "token": -1}"#,
            "token negative",
        ),
        (
            "renew",
            br#"{"owner": "w", "token": 1, "ttl_ms": 10}"#,
            "ttl too small",
        ),
        ("renew", br#"{"owner": "w"}"#, "token missing"),
    ];
    for (action, body, why) in cases {
        let reply = post_raw(
            &c,
            &format!("/v1/locks/k/{action}"),
            Bytes::from_static(body),
        )
        .await;
        assert_eq!(reply.status, 400, "{action} {why}: {reply:?}");
        assert_error(&reply, 400, ErrorCode::BadRequest);
    }
    let long_owner = format!(r#"{{"owner": "{}"}}"#, "o".repeat(129));
    let reply = post_raw(&c, "/v1/locks/k/acquire", Bytes::from(long_owner)).await;
    assert_error(&reply, 400, ErrorCode::BadRequest);
    assert!(reply.message().contains("owner"));
    // Nothing was granted by any of them.
    assert!(!c.status("k").await.unwrap().ok::<LockStatus>().held);
    broker.stop().await;
}

#[tokio::test]
async fn bodies_over_64_kib_are_413() {
    let broker = Broker::start().await;
    let c = broker.client();
    let big = Bytes::from(vec![b'a'; 1 << 20]);
    let reply = post_raw(&c, "/v1/locks/k/acquire", big).await;
    assert_error(&reply, 413, ErrorCode::TooLarge);
    // Just over the limit, valid JSON: still too large.
    let json = format!(r#"{{"owner": "w", "pad": "{}"}}"#, "x".repeat(64 * 1024));
    let reply = post_raw(&c, "/v1/locks/k/acquire", Bytes::from(json)).await;
    assert_error(&reply, 413, ErrorCode::TooLarge);
    // Under the limit with unknown fields: fine.
    let json = format!(r#"{{"owner": "w", "pad": "{}"}}"#, "x".repeat(60 * 1024));
    let reply = post_raw(&c, "/v1/locks/k/acquire", Bytes::from(json)).await;
    assert_eq!(reply.status, 200);
    broker.stop().await;
}

#[tokio::test]
async fn missing_or_wrong_auth_is_401() {
    let broker = Broker::start().await;
    for bearer in [None, Some("wrong"), Some(""), Some(ADMIN)] {
        let c = broker.client_with(bearer);
        assert_error(
            &c.acquire("k", "w", 1000, 0).await.unwrap(),
            401,
            ErrorCode::Unauthenticated,
        );
        assert_error(
            &c.status("k").await.unwrap(),
            401,
            ErrorCode::Unauthenticated,
        );
        assert_error(
            &c.release("k", "w", 1).await.unwrap(),
            401,
            ErrorCode::Unauthenticated,
        );
    }
    let basic = broker.client_with(None);
    let reply = basic
        .send(
            Method::GET,
            "/v1/locks/k",
            &[("authorization", &format!("Basic {KEY}"))],
            Bytes::new(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_error(&reply, 401, ErrorCode::Unauthenticated);
    // Neither the key nor the admin token appear in the broker's answers.
    assert!(!reply.text().contains(KEY));
    broker.stop().await;
}

#[tokio::test]
async fn admin_api_needs_the_admin_token() {
    let broker = Broker::start().await;
    let tenant = broker.client_with(Some(OTHER_KEY));
    assert_error(
        &tenant.get("/v1/admin/tenants").await.unwrap(),
        403,
        ErrorCode::Forbidden,
    );
    let nobody = broker.client_with(None);
    assert_error(
        &nobody.get("/v1/admin/tenants").await.unwrap(),
        401,
        ErrorCode::Unauthenticated,
    );
    let admin = broker.client_with(Some(ADMIN));
    assert_eq!(admin.get("/v1/admin/tenants").await.unwrap().status, 200);
    broker.stop().await;
}

#[tokio::test]
async fn bad_keys_are_422() {
    let broker = Broker::start().await;
    let c = broker.client();
    let long = "k".repeat(256);
    for path in [
        "/v1/locks//acquire".to_owned(),
        "/v1/locks/%FF%FE/acquire".to_owned(),
        "/v1/locks/a%0Ab/acquire".to_owned(),
        "/v1/locks/a%00b/acquire".to_owned(),
        format!("/v1/locks/{long}/acquire"),
        format!("/v1/locks/{}/acquire", "k".repeat(5000)),
    ] {
        let reply = c.post(&path, &AcquireRequest::new("w")).await.unwrap();
        assert_error(&reply, 422, ErrorCode::InvalidKey);
    }
    // 255 bytes is the limit of the built-in naming.
    let ok = c.acquire(&"k".repeat(255), "w", 1000, 0).await.unwrap();
    assert_eq!(ok.status, 200);
    broker.stop().await;
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let broker = Broker::start().await;
    let c = broker.client();
    assert_error(&c.get("/nope").await.unwrap(), 404, ErrorCode::NotFound);
    assert_error(
        &c.get("/v1/locks/k/explode").await.unwrap(),
        404,
        ErrorCode::NotFound,
    );
    let reply = c
        .send(
            Method::DELETE,
            "/v1/locks/k",
            &[],
            Bytes::new(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_error(&reply, 405, ErrorCode::MethodNotAllowed);
    assert_error(
        &c.get("/v1/locks/k/acquire").await.unwrap(),
        405,
        ErrorCode::MethodNotAllowed,
    );
    broker.stop().await;
}

#[tokio::test]
async fn operations_endpoints() {
    let broker = Broker::start().await;
    let c = broker.client_with(None);
    assert_eq!(c.get("/healthz").await.unwrap().status, 200);
    assert_eq!(c.get("/readyz").await.unwrap().status, 200);
    let spec = c.get("/openapi.json").await.unwrap();
    assert_eq!(spec.status, 200);
    let spec = spec.json();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    assert!(spec["paths"]["/v1/locks/{key}/acquire"].is_object());
    broker.client().acquire("m", "w", 1000, 0).await.unwrap();
    let metrics = c.get("/metrics").await.unwrap();
    let text = metrics.text();
    assert!(
        text.contains("lockbroker_lock_grants_total{tenant=\"default\""),
        "{text}"
    );
    broker.stop().await;
}
