//! Semaphores: N holders at once, slots with leases and tokens, waiting.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, FixedOffset};
use lockbroker_api::{
    ErrorCode, ReleaseRequest, RenewRequest, SemaphoreAcquireRequest, SemaphoreLease,
    SemaphoreReleaseRequest, SemaphoreRenewRequest, SemaphoreStatus,
};
use lockbroker_tests::{eventually, Broker, Client, Reply};
use serde_json::json;

async fn acquire(
    c: &Client,
    key: &str,
    owner: &str,
    permits: u32,
    ttl_ms: u64,
    wait_ms: u64,
) -> Reply {
    let body = SemaphoreAcquireRequest {
        terms: lockbroker_api::LeaseTerms::new(ttl_ms, wait_ms),
        ..SemaphoreAcquireRequest::new(owner, permits)
    };
    c.post(&format!("/v1/semaphores/{key}/acquire"), &body)
        .await
        .unwrap()
}

async fn release(c: &Client, key: &str, owner: &str, slot: u32, token: u64) -> Reply {
    let body = SemaphoreReleaseRequest {
        slot,
        lease: ReleaseRequest {
            owner: owner.into(),
            token,
        },
    };
    c.post(&format!("/v1/semaphores/{key}/release"), &body)
        .await
        .unwrap()
}

async fn status(c: &Client, key: &str) -> SemaphoreStatus {
    c.get(&format!("/v1/semaphores/{key}")).await.unwrap().ok()
}

/// The slot and token of a granted permit.
fn lease(r: &Reply) -> (u32, u64) {
    assert_eq!(r.status, 200, "{r:?}");
    let lease: SemaphoreLease = r.ok();
    (lease.slot, lease.token)
}

#[tokio::test]
async fn permits_slots_and_errors() {
    let broker = Broker::start().await;
    let c = broker.client();
    let a = acquire(&c, "pool", "a", 2, 30_000, 0).await;
    let (slot_a, token_a) = lease(&a);
    let granted: SemaphoreLease = a.ok();
    assert_eq!(granted.permits, 2);
    assert_eq!(granted.key, "pool");
    let (slot_b, _) = lease(&acquire(&c, "pool", "b", 2, 30_000, 0).await);
    assert_ne!(slot_a, slot_b);
    assert!(slot_a < 2 && slot_b < 2);

    let full = acquire(&c, "pool", "c", 2, 30_000, 0).await;
    assert_eq!(
        (full.status, full.code()),
        (409, Some(ErrorCode::SemaphoreFull))
    );
    assert!(full.error().unwrap().retry_after_ms.unwrap() >= 1);
    let mismatch = acquire(&c, "pool", "c", 3, 30_000, 0).await;
    assert_eq!(
        (mismatch.status, mismatch.code()),
        (409, Some(ErrorCode::PermitsMismatch))
    );

    // The same owner asking again gets its own permit back, renewed.
    assert_eq!(
        lease(&acquire(&c, "pool", "a", 2, 30_000, 0).await),
        (slot_a, token_a)
    );

    let now = status(&c, "pool").await;
    assert_eq!(now.permits, Some(2));
    assert_eq!(now.holders.len(), 2);
    assert_eq!(now.waiters, 0);

    let wrong = release(&c, "pool", "a", slot_a, token_a + 7).await;
    assert_eq!(wrong.code(), Some(ErrorCode::LeaseLost));
    let wrong = release(&c, "pool", "b", slot_a, token_a).await;
    assert_eq!(wrong.code(), Some(ErrorCode::LeaseLost));

    let renew = c
        .post(
            "/v1/semaphores/pool/renew",
            &SemaphoreRenewRequest {
                slot: slot_a,
                lease: RenewRequest {
                    owner: "a".into(),
                    token: token_a,
                    ttl_ms: Some(60_000),
                },
            },
        )
        .await
        .unwrap();
    assert_eq!(renew.status, 200, "{renew:?}");
    assert_eq!(renew.ok::<SemaphoreLease>().ttl_ms, 60_000);

    assert_eq!(release(&c, "pool", "a", slot_a, token_a).await.status, 200);
    let (slot_c, token_c) = lease(&acquire(&c, "pool", "c", 2, 30_000, 0).await);
    assert_eq!(slot_c, slot_a, "the freed slot");
    assert!(token_c > token_a, "slot tokens increase");

    // Bad input, sent as raw JSON: the request type cannot express it.
    for bad in [
        json!({"owner": "x", "permits": 0}),
        json!({"owner": "x", "permits": 1001}),
        json!({"owner": "x"}),
        json!({"permits": 2}),
    ] {
        let r = c.post("/v1/semaphores/pool/acquire", &bad).await.unwrap();
        assert_eq!(
            (r.status, r.code()),
            (400, Some(ErrorCode::BadRequest)),
            "{bad}"
        );
    }
    assert_eq!(status(&c, "never").await.permits, None);
    broker.stop().await;
}

