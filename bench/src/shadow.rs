//! `policy-shadow`: what a shadow candidate costs the requests of its
//! tenant (issue #23: the active path's latency within 10 % of no shadow).
//!
//! Uncontended acquire/release pairs on a tenant with a WebAssembly policy,
//! without a shadow and with one loaded (`PUT .../policy?mode=shadow`),
//! alternated for several rounds in one run (each round starts with the
//! other side, so neither always runs warmer): a row for each side, pooled
//! over the rounds, and ratios of the medians of the rounds' p50s and p99s
//! (with shadow / without). The shadow is dropped after each of its runs
//! (`DELETE .../policy/shadow`), whose last report says how many calls it
//! judged, disagreed on, failed and dropped.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{PolicyShadow, ShadowCount};

use crate::{
    broker::{lock_tallies, Broker, LockMode},
    http::Client,
    report::Row,
    run::{merge, percentiles, Run},
};

/// What the scenario needs besides the broker.
pub struct Setup<'a> {
    /// The tenant with the WebAssembly policy, and its API key.
    pub tenant: &'a str,
    pub api_key: &'a str,
    pub admin_token: &'a str,
    /// The candidate component's bytes.
    pub candidate: Vec<u8>,
    pub rounds: usize,
}

/// One side's measurements, per round.
#[derive(Default)]
struct Side {
    pooled: Run,
    p50s: Vec<f64>,
    p99s: Vec<f64>,
}

/// The scenario at each client count of `clients`: its rows, and per
/// count `(clients, p50 ratio, p99 ratio)` with shadow / without.
///
/// # Errors
/// The shadow cannot be loaded or dropped.
pub async fn scenario(
    b: &Broker,
    setup: &Setup<'_>,
    clients: &[usize],
    duration: Duration,
) -> anyhow::Result<(Vec<Row>, Vec<(usize, f64, f64)>)> {
    let admin = b
        .try_client(Some(setup.admin_token))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let path = format!("/v1/admin/tenants/{}/policy", setup.tenant);
    // None left over from an interrupted run (a 404 when none is).
    delete_shadow(&admin, &path).await?;
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &c in clients {
        let mut off = Side::default();
        let mut on = Side::default();
        let mut judged = Vec::new();
        for round in 0..setup.rounds {
            for shadowed in [round % 2 == 1, round % 2 == 0] {
                if shadowed {
                    load(&admin, &path, &setup.candidate).await?;
                }
                let prefix = format!("sh{}-", u8::from(shadowed));
                let run = lock_tallies(
                    b,
                    setup.api_key,
                    &prefix,
                    LockMode::Uncontended,
                    c,
                    duration,
                )
                .await;
                let side = if shadowed { &mut on } else { &mut off };
                let lat: Vec<u32> = run.tallies.iter().flat_map(|t| t.lat_us.clone()).collect();
                if let Some(p) = percentiles(lat) {
                    side.p50s.push(p.p50_ms);
                    side.p99s.push(p.p99_ms);
                    eprintln!(
                        "lockbench: policy-shadow {} c={c} round {round}: pair p50 {:.3} ms, p99 {:.3} ms",
                        if shadowed { "on" } else { "off" },
                        p.p50_ms,
                        p.p99_ms
                    );
                }
                side.pooled.extend(run);
                if shadowed {
                    judged.push(drop_shadow(&admin, &path).await?);
                }
            }
        }
        let (p50_off, p50_on) = (median(&off.p50s), median(&on.p50s));
        let (p99_off, p99_on) = (median(&off.p99s), median(&on.p99s));
        for (label, side, p50, p99) in [
            ("policy-shadow: without", off, p50_off, p99_off),
            ("policy-shadow: with shadow", on, p50_on, p99_on),
        ] {
            let m = merge(side.pooled);
            let mut row = Row::new(label, c, duration * setup.rounds as u32, &m);
            row.handoff = None;
            row.note.clear();
            row.add_note(format!(
                "median of {} rounds: p50 {p50:.3} / p99 {p99:.3} ms",
                side.p50s.len()
            ));
            row.set("rounds_p50_ms", side.p50s);
            row.set("rounds_p99_ms", side.p99s);
            if m.errors > 0 {
                row.add_note(format!("{} errors", m.errors));
            }
            rows.push(row);
        }
        if let Some(last) = rows.last_mut() {
            let total = judged.iter().fold(ShadowCount::default(), |mut t, n| {
                t.agree += n.agree;
                t.disagree += n.disagree;
                t.failed += n.failed;
                t.dropped += n.dropped;
                t
            });
            last.add_note(format!(
                "shadow naming calls: {} agree, {} disagree, {} failed, {} dropped",
                total.agree, total.disagree, total.failed, total.dropped
            ));
            last.add_note(format!(
                "with/without: p50 {:.3}, p99 {:.3}",
                p50_on / p50_off,
                p99_on / p99_off
            ));
        }
        ratios.push((c, p50_on / p50_off, p99_on / p99_off));
    }
    Ok((rows, ratios))
}

/// Loads the candidate as the tenant's shadow.
async fn load(admin: &Client, path: &str, candidate: &[u8]) -> anyhow::Result<()> {
    let r = admin
        .call(
            Method::PUT,
            &format!("{path}?mode=shadow"),
            Some("application/wasm"),
            Bytes::copy_from_slice(candidate),
        )
        .await?;
    anyhow::ensure!(
        r.status == 200,
        "loading the shadow: HTTP {} {}",
        r.status,
        r.text()
    );
    Ok(())
}

/// `DELETE {path}/shadow`.
async fn delete_shadow(admin: &Client, path: &str) -> anyhow::Result<crate::http::Reply> {
    let shadow = format!("{path}/shadow");
    Ok(admin
        .call(Method::DELETE, &shadow, None, Bytes::new())
        .await?)
}

/// Drops the tenant's shadow; its naming counts.
async fn drop_shadow(admin: &Client, path: &str) -> anyhow::Result<ShadowCount> {
    let r = delete_shadow(admin, path).await?;
    let report: PolicyShadow = r
        .parse()
        .map_err(|e| anyhow::anyhow!("dropping the shadow: HTTP {} {e}", r.status))?;
    Ok(report.counts.naming)
}

/// The median of `values` (0 when empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
