//! A loaded policy component and its reusable instances.
//!
//! Instances are pooled: a call takes an idle one (or instantiates a new
//! one from the `InstancePre`, tens of microseconds), sets its epoch
//! deadline, calls, and puts it back. An instance whose call trapped,
//! timed out or overran its memory is dropped, never reused: wasmtime
//! refuses to enter it again, and its state is suspect anyway.
//!
//! A component that imports WASI gets a fresh, empty WASI in each store
//! (see `wasi`); one that imports nothing carries no WASI state at all.
//!
//! A policy that was slow lately runs its calls off the async workers
//! (`blocks`). Slow is judged in two steps, because on a busy machine a
//! thread descheduled mid-call makes a 0.5 µs call look slow by any clock,
//! and isolating a fast policy for that costs every one of its calls a
//! thread hand-off (`block_in_place`) for [`ISOLATE_FOR`]: a call that took
//! half its deadline in epoch ticks makes the policy a suspect, and a
//! suspect's calls are also timed in thread CPU time (a system call, about
//! 1.2 µs here, so not for every call); one that used half its deadline of
//! CPU, or any call cut off at its deadline, isolates it.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};

use super::{
    bindings::{
        exports::lockbroker::policy::{backoff, fairness},
        Policy as Bindings, PolicyPre,
    },
    wasi::{self, WasiState},
    Limits, LoadOptions, Ticks,
};
use crate::policy::{Contention, Decision, Descriptor, Policy, PolicyFault, Timing, Waiter};

/// Instances (core modules and components) one store may create: a
/// componentize-py guest is a dozen modules linked together.
const MAX_INSTANCES: usize = 64;
/// Idle instances kept per policy: more concurrent calls than this make
/// short-lived extra instances.
const MAX_IDLE: usize = 16;
/// A call that takes this share of its deadline makes the policy a
/// suspect (in epoch ticks) or slow (in thread CPU time, or cut off).
const SLOW_SHARE_OF_DEADLINE: u32 = 2;
/// How long a slow policy's calls run off the async workers, and how long
/// a suspect's calls are timed in CPU time.
const ISOLATE_FOR: Duration = Duration::from_secs(10);

/// CPU time this thread has used. A system call (not in the vDSO): only
/// for the calls of a suspect.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        // Not measurable: count the call as having used no CPU, so it is
        // judged by its ticks alone (and a timeout still isolates).
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// What each store carries: its resource limits and, for a component that
/// imports WASI, that WASI (boxed: a pointer's overhead for the others).
pub struct StoreState {
    limits: StoreLimits,
    pub(super) wasi: Option<Box<WasiState>>,
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
    /// For the log line that says the policy was isolated.
    tenant: Arc<str>,
    /// Where WASI output goes; `None` for a component without WASI.
    wasi: Option<wasi::Output>,
    idle: Mutex<Vec<Instance>>,
    /// The host's epoch ticks: the clock of the two marks below.
    ticks: Ticks,
    /// Until when (in ticks) calls are also timed in thread CPU time.
    suspect_until: AtomicU64,
    /// Until when (in ticks) calls should run off the async workers.
    slow_until: AtomicU64,
}

impl WasmPolicy {
    pub(super) fn new(
        engine: Engine,
        pre: PolicyPre<StoreState>,
        options: &LoadOptions,
        wasi: Option<wasi::Output>,
        ticks: Ticks,
    ) -> WasmPolicy {
        WasmPolicy {
            engine,
            pre,
            limits: options.limits,
            tenant: Arc::from(options.tenant.as_str()),
            wasi,
            idle: Mutex::new(Vec::new()),
            ticks,
            suspect_until: AtomicU64::new(0),
            slow_until: AtomicU64::new(0),
        }
    }

    /// Ticks from now until the end of a mark set now.
    fn mark_end(&self) -> u64 {
        self.ticks.now().saturating_add(ticks(ISOLATE_FOR))
    }

    /// Sends the policy's calls off the async workers for [`ISOLATE_FOR`].
    fn isolate(&self, why: &str) {
        let was = self.slow_until.swap(self.mark_end(), Ordering::Relaxed);
        if was <= self.ticks.now() {
            tracing::warn!(
                tenant = %self.tenant,
                why,
                "policy calls run off the async workers for {} s",
                ISOLATE_FOR.as_secs()
            );
        }
    }

