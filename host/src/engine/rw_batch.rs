//! Combining: the read acquires, releases and renewals of one rwlock key
//! that arrive together served by one transaction.
//!
//! Every rwlock operation locks its key's header row (`FOR UPDATE`), so
//! operations of one key run one after another, each a transaction and a
//! log flush of its own: readers of a hot key, which could share, queue on
//! the header instead. So this broker runs at most one combined
//! transaction per key at a time. An operation that finds none running
//! starts one at once with itself alone (a lone operation is never
//! delayed); operations that arrive while one runs are gathered, and the
//! next transaction serves all of them (up to [`MAX_MEMBERS`]), started as
//! soon as the running one ends.
//!
//! That transaction does what each member's own would do, in order of
//! arrival, on one picture of the key (`Held`, read once under the header
//! lock by the database clock): hands a freed key on to its queue
//! (`rw_fill`) first and again after any release, then decides each member
//! by the same rules (`Held::decide`, `Held::held_by`) on the state the
//! members before it left. Each fresh grant takes the next token, so tokens
//! still strictly increase per key; each grant and release notes its
//! history event. Then it writes the readers it touched in one statement,
//! deletes the released ones in one more, writes the header once with one
//! fresh mark, and commits once; each member is answered only after that
//! commit returned (or, when nothing was written, after the rollback).
//!
//! What does not fit leaves the batch and takes its own transaction
//! (`rwlock`'s individual path, unchanged) within what is left of its own
//! budget: writes (always), a read that must queue (`wait_ms` > 0 and not
//! grantable now), every member when the key has no header yet, and every
//! member of a batch that failed before its commit (nothing of it
//! happened). A release that goes alone keeps its request's mark.
//!
//! A lost `COMMIT` answer is settled by the batch's one mark
//! (`Expect::Marked`, with every fresh grant of the batch): committed,
//! every member is answered as served; not committed, every member takes
//! its own transaction (a release with its own mark, as if it had not been
//! combined); unknown, every member is answered `503`, and fresh grants
//! later found committed are given back. A release answered `503` this way
//! is not recognized by a retry of its request (the header carries the
//! batch's mark, not the release's): a retry finds the lease gone
//! (`LeaseLost`) if the batch had committed.
//!
//! Combining is on with group commit (`Settings::group_commit`).

use std::collections::HashSet;

use tokio::time::Instant;

pub(super) use super::gather::Gathered as Combined;
use super::{
    gather::{self, answer_each, budget_of, in_time, Answer, Gather, Gathers, Limits},
    history,
    lease::{mark, Attempt, Wish},
    plus_ms,
    queue::Delivery,
    rwlock::{Held, RwGrant, RwMode},
    seat::{Lease, Seat},
    settle::Expect,
    Budget, Engine, EngineError, LockRef,
};
use crate::store::{self, history::EventKind, pool::Conn, rwlocks, Locking};

/// Members of one combined transaction at most (the readers' write binds
/// 5 parameters each, far below MySQL's limit of 65,535).
pub(super) const MAX_MEMBERS: usize = 64;

/// A key: tenant, storage key (rwlocks only).
type Key = (String, String);

/// The keys whose combined transaction runs now, each with the operations
/// gathered for its next one. A key is present exactly while one runs.
pub(super) type Combiner = Gather<Combining>;

/// The engine as it combines a rwlock key's operations.
#[derive(Clone)]
pub(super) struct Combining(Engine);

impl Gathers for Combining {
    /// A group per key: one combined transaction of a key at a time.
    type Key = Key;
    type Op = RwOp;
    type Reply = Reply;
    const FELL_BACK: &'static str = "a combined rwlock transaction did not happen";

    fn limits(&self) -> Limits {
        Limits::one_at_a_time(MAX_MEMBERS)
    }

    fn gather(&self) -> &Combiner {
        &self.0.combiner
    }

    async fn run(&self, members: Vec<Member>) {
        self.0.run_combined(members).await;
    }
}

/// What a member asks of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RwOp {
    /// A read acquire.
    Read {
        owner: String,
        ttl_ms: u64,
        wait_ms: u64,
    },
    Release {
        owner: String,
        token: u64,
    },
    Renew {
        owner: String,
        token: u64,
        ttl_ms: u64,
    },
}

