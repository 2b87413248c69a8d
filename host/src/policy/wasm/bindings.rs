//! The one `bindgen!` site: host types for the `lockbroker:policy` worlds,
//! and [`PolicyPre`] / [`Policy`], which take the component's exports one
//! interface at a time so that `timing` may be missing.
//!
//! Bindings are generated for the bigger world `policy-with-timing`; a
//! component of the world `policy` (no `timing`) loads as well: each
//! interface's export indices are looked up on their own, and `timing`'s
//! only if the component exports that interface at all. Synchronous calls:
//! a policy call is bounded to a few milliseconds by epoch interruption and
//! runs off the async reactor.

use wasmtime::{
    component::{Instance, InstancePre},
    AsContextMut,
};

use exports::lockbroker::policy::{backoff, fairness, meta, naming, timing};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "policy-with-timing",
});

/// The name under which a component exports the optional interface.
pub const TIMING_EXPORT: &str = "lockbroker:policy/timing@0.1.0";

/// A component linked and its exports found, ready to instantiate.
pub struct PolicyPre<T: 'static> {
    pre: InstancePre<T>,
    meta: meta::GuestIndices,
    naming: naming::GuestIndices,
    fairness: fairness::GuestIndices,
    backoff: backoff::GuestIndices,
    /// `None` for a component that does not export `timing`.
    timing: Option<timing::GuestIndices>,
}

/// One instance's exports.
pub struct Policy {
    pub meta: meta::Guest,
    pub naming: naming::Guest,
    pub fairness: fairness::Guest,
    pub backoff: backoff::Guest,
    pub timing: Option<timing::Guest>,
}

impl<T: 'static> PolicyPre<T> {
    /// Finds the exports of the world `policy`, and `timing` if exported.
    ///
    /// # Errors
    /// An interface of `policy` is missing, or `timing` is exported without
    /// its function.
    pub fn new(pre: InstancePre<T>) -> wasmtime::Result<PolicyPre<T>> {
        let exports_timing = pre
            .component()
            .get_export_index(None, TIMING_EXPORT)
            .is_some();
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
            pre,
        })
    }

    /// Whether the component exports `timing`.
    pub fn has_timing(&self) -> bool {
        self.timing.is_some()
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
        })
    }
}
