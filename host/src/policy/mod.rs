//! The policy seam: how a tenant's keys are named, which waiter goes next,
//! how long to back off, and (optionally) a key's lock-delay and minimum
//! hold.
//!
//! [`Policy`] is what an implementation provides (the [`Builtin`] one, or a
//! WebAssembly plugin). [`TenantPolicy`] is what the rest of the broker
//! calls: it holds the tenant's current policy (swapped atomically on
//! reload) and applies the failure rules in one place. Naming fails closed,
//! since a different naming could merge or split locks; fairness and backoff
//! fall back to the built-in policy; timing falls back to the tenant's
//! configured delays. Every fault is counted and logged.
//!
//! A tenant may also have a shadow candidate ([`shadow`]): the calls its
//! policy in force answers are put to the candidate too, off the
//! request's path, and the answers compared.

mod builtin;
pub mod reload;
pub mod shadow;
pub mod versions;
pub mod wasm;

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc, Mutex, RwLock,
};

pub use builtin::{Builtin, MAX_KEY_BYTES};
pub use shadow::Shadow;
pub use versions::{LoadedBy, Version, Versions};

use shadow::Call;
use tracing::Instrument;

use crate::metrics::Metrics;

/// Longest storage key a policy may return, in bytes (the column's size;
/// one constant for the broker, the API document and the plugins).
pub use lockbroker_api::MAX_STORAGE_KEY_BYTES;

/// What a policy says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub name: String,
    pub version: String,
}

/// A client waiting for a lock, as a fairness policy sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiter {
    pub id: u64,
    pub owner: String,
    pub priority: i32,
    /// Enqueue time, ms since the Unix epoch by the database clock.
    pub enqueued_at_ms: u64,
    pub attempts: u32,
}

/// What is known of the contention when a try fails.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contention {
    /// Failed tries so far, 1 for the first.
    pub attempt: u32,
    pub waited_ms: u64,
    /// The client's `wait_ms`; 0 for a single try.
    pub budget_ms: u64,
    pub waiters: u32,
    pub lease_remaining_ms: u64,
    pub seed: u64,
}

/// A backoff policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    RetryAfter(u64),
    GiveUp,
}

/// What a policy's optional `timing` export says of one key's lock-delay
/// and minimum hold, in ms: each `None` keeps the tenant's configured value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub lock_delay_ms: Option<u64>,
    pub min_hold_ms: Option<u64>,
}

/// A lock's lock-delay and minimum hold, in ms (0: none): a tenant's
/// configured values, as its policy's [`Timing`] overrides them per key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    pub lock_delay_ms: u64,
    pub min_hold_ms: u64,
}

impl Delays {
    /// True when neither applies: the fast paths may serve the tenant.
    pub fn is_none(self) -> bool {
        self.lock_delay_ms == 0 && self.min_hold_ms == 0
    }

    /// These (a tenant's configured) delays as a policy's `timing` answer
    /// for one key overrides them: each value it gives replaces the
    /// configured one, each `None` keeps it.
    pub fn overridden_by(self, timing: Timing) -> Delays {
        Delays {
            lock_delay_ms: timing.lock_delay_ms.unwrap_or(self.lock_delay_ms),
            min_hold_ms: timing.min_hold_ms.unwrap_or(self.min_hold_ms),
        }
    }
}

/// Longest lock-delay or minimum hold a policy may give a key (one day):
/// a larger value is a bad answer, and the tenant's configured values
/// apply instead (a typo of a policy author must not block a key for
/// weeks).
pub const MAX_DELAY_MS: u64 = 86_400_000;

impl Timing {
    /// The answer if both values are in range.
    ///
    /// # Errors
    /// [`PolicyFault::BadAnswer`] naming the value over [`MAX_DELAY_MS`].
    pub(crate) fn checked(self) -> Result<Timing, PolicyFault> {
        for (name, value) in [
            ("lock-delay-ms", self.lock_delay_ms),
            ("min-hold-ms", self.min_hold_ms),
        ] {
            if let Some(ms) = value.filter(|ms| *ms > MAX_DELAY_MS) {
                return Err(PolicyFault::BadAnswer(format!(
                    "{name} {ms} (at most {MAX_DELAY_MS} allowed)"
                )));
            }
        }
        Ok(self)
    }
}

