//! `lockctl run KEY -- CMD...`: hold the lock while CMD runs, like `flock`
//! or `consul lock`; `lockctl multi KEY... -- CMD...` the same with several
//! locks taken all or none; `lockctl rw read|write KEY -- CMD...` with a
//! reader-writer lock (like `flock -s` / `flock -x`); `lockctl session run`
//! with several locks in one session (`session.rs`). What is held is
//! [`Held`]: a [`Guard`] renews every third of the TTL, a session keeps
//! itself alive as often; when the lease (or the session) is lost CMD is
//! stopped (SIGTERM, SIGKILL 5 s later) and lockctl exits 76; otherwise it
//! releases when CMD ends and exits with CMD's status.

use std::{future::Future, process::ExitCode, time::Duration};

use lockbroker_client::{ErrorCode, Guard, Guarded, LeaseBuilder, LostReason};
use serde::Serialize;
use serde_json::json;

use crate::output::{Output, EXIT_LEASE_LOST, EXIT_NOT_ACQUIRED};

/// How long CMD has to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What `run`, `multi` and `rw` were asked, besides what to lock.
pub struct RunArgs {
    pub owner: String,
    pub ttl: Duration,
    pub wait: Duration,
    pub command: Vec<String>,
}

/// Acquire what `lease` asks for (a lock, several, a rwlock lease), spawn
/// CMD, hold until CMD exits (or the lease is lost), release.
pub async fn run<K>(lease: LeaseBuilder<K>, out: Output, args: RunArgs) -> ExitCode
where
    K: Guarded<Lease: Serialize>,
{
    let acquired = lease
        .owner(args.owner)
        .ttl(args.ttl)
        .wait(args.wait)
        .acquire()
        .await;
    hold(acquired, out, &args.command).await
}

/// What is held while CMD runs: one guard, or a session and its leases.
pub trait Held: Sized {
    /// The `acquired` event printed with `--json`.
    fn acquired(&self) -> serde_json::Value;
    /// Resolves when what is held is lost.
    fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static;
    /// Gives it all back.
    fn release(self) -> impl Future<Output = lockbroker_client::Result<()>>;
}

impl<K: Guarded<Lease: Serialize>> Held for Guard<K> {
    fn acquired(&self) -> serde_json::Value {
        json!({"event": "acquired", "lease": self.grant()})
    }

    fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        Guard::lost(self)
    }

    fn release(self) -> impl Future<Output = lockbroker_client::Result<()>> {
        Guard::release(self)
    }
}

/// Holds what was acquired while `command` runs.
pub async fn hold<H: Held>(
    acquired: lockbroker_client::Result<H>,
    out: Output,
    command: &[String],
) -> ExitCode {
    let held = match acquired {
        Ok(held) => held,
        Err(err) => {
            let code = out.fail("cannot acquire", &err, false);
            return if err.code() == Some(ErrorCode::LockHeld) {
                ExitCode::from(EXIT_NOT_ACQUIRED)
            } else {
                code
            };
        }
    };
    if out.json_flag {
        event(&held.acquired());
    }
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("lockctl: cannot run {:?}: {err}", command[0]);
            let _ = held.release().await;
            return ExitCode::from(127);
        }
    };
    let lost = held.lost();
    tokio::select! {
        status = child.wait() => {
            release(held, out).await;
            match status {
                Ok(status) => {
                    let code = exit_code_of(status);
                    if out.json_flag {
                        event(&json!({"event": "exited", "code": code}));
                    }
                    ExitCode::from(code)
                }
                Err(err) => {
                    eprintln!("lockctl: waiting for the command failed: {err}");
                    ExitCode::from(crate::output::EXIT_REFUSED)
                }
            }
        }
        reason = lost => {
            eprintln!("lockctl: lease lost ({reason}); stopping the command");
            if out.json_flag {
                event(&json!({"event": "lost", "reason": reason.to_string()}));
            }
            stop(&mut child).await;
            ExitCode::from(EXIT_LEASE_LOST)
        }
        _ = tokio::signal::ctrl_c() => {
            stop(&mut child).await;
            release(held, out).await;
            ExitCode::from(130)
        }
    }
}

/// `run`'s own events with `--json`: one JSON line each on stderr (stdout
/// is CMD's).
fn event(value: &serde_json::Value) {
    eprintln!("{value}");
}

async fn release<H: Held>(held: H, out: Output) {
    if let Err(err) = held.release().await {
        if !out.json_flag {
            eprintln!("lockctl: release: {err}");
        } else {
            event(&json!({"event": "release_failed", "error": err.to_string()}));
        }
    }
}

/// CMD's status as ours: its code, or 128 + the signal that ended it.
fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    u8::try_from(code).unwrap_or(1)
}

/// SIGTERM, then SIGKILL if CMD is still running [`STOP_GRACE`] later.
async fn stop(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) {
        // SAFETY: sending a signal to our own child's pid has no memory effects.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
