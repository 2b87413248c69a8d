//! Group commit: uncontended acquires and releases of locks, from many
//! clients at once, decided and written in shared transactions.
//!
//! A lone operation is not delayed: when fewer than [`MIN_IN_FLIGHT`]
//! batches run, an acquire starts a batch of its own at once, in its own
//! task, and a release takes its own one-statement path (cheaper than a
//! transaction of one). Operations that arrive while that many run are
//! gathered, and the first batch to finish takes them as its next one (up
//! to [`MAX_MEMBERS`]).
//!
//! The batches in flight follow the waiting members: once
//! [`FULL_ENOUGH`] have gathered, they start a batch of their own at once
//! rather than wait for a running one to end, up to [`MAX_IN_FLIGHT`] at a
//! time. So under a light load two batches alternate (one gathers while
//! the other commits), and under a heavy one more run side by side, each
//! still sharing a commit among at least `FULL_ENOUGH` members, instead of
//! members queueing behind two commits.
//!
//! A batch is one transaction: every member's row is read with
//! `FOR UPDATE SKIP LOCKED` and `NOW(6)` (one statement, never waiting, so
//! it cannot deadlock), each member is decided by that clock exactly as its
//! own transaction would decide it, every new lease state is written in one
//! statement, their history events in one more, and one `COMMIT` makes them
//! durable. Each member is answered only after that commit returned (a
//! refusal, which writes nothing, right after the read). Keys with a
//! lock-delay or minimum hold (by their effective values: the tenant's
//! config as its policy overrides it) never join a batch. Anything out of the
//! ordinary leaves the batch for the
//! individual path, which behaves as it always has: a row another
//! transaction holds (contention), a key never seen (no row yet), a free
//! lock with queued waiters or a release that must hand on, a wait that
//! must queue, the same key twice in one batch. A member that is refused
//! never fails the others.
//!
//! Every member keeps the database budget it had on arrival: a batch runs
//! within its earliest member's, and a member sent to the individual path
//! takes what is left of its own there (time gathered and batched counts).
//! If the batch fails before its commit, nothing of it happened: members
//! take the individual path while time is left, else get `503`. A commit whose answer is lost is settled like any
//! other (`settle`), by every member's expected row: all found means
//! committed, none means not, anything else is answered `503`.

use std::collections::HashSet;

use tokio::time::Instant;

pub(super) use super::gather::Gathered as Batched;
use super::{
    gather::{self, answer_each, budget_of, in_time, Answer, Gather, Gathers, Limits},
    history,
    lease::{Attempt, Wish},
    lock::decide,
    seat::{Lease, LeaseRow, Seat},
    settle::Expect,
    Budget, Engine, EngineError, LockRef, Released,
};
use crate::store::{
    self,
    batch::{KeyedLockRow, LeaseWrite},
    history::{EventKind, NewEvent},
    Kind,
};

/// Members of one batch at most (bind parameters stay far below MySQL's
/// limit of 65,535: 7 per member).
pub(super) const MAX_MEMBERS: usize = 64;
/// Batches running at once under a light load: one gathers while another
/// commits.
pub(super) const MIN_IN_FLIGHT: usize = 2;
/// Batches running at once at most, however many members wait (each holds
/// a pooled connection while it runs).
pub(super) const MAX_IN_FLIGHT: usize = 6;
/// Members gathered that start another batch at once (while fewer than
/// [`MAX_IN_FLIGHT`] run), rather than wait for a running one to end.
pub(super) const FULL_ENOUGH: usize = 16;

/// The batches' limits: one group for all keys (a batch reads many rows),
/// its batches in flight following the load.
const LIMITS: Limits = Limits {
    max_members: MAX_MEMBERS,
    min_in_flight: MIN_IN_FLIGHT,
    max_in_flight: MAX_IN_FLIGHT,
    full_enough: FULL_ENOUGH,
};

/// Operations waiting for the next batch, and how many batches run.
pub(super) type Batcher = Gather<Batches>;

