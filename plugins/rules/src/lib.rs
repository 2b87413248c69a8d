//! lockbroker's built-in policy rules, written once.
//!
//! The broker applies them natively to a tenant without a plugin (and as
//! the fallback for a failing fairness or backoff plugin), and the policy
//! SDK (`lockbroker-policy`) makes them the defaults of its `Policy` trait,
//! so the built-in behaviour and `plugins/default` cannot drift apart. The
//! functions take plain values (strings, numbers, slices), not the types of
//! either side, so each side converts in one line.
//!
//! - naming, [`storage_key`]: the key itself; an empty key, a key over
//!   [`MAX_KEY_BYTES`] bytes or a key with a control character is rejected;
//! - fairness, [`pick_next`]: the oldest waiter (FIFO);
//! - backoff, [`delay_ms`]: exponential with full jitter, [`ceiling_ms`]
//!   doubling from [`BASE_DELAY_MS`] to [`MAX_DELAY_MS`]; it never gives up
//!   (the broker enforces the client's `wait_ms` budget);
//! - deadlocks, [`detect_deadlocks`]: every key's session waits are checked
//!   for deadlocks.
//!
//! `no_std` with `alloc` and no dependencies, so it builds anywhere.

#![no_std]

extern crate alloc;

use alloc::format;
use alloc::string::{String, ToString};

/// The longest key the default naming accepts, in bytes (UTF-8).
pub const MAX_KEY_BYTES: usize = 255;
/// The first retry's backoff ceiling, in milliseconds.
pub const BASE_DELAY_MS: u64 = 10;
/// The largest backoff ceiling, in milliseconds.
pub const MAX_DELAY_MS: u64 = 1000;
/// The number of doublings after which the ceiling stops growing; far past
/// the point where [`MAX_DELAY_MS`] caps it, and it keeps the shift in range.
const MAX_DOUBLINGS: u32 = 20;

/// The default naming: checks a client's key and returns the storage key,
/// the key itself.
///
/// # Errors
///
/// The reason, shown to the client with HTTP 422, when the key is empty,
/// over [`MAX_KEY_BYTES`] bytes, or contains a control character (Unicode
/// category Cc: C0, DEL, C1).
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

/// The default fairness: the index of the waiter to grant next, always 0,
/// the oldest (waiters are listed oldest first). Generic so that it takes
/// any side's waiter type.
pub fn pick_next<W>(_waiters: &[W]) -> u32 {
    0
}

/// The backoff ceiling for failed try number `attempt` (1 for the first
/// failure; 0 counts as 1): `min(1000, 10 * 2^min(attempt - 1, 20))` ms.
pub fn ceiling_ms(attempt: u32) -> u64 {
    let doublings = attempt.max(1).saturating_sub(1).min(MAX_DOUBLINGS);
    BASE_DELAY_MS
        .saturating_mul(1u64 << doublings)
        .min(MAX_DELAY_MS)
}

/// The default backoff, full jitter: a delay in `[1, ceiling_ms(attempt)]`
/// milliseconds drawn from `seed` (the random bits the broker hands the
/// policy). The default always retries after it; it never gives up.
pub fn delay_ms(attempt: u32, seed: u64) -> u64 {
    1 + seed % ceiling_ms(attempt)
}

/// The default deadlock detection: whether a session's wait for the key
/// stored as `key` is refused when it would close a cycle of sessions
/// waiting for each other, always `true` (every key is checked).
pub fn detect_deadlocks(_key: &str) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn ceiling_doubles_from_10ms_up_to_1s() {
        let ceilings: Vec<u64> = (0..=9).map(ceiling_ms).collect();
        assert_eq!(ceilings, [10, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        for attempt in [21, 22, 64, u32::MAX - 1, u32::MAX] {
            assert_eq!(ceiling_ms(attempt), 1000, "{attempt}");
        }
    }

    #[test]
    fn delay_is_full_jitter_from_1_to_the_ceiling() {
        assert_eq!(delay_ms(0, 0), 1);
        assert_eq!(delay_ms(1, 0), 1);
        assert_eq!(delay_ms(1, 9), 10);
        assert_eq!(delay_ms(1, 10), 1);
        assert_eq!(delay_ms(3, 39), 40);
        assert_eq!(delay_ms(3, 12_345), 1 + 12_345 % 40);
        assert_eq!(delay_ms(30, 999), 1000);
        assert_eq!(delay_ms(30, 1000), 1);
        assert_eq!(delay_ms(u32::MAX, u64::MAX), 1 + u64::MAX % 1000);
        for attempt in 0..40 {
            for seed in [0, 1, 7, 999, 1000, 1 << 40, u64::MAX - 1, u64::MAX] {
                let delay = delay_ms(attempt, seed);
                assert!(
                    (1..=ceiling_ms(attempt)).contains(&delay),
                    "{attempt} {seed}"
                );
            }
        }
    }

    #[test]
    fn naming_keeps_valid_keys_unchanged() {
        for key in [
            "a",
            "orders/42",
            "Job ",
            "ünïcödé key",
            "ключ/キー",
            "emoji 🔒",
        ] {
            assert_eq!(storage_key(key).as_deref(), Ok(key));
        }
        let longest = "x".repeat(255);
        assert_eq!(storage_key(&longest), Ok(longest.clone()));
        // 127 two-byte characters and one byte: 255 bytes, allowed.
        let multibyte = format!("{}x", "é".repeat(127));
        assert_eq!(storage_key(&multibyte), Ok(multibyte.clone()));
        // A 4-byte character ending exactly at byte 255.
        let emoji = format!("{}🔒", "x".repeat(251));
        assert_eq!(storage_key(&emoji), Ok(emoji.clone()));
    }

    #[test]
    fn naming_rejects_empty_long_and_control_keys() {
        assert_eq!(storage_key("").unwrap_err(), "key must not be empty");
        assert_eq!(
            storage_key(&"x".repeat(256)).unwrap_err(),
            "key is 256 bytes long; at most 255 bytes are allowed"
        );
        assert!(storage_key(&"é".repeat(128)).unwrap_err().contains("256"));
        assert!(storage_key(&format!("{}🔒", "x".repeat(252))).is_err());
        for key in [
            "a\nb",
            "\0",
            "tab\there",
            "del\u{7f}",
            "c1\u{85}",
            "\u{9f}x",
            "x\u{1b}",
        ] {
            let reason = storage_key(key).unwrap_err();
            assert!(reason.contains("control character"), "{key:?}: {reason}");
        }
        assert_eq!(
            storage_key("ab\ncd").unwrap_err(),
            "key contains a control character (U+000A) at byte 2"
        );
        // A zero-width space is a format character (Cf), not a control one.
        assert!(storage_key("\u{200b}zero-width").is_ok());
    }

    #[test]
    fn every_key_is_checked_for_deadlocks() {
        for key in ["a", "plain-x", "self-check", ""] {
            assert!(detect_deadlocks(key), "{key:?}");
        }
    }

    #[test]
    fn fairness_is_fifo() {
        assert_eq!(pick_next(&[5u8]), 0);
        assert_eq!(pick_next(&["newer", "newest", "oldest"]), 0);
    }
}
