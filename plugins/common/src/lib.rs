//! What the misbehaving test policies under `plugins/fixtures/` share: the
//! triggers of their misbehaviour, and [`fixture!`], the whole of such a
//! fixture but its misbehaviour, written on the policy SDK. The default
//! rules themselves live once, in `plugins/rules`, reached through the SDK.

pub mod fixture;

/// The SDK, for the code [`fixture!`] expands to in a fixture's crate.
#[doc(hidden)]
pub use lockbroker_policy as __sdk;
