//! The host against the real components of `plugins/dist` (built by
//! `scripts/build-plugins`, which `scripts/test` runs first).

use std::{path::PathBuf, time::Instant};

use super::*;
use crate::policy::{builtin, Contention, Decision, PolicyFault, Waiter};

fn dist(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/dist")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-plugins",
        path.display()
    );
    path
}

fn host() -> WasmHost {
    host_with_deadline(5)
}

fn host_with_deadline(ms: u64) -> WasmHost {
    WasmHost::new(
        Limits {
            deadline: Duration::from_millis(ms),
            memory_bytes: 16 << 20,
        },
        None,
    )
    .unwrap()
}

fn boom_waiters() -> Vec<Waiter> {
    vec![
        Waiter {
            owner: "a".into(),
            ..Waiter::default()
        },
        Waiter {
            owner: "boom".into(),
            ..Waiter::default()
        },
    ]
}

fn contention(seed: u64) -> Contention {
    Contention {
        attempt: 2,
        seed,
        ..Contention::default()
    }
}

#[test]
fn default_component_matches_the_builtin_policy() {
    // A deadline a descheduled thread does not reach on a loaded machine:
    // what is compared here is the answers (5 ms timed out once in a full
    // run, 134 tests sharing 2 cores).
    let loaded = host_with_deadline(200)
        .load_file(&dist("default.wasm"))
        .unwrap();
    assert_eq!(loaded.descriptor.name, "default");
    assert_eq!(loaded.sha256.as_ref().unwrap().len(), 64);
    let policy = &loaded.policy;
    let keys = [
        "job",
        "Job ",
        "",
        "a\nb",
        "ключ",
        &"x".repeat(255),
        &"x".repeat(256),
    ];
    for key in keys {
        assert_eq!(
            policy.storage_key("t", key).unwrap(),
            builtin::storage_key(key),
            "{key:?}"
        );
    }
    for attempt in 0..30 {
        for seed in [0, 1, 7, 999, u64::MAX, 0x1234_5678_9abc] {
            let c = Contention {
                attempt,
                seed,
                ..Contention::default()
            };
            assert_eq!(policy.next_delay(&c).unwrap(), builtin::next_delay(&c));
        }
    }
    assert_eq!(policy.pick_next("k", &boom_waiters()).unwrap(), 0);
}

#[test]
fn a_component_exporting_timing_is_asked_and_others_are_not() {
    let host = host();
    let timing = host.load_file(&dist("fixtures/timing.wasm")).unwrap();
    assert!(timing.policy.has_timing());
    assert_eq!(
        timing.policy.timing("hold-x").unwrap(),
        crate::policy::Timing {
            lock_delay_ms: Some(0),
            min_hold_ms: Some(1_500),
        }
    );
    assert_eq!(
        timing.policy.timing("other").unwrap(),
        crate::policy::Timing::default()
    );
    // A trap is a fault (the caller falls back), and poisons nothing.
    assert!(matches!(
        timing.policy.timing("trap-x"),
        Err(PolicyFault::Trap(_))
    ));
    assert_eq!(
        timing.policy.timing("delay-x").unwrap().lock_delay_ms,
        Some(1_500)
    );
    // Components of the world `policy` alone: no timing, nothing asked.
    for file in ["default.wasm", "team-prefix.wasm", "templates/rust.wasm"] {
        let plain = host.load_file(&dist(file)).unwrap();
        assert!(!plain.policy.has_timing(), "{file}");
        assert_eq!(
            plain.policy.timing("hold-x").unwrap(),
            crate::policy::Timing::default()
        );
    }
}

#[test]
fn priority_component_picks_the_highest_then_the_oldest() {
    let loaded = host().load_file(&dist("priority.wasm")).unwrap();
    let waiters: Vec<Waiter> = [1, 5, 5, 3]
        .into_iter()
        .map(|priority| Waiter {
            priority,
            ..Waiter::default()
        })
        .collect();
    assert_eq!(loaded.policy.pick_next("k", &waiters).unwrap(), 1);
}

#[test]
fn team_prefix_component_names_keys() {
    let loaded = host().load_file(&dist("team-prefix.wasm")).unwrap();
    let p = &loaded.policy;
    assert_eq!(
        p.storage_key("team-a", "Reports/Daily").unwrap(),
        Ok("team-a/reports/daily".into())
    );
    assert!(p.storage_key("team-a", "bad key").unwrap().is_err());
    assert!(p.storage_key("team-a", "-x").unwrap().is_err());
}

