//! `lockbroker policy check` over every component `scripts/build-plugins`
//! puts in `plugins/dist` (policies, templates, fixtures): each gets the
//! verdict the broker would give it, from a table. A component the table
//! does not know fails the test, so a new fixture comes with its verdict.
//!
//! The interpreted ones (JavaScript, Python) are checked with the memory
//! their READMEs advise (64 MiB), all with a deadline that a busy machine
//! does not reach by accident ([`DEADLINE_MS`]), through the broker's
//! shared compile cache (`~/.cache/lockbroker`), where
//! `tests/policies.rs` and `tests/python_policies.rs` leave them compiled.

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use lockbroker_tests::{bin, fresh_db_name};

/// What `policy check` says of a component.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Exit 0: the broker loads it and its calls answer; `describe()` names it.
    Accepted(&'static str),
    /// Exit 1: the broker loads it (it passes the self-check), but a timed
    /// call faults; stderr says which, with this text.
    CallsFault(&'static str),
    /// Exit 1: the broker refuses it; the reason contains this text.
    Refused(&'static str),
}

use Verdict::{Accepted, CallsFault, Refused};

/// The limits a component is checked with. The per-call deadline is 100 ms
/// for all: `policy check` times 200 calls of each export and reports the
/// first one cut off, and on a busy 2-core machine a Rust guest's call
/// (microseconds) now and then overran the default 5 ms; a runaway guest
/// is cut off at any deadline.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Limits {
    /// The broker's default memory (16 MiB).
    Default,
    /// The memory the JavaScript and Python templates' READMEs advise.
    Interpreted,
}

/// The per-call deadline of both [`Limits`].
const DEADLINE_MS: u64 = 100;

/// Every file of `plugins/dist`, the limits it is checked with, and its
/// verdict.
const TABLE: &[(&str, Limits, Verdict)] = &[
    ("default.wasm", Limits::Default, Accepted("default")),
    ("priority.wasm", Limits::Default, Accepted("priority")),
    ("team-prefix.wasm", Limits::Default, Accepted("team-prefix")),
    (
        "templates/rust.wasm",
        Limits::Default,
        Accepted("my-policy"),
    ),
    (
        "templates/javascript.wasm",
        Limits::Interpreted,
        Accepted("my-policy"),
    ),
    (
        "templates/python.wasm",
        Limits::Interpreted,
        Accepted("my-policy"),
    ),
    (
        "fixtures/wasi.wasm",
        Limits::Default,
        Accepted("wasi-probe"),
    ),
    // Exports `timing` too (the world `policy-with-timing`).
    ("fixtures/timing.wasm", Limits::Default, Accepted("timing")),
    // Exports `deadlocks` too (the world `policy-with-deadlocks`).
    (
        "fixtures/deadlocks.wasm",
        Limits::Default,
        Accepted("deadlocks"),
    ),
    // Renames only keys containing `boom` (a shadow candidate that
    // disagrees on a known set of keys): well-behaved.
    ("fixtures/rename.wasm", Limits::Default, Accepted("rename")),
    // The misbehaving fixtures pass the self-check (seed 0) and misbehave
    // on every real backoff call (the check's seed is 42).
    (
        "fixtures/loop.wasm",
        Limits::Default,
        CallsFault("backoff faults: policy ran out of its time budget"),
    ),
    (
        "fixtures/hog.wasm",
        Limits::Default,
        CallsFault("backoff faults: policy ran out of its memory budget"),
    ),
    (
        "fixtures/trap.wasm",
        Limits::Default,
        CallsFault("backoff faults: policy trapped"),
    ),
    (
        "fixtures/py-probe.wasm",
        Limits::Interpreted,
        CallsFault("backoff faults: policy ran out of its time budget"),
    ),
    (
        "fixtures/trap-always.wasm",
        Limits::Default,
        Refused("self-check"),
    ),
    (
        "fixtures/wrong-world.wasm",
        Limits::Default,
        Refused("does not export the lockbroker:policy@0.1.0 world"),
    ),
    (
        "fixtures/imports.wasm",
        Limits::Default,
        Refused("lockbroker:needs-clock/clock"),
    ),
    (
        "fixtures/not-a-component.wasm",
        Limits::Default,
        Refused("not a valid WebAssembly component"),
    ),
    (
        "fixtures/garbage.wasm",
        Limits::Default,
        Refused("not a valid WebAssembly component"),
    ),
];

fn dist_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist")
}

/// The `.wasm` files under `dir`, relative to it, sorted.
fn components(dir: &Path, under: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // A broker whose policy_dir this is keeps its policy versions in
        // `.versions/` (state, not built components).
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        if path.is_dir() {
            components(&path, under, out);
        } else if path.extension().is_some_and(|e| e == "wasm") {
            let name = path.strip_prefix(under).unwrap().to_str().unwrap();
            out.push(name.replace('\\', "/"));
        }
    }
    out.sort();
}

/// Runs `lockbroker policy check FILE --tenant t --key Job-1` with
/// `config` (which names tenant `t`) and the shared compile cache.
fn policy_check(file: &Path, config: &Path) -> Output {
    policy_check_keys(file, config, &["Job-1"])
}

