//! `lockbroker policy check FILE.wasm [--tenant T] [--key K ...] [--config F]`:
//! prints what the broker would make of a policy component.
//!
//! Exit status: 0 the broker would take it; 1 it would refuse it, or its
//! calls fail (the reason on stderr); 2 usage (a config that does not
//! load, a tenant it does not name).

use std::{path::Path, process::ExitCode, time::Duration};

use lockbroker::{
    policy::{
        reload::load_options,
        wasm::{self, LoadOptions, Source, WasmHost},
    },
    Config,
};

pub fn run(file: &Path, tenant: &str, keys: &[String], config: Option<&Path>) -> ExitCode {
    let settings = match Config::load(config) {
        Ok(c) => c,
        Err(err) => return usage(&err.to_string()),
    };
    let options = match settings.tenants.iter().find(|t| t.name == tenant) {
        Some(t) => load_options(&settings, t),
        None if config.is_some() => {
            return usage(&format!("the config names no tenant {tenant:?}"));
        }
        None => LoadOptions {
            tenant: tenant.to_owned(),
            limits: wasm::Limits {
                deadline: settings.policy_deadline(),
                memory_bytes: settings.policy_memory_bytes,
            },
        },
    };
    let host = match WasmHost::new(options.limits, settings.cache_dir.clone()) {
        Ok(host) => host,
        Err(err) => return refused(&err.to_string()),
    };
    let bytes = match wasm::read(file) {
        Ok(bytes) => bytes,
        Err(err) => return refused(&err.to_string()),
    };
    if bytes.len() > settings.max_policy_bytes {
        return refused(&format!(
            "{} bytes, over max_policy_bytes ({}): an upload would get 413",
            bytes.len(),
            settings.max_policy_bytes
        ));
    }
    let report = match wasm::check(&host, &bytes, &options, keys) {
        Ok(report) => report,
        Err(err) => return refused(&err.to_string()),
    };
    let p = &report.prepared;
    let d = &p.loaded.descriptor;
    println!("policy:     {} {}", d.name, d.version);
    println!("file:       {} ({} bytes)", file.display(), bytes.len());
    println!("sha256:     {}", p.loaded.sha256.as_deref().unwrap_or(""));
    println!(
        "limits:     {} ms per call, {} bytes of memory (tenant {})",
        options.limits.deadline.as_millis(),
        options.limits.memory_bytes,
        options.tenant
    );
    match p.source {
        Source::Cache => println!("compiled:   from the cache in {}", ms(p.compile_time)),
        Source::Compiled => println!(
            "compiled:   in {}{}",
            ms(p.compile_time),
            host.cache_dir()
                .map(|d| format!(", cached in {}", d.display()))
                .unwrap_or_default()
        ),
    }
    println!("self-check: passed in {}", ms(p.check_time));
    if p.imports.is_empty() {
        println!("imports:    none");
    } else {
        println!(
            "imports:    {} WASI interfaces, given empty (no files, sockets, environment; stdout/stderr to the log):",
            p.imports.len()
        );
        for name in &p.imports {
            println!("            {name}");
        }
    }
    if !report.keys.is_empty() {
        println!("storage keys:");
        for (key, named) in &report.keys {
            match named {
                Ok(storage) => println!("  {key:?} -> {storage:?}"),
                Err(Ok(reason)) => println!("  {key:?} rejected: {reason}"),
                Err(Err(fault)) => println!("  {key:?} FAULT: {fault}"),
            }
        }
    }
    if p.loaded.policy.has_timing() {
        println!(
            "timing:     exported (overrides the tenant's lock_delay_ms and min_hold_ms per key)"
        );
    }
    if !report.delays.is_empty() {
        println!("delays (none: the tenant's config):");
        for (storage, delays) in &report.delays {
            match delays {
                Ok(d) => println!(
                    "  {storage:?} lock_delay_ms {}, min_hold_ms {}",
                    opt(d.lock_delay_ms),
                    opt(d.min_hold_ms)
                ),
                Err(fault) => println!("  {storage:?} FAULT: {fault}"),
            }
        }
    }
    if p.loaded.policy.has_deadlocks() {
        println!("deadlocks:  exported (turns the deadlock check of session waits off per key)");
    }
    if !report.deadlocks.is_empty() {
        println!("deadlock check of session waits:");
        for (storage, detect) in &report.deadlocks {
            match detect {
                Ok(true) => println!("  {storage:?} checked"),
                Ok(false) => println!("  {storage:?} not checked (waits run out)"),
                Err(fault) => println!("  {storage:?} FAULT: {fault}"),
            }
        }
    }
    println!("latency ({} calls each):", wasm::CALLS);
    for (export, latency) in &report.latency {
        match latency {
            Ok(l) => println!("  {export:<9} p50 {:>9}  p99 {:>9}", us(l.p50), us(l.p99)),
            Err(fault) => println!("  {export:<9} FAULT: {fault}"),
        }
    }
    match report.problem() {
        None => ExitCode::SUCCESS,
        Some(problem) => {
            eprintln!("policy check: the broker would load it, but {problem}");
            ExitCode::FAILURE
        }
    }
}

fn refused(reason: &str) -> ExitCode {
    eprintln!("policy check: refused: {reason}");
    ExitCode::FAILURE
}

fn usage(reason: &str) -> ExitCode {
    eprintln!("policy check: {reason}");
    ExitCode::from(2)
}

fn opt(ms: Option<u64>) -> String {
    ms.map_or_else(|| "none".to_owned(), |ms| ms.to_string())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}
