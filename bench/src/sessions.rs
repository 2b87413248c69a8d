//! Sessions (issue #30), measured against the way without them:
//!
//! - `session-keepalive`: N locks kept alive for a while, by one session
//!   (one keepalive every third of its TTL) and, beside it in the same
//!   run, as N plain leases each renewed every third of the same TTL (what
//!   a client does without sessions): requests per second and the
//!   broker's CPU per second, and how many of the N plain leases ran out
//!   because their renewals did not keep up.
//! - `session-end`: N locks held in one session, a waiter queued on up to
//!   [`WAITERS`] of the keys; the session closed, then (another session)
//!   left to expire: time from the close to its answer and to the last
//!   waiter's grant, and from the expiry to the last waiter's grant; beside
//!   it, the same N locks released one by one (the baseline).
//!
//! Run by `lockbench --sessions N1,N2` against a broker (its pid for the
//! CPU); prints a markdown table per measurement.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::{cpu, http::Client};

/// The TTL of the sessions and of the plain leases (ms); keepalives and
/// renewals go every third of it.
const TTL_MS: u64 = 3000;
/// Requests in flight while setting up (acquiring N locks).
const PARALLEL: usize = 16;
/// Waiters queued on the keys of a session that ends.
pub const WAITERS: usize = 100;

/// The measurements for each lease count of `counts`, as markdown.
///
/// # Errors
/// The broker refused or failed a setup step.
pub async fn markdown(
    url: &str,
    api_key: &str,
    broker_pid: Option<u32>,
    counts: &[usize],
    keep_for: Duration,
) -> anyhow::Result<String> {
    cpu::watch(broker_pid);
    let client = Client::new(url, Some(api_key)).map_err(|e| anyhow!("{e}"))?;
    let run = format!("{:x}", rand::random::<u32>());
    let mut keep = String::from(
        "| leases | way | requests/s | broker CPU ms/s | plain leases that ran out |\n|---|---|---|---|---|\n",
    );
    let mut end = String::from(
        "| leases | how it ends | waiters | to the answer ms | to the last waiter's grant ms |\n|---|---|---|---|---|\n",
    );
    // What the broker spends with nothing asked of it (its wake loop,
    // reaper and heartbeat), for scale.
    let from = cpu::snapshot();
    tokio::time::sleep(keep_for).await;
    keep.push_str(&format!(
        "| 0 | the broker idle | 0 | {} | – |\n",
        cpu_ms_per_s(from, keep_for)
    ));
    for &n in counts {
        let (session, leases) = keepalive_rows(&client, &run, n, keep_for).await?;
        keep.push_str(&session);
        keep.push_str(&leases);
        end.push_str(&end_rows(&client, &run, n).await?);
    }
    Ok(format!(
        "#### session-keepalive ({} s, TTL {TTL_MS} ms)\n\n{keep}\n#### session-end\n\n{end}",
        keep_for.as_secs()
    ))
}

/// A session's id, opened with `ttl_ms` (also `contended-session`'s).
pub(crate) async fn open(client: &Client, ttl_ms: u64) -> anyhow::Result<String> {
    let reply = client
        .post("/v1/sessions", &json!({"ttl_ms": ttl_ms}), 0)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    if reply.status != 201 {
        bail!("opening a session: HTTP {} {}", reply.status, reply.text());
    }
    reply.json()["id"]
        .as_str()
        .map(str::to_owned)
        .context("a session's id")
}

async fn keepalive(client: &Client, id: &str) -> anyhow::Result<()> {
    let reply = client
        .post(&format!("/v1/sessions/{id}/keepalive"), &json!({}), 0)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    if reply.status != 200 {
        bail!("keepalive: HTTP {} {}", reply.status, reply.text());
    }
    Ok(())
}

pub(crate) async fn close(client: &Client, id: &str) -> anyhow::Result<Value> {
    let reply = client
        .call(
            hyper::Method::DELETE,
            &format!("/v1/sessions/{id}"),
            None,
            bytes::Bytes::new(),
        )
        .await
        .map_err(|e| anyhow!("{e}"))?;
    if reply.status != 200 {
        bail!("close: HTTP {} {}", reply.status, reply.text());
    }
    Ok(reply.json())
}