type Member = gather::Member<Combining>;

/// A member's answer; also what deciding it on the key's state gives.
#[derive(Debug)]
pub(super) enum Reply {
    /// A read granted (fresh) or renewed (its owner already read), with the
    /// live readers right after it.
    Granted(Lease, u32),
    /// Not grantable now, and the member does not wait.
    Busy {
        remaining_ms: u64,
        queued: u32,
    },
    /// Its lease ended.
    Released,
    Renewed(RwGrant),
    /// The lease to release or renew is not live.
    Lost,
    /// Not for a combined transaction: its own.
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

impl Reply {
    /// Whether the member changed the key (something to write and commit).
    fn writes(&self) -> bool {
        matches!(
            self,
            Reply::Granted(..) | Reply::Released | Reply::Renewed(_)
        )
    }
}

/// Decides `op` on `held` as its own transaction would (after `rw_fill`,
/// which the caller runs), and applies it to `held`: the reply it gets.
/// Pure: the caller notes the history events and writes the rows.
fn decide(held: &mut Held, op: &RwOp) -> Reply {
    match op {
        RwOp::Read {
            owner,
            ttl_ms,
            wait_ms,
        } => match held.decide(owner, RwMode::Read, None) {
            super::rwlock::Decision::Renew(token) => {
                let lease = Lease {
                    seat: Seat::Whole,
                    owner: owner.clone(),
                    token,
                    hold_count: 1,
                    ttl_ms: *ttl_ms,
                    expires_at: plus_ms(held.now(), *ttl_ms),
                    fresh: false,
                    session: None,
                };
                held.set(RwMode::Read, &lease);
                Reply::Granted(lease, held.readers_now())
            }
            super::rwlock::Decision::Grant => {
                let lease = held.grant(owner, RwMode::Read, *ttl_ms, None);
                Reply::Granted(lease, held.readers_now())
            }
            // It must queue: its own transaction enqueues it.
            super::rwlock::Decision::Busy if *wait_ms > 0 => Reply::Individual,
            super::rwlock::Decision::Busy => Reply::Busy {
                remaining_ms: held.remaining_ms(),
                queued: held.header.queued,
            },
        },
        // A session's lease takes its own transaction: its event names the
        // session, and it cannot be renewed.
        RwOp::Release { owner, token } | RwOp::Renew { owner, token, .. }
            if held
                .held_by(owner, *token)
                .is_some_and(|mode| held.session_of(owner, mode).is_some()) =>
        {
            Reply::Individual
        }
        RwOp::Release { owner, token } => match held.held_by(owner, *token) {
            Some(mode) => {
                held.end(owner, mode);
                Reply::Released
            }
            None => Reply::Lost,
        },
        RwOp::Renew {
            owner,
            token,
            ttl_ms,
        } => match held.held_by(owner, *token) {
            Some(mode) => {
                let lease = Lease {
                    seat: Seat::Whole,
                    owner: owner.clone(),
                    token: *token,
                    hold_count: 1,
                    ttl_ms: *ttl_ms,
                    expires_at: plus_ms(held.now(), *ttl_ms),
                    fresh: false,
                    session: None,
                };
                held.set(mode, &lease);
                Reply::Renewed(RwGrant::new(lease, mode, held.readers_now()))
            }
            None => Reply::Lost,
        },
    }
}

/// The owner a member is about.
fn owner_of(op: &RwOp) -> &str {
    match op {
        RwOp::Read { owner, .. } | RwOp::Release { owner, .. } | RwOp::Renew { owner, .. } => owner,
    }
}

/// A combined transaction up to its commit: the members' replies (in
/// member order), the handoffs it made, the fresh grants.
struct Prepared {
    tx: Conn,
    replies: Vec<Reply>,
    deliveries: Vec<Delivery>,
    mark: u64,
    grants: Vec<(String, u64)>,
}

impl Engine {
    /// Whether `lock`'s operations are combined (rwlocks, with group
    /// commit on).
    fn combining(&self, lock: &LockRef) -> bool {
        lock.kind == store::Kind::RwLock && self.settings.group_commit
    }

