//! The mark a broker leaves on a key's row while its memory holds waiters
//! for the key (`locks.waiting_at`; the waiters themselves: `held_here`).
//!
//! Waiters in one broker's memory are invisible to the others, so without
//! the mark a release through another broker would free the key and the
//! next try there would take it past them (FIFO broken), while a try
//! through the waiters' broker would still be refused for them (a free
//! key answered `409`). With it, every broker reads the key as having
//! waiters while the marking broker is alive (its heartbeat, by the
//! database clock, in the same statement as the row): tries are refused,
//! waiting acquires queue in the database, and a release elsewhere frees
//! the row but hands nothing on; the marking broker's tick finds the row
//! free and hands the key to its next waiter (or to an older waiter of the
//! database queue) in one transaction. So each key behaves as one lock
//! whichever broker a request reaches.
//!
//! The first waiter here writes the mark (one autocommit `UPDATE`, only if
//! the row still holds the lease granted here); until it commits, a try
//! here asks the database. The transaction that hands the lease to the
//! last waiter here takes the mark off; a last waiter whose wait runs out
//! (or whose caller leaves) takes it off before it answers, and is handed
//! the key instead if the key was waiting for it. A broker that dies
//! leaves its marks behind: they stop counting with its heartbeat.

use super::{
    held_here::{HeldHere, MarkNext, Waiting},
    Engine, LockRef,
};
use crate::store::locks;

/// Attempts at writing a key's mark before its waiters here give up on
/// memory (each after the lease named moved on through this broker).
const MARK_TRIES: u32 = 8;

impl Engine {
    /// Writes this broker's mark on `lock`'s row for the waiters here,
    /// naming the lease recorded here (the row must still hold it, and no
    /// other live broker's mark). A lease handed on here meanwhile is
    /// waited for and named instead; a lease that changed elsewhere (or an
    /// error, or [`MARK_TRIES`] attempts) sends the waiters here to the
    /// database path (`HeldHere::marked`).
    pub(super) async fn mark_standby(&self, lock: &LockRef) {
        let budget = self.budget();
        for attempt in 1..=MARK_TRIES {
            // Armed before the state is read: a settling in between wakes it.
            let settling = self.held_here.settling();
            tokio::pin!(settling);
            settling.as_mut().enable();
            let Some((holder, token)) = self.held_here.to_mark(lock) else {
                return;
            };
            let written = self
                .retry(budget, || async {
                    let mut conn = self.conn(budget).await?;
                    let ok =
                        locks::set_standby(&mut conn, lock.row(), &self.broker, &holder, token)
                            .await?;
                    conn.done();
                    Ok(ok)
                })
                .await;
            let give_up = written.is_err() || attempt == MARK_TRIES;
            let ok = written.unwrap_or(false);
            match self.held_here.marked(lock, (&holder, token), ok, give_up) {
                MarkNext::Done => return,
                MarkNext::Retry => {}
                MarkNext::AfterSettle => HeldHere::settled(settling, budget.deadline).await,
            }
        }
    }

    /// Takes this broker's mark off `lock` now that nobody waits here for
    /// it. `kept` is the last waiter, taken out because its wait ran out
    /// (`Leaving::Last`): if the key is free and waiting for this broker,
    /// it goes to that waiter (or to an older one of the database queue)
    /// as any handoff would; else the mark comes off while the lease is
    /// held, and the waiter is told its wait ran out. `None`: the tick
    /// found a marked key without waiters.
    pub(super) async fn close_standby(&self, lock: &LockRef, kept: Option<Waiting>) {
        let was = match &kept {
            Some(_) => self.held_here.recorded(lock),
            None => self.held_here.closing(lock),
        };
        let Some((owner, token)) = was else {
            if let Some(waiter) = kept {
                self.held_here.spill(lock, waiter, false);
                self.held_here.close_over(lock);
            }
            return;
        };
        let last = kept.is_some();
        let budget = self.budget();
        let cleared = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let done =
                    locks::clear_standby_if_held(&mut conn, lock.row(), &self.broker).await?;
                conn.done();
                Ok(done)
            })
            .await;
        match (cleared, kept) {
            (Ok(true), Some(waiter)) => self.held_here.spill(lock, waiter, false),
            (Ok(true), None) => self.held_here.closed(lock),
            // Free: waiting for this broker to hand it on (or not marked
            // by it any more): handed on as after any lease's end.
            (Ok(false), kept) => {
                self.hand_on_after_end(lock, &owner, token, kept).await;
                self.held_here.closed(lock);
            }
            (Err(err), kept) => {
                tracing::debug!(error = %err, "taking a key's mark off failed; the tick tries again");
                self.held_here.orphan(lock);
                match kept {
                    Some(waiter) => self.held_here.spill(lock, waiter, false),
                    None => self.held_here.closed(lock),
                }
            }
        }
        if last {
            self.held_here.close_over(lock);
        }
    }

    /// Takes off the marks of keys forgotten while marked (their waiters
    /// spilled): a free key among them with waiters queued is then handed
    /// on by the reaper.
    pub(super) async fn drop_orphan_marks(&self) {
        for lock in self.held_here.take_orphans() {
            if self.held_here.is_marked(&lock) {
                continue;
            }
            let budget = self.budget();
            let dropped = self
                .retry(budget, || async {
                    let mut conn = self.conn(budget).await?;
                    locks::drop_standby(&mut conn, lock.row(), &self.broker).await?;
                    conn.done();
                    Ok(())
                })
                .await;
            if dropped.is_err() {
                self.held_here.orphan(&lock);
            }
        }
    }
}
