//! The `multilock` scenario: each client takes a multi-lock of
//! [`KEYS`] keys of its own (all or none, one transaction), then releases
//! it (one transaction); one op is such an acquire + release pair, to
//! compare with the `uncontended` single-key pairs at the same client
//! count.

use std::time::{Duration, Instant};

use crate::http::Client;
use serde_json::json;

use crate::{
    broker::Broker,
    report::Row,
    run::{merge, micros, run_clients, Tally},
};

/// Keys per multi-lock.
pub const KEYS: usize = 8;
const TTL_MS: u64 = 30_000;

/// Runs the scenario with `clients` clients for `duration`.
pub async fn scenario(b: &Broker, api_key: &str, clients: usize, duration: Duration) -> Row {
    let run = run_clients(clients, duration, |c, gate| {
        let client = Client::new(&b.url, Some(api_key)).expect("broker URL checked at start");
        let run = b.run.clone();
        async move {
            let mut t = Tally::default();
            let owner = format!("bench-{c}");
            let deadline = gate.ready().await;
            let mut n = 0u64;
            while Instant::now() < deadline {
                // Own keys, a few sets in turn: rows exist after the first.
                let keys: Vec<String> = (0..KEYS)
                    .map(|k| format!("m{run}-{c}-{}-{k}", n % 4))
                    .collect();
                n += 1;
                let t0 = Instant::now();
                let body = json!({"keys": keys, "owner": owner, "ttl_ms": TTL_MS, "wait_ms": 0});
                let granted = match client.post("/v1/multilock/acquire", &body, 0).await {
                    Ok(r) if r.status == 200 => r,
                    Ok(r) if r.status == 409 => {
                        t.refused += 1;
                        continue;
                    }
                    Ok(r) => {
                        t.error(|| format!("HTTP {} {}", r.status, r.text()));
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let granted_at = Instant::now();
                let locks: Vec<_> = granted.json()["locks"]
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .map(|e| json!({"key": e["key"], "token": e["token"]}))
                            .collect()
                    })
                    .unwrap_or_default();
                let release_at = Instant::now();
                let body = json!({"owner": owner, "locks": locks});
                match client.post("/v1/multilock/release", &body, 0).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        t.error(|| format!("HTTP {} {}", r.status, r.text()));
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        continue;
                    }
                }
                let done = Instant::now();
                if done <= deadline {
                    t.ops += 1;
                    t.release_us.push(micros(done - release_at));
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            t
        }
    })
    .await;
    let mut row = Row::new("multilock-8", clients, duration, &merge(run));
    row.handoff = None;
    row.note = format!("pairs of {KEYS}-key multi-locks, own keys");
    row
}