#[test]
fn a_runaway_guest_is_stopped_at_its_deadline_and_replaced() {
    let loaded = host().load_file(&dist("fixtures/loop.wasm")).unwrap();
    let p = &loaded.policy;
    let started = Instant::now();
    let err = p.storage_key("t", "boom").unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, PolicyFault::Timeout), "{err:?}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert!(matches!(
        p.pick_next("k", &boom_waiters()),
        Err(PolicyFault::Timeout)
    ));
    assert!(matches!(
        p.next_delay(&contention(3)),
        Err(PolicyFault::Timeout)
    ));
    // The next call gets a fresh instance.
    assert_eq!(p.storage_key("t", "fine").unwrap(), Ok("fine".into()));
}

#[test]
fn a_memory_hog_hits_its_limit_and_is_replaced() {
    // A generous deadline, so that the memory limit is what stops it.
    let loaded = host_with_deadline(2_000)
        .load_file(&dist("fixtures/hog.wasm"))
        .unwrap();
    let p = &loaded.policy;
    let err = p.storage_key("t", "boom").unwrap_err();
    assert!(matches!(err, PolicyFault::OutOfMemory), "{err:?}");
    assert_eq!(p.storage_key("t", "fine").unwrap(), Ok("fine".into()));
}

#[test]
fn a_trap_poisons_nothing() {
    let loaded = host().load_file(&dist("fixtures/trap.wasm")).unwrap();
    let p = &loaded.policy;
    for _ in 0..3 {
        assert!(matches!(
            p.storage_key("t", "boom"),
            Err(PolicyFault::Trap(_))
        ));
        assert_eq!(p.storage_key("t", "fine").unwrap(), Ok("fine".into()));
    }
    assert!(matches!(
        p.next_delay(&contention(5)),
        Err(PolicyFault::Trap(_))
    ));
    assert_eq!(
        p.next_delay(&contention(0)).unwrap(),
        Decision::RetryAfter(1)
    );
}

#[test]
fn bad_components_are_refused_with_a_reason() {
    let host = host();
    let cases = [
        ("fixtures/trap-always.wasm", "self-check"),
        ("fixtures/wrong-world.wasm", "does not export"),
        (
            "fixtures/imports.wasm",
            "imports lockbroker:needs-clock/clock@0.1.0: a policy may import nothing but WASI 0.2",
        ),
        (
            "fixtures/not-a-component.wasm",
            "not a valid WebAssembly component",
        ),
        ("fixtures/garbage.wasm", "not a valid WebAssembly component"),
    ];
    for (file, reason) in cases {
        let err = match host.load_file(&dist(file)) {
            Ok(_) => panic!("{file} was accepted"),
            Err(err) => err,
        };
        assert!(err.0.contains(reason), "{file}: {}", err.0);
    }
    assert!(host.load(b"").is_err());
}

/// A cache directory of this test process's own, and small limits.
fn cache_dir(name: &str) -> (PathBuf, Limits) {
    let dir = std::env::temp_dir().join(format!("lb-{name}-{}", std::process::id()));
    let limits = Limits {
        deadline: Duration::from_millis(5),
        memory_bytes: 16 << 20,
    };
    (dir, limits)
}

