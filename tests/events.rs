//! The event stream (`GET /v1/events`) against real brokers and MariaDB:
//! every change of a tenant's locks, semaphores and rwlocks made through
//! any broker appears on every broker's streams within a second, in
//! increasing ids; a reconnect with `Last-Event-ID` misses nothing the
//! history keeps, and one from before it starts with `reset`; a stream
//! sees its tenant's keys with its prefix only; the streams per tenant are
//! bounded.

use std::time::{Duration, Instant};

use lockbroker::config::TenantConfig;
use lockbroker_tests::{
    config, db_conn, drop_db, eventually, fresh_db_name, Broker, BrokerProcess, Client, SseEvent,
    SseStream, KEY, OTHER_KEY,
};
use serde_json::{json, Value};

/// The longest a change may take to appear on a stream.
const WITHIN: Duration = Duration::from_secs(1);

async fn post(c: &Client, path: &str, body: Value) -> Value {
    let reply = c.post(path, &body).await.unwrap();
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    reply.parse()
}

/// Opens a stream of the default tenant's events on the broker at `url`.
async fn release(c: &Client, key: &str, owner: &str, lease: &Value) {
    let body = json!({"owner": owner, "token": lease["token"]});
    post(c, &format!("/v1/locks/{key}/release"), body).await;
}

async fn stream(url: &str, query: &str, headers: &[(&str, &str)]) -> SseStream {
    let stream = SseStream::open(url, &format!("/v1/events{query}"), KEY, headers).await;
    assert_eq!(stream.status, 200);
    stream
}

/// The next event, and that it is what the change made: its name, kind,
/// key, owner and token.
async fn expect(s: &mut SseStream, what: (&str, &str, &str, &str), token: &Value) -> SseEvent {
    let event = s.next(WITHIN).await;
    let data = event.json();
    let (name, kind, key, owner) = what;
    assert_eq!(event.event, name, "{event:?}");
    let got = (
        &data["kind"],
        &data["storage_key"],
        &data["owner"],
        &data["token"],
    );
    assert_eq!(
        got,
        (&json!(kind), &json!(key), &json!(owner), token),
        "{event:?}"
    );
    assert_eq!(event.id.as_deref(), Some(data["id"].to_string().as_str()));
    event
}

/// Two broker processes on one fresh database.
struct Pair {
    db: String,
    a: BrokerProcess,
    b: BrokerProcess,
}

impl Pair {
    async fn start() -> Pair {
        let db = fresh_db_name();
        let (a, b) = (
            BrokerProcess::start(&db, "").await,
            BrokerProcess::start(&db, "").await,
        );
        Pair { db, a, b }
    }

    async fn stop(self) {
        self.a.stop().await;
        self.b.stop().await;
        drop_db(&self.db).await;
    }
}

