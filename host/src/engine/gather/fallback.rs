//! What becomes of gathered members that a run cannot serve: late ones
//! answered `503`, and members of a run that did not happen sent to their
//! individual path within what is left of the run's budget (the earliest
//! of theirs), so the whole operation stays within one `db_timeout_ms`.

use std::time::Duration;

use tokio::time::Instant;

use super::{Answer, Gathers, Member};
use crate::{
    engine::{Budget, DbFailure, Engine, EngineError},
    store,
};

/// What is left of a run's budget below which its members are not sent to
/// their individual path after it failed (answered `503` instead).
const ALONE_AT_LEAST: Duration = Duration::from_millis(10);

/// The members still within their budget at `now`, in order; the others
/// (gathered behind a run that took all of their time) are answered `503`.
pub(in crate::engine) fn in_time<G: Gathers>(
    members: Vec<Member<G>>,
    now: Instant,
) -> Vec<Member<G>> {
    let (members, late): (Vec<_>, Vec<_>) = members.into_iter().partition(|m| m.deadline > now);
    answer_each(late, |_| G::Reply::failed(store::pool::timed_out().into()));
    members
}

/// The budget of a run of `members`: the earliest of theirs (`None`
/// without members).
pub(in crate::engine) fn budget_of<G: Gathers>(members: &[Member<G>]) -> Option<Budget> {
    let deadline = members.iter().map(|m| m.deadline).min()?;
    Some(Budget { deadline })
}

/// Answers every member, each with what `reply` makes of it.
pub(in crate::engine) fn answer_each<G: Gathers>(
    members: Vec<Member<G>>,
    reply: impl Fn(&Member<G>) -> G::Reply,
) {
    for member in members {
        let r = reply(&member);
        member.answer(r);
    }
}

impl Engine {
    /// Members of a run that did not happen (it failed before its commit,
    /// or its lost commit was found not to have happened): the individual
    /// path, within what is left of the run's `budget`, while any is left;
    /// else `503`.
    pub(in crate::engine) fn fall_back<G: Gathers>(
        &self,
        members: Vec<Member<G>>,
        err: &EngineError,
        budget: Budget,
    ) {
        if let Some(kind) = err.db_failure_kind() {
            self.metrics
                .inc("lockbroker_db_errors_total", &[("kind", kind)]);
        }
        tracing::debug!(error = %err, members = members.len(), "{}", G::FELL_BACK);
        let alone = budget.left() > ALONE_AT_LEAST;
        answer_each(members, |_| {
            if alone {
                G::Reply::individual()
            } else {
                G::Reply::failed(store::pool::timed_out().into())
            }
        });
    }

    /// Members of a run whose commit failed, as settled (`settle`) into
    /// `err`: found not to have happened, or rolled back by a collision,
    /// they fall back (nothing of the run happened); anything else may
    /// have committed, so they are answered `503` (never a guess).
    pub(in crate::engine) fn commit_failed<G: Gathers>(
        &self,
        members: Vec<Member<G>>,
        err: EngineError,
        budget: Budget,
    ) {
        match err {
            EngineError::Unavailable(DbFailure::NotCommitted) => {
                self.fall_back(members, &err, budget);
            }
            err if err.retry().is_some() => self.fall_back(members, &err, budget),
            _ => answer_each(members, |_| {
                G::Reply::failed(EngineError::Unavailable(DbFailure::Unknown))
            }),
        }
    }
}
