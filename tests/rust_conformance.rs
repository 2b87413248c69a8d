//! The client conformance scenarios (`clients/CONFORMANCE.md`, C01–C25)
//! for `lockbroker-client`, in-process: each test starts the run's two
//! brokers (plain HTTP and mutual TLS, one database) with
//! [`Conformance`] and reads what a suite is given from
//! [`Conformance::env`], as the other languages' suites read it from their
//! environment. Test `cNN_...` is scenario CNN; `clients/rust/README.md`
//! lists them.
//!
//! The broker is never replaced, except by the small stand-ins the
//! document allows (C06, C09, C11), at the bottom of this file: a
//! forwarder in front of the broker that answers 503 first, closes
//! connections, or loses an answer, and records the request and status
//! lines that pass.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use lockbroker_client::{
    api::{
        AcquireRequest, ElectionStatus, LockEventKind, ReleaseRequest, ResourceKind, RwMode,
        StreamEvent,
    },
    Client, ElectionEvent, Error, ErrorCode, Event, Events, LeaderEvents, LeaderGuard, LostReason,
    MultiLockGuard, PermitGuard, RetryPolicy, RwLockGuard, Session, Stream,
};
use lockbroker_tests::{eventually, eventually_some, Conformance, Proxy};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// How long a test waits for something that takes a few round trips.
const PROMPTLY: Duration = Duration::from_secs(10);

/// The run's brokers and the variables a suite is given.
struct Env {
    conformance: Conformance,
    vars: HashMap<String, String>,
}

impl Env {
    async fn start() -> Env {
        let conformance = Conformance::start().await;
        let vars = conformance.env().into_iter().collect();
        Env { conformance, vars }
    }

    /// One of the variables of `clients/CONFORMANCE.md`.
    fn var(&self, name: &str) -> &str {
        self.vars
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not given"))
    }

    /// `host:port` of the plain broker, for a forwarder in front of it.
    fn plain_addr(&self) -> &str {
        self.var("LOCKBROKER_URL").trim_start_matches("http://")
    }

    /// A client of the plain broker with the `default` tenant's key.
    fn client(&self) -> Client {
        self.client_at(self.var("LOCKBROKER_URL"))
    }

    /// A client of `url` with the `default` tenant's key.
    fn client_at(&self, url: &str) -> Client {
        Client::new(url, self.var("LOCKBROKER_API_KEY")).unwrap()
    }

    /// A client of the plain broker with the key in variable `key_var`.
    fn client_with(&self, key_var: &str) -> Client {
        Client::new(self.var("LOCKBROKER_URL"), self.var(key_var)).unwrap()
    }

    async fn stop(self) {
        self.conformance.stop().await;
    }
}

/// A key no other test uses: `name` and a suffix of this run.
fn unique(name: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The owner a guard holds its lease as.
fn owner_of(guard: &lockbroker_client::LockGuard) -> String {
    guard.grant().expect("held").owner
}

// --- Locks ---

#[tokio::test]
async fn c01_acquire_and_release() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c01");
    let guard = c
        .lock(&key)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    assert!(guard.token() > 0, "a positive fencing token");
    let status = c.locks().status(&key).await.unwrap();
    assert!(status.held, "{status:?}");
    assert_eq!(status.owner, Some(owner_of(&guard)));
    assert_eq!(status.token, Some(guard.token()));
    guard.release().await.unwrap();
    let status = c.locks().status(&key).await.unwrap();
    assert!(!status.held, "{status:?}");
    assert_eq!((status.owner, status.token), (None, None));
    env.stop().await;
}

