//! Commits whose outcome is unknown, found out.
//!
//! A `COMMIT` whose answer never came (the connection broke, or the
//! deadline passed) may or may not have taken effect. Every grant writes a
//! new token or a new expiry (microseconds of the database clock), so the
//! row itself tells: the broker ends the old session if it may still be
//! alive on the server (`KILL`, so a commit still in flight cannot land
//! later), reads the row with a locking read on a fresh connection (which
//! waits for any transaction still holding it), and compares it with what
//! the commit would have written. A commit found to have happened is
//! answered as if its answer had arrived; one found not to have happened
//! is retried like any transaction that never ran.

use std::time::Duration;

use chrono::NaiveDateTime;
use tokio::time::Instant;

use super::{
    marks::{Marks, Watching},
    seat::{self, Seat},
    Budget, DbFailure, Engine, EngineError, LockRef,
};
use crate::store::{pool::Conn, waiters, Failure, Locking};

/// Time to find out an outcome even when the commit used up its budget.
const SETTLE_AT_LEAST: Duration = Duration::from_millis(500);
/// How long a grant answered `503` is looked after in the background.
const UNDO_FOR: Duration = Duration::from_secs(60);
/// Pause between attempts to reach the database while settling.
const SETTLE_PAUSE: Duration = Duration::from_millis(50);

/// What a transaction's commit leaves in the database, if it happened.
#[derive(Debug, Clone)]
pub(super) enum Expect {
    /// The seat holds exactly this lease (`fresh`: a new grant, which
    /// nobody holds if its client was told the database failed).
    Lease {
        seat: Seat,
        owner: String,
        token: u64,
        hold_count: u32,
        expires_at: NaiveDateTime,
        fresh: bool,
    },
    /// The seat's lease `token` has ended: the seat was freed with that
    /// token, or has moved on to a later one.
    Ended { seat: Seat, token: u64 },
    /// A waiter row exists.
    Waiter { id: u64 },
    /// A waiter row is gone.
    WaiterGone { id: u64 },
    /// A rwlock's header carries the mark its transaction wrote (each
    /// writes a fresh one); `grants`: the new leases (owner, token) it made
    /// (several when it served a combined batch, `rw_batch`), given back
    /// if found committed after they were answered `503`.
    Marked {
        mark: u64,
        grants: Vec<(String, u64)>,
    },
    /// Nobody waits for the answer (background work): not worth finding out.
    Unchecked,
}

impl Engine {
    /// Appends the history events noted on `conn`'s transaction, then
    /// commits it. If the answer is lost, finds out whether it happened
    /// (see the module docs).
    ///
    /// # Errors
    /// A collision or other server error (the transaction did not happen);
    /// [`DbFailure::NotCommitted`] when a lost commit did not happen (safe
    /// to retry); [`DbFailure::Unknown`] when that could not be found out.
    pub(super) async fn commit(
        &self,
        mut conn: Conn,
        lock: &LockRef,
        expect: Expect,
    ) -> Result<(), EngineError> {
        let events = conn.take_events();
        crate::store::history::append(&mut conn, &events).await?;
        // Watched from before the COMMIT is sent until it is settled.
        let _watching = self.watch(&expect);
        match conn.commit().await {
            Ok(()) => Ok(()),
            Err(err) => {
                tracing::debug!(error = %err, key = %lock.storage_key, ?expect, "commit failed");
                self.find_out(conn, err, lock, expect).await
            }
        }
    }

