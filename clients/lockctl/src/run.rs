//! `lockctl run KEY -- CMD...`: hold the lock while CMD runs, like `flock`
//! or `consul lock`; `lockctl multi KEY... -- CMD...` the same with several
//! locks taken all or none; `lockctl rw read|write KEY -- CMD...` with a
//! reader-writer lock (like `flock -s` / `flock -x`). The lock is a [`Guard`]: it renews every third
//! of the TTL; when the lease is lost CMD is stopped (SIGTERM, SIGKILL 5 s
//! later) and lockctl exits 76; otherwise it releases the lock when CMD
//! ends and exits with CMD's status.

use std::{process::ExitCode, time::Duration};

use lockbroker_client::{ErrorCode, Guard, Guarded, LeaseBuilder};
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

/// Holds the acquired lease while `command` runs.
async fn hold<K: Guarded<Lease: Serialize>>(
    acquired: lockbroker_client::Result<Guard<K>>,
    out: Output,
    command: &[String],
) -> ExitCode {
    let guard = match acquired {
        Ok(guard) => guard,
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
        event(&json!({"event": "acquired", "lease": guard.grant()}));
    }
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("lockctl: cannot run {:?}: {err}", command[0]);
            let _ = guard.release().await;
            return ExitCode::from(127);
        }
    };
    let lost = guard.lost();
    tokio::select! {
        status = child.wait() => {
            release(guard, out).await;
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
            release(guard, out).await;
            ExitCode::from(130)
        }
    }
}

/// `run`'s own events with `--json`: one JSON line each on stderr (stdout
/// is CMD's).
fn event(value: &serde_json::Value) {
    eprintln!("{value}");
}

async fn release<K: Guarded>(guard: Guard<K>, out: Output) {
    if let Err(err) = guard.release().await {
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