#[tokio::test]
async fn c02_try_on_a_held_lock_is_none_at_once() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c02");
    let holder = c.lock(&key).try_acquire().await.unwrap().expect("free");
    let started = Instant::now();
    // Another owner (each guard gets its own): not acquired, no error.
    assert!(c.lock(&key).try_acquire().await.unwrap().is_none());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a try does not wait: {:?}",
        started.elapsed()
    );
    holder.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c03_a_wait_is_granted_on_release_or_runs_out_with_lock_held() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c03");
    let holder = c.lock(&key).try_acquire().await.unwrap().expect("free");
    let first = holder.token();
    let releaser = tokio::spawn(async move {
        // The scenario's timing: the holder lets go ~300 ms later.
        tokio::time::sleep(Duration::from_millis(300)).await;
        holder.release().await.unwrap();
    });
    let started = Instant::now();
    let waiter = c
        .lock(&key)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("granted once the holder released");
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    assert!(waiter.token() > first);
    releaser.await.unwrap();

    // Held for the whole wait: the typed "held" refusal with its hint.
    let started = Instant::now();
    let err = c
        .lock(&key)
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::LockHeld), "{err}");
    assert!(err.retry_after().is_some(), "retry_after_ms: {err:?}");
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
    waiter.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c04_a_guard_renews_past_several_ttls() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c04");
    let guard = c
        .lock(&key)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let first_expiry = guard.grant().unwrap().expires_at;
    let lost = guard.lost();
    // Time is what is tested: held for 3.5 TTLs.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let status = c.locks().status(&key).await.unwrap();
    assert!(status.held, "{status:?}");
    assert_eq!(status.owner, Some(owner_of(&guard)));
    assert_eq!(status.token, Some(guard.token()));
    assert!(!guard.is_lost());
    assert!(
        tokio::time::timeout(Duration::ZERO, lost).await.is_err(),
        "lost() did not resolve"
    );
    assert_ne!(guard.grant().unwrap().expires_at, first_expiry, "renewed");
    guard.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c05_lost_fires_when_the_lease_is_taken_away() {
    let env = Env::start().await;
    let c = env.client();
    let admin = c.with_api_key(env.var("LOCKBROKER_ADMIN_TOKEN"));
    let key = unique("c05");
    let ttl = Duration::from_secs(1);
    let guard = c.lock(&key).ttl(ttl).acquire().await.unwrap();
    let lost = guard.lost();
    let ended = admin.admin().force_release("default", &key).await.unwrap();
    assert_eq!(ended.token, guard.token());
    let taken = Instant::now();
    let thief = c.lock(&key).try_acquire().await.unwrap().expect("freed");
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("lost() fires within one TTL");
    assert!(taken.elapsed() <= ttl, "{:?}", taken.elapsed());
    match &reason {
        LostReason::Refused(refusal) => assert_eq!(refusal.code, ErrorCode::LeaseLost),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(guard.is_lost());
    // Releasing the lost guard answers that it was lost (a value, no
    // panic), and leaves the new holder's lease alone.
    let err = guard.release().await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost(_)), "{err}");
    let status = c.locks().status(&key).await.unwrap();
    assert_eq!(
        (status.owner, status.token),
        (Some(owner_of(&thief)), Some(thief.token()))
    );
    thief.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c06_lost_fires_before_the_ttl_when_renewals_go_unconfirmed() {
    let env = Env::start().await;
    let proxy = Proxy::start(env.plain_addr()).await;
    let behind_proxy = env.client_at(&format!("http://{}", proxy.addr));
    let direct = env.client();
    let key = unique("c06");
    let ttl = Duration::from_millis(900);
    // NOWAIT: the guard then knows a safe end of the lease exactly.
    let guard = behind_proxy
        .lock(&key)
        .ttl(ttl)
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    // Let one renewal be confirmed first.
    let first_expiry = guard.grant().unwrap().expires_at;
    eventually("a renewal is confirmed", PROMPTLY, || async {
        guard.grant().unwrap().expires_at != first_expiry
    })
    .await;
    let lost = guard.lost();
    let lost_at = tokio::spawn(async move {
        let reason = lost.await;
        (Instant::now(), reason)
    });
    // Silence: the forwarder accepts and holds connections, forwarding
    // nothing. Every renewal confirmed was sent before this.
    proxy.pause();
    let paused = Instant::now();
    let (thief, thief_answered) = eventually_some(
        "another client gets the lock once the lease ran out",
        PROMPTLY,
        || async {
            let guard = direct.lock(&key).try_acquire().await.ok()??;
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
        lost_at < paused + ttl,
        "lost {:?} after the pause: not before the TTL ran out since the last confirmed renewal",
        lost_at - paused
    );
    assert!(lost_at <= thief_answered, "the next holder got it first");
    assert!(thief.token() > guard.token());
    proxy.restore();
    assert!(matches!(guard.release().await, Err(Error::LeaseLost(_))));
    thief.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c07_a_guard_is_released_when_its_scope_ends_or_panics() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c07");
    {
        let guard = c.lock(&key).acquire().await.unwrap();
        assert!(c.locks().status(&key).await.unwrap().held);
        assert!(guard.token() > 0);
    }
    eventually("the scope's lock is free", PROMPTLY, || async {
        !c.locks().status(&key).await.unwrap().held
    })
    .await;

    let task = {
        let (c, key) = (c.clone(), key.clone());
        tokio::spawn(async move {
            let _guard = c.lock(&key).acquire().await.unwrap();
            assert!(c.locks().status(&key).await.unwrap().held);
            panic!("the work failed");
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    eventually(
        "the lock of the scope that panicked is free",
        PROMPTLY,
        || async { !c.locks().status(&key).await.unwrap().held },
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn c08_tokens_increase_and_validate_refuses_an_older_one() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c08");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = c.lock(&key).try_acquire().await.unwrap().expect("free");
        tokens.push(guard.token());
        guard.release().await.unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let guard = c.lock(&key).try_acquire().await.unwrap().expect("free");
    assert!(guard.token() > tokens[2]);
    let current = c.locks().validate(&key, guard.token()).await.unwrap();
    assert!(current.valid, "{current:?}");
    let stale = c.locks().validate(&key, tokens[2]).await.unwrap();
    assert!(!stale.valid, "{stale:?}");
    assert_eq!(stale.token, Some(guard.token()));
    guard.release().await.unwrap();
    env.stop().await;
}

// --- Failures and retries ---

/// A client of `url` retrying as `attempts` tries from `base` doubling,
/// each call bounded by `deadline`.
fn retrying(env: &Env, url: &str, attempts: u32, base: Duration, deadline: Duration) -> Client {
    Client::builder(url)
        .api_key(env.var("LOCKBROKER_API_KEY"))
        .retry(RetryPolicy {
            attempts,
            base_delay: base,
            max_delay: Duration::from_secs(2),
        })
        .slack(deadline)
        .build()
        .unwrap()
}

#[tokio::test]
async fn c09_unavailable_and_refused_connections_are_retried_within_the_deadline() {
    let env = Env::start().await;
    let key = unique("c09");
    // 503 twice, then the broker.
    let flaky = StandIn::start(env.plain_addr(), |n| {
        if n < 2 {
            Act::Unavailable
        } else {
            Act::Forward
        }
    })
    .await;
    let base = Duration::from_millis(100);
    let c = retrying(&env, flaky.url(), 4, base, PROMPTLY);
    let guard = c.lock(&key).try_acquire().await.unwrap().expect("granted");
    let tries: Vec<_> = flaky.requests_to("/acquire");
    assert_eq!(tries.len(), 3, "two 503s, then the grant: {tries:?}");
    // Jittered (half to all of it), doubling: at least base/2, then base.
    let (first, second) = (tries[1].0 - tries[0].0, tries[2].0 - tries[1].0);
    assert!(first >= base / 2, "first retry after {first:?}");
    assert!(second >= base, "second retry after {second:?}");
    guard.release().await.unwrap();

    // Always 503, a deadline shorter than the retries: the typed
    // "unavailable" by the deadline, not after.
    let down = StandIn::start(env.plain_addr(), |_| Act::Unavailable).await;
    let deadline = Duration::from_millis(400);
    let c = retrying(&env, down.url(), 10, Duration::from_millis(200), deadline);
    let started = Instant::now();
    let err = c.lock(&key).try_acquire().await.unwrap_err();
    // Typed "unavailable"; or, when a retry was still in flight at the
    // deadline (a loaded machine answers late), the deadline's own typed
    // error: an acquire sent and not answered is never taken for refused.
    assert!(
        err.code() == Some(ErrorCode::Unavailable) || matches!(err, Error::Timeout(_)),
        "{err}"
    );
    assert!(
        started.elapsed() <= deadline + Duration::from_millis(200),
        "failed {:?} after the start",
        started.elapsed()
    );
    assert!(down.requests_to("/acquire").len() >= 2, "it retried");

    // A port nothing listens on: retried, then the typed failure, by the
    // deadline.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let nowhere = format!("http://127.0.0.1:{port}");
    let c = retrying(&env, &nowhere, 3, Duration::from_millis(40), PROMPTLY);
    let started = Instant::now();
    let err = c.locks().status(&key).await.unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(60), "it retried");
    let c = retrying(&env, &nowhere, 10, Duration::from_millis(200), deadline);
    let started = Instant::now();
    let err = c.locks().status(&key).await.unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err}");
    assert!(started.elapsed() <= deadline + Duration::from_millis(200));
    env.stop().await;
}

/// Checks that `call` is refused with `code` after exactly one request
/// through `counter`.
async fn refused_once<T: std::fmt::Debug>(
    counter: &StandIn,
    what: &str,
    code: ErrorCode,
    call: impl std::future::Future<Output = lockbroker_client::Result<T>>,
) {
    let before = counter.requests().len();
    let err = call.await.expect_err(what);
    assert_eq!(err.code(), Some(code), "{what}: {err}");
    let after = counter.requests();
    assert_eq!(after.len(), before + 1, "{what}: {:?}", &after[before..]);
}

#[tokio::test]
async fn c10_refusals_are_answered_after_one_request() {
    let env = Env::start().await;
    // A forwarder that counts the requests reaching the broker.
    let counter = StandIn::start(env.plain_addr(), |_| Act::Forward).await;
    let c = retrying(&env, counter.url(), 4, Duration::from_millis(10), PROMPTLY);
    let key = unique("c10");
    let holder = c.lock(&key).try_acquire().await.unwrap().expect("free");

    refused_once(&counter, "400", ErrorCode::BadRequest, async {
        c.locks().history(&key, Some(0)).await
    })
    .await;
    let stranger = c.with_api_key("not-a-key");
    refused_once(&counter, "401", ErrorCode::Unauthenticated, async {
        stranger.locks().status(&key).await
    })
    .await;
    let admin = c.with_api_key(env.var("LOCKBROKER_ADMIN_TOKEN"));
    refused_once(&counter, "404", ErrorCode::NotFound, async {
        admin
            .admin()
            .force_release("default", &unique("free"))
            .await
    })
    .await;
    refused_once(&counter, "409", ErrorCode::LockHeld, async {
        c.locks().acquire(&key, &AcquireRequest::new("other")).await
    })
    .await;
    let stale = ReleaseRequest {
        owner: "other".into(),
        token: holder.token(),
    };
    refused_once(&counter, "409 lease_lost", ErrorCode::LeaseLost, async {
        c.locks().release(&key, &stale).await
    })
    .await;
    refused_once(&counter, "422", ErrorCode::InvalidKey, async {
        c.locks().status("control\u{1}character").await
    })
    .await;
    holder.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c11_an_acquire_whose_answer_is_lost_is_not_sent_again() {
    let env = Env::start().await;
    let key = unique("c11");
    // Reads each request and closes the connection without a word.
    let closer = StandIn::start(env.plain_addr(), |_| Act::Close).await;
    let c = retrying(&env, closer.url(), 4, Duration::from_millis(10), PROMPTLY);
    let err = c.lock(&key).acquire().await.unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown(_)), "{err}");
    assert!(err.is_unreachable());
    // The call is over: nothing can send it again.
    assert_eq!(closer.requests_to("/acquire").len(), 1);
    let err = c
        .locks()
        .acquire(&key, &AcquireRequest::new("raw"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown(_)), "{err}");
    assert_eq!(closer.requests_to("/acquire").len(), 2, "one more, once");

    // The broker granted it, the answer was lost: the guard's acquire
    // finds its grant out and gives it back (the lease's TTL would keep it
    // far longer than we wait).
    let loser = StandIn::start(env.plain_addr(), |n| {
        if n == 0 {
            Act::LoseAnswer
        } else {
            Act::Forward
        }
    })
    .await;
    let c = retrying(&env, loser.url(), 4, Duration::from_millis(10), PROMPTLY);
    let err = c
        .lock(&key)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown(_)), "{err}");
    assert_eq!(loser.requests_to("/acquire").len(), 1);
    assert_eq!(
        loser.statuses().first(),
        Some(&200),
        "the broker granted it"
    );
    let direct = env.client();
    eventually("the unanswered grant is given back", PROMPTLY, || async {
        !direct.locks().status(&key).await.unwrap().held
    })
    .await;
    let history = direct.locks().history(&key, Some(2)).await.unwrap();
    let events: Vec<_> = history.events.iter().map(|e| e.event).collect();
    assert_eq!(
        events,
        [LockEventKind::Released, LockEventKind::Granted],
        "released by its owner, not expired"
    );
    assert_eq!(loser.requests_to("/acquire").len(), 1, "never sent again");
    env.stop().await;
}

