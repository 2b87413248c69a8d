//! What lockbroker's policies in this workspace share, so that each rule is
//! written once:
//!
//! - the default policy's rules as plain functions: [`storage_key`],
//!   [`pick_next`], [`ceiling_ms`] and [`delay_ms`]. They are the same
//!   formulas and messages as `plugins/default/src/lib.rs`, which keeps its
//!   own copy because it is the self-contained template teams copy; a test
//!   below compiles that file and checks that both give the same results;
//! - [`policy!`], the wit-bindgen glue of a policy: the bindings of the world
//!   `policy`, a `Policy` type, its four `Guest` impls calling the rules
//!   given (the default rules for those not given) and the `export!`;
//! - [`fixture`](mod@fixture): the triggers of the misbehaving test
//!   policies under `plugins/fixtures/`, and [`fixture!`], the whole of such
//!   a fixture but its misbehaviour.
//!
//! This crate has no dependency: the macros expand to
//! `wit_bindgen::generate!`, which resolves in the crate calling them, so
//! that crate depends on `wit-bindgen` itself.

pub mod fixture;

/// The template crate, `plugins/default`, compiled here as a module for the
/// tests that check the rules below are the same as its own (its wit path,
/// `../../wit`, resolves from this crate's directory too). Its own unit tests
/// run again here as `template::tests`.
#[cfg(test)]
#[path = "../../default/src/lib.rs"]
mod template;

/// The longest key accepted, in bytes (UTF-8).
pub const MAX_KEY_BYTES: usize = 255;
/// The first retry's ceiling, in milliseconds.
pub const BASE_DELAY_MS: u64 = 10;
/// The largest ceiling, in milliseconds.
pub const MAX_DELAY_MS: u64 = 1000;

/// The default naming: checks a client's key and returns the storage key,
/// the key itself. An empty key, a key over 255 bytes or a key with a
/// control character is rejected.
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

