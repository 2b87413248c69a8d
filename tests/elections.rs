//! Leader election: at most one leader per term, terms increase, and
//! observers see every change of leader (Server-Sent Events).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use lockbroker_api::{
    CampaignRequest, ElectionRenewRequest, ElectionStatus, ErrorCode, LeaderEvent, Leadership,
    LockStatus, ResignRequest, ResignResponse,
};
use lockbroker_tests::{eventually, Broker, Client, Reply, KEY};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    task::JoinHandle,
};

async fn campaign(c: &Client, name: &str, candidate: &str, ttl_ms: u64, wait_ms: u64) -> Reply {
    let body = CampaignRequest {
        terms: lockbroker_api::LeaseTerms::new(ttl_ms, wait_ms),
        ..CampaignRequest::new(candidate)
    };
    c.post(&format!("/v1/elections/{name}/campaign"), &body)
        .await
        .unwrap()
}

async fn resign(c: &Client, name: &str, candidate: &str, term: u64) -> Reply {
    let body = ResignRequest {
        candidate: candidate.into(),
        term,
    };
    c.post(&format!("/v1/elections/{name}/resign"), &body)
        .await
        .unwrap()
}

/// The election's status, read into the API's type.
async fn status(c: &Client, name: &str) -> ElectionStatus {
    c.get(&format!("/v1/elections/{name}")).await.unwrap().ok()
}

/// Follows `GET /v1/elections/{name}/observe`, collecting each `leader`
/// event's data.
fn observe(broker: &Broker, name: &str) -> (Arc<Mutex<Vec<LeaderEvent>>>, JoinHandle<()>) {
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
    assert_eq!(
        status(&c, "main").await,
        ElectionStatus {
            name: "main".into(),
            storage_key: "main".into(),
            leader: None,
            term: None,
            expires_at: None,
        }
    );

    let won = campaign(&c, "main", "node-1", 30_000, 0).await;
    assert_eq!(won.status, 200, "{won:?}");
    let won: Leadership = won.ok();
    assert_eq!(won.leader, "node-1");
    let term = won.term;
    let lost = campaign(&c, "main", "node-2", 30_000, 0).await;
    assert_eq!(lost.status, 409);
    // The leader campaigning again stays leader of the same term.
    let again = campaign(&c, "main", "node-1", 30_000, 0).await;
    assert_eq!(again.ok::<Leadership>().term, term);
    let now = status(&c, "main").await;
    assert_eq!(now.leader.as_deref(), Some("node-1"));
    assert_eq!(now.term, Some(term));

    let renew = c
        .post(
            "/v1/elections/main/renew",
            &ElectionRenewRequest {
                candidate: "node-1".into(),
                term,
                ttl_ms: Some(60_000),
            },
        )
        .await
        .unwrap();
    assert_eq!(renew.status, 200);
    assert_eq!(
        resign(&c, "main", "node-2", term).await.code(),
        Some(ErrorCode::LeaseLost)
    );
    let r = resign(&c, "main", "node-1", term).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.ok::<ResignResponse>(), ResignResponse { resigned: true });
    assert_eq!(status(&c, "main").await.leader, None);
    let next = campaign(&c, "main", "node-2", 30_000, 0).await;
    assert!(next.ok::<Leadership>().term > term);
    // A lock of the same name is another thing.
    assert!(!c.status("main").await.unwrap().ok::<LockStatus>().held);
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
                assert_eq!(r.status, 200, "{r:?}");
                let term = r.ok::<Leadership>().term;
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
    let last_term = last.ok::<Leadership>().term;
    eventually(
        "the observer sees the short-lived leader and then its lease run out",
        Duration::from_secs(5),
        || async {
            let seen = events.lock().unwrap();
            seen.iter()
                .position(|e| {
                    e.term == Some(last_term) && e.leader.as_deref() == Some("short-lived")
                })
                .is_some_and(|at| seen[at + 1..].iter().any(|e| e.leader.is_none()))
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
    let seen: Vec<LeaderEvent> = events.lock().unwrap().clone();
    observer.abort();
    assert_eq!(seen[0].leader, None, "first event: the state at start");
    let seen_terms: Vec<(u64, String)> = seen
        .iter()
        .filter_map(|e| Some((e.term?, e.leader.clone()?)))
        .collect();
    let mut expected: Vec<(u64, String)> = terms.iter().map(|t| (t.0, t.1.clone())).collect();
    expected.push((last_term, "short-lived".into()));
    assert_eq!(seen_terms, expected, "every leader, in order, once");
    assert_eq!(seen.last().unwrap().leader, None, "the expiry was seen");
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
            .text()
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
                events
                    .lock()
                    .unwrap()
                    .last()
                    .and_then(|e| e.leader.as_deref())
                    == Some("node-1")
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