/// The engine as it gathers lock operations into batches.
#[derive(Clone)]
pub(super) struct Batches(Engine);

impl Gathers for Batches {
    /// All batches are one group.
    type Key = ();
    type Op = Op;
    type Reply = Reply;
    const FELL_BACK: &'static str = "a batch failed before its commit";

    fn limits(&self) -> Limits {
        LIMITS
    }

    fn gather(&self) -> &Batcher {
        &self.0.batcher
    }

    async fn run(&self, members: Vec<Member>) {
        self.0.run_batch(members).await;
    }
}

/// What a member asks of its lock's row.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Acquire {
        owner: String,
        ttl_ms: u64,
        wait_ms: u64,
    },
    Release {
        owner: String,
        token: u64,
        /// The release's mark, written with it (`lease::release_seat`).
        mark: u64,
    },
}

type Member = gather::Member<Batches>;

/// A member's answer.
#[derive(Debug)]
pub(super) enum Reply {
    Granted(Lease),
    Busy {
        remaining_ms: u64,
        queued: u32,
    },
    Released(Released),
    /// Not for a batch: take the individual path.
    Individual,
    Failed(EngineError),
}

impl Answer for Reply {
    fn individual() -> Self {
        Reply::Individual
    }
    fn failed(err: EngineError) -> Self {
        Reply::Failed(err)
    }
}

/// What a member's row decides.
#[derive(Debug)]
enum Plan {
    /// Answered without writing anything.
    Answer(Reply),
    Individual,
    /// Write this lease state and these history events; once committed,
    /// answer `reply`.
    Write {
        state: RowState,
        reply: Reply,
        expect: Expect,
        events: Vec<NewEvent>,
    },
}

/// A lease state to write into a lock row.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowState {
    owner: Option<String>,
    token: u64,
    hold_count: u32,
    expires_at: Option<chrono::NaiveDateTime>,
    /// A release's mark; `None` (a grant) leaves the row's.
    released_by: Option<u64>,
}

impl RowState {
    fn of(lease: &Lease) -> RowState {
        RowState {
            owner: Some(lease.owner.clone()),
            token: lease.token,
            hold_count: lease.hold_count,
            expires_at: Some(lease.expires_at),
            released_by: None,
        }
    }
}

/// Decides one member by its row, as its own transaction would (see
/// `lock::attempt` and `lease::release_seat`).
fn plan(lock: &LockRef, op: &Op, row: Option<KeyedLockRow>) -> Plan {
    let Some(row) = row else {
        // No row yet, or another transaction holds it.
        return Plan::Individual;
    };
    let (queued, row) = LeaseRow::of_lock(row.row);
    if row.session.is_some() {
        // A lease held in a session: its release (or a try against it)
        // takes the general path, which knows sessions.
        return Plan::Individual;
    }
    match op {
        Op::Acquire {
            owner,
            ttl_ms,
            wait_ms,
        } => {
            let wish = Wish {
                owner,
                ttl_ms: *ttl_ms,
                wait_ms: *wait_ms,
                priority: 0,
                session: None,
            };
            if let Some(lease) = decide(&row, queued, lock, wish) {
                let mut events = Vec::new();
                if lease.fresh {
                    events.extend(history::expiry(lock, &row));
                    events.extend(history::granted(lock, &lease));
                }
                return Plan::Write {
                    state: RowState::of(&lease),
                    expect: Expect::lease(&lease),
                    reply: Reply::Granted(lease),
                    events,
                };
            }
            if row.live_owner().is_some() && *wait_ms == 0 {
                Plan::Answer(Reply::Busy {
                    remaining_ms: row.remaining_ms(),
                    queued,
                })
            } else {
                // A free lock with waiters (the queue goes first and may
                // need clearing), or a wait that must queue.
                Plan::Individual
            }
        }
        Op::Release { owner, token, mark } => {
            if !row.owned_by(owner, *token) {
                // Lost, or released by an earlier try of this release (its
                // mark in the row): the individual path tells which.
                return Plan::Individual;
            }
            if row.hold_count > 1 {
                let lease = row.less_one_hold(owner);
                return Plan::Write {
                    state: RowState {
                        released_by: Some(*mark),
                        ..RowState::of(&lease)
                    },
                    expect: Expect::lease(&lease),
                    reply: Reply::Released(Released {
                        released: false,
                        hold_count: lease.hold_count,
                    }),
                    events: Vec::new(),
                };
            }
            if queued > 0 || row.standby.is_some() {
                // The last hold with waiters (queued, or in a broker's
                // memory): handed on individually.
                return Plan::Individual;
            }
            Plan::Write {
                state: RowState {
                    owner: None,
                    token: *token,
                    hold_count: 0,
                    expires_at: None,
                    released_by: Some(*mark),
                },
                expect: Expect::Ended {
                    seat: Seat::Whole,
                    token: *token,
                },
                reply: Reply::Released(Released {
                    released: true,
                    hold_count: 0,
                }),
                events: history::in_session(
                    history::event(
                        lock,
                        EventKind::Released,
                        owner.as_bytes(),
                        *token,
                        Some(row.now),
                    ),
                    row.session.as_deref(),
                )
                .into_iter()
                .collect(),
            }
        }
    }
}

