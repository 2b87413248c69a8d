//! etcd side by side with the broker: the same two workloads through etcd
//! v3's JSON gateway over HTTP/1.1 (the broker's own hyper client; no gRPC
//! stack in the build). `scripts/bench` starts a single etcd node.
//!
//! - `etcd` (pairs on own keys): the try-lock of etcd's lock recipe, a
//!   transaction that puts the key with the client's session lease only
//!   if its create revision is 0 (nobody holds it), then a transaction
//!   that deletes it only if its create revision is still the one the
//!   acquire made (the compare-and-delete of the Redis baseline). Two Raft
//!   writes per pair, each fsynced, like the broker's two commits.
//! - `etcd contended` (handoffs of one key): etcd's lock service
//!   (`/v3/lock/lock`, `/v3/lock/unlock`), the recipe run inside etcd: each
//!   waiter puts `name/lease` and waits for the key created just before its
//!   own to go, so waiters are served in order, as the broker's queue does.
//!
//! Each client grants itself one lease (60 s) before the common start, as
//! etcd's `concurrency.NewSession` does, and revokes it at the end: the
//! lease's TTL is not renewed per lock. Keys and values are base64 in the
//! gateway's JSON; its 64-bit integers are strings.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::http::{Client, Reply};
use serde_json::{json, Value};

use crate::{
    report::Row,
    run::{merge, micros, run_clients, Tally},
};

/// The session lease of each client: longer than a run.
const SESSION_TTL_S: u64 = 60;
/// How long a lock-service call may wait for the lock (the client's
/// timeout allows this on top of its slack).
const LOCK_WAIT_MS: u64 = 60_000;

/// Where etcd's client URL is, and a prefix that keeps runs apart.
pub struct Etcd {
    pub url: String,
    pub run: String,
}

