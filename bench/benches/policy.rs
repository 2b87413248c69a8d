//! Per-call cost of a tenant policy: the built-in (native) policy against
//! the `default.wasm` component (same behaviour), both called through the
//! `Policy` trait, the component on a reused pooled instance. Also the cost
//! of loading the component: compiling it (no cache) and loading it from a
//! warm on-disk cache.
//!
//! `cargo bench -p lockbench --bench policy` (needs plugins/dist/default.wasm:
//! run scripts/build-plugins first).

use std::{
    hint::black_box,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use criterion::{criterion_group, criterion_main, Criterion};
use lockbroker::{
    metrics::Metrics,
    policy::{
        wasm::{Limits, WasmHost},
        Builtin, Contention, Loaded, Policy, PolicyFault, TenantPolicy, Waiter,
    },
};

fn limits() -> Limits {
    Limits {
        deadline: Duration::from_millis(5),
        memory_bytes: 16 << 20,
    }
}

fn component_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/default.wasm")
}

fn component() -> Vec<u8> {
    let path = component_path();
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}): run scripts/build-plugins first",
            path.display()
        )
    })
}

fn per_call(c: &mut Criterion) {
    let host = WasmHost::new(limits(), None).expect("wasm host");
    let wasm = load_retrying(&host, &component()).policy;
    let native: Arc<dyn Policy> = Arc::new(Builtin);
    let waiters: Vec<Waiter> = (0..10u64)
        .map(|i| Waiter {
            id: 1000 + i,
            owner: format!("worker-{i}"),
            priority: 0,
            enqueued_at_ms: 1_790_000_000_000 + i,
            attempts: 0,
        })
        .collect();
    let contention = Contention {
        attempt: 3,
        waited_ms: 40,
        budget_ms: 5000,
        waiters: 10,
        lease_remaining_ms: 1200,
        seed: 0x9e37_79b9_7f4a_7c15,
    };
    let policies = [("native", &native), ("wasm", &wasm)];

    let mut group = c.benchmark_group("storage_key");
    for (name, policy) in policies {
        let faults = Faults::default();
        group.bench_function(name, |b| {
            b.iter(|| {
                faults.count(policy.storage_key(black_box("team-a"), black_box("nightly-report")))
            })
        });
        faults.report(&format!("storage_key/{name}"));
    }
    group.finish();

    let mut group = c.benchmark_group("pick_next_10_waiters");
    for (name, policy) in policies {
        let faults = Faults::default();
        group.bench_function(name, |b| {
            b.iter(|| {
                faults.count(policy.pick_next(black_box("nightly-report"), black_box(&waiters)))
            })
        });
        faults.report(&format!("pick_next_10_waiters/{name}"));
    }
    group.finish();

    let mut group = c.benchmark_group("next_delay");
    for (name, policy) in policies {
        let faults = Faults::default();
        group.bench_function(name, |b| {
            b.iter(|| faults.count(policy.next_delay(black_box(&contention))))
        });
        faults.report(&format!("next_delay/{name}"));
    }
    group.finish();
}

/// Calls and failed calls of one benchmark. A call can fail on a busy
/// machine: the deadline is wall-clock time (epoch ticks), so a thread
/// descheduled mid-call for longer than it times out. Failures are counted
/// and reported, not hidden.
#[derive(Default)]
struct Faults {
    calls: AtomicU64,
    failed: AtomicU64,
    first: Mutex<Option<String>>,
}

impl Faults {
    fn count<T>(&self, result: Result<T, PolicyFault>) -> Result<T, PolicyFault> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Err(fault) = &result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            self.first
                .lock()
                .expect("faults")
                .get_or_insert_with(|| fault.to_string());
        }
        result
    }

    fn report(&self, name: &str) {
        let failed = self.failed.load(Ordering::Relaxed);
        if failed > 0 {
            eprintln!(
                "policy bench: {name}: {failed} of {} calls failed (first: {})",
                self.calls.load(Ordering::Relaxed),
                self.first.lock().expect("faults").as_deref().unwrap_or("?")
            );
        }
    }
}

/// Loads a component, retrying a load whose self-check was cut short (see
/// [`Faults`]).
fn load_retrying(host: &WasmHost, bytes: &[u8]) -> Loaded {
    let mut last = None;
    for _ in 0..5 {
        match host.load(bytes) {
            Ok(loaded) => return loaded,
            Err(e) => {
                eprintln!("policy bench: load failed, retrying: {e}");
                last = Some(e);
            }
        }
    }
    panic!("default.wasm does not load: {last:?}")
}

/// The naming call as a request makes it: `TenantPolicy::storage_key`
/// awaited in a task on a 2-worker multi-threaded runtime (as the broker
/// runs). A policy is called in place unless it `blocks()` (a component
/// that was slow lately), which goes through `tokio::task::block_in_place`.
/// The task yields after each call, as a request task does between its
/// steps; the `_no_yield` variant does not (it shows what the yield itself
/// costs, and, for a policy moved off the worker, that a task that never
/// yields skips later hand-offs).
fn request_path(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let host = WasmHost::new(limits(), None).expect("wasm host");
    let metrics = Arc::new(Metrics::default());
    let wasm = load_retrying(&host, &component());
    let tenants = [
        (
            "native",
            Arc::new(TenantPolicy::new(
                "team-a",
                None,
                Loaded::builtin(),
                metrics.clone(),
            )),
        ),
        (
            "wasm",
            Arc::new(TenantPolicy::new("team-a", None, wasm, metrics.clone())),
        ),
    ];
    let mut group = c.benchmark_group("tenant_policy_storage_key_in_task");
    for (name, tenant) in &tenants {
        for yields in [true, false] {
            let id = if yields {
                (*name).to_owned()
            } else {
                format!("{name}_no_yield")
            };
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let tenant = tenant.clone();
                    runtime.block_on(async move {
                        tokio::spawn(async move {
                            let start = Instant::now();
                            for _ in 0..iters {
                                let key = tenant.storage_key(black_box("nightly-report")).await;
                                let _ = black_box(key);
                                if yields {
                                    tokio::task::yield_now().await;
                                }
                            }
                            start.elapsed()
                        })
                        .await
                        .expect("task")
                    })
                })
            });
        }
    }
    group.finish();
    for line in metrics.render().lines() {
        if line.starts_with("lockbroker_policy_failures_total") {
            eprintln!("policy bench: tenant_policy_storage_key_in_task: {line}");
        }
    }
}

fn load(c: &mut Criterion) {
    let bytes = component();
    let mut group = c.benchmark_group("load_default_wasm");
    group.sample_size(10);

    let uncached = WasmHost::new(limits(), None).expect("wasm host");
    group.bench_function("compile_no_cache", |b| {
        b.iter(|| load_retrying(&uncached, black_box(&bytes)))
    });

    let dir = std::env::temp_dir().join(format!("lockbench-cache-{}", std::process::id()));
    let first = WasmHost::new(limits(), Some(dir.clone())).expect("wasm host");
    load_retrying(&first, &bytes);
    // A second host, as after a restart: every load reads the compiled
    // artifact from disk.
    let second = WasmHost::new(limits(), Some(dir.clone())).expect("wasm host");
    group.bench_function("warm_disk_cache", |b| {
        b.iter(|| load_retrying(&second, black_box(&bytes)))
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = calls;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = per_call, request_path
}
criterion_group! {
    name = loads;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = load
}
criterion_main!(calls, loads);