#[tokio::test]
async fn c12_rate_limits_are_waited_out_within_the_deadline() {
    let env = Env::start().await;
    let counter = StandIn::start(env.plain_addr(), |_| Act::Forward).await;
    let limited = env.var("LOCKBROKER_LIMITED_API_KEY");
    let c = Client::new(counter.url(), limited).unwrap();
    let key = unique("c12");
    // A burst of 6 at 2 a second (burst 2): 429s, waited out.
    const CALLS: usize = 6;
    let burst: Vec<_> = (0..CALLS)
        .map(|_| {
            let (c, key) = (c.clone(), key.clone());
            tokio::spawn(async move { c.locks().status(&key).await })
        })
        .collect();
    for call in burst {
        let status = call.await.unwrap().expect("each call succeeds in the end");
        assert!(!status.held);
    }
    let statuses = counter.statuses();
    let throttled = statuses.iter().filter(|s| **s == 429).count();
    assert!(throttled > 0, "the burst met 429s: {statuses:?}");
    assert_eq!(statuses.len(), CALLS + throttled, "{statuses:?}");

    // A deadline shorter than the broker's hint: the typed refusal with
    // its `retry_after`, at once. (Tried until a hint is longer than the
    // deadline: one that a token refills sooner is simply waited out.)
    let deadline = Duration::from_millis(50);
    let hasty = Client::builder(counter.url())
        .api_key(limited)
        .slack(deadline)
        .build()
        .unwrap();
    let once = Client::builder(counter.url())
        .api_key(limited)
        .retry(RetryPolicy::never())
        .build()
        .unwrap();
    let (err, took) = eventually_some("a 429 past the deadline", PROMPTLY, || async {
        // Empty the bucket, then ask.
        while once.locks().status(&key).await.is_ok() {}
        let started = Instant::now();
        let err = hasty.locks().status(&key).await.err()?;
        Some((err, started.elapsed()))
    })
    .await;
    assert!(err.is_throttled(), "{err}");
    assert_eq!(err.code(), Some(ErrorCode::RateLimited));
    let hint = err.retry_after().expect("retry_after_ms");
    assert!(hint > Duration::ZERO);
    assert!(took < deadline + Duration::from_millis(200), "{took:?}");
    env.stop().await;
}

// --- Other kinds and reads ---

#[tokio::test]
async fn c13_a_semaphore_admits_at_most_its_permits() {
    const PERMITS: u32 = 2;
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c13");
    let a = c.semaphore(&key, PERMITS).try_acquire().await.unwrap();
    let b = c.semaphore(&key, PERMITS).try_acquire().await.unwrap();
    let (a, b) = (a.expect("a permit"), b.expect("another"));
    let a_slot = a.grant().unwrap().slot;
    let mut slots = [a_slot, b.grant().unwrap().slot];
    slots.sort_unstable();
    assert_eq!(slots, [0, 1], "slots exposed");
    assert!(a.token() > 0 && b.token() > 0, "tokens exposed");
    assert!(c
        .semaphore(&key, PERMITS)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let status = c.semaphores().status(&key).await.unwrap();
    assert_eq!(status.permits, Some(PERMITS));
    let mut tokens: Vec<_> = status.holders.iter().map(|h| h.token).collect();
    let mut held = [a.token(), b.token()];
    tokens.sort_unstable();
    held.sort_unstable();
    assert_eq!(tokens, held);
    let third = {
        let (c, key) = (c.clone(), key.clone());
        tokio::spawn(async move { c.semaphore(&key, PERMITS).wait(PROMPTLY).acquire().await })
    };
    eventually("the third waits", PROMPTLY, || async {
        c.semaphores().status(&key).await.unwrap().waiters == 1
    })
    .await;
    let a_token = a.token();
    a.release().await.unwrap();
    let third = third.await.unwrap().expect("granted after a release");
    assert_eq!(third.grant().unwrap().slot, a_slot, "the slot released");
    assert!(third.token() > a_token, "a new grant of the slot");

    // Under contention, never more than PERMITS holders at once.
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (c, key, inside, most) = (c.clone(), key.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let permit = c
                    .semaphore(&key, PERMITS)
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
    drop((b, third));
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
    env.stop().await;
}

#[tokio::test]
async fn c14_rwlock_guards_share_reads_and_exclude_a_write() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c14");
    let r1 = c
        .read_lock(&key)
        .try_acquire()
        .await
        .unwrap()
        .expect("a read");
    let r2 = c
        .read_lock(&key)
        .try_acquire()
        .await
        .unwrap()
        .expect("another read");
    assert!(r2.token() > r1.token());
    assert_eq!(r2.grant().map(|g| g.readers), Some(2));
    assert!(c.write_lock(&key).try_acquire().await.unwrap().is_none());
    let status = c.rwlocks().status(&key).await.unwrap();
    assert_eq!((status.readers.len(), status.writer), (2, None));

    // A waiting writer gets the key once both readers let go (one drops
    // its guard, which releases it).
    let writer = {
        let (c, key) = (c.clone(), key.clone());
        tokio::spawn(async move { c.write_lock(&key).wait(PROMPTLY).acquire().await })
    };
    eventually("the writer waits", PROMPTLY, || async {
        c.rwlocks().status(&key).await.unwrap().waiters == 1
    })
    .await;
    assert!(
        c.read_lock(&key).try_acquire().await.unwrap().is_none(),
        "a queued writer blocks new readers"
    );
    let last_read = r2.token();
    r1.release().await.unwrap();
    drop(r2);
    let w = writer.await.unwrap().unwrap();
    assert!(w.token() > last_read);
    let err = c
        .read_lock(&key)
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::LockHeld));
    let writer = c
        .rwlocks()
        .status(&key)
        .await
        .unwrap()
        .writer
        .expect("held");
    assert_eq!(writer.token, w.token());
    w.release().await.unwrap();
    assert!(c.write_lock(&key).try_acquire().await.unwrap().is_some());
    env.stop().await;
}

