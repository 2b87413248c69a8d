//! In-process handoffs: once a key is contended (a lease of it was handed
//! to a waiter), while its lease granted through this broker is held, this
//! broker's waiters for that key wait here, in memory, instead of
//! in the database queue, and a release through this broker hands the lease
//! to the next of them, in the tenant's fairness order, with one write of
//! the key's row and its history events in one short transaction
//! (`Engine::release_here`). A contended handoff then costs one commit, not
//! the two (enqueue, hand on) and the dozen statements of the queue.
//!
//! What keeps it exact:
//! - The database still decides every grant. The handoff's transaction
//!   locks the key's row and writes the next holder only if the row still
//!   holds the releasing owner's live lease, with its last hold.
//! - Arrival order across brokers: a waiter joins here only after a plain
//!   read of the key's row shows the lease granted here still live and no
//!   waiter of another broker queued in the database; it notes the newest
//!   waiter id queued there then (this broker's own, older than it). A
//!   release through this broker hands on to whoever arrived first: a
//!   database waiter with an id up to the first waiter's note, else the
//!   next waiter here. Once a waiter of another broker is queued in the
//!   database, newcomers queue behind it there, and every waiter here
//!   (older than it) goes first.
//! - A waiter taken from the queue for a handoff is always answered: granted
//!   (after the commit) or spilled. A waiter that times out or whose client
//!   leaves takes itself out, unless a handoff took it first; then it waits
//!   for that answer (bounded by the releaser's database budget) and gives
//!   back a grant it no longer wants.
//! - Memory holds only this broker's own open requests: a crash loses no
//!   grant (every grant is answered after its commit) and leaves nothing in
//!   the database to clean up.
//! - Every broker knows: the first waiter here writes this broker's name
//!   into the key's row (`standby`), and while it is there and this
//!   broker alive, every broker refuses tries, queues waiting acquires in
//!   the database and leaves the key's end to this one. A lease released
//!   or force-released through another broker, or expired, is found free
//!   by the waker's tick, which reads every key with waiters (or a mark)
//!   here in one statement (`Engine::check_held_here`), and handed on
//!   from here. A lease another broker handed on anyway (this broker was
//!   taken for dead) makes the waiters here *spill*, taking the database
//!   path (grant or enqueue) from there.
//! - Waiters here count against the tenant's `max_waiters` with those in
//!   the database (`Engine::check_room` adds them; a waiter joining here
//!   adds the database's count read at most [`DB_COUNT_FOR`] before).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};

use super::{
    detach::{Departure, Waited},
    history,
    lease::{handed, Wish},
    plus_ms,
    seat::{self, Lease, LeaseRow, Seat},
    settle::Expect,
    wake::Via,
    Engine, EngineError, Handoff, LockRef, Released,
};
use crate::{
    policy::Waiter,
    store::{
        self,
        history::EventKind,
        locks,
        waiters::{self, Order},
        Kind,
    },
};

/// How long a tenant's count of database waiters is reused by waiters
/// joining here before it is read again.
pub(super) const DB_COUNT_FOR: Duration = Duration::from_millis(250);

/// (tenant, storage key) of a lock.
type KeyId = (String, String);

/// Keys whose lease this broker granted, with the waiters here for each.
#[derive(Default)]
pub(super) struct HeldHere {
    state: Mutex<State>,
    /// Test seam (`Engine::tick_inside_next_release_here`): the next
    /// release here runs the waker's tick between its commit and its
    /// settling.
    tick_inside_release: AtomicBool,
    /// Told whenever a handoff or release here settles (`handing` or
    /// `releasing` ends, or a key is forgotten): a mark that failed while
    /// one was under way is tried again then (`Engine::mark_standby`).
    settled: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    keys: HashMap<KeyId, Held>,
    /// Waiters here, by tenant.
    waiting: HashMap<String, u64>,
    /// Each tenant's count of database waiters, as last read.
    db_counts: HashMap<String, (u64, Instant)>,
    next_id: u64,
    /// Keys forgotten while their row named this broker (see
    /// `HeldHere::take_orphans`).
    orphans: Vec<LockRef>,
}

/// A lease granted through this broker, as it was granted.
struct Held {
    lock: LockRef,
    owner: String,
    token: u64,
    /// Its holds, as counted through this broker: a release of one of
    /// several hands nothing on.
    holds: u32,
    /// When the lease ends by this broker's estimate (renewals through it
    /// push it on): an entry without waiters is forgotten after it.
    until: Instant,
    /// A release is handing the lease on: its outcome is not known yet.
    handing: bool,
    /// A release through this broker is under way (from `waiting_behind`
    /// to `settle_handing`): the tick leaves the key alone, whatever the
    /// row shows meanwhile. (A release that hands to the database queue
    /// takes no waiter here, so `handing` alone would let the tick read the
    /// new holder before the record names it, and spill every waiter.)
    releasing: bool,
    /// Whether the key's row names this broker as holding waiters for it
    /// (`locks.waiting_at`, see `standby`).
    mark: Mark,
    /// The mark is being taken off the row by a statement of its own
    /// (`Engine::close_standby`), which a newcomer's mark might precede
    /// and be erased by: newcomers take the database path meanwhile.
    closing: bool,
    waiters: VecDeque<Waiting>,
}

/// Whether a key's row says that this broker holds waiters for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mark {
    /// It does not: a try here asks the database.
    Unmarked,
    /// The first waiter here is writing the mark.
    Marking,
    /// It does, committed: other brokers leave the key's end to this one.
    Marked,
}

/// A waiter here: an open acquire of this broker.
pub(super) struct Waiting {
    id: u64,
    pub(super) owner: String,
    pub(super) ttl_ms: u64,
    priority: i32,
    /// When it joined, in ms since the Unix epoch (for the policy).
    enqueued_ms: u64,
    /// When its wait runs out, in ms since the Unix epoch (as shown).
    deadline_ms: u64,
    /// Times a later waiter was chosen before it.
    attempts: u32,
    /// The newest waiter id of the database queue when it joined: waiters
    /// queued there with an id up to this one arrived before it, and go
    /// first (0: nobody was queued there).
    after_db: u64,
    /// Its wait ran out while it was taken out to close the key's mark
    /// (`Leaving::Last`): not handed the key, it is told `Expired`, not
    /// sent to the database path.
    expired: bool,
    reply: oneshot::Sender<Turn>,
}

