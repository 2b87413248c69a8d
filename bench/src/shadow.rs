//! `policy-shadow`: what a shadow candidate costs the requests of its
//! tenant (issue #23: the active path's latency within 10 % of no shadow,
//! with a candidate that disagrees, one that traps and one that loops).
//!
//! Uncontended acquire/release pairs on a tenant with a WebAssembly policy,
//! without a shadow and with each candidate loaded in turn (`PUT
//! .../policy?mode=shadow`), alternated for several rounds in one run (each
//! round starts one side later, so no side always runs warmer): a row for
//! each side, pooled over the rounds, and per candidate the ratios of the
//! medians of the rounds' p50s and p99s (with that shadow / without). Keys
//! contain `boom`, the test fixtures' trigger, so a `trap` or `loop`
//! candidate misbehaves on every naming call. Each shadow is dropped after
//! its run (`DELETE .../policy/shadow`), whose last report says how many
//! naming calls it judged, disagreed on, failed and dropped.

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

/// A shadow candidate: its name (the file's stem) and component bytes.
pub struct Candidate {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// What the scenario needs besides the broker.
pub struct Setup<'a> {
    /// The tenant with the WebAssembly policy, and its API key.
    pub tenant: &'a str,
    pub api_key: &'a str,
    pub admin_token: &'a str,
    pub candidates: Vec<Candidate>,
    pub rounds: usize,
}

/// One side's measurements, per round.
#[derive(Default)]
struct Side {
    pooled: Run,
    p50s: Vec<f64>,
    p99s: Vec<f64>,
    /// The shadow's naming counts, summed over its runs.
    judged: ShadowCount,
}

/// A candidate's ratios at a client count: with that shadow / without.
pub struct Measured {
    pub clients: usize,
    pub candidate: String,
    pub p50: f64,
    pub p99: f64,
}

/// The scenario at each client count of `clients`: its rows, and the
/// ratios of each candidate.
///
/// # Errors
/// A shadow cannot be loaded or dropped.
pub async fn scenario(
    b: &Broker,
    setup: &Setup<'_>,
    clients: &[usize],
    duration: Duration,
) -> anyhow::Result<(Vec<Row>, Vec<Measured>)> {
    let admin = b
        .try_client(Some(setup.admin_token))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let path = format!("/v1/admin/tenants/{}/policy", setup.tenant);
    // None left over from an interrupted run (a 404 when none is).
    delete_shadow(&admin, &path).await?;
    // Side 0 runs without a shadow, side i with candidate i - 1.
    let sides = setup.candidates.len() + 1;
    let mut rows = Vec::new();
    let mut measured = Vec::new();
    for &c in clients {
        let mut measure: Vec<Side> = (0..sides).map(|_| Side::default()).collect();
        for round in 0..setup.rounds {
            for turn in 0..sides {
                let s = (round + turn) % sides;
                let candidate = s.checked_sub(1).map(|i| &setup.candidates[i]);
                if let Some(candidate) = candidate {
                    load(&admin, &path, &candidate.bytes).await?;
                }
                let label = candidate.map_or("off", |k| k.name.as_str());
                let run = lock_tallies(
                    b,
                    setup.api_key,
                    &format!("sh{s}-boom-"),
                    LockMode::Uncontended,
                    c,
                    duration,
                )
                .await;
                let side = &mut measure[s];
                let lat: Vec<u32> = run.tallies.iter().flat_map(|t| t.lat_us.clone()).collect();
                if let Some(p) = percentiles(lat) {
                    side.p50s.push(p.p50_ms);
                    side.p99s.push(p.p99_ms);
                    eprintln!(
                        "lockbench: policy-shadow {label} c={c} round {round}: pair p50 {:.3} ms, p99 {:.3} ms",
                        p.p50_ms,
                        p.p99_ms
                    );
                }
                side.pooled.extend(run);
                if candidate.is_some() {
                    let n = drop_shadow(&admin, &path).await?;
                    side.judged.agree += n.agree;
                    side.judged.disagree += n.disagree;
                    side.judged.failed += n.failed;
                    side.judged.dropped += n.dropped;
                }
            }
        }
        let (p50_off, p99_off) = (median(&measure[0].p50s), median(&measure[0].p99s));
        for (s, side) in measure.into_iter().enumerate() {
            let (p50, p99) = (median(&side.p50s), median(&side.p99s));
            let candidate = s.checked_sub(1).map(|i| setup.candidates[i].name.as_str());
            let label = match candidate {
                None => "policy-shadow: without".to_owned(),
                Some(name) => format!("policy-shadow: with {name}"),
            };
            let m = merge(side.pooled);
            let mut row = Row::new(&label, c, duration * setup.rounds as u32, &m);
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
            if let Some(name) = candidate {
                let n = side.judged;
                row.add_note(format!(
                    "shadow naming calls: {} agree, {} disagree, {} failed, {} dropped",
                    n.agree, n.disagree, n.failed, n.dropped
                ));
                row.add_note(format!(
                    "with/without: p50 {:.3}, p99 {:.3}",
                    p50 / p50_off,
                    p99 / p99_off
                ));
                measured.push(Measured {
                    clients: c,
                    candidate: name.to_owned(),
                    p50: p50 / p50_off,
                    p99: p99 / p99_off,
                });
            }
            rows.push(row);
        }
    }
    Ok((rows, measured))
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