#[tokio::test]
async fn c15_a_multilock_takes_all_or_none() {
    let env = Env::start().await;
    let c = env.client();
    let keys = [unique("c15-a"), unique("c15-b"), unique("c15-c")];
    let busy = c.lock(&keys[1]).try_acquire().await.unwrap().expect("free");
    assert!(c.multilock(&keys).try_acquire().await.unwrap().is_none());
    for key in [&keys[0], &keys[2]] {
        assert!(
            !c.locks().status(key).await.unwrap().held,
            "{key} was not taken alone"
        );
    }
    let busy_token = busy.token();
    busy.release().await.unwrap();
    let all = c
        .multilock(&keys)
        .try_acquire()
        .await
        .unwrap()
        .expect("all free");
    for key in &keys {
        let status = c.locks().status(key).await.unwrap();
        assert_eq!(status.token, all.token_of(key), "{key}");
        assert!(status.held);
    }
    assert!(all.token_of(&keys[1]).unwrap() > busy_token);
    all.release().await.unwrap();
    for key in &keys {
        assert!(!c.locks().status(key).await.unwrap().held, "{key}");
    }
    env.stop().await;
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

/// Leader events until one names `leader` (a handover may or may not show
/// the vacancy between).
async fn until_leader(events: &mut LeaderEvents, leader: Option<&str>) -> ElectionStatus {
    loop {
        let now = next(events).await;
        if now.leader.as_deref() == leader {
            return now;
        }
    }
}

#[tokio::test]
async fn c16_elections_hand_over_and_observe_reconnects() {
    let env = Env::start().await;
    let c = env.client();
    let proxy = Proxy::start(env.plain_addr()).await;
    let behind_proxy = env.client_at(&format!("http://{}", proxy.addr));
    let name = unique("c16");
    let mut events = behind_proxy.elections().observe(&name).await.unwrap();
    let now = next(&mut events).await;
    assert_eq!((now.leader, now.term), (None, None), "nobody leads yet");

    let a = c
        .election(&name)
        .candidate("node-a")
        .campaign()
        .await
        .unwrap();
    let now = next(&mut events).await;
    assert_eq!(
        (now.leader.as_deref(), now.term),
        (Some("node-a"), Some(a.token()))
    );
    // A second candidate waits; resigning hands leadership to it.
    let mut b = {
        let (c, name) = (c.clone(), name.clone());
        tokio::spawn(async move {
            c.election(&name)
                .candidate("node-b")
                .wait(PROMPTLY)
                .campaign()
                .await
        })
    };
    assert!(c
        .election(&name)
        .candidate("node-c")
        .try_campaign()
        .await
        .unwrap()
        .is_none());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut b)
            .await
            .is_err(),
        "node-b waits while node-a leads"
    );
    let a_term = a.token();
    a.release().await.unwrap(); // resigns
    let b = b
        .await
        .unwrap()
        .expect("node-b leads after the resignation");
    assert!(b.token() > a_term, "a new term");
    let now = until_leader(&mut events, Some("node-b")).await;
    assert_eq!(now.term, Some(b.token()));

    // The stream's connection breaks: it reconnects, and yields what
    // changed meanwhile (and not what it already yielded).
    proxy.cut();
    eventually("the proxy closed the stream", PROMPTLY, || async {
        proxy.connections() == 0
    })
    .await;
    proxy.restore();
    let b_term = b.token();
    b.release().await.unwrap();
    let now = next(&mut events).await;
    assert_eq!((now.leader, now.term), (None, None), "{b_term}: resigned");
    let d = c
        .election(&name)
        .candidate("node-d")
        .campaign()
        .await
        .unwrap();
    let now = next(&mut events).await;
    assert_eq!(
        (now.leader.as_deref(), now.term),
        (Some("node-d"), Some(d.token()))
    );
    d.release().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn c17_history_lists_grants_and_releases_newest_first() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c17");
    let locks = c.locks();
    let a = locks
        .acquire(&key, &AcquireRequest::new("a"))
        .await
        .unwrap();
    let release = ReleaseRequest {
        owner: "a".into(),
        token: a.token,
    };
    locks.release(&key, &release).await.unwrap();
    let b = locks
        .acquire(&key, &AcquireRequest::new("b"))
        .await
        .unwrap();
    let all = locks.history(&key, None).await.unwrap();
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
    let newest = locks.history(&key, Some(1)).await.unwrap();
    assert_eq!(newest.events, all.events[..1].to_vec());
    env.stop().await;
}

#[tokio::test]
async fn c18_listing_pages_through_a_tenants_own_leases() {
    let env = Env::start().await;
    let c = env.client();
    let prefix = format!("{}/", unique("c18"));
    let mut held = Vec::new();
    for key in ["a", "b", "c", "d"] {
        let key = format!("{prefix}{key}");
        held.push(c.lock(key).try_acquire().await.unwrap().expect("free"));
    }
    let elsewhere = c
        .lock(unique("c18-elsewhere"))
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    // Released: no longer listed.
    held.remove(1).release().await.unwrap();
    let live: Vec<_> = held
        .iter()
        .map(|g| {
            let lease = g.grant().expect("held");
            (lease.storage_key, Some(lease.owner), Some(lease.token))
        })
        .collect();
    let listed: Vec<_> = c
        .locks()
        .list_all(&prefix, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.storage_key, s.owner, s.token))
        .collect();
    assert_eq!(listed, live);

    // Page by page, one at a time: each live lock once, in key order.
    let mut paged = Vec::new();
    let mut cursor = None;
    for pages in 1.. {
        let page = c
            .locks()
            .list(&prefix, Some(1), cursor.as_deref())
            .await
            .unwrap();
        assert!(page.items.len() <= 1, "{page:?}");
        paged.extend(page.items.into_iter().map(|s| s.storage_key));
        assert!(pages <= 10, "the cursor moves on");
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    let expected: Vec<_> = ["a", "c", "d"]
        .iter()
        .map(|k| format!("{prefix}{k}"))
        .collect();
    assert_eq!(paged, expected);

    // Another tenant sees none of them, of any kind.
    let other = env.client_with("LOCKBROKER_OTHER_API_KEY");
    assert!(other.locks().list_all("", 100).await.unwrap().is_empty());
    let _permit = c
        .semaphore(format!("{prefix}pool"), 2)
        .acquire()
        .await
        .unwrap();
    assert_eq!(c.semaphores().list_all(&prefix, 10).await.unwrap().len(), 1);
    assert!(other
        .semaphores()
        .list_all("", 10)
        .await
        .unwrap()
        .is_empty());
    drop(elsewhere);
    env.stop().await;
}

/// The next change of an event stream, within [`PROMPTLY`].
async fn next_change(events: &mut Events) -> StreamEvent {
    match tokio::time::timeout(PROMPTLY, events.next())
        .await
        .expect("an event in time")
        .expect("a well-formed event")
    {
        Event::Change(change) => change,
        Event::Reset => panic!("an unexpected reset"),
    }
}

#[tokio::test]
async fn c19_events_stream_changes_and_resume_without_repeats() {
    let env = Env::start().await;
    let proxy = Proxy::start(env.plain_addr()).await;
    let behind_proxy = env.client_at(&format!("http://{}", proxy.addr));
    let c = env.client();
    let prefix = format!("{}/", unique("c19"));
    let mut events = behind_proxy.events(&prefix, None).await.unwrap();

    // Not under the prefix: never in the stream.
    let other = c.lock(unique("c19-other")).acquire().await.unwrap();
    let lock = c.lock(format!("{prefix}a")).acquire().await.unwrap();
    let granted = next_change(&mut events).await;
    assert_eq!(
        (granted.event, granted.kind, granted.token),
        (LockEventKind::Granted, ResourceKind::Lock, lock.token())
    );
    assert_eq!(granted.storage_key, format!("{prefix}a"));
    let permit = c
        .semaphore(format!("{prefix}pool"), 2)
        .acquire()
        .await
        .unwrap();
    let second = next_change(&mut events).await;
    assert_eq!(
        (second.kind, second.token),
        (ResourceKind::Semaphore, permit.token())
    );
    assert!(second.id > granted.id);
    assert_eq!(events.last_id(), Some(second.id));

    // The connection breaks; a change made meanwhile arrives once the
    // stream is open again (it resumed after the last event it got).
    proxy.cut();
    eventually("the proxy closed the stream", PROMPTLY, || async {
        proxy.connections() == 0
    })
    .await;
    let lock_token = lock.token();
    let mut direct = c.events(&format!("{prefix}a"), None).await.unwrap();
    lock.release().await.unwrap();
    // Once another stream has it, the broker's feed is past it: a stream
    // opened from now on (not resumed) would not have it.
    while next_change(&mut direct).await.event != LockEventKind::Released {}
    proxy.restore();
    let released = next_change(&mut events).await;
    assert_eq!(
        (released.event, released.token),
        (LockEventKind::Released, lock_token)
    );
    assert!(released.id > second.id);

    // Reopened after an id: what came after it, nothing already seen.
    let mut replay = c.events(&prefix, Some(second.id)).await.unwrap();
    assert_eq!(next_change(&mut replay).await, released);
    // (As a `Stream` this time.)
    let mut replay = c
        .events(&prefix, Some(granted.id))
        .await
        .unwrap()
        .into_stream();
    for expected in [second, released] {
        let next = std::future::poll_fn(|cx| Pin::new(&mut replay).poll_next(cx));
        let event = tokio::time::timeout(PROMPTLY, next)
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .expect("a well-formed event");
        assert_eq!(event, Event::Change(expected));
    }
    drop((other, permit));
    env.stop().await;
}