    /// After a statement that commits (a `COMMIT`, or a write outside a
    /// transaction) failed with `err`: if the connection broke, finds out
    /// whether it took effect. Errors as [`Engine::commit`].
    pub(super) async fn find_out(
        &self,
        conn: Conn,
        err: sqlx::Error,
        lock: &LockRef,
        expect: Expect,
    ) -> Result<(), EngineError> {
        if crate::store::classify(&err) != Failure::Disconnected {
            return Err(err.into());
        }
        if matches!(expect, Expect::Unchecked) {
            return Err(EngineError::Unavailable(DbFailure::Unknown));
        }
        tracing::warn!(error = %err, key = %lock.storage_key, "the answer to a commit was lost; finding out whether it happened");
        let session = Session {
            server: conn.server().to_owned(),
            id: conn.id(),
            server_started: conn.server_started(),
        };
        let deadline = conn.deadline().max(Instant::now() + SETTLE_AT_LEAST);
        drop(conn);
        let outcome = self
            .settle(lock, &expect, &session, Budget { deadline })
            .await;
        let label = match &outcome {
            Ok(true) => "committed",
            Ok(false) => "not_committed",
            Err(_) => "unknown",
        };
        self.metrics
            .inc("lockbroker_lost_commits_total", &[("outcome", label)]);
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) => Err(EngineError::Unavailable(DbFailure::NotCommitted)),
            Err(()) => {
                self.undo_later(lock, expect, session);
                Err(EngineError::Unavailable(DbFailure::Unknown))
            }
        }
    }

    /// A new grant whose commit could not be settled is answered `503`, so
    /// nobody will use it: once the database answers again, find out
    /// whether it happened and, if so, give it back (in the background,
    /// for at most [`UNDO_FOR`]).
    fn undo_later(&self, lock: &LockRef, expect: Expect, session: Session) {
        let grants: Vec<(Seat, String, u64)> = match &expect {
            Expect::Lease {
                seat,
                owner,
                token,
                fresh: true,
                ..
            } => vec![(*seat, owner.clone(), *token)],
            Expect::Marked { grants, .. } => grants
                .iter()
                .map(|(owner, token)| (Seat::Whole, owner.clone(), *token))
                .collect(),
            _ => return,
        };
        if grants.is_empty() {
            return;
        }
        let (engine, lock) = (self.clone(), lock.clone());
        // Taken while the commit's own watch still holds (see `marks`).
        let watching = self.watch(&expect);
        tokio::spawn(async move {
            let _watching = watching;
            let budget = Budget {
                deadline: Instant::now() + UNDO_FOR,
            };
            if let Ok(true) = engine.settle(&lock, &expect, &session, budget).await {
                for (seat, owner, token) in grants {
                    tracing::info!(key = %lock.storage_key, token, "a grant answered 503 had committed: giving it back");
                    engine.give_back(&lock, seat, &owner, token).await;
                }
            }
        });
    }

    /// A watch of the rwlock mark `expect` is about, if any (`marks`).
    fn watch(&self, expect: &Expect) -> Option<Watching> {
        match expect {
            Expect::Marked { mark, .. } => Some(self.marks.watch(*mark)),
            _ => None,
        }
    }

    /// Whether the commit of `session` left what `expect` says, found out
    /// by `budget`; `Err` if the database could not be asked in time.
    async fn settle(
        &self,
        lock: &LockRef,
        expect: &Expect,
        session: &Session,
        budget: Budget,
    ) -> Result<bool, ()> {
        until_answered(budget, || self.settle_once(lock, expect, session, budget)).await
    }

    async fn settle_once(
        &self,
        lock: &LockRef,
        expect: &Expect,
        session: &Session,
        budget: Budget,
    ) -> Result<bool, EngineError> {
        let mut conn = self.conn(budget).await?;
        end_session(&mut conn, session).await?;
        conn.begin().await?;
        let happened = happened(&mut conn, lock, expect, &self.marks).await?;
        conn.rollback().await?;
        Ok(happened)
    }

    /// [`Engine::find_out`] for a batch's commit, which wrote every
    /// member's row of `members`: committed when every row shows its
    /// member's outcome, not committed when none does. Anything else (a row
    /// changed since by someone else) cannot be told apart: `Unknown`, and
    /// new grants among the members are looked after as for one grant.
    pub(super) async fn find_out_all(
        &self,
        conn: Conn,
        err: sqlx::Error,
        members: &[(LockRef, Expect)],
    ) -> Result<(), EngineError> {
        if crate::store::classify(&err) != Failure::Disconnected {
            return Err(err.into());
        }
        tracing::warn!(error = %err, members = members.len(), "the answer to a batch's commit was lost; finding out whether it happened");
        let session = Session {
            server: conn.server().to_owned(),
            id: conn.id(),
            server_started: conn.server_started(),
        };
        let budget = Budget {
            deadline: conn.deadline().max(Instant::now() + SETTLE_AT_LEAST),
        };
        drop(conn);
        let outcome =
            until_answered(budget, || self.settle_all_once(members, &session, budget)).await;
        let count = |label| {
            self.metrics
                .inc("lockbroker_lost_commits_total", &[("outcome", label)]);
        };
        match outcome {
            Ok(found) if found == members.len() => {
                count("committed");
                Ok(())
            }
            Ok(0) => {
                count("not_committed");
                Err(EngineError::Unavailable(DbFailure::NotCommitted))
            }
            _ => {
                count("unknown");
                for (lock, expect) in members {
                    self.undo_later(lock, expect.clone(), session.clone());
                }
                Err(EngineError::Unavailable(DbFailure::Unknown))
            }
        }
    }

    /// How many of `members` show their expected outcome.
    async fn settle_all_once(
        &self,
        members: &[(LockRef, Expect)],
        session: &Session,
        budget: Budget,
    ) -> Result<usize, EngineError> {
        let mut conn = self.conn(budget).await?;
        end_session(&mut conn, session).await?;
        conn.begin().await?;
        let mut found = 0;
        for (lock, expect) in members {
            if happened(&mut conn, lock, expect, &self.marks).await? {
                found += 1;
            }
        }
        conn.rollback().await?;
        Ok(found)
    }
}

