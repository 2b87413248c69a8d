//! History of semaphores and reader-writer locks
//! (`GET /v1/semaphores/{key}/history`, `GET /v1/rwlocks/{key}/history`),
//! against the real broker and MariaDB: every grant, release, expiry and
//! handoff of their leases is one event, written by the transaction that
//! makes the change; renewals and a lease handed back to its own owner are
//! not events; an expiry is recorded by the next change, `at` the moment
//! the lease ran out.

use std::time::Duration;

use lockbroker_tests::{eventually, Broker, Client};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// How long a test waits for a condition (an expiry by the database clock,
/// a waiter's arrival).
const WAIT: Duration = Duration::from_secs(15);

/// One key of one kind, called through one client.
#[derive(Clone)]
struct On {
    c: Client,
    kind: &'static str,
    key: &'static str,
}

impl On {
    /// POSTs `body` to the key's `action`, expecting 200: the answer.
    async fn ok(&self, action: &str, body: Value) -> Value {
        let path = format!("/v1/{}/{}/{action}", self.kind, self.key);
        let reply = self.c.post(&path, &body).await.unwrap();
        assert_eq!(reply.status, 200, "{action} {body}: {}", reply.text());
        reply.parse()
    }

    /// The key's status now.
    async fn status(&self) -> Value {
        let path = format!("/v1/{}/{}", self.kind, self.key);
        self.c.get(&path).await.unwrap().parse()
    }

    /// Starts a waiting acquire with `body` and waits until it is queued;
    /// its answer comes from the task.
    async fn queued(&self, body: Value) -> JoinHandle<Value> {
        let on = self.clone();
        let task = tokio::spawn(async move { on.ok("acquire", body).await });
        eventually("a waiter", WAIT, || async {
            self.status().await["waiters"] == 1
        })
        .await;
        task
    }

    /// Waits until every lease of the key has run out (by the database
    /// clock, as its status shows it).
    async fn all_expired(&self) {
        eventually("the leases ran out", WAIT, || async {
            let status = self.status().await;
            let held = ["holders", "readers"]
                .iter()
                .any(|list| status[list].as_array().is_some_and(|l| !l.is_empty()));
            !held && status["writer"].is_null()
        })
        .await;
    }

    /// Asserts that the key's events are `expected` (`"Granted a, ..."`,
    /// newest first) with the tokens of `leases` in the same order.
    async fn assert_history(&self, expected: &str, leases: &[&Value]) -> Vec<String> {
        let (events, answer) = self.c.history(self.kind, self.key).await;
        let names: Vec<String> = events
            .iter()
            .map(|(k, o, _)| format!("{k:?} {o}"))
            .collect();
        assert_eq!(names.join(", "), expected);
        let tokens: Vec<u64> = events.iter().map(|(_, _, t)| *t).collect();
        let granted: Vec<u64> = leases
            .iter()
            .map(|l| l["token"].as_u64().unwrap())
            .collect();
        assert_eq!(tokens, granted, "tokens of {expected}");
        answer.events.into_iter().map(|e| e.at).collect()
    }
}

#[tokio::test]
async fn a_semaphores_grants_releases_handoffs_and_expiries_are_its_history() {
    let broker = Broker::start().await;
    let (kind, key) = ("semaphores", "pool");
    let sem = On {
        c: broker.client(),
        kind,
        key,
    };
    let a = sem.ok("acquire", json!({"owner": "a", "permits": 1})).await;
    // Renewing and asking again for the permit one holds are not events.
    let renew = json!({"owner": "a", "slot": a["slot"], "token": a["token"], "ttl_ms": 30_000});
    sem.ok("renew", renew).await;
    let again = sem.ok("acquire", json!({"owner": "a", "permits": 1})).await;
    assert_eq!(again["token"], a["token"]);
    let waiter = sem
        .queued(json!({"owner": "b", "permits": 1, "wait_ms": 10_000}))
        .await;
    let release = |owner: &str, lease: &Value| json!({"owner": owner, "slot": lease["slot"], "token": lease["token"]});
    sem.ok("release", release("a", &a)).await;
    let b = waiter.await.unwrap();
    sem.ok("release", release("b", &b)).await;
    let c = sem
        .ok(
            "acquire",
            json!({"owner": "c", "permits": 1, "ttl_ms": 300}),
        )
        .await;
    sem.all_expired().await;
    let d = sem.ok("acquire", json!({"owner": "d", "permits": 1})).await;

    let expected =
        "Granted d, Expired c, Granted c, Released b, HandedOff b, Released a, Granted a";
    let at = sem
        .assert_history(expected, &[&d, &c, &c, &b, &b, &a, &a])
        .await;
    // The expiry is dated when the lease ran out.
    assert_eq!(at[1][..23], c["expires_at"].as_str().unwrap()[..23]);
}

#[tokio::test]
async fn a_rwlocks_readers_and_writers_leave_their_history() {
    let broker = Broker::start().await;
    let rw = On {
        c: broker.client(),
        kind: "rwlocks",
        key: "config",
    };
    let read = |owner: &str| json!({"owner": owner, "mode": "read"});
    let r1 = rw.ok("acquire", read("r1")).await;
    let r2 = rw.ok("acquire", read("r2")).await;
    rw.ok("renew", json!({"owner": "r2", "token": r2["token"]}))
        .await;
    let writer = rw
        .queued(json!({"owner": "w", "mode": "write", "wait_ms": 10_000}))
        .await;
    let release = |owner: &str, lease: &Value| json!({"owner": owner, "token": lease["token"]});
    rw.ok("release", release("r1", &r1)).await;
    rw.ok("release", release("r2", &r2)).await;
    let w = writer.await.unwrap();
    rw.ok("release", release("w", &w)).await;
    // A reader and then a writer whose leases run out.
    let mut short = Vec::new();
    for (owner, mode) in [("r3", "read"), ("x", "write")] {
        let body = json!({"owner": owner, "mode": mode, "ttl_ms": 300});
        short.push(rw.ok("acquire", body).await);
        rw.all_expired().await;
    }
    let (r3, x) = (&short[0], &short[1]);
    let y = rw.ok("acquire", read("y")).await;

    let expected = "Granted y, Expired x, Granted x, Expired r3, Granted r3, Released w, \
        HandedOff w, Released r2, Released r1, Granted r2, Granted r1";
    let leases = [&y, x, x, r3, r3, &w, &w, &r2, &r1, &r2, &r1];
    rw.assert_history(expected, &leases).await;
}

#[tokio::test]
async fn elections_have_no_history_and_a_bad_limit_is_400() {
    let broker = Broker::start().await;
    let c = broker.client();
    let reply = c.get("/v1/elections/leader/history").await.unwrap();
    assert_eq!(reply.status, 404, "{}", reply.text());
    for kind in ["semaphores", "rwlocks"] {
        let reply = c
            .get(&format!("/v1/{kind}/k/history?limit=0"))
            .await
            .unwrap();
        assert_eq!(reply.status, 400, "{}", reply.text());
        let reply = c
            .post(&format!("/v1/{kind}/k/history"), &json!({}))
            .await
            .unwrap();
        assert_eq!(reply.status, 405, "{}", reply.text());
    }
}
