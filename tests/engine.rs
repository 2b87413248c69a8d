//! The engine driven directly (no HTTP, no tenants, no policy host) on a
//! fresh database of the real MariaDB: for locks and for semaphore slots,
//! grant / busy / queued, a release handing on to the next waiter, expiry
//! reaped by the database clock, fencing tokens strictly increasing, owner
//! checks; and the fairness handle consulted for the next waiter.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use lockbroker::{
    engine::{
        broker_name, pacing::Pending, Ask, Engine, EngineError, LockRef, Pacing, Scope, Settings,
    },
    metrics::Metrics,
    policy::{Contention, Decision, Waiter},
    store::{db::Db, pool::Setup, Kind},
};
use lockbroker_tests::{drop_db, eventually, fresh_db_name, server_url};
use tokio::{sync::watch, task::JoinHandle};

/// The hint every refusal carries in these tests.
const HINT_MS: u64 = 77;
/// Long enough for anything these tests wait for on a busy machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// Oldest first (or newest first), with a fixed backoff hint; counts the
/// times it was asked to pick. `fifo`: says it always picks the oldest, as
/// the built-in policy does (locks then take the stored procedures' path).
struct TestPacing {
    newest_first: bool,
    fifo: bool,
    picks: AtomicUsize,
}

impl Pacing for TestPacing {
    fn always_oldest(&self) -> bool {
        self.fifo
    }

    fn pick_next<'a>(&'a self, _key: &'a str, waiters: Vec<Waiter>) -> Pending<'a, usize> {
        self.picks.fetch_add(1, Ordering::SeqCst);
        let index = if self.newest_first {
            waiters.len() - 1
        } else {
            0
        };
        Box::pin(async move { index })
    }

    fn next_delay(&self, _contention: Contention) -> Pending<'_, Decision> {
        Box::pin(async { Decision::RetryAfter(HINT_MS) })
    }
}

/// An engine on a fresh database, with its heartbeat, waker and reaper.
struct Harness {
    engine: Engine,
    metrics: Arc<Metrics>,
    scope: Scope,
    pacing: Arc<TestPacing>,
    db: String,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Harness {
    async fn start() -> Harness {
        Harness::start_with(false, false).await
    }

    async fn start_with(newest_first: bool, fifo: bool) -> Harness {
        let db = fresh_db_name();
        let url = format!("{}/{db}", server_url());
        let setup = Setup {
            lock_wait_timeout_s: 1,
            idle_transaction_timeout_s: 3,
        };
        let store = Db::new(&[url], 8, setup).expect("database url");
        store
            .prepare(PATIENCE)
            .await
            .expect("database created and migrated");
        let (stop, stopped) = watch::channel(false);
        let settings = Settings {
            db_timeout: Duration::from_secs(2),
            group_commit: true,
        };
        let metrics = Arc::new(Metrics::default());
        let engine = Engine::new(
            store,
            metrics.clone(),
            stopped.clone(),
            settings,
            broker_name(),
        );
        engine.heartbeat().await.expect("heartbeat");
        let pacing = Arc::new(TestPacing {
            newest_first,
            fifo,
            picks: AtomicUsize::new(0),
        });
        let scope = Scope {
            tenant: "t".into(),
            max_waiters: 100,
            pacing: pacing.clone(),
            delays: Default::default(),
        };
        engine.set_scopes([scope.clone()]);
        let tasks = vec![
            tokio::spawn(engine.clone().run_heartbeat(stopped.clone())),
            tokio::spawn(engine.clone().run_waker(stopped.clone())),
            tokio::spawn(engine.clone().run_reaper(
                Duration::from_millis(25),
                Duration::from_secs(3600),
                stopped,
            )),
        ];
        Harness {
            engine,
            metrics,
            scope,
            pacing,
            db,
            stop,
            tasks,
        }
    }

    fn lock(&self, key: &str) -> LockRef {
        self.scope.lock(Kind::Lock, key.into(), key.into())
    }

    fn semaphore(&self, key: &str) -> LockRef {
        self.scope.lock(Kind::Semaphore, key.into(), key.into())
    }

    async fn waiters(&self, lock: &LockRef) -> u64 {
        match lock.kind {
            Kind::Semaphore => {
                self.engine
                    .inspect_semaphore(lock)
                    .await
                    .expect("inspect")
                    .waiters
            }
            _ => self.engine.inspect(lock).await.expect("inspect").waiters,
        }
    }

    /// Waits until `lock` has `n` waiters queued.
    async fn until_queued(&self, lock: &LockRef, n: u64) {
        eventually(&format!("{n} waiter(s) queued"), PATIENCE, || async {
            self.waiters(lock).await == n
        })
        .await;
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = tokio::time::timeout(PATIENCE, task).await;
        }
        self.engine.depart().await;
        self.engine.db().close();
        drop_db(&self.db).await;
    }
}

