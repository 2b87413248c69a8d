//! One tenant at its quota never slows another: tenant A floods the broker
//! (16 clients, as fast as they can, ignoring every `429`) while tenant
//! B's latency stays within 2× of its latency alone.
//!
//! The broker runs as its own process; A is held to `max_requests_per_s`
//! and `max_held`, so what reaches the database from A is bounded and the
//! rest is refused before any database work. B measures the p99 of its
//! acquire and release requests in rounds alone and in rounds during the
//! flood, alternating (a noisy 2-core machine drifts), and the medians of
//! the rounds' p99s are compared. A's client threads run only on cores
//! that would otherwise idle: they stand for machines of their own, and on
//! this one they would otherwise take the cores from the broker and B
//! (1.8-2.1× on a machine where the broker alone kept B within 1.5-1.7×;
//! at nice 10, 2.3× in one CI run).

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use lockbroker_tests::{fresh_db_name, BrokerProcess, Client, KEY};

const FLOOD_KEY: &str = "flood-key";
/// Clients of the flooding tenant.
const FLOODERS: usize = 16;
/// Rounds of each kind; B's p99 of each round is one sample. Seven, and
/// 800 requests a round, because a p99 is a tail: with five rounds of 400
/// one slow disk flush in a flooded round decided the verdict (2.3-2.7×
/// in about one run in three, the broker unchanged).
const ROUNDS: usize = 7;
/// Acquire-release pairs of B per round (800 requests: a p99 of 8).
const PAIRS: usize = 400;

/// B's request latencies over one round of [`PAIRS`] pairs, sorted.
async fn round(b: &Client, key: &str) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(PAIRS * 2);
    for _ in 0..PAIRS {
        let sent = Instant::now();
        let reply = b.acquire(key, "b", 30_000, 0).await.unwrap();
        latencies.push(sent.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.text());
        let token = reply.json()["token"].as_u64().unwrap();
        let sent = Instant::now();
        let reply = b.release(key, "b", token).await.unwrap();
        latencies.push(sent.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    latencies.sort();
    latencies
}

fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Runs the calling thread only when a core would otherwise idle
/// (`SCHED_IDLE`; on Linux a thread's own policy; nice 19 where that is
/// refused). A's clients share this 2-core machine with the broker and
/// with B; in production they run elsewhere. What is measured is what the
/// broker does with A's requests, not how the kernel shares two cores
/// between the broker and A's own client code: at nice 10 the flooders
/// still took enough of them that one CI run in several measured 2.3×.
fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: both calls only read their arguments; 0 is the calling thread.
    let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if idle != 0 {
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    }
}

/// A's flood on threads of its own (its own runtime, so that B's requests
/// never wait behind A's tasks in the test's runtime: what is measured is
/// the broker), until `stop` is set. Counts A's answers by kind: (200,
/// 429, other).
fn flood(url: &str, stop: Arc<AtomicBool>) -> (std::thread::JoinHandle<()>, Arc<[AtomicU64; 3]>) {
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let (url, shared) = (url.to_owned(), counts.clone());
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .on_thread_start(lower_priority)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let tasks: Vec<_> = (0..FLOODERS)
                .map(|i| {
                    let a = Client::new(&url, Some(FLOOD_KEY)).unwrap();
                    let (stop, counts) = (stop.clone(), shared.clone());
                    tokio::spawn(async move {
                        let mut n = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            n += 1;
                            // New keys, held for a minute: A soon meets
                            // max_held.
                            let kind = match a.acquire(&format!("a-{i}-{n}"), "a", 60_000, 0).await
                            {
                                Ok(r) if r.status == 200 => 0,
                                Ok(r) if r.status == 429 => 1,
                                _ => 2,
                            };
                            counts[kind].fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
    });
    (thread, counts)
}

#[tokio::test]
async fn a_tenant_flooding_at_its_quota_leaves_another_within_2x() {
    let db = fresh_db_name();
    let broker = BrokerProcess::start(
        &db,
        &format!(
            "[[tenant]]\nname = \"flood\"\napi_key = \"{FLOOD_KEY}\"\nmax_requests_per_s = 200\nmax_held = 100\n"
        ),
    )
    .await;
    let b = Client::new(&broker.url, Some(KEY)).unwrap();
    // Warm up: connections, the key's row, the broker's caches.
    round(&b, "b-key").await;

    let (mut alone, mut flooded) = (Vec::new(), Vec::new());
    let mut counted = [0u64; 3];
    let mut flood_time = Duration::ZERO;
    for _ in 0..ROUNDS {
        alone.push(p99(&round(&b, "b-key").await));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread, counts) = flood(&broker.url, stop.clone());
        // The flood is on before B measures.
        while counts[1].load(Ordering::Relaxed) < 100 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let flood_started = Instant::now();
        flooded.push(p99(&round(&b, "b-key").await));
        flood_time += flood_started.elapsed();
        stop.store(true, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap();
        for (total, count) in counted.iter_mut().zip(counts.iter()) {
            *total += count.load(Ordering::Relaxed);
        }
    }
    let (alone, flooded) = (median(alone.clone()), median(flooded.clone()));
    let flood_rate = (counted[0] + counted[1]) as f64 / flood_time.as_secs_f64();
    eprintln!(
        "B's p99 alone {alone:?}, during A's flood {flooded:?} ({:.2}×); A's answers: {} granted, {} refused with 429, {} other ({flood_rate:.0}/s while B measured)",
        flooded.as_secs_f64() / alone.as_secs_f64(),
        counted[0],
        counted[1],
        counted[2]
    );
    assert!(
        flood_rate > 2.0 * 200.0,
        "A sent more than twice its max_requests_per_s while B measured"
    );
    assert!(
        counted[1] > counted[0] * 10,
        "A flooded past its quota (most of its requests refused)"
    );
    assert_eq!(counted[2], 0, "A got only 200s and 429s");
    assert!(
        flooded <= alone * 2,
        "B's p99 during A's flood ({flooded:?}) is more than 2× its p99 alone ({alone:?})"
    );
    broker.stop().await;
    lockbroker_tests::drop_db(&db).await;
}