/// Waits until semaphore `key` has `n` waiters queued.
async fn until_waiters(c: &Client, key: &str, n: u64) {
    let what = format!("{n} waiters queued on semaphore {key}");
    eventually(&what, Duration::from_secs(5), || async {
        c.get(&format!("/v1/semaphores/{key}"))
            .await
            .ok()
            .and_then(|r| r.try_parse::<SemaphoreStatus>())
            .is_some_and(|s| s.waiters == n)
    })
    .await;
}

/// The broker's count of `name` (a counter without labels).
fn counter(broker: &Broker, name: &'static str) -> u64 {
    broker.server().app().metrics.counter(name, &[])
}

/// When a lease began, by the database clock: its end minus its TTL.
fn lease_start(r: &Reply) -> DateTime<FixedOffset> {
    let ttl_ms = r.ok::<SemaphoreLease>().ttl_ms;
    lease_end(r) - chrono::Duration::milliseconds(i64::try_from(ttl_ms).unwrap())
}

fn lease_end(r: &Reply) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(&r.ok::<SemaphoreLease>().expires_at).unwrap()
}

#[tokio::test]
async fn waiters_get_released_and_expired_permits() {
    let broker = Broker::start().await;
    let c = broker.client();
    let (slot, token) = lease(&acquire(&c, "w", "a", 1, 30_000, 0).await);
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "w", "b", 1, 1_000, 10_000).await })
    };
    // b is queued before a releases: b asking after the release would get
    // the same slot and token by a plain grant.
    until_waiters(&c, "w", 1).await;
    assert_eq!(release(&c, "w", "a", slot, token).await.status, 200);
    assert_eq!(
        (
            counter(&broker, "lockbroker_handoffs_total"),
            counter(&broker, "lockbroker_expiry_handoffs_total")
        ),
        (1, 0),
        "the release itself handed the permit on"
    );
    let got = waiter.await.unwrap();
    assert_eq!(lease(&got), (slot, token + 1), "handed over directly");

    // b's 1 s lease runs out while c waits; the reaper hands it to c.
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { acquire(&c, "w", "c", 1, 30_000, 5_000).await })
    };
    until_waiters(&c, "w", 1).await;
    let c2 = waiter.await.unwrap();
    assert_eq!(lease(&c2).1, token + 2);
    // The reaper counts its handoff after the commit, and c's broker may
    // deliver the committed grant first: the count follows, it does not
    // lead.
    eventually(
        "the reaper counts an expiry handoff",
        Duration::from_secs(5),
        || async { counter(&broker, "lockbroker_expiry_handoffs_total") == 1 },
    )
    .await;
    let delay = (lease_start(&c2) - lease_end(&got)).num_milliseconds();
    assert!(delay >= 0, "granted before b's lease ended: {delay} ms");
    assert!(delay < 1_000, "handed on {delay} ms after b's lease ended");
    broker.stop().await;
}

#[derive(Debug, Clone)]
struct Hold {
    slot: u32,
    token: u64,
    granted: Instant,
    released: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_n_holders() {
    const PERMITS: usize = 3;
    let broker = Broker::start().await;
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let history = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (c, in_use, most, history) = (
            broker.client(),
            in_use.clone(),
            most.clone(),
            history.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let owner = format!("c{i}");
            let wait_ms = if i % 2 == 0 { 2_000 } else { 0 };
            while Instant::now() < deadline {
                let r = acquire(&c, "stress", &owner, PERMITS as u32, 30_000, wait_ms).await;
                if r.status == 409 {
                    continue;
                }
                let (slot, token) = lease(&r);
                let granted = Instant::now();
                let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                // The hold itself (not a wait for a condition): long enough
                // for holds to overlap, so all permits are used.
                tokio::time::sleep(Duration::from_millis(25)).await;
                in_use.fetch_sub(1, Ordering::SeqCst);
                let released = Instant::now();
                assert_eq!(release(&c, "stress", &owner, slot, token).await.status, 200);
                history.lock().unwrap().push(Hold {
                    slot,
                    token,
                    granted,
                    released,
                });
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let history = history.lock().unwrap().clone();
    assert!(history.len() > 100, "{} holds", history.len());
    assert_eq!(
        most.load(Ordering::SeqCst),
        PERMITS,
        "all permits were used"
    );
    let mut per_slot: HashMap<u32, Vec<Hold>> = HashMap::new();
    for h in history {
        assert!((h.slot as usize) < PERMITS);
        per_slot.entry(h.slot).or_default().push(h);
    }
    for (slot, mut holds) in per_slot {
        holds.sort_by_key(|h| h.granted);
        for pair in holds.windows(2) {
            assert!(
                pair[1].granted > pair[0].released,
                "slot {slot} overlaps: {pair:?}"
            );
            assert!(
                pair[1].token > pair[0].token,
                "slot {slot} tokens: {pair:?}"
            );
        }
    }
    broker.stop().await;
}
