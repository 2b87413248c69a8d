//! The OpenAPI document against a real broker: every documented request
//! example is sent, and every answer (status, JSON body, SSE event) must be
//! one the document describes for that operation and validate against its
//! schema. Then the fuzzer's drift cases: a body the schema accepts must be
//! accepted, and one it refuses must get 400.

use std::{collections::HashMap, time::Duration};

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::Lease;
use lockbroker_tests::{Broker, Client, Reply, ADMIN, KEY};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The served document, and validators for its component schemas.
struct Spec {
    doc: Value,
}

impl Spec {
    async fn fetch(c: &Client) -> Spec {
        let reply = c.get("/openapi.json").await.unwrap();
        assert_eq!(reply.status, 200);
        let checked_in: Value =
            serde_json::from_str(include_str!("../host/src/openapi.json")).unwrap();
        let doc = reply.json();
        assert_eq!(
            doc, checked_in,
            "the served document differs from host/src/openapi.json: regenerate it with \
             `UPDATE_OPENAPI=1 cargo test -p lockbroker --lib openapi`"
        );
        assert_eq!(doc["openapi"], "3.1.0");
        Spec { doc }
    }

    /// Validates `instance` against `schema` (often a `$ref` into the
    /// document's components), as JSON Schema 2020-12, which OpenAPI 3.1
    /// schemas are.
    fn check(&self, schema: &Value, instance: &Value) -> Result<(), String> {
        let root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.doc["components"],
            "allOf": [schema],
        });
        let validator = jsonschema::validator_for(&root).map_err(|e| e.to_string())?;
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// The operation at `path` (as in the document, `{key}` and all) and
    /// `method`.
    fn operation(&self, path: &str, method: &str) -> &Value {
        let op = &self.doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        op
    }

    /// A response object, following a `$ref` into `components/responses`.
    fn response<'a>(&'a self, op: &'a Value, status: u16) -> Option<&'a Value> {
        let response = op["responses"].get(status.to_string())?;
        match response["$ref"].as_str() {
            Some(r) => {
                let name = r.rsplit('/').next().unwrap();
                Some(&self.doc["components"]["responses"][name])
            }
            None => Some(response),
        }
    }

    /// Asserts that `reply` is a documented answer of `op` and that its
    /// body validates against the documented schema.
    fn check_reply(&self, what: &str, op: &Value, reply: &Reply) {
        let response = self.response(op, reply.status).unwrap_or_else(|| {
            panic!(
                "{what}: status {} is not documented: {reply:?}",
                reply.status
            )
        });
        let content = &response["content"];
        let media = content
            .as_object()
            .and_then(|c| c.keys().next().cloned())
            .unwrap_or_default();
        let served = reply
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        assert!(
            served.starts_with(&media),
            "{what}: content type {served:?}, documented {media:?}"
        );
        if media == "application/json" {
            let schema = &content[&media]["schema"];
            if let Err(e) = self.check(schema, &reply.json()) {
                panic!("{what}: {reply:?} does not validate: {e}");
            }
        }
    }

    /// The example of a request body's schema.
    fn request_example(&self, op: &Value) -> Value {
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        let name = schema["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
        let example = self.doc["components"]["schemas"][name]["examples"][0].clone();
        assert!(example.is_object(), "{name} has no example");
        self.check(schema, &example)
            .unwrap_or_else(|e| panic!("the example of {name} does not validate: {e}"));
        example
    }

    /// The example values of the path parameters of `op`.
    fn path_with_example(&self, path: &str, op: &Value) -> String {
        let mut path = path.to_owned();
        // Query parameters (a history's `limit`) are optional: left out.
        for p in op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "path")
        {
            let name = p["name"].as_str().unwrap();
            let example = p["example"].as_str().unwrap();
            path = path.replace(&format!("{{{name}}}"), example);
        }
        path
    }
}

async fn send(c: &Client, method: Method, path: &str, body: Option<&Value>) -> Reply {
    let bytes = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    c.send(method, path, &[], bytes, Duration::ZERO)
        .await
        .unwrap()
}

/// The order a client would use a lease in: get it, renew it, look at it,
/// give it up (so that each example meets a live lease where it needs one).
fn step(path: &str) -> u8 {
    match path.rsplit('/').next().unwrap() {
        "acquire" | "campaign" => 0,
        "renew" => 1,
        "release" | "resign" => 3,
        _ => 2,
    }
}

