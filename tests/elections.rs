//! Leader election: at most one leader per term, terms increase, and
//! observers see every change of leader (Server-Sent Events).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use lockbroker::client::{Client, Reply};
use lockbroker_tests::{eventually, Broker, KEY};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    task::JoinHandle,
};

async fn campaign(c: &Client, name: &str, candidate: &str, ttl_ms: u64, wait_ms: u64) -> Reply {
    let body = json!({"candidate": candidate, "ttl_ms": ttl_ms, "wait_ms": wait_ms});
    c.post(&format!("/v1/elections/{name}/campaign"), &body)
        .await
        .unwrap()
}

async fn resign(c: &Client, name: &str, candidate: &str, term: u64) -> Reply {
    let body = json!({"candidate": candidate, "term": term});
    c.post(&format!("/v1/elections/{name}/resign"), &body)
        .await
        .unwrap()
}

/// Follows `GET /v1/elections/{name}/observe`, collecting each event's data.
fn observe(broker: &Broker, name: &str) -> (Arc<Mutex<Vec<Value>>>, JoinHandle<()>) {
    let addr = broker.url().trim_start_matches("http://").to_owned();
    let events = Arc::new(Mutex::new(Vec::new()));
    let request = format!(
        "GET /v1/elections/{name}/observe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    );
    let sink = events.clone();
    let task = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            // Each event arrives whole in one chunk; take complete lines.
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                if let Some(data) = line.trim_end().strip_prefix("data: ") {
                    sink.lock()
                        .unwrap()
                        .push(serde_json::from_str(data).unwrap());
                }
            }
        }
    });
    (events, task)
}

#[tokio::test]
async fn campaign_resign_renew_and_status() {
    let broker = Broker::start().await;
    let c = broker.client();
    let status = c.get("/v1/elections/main").await.unwrap();
    assert_eq!(
        status.body,
        json!({"name": "main", "leader": null, "term": null, "expires_at": null})
    );

    let won = campaign(&c, "main", "node-1", 30_000, 0).await;
    assert_eq!(won.status, 200, "{:?}", won.body);
    assert_eq!(won.body["leader"], "node-1");
    let term = won.body["term"].as_u64().unwrap();
    let lost = campaign(&c, "main", "node-2", 30_000, 0).await;
    assert_eq!(lost.status, 409);
    // The leader campaigning again stays leader of the same term.
    let again = campaign(&c, "main", "node-1", 30_000, 0).await;
    assert_eq!(again.body["term"], term);
    let status = c.get("/v1/elections/main").await.unwrap();
    assert_eq!(status.body["leader"], "node-1");
    assert_eq!(status.body["term"], term);

    let renew = c
        .post(
            "/v1/elections/main/renew",
            &json!({"candidate": "node-1", "term": term, "ttl_ms": 60_000}),
        )
        .await
        .unwrap();
    assert_eq!(renew.status, 200);
    assert_eq!(
        resign(&c, "main", "node-2", term).await.code(),
        Some("lease_lost")
    );
    let r = resign(&c, "main", "node-1", term).await;
    assert_eq!((r.status, &r.body), (200, &json!({"resigned": true})));
    assert_eq!(
        c.get("/v1/elections/main").await.unwrap().body["leader"],
        json!(null)
    );
    let next = campaign(&c, "main", "node-2", 30_000, 0).await;
    assert!(next.body["term"].as_u64().unwrap() > term);
    // A lock of the same name is another thing.
    assert_eq!(c.status("main").await.unwrap().body["held"], false);
    broker.stop().await;
}

