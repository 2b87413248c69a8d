//! The deployment files in `deploy/`, checked as an operator would use
//! them:
//!
//! - `lockbroker.toml` is a config the broker takes (`lockbroker config
//!   check`, the binary itself), holds digests rather than secrets, and a
//!   broken copy of it is refused with exit 2 and a reason;
//! - `lockbroker.service` passes `systemd-analyze verify` (installed by
//!   `scripts/deploy-deps`; this test fails, never skips, without it), its
//!   `ExecStart` is a command line the real CLI accepts, it keeps its
//!   hardening, gives the broker longer than its drain to stop, and lets it
//!   write where the sample config says it writes.
//!
//! No broker is started and no database is needed: the sample names
//! production hosts, and what it configures (TLS, quotas, digests) has
//! tests of its own (`tls`, `quotas`, `db_tls`).

use std::{
    path::Path,
    process::{Command, Output},
    time::Duration,
};

use lockbroker_tests::{bin, tempfile_like::TempFile};

use lockbroker_tests::{repo_file as read, repo_root as root};

/// Where the unit installs the binary and the config.
const INSTALLED_BINARY: &str = "/usr/local/bin/lockbroker";
const INSTALLED_CONFIG: &str = "/etc/lockbroker/lockbroker.toml";

// ---------------------------------------------------------------------------
// The sample config.

/// `lockbroker config check FILE`, without the `LOCKBROKER_*` overrides of
/// this process's environment (the check applies them).
fn config_check(file: &Path) -> Output {
    let mut command = Command::new(bin("lockbroker"));
    command.args(["config", "check"]).arg(file);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LOCKBROKER_") {
            command.env_remove(name);
        }
    }
    command.output().expect("lockbroker runs")
}

#[test]
fn the_sample_config_passes_config_check() {
    let file = root().join("deploy/lockbroker.toml");
    let out = config_check(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "config check refused deploy/lockbroker.toml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok (2 tenant(s))"), "{stdout}");
}

/// One way to break the sample, and what the check must say of it.
struct Breakage {
    what: &'static str,
    replace: &'static str,
    with: &'static str,
    /// The reason on stderr contains this.
    reason: &'static str,
}

const BREAKAGES: &[Breakage] = &[
    Breakage {
        what: "a misspelt key",
        replace: "max_held = 100000",
        with: "max_hold = 100000",
        reason: "unknown field `max_hold`",
    },
    Breakage {
        what: "a truncated digest",
        replace: "admin_token = \"sha256:6f56fbdebe3359",
        with: "admin_token = \"sha256:6f56\"\n# \"",
        reason: "is not followed by 64 hex digits",
    },
    Breakage {
        what: "two tenants with one key",
        replace: "sha256:ae0641502a0b2e9b94b02a2904d13db05dc769146acdeaaadec79efc2d18ccd3",
        with: "sha256:da705311206a04efc35875a4c8acadd785582c14565716bd55e6fe5aa3b6ecc0",
        reason: "tenants payments and batch-jobs share an API key",
    },
    Breakage {
        what: "a burst without a rate",
        replace: "max_requests_per_s = 200\n",
        with: "",
        reason: "tenant batch-jobs: max_requests_burst needs max_requests_per_s",
    },
];

/// The hex of every `sha256:` digest in `text`.
fn digests(text: &str) -> Vec<&str> {
    text.split("sha256:")
        .skip(1)
        .map(|rest| {
            rest.split(|c: char| !c.is_ascii_hexdigit())
                .next()
                .unwrap_or("")
        })
        .filter(|hex| !hex.is_empty())
        .collect()
}

