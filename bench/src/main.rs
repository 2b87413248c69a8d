//! lockbench: load scenarios against a running lockbroker, with baselines on
//! the same database server (GET_LOCK, the raw lease-row transaction, a
//! SKIP LOCKED claim, one connection's commit rate), on Redis and on etcd,
//! in one run. It starts nothing itself:
//! `scripts/bench` starts the broker, MariaDB and Redis, and passes the
//! commands that start and stop the second broker of `contended-cross`,
//! and the URL and CA of a broker serving https on the same database (the
//! cost of TLS).
//!
//! Progress goes to stderr; the results go to stdout as a markdown table
//! with the ratio targets below it, or as one JSON document (`--json`).

mod baseline;
mod broker;
mod cpu;
mod criterion_summary;
mod etcd;
mod http;
mod multilock;
mod policy_calls;
mod report;
mod run;
mod rwlock;
mod second;
mod sessions;
mod shadow;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::bail;
use clap::Parser;
use serde_json::json;

use crate::{
    baseline::Baseline,
    broker::{Broker, Footprint, LockMode, QueueKind},
    http::Tls,
    report::{Ratio, Row},
    second::SecondBroker,
};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Load scenarios for lockbroker, with MySQL and Redis baselines",
    // A later --clients (etc.) replaces an earlier one: scripts/bench
    // passes its defaults first and the user's arguments after them.
    args_override_self = true
)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:7420")]
    broker_url: String,
    /// A second broker on the same database, with the same tenants, for
    /// `contended-cross` (skipped without it).
    #[arg(long, value_name = "URL")]
    second_broker_url: Option<String>,
    /// Shell command that starts the second broker and prints its pid; run
    /// before each `contended-cross` run (lockbench then waits for its
    /// /readyz). Without it the second broker must already run.
    #[arg(long, value_name = "CMD")]
    second_broker_start: Option<String>,
    /// Shell command that stops the second broker, run after each
    /// `contended-cross` run.
    #[arg(long, value_name = "CMD")]
    second_broker_stop: Option<String>,
    /// The second broker's process id, when it runs throughout (for its
    /// CPU during `contended-cross`).
    #[arg(long)]
    second_broker_pid: Option<u32>,
    /// `contended-cross` runs at the counts of --clients from 2 up to this.
    #[arg(long, default_value_t = 32)]
    cross_max_clients: usize,
    /// A broker whose database is a Galera cluster (one writer node): each
    /// `uncontended` and `contended` run is followed by the same on it,
    /// as rows `... (galera)`.
    #[arg(long, value_name = "URL")]
    galera_broker_url: Option<String>,
    /// A broker serving https (`[tls]`) on the same database with the same
    /// tenants: `uncontended-https` runs on it, and `new-connection` also
    /// runs on it (both skipped without it). Needs --tls-ca.
    #[arg(long, value_name = "URL", requires = "tls_ca")]
    tls_url: Option<String>,
    /// The CA certificate (PEM) that signed the https broker's certificate.
    /// lockbench's https connections never resume a TLS session: each new
    /// connection is a full handshake.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// The https broker's process id (its CPU in the https rows).
    #[arg(long)]
    tls_broker_pid: Option<u32>,
    /// API key of a tenant on the built-in (native) policy.
    #[arg(long, default_value = "dev-key")]
    api_key: String,
    /// API key of a tenant whose policy is default.wasm (wasm-vs-native).
    #[arg(long)]
    wasm_api_key: Option<String>,
    /// More policy tenants for wasm-vs-native, as LABEL=API_KEY
    /// (repeatable): each runs interleaved with the built-in and
    /// default.wasm, e.g. `python=bench-python` for a tenant on the Python
    /// template.
    #[arg(long = "policy-tenant", value_name = "LABEL=KEY", value_parser = label_and_key)]
    policy_tenants: Vec<(String, String)>,
    /// Database for the baselines (created if missing); also used to read
    /// the broker's connections from PROCESSLIST.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/lockbench_baseline")]
    database_url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// A single etcd node's client URL (its v3 JSON gateway), for the etcd
    /// baselines (skipped without it).
    #[arg(long, value_name = "URL")]
    etcd_url: Option<String>,
    /// Length of each measured run.
    #[arg(long, default_value_t = 5.0)]
    duration_s: f64,
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, default_value = "1,8,32,128")]
    clients: Vec<usize>,
    /// Client counts of the interleaved wasm-vs-native comparison.
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, default_value = "8,32")]
    wasm_clients: Vec<usize>,
    /// Leases held in the `held` scenario, one level after the other (a
    /// 100-lease level always comes first, as the reference).
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, default_value = "10000,100000,1000000")]
    held_counts: Vec<usize>,
    /// `all`, `broker`, `baselines`, or a comma-separated list of:
    /// uncontended, uncontended-https (the same on the --tls-url broker),
    /// new-connection (uncontended pairs each on a new connection, over
    /// http and over https), contended, contended-session (contended with
    /// each client's lock held in a session of its own: the deadlock check
    /// on every wait), contended-cross, nowait-storm, semaphore,
    /// election, held, wasm-vs-native, policy-shadow (pairs on the wasm
    /// tenant without and with a shadow policy), multilock-8, rwlock (read pairs of
    /// all clients on one key, write pairs on own keys), mysql-get-lock,
    /// lease-row-tx, skip-locked-claim, mysql-commit, redis, etcd;
    /// and, only when named, lease-row-tx-pooled (the lease-row pairs through
    /// one shared sqlx pool, with and without its ping on acquire).
    #[arg(long, default_value = "all")]
    scenarios: String,
    /// The broker's process id (for its RSS in `held`).
    #[arg(long)]
    broker_pid: Option<u32>,
    /// The broker's database name (for its connections in `held`).
    #[arg(long)]
    broker_db: Option<String>,
    /// The broker's max_connections: MySQL baselines that would not fit
    /// beside a full broker pool run before the broker scenarios.
    #[arg(long, default_value_t = 32)]
    broker_max_connections: u32,
    /// Rounds of the interleaved wasm-vs-native comparison (native, wasm).
    #[arg(long, default_value_t = 3)]
    wasm_rounds: usize,
    /// The broker's admin token (`policy-shadow` loads and drops a shadow
    /// policy; skipped without it).
    #[arg(long, env = "LOCKBENCH_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// The shadow candidates of `policy-shadow` (.wasm components, comma
    /// separated), each loaded in turn beside the policy of the
    /// --wasm-api-key tenant.
    #[arg(long, value_name = "FILE", value_delimiter = ',')]
    shadow_policy: Vec<PathBuf>,
    /// The name of the --wasm-api-key tenant (`policy-shadow`'s admin
    /// calls name it).
    #[arg(long, default_value = "wasm")]
    wasm_tenant: String,
    /// Client counts of `policy-shadow`.
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, default_value = "1")]
    shadow_clients: Vec<usize>,
    /// Rounds of `policy-shadow` (each: without a shadow and with each
    /// candidate).
    #[arg(long, default_value_t = 5)]
    shadow_rounds: usize,
    /// A line for the header (e.g. the commit measured).
    #[arg(long)]
    label: Option<String>,
    /// Print one JSON document instead of the markdown table.
    #[arg(long)]
    json: bool,
    /// Only summarise criterion's results under this directory (e.g.
    /// $CARGO_TARGET_DIR/criterion) as a markdown table, and exit.
    #[arg(long, value_name = "DIR")]
    criterion_summary: Option<PathBuf>,
    /// Only time each policy export call by call (native, and the Rust,
    /// JavaScript and Python components in this directory, e.g.
    /// plugins/dist) as a markdown table with p50/p99/p999, and exit.
    #[arg(long, value_name = "DIST")]
    policy_calls: Option<PathBuf>,
    /// Measure sessions (issue #30) with these numbers of leases
    /// (`session-keepalive`: one session against as many leases renewed
    /// one by one, each for --duration-s; `session-end`: a close and an
    /// expiry against as many releases), print markdown tables, and exit.
    #[arg(long, value_name = "N,N", value_delimiter = ',')]
    sessions: Vec<usize>,
}