/// Ends `session` if it may still be alive on `conn`'s server: the same
/// server, not restarted since (session ids start again at a restart),
/// where it may still have a commit in flight. An error other than a
/// broken connection means it is gone already (1094).
async fn end_session(conn: &mut Conn, session: &Session) -> Result<(), EngineError> {
    let restarted = (conn.server_started() - session.server_started).abs() > 2;
    if conn.server() == session.server && !restarted {
        if let Err(err) = conn
            .statement(&format!("KILL CONNECTION {}", session.id))
            .await
        {
            if crate::store::classify(&err) == Failure::Disconnected {
                return Err(err.into());
            }
        }
    }
    Ok(())
}

/// Whether the row (or queue) `expect` is about shows it, read with a
/// locking read in `conn`'s transaction (which waits for any transaction
/// still holding it); for a rwlock's mark, or whether a header read of
/// this broker saw it before another transaction overwrote it (`marks`:
/// asked after the locking read returned).
async fn happened(
    conn: &mut Conn,
    lock: &LockRef,
    expect: &Expect,
    marks: &Marks,
) -> Result<bool, EngineError> {
    Ok(match expect {
        Expect::Lease {
            seat,
            owner,
            token,
            hold_count,
            expires_at,
            ..
        } => seat::read(conn, lock, *seat).await?.is_some_and(|row| {
            row.owner.as_deref() == Some(owner.as_bytes())
                && row.token == *token
                && row.hold_count == *hold_count
                && row.expires_at == Some(*expires_at)
        }),
        Expect::Ended { seat, token } => seat::read(conn, lock, *seat)
            .await?
            .is_some_and(|row| row.token > *token || row.owner.is_none()),
        Expect::Waiter { id } | Expect::WaiterGone { id } => {
            // Queue changes hold the key's header row until they
            // commit: taking it waits for one still in flight.
            seat::header(conn, lock, Locking::Wait).await?;
            let exists = waiters::get(conn, *id).await?.is_some();
            exists == matches!(expect, Expect::Waiter { .. })
        }
        Expect::Marked { mark, .. } => {
            Engine::rw_marked(conn, lock, *mark).await? || marks.seen(*mark)
        }
        Expect::Unchecked => false,
    })
}

/// The session whose commit is in doubt.
#[derive(Debug, Clone)]
struct Session {
    server: String,
    id: u64,
    server_started: i64,
}

/// Asks `ask` again every [`SETTLE_PAUSE`] until the database answers or
/// `budget` runs out (`Err`).
async fn until_answered<T, F, Fut>(budget: Budget, mut ask: F) -> Result<T, ()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EngineError>>,
{
    loop {
        match ask().await {
            Ok(answer) => return Ok(answer),
            Err(err) => {
                tracing::debug!(error = %err, "cannot settle a lost commit yet");
                if budget.left() <= SETTLE_PAUSE {
                    return Err(());
                }
                tokio::time::sleep(SETTLE_PAUSE).await;
            }
        }
    }
}