#[test]
fn a_broken_copy_is_refused_with_exit_2_and_a_reason() {
    let sample = read("deploy/lockbroker.toml");
    for breakage in BREAKAGES {
        assert!(
            sample.contains(breakage.replace),
            "{}: the sample no longer has {:?}",
            breakage.what,
            breakage.replace
        );
        let broken = sample.replacen(breakage.replace, breakage.with, 1);
        let copy = TempFile::new("toml", broken.as_bytes());
        let out = config_check(copy.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: config check should refuse it with exit 2: {out:?}",
            breakage.what
        );
        assert!(
            stderr.contains(&copy.path().display().to_string()) && stderr.contains(breakage.reason),
            "{}: stderr should name the file and say {:?}: {stderr}",
            breakage.what,
            breakage.reason
        );
        for digest in digests(&broken) {
            assert!(
                !stderr.contains(digest),
                "{}: the reason repeats a secret's digest: {stderr}",
                breakage.what
            );
        }
    }
}

#[test]
fn the_sample_config_holds_digests_not_secrets() {
    let config: toml::Table = read("deploy/lockbroker.toml").parse().expect("TOML");
    let mut secrets: Vec<(String, &toml::Value)> = Vec::new();
    for key in ["admin_token", "metrics_token"] {
        let value = config
            .get(key)
            .unwrap_or_else(|| panic!("the sample sets {key}"));
        secrets.push((key.to_owned(), value));
    }
    let tenants = config["tenant"].as_array().expect("[[tenant]] tables");
    for tenant in tenants {
        let name = tenant["name"].as_str().expect("a tenant name");
        for key in ["api_key", "api_keys"] {
            let values = match tenant.get(key) {
                Some(toml::Value::Array(values)) => values.iter().collect(),
                Some(value) => vec![value],
                None => Vec::new(),
            };
            secrets.extend(values.into_iter().map(|v| (format!("{name}.{key}"), v)));
        }
    }
    assert!(secrets.len() >= 4, "{} secrets found", secrets.len());
    for (what, value) in secrets {
        let text = value.as_str().unwrap_or_default();
        let hex = text.strip_prefix("sha256:").unwrap_or_default();
        assert!(
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{what} in deploy/lockbroker.toml must be a sha256: digest (lockbroker hash-key)"
        );
    }
}

// ---------------------------------------------------------------------------
// The unit file.

/// A systemd unit file: every assignment, in order, with its section.
struct Unit {
    assignments: Vec<(String, String, String)>,
}

impl Unit {
    /// Parses systemd's INI dialect: `[Section]`, `Key=Value`, comments
    /// starting with `#` or `;`, lines continued by a final backslash.
    fn parse(text: &str) -> Unit {
        let mut assignments = Vec::new();
        let mut section = String::new();
        let mut pending = String::new();
        for line in text.lines() {
            let line = line.trim();
            if pending.is_empty() && (line.is_empty() || line.starts_with(['#', ';'])) {
                continue;
            }
            if let Some(start) = line.strip_suffix('\\') {
                pending.push_str(start);
                pending.push(' ');
                continue;
            }
            let whole = std::mem::take(&mut pending) + line;
            if let Some(name) = whole.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                section = name.to_owned();
            } else if let Some((key, value)) = whole.split_once('=') {
                assignments.push((
                    section.clone(),
                    key.trim().to_owned(),
                    value.trim().to_owned(),
                ));
            } else {
                panic!("not a unit file line: {whole:?}");
            }
        }
        Unit { assignments }
    }

    /// The value in force: the last assignment.
    fn value(&self, section: &str, key: &str) -> Option<&str> {
        self.assignments
            .iter()
            .rev()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
    }

    fn service(&self, key: &str) -> &str {
        self.value("Service", key)
            .unwrap_or_else(|| panic!("the unit sets no {key}="))
    }

    /// A list option: its assignments add up, an empty one resets it.
    fn list(&self, key: &str) -> Vec<String> {
        let mut items = Vec::new();
        for (_, _, value) in self
            .assignments
            .iter()
            .filter(|(s, k, _)| s == "Service" && k == key)
        {
            if value.is_empty() {
                items.clear();
            }
            items.extend(value.split_whitespace().map(str::to_owned));
        }
        items
    }
}