/// A policy that did not answer properly.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PolicyFault {
    #[error("policy trapped: {0}")]
    Trap(String),
    #[error("policy ran out of its time budget")]
    Timeout,
    #[error("policy ran out of its memory budget")]
    OutOfMemory,
    #[error("policy gave an invalid answer: {0}")]
    BadAnswer(String),
}

/// One policy implementation. Calls may block for up to the policy deadline;
/// [`TenantPolicy`] runs blocking ones off the async reactor.
pub trait Policy: Send + Sync + 'static {
    /// The policy's name and version.
    fn describe(&self) -> Result<Descriptor, PolicyFault>;
    /// `Ok(Ok(storage_key))`, `Ok(Err(reason))` to reject the key.
    fn storage_key(&self, tenant: &str, key: &str) -> Result<Result<String, String>, PolicyFault>;
    /// Index into `waiters` (never empty, oldest first) of the next grant.
    fn pick_next(&self, key: &str, waiters: &[Waiter]) -> Result<u32, PolicyFault>;
    /// Delay before the next try, or give up.
    fn next_delay(&self, contention: &Contention) -> Result<Decision, PolicyFault>;
    /// True when `pick_next` always picks the oldest waiter (index 0), so
    /// the broker need not read the queue to ask it.
    fn always_oldest(&self) -> bool {
        false
    }
    /// True when the next call may take long enough to need a blocking
    /// thread (calls are bounded by the policy deadline either way).
    fn blocks(&self) -> bool {
        false
    }
    /// True when the policy overrides lock-delay and minimum hold (a
    /// component exporting `timing`): only then is [`Policy::timing`] asked.
    fn has_timing(&self) -> bool {
        false
    }
    /// The lock-delay and minimum hold of the lock stored as `storage_key`.
    fn timing(&self, storage_key: &str) -> Result<Timing, PolicyFault> {
        let _ = storage_key;
        Ok(Timing::default())
    }
    /// True when the policy turns deadlock detection off for some keys (a
    /// component exporting `deadlocks`): only then is
    /// [`Policy::detects_deadlocks`] asked.
    fn has_deadlocks(&self) -> bool {
        false
    }
    /// Whether a session's wait for the key stored as `storage_key` is
    /// refused when it would close a cycle (the built-in: always).
    fn detects_deadlocks(&self, storage_key: &str) -> Result<bool, PolicyFault> {
        let _ = storage_key;
        Ok(true)
    }
}

/// Why a key has no storage key.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NamingError {
    /// The policy rejected the key; the reason goes to the client (422).
    #[error("{0}")]
    Rejected(String),
    /// The policy failed: the request fails closed (500).
    #[error(transparent)]
    Fault(#[from] PolicyFault),
    /// The tenant's first policy is still being compiled (the broker has
    /// just started): the request fails closed, but retrying soon helps
    /// (503), unlike a policy that failed.
    #[error("the tenant's policy is still loading")]
    Loading,
}

/// A policy in force, with where it came from.
#[derive(Clone)]
pub struct Loaded {
    pub policy: Arc<dyn Policy>,
    pub descriptor: Descriptor,
    /// sha256 of the component, hex; `None` for the built-in policy.
    pub sha256: Option<String>,
    /// RFC 3339 time of the load.
    pub loaded_at: String,
    /// A stand-in for a policy file that never loaded (its tenant fails
    /// closed until one does).
    pub stand_in: bool,
    /// A stand-in while the tenant's first policy is compiled at start:
    /// naming answers [`NamingError::Loading`] (also a `stand_in`).
    pub loading: bool,
    /// Whether the compiled component came from the disk cache (no
    /// compiling); false for the built-in policy.
    pub from_cache: bool,
}

impl Loaded {
    /// The version's id: the short sha256 of the component
    /// ([`versions::short_id`]), `builtin` for the built-in policy.
    pub fn id(&self) -> String {
        self.sha256
            .as_deref()
            .map_or_else(|| versions::BUILTIN_ID.to_owned(), versions::short_id)
    }

    /// The built-in policy, loaded now.
    pub fn builtin() -> Loaded {
        Loaded::native(Builtin, false)
    }

    /// A policy of the broker's own (the built-in one, or a `stand_in` for
    /// a file not loaded), put in force now.
    pub(crate) fn native(policy: impl Policy, stand_in: bool) -> Loaded {
        Loaded {
            descriptor: policy.describe().expect("a native policy describes itself"),
            policy: Arc::new(policy),
            sha256: None,
            loaded_at: now_rfc3339(),
            stand_in,
            loading: false,
            from_cache: false,
        }
    }
}

