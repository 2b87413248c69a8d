//! How hot each key is (issue #32): this broker's grants, handoffs and
//! refusals of each key, and how long its grants waited, in ten-second
//! buckets over the last five minutes. `GET /v1/contention` adds up every
//! live broker's (each asked over `POST /internal/v1/heat`).
//!
//! Kept cheap for the hot path: one short lock of one of [`SHARDS`] maps
//! per grant or refusal, buckets made only when a key is active, at most
//! [`MOST_KEYS`] keys per broker (a key first seen beyond that is not
//! counted until the reaper forgets quiet keys), and nothing read from the
//! database.

use std::{
    collections::{hash_map::DefaultHasher, HashMap, VecDeque},
    hash::{Hash, Hasher},
    sync::Mutex,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::LockRef;
use crate::store::{listing::HeldCounts, Kind};

/// The width of a bucket.
pub const BUCKET: Duration = Duration::from_secs(10);
/// Buckets kept: the longest window asked for.
pub const BUCKETS: u64 = 30;
/// Keys counted per broker at most.
const MOST_KEYS: usize = 10_000;
/// Maps the keys are spread over (a grant locks one).
const SHARDS: usize = 16;
/// Wait buckets: bucket 0 under 1 ms, bucket `i` under `2^i` ms, the last
/// everything longer (over 9 minutes).
pub const WAIT_BUCKETS: usize = 20;

/// One key's counts in one bucket, or over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub grants: u64,
    pub handoffs: u64,
    pub refusals: u64,
    /// Grants by how long they waited (see [`WAIT_BUCKETS`]).
    pub waits: Vec<u64>,
}

impl Counts {
    /// Adds `other` in.
    pub fn add(&mut self, other: &Counts) {
        self.grants += other.grants;
        self.handoffs += other.handoffs;
        self.refusals += other.refusals;
        if self.waits.len() < other.waits.len() {
            self.waits.resize(other.waits.len(), 0);
        }
        for (mine, theirs) in self.waits.iter_mut().zip(&other.waits) {
            *mine += theirs;
        }
    }

    /// The wait under which fraction `q` of the grants waited, in ms (the
    /// upper end of its bucket: at most twice the true value); 0 without
    /// grants.
    pub fn wait_quantile_ms(&self, q: f64) -> u64 {
        let total: u64 = self.waits.iter().sum();
        if total == 0 {
            return 0;
        }
        // The rank of the grant at `q`, 1-based.
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in self.waits.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return if i == 0 { 1 } else { 1u64 << i };
            }
        }
        1u64 << (WAIT_BUCKETS - 1)
    }

    fn wait(&mut self, waited: Duration) {
        if self.waits.is_empty() {
            self.waits = vec![0; WAIT_BUCKETS];
        }
        let ms = waited.as_millis();
        let i = if ms == 0 {
            0
        } else {
            (128 - ms.leading_zeros()) as usize
        };
        self.waits[i.min(WAIT_BUCKETS - 1)] += 1;
    }
}

/// A key's counts, as one broker reports them over a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHeat {
    pub kind: u8,
    pub storage_key: String,
    pub counts: Counts,
}

/// One key's buckets, newest last.
struct Entry {
    tenant: String,
    kind: Kind,
    key: String,
    buckets: VecDeque<(u64, Counts)>,
}

/// This broker's counts.
pub(super) struct Heat {
    started: Instant,
    shards: Vec<Mutex<HashMap<u64, Entry>>>,
    /// Each tenant's leases held, by kind, as the reaper last counted them
    /// in the database (every broker's; see `listing::HELD_COUNT_EVERY`).
    held: Mutex<HashMap<String, HeldCounts>>,
}

impl Default for Heat {
    fn default() -> Heat {
        Heat {
            started: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            held: Mutex::default(),
        }
    }
}

/// What happened to an acquire of a key.
#[derive(Debug, Clone, Copy)]
pub(super) enum Seen {
    /// Granted after waiting this long (queueing included).
    Granted(Duration),
    /// Handed to it by a release (counted besides its grant).
    HandedOff,
    /// Refused: the key was held (its wait, if any, ran out).
    Refused,
}

impl Heat {
    fn bucket(&self) -> u64 {
        self.started.elapsed().as_secs() / BUCKET.as_secs()
    }