/// Prints a table that a report mode made, or why it could not: the
/// exit code either way.
fn printed(table: anyhow::Result<String>) -> ExitCode {
    match table {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lockbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

const BROKER_SCENARIOS: [&str; 14] = [
    "uncontended",
    "uncontended-https",
    "new-connection",
    "multilock-8",
    "rwlock",
    "contended",
    "contended-session",
    "contended-cross",
    "nowait-storm",
    "semaphore",
    "election",
    "wasm-vs-native",
    "policy-shadow",
    "held",
];
const BASELINE_SCENARIOS: [&str; 6] = [
    "mysql-get-lock",
    "lease-row-tx",
    "skip-locked-claim",
    "mysql-commit",
    "redis",
    "etcd",
];
/// Scenarios only run when named.
const EXTRA_SCENARIOS: [&str; 1] = ["lease-row-tx-pooled"];

/// How rows are grouped in the table.
const ROW_ORDER: [&str; 26] = [
    "uncontended",
    "uncontended (https)",
    "new connection per pair",
    "new connection per pair (https)",
    "multilock-8",
    "rwlock-write",
    "rwlock-read",
    "uncontended (galera)",
    "lease-row-tx",
    "lease-row-tx pooled (ping on acquire)",
    "lease-row-tx pooled (no ping)",
    "mysql-get-lock",
    "redis",
    "etcd",
    "contended",
    "contended-session",
    "contended (galera)",
    "contended-cross",
    "mysql-commit (1 conn)",
    "etcd contended",
    "nowait-storm",
    "lease-row-tx nowait-storm",
    "mysql-get-lock contended",
    "semaphore",
    "skip-locked-claim",
    "election",
];

/// Which MySQL baselines to run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    /// Pairs on own keys: lease-row-tx, GET_LOCK.
    Uncontended,
    /// One key: the lease-row NOWAIT storm and GET_LOCK waiting.
    Storm,
    /// The SKIP LOCKED claim.
    Rest,
    All,
}

async fn sql_baselines(
    base: &Baseline,
    setup: &sqlx::MySqlPool,
    want: &impl Fn(&str) -> bool,
    c: usize,
    duration: Duration,
    which: Pair,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let now = |p: Pair| which == p || which == Pair::All;
    if now(Pair::Uncontended) {
        if want("lease-row-tx") {
            rows.push(baseline::lease_row_tx(base, false, c, duration).await?);
        }
        if want("mysql-get-lock") {
            rows.push(baseline::get_lock(base, false, c, duration).await?);
        }
    }
    if now(Pair::Storm) {
        if want("lease-row-tx") {
            rows.push(baseline::lease_row_tx(base, true, c, duration).await?);
        }
        if want("mysql-get-lock") {
            rows.push(baseline::get_lock(base, true, c, duration).await?);
        }
    }
    if now(Pair::Rest) && want("skip-locked-claim") {
        rows.push(baseline::skip_locked(base, setup, c, duration).await?);
    }
    if now(Pair::Rest) && want("lease-row-tx-pooled") {
        // A pool of at most 32, as the broker's, shared by all clients.
        let max = u32::try_from(c.min(32))?;
        for ping in [true, false] {
            rows.push(baseline::lease_row_tx_pooled(base, ping, max, c, duration).await?);
        }
    }
    Ok(rows)
}

/// `LABEL=KEY` of `--policy-tenant`.
fn label_and_key(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((label, key)) if !label.is_empty() && !key.is_empty() => {
            Ok((label.to_owned(), key.to_owned()))
        }
        _ => Err(format!("{arg:?} is not LABEL=KEY")),
    }
}

