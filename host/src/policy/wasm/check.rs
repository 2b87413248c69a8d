//! `lockbroker policy check`: a component loaded exactly as the broker
//! would load it (same engine, linkers, limits, cache and self-check), then
//! asked for the storage keys of sample keys (and, if it exports `timing`,
//! their delays) and timed per export.

use std::time::{Duration, Instant};

use super::{LoadError, LoadOptions, Prepared, WasmHost};
use crate::policy::{Contention, PolicyFault, Timing, Waiter};

/// Calls per export for the latency figures.
pub const CALLS: usize = 200;

/// Call latency of one export.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
}

/// What became of a sample key: its storage key, or the policy's rejection
/// (`Err(Ok(reason))`), or its fault (`Err(Err(fault))`).
pub type Named = Result<String, Result<String, PolicyFault>>;

/// What `policy check` learnt about a component the broker would accept.
pub struct Report {
    pub prepared: Prepared,
    /// Each sample key and what became of it.
    pub keys: Vec<(String, Named)>,
    /// For a policy that exports `timing`: each storage key of the sample
    /// keys and what the policy says of its delays (checked as the broker
    /// checks them); empty otherwise.
    pub delays: Vec<(String, Result<Timing, PolicyFault>)>,
    /// For a policy that exports `deadlocks`: each storage key of the
    /// sample keys and whether its session waits are checked for
    /// deadlocks; empty otherwise.
    pub deadlocks: Vec<(String, Result<bool, PolicyFault>)>,
    /// `(export, latency)` for naming, fairness, backoff and timing (if
    /// exported).
    pub latency: Vec<(&'static str, Result<Latency, PolicyFault>)>,
}

impl Report {
    /// Why the broker would fail requests with this policy, if it would:
    /// a sample key or a timed call faulted.
    pub fn problem(&self) -> Option<String> {
        let key = self.keys.iter().find_map(|(key, named)| match named {
            Err(Err(fault)) => Some(format!("naming faults on key {key:?}: {fault}")),
            _ => None,
        });
        let delays = || {
            self.delays.iter().find_map(|(key, d)| {
                d.as_ref()
                    .err()
                    .map(|fault| format!("timing faults on storage key {key:?}: {fault}"))
            })
        };
        let deadlocks = || {
            self.deadlocks.iter().find_map(|(key, d)| {
                d.as_ref()
                    .err()
                    .map(|fault| format!("deadlocks faults on storage key {key:?}: {fault}"))
            })
        };
        key.or_else(delays).or_else(deadlocks).or_else(|| {
            self.latency.iter().find_map(|(export, l)| {
                l.as_ref()
                    .err()
                    .map(|fault| format!("{export} faults: {fault}"))
            })
        })
    }
}

/// Loads `bytes` as the broker would for `options`, then names `keys` and
/// times [`CALLS`] calls of each export. Blocking: WASI policies must not
/// be called on an async worker thread.
///
/// # Errors
/// The broker would refuse the component; the reason.
pub fn check(
    host: &WasmHost,
    bytes: &[u8],
    options: &LoadOptions,
    keys: &[String],
) -> Result<Report, LoadError> {
    let prepared = host.prepare(bytes, options)?;
    let policy = prepared.loaded.policy.clone();
    let keys: Vec<(String, Named)> = keys
        .iter()
        .map(|key| {
            let named = match policy.storage_key(&options.tenant, key) {
                Ok(Ok(storage)) => Ok(storage),
                Ok(Err(reason)) => Err(Ok(reason)),
                Err(fault) => Err(Err(fault)),
            };
            (key.clone(), named)
        })
        .collect();
    let delays = if policy.has_timing() {
        keys.iter()
            .filter_map(|(_, named)| named.as_ref().ok())
            .map(|storage| {
                let timing = policy.timing(storage).and_then(Timing::checked);
                (storage.clone(), timing)
            })
            .collect()
    } else {
        Vec::new()
    };
    let deadlocks = if policy.has_deadlocks() {
        keys.iter()
            .filter_map(|(_, named)| named.as_ref().ok())
            .map(|storage| (storage.clone(), policy.detects_deadlocks(storage)))
            .collect()
    } else {
        Vec::new()
    };
    let sample_key = "check".to_owned();
    let waiters: Vec<Waiter> = (0..4u32)
        .map(|i| Waiter {
            id: u64::from(i),
            owner: format!("worker-{i}"),
            priority: i32::try_from(i % 2).unwrap_or(0),
            enqueued_at_ms: 1_700_000_000_000 + u64::from(i),
            attempts: 0,
        })
        .collect();
    let mut latency = vec![
        (
            "naming",
            time(|| policy.storage_key(&options.tenant, &sample_key).map(drop)),
        ),
        (
            "fairness",
            time(|| policy.pick_next(&sample_key, &waiters).map(drop)),
        ),
        (
            "backoff",
            time(|| {
                policy
                    .next_delay(&Contention {
                        attempt: 2,
                        waited_ms: 10,
                        budget_ms: 1000,
                        waiters: 3,
                        lease_remaining_ms: 500,
                        seed: 42,
                    })
                    .map(drop)
            }),
        ),
    ];
    if policy.has_timing() {
        latency.push(("timing", time(|| policy.timing(&sample_key).map(drop))));
    }
    if policy.has_deadlocks() {
        latency.push((
            "deadlocks",
            time(|| policy.detects_deadlocks(&sample_key).map(drop)),
        ));
    }
    Ok(Report {
        prepared,
        keys,
        delays,
        deadlocks,
        latency,
    })
}

/// p50 and p99 of [`CALLS`] calls of `f`; the first fault ends it.
fn time(mut f: impl FnMut() -> Result<(), PolicyFault>) -> Result<Latency, PolicyFault> {
    let mut took: Vec<Duration> = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        f()?;
        took.push(started.elapsed());
    }
    took.sort_unstable();
    let at = |q: usize| took[(took.len() * q / 100).min(took.len() - 1)];
    Ok(Latency {
        p50: at(50),
        p99: at(99),
    })
}
