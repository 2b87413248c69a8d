//! Write a lockbroker policy plugin in Rust.
//!
//! A policy is a WebAssembly component exporting the world `policy` of
//! `wit/policy.wit` (this crate carries its own copy, so a crate outside the
//! lockbroker repository needs nothing else). This crate hides the bindings:
//! implement [`Policy`], overriding only what you change (every method
//! defaults to the broker's built-in rule, from [`rules`]), and call
//! [`export_policy!`] once at the crate root of a `cdylib`:
//!
//! ```no_run
//! use lockbroker_policy::{export_policy, Policy};
//!
//! struct Lowercase;
//!
//! impl Policy for Lowercase {
//!     const NAME: &'static str = "lowercase";
//!     const VERSION: &'static str = "0.1.0";
//!
//!     fn storage_key(_tenant: &str, key: &str) -> Result<String, String> {
//!         lockbroker_policy::defaults::storage_key(&key.to_lowercase())
//!     }
//! }
//!
//! export_policy!(Lowercase);
//! # fn main() {}
//! ```
//!
//! Build it with `cargo build --target wasm32-unknown-unknown --release`,
//! then turn the core module into a component (`wasm-tools component new`).
//! The component imports nothing. See `plugins/templates/rust` in the
//! lockbroker repository for a project to copy.
//!
//! Optional worlds, each exported by a macro of its own instead of
//! [`export_policy!`] (a policy that exports neither costs the broker
//! nothing for them):
//!
//! - `policy-with-timing` (`wit/timing.wit`): a policy that also decides
//!   keys' lock-delay and minimum hold implements [`Timing`] too and calls
//!   [`export_policy_with_timing!`]; one that does not keeps the tenant's
//!   configured delays;
//! - `policy-with-deadlocks` (`wit/deadlocks.wit`, which includes
//!   `policy-with-timing`): a policy that turns the deadlock check off for
//!   some keys implements [`Timing`] (an empty `impl` keeps the configured
//!   delays) and [`Deadlocks`] too and calls
//!   [`export_policy_with_deadlocks!`]; one that does not has every key
//!   checked.
//!
//! Layout: [`Policy`], [`Timing`], [`Deadlocks`] and their [`defaults`]
//! here; [`bindings`] is the wit-bindgen output of the world `policy` (its
//! types re-exported at the root), [`bindings_timing`] that of
//! `policy-with-timing`, [`bindings_deadlocks`] that of
//! `policy-with-deadlocks`; [`Exports`], [`TimedExports`] and
//! [`DeadlockExports`] are the adapters from the WIT exports of each world
//! to a [`Policy`].

use core::marker::PhantomData;

pub use lockbroker_policy_rules as rules;

/// The wit-bindgen crate, for the code [`export_policy!`] expands to in the
/// policy's crate, which need not depend on it.
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

// Lets the bindings name this crate by the same absolute path here and in
// the policy's crate (`runtime_path` below).
extern crate self as lockbroker_policy;

/// The bindings of the world `policy`, generated from this crate's copy of
/// the WIT. Use the types re-exported at the crate root; the modules are
/// public for [`export_policy!`].
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "policy",
        pub_export_macro: true,
        runtime_path: "::lockbroker_policy::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

/// The bindings of the world `policy-with-timing` (`policy` and `timing`),
/// for [`export_policy_with_timing!`] (the crate `lockbroker-policy-timing`).
/// Its types of the interfaces of `policy` are its own (wit-bindgen
/// generates each world's exports anew): [`TimedExports`] converts them to
/// the root's.
pub use lockbroker_policy_timing as bindings_timing;

/// The bindings of the world `policy-with-deadlocks` (`policy-with-timing`
/// and `deadlocks`), for [`export_policy_with_deadlocks!`] (the crate
/// `lockbroker-policy-deadlocks`). Its types are its own too:
/// [`DeadlockExports`] converts them to the root's.
pub use lockbroker_policy_deadlocks as bindings_deadlocks;