/// A waiter here, as `GET /v1/locks/{key}/waiters` and the wait-for graph
/// show it (also between brokers: `POST /internal/v1/waiting`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryWaiter {
    pub storage_key: String,
    pub owner: String,
    pub priority: i32,
    /// When it joined, in ms since the Unix epoch.
    pub enqueued_ms: u64,
    /// When its wait runs out, in ms since the Unix epoch.
    pub deadline_ms: u64,
    /// The newest database waiter id when it joined: those up to it go
    /// first.
    pub after_db: u64,
    /// The owner of the lease granted here that it waits behind.
    pub holder: String,
}

/// What a waiter here is told.
pub(super) enum Turn {
    /// The lease is its own: committed.
    Granted(Handoff),
    /// Take the database path (grant or enqueue) from here.
    Spill,
    /// Its wait ran out and nothing was handed to it (the last waiter of a
    /// marked key, taken out while the mark came off).
    Expired,
}

/// A waiter that joined here, awaiting its [`Turn`].
pub(super) struct Joined {
    pub(super) id: u64,
    pub(super) turn: oneshot::Receiver<Turn>,
    /// This waiter is the key's first here since its row was unmarked:
    /// it writes the mark (`Mark::Marking`).
    pub(super) marks: bool,
}

/// A lease granted here, as a newcomer finds it.
pub(super) struct Seen {
    pub(super) holder: String,
    pub(super) token: u64,
    /// Waiters here now.
    pub(super) waiting: u32,
    /// The key's row says so (`Mark::Marked`): only then does a try here
    /// go by the waiters here without asking the database.
    pub(super) marked: bool,
}

/// A key with waiters here, as the tick checks it.
pub(super) struct Watched {
    pub(super) lock: LockRef,
    pub(super) owner: String,
    pub(super) token: u64,
    /// Its row names this broker (`Mark::Marked`).
    pub(super) marked: bool,
    /// Nobody waits here any more (a marked key whose mark must come off).
    pub(super) idle: bool,
}

/// How a waiter here left the queue.
pub(super) enum Leaving {
    /// Taken out; nobody else needs to know.
    Left,
    /// A handoff took it first: its answer is on the way.
    Taken,
    /// It was the last waiter of a marked key: taken out as for a handoff
    /// (`handing`), so the caller takes the mark off or, if the key waits
    /// for this broker to hand it on, hands it to this very waiter.
    Last(Waiting),
}

/// What a first waiter does after writing (or failing to write) the
/// key's mark (see [`HeldHere::marked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MarkNext {
    /// Nothing more: marked, taken off meanwhile, or given up (the waiters
    /// here spilled).
    Done,
    /// Write it again, naming the lease recorded now.
    Retry,
    /// Write it again once the handoff or release under way has settled.
    AfterSettle,
}

fn key_of(lock: &LockRef) -> KeyId {
    (lock.tenant.clone(), lock.storage_key.clone())
}

/// Whether `lock`'s waiters may wait here: locks without lock-delay or
/// minimum hold (whose handoff waits for a timer: the database path).
pub(super) fn applies(lock: &LockRef) -> bool {
    lock.kind == Kind::Lock && lock.delays.is_none()
}