    /// A rwlock acquire served by its key's combined transaction (reads
    /// only), with the live readers after it; or the budget left for its
    /// own transaction (`rw_attempt`).
    pub(super) async fn rw_combined_acquire(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        mode: RwMode,
    ) -> Combined<(Attempt, u32)> {
        // A write is alone by nature; a priority is the fairness policy's
        // business when it queues, which reads served here never do; a
        // read in a session holds the session's row in its own.
        if mode == RwMode::Write || wish.session.is_some() || !self.combining(lock) {
            return Combined::Alone(self.budget());
        }
        let op = RwOp::Read {
            owner: wish.owner.to_owned(),
            ttl_ms: wish.ttl_ms,
            wait_ms: wish.wait_ms,
        };
        let (reply, budget) = self.combine(lock, op).await;
        Combined::Done(match reply {
            Reply::Granted(lease, readers) => {
                self.count_grant(lock, if lease.fresh { "direct" } else { "reentry" });
                Ok((Attempt::Granted(lease), readers))
            }
            Reply::Busy {
                remaining_ms,
                queued,
            } => Ok((
                Attempt::Busy {
                    remaining_ms,
                    queued,
                },
                0,
            )),
            Reply::Failed(err) => Err(err),
            Reply::Individual | Reply::Released | Reply::Renewed(_) | Reply::Lost => {
                return Combined::Alone(budget)
            }
        })
    }

    /// A rwlock release served by its key's combined transaction, or the
    /// budget left for its own (`release_rw_in`, with the request's mark).
    pub(super) async fn rw_combined_release(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
    ) -> Combined<()> {
        if !self.combining(lock) {
            return Combined::Alone(self.budget());
        }
        let op = RwOp::Release {
            owner: owner.to_owned(),
            token,
        };
        let (reply, budget) = self.combine(lock, op).await;
        Combined::Done(match reply {
            Reply::Released => Ok(()),
            Reply::Lost => Err(EngineError::LeaseLost),
            Reply::Failed(err) => Err(err),
            Reply::Individual | Reply::Granted(..) | Reply::Busy { .. } | Reply::Renewed(_) => {
                return Combined::Alone(budget)
            }
        })
    }

    /// A rwlock renewal served by its key's combined transaction, or the
    /// budget left for its own (`renew_rw_in`).
    pub(super) async fn rw_combined_renew(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        ttl_ms: u64,
    ) -> Combined<RwGrant> {
        if !self.combining(lock) {
            return Combined::Alone(self.budget());
        }
        let op = RwOp::Renew {
            owner: owner.to_owned(),
            token,
            ttl_ms,
        };
        let (reply, budget) = self.combine(lock, op).await;
        Combined::Done(match reply {
            Reply::Renewed(grant) => Ok(grant),
            Reply::Lost => Err(EngineError::LeaseLost),
            Reply::Failed(err) => Err(err),
            Reply::Individual | Reply::Granted(..) | Reply::Busy { .. } | Reply::Released => {
                return Combined::Alone(budget)
            }
        })
    }

    /// Offers `op` to its key's combined transactions and waits for its
    /// reply: runs one at once (in this task) with `op` alone if none runs
    /// for the key, else joins the next one. With the reply, the
    /// operation's budget (from its arrival).
    async fn combine(&self, lock: &LockRef, op: RwOp) -> (Reply, Budget) {
        let budget = self.budget();
        let key = (lock.tenant.clone(), lock.storage_key.clone());
        let combining = Combining(self.clone());
        let reply = gather::submit(&combining, key, lock, op, budget.deadline).await;
        (reply, budget)
    }