/// A tenant's policy as the broker uses it: swappable, with fallbacks.
pub struct TenantPolicy {
    tenant: String,
    /// The component's file in `policy_dir`; none for the built-in policy.
    file: Option<String>,
    current: RwLock<Arc<Loaded>>,
    /// Whether the policy in force exports `timing`: read on every lock
    /// operation, so one atomic load rather than the lock above (a policy
    /// without `timing` costs nothing more).
    timing: AtomicBool,
    last_error: RwLock<Option<String>>,
    /// The versions kept, the one in force included (not stand-ins).
    versions: Mutex<Versions>,
    /// The shadow candidate, if one is loaded.
    shadow: RwLock<Option<Arc<Shadow>>>,
    /// Whether one is: read on every policy call, so one atomic load
    /// rather than the lock above (no shadow costs nothing more).
    shadowed: AtomicBool,
    metrics: Arc<Metrics>,
}

impl TenantPolicy {
    /// `tenant`'s policy from `file` (none: the built-in one), `loaded` in
    /// force for now.
    pub fn new(
        tenant: &str,
        file: Option<String>,
        loaded: Loaded,
        metrics: Arc<Metrics>,
    ) -> TenantPolicy {
        let loaded = Arc::new(loaded);
        let mut versions = Versions::default();
        if !loaded.stand_in {
            versions.record(&loaded, LoadedBy::Startup);
        }
        TenantPolicy {
            tenant: tenant.to_owned(),
            file,
            timing: AtomicBool::new(loaded.policy.has_timing()),
            current: RwLock::new(loaded),
            last_error: RwLock::new(None),
            versions: Mutex::new(versions),
            shadow: RwLock::new(None),
            shadowed: AtomicBool::new(false),
            metrics,
        }
    }

    /// The tenant whose policy this is.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The component's file in `policy_dir`; none for the built-in policy.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    /// The policy in force. Callers keep the `Arc` for a whole request, so a
    /// swap never changes the policy under an in-flight request.
    pub fn current(&self) -> Arc<Loaded> {
        self.current.read().expect("policy lock").clone()
    }

    /// Puts `loaded` (a version, not a stand-in) in force `by` and keeps
    /// it among the tenant's versions; clears the last load error.
    pub fn install(&self, loaded: Loaded, by: LoadedBy) -> Arc<Loaded> {
        let loaded = Arc::new(loaded);
        {
            let mut versions = self.versions.lock().expect("versions lock");
            match by {
                LoadedBy::Startup => versions.record_start(&loaded),
                _ => versions.record(&loaded, by),
            }
        }
        self.swap_arc(loaded.clone());
        loaded
    }

    /// The tenant's kept versions, newest first.
    pub fn versions(&self) -> Versions {
        self.versions.lock().expect("versions lock").clone()
    }

    /// Changes the kept versions with `f` (under their lock).
    pub fn with_versions<T>(&self, f: impl FnOnce(&mut Versions) -> T) -> T {
        f(&mut self.versions.lock().expect("versions lock"))
    }

    /// The id of the version in force; none for the built-in policy or a
    /// stand-in.
    pub fn version_id(&self) -> Option<Arc<str>> {
        version_of(&self.current())
    }

    /// Puts `loaded` in force and clears the last load error (a stand-in:
    /// not kept as a version; see [`TenantPolicy::install`]).
    pub fn swap(&self, loaded: Loaded) {
        self.swap_arc(Arc::new(loaded));
    }

    fn swap_arc(&self, loaded: Arc<Loaded>) {
        let timing = loaded.policy.has_timing();
        *self.current.write().expect("policy lock") = loaded;
        // After the swap: a reader that sees the new flag finds the new
        // policy (one that sees the old flag with the new policy asks it,
        // and a policy without `timing` answers "the configured values").
        self.timing.store(timing, Ordering::Release);
        *self.last_error.write().expect("policy lock") = None;
    }

    /// The shadow candidate, if one is loaded.
    pub fn shadow(&self) -> Option<Arc<Shadow>> {
        if !self.shadowed.load(Ordering::Acquire) {
            return None;
        }
        self.shadow.read().expect("shadow lock").clone()
    }

