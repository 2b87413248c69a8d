//! Scenarios against a running broker, over HTTP (or HTTPS), one connection
//! per client task (each task has its own `Client`, whose pool keeps one
//! connection for sequential requests), except `new connection per pair`.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use crate::http::{encode_key, Client, Reply, Tls};
use lockbroker_api as api;
use rand::{rngs::StdRng, Rng, SeedableRng};
use tokio::sync::{watch, Notify};

use crate::{
    report::Row,
    run::{merge, micros, run_clients, Run, Tally},
    sessions::{self, Keeper},
};

/// Lease length of the short scenarios.
const TTL_MS: u64 = 30_000;
/// Lease length of the held leases: longer than the whole run, so the
/// broker's default maximum (1 h). With 10 min, filling a million leases on
/// a busy machine (about 20 min) let the first ones expire before they
/// were measured.
const HELD_TTL_MS: u64 = 3_600_000;
/// Queue budget of the waiting scenarios.
const WAIT_MS: u64 = 5_000;
/// TTL of `contended-session`'s sessions: a keepalive goes every third of
/// it, so in a run of a few seconds the only one is each session's first,
/// sent as it opens (at the start of the timed part at the latest), and the
/// run measures the acquires and releases alone.
const SESSION_TTL_MS: u64 = 60_000;
/// Clients that fill and exercise the held leases.
const HELD_CLIENTS: usize = 32;
/// Keys per multi-lock when filling the held leases: each key's lease is an
/// ordinary one (renewed and released one by one afterwards), but 64 new
/// rows per transaction fill a million in minutes rather than the quarter
/// of an hour one acquire per key took.
const FILL_CHUNK: usize = 64;

/// Where the broker is, and a prefix that keeps this run's keys apart.
pub struct Broker {
    pub url: String,
    pub run: String,
    /// What an `https://` broker's certificate is checked against (`None`
    /// for `http://`).
    pub tls: Option<Tls>,
}

/// What a refused or failed answer was, for the log.
fn describe(r: &Reply) -> String {
    format!("HTTP {} {}", r.status, r.text())
}

/// A pause after a transport error, so a dead broker is not hammered.
async fn pause() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

impl Broker {
    /// A plain-HTTP broker.
    pub fn http(url: &str, run: &str) -> Broker {
        Broker {
            url: url.to_owned(),
            run: run.to_owned(),
            tls: None,
        }
    }

    /// A client of this broker (http or https as its URL says).
    ///
    /// # Errors
    /// The URL does not fit the broker's scheme.
    pub fn try_client(&self, api_key: Option<&str>) -> Result<Client, crate::http::Error> {
        match &self.tls {
            Some(tls) => Client::https(&self.url, api_key, tls),
            None => Client::new(&self.url, api_key),
        }
    }

    fn client(&self, api_key: &str) -> Client {
        self.try_client(Some(api_key))
            .expect("broker URL checked at start")
    }
}

/// How the clients of a lock scenario behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Own keys, `wait_ms` 0: acquire + release pairs.
    Uncontended,
    /// One key, `wait_ms` 5000: the queue with direct handoff.
    Contended,
    /// As `Contended`, but each client holds the key in a session of its
    /// own (opened before the timed part, kept alive, closed after it), so
    /// every wait is a session waiting for a key another session holds:
    /// the broker checks each such wait for a deadlock cycle before it
    /// queues it (issue #33). Beside `contended`, what that check costs.
    ContendedSession,
    /// One key, `wait_ms` 0, retried at once.
    Storm,
    /// As `Uncontended`, but each pair on a new connection (over https, a
    /// full handshake): what a short-lived client such as a cron job pays.
    NewConnection,
}

impl LockMode {
    /// Each client on keys of its own (no handoffs).
    fn own_keys(self) -> bool {
        matches!(self, LockMode::Uncontended | LockMode::NewConnection)
    }

    /// All clients wait in one key's queue (`wait_ms` [`WAIT_MS`]).
    fn queues(self) -> bool {
        matches!(self, LockMode::Contended | LockMode::ContendedSession)
    }
}

/// Lock scenarios: the raw tallies (so runs can be pooled).
pub async fn lock_tallies(
    b: &Broker,
    api_key: &str,
    prefix: &str,
    mode: LockMode,
    clients: usize,
    duration: Duration,
) -> Run {
    lock_tallies_on(&[b], api_key, prefix, mode, clients, duration).await
}

