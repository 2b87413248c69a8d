//! Sessions waiting for each other's keys (issue #33), as the deadlock
//! tests build them on any brokers: a ring of sessions, each holding a key
//! and then waiting for the next one's, closed at once.

use std::time::Duration;

use lockbroker_api::{ErrorBody, ErrorCode, Session};
use serde_json::json;

use crate::{eventually, Client, Reply};

/// How long a ring's test waits for a condition.
const WAIT: Duration = Duration::from_secs(10);

/// `s` takes the free `key` as `owner` (asserted granted).
pub async fn hold(c: &Client, s: &Session, key: &str, owner: &str) {
    let reply = c
        .post(
            &format!("/v1/locks/{key}/acquire"),
            &json!({"session": s.id, "owner": owner}),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
}

/// Starts `s`'s waiting acquire of `key` (as `owner`) in a task.
pub fn wait_for(c: &Client, s: &Session, key: &str, owner: &str) -> tokio::task::JoinHandle<Reply> {
    wait_ms(c, s, key, owner, 30_000)
}

/// [`wait_for`] with a budget of `ms`.
pub fn wait_ms(
    c: &Client,
    s: &Session,
    key: &str,
    owner: &str,
    ms: u64,
) -> tokio::task::JoinHandle<Reply> {
    let (c, path) = (c.clone(), format!("/v1/locks/{key}/acquire"));
    let body = json!({"session": s.id, "owner": owner, "wait_ms": ms});
    tokio::spawn(async move { c.post(&path, &body).await.unwrap() })
}

pub async fn waiters(c: &Client, key: &str) -> usize {
    let q: lockbroker_api::KeyWaiters = c
        .get(&format!("/v1/locks/{key}/waiters"))
        .await
        .unwrap()
        .ok();
    q.waiters.len()
}

/// A ring of `n` sessions: session `i` holds `{prefix}{i}` and will wait
/// for `{prefix}{i+1}`.
pub async fn ring(c: &Client, prefix: &str, n: usize) -> Vec<Session> {
    let mut sessions = Vec::new();
    for i in 0..n {
        let s = c
            .open_session(&json!({"ttl_ms": 60_000, "name": format!("{prefix}{i}")}))
            .await;
        hold(c, &s, &format!("{prefix}{i}"), &format!("h{i}")).await;
        sessions.push(s);
    }
    sessions
}

pub fn deadlock(reply: &Reply) -> Option<ErrorBody> {
    (reply.code() == Some(ErrorCode::Deadlock)).then(|| reply.parse())
}

/// Closes a ring of `n` sessions through `clients` (session `i`'s wait
/// through client `i % len`) with every wait sent at once; exactly one is
/// refused, and ending its session serves every other, one after another.
pub async fn one_ring(clients: &[Client], prefix: &str, n: usize) {
    let c = &clients[0];
    let s = ring(c, prefix, n).await;
    let waits: Vec<_> = (0..n)
        .map(|i| {
            let via = &clients[i % clients.len()];
            wait_for(
                via,
                &s[i],
                &format!("{prefix}{}", (i + 1) % n),
                &format!("w{i}"),
            )
        })
        .collect();
    // The refused one answers at once; the others wait.
    let mut refused = None;
    let mut pending = Vec::new();
    for (i, w) in waits.into_iter().enumerate() {
        pending.push((i, w));
    }
    eventually("one is refused", WAIT, || async {
        pending.iter().any(|(_, w)| w.is_finished())
    })
    .await;
    let mut still = Vec::new();
    for (i, w) in pending {
        if w.is_finished() {
            let reply = w.await.unwrap();
            let body = deadlock(&reply).unwrap_or_else(|| panic!("{prefix}: {reply:?}"));
            assert_eq!(body.error.cycle.unwrap().len(), n, "{prefix}");
            assert!(refused.replace(i).is_none(), "{prefix}: refused twice");
        } else {
            still.push((i, w));
        }
    }
    let refused = refused.unwrap();
    assert_eq!(still.len(), n - 1);
    eventually("the others wait", WAIT, || async {
        let mut queued = 0;
        for i in 0..n {
            queued += waiters(c, &format!("{prefix}{i}")).await;
        }
        queued == n - 1
    })
    .await;
    // Ending the refused session hands its key to the one waiting for it,
    // whose session then ends, and so on round: every wait is served.
    let mut ending = refused;
    for _ in 0..n - 1 {
        assert_eq!(c.close_session(&s[ending].id).await.status, 200);
        let next = (ending + n - 1) % n;
        let at = still.iter().position(|(i, _)| *i == next).unwrap();
        let (_, w) = still.remove(at);
        let reply = w.await.unwrap();
        assert_eq!(reply.status, 200, "{prefix}: w{next}: {reply:?}");
        ending = next;
    }
    assert_eq!(c.close_session(&s[ending].id).await.status, 200);
}
