//! Per-call latency of each policy export, the built-in (native) policy
//! against components in Rust (`default.wasm`, the Rust template),
//! JavaScript and Python (their templates): every call timed on its own, so
//! the table has a p99 and p999 (criterion reports means of batches).
//! Calls go through the `Policy` trait on a reused pooled instance, on one
//! thread. Each figure includes the cost of reading the clock twice, shown
//! in its own row.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use lockbroker::policy::{
    wasm::{Limits, WasmHost},
    Builtin, Contention, Policy, Waiter,
};

/// Times `calls` calls of `f`, after a warm-up; (p50, p99, p999) in ns.
fn time_calls(calls: usize, mut f: impl FnMut(u64)) -> (f64, f64, f64) {
    for i in 0..calls / 10 {
        f(i as u64);
    }
    let mut ns = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        f(i as u64);
        ns.push(u32::try_from(started.elapsed().as_nanos()).unwrap_or(u32::MAX));
    }
    ns.sort_unstable();
    let at = |q: f64| f64::from(ns[((ns.len() - 1) as f64 * q) as usize]);
    (at(0.5), at(0.99), at(0.999))
}

/// The components measured beside the built-in policy: (label, file in
/// `dist`, interpreted). The templates are one policy (case-insensitive
/// keys, the built-in fairness and backoff) in three languages.
const COMPONENTS: [(&str, &str, bool); 4] = [
    ("wasm (Rust, default.wasm)", "default.wasm", false),
    ("Rust template", "templates/rust.wasm", false),
    ("JavaScript template", "templates/javascript.wasm", true),
    ("Python template", "templates/python.wasm", true),
];

/// Interpreted guests make this many times fewer calls per row.
const INTERPRETED_FEWER: usize = 50;

/// The limits a component runs under: the broker's defaults for a Rust
/// guest, what the templates' READMEs advise for an interpreted one.
fn limits(interpreted: bool) -> Limits {
    if interpreted {
        Limits {
            deadline: Duration::from_millis(50),
            memory_bytes: 64 << 20,
        }
    } else {
        Limits {
            deadline: Duration::from_millis(5),
            memory_bytes: 16 << 20,
        }
    }
}

/// The broker's default compile cache (`cache_dir`), so the interpreted
/// components compile once across runs.
fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("LOCKBROKER_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lockbroker")))
}

/// The markdown table for the built-in policy and the components of
/// [`COMPONENTS`] found in `dist`; `calls` per row (fewer for interpreted
/// guests). Blocking (WASI guests must not run on an async worker): call
/// it off the runtime.
pub fn markdown(dist: &Path, calls: usize) -> anyhow::Result<String> {
    let mut loaded: Vec<(String, Arc<dyn Policy>, usize)> = Vec::new();
    loaded.push(("native (built-in)".into(), Arc::new(Builtin), calls));
    let mut missing = Vec::new();
    for (label, file, interpreted) in COMPONENTS {
        let path = dist.join(file);
        if !path.exists() {
            missing.push(file);
            continue;
        }
        let host =
            WasmHost::new(limits(interpreted), cache_dir()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = Instant::now();
        let wasm = host
            .load_file(&path)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("loading {file}"))?;
        eprintln!("lockbench: loaded {file} in {:?}", started.elapsed());
        let n = if interpreted {
            calls / INTERPRETED_FEWER
        } else {
            calls
        };
        loaded.push((label.to_owned(), wasm.policy, n));
    }
    let waiters: Vec<Waiter> = (0..10)
        .map(|i| Waiter {
            id: i,
            owner: format!("owner-{i}"),
            priority: 0,
            enqueued_at_ms: 1_700_000_000_000 + i,
            attempts: 0,
        })
        .collect();
    let mut rows = Vec::new();
    let (p50, p99, p999) = time_calls(calls, |_| {
        std::hint::black_box(());
    });
    rows.push(format!(
        "| (clock read twice, empty call) | | | {p50:.0} | {p99:.0} | {p999:.0} |"
    ));
    // A call can be cut off at its deadline on a busy machine (the deadline
    // is wall-clock time): counted and printed, not a reason to stop.
    let failed = Failed::default();
    for (name, policy, n) in &loaded {
        eprintln!("lockbench: timing {name}, {n} calls per export");
        let (p50, p99, p999) = time_calls(*n, |_| {
            std::hint::black_box(failed.count(policy.storage_key("bench", "job-42")));
        });
        rows.push(format!(
            "| storage_key | {name} | {n} | {p50:.0} | {p99:.0} | {p999:.0} |"
        ));
        let (p50, p99, p999) = time_calls(*n, |_| {
            std::hint::black_box(failed.count(policy.pick_next("job-42", &waiters)));
        });
        rows.push(format!(
            "| pick_next (10 waiters) | {name} | {n} | {p50:.0} | {p99:.0} | {p999:.0} |"
        ));
        let (p50, p99, p999) = time_calls(*n, |i| {
            let contention = Contention {
                attempt: 3,
                waited_ms: 40,
                budget_ms: 5_000,
                waiters: 4,
                lease_remaining_ms: 1_000,
                seed: i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            };
            std::hint::black_box(failed.count(policy.next_delay(&contention)));
        });
        rows.push(format!(
            "| next_delay | {name} | {n} | {p50:.0} | {p99:.0} | {p999:.0} |"
        ));
    }
    let mut out = String::from(
        "Each call timed on its own (ns, clock reads included), through a reused \
         instance on one thread; `calls` per row. Rust guests run under the \
         broker's default limits (5 ms, 16 MiB), interpreted ones under 50 ms \
         and 64 MiB.\n\n\
         | export | policy | calls | p50 ns | p99 ns | p999 ns |\n|---|---|---:|---:|---:|---:|\n",
    );
    for row in rows {
        out.push_str(&row);
        out.push('\n');
    }
    if !missing.is_empty() {
        out.push_str(&format!(
            "\nNot measured (not built; scripts/build-plugins): {}\n",
            missing.join(", ")
        ));
    }
    let n = failed.0.get();
    if n > 0 {
        out.push_str(&format!(
            "\n{n} call(s) failed (cut off at the deadline on a busy machine, most likely); their times are in the rows.\n"
        ));
    }
    Ok(out)
}

/// Calls that failed.
#[derive(Default)]
struct Failed(std::cell::Cell<u64>);

impl Failed {
    fn count<T, E>(&self, result: Result<T, E>) -> Option<T> {
        if result.is_err() {
            self.0.set(self.0.get() + 1);
        }
        result.ok()
    }
}