/// Runs `op` in a task of its own (a client waiting in the queue).
fn spawn<T: Send + 'static>(op: impl Future<Output = T> + Send + 'static) -> JoinHandle<T> {
    tokio::spawn(op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_granted_busy_or_queued_and_a_release_hands_it_on() {
    let h = Harness::start().await;
    let lock = h.lock("job");
    let a = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000))
        .await
        .unwrap();
    assert!(a.fresh);
    assert_eq!(a.hold_count, 1);

    let busy = h
        .engine
        .acquire(&lock, &Ask::new("b", 30_000))
        .await
        .unwrap_err();
    assert!(
        matches!(busy, EngineError::LockHeld { retry_after_ms } if retry_after_ms == HINT_MS),
        "{busy:?}"
    );

    let b = spawn({
        let (engine, lock) = (h.engine.clone(), lock.clone());
        async move {
            engine
                .acquire(&lock, &Ask::new("b", 30_000).wait(10_000))
                .await
        }
    });
    h.until_queued(&lock, 1).await;
    // Queued waiters go first: a newcomer's try is refused.
    let barging = h.engine.acquire(&lock, &Ask::new("c", 30_000)).await;
    assert!(matches!(barging, Err(EngineError::LockHeld { .. })));

    let released = h.engine.release(&lock, "a", a.token).await.unwrap();
    assert!(released.released);
    let b = tokio::time::timeout(PATIENCE, b)
        .await
        .expect("handed on")
        .unwrap()
        .expect("b granted");
    assert_eq!(b.owner, "b");
    assert_eq!(b.token, a.token + 1);
    assert!(b.fresh);
    let state = h.engine.inspect(&lock).await.unwrap();
    assert_eq!(state.owner.as_deref(), Some("b"));
    assert_eq!(state.token, Some(b.token));
    assert_eq!(state.waiters, 0);
    assert!(h.pacing.picks.load(Ordering::SeqCst) >= 1, "fairness asked");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_checks_its_owner_and_token() {
    let h = Harness::start().await;
    let lock = h.lock("owned");
    let a = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000))
        .await
        .unwrap();
    for (owner, token) in [("b", a.token), ("a", a.token + 1), ("a", a.token - 1)] {
        let release = h.engine.release(&lock, owner, token).await;
        assert!(
            matches!(release, Err(EngineError::LeaseLost)),
            "{owner} {token}"
        );
        let renew = h.engine.renew(&lock, owner, token, 30_000).await;
        assert!(
            matches!(renew, Err(EngineError::LeaseLost)),
            "{owner} {token}"
        );
    }
    // Re-entry keeps the token and counts holds.
    let again = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000))
        .await
        .unwrap();
    assert_eq!(
        (again.token, again.hold_count, again.fresh),
        (a.token, 2, false)
    );
    let renewed = h.engine.renew(&lock, "a", a.token, 60_000).await.unwrap();
    assert!(renewed.expires_at > a.expires_at);
    assert_eq!(renewed.hold_count, 2);
    let first = h.engine.release(&lock, "a", a.token).await.unwrap();
    assert_eq!((first.released, first.hold_count), (false, 1));
    assert!(h.engine.inspect(&lock).await.unwrap().held);
    let last = h.engine.release(&lock, "a", a.token).await.unwrap();
    assert_eq!((last.released, last.hold_count), (true, 0));
    assert!(!h.engine.inspect(&lock).await.unwrap().held);
    let twice = h.engine.release(&lock, "a", a.token).await;
    assert!(matches!(twice, Err(EngineError::LeaseLost)));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_is_reaped_to_its_waiter_by_the_database_clock() {
    let h = Harness::start().await;
    let lock = h.lock("expiring");
    let a = h.engine.acquire(&lock, &Ask::new("a", 300)).await.unwrap();
    let b = spawn({
        let (engine, lock) = (h.engine.clone(), lock.clone());
        async move {
            engine
                .acquire(&lock, &Ask::new("b", 30_000).wait(10_000))
                .await
        }
    });
    let b = tokio::time::timeout(PATIENCE, b)
        .await
        .expect("the reaper hands the expired lease on")
        .unwrap()
        .expect("b granted");
    assert_eq!(b.token, a.token + 1);
    // Granted at the earliest when a's lease ended, by the database clock.
    let granted_at = b.expires_at - chrono::Duration::milliseconds(30_000);
    assert!(
        granted_at >= a.expires_at,
        "{granted_at} < {}",
        a.expires_at
    );
    // The expired holder has lost it, whoever holds it now.
    let renew = h.engine.renew(&lock, "a", a.token, 30_000).await;
    assert!(matches!(renew, Err(EngineError::LeaseLost)));
    let release = h.engine.release(&lock, "a", a.token).await;
    assert!(matches!(release, Err(EngineError::LeaseLost)));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_tokens_strictly_increase_over_releases_and_expiries() {
    let h = Harness::start().await;
    let lock = h.lock("tokens");
    let mut last = 0;
    for round in 0..12u32 {
        let owner = format!("o{round}");
        let grant = h
            .engine
            .acquire(&lock, &Ask::new(&owner, 200))
            .await
            .unwrap();
        assert!(
            grant.token > last,
            "round {round}: {} after {last}",
            grant.token
        );
        last = grant.token;
        if round % 3 == 2 {
            // Left to expire: the next try finds it free by the database clock.
            eventually("the lease expired", PATIENCE, || async {
                !h.engine.inspect(&lock).await.unwrap().held
            })
            .await;
        } else {
            h.engine.release(&lock, &owner, grant.token).await.unwrap();
        }
    }
    h.stop().await;
}

/// Waiting acquires of `owners`, spawned one after the other once the
/// previous one is queued (so the queue is in that order).
async fn queue_up(
    h: &Harness,
    lock: &LockRef,
    owners: &[&str],
    queued_before: u64,
) -> Vec<JoinHandle<Result<lockbroker::engine::Grant, EngineError>>> {
    let mut waiting = Vec::new();
    for (n, owner) in owners.iter().enumerate() {
        waiting.push(spawn({
            let (engine, lock, owner) = (h.engine.clone(), lock.clone(), owner.to_string());
            async move {
                engine
                    .acquire(&lock, &Ask::new(&owner, 30_000).wait(10_000))
                    .await
            }
        }));
        h.until_queued(lock, queued_before + n as u64 + 1).await;
    }
    waiting
}

/// The built-in FIFO path (stored procedures, one CALL per waiting acquire
/// or release): grants, re-entry hold by hold, the queue in order with
/// tokens + 1 per handoff, owner and token checks, the tenant's waiter
/// limit, and its queue shared with the general path (a one-try newcomer
/// refused, the reaper handing an expired lease to a waiter it queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fifo_path_grants_queues_and_hands_on_in_order() {
    let h = Harness::start_with(false, true).await;
    let lock = h.lock("fifo");
    // A key never seen: the general path creates its row.
    let a = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000).wait(5_000))
        .await
        .unwrap();
    assert_eq!((a.hold_count, a.fresh), (1, true));
    let again = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000).wait(5_000))
        .await
        .unwrap();
    assert_eq!(
        (again.token, again.hold_count, again.fresh),
        (a.token, 2, false)
    );
    assert!(again.expires_at >= a.expires_at);

    let waiting = queue_up(&h, &lock, &["b", "c", "d"], 0).await;
    // Queued waiters go first: a one-try newcomer (general path) is refused.
    let barging = h.engine.acquire(&lock, &Ask::new("x", 30_000)).await;
    assert!(
        matches!(barging, Err(EngineError::LockHeld { .. })),
        "{barging:?}"
    );
    // The tenant's limit counts every eligible waiter of the tenant.
    let tight = Scope {
        max_waiters: 3,
        ..h.scope.clone()
    }
    .lock(Kind::Lock, "fifo".into(), "fifo".into());
    let over = h
        .engine
        .acquire(&tight, &Ask::new("y", 30_000).wait(5_000))
        .await;
    assert!(matches!(over, Err(EngineError::TooManyWaiters)), "{over:?}");

    for (owner, token) in [("b", a.token), ("a", a.token + 1)] {
        let lost = h.engine.release(&lock, owner, token).await;
        assert!(
            matches!(lost, Err(EngineError::LeaseLost)),
            "{owner} {token}"
        );
    }
    let first = h.engine.release(&lock, "a", a.token).await.unwrap();
    assert_eq!((first.released, first.hold_count), (false, 1));
    assert_eq!(h.waiters(&lock).await, 3);
    let last = h.engine.release(&lock, "a", a.token).await.unwrap();
    assert_eq!((last.released, last.hold_count), (true, 0));

    // Each release hands on to the oldest waiter, with the next token.
    let mut token = a.token;
    for (n, (owner, waiter)) in ["b", "c", "d"].iter().zip(waiting).enumerate() {
        let grant = tokio::time::timeout(PATIENCE, waiter)
            .await
            .expect("handed on")
            .unwrap()
            .expect("granted");
        assert_eq!(grant.owner, *owner);
        assert_eq!(
            (grant.token, grant.hold_count, grant.fresh),
            (token + 1, 1, true)
        );
        token = grant.token;
        let state = h.engine.inspect(&lock).await.unwrap();
        assert_eq!(state.owner.as_deref(), Some(*owner));
        assert_eq!(state.waiters, 2 - n as u64);
        if *owner != "d" {
            h.engine.release(&lock, owner, grant.token).await.unwrap();
        }
    }
    // The last holder's lease runs out: the reaper (general path) hands it
    // to a waiter the procedure queued.
    let e = queue_up(&h, &lock, &["e"], 0).await.pop().unwrap();
    let d = h
        .engine
        .acquire(&lock, &Ask::new("d", 300).wait(5_000))
        .await
        .unwrap();
    assert_eq!(
        (d.token, d.hold_count),
        (token, 2),
        "re-entered, a short lease"
    );
    let e = tokio::time::timeout(PATIENCE, e)
        .await
        .expect("the reaper hands the expired lease on")
        .unwrap()
        .expect("e granted");
    assert_eq!(e.token, token + 1);
    h.engine.release(&lock, "e", e.token).await.unwrap();
    let state = h.engine.inspect(&lock).await.unwrap();
    assert!(!state.held);
    assert_eq!(state.waiters, 0);
    assert_eq!(
        h.pacing.picks.load(Ordering::SeqCst),
        0,
        "FIFO asks no policy"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pacing_handle_chooses_the_next_waiter() {
    let h = Harness::start_with(true, false).await;
    let lock = h.lock("newest-first");
    let a = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000))
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for (i, owner) in ["w1", "w2", "w3"].into_iter().enumerate() {
        let (engine, queued) = (h.engine.clone(), lock.clone());
        waiting.push(spawn(async move {
            engine
                .acquire(&queued, &Ask::new(owner, 30_000).wait(10_000))
                .await
        }));
        h.until_queued(&lock, i as u64 + 1).await;
    }
    h.engine.release(&lock, "a", a.token).await.unwrap();
    let newest = waiting.pop().unwrap();
    let w3 = tokio::time::timeout(PATIENCE, newest)
        .await
        .expect("handed to the newest")
        .unwrap()
        .unwrap();
    assert_eq!((w3.owner.as_str(), w3.token), ("w3", a.token + 1));
    assert!(waiting.iter().all(|w| !w.is_finished()));
    h.engine.release(&lock, "w3", w3.token).await.unwrap();
    let w2 = tokio::time::timeout(PATIENCE, waiting.pop().unwrap())
        .await
        .expect("then to the next newest")
        .unwrap()
        .unwrap();
    assert_eq!((w2.owner.as_str(), w2.token), ("w2", a.token + 2));
    h.engine.release(&lock, "w2", w2.token).await.unwrap();
    let w1 = tokio::time::timeout(PATIENCE, waiting.pop().unwrap())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(w1.token, a.token + 3);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_is_granted_busy_or_queued_and_a_release_hands_it_on() {
    let h = Harness::start().await;
    let sem = h.semaphore("pool");
    let a = h
        .engine
        .acquire_permit(&sem, &Ask::new("a", 30_000), 2)
        .await
        .unwrap();
    let b = h
        .engine
        .acquire_permit(&sem, &Ask::new("b", 30_000), 2)
        .await
        .unwrap();
    assert_ne!(a.slot, b.slot);
    assert!(a.fresh && b.fresh);
    // The same owner asking again gets its own permit back.
    let again = h
        .engine
        .acquire_permit(&sem, &Ask::new("a", 30_000), 2)
        .await
        .unwrap();
    assert_eq!(
        (again.slot, again.token, again.fresh),
        (a.slot, a.token, false)
    );

    let full = h
        .engine
        .acquire_permit(&sem, &Ask::new("c", 30_000), 2)
        .await;
    assert!(
        matches!(full, Err(EngineError::SemaphoreFull { retry_after_ms }) if retry_after_ms == HINT_MS),
        "{full:?}"
    );
    let mismatch = h
        .engine
        .acquire_permit(&sem, &Ask::new("c", 30_000), 3)
        .await;
    assert!(matches!(
        mismatch,
        Err(EngineError::PermitsMismatch { permits: 2 })
    ));

    let c = spawn({
        let (engine, sem) = (h.engine.clone(), sem.clone());
        async move {
            engine
                .acquire_permit(&sem, &Ask::new("c", 30_000).wait(10_000), 2)
                .await
        }
    });
    h.until_queued(&sem, 1).await;
    h.engine
        .release_slot(&sem, "a", a.slot, a.token)
        .await
        .unwrap();
    let c = tokio::time::timeout(PATIENCE, c)
        .await
        .expect("handed on")
        .unwrap()
        .expect("c granted");
    assert_eq!(c.slot, a.slot, "the freed slot");
    assert_eq!(c.token, a.token + 1, "the slot's next token");
    let state = h.engine.inspect_semaphore(&sem).await.unwrap();
    let mut holders: Vec<_> = state.holders.iter().map(|s| s.owner.as_str()).collect();
    holders.sort();
    assert_eq!(holders, ["b", "c"]);
    assert_eq!(state.waiters, 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_checks_its_owner_and_token() {
    let h = Harness::start().await;
    let sem = h.semaphore("owned-pool");
    let a = h
        .engine
        .acquire_permit(&sem, &Ask::new("a", 30_000), 1)
        .await
        .unwrap();
    for (owner, slot, token) in [
        ("b", a.slot, a.token),
        ("a", a.slot, a.token + 1),
        ("a", a.slot + 1, a.token),
    ] {
        let release = h.engine.release_slot(&sem, owner, slot, token).await;
        assert!(
            matches!(release, Err(EngineError::LeaseLost)),
            "{owner} {slot} {token}"
        );
        let renew = h.engine.renew_slot(&sem, owner, slot, token, 30_000).await;
        assert!(
            matches!(renew, Err(EngineError::LeaseLost)),
            "{owner} {slot} {token}"
        );
    }
    let renewed = h
        .engine
        .renew_slot(&sem, "a", a.slot, a.token, 60_000)
        .await
        .unwrap();
    assert!(renewed.expires_at > a.expires_at);
    assert_eq!((renewed.token, renewed.permits), (a.token, 1));
    h.engine
        .release_slot(&sem, "a", a.slot, a.token)
        .await
        .unwrap();
    let twice = h.engine.release_slot(&sem, "a", a.slot, a.token).await;
    assert!(matches!(twice, Err(EngineError::LeaseLost)));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_slot_is_reaped_to_its_waiter_by_the_database_clock() {
    let h = Harness::start().await;
    let sem = h.semaphore("expiring-pool");
    let a = h
        .engine
        .acquire_permit(&sem, &Ask::new("a", 300), 1)
        .await
        .unwrap();
    let b = spawn({
        let (engine, sem) = (h.engine.clone(), sem.clone());
        async move {
            engine
                .acquire_permit(&sem, &Ask::new("b", 30_000).wait(10_000), 1)
                .await
        }
    });
    let b = tokio::time::timeout(PATIENCE, b)
        .await
        .expect("the reaper hands the expired permit on")
        .unwrap()
        .expect("b granted");
    assert_eq!((b.slot, b.token), (a.slot, a.token + 1));
    let granted_at = b.expires_at - chrono::Duration::milliseconds(30_000);
    assert!(
        granted_at >= a.expires_at,
        "{granted_at} < {}",
        a.expires_at
    );
    let renew = h
        .engine
        .renew_slot(&sem, "a", a.slot, a.token, 30_000)
        .await;
    assert!(matches!(renew, Err(EngineError::LeaseLost)));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_tokens_strictly_increase_per_slot() {
    let h = Harness::start().await;
    let sem = h.semaphore("tokens-pool");
    let mut last = std::collections::HashMap::<u32, u64>::new();
    for round in 0..12u32 {
        let owner = format!("o{round}");
        let grant = h
            .engine
            .acquire_permit(&sem, &Ask::new(&owner, 200), 2)
            .await
            .unwrap();
        let before = last.insert(grant.slot, grant.token).unwrap_or(0);
        assert!(
            grant.token > before,
            "round {round}: {} after {before}",
            grant.token
        );
        if round % 3 == 2 {
            // Left to expire (the next try may take the other slot meanwhile).
            let slot = grant.slot;
            eventually("the permit expired", PATIENCE, || async {
                let state = h.engine.inspect_semaphore(&sem).await.unwrap();
                state.holders.iter().all(|s| s.slot != slot)
            })
            .await;
        } else {
            h.engine
                .release_slot(&sem, &owner, grant.slot, grant.token)
                .await
                .unwrap();
        }
    }
    h.stop().await;
}

/// A release whose attempt committed but was answered with an error is
/// tried again; the retry finds the row marked by that same release and
/// answers as if the first answer had arrived (not 409), even when the
/// lease has been granted to somebody else since, or handed on to a waiter.
/// Another release of the same lease, or the same one re-entered, is not
/// mistaken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_committed_unanswered_is_recognised_by_its_mark() {
    release_marks(false).await;
}

/// The same on the built-in FIFO path (the release procedure marks the row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_committed_unanswered_is_recognised_by_its_mark_on_the_fifo_path() {
    release_marks(true).await;
}

async fn release_marks(fifo: bool) {
    let h = Harness::start_with(false, fifo).await;
    let lock = h.lock("marked");
    const MARK: u64 = 0x5eed_0001;

    // Held twice: the first release leaves one hold; playing it again
    // (same mark) does not take the second.
    let a = h
        .engine
        .acquire(&lock, &Ask::new("a", 30_000))
        .await
        .unwrap();
    h.engine
        .acquire(&lock, &Ask::new("a", 30_000))
        .await
        .unwrap();
    let first = h
        .engine
        .release_marked(&lock, "a", a.token, MARK)
        .await
        .unwrap();
    assert_eq!((first.released, first.hold_count), (false, 1));
    let again = h
        .engine
        .release_marked(&lock, "a", a.token, MARK)
        .await
        .unwrap();
    assert_eq!(
        (again.released, again.hold_count),
        (false, 1),
        "not released twice"
    );

    // The last hold, released; then b takes the lock.
    const LAST: u64 = 0x5eed_0002;
    let last = h
        .engine
        .release_marked(&lock, "a", a.token, LAST)
        .await
        .unwrap();
    assert!(last.released);
    let b = h
        .engine
        .acquire(&lock, &Ask::new("b", 30_000))
        .await
        .unwrap();
    assert_eq!(b.token, a.token + 1);

    // The retry of that release: it committed, so it is answered released.
    let retried = h.engine.release_marked(&lock, "a", a.token, LAST).await;
    assert!(matches!(retried, Ok(r) if r.released), "{retried:?}");
    // Any other release of a's lease is refused, and b still holds.
    let other = h.engine.release(&lock, "a", a.token).await;
    assert!(matches!(other, Err(EngineError::LeaseLost)), "{other:?}");
    let state = h.engine.inspect(&lock).await.unwrap();
    assert_eq!(
        (state.owner.as_deref(), state.token),
        (Some("b"), Some(b.token))
    );

    // A release that handed the lock on to a waiter, played again, is
    // answered released and leaves the waiter its lease.
    const HANDED: u64 = 0x5eed_0003;
    let c = queue_up(&h, &lock, &["c"], 0).await.pop().unwrap();
    let handed = h
        .engine
        .release_marked(&lock, "b", b.token, HANDED)
        .await
        .unwrap();
    assert!(handed.released);
    let c = tokio::time::timeout(PATIENCE, c)
        .await
        .expect("handed on")
        .unwrap()
        .expect("c granted");
    assert_eq!(c.token, b.token + 1);
    let replayed = h.engine.release_marked(&lock, "b", b.token, HANDED).await;
    assert!(matches!(replayed, Ok(r) if r.released), "{replayed:?}");
    let state = h.engine.inspect(&lock).await.unwrap();
    assert_eq!(
        (state.owner.as_deref(), state.token),
        (Some("c"), Some(c.token))
    );
    h.stop().await;
}

/// A release through this broker that hands the key to a waiter of the
/// database queue (it arrived before the waiters here) commits, then
/// settles: the waiters here now wait for the new holder's lease. The
/// waker's tick run inside that window (a test seam places it there) must
/// not take the new holder, not yet recorded, for a lease lost elsewhere
/// and spill the waiters here to the database path: under load it did,
/// and every handoff of the key then went through the queue (issue #21's
/// 128-client collapse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_inside_a_handoff_to_the_queue_leaves_the_waiters_here() {
    let h = Harness::start().await;
    let lock = h.lock("hot");
    let spilled = || h.metrics.counter("lockbroker_waiters_spilled_total", &[]);
    let holder = h
        .engine
        .acquire(&lock, &Ask::new("h", 30_000))
        .await
        .unwrap();
    // x and z queue in the database (nothing is waited for here yet).
    let mut queued = queue_up(&h, &lock, &["x", "z"], 0).await;
    let z = queued.pop().unwrap();
    let x = queued.pop().unwrap();
    // h's release hands to x through the queue: the key is contended, and
    // x's lease is recorded here.
    h.engine.release(&lock, "h", holder.token).await.unwrap();
    let x = tokio::time::timeout(PATIENCE, x)
        .await
        .expect("handed to x")
        .unwrap()
        .unwrap();
    // y waits here, in memory, behind z (queued in the database first).
    let y = queue_up(&h, &lock, &["y"], 1).await.pop().unwrap();
    let before = spilled();

    h.engine.tick_inside_next_release_here();
    h.engine.release(&lock, "x", x.token).await.unwrap();
    let z = tokio::time::timeout(PATIENCE, z)
        .await
        .expect("handed to z")
        .unwrap()
        .unwrap();
    assert_eq!(z.token, x.token + 1, "z arrived before y: z goes first");
    assert_eq!(spilled(), before, "the waiter here stayed here");
    assert_eq!(h.waiters(&lock).await, 1, "y still waits");

    // z's release hands to y from memory.
    h.engine.release(&lock, "z", z.token).await.unwrap();
    let y = tokio::time::timeout(PATIENCE, y)
        .await
        .expect("handed to y")
        .unwrap()
        .unwrap();
    assert_eq!(y.token, z.token + 1);
    assert_eq!(spilled(), before);
    h.stop().await;
}