#[tokio::test]
async fn three_candidates_one_leader_per_term_and_observers_see_every_change() {
    let broker = Broker::start().await;
    let (events, observer) = observe(&broker, "churn");
    // Subscribed before the first campaign: the first event is the state
    // at start.
    eventually(
        "the observer's first event",
        Duration::from_secs(5),
        || async { !events.lock().unwrap().is_empty() },
    )
    .await;
    let terms = Arc::new(Mutex::new(Vec::<(u64, String, Instant, Instant)>::new()));
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut candidates = Vec::new();
    for i in 0..3 {
        let (c, terms) = (broker.client(), terms.clone());
        candidates.push(tokio::spawn(async move {
            let me = format!("node-{i}");
            while Instant::now() < deadline {
                let r = campaign(&c, "churn", &me, 30_000, 5_000).await;
                assert_eq!(r.status, 200, "{:?}", r.body);
                let term = r.body["term"].as_u64().unwrap();
                let start = Instant::now();
                // The hold itself, varied so that terms end at odd times.
                tokio::time::sleep(Duration::from_millis(u64::from(rand_ms(i, term)))).await;
                let end = Instant::now();
                assert_eq!(resign(&c, "churn", &me, term).await.status, 200);
                terms.lock().unwrap().push((term, me.clone(), start, end));
            }
        }));
    }
    for c in candidates {
        c.await.unwrap();
    }
    // A last leader whose lease runs out: the observer sees the vacancy.
    let c = broker.client();
    let last = campaign(&c, "churn", "short-lived", 300, 5_000).await;
    let last_term = last.body["term"].as_u64().unwrap();
    eventually(
        "the observer sees the short-lived leader and then its lease run out",
        Duration::from_secs(5),
        || async {
            let seen = events.lock().unwrap();
            seen.iter()
                .position(|e| e["term"] == last_term && e["leader"] == "short-lived")
                .is_some_and(|at| seen[at + 1..].iter().any(|e| e["leader"].is_null()))
        },
    )
    .await;

    let mut terms = terms.lock().unwrap().clone();
    terms.sort_by_key(|t| t.0);
    assert!(terms.len() > 20, "{} terms", terms.len());
    for pair in terms.windows(2) {
        assert!(pair[1].0 > pair[0].0);
        assert!(pair[1].2 > pair[0].3, "two leaders at once: {pair:?}");
    }
    let seen: Vec<Value> = events.lock().unwrap().clone();
    observer.abort();
    assert_eq!(
        seen[0]["leader"],
        json!(null),
        "first event: the state at start"
    );
    let seen_terms: Vec<(u64, String)> = seen
        .iter()
        .filter(|e| !e["leader"].is_null())
        .map(|e| {
            (
                e["term"].as_u64().unwrap(),
                e["leader"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut expected: Vec<(u64, String)> = terms.iter().map(|t| (t.0, t.1.clone())).collect();
    expected.push((last_term, "short-lived".into()));
    assert_eq!(seen_terms, expected, "every leader, in order, once");
    assert_eq!(
        seen.last().unwrap()["leader"],
        json!(null),
        "the expiry was seen"
    );
    broker.stop().await;
}

/// A small, deterministic hold time in 0..15 ms.
fn rand_ms(i: u64, term: u64) -> u32 {
    ((i * 7 + term * 13) % 15) as u32
}

/// Observers of one election share one poller on a broker: three streams
/// on `shared` and one on `other` run two, each stream sees the change,
/// and the pollers stop with their last observer.
#[tokio::test]
async fn observers_of_one_election_share_one_poller() {
    let broker = Broker::start().await;
    let c = broker.client();
    let pollers = || async {
        let metrics = c.get("/metrics").await.unwrap();
        metrics
            .body
            .as_str()
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("lockbroker_election_pollers "))
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let streams: Vec<_> = ["shared", "shared", "shared", "other"]
        .into_iter()
        .map(|name| observe(&broker, name))
        .collect();
    lockbroker_tests::eventually("every stream began", Duration::from_secs(5), || async {
        streams
            .iter()
            .all(|(events, _)| events.lock().unwrap().len() == 1)
    })
    .await;
    assert_eq!(pollers().await, 2, "one poller per election");
    let won = campaign(&c, "shared", "node-1", 30_000, 0).await;
    assert_eq!(won.status, 200);
    lockbroker_tests::eventually(
        "each observer saw the leader",
        Duration::from_secs(5),
        || async {
            streams[..3].iter().all(|(events, _)| {
                events.lock().unwrap().last().map(|e| e["leader"].clone()) == Some(json!("node-1"))
            })
        },
    )
    .await;
    for (_, task) in &streams {
        task.abort();
    }
    lockbroker_tests::eventually("the pollers stopped", Duration::from_secs(5), || async {
        pollers().await == 0
    })
    .await;
    broker.stop().await;
}