    /// Makes `shadow` the shadow candidate (none: ends the shadow); the one
    /// it replaces, if any.
    pub fn set_shadow(&self, shadow: Option<Arc<Shadow>>) -> Option<Arc<Shadow>> {
        let mut slot = self.shadow.write().expect("shadow lock");
        self.shadowed.store(shadow.is_some(), Ordering::Release);
        std::mem::replace(&mut *slot, shadow)
    }

    /// Records a failed load; the policy in force stays.
    pub fn set_error(&self, error: String) {
        *self.last_error.write().expect("policy lock") = Some(error);
    }

    /// Whether a real policy is in force (not the stand-in for a file that
    /// never loaded or is still loading).
    pub fn is_loaded(&self) -> bool {
        !self.current().stand_in
    }

    /// Whether the tenant's first policy is still being loaded.
    pub fn is_loading(&self) -> bool {
        self.current().loading
    }

    /// The last load error, if the last load failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.read().expect("policy lock").clone()
    }

    /// Maps a client key to its storage key. Fails closed.
    ///
    /// # Errors
    /// [`NamingError::Rejected`] with the policy's reason, or
    /// [`NamingError::Fault`] when the policy failed or returned a storage
    /// key that is empty or longer than [`MAX_STORAGE_KEY_BYTES`], or
    /// [`NamingError::Loading`] while the first policy is being loaded.
    pub async fn storage_key(&self, key: &str) -> Result<String, NamingError> {
        self.name(key).await.map(|(storage_key, _)| storage_key)
    }

    /// [`TenantPolicy::storage_key`], with the id of the version that named
    /// the key (none for the built-in policy).
    ///
    /// # Errors
    /// As [`TenantPolicy::storage_key`].
    pub async fn name(&self, key: &str) -> Result<(String, Option<Arc<str>>), NamingError> {
        let loaded = self.current();
        if loaded.loading {
            return Err(NamingError::Loading);
        }
        self.metrics.inc(
            "lockbroker_policy_calls_total",
            &[("tenant", &self.tenant), ("export", "naming")],
        );
        let (tenant, key_owned) = (self.tenant.clone(), key.to_owned());
        let answer = call(&loaded, "naming", move |p| {
            p.storage_key(&tenant, &key_owned)
        })
        .await;
        let answer = answer.and_then(checked_naming);
        if let (Some(shadow), Ok(named)) = (self.shadow(), &answer) {
            shadow.offer(Call::Naming {
                key: key.to_owned(),
                active: named.clone(),
            });
        }
        match answer {
            Ok(Ok(storage)) => Ok((storage, version_of(&loaded))),
            Ok(Err(reason)) => Err(NamingError::Rejected(reason)),
            Err(fault) => {
                self.fault(&loaded, "naming", &fault);
                Err(NamingError::Fault(fault))
            }
        }
    }

    /// True when the policy in force always grants the oldest waiter.
    pub fn always_oldest(&self) -> bool {
        self.current().policy.always_oldest()
    }

    /// Index of the waiter to grant next; the oldest if the policy fails.
    pub async fn pick_next(&self, key: &str, waiters: Vec<Waiter>) -> usize {
        let loaded = self.current();
        self.metrics.inc(
            "lockbroker_policy_calls_total",
            &[("tenant", &self.tenant), ("export", "fairness")],
        );
        let len = waiters.len();
        let shadowed = self.shadow().map(|s| (s, waiters.clone()));
        let key = key.to_owned();
        let asked = key.clone();
        let answer = call(&loaded, "fairness", move |p| p.pick_next(&asked, &waiters)).await;
        match answer.and_then(|i| checked_index(i, len)) {
            Ok(index) => {
                if let Some((shadow, waiters)) = shadowed {
                    shadow.offer(Call::Fairness {
                        key,
                        waiters,
                        active: index,
                    });
                }
                index
            }
            Err(fault) => {
                self.fault(&loaded, "fairness", &fault);
                builtin::pick_next(&[]) as usize
            }
        }
    }

    /// Delay before the next try; the built-in backoff if the policy fails.
    pub async fn next_delay(&self, contention: Contention) -> Decision {
        let loaded = self.current();
        self.metrics.inc(
            "lockbroker_policy_calls_total",
            &[("tenant", &self.tenant), ("export", "backoff")],
        );
        let fallback = builtin::next_delay(&contention);
        let shadowed = self.shadow().map(|s| (s, contention.clone()));
        match call(&loaded, "backoff", move |p| p.next_delay(&contention)).await {
            Ok(decision) => {
                if let Some((shadow, contention)) = shadowed {
                    shadow.offer(Call::Backoff {
                        contention,
                        active: decision,
                    });
                }
                decision
            }
            Err(fault) => {
                self.fault(&loaded, "backoff", &fault);
                fallback
            }
        }
    }

    /// Whether the policy in force overrides lock-delay and minimum hold:
    /// if not, [`TenantPolicy::timing`] need not be asked.
    pub fn has_timing(&self) -> bool {
        self.timing.load(Ordering::Acquire)
    }

    /// What the policy says of the delays of the lock stored as
    /// `storage_key`; all `None` (the tenant's configured values) if it
    /// exports no `timing`, or fails, or answers a value over
    /// [`MAX_DELAY_MS`] (a fallback, counted).
    pub async fn timing(&self, storage_key: &str) -> Timing {
        let loaded = self.current();
        if !loaded.policy.has_timing() {
            return Timing::default();
        }
        self.metrics.inc(
            "lockbroker_policy_calls_total",
            &[("tenant", &self.tenant), ("export", "timing")],
        );
        let key = storage_key.to_owned();
        match call(&loaded, "timing", move |p| p.timing(&key))
            .await
            .and_then(Timing::checked)
        {
            Ok(timing) => {
                if let Some(shadow) = self.shadow() {
                    shadow.offer(Call::Timing {
                        storage_key: storage_key.to_owned(),
                        active: timing,
                    });
                }
                timing
            }
            Err(fault) => {
                self.fault(&loaded, "timing", &fault);
                Timing::default()
            }
        }
    }

    /// Whether the policy in force exports `deadlocks` (asked only on a
    /// session's wait for a key another session holds: no flag kept).
    pub fn has_deadlocks(&self) -> bool {
        self.current().policy.has_deadlocks()
    }

    /// Whether a session's wait for the key stored as `storage_key` is
    /// refused when it would close a cycle: `true` unless the policy's
    /// `deadlocks` says otherwise; a failure counts as `true` (a fallback,
    /// counted), as does a policy that does not export it (not asked).
    /// An answer is put to the shadow candidate, if any: a candidate is
    /// compared on `deadlocks` only while the policy in force exports it
    /// (as on `timing`).
    pub async fn detects_deadlocks(&self, storage_key: &str) -> bool {
        let loaded = self.current();
        if !loaded.policy.has_deadlocks() {
            return true;
        }
        self.metrics.inc(
            "lockbroker_policy_calls_total",
            &[("tenant", &self.tenant), ("export", "deadlocks")],
        );
        let key = storage_key.to_owned();
        match call(&loaded, "deadlocks", move |p| p.detects_deadlocks(&key)).await {
            Ok(detect) => {
                if let Some(shadow) = self.shadow() {
                    shadow.offer(Call::Deadlocks {
                        storage_key: storage_key.to_owned(),
                        active: detect,
                    });
                }
                detect
            }
            Err(fault) => {
                self.fault(&loaded, "deadlocks", &fault);
                true
            }
        }
    }

    fn fault(&self, loaded: &Loaded, export: &'static str, fault: &PolicyFault) {
        let sha = loaded.sha256.as_deref().unwrap_or("builtin");
        tracing::warn!(tenant = %self.tenant, policy_sha256 = sha, export, %fault, "policy call failed");
        self.metrics.inc(
            "lockbroker_policy_failures_total",
            &[("tenant", &self.tenant), ("export", export)],
        );
        // Naming fails closed; fairness and backoff fall back to the
        // built-in, timing to the tenant's configured delays, deadlocks to
        // the check (on).
        if export != "naming" {
            self.metrics.inc(
                "lockbroker_policy_fallbacks_total",
                &[("tenant", &self.tenant), ("export", export)],
            );
        }
    }
}

