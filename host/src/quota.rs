//! Quotas between tenants, so that one tenant at its limits never slows
//! another: a request rate per broker ([`Rate`], a token bucket) and a
//! number of live leases ([`Held`]).
//!
//! The rate is this broker's alone (each broker has its bucket): cheap and
//! exact, with no database work for a refused request. The held count is
//! the tenant's across brokers, read from the database; a count reads every
//! lease row of the tenant, so this broker keeps an estimate — the last
//! count plus what it granted and released since — and counts again only
//! when the estimate comes near the limit: at most once a second while over
//! half of it, at most every [`RECOUNT_EVERY`] while a grant would pass it.
//! Grants through other brokers since the last count are seen at the next
//! one, so several brokers may together pass `max_held` by what they
//! granted in that second.

use std::{
    future::Future,
    num::NonZeroU32,
    time::{Duration, Instant},
};

use governor::{
    clock::{Clock, DefaultClock},
    DefaultDirectRateLimiter, Quota, RateLimiter,
};
use tokio::sync::Mutex;

/// A count this old is counted again before a grant over half the limit.
const STALE: Duration = Duration::from_secs(1);
/// While a grant would pass the limit, counted again at most this often
/// (leases expire: the count goes down without a release here).
const RECOUNT_EVERY: Duration = Duration::from_millis(100);
/// The retry hint of a refusal over `max_held`: leases end by expiry or
/// release, which no one can predict.
pub const OVER_QUOTA_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest a refusal past the rate is held before it is answered.
pub const HOLD_REFUSAL_AT_MOST: Duration = Duration::from_millis(20);

/// A tenant's request rate on this broker: `per_s` a second, `burst` at
/// once.
///
/// A refusal is answered at once only to a tenant that is not refused
/// already: refusals of one tenant take turns, each held until a token
/// would be there (at most [`HOLD_REFUSAL_AT_MOST`]). A client that waits
/// its `retry_after_ms` never notices; a tenant whose clients ignore it
/// and retry as fast as they can is answered about as fast as its rate
/// (plus one refusal per hold), so its flood costs the broker little and
/// never crowds out the other tenants' requests.
pub struct Rate {
    limiter: DefaultDirectRateLimiter,
    clock: DefaultClock,
    refusals: Mutex<()>,
}

impl Rate {
    /// # Panics
    /// `per_s` or `burst` is 0 (the config refuses them).
    pub fn new(per_s: u32, burst: u32) -> Rate {
        let nonzero = |n: u32| NonZeroU32::new(n).expect("validated: at least 1");
        let quota = Quota::per_second(nonzero(per_s)).allow_burst(nonzero(burst));
        Rate {
            limiter: RateLimiter::direct(quota),
            clock: DefaultClock::default(),
            refusals: Mutex::new(()),
        }
    }

    /// Takes one request's token, or, after the refusal's turn and hold
    /// (see [`Rate`]), says how long until one is there.
    ///
    /// # Errors
    /// The bucket is empty: the wait until the next token.
    pub async fn admit(&self) -> Result<(), Duration> {
        let Err(wait) = self.try_admit() else {
            return Ok(());
        };
        let _turn = self.refusals.lock().await;
        tokio::time::sleep(wait.min(HOLD_REFUSAL_AT_MOST)).await;
        Err(wait)
    }

    /// Takes one request's token, or says how long until one is there.
    fn try_admit(&self) -> Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// Why a grant was not admitted.
#[derive(Debug)]
pub enum Refused<E> {
    /// It would take the tenant past `max_held`.
    OverQuota,
    /// The count could not be read.
    Count(E),
}

/// A tenant's live leases, as this broker knows them (see the module).
pub struct Held {
    /// `max_held`; a config reload may change it.
    max: std::sync::atomic::AtomicU64,
    state: Mutex<Estimate>,
}

#[derive(Default)]
struct Estimate {
    /// The last count and when it was read.
    counted: Option<(u64, Instant)>,
    /// Granted minus released through this broker since.
    since: i64,
}

impl Estimate {
    fn held(&self) -> u64 {
        let counted = self.counted.map_or(0, |(n, _)| n);
        u64::try_from(
            i64::try_from(counted)
                .unwrap_or(i64::MAX)
                .saturating_add(self.since),
        )
        .unwrap_or(0)
    }
}

impl Held {
    pub fn new(max: u64) -> Held {
        Held {
            max: max.into(),
            state: Mutex::new(Estimate::default()),
        }
    }

