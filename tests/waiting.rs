//! Who waits (issue #32), against real brokers and MariaDB: a key's queue
//! in the order it will be served (`GET /v1/{kind}/{key}/waiters`), with
//! waiters of two brokers, in the database queue and in a broker's memory,
//! and the tenant's wait-for graph (`GET /v1/waits-for`) with its cycles.

use std::time::Duration;

use lockbroker_api::{ErrorCode, KeyWaiters, Lease, RwMode, WaitsFor};
use lockbroker_tests::{config, eventually, Broker, Client, Reply};
use serde_json::json;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);

async fn waiters(c: &Client, kind: &str, key: &str) -> KeyWaiters {
    c.get(&format!("/v1/{kind}/{key}/waiters"))
        .await
        .unwrap()
        .ok()
}

/// Starts a waiting acquire of `path` with `body` in a task.
fn wait(c: &Client, path: String, body: serde_json::Value) -> tokio::task::JoinHandle<Reply> {
    let c = c.clone();
    tokio::spawn(async move { c.post(&path, &body).await.unwrap() })
}

/// The owners of a queue, first served first.
fn owners(q: &KeyWaiters) -> Vec<&str> {
    q.waiters.iter().map(|w| w.owner.as_str()).collect()
}

#[tokio::test]
async fn a_queue_shows_waiters_of_both_brokers_in_the_order_they_are_served() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());
    let held: Lease = c1.acquire("q", "holder", 30_000, 0).await.unwrap().ok();
    let session = c1.open_session(&json!({"ttl_ms": 30_000})).await;
    let b = wait(
        &c1,
        "/v1/locks/q/acquire".into(),
        json!({"owner": "b", "ttl_ms": 30_000, "wait_ms": 20_000, "priority": 3}),
    );
    eventually("b queues", WAIT, || async {
        waiters(&c1, "locks", "q").await.waiters.len() == 1
    })
    .await;
    let s = wait(
        &c2,
        "/v1/locks/q/acquire".into(),
        json!({"session": session.id, "wait_ms": 20_000}),
    );
    eventually("the session queues", WAIT, || async {
        waiters(&c1, "locks", "q").await.waiters.len() == 2
    })
    .await;
    let d = wait(
        &c2,
        "/v1/locks/q/acquire".into(),
        json!({"owner": "d", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("d queues", WAIT, || async {
        waiters(&c2, "locks", "q").await.waiters.len() == 3
    })
    .await;

    // Either broker shows the same queue, FIFO.
    for c in [&c1, &c2] {
        let q = waiters(c, "locks", "q").await;
        assert_eq!(owners(&q), ["b", session.id.as_str(), "d"], "{q:?}");
        assert!(q.complete && !q.truncated);
        assert_eq!(
            q.waiters.iter().map(|w| w.position).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let (b, s, d) = (&q.waiters[0], &q.waiters[1], &q.waiters[2]);
        assert_eq!((b.priority, b.session.as_deref()), (3, None));
        assert_eq!(s.session.as_deref(), Some(session.id.as_str()));
        assert_eq!(b.broker, q.waiters[0].broker);
        assert_ne!(
            b.broker, d.broker,
            "b waits on the first broker, d on the second"
        );
        assert_eq!(s.broker, d.broker);
        assert!(b.deadline > b.waiting_since && b.waiting_since <= s.waiting_since);
        assert!(q.waiters.iter().all(|w| !w.in_memory && w.mode.is_none()));
    }
    let page = c1
        .get("/v1/locks/q/waiters?limit=2")
        .await
        .unwrap()
        .ok::<KeyWaiters>();
    assert_eq!((page.waiters.len(), page.truncated), (2, true));
    assert_eq!(
        c1.get("/v1/locks/q/waiters?limit=0").await.unwrap().code(),
        Some(ErrorCode::BadRequest)
    );
    assert_eq!(
        c1.get("/v1/locks/q/waiters?x=1").await.unwrap().code(),
        Some(ErrorCode::BadRequest)
    );

    // Served in that order.
    c1.release("q", "holder", held.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    let b: Lease = b.await.unwrap().ok();
    assert_eq!(
        owners(&waiters(&c2, "locks", "q").await),
        [session.id.as_str(), "d"]
    );
    c1.release("q", "b", b.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    let s: Lease = s.await.unwrap().ok();
    assert_eq!(owners(&waiters(&c1, "locks", "q").await), ["d"]);
    c2.release("q", &session.id, s.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    assert_eq!(d.await.unwrap().status, 200);
    assert!(waiters(&c1, "locks", "q").await.waiters.is_empty());
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn waiters_in_a_brokers_memory_are_shown_by_every_broker() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());
    // A contended key: its lease handed on through the first broker, whose
    // next waiters then wait in its memory.
    let held: Lease = c1.acquire("m", "h0", 30_000, 0).await.unwrap().ok();
    let w1 = wait(
        &c1,
        "/v1/locks/m/acquire".into(),
        json!({"owner": "w1", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("w1 queues", WAIT, || async {
        waiters(&c1, "locks", "m").await.waiters.len() == 1
    })
    .await;
    c1.release("m", "h0", held.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    let w1: Lease = w1.await.unwrap().ok();
    let w2 = wait(
        &c1,
        "/v1/locks/m/acquire".into(),
        json!({"owner": "w2", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    // One after the other: their order is the order they arrive in.
    eventually("w2 waits", WAIT, || async {
        waiters(&c2, "locks", "m").await.waiters.len() == 1
    })
    .await;
    let w3 = wait(
        &c1,
        "/v1/locks/m/acquire".into(),
        json!({"owner": "w3", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("w2 and w3 wait", WAIT, || async {
        waiters(&c2, "locks", "m").await.waiters.len() == 2
    })
    .await;
    let q = waiters(&c2, "locks", "m").await;
    assert_eq!(owners(&q), ["w2", "w3"], "{q:?}");
    assert!(q.complete);
    // Where they wait, the second broker learned from the first.
    assert!(q.waiters.iter().all(|w| w.in_memory), "{q:?}");
    let graph: WaitsFor = c2.get("/v1/waits-for?prefix=m").await.unwrap().ok();
    let edges: Vec<_> = graph
        .edges
        .iter()
        .map(|e| (e.waiter.owner.as_str(), e.holder.owner.as_str()))
        .collect();
    assert_eq!(edges, [("w2", "w1"), ("w3", "w1")], "{graph:?}");
    c1.release("m", "w1", w1.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    let w2: Lease = w2.await.unwrap().ok();
    c1.release("m", "w2", w2.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    assert_eq!(w3.await.unwrap().status, 200);
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn semaphore_rwlock_and_election_queues_say_what_each_waits_for() {
    let broker = Broker::start().await;
    let c = broker.client();
    let ok = c
        .post(
            "/v1/semaphores/qs/acquire",
            &json!({"owner": "p", "permits": 1, "ttl_ms": 30_000}),
        )
        .await
        .unwrap();
    assert_eq!(ok.status, 200, "{ok:?}");
    let _p = wait(
        &c,
        "/v1/semaphores/qs/acquire".into(),
        json!({"owner": "p2", "permits": 1, "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    let ok = c
        .post(
            "/v1/rwlocks/qr/acquire",
            &json!({"owner": "r", "mode": "read", "ttl_ms": 30_000}),
        )
        .await
        .unwrap();
    assert_eq!(ok.status, 200, "{ok:?}");
    let _w = wait(
        &c,
        "/v1/rwlocks/qr/acquire".into(),
        json!({"owner": "writer", "mode": "write", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("the writer queues", WAIT, || async {
        waiters(&c, "rwlocks", "qr").await.waiters.len() == 1
    })
    .await;
    let _r = wait(
        &c,
        "/v1/rwlocks/qr/acquire".into(),
        json!({"owner": "reader", "mode": "read", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    let ok = c
        .post(
            "/v1/elections/qe/campaign",
            &json!({"candidate": "leader", "ttl_ms": 30_000}),
        )
        .await
        .unwrap();
    assert_eq!(ok.status, 200, "{ok:?}");
    let _e = wait(
        &c,
        "/v1/elections/qe/campaign".into(),
        json!({"candidate": "next", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("every waiter queues", WAIT, || async {
        waiters(&c, "semaphores", "qs").await.waiters.len() == 1
            && waiters(&c, "rwlocks", "qr").await.waiters.len() == 2
            && waiters(&c, "elections", "qe").await.waiters.len() == 1
    })
    .await;
    let rw = waiters(&c, "rwlocks", "qr").await;
    let modes: Vec<_> = rw
        .waiters
        .iter()
        .map(|w| (w.owner.as_str(), w.mode))
        .collect();
    assert_eq!(
        modes,
        [
            ("writer", Some(RwMode::Write)),
            ("reader", Some(RwMode::Read))
        ]
    );
    assert_eq!(owners(&waiters(&c, "semaphores", "qs").await), ["p2"]);
    assert_eq!(owners(&waiters(&c, "elections", "qe").await), ["next"]);

    // The graph: the writer waits for the reader; the reader queued
    // behind it waits for no holder (no writer holds).
    let graph: WaitsFor = c.get("/v1/waits-for?prefix=q").await.unwrap().ok();
    let mut edges: Vec<_> = graph
        .edges
        .iter()
        .map(|e| {
            (
                e.kind.as_str(),
                e.storage_key.as_str(),
                e.waiter.owner.as_str(),
                e.holder.owner.as_str(),
            )
        })
        .collect();
    edges.sort();
    assert_eq!(
        edges,
        [
            ("election", "qe", "next", "leader"),
            ("rwlock", "qr", "writer", "r"),
            ("semaphore", "qs", "p2", "p"),
        ]
    );
    assert!(graph.cycles.is_empty() && graph.complete && !graph.truncated);
    broker.stop().await;
}

#[tokio::test]
async fn the_graph_names_sessions_and_flags_owners_waiting_for_each_other_across_brokers() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());
    // Three sessions in a chain (a ring of sessions the broker refuses,
    // tests/deadlocks.rs): s0 waits for s1's key, s1 for s2's.
    let mut sessions = Vec::new();
    for i in 0..3 {
        let s = c1.open_session(&json!({"ttl_ms": 30_000})).await;
        let ok = c1
            .post(
                &format!("/v1/locks/cy-{i}/acquire"),
                &json!({"session": s.id, "owner": format!("o{i}")}),
            )
            .await
            .unwrap();
        assert_eq!(ok.status, 200, "{ok:?}");
        sessions.push(s);
    }
    let mut waits = Vec::new();
    for (i, c) in [(0, &c1), (1, &c2)] {
        waits.push(wait(
            c,
            format!("/v1/locks/cy-{}/acquire", i + 1),
            json!({"session": sessions[i].id, "owner": format!("w{i}"), "wait_ms": 20_000}),
        ));
    }
    // Two plain owners waiting for each other round, through both brokers
    // (outside sessions: no deadlock check, they wait out their wait_ms).
    let p0: Lease = c1.acquire("cy-p0", "p0", 30_000, 0).await.unwrap().ok();
    let p1: Lease = c2.acquire("cy-p1", "p1", 30_000, 0).await.unwrap().ok();
    waits.push(wait(
        &c1,
        "/v1/locks/cy-p1/acquire".into(),
        json!({"owner": "p0", "ttl_ms": 30_000, "wait_ms": 20_000}),
    ));
    waits.push(wait(
        &c2,
        "/v1/locks/cy-p0/acquire".into(),
        json!({"owner": "p1", "ttl_ms": 30_000, "wait_ms": 20_000}),
    ));
    // A plain wait outside any cycle.
    let x: Lease = c1.acquire("cy-x", "xholder", 30_000, 0).await.unwrap().ok();
    waits.push(wait(
        &c2,
        "/v1/locks/cy-x/acquire".into(),
        json!({"owner": "xwaiter", "ttl_ms": 30_000, "wait_ms": 20_000}),
    ));
    eventually("everyone waits", WAIT, || async {
        let g: WaitsFor = c2.get("/v1/waits-for?prefix=cy-").await.unwrap().ok();
        g.edges.len() == 5
    })
    .await;
    let graph: WaitsFor = c1.get("/v1/waits-for?prefix=cy-").await.unwrap().ok();
    assert!(graph.complete);
    assert_eq!(graph.cycles.len(), 1, "{graph:?}");
    let mut in_cycle: Vec<_> = graph.cycles[0].iter().map(|p| p.owner.clone()).collect();
    in_cycle.sort();
    assert_eq!(in_cycle, ["p0", "p1"]);
    for e in &graph.edges {
        let cyclic = e.storage_key == "cy-p0" || e.storage_key == "cy-p1";
        assert_eq!(e.in_cycle, cyclic, "{e:?}");
        if ["cy-1", "cy-2"].contains(&e.storage_key.as_str()) {
            // Parties are the sessions, whatever owner holds or waits.
            assert!(
                e.waiter.session.is_some() && e.holder.session.is_some(),
                "{e:?}"
            );
        }
    }
    // Another prefix sees nothing of it.
    let none: WaitsFor = c1.get("/v1/waits-for?prefix=zz").await.unwrap().ok();
    assert!(none.edges.is_empty() && none.cycles.is_empty());
    assert_eq!(
        c1.get("/v1/waits-for?limit=1001").await.unwrap().code(),
        Some(ErrorCode::BadRequest)
    );
    assert_eq!(
        c1.post("/v1/waits-for", &json!({})).await.unwrap().status,
        405
    );
    // Another tenant sees none of it.
    let other = first.client_with(Some(lockbroker_tests::OTHER_KEY));
    let theirs: WaitsFor = other.get("/v1/waits-for").await.unwrap().ok();
    assert!(theirs.edges.is_empty());
    // One release breaks the cycle.
    c1.release("cy-p0", "p0", p0.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    eventually("the cycle is gone", WAIT, || async {
        let g: WaitsFor = c1.get("/v1/waits-for?prefix=cy-").await.unwrap().ok();
        g.cycles.is_empty()
    })
    .await;
    c2.release("cy-p1", "p1", p1.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    for s in &sessions {
        assert_eq!(c1.close_session(&s.id).await.status, 200);
    }
    c1.release("cy-x", "xholder", x.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    for w in waits {
        let _ = w.await.unwrap();
    }
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn contention_adds_up_every_brokers_counts_most_contended_first() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), config(&first.db)).await;
    let (c1, c2) = (first.client(), second.client());
    // "hot-a": held, tried and refused through both brokers, waited for
    // and handed on; "hot-b": one plain grant; "hot-s": a full semaphore.
    let held: Lease = c1.acquire("hot-a", "h", 30_000, 0).await.unwrap().ok();
    for c in [&c1, &c2, &c2] {
        assert_eq!(
            c.acquire("hot-a", "t", 30_000, 0).await.unwrap().code(),
            Some(ErrorCode::LockHeld)
        );
    }
    let waiter = wait(
        &c2,
        "/v1/locks/hot-a/acquire".into(),
        json!({"owner": "w", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("w queues", WAIT, || async {
        waiters(&c1, "locks", "hot-a").await.waiters.len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // a wait to measure
    c1.release("hot-a", "h", held.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    let w: Lease = waiter.await.unwrap().ok();
    let late = wait(
        &c1,
        "/v1/locks/hot-a/acquire".into(),
        json!({"owner": "late", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("late queues", WAIT, || async {
        waiters(&c2, "locks", "hot-a").await.waiters.len() == 1
    })
    .await;
    assert_eq!(
        c2.acquire("hot-b", "b", 30_000, 0).await.unwrap().status,
        200
    );
    let ok = c2
        .post(
            "/v1/semaphores/hot-s/acquire",
            &json!({"owner": "s", "permits": 1, "ttl_ms": 30_000}),
        )
        .await
        .unwrap();
    assert_eq!(ok.status, 200);
    let full = c1
        .post(
            "/v1/semaphores/hot-s/acquire",
            &json!({"owner": "s2", "permits": 1, "ttl_ms": 30_000}),
        )
        .await
        .unwrap();
    assert_eq!(full.code(), Some(ErrorCode::SemaphoreFull));

    let hot: lockbroker_api::Contention = c2
        .get("/v1/contention?prefix=hot-&window_s=55")
        .await
        .unwrap()
        .ok();
    assert_eq!(hot.window_s, 60);
    assert!(hot.complete);
    // The held leases as the reaper counted them (at its first pass,
    // before these, then every 15 s).
    assert!(hot.held.is_some(), "{hot:?}");
    let names: Vec<_> = hot
        .keys
        .iter()
        .map(|k| (k.kind.as_str(), k.storage_key.as_str()))
        .collect();
    assert_eq!(
        names,
        [("lock", "hot-a"), ("semaphore", "hot-s"), ("lock", "hot-b")],
        "{hot:?}"
    );
    let a = &hot.keys[0];
    // Every broker's counts: the three refusals (one through the first,
    // two through the second), two grants (h, then w handed off).
    assert_eq!((a.grants, a.handoffs, a.refusals), (2, 1, 3), "{a:?}");
    assert!(a.wait_p99_ms >= 256, "{a:?}");
    assert_eq!(a.waiters, 1, "late waits now");
    assert_eq!(
        a.holders
            .iter()
            .map(|h| h.owner.as_str())
            .collect::<Vec<_>>(),
        ["w"]
    );
    let s = &hot.keys[1];
    assert_eq!((s.grants, s.refusals, s.holders.len()), (1, 1, 1), "{s:?}");
    let b = &hot.keys[2];
    assert_eq!(
        (b.grants, b.handoffs, b.refusals, b.wait_p50_ms <= 1024),
        (1, 0, 0, true),
        "{b:?}"
    );
    let top1: lockbroker_api::Contention = c1
        .get("/v1/contention?prefix=hot-&top=1")
        .await
        .unwrap()
        .ok();
    assert_eq!(top1.keys.len(), 1);
    assert_eq!(top1.keys[0].storage_key, "hot-a");
    for bad in ["window_s=0", "window_s=301", "top=0", "top=101", "x=1"] {
        let reply = c1.get(&format!("/v1/contention?{bad}")).await.unwrap();
        assert_eq!(
            reply.code(),
            Some(ErrorCode::BadRequest),
            "{bad}: {reply:?}"
        );
    }
    // Another tenant sees none of it.
    let other = first.client_with(Some(lockbroker_tests::OTHER_KEY));
    let theirs: lockbroker_api::Contention = other.get("/v1/contention").await.unwrap().ok();
    assert!(theirs.keys.is_empty());
    c2.release("hot-a", "w", w.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    assert_eq!(late.await.unwrap().status, 200);
    second.shutdown().await;
    first.stop().await;
}

#[tokio::test]
async fn the_admin_sees_any_tenants_contention_queues_and_graph() {
    let broker = Broker::start().await;
    let c = broker.client();
    let held: Lease = c.acquire("adm", "h", 30_000, 0).await.unwrap().ok();
    let waiter = wait(
        &c,
        "/v1/locks/adm/acquire".into(),
        json!({"owner": "w", "ttl_ms": 30_000, "wait_ms": 20_000}),
    );
    eventually("w queues", WAIT, || async {
        waiters(&c, "locks", "adm").await.waiters.len() == 1
    })
    .await;
    let admin = broker.client_with(Some(lockbroker_tests::ADMIN));
    let q: KeyWaiters = admin
        .get("/v1/admin/tenants/default/locks/adm/waiters")
        .await
        .unwrap()
        .ok();
    assert_eq!(owners(&q), ["w"]);
    let g: WaitsFor = admin
        .get("/v1/admin/tenants/default/waits-for?prefix=adm")
        .await
        .unwrap()
        .ok();
    assert_eq!(g.edges.len(), 1);
    assert_eq!(
        (
            g.edges[0].waiter.owner.as_str(),
            g.edges[0].holder.owner.as_str()
        ),
        ("w", "h")
    );
    let hot: lockbroker_api::Contention = admin
        .get("/v1/admin/tenants/default/contention?prefix=adm")
        .await
        .unwrap()
        .ok();
    assert_eq!(hot.keys[0].storage_key, "adm");
    // Another tenant's view is its own; a tenant key is no admin token;
    // an unknown tenant is 404.
    let theirs: WaitsFor = admin
        .get("/v1/admin/tenants/other/waits-for")
        .await
        .unwrap()
        .ok();
    assert!(theirs.edges.is_empty());
    for path in [
        "/v1/admin/tenants/default/contention",
        "/v1/admin/tenants/default/waits-for",
        "/v1/admin/tenants/default/locks/adm/waiters",
    ] {
        assert_eq!(c.get(path).await.unwrap().status, 403, "{path}");
        let unknown = path.replace("/default/", "/nobody/");
        assert_eq!(admin.get(&unknown).await.unwrap().status, 404, "{unknown}");
    }
    let bad = admin
        .get("/v1/admin/tenants/default/contention?top=0")
        .await
        .unwrap();
    assert_eq!(bad.code(), Some(ErrorCode::BadRequest));
    assert_eq!(
        admin
            .post("/v1/admin/tenants/default/waits-for", &json!({}))
            .await
            .unwrap()
            .status,
        405
    );
    c.release("adm", "h", held.token)
        .await
        .unwrap()
        .ok::<lockbroker_api::ReleaseResponse>();
    assert_eq!(waiter.await.unwrap().status, 200);
    broker.stop().await;
}
