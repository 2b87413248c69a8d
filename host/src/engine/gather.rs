//! Gathering: operations that arrive together served by shared runs (one
//! transaction each), the machinery that group commit (`batch`) and rwlock
//! combining (`rw_batch`) have in common; what a run does is theirs.
//!
//! Members belong to a group (a [`Gathers::Key`]): members of one group
//! may share a run, runs of different groups are independent. `batch` has
//! one group for all its keys (a run reads many rows); `rw_batch` a group
//! per rwlock key (a run holds that key's header row, so two runs of one
//! key would only queue on it).
//!
//! A member either leads a run at once, in its own task, when fewer than
//! [`Limits::min_in_flight`] of its group run (a lone operation is never
//! delayed), or joins the group's pending members. Those go as the next run
//! as soon as a running one ends (up to [`Limits::max_members`], in order
//! of arrival), in a task of their own; or at once, in the task of the
//! member that made them [`Limits::full_enough`], while fewer than
//! [`Limits::max_in_flight`] run. So a group's runs in flight follow its
//! load, within those bounds, and a group holds pending members only while
//! one of its runs is in flight (which will take them).
//!
//! A run ends however it ends, a panic included: its [`Turn`] starts the
//! next one when dropped, so no member waits for a run that never comes.
//! Every member is answered by a `oneshot`; one whose run ended without
//! answering it (a panic, a shutdown) gets `503` (unknown: the run may
//! have committed, so never a guess).
//!
//! What becomes of members a run cannot serve (late, failed before its
//! commit, a commit lost and settled) is in [`fallback`].

mod fallback;

use std::{collections::HashMap, future::Future, hash::Hash, sync::Mutex};

use tokio::{sync::oneshot, time::Instant};

pub(super) use fallback::{answer_each, budget_of, in_time};

use super::{Budget, DbFailure, EngineError, LockRef};

/// The outcome of an operation offered to a run: done there, or to be done
/// alone within what is left of its budget (time gathered and in the run
/// counts, so the whole operation stays within one `db_timeout_ms`).
pub(super) enum Gathered<T> {
    Done(Result<T, EngineError>),
    Alone(Budget),
}

/// How many members a group's runs take, and how many of them run at once.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Members of one run at most (the rest wait for the next one).
    pub max_members: usize,
    /// Runs of a group in flight below which an arrival leads a run of
    /// its own at once instead of joining the pending members.
    pub min_in_flight: usize,
    /// Runs of a group in flight at most, however many members wait (each
    /// holds a pooled connection while it runs).
    pub max_in_flight: usize,
    /// Pending members that start another run at once (while fewer than
    /// `max_in_flight` run), rather than wait for a running one to end.
    pub full_enough: usize,
}

impl Limits {
    /// One run of a group at a time: the members that arrive while it runs
    /// form the next.
    pub const fn one_at_a_time(max_members: usize) -> Limits {
        Limits {
            max_members,
            min_in_flight: 1,
            max_in_flight: 1,
            // Never reached: one run always runs while members are pending.
            full_enough: usize::MAX,
        }
    }
}

/// A reply that the machinery itself may give a member.
pub(super) trait Answer: Send + 'static {
    /// Not for a run: the member's individual path.
    fn individual() -> Self;
    /// The member failed with `err`.
    fn failed(err: EngineError) -> Self;
}

/// What gathers members into runs: their types, the limits of their runs,
/// and a run itself. Cheap to clone (a run in a task of its own holds a
/// clone).
pub(super) trait Gathers: Clone + Send + Sync + 'static {
    /// The group of a member: members of one group share runs.
    type Key: Eq + Hash + Clone + Send + Sync + 'static;
    /// What a member asks.
    type Op: Send + 'static;
    type Reply: Answer;
    /// The message logged when a run's members fall back (`fall_back`).
    const FELL_BACK: &'static str;
    fn limits(&self) -> Limits;
    /// Where the members wait.
    fn gather(&self) -> &Gather<Self>;
    /// Serves `members` (one group's, in order of arrival) and answers
    /// every one of them.
    fn run(&self, members: Vec<Member<Self>>) -> impl Future<Output = ()> + Send;
}