    fn instantiate(&self) -> Result<Instance, PolicyFault> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.limits.memory_bytes)
            .table_elements(100_000)
            .instances(MAX_INSTANCES)
            .trap_on_grow_failure(true)
            .build();
        let wasi = self.wasi.as_ref().map(|out| Box::new(wasi::context(out)));
        let mut store = Store::new(&self.engine, StoreState { limits, wasi });
        store.limiter(|state| &mut state.limits);
        // Instantiating runs the guest's start code (an interpreter boots
        // here), once per pooled instance: bounded, but not by the budget
        // of one call, or large guests could never start.
        store.set_epoch_deadline(self.deadline_ticks().max(ticks(INSTANTIATE_BUDGET)));
        let bindings = self.pre.instantiate(&mut store).map_err(fault)?;
        Ok(Instance { store, bindings })
    }

    /// Epoch ticks a call may run: the deadline, plus one for the tick
    /// that may come right after the call starts.
    fn deadline_ticks(&self) -> u64 {
        ticks(self.limits.deadline) + 1
    }

    /// Ticks that make a call suspect: more than half the deadline has
    /// passed once this many ticks came during it (the first may come
    /// right after the call starts).
    fn slow_ticks(&self) -> u64 {
        ticks(self.limits.deadline / SLOW_SHARE_OF_DEADLINE) + 1
    }

    /// Runs `f` on an idle (or new) instance within the limits, and marks
    /// the policy suspect or slow if the call was (see the module's docs).
    /// Making a new instance is not timed: it happens once per pooled
    /// instance, and counting it would mark every policy slow on its first
    /// call on a busy machine.
    fn with_instance<T>(
        &self,
        f: impl FnOnce(&mut Store<StoreState>, &Bindings) -> wasmtime::Result<T>,
    ) -> Result<T, PolicyFault> {
        let idle = self.idle.lock().expect("instance pool").pop();
        let mut instance = match idle {
            Some(instance) => instance,
            None => self.instantiate()?,
        };
        instance.store.set_epoch_deadline(self.deadline_ticks());
        let started = self.ticks.now();
        let cpu_started =
            (self.suspect_until.load(Ordering::Relaxed) > started).then(thread_cpu_time);
        let result = f(&mut instance.store, &instance.bindings).map_err(fault);
        let took = self.ticks.now().saturating_sub(started);
        let cut_off = matches!(result, Err(PolicyFault::Timeout));
        let slow_by_ticks = took >= self.slow_ticks();
        let cpu = || cpu_started.map(|t0| thread_cpu_time().saturating_sub(t0));
        match judge(cut_off, slow_by_ticks, cpu, self.limits.deadline) {
            Mark::None => {}
            Mark::Suspect => self.suspect_until.store(self.mark_end(), Ordering::Relaxed),
            Mark::Isolate(why) => self.isolate(why),
        }
        let result = result?;
        let mut idle = self.idle.lock().expect("instance pool");
        if idle.len() < MAX_IDLE {
            idle.push(instance);
        }
        Ok(result)
    }

    /// Calls every export once with harmless arguments; the descriptor if
    /// all answer.
    ///
    /// A call cut off at its deadline is tried again (up to
    /// [`SELF_CHECK_TRIES`] times): on a busy machine the thread may be
    /// descheduled past a few milliseconds once, and refusing a policy for
    /// that would fail the tenant closed; a policy that is always too slow
    /// still fails.
    pub(super) fn self_check(&self) -> Result<Descriptor, PolicyFault> {
        let descriptor = retry_timeouts(|| self.describe())?;
        let _named = retry_timeouts(|| self.storage_key("self-check", "self-check"))?;
        let waiter = Waiter {
            owner: "self-check".into(),
            ..Waiter::default()
        };
        retry_timeouts(|| self.pick_next("self-check", std::slice::from_ref(&waiter)))?;
        retry_timeouts(|| {
            self.next_delay(&Contention {
                attempt: 1,
                ..Contention::default()
            })
        })?;
        if self.has_timing() {
            retry_timeouts(|| self.timing("self-check"))?;
        }
        if self.has_deadlocks() {
            retry_timeouts(|| self.detects_deadlocks("self-check"))?;
        }
        // The first calls ran on fresh instances of a just-compiled policy,
        // on a machine busy compiling: they say nothing of its speed, so
        // they do not move it off the caller's thread.
        self.slow_until.store(0, Ordering::Relaxed);
        Ok(descriptor)
    }
}

