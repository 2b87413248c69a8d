//! What the misbehaving test policies under `plugins/fixtures/` (loop, hog,
//! trap) share: the triggers, and with [`fixture!`](crate::fixture!) all of
//! their glue.
//!
//! A loadable fixture must pass the broker's self-check, which calls
//! `describe()`, `storage-key("self-check", "self-check")`,
//! `pick-next("self-check", [a waiter owned by "self-check"])` and
//! `next-delay` with attempt 1, seed 0 and everything else 0. So fixtures
//! behave like the default policy, and misbehave only when triggered:
//!
//! - naming: when the key contains `boom`;
//! - fairness: when any waiter's owner contains `boom`;
//! - backoff: whenever `seed != 0` (real calls always pass a random seed).

/// The word that triggers a fixture's misbehaviour in keys and owners.
pub const TRIGGER: &str = "boom";

/// The fixtures' own version.
pub const VERSION: &str = "0.1.0";

/// Whether a `storage-key` call with this key should misbehave.
pub fn naming_triggered(key: &str) -> bool {
    key.contains(TRIGGER)
}

/// Whether a `pick-next` call with waiters owned by `owners` should
/// misbehave.
pub fn fairness_triggered<'a>(owners: impl IntoIterator<Item = &'a str>) -> bool {
    owners.into_iter().any(|owner| owner.contains(TRIGGER))
}

/// Whether a `next-delay` call with this seed should misbehave.
pub fn backoff_triggered(seed: u64) -> bool {
    seed != 0
}

/// Generates a whole misbehaving fixture but its misbehaviour: a policy
/// `Fixture` on the SDK whose methods call `misbehave` (a `fn() -> !` of
/// the calling crate) when the call is triggered (see [the module](self))
/// and the default rule otherwise, its `export_policy!`, and the unit test
/// `tests::behaves_on_the_self_check`. Call it once, at the crate root;
/// `describe` says `name` and [`VERSION`].
///
/// `wit:` is still accepted, and ignored: the SDK carries the WIT.
///
/// ```no_run
/// fn misbehave() -> ! {
///     panic!("triggered")
/// }
///
/// policy_common::fixture! {
///     name: "example",
///     misbehave: misbehave,
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! fixture {
    (wit: $wit:literal, name: $name:literal, misbehave: $misbehave:path $(,)?) => {
        $crate::fixture! { name: $name, misbehave: $misbehave }
    };
    (name: $name:literal, misbehave: $misbehave:path $(,)?) => {
        /// The default policy, misbehaving when triggered.
        pub struct Fixture;

        impl $crate::__sdk::Policy for Fixture {
            const NAME: &'static str = $name;
            const VERSION: &'static str = $crate::fixture::VERSION;

            fn storage_key(
                _tenant: &str,
                key: &str,
            ) -> ::core::result::Result<::std::string::String, ::std::string::String> {
                if $crate::fixture::naming_triggered(key) {
                    $misbehave()
                }
                $crate::__sdk::defaults::storage_key(key)
            }

            fn pick_next(_key: &str, waiters: &[$crate::__sdk::Waiter]) -> u32 {
                if $crate::fixture::fairness_triggered(waiters.iter().map(|w| w.owner.as_str())) {
                    $misbehave()
                }
                $crate::__sdk::defaults::pick_next(waiters)
            }

            fn next_delay(contention: &$crate::__sdk::Contention) -> $crate::__sdk::Decision {
                if $crate::fixture::backoff_triggered(contention.seed) {
                    $misbehave()
                }
                $crate::__sdk::defaults::next_delay(contention)
            }
        }

        $crate::__sdk::export_policy!(Fixture);

        #[cfg(test)]
        mod tests {
            use super::Fixture;
            use $crate::__sdk::bindings::exports::lockbroker::policy::{
                backoff, fairness, meta, naming,
            };
            use $crate::__sdk::{Contention, Decision, Exports, Waiter};

            type Exported = Exports<Fixture>;

            /// The broker's self-check calls, untriggered, answered as the
            /// default policy answers them.
            #[test]
            fn behaves_on_the_self_check() {
                assert_eq!(<Exported as meta::Guest>::describe().name, $name);
                assert_eq!(
                    <Exported as naming::Guest>::storage_key(
                        "self-check".into(),
                        "self-check".into()
                    ),
                    Ok("self-check".to_string())
                );
                let waiter = Waiter {
                    id: 0,
                    owner: "self-check".into(),
                    priority: 0,
                    enqueued_at_ms: 0,
                    attempts: 0,
                };
                assert_eq!(
                    <Exported as fairness::Guest>::pick_next("self-check".into(), vec![waiter]),
                    0
                );
                let contention = Contention {
                    attempt: 1,
                    waited_ms: 0,
                    budget_ms: 0,
                    waiters: 0,
                    lease_remaining_ms: 0,
                    seed: 0,
                };
                assert_eq!(
                    <Exported as backoff::Guest>::next_delay(contention),
                    Decision::RetryAfter(1)
                );
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_check_inputs_do_not_trigger() {
        assert!(!naming_triggered("self-check"));
        assert!(!fairness_triggered(["self-check"]));
        assert!(!backoff_triggered(0));
    }

    #[test]
    fn triggers() {
        assert!(naming_triggered("boom"));
        assert!(naming_triggered("a/kaboom/b"));
        assert!(!naming_triggered("BOOM"));
        assert!(fairness_triggered(["alice", "boomer"]));
        assert!(!fairness_triggered(["alice", "bob"]));
        assert!(backoff_triggered(1));
        assert!(backoff_triggered(u64::MAX));
    }
}