/// Standard base64 with padding (the gateway's encoding of bytes).
fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A gateway integer (a string, or absent when 0).
fn int(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

/// An answer that is not a 200 with the expected shape, for the log.
fn unexpected(what: &str, r: &Reply) -> String {
    format!("{what}: HTTP {} {}", r.status, r.text())
}

/// True when etcd answers its version endpoint within 2 s.
pub async fn reachable(url: &str) -> Result<String, String> {
    let client = Client::new(url, None).map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(2), client.get("/version")).await {
        Ok(Ok(r)) if r.status == 200 => Ok(r.json()["etcdserver"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned()),
        Ok(Ok(r)) => Err(unexpected("GET /version", &r)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2 s".into()),
    }
}

/// A session lease for one client.
async fn grant(client: &Client) -> Result<String, String> {
    let r = client
        .post("/v3/lease/grant", &json!({ "TTL": SESSION_TTL_S }), 0)
        .await
        .map_err(|e| e.to_string())?;
    match r.json()["ID"].as_str() {
        Some(id) if r.status == 200 => Ok(id.to_owned()),
        _ => Err(unexpected("lease grant", &r)),
    }
}

/// Revokes a session lease (its keys go with it). Best effort.
async fn revoke(client: &Client, lease: &str) {
    let _ = client
        .post("/v3/lease/revoke", &json!({ "ID": lease }), 0)
        .await;
}

/// The try-lock: put `key` with `lease` if nobody holds it. `Ok(Some(rev))`
/// granted at revision `rev`, `Ok(None)` held by someone else.
async fn try_lock(
    client: &Client,
    key: &str,
    owner: &str,
    lease: &str,
) -> Result<Option<u64>, String> {
    let k = b64(key.as_bytes());
    let body = json!({
        "compare": [{ "key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
        "success": [{ "request_put": { "key": k, "value": b64(owner.as_bytes()), "lease": lease } }],
        "failure": [{ "request_range": { "key": k } }],
    });
    let r = client
        .post("/v3/kv/txn", &body, 0)
        .await
        .map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(unexpected("txn (acquire)", &r));
    }
    if r.json()["succeeded"].as_bool() == Some(true) {
        Ok(Some(int(&r.json()["header"]["revision"])))
    } else {
        Ok(None)
    }
}

/// Deletes `key` if it is still the one created at `revision`.
async fn unlock(client: &Client, key: &str, revision: u64) -> Result<bool, String> {
    let k = b64(key.as_bytes());
    let body = json!({
        "compare": [{ "key": k, "target": "CREATE", "result": "EQUAL", "create_revision": revision.to_string() }],
        "success": [{ "request_delete_range": { "key": k } }],
    });
    let r = client
        .post("/v3/kv/txn", &body, 0)
        .await
        .map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(unexpected("txn (release)", &r));
    }
    Ok(r.json()["succeeded"].as_bool() == Some(true))
}

/// `etcd` (acquire + release pairs on own keys, 16 per client) or `etcd
/// contended` (handoffs of one key through the lock service).
pub async fn scenario(e: &Etcd, contended: bool, clients: usize, duration: Duration) -> Row {
    // Sequence numbers taken while holding the lock order the grants, so
    // handoffs pair up as with fencing tokens.
    let seq = Arc::new(AtomicU64::new(1));
    let run = run_clients(clients, duration, |c, gate| {
        let client = Client::new(&e.url, None).expect("etcd URL checked at start");
        let (run, seq) = (e.run.clone(), seq.clone());
        async move {
            let mut t = Tally::default();
            let owner = format!("bench-{c}");
            let lease = grant(&client).await;
            let deadline = gate.ready().await;
            let lease = match lease {
                Ok(lease) => lease,
                Err(e) => {
                    t.error(|| e);
                    return t;
                }
            };
            let name = b64(format!("lockbench/{run}/one-{clients}").as_bytes());
            let mut n = 0u64;
            while Instant::now() < deadline {
                let key = format!("lockbench/{run}/{c}-{}", n % 16);
                n += 1;
                let t0 = Instant::now();
                // The held key (lock service) or the key's create revision.
                let got = if contended {
                    client
                        .post(
                            "/v3/lock/lock",
                            &json!({ "name": name, "lease": lease }),
                            LOCK_WAIT_MS,
                        )
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| match r.json()["key"].as_str() {
                            Some(k) if r.status == 200 => Ok(Some((k.to_owned(), 0))),
                            _ => Err(unexpected("lock", &r)),
                        })
                } else {
                    try_lock(&client, &key, &owner, &lease)
                        .await
                        .map(|rev| rev.map(|rev| (String::new(), rev)))
                };
                let granted_at = Instant::now();
                let (held, revision) = match got {
                    Ok(Some(held)) => held,
                    Ok(None) => {
                        t.refused += 1;
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let token = seq.fetch_add(1, Ordering::SeqCst);
                if granted_at <= deadline {
                    t.grants.push((token, granted_at));
                }
                let release_at = Instant::now();
                let released = if contended {
                    client
                        .post("/v3/lock/unlock", &json!({ "key": held }), 0)
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if r.status == 200 {
                                Ok(true)
                            } else {
                                Err(unexpected("unlock", &r))
                            }
                        })
                } else {
                    unlock(&client, &key, revision).await
                };
                match released {
                    Ok(true) => {}
                    Ok(false) => t.error(|| "release compared false".into()),
                    Err(e) => t.error(|| e),
                }
                let done = Instant::now();
                if done <= deadline {
                    t.releases.push((token, done));
                    t.release_us.push(micros(done - release_at));
                    t.ops += 1;
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            revoke(&client, &lease).await;
            t
        }
    })
    .await;
    let name = if contended { "etcd contended" } else { "etcd" };
    let m = merge(run);
    if let Some(e) = &m.first_error {
        eprintln!("lockbench: {name} c={clients}: first error: {e}");
    }
    let mut row = Row::new(name, clients, duration, &m);
    if let Some(aux) = m.aux {
        row.set("acquire_p50_ms", aux.p50_ms);
        if contended {
            row.add_note(format!("acquire (wait) p50 {:.1} ms", aux.p50_ms));
        }
    }
    if !contended {
        row.handoff = None;
        row.note.clear();
        if row.errors > 0 {
            row.add_note(format!("{} errors", row.errors));
        }
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads() {
        assert_eq!(b64(b""), "");
        assert_eq!(b64(b"f"), "Zg==");
        assert_eq!(b64(b"fo"), "Zm8=");
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(b64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn gateway_integers_are_strings() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
    }
}