/// Acquires every key of `keys` with `body` (the session or a TTL), at
/// most [`PARALLEL`] at once; their tokens, in order.
async fn acquire_all(client: &Client, keys: &[String], body: &Value) -> anyhow::Result<Vec<u64>> {
    let keys = Arc::new(keys.to_vec());
    let mut tokens = vec![0u64; keys.len()];
    let mut tasks = JoinSet::new();
    for lane in 0..PARALLEL {
        let (client, keys, body) = (client.clone(), keys.clone(), body.clone());
        tasks.spawn(async move {
            let mut got = Vec::new();
            for i in (lane..keys.len()).step_by(PARALLEL) {
                let path = format!("/v1/locks/{}/acquire", crate::http::encode_key(&keys[i]));
                let reply = client
                    .post(&path, &body, 0)
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                if reply.status != 200 {
                    bail!(
                        "acquire {}: HTTP {} {}",
                        keys[i],
                        reply.status,
                        reply.text()
                    );
                }
                got.push((i, reply.json()["token"].as_u64().unwrap_or(0)));
            }
            Ok::<_, anyhow::Error>(got)
        });
    }
    while let Some(done) = tasks.join_next().await {
        for (i, token) in done.map_err(|e| anyhow!("{e}"))?? {
            tokens[i] = token;
        }
    }
    Ok(tokens)
}

/// A task that keeps session `id` alive (a keepalive every third of its
/// TTL) until told to stop: then it answers when it sent the last
/// keepalive that was confirmed.
pub(crate) struct Keeper {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Instant>,
}

impl Keeper {
    pub(crate) fn start(client: &Client, id: &str, ttl_ms: u64) -> Keeper {
        let (client, id) = (client.clone(), id.to_owned());
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut last = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(ttl_ms / 3));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => return last,
                }
                let sent = Instant::now();
                if keepalive(&client, &id).await.is_err() {
                    return last;
                }
                last = sent;
            }
        });
        Keeper { stop, task }
    }

    /// Stops it: when the last confirmed keepalive was sent.
    pub(crate) async fn stop(self) -> Instant {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_else(|_| Instant::now())
    }
}

/// The broker's CPU between two snapshots, in ms per second of `took`.
fn cpu_ms_per_s(from: cpu::Snapshot, took: Duration) -> String {
    cpu::usage(from, cpu::snapshot())
        .broker_s
        .map_or("–".to_owned(), |s| {
            format!("{:.1}", s * 1000.0 / took.as_secs_f64())
        })
}

/// `session-keepalive` for `n` leases: the session's row, then the plain
/// leases' row.
async fn keepalive_rows(
    client: &Client,
    run: &str,
    n: usize,
    keep_for: Duration,
) -> anyhow::Result<(String, String)> {
    // One session, one keepalive every third of its TTL.
    let id = open(client, TTL_MS).await?;
    let keys: Vec<String> = (0..n).map(|i| format!("sk{run}-{n}-{i}")).collect();
    // Kept alive while the locks are taken too.
    let keeper = Keeper::start(client, &id, TTL_MS);
    acquire_all(client, &keys, &json!({"session": id})).await?;
    let from = cpu::snapshot();
    let started = Instant::now();
    tokio::time::sleep(keep_for).await;
    let took = started.elapsed();
    let session_cpu = cpu_ms_per_s(from, took);
    keeper.stop().await;
    close(client, &id).await?;
    let session = format!(
        "| {n} | one session | {:.2} | {session_cpu} | – |\n",
        1000.0 / (TTL_MS / 3) as f64
    );

    // N plain leases, each renewed every third of the TTL.
    let keys: Vec<String> = (0..n).map(|i| format!("pk{run}-{n}-{i}")).collect();
    let owner = format!("bench-{run}");
    let tokens = acquire_all(client, &keys, &json!({"owner": owner, "ttl_ms": TTL_MS})).await?;
    let from = cpu::snapshot();
    let started = Instant::now();
    let deadline = started + keep_for;
    let keys = Arc::new(keys);
    let tokens = Arc::new(tokens);
    let mut lanes = JoinSet::new();
    for lane in 0..PARALLEL {
        let (client, keys, tokens, owner) =
            (client.clone(), keys.clone(), tokens.clone(), owner.clone());
        lanes.spawn(async move {
            let (mut sent, mut lost) = (0u64, 0u64);
            let mut tick = tokio::time::interval(Duration::from_millis(TTL_MS / 3));
            let mut gone = vec![false; keys.len()];
            while Instant::now() < deadline {
                tick.tick().await;
                for i in (lane..keys.len()).step_by(PARALLEL) {
                    if gone[i] || Instant::now() >= deadline {
                        continue;
                    }
                    sent += 1;
                    match client.renew(&keys[i], &owner, tokens[i], TTL_MS).await {
                        Ok(r) if r.status == 200 => {}
                        _ => {
                            gone[i] = true;
                            lost += 1;
                        }
                    }
                }
            }
            (sent, lost)
        });
    }
    let (mut sent, mut lost) = (0u64, 0u64);
    while let Some(done) = lanes.join_next().await {
        let (s, l) = done.map_err(|e| anyhow!("{e}"))?;
        sent += s;
        lost += l;
    }
    let took = started.elapsed();
    let leases_cpu = cpu_ms_per_s(from, took);
    for (key, token) in keys.iter().zip(tokens.iter()) {
        let _ = client.release(key, &owner, *token).await;
    }
    let leases = format!(
        "| {n} | {n} leases renewed one by one | {:.0} | {leases_cpu} | {lost} |\n",
        sent as f64 / took.as_secs_f64()
    );
    Ok((session, leases))
}