// --- Transport ---

/// A client of the HTTPS broker trusting `ca` (the system's roots when
/// `None`) and presenting the certificate `cert` (variables of the
/// certificate and the key).
fn tls_client(env: &Env, ca: Option<&str>, cert: Option<(&str, &str)>) -> Client {
    let mut builder =
        Client::builder(env.var("LOCKBROKER_TLS_URL")).api_key(env.var("LOCKBROKER_API_KEY"));
    if let Some(ca) = ca {
        builder = builder.ca_file(env.var(ca));
    }
    if let Some((cert, key)) = cert {
        builder = builder.client_cert(env.var(cert), env.var(key));
    }
    builder.build().expect("the TLS files are good")
}

#[tokio::test]
async fn c20_mutual_tls_with_the_ca_and_a_client_certificate() {
    let env = Env::start().await;
    let key = unique("c20");
    let client_cert = ("LOCKBROKER_TEST_CLIENT_CERT", "LOCKBROKER_TEST_CLIENT_KEY");
    let stranger = (
        "LOCKBROKER_TEST_STRANGER_CERT",
        "LOCKBROKER_TEST_STRANGER_KEY",
    );
    let c = tls_client(&env, Some("LOCKBROKER_TEST_CA_FILE"), Some(client_cert));
    let guard = c.lock(&key).try_acquire().await.unwrap().expect("free");
    let status = c.locks().status(&key).await.unwrap();
    assert_eq!(status.token, Some(guard.token()));
    guard.release().await.unwrap();
    assert!(!c.locks().status(&key).await.unwrap().held);

    for (what, c) in [
        (
            "no client certificate",
            tls_client(&env, Some("LOCKBROKER_TEST_CA_FILE"), None),
        ),
        (
            "the stranger's certificate",
            tls_client(&env, Some("LOCKBROKER_TEST_CA_FILE"), Some(stranger)),
        ),
        (
            "the system's roots only",
            tls_client(&env, None, Some(client_cert)),
        ),
    ] {
        let err = tokio::time::timeout(PROMPTLY, c.locks().status(&key))
            .await
            .unwrap_or_else(|_| panic!("{what}: a hang"))
            .unwrap_err();
        assert!(matches!(err, Error::Tls(_)), "{what}: {err}");
    }

    // A file that is not there: named, when the client is built.
    let missing = format!("{}.missing", env.var("LOCKBROKER_TEST_CA_FILE"));
    match Client::builder(env.var("LOCKBROKER_TLS_URL"))
        .ca_file(&missing)
        .build()
    {
        Err(Error::TlsFile { path, .. }) => assert_eq!(path.to_str(), Some(missing.as_str())),
        other => panic!("{:?}", other.err()),
    }
    env.stop().await;
}

#[tokio::test]
async fn c21_a_cancelled_acquire_leaves_no_lease_behind() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c21");
    let ttl = Duration::from_secs(60);

    // Cancelled while it waits: the key goes to nobody after the holder.
    let holder = c.lock(&key).try_acquire().await.unwrap().expect("free");
    let waiting = c.lock(&key).ttl(ttl).wait(PROMPTLY).acquire();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting)
            .await
            .is_err(),
        "still waiting when cancelled"
    );
    holder.release().await.unwrap();
    eventually("the key is free", PROMPTLY, || async {
        !c.locks().status(&key).await.unwrap().held
    })
    .await;

    // Cancelled about when it is granted (the holder lets go, the waiter
    // is aborted a moment later): whether the grant came first or not,
    // the key is free shortly after (a lease of 60 s would otherwise
    // outlast the wait).
    for delay_ms in [0, 1, 2, 5, 10, 20] {
        let holder = c.lock(&key).try_acquire().await.unwrap().expect("free");
        let waiter = {
            let (c, key) = (c.clone(), key.clone());
            tokio::spawn(async move { c.lock(&key).ttl(ttl).wait(PROMPTLY).acquire().await })
        };
        eventually("the waiter queues", PROMPTLY, || async {
            c.locks().status(&key).await.unwrap().waiters == 1
        })
        .await;
        holder.release().await.unwrap();
        // The scenario's timing: the cancellation races the grant.
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        waiter.abort();
        // Granted before the abort: the guard is dropped, which releases.
        drop(waiter.await);
        eventually(
            &format!("the key is free (cancelled {delay_ms} ms after the release)"),
            PROMPTLY,
            || async { !c.locks().status(&key).await.unwrap().held },
        )
        .await;
    }
    env.stop().await;
}

// --- Sessions ---

/// The lock `key`'s status: held, in `session`, with `token`.
async fn assert_held_in(c: &Client, key: &str, session: &str, token: u64) {
    let status = c.locks().status(key).await.unwrap();
    assert!(status.held, "{status:?}");
    assert_eq!(status.session.as_deref(), Some(session), "{status:?}");
    assert_eq!(status.token, Some(token), "{status:?}");
}

#[tokio::test]
async fn c22_a_session_keeps_its_locks_alive_and_releases_them_when_closed() {
    let env = Env::start().await;
    let c = env.client();
    let (a, b) = (unique("c22-a"), unique("c22-b"));
    let ttl = Duration::from_secs(3);
    let session = c.session(ttl).await.unwrap();
    let first = session.lock(&a).acquire().await.unwrap();
    let second = session.lock(&b).try_acquire().await.unwrap().expect("free");
    assert!(first.token() > 0 && second.token() > 0);
    assert_held_in(&c, &a, session.id(), first.token()).await;
    assert_held_in(&c, &b, session.id(), second.token()).await;
    let lost = session.lost();
    let first_expiry = session.info().unwrap().expires_at;
    // Time is what is tested: 10 s, more than three TTLs, without a call
    // of the test's.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_held_in(&c, &a, session.id(), first.token()).await;
    assert_held_in(&c, &b, session.id(), second.token()).await;
    assert!(!session.is_lost() && !first.is_lost() && !second.is_lost());
    assert!(
        tokio::time::timeout(Duration::ZERO, lost).await.is_err(),
        "lost() did not resolve"
    );
    assert_ne!(
        session.info().unwrap().expires_at,
        first_expiry,
        "kept alive"
    );
    // The broker refuses to renew a session's lease: had the guards tried,
    // they would have been refused and lost.

    // One released through its handle is free at once; the other stays.
    first.release().await.unwrap();
    assert!(!c.locks().status(&a).await.unwrap().held);
    assert_held_in(&c, &b, session.id(), second.token()).await;

    // Scope exit (`Drop`) closes the session in the background: every
    // lease of it is released and the session is gone.
    let id = session.id().to_owned();
    {
        let _scope = session;
    }
    eventually("the remaining key is free", PROMPTLY, || async {
        !c.locks().status(&b).await.unwrap().held
    })
    .await;
    let gone = c.sessions().status(&id).await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::SessionNotFound), "{gone}");
    assert_eq!(gone.api().map(|e| e.status), Some(404));
    // Closed with its session: nothing left to release, no error.
    second.release().await.unwrap();

    // An explicit close: the key is free right after it answers.
    let session = c.session(ttl).await.unwrap();
    let lock = session.lock(&a).try_acquire().await.unwrap().expect("free");
    assert_held_in(&c, &a, session.id(), lock.token()).await;
    let id = session.id().to_owned();
    session.close().await.unwrap();
    assert!(!c.locks().status(&a).await.unwrap().held);
    assert_eq!(
        c.sessions().status(&id).await.unwrap_err().code(),
        Some(ErrorCode::SessionNotFound)
    );
    assert!(!lock.is_lost());
    env.stop().await;
}

