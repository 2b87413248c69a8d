//! The SDK's glue and defaults, called natively the way the broker calls a
//! component: through the WIT exports.

use lockbroker_policy::bindings::exports::lockbroker::policy::{backoff, fairness, meta, naming};
use lockbroker_policy::{
    defaults, export_policy, rules, Contention, Decision, Exports, Policy, Waiter,
};

/// Overrides nothing.
struct Plain;

impl Policy for Plain {
    const NAME: &'static str = "plain";
    const VERSION: &'static str = "1.2.3";
}

/// Overrides everything.
struct Custom;

impl Policy for Custom {
    const NAME: &'static str = "custom";
    const VERSION: &'static str = "0.0.1";

    fn storage_key(tenant: &str, key: &str) -> Result<String, String> {
        defaults::storage_key(&format!("{tenant}:{}", key.to_lowercase()))
    }

    fn pick_next(_key: &str, waiters: &[Waiter]) -> u32 {
        waiters.len() as u32 - 1
    }

    fn next_delay(contention: &Contention) -> Decision {
        if contention.attempt > 3 {
            Decision::GiveUp
        } else {
            Decision::RetryAfter(contention.lease_remaining_ms)
        }
    }
}

// The macro expands (natively, to plain `extern "C"` functions).
export_policy!(Custom);

fn waiters(n: u64) -> Vec<Waiter> {
    (0..n)
        .map(|id| Waiter {
            id,
            owner: format!("owner-{id}"),
            priority: -(id as i32),
            enqueued_at_ms: 1_000 + id,
            attempts: 0,
        })
        .collect()
}

fn contention(attempt: u32, seed: u64) -> Contention {
    Contention {
        attempt,
        waited_ms: 5,
        budget_ms: 1_000,
        waiters: 2,
        lease_remaining_ms: 77,
        seed,
    }
}

#[test]
fn describe_says_name_and_version() {
    let plain = <Exports<Plain> as meta::Guest>::describe();
    assert_eq!(
        (plain.name.as_str(), plain.version.as_str()),
        ("plain", "1.2.3")
    );
    assert_eq!(<Exports<Custom> as meta::Guest>::describe().name, "custom");
}

#[test]
fn defaults_are_the_built_in_rules() {
    for key in [
        "job-1",
        "Job ",
        "",
        "a\nb",
        &"x".repeat(255),
        &"x".repeat(256),
    ] {
        assert_eq!(
            <Exports<Plain> as naming::Guest>::storage_key("t".into(), key.into()),
            rules::storage_key(key),
            "{key:?}"
        );
    }
    for n in 1..=4 {
        assert_eq!(
            <Exports<Plain> as fairness::Guest>::pick_next("k".into(), waiters(n)),
            0
        );
    }
    for attempt in [0, 1, 2, 7, 40, u32::MAX] {
        for seed in [0, 9, 999, u64::MAX] {
            assert_eq!(
                <Exports<Plain> as backoff::Guest>::next_delay(contention(attempt, seed)),
                Decision::RetryAfter(rules::delay_ms(attempt, seed))
            );
        }
    }
}

#[test]
fn overrides_are_called_with_the_arguments() {
    assert_eq!(
        <Exports<Custom> as naming::Guest>::storage_key("acme".into(), "Orders/42".into()),
        Ok("acme:orders/42".to_string())
    );
    // "acme:" and 251 bytes: 256 bytes, one over the default limit.
    let too_long = "x".repeat(251);
    assert!(<Exports<Custom> as naming::Guest>::storage_key("acme".into(), too_long).is_err());
    assert_eq!(
        <Exports<Custom> as fairness::Guest>::pick_next("k".into(), waiters(3)),
        2
    );
    assert_eq!(
        <Exports<Custom> as backoff::Guest>::next_delay(contention(3, 1)),
        Decision::RetryAfter(77)
    );
    assert_eq!(
        <Exports<Custom> as backoff::Guest>::next_delay(contention(4, 1)),
        Decision::GiveUp
    );
}
