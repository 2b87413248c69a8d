//! A lockbroker policy for tenants that want tidy, case-insensitive keys.
//!
//! naming: the key is lowercased (Unicode `to_lowercase`, so `Orders/42`
//! and `ORDERS/42` are the same lock), then accepted only if it is 1 to 200
//! bytes, starts with `[a-z0-9]` and uses nothing but `[a-z0-9._/-]`. The
//! storage key is `{tenant}/{lowercased key}`. Fairness (FIFO) and backoff
//! (exponential with full jitter, 10 ms to 1 s, never giving up) are the
//! SDK's defaults, the built-in rules.

use lockbroker_policy::{export_policy, Policy};

/// Lowercased, restricted keys under the tenant's prefix.
pub struct TeamPrefix;

impl Policy for TeamPrefix {
    const NAME: &'static str = "team-prefix";
    const VERSION: &'static str = "0.1.0";

    fn storage_key(tenant: &str, key: &str) -> Result<String, String> {
        storage_key(tenant, key)
    }
}

export_policy!(TeamPrefix);

/// The longest key accepted, in bytes, after lowercasing.
pub const MAX_KEY_BYTES: usize = 200;
/// The longest storage key the broker accepts, in bytes: the broker's own
/// constant, so that the two cannot disagree.
pub use lockbroker_api::MAX_STORAGE_KEY_BYTES;

fn is_first_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn is_allowed_char(c: char) -> bool {
    is_first_char(c) || matches!(c, '.' | '_' | '/' | '-')
}

/// `'c' (U+0063)`, or just `U+000A` for a control character, for messages.
fn show_char(c: char) -> String {
    if c.is_control() {
        format!("U+{:04X}", u32::from(c))
    } else {
        format!("'{c}' (U+{:04X})", u32::from(c))
    }
}

/// Lowercases `key` and checks it; returns the lowercased key or the reason
/// it is rejected.
pub fn normalize_key(key: &str) -> Result<String, String> {
    let key = key.to_lowercase();
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key must be 1 to {MAX_KEY_BYTES} bytes long after lowercasing; it is {} bytes",
            key.len()
        ));
    }
    let first = key.chars().next().unwrap_or(' ');
    if !is_first_char(first) {
        return Err(format!(
            "key must start with a letter or a digit [a-z0-9]; it starts with {}",
            show_char(first)
        ));
    }
    if let Some((at, c)) = key.char_indices().find(|&(_, c)| !is_allowed_char(c)) {
        return Err(format!(
            "key may only contain [a-z0-9._/-] after lowercasing; found {} at byte {at}",
            show_char(c)
        ));
    }
    Ok(key)
}