/// Lock scenarios with the clients spread over brokers sharing one
/// database: client `c` talks to `brokers[c % brokers.len()]` (and, with
/// more than one, its tally says which, for the handoff split).
///
/// With more than one broker, each client first warms its broker's pool
/// (an acquire and release of a key of its own, before the common start),
/// and a contended run starts with a line-up: the key is held while the
/// clients join its queue one after the other in client order, so that the
/// queue, which keeps its cyclic order from then on (every holder re-joins
/// at the tail), alternates between the brokers.
async fn lock_tallies_on(
    brokers: &[&Broker],
    api_key: &str,
    prefix: &str,
    mode: LockMode,
    clients: usize,
    duration: Duration,
) -> Run {
    let b = brokers[0];
    let one_key = format!("{prefix}{}-{clients}", b.run);
    let several = brokers.len() > 1;
    let lineup = if several && mode.queues() {
        Lineup::start(b.client(api_key), &one_key, clients).await
    } else {
        None
    };
    let run = run_clients(clients, duration, |c, gate| {
        let side = c % brokers.len();
        let mut client = brokers[side].client(api_key);
        let (run, prefix, one_key) = (b.run.clone(), prefix.to_owned(), one_key.clone());
        let side = several.then(|| u8::try_from(side).unwrap_or(u8::MAX));
        let lineup = lineup.as_ref().map(Lineup::handle);
        async move {
            let mut t = Tally {
                broker: side,
                ..Tally::default()
            };
            let owner = format!("bench-{c}");
            if let Err(e) = client.get("/healthz").await {
                t.error(|| e.to_string());
            }
            if several {
                warm(&client, &format!("{prefix}{run}-warm-{c}"), &owner, &mut t).await;
            }
            // The client's session, open and kept alive before the start.
            let session = if mode == LockMode::ContendedSession {
                match sessions::open(&client, SESSION_TTL_MS).await {
                    Ok(id) => Some((Keeper::start(&client, &id, SESSION_TTL_MS), id)),
                    Err(e) => {
                        t.error(|| format!("{e:#}"));
                        None
                    }
                }
            } else {
                None
            };
            let deadline = gate.ready().await;
            if let Some((go, mut turn)) = lineup {
                if c == 0 {
                    go.notify_one();
                }
                let _ = turn.wait_for(|&t| t > c).await;
            }
            if mode == LockMode::ContendedSession && session.is_none() {
                // No session, no measure (its error is counted).
                return t;
            }
            let wait_ms = if mode.queues() { WAIT_MS } else { 0 };
            let mut n = 0u64;
            while Instant::now() < deadline {
                let key = if mode.own_keys() {
                    format!("{prefix}{run}-{c}-{}", n % 16)
                } else {
                    one_key.clone()
                };
                if mode == LockMode::NewConnection {
                    // The previous pair's connection closes with its pool.
                    client = client.fresh();
                }
                n += 1;
                let t0 = Instant::now();
                let reply = match &session {
                    Some((_, id)) => client.acquire_in(&key, &owner, id, wait_ms).await,
                    None => client.acquire(&key, &owner, TTL_MS, wait_ms).await,
                };
                let granted_at = Instant::now();
                let in_time = granted_at <= deadline;
                if mode == LockMode::Storm && in_time {
                    t.lat_us.push(micros(granted_at - t0));
                }
                let token = match reply {
                    Ok(r) if r.status == 200 => token(&r),
                    Ok(r) if r.status == 409 => {
                        if in_time {
                            t.refused += 1;
                        }
                        continue;
                    }
                    Ok(r) => {
                        t.error(|| describe(&r));
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        pause().await;
                        continue;
                    }
                };
                if in_time {
                    t.grants.push((token, granted_at));
                }
                let release_at = Instant::now();
                match client.release(&key, &owner, token).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        t.error(|| describe(&r));
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        pause().await;
                        continue;
                    }
                }
                let done = Instant::now();
                if done <= deadline {
                    t.releases.push((token, done));
                    t.release_us.push(micros(done - release_at));
                    t.ops += 1;
                    if mode != LockMode::Storm {
                        t.lat_us.push(micros(done - t0));
                        t.aux_us.push(micros(granted_at - t0));
                    }
                }
            }
            // After the deadline, so not timed.
            if let Some((keeper, id)) = session {
                keeper.stop().await;
                if let Err(e) = sessions::close(&client, &id).await {
                    t.error(|| format!("{e:#}"));
                }
            }
            t
        }
    })
    .await;
    if let Some(lineup) = lineup {
        lineup.finish().await;
    }
    run
}

/// An acquire and release of a key of the client's own (warms the
/// broker's connection pool).
async fn warm(client: &Client, key: &str, owner: &str, t: &mut Tally) {
    match client.acquire(key, owner, TTL_MS, 0).await {
        Ok(r) if r.status == 200 => {
            let token = token(&r);
            match client.release(key, owner, token).await {
                Ok(r) if r.status == 200 => {}
                Ok(r) => t.error(|| describe(&r)),
                Err(e) => t.error(|| e.to_string()),
            }
        }
        Ok(r) => t.error(|| describe(&r)),
        Err(e) => t.error(|| e.to_string()),
    }
}