/// [`policy_check`] with these sample keys.
fn policy_check_keys(file: &Path, config: &Path, keys: &[&str]) -> Output {
    std::process::Command::new(bin("lockbroker"))
        .args(["policy", "check"])
        .arg(file)
        .args(["--tenant", "t"])
        .args(keys.iter().flat_map(|k| ["--key", k]))
        .arg("--config")
        .arg(config)
        .env("LOCKBROKER_LOG", "warn")
        .output()
        .expect("run lockbroker policy check")
}

/// A config file for `limits`: one tenant `t`.
fn config_file(limits: Limits) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lb-check-{}.toml", fresh_db_name()));
    let overrides = match limits {
        Limits::Default => format!("policy_deadline_ms = {DEADLINE_MS}\n"),
        Limits::Interpreted => format!(
            "policy_deadline_ms = {DEADLINE_MS}\npolicy_memory_bytes = {}\n",
            64 << 20
        ),
    };
    std::fs::write(
        &path,
        format!("admin_token = \"check-admin\"\n[[tenant]]\nname = \"t\"\napi_key = \"t-key\"\n{overrides}"),
    )
    .unwrap();
    path
}

#[test]
fn policy_check_gives_every_built_component_the_brokers_verdict() {
    let dist = dist_dir();
    let mut found = Vec::new();
    components(&dist, &dist, &mut found);
    let known: Vec<&str> = TABLE.iter().map(|(file, _, _)| *file).collect();
    for file in &known {
        assert!(
            found.iter().any(|f| f == file),
            "plugins/dist/{file} is missing: run scripts/build-plugins"
        );
    }
    let unknown: Vec<&String> = found
        .iter()
        .filter(|f| !known.contains(&f.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "components without a verdict in TABLE: {unknown:?}"
    );

    let configs = [Limits::Default, Limits::Interpreted].map(|l| (l, config_file(l)));
    let mut wrong = Vec::new();
    for &(file, limits, verdict) in TABLE {
        let config = &configs.iter().find(|(l, _)| *l == limits).unwrap().1;
        let out = policy_check(&dist.join(file), config);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        let code = out.status.code();
        let right = match verdict {
            Accepted(name) => code == Some(0) && stdout.contains(&format!("policy:     {name} ")),
            CallsFault(why) => {
                code == Some(1)
                    && stderr.contains("the broker would load it, but")
                    && stderr.contains(why)
            }
            Refused(why) => code == Some(1) && stderr.contains("refused") && stderr.contains(why),
        };
        eprintln!("{file}: {verdict:?}: exit {code:?}");
        if !right {
            wrong.push(format!(
                "{file}: expected {verdict:?}, got exit {code:?}\n{stdout}{stderr}"
            ));
        }
    }
    for (_, config) in configs {
        let _ = std::fs::remove_file(config);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn policy_check_shows_the_delays_a_timing_policy_gives_its_keys() {
    let dist = dist_dir();
    let config = config_file(Limits::Default);
    let timing = dist.join("fixtures/timing.wasm");
    let out = policy_check_keys(&timing, &config, &["hold-a", "delay-b", "other"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in [
        "timing:     exported",
        "\"hold-a\" lock_delay_ms 0, min_hold_ms 1500",
        "\"delay-b\" lock_delay_ms 1500, min_hold_ms 0",
        "\"other\" lock_delay_ms none, min_hold_ms none",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    assert!(stdout.contains("  timing    p50"), "{stdout}");
    // A value over one day, or a trap, is a fault the broker would fall
    // back from: the check says so.
    for (key, why) in [("huge-z", "at most 86400000"), ("trap-z", "trapped")] {
        let out = policy_check_keys(&timing, &config, &[key]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{key}: {stderr}");
        assert!(
            stderr.contains(&format!("timing faults on storage key \"{key}\""))
                && stderr.contains(why),
            "{key}: {stderr}"
        );
    }
    // A policy without it shows neither.
    let out = policy_check_keys(&dist.join("default.wasm"), &config, &["hold-a"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("timing"), "{stdout}");
    let _ = std::fs::remove_file(config);
}

#[test]
fn policy_check_shows_which_keys_a_deadlocks_policy_checks() {
    let dist = dist_dir();
    let config = config_file(Limits::Default);
    let policy = dist.join("fixtures/deadlocks.wasm");
    let out = policy_check_keys(&policy, &config, &["plain-a", "orders"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in [
        "deadlocks:  exported",
        "\"plain-a\" not checked (waits run out)",
        "\"orders\" checked",
        "  deadlocks p50",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    // A trap is a fault the broker would fall back from (checked).
    let out = policy_check_keys(&policy, &config, &["trap-z"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("deadlocks faults on storage key \"trap-z\""),
        "{stderr}"
    );
    let out = policy_check_keys(&dist.join("default.wasm"), &config, &["plain-a"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("deadlock"), "{stdout}");
    let _ = std::fs::remove_file(config);
}