fn selected(spec: &str) -> anyhow::Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match name {
            "all" => {
                out.extend(BASELINE_SCENARIOS);
                out.extend(BROKER_SCENARIOS);
            }
            "broker" => out.extend(BROKER_SCENARIOS),
            "baselines" => out.extend(BASELINE_SCENARIOS),
            other => match BROKER_SCENARIOS
                .iter()
                .chain(BASELINE_SCENARIOS.iter())
                .chain(EXTRA_SCENARIOS.iter())
                .find(|s| **s == other)
            {
                Some(s) => out.push(*s),
                None => bail!("unknown scenario {other:?}"),
            },
        }
    }
    out.dedup();
    Ok(out)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = &args.criterion_summary {
        return printed(criterion_summary::markdown(dir));
    }
    if !args.sessions.is_empty() {
        let keep_for = Duration::from_secs_f64(args.duration_s);
        let tables = sessions::markdown(
            &args.broker_url,
            &args.api_key,
            args.broker_pid,
            &args.sessions,
            keep_for,
        )
        .await;
        return printed(tables);
    }
    if let Some(dist) = &args.policy_calls {
        // Off the async runtime: WASI guests block.
        let dist = dist.clone();
        let table = std::thread::spawn(move || policy_calls::markdown(&dist, 1_000_000))
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the policy-calls thread panicked")));
        return printed(table);
    }
    match bench(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let wanted = selected(&args.scenarios)?;
    eprintln!(
        "lockbench: scenarios {wanted:?}, clients {:?}",
        args.clients
    );
    let want = |s: &str| wanted.contains(&s);
    let duration = Duration::from_secs_f64(args.duration_s);
    if args.clients.is_empty() || args.clients.contains(&0) {
        bail!("--clients needs positive counts");
    }
    // One prefix per run keeps keys, lock names and rows of runs apart.
    let run = format!("{:x}", rand::random::<u32>());
    let broker = Broker::http(&args.broker_url, &run);
    let base = Baseline {
        url: args.database_url.clone(),
        run: run.clone(),
    };
    let galera = args
        .galera_broker_url
        .as_ref()
        .map(|url| Broker::http(url, &run));
    let needs_broker = wanted.iter().any(|s| BROKER_SCENARIOS.contains(s));
    let https = match (&args.tls_url, &args.tls_ca) {
        (Some(url), Some(ca)) => Some(Broker {
            tls: Some(Tls::from_ca_file(ca)?),
            ..Broker::http(url, &run)
        }),
        _ => None,
    };
    if https.is_none() && (want("uncontended-https") || want("new-connection")) {
        eprintln!("lockbench: no --tls-url: skipping the https rows (uncontended-https, new-connection's https side)");
    }
    let second = args.second_broker_url.as_ref().map(|url| SecondBroker {
        url: url.clone(),
        start: args.second_broker_start.clone(),
        stop: args.second_broker_stop.clone(),
        pid: args.second_broker_pid,
    });
    let cross_at = cross_counts(&args);
    if want("contended-cross") {
        if second.is_none() {
            eprintln!("lockbench: no --second-broker-url: skipping contended-cross");
        } else if cross_at.is_empty() {
            eprintln!(
                "lockbench: contended-cross needs 2 to {} clients in --clients: skipping it",
                args.cross_max_clients
            );
        }
    }
    let mut second_counters: Vec<String> = Vec::new();
    if needs_broker {
        ready(&broker).await?;
    }
    let https_wanted = want("uncontended-https") || want("new-connection");
    if let (Some(https), true) = (&https, https_wanted) {
        ready(https).await?;
    }
    let watched = cpu::watch(args.broker_pid);
    if watched.db.is_none() {
        eprintln!("lockbench: no mariadbd/mysqld process found here: its CPU is not shown");
    }
    let setup = baseline::prepare(&args.database_url).await?;
    let (version,): (String,) = sqlx::query_as("SELECT VERSION()").fetch_one(&setup).await?;
    let max_conns: (i64,) = sqlx::query_as("SELECT CAST(@@max_connections AS SIGNED)")
        .fetch_one(&setup)
        .await?;
    let header = format!(
        "lockbench: {} s per run, clients {:?}, database server {version}, {} ({} CPUs)",
        args.duration_s,
        args.clients,
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        std::thread::available_parallelism().map_or(0, usize::from),
    );
    let header = match &args.label {
        Some(label) => format!("{header}\n\n{label}"),
        None => header,
    };
    eprintln!("{header}");

    let mut rows: Vec<Row> = Vec::new();
    let push = |row: Row, rows: &mut Vec<Row>| {
        eprintln!("lockbench: {}", row.progress());
        rows.push(row);
    };
    let redis_ok = if want("redis") {
        match baseline::redis_reachable(&args.redis_url).await {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "lockbench: Redis at {} is unreachable ({e}): skipping the redis baseline",
                    args.redis_url
                );
                false
            }
        }
    } else {
        false
    };
    let etcd = match (&args.etcd_url, want("etcd")) {
        (Some(url), true) => {
            match etcd::reachable(url).await {
                Ok(version) => {
                    eprintln!("lockbench: etcd {version} at {url}");
                    Some(etcd::Etcd {
                        url: url.clone(),
                        run: run.clone(),
                    })
                }
                Err(e) => {
                    eprintln!("lockbench: etcd at {url} is unreachable ({e}): skipping the etcd baselines");
                    None
                }
            }
        }
        (None, true) => {
            eprintln!("lockbench: no --etcd-url: skipping the etcd baselines");
            None
        }
        _ => None,
    };

    // A MySQL baseline at c clients opens c connections. Counts that fit
    // beside everything else, the broker's whole pool included, run
    // interleaved with the broker scenarios (each ratio's two sides a few
    // seconds apart, under the same conditions). Larger counts run first,
    // while the broker's pool is still small.
    let in_use: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM information_schema.PROCESSLIST")
        .fetch_one(&setup)
        .await?;
    let reserve = if needs_broker {
        i64::from(args.broker_max_connections)
    } else {
        0
    };
    let interleave_room = usize::try_from(max_conns.0 - in_use.0 - reserve - 4).unwrap_or(0);
    let sql_wanted = [
        "mysql-get-lock",
        "lease-row-tx",
        "skip-locked-claim",
        "lease-row-tx-pooled",
    ]
    .iter()
    .any(|s| want(s));
    let key = args.api_key.as_str();
    let early: Vec<usize> = args
        .clients
        .iter()
        .copied()
        .filter(|&c| sql_wanted && c > interleave_room)
        .collect();
    for &c in &early {
        let in_use: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM information_schema.PROCESSLIST")
            .fetch_one(&setup)
            .await?;
        let room = usize::try_from(max_conns.0 - in_use.0).unwrap_or(0);
        if c + 4 > room {
            eprintln!(
                "lockbench: skipping the MySQL baselines at {c} clients: the server has room for {room} more connections (max_connections {})",
                max_conns.0
            );
            continue;
        }
        eprintln!("lockbench: MySQL baselines at {c} clients run first (connections)");
        for row in sql_baselines(&base, &setup, &want, c, duration, Pair::All).await? {
            push(row, &mut rows);
        }
    }
    for &c in &args.clients {
        let sql_here = sql_wanted && !early.contains(&c);
        // Each ratio's pair back to back.
        if sql_here {
            for row in sql_baselines(&base, &setup, &want, c, duration, Pair::Uncontended).await? {
                push(row, &mut rows);
            }
        }
        if want("uncontended") {
            let row = broker::lock_scenario(&broker, key, LockMode::Uncontended, c, duration).await;
            push(row, &mut rows);
            if let Some(galera) = &galera {
                let mode = LockMode::Uncontended;
                push(
                    broker::galera_scenario(galera, key, mode, c, duration).await,
                    &mut rows,
                );
            }
        }
        // Each https row right after its http twin (the ratio's two sides a
        // few seconds apart).
        if let (true, Some(https)) = (want("uncontended-https"), &https) {
            let mode = LockMode::Uncontended;
            push(
                https_row(https, &args, key, mode, c, duration).await,
                &mut rows,
            );
        }
        if want("new-connection") {
            let mode = LockMode::NewConnection;
            push(
                broker::lock_scenario(&broker, key, mode, c, duration).await,
                &mut rows,
            );
            if let Some(https) = &https {
                push(
                    https_row(https, &args, key, mode, c, duration).await,
                    &mut rows,
                );
            }
        }
        if want("multilock-8") {
            push(
                multilock::scenario(&broker, key, c, duration).await,
                &mut rows,
            );
        }
        if want("rwlock") {
            for mode in [rwlock::Mode::Write, rwlock::Mode::Read] {
                push(
                    rwlock::scenario(&broker, key, mode, c, duration).await,
                    &mut rows,
                );
            }
        }
        if let Some(etcd) = &etcd {
            push(etcd::scenario(etcd, false, c, duration).await, &mut rows);
        }
        if sql_here {
            for row in sql_baselines(&base, &setup, &want, c, duration, Pair::Storm).await? {
                push(row, &mut rows);
            }
        }
        // `contended-session` before `contended`, which the one-connection
        // commits below follow.
        for (name, mode) in [
            ("nowait-storm", LockMode::Storm),
            ("contended-session", LockMode::ContendedSession),
            ("contended", LockMode::Contended),
        ] {
            if want(name) {
                let row = broker::lock_scenario(&broker, key, mode, c, duration).await;
                push(row, &mut rows);
                if let (Some(galera), LockMode::Contended) = (&galera, mode) {
                    push(
                        broker::galera_scenario(galera, key, mode, c, duration).await,
                        &mut rows,
                    );
                }
            }
        }
        // The ceilings of one key's handoffs, right after `contended`: one
        // connection's commits (labelled with the contended run's count),
        // and etcd's lock service at the same count.
        if want("mysql-commit") {
            let mut row = baseline::commit_rate(&base, duration).await?;
            row.clients = c;
            row.add_note(format!(
                "one connection, run after contended at {c} clients"
            ));
            push(row, &mut rows);
        }
        if let Some(etcd) = &etcd {
            push(etcd::scenario(etcd, true, c, duration).await, &mut rows);
        }
        if let (true, true, Some(second)) = (
            want("contended-cross"),
            cross_at.contains(&c),
            second.as_ref(),
        ) {
            match cross_run(&broker, second, key, c, duration, &mut second_counters).await {
                Ok(row) => push(row, &mut rows),
                Err(e) => eprintln!("lockbench: skipping contended-cross at {c} clients: {e:#}"),
            }
        }
        if sql_here {
            for row in sql_baselines(&base, &setup, &want, c, duration, Pair::Rest).await? {
                push(row, &mut rows);
            }
        }
        for (name, kind) in [
            ("semaphore", QueueKind::Semaphore),
            ("election", QueueKind::Election),
        ] {
            if want(name) {
                let row = broker::queue_scenario(&broker, key, kind, c, duration).await;
                push(row, &mut rows);
            }
        }
        if redis_ok {
            push(
                baseline::redis(&args.redis_url, &run, c, duration).await?,
                &mut rows,
            );
        }
    }
    // The table groups rows by scenario, in this order, then by clients.
    rows.sort_by_key(|r| {
        ROW_ORDER
            .iter()
            .position(|s| *s == r.scenario)
            .map_or((ROW_ORDER.len(), 0), |rank| (rank, r.clients))
    });
    let mut wasm_ratios = Vec::new();
    if want("wasm-vs-native") {
        match &args.wasm_api_key {
            Some(wasm_key) => {
                let mut policies = vec![("wasm".to_owned(), wasm_key.clone())];
                policies.extend(args.policy_tenants.iter().cloned());
                let (wrows, ratios) = broker::wasm_vs_native(
                    &broker,
                    key,
                    &policies,
                    &args.wasm_clients,
                    args.wasm_rounds.max(1),
                    duration,
                    args.broker_pid,
                )
                .await;
                for row in wrows {
                    push(row, &mut rows);
                }
                wasm_ratios = ratios;
            }
            None => eprintln!("lockbench: no --wasm-api-key: skipping wasm-vs-native"),
        }
    }
    let mut shadow_ratios = Vec::new();
    if want("policy-shadow") {
        match policy_shadow(&broker, &args, duration).await {
            Ok((srows, ratios)) => {
                for row in srows {
                    push(row, &mut rows);
                }
                shadow_ratios = ratios;
            }
            Err(e) => eprintln!("lockbench: skipping policy-shadow: {e:#}"),
        }
    }
    if want("held") {
        let footprint = Footprint {
            pid: args.broker_pid,
            db: args.broker_db.clone().map(|db| (setup.clone(), db)),
        };
        let held_rows = broker::held(&broker, key, &args.held_counts, duration, &footprint).await;
        rows.extend(held_rows);
    }

    let mut counters = if needs_broker {
        broker_counters(&broker).await
    } else {
        Vec::new()
    };
    if let (Some(https), true) = (&https, https_wanted) {
        let lines = broker_counters(https).await;
        if !lines.is_empty() {
            counters.push("# https broker:".to_owned());
            counters.extend(lines);
        }
    }
    counters.extend(second_counters);
    for line in &counters {
        eprintln!("lockbench: broker counter: {line}");
    }
    let mut ratios = ratios(&rows, &args, &wasm_ratios);
    ratios.extend(shadow_ratios);
    if args.json {
        let doc = json!({
            "duration_s": args.duration_s,
            "clients": args.clients,
            "database_server": version,
            "cpus": std::thread::available_parallelism().map_or(0, usize::from),
            "date": chrono::Utc::now().to_rfc3339(),
            "rows": rows,
            "ratios": ratios,
            "broker_counters": counters,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", report::markdown(&header, &rows, &ratios));
        if !counters.is_empty() {
            println!("\nBroker counters after the run (GET /metrics):\n\n```");
            for line in &counters {
                println!("{line}");
            }
            println!("```");
        }
    }
    setup.close().await;
    Ok(())
}

/// `policy-shadow`, if its arguments are there: its rows and ratios.
async fn policy_shadow(
    broker: &Broker,
    args: &Args,
    duration: Duration,
) -> anyhow::Result<(Vec<Row>, Vec<Ratio>)> {
    let (Some(api_key), Some(admin_token)) = (&args.wasm_api_key, &args.admin_token) else {
        bail!("it needs --wasm-api-key, --admin-token and --shadow-policy");
    };
    if args.shadow_policy.is_empty() {
        bail!("it needs --shadow-policy");
    }
    let mut candidates = Vec::new();
    for file in &args.shadow_policy {
        candidates.push(shadow::Candidate {
            name: file.file_stem().map_or_else(
                || file.display().to_string(),
                |s| s.to_string_lossy().into(),
            ),
            bytes: std::fs::read(file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?,
        });
    }
    let setup = shadow::Setup {
        tenant: &args.wasm_tenant,
        api_key,
        admin_token,
        candidates,
        rounds: args.shadow_rounds.max(1),
    };
    let (rows, measured) = shadow::scenario(broker, &setup, &args.shadow_clients, duration).await?;
    let mut ratios = Vec::new();
    for m in measured {
        let detail = format!("medians of {} rounds each", setup.rounds);
        let (c, name) = (m.clients, &m.candidate);
        ratios.push(ratio(
            format!("pair p50 with shadow {name} / without, {c} client(s)"),
            Some(m.p50),
            |v| format!("{v:.3}x"),
            "<= 1.10",
            |v| v <= 1.10,
            detail.clone(),
        ));
        ratios.push(Ratio {
            met: None,
            ..ratio(
                format!("pair p99 with shadow {name} / without, {c} client(s)"),
                Some(m.p99),
                |v| format!("{v:.3}x"),
                "(reported)",
                |_| true,
                detail,
            )
        });
    }
    Ok((rows, ratios))
}

/// The client counts of `contended-cross`: those of --clients from 2 to
/// --cross-max-clients.
fn cross_counts(args: &Args) -> Vec<usize> {
    args.clients
        .iter()
        .copied()
        .filter(|c| (2..=args.cross_max_clients).contains(c))
        .collect()
}

/// One `contended-cross` run: starts the second broker, runs, reads its
/// counters, stops it.
async fn cross_run(
    broker: &Broker,
    second: &SecondBroker,
    api_key: &str,
    clients: usize,
    duration: Duration,
    counters: &mut Vec<String>,
) -> anyhow::Result<Row> {
    eprintln!("lockbench: starting the second broker ({})", second.url);
    if let Err(e) = second.up().await {
        second.down().await;
        return Err(e);
    }
    let other = Broker::http(&second.url, &broker.run);
    let row = broker::contended_cross(broker, &other, api_key, clients, duration).await;
    let lines = broker_counters(&other).await;
    if !lines.is_empty() {
        counters.push(format!(
            "# second broker, after contended-cross at {clients} clients:"
        ));
        counters.extend(lines);
    }
    second.down().await;
    Ok(row)
}

/// Fails unless the broker answers `/readyz` with 200.
async fn ready(b: &Broker) -> anyhow::Result<()> {
    let probe = b.try_client(None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ready = probe
        .get("/readyz")
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", b.url))?;
    if ready.status != 200 {
        bail!(
            "the broker at {} is not ready: HTTP {} {}",
            b.url,
            ready.status,
            ready.text()
        );
    }
    Ok(())
}

/// A row on the https broker, its CPU counted as the broker's (the http
/// broker, idle meanwhile, still counts too).
async fn https_row(
    https: &Broker,
    args: &Args,
    api_key: &str,
    mode: LockMode,
    clients: usize,
    duration: Duration,
) -> Row {
    cpu::watch_second_broker(args.tls_broker_pid);
    let row = broker::https_scenario(https, api_key, mode, clients, duration).await;
    cpu::watch_second_broker(None);
    row
}

/// The broker's counters worth a look after a run: failures, 5xx answers,
/// handoffs, departed waiters.
async fn broker_counters(b: &Broker) -> Vec<String> {
    let Ok(client) = b.try_client(None) else {
        return Vec::new();
    };
    let Ok(reply) = client.get("/metrics").await else {
        return vec!["(GET /metrics failed)".into()];
    };
    let text = reply.text();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with("lockbroker_policy_failures_total")
                || l.starts_with("lockbroker_reaper_errors_total")
                || l.starts_with("lockbroker_waiters_departed_total")
                || l.starts_with("lockbroker_handoffs_total")
                || l.starts_with("lockbroker_expiry_handoffs_total")
                || l.starts_with("lockbroker_batches_total")
                || l.starts_with("lockbroker_batched_operations_total")
                || l.starts_with("lockbroker_wakeups_total")
                || l.starts_with("lockbroker_waiters_spilled_total")
                || l.starts_with("lockbroker_lock_grants_total")
                || l.starts_with("lockbroker_db_retries_total")
                || (l.starts_with("lockbroker_http_requests_total")
                    && !l.contains("status=\"200\"")
                    && !l.contains("status=\"409\""))
        })
        .map(str::to_owned)
        .collect()
}

fn find<'a>(rows: &'a [Row], scenario: &str, clients: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.clients == clients)
}

