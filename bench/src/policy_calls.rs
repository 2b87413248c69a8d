//! Per-call latency of each policy export, the built-in (native) policy
//! against the `default.wasm` component: every call timed on its own, so
//! the table has a p99 and p999 (criterion reports means of batches).
//! Calls go through the `Policy` trait on a reused pooled instance, on one
//! thread. Each figure includes the cost of reading the clock twice, shown
//! in its own row.

use std::{
    path::Path,
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

/// The markdown table for `default.wasm` in `dist`.
pub fn markdown(dist: &Path, calls: usize) -> anyhow::Result<String> {
    let host = WasmHost::new(
        Limits {
            deadline: Duration::from_millis(5),
            memory_bytes: 16 << 20,
        },
        None,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let wasm = host
        .load_file(&dist.join("default.wasm"))
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("loading default.wasm (run scripts/build-plugins)")?;
    let policies: [(&str, &dyn Policy); 2] = [("native", &Builtin), ("wasm", &*wasm.policy)];
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
        "| (clock read twice, empty call) | | {p50:.0} | {p99:.0} | {p999:.0} |"
    ));
    // A call can be cut off at its deadline on a busy machine (the deadline
    // is wall-clock time): counted and printed, not a reason to stop.
    let failed = Failed::default();
    for (name, policy) in policies {
        let (p50, p99, p999) = time_calls(calls, |_| {
            std::hint::black_box(failed.count(policy.storage_key("bench", "job-42")));
        });
        rows.push(format!(
            "| storage_key | {name} | {p50:.0} | {p99:.0} | {p999:.0} |"
        ));
        let (p50, p99, p999) = time_calls(calls, |_| {
            std::hint::black_box(failed.count(policy.pick_next("job-42", &waiters)));
        });
        rows.push(format!(
            "| pick_next (10 waiters) | {name} | {p50:.0} | {p99:.0} | {p999:.0} |"
        ));
        let (p50, p99, p999) = time_calls(calls, |i| {
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
            "| next_delay | {name} | {p50:.0} | {p99:.0} | {p999:.0} |"
        ));
    }
    let mut out = format!(
        "{calls} calls per row, each timed on its own (ns, clock reads included).\n\n\
         | export | policy | p50 ns | p99 ns | p999 ns |\n|---|---|---:|---:|---:|\n"
    );
    for row in rows {
        out.push_str(&row);
        out.push('\n');
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