/// The start of a contended run on several brokers: the key is held (by
/// `LINEUP_OWNER`, through the first broker) while the clients join its
/// queue in client order, one at a time; then it is released to client 0.
struct Lineup {
    go: Arc<Notify>,
    turn: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

/// Holds the key during the line-up.
const LINEUP_OWNER: &str = "bench-lineup";
/// How long the line-up waits for one client to show up in the queue.
const LINEUP_STEP: Duration = Duration::from_millis(200);

impl Lineup {
    async fn start(client: Client, key: &str, clients: usize) -> Option<Lineup> {
        let token = match client.acquire(key, LINEUP_OWNER, TTL_MS, 0).await {
            Ok(r) if r.status == 200 => token(&r),
            other => {
                let why = match other {
                    Ok(r) => describe(&r),
                    Err(e) => e.to_string(),
                };
                eprintln!(
                    "lockbench: no line-up (cannot hold {key}: {why}): queue order as it comes"
                );
                return None;
            }
        };
        let go = Arc::new(Notify::new());
        let (tx, turn) = watch::channel(0usize);
        let key = key.to_owned();
        let task = tokio::spawn({
            let go = go.clone();
            async move {
                go.notified().await;
                let mut late = 0;
                for c in 0..clients {
                    let _ = tx.send(c + 1);
                    // Until client c is in the queue (c + 1 waiters).
                    let asked = Instant::now();
                    loop {
                        let queued = match client.status(&key).await {
                            Ok(r) if r.status == 200 => waiters(&r),
                            _ => 0,
                        };
                        if queued > c as u64 {
                            break;
                        }
                        if asked.elapsed() > LINEUP_STEP {
                            late += 1;
                            break;
                        }
                        tokio::time::sleep(Duration::from_micros(500)).await;
                    }
                }
                if late > 0 {
                    eprintln!("lockbench: line-up: {late} client(s) not seen in the queue in time");
                }
                match client.release(&key, LINEUP_OWNER, token).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => eprintln!("lockbench: line-up release: {}", describe(&r)),
                    Err(e) => eprintln!("lockbench: line-up release: {e}"),
                }
            }
        });
        Some(Lineup { go, turn, task })
    }

    fn handle(&self) -> (Arc<Notify>, watch::Receiver<usize>) {
        (self.go.clone(), self.turn.clone())
    }

    async fn finish(self) {
        if let Err(e) = self.task.await {
            eprintln!("lockbench: line-up task failed: {e}");
        }
    }
}

pub async fn lock_scenario(
    b: &Broker,
    api_key: &str,
    mode: LockMode,
    clients: usize,
    duration: Duration,
) -> Row {
    let (name, prefix) = mode_names(mode);
    lock_row(&[b], api_key, mode, name, prefix, clients, duration).await
}

/// [`lock_scenario`] on a broker that serves https (`[tls]`) on the same
/// database, as rows `uncontended (https)` and `new connection per pair
/// (https)`: the cost of TLS next to the same rows over http.
pub async fn https_scenario(
    b: &Broker,
    api_key: &str,
    mode: LockMode,
    clients: usize,
    duration: Duration,
) -> Row {
    let (name, prefix) = mode_names(mode);
    let (name, prefix) = (format!("{name} (https)"), format!("t{prefix}"));
    lock_row(&[b], api_key, mode, &name, &prefix, clients, duration).await
}

/// [`lock_scenario`] on a broker whose database is a Galera cluster, as
/// rows `uncontended (galera)` and `contended (galera)`.
pub async fn galera_scenario(
    b: &Broker,
    api_key: &str,
    mode: LockMode,
    clients: usize,
    duration: Duration,
) -> Row {
    let (name, prefix) = mode_names(mode);
    let (name, prefix) = (format!("{name} (galera)"), format!("g{prefix}"));
    lock_row(&[b], api_key, mode, &name, &prefix, clients, duration).await
}

/// A lock scenario's row name and key prefix.
fn mode_names(mode: LockMode) -> (&'static str, &'static str) {
    match mode {
        LockMode::Uncontended => ("uncontended", "u"),
        LockMode::Contended => ("contended", "c"),
        LockMode::ContendedSession => ("contended-session", "cs"),
        LockMode::Storm => ("nowait-storm", "s"),
        LockMode::NewConnection => ("new connection per pair", "n"),
    }
}