/// One gathered operation.
pub(super) struct Member<G: Gathers> {
    pub lock: LockRef,
    pub op: G::Op,
    /// The end of this operation's database budget, from its arrival: time
    /// spent gathered and in the run counts.
    pub deadline: Instant,
    reply: oneshot::Sender<G::Reply>,
}

impl<G: Gathers> Member<G> {
    /// Answers the member (gone, it no longer cares).
    pub fn answer(self, reply: G::Reply) {
        let _ = self.reply.send(reply);
    }
}

/// The groups with runs in flight, each with the members pending for its
/// next run. A group is present exactly while one of its runs is in flight.
pub(super) struct Gather<G: Gathers> {
    groups: Mutex<HashMap<G::Key, Group<G>>>,
}

impl<G: Gathers> Default for Gather<G> {
    fn default() -> Self {
        Gather {
            groups: Mutex::new(HashMap::new()),
        }
    }
}

struct Group<G: Gathers> {
    pending: Vec<Member<G>>,
    running: usize,
}

impl<G: Gathers> Gather<G> {
    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<G::Key, Group<G>>> {
        self.groups.lock().expect("gather")
    }

    /// One run of `key`'s group fewer in flight; the group is gone with
    /// its last one (and with it any member still pending: answered `503`).
    fn one_fewer(groups: &mut HashMap<G::Key, Group<G>>, key: &G::Key) {
        if let Some(group) = groups.get_mut(key) {
            group.running -= 1;
            if group.running == 0 {
                groups.remove(key);
            }
        }
    }

    /// Members pending in `key`'s group.
    #[cfg(test)]
    fn pending(&self, key: &G::Key) -> usize {
        self.groups().get(key).map_or(0, |g| g.pending.len())
    }
}

/// Gathers `op` into a run of `key`'s group (see the module docs) and
/// waits for its reply.
pub(super) async fn submit<G: Gathers>(
    gathers: &G,
    key: G::Key,
    lock: &LockRef,
    op: G::Op,
    deadline: Instant,
) -> G::Reply {
    let reply = offer(gathers, key, lock, op, deadline, true).await;
    reply.expect("a member that may lead is always gathered")
}

/// As [`submit`], but only to join runs already in flight: `None` (nothing
/// done) when `op` would lead a run of its own (an operation cheaper alone
/// than as a run of one).
pub(super) async fn join<G: Gathers>(
    gathers: &G,
    key: G::Key,
    lock: &LockRef,
    op: G::Op,
    deadline: Instant,
) -> Option<G::Reply> {
    offer(gathers, key, lock, op, deadline, false).await
}

async fn offer<G: Gathers>(
    gathers: &G,
    key: G::Key,
    lock: &LockRef,
    op: G::Op,
    deadline: Instant,
    lead: bool,
) -> Option<G::Reply> {
    let limits = gathers.limits();
    let (reply, answer) = oneshot::channel();
    let member = Member {
        lock: lock.clone(),
        op,
        deadline,
        reply,
    };
    let now = {
        let mut groups = gathers.gather().groups();
        let running = groups.get(&key).map_or(0, |g| g.running);
        if running < limits.min_in_flight {
            if !lead {
                return None;
            }
            let group = groups.entry(key.clone()).or_insert_with(|| Group {
                pending: Vec::new(),
                running: 0,
            });
            group.running += 1;
            let mut members = take(&mut group.pending, limits.max_members - 1);
            members.push(member);
            Some(members)
        } else {
            let group = groups.get_mut(&key).expect("a group with runs in flight");
            group.pending.push(member);
            if group.pending.len() >= limits.full_enough && group.running < limits.max_in_flight {
                group.running += 1;
                Some(take(&mut group.pending, limits.max_members))
            } else {
                None
            }
        }
    };
    if let Some(members) = now {
        let _turn = Turn::new(gathers.clone(), key);
        gathers.run(members).await;
    }
    // A run that ended without answering (a panic) may have committed:
    // never guess.
    let reply = answer
        .await
        .unwrap_or_else(|_| G::Reply::failed(EngineError::Unavailable(DbFailure::Unknown)));
    Some(reply)
}