pub use bindings::exports::lockbroker::policy::backoff::{Contention, Decision};
pub use bindings::exports::lockbroker::policy::fairness::Waiter;
pub use bindings::exports::lockbroker::policy::meta::Descriptor;
pub use bindings_timing::exports::lockbroker::policy::timing::KeyDelays;

use bindings::exports::lockbroker::policy::{backoff, fairness, meta, naming};

/// A lockbroker policy. Every method defaults to the broker's built-in rule
/// (see [`defaults`]): override only what you change.
///
/// The methods take no `self`: the broker may run each call in a fresh
/// instance (after a trap, or from a pool), so a policy keeps no state
/// between calls. Every call is bounded in time (a few milliseconds) and
/// memory; a panic traps. What happens then: naming fails the request
/// closed (HTTP 500 `policy_error`), fairness and backoff fall back to the
/// built-in rule for that call.
pub trait Policy {
    /// A short name, shown in `GET /v1/admin/tenants`.
    const NAME: &'static str;
    /// The policy's own version, shown beside the name;
    /// `env!("CARGO_PKG_VERSION")` is a good choice.
    const VERSION: &'static str;

    /// Maps the client's `key` (valid UTF-8, decoded from the URL) of
    /// `tenant` to a storage key of 1 to 512 bytes (an empty or longer one
    /// fails the request with HTTP 500 `policy_error`). Two keys that map to
    /// the same storage key are the same lock; locks are scoped by tenant in
    /// storage whatever this returns.
    ///
    /// # Errors
    ///
    /// The reason to reject the key, sent to the client with HTTP 422
    /// `invalid_key`.
    fn storage_key(tenant: &str, key: &str) -> Result<String, String> {
        let _ = tenant;
        defaults::storage_key(key)
    }

    /// Which of `waiters` (oldest first, never empty, at most 64) is granted
    /// the freed lock `key` next: an index into `waiters`. An index out of
    /// range counts as a failure (the broker grants the oldest).
    fn pick_next(key: &str, waiters: &[Waiter]) -> u32 {
        let _ = key;
        defaults::pick_next(waiters)
    }

    /// How long a client waits before its next try after a failed one, or
    /// whether it gives up (HTTP 409 at once). For a single try the delay is
    /// the `retry_after_ms` hint of the 409.
    fn next_delay(contention: &Contention) -> Decision {
        defaults::next_delay(contention)
    }
}

/// Optional: a key's lock-delay and minimum hold, for a [`Policy`] exported
/// with [`export_policy_with_timing!`].
pub trait Timing: Policy {
    /// The lock-delay and minimum hold of the lock stored as `key` (the
    /// storage key [`Policy::storage_key`] returned): each `None` keeps the
    /// tenant's configured value, `Some(0)` means none for this key, and a
    /// value over one day (86 400 000 ms) counts as a failure. The default
    /// keeps both configured values.
    ///
    /// Answer the same for the same key: the broker asks once per lock
    /// operation (and when its reaper hands a key on), and a key's grants
    /// follow whichever answer was asked last. A panic traps; the broker
    /// then uses the tenant's configured values for that operation.
    fn delays(key: &str) -> KeyDelays {
        let _ = key;
        defaults::delays()
    }
}

/// Optional: which keys' session waits are checked for deadlocks, for a
/// [`Policy`] exported with [`export_policy_with_deadlocks!`]. That world
/// includes `timing`: an empty `impl Timing` keeps the tenant's configured
/// delays.
pub trait Deadlocks: Timing {
    /// Whether a session's wait for the lock stored as `key` (the storage
    /// key [`Policy::storage_key`] returned) is refused at once (HTTP 409
    /// `deadlock`) when it would close a cycle of sessions waiting for each
    /// other: `true`, the default, refuses it; `false` lets it wait until its
    /// own `wait_ms` runs out. A cycle through such a wait is still refused
    /// when another wait of it, for a key that is checked, closes it.
    ///
    /// Asked once per session wait (an acquire in a session that finds the
    /// key busy). Answer the same for the same key. A panic traps; the
    /// broker then checks the key (as `true`).
    fn detect(key: &str) -> bool {
        defaults::detect_deadlocks(key)
    }
}