    fn id(tenant: &str, kind: Kind, key: &str) -> u64 {
        let mut h = DefaultHasher::new();
        (tenant, kind as u8, key).hash(&mut h);
        h.finish()
    }

    /// Counts `what` for `lock`.
    pub(super) fn saw(&self, lock: &LockRef, what: Seen) {
        let id = Heat::id(&lock.tenant, lock.kind, &lock.storage_key);
        let now = self.bucket();
        let shard = &self.shards[(id % SHARDS as u64) as usize];
        let mut keys = shard.lock().expect("heat");
        let full = keys.len() >= MOST_KEYS / SHARDS;
        let entry = match keys.get_mut(&id) {
            // Another key with the same hash: not counted (rare).
            Some(e)
                if e.kind != lock.kind || e.key != lock.storage_key || e.tenant != lock.tenant =>
            {
                return
            }
            Some(e) => e,
            None if full => return,
            None => keys.entry(id).or_insert_with(|| Entry {
                tenant: lock.tenant.clone(),
                kind: lock.kind,
                key: lock.storage_key.clone(),
                buckets: VecDeque::new(),
            }),
        };
        if entry.buckets.back().is_none_or(|(b, _)| *b != now) {
            entry.buckets.push_back((now, Counts::default()));
            while entry
                .buckets
                .front()
                .is_some_and(|(b, _)| now - b >= BUCKETS)
            {
                entry.buckets.pop_front();
            }
        }
        let counts = &mut entry.buckets.back_mut().expect("a bucket").1;
        match what {
            Seen::Granted(waited) => {
                counts.grants += 1;
                counts.wait(waited);
            }
            Seen::HandedOff => counts.handoffs += 1,
            Seen::Refused => counts.refusals += 1,
        }
    }

    /// `tenant`'s keys that start with `prefix`, each with its counts over
    /// the last `window` (rounded up to whole buckets), if any.
    pub(super) fn of(&self, tenant: &str, prefix: &str, window: Duration) -> Vec<KeyHeat> {
        let now = self.bucket();
        let span = window
            .as_secs()
            .div_ceil(BUCKET.as_secs())
            .clamp(1, BUCKETS);
        let mut found = Vec::new();
        for shard in &self.shards {
            for e in shard.lock().expect("heat").values() {
                if e.tenant != tenant || !e.key.starts_with(prefix) {
                    continue;
                }
                let mut counts = Counts::default();
                for (_, c) in e.buckets.iter().filter(|(b, _)| now - b < span) {
                    counts.add(c);
                }
                if counts != Counts::default() {
                    found.push(KeyHeat {
                        kind: e.kind as u8,
                        storage_key: e.key.clone(),
                        counts,
                    });
                }
            }
        }
        found
    }

    /// Notes `tenant`'s leases held, as just counted.
    pub(super) fn held_now(&self, tenant: &str, counts: HeldCounts) {
        self.held
            .lock()
            .expect("held")
            .insert(tenant.to_owned(), counts);
    }

    /// `tenant`'s leases held as last counted, if they were.
    pub(super) fn held(&self, tenant: &str) -> Option<HeldCounts> {
        self.held.lock().expect("held").get(tenant).copied()
    }

    /// Forgets the keys with nothing in the buckets kept.
    pub(super) fn prune(&self) {
        let now = self.bucket();
        for shard in &self.shards {
            shard
                .lock()
                .expect("heat")
                .retain(|_, e| e.buckets.back().is_some_and(|(b, _)| now - b < BUCKETS));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_fall_in_doubling_buckets_and_quantiles_read_their_upper_ends() {
        let mut c = Counts::default();
        for ms in [0, 1, 3, 3, 900, 2000] {
            c.wait(Duration::from_millis(ms));
        }
        assert_eq!(c.waits[0], 1);
        assert_eq!(c.waits[1], 1); // 1 ms: under 2
        assert_eq!(c.waits[2], 2); // 3 ms: under 4
        assert_eq!(c.waits[10], 1); // 900 ms: under 1024
        assert_eq!(c.waits[11], 1); // 2000 ms: under 2048
        assert_eq!(c.wait_quantile_ms(0.5), 4);
        assert_eq!(c.wait_quantile_ms(0.99), 2048);
        assert_eq!(Counts::default().wait_quantile_ms(0.5), 0);
        let mut sum = c.clone();
        sum.add(&c);
        assert_eq!(sum.waits[2], 4);
    }
}
