//! Waiting for a condition instead of sleeping: a test that sleeps "long
//! enough" is slow when the machine is idle and flaky when it is busy, and
//! says nothing about what it waits for. `eventually` polls the condition,
//! returns as soon as it holds and fails with the test's own words when it
//! does not hold in time.

use std::{
    future::Future,
    time::{Duration, Instant},
};

/// How often a condition is tried: short enough that tests do not idle,
/// long enough not to hammer a broker or a database.
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// Waits until `check` answers true, trying it every [`POLL_EVERY`].
///
/// # Panics
/// With `what` when `timeout` passes first, including when one try of
/// `check` itself has not finished by then (a check that hangs on a cut
/// connection must not hang the test).
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(what, timeout, || {
        let once = check();
        async move { once.await.then_some(()) }
    })
    .await;
}

/// Waits until `check` answers `Some(value)` and returns the value: for
/// waits whose result the test goes on with (a reply, a row).
///
/// # Panics
/// As [`eventually`].
pub async fn eventually_some<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        // `timeout` polls the check once before looking at the clock, so
        // even a zero budget gets one try.
        match tokio::time::timeout(left, check()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            Err(_) => panic!(
                "{what}: not true within {timeout:?} \
                 ({tries} tries; the last one was still running at the deadline)"
            ),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!("{what}: not true within {timeout:?} ({tries} tries)");
        }
        tokio::time::sleep(POLL_EVERY.min(left)).await;
    }
}
