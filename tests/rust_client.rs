//! `lockbroker-client` against a real broker: the guards hold what they
//! claim (exclusion, renewal beyond the TTL, release on drop), say when
//! they lost it, and semaphores and elections behave through the client.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use lockbroker_client::{
    api::{ElectionStatus, LockEventKind, ResourceKind, StreamEvent},
    Client, ElectionEvent, ErrorCode, Event, Events, LeaderEvents, LostReason, Stream,
};
use lockbroker_tests::{
    db_conn, eventually,
    history::{Op, Request},
    Broker, History, Outcome, Proxy, KEY,
};

fn client(broker: &Broker) -> Client {
    Client::new(broker.url(), KEY).unwrap()
}

/// A proxy in front of `broker` (to break connections), and a client
/// that goes through it.
async fn behind_a_proxy(broker: &Broker) -> (Proxy, Client) {
    let addr = broker.url().trim_start_matches("http://");
    let proxy = Proxy::start(addr).await;
    let client = Client::new(&format!("http://{}", proxy.addr), KEY).unwrap();
    (proxy, client)
}

/// How long a test waits for something that takes a few round trips.
const PROMPTLY: Duration = Duration::from_secs(10);

#[tokio::test]
async fn guards_exclude_each_other_and_tokens_increase() {
    const TASKS: usize = 6;
    const ROUNDS: usize = 5;
    let broker = Broker::start().await;
    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = client(&broker);
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let sent = Instant::now();
                let guard = client
                    .lock("shared")
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                let lease = guard.grant().expect("held");
                history.record(Op {
                    key: "shared".into(),
                    owner: lease.owner.clone(),
                    request: Request::Acquire {
                        ttl_ms: lease.ttl_ms,
                        wait_ms: 60_000,
                    },
                    sent,
                    answered: Instant::now(),
                    outcome: Outcome::Reply {
                        status: 200,
                        token: Some(guard.token()),
                        hold_count: Some(lease.hold_count),
                        released: None,
                    },
                });
                // The work the lock protects: a hold, part of the test (not
                // a wait for a condition).
                tokio::time::sleep(Duration::from_millis(3)).await;
                let sent = Instant::now();
                let token = guard.token();
                guard.release().await.expect("release");
                history.record(Op {
                    key: "shared".into(),
                    owner: lease.owner,
                    request: Request::Release { token },
                    sent,
                    answered: Instant::now(),
                    outcome: Outcome::Reply {
                        status: 200,
                        token: None,
                        hold_count: Some(0),
                        released: Some(true),
                    },
                });
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the clients finish")
            .expect("no client panicked");
    }
    let report = history.check();
    report.assert_clean();
    assert_eq!(report.grants, TASKS * ROUNDS, "{report}");
    // Holds never overlap, so the order of the answers is the order of the
    // grants: their tokens strictly increase in it.
    let mut grants: Vec<_> = history
        .ops()
        .into_iter()
        .filter_map(|op| op.outcome.granted().map(|t| (op.answered, t)))
        .collect();
    grants.sort();
    assert!(
        grants.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens in grant order: {:?}",
        grants.iter().map(|g| g.1).collect::<Vec<_>>()
    );
    broker.stop().await;
}

#[tokio::test]
async fn a_guard_renews_its_lease_beyond_the_ttl() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let ttl = Duration::from_millis(300);
    let guard = c.lock("renewed").ttl(ttl).acquire().await.unwrap();
    let granted = Instant::now();
    let first_expiry = guard.grant().unwrap().expires_at;
    // Several TTLs later the lock is still ours, with the same token, and
    // nobody else can take it.
    eventually("the lease outlived three TTLs", PROMPTLY, || async {
        granted.elapsed() > ttl * 3
    })
    .await;
    let status = c.locks().status("renewed").await.unwrap();
    assert!(status.held, "{status:?}");
    assert_eq!(status.token, Some(guard.token()));
    assert!(!guard.is_lost());
    assert_ne!(guard.grant().unwrap().expires_at, first_expiry, "renewed");
    assert!(c.lock("renewed").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    assert!(!c.locks().status("renewed").await.unwrap().held);
    broker.stop().await;
}

#[tokio::test]
async fn lost_resolves_when_the_broker_refuses_the_renewal() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let guard = c
        .lock("stolen")
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    let lost = guard.lost();
    // Expire the lease behind the guard's back; someone else takes it.
    let mut db = db_conn(&broker.db).await;
    sqlx::query("UPDATE locks SET expires_at = NOW(6) - INTERVAL 1 SECOND")
        .execute(&mut db)
        .await
        .unwrap();
    let thief = c.lock("stolen").try_acquire().await.unwrap();
    assert!(thief.is_some(), "the expired lock is free");
    let reason = tokio::time::timeout(PROMPTLY, lost)
        .await
        .expect("lost() resolves at the next renewal");
    match &reason {
        LostReason::Refused(refusal) => assert_eq!(refusal.code, ErrorCode::LeaseLost),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(guard.is_lost());
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(err, lockbroker_client::Error::LeaseLost(_)),
        "{err}"
    );
    broker.stop().await;
}

