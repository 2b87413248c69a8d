//! The default lockbroker policy as a WebAssembly component: exactly what
//! the broker does without a plugin, since both take their rules from
//! `lockbroker-policy-rules` (the SDK's defaults). Loading `default.wasm`
//! changes nothing; it is there to measure and test the WebAssembly path
//! against the native one.
//!
//! - naming: the storage key is the client's key, unchanged; an empty key, a
//!   key over 255 bytes or a key with a control character is rejected.
//! - fairness: the oldest waiter is granted first (FIFO).
//! - backoff: exponential with full jitter, 10 ms doubling per attempt up to
//!   a 1 s ceiling; it never gives up (the broker enforces the client's
//!   `wait_ms` budget).
//!
//! To write your own policy, start from `plugins/templates/rust`.

use lockbroker_policy::{export_policy, Policy};

/// The built-in rules, every method left at its default.
pub struct Builtin;

impl Policy for Builtin {
    const NAME: &'static str = "default";
    const VERSION: &'static str = "0.1.0";
}

export_policy!(Builtin);

#[cfg(test)]
mod tests {
    use super::*;
    use lockbroker_policy::bindings::exports::lockbroker::policy::{
        backoff, fairness, meta, naming,
    };
    use lockbroker_policy::{rules, Contention, Decision, Exports, Waiter};

    type Exported = Exports<Builtin>;

    #[test]
    fn describes_itself() {
        let d = <Exported as meta::Guest>::describe();
        assert_eq!((d.name.as_str(), d.version.as_str()), ("default", "0.1.0"));
    }

    #[test]
    fn exports_the_built_in_rules() {
        let storage_key =
            |key: &str| <Exported as naming::Guest>::storage_key("t".into(), key.into());
        assert_eq!(storage_key("Orders/42").as_deref(), Ok("Orders/42"));
        assert_eq!(storage_key(""), rules::storage_key(""));
        assert_eq!(storage_key("a\nb"), rules::storage_key("a\nb"));
        let waiters = (0..3)
            .map(|id| Waiter {
                id,
                owner: format!("owner-{id}"),
                priority: id as i32,
                enqueued_at_ms: 1_000 + id,
                attempts: 0,
            })
            .collect();
        assert_eq!(
            <Exported as fairness::Guest>::pick_next("k".into(), waiters),
            0
        );
        let contention = Contention {
            attempt: 1_000_000,
            waited_ms: u64::MAX,
            budget_ms: 0,
            waiters: u32::MAX,
            lease_remaining_ms: 0,
            seed: 5,
        };
        assert_eq!(
            <Exported as backoff::Guest>::next_delay(contention),
            Decision::RetryAfter(6)
        );
    }
}
