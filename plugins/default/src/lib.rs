//! The default lockbroker policy: exactly what the broker does without a
//! plugin, and the template to copy for your own (see README.md).
//!
//! - naming: the storage key is the client's key, unchanged; an empty key, a
//!   key over 255 bytes or a key with a control character is rejected.
//! - fairness: the oldest waiter is granted first (FIFO).
//! - backoff: exponential with full jitter, 10 ms doubling per attempt up to
//!   a 1 s ceiling; it never gives up (the broker enforces the client's
//!   `wait_ms` budget).
//!
//! The trait implementations below are thin: the rules live in plain
//! functions so that they can be unit-tested natively with `cargo test`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "policy",
});

use exports::lockbroker::policy::backoff::{self, Contention, Decision};
use exports::lockbroker::policy::fairness::{self, Waiter};
use exports::lockbroker::policy::meta::{self, Descriptor};
use exports::lockbroker::policy::naming;

/// The name shown in `GET /v1/admin/tenants`.
pub const NAME: &str = "default";
/// This policy's own version.
pub const VERSION: &str = "0.1.0";

/// The longest key accepted, in bytes (UTF-8).
pub const MAX_KEY_BYTES: usize = 255;
/// The first retry's ceiling, in milliseconds.
pub const BASE_DELAY_MS: u64 = 10;
/// The largest ceiling, in milliseconds.
pub const MAX_DELAY_MS: u64 = 1000;

/// Checks a client's key and returns the storage key: the key itself.
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

/// The index of the waiter to grant next: the oldest, always index 0.
pub fn pick_next(_waiters: &[Waiter]) -> u32 {
    0
}

/// The ceiling for failed try number `attempt` (1 for the first failure; 0
/// counts as 1): `min(1000, 10 * 2^min(attempt - 1, 20))` milliseconds.
pub fn ceiling_ms(attempt: u32) -> u64 {
    let exponent = attempt.max(1).saturating_sub(1).min(20);
    BASE_DELAY_MS
        .saturating_mul(1u64 << exponent)
        .min(MAX_DELAY_MS)
}

/// Full jitter: a delay in `[1, ceiling_ms(attempt)]` drawn from `seed`.
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

    fn waiter(id: u64) -> Waiter {
        Waiter {
            id,
            owner: format!("owner-{id}"),
            priority: id as i32,
            enqueued_at_ms: 1_000 + id,
            attempts: 0,
        }
    }

    #[test]
    fn ceiling_doubles_from_10ms_up_to_1s() {
        assert_eq!(ceiling_ms(0), 10, "attempt 0 counts as 1");
        assert_eq!(ceiling_ms(1), 10);
        assert_eq!(ceiling_ms(2), 20);
        assert_eq!(ceiling_ms(3), 40);
        assert_eq!(ceiling_ms(4), 80);
        assert_eq!(ceiling_ms(5), 160);
        assert_eq!(ceiling_ms(6), 320);
        assert_eq!(ceiling_ms(7), 640);
        assert_eq!(ceiling_ms(8), 1000);
        assert_eq!(ceiling_ms(21), 1000);
        assert_eq!(ceiling_ms(22), 1000);
        assert_eq!(ceiling_ms(u32::MAX), 1000);
    }

    #[test]
    fn delay_is_full_jitter_in_1_to_ceiling() {
        assert_eq!(delay_ms(1, 0), 1);
        assert_eq!(delay_ms(0, 0), 1);
        assert_eq!(delay_ms(1, 9), 10);
        assert_eq!(delay_ms(1, 10), 1);
        assert_eq!(delay_ms(3, 39), 40);
        assert_eq!(delay_ms(3, 12345), 1 + 12345 % 40);
        assert_eq!(delay_ms(30, 999), 1000);
        assert_eq!(delay_ms(30, 1000), 1);
        assert_eq!(delay_ms(u32::MAX, u64::MAX), 1 + u64::MAX % 1000);
        for attempt in 0..40 {
            for seed in [0, 1, 7, 999, 1000, 1 << 40, u64::MAX - 1, u64::MAX] {
                let d = delay_ms(attempt, seed);
                assert!(
                    (1..=ceiling_ms(attempt)).contains(&d),
                    "{attempt} {seed} {d}"
                );
            }
        }
    }

    #[test]
    fn backoff_always_retries() {
        let c = Contention {
            attempt: 1_000_000,
            waited_ms: u64::MAX,
            budget_ms: 0,
            waiters: u32::MAX,
            lease_remaining_ms: 0,
            seed: 5,
        };
        assert!(matches!(
            <Policy as backoff::Guest>::next_delay(c),
            Decision::RetryAfter(6)
        ));
    }

    #[test]
    fn naming_is_identity_for_valid_keys() {
        for key in ["a", "orders/42", "ünïcödé key with spaces", "self-check"] {
            assert_eq!(storage_key(key).as_deref(), Ok(key));
        }
        let longest = "x".repeat(255);
        assert_eq!(storage_key(&longest), Ok(longest.clone()));
        // 127 two-byte chars + 1 = 255 bytes: allowed; one more byte is not.
        let multibyte = format!("{}x", "é".repeat(127));
        assert_eq!(multibyte.len(), 255);
        assert!(storage_key(&multibyte).is_ok());
    }

    #[test]
    fn naming_rejects_bad_keys() {
        assert!(storage_key("").unwrap_err().contains("empty"));
        assert!(storage_key(&"x".repeat(256)).unwrap_err().contains("255"));
        assert!(storage_key(&"é".repeat(128)).unwrap_err().contains("255"));
        for key in ["a\nb", "\0", "tab\there", "del\u{7f}", "c1\u{85}"] {
            let reason = storage_key(key).unwrap_err();
            assert!(reason.contains("control character"), "{key:?}: {reason}");
        }
        assert_eq!(
            storage_key("ab\ncd").unwrap_err(),
            "key contains a control character (U+000A) at byte 2"
        );
    }

    #[test]
    fn fairness_is_fifo() {
        assert_eq!(pick_next(&[waiter(0)]), 0);
        assert_eq!(pick_next(&[waiter(5), waiter(9), waiter(1)]), 0);
    }

    #[test]
    fn describes_itself() {
        let d = <Policy as meta::Guest>::describe();
        assert_eq!((d.name.as_str(), d.version.as_str()), ("default", "0.1.0"));
    }
}