#[tokio::test]
async fn lost_resolves_before_anyone_else_can_take_the_lock_when_the_broker_is_unreachable() {
    let broker = Broker::start().await;
    let (proxy, behind_proxy) = behind_a_proxy(&broker).await;
    let direct = client(&broker);
    let ttl = Duration::from_millis(600);
    // NOWAIT: the guard then knows a safe end of the lease exactly.
    let guard = behind_proxy
        .lock("partitioned")
        .ttl(ttl)
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let lost = guard.lost();
    let lost_at = tokio::spawn(async move {
        let reason = lost.await;
        (Instant::now(), reason)
    });
    proxy.pause();
    let (thief, thief_answered) = lockbroker_tests::eventually_some(
        "another client gets the lock once the lease ran out",
        PROMPTLY,
        || async {
            let guard = direct.lock("partitioned").try_acquire().await.ok()??;
            Some((guard, Instant::now()))
        },
    )
    .await;
    let (lost_at, reason) = tokio::time::timeout(PROMPTLY, lost_at)
        .await
        .expect("lost() resolves")
        .unwrap();
    assert!(
        matches!(reason, LostReason::Expired { .. }),
        "no renewal got through: {reason:?}"
    );
    assert!(
        lost_at <= thief_answered,
        "the holder knew it lost the lease {:?} after the next holder got it",
        lost_at - thief_answered
    );
    assert!(thief.token() > guard.token());
    proxy.restore();
    assert!(matches!(
        guard.release().await,
        Err(lockbroker_client::Error::LeaseLost(_))
    ));
    broker.stop().await;
}

#[tokio::test]
async fn dropping_a_guard_releases_the_lock() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let guard = c.lock("dropped").acquire().await.unwrap();
    assert!(c.locks().status("dropped").await.unwrap().held);
    drop(guard);
    eventually("the dropped guard's lock is free", PROMPTLY, || async {
        !c.locks().status("dropped").await.unwrap().held
    })
    .await;
    broker.stop().await;
}

#[tokio::test]
async fn try_acquire_on_a_held_lock_is_none_and_a_wait_runs_out_with_lock_held() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let holder = c.lock("busy").try_acquire().await.unwrap().expect("free");
    assert!(c.lock("busy").try_acquire().await.unwrap().is_none());
    let started = Instant::now();
    let err = c
        .lock("busy")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::LockHeld), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
    let first = holder.token();
    holder.release().await.unwrap();
    let next = c.lock("busy").try_acquire().await.unwrap().expect("freed");
    assert!(next.token() > first);
    next.release().await.unwrap();
    broker.stop().await;
}

#[tokio::test]
async fn a_semaphore_admits_at_most_its_permits() {
    const PERMITS: u32 = 3;
    let broker = Broker::start().await;
    let c = client(&broker);
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(
            c.semaphore("pool", PERMITS)
                .try_acquire()
                .await
                .unwrap()
                .expect("a permit"),
        );
    }
    assert!(c
        .semaphore("pool", PERMITS)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let status = c.semaphores().status("pool").await.unwrap();
    assert_eq!(status.permits, Some(PERMITS));
    assert_eq!(status.holders.len(), PERMITS as usize);
    held.pop().unwrap().release().await.unwrap();
    let again = c.semaphore("pool", PERMITS).try_acquire().await.unwrap();
    assert!(again.is_some(), "a released permit is free again");
    drop(again);
    drop(held);

    // Under contention, never more than PERMITS holders at once.
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, inside, most) = (c.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let permit = c
                    .semaphore("pool", PERMITS)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // The hold itself (not a wait for a condition): holders
                // must overlap for the count to mean anything.
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the clients finish")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=PERMITS as usize).contains(&most),
        "{most} holders at once"
    );
    broker.stop().await;
}