/// The storage key `{tenant}/{lowercased key}`, or the reason `key` is
/// rejected.
pub fn storage_key(tenant: &str, key: &str) -> Result<String, String> {
    let key = normalize_key(key)?;
    let storage = format!("{tenant}/{key}");
    // A long tenant name could push a valid key over the broker's limit:
    // reject it here with a reason rather than fail the call.
    if storage.len() > MAX_STORAGE_KEY_BYTES {
        return Err(format!(
            "key is too long for tenant '{tenant}': the storage key would be {} bytes, \
             at most {MAX_STORAGE_KEY_BYTES} are allowed",
            storage.len()
        ));
    }
    Ok(storage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockbroker_policy::bindings::exports::lockbroker::policy::{backoff, fairness, meta};
    use lockbroker_policy::{Contention, Decision, Exports};

    type Exported = Exports<TeamPrefix>;

    #[test]
    fn prefixes_with_the_tenant_and_lowercases() {
        assert_eq!(
            storage_key("acme", "orders/42").as_deref(),
            Ok("acme/orders/42")
        );
        assert_eq!(
            storage_key("acme", "Orders/42").as_deref(),
            Ok("acme/orders/42")
        );
        assert_eq!(
            storage_key("acme", "ORDERS/42").as_deref(),
            Ok("acme/orders/42")
        );
        assert_eq!(
            storage_key("self-check", "self-check").as_deref(),
            Ok("self-check/self-check")
        );
        assert_eq!(
            storage_key("t", "0a.b_c-d/e").as_deref(),
            Ok("t/0a.b_c-d/e")
        );
    }

    #[test]
    fn unicode_lowercasing_happens_before_the_checks() {
        // KELVIN SIGN lowercases to ASCII 'k'.
        assert_eq!(normalize_key("\u{212A}ey").as_deref(), Ok("key"));
        // 'É' lowercases to 'é', which is not allowed.
        let reason = normalize_key("CAFÉ").unwrap_err();
        assert!(reason.contains("[a-z0-9._/-]"), "{reason}");
        assert!(reason.contains('é'), "{reason}");
    }

    #[test]
    fn length_rule() {
        let reason = normalize_key("").unwrap_err();
        assert!(reason.contains("1 to 200 bytes"), "{reason}");
        assert_eq!(normalize_key(&"a".repeat(200)), Ok("a".repeat(200)));
        let reason = normalize_key(&"a".repeat(201)).unwrap_err();
        assert!(
            reason.contains("1 to 200 bytes") && reason.contains("201"),
            "{reason}"
        );
        // 200 uppercase ASCII letters are 200 bytes once lowercased too.
        assert_eq!(normalize_key(&"A".repeat(200)), Ok("a".repeat(200)));
    }

    #[test]
    fn first_char_rule() {
        for key in ["_a", ".a", "/a", "-a", " a"] {
            let reason = normalize_key(key).unwrap_err();
            assert!(reason.contains("must start with"), "{key:?}: {reason}");
        }
        assert!(normalize_key("a").is_ok());
        assert!(normalize_key("7").is_ok());
        assert!(normalize_key("Z").is_ok());
    }

    #[test]
    fn alphabet_rule() {
        for key in ["a b", "a:b", "a\nb", "a\\b", "a+b", "a@b", "ünï"] {
            let reason = normalize_key(key).unwrap_err();
            assert!(
                reason.contains("[a-z0-9._/-]") || reason.contains("must start with"),
                "{key:?}: {reason}"
            );
        }
        assert_eq!(
            normalize_key("ab cd").unwrap_err(),
            "key may only contain [a-z0-9._/-] after lowercasing; found ' ' (U+0020) at byte 2"
        );
        assert_eq!(
            normalize_key("ab\ncd").unwrap_err(),
            "key may only contain [a-z0-9._/-] after lowercasing; found U+000A at byte 2"
        );
        assert_eq!(
            normalize_key("_x").unwrap_err(),
            "key must start with a letter or a digit [a-z0-9]; it starts with '_' (U+005F)"
        );
    }

    #[test]
    fn storage_key_fits_the_broker_limit() {
        assert_eq!(MAX_STORAGE_KEY_BYTES, 512);
        let tenant = "t".repeat(312);
        let key = "k".repeat(199);
        assert_eq!(storage_key(&tenant, &key).map(|s| s.len()), Ok(512));
        let reason = storage_key(&tenant, &format!("{key}k")).unwrap_err();
        assert!(reason.contains("512"), "{reason}");
    }

    #[test]
    fn fifo_and_default_backoff() {
        assert_eq!(
            <Exported as fairness::Guest>::pick_next("k".into(), Vec::new()),
            0
        );
        for (attempt, seed, delay) in [(1, 0, 1), (4, 79, 80), (40, 123_456, 457)] {
            let contention = Contention {
                attempt,
                waited_ms: 0,
                budget_ms: 0,
                waiters: 0,
                lease_remaining_ms: 0,
                seed,
            };
            let decision = <Exported as backoff::Guest>::next_delay(contention);
            assert!(
                matches!(decision, Decision::RetryAfter(ms) if ms == delay),
                "{attempt} {seed}"
            );
        }
    }

    #[test]
    fn describes_itself() {
        assert_eq!(<Exported as meta::Guest>::describe().name, "team-prefix");
    }
}