impl HeldHere {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("held here")
    }

    /// Records `lease` of `lock`, just granted through this broker, if the
    /// key is `contended` (the lease was handed to a waiter) or already
    /// known here: only keys with waiters are worth the memory (a million
    /// held leases of quiet keys take none).
    pub(super) fn record(&self, lock: &LockRef, lease: &Lease, contended: bool) {
        if !applies(lock) {
            return;
        }
        let until = Instant::now() + Duration::from_millis(lease.ttl_ms);
        let mut state = self.state();
        if !contended && !state.keys.contains_key(&key_of(lock)) {
            return;
        }
        let held = state.keys.entry(key_of(lock)).or_insert_with(|| Held {
            lock: lock.clone(),
            owner: String::new(),
            token: 0,
            holds: 0,
            until,
            handing: false,
            releasing: false,
            mark: Mark::Unmarked,
            closing: false,
            waiters: VecDeque::new(),
        });
        if held.token <= lease.token {
            held.owner.clone_from(&lease.owner);
            held.token = lease.token;
            held.holds = lease.hold_count;
            held.until = until;
        }
    }

    /// A release through this broker of one of several holds of the lease
    /// `owner` holds with `token`: `holds` remain.
    pub(super) fn released_one(&self, lock: &LockRef, owner: &str, token: u64, holds: u32) {
        if let Some(held) = self.state().keys.get_mut(&key_of(lock)) {
            if held.owner == owner && held.token == token {
                held.holds = holds;
            }
        }
    }

    /// The lease of `lock` granted through this broker, if it is another
    /// owner's than `owner` and either still runs by this broker's estimate
    /// or has waiters here (whom its end is handed to): a request of
    /// `owner` then waits here, or is refused if it may not wait.
    pub(super) fn seen(&self, lock: &LockRef, owner: &str) -> Option<Seen> {
        if !applies(lock) {
            return None;
        }
        self.state()
            .keys
            .get(&key_of(lock))
            .filter(|h| h.owner != owner && (h.until > Instant::now() || !h.waiters.is_empty()))
            .map(|h| Seen {
                holder: h.owner.clone(),
                token: h.token,
                waiting: h.waiters.len() as u32,
                marked: h.mark == Mark::Marked,
            })
    }

    /// A renewal through this broker of `lease`: pushes its estimated end
    /// on, if it is the lease recorded.
    pub(super) fn renewed(&self, lock: &LockRef, lease: &Lease) {
        if !applies(lock) {
            return;
        }
        if let Some(held) = self.state().keys.get_mut(&key_of(lock)) {
            if held.owner == lease.owner && held.token == lease.token {
                held.until = Instant::now() + Duration::from_millis(lease.ttl_ms);
            }
        }
    }

    /// Joins the waiters here for `lock`, if its lease was granted through
    /// this broker to another owner and still runs; `None`: take the
    /// database path. `db_waiting` is the tenant's count of database
    /// waiters.
    ///
    /// # Errors
    /// [`EngineError::TooManyWaiters`] past the tenant's `max_waiters`.
    pub(super) fn join(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        db_waiting: u64,
        after_db: u64,
    ) -> Result<Option<Joined>, EngineError> {
        let mut state = self.state();
        let here = state.waiting.get(&lock.tenant).copied().unwrap_or(0);
        let now = Instant::now();
        let State { keys, next_id, .. } = &mut *state;
        let Some(held) = keys.get_mut(&key_of(lock)) else {
            return Ok(None);
        };
        if held.owner == wish.owner || (held.until <= now && held.waiters.is_empty()) {
            return Ok(None);
        }
        if held.closing {
            return Ok(None);
        }
        // A handoff or release under way does not turn a newcomer away:
        // it is handed the key by it (if it takes the waiters here after
        // this), or waits for the lease that commits (the mark, written
        // once that is settled, names it), or is spilled with the key if
        // the release frees it. Turning it away to the database queue
        // kept a key whose holders release at once in the database queue
        // for good (every newcomer met a release under way).
        if here.saturating_add(db_waiting) >= lock.max_waiters {
            return Err(EngineError::TooManyWaiters);
        }
        let marks = held.mark == Mark::Unmarked;
        if marks {
            held.mark = Mark::Marking;
        }
        *next_id += 1;
        let id = *next_id;
        let (reply, turn) = oneshot::channel();
        held.waiters.push_back(Waiting {
            id,
            owner: wish.owner.to_owned(),
            ttl_ms: wish.ttl_ms,
            priority: wish.priority,
            enqueued_ms: unix_ms(),
            deadline_ms: unix_ms().saturating_add(wish.wait_ms),
            attempts: 0,
            after_db,
            expired: false,
            reply,
        });
        *state.waiting.entry(lock.tenant.clone()).or_default() += 1;
        Ok(Some(Joined { id, turn, marks }))
    }

    /// The lease that the mark of `lock`'s row is to name: the one
    /// recorded, while the mark is being written (`Mark::Marking`).
    pub(super) fn to_mark(&self, lock: &LockRef) -> Option<(String, u64)> {
        self.state()
            .keys
            .get(&key_of(lock))
            .filter(|h| h.mark == Mark::Marking)
            .map(|h| (h.owner.clone(), h.token))
    }

    /// The mark of `lock`'s row naming the lease `tried` (owner, token)
    /// was written (`ok`) or could not be: what next. It could not be
    /// when the lease changed (handed on here meanwhile: tried again with
    /// the lease recorded once that has settled) or another live broker's
    /// mark is there, or after `give_up`: then the waiters here take the
    /// database path.
    pub(super) fn marked(
        &self,
        lock: &LockRef,
        tried: (&str, u64),
        ok: bool,
        give_up: bool,
    ) -> MarkNext {
        let key = key_of(lock);
        let mut state = self.state();
        let Some(held) = state.keys.get_mut(&key) else {
            return MarkNext::Done;
        };
        if held.mark != Mark::Marking {
            // Taken off meanwhile with the last waiter here (and written
            // again, if at all, by the next first waiter).
            return MarkNext::Done;
        }
        if ok {
            held.mark = Mark::Marked;
            return MarkNext::Done;
        }
        if !give_up {
            if held.handing || held.releasing {
                return MarkNext::AfterSettle;
            }
            if held.owner != tried.0 || held.token != tried.1 {
                return MarkNext::Retry;
            }
        }
        held.mark = Mark::Unmarked;
        state.forget(&key);
        drop(state);
        self.settled.notify_waiters();
        MarkNext::Done
    }

    /// Waits (up to `deadline`) for the next handoff or release here to
    /// settle; `armed` was made by [`HeldHere::settling`] before the state
    /// that made the caller wait was read, so no settling is missed.
    pub(super) async fn settled(
        armed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        deadline: Instant,
    ) {
        let _ = tokio::time::timeout_at(deadline, armed).await;
    }

    /// A wait for the next settling, registered now.
    pub(super) fn settling(&self) -> tokio::sync::futures::Notified<'_> {
        self.settled.notified()
    }

    /// Whether `lock`'s row names this broker, as far as it knows (its
    /// mark written or being written).
    pub(super) fn is_marked(&self, lock: &LockRef) -> bool {
        self.state()
            .keys
            .get(&key_of(lock))
            .is_some_and(|h| h.mark != Mark::Unmarked)
    }

    /// Takes the mark off `lock` in memory if nobody waits here any more
    /// (the caller takes it off the row in the transaction it commits):
    /// whether it did.
    pub(super) fn unmark_if_idle(&self, lock: &LockRef) -> bool {
        let mut state = self.state();
        match state.keys.get_mut(&key_of(lock)) {
            Some(held) if held.waiters.is_empty() && held.mark != Mark::Unmarked => {
                held.mark = Mark::Unmarked;
                true
            }
            _ => false,
        }
    }

    /// Starts closing `lock`'s mark when nobody waits here any more: the
    /// mark off in memory, and the key `handing` (newcomers take the
    /// database path) until [`HeldHere::closed`]. The lease recorded, if
    /// it did.
    pub(super) fn closing(&self, lock: &LockRef) -> Option<(String, u64)> {
        let mut state = self.state();
        let held = state.keys.get_mut(&key_of(lock))?;
        if !held.waiters.is_empty() || held.mark != Mark::Marked || held.handing {
            return None;
        }
        held.mark = Mark::Unmarked;
        held.handing = true;
        held.closing = true;
        Some((held.owner.clone(), held.token))
    }

    /// The close that [`HeldHere::closing`] started is over.
    pub(super) fn closed(&self, lock: &LockRef) {
        if let Some(held) = self.state().keys.get_mut(&key_of(lock)) {
            held.handing = false;
            held.closing = false;
        }
        self.settled.notify_waiters();
    }

    /// The close that `Leaving::Last` started is over (its waiter told by
    /// the handoff or spill that ended it).
    pub(super) fn close_over(&self, lock: &LockRef) {
        if let Some(held) = self.state().keys.get_mut(&key_of(lock)) {
            held.closing = false;
        }
        self.settled.notify_waiters();
    }

    /// The lease recorded for `lock` (owner, token).
    pub(super) fn recorded(&self, lock: &LockRef) -> Option<(String, u64)> {
        self.state()
            .keys
            .get(&key_of(lock))
            .map(|h| (h.owner.clone(), h.token))
    }

    /// A mark this broker no longer stands behind, to take off the row.
    pub(super) fn orphan(&self, lock: &LockRef) {
        self.state().orphans.push(lock.clone());
    }

    /// Whether nobody waits here for `lock`.
    pub(super) fn idle(&self, lock: &LockRef) -> bool {
        self.state()
            .keys
            .get(&key_of(lock))
            .is_none_or(|h| h.waiters.is_empty())
    }

    /// Marked keys forgotten (their waiters spilled) whose mark is still
    /// on their row: the tick takes it off.
    pub(super) fn take_orphans(&self) -> Vec<LockRef> {
        std::mem::take(&mut self.state().orphans)
    }

    /// Takes waiter `id` out of the queue here (see [`Leaving`]).
    pub(super) fn leave(&self, lock: &LockRef, id: u64) -> Leaving {
        let mut state = self.state();
        let key = key_of(lock);
        let Some(held) = state.keys.get_mut(&key) else {
            return Leaving::Taken;
        };
        let Some(at) = held.waiters.iter().position(|w| w.id == id) else {
            return Leaving::Taken;
        };
        let last = held.waiters.len() == 1 && held.mark == Mark::Marked && !held.handing;
        if last {
            held.mark = Mark::Unmarked;
            held.closing = true;
            return state
                .take(lock, &key, at)
                .map_or(Leaving::Taken, |mut waiter| {
                    waiter.expired = true;
                    Leaving::Last(waiter)
                });
        }
        held.waiters.remove(at);
        state.less_waiting(&lock.tenant, 1);
        Leaving::Left
    }

    /// Whether a release of the lease `owner` holds with `token` (its last
    /// hold, as counted here) goes through `release_here`: it is the lease
    /// recorded here (a contended key's) and no other handoff or release
    /// of it is under way.
    pub(super) fn waiting_behind(&self, lock: &LockRef, owner: &str, token: u64) -> bool {
        if !applies(lock) {
            return false;
        }
        let key = key_of(lock);
        let mut state = self.state();
        let Some(held) = state.keys.get_mut(&key) else {
            return false;
        };
        if held.owner != owner
            || held.token != token
            || held.handing
            || held.releasing
            || held.holds > 1
        {
            return false;
        }
        // A key without waiters here goes through `release_here` too: its
        // transaction takes a mark off, and a lease it hands to the
        // database queue stays recorded (the next holder's release comes
        // here, and newcomers may wait here for it); a key it frees is
        // forgotten then.
        held.releasing = true;
        true
    }

    /// The release that `waiting_behind` let through has settled (see
    /// `releasing`).
    pub(super) fn release_settled(&self, lock: &LockRef) {
        if let Some(held) = self.state().keys.get_mut(&key_of(lock)) {
            held.releasing = false;
        }
        self.settled.notify_waiters();
    }

    /// The newest database waiter id the first waiter here saw when it
    /// joined (see [`Waiting`]); `None` with nobody waiting here.
    pub(super) fn front_after(&self, lock: &LockRef) -> Option<u64> {
        let state = self.state();
        let held = state.keys.get(&key_of(lock))?;
        held.waiters.iter().map(|w| w.after_db).min()
    }

    /// A release through this broker handed the lease `was` (owner, token)
    /// to a waiter of the database queue (older than the waiters here),
    /// now holding it as `next` (owner, token): the waiters here wait for
    /// that lease's end (found by the tick if it ends elsewhere).
    pub(super) fn handed_to_queue(&self, lock: &LockRef, was: (&str, u64), next: (&str, u64)) {
        let mut state = self.state();
        if let Some(held) = state.keys.get_mut(&key_of(lock)) {
            if held.owner == was.0 && held.token == was.1 {
                held.owner = next.0.to_owned();
                held.token = next.1;
                held.holds = 1;
                held.handing = false;
            }
        }
        drop(state);
        self.settled.notify_waiters();
    }

    /// The next waiter for the lease `owner` holds with `token`, in the
    /// tenant's fairness order, taken out of the queue: the caller hands it
    /// the lease or spills it. `None` when nobody waits here, the lease is
    /// not the one recorded, or another handoff of it is under way.
    pub(super) async fn take_next(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
    ) -> Option<Waiting> {
        if !applies(lock) {
            return None;
        }
        let key = key_of(lock);
        let candidates = {
            let mut state = self.state();
            let held = state.keys.get_mut(&key)?;
            if held.owner != owner || held.token != token || held.handing || held.waiters.is_empty()
            {
                return None;
            }
            if lock.pacing.always_oldest() {
                return state.take(lock, &key, 0);
            }
            held.waiters
                .iter()
                .map(|w| Waiter {
                    id: w.id,
                    owner: w.owner.clone(),
                    priority: w.priority,
                    enqueued_at_ms: w.enqueued_ms,
                    attempts: w.attempts,
                })
                .collect::<Vec<_>>()
        };
        let ids: Vec<u64> = candidates.iter().map(|c| c.id).collect();
        let index = lock.pacing.pick_next(&lock.key, candidates).await;
        let chosen = ids.get(index).copied().unwrap_or(ids[0]);
        let mut state = self.state();
        let held = state.keys.get_mut(&key)?;
        if held.owner != owner || held.token != token || held.handing {
            return None;
        }
        let at = held
            .waiters
            .iter()
            .position(|w| w.id == chosen)
            .unwrap_or(0);
        // Older waiters passed over count it (as in the database queue).
        for skipped in held.waiters.iter_mut().take(at) {
            skipped.attempts = skipped.attempts.saturating_add(1);
        }
        state.take(lock, &key, at)
    }

    /// A handoff to `waiter` committed `lease`: it is the key's lease now,
    /// and the waiter is told. Gives the lease back to the caller when the
    /// waiter is gone (it must be released).
    pub(super) fn handed(&self, lock: &LockRef, waiter: Waiting, lease: &Lease) -> Result<(), ()> {
        {
            let mut state = self.state();
            if let Some(held) = state.keys.get_mut(&key_of(lock)) {
                held.owner.clone_from(&lease.owner);
                held.token = lease.token;
                held.holds = 1;
                held.until = Instant::now() + Duration::from_millis(lease.ttl_ms);
                held.handing = false;
            }
        }
        self.settled.notify_waiters();
        let handoff = Handoff {
            token: lease.token,
            seat: lease.seat,
            expires_at: lease.expires_at,
        };
        waiter.reply.send(Turn::Granted(handoff)).map_err(|_| ())
    }

    /// The handoff to `waiter` did not happen (the lease stays where it
    /// was, or went to the database queue): the waiter takes the database
    /// path; with `all`, so do the key's other waiters here and the key is
    /// forgotten.
    pub(super) fn spill(&self, lock: &LockRef, waiter: Waiting, all: bool) {
        let _ = waiter.reply.send(if waiter.expired {
            Turn::Expired
        } else {
            Turn::Spill
        });
        let key = key_of(lock);
        let mut state = self.state();
        if all {
            state.forget(&key);
        } else if let Some(held) = state.keys.get_mut(&key) {
            held.handing = false;
        }
        drop(state);
        self.settled.notify_waiters();
    }

    /// The lease `owner` held with `token` changed without this broker:
    /// the key's waiters here take the database path, unless a handoff
    /// through this broker is under way or already recorded a newer lease.
    pub(super) fn lost(&self, lock: &LockRef, owner: &str, token: u64) {
        let key = key_of(lock);
        let mut state = self.state();
        let Some(held) = state.keys.get(&key) else {
            return;
        };
        if held.handing || held.releasing || held.owner != owner || held.token != token {
            return;
        }
        state.forget(&key);
        drop(state);
        self.settled.notify_waiters();
    }

    /// The tick found the lease `owner` holds with `token` still live,
    /// `remaining` more (renewed, perhaps through another broker).
    pub(super) fn still(&self, lock: &LockRef, owner: &str, token: u64, remaining: Duration) {
        if let Some(held) = self.state().keys.get_mut(&key_of(lock)) {
            if held.owner == owner && held.token == token {
                held.until = Instant::now() + remaining;
            }
        }
    }

    /// The keys with waiters here, or marked, and no handoff under way.
    pub(super) fn watched(&self) -> Vec<Watched> {
        self.state()
            .keys
            .values()
            .filter(|h| {
                (!h.waiters.is_empty() || h.mark == Mark::Marked) && !h.handing && !h.releasing
            })
            .map(|h| Watched {
                lock: h.lock.clone(),
                owner: h.owner.clone(),
                token: h.token,
                marked: h.mark == Mark::Marked,
                idle: h.waiters.is_empty(),
            })
            .collect()
    }

    /// The key's lease went to `next` (owner, token) through the database
    /// queue while its row still names this broker: the waiters here wait
    /// for that lease's end.
    pub(super) fn follow(&self, lock: &LockRef, was: (&str, u64), next: (&str, u64)) {
        self.handed_to_queue(lock, was, next);
    }

    /// Forgets keys without waiters whose lease has ended by this broker's
    /// estimate (released elsewhere, or expired).
    pub(super) fn prune(&self) {
        let now = Instant::now();
        self.state().keys.retain(|_, h| {
            !h.waiters.is_empty()
                || h.handing
                || h.releasing
                || h.mark != Mark::Unmarked
                || h.until > now
        });
    }

    /// Waiters here for `tenant`'s key of `kind` stored as `storage_key`.
    pub(super) fn waiting_for(&self, tenant: &str, kind: Kind, storage_key: &str) -> u64 {
        if kind != Kind::Lock {
            return 0;
        }
        self.state()
            .keys
            .get(&(tenant.to_owned(), storage_key.to_owned()))
            .map_or(0, |h| h.waiters.len() as u64)
    }

    /// The waiters here for `tenant`'s locks whose storage key starts with
    /// `prefix`, each key's in the order they are served here.
    pub(super) fn queues_of(&self, tenant: &str, prefix: &str) -> Vec<MemoryWaiter> {
        let state = self.state();
        let mut found = Vec::new();
        for ((t, key), held) in &state.keys {
            if t != tenant || !key.starts_with(prefix) {
                continue;
            }
            found.extend(held.waiters.iter().map(|w| MemoryWaiter {
                storage_key: key.clone(),
                owner: w.owner.clone(),
                priority: w.priority,
                enqueued_ms: w.enqueued_ms,
                deadline_ms: w.deadline_ms,
                after_db: w.after_db,
                holder: held.owner.clone(),
            }));
        }
        found
    }

    /// Waiters here for keys of `tenant`.
    pub(super) fn waiting_in(&self, tenant: &str) -> u64 {
        self.state().waiting.get(tenant).copied().unwrap_or(0)
    }

    /// Waiters here, all tenants.
    pub(super) fn waiting_total(&self) -> u64 {
        self.state().waiting.values().sum()
    }

    /// The tenant's count of database waiters, if read within
    /// [`DB_COUNT_FOR`].
    pub(super) fn db_count(&self, tenant: &str) -> Option<u64> {
        let state = self.state();
        let (n, at) = state.db_counts.get(tenant)?;
        (at.elapsed() < DB_COUNT_FOR).then_some(*n)
    }

    /// Remembers the tenant's count of database waiters, just read.
    pub(super) fn note_db_count(&self, tenant: &str, n: u64) {
        self.state()
            .db_counts
            .insert(tenant.to_owned(), (n, Instant::now()));
    }
}

