//! Lock history (`GET /v1/locks/{key}/history`), lock-delay and minimum
//! hold, against the real broker and MariaDB.
//!
//! History rows must match the operations one to one on every path that
//! changes a lock: the group-commit batches and the stored procedures (the
//! `default` tenant, built-in FIFO policy) and the general path (a tenant
//! with a minimum hold takes it for everything); changes that answer an
//! error leave no event. Delays are judged by the database clock: the
//! events' own `at` (written from `NOW(6)` and the leases' `expires_at`)
//! show that no grant came early.
//!
//! A tenant's policy may override the delays per key (`timing`, exported
//! by `plugins/fixtures/timing`: `hold-*` keys get a minimum hold,
//! `delay-*` a lock-delay, `paced-*` both (short), `none-*` neither, `trap-*` trap, `huge-*` ask
//! for two days): those keys are held by the database clock as with
//! config, the tenant's other keys are not; a hot swap changes them; a
//! failing `timing` and a component without it leave the config in force.

use std::time::Duration;

use chrono::NaiveDateTime;
use lockbroker::config::TenantConfig;
use lockbroker_api::{ErrorCode, LockEventKind, LockHistory};
use lockbroker_tests::{
    config, db_conn, dist, eventually, fresh_db_name, Broker, Client, PolicyDir, ADMIN,
};
use serde_json::json;

/// How long a test waits for a condition (an expiry by the database clock,
/// a waiter's arrival, a pruning pass).
const WAIT: Duration = Duration::from_secs(15);

/// A broker whose config also has `tenant` (key `{name}-key`).
async fn broker_with(tenant: TenantConfig) -> Broker {
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.tenants.push(tenant);
    cfg.validate().unwrap();
    Broker::start_with(db, cfg).await
}

/// A broker whose config also has `tenant`, its policy files in `dir`.
async fn broker_with_policies(tenant: TenantConfig, dir: &PolicyDir) -> Broker {
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.policy_dir = dir.0.clone();
    cfg.tenants.push(tenant);
    cfg.validate().unwrap();
    Broker::start_with(db, cfg).await
}

/// A broker whose tenant `name` (API key `<name>-key`) runs `component`
/// (a file of `plugins/dist`) with the configured delays; the policy
/// directory (kept as long as the broker) and a client of the tenant.
async fn broker_on_policy(
    component: &str,
    name: &str,
    lock_delay_ms: u64,
    min_hold_ms: u64,
) -> (PolicyDir, Broker, Client) {
    let dir = PolicyDir::new("lb-timing");
    dir.install(component, "policy.wasm");
    let tenant = tenant_with_policy(name, lock_delay_ms, min_hold_ms, "policy.wasm");
    let broker = broker_with_policies(tenant, &dir).await;
    let c = broker.client_with(Some(&format!("{name}-key")));
    (dir, broker, c)
}

/// [`tenant`] with the policy file `policy`.
fn tenant_with_policy(
    name: &str,
    lock_delay_ms: u64,
    min_hold_ms: u64,
    policy: &str,
) -> TenantConfig {
    TenantConfig {
        policy: Some(policy.to_owned()),
        // The delays are tested, not the deadline: a loaded machine can
        // deschedule a call past the 5 ms default.
        policy_deadline_ms: Some(200),
        ..tenant(name, lock_delay_ms, min_hold_ms)
    }
}

fn tenant(name: &str, lock_delay_ms: u64, min_hold_ms: u64) -> TenantConfig {
    TenantConfig {
        lock_delay_ms,
        min_hold_ms,
        ..TenantConfig::new(name, &format!("{name}-key"))
    }
}

/// The history of `key` as (event, owner, token), newest first, and the
/// whole answer.
async fn history(c: &Client, key: &str) -> (Vec<(LockEventKind, String, u64)>, LockHistory) {
    c.history("locks", key).await
}

fn at(text: &str) -> NaiveDateTime {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .naive_utc()
}

/// `at` of the newest event of `kind` (by `owner`).
fn at_of(h: &LockHistory, kind: LockEventKind, owner: &str) -> NaiveDateTime {
    let e = h
        .events
        .iter()
        .find(|e| e.event == kind && e.owner == owner)
        .unwrap_or_else(|| panic!("no {kind:?} of {owner} in {h:?}"));
    at(&e.at)
}

