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
    let loaded = host().load_file(&dist("default.wasm")).unwrap();
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
            "imports lockbroker:needs-clock/clock@0.1.0, but policies get no imports",
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

#[test]
fn compiled_components_are_cached_by_sha256() {
    let dir = std::env::temp_dir().join(format!("lb-cache-test-{}", std::process::id()));
    let limits = Limits {
        deadline: Duration::from_millis(5),
        memory_bytes: 16 << 20,
    };
    let host = WasmHost::new(limits, Some(dir.clone())).unwrap();
    let loaded = host.load_file(&dist("default.wasm")).unwrap();
    let sha = loaded.sha256.unwrap();
    let entries: Vec<PathBuf> = std::fs::read_dir(dir.join(compatibility_key(&host.engine)))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries,
        vec![dir
            .join(compatibility_key(&host.engine))
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
    let dir = std::env::temp_dir().join(format!("lb-cache-race-{}", std::process::id()));
    let limits = Limits {
        deadline: Duration::from_millis(5),
        memory_bytes: 16 << 20,
    };
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
        let leftovers: Vec<_> = std::fs::read_dir(dir.join(compatibility_key(&host.engine)))
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
    let host = host();
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