/// The first `n` pending members (in order of arrival).
fn take<G: Gathers>(pending: &mut Vec<Member<G>>, n: usize) -> Vec<Member<G>> {
    let n = pending.len().min(n);
    pending.drain(..n).collect()
}

/// After a run of `key`'s group: the members pending meanwhile go as its
/// next run, in a task of their own; with none, one run fewer is in flight.
fn next_run<G: Gathers>(gathers: &G, key: G::Key) {
    let gather = gathers.gather();
    let members = {
        let mut groups = gather.groups();
        let Some(group) = groups.get_mut(&key) else {
            return;
        };
        if group.pending.is_empty() {
            Gather::<G>::one_fewer(&mut groups, &key);
            return;
        }
        take(&mut group.pending, gathers.limits().max_members)
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let gathers = gathers.clone();
            runtime.spawn(async move {
                let _turn = Turn::new(gathers.clone(), key);
                gathers.run(members).await;
            });
        }
        // The runtime is gone (shutdown): dropping the members answers
        // them 503; nothing of theirs was done.
        Err(_) => {
            drop(members);
            Gather::<G>::one_fewer(&mut gather.groups(), &key);
        }
    }
}

/// A run in flight: when it ends, however it ends (a panic included), the
/// members pending meanwhile get the next run, so none waits for nobody.
struct Turn<G: Gathers> {
    gathers: G,
    key: Option<G::Key>,
}

impl<G: Gathers> Turn<G> {
    fn new(gathers: G, key: G::Key) -> Turn<G> {
        Turn {
            gathers,
            key: Some(key),
        }
    }
}

