//! The one `bindgen!` site: host types for the `lockbroker:policy` worlds,
//! and [`PolicyPre`] / [`Policy`], which take the component's exports one
//! interface at a time so that `timing` and `deadlocks` may be missing.
//!
//! Bindings are generated for the biggest world `policy-with-deadlocks`
//! (which includes `policy-with-timing`); a component of the world
//! `policy` or `policy-with-timing` loads as well: each interface's export
//! indices are looked up on their own, and an optional interface's only if
//! the component exports it at all. Synchronous calls:
//! a policy call is bounded to a few milliseconds by epoch interruption and
//! runs off the async reactor.

use wasmtime::{
    component::{Instance, InstancePre},
    AsContextMut,
};

use exports::lockbroker::policy::{backoff, deadlocks, fairness, meta, naming, timing};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "policy-with-deadlocks",
});

/// The names under which a component exports the optional interfaces.
pub const TIMING_EXPORT: &str = "lockbroker:policy/timing@0.1.0";
pub const DEADLOCKS_EXPORT: &str = "lockbroker:policy/deadlocks@0.1.0";

/// A component linked and its exports found, ready to instantiate.
pub struct PolicyPre<T: 'static> {
    pre: InstancePre<T>,
    meta: meta::GuestIndices,
    naming: naming::GuestIndices,
    fairness: fairness::GuestIndices,
    backoff: backoff::GuestIndices,
    /// `None` for a component that does not export `timing`.
    timing: Option<timing::GuestIndices>,
    /// `None` for a component that does not export `deadlocks`.
    deadlocks: Option<deadlocks::GuestIndices>,
}

/// One instance's exports.
pub struct Policy {
    pub meta: meta::Guest,
    pub naming: naming::Guest,
    pub fairness: fairness::Guest,
    pub backoff: backoff::Guest,
    pub timing: Option<timing::Guest>,
    pub deadlocks: Option<deadlocks::Guest>,
}

impl<T: 'static> PolicyPre<T> {
    /// Finds the exports of the world `policy`, and `timing` and
    /// `deadlocks` if exported.
    ///
    /// # Errors
    /// An interface of `policy` is missing, or an optional one is exported
    /// without its function.
    pub fn new(pre: InstancePre<T>) -> wasmtime::Result<PolicyPre<T>> {
        let exports = |name| pre.component().get_export_index(None, name).is_some();
        let (exports_timing, exports_deadlocks) =
            (exports(TIMING_EXPORT), exports(DEADLOCKS_EXPORT));
        Ok(PolicyPre {
            meta: meta::GuestIndices::new(&pre)?,
            naming: naming::GuestIndices::new(&pre)?,
            fairness: fairness::GuestIndices::new(&pre)?,
            backoff: backoff::GuestIndices::new(&pre)?,
            timing: if exports_timing {
                Some(timing::GuestIndices::new(&pre)?)
            } else {
                None
            },
            deadlocks: if exports_deadlocks {
                Some(deadlocks::GuestIndices::new(&pre)?)
            } else {
                None
            },
            pre,
        })
    }

    /// Whether the component exports `timing`.
    pub fn has_timing(&self) -> bool {
        self.timing.is_some()
    }

    /// Whether the component exports `deadlocks`.
    pub fn has_deadlocks(&self) -> bool {
        self.deadlocks.is_some()
    }

    /// A new instance in `store`, its exports type-checked.
    ///
    /// # Errors
    /// Instantiating trapped, ran out of its budget, or an export has the
    /// wrong type.
    pub fn instantiate(&self, mut store: impl AsContextMut<Data = T>) -> wasmtime::Result<Policy> {
        let instance: Instance = self.pre.instantiate(&mut store)?;
        Ok(Policy {
            meta: self.meta.load(&mut store, &instance)?,
            naming: self.naming.load(&mut store, &instance)?,
            fairness: self.fairness.load(&mut store, &instance)?,
            backoff: self.backoff.load(&mut store, &instance)?,
            timing: match &self.timing {
                Some(indices) => Some(indices.load(&mut store, &instance)?),
                None => None,
            },
            deadlocks: match &self.deadlocks {
                Some(indices) => Some(indices.load(&mut store, &instance)?),
                None => None,
            },
        })
    }
}
