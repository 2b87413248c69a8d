//! Running N client tasks for a fixed time and collecting what they saw.
//!
//! Every task connects (and warms its connection) first, then waits at a
//! [`Gate`] so that all of them start their timed loop together. Only
//! operations that complete before the deadline are counted: the rate is
//! ops / duration, whatever the stragglers do after it.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use tokio::sync::Barrier;

use crate::cpu;

/// The common start of a run's client tasks.
pub struct Gate {
    barrier: Barrier,
    start: OnceLock<Instant>,
    duration: Duration,
}

impl Gate {
    pub fn new(clients: usize, duration: Duration) -> Arc<Gate> {
        Arc::new(Gate {
            barrier: Barrier::new(clients),
            start: OnceLock::new(),
            duration,
        })
    }

    /// Waits for every task to be ready; the deadline of the timed loop.
    pub async fn ready(&self) -> Instant {
        self.barrier.wait().await;
        *self.start.get_or_init(Instant::now) + self.duration
    }
}

/// Microseconds, saturating at `u32::MAX` (71 minutes).
pub fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// What one client task saw.
#[derive(Default)]
pub struct Tally {
    /// Latency of each counted operation, in µs.
    pub lat_us: Vec<u32>,
    /// A second latency of interest (e.g. the acquire alone), in µs.
    pub aux_us: Vec<u32>,
    /// The release request alone, in µs.
    pub release_us: Vec<u32>,
    /// Completed operations (grants, pairs, renewals).
    pub ops: u64,
    /// Expected refusals: 409s, empty claims.
    pub refused: u64,
    /// Unexpected answers and transport errors.
    pub errors: u64,
    pub first_error: Option<String>,
    /// (fencing token or sequence number, instant the grant was received).
    pub grants: Vec<(u64, Instant)>,
    /// (token, instant the release answer was received).
    pub releases: Vec<(u64, Instant)>,
    /// Which broker this client talks to, when a scenario uses several
    /// (0 = the first): handoffs are then split into same-broker and
    /// cross-broker pairs.
    pub broker: Option<u8>,
}

impl Tally {
    pub fn error(&mut self, what: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }
}

/// The tallies of a run's clients and the CPU used during its timed part.
#[derive(Default)]
pub struct Run {
    pub tallies: Vec<Tally>,
    pub cpu: Option<cpu::Usage>,
}

