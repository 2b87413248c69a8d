//! `lockctl`: the command-line client, on `lockbroker-client`.
//!
//! `acquire|release|renew|status|validate` print the broker's JSON answer
//! (`status` also of a semaphore or an election); `run KEY -- CMD...` holds
//! the lock while CMD runs, `multi KEY... -- CMD...` several locks, all or
//! none (`run.rs`), `rw read|write KEY -- CMD...` a reader-writer lock,
//! `session run --lock K1 --lock K2 -- CMD...` several locks in one
//! session (`session.rs`);
//! `history KEY [--limit N]` prints the lock's recorded events, newest
//! first; `force-release TENANT KEY` ends a stuck lease (admin); `watch
//! ELECTION` prints changes of leader (`watch.rs`); `ls [PREFIX]` lists
//! the live leases of a kind (`ls.rs`); `events [PREFIX]` follows the
//! changes of the tenant's leases (`events.rs`); `policy
//! upload|status|versions|rollback|shadow|shadow-report|shadow-drop|promote`
//! uses the admin API (`policy.rs`).
//! What is printed and the exit codes are in `output.rs`: 0 success (or
//! CMD's own status for `run`), 1 the broker refused (a 429 also says how
//! long to wait), 2 usage, 3 the broker could not be reached, 75 `run`
//! could not get the lock in time, 76 `run` lost the lease while CMD ran
//! (CMD was stopped). The connection settings (URL, key, TLS files, the
//! calls' deadline) are [`Connection`]'s.

mod duration;
mod events;
mod ls;
mod output;
mod policy;
mod run;
mod session;
mod watch;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{ArgGroup, Args, Parser, Subcommand};
use lockbroker_client::{
    api::{AcquireRequest, ReleaseRequest, RenewRequest, RwMode},
    Client, Election, Lock, Result, RwLock, Semaphore,
};
use serde::Serialize;

use output::{Output, EXIT_USAGE};

