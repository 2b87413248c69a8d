//! `lockctl session run --ttl 15s --lock K1 --lock K2 -- CMD...`: hold
//! several locks in one session while CMD runs. One keepalive (every third
//! of the TTL) keeps every lock; when the session is lost CMD is stopped
//! and lockctl exits 76, as `run` does when its lease is lost
//! (`run.rs` holds and stops; this file only acquires).
//!
//! Unlike `multi` (all or none, at once), the locks are taken one by one,
//! each waiting within what is left of `--wait-ms`: in sorted order, so
//! two `session run`s naming the same keys never each hold what the other
//! waits for. If one cannot be had, the session is closed, releasing those
//! taken before.

use std::{future::Future, process::ExitCode};

use lockbroker_client::{Client, LockGuard, LostReason, Result, Session};
use serde_json::json;
use tokio::time::Instant;

use crate::{
    output::Output,
    run::{self, Held, RunArgs},
};

/// What `session run` was asked besides [`RunArgs`] (whose `ttl` is the
/// session's).
pub struct SessionArgs {
    /// A name for the session (`GET /v1/sessions?prefix=`).
    pub name: Option<String>,
    /// The lock keys.
    pub locks: Vec<String>,
}

/// Opens the session, takes every lock in it, runs CMD while they are
/// held, closes the session.
pub async fn run(client: &Client, out: Output, session: SessionArgs, args: RunArgs) -> ExitCode {
    let acquired = acquire(client, session, &args).await;
    run::hold(acquired, out, &args.command).await
}

/// A session and the locks held in it.
struct InSession {
    session: Session,
    locks: Vec<LockGuard>,
}

/// Opens the session and takes each lock in it within `--wait-ms`.
async fn acquire(client: &Client, what: SessionArgs, args: &RunArgs) -> Result<InSession> {
    let mut opening = client.session(args.ttl);
    if let Some(name) = what.name {
        opening = opening.name(name);
    }
    let session = opening.open().await?;
    let mut keys = what.locks;
    keys.sort();
    keys.dedup();
    let deadline = Instant::now() + args.wait;
    let mut locks = Vec::with_capacity(keys.len());
    for key in keys {
        let left = deadline.saturating_duration_since(Instant::now());
        let taken = session
            .lock(key)
            .owner(args.owner.clone())
            .wait(left)
            .acquire()
            .await;
        match taken {
            Ok(lock) => locks.push(lock),
            Err(err) => {
                // Releases the locks taken so far; the error that matters
                // is the acquire's.
                let _ = session.close().await;
                return Err(err);
            }
        }
    }
    Ok(InSession { session, locks })
}

impl Held for InSession {
    fn acquired(&self) -> serde_json::Value {
        let leases: Vec<_> = self.locks.iter().map(LockGuard::grant).collect();
        json!({"event": "acquired", "session": self.session.info(), "leases": leases})
    }

    fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.session.lost()
    }

    /// Closing the session releases every lock in it at once; the guards
    /// then know they were released, and dropping them sends nothing.
    async fn release(self) -> Result<()> {
        let closed = self.session.close().await;
        drop(self.locks);
        closed
    }
}