impl Run {
    /// Pools another run of the same scenario into this one.
    pub fn extend(&mut self, other: Run) {
        self.tallies.extend(other.tallies);
        self.cpu = match (self.cpu, other.cpu) {
            (Some(mut a), Some(b)) => {
                a.add(&b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }

    pub fn ops(&self) -> u64 {
        self.tallies.iter().map(|t| t.ops).sum()
    }
}

/// Runs `clients` tasks made by `make(client_index, gate)`, waits for all.
pub async fn run_clients<F, Fut>(clients: usize, duration: Duration, make: F) -> Run
where
    F: Fn(usize, Arc<Gate>) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    let gate = Gate::new(clients, duration);
    let handles: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(make(c, gate.clone())))
        .collect();
    // CPU counters at the common start and at the deadline.
    let probe = {
        let gate = gate.clone();
        tokio::spawn(async move {
            let start = loop {
                if let Some(start) = gate.start.get() {
                    break *start;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let from = cpu::snapshot();
            tokio::time::sleep_until((start + gate.duration).into()).await;
            cpu::usage(from, cpu::snapshot())
        })
    };
    let mut tallies = Vec::with_capacity(clients);
    for handle in handles {
        match handle.await {
            Ok(t) => tallies.push(t),
            Err(e) => {
                let mut t = Tally::default();
                t.error(|| format!("client task failed: {e}"));
                tallies.push(t);
            }
        }
    }
    Run {
        tallies,
        cpu: probe.await.ok(),
    }
}

/// p50, p99, p999 of a latency list, in milliseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

pub fn percentiles(mut us: Vec<u32>) -> Option<Percentiles> {
    if us.is_empty() {
        return None;
    }
    us.sort_unstable();
    let at = |q: f64| {
        let i = ((us.len() as f64 * q).ceil() as usize).clamp(1, us.len()) - 1;
        f64::from(us[i]) / 1000.0
    };
    Some(Percentiles {
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        p999_ms: at(0.999),
    })
}

/// All tasks' tallies of one run, merged.
pub struct Merged {
    pub ops: u64,
    pub refused: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub lat: Option<Percentiles>,
    pub aux: Option<Percentiles>,
    pub handoff: Option<Handoffs>,
    pub release: Option<Percentiles>,
    pub cpu: Option<cpu::Usage>,
}

/// Gaps between a release answer and the next holder's grant answer.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Handoffs {
    pub pairs: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Share of pairs whose grant answer arrived before the release answer
    /// (counted as a gap of 0).
    pub grant_first_share: f64,
    /// With several brokers: pairs whose release and grant went through the
    /// same broker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same: Option<HandoffSplit>,
    /// With several brokers: pairs released through one broker and granted
    /// through another (found by the grantee's broker's wake loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross: Option<HandoffSplit>,
}

/// The handoff gaps of one kind of pair.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HandoffSplit {
    pub pairs: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl HandoffSplit {
    fn of(gaps: Vec<u32>) -> Option<HandoffSplit> {
        let pairs = gaps.len();
        let p = percentiles(gaps)?;
        Some(HandoffSplit {
            pairs,
            p50_ms: p.p50_ms,
            p99_ms: p.p99_ms,
        })
    }
}

pub fn merge(run: Run) -> Merged {
    let mut lat = Vec::new();
    let mut aux = Vec::new();
    let mut release = Vec::new();
    let (mut ops, mut refused, mut errors) = (0, 0, 0);
    let mut first_error = None;
    let mut grants = Vec::new();
    let mut releases = HashMap::new();
    for t in run.tallies {
        ops += t.ops;
        refused += t.refused;
        errors += t.errors;
        if first_error.is_none() {
            first_error = t.first_error;
        }
        lat.extend(t.lat_us);
        aux.extend(t.aux_us);
        release.extend(t.release_us);
        let side = t.broker;
        grants.extend(t.grants.into_iter().map(|(token, at)| (token, at, side)));
        releases.extend(
            t.releases
                .into_iter()
                .map(|(token, at)| (token, (at, side))),
        );
    }
    Merged {
        ops,
        refused,
        errors,
        first_error,
        lat: percentiles(lat),
        aux: percentiles(aux),
        handoff: handoffs(&grants, &releases),
        release: percentiles(release),
        cpu: run.cpu,
    }
}

/// A grant or release answer: token, when it arrived, through which broker.
type Event = (u64, Instant, Option<u8>);

/// Pairs the grant of token t+1 with the release of token t. When both
/// sides of a pair know their broker, the pair also counts as same-broker
/// or cross-broker.
fn handoffs(grants: &[Event], releases: &HashMap<u64, (Instant, Option<u8>)>) -> Option<Handoffs> {
    let mut gaps = Vec::new();
    let (mut same, mut cross) = (Vec::new(), Vec::new());
    let mut early = 0usize;
    for (token, granted, to) in grants {
        let Some((released, from)) = token.checked_sub(1).and_then(|t| releases.get(&t)) else {
            continue;
        };
        let gap = match granted.checked_duration_since(*released) {
            Some(gap) => micros(gap),
            None => {
                early += 1;
                0
            }
        };
        gaps.push(gap);
        match (from, to) {
            (Some(a), Some(b)) if a == b => same.push(gap),
            (Some(_), Some(_)) => cross.push(gap),
            _ => {}
        }
    }
    let split = !same.is_empty() || !cross.is_empty();
    let pairs = gaps.len();
    let p = percentiles(gaps)?;
    let (same, cross) = if split {
        (HandoffSplit::of(same), HandoffSplit::of(cross))
    } else {
        (None, None)
    };
    Some(Handoffs {
        pairs,
        p50_ms: p.p50_ms,
        p99_ms: p.p99_ms,
        grant_first_share: early as f64 / pairs as f64,
        same,
        cross,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let p = percentiles((1..=1000).collect()).unwrap();
        assert_eq!(p.p50_ms, 0.5);
        assert_eq!(p.p99_ms, 0.99);
        assert_eq!(p.p999_ms, 0.999);
        assert!(percentiles(Vec::new()).is_none());
        let one = percentiles(vec![7000]).unwrap();
        assert_eq!(one.p50_ms, 7.0);
        assert_eq!(one.p999_ms, 7.0);
    }

    #[test]
    fn handoffs_pair_consecutive_tokens() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let releases: HashMap<u64, (Instant, Option<u8>)> =
            [(1, (ms(10), None)), (2, (ms(20), None))].into();
        // Token 2 granted 2 ms after 1 was released; token 3 before 2's
        // release answer; token 9 has no predecessor.
        let grants = [(2, ms(12), None), (3, ms(19), None), (9, ms(30), None)];
        let h = handoffs(&grants, &releases).unwrap();
        assert_eq!(h.pairs, 2);
        assert_eq!(h.p50_ms, 0.0);
        assert_eq!(h.p99_ms, 2.0);
        assert_eq!(h.grant_first_share, 0.5);
        assert!(h.same.is_none() && h.cross.is_none());
    }

    #[test]
    fn handoffs_split_by_broker() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // Released through broker 0 (tokens 1, 3) or 1 (token 2).
        let releases: HashMap<u64, (Instant, Option<u8>)> = [
            (1, (ms(10), Some(0))),
            (2, (ms(20), Some(1))),
            (3, (ms(30), Some(0))),
        ]
        .into();
        // 2: 0 -> 1 after 6 ms; 3: 1 -> 0 after 4 ms; 4: 0 -> 0 after 1 ms.
        let grants = [
            (2, ms(16), Some(1)),
            (3, ms(24), Some(0)),
            (4, ms(31), Some(0)),
        ];
        let h = handoffs(&grants, &releases).unwrap();
        assert_eq!(h.pairs, 3);
        let cross = h.cross.unwrap();
        assert_eq!(cross.pairs, 2);
        assert_eq!(cross.p50_ms, 4.0);
        assert_eq!(cross.p99_ms, 6.0);
        let same = h.same.unwrap();
        assert_eq!((same.pairs, same.p50_ms), (1, 1.0));
        // Only cross pairs: no same-broker split.
        let h = handoffs(&grants[..2], &releases).unwrap();
        assert!(h.same.is_none());
        assert_eq!(h.cross.unwrap().pairs, 2);
    }
}
