//! A lockbroker policy that grants a freed lock to the waiter with the
//! highest `priority`, the oldest first among equals. Naming and backoff are
//! the default policy's: the key unchanged (empty keys, keys over 255 bytes
//! and keys with control characters rejected), and exponential backoff with
//! full jitter from 10 ms up to 1 s, never giving up.

wit_bindgen::generate!({
    path: "../../wit",
    world: "policy",
});

use exports::lockbroker::policy::backoff::{self, Contention, Decision};
use exports::lockbroker::policy::fairness::{self, Waiter};
use exports::lockbroker::policy::meta::{self, Descriptor};
use exports::lockbroker::policy::naming;

pub const NAME: &str = "priority";
pub const VERSION: &str = "0.1.0";

pub const MAX_KEY_BYTES: usize = 255;
pub const BASE_DELAY_MS: u64 = 10;
pub const MAX_DELAY_MS: u64 = 1000;

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

/// As the default policy: the key itself, if it is 1 to 255 bytes and has no
/// control character.
pub fn storage_key(key: &str) -> Result<String, String> {
    if key.is_empty() {
        return Err("key must not be empty".to_string());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key is {} bytes long; at most {MAX_KEY_BYTES} bytes are allowed",
            key.len()
        ));
    }
    if let Some((at, c)) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(format!(
            "key contains a control character (U+{:04X}) at byte {at}",
            u32::from(c)
        ));
    }
    Ok(key.to_string())
}

/// As the default policy: `min(1000, 10 * 2^min(attempt - 1, 20))` ms.
pub fn ceiling_ms(attempt: u32) -> u64 {
    let exponent = attempt.max(1).saturating_sub(1).min(20);
    BASE_DELAY_MS
        .saturating_mul(1u64 << exponent)
        .min(MAX_DELAY_MS)
}

/// As the default policy: full jitter in `[1, ceiling_ms(attempt)]`.
pub fn delay_ms(attempt: u32, seed: u64) -> u64 {
    1 + seed % ceiling_ms(attempt)
}

struct Policy;

impl meta::Guest for Policy {
    fn describe() -> Descriptor {
        Descriptor {
            name: NAME.to_string(),
            version: VERSION.to_string(),
        }
    }
}

impl naming::Guest for Policy {
    fn storage_key(_tenant: String, key: String) -> Result<String, String> {
        storage_key(&key)
    }
}

impl fairness::Guest for Policy {
    fn pick_next(_key: String, waiters: Vec<Waiter>) -> u32 {
        pick_next(&waiters)
    }
}

impl backoff::Guest for Policy {
    fn next_delay(contention: Contention) -> Decision {
        Decision::RetryAfter(delay_ms(contention.attempt, contention.seed))
    }
}

export!(Policy);

#[cfg(test)]
mod tests {
    use super::*;

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
        let picked = <Policy as fairness::Guest>::pick_next("k".into(), waiters(&[0, 2, 1]));
        assert_eq!(picked, 1);
    }

    #[test]
    fn naming_and_backoff_are_the_defaults() {
        assert_eq!(storage_key("Orders/42").as_deref(), Ok("Orders/42"));
        assert!(storage_key("").is_err());
        assert!(storage_key(&"x".repeat(256)).is_err());
        assert!(storage_key("a\u{1b}b").is_err());
        assert_eq!(delay_ms(1, 0), 1);
        assert_eq!(delay_ms(2, 19), 20);
        assert_eq!(delay_ms(100, 999), 1000);
    }

    #[test]
    fn describes_itself() {
        assert_eq!(<Policy as meta::Guest>::describe().name, "priority");
    }
}