async fn token_of(c: &Client, key: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> u64 {
    let reply = c.acquire(key, owner, ttl_ms, wait_ms).await.unwrap();
    assert_eq!(reply.status, 200, "{owner}: {}", reply.text());
    reply.json()["token"].as_u64().unwrap()
}

async fn released(c: &Client, key: &str, owner: &str, token: u64) {
    let reply = c.release(key, owner, token).await.unwrap();
    assert_eq!(reply.status, 200, "{owner}: {}", reply.text());
}

/// Waits until the database clock is past `expires_at` (an answer's).
async fn until_expired_by_db(db_name: &str, expires_at: &str) {
    let expires = at(expires_at);
    eventually("the lease expired by the database clock", WAIT, || async {
        let mut db = db_conn(db_name).await;
        let now: NaiveDateTime = sqlx::query_scalar("SELECT NOW(6)")
            .fetch_one(&mut db)
            .await
            .unwrap();
        now > expires
    })
    .await;
}

async fn waiters(c: &Client, key: &str) -> u64 {
    let reply = c.status(key).await.unwrap();
    reply.json()["waiters"].as_u64().unwrap()
}

/// Every kind of change, and changes that fail, on one key: the history is
/// exactly the changes that happened.
async fn one_to_one(broker: &Broker, c: &Client, tenant: &str) {
    use LockEventKind::*;
    let key = "ledger";
    let t1 = token_of(c, key, "a", 30_000, 0).await;
    // A re-entry and the release of one of two holds: not events.
    assert_eq!(token_of(c, key, "a", 30_000, 0).await, t1);
    released(c, key, "a", t1).await;
    // Refused: nothing happens, nothing is recorded.
    let busy = c.acquire(key, "x", 30_000, 0).await.unwrap();
    assert_eq!(busy.code(), Some(ErrorCode::LockHeld), "{}", busy.text());
    let lost = c.release(key, "a", t1 + 100).await.unwrap();
    assert_eq!(lost.code(), Some(ErrorCode::LeaseLost), "{}", lost.text());
    let lost = c.release(key, "x", t1).await.unwrap();
    assert_eq!(lost.code(), Some(ErrorCode::LeaseLost), "{}", lost.text());
    released(c, key, "a", t1).await;

    // A waiter is handed the lock by the release.
    let t2 = token_of(c, key, "b", 30_000, 0).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { token_of(&c, key, "c", 30_000, 10_000).await })
    };
    eventually("c waits", WAIT, || async { waiters(c, key).await == 1 }).await;
    released(c, key, "b", t2).await;
    let t3 = waiter.await.unwrap();
    assert!(t3 > t2);

    // An operator ends c's lease; the next grant has a greater token.
    let admin = broker.client_with(Some(ADMIN));
    let forced = admin
        .post(
            &format!("/v1/admin/tenants/{tenant}/locks/{key}/release"),
            &json!({}),
        )
        .await
        .unwrap();
    assert_eq!(forced.status, 200, "{}", forced.text());
    let t4 = token_of(c, key, "d", 30_000, 0).await;
    assert!(t4 > t3);
    released(c, key, "d", t4).await;

    // A lease that expires: recorded by the next grant (a one-try grant,
    // then a waiting one), at its expiry.
    let e = c.acquire(key, "e", 200, 0).await.unwrap();
    let t5 = e.json()["token"].as_u64().unwrap();
    until_expired_by_db(&broker.db, e.json()["expires_at"].as_str().unwrap()).await;
    let f = c.acquire(key, "f", 200, 0).await.unwrap();
    assert_eq!(f.status, 200, "{}", f.text());
    let t6 = f.json()["token"].as_u64().unwrap();
    until_expired_by_db(&broker.db, f.json()["expires_at"].as_str().unwrap()).await;
    let t7 = token_of(c, key, "g", 30_000, 5_000).await;
    released(c, key, "g", t7).await;

    let (events, h) = history(c, key).await;
    let s = |o: &str| o.to_owned();
    assert_eq!(
        events,
        vec![
            (Released, s("g"), t7),
            (Granted, s("g"), t7),
            (Expired, s("f"), t6),
            (Granted, s("f"), t6),
            (Expired, s("e"), t5),
            (Granted, s("e"), t5),
            (Released, s("d"), t4),
            (Granted, s("d"), t4),
            (ForceReleased, s("c"), t3),
            (HandedOff, s("c"), t3),
            (Released, s("b"), t2),
            (Granted, s("b"), t2),
            (Released, s("a"), t1),
            (Granted, s("a"), t1),
        ],
        "{tenant}: {h:?}"
    );
    // An expiry is at its lease's end (which the acquire answered to the
    // millisecond), before the grant that replaced it.
    let expired_at = at_of(&h, Expired, "e");
    let answered = at(e.json()["expires_at"].as_str().unwrap());
    let off_us = (expired_at - answered).num_microseconds().unwrap();
    assert!((0..1000).contains(&off_us), "{expired_at} vs {answered}");
    assert!(expired_at <= at_of(&h, Granted, "f"), "{h:?}");
    // Tokens only grow from the oldest event to the newest.
    let tokens: Vec<u64> = events.iter().rev().map(|e| e.2).collect();
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{tokens:?}");
    // `limit` keeps the newest.
    let reply = c
        .get(&format!("/v1/locks/{key}/history?limit=2"))
        .await
        .unwrap();
    let two: LockHistory = reply.parse();
    assert_eq!(two.events, h.events[..2].to_vec());
}