#[tokio::test]
async fn rwlock_guards_share_reads_and_exclude_a_write() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let r1 = c
        .read_lock("cfg")
        .try_acquire()
        .await
        .unwrap()
        .expect("a read");
    let r2 = c
        .read_lock("cfg")
        .try_acquire()
        .await
        .unwrap()
        .expect("another read");
    assert!(r2.token() > r1.token());
    assert_eq!(r2.grant().map(|g| g.readers), Some(2));
    assert!(c.write_lock("cfg").try_acquire().await.unwrap().is_none());
    let status = c.rwlocks().status("cfg").await.unwrap();
    assert_eq!((status.readers.len(), status.writer), (2, None));

    // A waiting writer gets the key once both readers let go (one drops
    // its guard, which releases it).
    let writer = {
        let c = c.clone();
        tokio::spawn(async move { c.write_lock("cfg").wait(PROMPTLY).acquire().await })
    };
    eventually("the writer waits", PROMPTLY, || async {
        c.rwlocks().status("cfg").await.unwrap().waiters == 1
    })
    .await;
    assert!(
        c.read_lock("cfg").try_acquire().await.unwrap().is_none(),
        "a queued writer blocks new readers"
    );
    let last_read = r2.token();
    r1.release().await.unwrap();
    drop(r2);
    let w = writer.await.unwrap().unwrap();
    assert!(w.token() > last_read);
    let err = c
        .read_lock("cfg")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::LockHeld));
    let writer = c
        .rwlocks()
        .status("cfg")
        .await
        .unwrap()
        .writer
        .expect("held");
    assert_eq!(writer.token, w.token());
    w.release().await.unwrap();
    assert!(c.write_lock("cfg").try_acquire().await.unwrap().is_some());
    broker.stop().await;
}

#[tokio::test]
async fn observe_streams_each_change_of_leader() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let mut events = c.elections().observe("scheduler").await.unwrap();
    let now = next(&mut events).await;
    assert_eq!((now.leader, now.term), (None, None), "nobody leads yet");

    let a = c
        .election("scheduler")
        .candidate("node-a")
        .campaign()
        .await
        .unwrap();
    let now = next(&mut events).await;
    assert_eq!(now.leader.as_deref(), Some("node-a"));
    assert_eq!(now.term, Some(a.token()));
    assert!(c
        .election("scheduler")
        .candidate("node-b")
        .try_campaign()
        .await
        .unwrap()
        .is_none());

    let a_term = a.token();
    a.release().await.unwrap(); // resigns
    assert_eq!(next(&mut events).await.leader, None, "vacancy");

    let b = c
        .election("scheduler")
        .candidate("node-b")
        .campaign()
        .await
        .unwrap();
    let now = next(&mut events).await;
    assert_eq!(now.leader.as_deref(), Some("node-b"));
    assert!(now.term > Some(a_term), "a new term");
    let status = c.elections().status("scheduler").await.unwrap();
    assert_eq!(status.term, Some(b.token()));
    b.release().await.unwrap();
    broker.stop().await;
}

/// The next leader event, within [`PROMPTLY`].
async fn next(events: &mut LeaderEvents) -> ElectionStatus {
    let event = tokio::time::timeout(PROMPTLY, events.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("a well-formed event");
    let ElectionEvent::Leader(now) = event;
    now
}

#[tokio::test]
async fn history_reads_a_locks_events_newest_first() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let locks = c.locks();
    let a = locks
        .acquire("audited", &lockbroker_client::api::AcquireRequest::new("a"))
        .await
        .unwrap();
    let release = lockbroker_client::api::ReleaseRequest {
        owner: "a".into(),
        token: a.token,
    };
    locks.release("audited", &release).await.unwrap();
    let b = locks
        .acquire("audited", &lockbroker_client::api::AcquireRequest::new("b"))
        .await
        .unwrap();
    let all = locks.history("audited", None).await.unwrap();
    let seen: Vec<_> = all
        .events
        .iter()
        .map(|e| (e.event, e.owner.as_str(), e.token))
        .collect();
    assert_eq!(
        seen,
        vec![
            (LockEventKind::Granted, "b", b.token),
            (LockEventKind::Released, "a", a.token),
            (LockEventKind::Granted, "a", a.token),
        ]
    );
    let newest = locks.history("audited", Some(1)).await.unwrap();
    assert_eq!(newest.events, all.events[..1].to_vec());
    let err = locks.history("audited", Some(0)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err:?}");
    broker.stop().await;
}