#[test]
fn compiled_components_are_cached_by_sha256() {
    let (dir, limits) = cache_dir("cache-test");
    let host = WasmHost::new(limits, Some(dir.clone())).unwrap();
    let loaded = host.load_file(&dist("default.wasm")).unwrap();
    let sha = loaded.sha256.unwrap();
    let entries: Vec<PathBuf> = std::fs::read_dir(dir.join(cache::compatibility_key(&host.engine)))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries,
        vec![dir
            .join(cache::compatibility_key(&host.engine))
            .join(format!("{sha}.cwasm"))]
    );
    // A second host (a restart) loads from the cache and works the same.
    let again = WasmHost::new(limits, Some(dir.clone())).unwrap();
    let reloaded = again.load_file(&dist("default.wasm")).unwrap();
    assert_eq!(
        reloaded.policy.storage_key("t", "k").unwrap(),
        Ok("k".into())
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn concurrent_loads_into_one_cache_keep_each_policy_its_own() {
    let (dir, limits) = cache_dir("cache-race");
    let names = ["default", "priority"];
    for _ in 0..4 {
        let _ = std::fs::remove_dir_all(&dir);
        // Two hosts (two loaders of one process, or two brokers) compile
        // two different policies into the same directory at once.
        std::thread::scope(|s| {
            for name in names {
                let dir = dir.clone();
                s.spawn(move || {
                    let host = WasmHost::new(limits, Some(dir)).unwrap();
                    let loaded = host.load_file(&dist(&format!("{name}.wasm"))).unwrap();
                    assert_eq!(loaded.descriptor.name, name);
                });
            }
        });
        // A restart loads both from the cache: each is still itself.
        let host = WasmHost::new(limits, Some(dir.clone())).unwrap();
        for name in names {
            let loaded = host.load_file(&dist(&format!("{name}.wasm"))).unwrap();
            assert_eq!(loaded.descriptor.name, name, "cache entry of {name}");
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.join(cache::compatibility_key(&host.engine)))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| !name.ends_with(".cwasm"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn fast_policies_run_in_place_and_slow_ones_are_moved_off() {
    // A deadline a descheduled thread does not reach on a loaded machine
    // (5 ms was, at load 18); the loop fixture still runs into it.
    let host = host_with_deadline(200);
    let fast = host.load_file(&dist("default.wasm")).unwrap();
    for _ in 0..100 {
        fast.policy.storage_key("t", "k").unwrap().unwrap();
    }
    assert!(
        !fast.policy.blocks(),
        "a sub-microsecond policy runs in place"
    );
    let slow = host.load_file(&dist("fixtures/loop.wasm")).unwrap();
    assert!(!slow.policy.blocks(), "innocent until slow");
    assert!(slow.policy.storage_key("t", "boom").is_err());
    assert!(
        slow.policy.blocks(),
        "a call cut off at its deadline moves it off"
    );
}

fn wasi_options(tenant: &str, deadline_ms: u64) -> LoadOptions {
    LoadOptions {
        tenant: tenant.into(),
        limits: Limits {
            deadline: Duration::from_millis(deadline_ms),
            memory_bytes: 16 << 20,
        },
    }
}

fn wasi_probe(tenant: &str, deadline_ms: u64) -> Prepared {
    let bytes = read(&dist("fixtures/wasi.wasm")).unwrap();
    host()
        .prepare(&bytes, &wasi_options(tenant, deadline_ms))
        .unwrap()
}

fn named(p: &Prepared, key: &str) -> Result<String, String> {
    p.loaded.policy.storage_key("t", key).unwrap()
}

#[test]
fn a_component_importing_wasi_loads_and_works() {
    let p = wasi_probe("t", 50);
    assert!(p.wasi);
    assert!(
        p.imports.iter().any(|i| i.starts_with("wasi:filesystem/")),
        "{:?}",
        p.imports
    );
    assert_eq!(p.loaded.descriptor.name, "wasi-probe");
    assert!(p.loaded.policy.blocks(), "WASI calls never run on a worker");
    assert_eq!(named(&p, "job"), Ok("job".into()));
    assert_eq!(named(&p, "time"), Ok("ok".into()), "clocks work");
    assert_eq!(p.loaded.policy.pick_next("k", &boom_waiters()).unwrap(), 0);
    assert_eq!(
        p.loaded.policy.next_delay(&contention(1)).unwrap(),
        Decision::RetryAfter(20)
    );
    // A component without imports carries no WASI.
    let plain = host()
        .prepare(&read(&dist("default.wasm")).unwrap(), &wasi_options("t", 5))
        .unwrap();
    assert!(!plain.wasi && plain.imports.is_empty());
}

#[test]
fn the_wasi_sandbox_is_empty() {
    let p = wasi_probe("t", 200);
    for key in [
        "read:/etc/passwd",
        "read:plugins/dist/default.wasm",
        "list:/",
        "list:.",
        "connect:127.0.0.1:3306",
        "connect:1.1.1.1:80",
        "resolve:localhost",
    ] {
        let answer = named(&p, key);
        assert!(answer.is_err(), "{key}: the guest got {answer:?}");
    }
    assert_eq!(
        named(&p, "env"),
        Ok(String::new()),
        "no environment, no args"
    );
    assert_eq!(named(&p, "stdin"), Ok("0".into()), "stdin is empty");
    // The denials are answers, not faults: the same instance serves on.
    assert_eq!(named(&p, "job"), Ok("job".into()));
}

#[test]
fn a_wasi_guest_may_not_sleep_nor_spin() {
    let p = wasi_probe("t", 20);
    let started = Instant::now();
    let err = p.loaded.policy.storage_key("t", "sleep:5000").unwrap_err();
    assert!(
        matches!(&err, PolicyFault::Trap(m) if m.contains("may not wait")),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_000));
    let started = Instant::now();
    let err = p.loaded.policy.storage_key("t", "spin").unwrap_err();
    assert!(matches!(err, PolicyFault::Timeout), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(1_000));
    assert_eq!(
        named(&p, "job"),
        Ok("job".into()),
        "a fresh instance serves"
    );
}

#[test]
fn a_wasi_guests_output_goes_to_the_log_tagged_with_its_tenant() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let p = wasi_probe("team-py", 200);
        assert_eq!(
            named(&p, "print:hello-from-the-guest"),
            Ok("hello-from-the-guest".into())
        );
        assert_eq!(
            named(&p, "eprint:oops-on-stderr"),
            Ok("oops-on-stderr".into())
        );
    });
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{text}"))
            .to_owned()
    };
    let out = line("hello-from-the-guest");
    assert!(
        out.contains("tenant=team-py") && out.contains("stream=\"stdout\""),
        "{out}"
    );
    assert!(out.contains(GUEST_LOG_TARGET), "{out}");
    let err = line("oops-on-stderr");
    assert!(
        err.contains("tenant=team-py") && err.contains("stream=\"stderr\""),
        "{err}"
    );
}