/// The default fairness: the index of the waiter to grant next is always 0,
/// the oldest (FIFO). Generic so that it takes the `Waiter`s of any crate's
/// bindings.
pub fn pick_next<W>(_waiters: &[W]) -> u32 {
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

/// The default backoff, full jitter: a delay in `[1, ceiling_ms(attempt)]`
/// drawn from `seed`. The default policy always retries after it and never
/// gives up (the broker enforces the client's `wait_ms`).
pub fn delay_ms(attempt: u32, seed: u64) -> u64 {
    1 + seed % ceiling_ms(attempt)
}

/// Generates a policy's wit-bindgen glue; call it once, at the crate root of
/// a `cdylib` that depends on `wit-bindgen`.
///
/// It expands to `wit_bindgen::generate!` of the world `policy` (so the
/// crate has the module `exports::lockbroker::policy::{meta, naming,
/// fairness, backoff}` with `Descriptor`, `Waiter`, `Contention` and
/// `Decision`), a unit struct `Policy`, the four `Guest` impls of `Policy`
/// and `export!(Policy)`.
///
/// - `wit`: the path of the repository's `wit/` directory relative to the
///   calling crate's `Cargo.toml`, a string literal (`"../../wit"` for
///   `plugins/NAME`);
/// - `name`, `version`: what `describe` returns (`&str` expressions);
/// - `naming`, `fairness`, `backoff`, each optional (the default rule when
///   left out), in that order: closure-like bodies whose parameters are
///   bound to the export's arguments, by value:
///   - `naming: |tenant, key| ...` with `tenant, key: String`, giving
///     `Result<String, String>` (default: [`storage_key`]`(&key)`);
///   - `fairness: |key, waiters| ...` with `key: String, waiters:
///     Vec<Waiter>`, giving `u32` (default: [`pick_next`]`(&waiters)`);
///   - `backoff: |contention| ...` with `contention: Contention`, giving
///     `Decision` (default: `Decision::RetryAfter(`[`delay_ms`]`(attempt,
///     seed))`).
///
/// ```no_run
/// policy_common::policy! {
///     wit: "../../wit",
///     name: "example",
///     version: "0.1.0",
///     naming: |tenant, key| Ok(format!("{tenant}/{key}")),
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! policy {
    (
        wit: $wit:literal,
        name: $name:expr,
        version: $version:expr
        $(, naming: |$tenant:ident, $key:ident| $naming:expr)?
        $(, fairness: |$fairness_key:ident, $waiters:ident| $fairness:expr)?
        $(, backoff: |$contention:ident| $backoff:expr)?
        $(,)?
    ) => {
        wit_bindgen::generate!({
            path: $wit,
            world: "policy",
        });

        struct Policy;

        impl exports::lockbroker::policy::meta::Guest for Policy {
            fn describe() -> exports::lockbroker::policy::meta::Descriptor {
                exports::lockbroker::policy::meta::Descriptor {
                    name: $name.to_string(),
                    version: $version.to_string(),
                }
            }
        }

        impl exports::lockbroker::policy::naming::Guest for Policy {
            $crate::__naming_impl!($(|$tenant, $key| $naming)?);
        }

        impl exports::lockbroker::policy::fairness::Guest for Policy {
            $crate::__fairness_impl!($(|$fairness_key, $waiters| $fairness)?);
        }

        impl exports::lockbroker::policy::backoff::Guest for Policy {
            $crate::__backoff_impl!($(|$contention| $backoff)?);
        }

        export!(Policy);
    };
}

/// [`policy!`]'s `naming::Guest::storage_key`: the body given, or the
/// default.
#[doc(hidden)]
#[macro_export]
macro_rules! __naming_impl {
    () => {
        $crate::__naming_impl!(|_tenant, key| $crate::storage_key(&key));
    };
    (|$tenant:ident, $key:ident| $body:expr) => {
        fn storage_key(
            $tenant: ::std::string::String,
            $key: ::std::string::String,
        ) -> ::std::result::Result<::std::string::String, ::std::string::String> {
            $body
        }
    };
}

/// [`policy!`]'s `fairness::Guest::pick_next`: the body given, or the
/// default.
#[doc(hidden)]
#[macro_export]
macro_rules! __fairness_impl {
    () => {
        $crate::__fairness_impl!(|_key, waiters| $crate::pick_next(&waiters));
    };
    (|$key:ident, $waiters:ident| $body:expr) => {
        fn pick_next(
            $key: ::std::string::String,
            $waiters: ::std::vec::Vec<exports::lockbroker::policy::fairness::Waiter>,
        ) -> u32 {
            $body
        }
    };
}

/// [`policy!`]'s `backoff::Guest::next_delay`: the body given, or the
/// default.
#[doc(hidden)]
#[macro_export]
macro_rules! __backoff_impl {
    () => {
        $crate::__backoff_impl!(|contention| {
            exports::lockbroker::policy::backoff::Decision::RetryAfter($crate::delay_ms(
                contention.attempt,
                contention.seed,
            ))
        });
    };
    (|$contention:ident| $body:expr) => {
        fn next_delay(
            $contention: exports::lockbroker::policy::backoff::Contention,
        ) -> exports::lockbroker::policy::backoff::Decision {
            $body
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys around every edge of the default naming rules.
    fn keys() -> Vec<String> {
        let mut keys: Vec<String> = [
            "",
            "a",
            "self-check",
            "orders/42",
            "Orders/42",
            "ünïcödé key with spaces",
            "boom",
            "a\nb",
            "ab\ncd",
            "\0",
            "tab\there",
            "del\u{7f}",
            "c1\u{85}",
            "\u{9f}x",
            "x\u{1b}",
            "\u{200b}zero-width",
            "emoji 🔒",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        for n in [254, 255, 256, 300] {
            keys.push("x".repeat(n));
            keys.push(format!("{}\n", "x".repeat(n - 1)));
        }
        for n in [127, 128] {
            keys.push("é".repeat(n));
            keys.push(format!("{}x", "é".repeat(n)));
        }
        keys.push(format!("{}🔒", "x".repeat(251)));
        keys.push(format!("{}🔒", "x".repeat(252)));
        keys
    }

    #[test]
    fn naming_is_the_templates() {
        for key in keys() {
            assert_eq!(storage_key(&key), template::storage_key(&key), "{key:?}");
        }
    }

    #[test]
    fn backoff_is_the_templates() {
        assert_eq!(
            (MAX_KEY_BYTES, BASE_DELAY_MS, MAX_DELAY_MS),
            (
                template::MAX_KEY_BYTES,
                template::BASE_DELAY_MS,
                template::MAX_DELAY_MS
            )
        );
        let attempts = (0..=64).chain([u32::MAX / 2, u32::MAX - 1, u32::MAX]);
        for attempt in attempts {
            assert_eq!(ceiling_ms(attempt), template::ceiling_ms(attempt));
            let seeds = [0, 1, 7, 9, 10, 39, 999, 1000, 12_345, 1 << 40];
            for seed in seeds.into_iter().chain([u64::MAX - 1, u64::MAX]) {
                assert_eq!(
                    delay_ms(attempt, seed),
                    template::delay_ms(attempt, seed),
                    "{attempt} {seed}"
                );
            }
        }
    }

    #[test]
    fn fairness_is_the_templates() {
        use template::exports::lockbroker::policy::fairness::Waiter;
        let waiters: Vec<Waiter> = (0..4)
            .map(|id| Waiter {
                id,
                owner: format!("owner-{id}"),
                priority: 4 - id as i32,
                enqueued_at_ms: 1_000 + id,
                attempts: 0,
            })
            .collect();
        for n in 1..=waiters.len() {
            assert_eq!(pick_next(&waiters[..n]), template::pick_next(&waiters[..n]));
        }
    }

    // Moved from fixture-common.
    #[test]
    fn defaults() {
        assert!(storage_key("").is_err());
        assert!(storage_key(&"x".repeat(256)).is_err());
        assert!(storage_key("a\tb").is_err());
        assert_eq!(delay_ms(0, 9), 10);
        assert_eq!(delay_ms(2, 19), 20);
        assert_eq!(delay_ms(50, 1999), 1000);
    }
}