#[tokio::test]
async fn c23_a_session_closed_from_outside_is_lost_once_with_its_leases() {
    let env = Env::start().await;
    let c = env.client();
    let key = unique("c23");
    let ttl = Duration::from_secs(3);
    let session = c.session(ttl).await.unwrap();
    let lock = session
        .lock(&key)
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let (lost, lease_lost) = (session.lost(), lock.lost());
    let closed = c.sessions().close(session.id()).await.unwrap();
    assert_eq!(closed.released, 1);
    let ended = Instant::now();
    let thief = c.lock(&key).try_acquire().await.unwrap().expect("freed");
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("lost() fires within one TTL");
    assert!(ended.elapsed() <= ttl, "{:?}", ended.elapsed());
    match &reason {
        LostReason::Refused(refusal) => {
            assert_eq!(refusal.code, ErrorCode::SessionNotFound, "{refusal}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Every lease of it reports lost, for the same reason; the signal
    // stays fired (once: it never goes back to held).
    let lease_reason = tokio::time::timeout(PROMPTLY, lease_lost)
        .await
        .expect("the lease's lost() fires");
    assert_eq!(lease_reason, reason);
    assert!(session.is_lost() && lock.is_lost());
    assert_eq!(session.lost().await, reason);
    assert!(session.info().is_none());
    // Releasing the lease and closing the lost session answer that it was
    // lost (values, no panic) and leave the new holder's lease alone.
    assert!(matches!(lock.release().await, Err(Error::LeaseLost(_))));
    assert!(matches!(session.close().await, Err(Error::LeaseLost(_))));
    let status = c.locks().status(&key).await.unwrap();
    assert_eq!(
        (status.owner, status.token, status.session),
        (Some(owner_of(&thief)), Some(thief.token()), None)
    );
    thief.release().await.unwrap();
    env.stop().await;
}

/// The keys of C24: a semaphore of [`Kinds::PERMITS`], a rwlock read and
/// another written, a multi-lock's two keys, an election.
struct Kinds {
    pool: String,
    reading: String,
    writing: String,
    keys: [String; 2],
    election: String,
}

/// A lease of every kind, held in one session.
struct EveryKind {
    permit: PermitGuard,
    reader: RwLockGuard,
    writer: RwLockGuard,
    multi: MultiLockGuard,
    leader: LeaderGuard,
}

/// What `GET /v1/sessions/{id}` lists of a lease: kind, storage key,
/// token, slot, mode.
type Listed = (String, String, u64, Option<u32>, Option<String>);

impl Kinds {
    const PERMITS: u32 = 2;
    const CANDIDATE: &'static str = "c24-node";

    fn new(name: &str) -> Kinds {
        Kinds {
            pool: unique(&format!("{name}-pool")),
            reading: unique(&format!("{name}-read")),
            writing: unique(&format!("{name}-write")),
            keys: [unique(&format!("{name}-m1")), unique(&format!("{name}-m2"))],
            election: unique(&format!("{name}-election")),
        }
    }

    /// One lease of each kind, each through the session's own call for
    /// its kind (waiting or not), each granted.
    async fn take(&self, session: &Session) -> EveryKind {
        EveryKind {
            permit: session
                .semaphore(&self.pool, Self::PERMITS)
                .acquire()
                .await
                .unwrap(),
            reader: session.read_lock(&self.reading).acquire().await.unwrap(),
            writer: session
                .write_lock(&self.writing)
                .try_acquire()
                .await
                .unwrap()
                .expect("free"),
            multi: session.multilock(&self.keys).acquire().await.unwrap(),
            leader: session
                .election(&self.election)
                .candidate(Self::CANDIDATE)
                .campaign()
                .await
                .unwrap(),
        }
    }

    /// What `GET /v1/sessions/{id}` should list of `held`: six leases.
    async fn listed(&self, c: &Client, held: &EveryKind) -> Vec<Listed> {
        let permit = held.permit.grant().expect("held");
        let (reader, writer) = (
            held.reader.grant().expect("held"),
            held.writer.grant().expect("held"),
        );
        let election = c.elections().status(&self.election).await.unwrap();
        let mut leases = vec![
            (
                "semaphore".to_owned(),
                permit.storage_key,
                permit.token,
                Some(permit.slot),
                None,
            ),
            (
                "rwlock".to_owned(),
                reader.storage_key,
                reader.token,
                None,
                Some("read".to_owned()),
            ),
            (
                "rwlock".to_owned(),
                writer.storage_key,
                writer.token,
                None,
                Some("write".to_owned()),
            ),
            (
                "election".to_owned(),
                election.storage_key,
                held.leader.token(),
                None,
                None,
            ),
        ];
        let multi = held.multi.grant().expect("held");
        leases.extend(
            multi
                .locks
                .into_iter()
                .map(|l| ("lock".to_owned(), l.storage_key, l.token, None, None)),
        );
        leases.sort();
        leases
    }

    /// Each key's status shows `held`'s lease, in session `id`, with its
    /// token (the election: its candidate and term).
    async fn assert_held(&self, c: &Client, id: &str, held: &EveryKind) {
        let pool = c.semaphores().status(&self.pool).await.unwrap();
        let holders: Vec<_> = pool
            .holders
            .iter()
            .map(|h| (h.token, h.session.as_deref()))
            .collect();
        assert_eq!(holders, [(held.permit.token(), Some(id))], "{pool:?}");
        assert_eq!(pool.permits, Some(Self::PERMITS));
        let reading = c.rwlocks().status(&self.reading).await.unwrap();
        let readers: Vec<_> = reading
            .readers
            .iter()
            .map(|h| (h.token, h.session.as_deref()))
            .collect();
        assert_eq!(readers, [(held.reader.token(), Some(id))], "{reading:?}");
        assert!(reading.writer.is_none(), "{reading:?}");
        let writing = c.rwlocks().status(&self.writing).await.unwrap();
        let writer = writing
            .writer
            .as_ref()
            .map(|h| (h.token, h.session.as_deref()));
        assert_eq!(writer, Some((held.writer.token(), Some(id))), "{writing:?}");
        assert!(writing.readers.is_empty(), "{writing:?}");
        for key in &self.keys {
            let token = held.multi.token_of(key).expect("held");
            assert_held_in(c, key, id, token).await;
        }
        let election = c.elections().status(&self.election).await.unwrap();
        assert_eq!(
            (election.leader.as_deref(), election.term),
            (Some(Self::CANDIDATE), Some(held.leader.token())),
            "{election:?}"
        );
    }

    /// Nothing of them is held: the semaphore has no holder, neither
    /// rwlock a reader or a writer, both multi-lock keys are free and the
    /// election has no leader.
    async fn free(&self, c: &Client) -> bool {
        let pool = c.semaphores().status(&self.pool).await.unwrap();
        let reading = c.rwlocks().status(&self.reading).await.unwrap();
        let writing = c.rwlocks().status(&self.writing).await.unwrap();
        let mut free = pool.holders.is_empty()
            && reading.readers.is_empty()
            && reading.writer.is_none()
            && writing.readers.is_empty()
            && writing.writer.is_none();
        for key in &self.keys {
            free &= !c.locks().status(key).await.unwrap().held;
        }
        free && c
            .elections()
            .status(&self.election)
            .await
            .unwrap()
            .leader
            .is_none()
    }
}

/// What `GET /v1/sessions/{id}` lists now, sorted.
async fn session_leases(c: &Client, id: &str) -> Vec<Listed> {
    let mut leases: Vec<Listed> = c
        .sessions()
        .status(id)
        .await
        .unwrap()
        .leases
        .into_iter()
        .map(|l| (l.kind, l.storage_key, l.token, l.slot, l.mode))
        .collect();
    leases.sort();
    leases
}

impl EveryKind {
    /// Whether any of them knows itself lost.
    fn any_lost(&self) -> bool {
        self.permit.is_lost()
            || self.reader.is_lost()
            || self.writer.is_lost()
            || self.multi.is_lost()
            || self.leader.is_lost()
    }

    /// Whether every guard knows its lease ended (its grant is gone).
    fn all_ended(&self) -> bool {
        self.permit.grant().is_none()
            && self.reader.grant().is_none()
            && self.writer.grant().is_none()
            && self.multi.grant().is_none()
            && self.leader.grant().is_none()
    }

    /// Each lease's `lost()` signal, in one future: every reason.
    fn lost(&self) -> impl std::future::Future<Output = Vec<LostReason>> + 'static {
        let signals = [
            Box::pin(self.permit.lost()) as Pin<Box<dyn std::future::Future<Output = _> + Send>>,
            Box::pin(self.reader.lost()),
            Box::pin(self.writer.lost()),
            Box::pin(self.multi.lost()),
            Box::pin(self.leader.lost()),
        ];
        async move {
            let mut reasons = Vec::new();
            for signal in signals {
                reasons.push(signal.await);
            }
            reasons
        }
    }

    /// Releases each through its own handle: every answer.
    async fn release(self) -> [Result<(), Error>; 5] {
        [
            self.permit.release().await,
            self.reader.release().await,
            self.writer.release().await,
            self.multi.release().await,
            self.leader.release().await,
        ]
    }
}

#[tokio::test]
async fn c24_every_kind_is_held_in_a_session_and_freed_by_its_close() {
    let env = Env::start().await;
    let c = env.client();
    let kinds = Kinds::new("c24");
    let ttl = Duration::from_secs(3);
    let session = c.session(ttl).await.unwrap();
    let id = session.id().to_owned();
    let held = kinds.take(&session).await;
    // Granted in the session: its TTL is theirs, and each is what was
    // asked for.
    let (permit, reader, writer) = (
        held.permit.grant().unwrap(),
        held.reader.grant().unwrap(),
        held.writer.grant().unwrap(),
    );
    let (multi, leader) = (held.multi.grant().unwrap(), held.leader.grant().unwrap());
    assert_eq!(
        [
            permit.ttl_ms,
            reader.ttl_ms,
            writer.ttl_ms,
            multi.ttl_ms,
            leader.ttl_ms
        ],
        [3_000; 5]
    );
    assert_eq!(permit.permits, Kinds::PERMITS);
    assert_eq!((reader.mode, writer.mode), (RwMode::Read, RwMode::Write));
    assert_eq!(multi.locks.len(), 2);
    assert_eq!(leader.leader, Kinds::CANDIDATE);
    kinds.assert_held(&c, &id, &held).await;
    // The session lists all six leases, with the permit's slot and the
    // rwlock leases' modes.
    let six = kinds.listed(&c, &held).await;
    assert_eq!(six.len(), 6, "{six:?}");
    assert_eq!(session_leases(&c, &id).await, six);
    let lost = session.lost();
    let leases_lost = held.lost();
    let first_expiry = session.info().unwrap().expires_at;

    // Time is what is tested: 10 s, more than three TTLs, without a call
    // of the test's.
    tokio::time::sleep(Duration::from_secs(10)).await;
    kinds.assert_held(&c, &id, &held).await;
    assert_eq!(session_leases(&c, &id).await, six, "the same tokens");
    assert!(!session.is_lost() && !held.any_lost());
    assert!(
        tokio::time::timeout(Duration::ZERO, lost).await.is_err(),
        "the session's lost() did not resolve"
    );
    assert!(
        tokio::time::timeout(Duration::ZERO, leases_lost)
            .await
            .is_err(),
        "no lease's lost() resolved"
    );
    assert_ne!(
        session.info().unwrap().expires_at,
        first_expiry,
        "kept alive"
    );
    // The broker refuses to renew a session's lease (400): had any guard
    // renewed its lease on its own, it would have been refused and lost.

    // Scope exit (`Drop`) closes the session: every lease of it is freed.
    {
        let _scope = session;
    }
    eventually("every key is free", PROMPTLY, || async {
        kinds.free(&c).await
    })
    .await;
    let gone = c.sessions().status(&id).await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::SessionNotFound), "{gone}");
    // Closed with their session: nothing is left to release, no error.
    eventually("the guards see the close", PROMPTLY, || async {
        held.all_ended()
    })
    .await;
    assert!(!held.any_lost());
    for released in held.release().await {
        released.unwrap();
    }
    assert!(kinds.free(&c).await);
    env.stop().await;
}