/// `contended` with the clients on two brokers sharing the database: even
/// clients on `a`, odd ones on `b`, so most handoffs cross brokers (the
/// grantee's broker finds them with its wake loop).
pub async fn contended_cross(
    a: &Broker,
    b: &Broker,
    api_key: &str,
    clients: usize,
    duration: Duration,
) -> Row {
    let mut row = lock_row(
        &[a, b],
        api_key,
        LockMode::Contended,
        "contended-cross",
        "x",
        clients,
        duration,
    )
    .await;
    if let Some(h) = row.handoff {
        for (what, split) in [("same", h.same), ("cross", h.cross)] {
            if let Some(s) = split {
                row.set(&format!("handoff_{what}_pairs"), s.pairs);
                row.set(&format!("handoff_{what}_p50_ms"), s.p50_ms);
                row.set(&format!("handoff_{what}_p99_ms"), s.p99_ms);
            }
        }
    }
    row
}

async fn lock_row(
    brokers: &[&Broker],
    api_key: &str,
    mode: LockMode,
    name: &str,
    prefix: &str,
    clients: usize,
    duration: Duration,
) -> Row {
    let m = merge(lock_tallies_on(brokers, api_key, prefix, mode, clients, duration).await);
    let mut row = Row::new(name, clients, duration, &m);
    if mode.own_keys() {
        // Handoffs mean nothing on private keys.
        row.handoff = None;
        row.note.clear();
        if m.errors > 0 {
            row.add_note(format!("{} errors", m.errors));
        }
    }
    if let Some(aux) = m.aux {
        row.set("acquire_p50_ms", aux.p50_ms);
        if mode.queues() {
            row.add_note(format!("acquire (wait) p50 {:.1} ms", aux.p50_ms));
        }
    }
    if let (true, Some(p)) = (mode.queues(), row.release_p50_ms) {
        row.add_note(format!("release p50 {p:.2} ms"));
    }
    if let Some(e) = &m.first_error {
        eprintln!("lockbench: {name} c={clients}: first error: {e}");
    }
    row
}

/// Semaphore of 8 permits, or election churn: both wait in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    Semaphore,
    Election,
}

pub async fn queue_scenario(
    b: &Broker,
    api_key: &str,
    kind: QueueKind,
    clients: usize,
    duration: Duration,
) -> Row {
    let (name, path) = match kind {
        QueueKind::Semaphore => ("semaphore", "semaphores"),
        QueueKind::Election => ("election", "elections"),
    };
    let key = encode_key(&format!("{name}{}-{clients}", b.run));
    let run = run_clients(clients, duration, |c, gate| {
        let client = b.client(api_key);
        let base = format!("/v1/{path}/{key}");
        async move {
            let mut t = Tally::default();
            let me = format!("bench-{c}");
            if let Err(e) = client.get("/healthz").await {
                t.error(|| e.to_string());
            }
            let deadline = gate.ready().await;
            let (acquire, release) = match kind {
                QueueKind::Semaphore => (format!("{base}/acquire"), format!("{base}/release")),
                QueueKind::Election => (format!("{base}/campaign"), format!("{base}/resign")),
            };
            let ask = match kind {
                QueueKind::Semaphore => to_json(&api::SemaphoreAcquireRequest {
                    terms: lockbroker_api::LeaseTerms::new(TTL_MS, WAIT_MS),
                    ..api::SemaphoreAcquireRequest::new(&me, 8)
                }),
                QueueKind::Election => to_json(&api::CampaignRequest {
                    terms: lockbroker_api::LeaseTerms::new(TTL_MS, WAIT_MS),
                    ..api::CampaignRequest::new(&me)
                }),
            };
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let reply = match client.post(&acquire, &ask, WAIT_MS).await {
                    Ok(r) if r.status == 200 => r,
                    Ok(r) if r.status == 409 => {
                        t.refused += 1;
                        continue;
                    }
                    Ok(r) => {
                        t.error(|| describe(&r));
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        pause().await;
                        continue;
                    }
                };
                let granted_at = Instant::now();
                let (give_back, term) = match kind {
                    QueueKind::Semaphore => match reply.parse::<api::SemaphoreLease>() {
                        Ok(lease) => (to_json(&api::SemaphoreReleaseRequest::from(&lease)), None),
                        Err(e) => {
                            t.error(|| format!("not a semaphore lease: {e}"));
                            continue;
                        }
                    },
                    QueueKind::Election => match reply.parse::<api::Leadership>() {
                        Ok(leadership) => (
                            to_json(&api::ResignRequest {
                                candidate: me.clone(),
                                term: leadership.term,
                            }),
                            Some(leadership.term),
                        ),
                        Err(e) => {
                            t.error(|| format!("not a leadership: {e}"));
                            continue;
                        }
                    },
                };
                if let (Some(term), true) = (term, granted_at <= deadline) {
                    t.grants.push((term, granted_at));
                }
                let release_at = Instant::now();
                match client.post(&release, &give_back, 0).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        t.error(|| describe(&r));
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        pause().await;
                        continue;
                    }
                }
                let done = Instant::now();
                if done <= deadline {
                    if let Some(term) = term {
                        t.releases.push((term, done));
                    }
                    t.release_us.push(micros(done - release_at));
                    t.ops += 1;
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            t
        }
    })
    .await;
    let m = merge(run);
    if let Some(e) = &m.first_error {
        eprintln!("lockbench: {name} c={clients}: first error: {e}");
    }
    let mut row = Row::new(name, clients, duration, &m);
    if let Some(aux) = m.aux {
        row.set("acquire_p50_ms", aux.p50_ms);
        row.add_note(format!(
            "{} p50 {:.1} ms",
            if kind == QueueKind::Semaphore {
                "acquire"
            } else {
                "campaign"
            },
            aux.p50_ms
        ));
    }
    if let Some(p) = row.release_p50_ms {
        row.add_note(format!("release p50 {p:.2} ms"));
    }
    row
}