/// A member whose row was written, waiting for the commit.
struct Written {
    member: Member,
    state: RowState,
    reply: Reply,
    expect: Expect,
    events: Vec<NewEvent>,
}

impl Engine {
    /// Whether operations on `lock` may share a batch: locks without
    /// lock-delay or minimum hold (their effective values; the general path
    /// judges those), when group commit is on.
    fn batchable(&self, lock: &LockRef) -> bool {
        lock.kind == Kind::Lock && lock.delays.is_none() && self.settings.group_commit
    }

    /// An acquire of a lock tried in a batch, or the budget left for the
    /// individual path (`attempt`) when it takes that instead.
    pub(super) async fn batch_acquire(&self, lock: &LockRef, wish: Wish<'_>) -> Batched<Attempt> {
        if !self.batchable(lock) {
            return Batched::Alone(self.budget());
        }
        let op = Op::Acquire {
            owner: wish.owner.to_owned(),
            ttl_ms: wish.ttl_ms,
            wait_ms: wish.wait_ms,
        };
        let Some((reply, budget)) = self.submit(lock, op, true).await else {
            return Batched::Alone(self.budget());
        };
        Batched::Done(match reply {
            Reply::Granted(lease) => Ok(Attempt::Granted(lease)),
            Reply::Busy {
                remaining_ms,
                queued,
            } => Ok(Attempt::Busy {
                remaining_ms,
                queued,
            }),
            Reply::Failed(err) => Err(err),
            Reply::Released(_) | Reply::Individual => return Batched::Alone(budget),
        })
    }

    /// A release of a lock tried in a batch, or the budget left for the
    /// individual path (`release_seat_by`) when it takes that instead.
    pub(super) async fn batch_release(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
    ) -> Batched<Released> {
        if !self.batchable(lock) {
            return Batched::Alone(self.budget());
        }
        let op = Op::Release {
            owner: owner.to_owned(),
            token,
            mark,
        };
        let Some((reply, budget)) = self.submit(lock, op, false).await else {
            return Batched::Alone(self.budget());
        };
        Batched::Done(match reply {
            Reply::Released(released) => Ok(released),
            Reply::Failed(err) => Err(err),
            Reply::Granted(_) | Reply::Busy { .. } | Reply::Individual => {
                return Batched::Alone(budget)
            }
        })
    }