impl<G: Gathers> Drop for Turn<G> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            next_run(&self.gathers, key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };

    use tokio::{sync::Semaphore, task::JoinHandle};

    use super::*;
    use crate::{engine::fixtures, store::Kind};

    /// Which run (counted from 1, in order of start) served a member, or
    /// what the machinery answered it.
    type Served = Result<usize, &'static str>;

    impl Answer for Served {
        fn individual() -> Self {
            Err("individual")
        }
        fn failed(_: EngineError) -> Self {
            Err("failed")
        }
    }

    /// Runs that record their members, wait for a permit of `gate` before
    /// they answer, and panic when a member asks `boom`.
    #[derive(Clone)]
    struct Probe(Arc<ProbeState>);

    struct ProbeState {
        limits: Limits,
        gather: Gather<Probe>,
        /// Every run's members, in order of start.
        started: Mutex<Vec<Vec<&'static str>>>,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
        gate: Semaphore,
    }

    impl Gathers for Probe {
        type Key = &'static str;
        type Op = &'static str;
        type Reply = Served;
        const FELL_BACK: &'static str = "a probe's run did not happen";

        fn limits(&self) -> Limits {
            self.0.limits
        }

        fn gather(&self) -> &Gather<Probe> {
            &self.0.gather
        }

        fn run(&self, members: Vec<Member<Probe>>) -> impl Future<Output = ()> + Send {
            let state = self.0.clone();
            async move {
                let ops: Vec<&str> = members.iter().map(|m| m.op).collect();
                let run = {
                    let mut started = state.started.lock().unwrap();
                    started.push(ops.clone());
                    started.len()
                };
                let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                state.most_in_flight.fetch_max(now, Ordering::SeqCst);
                state.gate.acquire().await.unwrap().forget();
                state.in_flight.fetch_sub(1, Ordering::SeqCst);
                assert!(!ops.contains(&"boom"), "a run that panics");
                answer_each(members, |_| Ok(run));
            }
        }
    }

    impl Probe {
        fn new(limits: Limits) -> Probe {
            Probe(Arc::new(ProbeState {
                limits,
                gather: Gather::default(),
                started: Mutex::new(Vec::new()),
                in_flight: AtomicUsize::new(0),
                most_in_flight: AtomicUsize::new(0),
                gate: Semaphore::new(0),
            }))
        }

        /// `op` submitted to `key`'s group, in a task of its own.
        fn submit(&self, key: &'static str, op: &'static str) -> JoinHandle<Served> {
            let probe = self.clone();
            tokio::spawn(async move {
                let lock = fixtures::lock(Kind::Lock, "k", "k");
                submit(&probe, key, &lock, op, far()).await
            })
        }

        fn started(&self) -> Vec<Vec<&'static str>> {
            self.0.started.lock().unwrap().clone()
        }

        /// Until `n` runs have started.
        async fn until_started(&self, n: usize) {
            until(|| self.0.started.lock().unwrap().len() == n).await;
        }

        /// Until `n` members are pending in `key`'s group.
        async fn until_pending(&self, key: &'static str, n: usize) {
            until(|| self.0.gather.pending(&key) == n).await;
        }

        /// Lets every run in flight and to come answer.
        fn open(&self) {
            self.0.gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }

        /// Lets one run answer.
        fn one(&self) {
            self.0.gate.add_permits(1);
        }
    }

    /// A deadline no test reaches.
    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(3600)
    }

    /// Waits, yielding to the other tasks, until `done`.
    async fn until(done: impl Fn() -> bool) {
        while !done() {
            tokio::task::yield_now().await;
        }
    }

    async fn served(handles: Vec<JoinHandle<Served>>) -> Vec<Served> {
        let mut served = Vec::new();
        for h in handles {
            served.push(h.await.expect("a submitter that did not panic"));
        }
        served
    }

    /// Members gathered while a group's run is in flight form its next
    /// run, in order of arrival and at most `max_members` at a time;
    /// another group's run does not wait for it.
    #[tokio::test]
    async fn members_gathered_during_a_run_form_the_next() {
        let probe = Probe::new(Limits::one_at_a_time(3));
        let a = probe.submit("k", "a");
        probe.until_started(1).await;
        let mut later = Vec::new();
        for (i, op) in ["b", "c", "d", "e"].into_iter().enumerate() {
            later.push(probe.submit("k", op));
            probe.until_pending("k", i + 1).await;
        }
        let x = probe.submit("other", "x");
        probe.until_started(2).await;
        assert_eq!(probe.started(), vec![vec!["a"], vec!["x"]]);
        probe.open();
        assert_eq!(served(vec![a, x]).await, vec![Ok(1), Ok(2)]);
        assert_eq!(served(later).await, vec![Ok(3), Ok(3), Ok(3), Ok(4)]);
        assert_eq!(
            probe.started(),
            vec![vec!["a"], vec!["x"], vec!["b", "c", "d"], vec!["e"]]
        );
        assert_eq!(probe.0.most_in_flight.load(Ordering::SeqCst), 2);
        assert!(probe.0.gather.groups().is_empty(), "no run in flight");
    }

    /// Runs follow the load: up to `min_in_flight` start at once, then
    /// `full_enough` members start another while fewer than
    /// `max_in_flight` run; past that, they wait for a run to end.
    #[tokio::test]
    async fn runs_in_flight_follow_the_load_within_the_cap() {
        let probe = Probe::new(Limits {
            max_members: 8,
            min_in_flight: 2,
            max_in_flight: 3,
            full_enough: 2,
        });
        let mut handles = vec![probe.submit("k", "a")];
        probe.until_started(1).await;
        handles.push(probe.submit("k", "b"));
        probe.until_started(2).await;
        handles.push(probe.submit("k", "c"));
        probe.until_pending("k", 1).await;
        handles.push(probe.submit("k", "d"));
        probe.until_started(3).await;
        for (i, op) in ["e", "f", "g"].into_iter().enumerate() {
            handles.push(probe.submit("k", op));
            probe.until_pending("k", i + 1).await;
        }
        assert_eq!(
            probe.started(),
            vec![vec!["a"], vec!["b"], vec!["c", "d"]],
            "three in flight at most, however many wait"
        );
        probe.open();
        assert_eq!(
            served(handles).await,
            vec![Ok(1), Ok(2), Ok(3), Ok(3), Ok(4), Ok(4), Ok(4)]
        );
        assert_eq!(probe.0.most_in_flight.load(Ordering::SeqCst), 3);
        assert!(probe.0.gather.groups().is_empty(), "no run in flight");
    }

    /// `join` never leads: with fewer than `min_in_flight` runs in flight
    /// it does nothing; with enough, it is gathered like any member.
    #[tokio::test]
    async fn join_only_joins_runs_in_flight() {
        let probe = Probe::new(Limits::one_at_a_time(8));
        let lock = fixtures::lock(Kind::Lock, "k", "k");
        assert_eq!(join(&probe, "k", &lock, "alone", far()).await, None);
        assert!(probe.0.gather.groups().is_empty());
        let a = probe.submit("k", "a");
        probe.until_started(1).await;
        let joined = {
            let probe = probe.clone();
            tokio::spawn(async move { join(&probe, "k", &lock, "b", far()).await })
        };
        probe.until_pending("k", 1).await;
        probe.open();
        assert_eq!(served(vec![a]).await, vec![Ok(1)]);
        assert_eq!(joined.await.unwrap(), Some(Ok(2)));
        assert_eq!(probe.started(), vec![vec!["a"], vec!["b"]]);
    }

    /// A run that panics, led by its submitter or started after another,
    /// still starts the next; its members are answered `503`.
    #[tokio::test]
    async fn a_panicking_run_still_starts_the_next() {
        let probe = Probe::new(Limits::one_at_a_time(8));
        // Led: the submitter's task panics.
        let boom = probe.submit("k", "boom");
        probe.until_started(1).await;
        let a = probe.submit("k", "a");
        probe.until_pending("k", 1).await;
        probe.one();
        assert!(boom.await.unwrap_err().is_panic());
        probe.until_started(2).await;
        // Started after another, in a task of its own.
        let boom = probe.submit("k", "boom");
        probe.until_pending("k", 1).await;
        probe.one();
        assert_eq!(served(vec![a]).await, vec![Ok(2)]);
        probe.until_started(3).await;
        let b = probe.submit("k", "b");
        probe.until_pending("k", 1).await;
        probe.open();
        assert_eq!(served(vec![boom, b]).await, vec![Err("failed"), Ok(4)]);
        assert_eq!(
            probe.started(),
            vec![vec!["boom"], vec!["a"], vec!["boom"], vec!["b"]]
        );
        assert!(probe.0.gather.groups().is_empty(), "no run in flight");
    }

    /// Members whose budget ended while gathered are answered `503`; the
    /// run's budget is the earliest of the others'.
    #[test]
    fn late_members_are_answered_and_the_earliest_budget_is_the_runs() {
        let now = Instant::now();
        let second = std::time::Duration::from_secs(1);
        let lock = fixtures::lock(Kind::Lock, "k", "k");
        let mut answers = Vec::new();
        let members: Vec<Member<Probe>> = [now - second, now + 2 * second, now + second, now]
            .into_iter()
            .map(|deadline| {
                let (reply, answer) = oneshot::channel();
                answers.push(answer);
                Member {
                    lock: lock.clone(),
                    op: "m",
                    deadline,
                    reply,
                }
            })
            .collect();
        let members = in_time(members, now);
        let deadlines: Vec<Instant> = members.iter().map(|m| m.deadline).collect();
        assert_eq!(deadlines, vec![now + 2 * second, now + second]);
        assert_eq!(budget_of(&members).unwrap().deadline, now + second);
        assert!(budget_of::<Probe>(&[]).is_none());
        let late: Vec<_> = answers.iter_mut().map(|a| a.try_recv().ok()).collect();
        assert_eq!(
            late,
            vec![Some(Err("failed")), None, None, Some(Err("failed"))]
        );
    }
}