#[tokio::test]
async fn c25_a_wait_that_would_close_a_cycle_of_sessions_is_refused_as_a_deadlock() {
    let env = Env::start().await;
    let c = env.client();
    // B's calls pass a forwarder that counts them: its refused acquire is
    // sent once.
    let counter = StandIn::start(env.plain_addr(), |_| Act::Forward).await;
    let cb = retrying(&env, counter.url(), 4, Duration::from_millis(10), PROMPTLY);
    let (k1, k2) = (unique("c25-k1"), unique("c25-k2"));
    let (owner_a, owner_b) = (unique("c25-a"), unique("c25-b"));
    let ttl = Duration::from_secs(10);
    let a = c.session(ttl).await.unwrap();
    let b = cb.session(ttl).await.unwrap();
    let (id_a, id_b) = (a.id().to_owned(), b.id().to_owned());
    let held_a = a.lock(&k1).acquire().await.unwrap();
    let held_b = b.lock(&k2).acquire().await.unwrap();
    let (stored_k1, stored_k2) = (
        held_a.grant().unwrap().storage_key,
        held_b.grant().unwrap().storage_key,
    );

    // A waits for k2, which B holds.
    let waiting_a = tokio::spawn(
        a.lock(&k2)
            .owner(&owner_a)
            .wait(Duration::from_secs(10))
            .acquire(),
    );
    eventually("A's acquire waits for k2", PROMPTLY, || async {
        c.locks()
            .waiters(&k2)
            .await
            .unwrap()
            .waiters
            .iter()
            .any(|w| w.session.as_deref() == Some(id_a.as_str()))
    })
    .await;

    // B's wait for k1, which A holds, would close the cycle: refused at
    // once, after one request.
    let before = counter.requests_to("/acquire").len();
    let started = Instant::now();
    let err = b
        .lock(&k1)
        .owner(&owner_b)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect_err("a deadlock");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "refused after {took:?}");
    assert_eq!(
        counter.requests_to("/acquire").len(),
        before + 1,
        "not retried: {:?}",
        counter.requests()
    );
    let Error::Deadlock { cycle, refusal } = &err else {
        panic!("not a deadlock: {err:?}");
    };
    assert_eq!((refusal.status, refusal.code), (409, ErrorCode::Deadlock));
    assert_eq!(err.code(), Some(ErrorCode::Deadlock));
    assert_eq!(err.deadlock_cycle(), Some(cycle.as_slice()));
    let steps: Vec<_> = cycle
        .iter()
        .map(|step| {
            (
                step.session.as_str(),
                step.owner.as_str(),
                step.kind.as_str(),
                step.storage_key.as_str(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            (id_b.as_str(), owner_b.as_str(), "lock", stored_k1.as_str()),
            (id_a.as_str(), owner_a.as_str(), "lock", stored_k2.as_str()),
        ],
        "{err}"
    );
    // Nothing was granted or queued for B; A's acquire still waits.
    let k1_status = c.locks().status(&k1).await.unwrap();
    assert_eq!(k1_status.session.as_deref(), Some(id_a.as_str()));
    assert!(c.locks().waiters(&k1).await.unwrap().waiters.is_empty());
    assert!(!waiting_a.is_finished(), "A still waits");
    assert!(c
        .locks()
        .waiters(&k2)
        .await
        .unwrap()
        .waiters
        .iter()
        .any(|w| w.session.as_deref() == Some(id_a.as_str())));

    // Closing B's session frees k2: A's wait is granted it.
    b.close().await.unwrap();
    let got = tokio::time::timeout(PROMPTLY, waiting_a)
        .await
        .expect("A is granted k2 in time")
        .unwrap()
        .unwrap();
    assert_held_in(&c, &k2, &id_a, got.token()).await;
    drop(held_b);
    got.release().await.unwrap();
    held_a.release().await.unwrap();
    a.close().await.unwrap();
    env.stop().await;
}

/// Beyond C24: a lease of every kind held in a session is released
/// through its own handle (free at once, the session holding nothing
/// after); when the session is closed from outside every one of them
/// reports lost with the session's reason (C23 for every kind); and
/// released just as their session is dropped (its close still on its way),
/// each release answers `Ok`, whichever of the two reaches the broker
/// first.
#[tokio::test]
async fn session_leases_of_every_kind_are_released_alone_and_lost_with_their_session() {
    let env = Env::start().await;
    let c = env.client();
    let kinds = Kinds::new("kinds");
    let ttl = Duration::from_secs(3);
    let session = c.session(ttl).await.unwrap();
    let held = kinds.take(&session).await;
    kinds.assert_held(&c, session.id(), &held).await;
    for released in held.release().await {
        released.unwrap();
    }
    assert!(kinds.free(&c).await, "free right after the releases");
    assert!(session.status().await.unwrap().leases.is_empty());
    assert!(!session.is_lost());

    let held = kinds.take(&session).await;
    kinds.assert_held(&c, session.id(), &held).await;
    let (lost, leases_lost) = (session.lost(), held.lost());
    let closed = c.sessions().close(session.id()).await.unwrap();
    assert_eq!(closed.released, 6);
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("lost() fires within one TTL");
    assert!(
        matches!(&reason, LostReason::Refused(r) if r.code == ErrorCode::SessionNotFound),
        "{reason:?}"
    );
    let reasons = tokio::time::timeout(PROMPTLY, leases_lost)
        .await
        .expect("every lease's lost() fires");
    assert_eq!(reasons, vec![reason; 5]);
    for released in held.release().await {
        assert!(matches!(released, Err(Error::LeaseLost(_))), "{released:?}");
    }
    assert!(matches!(session.close().await, Err(Error::LeaseLost(_))));
    assert!(kinds.free(&c).await);

    let session = c.session(ttl).await.unwrap();
    let held = kinds.take(&session).await;
    drop(session);
    for released in held.release().await {
        released.unwrap();
    }
    eventually("every key is free", PROMPTLY, || async {
        kinds.free(&c).await
    })
    .await;
    env.stop().await;
}

// --- The stand-ins (C06, C09, C11) ---

/// What a [`StandIn`] does with the first request of a connection.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Answers `503 unavailable` and closes the connection.
    Unavailable,
    /// Closes the connection without answering.
    Close,
    /// Sends the request to the broker, reads the start of its answer and
    /// closes both connections: the broker answered, the client never
    /// hears it.
    LoseAnswer,
    /// Relays the connection to the broker, both ways, to its end.
    Forward,
}