impl State {
    fn less_waiting(&mut self, tenant: &str, n: u64) {
        if let Some(count) = self.waiting.get_mut(tenant) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.waiting.remove(tenant);
            }
        }
    }

    /// Takes the waiter at `at` of `key` for a handoff.
    fn take(&mut self, lock: &LockRef, key: &KeyId, at: usize) -> Option<Waiting> {
        let held = self.keys.get_mut(key)?;
        let waiter = held.waiters.remove(at)?;
        held.handing = true;
        self.less_waiting(&lock.tenant, 1);
        Some(waiter)
    }

    /// Forgets `key`, spilling its waiters (oldest first).
    fn forget(&mut self, key: &KeyId) {
        let Some(held) = self.keys.remove(key) else {
            return;
        };
        if held.mark != Mark::Unmarked {
            self.orphans.push(held.lock.clone());
        }
        self.less_waiting(&key.0, held.waiters.len() as u64);
        for waiter in held.waiters {
            let _ = waiter.reply.send(Turn::Spill);
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How an acquire that may wait here ended there.
pub(super) enum InMemory {
    /// The key's lease was not granted through this broker (or the
    /// acquire may not wait): the database path.
    NotHere,
    /// Handed the lease (committed).
    Granted(Lease),
    /// A try (`wait_ms` 0) while waiters wait here: they go first. With
    /// how many wait.
    Refused(u32),
    /// `wait_ms` ran out.
    TimedOut,
    /// The database path, with what is left of `wait_ms`.
    Spilled,
}

/// What a handoff's transaction did.
enum Handing {
    /// Handed to the waiter here.
    Handed(Lease),
    /// Handed through the database queue (to its waiter, now holding it
    /// as owner, token), or freed (`None`).
    ToQueue(Option<(String, u64)>),
    /// A release of one of several holds; this many remain.
    Kept(u32),
    /// The lease is elsewhere (freed or handed on by an earlier attempt,
    /// or held by someone else): the waiters here take the database path.
    Elsewhere,
}

/// What an earlier attempt of a release (found by its mark on `row`) did:
/// handed to the waiter it took, kept holds, or freed or handed through
/// the queue.
fn found_committed(
    row: &LeaseRow,
    owner: &str,
    token: u64,
    taken: &Mutex<Option<Waiting>>,
) -> Handing {
    let taken = taken.lock().expect("taken waiter");
    match taken.as_ref() {
        Some(w) if row.owned_by(&w.owner, token + 1) => {
            let mut lease = lease_for((&w.owner, w.ttl_ms), row, token + 1);
            lease.expires_at = row.expires_at.unwrap_or(lease.expires_at);
            Handing::Handed(lease)
        }
        _ if row.owned_by(owner, token) => Handing::Kept(row.hold_count),
        _ => Handing::Elsewhere,
    }
}

impl Engine {
    /// Waits here for `lock` if its lease was granted through this broker
    /// to another owner (see the module docs), until a handoff, `wait_ms`
    /// from `started`, the caller's departure or the broker's shutdown.
    ///
    /// # Errors
    /// [`EngineError::TooManyWaiters`]; [`EngineError::ShuttingDown`] when
    /// the caller left or the broker stops (a lease handed meanwhile is
    /// given back); [`EngineError::Unavailable`] when the key's row or the
    /// tenant's count of database waiters could not be read.
    pub(super) async fn wait_here(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        started: Instant,
        departure: &mut Departure,
    ) -> Result<InMemory, EngineError> {
        let Some(seen) = self.held_here.seen(lock, wish.owner) else {
            return Ok(InMemory::NotHere);
        };
        if wish.wait_ms == 0 {
            // No barging past the waiters here, once the key's row says
            // they are here (every broker then refuses a try); before
            // that, the database answers.
            return Ok(match seen.waiting {
                n if n > 0 && seen.marked => InMemory::Refused(n),
                _ => InMemory::NotHere,
            });
        }
        // The lease must still be the one granted here (or have waiters
        // here to hand its end to). Waiters of this broker queued in the
        // database now arrived first: the newest id there says which
        // (`Waiting`). Once a waiter of another broker is queued there,
        // newcomers queue behind it there (arrival order across brokers:
        // every waiter here arrived before it, and goes first).
        let queued = match self.read_row(lock).await?.map(LeaseRow::of_lock) {
            Some((queued, row)) if row.owned_by(&seen.holder, seen.token) || seen.waiting > 0 => {
                queued
            }
            _ => {
                if seen.waiting == 0 {
                    self.held_here.lost(lock, &seen.holder, seen.token);
                }
                return Ok(InMemory::NotHere);
            }
        };
        let after_db = match queued {
            0 => 0,
            _ => match self.queued_for(lock).await? {
                (_, foreign) if foreign > 0 => return Ok(InMemory::NotHere),
                (newest, _) => newest,
            },
        };
        let db_waiting = self.db_waiting(lock).await?;
        let Some(mut joined) = self.held_here.join(lock, wish, db_waiting, after_db)? else {
            return Ok(InMemory::NotHere);
        };
        if joined.marks {
            // The first waiter here writes the key's mark: from its commit
            // on, every broker leaves the key's end to this one.
            self.mark_standby(lock).await;
        }
        let timeout = tokio::time::sleep_until(started + Duration::from_millis(wish.wait_ms));
        let turn = match self.wait_turn(&mut joined.turn, timeout, departure).await {
            Waited::Turn(turn) => turn.ok(),
            Waited::TimedOut => match self.held_here.leave(lock, joined.id) {
                Leaving::Left => return Ok(InMemory::TimedOut),
                // A handoff took it first: its answer is on the way.
                Leaving::Taken => (&mut joined.turn).await.ok(),
                Leaving::Last(waiter) => {
                    self.close_standby(lock, Some(waiter)).await;
                    (&mut joined.turn).await.ok()
                }
            },
            Waited::Left => return self.stop_waiting_here(lock, wish, joined).await,
        };
        Ok(match turn {
            Some(Turn::Granted(handoff)) => {
                self.metrics.inc("lockbroker_handoffs_total", &[]);
                self.metrics
                    .inc("lockbroker_wakeups_total", &[("via", Via::Local.label())]);
                self.metrics.observe(
                    "lockbroker_handoff_latency_seconds",
                    &[("tenant", &lock.tenant)],
                    started.elapsed().as_secs_f64(),
                );
                self.count_grant(lock, "handoff");
                InMemory::Granted(handed(wish, handoff))
            }
            Some(Turn::Expired) => InMemory::TimedOut,
            Some(Turn::Spill) | None => InMemory::Spilled,
        })
    }

    /// A waiter here whose caller left or whose broker stops: out of the
    /// queue, or, if a handoff took it first, that lease given back.
    async fn stop_waiting_here(
        &self,
        lock: &LockRef,
        wish: Wish<'_>,
        joined: Joined,
    ) -> Result<InMemory, EngineError> {
        let taken = match self.held_here.leave(lock, joined.id) {
            Leaving::Left => false,
            Leaving::Taken => true,
            Leaving::Last(waiter) => {
                self.close_standby(lock, Some(waiter)).await;
                true
            }
        };
        if taken {
            if let Ok(Turn::Granted(handoff)) = joined.turn.await {
                self.give_back(lock, handoff.seat, wish.owner, handoff.token)
                    .await;
            }
        }
        Err(EngineError::ShuttingDown)
    }

    /// The tenant's count of database waiters (not stale), read at most
    /// [`DB_COUNT_FOR`] ago; 0 for a tenant without a waiter limit.
    async fn db_waiting(&self, lock: &LockRef) -> Result<u64, EngineError> {
        if lock.max_waiters == u64::MAX {
            return Ok(0);
        }
        if let Some(n) = self.held_here.db_count(&lock.tenant) {
            return Ok(n);
        }
        let budget = self.budget();
        let n = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let n = waiters::pending_for_tenant(&mut conn, &lock.tenant, self.stale()).await?;
                conn.done();
                Ok(n)
            })
            .await?;
        self.held_here.note_db_count(&lock.tenant, n);
        Ok(n)
    }

    /// The database queue of `lock` as a newcomer here sees it: the newest
    /// waiter id, and how many waiters of other brokers it holds.
    async fn queued_for(&self, lock: &LockRef) -> Result<(u64, u64), EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let seen = waiters::queued_for(&mut conn, lock.row(), &self.broker).await?;
            conn.done();
            Ok(seen)
        })
        .await
    }

    /// Releases `owner`'s lease of `lock` with `token`, granted through
    /// this broker with waiters here: the last hold hands it on in the same
    /// transaction (`hand_next`), else as any release.
    ///
    /// # Errors
    /// [`EngineError::LeaseLost`]; [`EngineError::Unavailable`].
    pub(super) async fn release_here(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        mark: u64,
    ) -> Result<Released, EngineError> {
        let budget = self.budget();
        // The waiter taken for the handoff, kept over attempts.
        let taken: Mutex<Option<Waiting>> = Mutex::new(None);
        let outcome = self
            .retry(budget, || async {
                let mut tx = self.begin(budget).await?;
                let read = seat::read_with_header(&mut tx, lock, Seat::Whole).await?;
                let Some((queued, row)) = read else {
                    tx.rollback().await?;
                    return Err(EngineError::LeaseLost);
                };
                if row.released_by == Some(mark) {
                    // An earlier attempt of this release committed, though
                    // it answered otherwise.
                    tx.rollback().await?;
                    self.metrics
                        .inc("lockbroker_releases_found_committed_total", &[]);
                    return Ok(found_committed(&row, owner, token, &taken));
                }
                if !row.owned_by(owner, token) {
                    tx.rollback().await?;
                    return Err(EngineError::LeaseLost);
                }
                if row.hold_count > 1 {
                    let holds = self.release_one_hold(tx, lock, &row, owner, mark).await?;
                    return Ok(Handing::Kept(holds));
                }
                history::note(&mut tx, lock, EventKind::Released, owner, token, row.now);
                self.hand_next(tx, lock, &row, queued, Some(mark), &taken, (owner, token))
                    .await
            })
            .await;
        if let Ok(Handing::Kept(holds)) = &outcome {
            // Re-entered through another broker: not counted here.
            self.held_here.released_one(lock, owner, token, *holds);
        }
        if self
            .held_here
            .tick_inside_release
            .swap(false, Ordering::SeqCst)
        {
            let _ = self.check_held_here(1).await;
        }
        let lost = matches!(outcome, Err(EngineError::LeaseLost));
        let waiter = taken.into_inner().expect("taken waiter");
        let holds = self.settle_handing(lock, (owner, token), waiter, outcome, lost)?;
        Ok(Released {
            released: holds.is_none(),
            hold_count: holds.unwrap_or(0),
        })
    }

    /// Test seam: the next release through this broker that hands a key
    /// on from here (`release_here`) runs the waker's tick after its commit
    /// and before it settles what the commit did: the window in which the
    /// tick once took the new holder of a handoff to the database queue for
    /// a lease lost elsewhere and spilled every waiter here (`releasing`).
    #[doc(hidden)]
    pub fn tick_inside_next_release_here(&self) {
        self.held_here
            .tick_inside_release
            .store(true, Ordering::SeqCst);
    }

    /// The lease `owner` held with `token` ended without this broker (it
    /// ran out, or was released through another broker): if nobody holds
    /// the key now, hands it on in one transaction (`hand_next`); if
    /// somebody does, the waiters here take the database path.
    pub(super) async fn hand_on_after_end(
        &self,
        lock: &LockRef,
        owner: &str,
        token: u64,
        kept: Option<Waiting>,
    ) {
        let budget = self.budget();
        let taken: Mutex<Option<Waiting>> = Mutex::new(kept);
        let outcome = self
            .retry(budget, || async {
                let mut tx = self.begin(budget).await?;
                let read = seat::read_with_header(&mut tx, lock, Seat::Whole).await?;
                let Some((queued, row)) = read.filter(|(_, row)| row.live_owner().is_none()) else {
                    tx.rollback().await?;
                    return Ok(Handing::Elsewhere);
                };
                if row.standby_elsewhere(&self.broker) {
                    // Another live broker's mark: its waiters, its key.
                    tx.rollback().await?;
                    return Ok(Handing::Elsewhere);
                }
                self.hand_next(tx, lock, &row, queued, None, &taken, (owner, token))
                    .await
            })
            .await;
        let waiter = taken.into_inner().expect("taken waiter");
        if let Err(err) = self.settle_handing(lock, (owner, token), waiter, outcome, false) {
            tracing::debug!(error = %err, "handing a lease that ended to a waiter in memory failed");
        }
    }

    /// Hands the key whose lease (`was`: owner, token) ends in `row` (the
    /// caller holds it, has noted the release, and commits here) to whoever
    /// arrived first: a waiter of the database queue that was there before
    /// the first waiter here joined goes through the queue as on any
    /// release (`hand_on_marked`); otherwise the next waiter here, by the
    /// tenant's fairness, is written as the holder (token + 1) with its
    /// `handed_off` event (kept in `taken` for the caller to tell).
    #[allow(clippy::too_many_arguments)]
    async fn hand_next(
        &self,
        mut tx: store::pool::Conn,
        lock: &LockRef,
        row: &LeaseRow,
        mut queued: u32,
        mark: Option<u64>,
        taken: &Mutex<Option<Waiting>>,
        was: (&str, u64),
    ) -> Result<Handing, EngineError> {
        let kept_after = taken
            .lock()
            .expect("taken waiter")
            .as_ref()
            .map(|w| w.after_db);
        let front = match (self.held_here.front_after(lock), kept_after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let queue_first = match (queued, front) {
            (0, _) => false,
            (_, None) => true,
            (_, Some(after)) => {
                let oldest =
                    waiters::pending(&mut tx, lock.row(), Order::Oldest, 1, self.stale()).await?;
                oldest.first().is_some_and(|w| w.id <= after)
            }
        };
        // Another live broker's mark: its waiters joined before any here
        // could mark the key (a mark here failed, or is being written and
        // will), and the key is its to hand on; the waiters here take the
        // database path once this frees it.
        let elsewhere = row.standby_elsewhere(&self.broker);
        if !queue_first && !elsewhere {
            let kept = taken.lock().expect("taken waiter").take();
            let next = match kept {
                Some(waiter) => Some(waiter),
                None => self.held_here.take_next(lock, was.0, was.1).await,
            };
            if let Some(waiter) = next {
                history::note_expired(&mut tx, lock, row);
                let lease = lease_for((&waiter.owner, waiter.ttl_ms), row, row.token + 1);
                *taken.lock().expect("taken waiter") = Some(waiter);
                seat::write_marked(&mut tx, lock, &lease, mark).await?;
                // Its last waiter here: the mark comes off with the lease.
                self.unmark_if_idle(&mut tx, lock, row).await?;
                history::note(
                    &mut tx,
                    lock,
                    EventKind::HandedOff,
                    &lease.owner,
                    lease.token,
                    row.now,
                );
                self.commit(tx, lock, Expect::lease(&lease)).await?;
                return Ok(Handing::Handed(lease));
            }
        }
        // The database queue goes first (or nobody waits here any more):
        // this broker hands the key on, its own mark notwithstanding (not
        // another's).
        self.unmark_if_idle(&mut tx, lock, row).await?;
        let unmarked = LeaseRow {
            standby: row.standby.clone().filter(|_| elsewhere),
            ..row.clone()
        };
        let delivery = self
            .hand_on_marked(&mut tx, lock, &unmarked, &mut queued, mark)
            .await?;
        let ended = Expect::Ended {
            seat: Seat::Whole,
            token: row.token,
        };
        self.commit(tx, lock, ended).await?;
        let next = delivery
            .as_ref()
            .map(|d| (d.owner.clone(), d.handoff.token));
        self.deliver(delivery);
        Ok(Handing::ToQueue(next))
    }

    /// Takes this broker's mark off `lock` (in memory, and in `row`'s
    /// transaction `tx`, with its commit) when nobody waits here any more.
    async fn unmark_if_idle(
        &self,
        tx: &mut store::pool::Conn,
        lock: &LockRef,
        row: &LeaseRow,
    ) -> Result<(), EngineError> {
        let unmarked = self.held_here.unmark_if_idle(lock);
        let ours = row.waiting_at.as_deref() == Some(self.broker.as_bytes());
        if unmarked || (ours && self.held_here.idle(lock)) {
            locks::clear_standby(tx, lock.row(), &self.broker).await?;
        }
        Ok(())
    }

    /// Tells the waiter taken for a handoff of the lease `was` (owner,
    /// token) what it did: granted (a lease it can no longer take is given
    /// back), or spilled to the database path (with every waiter here when
    /// the lease is elsewhere or `lost`). The holds left when a release
    /// kept the lease.
    fn settle_handing(
        &self,
        lock: &LockRef,
        was: (&str, u64),
        waiter: Option<Waiting>,
        outcome: Result<Handing, EngineError>,
        lost: bool,
    ) -> Result<Option<u32>, EngineError> {
        self.held_here.release_settled(lock);
        let spill = |waiter: Option<Waiting>, all: bool| match waiter {
            Some(waiter) => self.held_here.spill(lock, waiter, all),
            None if all => self.held_here.lost(lock, was.0, was.1),
            None => {}
        };
        match outcome {
            Ok(Handing::Handed(lease)) => {
                let Some(waiter) = waiter else {
                    return Ok(None);
                };
                if self.held_here.handed(lock, waiter, &lease).is_err() {
                    // Its request ended meanwhile: nobody holds it.
                    let (engine, lock) = (self.clone(), lock.clone());
                    tokio::spawn(async move {
                        engine
                            .give_back(&lock, lease.seat, &lease.owner, lease.token)
                            .await;
                    });
                }
                Ok(None)
            }
            Ok(Handing::ToQueue(next)) => {
                match next {
                    // The waiters here wait for that lease's end.
                    Some((owner, token)) => {
                        self.held_here.handed_to_queue(lock, was, (&owner, token));
                    }
                    // Freed: nobody waits here any more.
                    None => self.held_here.lost(lock, was.0, was.1),
                }
                spill(waiter, false);
                Ok(None)
            }
            Ok(Handing::Kept(holds)) => {
                spill(waiter, false);
                Ok(Some(holds))
            }
            Ok(Handing::Elsewhere) => {
                self.metrics.inc("lockbroker_waiters_spilled_total", &[]);
                spill(waiter, true);
                Ok(None)
            }
            Err(err) => {
                spill(waiter, lost);
                Err(err)
            }
        }
    }

    /// The waker's tick: reads the row of every key with waiters here (one
    /// statement). A lease still live pushes its end on; one that ended
    /// goes to the next waiter here (`hand_on_after_end`); one that another
    /// holds now sends the waiters here to the database path.
    pub(super) async fn check_held_here(&self, tick: u32) -> Result<(), EngineError> {
        if tick.is_multiple_of(PRUNE_EVERY_TICKS) {
            self.held_here.prune();
        }
        self.drop_orphan_marks().await;
        let watched = self.held_here.watched();
        if watched.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn(self.budget()).await?;
        let keys: Vec<_> = watched.iter().map(|w| w.lock.row()).collect();
        let rows = store::batch::read_rows(&mut conn, &keys).await?;
        conn.done();
        for w in &watched {
            let row = rows
                .iter()
                .find(|r| r.is(w.lock.row()))
                .map(|r| LeaseRow::of_lock(r.row.clone()).1);
            let ours = |row: &LeaseRow| row.waiting_at.as_deref() == Some(self.broker.as_bytes());
            match row {
                // The mark was replaced (this broker was taken for dead).
                Some(row) if w.marked && !ours(&row) => {
                    self.metrics.inc("lockbroker_waiters_spilled_total", &[]);
                    self.held_here.lost(&w.lock, &w.owner, w.token);
                }
                Some(row) if row.owned_by(&w.owner, w.token) => {
                    let left = Duration::from_millis(row.remaining_ms());
                    self.held_here.still(&w.lock, &w.owner, w.token, left);
                    if w.idle {
                        self.close_standby(&w.lock, None).await;
                    }
                }
                Some(row) if row.live_owner().is_none() => {
                    self.hand_on_after_end(&w.lock, &w.owner, w.token, None)
                        .await;
                }
                // Handed on through the database queue by this broker
                // (its mark still on the row): the waiters here wait for
                // that lease's end.
                Some(row) if w.marked => {
                    let next = String::from_utf8_lossy(row.live_owner().unwrap_or_default());
                    self.held_here
                        .follow(&w.lock, (&w.owner, w.token), (&next, row.token));
                }
                _ => {
                    self.metrics.inc("lockbroker_waiters_spilled_total", &[]);
                    self.held_here.lost(&w.lock, &w.owner, w.token);
                }
            }
        }
        Ok(())
    }
}

/// Ticks of the waker between two prunings of keys without waiters.
const PRUNE_EVERY_TICKS: u32 = 100;

/// The fresh lease of the waiter `next` (owner, TTL) with `token`, in the
/// lock's row `row`, by the clock read with it.
fn lease_for(next: (&str, u64), row: &LeaseRow, token: u64) -> Lease {
    Lease {
        seat: Seat::Whole,
        owner: next.0.to_owned(),
        token,
        hold_count: 1,
        ttl_ms: next.1,
        expires_at: plus_ms(row.now, next.1),
        fresh: true,
        session: None,
    }
}
