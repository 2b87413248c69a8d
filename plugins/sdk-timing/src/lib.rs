//! The bindings of the world `policy-with-timing` (`wit/timing.wit`: the
//! world `policy` and the interface `timing`), for the `lockbroker-policy`
//! SDK, which re-exports this crate as `bindings_timing` and converts its
//! types: use the SDK's `Timing` trait and `export_policy_with_timing!`.
//!
//! A crate of its own: wit-bindgen names its cross-crate export macros after
//! the interface, so the SDK cannot hold two worlds that share interfaces.
//! The generated code names its runtime `::lockbroker_policy::__wit_bindgen`,
//! which resolves to the SDK in a policy's crate and to this crate here
//! (`extern crate self` below), both the same wit-bindgen.

#![no_std]

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

extern crate self as lockbroker_policy;

wit_bindgen::generate!({
    path: "wit",
    world: "policy-with-timing",
    pub_export_macro: true,
    runtime_path: "::lockbroker_policy::__wit_bindgen::rt",
    additional_derives: [PartialEq, Eq],
});