#[tokio::test]
async fn history_matches_the_changes_one_to_one_on_the_fast_paths() {
    // The default tenant: one-try grants and lone releases in group-commit
    // batches or the release procedure, waits in the acquire procedure.
    let broker = Broker::start().await;
    one_to_one(&broker, &broker.client(), "default").await;
    broker.stop().await;
}

#[tokio::test]
async fn history_matches_the_changes_one_to_one_on_the_general_path() {
    // A minimum hold of 1 ms routes the tenant to the general path for
    // everything, and changes nothing else the scenario can see.
    let broker = broker_with(tenant("general", 0, 1)).await;
    let c = broker.client_with(Some("general-key"));
    one_to_one(&broker, &c, "general").await;
    broker.stop().await;
}

#[tokio::test]
async fn a_multilock_records_each_key_and_one_that_fails_records_nothing() {
    let broker = Broker::start().await;
    let c = broker.client();
    let held = token_of(&c, "m2", "z", 30_000, 0).await;
    // All or none: m2 is held, so m1 is not granted either.
    let refused = c
        .post(
            "/v1/multilock/acquire",
            &json!({"keys": ["m1", "m2"], "owner": "multi", "ttl_ms": 30000}),
        )
        .await
        .unwrap();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::LockHeld),
        "{}",
        refused.text()
    );
    assert!(history(&c, "m1").await.0.is_empty());
    released(&c, "m2", "z", held).await;
    let granted = c
        .post(
            "/v1/multilock/acquire",
            &json!({"keys": ["m1", "m2"], "owner": "multi", "ttl_ms": 30000}),
        )
        .await
        .unwrap();
    assert_eq!(granted.status, 200, "{}", granted.text());
    let locks = granted.json()["locks"].as_array().unwrap().clone();
    let released_all = c
        .post(
            "/v1/multilock/release",
            &json!({"owner": "multi", "locks": locks.iter().map(|l| json!({"key": l["key"], "token": l["token"]})).collect::<Vec<_>>()}),
        )
        .await
        .unwrap();
    assert_eq!(released_all.status, 200, "{}", released_all.text());
    for l in &locks {
        let key = l["key"].as_str().unwrap();
        let token = l["token"].as_u64().unwrap();
        let (events, _) = history(&c, key).await;
        assert_eq!(
            events[..2].to_vec(),
            vec![
                (LockEventKind::Released, "multi".to_owned(), token),
                (LockEventKind::Granted, "multi".to_owned(), token),
            ],
            "{key}"
        );
    }
    broker.stop().await;
}