#[tokio::test]
async fn listing_pages_through_the_live_leases_of_every_kind() {
    let broker = Broker::start().await;
    let c = client(&broker);
    let mut held = Vec::new();
    for key in ["ls/a", "ls/b", "ls/c", "ls/d", "other/x"] {
        held.push(c.lock(key).try_acquire().await.unwrap().expect("free"));
    }
    // Released: no longer listed.
    held.remove(1).release().await.unwrap();
    let live: Vec<_> = held[..3]
        .iter()
        .map(|g| {
            let lease = g.grant().expect("held");
            (lease.storage_key, Some(lease.owner), Some(lease.token))
        })
        .collect();

    let listed: Vec<_> = c
        .locks()
        .list_all("ls/", 100)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.storage_key, s.owner, s.token))
        .collect();
    assert_eq!(listed, live);

    // Page by page, one at a time: each live lock once, in key order.
    let mut paged = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = c
            .locks()
            .list("ls/", Some(1), cursor.as_deref())
            .await
            .unwrap();
        assert!(page.items.len() <= 1, "{page:?}");
        paged.extend(page.items.into_iter().map(|s| s.storage_key));
        pages += 1;
        assert!(pages <= 10, "the cursor moves on");
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(paged, ["ls/a", "ls/c", "ls/d"]);
    let first_two = c.locks().list_all("ls/", 2).await.unwrap();
    assert_eq!(first_two.len(), 2);
    assert_eq!(first_two[1].storage_key, "ls/c");
    let err = c.locks().list("", Some(0), None).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err:?}");

    // The other kinds, through the same calls.
    let p1 = c.semaphore("ls/pool", 3).acquire().await.unwrap();
    let p2 = c.semaphore("ls/pool", 3).acquire().await.unwrap();
    let pools = c.semaphores().list_all("ls/", 10).await.unwrap();
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(pools[0].permits, Some(3));
    let mut tokens: Vec<_> = pools[0].holders.iter().map(|h| h.token).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, [p1.token(), p2.token()]);
    let reader = c.read_lock("ls/cfg").acquire().await.unwrap();
    let rw = c.rwlocks().list_all("ls/", 10).await.unwrap();
    assert_eq!(rw.len(), 1, "{rw:?}");
    assert_eq!(rw[0].readers[0].token, reader.token());
    assert!(rw[0].writer.is_none());
    let leader = c
        .election("ls/leader")
        .candidate("n1")
        .campaign()
        .await
        .unwrap();
    let elections = c.elections().list_all("ls/", 10).await.unwrap();
    assert_eq!(elections.len(), 1, "{elections:?}");
    assert_eq!(
        (elections[0].leader.as_deref(), elections[0].term),
        (Some("n1"), Some(leader.token()))
    );
    // History is generic too: a semaphore's grants.
    let history = c.semaphores().history("ls/pool", None).await.unwrap();
    assert_eq!(history.events.len(), 2, "{history:?}");
    broker.stop().await;
}

/// The next change of an event stream, within [`PROMPTLY`].
async fn next_change(events: &mut Events) -> StreamEvent {
    change(async { Some(events.next().await) }).await
}

/// The change `next` yields, within [`PROMPTLY`].
async fn change(
    next: impl Future<Output = Option<lockbroker_client::Result<Event>>>,
) -> StreamEvent {
    match tokio::time::timeout(PROMPTLY, next)
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("a well-formed event")
    {
        Event::Change(change) => change,
        Event::Reset => panic!("an unexpected reset"),
    }
}

#[tokio::test]
async fn events_stream_changes_under_a_prefix_and_resume_after_a_broken_connection() {
    let broker = Broker::start().await;
    let (proxy, behind_proxy) = behind_a_proxy(&broker).await;
    let c = client(&broker);
    let mut events = behind_proxy.events("ev/", None).await.unwrap();

    // Not under the prefix: never in the stream.
    let other = c.lock("other/x").acquire().await.unwrap();
    let lock = c.lock("ev/a").acquire().await.unwrap();
    let granted = next_change(&mut events).await;
    assert_eq!(
        (granted.event, granted.kind, granted.storage_key.as_str()),
        (LockEventKind::Granted, ResourceKind::Lock, "ev/a")
    );
    assert_eq!(granted.token, lock.token());
    let permit = c.semaphore("ev/pool", 2).acquire().await.unwrap();
    let second = next_change(&mut events).await;
    assert_eq!(
        (second.kind, second.storage_key.as_str(), second.token),
        (ResourceKind::Semaphore, "ev/pool", permit.token())
    );
    assert!(second.id > granted.id);
    assert_eq!(events.last_id(), Some(second.id));

    // The connection breaks; a change made meanwhile arrives once the
    // stream is open again (it resumes after the last event it got).
    proxy.cut();
    eventually("the proxy closed the stream", PROMPTLY, || async {
        proxy.connections() == 0
    })
    .await;
    let lock_token = lock.token();
    let mut direct = c.events("ev/a", None).await.unwrap();
    lock.release().await.unwrap();
    // Once another stream has it, the broker's feed is past it: a stream
    // opened from now on (not resumed) would not have it.
    while next_change(&mut direct).await.event != LockEventKind::Released {}
    proxy.restore();
    let released = next_change(&mut events).await;
    assert_eq!(
        (
            released.event,
            released.storage_key.as_str(),
            released.token
        ),
        (LockEventKind::Released, "ev/a", lock_token)
    );
    assert!(released.id > second.id);

    // `after`: from the history, what came after that id.
    // (As a `Stream` this time.)
    let mut replay = c
        .events("ev/", Some(granted.id))
        .await
        .unwrap()
        .into_stream();
    for expected in [second, released] {
        let next = std::future::poll_fn(|cx| Pin::new(&mut replay).poll_next(cx));
        assert_eq!(change(next).await, expected);
    }
    drop((other, permit));
    broker.stop().await;
}
