//! A lockbroker policy that grants a freed lock to the waiter with the
//! highest `priority`, the oldest first among equals. Naming and backoff are
//! the SDK's defaults, the built-in rules: the key unchanged (empty keys,
//! keys over 255 bytes and keys with control characters rejected), and
//! exponential backoff with full jitter from 10 ms up to 1 s, never giving
//! up.

use lockbroker_policy::{export_policy, Policy, Waiter};

/// Highest priority first.
pub struct Priority;

impl Policy for Priority {
    const NAME: &'static str = "priority";
    const VERSION: &'static str = "0.1.0";

    fn pick_next(_key: &str, waiters: &[Waiter]) -> u32 {
        pick_next(waiters)
    }
}

export_policy!(Priority);

/// The index of the waiter with the highest priority; among waiters of equal
/// priority, the lowest index (the oldest, as the broker lists them oldest
/// first). 0 for an empty list, which the broker never sends.
pub fn pick_next(waiters: &[Waiter]) -> u32 {
    let mut best = 0usize;
    for (i, w) in waiters.iter().enumerate().skip(1) {
        if w.priority > waiters[best].priority {
            best = i;
        }
    }
    // The broker never sends more than u32::MAX waiters (the list length is
    // a u32 in the canonical ABI), so this never saturates.
    u32::try_from(best).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockbroker_policy::bindings::exports::lockbroker::policy::{
        backoff, fairness, meta, naming,
    };
    use lockbroker_policy::{Contention, Decision, Exports};

    type Exported = Exports<Priority>;

    fn waiters(priorities: &[i32]) -> Vec<Waiter> {
        priorities
            .iter()
            .enumerate()
            .map(|(i, &priority)| Waiter {
                id: 100 + i as u64,
                owner: format!("owner-{i}"),
                priority,
                enqueued_at_ms: 1_000 + i as u64,
                attempts: 0,
            })
            .collect()
    }

    #[test]
    fn picks_the_highest_priority() {
        assert_eq!(pick_next(&waiters(&[0])), 0);
        assert_eq!(pick_next(&waiters(&[0, 5, 3])), 1);
        assert_eq!(pick_next(&waiters(&[1, 2, 3])), 2);
        assert_eq!(pick_next(&waiters(&[-5, -1, -3])), 1);
        assert_eq!(pick_next(&waiters(&[i32::MIN, i32::MAX, 0])), 1);
    }

    #[test]
    fn oldest_first_among_equals() {
        assert_eq!(pick_next(&waiters(&[0, 0, 0])), 0);
        assert_eq!(pick_next(&waiters(&[1, 7, 3, 7, 7])), 1);
        assert_eq!(pick_next(&waiters(&[-2, -2, -9])), 0);
        assert_eq!(pick_next(&waiters(&[0, 9, 9])), 1);
    }

    #[test]
    fn pick_through_the_export() {
        let picked = <Exported as fairness::Guest>::pick_next("k".into(), waiters(&[0, 2, 1]));
        assert_eq!(picked, 1);
    }

    #[test]
    fn naming_and_backoff_are_the_defaults() {
        let storage_key =
            |key: &str| <Exported as naming::Guest>::storage_key("acme".into(), key.into());
        assert_eq!(storage_key("Orders/42").as_deref(), Ok("Orders/42"));
        assert!(storage_key("").is_err());
        assert!(storage_key(&"x".repeat(256)).is_err());
        assert!(storage_key("a\u{1b}b").is_err());
        let delay_ms = |attempt, seed| {
            let contention = Contention {
                attempt,
                waited_ms: 40,
                budget_ms: 5_000,
                waiters: 2,
                lease_remaining_ms: 900,
                seed,
            };
            match <Exported as backoff::Guest>::next_delay(contention) {
                Decision::RetryAfter(ms) => ms,
                Decision::GiveUp => panic!("gave up"),
            }
        };
        assert_eq!(delay_ms(1, 0), 1);
        assert_eq!(delay_ms(2, 19), 20);
        assert_eq!(delay_ms(100, 999), 1000);
    }

    #[test]
    fn describes_itself() {
        assert_eq!(<Exported as meta::Guest>::describe().name, "priority");
    }
}
