//! A small load driver: `n` clients acquire, hold and release a few keys
//! for a bounded time and record everything in a [`History`], for a test
//! to inject faults meanwhile and check the history afterwards.
//!
//! Every request is bounded by a client-side timeout (recorded as its own
//! outcome), and the run as a whole by its duration plus the few requests
//! a client can have in flight when it ends.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    history::{History, Outcome, Recorder},
    Client,
};

/// How the clients behave. [`Default`] suits a fault test: leases short
/// enough to run out within it, a short hold, no server-side wait.
#[derive(Debug, Clone)]
pub struct Load {
    pub ttl_ms: u64,
    /// The acquire's `wait_ms` (0: one try, then back off).
    pub wait_ms: u64,
    /// How long a client keeps a lock it got.
    pub hold: Duration,
    /// Pause after a refused or failed request, so clients that get
    /// nothing do not spin.
    pub backoff: Duration,
    /// Client-side limit of one request, beyond its `wait_ms`.
    pub timeout: Duration,
    /// Release tries after a release got no definite answer.
    pub release_tries: u32,
    /// Owners are `{owners}-{task}`: loads that run side by side need
    /// prefixes of their own (a shared owner name would re-enter).
    pub owners: &'static str,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            ttl_ms: 2_000,
            wait_ms: 0,
            hold: Duration::from_millis(3),
            backoff: Duration::from_millis(5),
            timeout: Duration::from_secs(3),
            release_tries: 3,
            owners: "client",
        }
    }
}

/// Runs `n` clients for `duration` on `keys` with the default [`Load`].
/// `client_for(task, request)` gives the client of the task's `request`-th
/// request (counting from 0), so tasks can alternate between brokers.
///
/// # Panics
/// When a client task panics or does not finish in time.
pub async fn run_clients<F>(
    n: usize,
    duration: Duration,
    keys: &[&str],
    client_for: F,
    history: Arc<History>,
) where
    F: Fn(usize, u64) -> Client + Send + Sync + 'static,
{
    run_clients_with(&Load::default(), n, duration, keys, client_for, history).await;
}

/// [`run_clients`] with another behaviour.
///
/// # Panics
/// As [`run_clients`].
pub async fn run_clients_with<F>(
    load: &Load,
    n: usize,
    duration: Duration,
    keys: &[&str],
    client_for: F,
    history: Arc<History>,
) where
    F: Fn(usize, u64) -> Client + Send + Sync + 'static,
{
    assert!(!keys.is_empty(), "at least one key");
    let client_for = Arc::new(client_for);
    let keys: Arc<Vec<String>> = Arc::new(keys.iter().map(|k| (*k).to_owned()).collect());
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..n)
        .map(|task| {
            let driver = Driver {
                task,
                load: load.clone(),
                keys: keys.clone(),
                client_for: client_for.clone(),
                history: history.clone(),
                requests: 0,
                rng: 0x9E37_79B9_7F4A_7C15 ^ (task as u64 + 1),
            };
            tokio::spawn(driver.run(deadline))
        })
        .collect();
    // At the deadline a client may be in one acquire and a few releases.
    let one = load.timeout + Duration::from_millis(load.wait_ms) + load.hold + load.backoff;
    let grace = one * (2 + load.release_tries) + Duration::from_secs(5);
    for task in tasks {
        tokio::time::timeout_at((deadline + grace).into(), task)
            .await
            .expect("a load client did not stop in time")
            .expect("a load client panicked");
    }
}

struct Driver<F> {
    task: usize,
    load: Load,
    keys: Arc<Vec<String>>,
    client_for: Arc<F>,
    history: Arc<History>,
    requests: u64,
    rng: u64,
}

impl<F: Fn(usize, u64) -> Client> Driver<F> {
    async fn run(mut self, deadline: Instant) {
        let owner = format!("{}-{}", self.load.owners, self.task);
        while Instant::now() < deadline {
            let pick = self.random() % self.keys.len() as u64;
            let key = self.keys[pick as usize].clone();
            let outcome = self
                .recorder()
                .acquire(&key, &owner, self.load.ttl_ms, self.load.wait_ms)
                .await;
            let Some(token) = outcome.granted() else {
                // A client's back-off, part of the load (not a wait for a
                // condition): refused clients must not spin.
                tokio::time::sleep(self.load.backoff).await;
                continue;
            };
            // The hold itself: what the load does with a lock it got.
            tokio::time::sleep(self.load.hold).await;
            self.release(&key, &owner, token).await;
        }
    }

    /// Releases until the broker says the lock is free, it says we do not
    /// hold it, or the tries are spent (the lease then runs out by itself).
    async fn release(&mut self, key: &str, owner: &str, token: u64) {
        for _ in 0..self.load.release_tries {
            match self.recorder().release(key, owner, token).await {
                // Freed, or not ours any more.
                Outcome::Reply {
                    status: 200,
                    released: Some(true),
                    ..
                }
                | Outcome::Reply { status: 409, .. } => return,
                // Still held: an earlier acquire whose answer was lost
                // re-entered; release again.
                Outcome::Reply { status: 200, .. } => {}
                // No definite answer: back off before the next try.
                _ => tokio::time::sleep(self.load.backoff).await,
            }
        }
    }

    fn recorder(&mut self) -> Recorder {
        let client = (self.client_for)(self.task, self.requests);
        self.requests += 1;
        Recorder::new(client, self.history.clone(), self.load.timeout)
    }

    /// xorshift64: keys need not be random in any strong sense, only
    /// spread, and no dependency is needed for that.
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}