/// The built-in rules over this crate's types, for overrides that keep part
/// of the default (say, lowercase a key and then apply the default checks).
/// The trait's default methods call these.
pub mod defaults {
    use super::{rules, Contention, Decision, Waiter};

    /// The key itself; rejects an empty key, a key over 255 bytes or one
    /// with a control character ([`rules::storage_key`]).
    ///
    /// # Errors
    ///
    /// The reason the key is rejected.
    pub fn storage_key(key: &str) -> Result<String, String> {
        rules::storage_key(key)
    }

    /// The oldest waiter, index 0 ([`rules::pick_next`]).
    pub fn pick_next(waiters: &[Waiter]) -> u32 {
        rules::pick_next(waiters)
    }

    /// Retry after full jitter in `[1, min(1000, 10 * 2^(attempt-1))]` ms,
    /// never give up ([`rules::delay_ms`]).
    pub fn next_delay(contention: &Contention) -> Decision {
        Decision::RetryAfter(rules::delay_ms(contention.attempt, contention.seed))
    }

    /// The tenant's configured lock-delay and minimum hold (both `None`).
    pub fn delays() -> super::KeyDelays {
        super::KeyDelays {
            lock_delay_ms: None,
            min_hold_ms: None,
        }
    }

    /// Every key is checked for deadlocks: `true`
    /// ([`rules::detect_deadlocks`]).
    pub fn detect_deadlocks(key: &str) -> bool {
        rules::detect_deadlocks(key)
    }
}

/// The WIT exports of the world `policy`, implemented by calling the
/// [`Policy`] `P`. [`export_policy!`] exports it; there is no other use.
pub struct Exports<P>(PhantomData<P>);

impl<P: Policy> meta::Guest for Exports<P> {
    fn describe() -> Descriptor {
        Descriptor {
            name: P::NAME.to_string(),
            version: P::VERSION.to_string(),
        }
    }
}

impl<P: Policy> naming::Guest for Exports<P> {
    fn storage_key(tenant: String, key: String) -> Result<String, String> {
        P::storage_key(&tenant, &key)
    }
}

impl<P: Policy> fairness::Guest for Exports<P> {
    fn pick_next(key: String, waiters: Vec<Waiter>) -> u32 {
        P::pick_next(&key, &waiters)
    }
}

impl<P: Policy> backoff::Guest for Exports<P> {
    fn next_delay(contention: Contention) -> Decision {
        P::next_delay(&contention)
    }
}

/// Exports the [`Policy`] `$policy` as the component's implementation of the
/// world `policy`. Call it once, at the root of a `cdylib` crate.
///
/// It expands to the `extern "C"` functions of the canonical ABI and the
/// custom section that describes the world, which `wasm-tools component
/// new` reads to build the component.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        const _: () = {
            // wit-bindgen's export macro takes a type name, not a path.
            type LockbrokerPolicyExports = $crate::Exports<$policy>;
    $crate::bindings::export!(LockbrokerPolicyExports with_types_in $crate::bindings);
        };
    };
}

/// The WIT exports of the world `policy-with-timing`, implemented by calling
/// the [`Policy`] and [`Timing`] `P` (converting this world's types to the
/// root's). [`export_policy_with_timing!`] exports it; there is no other use.
pub struct TimedExports<P>(PhantomData<P>);

/// The WIT exports of the world `policy-with-deadlocks`, implemented by
/// calling the [`Policy`], [`Timing`] and [`Deadlocks`] `P` (converting this
/// world's types to the root's). [`export_policy_with_deadlocks!`] exports
/// it; there is no other use.
pub struct DeadlockExports<P>(PhantomData<P>);