    /// Runs one combined transaction of `members` (one key) and answers
    /// every member, within the budget of the one that arrived first.
    async fn run_combined(&self, members: Vec<Member>) {
        let members = in_time(members, Instant::now());
        let Some(budget) = budget_of(&members) else {
            return;
        };
        let lock = members[0].lock.clone();
        let prepared = match self.gates.turn(&lock, budget).await {
            Ok(turn) => self
                .prepare_combined(&lock, &members, budget)
                .await
                .map(|prepared| (prepared, turn)),
            Err(err) => Err(err),
        };
        let (prepared, _turn) = match prepared {
            Ok((Some(prepared), turn)) => (prepared, turn),
            // No header yet: every member creates it in its own.
            Ok((None, _)) => return answer_each(members, |_| Reply::Individual),
            Err(err) => return self.fall_back(members, &err, budget),
        };
        let Prepared {
            tx,
            replies,
            deliveries,
            mark,
            grants,
        } = prepared;
        let outcome = if replies.iter().any(Reply::writes) || !deliveries.is_empty() {
            self.commit(tx, &lock, Expect::Marked { mark, grants })
                .await
        } else {
            // Nothing written (every member refused, lost or sent alone):
            // a failed rollback only closes the connection.
            let mut tx = tx;
            let _ = tx.rollback().await;
            Ok(())
        };
        match outcome {
            Ok(()) => {
                self.deliver(deliveries);
                for (member, reply) in members.into_iter().zip(replies) {
                    member.answer(reply);
                }
            }
            Err(err) => self.commit_failed(members, err, budget),
        }
    }