/// The broker's thread count, from /proc.
fn threads(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The most threads the broker had while `work` ran (sampled every 50 ms).
/// A policy call moved off the async workers (`block_in_place`) starts a
/// thread that stays for 10 s, so a count above the native runs' shows it.
async fn max_threads<T>(pid: Option<u32>, work: impl std::future::Future<Output = T>) -> (T, u64) {
    let Some(pid) = pid else {
        return (work.await, 0);
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut most = 0;
            while !stop.load(Ordering::Relaxed) {
                most = most.max(threads(pid).unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        })
    };
    let out = work.await;
    stop.store(true, Ordering::Relaxed);
    (out, sampler.await.unwrap_or(0))
}

/// The same uncontended scenario for the built-in policy's tenant and for
/// each policy tenant in `policies` (`(label, api key)`), interleaved
/// (native, then each policy, for `rounds`) at each client count: a row
/// `wasm-vs-native: LABEL` for each, and `(label, clients, policy/native
/// pairs/s)`; with the broker's pid, its most threads during each tenant's
/// runs.
pub async fn wasm_vs_native(
    b: &Broker,
    native_key: &str,
    policies: &[(String, String)],
    clients: &[usize],
    rounds: usize,
    duration: Duration,
    broker_pid: Option<u32>,
) -> (Vec<Row>, Vec<(String, usize, f64)>) {
    let mut tenants: Vec<(&str, &str)> = vec![("native", native_key)];
    tenants.extend(policies.iter().map(|(l, k)| (l.as_str(), k.as_str())));
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &c in clients {
        let mut pooled: Vec<(Run, Vec<f64>)> = tenants.iter().map(|_| Default::default()).collect();
        let mut most_threads = vec![0u64; tenants.len()];
        for _round in 0..rounds {
            for (i, (label, key)) in tenants.iter().enumerate() {
                // Keys of their own per tenant and run (tenants never share
                // locks anyway; the prefix keeps the rows apart).
                let prefix = format!("w{i}");
                let work = lock_tallies(b, key, &prefix, LockMode::Uncontended, c, duration);
                let (run, most) = max_threads(broker_pid, work).await;
                most_threads[i] = most_threads[i].max(most);
                let rate = run.ops() as f64 / duration.as_secs_f64();
                eprintln!("lockbench: wasm-vs-native {label} c={c}: {rate:.0} pairs/s");
                pooled[i].0.extend(run);
                pooled[i].1.push(rate);
            }
        }
        let mut rates = vec![0.0; tenants.len()];
        for (i, (run, runs)) in pooled.into_iter().enumerate() {
            let m = merge(run);
            let label = format!("wasm-vs-native: {}", tenants[i].0);
            if let Some(e) = &m.first_error {
                eprintln!("lockbench: {label} c={c}: first error: {e}");
            }
            let mut row = Row::new(&label, c, duration * rounds as u32, &m);
            row.handoff = None;
            row.note.clear();
            row.add_note(format!(
                "runs {}",
                runs.iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if m.errors > 0 {
                row.add_note(format!("{} errors", m.errors));
            }
            row.set("runs_ops_per_s", runs.clone());
            if broker_pid.is_some() {
                row.set("broker_threads_max", most_threads[i]);
                row.add_note(format!("broker threads max {}", most_threads[i]));
            }
            rates[i] = row.ops_per_s;
            if i > 0 {
                let ratio = rates[i] / rates[0];
                row.add_note(format!("{}/native {ratio:.3}", tenants[i].0));
                ratios.push((tenants[i].0.to_owned(), c, ratio));
            }
            rows.push(row);
        }
    }
    (rows, ratios)
}

/// What the held scenario samples while it measures.
#[derive(Debug, Default, Clone, Copy)]
struct Samples {
    rss_kb_max: u64,
    rss_kb_last: u64,
    conns_max: i64,
    active_max: i64,
}

/// The broker's resident set, from /proc.
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The broker's MySQL connections: open, and running a statement.
async fn broker_connections(pool: &sqlx::MySqlPool, db: &str) -> Option<(i64, i64)> {
    sqlx::query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(COMMAND <> 'Sleep'), 0) AS SIGNED) \
         FROM information_schema.PROCESSLIST WHERE DB = ?",
    )
    .bind(db)
    .fetch_one(pool)
    .await
    .ok()
}