/// A systemd time span (`30`, `30s`, `1min 30s`, `90sec`).
fn time_span(text: &str) -> Duration {
    let mut total = Duration::ZERO;
    for word in text.split_whitespace() {
        let digits = word.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = word.split_at(digits);
        let number: u64 = number
            .parse()
            .unwrap_or_else(|_| panic!("time span {text:?}"));
        total += match unit {
            "" | "s" | "sec" => Duration::from_secs(number),
            "ms" | "msec" => Duration::from_millis(number),
            "m" | "min" => Duration::from_secs(number * 60),
            other => panic!("time unit {other:?} in {text:?}"),
        };
    }
    total
}

/// A `Duration::from_secs(N)` constant of the broker's source: the unit's
/// stop timeout must follow what the code does, not a copy of it.
fn source_secs(file: &str, name: &str) -> Duration {
    let text = read(file);
    let prefix = format!("const {name}: Duration = Duration::from_secs(");
    let secs = text
        .lines()
        .find_map(|line| line.trim().strip_prefix(&prefix))
        .and_then(|rest| rest.strip_suffix(");"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{file} no longer has `{prefix}N);`: update this test"));
    Duration::from_secs(secs)
}

/// The longest a broker on one database takes to stop after SIGTERM: the
/// HTTP drain, the background tasks, leaving the database, then the
/// runtime's leftovers (host/src/server.rs `Server::shutdown`).
fn shutdown_budget() -> Duration {
    let drain = source_secs("host/src/http/mod.rs", "DRAIN_TIMEOUT");
    let tasks = source_secs("host/src/server.rs", "STOP_TASKS_WITHIN");
    let exit = source_secs("host/src/bin/lockbroker.rs", "EXIT_WITHIN");
    // Background tasks once, then leaving each database (one here).
    drain + tasks + tasks + exit
}

#[test]
fn the_unit_runs_the_broker_as_its_own_user_with_reload_and_restart() {
    let unit = Unit::parse(&read("deploy/lockbroker.service"));
    assert_eq!(unit.service("User"), "lockbroker");
    assert_eq!(
        unit.service("ExecStart"),
        format!("{INSTALLED_BINARY} serve --config {INSTALLED_CONFIG}")
    );
    assert_eq!(unit.service("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(unit.service("Restart"), "on-failure");
    assert_eq!(unit.value("Install", "WantedBy"), Some("multi-user.target"));

    let budget = shutdown_budget();
    let timeout = time_span(unit.service("TimeoutStopSec"));
    assert!(
        timeout >= budget + Duration::from_secs(5),
        "TimeoutStopSec={timeout:?} leaves the broker no margin over its {budget:?} shutdown"
    );
    let files: u64 = unit.service("LimitNOFILE").parse().expect("a number");
    assert!(
        files >= 65_536,
        "LimitNOFILE={files}: one per waiting client"
    );
}

#[test]
fn the_unit_is_hardened() {
    let unit = Unit::parse(&read("deploy/lockbroker.service"));
    for key in [
        "NoNewPrivileges",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectControlGroups",
        "LockPersonality",
    ] {
        assert_eq!(unit.value("Service", key), Some("yes"), "{key}=yes");
    }
    assert_eq!(unit.service("ProtectSystem"), "strict");
    let mut families = unit.list("RestrictAddressFamilies");
    families.sort();
    assert_eq!(families, ["AF_INET", "AF_INET6", "AF_UNIX"]);
    // wasmtime's JIT maps the code it compiles writable, then executable.
    assert!(
        !matches!(
            unit.value("Service", "MemoryDenyWriteExecute"),
            Some("yes" | "true" | "1" | "on")
        ),
        "MemoryDenyWriteExecute would make every policy load fail"
    );
}

#[test]
fn the_unit_lets_the_broker_write_where_the_config_says() {
    let unit = Unit::parse(&read("deploy/lockbroker.service"));
    let config: toml::Table = read("deploy/lockbroker.toml").parse().expect("TOML");
    let writable = unit.list("ReadWritePaths");
    for key in ["policy_dir", "cache_dir"] {
        let dir = config[key].as_str().expect("a path");
        assert!(
            writable.iter().any(|w| Path::new(dir).starts_with(w)),
            "{key} {dir} is read-only under ProtectSystem=strict: ReadWritePaths={writable:?}"
        );
    }
    // StateDirectory=/CacheDirectory= create them, owned by the user.
    let created: Vec<String> = unit
        .list("StateDirectory")
        .iter()
        .map(|d| format!("/var/lib/{d}"))
        .chain(
            unit.list("CacheDirectory")
                .iter()
                .map(|d| format!("/var/cache/{d}")),
        )
        .collect();
    for w in &writable {
        assert!(
            created.contains(w),
            "{w} is not created by the unit: {created:?}"
        );
    }
}

#[test]
fn exec_start_is_a_command_line_the_broker_accepts() {
    let unit = Unit::parse(&read("deploy/lockbroker.service"));
    let argv: Vec<&str> = unit.service("ExecStart").split_whitespace().collect();
    assert_eq!(argv[0], INSTALLED_BINARY);
    // The same arguments, the config swapped for a file that is not there:
    // the broker gets as far as reading it (a wrong argument would be a
    // usage error, exit 2, before that).
    let missing = std::env::temp_dir().join(format!("{}.toml", lockbroker_tests::fresh_db_name()));
    let args: Vec<String> = argv[1..]
        .iter()
        .map(|arg| match *arg {
            INSTALLED_CONFIG => missing.display().to_string(),
            arg => arg.to_owned(),
        })
        .collect();
    let out = Command::new(bin("lockbroker"))
        .args(&args)
        .output()
        .expect("lockbroker runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(
        stderr.contains("cannot read config file"),
        "{args:?}: {stderr}"
    );
}

// ---------------------------------------------------------------------------
// systemd-analyze verify.

/// `systemd-analyze verify` of `text` as a unit file, with the installed
/// binary's path replaced by the built one (verify requires every
/// command to exist): the exit status and the diagnostics about the unit.
fn verify(text: &str) -> (bool, Vec<String>, String) {
    let present = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        present.is_ok_and(|out| out.status.success()),
        "systemd-analyze is missing: run scripts/deploy-deps (installs Debian's systemd)"
    );
    let built = bin("lockbroker");
    let text = text.replace(INSTALLED_BINARY, &built.display().to_string());
    let copy = TempFile::new("service", text.as_bytes());
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(copy.path())
        // Warnings (unknown keys, bad values) are logged, not failed on:
        // make sure they are printed, then look for them.
        .env("SYSTEMD_LOG_LEVEL", "info")
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .expect("systemd-analyze runs");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let name = copy
        .path()
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    let about_unit = all
        .lines()
        .filter(|line| line.contains(&name))
        .map(str::to_owned)
        .collect();
    (out.status.success(), about_unit, all)
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let (ok, diagnostics, all) = verify(&read("deploy/lockbroker.service"));
    assert!(
        ok && diagnostics.is_empty(),
        "systemd-analyze verify deploy/lockbroker.service:\n{all}"
    );
}

#[test]
fn systemd_analyze_verify_reports_a_broken_unit() {
    // So that a clean verify above means something: a typo and a bad value
    // are reported, as warnings, and an ExecStart that is not there fails.
    let text = read("deploy/lockbroker.service");
    let typo = text
        .replace("ProtectSystem=strict", "ProtectSystem=strictly")
        .replace("NoNewPrivileges=yes", "NoNewPrivilege=yes");
    let (_, diagnostics, all) = verify(&typo);
    for expected in ["strictly", "NoNewPrivilege"] {
        assert!(
            diagnostics.iter().any(|line| line.contains(expected)),
            "no diagnostic about {expected}:\n{all}"
        );
    }
    let missing = text.replace(
        &format!("ExecStart={INSTALLED_BINARY}"),
        "ExecStart=/nonexistent/lockbroker",
    );
    let (ok, _, all) = verify(&missing);
    assert!(
        !ok && all.contains("/nonexistent/lockbroker"),
        "a missing ExecStart binary passed:\n{all}"
    );
}
