//! Readers share, writers stay alone, under load through one broker whose
//! rwlock operations are combined per key (`engine::rw_batch`): 24 readers
//! and 4 writers on 2 keys record every hold as they saw it (mode, token,
//! from the grant's arrival to just before the release was sent), and the
//! history is checked: no write hold overlaps any other hold of its key,
//! tokens are distinct per key and increase across every pair of holds
//! ordered by a write, reads did overlap, and every request was answered
//! (a grant, a refusal, never a server error).

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use lockbroker_api::{ReleaseRequest, RenewRequest, RwAcquireRequest, RwLease, RwMode};
use lockbroker_tests::{Broker, Client, Reply};

const READERS: usize = 24;
const WRITERS: usize = 4;
const KEYS: usize = 2;
const RUN_FOR: Duration = Duration::from_secs(5);
const TTL_MS: u64 = 30_000;

/// One hold as its client saw it. The real hold (from its grant's commit
/// to its release's) contains this span, so conflicting holds have
/// disjoint spans.
#[derive(Debug, Clone)]
struct Hold {
    key: usize,
    owner: String,
    mode: RwMode,
    token: u64,
    granted: Instant,
    released: Instant,
}

impl Hold {
    fn overlaps(&self, other: &Hold) -> bool {
        self.granted < other.released && other.granted < self.released
    }
}

/// A second, independent detector per key: the writer flag and the count
/// of readers, changed while held.
#[derive(Default)]
struct InUse {
    writer: AtomicBool,
    readers: AtomicU32,
}

async fn post<B: serde::Serialize>(c: &Client, key: usize, verb: &str, body: &B) -> Reply {
    c.post(&format!("/v1/rwlocks/rw-stress-{key}/{verb}"), body)
        .await
        .expect("the broker answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn combined_reads_share_and_writes_stay_exclusive() {
    let broker = Broker::start().await;
    let holds = Arc::new(Mutex::new(Vec::<Hold>::new()));
    let in_use: Arc<Vec<InUse>> = Arc::new((0..KEYS).map(|_| InUse::default()).collect());
    let deadline = Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for client in 0..READERS + WRITERS {
        let (c, holds, in_use) = (broker.client(), holds.clone(), in_use.clone());
        tasks.push(tokio::spawn(async move {
            let (mode, owner) = if client < WRITERS {
                (RwMode::Write, format!("writer-{client}"))
            } else {
                (RwMode::Read, format!("reader-{client}"))
            };
            // Some wait in the queue, some try once.
            let wait_ms = if client % 3 == 0 { 0 } else { 2_000 };
            let mut statuses: HashMap<u16, usize> = HashMap::new();
            let mut n = 0usize;
            while Instant::now() < deadline {
                n += 1;
                let key = (client + n) % KEYS;
                let body = RwAcquireRequest {
                    terms: lockbroker_api::LeaseTerms::new(TTL_MS, wait_ms),
                    ..RwAcquireRequest::new(&owner, mode)
                };
                let reply = post(&c, key, "acquire", &body).await;
                *statuses.entry(reply.status).or_default() += 1;
                if reply.status != 200 {
                    continue;
                }
                let granted = Instant::now();
                let lease = reply.ok::<RwLease>();
                assert_eq!(lease.mode, mode, "{lease:?}");
                let slot = &in_use[key];
                match mode {
                    RwMode::Write => {
                        assert!(
                            !slot.writer.swap(true, Ordering::SeqCst),
                            "two writers of key {key} at once"
                        );
                        assert_eq!(
                            slot.readers.load(Ordering::SeqCst),
                            0,
                            "a writer of key {key} among readers"
                        );
                    }
                    RwMode::Read => {
                        slot.readers.fetch_add(1, Ordering::SeqCst);
                        assert!(
                            !slot.writer.load(Ordering::SeqCst),
                            "a reader of key {key} with a writer"
                        );
                    }
                }
                // The hold itself (not a wait for a condition): a while,
                // so that holds could meet. Every fourth renews meanwhile.
                tokio::time::sleep(Duration::from_millis(1)).await;
                if n.is_multiple_of(4) {
                    let body = RenewRequest {
                        owner: owner.clone(),
                        token: lease.token,
                        ttl_ms: Some(TTL_MS),
                    };
                    let renewed = post(&c, key, "renew", &body).await;
                    assert_eq!(renewed.status, 200, "renew: {renewed:?}");
                    assert_eq!(renewed.ok::<RwLease>().token, lease.token);
                }
                match mode {
                    RwMode::Write => slot.writer.store(false, Ordering::SeqCst),
                    RwMode::Read => {
                        slot.readers.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                let released = Instant::now();
                let body = ReleaseRequest {
                    owner: owner.clone(),
                    token: lease.token,
                };
                let r = post(&c, key, "release", &body).await;
                assert_eq!(r.status, 200, "release: {r:?}");
                holds.lock().unwrap().push(Hold {
                    key,
                    owner: owner.clone(),
                    mode,
                    token: lease.token,
                    granted,
                    released,
                });
            }
            statuses
        }));
    }
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for task in tasks {
        for (status, n) in task.await.unwrap() {
            *statuses.entry(status).or_default() += n;
        }
    }
    let unexpected: Vec<_> = statuses
        .iter()
        .filter(|(s, _)| !matches!(s, 200 | 409))
        .collect();
    assert!(
        unexpected.is_empty(),
        "every acquire answered 200 or 409: {statuses:?}"
    );

    let holds = holds.lock().unwrap().clone();
    let mut per_key: HashMap<usize, Vec<Hold>> = HashMap::new();
    for hold in holds {
        per_key.entry(hold.key).or_default().push(hold);
    }
    let (mut reads, mut writes, mut overlapping_reads) = (0, 0, 0);
    for (key, mut holds) in per_key {
        holds.sort_by_key(|h| h.granted);
        let mut tokens = HashSet::new();
        for h in &holds {
            assert!(
                tokens.insert(h.token),
                "token {} of key {key} granted twice",
                h.token
            );
        }
        for (i, a) in holds.iter().enumerate() {
            match a.mode {
                RwMode::Write => writes += 1,
                RwMode::Read => reads += 1,
            }
            for b in &holds[i + 1..] {
                let write = a.mode == RwMode::Write || b.mode == RwMode::Write;
                if a.overlaps(b) {
                    assert!(!write, "a write of key {key} overlaps: {a:?} and {b:?}");
                    overlapping_reads += 1;
                } else if write {
                    // Ordered by a write: the later grant has the later
                    // token.
                    let (first, then) = if a.released <= b.granted {
                        (a, b)
                    } else {
                        (b, a)
                    };
                    assert!(
                        then.token > first.token,
                        "tokens of key {key} do not increase across a write: {first:?} then {then:?}"
                    );
                }
            }
        }
        // Per owner, one hold at a time: its tokens increase too.
        let mut last: HashMap<&str, u64> = HashMap::new();
        for h in &holds {
            if let Some(before) = last.insert(&h.owner, h.token) {
                assert!(h.token > before, "{}'s tokens of key {key}", h.owner);
            }
        }
    }
    eprintln!(
        "{reads} reads and {writes} writes checked, {overlapping_reads} overlapping read pairs, answers {statuses:?}"
    );
    assert!(
        reads > 100 && writes > 0,
        "both modes ran: {reads} reads, {writes} writes"
    );
    assert!(
        overlapping_reads > 0,
        "reads never overlapped: sharing unproven"
    );
    broker.stop().await;
}