/// InnoDB's buffer pool counters: (logical reads, reads that missed the
/// pool and went to disk).
async fn buffer_pool_reads(pool: &sqlx::MySqlPool) -> Option<(u64, u64)> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL STATUS WHERE Variable_name IN \
         ('Innodb_buffer_pool_read_requests', 'Innodb_buffer_pool_reads')",
    )
    .fetch_all(pool)
    .await
    .ok()?;
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    Some((
        get("Innodb_buffer_pool_read_requests")?,
        get("Innodb_buffer_pool_reads")?,
    ))
}

/// The broker's `locks` table (data and indexes, InnoDB's estimate) and the
/// buffer pool's size, in MB: whether the held rows still fit in memory.
async fn locks_table_mb(pool: &sqlx::MySqlPool, db: &str) -> Option<(f64, f64)> {
    let (table, buffer): (i64, i64) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS SIGNED), \
                CAST(@@innodb_buffer_pool_size AS SIGNED) \
         FROM information_schema.TABLES WHERE table_schema = ? AND table_name = 'locks'",
    )
    .bind(db)
    .fetch_one(pool)
    .await
    .ok()?;
    let mb = |b: i64| b as f64 / 1048576.0;
    Some((mb(table), mb(buffer)))
}

/// Where the held scenario reads the broker's footprint.
pub struct Footprint {
    pub pid: Option<u32>,
    /// The baseline pool (for PROCESSLIST) and the broker's database name.
    pub db: Option<(sqlx::MySqlPool, String)>,
}