/// Implements the interfaces of the world `policy-with-timing` (those of
/// `policy`, and `timing`) for the adapter `$adapter`, in a module `$module`,
/// with the bindings `$bindings` of a world that includes it: each world's
/// bindings have types of their own, converted here to the root's.
macro_rules! timed_adapter {
    ($module:ident, $adapter:ident, $bindings:ident) => {
        mod $module {
            use super::{$adapter, $bindings::exports::lockbroker::policy as w, Policy, Timing};

            impl<P: Policy> w::meta::Guest for $adapter<P> {
                fn describe() -> w::meta::Descriptor {
                    w::meta::Descriptor {
                        name: P::NAME.to_string(),
                        version: P::VERSION.to_string(),
                    }
                }
            }

            impl<P: Policy> w::naming::Guest for $adapter<P> {
                fn storage_key(tenant: String, key: String) -> Result<String, String> {
                    P::storage_key(&tenant, &key)
                }
            }

            impl<P: Policy> w::fairness::Guest for $adapter<P> {
                fn pick_next(key: String, waiters: Vec<w::fairness::Waiter>) -> u32 {
                    let waiters: Vec<super::Waiter> = waiters
                        .into_iter()
                        .map(|w| super::Waiter {
                            id: w.id,
                            owner: w.owner,
                            priority: w.priority,
                            enqueued_at_ms: w.enqueued_at_ms,
                            attempts: w.attempts,
                        })
                        .collect();
                    P::pick_next(&key, &waiters)
                }
            }

            impl<P: Policy> w::backoff::Guest for $adapter<P> {
                fn next_delay(c: w::backoff::Contention) -> w::backoff::Decision {
                    let contention = super::Contention {
                        attempt: c.attempt,
                        waited_ms: c.waited_ms,
                        budget_ms: c.budget_ms,
                        waiters: c.waiters,
                        lease_remaining_ms: c.lease_remaining_ms,
                        seed: c.seed,
                    };
                    match P::next_delay(&contention) {
                        super::Decision::RetryAfter(ms) => w::backoff::Decision::RetryAfter(ms),
                        super::Decision::GiveUp => w::backoff::Decision::GiveUp,
                    }
                }
            }

            impl<P: Timing> w::timing::Guest for $adapter<P> {
                fn delays(key: String) -> w::timing::KeyDelays {
                    let delays = P::delays(&key);
                    w::timing::KeyDelays {
                        lock_delay_ms: delays.lock_delay_ms,
                        min_hold_ms: delays.min_hold_ms,
                    }
                }
            }
        }
    };
}

timed_adapter!(timed, TimedExports, bindings_timing);
timed_adapter!(deadlocked, DeadlockExports, bindings_deadlocks);

impl<P: Deadlocks> bindings_deadlocks::exports::lockbroker::policy::deadlocks::Guest
    for DeadlockExports<P>
{
    fn detect(key: String) -> bool {
        P::detect(&key)
    }
}

/// Exports the [`Policy`] and [`Timing`] `$policy` as the component's
/// implementation of the world `policy-with-timing`: as
/// [`export_policy!`], and the broker also asks it for keys' lock-delay and
/// minimum hold. Call it once (instead of [`export_policy!`]), at the root
/// of a `cdylib` crate.
#[macro_export]
macro_rules! export_policy_with_timing {
    ($policy:ty) => {
        const _: () = {
            // wit-bindgen's export macro takes a type name, not a path.
            type LockbrokerPolicyTimedExports = $crate::TimedExports<$policy>;
    $crate::bindings_timing::export!(LockbrokerPolicyTimedExports with_types_in $crate::bindings_timing);
        };
    };
}

/// Exports the [`Policy`], [`Timing`] and [`Deadlocks`] `$policy` as the
/// component's implementation of the world `policy-with-deadlocks`: as
/// [`export_policy_with_timing!`], and the broker also asks it which keys'
/// session waits are checked for deadlocks. Call it once (instead of the
/// other export macros), at the root of a `cdylib` crate.
#[macro_export]
macro_rules! export_policy_with_deadlocks {
    ($policy:ty) => {
        const _: () = {
            // wit-bindgen's export macro takes a type name, not a path.
            type LockbrokerPolicyDeadlockExports = $crate::DeadlockExports<$policy>;
    $crate::bindings_deadlocks::export!(LockbrokerPolicyDeadlockExports with_types_in $crate::bindings_deadlocks);
        };
    };
}