/// The client count a ratio is taken at: `preferred` if measured, else the
/// largest measured count.
fn at_count(args: &Args, preferred: usize) -> usize {
    if args.clients.contains(&preferred) {
        preferred
    } else {
        args.clients.iter().copied().max().unwrap_or(preferred)
    }
}

fn ratio(
    name: String,
    value: Option<f64>,
    shown: impl Fn(f64) -> String,
    target: &str,
    met: impl Fn(f64) -> bool,
    detail: String,
) -> Ratio {
    Ratio {
        name,
        shown: value.map_or_else(|| "-".into(), &shown),
        target: target.to_owned(),
        met: value.map(&met),
        value,
        detail,
    }
}

/// The cost of TLS, reported without a target, at each client count:
/// https / http pairs/s on kept connections, the same with a new connection
/// per pair, and what a new connection per pair costs over https.
fn tls_ratios(rows: &[Row], args: &Args) -> Vec<Ratio> {
    let mut out = Vec::new();
    let cpu = |r: &Row| r.per_op(r.cpu.and_then(|c| c.broker_s));
    let compare = |name: String, a: Option<&Row>, b: Option<&Row>| {
        let detail = a.zip(b).map_or_else(String::new, |(a, b)| {
            let mut detail = format!("{:.0} / {:.0}", a.ops_per_s, b.ops_per_s);
            if let (Some(pa), Some(pb)) = (a.p50_ms, b.p50_ms) {
                detail.push_str(&format!("; pair p50 {pa:.2} / {pb:.2} ms"));
            }
            if let (Some(ca), Some(cb)) = (cpu(a), cpu(b)) {
                detail.push_str(&format!("; broker CPU {ca:.0} / {cb:.0} µs per pair"));
            }
            detail
        });
        Ratio {
            met: None,
            ..ratio(
                name,
                a.zip(b).map(|(a, b)| a.ops_per_s / b.ops_per_s),
                |v| format!("{v:.2}x"),
                "(reported)",
                |_| true,
                detail,
            )
        }
    };
    let (kept, kept_tls) = ("uncontended", "uncontended (https)");
    let (new, new_tls) = ("new connection per pair", "new connection per pair (https)");
    for &c in &args.clients {
        for (name, a, b) in [
            ("uncontended pairs/s, https / http", kept_tls, kept),
            (
                "pairs/s, new connection per pair, https / http",
                new_tls,
                new,
            ),
            (
                "https pairs/s, new connection per pair / one connection",
                new_tls,
                kept_tls,
            ),
        ] {
            if find(rows, a, c).is_some() || find(rows, b, c).is_some() {
                out.push(compare(
                    format!("{name}, {c} clients"),
                    find(rows, a, c),
                    find(rows, b, c),
                ));
            }
        }
    }
    out
}

