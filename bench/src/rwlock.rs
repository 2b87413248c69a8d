//! The `rwlock` scenario, two rows at each client count:
//! - `rwlock-read`: every client takes a read lease of one shared key and
//!   releases it (readers share, so nobody is refused: what the header row's
//!   serialization costs);
//! - `rwlock-write`: every client takes a write lease of a key of its own
//!   and releases it, to compare with the `uncontended` lock pairs.
//!
//! One op is an acquire + release pair.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::{
    broker::Broker,
    http::Client,
    report::Row,
    run::{merge, micros, run_clients, Tally},
};

const TTL_MS: u64 = 30_000;

/// Which row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// All clients read one key.
    Read,
    /// Each client writes its own key.
    Write,
}

/// Runs the scenario in `mode` with `clients` clients for `duration`.
pub async fn scenario(
    b: &Broker,
    api_key: &str,
    mode: Mode,
    clients: usize,
    duration: Duration,
) -> Row {
    let run = run_clients(clients, duration, |c, gate| {
        let client = Client::new(&b.url, Some(api_key)).expect("broker URL checked at start");
        let run = b.run.clone();
        async move {
            let mut t = Tally::default();
            let owner = format!("bench-{c}");
            let (key, mode) = match mode {
                Mode::Read => (format!("rw{run}-shared"), "read"),
                Mode::Write => (format!("rw{run}-{c}"), "write"),
            };
            let deadline = gate.ready().await;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let body = json!({"owner": owner, "mode": mode, "ttl_ms": TTL_MS, "wait_ms": 0});
                let path = format!("/v1/rwlocks/{key}/acquire");
                let granted = match client.post(&path, &body, 0).await {
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
                let token = granted.json()["token"].as_u64().unwrap_or_default();
                let body = json!({"owner": owner, "token": token});
                let path = format!("/v1/rwlocks/{key}/release");
                match client.post(&path, &body, 0).await {
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
                    t.release_us.push(micros(done - granted_at));
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            t
        }
    })
    .await;
    let (name, note) = match mode {
        Mode::Read => ("rwlock-read", "read pairs, all clients on one key"),
        Mode::Write => ("rwlock-write", "write pairs, own keys"),
    };
    let mut row = Row::new(name, clients, duration, &merge(run));
    row.handoff = None;
    row.note = note.to_owned();
    row
}