/// What one call makes of its policy.
#[derive(Debug, PartialEq, Eq)]
enum Mark {
    None,
    /// Time its next calls in CPU time too.
    Suspect,
    /// Move its calls off the async workers, for this reason.
    Isolate(&'static str),
}

/// The slow mark's rule: a call cut off at its deadline isolates; one slow
/// by the ticks isolates if it was timed in CPU time (a suspect's) and used
/// half its deadline of it, and otherwise only makes the policy a suspect
/// (a thread descheduled mid-call looks the same by any clock). `cpu` is
/// read only when it matters.
fn judge(
    cut_off: bool,
    slow_by_ticks: bool,
    cpu: impl FnOnce() -> Option<Duration>,
    deadline: Duration,
) -> Mark {
    if cut_off {
        return Mark::Isolate("a call was cut off at its deadline");
    }
    if !slow_by_ticks {
        return Mark::None;
    }
    match cpu() {
        Some(used) if used >= deadline / SLOW_SHARE_OF_DEADLINE => {
            Mark::Isolate("a call used half its deadline of CPU time")
        }
        _ => Mark::Suspect,
    }
}

/// Attempts a self-check call gets when it is cut off at its deadline.
const SELF_CHECK_TRIES: usize = 3;
/// Time the guest's start code may take when an instance is made.
const INSTANTIATE_BUDGET: Duration = Duration::from_millis(500);

/// Epoch ticks in `d`.
fn ticks(d: Duration) -> u64 {
    let tick = super::EPOCH_TICK.as_millis().max(1);
    u64::try_from(d.as_millis() / tick).unwrap_or(u64::MAX)
}

fn retry_timeouts<T>(mut call: impl FnMut() -> Result<T, PolicyFault>) -> Result<T, PolicyFault> {
    let mut tries = 1;
    loop {
        match call() {
            Err(PolicyFault::Timeout) if tries < SELF_CHECK_TRIES => tries += 1,
            other => return other,
        }
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
        let d = self.with_instance(|store, b| b.meta.call_describe(store))?;
        Ok(Descriptor {
            name: d.name,
            version: d.version,
        })
    }

    fn storage_key(&self, tenant: &str, key: &str) -> Result<Result<String, String>, PolicyFault> {
        self.with_instance(|store, b| b.naming.call_storage_key(store, tenant, key))
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
        self.with_instance(|store, b| b.fairness.call_pick_next(store, key, &waiters))
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
        let decision =
            self.with_instance(|store, b| b.backoff.call_next_delay(store, contention))?;
        Ok(match decision {
            backoff::Decision::RetryAfter(ms) => Decision::RetryAfter(ms),
            backoff::Decision::GiveUp => Decision::GiveUp,
        })
    }

    fn has_timing(&self) -> bool {
        self.pre.has_timing()
    }

    fn timing(&self, storage_key: &str) -> Result<Timing, PolicyFault> {
        let delays = self.with_instance(|store, b| match &b.timing {
            Some(timing) => timing.call_delays(store, storage_key).map(Some),
            None => Ok(None),
        })?;
        Ok(delays.map_or_else(Timing::default, |d| Timing {
            lock_delay_ms: d.lock_delay_ms,
            min_hold_ms: d.min_hold_ms,
        }))
    }

    fn has_deadlocks(&self) -> bool {
        self.pre.has_deadlocks()
    }

    fn detects_deadlocks(&self, storage_key: &str) -> Result<bool, PolicyFault> {
        self.with_instance(|store, b| match &b.deadlocks {
            Some(deadlocks) => deadlocks.call_detect(store, storage_key),
            None => Ok(true),
        })
    }

    /// A well-behaved policy answers in well under a microsecond: calling
    /// it in place costs less than moving the call to another thread. One
    /// that was slow lately (or was cut off at its deadline) runs off the
    /// async workers for a while, so it cannot stall other requests. One
    /// with WASI always runs off them: wasmtime-wasi's synchronous host
    /// calls `block_on`, which panics on an async worker (see `wasi`).
    fn blocks(&self) -> bool {
        self.wasi.is_some() || self.slow_until.load(Ordering::Relaxed) > self.ticks.now()
    }
}

#[cfg(test)]
mod slow_mark_tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_millis(5);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_call_cut_off_isolates_at_once() {
        assert!(matches!(
            judge(true, false, || None, DEADLINE),
            Mark::Isolate(_)
        ));
        assert!(matches!(
            judge(true, true, || Some(ms(0)), DEADLINE),
            Mark::Isolate(_)
        ));
    }

    #[test]
    fn a_call_slow_only_by_the_clock_makes_a_suspect() {
        // Not yet timed in CPU time, or timed and found fast: descheduled.
        assert_eq!(judge(false, true, || None, DEADLINE), Mark::Suspect);
        assert_eq!(judge(false, true, || Some(ms(1)), DEADLINE), Mark::Suspect);
    }

    #[test]
    fn a_suspect_that_burns_half_its_deadline_of_cpu_is_isolated() {
        assert!(matches!(
            judge(false, true, || Some(ms(3)), DEADLINE),
            Mark::Isolate(_)
        ));
    }

    #[test]
    fn a_fast_call_reads_no_cpu_time_and_marks_nothing() {
        let cpu = || -> Option<Duration> { panic!("CPU time read for a fast call") };
        assert_eq!(judge(false, false, cpu, DEADLINE), Mark::None);
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let t0 = thread_cpu_time();
        let started = std::time::Instant::now();
        let mut turns = 0u64;
        // Bounded: stops after 2 ms of CPU or 200 ms of wall time.
        while thread_cpu_time().saturating_sub(t0) < ms(2) && started.elapsed() < ms(200) {
            turns = std::hint::black_box(turns + 1);
        }
        assert!(
            thread_cpu_time() > t0,
            "no CPU time counted after {turns} turns"
        );
    }
}