    /// Puts `op` in a batch and waits for its answer: runs a batch at once
    /// (in this task) if fewer than [`MIN_IN_FLIGHT`] run, otherwise joins
    /// the next one (and runs it at once, in this task, if it is
    /// [`FULL_ENOUGH`] and fewer than [`MAX_IN_FLIGHT`] run). With the
    /// answer comes what is left of the operation's budget. `None` (nothing
    /// done) when it would run a batch of its own but may not `lead` one: a
    /// release alone is cheaper as its own one-statement autocommit
    /// (`release_alone`) than as a transaction.
    async fn submit(&self, lock: &LockRef, op: Op, lead: bool) -> Option<(Reply, Budget)> {
        let budget = self.budget();
        let batches = Batches(self.clone());
        let reply = if lead {
            gather::submit(&batches, (), lock, op, budget.deadline).await
        } else {
            gather::join(&batches, (), lock, op, budget.deadline).await?
        };
        Some((reply, budget))
    }

    /// Runs one batch and answers every member, within the budget of the
    /// member that arrived first.
    async fn run_batch(&self, members: Vec<Member>) {
        let started = Instant::now();
        // One member per row: later ones for the same key go alone.
        let mut seen = HashSet::new();
        let (inside, again): (Vec<Member>, Vec<Member>) =
            in_time(members, started).into_iter().partition(|member| {
                seen.insert((
                    member.lock.tenant.clone(),
                    member.lock.kind,
                    member.lock.storage_key.clone(),
                ))
            });
        answer_each(again, |_| Reply::Individual);
        let Some(budget) = budget_of(&inside) else {
            return;
        };
        self.metrics.inc("lockbroker_batches_total", &[]);
        self.metrics.add_counter(
            "lockbroker_batched_operations_total",
            &[],
            inside.len() as u64,
        );
        match self.read_and_write(inside, budget).await {
            Ok(Some((tx, written))) => written_and_committed(self, tx, written, budget).await,
            Ok(None) => {}
            Err((err, members)) => self.fall_back(members, &err, budget),
        }
        self.metrics.observe(
            "lockbroker_db_call_duration_seconds",
            &[],
            started.elapsed().as_secs_f64(),
        );
    }

    /// The batch's transaction up to its commit: reads every row, answers
    /// the members it refuses or sends alone, writes the others' states.
    /// `Ok(None)` when nothing was left to write (rolled back).
    async fn read_and_write(
        &self,
        members: Vec<Member>,
        budget: Budget,
    ) -> Result<Option<(store::pool::Conn, Vec<Written>)>, (EngineError, Vec<Member>)> {
        let mut tx = match self.begin(budget).await {
            Ok(tx) => tx,
            Err(err) => return Err((err, members)),
        };
        let keys: Vec<_> = members.iter().map(|m| m.lock.row()).collect();
        let rows = match store::batch::lock_rows(&mut tx, &keys).await {
            Ok(rows) => rows,
            Err(err) => return Err((err.into(), members)),
        };
        drop(keys);
        let mut rows: Vec<Option<KeyedLockRow>> = rows.into_iter().map(Some).collect();
        let mut written = Vec::new();
        for member in members {
            let row = rows
                .iter_mut()
                .find(|r| r.as_ref().is_some_and(|r| r.is(member.lock.row())))
                .and_then(Option::take);
            match plan(&member.lock, &member.op, row) {
                Plan::Answer(reply) => member.answer(reply),
                Plan::Individual => member.answer(Reply::Individual),
                Plan::Write {
                    state,
                    reply,
                    expect,
                    events,
                } => written.push(Written {
                    member,
                    state,
                    reply,
                    expect,
                    events,
                }),
            }
        }
        if written.is_empty() {
            // Nothing written: a failed rollback only closes the connection.
            let _ = tx.rollback().await;
            return Ok(None);
        }
        let writes: Vec<LeaseWrite<'_>> = written
            .iter()
            .map(|w| LeaseWrite {
                key: w.member.lock.row(),
                owner: w.state.owner.as_deref(),
                token: w.state.token,
                hold_count: w.state.hold_count,
                expires_at: w.state.expires_at,
                released_by: w.state.released_by,
            })
            .collect();
        let mut wrote = store::batch::write_rows(&mut tx, &writes).await;
        drop(writes);
        if wrote.is_ok() {
            // Every member's events, in one statement of the same
            // transaction.
            let events: Vec<NewEvent> = written.iter().flat_map(|w| w.events.clone()).collect();
            wrote = store::history::append(&mut tx, &events).await;
        }
        if let Err(err) = wrote {
            let members = written.into_iter().map(|w| w.member).collect();
            return Err((err.into(), members));
        }
        Ok(Some((tx, written)))
    }
}

