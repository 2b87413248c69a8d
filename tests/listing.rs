//! Listings (`GET /v1/locks`, `/v1/semaphores`, `/v1/rwlocks`,
//! `/v1/elections`, and the admin's `/v1/admin/tenants/{t}/{kind}`) against
//! the real broker and MariaDB: live leases only, by the database clock;
//! in storage-key order, a prefix matched byte for byte; paged by an opaque
//! cursor, a key held for a whole paged scan listed exactly once while
//! others come and go; a tenant sees its own only.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use lockbroker_tests::{eventually, Broker, Client, ADMIN, OTHER_KEY};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);

/// `GET path`, expecting 200.
async fn get(c: &Client, path: &str) -> Value {
    let reply = c.get(path).await.unwrap();
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    reply.parse()
}

/// Every item of a listing, following `next` page by page.
async fn all(c: &Client, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let page = match &cursor {
            Some(cursor) => get(c, &format!("{path}{sep}cursor={cursor}")).await,
            None => get(c, path).await,
        };
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
}

fn keys(items: &[Value]) -> Vec<&str> {
    items
        .iter()
        .map(|i| i["storage_key"].as_str().unwrap())
        .collect()
}

async fn acquire(c: &Client, key: &str, owner: &str, ttl_ms: u64) -> Value {
    let reply = c.acquire(key, owner, ttl_ms, 0).await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.parse()
}

#[tokio::test]
async fn locks_are_listed_live_in_key_order_with_their_holder_and_queue() {
    let broker = Broker::start().await;
    let c = broker.client();
    let b = acquire(&c, "job-b", "w1", 60_000).await;
    acquire(&c, "job-a", "w2", 60_000).await;
    acquire(&c, "job-a", "w2", 60_000).await; // re-entered: hold count 2
    acquire(&c, "other", "w3", 60_000).await;
    acquire(&c, "job-gone", "w4", 200).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("job-b", "w5", 30_000, 10_000).await })
    };
    eventually("a waiter on job-b", WAIT, || async {
        get(&c, "/v1/locks/job-b").await["waiters"] == 1
    })
    .await;
    eventually("job-gone expired", WAIT, || async {
        get(&c, "/v1/locks/job-gone").await["held"] == false
    })
    .await;

    let page = get(&c, "/v1/locks?prefix=job-").await;
    assert_eq!(page["next"], Value::Null, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(keys(items), ["job-a", "job-b"], "{page}");
    let a = &items[0];
    assert_eq!(
        (a["key"].as_str(), a["owner"].as_str()),
        (Some("job-a"), Some("w2"))
    );
    assert_eq!(a["hold_count"], 2);
    assert!(
        a["acquired_at"].is_string() && a["expires_at"].is_string(),
        "{a}"
    );
    let held = &items[1];
    assert_eq!(
        (held["token"].clone(), held["waiters"].clone()),
        (b["token"].clone(), json!(1))
    );
    assert_eq!(
        get(&c, "/v1/locks").await["items"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Paged by two: the same keys, in order, then the end.
    let first = get(&c, "/v1/locks?limit=2").await;
    assert_eq!(keys(first["items"].as_array().unwrap()), ["job-a", "job-b"]);
    let next = first["next"].as_str().expect("a next page");
    let second = get(&c, &format!("/v1/locks?limit=2&cursor={next}")).await;
    assert_eq!(keys(second["items"].as_array().unwrap()), ["other"]);
    assert_eq!(second["next"], Value::Null);

    let release = json!({"owner": "w1", "token": b["token"]});
    c.post("/v1/locks/job-b/release", &release).await.unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().status, 200);
}

#[tokio::test]
async fn a_prefix_is_matched_byte_for_byte_and_bad_queries_are_400() {
    let broker = Broker::start().await;
    let c = broker.client();
    for key in ["a%b", "axb", "a_c", "abc", "a\\d", "ä-1", "b"] {
        acquire(&c, key, "w", 60_000).await;
    }
    let listed = |prefix: &'static str| {
        let c = c.clone();
        async move { keys(&all(&c, &format!("/v1/locks?prefix={prefix}")).await).join(" ") }
    };
    assert_eq!(listed("a%25").await, "a%b");
    assert_eq!(listed("a_").await, "a_c");
    assert_eq!(listed("a%5C").await, "a\\d");
    assert_eq!(listed("%C3%A4").await, "ä-1");
    assert_eq!(listed("a").await, "a%b a\\d a_c abc axb");
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "cursor=zz",
        "cursor=abc",
        "sort=key",
    ] {
        let reply = c.get(&format!("/v1/locks?{bad}")).await.unwrap();
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text());
        assert_eq!(reply.error().unwrap().code.as_str(), "bad_request");
    }
    let reply = c.post("/v1/locks", &json!({})).await.unwrap();
    assert_eq!(reply.status, 405, "{}", reply.text());
}

