//! The built-in policy: what a tenant without a plugin gets, and what a
//! failing fairness or backoff plugin falls back to. The rules themselves
//! are `lockbroker-policy-rules` (`plugins/rules`), which the policy SDK
//! and so `plugins/default` use too: this file only adapts them to the
//! broker's types.

use lockbroker_policy_rules as rules;

use super::{Contention, Decision, Descriptor, Policy, PolicyFault, Waiter};

/// Longest client key the built-in naming accepts, in bytes.
pub use rules::MAX_KEY_BYTES;

/// Identity naming, FIFO, exponential backoff with full jitter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Builtin;

/// The built-in naming rule: the key itself, unless it is empty, longer
/// than 255 bytes or contains a control character.
pub fn storage_key(key: &str) -> Result<String, String> {
    rules::storage_key(key)
}

/// Oldest first.
pub fn pick_next(waiters: &[Waiter]) -> u32 {
    rules::pick_next(waiters)
}

/// Full jitter: a uniform delay in `[1, ceiling]` where the ceiling doubles
/// from 10 ms with every failed try, up to 1 s. It never gives up: the
/// client's `wait_ms` is the budget, enforced by the broker.
pub fn next_delay(contention: &Contention) -> Decision {
    Decision::RetryAfter(rules::delay_ms(contention.attempt, contention.seed))
}

impl Policy for Builtin {
    fn describe(&self) -> Result<Descriptor, PolicyFault> {
        Ok(Descriptor {
            name: "builtin".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        })
    }

    fn storage_key(&self, _tenant: &str, key: &str) -> Result<Result<String, String>, PolicyFault> {
        Ok(storage_key(key))
    }

    fn pick_next(&self, _key: &str, waiters: &[Waiter]) -> Result<u32, PolicyFault> {
        Ok(pick_next(waiters))
    }

    fn next_delay(&self, contention: &Contention) -> Result<Decision, PolicyFault> {
        Ok(next_delay(contention))
    }

    fn always_oldest(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contention(attempt: u32, seed: u64) -> Contention {
        Contention {
            attempt,
            seed,
            ..Contention::default()
        }
    }

    #[test]
    fn naming_is_identity_with_limits() {
        assert_eq!(storage_key("job-1").unwrap(), "job-1");
        assert_eq!(storage_key("Job ").unwrap(), "Job ");
        assert_eq!(storage_key("ключ/キー").unwrap(), "ключ/キー");
        assert!(storage_key("").is_err());
        assert!(storage_key(&"x".repeat(255)).is_ok());
        assert!(storage_key(&"x".repeat(256)).unwrap_err().contains("256"));
        assert!(storage_key("a\nb").is_err());
        assert!(storage_key("a\u{7f}").is_err());
    }

    #[test]
    fn backoff_ceiling_doubles_to_a_cap() {
        let ceiling = |attempt| match next_delay(&contention(attempt, u64::MAX - 1)) {
            Decision::RetryAfter(ms) => ms,
            Decision::GiveUp => panic!("never gives up"),
        };
        // seed % ceiling == ceiling - 1 for these, so the delay is the ceiling.
        assert_eq!(next_delay(&contention(1, 9)), Decision::RetryAfter(10));
        assert_eq!(next_delay(&contention(2, 19)), Decision::RetryAfter(20));
        assert_eq!(next_delay(&contention(0, 9)), Decision::RetryAfter(10));
        assert!(ceiling(40) <= rules::MAX_DELAY_MS);
        assert_eq!(
            next_delay(&contention(u32::MAX, 999)),
            Decision::RetryAfter(1000)
        );
    }

    #[test]
    fn backoff_is_jittered_within_bounds() {
        for seed in 0..500u64 {
            let Decision::RetryAfter(ms) = next_delay(&contention(3, seed * 7919)) else {
                panic!("gave up")
            };
            assert!((1..=40).contains(&ms), "{ms}");
        }
        assert_eq!(next_delay(&contention(3, 0)), Decision::RetryAfter(1));
    }

    #[test]
    fn fifo_picks_the_oldest() {
        assert_eq!(pick_next(&[Waiter::default(), Waiter::default()]), 0);
    }
}