/// What `lockctl --help` ends with.
const AFTER_HELP: &str = "\
Exit status:
  0   success (run, multi, rw, session run: the command's own status)
  1   the broker refused: its JSON error is printed. A 429 (rate_limited,
      quota_exceeded) is first waited out and retried within --timeout-ms;
      if it still refuses, lockctl prints the reason and how long to wait
      (\"retry after N ms\"; with --json, retry_after_ms in the error)
  2   usage (a bad flag, URL or TLS file)
  3   the broker could not be reached (or TLS with it failed), or did not
      answer in time
  4   validate: the token is not the live grant
  75  run, multi, rw, session run: not acquired within --wait-ms
  76  run, multi, rw, session run: the lease (or the session) was lost
      while the command ran (it was stopped)

HTTPS: --ca-file trusts the broker's CA instead of the system's roots;
--client-cert and --client-key (both) present a client certificate to a
broker that asks for one (mutual TLS). Files are PEM.";

#[derive(Parser)]
#[command(
    version,
    about = "Take, hold and release lockbroker locks; list the live leases and follow their changes",
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(flatten)]
    connection: Connection,
    /// Machine-readable output: one JSON document per result on stdout,
    /// lockctl's own errors included (`watch`, `ls`, `events`: one per
    /// line; `run`: its events as JSON lines on stderr).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// How lockctl reaches the broker: the flags, or the environment variables
/// every client reads.
#[derive(Args)]
struct Connection {
    /// Broker URL (http:// or https://).
    #[arg(long, env = "LOCKBROKER_URL", default_value = "http://127.0.0.1:7420")]
    url: String,
    /// The tenant's API key.
    #[arg(long, env = "LOCKBROKER_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The admin token, for `policy` and `force-release`.
    #[arg(long, env = "LOCKBROKER_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// CA certificates (PEM) to trust for https:// instead of the system's.
    #[arg(long, env = "LOCKBROKER_CA_FILE", value_name = "FILE")]
    ca_file: Option<String>,
    /// A client certificate (PEM, chain allowed) for a broker that asks
    /// for one (mutual TLS); with --client-key.
    #[arg(long, env = "LOCKBROKER_CLIENT_CERT", value_name = "FILE")]
    client_cert: Option<String>,
    /// The client certificate's private key (PEM); with --client-cert.
    #[arg(long, env = "LOCKBROKER_CLIENT_KEY", value_name = "FILE")]
    client_key: Option<String>,
    /// How long a call may take beyond its own wait, retries included
    /// (after a 503, a 429, a failed connection).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
}

impl Connection {
    /// A client with `key` as its bearer token and the TLS files given.
    ///
    /// # Errors
    /// A bad URL, a TLS file that cannot be used, a client certificate
    /// without its key or the reverse.
    fn client(&self, key: Option<String>) -> Result<Client> {
        let mut builder = Client::builder(&self.url).slack(Duration::from_millis(self.timeout_ms));
        if let Some(key) = key {
            builder = builder.api_key(key);
        }
        // An empty variable counts as unset, as for the client crate.
        let given = |file: &Option<String>| file.clone().filter(|f| !f.is_empty());
        if let Some(ca) = given(&self.ca_file) {
            builder = builder.ca_file(ca);
        }
        match (given(&self.client_cert), given(&self.client_key)) {
            (Some(cert), Some(key)) => builder = builder.client_cert(cert, key),
            (None, None) => {}
            (Some(file), None) | (None, Some(file)) => {
                return Err(lockbroker_client::Error::TlsFile {
                    path: file.into(),
                    reason: "--client-cert and --client-key (LOCKBROKER_CLIENT_CERT, \
                             LOCKBROKER_CLIENT_KEY) go together"
                        .into(),
                })
            }
        }
        builder.build()
    }
}

#[derive(Args)]
struct Owner {
    /// Who holds the lock; defaults to $LOCKBROKER_OWNER or the host name.
    #[arg(long, env = "LOCKBROKER_OWNER")]
    owner: Option<String>,
}

impl Owner {
    fn get(self) -> String {
        self.owner.unwrap_or_else(lockbroker_client::host_name)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Take a lock and print the lease (with its token).
    Acquire {
        key: String,
        #[command(flatten)]
        owner: Owner,
        #[arg(long, default_value_t = 30_000)]
        ttl_ms: u64,
        /// How long to wait for the lock; 0 tries once.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
    },
    /// Release a lease.
    Release {
        key: String,
        #[command(flatten)]
        owner: Owner,
        #[arg(long)]
        token: u64,
    },
    /// Extend a lease.
    Renew {
        key: String,
        #[command(flatten)]
        owner: Owner,
        #[arg(long)]
        token: u64,
        #[arg(long, default_value_t = 30_000)]
        ttl_ms: u64,
    },
    /// Show who holds a lock, a semaphore's holders, a rwlock's writer or
    /// readers, or an election's leader.
    #[command(group(ArgGroup::new("what").required(true).args(["key", "semaphore", "rwlock", "election"])))]
    Status {
        /// The lock.
        key: Option<String>,
        /// A semaphore instead: its size, holders and waiters.
        #[arg(long, value_name = "NAME")]
        semaphore: Option<String>,
        /// A reader-writer lock instead: its writer, readers and waiters.
        #[arg(long, value_name = "NAME")]
        rwlock: Option<String>,
        /// An election instead: its leader and term.
        #[arg(long, value_name = "NAME")]
        election: Option<String>,
    },
    /// Hold the lock while CMD runs, renewing it every third of the TTL, and
    /// exit with CMD's status. If the lease is lost, CMD is stopped and
    /// lockctl exits with 76.
    Run {
        key: String,
        /// Defaults to $LOCKBROKER_OWNER or host:pid.
        #[arg(long, env = "LOCKBROKER_OWNER")]
        owner: Option<String>,
        #[arg(long, default_value_t = 30_000)]
        ttl_ms: u64,
        /// How long to wait for the lock before giving up with 75.
        #[arg(long, default_value_t = 300_000)]
        wait_ms: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Hold several locks, taken all or none, while CMD runs (as `run`).
    Multi {
        /// The lock keys (1 to 64).
        #[arg(required = true)]
        keys: Vec<String>,
        /// Defaults to $LOCKBROKER_OWNER or host:pid.
        #[arg(long, env = "LOCKBROKER_OWNER")]
        owner: Option<String>,
        #[arg(long, default_value_t = 30_000)]
        ttl_ms: u64,
        /// How long to wait for every lock before giving up with 75.
        #[arg(long, default_value_t = 300_000)]
        wait_ms: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Hold a reader-writer lock, shared (`read`) or alone (`write`), while
    /// CMD runs (as `run`).
    Rw {
        #[arg(value_enum)]
        mode: RwModeArg,
        key: String,
        /// Defaults to $LOCKBROKER_OWNER or host:pid.
        #[arg(long, env = "LOCKBROKER_OWNER")]
        owner: Option<String>,
        #[arg(long, default_value_t = 30_000)]
        ttl_ms: u64,
        /// How long to wait for the lease before giving up with 75.
        #[arg(long, default_value_t = 300_000)]
        wait_ms: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Sessions: many locks kept alive by one keepalive.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Whether TOKEN is the lock's live grant now: prints the broker's
    /// answer; exits 0 when valid, 4 when not.
    Validate { key: String, token: u64 },
    /// Print the lock's latest events (grants, releases, expiries,
    /// handoffs, force-releases), newest first, as the broker's JSON.
    History {
        key: String,
        /// How many events at most (1 to 1000; the broker's default: 100).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// End the live lease of TENANT's lock KEY, whoever holds it (admin
    /// token); prints the lease that was ended.
    ForceRelease { tenant: String, key: String },
    /// Print the election's leader now and each change of leader after.
    Watch {
        election: String,
        /// Exit (0) after printing this many events (the first is the
        /// leadership now).
        #[arg(long)]
        count: Option<u64>,
    },
    /// List the live locks (or semaphores, rwlocks, elections) under PREFIX.
    ///
    /// In storage-key order, following the listing's pages up to --limit:
    /// a table of key, holders, token, expiry and waiters, or with --json
    /// one JSON object per lease per line.
    #[command(group(ArgGroup::new("kind").args(["semaphores", "rwlocks", "elections"])))]
    Ls {
        /// Only storage keys that start with this (matched literally).
        #[arg(default_value = "")]
        prefix: String,
        /// Semaphores instead of locks.
        #[arg(long)]
        semaphores: bool,
        /// Reader-writer locks instead of locks.
        #[arg(long)]
        rwlocks: bool,
        /// Elections instead of locks.
        #[arg(long)]
        elections: bool,
        /// List at most this many (the listing's pages are followed until
        /// then).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Follow the changes of the locks, semaphores and rwlocks under PREFIX.
    ///
    /// Grants, releases, expiries, handoffs and force-releases, one line
    /// each as they happen (--json: one JSON object per line), until
    /// interrupted or --count. A broken connection is resumed after the
    /// last event printed (Last-Event-ID).
    Events {
        /// Only storage keys that start with this (matched literally).
        #[arg(default_value = "")]
        prefix: String,
        /// Start after this event id (from the broker's history) instead
        /// of with the next change.
        #[arg(long, value_name = "ID")]
        after: Option<u64>,
        /// Exit (0) after printing this many events.
        #[arg(long)]
        count: Option<u64>,
    },
    /// A tenant's policy (admin token: --admin-token or $LOCKBROKER_ADMIN_TOKEN).
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
enum SessionCommand {
    /// Hold every --lock in one session while CMD runs, and exit with CMD's
    /// status.
    ///
    /// The session keeps itself alive (a keepalive every third of --ttl);
    /// the locks are taken one by one in sorted order, within --wait-ms
    /// in all (75 if one cannot be had: those taken are released). If the
    /// session is lost (closed from outside, or keepalives not confirmed
    /// before it would expire), CMD is stopped and lockctl exits 76. When
    /// CMD ends the session is closed, releasing every lock at once.
    Run {
        /// A lock to hold (repeat for more).
        #[arg(long = "lock", value_name = "KEY", required = true)]
        locks: Vec<String>,
        /// How long the session lives without a keepalive: 1s to 1h
        /// (units ms, s, m, h).
        #[arg(long, default_value = "15s", value_parser = duration::parse)]
        ttl: Duration,
        /// A name for the session, shown in listings.
        #[arg(long)]
        name: Option<String>,
        /// Defaults to $LOCKBROKER_OWNER or host:pid.
        #[arg(long, env = "LOCKBROKER_OWNER")]
        owner: Option<String>,
        /// How long to wait for all the locks before giving up with 75.
        #[arg(long, default_value_t = 300_000)]
        wait_ms: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// The mode of `lockctl rw`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum RwModeArg {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Upload a policy component (.wasm) and swap it in.
    Upload {
        file: PathBuf,
        /// The tenant whose policy it becomes.
        #[arg(long)]
        tenant: String,
    },
    /// The policy in force (name, version, sha256, load time, last error)
    /// of one tenant, or of every tenant.
    Status {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// The versions of a tenant's policy the broker keeps, newest first.
    Versions {
        #[arg(long)]
        tenant: String,
    },
    /// Put a kept version of a tenant's policy back in force (a swap, no
    /// compiling): VERSION (an id or sha256 from `policy versions`), else
    /// the previous one.
    Rollback {
        #[arg(long)]
        tenant: String,
        version: Option<String>,
    },
    /// Load a policy component (.wasm) as a tenant's shadow candidate: it
    /// runs beside the policy in force on live traffic and decides nothing.
    Shadow {
        file: PathBuf,
        /// The tenant whose shadow it becomes.
        #[arg(long)]
        tenant: String,
    },
    /// How a tenant's shadow candidate's answers compare with the policy
    /// in force: counts per export and the latest disagreements.
    ShadowReport {
        #[arg(long)]
        tenant: String,
    },
    /// Drop a tenant's shadow candidate (prints its last report).
    ShadowDrop {
        #[arg(long)]
        tenant: String,
    },
    /// Put a tenant's shadow candidate in force (a new version; `policy
    /// rollback` goes back) and end the shadow.
    Promote {
        #[arg(long)]
        tenant: String,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Output {
        json_flag: cli.json,
    };
    let connection = &cli.connection;
    let admin = matches!(
        cli.command,
        Command::Policy(_) | Command::ForceRelease { .. }
    );
    let key = match (admin, &connection.admin_token) {
        (true, Some(token)) => Some(token.clone()),
        (true, None) => {
            eprintln!(
                "lockctl: policy and force-release need the admin token (--admin-token or LOCKBROKER_ADMIN_TOKEN)"
            );
            return ExitCode::from(EXIT_USAGE);
        }
        (false, _) => connection.api_key.clone(),
    };
    let client = match connection.client(key) {
        Ok(client) => client,
        Err(err) => return out.fail("usage", &err, false),
    };
    match cli.command {
        Command::Acquire {
            key,
            owner,
            ttl_ms,
            wait_ms,
        } => {
            let request = AcquireRequest {
                terms: lockbroker_client::api::LeaseTerms::new(ttl_ms, wait_ms),
                ..AcquireRequest::new(owner.get())
            };
            print(out, client.locks().acquire(&key, &request).await)
        }
        Command::Release { key, owner, token } => {
            let request = ReleaseRequest {
                owner: owner.get(),
                token,
            };
            print(out, client.locks().release(&key, &request).await)
        }
        Command::Renew {
            key,
            owner,
            token,
            ttl_ms,
        } => {
            let request = RenewRequest {
                owner: owner.get(),
                token,
                ttl_ms: Some(ttl_ms),
            };
            print(out, client.locks().renew(&key, &request).await)
        }
        Command::Status {
            key,
            semaphore,
            rwlock,
            election,
        } => match (key, semaphore, rwlock, election) {
            (Some(key), ..) => print(out, client.locks().status(&key).await),
            (_, Some(name), ..) => print(out, client.semaphores().status(&name).await),
            (_, _, Some(name), _) => print(out, client.rwlocks().status(&name).await),
            (_, _, _, Some(name)) => print(out, client.elections().status(&name).await),
            (None, None, None, None) => unreachable!("clap requires one of them"),
        },
        Command::Run {
            key,
            owner,
            ttl_ms,
            wait_ms,
            command,
        } => {
            run::run(
                client.lock(key),
                out,
                run_args(owner, ttl_ms, wait_ms, command),
            )
            .await
        }
        Command::Multi {
            keys,
            owner,
            ttl_ms,
            wait_ms,
            command,
        } => {
            run::run(
                client.multilock(keys),
                out,
                run_args(owner, ttl_ms, wait_ms, command),
            )
            .await
        }
        Command::Rw {
            mode,
            key,
            owner,
            ttl_ms,
            wait_ms,
            command,
        } => {
            let mode = match mode {
                RwModeArg::Read => RwMode::Read,
                RwModeArg::Write => RwMode::Write,
            };
            let args = run_args(owner, ttl_ms, wait_ms, command);
            run::run(client.rwlock(key, mode), out, args).await
        }
        Command::Session(SessionCommand::Run {
            locks,
            ttl,
            name,
            owner,
            wait_ms,
            command,
        }) => {
            let what = session::SessionArgs { name, locks };
            // The session's TTL is its leases' lease length.
            let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
            let args = run_args(owner, ttl_ms, wait_ms, command);
            session::run(&client, out, what, args).await
        }
        Command::Validate { key, token } => match client.locks().validate(&key, token).await {
            Ok(validity) => {
                out.json(&validity);
                if validity.valid {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(output::EXIT_INVALID)
                }
            }
            Err(err) => out.fail("request failed", &err, true),
        },
        Command::History { key, limit } => print(out, client.locks().history(&key, limit).await),
        Command::ForceRelease { tenant, key } => {
            print(out, client.admin().force_release(&tenant, &key).await)
        }
        Command::Watch { election, count } => watch::watch(&client, out, &election, count).await,
        Command::Ls {
            prefix,
            semaphores,
            rwlocks,
            elections,
            limit,
        } => match (semaphores, rwlocks, elections) {
            (true, ..) => ls::ls::<Semaphore>(&client, out, &prefix, limit).await,
            (_, true, _) => ls::ls::<RwLock>(&client, out, &prefix, limit).await,
            (_, _, true) => ls::ls::<Election>(&client, out, &prefix, limit).await,
            _ => ls::ls::<Lock>(&client, out, &prefix, limit).await,
        },
        Command::Events {
            prefix,
            after,
            count,
        } => events::events(&client, out, &prefix, after, count).await,
        Command::Policy(PolicyCommand::Upload { file, tenant }) => {
            policy::upload(&client, out, &file, &tenant, false).await
        }
        Command::Policy(PolicyCommand::Status { tenant }) => {
            policy::status(&client, out, tenant.as_deref()).await
        }
        Command::Policy(PolicyCommand::Versions { tenant }) => {
            policy::versions(&client, out, &tenant).await
        }
        Command::Policy(PolicyCommand::Rollback { tenant, version }) => {
            policy::rollback(&client, out, &tenant, version.as_deref()).await
        }
        Command::Policy(PolicyCommand::Shadow { file, tenant }) => {
            policy::upload(&client, out, &file, &tenant, true).await
        }
        Command::Policy(PolicyCommand::ShadowReport { tenant }) => {
            policy::shadow_report(&client, out, &tenant, false).await
        }
        Command::Policy(PolicyCommand::ShadowDrop { tenant }) => {
            policy::shadow_report(&client, out, &tenant, true).await
        }
        Command::Policy(PolicyCommand::Promote { tenant }) => {
            policy::promote(&client, out, &tenant).await
        }
    }
}

/// What `run`, `multi` and `rw` hold by: the owner (default `host:pid`),
/// the lease terms, the command.
fn run_args(
    owner: Option<String>,
    ttl_ms: u64,
    wait_ms: u64,
    command: Vec<String>,
) -> run::RunArgs {
    run::RunArgs {
        owner: owner.unwrap_or_else(|| {
            format!("{}:{}", lockbroker_client::host_name(), std::process::id())
        }),
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        command,
    }
}

/// A lease command's result: its JSON on stdout, or the failure.
fn print(out: Output, result: Result<impl Serialize>) -> ExitCode {
    match result {
        Ok(value) => {
            out.json(&value);
            ExitCode::SUCCESS
        }
        Err(err) => out.fail("request failed", &err, true),
    }
}