/// A naming answer, if its storage key is 1 to [`MAX_STORAGE_KEY_BYTES`]
/// long (a rejection passes as it is).
///
/// # Errors
/// [`PolicyFault::BadAnswer`] for a storage key out of range.
pub(crate) fn checked_naming(
    named: Result<String, String>,
) -> Result<Result<String, String>, PolicyFault> {
    match named {
        Ok(storage) if storage.is_empty() || storage.len() > MAX_STORAGE_KEY_BYTES => {
            Err(PolicyFault::BadAnswer(format!(
                "storage key of {} bytes (1 to {MAX_STORAGE_KEY_BYTES} allowed)",
                storage.len()
            )))
        }
        other => Ok(other),
    }
}

/// A fairness answer, if it is the index of one of `len` waiters.
///
/// # Errors
/// [`PolicyFault::BadAnswer`] otherwise.
pub(crate) fn checked_index(index: u32, len: usize) -> Result<usize, PolicyFault> {
    usize::try_from(index)
        .ok()
        .filter(|i| *i < len)
        .ok_or_else(|| PolicyFault::BadAnswer(format!("index {index} of {len} waiters")))
}

/// The id of `loaded`'s version; none for the built-in policy or a
/// stand-in.
fn version_of(loaded: &Loaded) -> Option<Arc<str>> {
    match (&loaded.sha256, loaded.stand_in) {
        (Some(sha), false) => Some(Arc::from(versions::short_id(sha))),
        _ => None,
    }
}

