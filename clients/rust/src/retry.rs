//! How long to wait before trying a call again: on 503 `unavailable`
//! (nothing was granted) and when no connection could be made, a bounded
//! number of times with exponential, jittered backoff, or after the
//! broker's own `retry_after_ms`; on 429 `rate_limited` / `quota_exceeded`
//! once the broker's `retry_after_ms` has passed. Never on any other
//! answer: a 4xx is the broker's decision, not a hiccup. Every wait fits in
//! the call's deadline (`client.rs`) or is not made.

use std::{
    hash::{BuildHasher, Hasher},
    time::Duration,
};

/// How failed calls are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included; 1 never retries.
    pub attempts: u32,
    /// The delay before the first retry; it doubles with each one.
    pub base_delay: Duration,
    /// No delay is longer, whatever the broker suggests.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 4 tries, 100 ms doubling, at most 2 s apart: a broker restart or a
    /// database failover of a second or two is ridden out.
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// One try, no retries.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The delay before retry number `retry` (1 for the first retry), given
    /// the broker's hint if it sent one: the hint when there is one, else
    /// `base_delay * 2^(retry-1)` with jitter (half to all of it, so
    /// clients that failed together do not retry together), never more
    /// than `max_delay`.
    pub fn delay(&self, retry: u32, hint: Option<Duration>) -> Duration {
        let delay = hint.unwrap_or_else(|| {
            let doubled = self
                .base_delay
                .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
            jitter(doubled.min(self.max_delay))
        });
        delay.min(self.max_delay)
    }

    /// The wait before retry number `retry` of a call the broker throttled
    /// (429 `rate_limited` / `quota_exceeded`): its `hint` and a little
    /// more (a tenth to a fifth of it), so that calls throttled together do
    /// not come back in the same instant, never less than the hint (the
    /// broker would refuse again) and not capped by `max_delay` (the call's
    /// deadline decides whether it is waited out). Without a hint, as
    /// [`delay`](Self::delay).
    pub fn throttled_delay(&self, retry: u32, hint: Option<Duration>) -> Duration {
        match hint {
            Some(hint) => hint + jitter(hint / 5),
            None => self.delay(retry, None),
        }
    }
}

/// Somewhere between half of `d` and `d`, from the standard library's
/// per-process random hasher keys (no `rand` dependency for this).
fn jitter(d: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let fraction = 0.5 + (random % 1024) as f64 / 2048.0;
    d.mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_bounds() {
        let policy = RetryPolicy {
            attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        let first = policy.delay(1, None);
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        let third = policy.delay(3, None);
        assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
        for retry in 1..=40 {
            assert!(policy.delay(retry, None) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn delays_are_jittered() {
        let policy = RetryPolicy::default();
        let delays: std::collections::HashSet<_> = (0..32).map(|_| policy.delay(2, None)).collect();
        assert!(delays.len() > 1, "32 draws, one delay: {delays:?}");
    }

    #[test]
    fn a_throttled_call_waits_at_least_the_hint_whatever_the_cap() {
        let policy = RetryPolicy::default();
        for hint in [
            Duration::from_millis(1),
            Duration::from_millis(480),
            Duration::from_secs(5),
        ] {
            let wait = policy.throttled_delay(1, Some(hint));
            assert!(
                wait >= hint && wait <= hint + hint / 5,
                "{hint:?}: {wait:?}"
            );
        }
        assert!(policy.throttled_delay(1, None) <= policy.base_delay);
    }

    #[test]
    fn the_brokers_hint_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(1, Some(Duration::from_millis(730))),
            Duration::from_millis(730)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(60))),
            policy.max_delay
        );
    }
}