#[tokio::test]
async fn every_documented_example_gets_a_documented_answer() {
    let broker = Broker::start().await;
    let c = broker.client();
    let spec = Spec::fetch(&c).await;

    // The tenant operations, each resource in the order of `step`.
    let mut operations: Vec<(String, String)> = Vec::new();
    for (path, item) in spec.doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            operations.push((path.clone(), method.clone()));
        }
    }
    let resource = |p: &str| p.split('/').take(3).collect::<Vec<_>>().join("/");
    operations.sort_by_key(|(p, _)| (resource(p), step(p)));

    // What the last grant of each resource returned (token, term, slot),
    // put into the later examples in place of the documented numbers.
    let mut live: HashMap<String, Value> = HashMap::new();
    let mut answered = 0;
    for (path, method) in &operations {
        let op = spec.operation(path, method);
        if path.starts_with("/v1/admin") || path.ends_with("/observe") || path == "/metrics" {
            continue; // below, with their own auth or media type
        }
        if path == "/v1/events" {
            continue; // a stream that does not end: tests/events.rs
        }
        let url = spec.path_with_example(path, op);
        let what = format!("{method} {url}");
        let reply = if method == "post" && op.get("requestBody").is_none() {
            // A POST without a body (a session's keepalive).
            send(&c, Method::POST, &url, None).await
        } else if method == "post" {
            let mut body = spec.request_example(op);
            if let Some(grant) = live.get(&resource(path)) {
                for field in ["token", "term", "slot"] {
                    if body.get(field).is_some() {
                        body[field] = grant[field].clone();
                    }
                }
                // Multi-locks: each key's token from the live grant.
                if let (Some(_), Some(held)) = (body.get("locks"), grant["locks"].as_array()) {
                    body["locks"] = held
                        .iter()
                        .map(|l| serde_json::json!({"key": l["key"], "token": l["token"]}))
                        .collect();
                }
            }
            send(&c, Method::POST, &url, Some(&body)).await
        } else {
            send(&c, Method::GET, &url, None).await
        };
        spec.check_reply(&what, op, &reply);
        if reply.status == 200 && step(path) == 0 {
            let mut grant = reply.json();
            if grant.get("term").is_some() {
                grant["token"] = grant["term"].clone();
            }
            live.insert(resource(path), grant);
        }
        if step(path) == 1 || (path.ends_with("/acquire") || path.ends_with("/campaign")) {
            assert_eq!(reply.status, 200, "{what}: {reply:?}");
        }
        answered += 1;
    }
    assert!(answered >= 14, "only {answered} operations were exercised");

    // Errors every tenant operation documents.
    let acquire = spec.operation("/v1/locks/{key}/acquire", "post");
    let example = spec.request_example(acquire);
    let anonymous = broker.client_with(None);
    let reply = send(
        &anonymous,
        Method::POST,
        "/v1/locks/job-1/acquire",
        Some(&example),
    )
    .await;
    assert_eq!(reply.status, 401);
    spec.check_reply("no key", acquire, &reply);
    let reply = send(&c, Method::GET, "/v1/locks/job-1/acquire", None).await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.headers.get("allow").unwrap(), "POST");
    spec.check_reply("wrong method", acquire, &reply);
    let reply = send(
        &c,
        Method::POST,
        "/v1/locks/job%0A1/acquire",
        Some(&example),
    )
    .await;
    assert_eq!(reply.status, 422);
    assert!(reply.message().contains("control character"), "{reply:?}");
    spec.check_reply("control character in the key", acquire, &reply);
    let big = Bytes::from(vec![b' '; 70_000]);
    let reply = c
        .send(
            Method::POST,
            "/v1/locks/job-1/acquire",
            &[],
            big,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 413);
    spec.check_reply("too large", acquire, &reply);
    // Held by another owner: 409 with retry_after_ms and Retry-After.
    let mut mine = example.clone();
    mine["owner"] = json!("someone-else");
    send(&c, Method::POST, "/v1/locks/held/acquire", Some(&example)).await;
    let reply = send(&c, Method::POST, "/v1/locks/held/acquire", Some(&mine)).await;
    assert_eq!(reply.status, 409);
    assert!(reply.headers.get("retry-after").is_some());
    spec.check_reply("held", acquire, &reply);

    // Admin: the tenant list, and a policy that is not a component.
    let admin = broker.client_with(Some(ADMIN));
    let op = spec.operation("/v1/admin/tenants", "get");
    let reply = send(&admin, Method::GET, "/v1/admin/tenants", None).await;
    assert_eq!(reply.status, 200);
    spec.check_reply("tenants", op, &reply);
    let reply = send(&c, Method::GET, "/v1/admin/tenants", None).await;
    assert_eq!(reply.status, 403);
    spec.check_reply("tenants with a tenant key", op, &reply);
    let op = spec.operation("/v1/admin/tenants/{tenant}/policy", "put");
    let reply = admin
        .send(
            Method::PUT,
            "/v1/admin/tenants/default/policy",
            &[("content-type", "application/wasm")],
            Bytes::from_static(b"not wasm"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 422, "{reply:?}");
    spec.check_reply("bad policy", op, &reply);
    let reply = send(&admin, Method::GET, "/v1/admin/tenants/nobody/policy", None).await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.headers.get("allow").unwrap(), "PUT");
    spec.check_reply("policy with GET", op, &reply);

    broker.stop().await;
}