#[tokio::test]
async fn the_history_limit_is_checked() {
    let broker = Broker::start().await;
    let c = broker.client();
    for query in [
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=-1",
        "limit=",
        "other=1",
    ] {
        let reply = c
            .get(&format!("/v1/locks/k/history?{query}"))
            .await
            .unwrap();
        assert_eq!(reply.status, 400, "{query}: {}", reply.text());
        assert_eq!(reply.code(), Some(ErrorCode::BadRequest), "{query}");
    }
    for query in ["", "?limit=1", "?limit=1000"] {
        let reply = c.get(&format!("/v1/locks/k/history{query}")).await.unwrap();
        assert_eq!(reply.status, 200, "{query}: {}", reply.text());
        assert_eq!(reply.json(), json!({"events": []}));
    }
    let reply = c.post("/v1/locks/k/history", &json!({})).await.unwrap();
    assert_eq!(reply.status, 405, "{}", reply.text());
    // Another tenant's history of the same key is its own.
    let a = token_of(&c, "k", "a", 30_000, 0).await;
    let other = broker.client_with(Some(lockbroker_tests::OTHER_KEY));
    assert!(history(&other, "k").await.0.is_empty());
    assert_eq!(history(&c, "k").await.0.len(), 1, "{a}");
    broker.stop().await;
}

#[tokio::test]
async fn a_lock_delay_holds_an_expired_key_by_the_database_clock() {
    const DELAY_MS: i64 = 1_500;
    let broker = broker_with(tenant("delayed", DELAY_MS as u64, 0)).await;
    let c = broker.client_with(Some("delayed-key"));
    let key = "job";

    // A clean release does not delay.
    let t = token_of(&c, key, "a", 30_000, 0).await;
    released(&c, key, "a", t).await;
    let t = token_of(&c, key, "b", 300, 0).await;

    // b's lease expires: nobody gets the key until DELAY_MS after.
    let expires_at = c.status(key).await.unwrap().json()["expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    until_expired_by_db(&broker.db, &expires_at).await;
    let refused = c.acquire(key, "c", 30_000, 0).await.unwrap();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::LockHeld),
        "{}",
        refused.text()
    );
    let hint = refused.json()["error"]["retry_after_ms"].as_u64().unwrap();
    assert!((1..=DELAY_MS as u64).contains(&hint), "{hint}");
    // A waiter is granted once the delay is over, not long after.
    let started = tokio::time::Instant::now();
    let t2 = token_of(&c, key, "d", 30_000, 10_000).await;
    assert!(t2 > t);
    assert!(
        started.elapsed() < Duration::from_millis(DELAY_MS as u64 + 2_000),
        "{:?}",
        started.elapsed()
    );

    let (events, h) = history(&c, key).await;
    assert_eq!(
        events[1],
        (LockEventKind::Expired, "b".to_owned(), t),
        "{h:?}"
    );
    let grant = h.events[0].clone();
    assert!(
        matches!(
            grant.event,
            LockEventKind::Granted | LockEventKind::HandedOff
        ),
        "{h:?}"
    );
    assert_eq!((grant.owner.as_str(), grant.token), ("d", t2));
    let expired = at_of(&h, LockEventKind::Expired, "b");
    let granted = at(&grant.at);
    assert!(
        granted >= expired + chrono::Duration::milliseconds(DELAY_MS),
        "granted at {granted}, expired at {expired}"
    );
    broker.stop().await;
}

/// Released at once with a waiter queued behind it, a key under a minimum
/// hold of `hold_ms`: a one-try acquire meanwhile is refused with when the
/// hold ends, the waiter is handed the key when it ends by the database
/// clock (the events' own times), and the history is exactly grant,
/// release, handoff. The waiter's token.
async fn released_key_held_for(c: &Client, key: &'static str, hold_ms: i64) -> u64 {
    let t1 = token_of(c, key, "a", 30_000, 0).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { token_of(&c, key, "w", 30_000, 10_000).await })
    };
    eventually("w waits", WAIT, || async { waiters(c, key).await == 1 }).await;
    released(c, key, "a", t1).await;
    let refused = c.acquire(key, "b", 30_000, 0).await.unwrap();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::LockHeld),
        "{}",
        refused.text()
    );
    let hint = refused.json()["error"]["retry_after_ms"].as_u64().unwrap();
    assert!((1..=hold_ms as u64).contains(&hint), "{hint}");
    let t2 = waiter.await.unwrap();
    assert!(t2 > t1);

    let (events, h) = history(c, key).await;
    assert_eq!(
        events,
        vec![
            (LockEventKind::HandedOff, "w".to_owned(), t2),
            (LockEventKind::Released, "a".to_owned(), t1),
            (LockEventKind::Granted, "a".to_owned(), t1),
        ],
        "{h:?}"
    );
    let granted = at_of(&h, LockEventKind::Granted, "a");
    let handed = at_of(&h, LockEventKind::HandedOff, "w");
    assert!(
        handed >= granted + chrono::Duration::milliseconds(hold_ms),
        "handed at {handed}, first granted at {granted}"
    );
    t2
}

