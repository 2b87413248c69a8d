//! The bindings of the world `policy-with-deadlocks` (`wit/deadlocks.wit`:
//! the world `policy-with-timing` and the interface `deadlocks`), for the
//! `lockbroker-policy` SDK, which re-exports this crate as
//! `bindings_deadlocks` and converts its types: use the SDK's `Deadlocks`
//! trait and `export_policy_with_deadlocks!`.
//!
//! A crate of its own, as `lockbroker-policy-timing` is: wit-bindgen names
//! its cross-crate export macros after the interface, so one crate cannot
//! hold two worlds that share interfaces. The generated code names its
//! runtime `::lockbroker_policy::__wit_bindgen`, which resolves to the SDK in
//! a policy's crate and to this crate here (`extern crate self` below), both
//! the same wit-bindgen.

#![no_std]

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

extern crate self as lockbroker_policy;

wit_bindgen::generate!({
    path: "wit",
    world: "policy-with-deadlocks",
    pub_export_macro: true,
    runtime_path: "::lockbroker_policy::__wit_bindgen::rt",
    additional_derives: [PartialEq, Eq],
});
