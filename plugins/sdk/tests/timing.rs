//! The SDK's optional `timing` hook and the glue of the world
//! `policy-with-timing`, called natively the way the broker calls a
//! component: through the WIT exports. (A test binary of its own: both
//! worlds' glue in one binary would export the same symbols twice.)

use lockbroker_policy::bindings_timing::exports::lockbroker::policy::{
    backoff, fairness, meta, naming, timing,
};
use lockbroker_policy::{
    defaults, export_policy_with_timing, rules, KeyDelays, Policy, TimedExports, Timing,
};

/// Keys under `nightly-` get a minimum hold; its fairness picks the newest.
struct Nightly;

impl Policy for Nightly {
    const NAME: &'static str = "nightly";
    const VERSION: &'static str = "2.0.0";

    fn pick_next(_key: &str, waiters: &[lockbroker_policy::Waiter]) -> u32 {
        waiters.len() as u32 - 1
    }
}

impl Timing for Nightly {
    fn delays(key: &str) -> KeyDelays {
        if key.starts_with("nightly-") {
            KeyDelays {
                lock_delay_ms: None,
                min_hold_ms: Some(60_000),
            }
        } else {
            defaults::delays()
        }
    }
}

/// Implements no `Timing` method: the configured delays.
struct Plain;

impl Policy for Plain {
    const NAME: &'static str = "plain";
    const VERSION: &'static str = "1.0.0";
}

impl Timing for Plain {}

// The macro expands (natively, to plain `extern "C"` functions).
export_policy_with_timing!(Nightly);

#[test]
fn timing_is_asked_per_key_and_defaults_to_the_config() {
    assert_eq!(
        <TimedExports<Nightly> as timing::Guest>::delays("nightly-report".into()),
        KeyDelays {
            lock_delay_ms: None,
            min_hold_ms: Some(60_000)
        }
    );
    assert_eq!(
        <TimedExports<Nightly> as timing::Guest>::delays("other".into()),
        defaults::delays()
    );
    assert_eq!(
        <TimedExports<Plain> as timing::Guest>::delays("nightly-report".into()),
        KeyDelays {
            lock_delay_ms: None,
            min_hold_ms: None
        }
    );
}

#[test]
fn the_other_exports_reach_the_policy_with_their_arguments() {
    let d = <TimedExports<Nightly> as meta::Guest>::describe();
    assert_eq!((d.name.as_str(), d.version.as_str()), ("nightly", "2.0.0"));
    assert_eq!(
        <TimedExports<Nightly> as naming::Guest>::storage_key("t".into(), "Job ".into()),
        rules::storage_key("Job ")
    );
    let waiters: Vec<fairness::Waiter> = (0..3)
        .map(|id| fairness::Waiter {
            id,
            owner: format!("o{id}"),
            priority: 0,
            enqueued_at_ms: 1_000 + id,
            attempts: 0,
        })
        .collect();
    assert_eq!(
        <TimedExports<Nightly> as fairness::Guest>::pick_next("k".into(), waiters),
        2
    );
    let contention = backoff::Contention {
        attempt: 3,
        waited_ms: 5,
        budget_ms: 1_000,
        waiters: 2,
        lease_remaining_ms: 77,
        seed: 9,
    };
    assert_eq!(
        <TimedExports<Nightly> as backoff::Guest>::next_delay(contention),
        backoff::Decision::RetryAfter(rules::delay_ms(3, 9))
    );
}
