//! `lockctl`: the command-line client.
//!
//! `acquire|release|renew|status KEY` print the broker's JSON answer;
//! `run KEY -- CMD...` holds the lock while CMD runs, like `flock` or
//! `consul lock`. Exit codes: 0 success (or CMD's own status for `run`),
//! 1 the broker said no (409 and other error replies), 2 usage, 3 the
//! broker could not be reached, 75 `run` could not get the lock in time,
//! 76 `run` lost the lease while CMD ran (CMD was stopped).

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{Args, Parser, Subcommand};
use lockbroker::client::{Client, ClientError, Reply};

const EXIT_REFUSED: u8 = 1;
const EXIT_UNREACHABLE: u8 = 3;
const EXIT_NOT_ACQUIRED: u8 = 75;
const EXIT_LEASE_LOST: u8 = 76;

#[derive(Parser)]
#[command(version, about = "Take, hold and release lockbroker locks")]
struct Cli {
    /// Broker URL.
    #[arg(long, env = "LOCKBROKER_URL", default_value = "http://127.0.0.1:7420")]
    url: String,
    /// The tenant's API key.
    #[arg(long, env = "LOCKBROKER_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Owner {
    /// Who holds the lock; defaults to $LOCKBROKER_OWNER or the host name.
    #[arg(long, env = "LOCKBROKER_OWNER")]
    owner: Option<String>,
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
    /// Show who holds a lock.
    Status { key: String },
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
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl Owner {
    fn get(self) -> String {
        self.owner.unwrap_or_else(host_name)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let client = match Client::new(&cli.url, cli.api_key.as_deref()) {
        Ok(client) => client,
        Err(err) => {
            eprintln!("lockctl: {err}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Acquire {
            key,
            owner,
            ttl_ms,
            wait_ms,
        } => client.acquire(&key, &owner.get(), ttl_ms, wait_ms).await,
        Command::Release { key, owner, token } => client.release(&key, &owner.get(), token).await,
        Command::Renew {
            key,
            owner,
            token,
            ttl_ms,
        } => client.renew(&key, &owner.get(), token, ttl_ms).await,
        Command::Status { key } => client.status(&key).await,
        Command::Run {
            key,
            owner,
            ttl_ms,
            wait_ms,
            command,
        } => {
            let owner = owner.unwrap_or_else(|| format!("{}:{}", host_name(), std::process::id()));
            return run(&client, &key, &owner, ttl_ms, wait_ms, &command).await;
        }
    };
    match result {
        Ok(reply) => {
            println!("{}", reply.body);
            if reply.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_REFUSED)
            }
        }
        Err(err) => unreachable_broker(&err),
    }
}

fn unreachable_broker(err: &ClientError) -> ExitCode {
    eprintln!("lockctl: {err}");
    ExitCode::from(EXIT_UNREACHABLE)
}

fn refused(what: &str, reply: &Reply) {
    eprintln!(
        "lockctl: {what}: {} ({})",
        reply.message(),
        reply.code().unwrap_or("error")
    );
}

/// `lockctl run`: acquire, spawn, renew until CMD exits, release.
async fn run(
    client: &Client,
    key: &str,
    owner: &str,
    ttl_ms: u64,
    wait_ms: u64,
    command: &[String],
) -> ExitCode {
    let requested = Instant::now();
    let reply = match client.acquire(key, owner, ttl_ms, wait_ms).await {
        Ok(reply) => reply,
        Err(err) => return unreachable_broker(&err),
    };
    if !reply.is_ok() {
        refused("cannot acquire", &reply);
        return ExitCode::from(if reply.code() == Some("lock_held") {
            EXIT_NOT_ACQUIRED
        } else {
            EXIT_REFUSED
        });
    }
    let token = reply.body["token"].as_u64().unwrap_or_default();
    // The lease surely lasts until `requested + ttl` by our clock: the
    // broker started it after we sent the request.
    let mut lease_ends = requested + Duration::from_millis(ttl_ms);
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("lockctl: cannot run {:?}: {err}", command[0]);
            let _ = client.release(key, owner, token).await;
            return ExitCode::from(127);
        }
    };
    let every = Duration::from_millis((ttl_ms / 3).max(50));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = ticker.tick() => {
                let sent = Instant::now();
                match client.renew(key, owner, token, ttl_ms).await {
                    Ok(reply) if reply.is_ok() => lease_ends = sent + Duration::from_millis(ttl_ms),
                    Ok(reply) if reply.status == 409 => {
                        refused("lease lost", &reply);
                        stop(&mut child).await;
                        return ExitCode::from(EXIT_LEASE_LOST);
                    }
                    Ok(reply) => refused("renew failed, will retry", &reply),
                    Err(err) => eprintln!("lockctl: renew failed, will retry: {err}"),
                }
                if Instant::now() + every >= lease_ends {
                    // The next try would come after the lease may have ended.
                    eprintln!("lockctl: cannot renew the lease before it ends; stopping the command");
                    stop(&mut child).await;
                    return ExitCode::from(EXIT_LEASE_LOST);
                }
            }
            _ = tokio::signal::ctrl_c() => {
                stop(&mut child).await;
                let _ = client.release(key, owner, token).await;
                return ExitCode::from(130);
            }
        }
    };
    if let Ok(reply) = client.release(key, owner, token).await {
        if !reply.is_ok() {
            refused("release", &reply);
        }
    }
    match status {
        Ok(status) => exit_code_of(status),
        Err(err) => {
            eprintln!("lockctl: waiting for the command failed: {err}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

/// CMD's status as ours: its code, or 128 + the signal that ended it.
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// SIGTERM, then SIGKILL if CMD is still running 5 s later.
async fn stop(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: sending a signal to our own child's pid has no memory effects.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