/// What a stand-in saw: each request line with when it came, and each
/// status line the broker answered.
#[derive(Debug, Default)]
struct Seen {
    requests: Vec<(Instant, String)>,
    statuses: Vec<u16>,
}

/// A small HTTP stand-in in front of the broker: it reads the first
/// request of each connection (the `n`-th connection's) and does what
/// `script(n)` says with it.
struct StandIn {
    url: String,
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl StandIn {
    async fn start(upstream: &str, script: fn(usize) -> Act) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let upstream = upstream.to_owned();
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                for n in 0.. {
                    let Ok((socket, _)) = listener.accept().await else {
                        return;
                    };
                    let _ = socket.set_nodelay(true);
                    tokio::spawn(serve(socket, script(n), upstream.clone(), seen.clone()));
                }
            })
        };
        StandIn { url, seen, task }
    }

    fn url(&self) -> &str {
        &self.url
    }

    /// Every request line seen, with when it came.
    fn requests(&self) -> Vec<(Instant, String)> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// The requests whose line contains `part`.
    fn requests_to(&self, part: &str) -> Vec<(Instant, String)> {
        let mut requests = self.requests();
        requests.retain(|(_, line)| line.contains(part));
        requests
    }

    /// The statuses the broker answered through the stand-in.
    fn statuses(&self) -> Vec<u16> {
        self.seen.lock().unwrap().statuses.clone()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection of a [`StandIn`].
async fn serve(mut inbound: TcpStream, act: Act, upstream: String, seen: Arc<Mutex<Seen>>) {
    let mut up = Lines::requests(seen.clone());
    let Some(request) = read_request(&mut inbound).await else {
        return;
    };
    up.feed(&request);
    match act {
        Act::Unavailable => {
            let body = r#"{"error":{"code":"unavailable","message":"a stand-in answers 503"}}"#;
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = inbound.write_all(answer.as_bytes()).await;
            let _ = inbound.shutdown().await;
        }
        Act::Close => drop(inbound),
        Act::LoseAnswer => {
            let Ok(mut outbound) = TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = outbound.write_all(&request).await;
            let mut chunk = vec![0u8; 16 * 1024];
            if let Ok(n) = outbound.read(&mut chunk).await {
                Lines::statuses(seen).feed(&chunk[..n]);
            }
        }
        Act::Forward => {
            let Ok(mut outbound) = TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = outbound.set_nodelay(true);
            if outbound.write_all(&request).await.is_err() {
                return;
            }
            let (mut in_read, mut in_write) = inbound.split();
            let (mut out_read, mut out_write) = outbound.split();
            let down = Lines::statuses(seen);
            tokio::join!(
                pump(&mut in_read, &mut out_write, up),
                pump(&mut out_read, &mut in_write, down)
            );
        }
    }
}

/// Copies one direction to its end, through `lines`.
async fn pump(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    mut lines: Lines,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => {
                lines.feed(&chunk[..n]);
                if to.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Reads the head and the `content-length` body of one request.
async fn read_request(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.len() < 1 << 20 {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Some(buf);
            }
        }
    }
    None
}

/// Lines of one direction of a connection, as they pass: request lines
/// (`POST /v1/... HTTP/1.1`) or status lines (`HTTP/1.1 429 ...`), noted
/// in a stand-in's [`Seen`]. The API's bodies are JSON or event streams:
/// no line of theirs looks like either.
struct Lines {
    line: Vec<u8>,
    seen: Arc<Mutex<Seen>>,
    requests: bool,
}

impl Lines {
    fn requests(seen: Arc<Mutex<Seen>>) -> Lines {
        Lines {
            line: Vec::new(),
            seen,
            requests: true,
        }
    }

    fn statuses(seen: Arc<Mutex<Seen>>) -> Lines {
        Lines {
            line: Vec::new(),
            seen,
            requests: false,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte != b'\n' {
                if self.line.len() < 8192 {
                    self.line.push(byte);
                }
                continue;
            }
            let line = String::from_utf8_lossy(&self.line).trim_end().to_owned();
            self.line.clear();
            let mut seen = self.seen.lock().unwrap();
            // A body without a final newline runs into the next message's
            // first line: look for the line's end (requests) or its
            // protocol (statuses) anywhere in it.
            if self.requests && line.ends_with(" HTTP/1.1") {
                seen.requests.push((Instant::now(), line));
            } else if let Some(at) = line.rfind("HTTP/1.1 ").filter(|_| !self.requests) {
                let status = &line[at + "HTTP/1.1 ".len()..];
                if let Some(code) = status.get(..3).and_then(|c| c.parse().ok()) {
                    seen.statuses.push(code);
                }
            }
        }
    }
}