fn ratios(rows: &[Row], args: &Args, wasm: &[(String, usize, f64)]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let times = |v: f64| format!("{v:.2}x");

    if args.galera_broker_url.is_some() {
        for (scenario, unit) in [("uncontended", "pairs/s"), ("contended", "handoffs/s")] {
            for &c in &args.clients {
                let (g, s) = (
                    find(rows, &format!("{scenario} (galera)"), c),
                    find(rows, scenario, c),
                );
                let value = g.zip(s).map(|(g, s)| g.ops_per_s / s.ops_per_s);
                out.push(Ratio {
                    met: None,
                    ..ratio(
                        format!("{scenario} {unit}, Galera one writer / one server, {c} clients"),
                        value,
                        times,
                        "(reported)",
                        |_| true,
                        g.zip(s).map_or_else(String::new, |(g, s)| {
                            format!("{:.0} / {:.0}", g.ops_per_s, s.ops_per_s)
                        }),
                    )
                });
            }
        }
    }

    if args.tls_url.is_some() {
        out.extend(tls_ratios(rows, args));
    }

    let c = at_count(args, 32);
    let (b, l) = (find(rows, "uncontended", c), find(rows, "lease-row-tx", c));
    out.push(ratio(
        format!("uncontended pairs/s, broker / lease-row-tx, {c} clients"),
        b.zip(l).map(|(b, l)| b.ops_per_s / l.ops_per_s),
        times,
        ">= 0.70",
        |v| v >= 0.70,
        b.zip(l).map_or_else(String::new, |(b, l)| {
            format!("{:.0} / {:.0}", b.ops_per_s, l.ops_per_s)
        }),
    ));

    let c = if args.clients.contains(&1) {
        1
    } else {
        args.clients[0]
    };
    let (b, l) = (find(rows, "uncontended", c), find(rows, "lease-row-tx", c));
    let p50s = b.and_then(|b| b.p50_ms).zip(l.and_then(|l| l.p50_ms));
    out.push(ratio(
        format!("pair p50, broker / lease-row-tx, {c} client(s)"),
        p50s.map(|(b, l)| b / l),
        times,
        "< 2x",
        |v| v < 2.0,
        p50s.map_or_else(String::new, |(b, l)| format!("{b:.2} ms / {l:.2} ms")),
    ));

    for c in [8, 32, 128]
        .into_iter()
        .filter(|c| args.clients.contains(c))
    {
        let q = find(rows, "contended", c);
        for (storm, label) in [
            ("nowait-storm", "broker nowait-storm grants/s"),
            (
                "lease-row-tx nowait-storm",
                "lease-row-tx NOWAIT-storm grants/s",
            ),
        ] {
            let s = find(rows, storm, c);
            out.push(ratio(
                format!("contended handoffs/s / {label}, {c} clients"),
                q.zip(s).map(|(q, s)| q.ops_per_s / s.ops_per_s),
                times,
                ">= 5x",
                |v| v >= 5.0,
                q.zip(s).map_or_else(String::new, |(q, s)| {
                    format!("{:.0} / {:.0}", q.ops_per_s, s.ops_per_s)
                }),
            ));
        }
        let h = q.and_then(|q| q.handoff);
        out.push(ratio(
            format!("handoff p50, one broker (contended), {c} clients"),
            h.map(|h| h.p50_ms),
            |v| format!("{v:.2} ms"),
            "< 2 ms",
            |v| v < 2.0,
            h.map_or_else(String::new, |h| {
                format!("{} handoffs, p99 {:.2} ms", h.pairs, h.p99_ms)
            }),
        ));
    }

    // Reported, no target: how close one key's handoffs come to the rate at
    // which one connection can commit, and the broker against etcd.
    let reported = |name: String, a: Option<&Row>, b: Option<&Row>| Ratio {
        met: None,
        ..ratio(
            name,
            a.zip(b).map(|(a, b)| a.ops_per_s / b.ops_per_s),
            times,
            "(reported)",
            |_| true,
            a.zip(b).map_or_else(String::new, |(a, b)| {
                format!("{:.0} / {:.0}", a.ops_per_s, b.ops_per_s)
            }),
        )
    };
    for &c in &args.clients {
        out.push(reported(
            format!("contended handoffs/s / one-connection commits/s, {c} clients"),
            find(rows, "contended", c),
            find(rows, "mysql-commit (1 conn)", c),
        ));
    }
    // What the deadlock check on each session's wait costs (issue #33).
    for &c in &args.clients {
        if let Some(session) = find(rows, "contended-session", c) {
            out.push(reported(
                format!("contended-session handoffs/s / contended, {c} clients"),
                Some(session),
                find(rows, "contended", c),
            ));
        }
    }
    if args.etcd_url.is_some() {
        let c = at_count(args, 32);
        out.push(reported(
            format!("uncontended pairs/s, broker / etcd, {c} clients"),
            find(rows, "uncontended", c),
            find(rows, "etcd", c),
        ));
        for &c in &args.clients {
            out.push(reported(
                format!("contended handoffs/s, broker / etcd lock service, {c} clients"),
                find(rows, "contended", c),
                find(rows, "etcd contended", c),
            ));
        }
    }

    for c in cross_counts(args) {
        let h = find(rows, "contended-cross", c).and_then(|r| r.handoff);
        let cross = h.and_then(|h| h.cross);
        out.push(ratio(
            format!("handoff p50 across brokers (contended-cross), {c} clients"),
            cross.map(|x| x.p50_ms),
            |v| format!("{v:.2} ms"),
            "< 30 ms",
            |v| v < 30.0,
            h.zip(cross).map_or_else(String::new, |(h, x)| {
                let same = h.same.map_or_else(
                    || "no same-broker pairs".to_owned(),
                    |s| {
                        format!(
                            "same-broker: {} pairs, p50 {:.2} / p99 {:.2} ms",
                            s.pairs, s.p50_ms, s.p99_ms
                        )
                    },
                );
                format!(
                    "{} of {} handoffs cross, p99 {:.2} ms; {same}",
                    x.pairs, h.pairs, x.p99_ms
                )
            }),
        ));
    }

    if let Some(top) = args.held_counts.iter().copied().filter(|&n| n > 100).max() {
        let pair = find(rows, &format!("held {top}: acquire+release"), 16);
        let reference = find(rows, "held 100: acquire+release", 16);
        let num =
            |r: Option<&Row>, k: &str| r.and_then(|r| r.extra.get(k)).and_then(|v| v.as_f64());
        let conns = num(pair, "db_connections_max");
        out.push(ratio(
            format!("{top} held: broker MySQL connections (max sampled)"),
            conns,
            |v| format!("{v:.0}"),
            "<= 32",
            |v| v <= 32.0,
            num(pair, "db_connections_active_max")
                .map_or_else(String::new, |a| format!("{a:.0} busy at most")),
        ));
        let rss = num(pair, "rss_mb_max");
        out.push(ratio(
            format!("{top} held: broker RSS (max sampled)"),
            rss,
            |v| format!("{v:.0} MB"),
            "< 300 MB",
            |v| v < 300.0,
            num(reference, "rss_mb_max")
                .map_or_else(String::new, |r| format!("{r:.0} MB with 100 held")),
        ));
        let acquire_p50s = num(pair, "acquire_p50_ms").zip(num(reference, "acquire_p50_ms"));
        out.push(ratio(
            format!("{top} held: acquire p50 / 100-held acquire p50"),
            acquire_p50s.map(|(a, b)| a / b),
            times,
            "within 20 % (0.80-1.20x)",
            |v| (0.8..=1.2).contains(&v),
            acquire_p50s.map_or_else(String::new, |(a, b)| format!("{a:.2} ms / {b:.2} ms")),
        ));
        let renew = |n: usize| find(rows, &format!("held {n}: renew"), 16).and_then(|r| r.p50_ms);
        let renew_p50s = renew(top).zip(renew(100));
        out.push(Ratio {
            met: None,
            ..ratio(
                format!("{top} held: renew p50 / 100-held renew p50"),
                renew_p50s.map(|(a, b)| a / b),
                times,
                "(reported)",
                |_| true,
                renew_p50s.map_or_else(String::new, |(a, b)| format!("{a:.2} ms / {b:.2} ms")),
            )
        });
        let p50s = pair
            .and_then(|r| r.p50_ms)
            .zip(reference.and_then(|r| r.p50_ms));
        out.push(ratio(
            format!("{top} held: acquire+release p50 / 100-held p50"),
            p50s.map(|(a, b)| a / b),
            times,
            "within 20 % (0.80-1.20x)",
            |v| (0.8..=1.2).contains(&v),
            p50s.map_or_else(String::new, |(a, b)| {
                let after = find(rows, "held 100 (after release): acquire+release", 16)
                    .and_then(|r| r.p50_ms)
                    .map_or_else(String::new, |p| {
                        format!("; 100 held again after the release: {p:.2} ms")
                    });
                format!("{a:.2} ms / {b:.2} ms{after}")
            }),
        ));
    }

    for (label, c, r) in wasm {
        let (w, n) = (
            find(rows, &format!("wasm-vs-native: {label}"), *c),
            find(rows, "wasm-vs-native: native", *c),
        );
        let mut detail = w.zip(n).map_or_else(String::new, |(w, n)| {
            format!("{:.0} / {:.0} pairs/s", w.ops_per_s, n.ops_per_s)
        });
        let cpu = |r: Option<&Row>| r.and_then(|r| r.per_op(r.cpu.and_then(|c| c.broker_s)));
        if let (Some(w), Some(n)) = (cpu(w), cpu(n)) {
            detail.push_str(&format!("; broker CPU {w:.0} / {n:.0} µs per pair"));
        }
        let name = format!("{label} / native pairs/s, {c} clients");
        // The target is default.wasm's (a Rust policy); the others are
        // reported beside it.
        out.push(if label == "wasm" {
            ratio(
                name,
                Some(*r),
                |v| format!("{v:.3}"),
                ">= 0.90",
                |v| v >= 0.90,
                detail,
            )
        } else {
            Ratio {
                met: None,
                ..ratio(
                    name,
                    Some(*r),
                    |v| format!("{v:.3}"),
                    "(reported)",
                    |_| true,
                    detail,
                )
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_https_scenarios_are_broker_scenarios() {
        let all = selected("all").unwrap();
        assert!(all.contains(&"uncontended-https") && all.contains(&"new-connection"));
        assert_eq!(
            selected("uncontended,uncontended-https").unwrap(),
            ["uncontended", "uncontended-https"]
        );
    }

    #[test]
    fn a_tls_url_needs_its_ca() {
        assert!(Args::try_parse_from(["lockbench", "--tls-url", "https://127.0.0.1:1"]).is_err());
        let args = Args::try_parse_from([
            "lockbench",
            "--tls-url",
            "https://127.0.0.1:1",
            "--tls-ca",
            "/tmp/ca.pem",
        ])
        .unwrap();
        assert_eq!(
            args.tls_ca.as_deref(),
            Some(std::path::Path::new("/tmp/ca.pem"))
        );
    }

    #[test]
    fn contended_session_is_a_broker_scenario() {
        assert!(selected("broker").unwrap().contains(&"contended-session"));
        assert_eq!(
            selected("contended,contended-session").unwrap(),
            ["contended", "contended-session"]
        );
    }

    #[test]
    fn contended_cross_is_a_broker_scenario() {
        assert!(selected("all").unwrap().contains(&"contended-cross"));
        assert!(selected("broker").unwrap().contains(&"contended-cross"));
        assert_eq!(selected("contended-cross").unwrap(), ["contended-cross"]);
        assert!(selected("cross").is_err());
    }

    #[test]
    fn contended_cross_runs_from_2_to_32_clients() {
        let args = Args::parse_from(["lockbench"]);
        assert_eq!(cross_counts(&args), [8, 32]);
        let args = Args::parse_from([
            "lockbench",
            "--clients",
            "1,2,64",
            "--cross-max-clients",
            "64",
        ]);
        assert_eq!(cross_counts(&args), [2, 64]);
    }
}