    /// The transaction of `members` up to its commit (see the module
    /// docs); `None` (rolled back) when the key has no header yet.
    async fn prepare_combined(
        &self,
        lock: &LockRef,
        members: &[Member],
        budget: Budget,
    ) -> Result<Option<Prepared>, EngineError> {
        let mut tx = self.begin(budget).await?;
        let Some(mut held) = self.rw_read(&mut tx, lock, Locking::Wait).await? else {
            let _ = tx.rollback().await;
            return Ok(None);
        };
        let mut deliveries = self.rw_fill(&mut tx, lock, &mut held).await?;
        let mut replies = Vec::with_capacity(members.len());
        let mut grants = Vec::new();
        // Owners whose reader row a member may have changed.
        let mut touched: HashSet<String> = HashSet::new();
        let mut freed = false;
        for member in members {
            if freed {
                // Its own transaction would first hand on what the
                // releases before it freed.
                deliveries.extend(self.rw_fill(&mut tx, lock, &mut held).await?);
                freed = false;
            }
            let reply = decide(&mut held, &member.op);
            let owner = owner_of(&member.op);
            let now = held.now();
            match &reply {
                Reply::Granted(lease, _) => {
                    if lease.fresh {
                        history::note(&mut tx, lock, EventKind::Granted, owner, lease.token, now);
                        grants.push((owner.to_owned(), lease.token));
                    }
                    touched.insert(owner.to_owned());
                }
                Reply::Released => {
                    if let RwOp::Release { token, .. } = member.op {
                        history::note(&mut tx, lock, EventKind::Released, owner, token, now);
                    }
                    touched.insert(owner.to_owned());
                    freed = true;
                }
                Reply::Renewed(_) => {
                    touched.insert(owner.to_owned());
                }
                _ => {}
            }
            replies.push(reply);
        }
        if freed {
            deliveries.extend(self.rw_fill(&mut tx, lock, &mut held).await?);
        }
        // Each touched reader's row as the members left it: written, or
        // deleted (a touched writer lives in the header).
        let mut puts = Vec::new();
        let mut deletes = Vec::new();
        for owner in &touched {
            match held.reader(owner) {
                Some(r) => puts.push((owner.as_str(), r.token, r.expires_at)),
                None => deletes.push(owner.as_str()),
            }
        }
        let (tenant, key) = (lock.tenant.as_str(), lock.storage_key.as_str());
        rwlocks::put_readers(&mut tx, tenant, key, &puts).await?;
        rwlocks::delete_readers(&mut tx, tenant, key, &deletes).await?;
        let mark = mark();
        self.rw_write(&mut tx, lock, &held, mark).await?;
        Ok(Some(Prepared {
            tx,
            replies,
            deliveries,
            mark,
            grants,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fixtures::at;

    /// A key's state: a writer's lease ending at 500 ms, if any.
    fn held(writer: Option<(&str, u64)>, readers: &[(&str, u64)], queued: u32) -> Held {
        crate::engine::rwlock::tests::held(writer.map(|(w, t)| (w, t, 500)), readers, queued)
    }

    fn read(owner: &str, wait_ms: u64) -> RwOp {
        RwOp::Read {
            owner: owner.into(),
            ttl_ms: 2000,
            wait_ms,
        }
    }

    fn release(owner: &str, token: u64) -> RwOp {
        RwOp::Release {
            owner: owner.into(),
            token,
        }
    }

    fn granted(reply: &Reply) -> (u64, bool, u32) {
        match reply {
            Reply::Granted(lease, readers) => (lease.token, lease.fresh, *readers),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// Members decided in order on one state: each fresh read takes the
    /// next token, the same owner again renews its lease.
    #[test]
    fn reads_in_order_take_increasing_tokens() {
        let mut h = held(None, &[("r", 3)], 0);
        let replies: Vec<Reply> = [read("a", 0), read("b", 0), read("a", 0), read("r", 0)]
            .iter()
            .map(|op| decide(&mut h, op))
            .collect();
        assert_eq!(granted(&replies[0]), (11, true, 2));
        assert_eq!(granted(&replies[1]), (12, true, 3));
        assert_eq!(granted(&replies[2]), (11, false, 3));
        assert_eq!(granted(&replies[3]), (3, false, 3));
        assert_eq!(h.header.token, 12);
        let Reply::Granted(lease, _) = &replies[2] else {
            unreachable!()
        };
        assert_eq!(lease.expires_at, at(2000));
    }

    /// A writer or a queue refuses a read that does not wait and sends one
    /// that waits to its own transaction (which queues it).
    #[test]
    fn a_writer_or_a_queue_refuses_or_sends_alone() {
        let mut writing = held(Some(("w", 9)), &[], 0);
        assert!(matches!(
            decide(&mut writing, &read("a", 0)),
            Reply::Busy {
                remaining_ms: 500,
                queued: 0
            }
        ));
        assert!(matches!(
            decide(&mut writing, &read("a", 10)),
            Reply::Individual
        ));
        let mut queued = held(None, &[("r", 3)], 1);
        assert!(matches!(
            decide(&mut queued, &read("a", 0)),
            Reply::Busy { queued: 1, .. }
        ));
        // A reader already in keeps its lease even so.
        assert_eq!(granted(&decide(&mut queued, &read("r", 0))), (3, false, 1));
        assert_eq!(queued.header.token, 10, "nothing granted");
    }

    /// A release ends only its live lease; members after it see the state
    /// it left (a write released frees the key for the reads after it).
    #[test]
    fn releases_apply_in_order() {
        let mut h = held(Some(("w", 9)), &[], 0);
        assert!(matches!(decide(&mut h, &read("a", 0)), Reply::Busy { .. }));
        assert!(matches!(decide(&mut h, &release("w", 8)), Reply::Lost));
        assert!(matches!(decide(&mut h, &release("w", 9)), Reply::Released));
        assert!(h.writer().is_none());
        assert_eq!(granted(&decide(&mut h, &read("a", 0))), (11, true, 1));
        assert!(matches!(decide(&mut h, &release("a", 11)), Reply::Released));
        assert!(matches!(decide(&mut h, &release("a", 11)), Reply::Lost));
        assert_eq!(h.readers_now(), 0);
    }

    #[test]
    fn a_renewal_keeps_the_token_in_either_mode() {
        let mut h = held(Some(("w", 9)), &[], 0);
        let renew = RwOp::Renew {
            owner: "w".into(),
            token: 9,
            ttl_ms: 700,
        };
        let Reply::Renewed(g) = decide(&mut h, &renew) else {
            panic!("expected a renewal");
        };
        assert_eq!((g.token, g.mode, g.expires_at), (9, RwMode::Write, at(700)));
        assert_eq!(h.header.writer_expires_at, Some(at(700)));
        let mut r = held(None, &[("r", 3)], 0);
        let renew = RwOp::Renew {
            owner: "r".into(),
            token: 3,
            ttl_ms: 700,
        };
        assert!(matches!(
            decide(&mut r, &renew),
            Reply::Renewed(RwGrant {
                token: 3,
                readers: 1,
                ..
            })
        ));
        let lost = RwOp::Renew {
            owner: "r".into(),
            token: 4,
            ttl_ms: 700,
        };
        assert!(matches!(decide(&mut r, &lost), Reply::Lost));
    }
}