fn id(event: &SseEvent) -> u64 {
    event.id.as_deref().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_change_through_any_broker_appears_on_every_brokers_streams_within_a_second() {
    let pair = Pair::start().await;
    let (a, b) = (&pair.a, &pair.b);
    let (ca, cb) = (a.client(), b.client());
    let mut on_b = stream(&b.url, "?prefix=job-", &[]).await;
    let mut on_a = stream(&a.url, "?prefix=job-", &[]).await;

    let started = Instant::now();
    let lease = post(&ca, "/v1/locks/job-1/acquire", json!({"owner": "w1"})).await;
    let first = expect(
        &mut on_b,
        ("granted", "lock", "job-1", "w1"),
        &lease["token"],
    )
    .await;
    assert!(started.elapsed() < WITHIN, "{:?}", started.elapsed());
    expect(
        &mut on_a,
        ("granted", "lock", "job-1", "w1"),
        &lease["token"],
    )
    .await;
    release(&cb, "job-1", "w1", &lease).await;
    // Outside the prefix: not on these streams.
    post(&ca, "/v1/locks/other/acquire", json!({"owner": "w2"})).await;
    let permit = post(
        &cb,
        "/v1/semaphores/job-pool/acquire",
        json!({"owner": "w3", "permits": 2}),
    )
    .await;
    let read = post(
        &ca,
        "/v1/rwlocks/job-cfg/acquire",
        json!({"owner": "w4", "mode": "read"}),
    )
    .await;

    let mut ids = vec![id(&first)];
    for (what, lease) in [
        (("released", "lock", "job-1", "w1"), &lease),
        (("granted", "semaphore", "job-pool", "w3"), &permit),
        (("granted", "rwlock", "job-cfg", "w4"), &read),
    ] {
        ids.push(id(&expect(&mut on_b, what, &lease["token"]).await));
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {ids:?}");
    pair.stop().await;
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_exactly_what_it_missed() {
    let broker = Broker::start().await;
    let c = broker.client();
    let mut s = stream(broker.url(), "", &[]).await;
    let one = post(&c, "/v1/locks/k1/acquire", json!({"owner": "a"})).await;
    let seen = expect(&mut s, ("granted", "lock", "k1", "a"), &one["token"]).await;
    drop(s);
    // Missed while disconnected.
    release(&c, "k1", "a", &one).await;
    let two = post(&c, "/v1/locks/k2/acquire", json!({"owner": "b"})).await;

    let last = seen.id.clone().unwrap();
    let mut again = stream(broker.url(), "", &[("Last-Event-ID", last.as_str())]).await;
    expect(&mut again, ("released", "lock", "k1", "a"), &one["token"]).await;
    expect(&mut again, ("granted", "lock", "k2", "b"), &two["token"]).await;
    // And then what comes next, live.
    let three = post(&c, "/v1/locks/k3/acquire", json!({"owner": "c"})).await;
    expect(&mut again, ("granted", "lock", "k3", "c"), &three["token"]).await;
    // `?after=` is the same.
    let mut by_query = stream(broker.url(), &format!("?after={last}"), &[]).await;
    expect(
        &mut by_query,
        ("released", "lock", "k1", "a"),
        &one["token"],
    )
    .await;
}

#[tokio::test]
async fn a_resume_from_before_the_kept_history_starts_with_reset() {
    let broker = Broker::start().await;
    let c = broker.client();
    let one = post(&c, "/v1/locks/old/acquire", json!({"owner": "a"})).await;
    release(&c, "old", "a", &one).await;
    let two = post(&c, "/v1/locks/new/acquire", json!({"owner": "b"})).await;
    // The first two events are pruned, as the reaper prunes old ones.
    let mut db = db_conn(&broker.db).await;
    sqlx::query("DELETE FROM lock_events WHERE lock_key = 'old'")
        .execute(&mut db)
        .await
        .unwrap();
    let mut s = stream(broker.url(), "?after=0", &[]).await;
    assert_eq!(s.next(WITHIN).await.event, "reset");
    expect(&mut s, ("granted", "lock", "new", "b"), &two["token"]).await;
}

#[tokio::test]
async fn a_stream_sees_only_its_tenants_changes() {
    let broker = Broker::start().await;
    let (mine, theirs) = (broker.client(), broker.client_with(Some(OTHER_KEY)));
    let mut s = stream(broker.url(), "", &[]).await;
    post(
        &theirs,
        "/v1/locks/shared/acquire",
        json!({"owner": "them"}),
    )
    .await;
    let lease = post(&mine, "/v1/locks/shared/acquire", json!({"owner": "me"})).await;
    expect(&mut s, ("granted", "lock", "shared", "me"), &lease["token"]).await;
}

#[tokio::test]
async fn the_streams_of_a_tenant_are_bounded_and_a_closed_one_frees_its_place() {
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.tenants[0] = TenantConfig {
        max_streams: 2,
        ..cfg.tenants[0].clone()
    };
    let broker = Broker::start_with(db, cfg).await;
    let (first, _second) = (
        stream(broker.url(), "", &[]).await,
        stream(broker.url(), "", &[]).await,
    );
    let open = r#"lockbroker_event_streams_open{tenant="default"}"#;
    assert_eq!(broker.client().counter(open).await, 2);
    let refused = broker.client().get("/v1/events").await.unwrap();
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.error().unwrap().code.as_str(), "too_many_streams");
    // Another tenant has places of its own.
    let theirs = SseStream::open(broker.url(), "/v1/events", OTHER_KEY, &[]).await;
    assert_eq!(theirs.status, 200);
    drop(first);
    eventually("the closed stream's place is free", WITHIN * 10, || async {
        broker.client().counter(open).await == 1
    })
    .await;
    let again = SseStream::open(broker.url(), "/v1/events", KEY, &[]).await;
    assert_eq!(again.status, 200);
}

#[tokio::test]
async fn bad_requests_are_answered_before_a_stream_opens() {
    let broker = Broker::start().await;
    let c = broker.client();
    for (query, status) in [("?after=x", 400), ("?after=-1", 400), ("?since=1", 400)] {
        let reply = c.get(&format!("/v1/events{query}")).await.unwrap();
        assert_eq!(reply.status, status, "{query}: {}", reply.text());
    }
    let reply = broker.client_with(None).get("/v1/events").await.unwrap();
    assert_eq!(reply.status, 401);
    let reply = c.post("/v1/events", &json!({})).await.unwrap();
    assert_eq!(reply.status, 405);
}

#[tokio::test]
async fn under_load_from_two_brokers_a_stream_gets_every_recorded_event_once_in_order() {
    let pair = Pair::start().await;
    let (a, b) = (&pair.a, &pair.b);
    let mut s = stream(&b.url, "", &[]).await;
    // Eight clients on four keys through both brokers, for two seconds:
    // grants, handoffs and releases race to commit.
    let until = Instant::now() + Duration::from_secs(2);
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let c = if i % 2 == 0 { a.client() } else { b.client() };
            tokio::spawn(async move {
                let (key, owner) = (format!("hot-{}", i % 4), format!("w{i}"));
                while Instant::now() < until {
                    let Ok(reply) = c.acquire(&key, &owner, 10_000, 1_000).await else {
                        continue;
                    };
                    if reply.status == 200 {
                        let token = reply.parse::<Value>()["token"].clone();
                        let body = json!({"owner": owner, "token": token});
                        let _ = c.post(&format!("/v1/locks/{key}/release"), &body).await;
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let mut db_conn = db_conn(&pair.db).await;
    let recorded: Vec<u64> =
        sqlx::query_scalar("SELECT id FROM lock_events WHERE tenant = 'default' ORDER BY id")
            .fetch_all(&mut db_conn)
            .await
            .unwrap();
    assert!(recorded.len() > 50, "only {} events", recorded.len());
    let mut streamed = Vec::new();
    while streamed.len() < recorded.len() {
        streamed.push(id(&s.next(Duration::from_secs(5)).await));
    }
    assert_eq!(streamed, recorded, "every recorded event once, in id order");
    pair.stop().await;
}