/// Runs one policy call of `export`, a span (`policy.call`) when tracing
/// is on.
async fn call<T: Send + 'static>(
    loaded: &Loaded,
    export: &'static str,
    f: impl FnOnce(&dyn Policy) -> Result<T, PolicyFault> + Send + 'static,
) -> Result<T, PolicyFault> {
    let span = tracing::info_span!(
        "policy.call",
        lockbroker.policy.export = export,
        lockbroker.policy.version = tracing::field::display(loaded.id()),
        lockbroker.outcome = tracing::field::Empty,
    );
    let answer = run(loaded, f).instrument(span.clone()).await;
    let outcome = if answer.is_ok() { "ok" } else { "fault" };
    span.record("lockbroker.outcome", outcome);
    answer
}

/// Runs one policy call. A call that may block (a WebAssembly guest that
/// was slow lately, up to its deadline) runs where it cannot stall the
/// reactor: in place on a multi-threaded runtime (its other tasks move to
/// other workers), else on the blocking pool.
async fn run<T: Send + 'static>(
    loaded: &Loaded,
    f: impl FnOnce(&dyn Policy) -> Result<T, PolicyFault> + Send + 'static,
) -> Result<T, PolicyFault> {
    if !loaded.policy.blocks() {
        return f(&*loaded.policy);
    }
    let policy = loaded.policy.clone();
    let flavor = tokio::runtime::Handle::current().runtime_flavor();
    if flavor == tokio::runtime::RuntimeFlavor::MultiThread {
        return tokio::task::block_in_place(move || f(&*policy));
    }
    tokio::task::spawn_blocking(move || f(&*policy))
        .await
        .unwrap_or_else(|e| Err(PolicyFault::Trap(format!("policy call panicked: {e}"))))
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policys_timing_overrides_each_value_it_gives() {
        let config = Delays {
            lock_delay_ms: 100,
            min_hold_ms: 200,
        };
        assert_eq!(config.overridden_by(Timing::default()), config);
        let both = Timing {
            lock_delay_ms: Some(0),
            min_hold_ms: Some(5_000),
        };
        assert_eq!(
            config.overridden_by(both),
            Delays {
                lock_delay_ms: 0,
                min_hold_ms: 5_000
            }
        );
        let one = Timing {
            lock_delay_ms: Some(7),
            min_hold_ms: None,
        };
        assert_eq!(
            Delays::default().overridden_by(one),
            Delays {
                lock_delay_ms: 7,
                min_hold_ms: 0
            }
        );
    }

    /// A policy whose every call fails, to check the fallbacks.
    struct Broken;
    impl Policy for Broken {
        fn describe(&self) -> Result<Descriptor, PolicyFault> {
            Err(PolicyFault::Timeout)
        }
        fn storage_key(&self, _: &str, _: &str) -> Result<Result<String, String>, PolicyFault> {
            Err(PolicyFault::Trap("boom".into()))
        }
        fn pick_next(&self, _: &str, _: &[Waiter]) -> Result<u32, PolicyFault> {
            Ok(7)
        }
        fn next_delay(&self, _: &Contention) -> Result<Decision, PolicyFault> {
            Err(PolicyFault::OutOfMemory)
        }
    }

    /// The four calls every policy answers, answered as the built-in does:
    /// for test policies that differ only in an optional export.
    macro_rules! builtin_required_calls {
        () => {
            fn describe(&self) -> Result<Descriptor, PolicyFault> {
                Builtin.describe()
            }
            fn storage_key(&self, t: &str, k: &str) -> Result<Result<String, String>, PolicyFault> {
                Builtin.storage_key(t, k)
            }
            fn pick_next(&self, k: &str, w: &[Waiter]) -> Result<u32, PolicyFault> {
                Builtin.pick_next(k, w)
            }
            fn next_delay(&self, c: &Contention) -> Result<Decision, PolicyFault> {
                Builtin.next_delay(c)
            }
        };
    }

    /// A policy whose `timing` answers per key: a trap for `trap`, two
    /// days for `huge`, a minimum hold otherwise.
    struct Timed;
    impl Policy for Timed {
        builtin_required_calls!();
        fn has_timing(&self) -> bool {
            true
        }
        fn timing(&self, key: &str) -> Result<Timing, PolicyFault> {
            match key {
                "trap" => Err(PolicyFault::Trap("boom".into())),
                "huge" => Ok(Timing {
                    lock_delay_ms: Some(2 * MAX_DELAY_MS),
                    min_hold_ms: None,
                }),
                _ => Ok(Timing {
                    lock_delay_ms: None,
                    min_hold_ms: Some(MAX_DELAY_MS),
                }),
            }
        }
    }

    fn loaded(policy: impl Policy) -> Loaded {
        Loaded {
            policy: Arc::new(policy),
            ..Loaded::builtin()
        }
    }

    #[tokio::test]
    async fn timing_is_asked_only_of_a_policy_that_has_it_and_falls_back() {
        let metrics = Arc::new(Metrics::default());
        let policy = TenantPolicy::new("t", None, loaded(Timed), metrics.clone());
        assert!(policy.has_timing());
        let hold = Timing {
            lock_delay_ms: None,
            min_hold_ms: Some(MAX_DELAY_MS),
        };
        assert_eq!(policy.timing("job").await, hold);
        // A trap or a value over a day: the configured values, counted.
        assert_eq!(policy.timing("trap").await, Timing::default());
        assert_eq!(policy.timing("huge").await, Timing::default());
        let text = metrics.render();
        assert!(
            text.contains("lockbroker_policy_fallbacks_total{tenant=\"t\",export=\"timing\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("lockbroker_policy_calls_total{tenant=\"t\",export=\"timing\"} 3"),
            "{text}"
        );
        // Swapped for a policy without it: not asked any more.
        policy.swap(Loaded::builtin());
        assert!(!policy.has_timing());
        assert_eq!(policy.timing("job").await, Timing::default());
        assert!(metrics
            .render()
            .contains("lockbroker_policy_calls_total{tenant=\"t\",export=\"timing\"} 3"));
        policy.swap(loaded(Timed));
        assert!(policy.has_timing());
        assert_eq!(policy.timing("job").await, hold);
    }

    /// A policy whose `deadlocks` leaves keys with `plain` unchecked and
    /// traps on keys with `trap`.
    struct Unchecked;
    impl Policy for Unchecked {
        builtin_required_calls!();
        fn has_deadlocks(&self) -> bool {
            true
        }
        fn detects_deadlocks(&self, key: &str) -> Result<bool, PolicyFault> {
            if key.contains("trap") {
                return Err(PolicyFault::Trap("boom".into()));
            }
            Ok(!key.contains("plain"))
        }
    }

    #[tokio::test]
    async fn deadlocks_answers_go_to_the_shadow_while_the_policy_in_force_has_it() {
        let metrics = Arc::new(Metrics::default());
        let policy = TenantPolicy::new("t", None, loaded(Unchecked), metrics.clone());
        // The built-in candidate checks every key.
        let shadow = Shadow::start("t", Loaded::builtin(), Vec::new(), metrics.clone()).unwrap();
        let shadow = Arc::new(shadow);
        policy.set_shadow(Some(shadow.clone()));
        assert!(policy.detects_deadlocks("job").await);
        assert!(!policy.detects_deadlocks("plain-job").await);
        // A failure falls back to the check: nothing to compare.
        assert!(policy.detects_deadlocks("trap").await);
        // A policy in force without `deadlocks` is not asked: nothing to
        // compare either.
        policy.swap(Loaded::builtin());
        assert!(policy.detects_deadlocks("plain-job").await);
        // A backoff call after them: once it is judged, so are they.
        policy.next_delay(Contention::default()).await;
        let started = std::time::Instant::now();
        while shadow.counts(shadow::Export::Backoff).agree == 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(30));
            std::thread::yield_now();
        }
        assert_eq!(
            shadow.counts(shadow::Export::Deadlocks),
            shadow::Counts {
                agree: 1,
                disagree: 1,
                failed: 0,
                dropped: 0
            }
        );
        let examples = shadow.examples();
        assert_eq!(examples.len(), 1, "{examples:?}");
        let e = &examples[0];
        assert_eq!(
            (
                e.export,
                e.input.as_str(),
                e.active.as_str(),
                e.candidate.as_str()
            ),
            (
                shadow::Export::Deadlocks,
                "storage key \"plain-job\"",
                "not checked",
                "checked"
            )
        );
        assert!(metrics.render().contains(
            "lockbroker_policy_shadow_total{tenant=\"t\",export=\"deadlocks\",outcome=\"disagree\"} 1"
        ));
    }

    fn broken() -> (TenantPolicy, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::default());
        let loaded = Loaded {
            policy: Arc::new(Broken),
            descriptor: Descriptor {
                name: "broken".into(),
                version: "0".into(),
            },
            sha256: Some("abc".into()),
            stand_in: false,
            loading: false,
            from_cache: false,
            loaded_at: now_rfc3339(),
        };
        (
            TenantPolicy::new("t", None, loaded, metrics.clone()),
            metrics,
        )
    }

    #[tokio::test]
    async fn naming_fails_closed() {
        let (policy, metrics) = broken();
        let err = policy.storage_key("job").await.unwrap_err();
        assert!(matches!(err, NamingError::Fault(PolicyFault::Trap(_))));
        assert!(metrics
            .render()
            .contains("lockbroker_policy_failures_total{tenant=\"t\",export=\"naming\"} 1"));
    }

    /// `policy` answers fairness and backoff as the built-in policy does.
    async fn falls_back_to_builtin(policy: &TenantPolicy, attempt: u32, seed: u64) {
        let waiters = vec![Waiter::default(), Waiter::default()];
        assert_eq!(policy.pick_next("k", waiters).await, 0);
        let contention = Contention {
            attempt,
            seed,
            ..Contention::default()
        };
        assert_eq!(
            policy.next_delay(contention.clone()).await,
            builtin::next_delay(&contention)
        );
    }

    #[tokio::test]
    async fn fairness_and_backoff_fall_back() {
        let (policy, metrics) = broken();
        falls_back_to_builtin(&policy, 1, 5).await;
        let text = metrics.render();
        assert!(text.contains("export=\"fairness\"} 1"), "{text}");
        assert!(text.contains("export=\"backoff\"} 1"), "{text}");
    }

    #[tokio::test]
    async fn a_policy_still_loading_fails_naming_closed_and_falls_back() {
        let metrics = Arc::new(Metrics::default());
        let policy = TenantPolicy::new("t", None, reload::loading(), metrics.clone());
        assert!(policy.is_loading() && !policy.is_loaded());
        let err = policy.storage_key("job").await.unwrap_err();
        assert!(matches!(err, NamingError::Loading), "{err:?}");
        falls_back_to_builtin(&policy, 3, 77).await;
        // Expected while starting: no failure counted.
        assert!(!metrics
            .render()
            .contains("lockbroker_policy_failures_total{"));
        policy.swap(Loaded::builtin());
        assert!(!policy.is_loading() && policy.is_loaded());
        assert_eq!(policy.storage_key("job").await.unwrap(), "job");
    }

    #[tokio::test]
    async fn swap_replaces_and_clears_errors() {
        let (policy, _) = broken();
        policy.set_error("bad file".into());
        assert_eq!(policy.last_error().as_deref(), Some("bad file"));
        let before = policy.current();
        policy.swap(Loaded::builtin());
        assert_eq!(policy.last_error(), None);
        assert_eq!(policy.storage_key("job").await.unwrap(), "job");
        // An in-flight request keeps the policy it started with.
        assert_eq!(before.descriptor.name, "broken");
        let err = policy.storage_key("").await.unwrap_err();
        assert!(matches!(err, NamingError::Rejected(_)));
    }
}