#[tokio::test]
async fn a_minimum_hold_keeps_a_released_key_until_its_period_ends() {
    const HOLD_MS: i64 = 1_500;
    let broker = broker_with(tenant("held", 0, HOLD_MS as u64)).await;
    let c = broker.client_with(Some("held-key"));
    let key = "nightly";

    let t2 = released_key_held_for(&c, key, HOLD_MS).await;

    // The same owner is held back too: the period is the key's.
    released(&c, key, "w", t2).await;
    let again = c.acquire(key, "w", 30_000, 0).await.unwrap();
    assert_eq!(again.code(), Some(ErrorCode::LockHeld), "{}", again.text());
    broker.stop().await;
}

#[tokio::test]
async fn old_history_is_pruned_in_bounded_batches() {
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.history_retention_hours = 1;
    let broker = Broker::start_with(db, cfg).await;
    let c = broker.client();
    let t = token_of(&c, "recent", "a", 30_000, 0).await;
    // 2,500 events two hours old: more than two pruning batches.
    let mut conn = db_conn(&broker.db).await;
    for _ in 0..5 {
        let tuples =
            vec!["('default', 0, 'old', 1, 'o', 1, NOW(6) - INTERVAL 2 HOUR)"; 500].join(", ");
        sqlx::query(&format!(
            "INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at) VALUES {tuples}"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    eventually("old events are pruned", Duration::from_secs(30), || async {
        let mut conn = db_conn(&broker.db).await;
        let left: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM lock_events WHERE lock_key = 'old'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        left == 0
    })
    .await;
    // Recent events stay.
    assert_eq!(
        history(&c, "recent").await.0,
        vec![(LockEventKind::Granted, "a".to_owned(), t)]
    );
    let metrics = c.get("/metrics").await.unwrap().text();
    assert!(
        metrics.contains("lockbroker_history_pruned_total 2500"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("pruned"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    broker.stop().await;
}

/// What the clients of a stress run saw: grants and clean releases, as
/// (key, owner, token).
#[derive(Default)]
struct Seen {
    grants: Vec<(usize, String, u64)>,
    releases: Vec<(usize, String, u64)>,
}

/// Clients on a few keys, waiting or trying once, some letting their short
/// leases expire; then every key's `lock_events` (by id) must be a
/// well-formed sequence (each grant ended before the next, by its own
/// owner and token, tokens increasing) and match what the clients saw one
/// to one; under delays, no grant earlier than they allow. The keys are
/// `{prefix}0`, `{prefix}1`, ...
async fn stress_history(
    broker: &Broker,
    c: &Client,
    tenant: &str,
    prefix: &str,
    delay_ms: i64,
    hold_ms: i64,
) {
    const CLIENTS: usize = 12;
    const KEYS: usize = 3;
    const RUN_FOR: Duration = Duration::from_secs(4);
    const MAX_ROUNDS: usize = 10_000;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let deadline = tokio::time::Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let (c, seen, prefix) = (c.clone(), seen.clone(), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let owner = format!("c{client}");
            for n in 0..MAX_ROUNDS {
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
                let key = (client + n) % KEYS;
                let name = format!("{prefix}{key}");
                let wait_ms = if client % 2 == 0 { 1_000 } else { 0 };
                // Every eighth hold is abandoned: its short lease expires.
                let abandon = n % 8 == 7;
                let ttl_ms = if abandon { 100 } else { 5_000 };
                // An abandoned lease's owner never comes back (a re-entry
                // would renew it).
                let owner = if abandon {
                    format!("{owner}-gone-{n}")
                } else {
                    owner.clone()
                };
                let reply = c.acquire(&name, &owner, ttl_ms, wait_ms).await.unwrap();
                match reply.status {
                    200 => {}
                    409 => continue,
                    other => panic!("acquire answered {other}: {}", reply.text()),
                }
                let token = reply.json()["token"].as_u64().unwrap();
                // A re-entry (of a lease this client abandoned, still
                // live) is no grant, and its release frees nothing.
                if reply.json()["hold_count"] == 1 {
                    seen.lock()
                        .unwrap()
                        .grants
                        .push((key, owner.clone(), token));
                }
                if abandon {
                    continue;
                }
                let r = c.release(&name, &owner, token).await.unwrap();
                assert_eq!(r.status, 200, "{}", r.text());
                if r.json()["released"] == true {
                    seen.lock()
                        .unwrap()
                        .releases
                        .push((key, owner.clone(), token));
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert!(
        seen.grants.len() >= 10,
        "too few grants: {}",
        seen.grants.len()
    );
    let mut db = db_conn(&broker.db).await;
    let mut expiries = 0;
    for key in 0..KEYS {
        let rows: Vec<(u8, Vec<u8>, u64, NaiveDateTime)> = sqlx::query_as(
            "SELECT event, owner, token, at FROM lock_events WHERE tenant = ? AND lock_key = ? ORDER BY id",
        )
        .bind(tenant)
        .bind(format!("{prefix}{key}"))
        .fetch_all(&mut db)
        .await
        .unwrap();
        let mut held: Option<(String, u64, NaiveDateTime)> = None;
        let mut last_end: Option<(u8, NaiveDateTime)> = None;
        let mut last_token = 0;
        let (mut starts, mut releases) = (Vec::new(), Vec::new());
        for (event, owner, token, at) in rows {
            let owner = String::from_utf8(owner).unwrap();
            match event {
                // granted, handed_off
                1 | 4 => {
                    assert!(
                        held.is_none(),
                        "{prefix}{key}: {owner}/{token} granted while {held:?} held"
                    );
                    assert!(
                        token > last_token,
                        "{prefix}{key}: token {token} after {last_token}"
                    );
                    if let Some((_, _, prev_at)) = starts.last() {
                        let gap = at - *prev_at;
                        assert!(
                            gap >= chrono::Duration::milliseconds(hold_ms),
                            "{prefix}{key}: granted {gap} after the previous grant"
                        );
                    }
                    if let Some((3, expired_at)) = last_end {
                        assert!(
                            at - expired_at >= chrono::Duration::milliseconds(delay_ms),
                            "{prefix}{key}: granted {} after an expiry",
                            at - expired_at
                        );
                    }
                    last_token = token;
                    held = Some((owner.clone(), token, at));
                    starts.push((owner, token, at));
                }
                // released, expired, force_released
                2 | 3 | 5 => {
                    let Some((h_owner, h_token, _)) = held.take() else {
                        panic!("{prefix}{key}: {owner}/{token} ended while nobody held it");
                    };
                    assert_eq!((&h_owner, h_token), (&owner, token), "{prefix}{key}");
                    if event == 2 {
                        releases.push((owner, token));
                    }
                    if event == 3 {
                        expiries += 1;
                    }
                    last_end = Some((event, at));
                }
                other => panic!("unknown event {other}"),
            }
        }
        let mut recorded: Vec<(String, u64)> = starts.into_iter().map(|(o, t, _)| (o, t)).collect();
        let mut granted: Vec<(String, u64)> = seen
            .grants
            .iter()
            .filter(|g| g.0 == key)
            .map(|g| (g.1.clone(), g.2))
            .collect();
        recorded.sort();
        granted.sort();
        assert_eq!(recorded, granted, "{prefix}{key}: grants recorded vs seen");
        let mut clean: Vec<(String, u64)> = seen
            .releases
            .iter()
            .filter(|r| r.0 == key)
            .map(|r| (r.1.clone(), r.2))
            .collect();
        releases.sort();
        clean.sort();
        assert_eq!(releases, clean, "{prefix}{key}: releases recorded vs seen");
    }
    assert!(expiries > 0, "no abandoned lease expired and was replaced");
    println!(
        "{tenant}: {} grants, {} clean releases, {expiries} expiries",
        seen.grants.len(),
        seen.releases.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_leave_a_well_formed_history_on_the_fast_paths() {
    let broker = Broker::start().await;
    stress_history(&broker, &broker.client(), "default", "s", 0, 0).await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_keep_lock_delay_and_minimum_hold() {
    let broker = broker_with(tenant("paced", 120, 40)).await;
    let c = broker.client_with(Some("paced-key"));
    stress_history(&broker, &c, "paced", "s", 120, 40).await;
    broker.stop().await;
}

/// As [`concurrent_changes_keep_lock_delay_and_minimum_hold`], the delays
/// coming from the tenant's policy (its config has none, so only the
/// effective values can keep these keys off the batch and stored-procedure
/// paths, which know nothing of delays).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_keep_a_policys_lock_delay_and_minimum_hold() {
    let (_dir, broker, c) = broker_on_policy("fixtures/timing.wasm", "timed", 0, 0).await;
    stress_history(&broker, &c, "timed", "paced-s", 120, 40).await;
    broker.stop().await;
}

/// The minimum hold and lock-delay `plugins/fixtures/timing` gives its
/// `hold-*` and `delay-*` keys.
const POLICY_HOLD_MS: i64 = 1_500;
const POLICY_DELAY_MS: i64 = 1_500;

/// A key released at once is held back for the rest of its period: a
/// one-try acquire by another owner is refused with a hint within it.
async fn held_back(c: &Client, key: &str, period_ms: i64) {
    let t = token_of(c, key, "first", 30_000, 0).await;
    released(c, key, "first", t).await;
    let refused = c.acquire(key, "second", 30_000, 0).await.unwrap();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::LockHeld),
        "{key}: {}",
        refused.text()
    );
    let hint = refused.json()["error"]["retry_after_ms"].as_u64().unwrap();
    assert!((1..=period_ms as u64).contains(&hint), "{key}: {hint}");
}

/// A key released at once is free for the next owner at once.
async fn not_held_back(c: &Client, key: &str) {
    let t = token_of(c, key, "first", 30_000, 0).await;
    released(c, key, "first", t).await;
    let t2 = token_of(c, key, "second", 30_000, 0).await;
    assert!(t2 > t, "{key}");
    released(c, key, "second", t2).await;
}

/// The `timing` calls and fallbacks of tenant `tenant` so far.
async fn timing_calls(c: &Client, tenant: &str) -> (u64, u64) {
    let labels = format!("{{tenant=\"{tenant}\",export=\"timing\"}}");
    (
        c.counter(&format!("lockbroker_policy_calls_total{labels}"))
            .await,
        c.counter(&format!("lockbroker_policy_fallbacks_total{labels}"))
            .await,
    )
}

#[tokio::test]
async fn a_policy_gives_one_key_a_minimum_hold_by_the_database_clock_and_not_another() {
    let (_dir, broker, c) = broker_on_policy("fixtures/timing.wasm", "timed", 0, 0).await;
    let key = "hold-nightly";

    // As `a_minimum_hold_keeps_a_released_key_until_its_period_ends`, the
    // hold coming from the policy.
    released_key_held_for(&c, key, POLICY_HOLD_MS).await;

    // The tenant's other keys have no hold (its config has none). One
    // policy call per lock operation: two acquires and two releases.
    let (before, _) = timing_calls(&c, "timed").await;
    not_held_back(&c, "other-nightly").await;
    let (calls, fallbacks) = timing_calls(&c, "timed").await;
    assert_eq!(calls - before, 4, "timing calls for 4 operations");
    assert_eq!(fallbacks, 0);
    broker.stop().await;
}

#[tokio::test]
async fn a_policy_gives_a_key_a_lock_delay_that_the_reaper_keeps() {
    let (_dir, broker, c) = broker_on_policy("fixtures/timing.wasm", "timed", 0, 0).await;
    let key = "delay-job";

    // b's lease expires with d already queued: the reaper (or the delay
    // timer) hands the key on, not before the policy's lock-delay is over.
    let t = token_of(&c, key, "b", 300, 0).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { token_of(&c, key, "d", 30_000, 10_000).await })
    };
    eventually("d waits", WAIT, || async { waiters(&c, key).await == 1 }).await;
    let t2 = waiter.await.unwrap();
    assert!(t2 > t);
    let (events, h) = history(&c, key).await;
    assert_eq!(
        events[1],
        (LockEventKind::Expired, "b".to_owned(), t),
        "{h:?}"
    );
    let grant = &h.events[0];
    assert_eq!((grant.owner.as_str(), grant.token), ("d", t2), "{h:?}");
    let expired = at_of(&h, LockEventKind::Expired, "b");
    let granted = at(&grant.at);
    assert!(
        granted >= expired + chrono::Duration::milliseconds(POLICY_DELAY_MS),
        "granted at {granted}, expired at {expired}"
    );

    // Another key of the tenant: taken again right after its expiry.
    let other = "job";
    let t = token_of(&c, other, "b", 300, 0).await;
    let expires_at = c.status(other).await.unwrap().json()["expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    until_expired_by_db(&broker.db, &expires_at).await;
    assert!(token_of(&c, other, "c", 30_000, 0).await > t);
    broker.stop().await;
}

#[tokio::test]
async fn hot_swapping_the_policy_changes_the_delays_without_a_restart() {
    let (_dir, broker, c) = broker_on_policy("default.wasm", "swapped", 0, 0).await;
    let admin = broker.client_with(Some(ADMIN));
    let put = |file: &str| {
        let admin = admin.clone();
        let bytes = std::fs::read(dist(file)).unwrap();
        async move {
            let r = admin
                .send(
                    hyper::Method::PUT,
                    "/v1/admin/tenants/swapped/policy",
                    &[("content-type", "application/wasm")],
                    bytes::Bytes::from(bytes),
                    Duration::ZERO,
                )
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
        }
    };

    // The default policy has no `timing`: no hold, and nothing asked.
    not_held_back(&c, "hold-a").await;
    assert_eq!(timing_calls(&c, "swapped").await, (0, 0));
    put("fixtures/timing.wasm").await;
    held_back(&c, "hold-b", POLICY_HOLD_MS).await;
    not_held_back(&c, "other-b").await;
    assert!(timing_calls(&c, "swapped").await.0 > 0);
    // And back: the policy's holds are gone for keys granted from now on.
    put("default.wasm").await;
    let calls = timing_calls(&c, "swapped").await.0;
    not_held_back(&c, "hold-c").await;
    assert_eq!(timing_calls(&c, "swapped").await.0, calls);
    broker.stop().await;
}

#[tokio::test]
async fn a_failing_timing_falls_back_to_the_config_and_none_overrides_it() {
    const CONFIG_HOLD_MS: i64 = 2_000;
    let (_dir, broker, c) =
        broker_on_policy("fixtures/timing.wasm", "fallback", 0, CONFIG_HOLD_MS as u64).await;
    // No answer from the policy: the tenant's configured hold.
    held_back(&c, "plain", CONFIG_HOLD_MS).await;
    assert_eq!(timing_calls(&c, "fallback").await.1, 0);
    // A trap, and a value over a day: the configured hold, counted.
    held_back(&c, "trap-a", CONFIG_HOLD_MS).await;
    let after_trap = timing_calls(&c, "fallback").await.1;
    assert!(after_trap > 0);
    held_back(&c, "huge-a", CONFIG_HOLD_MS).await;
    assert!(timing_calls(&c, "fallback").await.1 > after_trap);
    // The policy's own values replace the config's: none at all, or its
    // shorter hold.
    not_held_back(&c, "none-a").await;
    held_back(&c, "hold-a", POLICY_HOLD_MS).await;
    broker.stop().await;
}

#[tokio::test]
async fn a_component_without_timing_keeps_the_config_values() {
    const CONFIG_HOLD_MS: i64 = 1_500;
    let (_dir, broker, c) =
        broker_on_policy("team-prefix.wasm", "old", 0, CONFIG_HOLD_MS as u64).await;
    held_back(&c, "none-a", CONFIG_HOLD_MS).await;
    held_back(&c, "other", CONFIG_HOLD_MS).await;
    assert_eq!(timing_calls(&c, "old").await, (0, 0));
    broker.stop().await;
}