/// Holds 100, then each of `counts`, leases (32 clients fill them), and at
/// each level measures for `duration`: 16 clients renewing random held
/// leases and 16 acquiring + releasing their own other keys. Then releases
/// all but the first 100 and measures the 100 level again (`after`), so
/// drift during the scenario shows.
pub async fn held(
    b: &Broker,
    api_key: &str,
    counts: &[usize],
    duration: Duration,
    footprint: &Footprint,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let held: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut levels = vec![100];
    levels.extend(counts.iter().copied().filter(|&n| n > 100));
    if levels.len() > 1 {
        levels.push(100);
    }
    for (step, level) in levels.iter().copied().enumerate() {
        let name = if step > 0 && level == 100 {
            "held 100 (after release)".to_owned()
        } else {
            format!("held {level}")
        };
        let before = held.lock().expect("held").len();
        let started = Instant::now();
        if level >= before {
            fill(b, api_key, &held, level).await;
        } else {
            drain(b, api_key, &held, level).await;
        }
        let filled = held.lock().expect("held").len();
        let fill_rate = filled.abs_diff(before) as f64 / started.elapsed().as_secs_f64();
        eprintln!(
            "lockbench: held: {filled} leases held ({} {} at {fill_rate:.0}/s)",
            filled.abs_diff(before),
            if filled >= before {
                "acquired"
            } else {
                "released"
            }
        );
        let snapshot: Arc<Vec<(String, u64)>> = Arc::new(held.lock().expect("held").clone());
        let listing = listing_ms(b, api_key).await;

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            let pid = footprint.pid;
            let db = footprint.db.clone();
            tokio::spawn(async move {
                let mut s = Samples::default();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kb) = pid.and_then(rss_kb) {
                        s.rss_kb_max = s.rss_kb_max.max(kb);
                        s.rss_kb_last = kb;
                    }
                    if let Some((pool, name)) = &db {
                        if let Some((open, active)) = broker_connections(pool, name).await {
                            s.conns_max = s.conns_max.max(open);
                            s.active_max = s.active_max.max(active);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                s
            })
        };
        let reads_before = match &footprint.db {
            Some((pool, _)) => buffer_pool_reads(pool).await,
            None => None,
        };
        let half = HELD_CLIENTS / 2;
        let run = run_clients(HELD_CLIENTS, duration, |c, gate| {
            let client = b.client(api_key);
            let snapshot = snapshot.clone();
            let run = b.run.clone();
            async move {
                let mut t = Tally::default();
                if let Err(e) = client.get("/healthz").await {
                    t.error(|| e.to_string());
                }
                let mut rng = StdRng::seed_from_u64(c as u64 * 7919 + level as u64);
                let owner = format!("bench-{c}");
                let deadline = gate.ready().await;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    if c < half {
                        let (key, token) = &snapshot[rng.gen_range(0..snapshot.len())];
                        match client.renew(key, HOLDER, *token, HELD_TTL_MS).await {
                            Ok(r) if r.status == 200 => {}
                            Ok(r) => t.error(|| describe(&r)),
                            Err(e) => {
                                t.error(|| e.to_string());
                                pause().await;
                            }
                        }
                        let done = Instant::now();
                        if done <= deadline {
                            t.ops += 1;
                            t.lat_us.push(micros(done - t0));
                        }
                        continue;
                    }
                    let key = format!("hf{run}-{c}-{}", n % 16);
                    n += 1;
                    let token = match client.acquire(&key, &owner, TTL_MS, 0).await {
                        Ok(r) if r.status == 200 => token(&r),
                        Ok(r) => {
                            t.error(|| describe(&r));
                            continue;
                        }
                        Err(e) => {
                            t.error(|| e.to_string());
                            pause().await;
                            continue;
                        }
                    };
                    let granted = Instant::now();
                    match client.release(&key, &owner, token).await {
                        Ok(r) if r.status == 200 => {}
                        Ok(r) => t.error(|| describe(&r)),
                        Err(e) => {
                            t.error(|| e.to_string());
                            pause().await;
                        }
                    }
                    let done = Instant::now();
                    if done <= deadline {
                        t.ops += 1;
                        t.lat_us.push(micros(done - t0));
                        t.aux_us.push(micros(granted - t0));
                    }
                }
                t
            }
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        let samples = sampler.await.unwrap_or_default();
        // Whether the held rows still fit InnoDB's buffer pool: its misses
        // during the timed run (the server's, so other work shows too).
        let (reads, table) = match &footprint.db {
            Some((pool, db)) => (
                buffer_pool_reads(pool).await,
                locks_table_mb(pool, db).await,
            ),
            None => (None, None),
        };
        let misses = reads_before
            .zip(reads)
            .map(|((r0, m0), (r1, m1))| (r1.saturating_sub(r0), m1.saturating_sub(m0)));
        // One run, two kinds of clients: CPU is shown per operation of
        // either kind (renewal or pair).
        let mut renewers = run.tallies;
        let pairs = renewers.split_off(half);
        let renew = merge(Run {
            tallies: renewers,
            cpu: run.cpu,
        });
        let pair = merge(Run {
            tallies: pairs,
            cpu: run.cpu,
        });
        let all_ops = renew.ops + pair.ops;
        for (m, what) in [(&renew, "renew"), (&pair, "acquire+release")] {
            if let Some(e) = &m.first_error {
                eprintln!("lockbench: {name} {what}: first error: {e}");
            }
        }
        let mut r = Row::new(&format!("{name}: renew"), half, duration, &renew);
        r.cpu_ops = all_ops;
        r.set("held", level);
        r.set("fill_per_s", fill_rate);
        if level > 100 {
            r.add_note(format!("filled at {fill_rate:.0} acquires/s"));
        } else if step > 0 {
            r.add_note(format!("released at {fill_rate:.0}/s before"));
        }
        rows.push(r);
        let mut r = Row::new(
            &format!("{name}: acquire+release"),
            HELD_CLIENTS - half,
            duration,
            &pair,
        );
        r.cpu_ops = all_ops;
        r.set("held", level);
        if let Some(aux) = pair.aux {
            r.set("acquire_p50_ms", aux.p50_ms);
        }
        if let Some((p50, p99)) = listing {
            r.set("list100_p50_ms", p50);
            r.set("list100_p99_ms", p99);
            r.add_note(format!(
                "a listing page of 100: p50 {p50:.1} ms, p99 {p99:.1} ms"
            ));
        }
        if footprint.pid.is_some() {
            let mb = samples.rss_kb_max as f64 / 1024.0;
            r.set("rss_mb_max", mb);
            r.set("rss_mb_last", samples.rss_kb_last as f64 / 1024.0);
            r.add_note(format!("broker RSS {mb:.0} MB"));
        }
        if let Some((requests, missed)) = misses {
            r.set("buffer_pool_read_requests", requests);
            r.set("buffer_pool_disk_reads", missed);
            r.add_note(format!(
                "buffer pool: {:.2} % of {requests} reads missed ({:.0} disk reads/s)",
                missed as f64 * 100.0 / requests.max(1) as f64,
                missed as f64 / duration.as_secs_f64()
            ));
        }
        if let Some((table, buffer)) = table {
            r.set("locks_table_mb", table);
            r.set("buffer_pool_mb", buffer);
            r.add_note(format!(
                "locks table {table:.0} MB, buffer pool {buffer:.0} MB"
            ));
        }
        if footprint.db.is_some() {
            r.set("db_connections_max", samples.conns_max);
            r.set("db_connections_active_max", samples.active_max);
            r.add_note(format!(
                "MySQL conns {} open, {} busy (max)",
                samples.conns_max, samples.active_max
            ));
        }
        rows.push(r);
        for r in &rows[rows.len() - 2..] {
            eprintln!("lockbench: {}", r.progress());
        }
    }
    rows
}

/// Pages of `GET /v1/locks?limit=100` timed, one after the other
/// (following `next`) with no other load: p50 and p99 in ms, or `None` if a
/// page failed. Issue #20's target: under 50 ms among a million held.
async fn listing_ms(b: &Broker, api_key: &str) -> Option<(f64, f64)> {
    const PAGES: usize = 200;
    let client = b.client(api_key);
    let mut took = Vec::with_capacity(PAGES);
    let mut cursor: Option<String> = None;
    for _ in 0..PAGES {
        let path = match &cursor {
            Some(c) => format!("/v1/locks?limit=100&cursor={c}"),
            None => "/v1/locks?limit=100".to_owned(),
        };
        let started = Instant::now();
        let reply = client.get(&path).await.ok()?;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        if reply.status != 200 {
            eprintln!("lockbench: listing: HTTP {}", reply.status);
            return None;
        }
        let page: serde_json::Value = serde_json::from_slice(&reply.body).ok()?;
        // At the end (`next` null) it starts over from the first page.
        cursor = page["next"].as_str().map(str::to_owned);
    }
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.99)))
}