/// `session-end` for `n` leases: a close, an expiry, and the same locks
/// released one by one.
async fn end_rows(client: &Client, run: &str, n: usize) -> anyhow::Result<String> {
    let mut out = String::new();
    for how in ["close", "expiry"] {
        let id = open(client, TTL_MS).await?;
        let keys: Vec<String> = (0..n).map(|i| format!("se{run}-{how}-{n}-{i}")).collect();
        let keeper = Keeper::start(client, &id, TTL_MS);
        acquire_all(client, &keys, &json!({"session": id})).await?;
        let waiting = queue_waiters(client, &keys).await?;
        let (started, answer) = if how == "close" {
            keeper.stop().await;
            let started = Instant::now();
            let closed = close(client, &id).await?;
            if closed["released"].as_u64() != Some(n as u64) {
                bail!("the close released {closed}, not {n}");
            }
            (
                started,
                format!("{:.1}", started.elapsed().as_secs_f64() * 1000.0),
            )
        } else {
            // The session can have expired no sooner than TTL after the
            // last keepalive was sent: the delay is at most what is shown.
            let last = keeper.stop().await;
            (last + Duration::from_millis(TTL_MS), "–".to_owned())
        };
        let w = waiting.len();
        let mut last = started;
        for waiter in waiting {
            let granted_at = waiter.await.map_err(|e| anyhow!("{e}"))??;
            last = last.max(granted_at);
        }
        out.push_str(&format!(
            "| {n} | {how} | {w} | {answer} | {:.1} |\n",
            last.saturating_duration_since(started).as_secs_f64() * 1000.0
        ));
    }
    // The baseline: the same number of plain locks released one by one.
    let keys: Vec<String> = (0..n).map(|i| format!("sb{run}-{n}-{i}")).collect();
    let owner = format!("bench-{run}");
    let tokens = acquire_all(client, &keys, &json!({"owner": owner, "ttl_ms": 60_000})).await?;
    let waiting = queue_waiters(client, &keys).await?;
    let started = Instant::now();
    let keys = Arc::new(keys);
    let tokens = Arc::new(tokens);
    let mut lanes = JoinSet::new();
    for lane in 0..PARALLEL {
        let (client, keys, tokens, owner) =
            (client.clone(), keys.clone(), tokens.clone(), owner.clone());
        lanes.spawn(async move {
            for i in (lane..keys.len()).step_by(PARALLEL) {
                let _ = client.release(&keys[i], &owner, tokens[i]).await;
            }
        });
    }
    while lanes.join_next().await.is_some() {}
    let released = started.elapsed();
    let w = waiting.len();
    let mut last = started;
    for waiter in waiting {
        last = last.max(waiter.await.map_err(|e| anyhow!("{e}"))??);
    }
    out.push_str(&format!(
        "| {n} | {n} releases, {PARALLEL} at a time | {w} | {:.1} | {:.1} |\n",
        released.as_secs_f64() * 1000.0,
        last.saturating_duration_since(started).as_secs_f64() * 1000.0
    ));
    Ok(out)
}

/// A waiting acquire on each of up to [`WAITERS`] of `keys` (spread over
/// them), each answering when it was granted; returns once all are queued.
async fn queue_waiters(
    client: &Client,
    keys: &[String],
) -> anyhow::Result<Vec<tokio::task::JoinHandle<anyhow::Result<Instant>>>> {
    let w = keys.len().min(WAITERS);
    let chosen: Vec<String> = (0..w).map(|j| keys[j * keys.len() / w].clone()).collect();
    let mut waiting = Vec::new();
    for key in &chosen {
        let (client, key) = (client.clone(), key.clone());
        waiting.push(tokio::spawn(async move {
            let reply = client
                .acquire(&key, "waiter", 60_000, 60_000)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            let at = Instant::now();
            if reply.status != 200 {
                bail!("waiter on {key}: HTTP {} {}", reply.status, reply.text());
            }
            Ok(at)
        }));
    }
    // Queued: each key's status shows its waiter.
    for key in &chosen {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let status = client.status(key).await.map_err(|e| anyhow!("{e}"))?;
            if status.json()["waiters"].as_u64().unwrap_or(0) >= 1 {
                break;
            }
            if Instant::now() > until {
                bail!("the waiter on {key} did not queue");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(waiting)
}
