//! A loaded policy component and its reusable instances.
//!
//! Instances are pooled: a call takes an idle one (or instantiates a new
//! one from the `InstancePre`, tens of microseconds), sets its epoch
//! deadline, calls, and puts it back. An instance whose call trapped,
//! timed out or overran its memory is dropped, never reused: wasmtime
//! refuses to enter it again, and its state is suspect anyway.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};

use super::{
    bindings::{
        exports::lockbroker::policy::{backoff, fairness},
        Policy as Bindings, PolicyPre,
    },
    Limits,
};
use crate::policy::{Contention, Decision, Descriptor, Policy, PolicyFault, Waiter};

/// Idle instances kept per policy: more concurrent calls than this make
/// short-lived extra instances.
const MAX_IDLE: usize = 16;
/// A call that takes this share of its deadline (or is cut off at it) marks
/// the policy slow. Wall time: a thread descheduled for that long mid-call
/// marks a fast policy too, which only costs it a thread hand-off per call
/// for a while.
const SLOW_SHARE_OF_DEADLINE: u32 = 2;
/// How long a slow policy's calls run off the async workers.
const ISOLATE_FOR: Duration = Duration::from_secs(10);

/// Milliseconds since the first call in this process: a cheap clock for
/// the slow mark.
fn clock_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What each store carries: only its resource limits.
pub struct StoreState {
    limits: StoreLimits,
}

struct Instance {
    store: Store<StoreState>,
    bindings: Bindings,
}

/// A policy component in force for a tenant.
pub struct WasmPolicy {
    engine: Engine,
    pre: PolicyPre<StoreState>,
    limits: Limits,
    idle: Mutex<Vec<Instance>>,
    /// Until when (by [`clock_ms`]) calls should run off the async workers.
    slow_until: AtomicU64,
}

impl WasmPolicy {
    pub(super) fn new(engine: Engine, pre: PolicyPre<StoreState>, limits: Limits) -> WasmPolicy {
        WasmPolicy {
            engine,
            pre,
            limits,
            idle: Mutex::new(Vec::new()),
            slow_until: AtomicU64::new(0),
        }
    }

    fn instantiate(&self) -> Result<Instance, PolicyFault> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.limits.memory_bytes)
            .table_elements(100_000)
            .instances(16)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(&self.engine, StoreState { limits });
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(self.deadline_ticks());
        let bindings = self.pre.instantiate(&mut store).map_err(fault)?;
        Ok(Instance { store, bindings })
    }

    /// Epoch ticks a call may run: the deadline, plus one for the tick
    /// that may come right after the call starts.
    fn deadline_ticks(&self) -> u64 {
        let tick = super::EPOCH_TICK.as_millis().max(1);
        u64::try_from(self.limits.deadline.as_millis() / tick).unwrap_or(u64::MAX) + 1
    }

    /// Runs `f` on an idle (or new) instance within the limits, and marks
    /// the policy slow if the call was.
    fn with_instance<T>(
        &self,
        f: impl FnOnce(&mut Store<StoreState>, &Bindings) -> wasmtime::Result<T>,
    ) -> Result<T, PolicyFault> {
        let started = Instant::now();
        let result = self.call_instance(f);
        let slow = started.elapsed() >= self.limits.deadline / SLOW_SHARE_OF_DEADLINE;
        if slow || matches!(result, Err(PolicyFault::Timeout)) {
            let until = clock_ms().saturating_add(ISOLATE_FOR.as_millis() as u64);
            self.slow_until.store(until, Ordering::Relaxed);
        }
        result
    }

    fn call_instance<T>(
        &self,
        f: impl FnOnce(&mut Store<StoreState>, &Bindings) -> wasmtime::Result<T>,
    ) -> Result<T, PolicyFault> {
        let idle = self.idle.lock().expect("instance pool").pop();
        let mut instance = match idle {
            Some(instance) => instance,
            None => self.instantiate()?,
        };
        instance.store.set_epoch_deadline(self.deadline_ticks());
        let result = f(&mut instance.store, &instance.bindings).map_err(fault)?;
        let mut idle = self.idle.lock().expect("instance pool");
        if idle.len() < MAX_IDLE {
            idle.push(instance);
        }
        Ok(result)
    }

    /// Calls every export once with harmless arguments; the descriptor if
    /// all answer.
    pub(super) fn self_check(&self) -> Result<Descriptor, PolicyFault> {
        let descriptor = self.describe()?;
        let _named = self.storage_key("self-check", "self-check")?;
        let waiter = Waiter {
            owner: "self-check".into(),
            ..Waiter::default()
        };
        self.pick_next("self-check", &[waiter])?;
        self.next_delay(&Contention {
            attempt: 1,
            ..Contention::default()
        })?;
        Ok(descriptor)
    }
}

/// What went wrong in a call, as a [`PolicyFault`].
fn fault(err: wasmtime::Error) -> PolicyFault {
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => PolicyFault::Timeout,
        Some(Trap::StackOverflow) => PolicyFault::Trap("stack overflow".into()),
        Some(trap) => PolicyFault::Trap(trap.to_string()),
        None if format!("{err:#}").contains("forcing trap when growing memory") => {
            PolicyFault::OutOfMemory
        }
        None => PolicyFault::Trap(format!("{err:#}")),
    }
}

impl Policy for WasmPolicy {
    fn describe(&self) -> Result<Descriptor, PolicyFault> {
        let d = self.with_instance(|store, b| b.lockbroker_policy_meta().call_describe(store))?;
        Ok(Descriptor {
            name: d.name,
            version: d.version,
        })
    }

    fn storage_key(&self, tenant: &str, key: &str) -> Result<Result<String, String>, PolicyFault> {
        self.with_instance(|store, b| {
            b.lockbroker_policy_naming()
                .call_storage_key(store, tenant, key)
        })
    }

    fn pick_next(&self, key: &str, waiters: &[Waiter]) -> Result<u32, PolicyFault> {
        let waiters: Vec<fairness::Waiter> = waiters
            .iter()
            .map(|w| fairness::Waiter {
                id: w.id,
                owner: w.owner.clone(),
                priority: w.priority,
                enqueued_at_ms: w.enqueued_at_ms,
                attempts: w.attempts,
            })
            .collect();
        self.with_instance(|store, b| {
            b.lockbroker_policy_fairness()
                .call_pick_next(store, key, &waiters)
        })
    }

    fn next_delay(&self, c: &Contention) -> Result<Decision, PolicyFault> {
        let contention = backoff::Contention {
            attempt: c.attempt,
            waited_ms: c.waited_ms,
            budget_ms: c.budget_ms,
            waiters: c.waiters,
            lease_remaining_ms: c.lease_remaining_ms,
            seed: c.seed,
        };
        let decision = self.with_instance(|store, b| {
            b.lockbroker_policy_backoff()
                .call_next_delay(store, contention)
        })?;
        Ok(match decision {
            backoff::Decision::RetryAfter(ms) => Decision::RetryAfter(ms),
            backoff::Decision::GiveUp => Decision::GiveUp,
        })
    }

    /// A well-behaved policy answers in well under a microsecond: calling
    /// it in place costs less than moving the call to another thread. One
    /// that was slow lately (or was cut off at its deadline) runs off the
    /// async workers for a while, so it cannot stall other requests.
    fn blocks(&self) -> bool {
        clock_ms() < self.slow_until.load(Ordering::Relaxed)
    }
}