/// The first event of `observe`, as `{"event": name, "data": parsed}`.
async fn first_event(broker: &Broker, name: &str) -> Value {
    let addr = broker.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /v1/elections/{name}/observe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let read = async {
        let mut text = String::new();
        let mut chunk = [0u8; 4096];
        // Bounded: the first event comes at once, or the timeout fails.
        loop {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the stream closed: {text}");
            text.push_str(&String::from_utf8_lossy(&chunk[..n]));
            let (mut event, mut data) = (None, None);
            for line in text.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                }
                if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(d).unwrap());
                }
            }
            if let (Some(event), Some(data)) = (event, data) {
                assert!(text.contains("content-type: text/event-stream"), "{text}");
                return json!({"event": event, "data": data});
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an event within 10 s")
}

#[tokio::test]
async fn election_events_match_their_schema() {
    let broker = Broker::start().await;
    let c = broker.client();
    let spec = Spec::fetch(&c).await;
    let op = spec.operation("/v1/elections/{name}/observe", "get");
    let schema = &spec.response(op, 200).unwrap()["content"]["text/event-stream"]["schema"];
    // Vacant: nulls.
    let event = first_event(&broker, "scheduler").await;
    assert_eq!(event["data"]["leader"], Value::Null);
    spec.check(schema, &event).unwrap();
    // Led.
    let campaign = lockbroker_api::CampaignRequest::new("node-2");
    let body = serde_json::to_value(&campaign).unwrap();
    let reply = send(
        &c,
        Method::POST,
        "/v1/elections/scheduler/campaign",
        Some(&body),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let event = first_event(&broker, "scheduler").await;
    assert_eq!(event["data"]["leader"], "node-2");
    spec.check(schema, &event).unwrap();
    let typed: lockbroker_api::ElectionEvent = serde_json::from_value(event).unwrap();
    assert_eq!(typed.name(), "leader");
    // A schema that would take anything proves nothing: a wrong event fails.
    assert!(spec
        .check(schema, &json!({"event": "leader", "data": {"name": 7}}))
        .is_err());
    broker.stop().await;
}

/// Bodies generated from the schema (as a fuzzer would) that the broker
/// used to disagree with: what the schema accepts is accepted, what it
/// refuses gets 400.
#[tokio::test]
async fn the_broker_accepts_what_the_schema_accepts() {
    let broker = Broker::start().await;
    let c = broker.client();
    let spec = Spec::fetch(&c).await;
    let cases: &[(&str, Value, bool)] = &[
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "a", "ttl_ms": null}),
            true,
        ),
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "b", "ttl_ms": 1283.0}),
            true,
        ),
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "c", "wait_ms": null, "priority": null}),
            true,
        ),
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "d", "priority": -3.0}),
            true,
        ),
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "e", "ttl_ms": 1283.5}),
            false,
        ),
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "f", "ttl_ms": 99}),
            false,
        ),
        ("/v1/locks/{key}/acquire", json!({"owner": null}), false),
        (
            "/v1/locks/{key}/acquire",
            json!({"owner": "\u{1}ctl\n"}),
            true,
        ),
        (
            "/v1/semaphores/{key}/acquire",
            json!({"owner": "g", "permits": 3.0}),
            true,
        ),
        (
            "/v1/semaphores/{key}/acquire",
            json!({"owner": "h", "permits": null}),
            false,
        ),
        (
            "/v1/semaphores/{key}/acquire",
            json!({"owner": "i", "permits": 0}),
            false,
        ),
        (
            "/v1/elections/{name}/campaign",
            json!({"candidate": "j", "ttl_ms": null}),
            true,
        ),
    ];
    for (n, (path, body, valid)) in cases.iter().enumerate() {
        let op = spec.operation(path, "post");
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(
            spec.check(schema, body).is_ok(),
            *valid,
            "the schema of {path} and this case disagree: {body}"
        );
        let url = path
            .replace("{key}", &format!("k{n}"))
            .replace("{name}", &format!("e{n}"));
        let reply = send(&c, Method::POST, &url, Some(body)).await;
        let expected = if *valid { 200 } else { 400 };
        assert_eq!(reply.status, expected, "{url} {body}: {reply:?}");
        spec.check_reply(&url, op, &reply);
    }
    // null and absent are the same: the default lease.
    let reply = send(
        &c,
        Method::POST,
        "/v1/locks/nulls/acquire",
        Some(&json!({"owner": "a", "ttl_ms": null})),
    )
    .await;
    let lease: Lease = reply.ok();
    assert_eq!(lease.ttl_ms, 30000);
    assert_eq!(lease.hold_count, 1);
    // A whole float is that integer.
    let reply = send(
        &c,
        Method::POST,
        "/v1/locks/floats/acquire",
        Some(&json!({"owner": "a", "ttl_ms": 1283.0})),
    )
    .await;
    assert_eq!(reply.ok::<Lease>().ttl_ms, 1283);
    broker.stop().await;
}