/// The owner of every held lease.
const HOLDER: &str = "bench-holder";

/// Releases held leases from the end until `target` are left.
async fn drain(b: &Broker, api_key: &str, held: &Arc<Mutex<Vec<(String, u64)>>>, target: usize) {
    let leases: Arc<Mutex<Vec<(String, u64)>>> = {
        let mut all = held.lock().expect("held");
        let cut = target.min(all.len());
        Arc::new(Mutex::new(all.split_off(cut)))
    };
    let errors = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..HELD_CLIENTS {
        let client = b.client(api_key);
        let (leases, errors) = (leases.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = leases.lock().expect("leases").pop();
                let Some((key, token)) = next else { break };
                match client.release(&key, HOLDER, token).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("lockbench: held: release {key}: {}", describe(&r));
                        }
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("lockbench: held: release {key}: {e}");
                        }
                        pause().await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Acquires new leases until `target` are held.
async fn fill(b: &Broker, api_key: &str, held: &Arc<Mutex<Vec<(String, u64)>>>, target: usize) {
    let next = Arc::new(AtomicUsize::new(held.lock().expect("held").len()));
    let errors = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..HELD_CLIENTS {
        let client = b.client(api_key);
        let (next, errors, held) = (next.clone(), errors.clone(), held.clone());
        let run = b.run.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let first = next.fetch_add(FILL_CHUNK, Ordering::Relaxed);
                if first >= target {
                    break;
                }
                let last = (first + FILL_CHUNK).min(target);
                if first / 10_000 != last / 10_000 {
                    eprintln!("lockbench: held: acquiring lease {last} of {target}");
                }
                let keys: Vec<String> = (first..last).map(|i| format!("h{run}-{i}")).collect();
                let body = serde_json::json!({
                    "keys": keys, "owner": HOLDER, "ttl_ms": HELD_TTL_MS, "wait_ms": 0,
                });
                // A few tries: a lease must not be missing from the count.
                for _ in 0..5 {
                    match client.post("/v1/multilock/acquire", &body, 0).await {
                        Ok(r) if r.status == 200 => {
                            if let Ok(grant) = r.parse::<api::MultiLockLease>() {
                                mine.extend(grant.locks.into_iter().map(|l| (l.key, l.token)));
                                break;
                            }
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("lockbench: held: unreadable answer {}", r.text());
                            }
                        }
                        Ok(r) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!(
                                    "lockbench: held: keys {first}..{last}: {}",
                                    describe(&r)
                                );
                            }
                        }
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("lockbench: held: keys {first}..{last}: {e}");
                            }
                            pause().await;
                        }
                    }
                }
            }
            held.lock().expect("held").extend(mine);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// The token of a granted lease (0 if the answer is not one: counted as an
/// error by the caller's next step).
fn token(r: &Reply) -> u64 {
    r.parse::<api::Lease>().map_or(0, |lease| lease.token)
}

/// The waiters of a lock's status (0 if the answer is not one).
fn waiters(r: &Reply) -> u64 {
    r.parse::<api::LockStatus>()
        .map_or(0, |status| status.waiters)
}

/// A request body of the API as the JSON the client sends.
fn to_json<T: serde::Serialize>(body: &T) -> serde_json::Value {
    serde_json::to_value(body).expect("API types always serialize")
}