    /// A new `max_held`, from the next grant on (the estimate is kept).
    pub fn set_max(&self, max: u64) {
        self.max.store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// Admits a grant of `n` leases (a multi-lock's keys together), reading
    /// the count with `count` when the estimate is not enough. An admitted
    /// grant is counted at once; [`Held::settle`] takes it back if it was
    /// not made.
    ///
    /// # Errors
    /// [`Refused::OverQuota`], or the count's error.
    pub async fn admit<E, F>(&self, n: u64, count: impl FnOnce() -> F) -> Result<(), Refused<E>>
    where
        F: Future<Output = Result<u64, E>>,
    {
        self.admit_at(Instant::now(), n, count).await
    }

    /// [`Held::admit`] at the time `now`.
    async fn admit_at<E, F>(
        &self,
        now: Instant,
        n: u64,
        count: impl FnOnce() -> F,
    ) -> Result<(), Refused<E>>
    where
        F: Future<Output = Result<u64, E>>,
    {
        let max = self.max.load(std::sync::atomic::Ordering::Relaxed);
        let mut state = self.state.lock().await;
        let wanted = state.held().saturating_add(n);
        let recount = match state.counted {
            None => true,
            Some((_, at)) => {
                let age = now.saturating_duration_since(at);
                (wanted > max / 2 && age >= STALE) || (wanted > max && age >= RECOUNT_EVERY)
            }
        };
        if recount {
            let counted = count().await.map_err(Refused::Count)?;
            *state = Estimate {
                counted: Some((counted, now)),
                since: 0,
            };
        }
        if state.held().saturating_add(n) > max {
            return Err(Refused::OverQuota);
        }
        state.since = state
            .since
            .saturating_add(i64::try_from(n).unwrap_or(i64::MAX));
        Ok(())
    }

    /// After an admitted grant of `n`: if it was not made, it is not held.
    pub async fn settle(&self, n: u64, granted: bool) {
        if !granted {
            self.released(n).await;
        }
    }

    /// `n` leases were released through this broker.
    pub async fn released(&self, n: u64) {
        let mut state = self.state.lock().await;
        state.since = state
            .since
            .saturating_sub(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        sync::{
            atomic::{AtomicU64, Ordering},
            Arc,
        },
    };

    use super::*;

    /// A database that holds `held` leases and counts how often it is read.
    struct Db {
        held: AtomicU64,
        reads: AtomicU64,
    }

    impl Db {
        fn new(held: u64) -> Db {
            Db {
                held: AtomicU64::new(held),
                reads: AtomicU64::new(0),
            }
        }
        async fn count(&self) -> Result<u64, Infallible> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.held.load(Ordering::SeqCst))
        }
        fn reads(&self) -> u64 {
            self.reads.load(Ordering::SeqCst)
        }
    }

    async fn admit(held: &Held, n: u64, db: &Db) -> bool {
        admit_at(held, Instant::now(), n, db).await
    }

    async fn admit_at(held: &Held, now: Instant, n: u64, db: &Db) -> bool {
        match held.admit_at(now, n, || db.count()).await {
            Ok(()) => true,
            Err(Refused::OverQuota) => false,
            Err(Refused::Count(never)) => match never {},
        }
    }

    #[tokio::test]
    async fn grants_stop_at_the_limit_and_a_release_makes_room() {
        let (held, db) = (Held::new(3), Db::new(0));
        for _ in 0..3 {
            assert!(admit(&held, 1, &db).await);
        }
        assert!(!admit(&held, 1, &db).await);
        held.released(1).await;
        assert!(admit(&held, 1, &db).await);
        // A grant that was not made is not held.
        held.settle(1, false).await;
        assert!(admit(&held, 1, &db).await);
        assert!(!admit(&held, 1, &db).await);
    }

    #[tokio::test]
    async fn a_multi_lock_is_admitted_whole_or_not_at_all() {
        let (held, db) = (Held::new(5), Db::new(0));
        assert!(admit(&held, 3, &db).await);
        assert!(!admit(&held, 3, &db).await);
        assert!(admit(&held, 2, &db).await);
    }

    #[tokio::test]
    async fn far_below_the_limit_the_database_is_read_once() {
        let (held, db) = (Held::new(1000), Db::new(10));
        let start = Instant::now();
        for i in 0..100 {
            let now = start + Duration::from_millis(50) * i;
            assert!(admit_at(&held, now, 1, &db).await);
        }
        assert_eq!(db.reads(), 1);
    }

    #[tokio::test]
    async fn expiries_and_other_brokers_are_seen_by_counting_again() {
        let (held, db) = (Held::new(3), Db::new(3));
        let start = Instant::now();
        assert!(!admit_at(&held, start, 1, &db).await);
        // The leases expire: no release here, the count goes down.
        db.held.store(0, Ordering::SeqCst);
        assert!(
            !admit_at(&held, start, 1, &db).await,
            "counted again too soon"
        );
        let later = start + RECOUNT_EVERY;
        assert!(admit_at(&held, later, 1, &db).await);
        // Other brokers grant the rest: seen once the count is a second old.
        db.held.store(3, Ordering::SeqCst);
        assert!(!admit_at(&held, later + STALE, 1, &db).await);
        assert_eq!(db.reads(), 3);
    }

    #[tokio::test]
    async fn the_rate_allows_its_burst_then_says_how_long_to_wait() {
        let rate = Rate::new(10, 3);
        for _ in 0..3 {
            rate.admit().await.unwrap();
        }
        let wait = rate.admit().await.unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
    }

    #[tokio::test]
    async fn refusals_take_turns_each_held_until_a_token_would_be_there() {
        let rate = Arc::new(Rate::new(1000, 1));
        rate.admit().await.unwrap();
        let started = tokio::time::Instant::now();
        let refusals: Vec<_> = (0..5)
            .map(|_| {
                let rate = rate.clone();
                tokio::spawn(async move { rate.admit().await })
            })
            .collect();
        let mut answered = 0;
        for refusal in refusals {
            if refusal.await.unwrap().is_err() {
                answered += 1;
            }
        }
        // One token a millisecond: five refusals one after the other,
        // each held about a millisecond (some may find a token).
        assert!(answered >= 1);
        assert!(
            started.elapsed() >= Duration::from_millis(answered),
            "{:?}",
            started.elapsed()
        );
        assert!(started.elapsed() <= HOLD_REFUSAL_AT_MOST * 5);
    }
}