/// Commits the batch's transaction and answers its written members: their
/// outcome once committed (also when a lost answer is found to have
/// committed), the individual path when it is found not to have, `503`
/// when that cannot be found out.
async fn written_and_committed(
    engine: &Engine,
    mut tx: store::pool::Conn,
    written: Vec<Written>,
    budget: Budget,
) {
    let outcome = match tx.commit().await {
        Ok(()) => Ok(()),
        Err(err) => {
            tracing::debug!(error = %err, members = written.len(), "batch commit failed");
            let expects: Vec<(LockRef, Expect)> = written
                .iter()
                .map(|w| (w.member.lock.clone(), w.expect.clone()))
                .collect();
            engine.find_out_all(tx, err, &expects).await
        }
    };
    match outcome {
        Ok(()) => {
            for w in written {
                if let Reply::Granted(lease) = &w.reply {
                    engine.count_grant(
                        &w.member.lock,
                        if lease.fresh { "direct" } else { "reentry" },
                    );
                }
                w.member.answer(w.reply);
            }
        }
        Err(err) => {
            let members = written.into_iter().map(|w| w.member).collect();
            engine.commit_failed(members, err, budget);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        engine::fixtures::{self, at},
        store::locks::LockRow,
    };

    /// The plan for `op` on the lock `k` whose row is `row`.
    fn planned(op: &Op, row: Option<KeyedLockRow>) -> Plan {
        plan(&lock(), op, row)
    }

    fn lock() -> LockRef {
        fixtures::lock(Kind::Lock, "k", "k")
    }

    fn row(
        owner: Option<&str>,
        token: u64,
        holds: u32,
        expires_ms: Option<i64>,
        queued: u32,
    ) -> Option<KeyedLockRow> {
        let row = LockRow {
            owner: owner.map(|o| o.as_bytes().to_vec()),
            token,
            hold_count: holds,
            expires_at: expires_ms.map(at),
            queued,
            released_by: None,
            not_before: None,
            waiting_at: None,
            standby: None,
            session: None,
            now: at(0),
        };
        Some(KeyedLockRow {
            tenant: b"t".to_vec(),
            kind: 0,
            lock_key: b"k".to_vec(),
            row,
        })
    }

    fn acquire(owner: &str, wait_ms: u64) -> Op {
        Op::Acquire {
            owner: owner.into(),
            ttl_ms: 1000,
            wait_ms,
        }
    }

    fn release(owner: &str, token: u64) -> Op {
        Op::Release {
            owner: owner.into(),
            token,
            mark: 77,
        }
    }

    #[test]
    fn a_free_row_is_granted_with_the_next_token() {
        let Plan::Write { state, reply, .. } = planned(&acquire("a", 0), row(None, 7, 0, None, 0))
        else {
            panic!("expected a write");
        };
        assert_eq!(state.token, 8);
        assert_eq!(state.owner.as_deref(), Some("a"));
        assert_eq!(state.expires_at, Some(at(1000)));
        assert!(matches!(
            reply,
            Reply::Granted(Lease {
                token: 8,
                fresh: true,
                ..
            })
        ));
        // Expired counts as free.
        let p = planned(&acquire("a", 0), row(Some("b"), 7, 1, Some(0), 0));
        assert!(matches!(
            p,
            Plan::Write {
                state: RowState { token: 8, .. },
                ..
            }
        ));
    }

    #[test]
    fn history_events_are_planned_with_their_writes() {
        let kinds = |p: Plan| match p {
            Plan::Write { events, .. } => events
                .iter()
                .map(|e| (e.event, e.owner.clone(), e.token, e.at))
                .collect::<Vec<_>>(),
            other => panic!("expected a write, got {other:?}"),
        };
        // A grant over an expired lease: its expiry (at its end), then the grant.
        let p = planned(&acquire("a", 0), row(Some("b"), 7, 1, Some(-5), 0));
        assert_eq!(
            kinds(p),
            vec![
                (EventKind::Expired, "b".into(), 7, Some(at(-5))),
                (EventKind::Granted, "a".into(), 8, Some(at(0))),
            ]
        );
        // A last release; a re-entry and a release of one of two holds: none.
        let p = planned(&release("a", 7), row(Some("a"), 7, 1, Some(500), 0));
        assert_eq!(
            kinds(p),
            vec![(EventKind::Released, "a".into(), 7, Some(at(0)))]
        );
        let p = planned(&acquire("a", 0), row(Some("a"), 7, 1, Some(500), 0));
        assert_eq!(kinds(p), vec![]);
        let p = planned(&release("a", 7), row(Some("a"), 7, 2, Some(500), 0));
        assert_eq!(kinds(p), vec![]);
    }

    #[test]
    fn a_held_row_is_busy_without_waiting_and_individual_with() {
        let held = || row(Some("b"), 7, 1, Some(500), 2);
        assert!(matches!(
            planned(&acquire("a", 0), held()),
            Plan::Answer(Reply::Busy {
                remaining_ms: 500,
                queued: 2
            })
        ));
        assert!(matches!(
            planned(&acquire("a", 10), held()),
            Plan::Individual
        ));
    }

    #[test]
    fn rows_missing_or_busy_or_with_waiters_go_alone() {
        assert!(matches!(planned(&acquire("a", 0), None), Plan::Individual));
        assert!(matches!(planned(&release("a", 1), None), Plan::Individual));
        assert!(matches!(
            planned(&acquire("a", 0), row(None, 7, 0, None, 1)),
            Plan::Individual
        ));
        assert!(matches!(
            planned(&release("a", 7), row(Some("a"), 7, 1, Some(500), 1)),
            Plan::Individual
        ));
    }

    #[test]
    fn re_entry_keeps_the_token_and_counts_holds() {
        let p = planned(&acquire("a", 0), row(Some("a"), 7, 1, Some(500), 0));
        assert!(matches!(
            p,
            Plan::Write {
                state: RowState {
                    token: 7,
                    hold_count: 2,
                    ..
                },
                reply: Reply::Granted(Lease { fresh: false, .. }),
                ..
            }
        ));
        let p = planned(&release("a", 7), row(Some("a"), 7, 2, Some(500), 3));
        assert!(matches!(
            p,
            Plan::Write {
                state: RowState {
                    hold_count: 1,
                    expires_at: Some(_),
                    ..
                },
                reply: Reply::Released(Released {
                    released: false,
                    hold_count: 1
                }),
                ..
            }
        ));
    }

    #[test]
    fn a_release_frees_only_its_live_lease_and_marks_it() {
        let p = planned(&release("a", 7), row(Some("a"), 7, 1, Some(500), 0));
        assert!(matches!(
            p,
            Plan::Write {
                state: RowState {
                    owner: None,
                    token: 7,
                    hold_count: 0,
                    expires_at: None,
                    released_by: Some(77),
                },
                ..
            }
        ));
        for r in [
            row(Some("a"), 8, 1, Some(500), 0),
            row(Some("b"), 7, 1, Some(500), 0),
            row(Some("a"), 7, 1, Some(0), 0),
            row(None, 7, 0, None, 0),
        ] {
            assert!(matches!(planned(&release("a", 7), r), Plan::Individual));
        }
    }
}