#[test]
fn a_tenants_own_deadline_applies() {
    let bytes = read(&dist("fixtures/loop.wasm")).unwrap();
    let host = host();
    let generous = host.load_with(&bytes, &wasi_options("slow", 300)).unwrap();
    let started = Instant::now();
    assert!(matches!(
        generous.policy.storage_key("t", "boom"),
        Err(PolicyFault::Timeout)
    ));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "cut off early: {took:?}"
    );
    // The host's default (5 ms) is the same host's other tenants' budget.
    let strict = host.load(&bytes).unwrap();
    let started = Instant::now();
    assert!(strict.policy.storage_key("t", "boom").is_err());
    assert!(started.elapsed() < Duration::from_millis(300));
}

#[test]
fn a_tenants_own_memory_limit_applies() {
    let bytes = read(&dist("fixtures/wasi.wasm")).unwrap();
    let tight = LoadOptions {
        tenant: "t".into(),
        limits: Limits {
            deadline: Duration::from_millis(100),
            memory_bytes: 1 << 20,
        },
    };
    // The std runtime of a wasip2 guest needs more than 1 MiB to start.
    let err = match host().prepare(&bytes, &tight) {
        Ok(_) => panic!("loaded within 1 MiB"),
        Err(err) => err,
    };
    assert!(err.0.contains("self-check"), "{err}");
    assert!(host().prepare(&bytes, &wasi_options("t", 100)).is_ok());
}

#[test]
fn a_second_load_comes_from_the_disk_cache_unless_others_could_have_written_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("lb-cache-wasi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = read(&dist("fixtures/wasi.wasm")).unwrap();
    let limits = host().limits();
    let options = wasi_options("t", 50);
    let first = WasmHost::new(limits, Some(dir.clone())).unwrap();
    let p = first.prepare(&bytes, &options).unwrap();
    assert_eq!(p.source, Source::Compiled);
    assert!(!p.loaded.from_cache);
    let again = WasmHost::new(limits, Some(dir.clone())).unwrap();
    let p = again.prepare(&bytes, &options).unwrap();
    assert_eq!(p.source, Source::Cache);
    assert!(p.loaded.from_cache);
    assert_eq!(named(&p, "job"), Ok("job".into()));
    // A file others may write is never deserialized.
    let engine_dir = again.cache_dir().unwrap().to_owned();
    let meta = std::fs::metadata(&engine_dir).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let file = engine_dir.join(format!("{}.cwasm", p.loaded.sha256.as_ref().unwrap()));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let p = again.prepare(&bytes, &options).unwrap();
    assert_eq!(p.source, Source::Compiled);
    let _ = std::fs::remove_dir_all(dir);
}
