//! A lockbroker policy: case-insensitive keys.
//!
//! Keys are lowercased, so `Orders/42` and `orders/42` are the same lock;
//! then the broker's default checks apply (not empty, at most 255 bytes, no
//! control characters). Fairness (oldest waiter first) and backoff
//! (exponential with full jitter, 10 ms to 1 s) are left at the defaults.
//!
//! Each `Policy` method you do not write keeps the broker's built-in rule:
//! `storage_key` (naming), `pick_next` (fairness) and `next_delay`
//! (backoff). The WIT the broker calls, with every rule about it, is in the
//! SDK (`wit/policy.wit`); `lockbroker_policy::defaults` has the built-in
//! rules to build on.

use lockbroker_policy::{defaults, export_policy, Policy};

/// This policy. It has no state: the broker may run each call in a fresh
/// instance.
pub struct MyPolicy;

impl Policy for MyPolicy {
    /// Shown in `GET /v1/admin/tenants` with the version.
    const NAME: &'static str = "my-policy";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn storage_key(_tenant: &str, key: &str) -> Result<String, String> {
        defaults::storage_key(&key.to_lowercase())
    }

    // To order waiters or pace retries, override these too, e.g. the
    // highest `priority` first:
    //
    // fn pick_next(_key: &str, waiters: &[lockbroker_policy::Waiter]) -> u32 {
    //     let best = (0..waiters.len()).rev().max_by_key(|&i| waiters[i].priority);
    //     best.unwrap_or(0) as u32
    // }
}

export_policy!(MyPolicy);

/// Native unit tests: `cargo test` (no WebAssembly needed).
#[cfg(test)]
mod tests {
    use super::*;
    use lockbroker_policy::{Contention, Decision, Waiter};

    #[test]
    fn keys_are_case_insensitive() {
        assert_eq!(
            MyPolicy::storage_key("team-a", "Orders/42").as_deref(),
            Ok("orders/42")
        );
        assert_eq!(
            MyPolicy::storage_key("team-a", "ORDERS/42").as_deref(),
            Ok("orders/42")
        );
    }

    #[test]
    fn the_default_checks_still_apply() {
        assert!(MyPolicy::storage_key("team-a", "").is_err());
        assert!(MyPolicy::storage_key("team-a", "a\nb").is_err());
        assert!(MyPolicy::storage_key("team-a", &"X".repeat(256)).is_err());
    }

    #[test]
    fn fairness_and_backoff_are_the_defaults() {
        let waiter = |id| Waiter {
            id,
            owner: format!("worker-{id}"),
            priority: id as i32,
            enqueued_at_ms: 1_000 + id,
            attempts: 0,
        };
        assert_eq!(MyPolicy::pick_next("k", &[waiter(1), waiter(2)]), 0);
        let contention = Contention {
            attempt: 2,
            waited_ms: 0,
            budget_ms: 5_000,
            waiters: 1,
            lease_remaining_ms: 0,
            seed: 19,
        };
        assert_eq!(MyPolicy::next_delay(&contention), Decision::RetryAfter(20));
    }
}