#[tokio::test]
async fn every_kind_lists_its_live_leases() {
    let broker = Broker::start().await;
    let c = broker.client();
    let post = |path: &'static str, body: Value| {
        let c = c.clone();
        async move {
            let reply = c.post(path, &body).await.unwrap();
            assert_eq!(reply.status, 200, "{path}: {}", reply.text());
            reply.parse::<Value>()
        }
    };
    post(
        "/v1/semaphores/pool/acquire",
        json!({"owner": "a", "permits": 3}),
    )
    .await;
    post(
        "/v1/semaphores/pool/acquire",
        json!({"owner": "b", "permits": 3}),
    )
    .await;
    post(
        "/v1/semaphores/idle/acquire",
        json!({"owner": "a", "permits": 1, "ttl_ms": 200}),
    )
    .await;
    post(
        "/v1/rwlocks/cfg/acquire",
        json!({"owner": "r1", "mode": "read"}),
    )
    .await;
    post(
        "/v1/rwlocks/cfg/acquire",
        json!({"owner": "r2", "mode": "read"}),
    )
    .await;
    post(
        "/v1/rwlocks/db/acquire",
        json!({"owner": "w", "mode": "write"}),
    )
    .await;
    post("/v1/elections/leader/campaign", json!({"candidate": "n1"})).await;
    eventually("the idle semaphore's lease ran out", WAIT, || async {
        get(&c, "/v1/semaphores/idle").await["holders"] == json!([])
    })
    .await;

    let sems = all(&c, "/v1/semaphores").await;
    assert_eq!(keys(&sems), ["pool"]);
    assert_eq!(sems[0]["permits"], 3);
    let owners: Vec<&str> = sems[0]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners.len(), 2);
    assert!(owners.contains(&"a") && owners.contains(&"b"), "{sems:?}");

    let rws = all(&c, "/v1/rwlocks").await;
    assert_eq!(keys(&rws), ["cfg", "db"]);
    assert_eq!(rws[0]["readers"].as_array().unwrap().len(), 2);
    assert_eq!(rws[0]["writer"], Value::Null);
    assert_eq!(rws[1]["writer"]["owner"], "w");

    let elections = all(&c, "/v1/elections").await;
    assert_eq!(keys(&elections), ["leader"]);
    assert_eq!(
        (
            elections[0]["leader"].as_str(),
            elections[0]["term"].as_u64()
        ),
        (Some("n1"), Some(1))
    );
}

#[tokio::test]
async fn a_tenant_lists_only_its_own_and_the_admin_lists_any() {
    let broker = Broker::start().await;
    let (mine, other) = (broker.client(), broker.client_with(Some(OTHER_KEY)));
    acquire(&mine, "shared-name", "m", 60_000).await;
    acquire(&other, "shared-name", "o", 60_000).await;
    acquire(&other, "theirs", "o", 60_000).await;
    let owners = |items: Vec<Value>| {
        items
            .iter()
            .map(|i| {
                format!(
                    "{} {}",
                    i["storage_key"].as_str().unwrap(),
                    i["owner"].as_str().unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(owners(all(&mine, "/v1/locks").await), ["shared-name m"]);
    assert_eq!(
        owners(all(&other, "/v1/locks").await),
        ["shared-name o", "theirs o"]
    );
    let admin = broker.client_with(Some(ADMIN));
    assert_eq!(
        owners(all(&admin, "/v1/admin/tenants/other/locks").await),
        ["shared-name o", "theirs o"]
    );
    for (client, path, status) in [
        (&admin, "/v1/admin/tenants/nobody/locks", 404),
        (&admin, "/v1/admin/tenants/other/things", 404),
        (&mine, "/v1/admin/tenants/other/locks", 403),
        (&admin, "/v1/locks", 401),
    ] {
        let reply = client.get(path).await.unwrap();
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
    }
}

#[tokio::test]
async fn a_key_held_throughout_a_paged_scan_is_listed_once_while_others_come_and_go() {
    let broker = Broker::start().await;
    let c = broker.client();
    let held: Vec<String> = (0..40).map(|i| format!("k{:03}", i * 5)).collect();
    for key in &held {
        acquire(&c, key, "holder", 120_000).await;
    }
    // Meanwhile other keys, between and around the held ones, are granted
    // and released as fast as one client can.
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("k{:03}", ((n * 7) % 200) | 1);
                if let Ok(reply) = c.acquire(&key, "churn", 30_000, 0).await {
                    if reply.status == 200 {
                        let token = reply.parse::<Value>()["token"].clone();
                        let body = json!({"owner": "churn", "token": token});
                        let _ = c.post(&format!("/v1/locks/{key}/release"), &body).await;
                    }
                }
                n += 1;
            }
            n
        })
    };
    for _ in 0..5 {
        let listed = all(&c, "/v1/locks?limit=3").await;
        let mine: Vec<&str> = listed
            .iter()
            .filter(|i| i["owner"] == "holder")
            .map(|i| i["storage_key"].as_str().unwrap())
            .collect();
        assert_eq!(
            mine,
            held.iter().map(String::as_str).collect::<Vec<_>>(),
            "each held key once, in order"
        );
        let unique: HashSet<&str> = keys(&listed).into_iter().collect();
        assert_eq!(unique.len(), listed.len(), "no key listed twice");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(
        churn.await.unwrap() > 10,
        "the other keys did change meanwhile"
    );
}

#[tokio::test]
async fn a_run_of_expired_keys_ends_a_page_early_and_the_scan_goes_on() {
    let broker = Broker::start().await;
    let c = broker.client();
    for i in 0..30 {
        acquire(&c, &format!("a{i:02}"), "gone", 100).await;
    }
    acquire(&c, "b", "live", 60_000).await;
    eventually("the a-keys expired", WAIT, || async {
        get(&c, "/v1/locks/a29").await["held"] == false
    })
    .await;
    // Limit 2: a page looks at 20 keys at most, so the first is empty but
    // has a next; following it finds the live key.
    let first = get(&c, "/v1/locks?limit=2").await;
    assert_eq!(first["items"], json!([]), "{first}");
    assert!(first["next"].is_string(), "{first}");
    assert_eq!(keys(&all(&c, "/v1/locks?limit=2").await), ["b"]);
}
