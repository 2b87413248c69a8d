//! `lockctl policy upload FILE --tenant T`, `lockctl policy status
//! [--tenant T]`, `lockctl policy versions --tenant T`, `lockctl policy
//! rollback --tenant T [VERSION]`, and shadow mode: `lockctl policy shadow
//! FILE --tenant T`, `shadow-report --tenant T`, `shadow-drop --tenant T`
//! and `promote --tenant T`: the admin API's policy calls, with the admin
//! token.

use std::{path::Path, process::ExitCode};

use lockbroker_client::{
    api::{PolicyShadow, PolicyVersions, ShadowCount, TenantInfo},
    Client,
};

use crate::output::{envelope, Output, EXIT_USAGE};

/// `policy upload FILE --tenant T`, or with `shadow` `policy shadow FILE
/// --tenant T`: the tenant with its policy (and its candidate).
pub async fn upload(
    client: &Client,
    out: Output,
    file: &Path,
    tenant: &str,
    shadow: bool,
) -> ExitCode {
    let Some(wasm) = read(out, file).await else {
        return ExitCode::from(EXIT_USAGE);
    };
    let (what, uploaded) = if shadow {
        (
            "policy shadow",
            client.admin().shadow_policy(tenant, wasm).await,
        )
    } else {
        (
            "policy upload",
            client.admin().upload_policy(tenant, wasm).await,
        )
    };
    match uploaded {
        Ok(info) if out.json_flag => out.json(&info),
        Ok(info) => out.human(&describe(&info)),
        Err(err) => return out.fail(what, &err, false),
    }
    ExitCode::SUCCESS
}

/// `policy shadow-report` (or, `drop`, `policy shadow-drop`): the report.
pub async fn shadow_report(client: &Client, out: Output, tenant: &str, drop: bool) -> ExitCode {
    let (what, report) = if drop {
        (
            "policy shadow-drop",
            client.admin().drop_shadow(tenant).await,
        )
    } else {
        (
            "policy shadow-report",
            client.admin().shadow_report(tenant).await,
        )
    };
    match report {
        Ok(report) if out.json_flag => out.json(&report),
        Ok(report) => print_report(out, &report),
        Err(err) => return out.fail(what, &err, false),
    }
    ExitCode::SUCCESS
}

/// `policy promote --tenant T`: the versions after it.
pub async fn promote(client: &Client, out: Output, tenant: &str) -> ExitCode {
    match client.admin().promote_policy(tenant).await {
        Ok(versions) => print_versions(out, &versions),
        Err(err) => return out.fail("policy promote", &err, false),
    }
    ExitCode::SUCCESS
}

/// The bytes of a component file, or `None` (reported as a usage error).
async fn read(out: Output, file: &Path) -> Option<Vec<u8>> {
    match tokio::fs::read(file).await {
        Ok(wasm) => Some(wasm),
        Err(err) => {
            let message = format!("cannot read {}: {err}", file.display());
            if out.json_flag {
                out.json(&envelope("usage", &message));
            }
            eprintln!("lockctl: {message}");
            None
        }
    }
}

/// A shadow report for people: the candidate, one line per export
/// (`naming: 1480 agree, 20 disagree, 0 failed, 0 dropped`), then the
/// disagreements, newest first.
fn print_report(out: Output, report: &PolicyShadow) {
    let c = &report.candidate;
    out.human(&format!(
        "{}: shadow {} {} {} (loaded {}), beside {}",
        report.tenant,
        c.id,
        c.name,
        c.version,
        c.loaded_at,
        report.active.as_deref().unwrap_or("no policy loaded")
    ));
    let counts = &report.counts;
    for (export, n) in [
        ("naming", counts.naming),
        ("fairness", counts.fairness),
        ("backoff", counts.backoff),
        ("timing", counts.timing),
        ("deadlocks", counts.deadlocks),
    ] {
        out.human(&format!("  {export}: {}", count_words(n)));
    }
    if report.disagreements.is_empty() {
        return out.human("no disagreements");
    }
    out.human("latest disagreements (newest first):");
    for d in &report.disagreements {
        let export = serde_json::to_value(d.export)
            .ok()
            .and_then(|e| e.as_str().map(str::to_owned))
            .unwrap_or_default();
        out.human(&format!(
            "  {} {export} {}: in force {}; candidate {}",
            d.at, d.input, d.active, d.candidate
        ));
    }
}

fn count_words(n: ShadowCount) -> String {
    format!(
        "{} agree, {} disagree, {} failed, {} dropped",
        n.agree, n.disagree, n.failed, n.dropped
    )
}

pub async fn status(client: &Client, out: Output, tenant: Option<&str>) -> ExitCode {
    let tenants = match tenant {
        Some(tenant) => client.admin().policy_status(tenant).await.map(|t| vec![t]),
        None => client.admin().tenants().await.map(|list| list.tenants),
    };
    let tenants = match tenants {
        Ok(tenants) => tenants,
        Err(err) => return out.fail("policy status", &err, false),
    };
    match (out.json_flag, tenant) {
        (true, Some(_)) => out.json(&tenants[0]),
        (true, None) => out.json(&serde_json::json!({ "tenants": tenants })),
        (false, _) => tenants.iter().for_each(|t| out.human(&describe(t))),
    }
    ExitCode::SUCCESS
}

pub async fn versions(client: &Client, out: Output, tenant: &str) -> ExitCode {
    match client.admin().policy_versions(tenant).await {
        Ok(versions) => print_versions(out, &versions),
        Err(err) => return out.fail("policy versions", &err, false),
    }
    ExitCode::SUCCESS
}

pub async fn rollback(
    client: &Client,
    out: Output,
    tenant: &str,
    version: Option<&str>,
) -> ExitCode {
    match client.admin().rollback_policy(tenant, version).await {
        Ok(versions) => print_versions(out, &versions),
        Err(err) => return out.fail("policy rollback", &err, false),
    }
    ExitCode::SUCCESS
}

/// The versions document with `--json`, else one line each:
/// `* ID NAME VERSION, BY AT` (`*`: in force).
fn print_versions(out: Output, versions: &PolicyVersions) {
    if out.json_flag {
        return out.json(versions);
    }
    for v in &versions.versions {
        out.human(&format!(
            "{} {} {} {}, {} {}",
            if v.active { "*" } else { " " },
            v.id,
            v.name,
            v.version,
            serde_json::to_value(v.loaded_by)
                .ok()
                .and_then(|by| by.as_str().map(str::to_owned))
                .unwrap_or_default(),
            v.loaded_at
        ));
    }
}

/// `TENANT: NAME VERSION sha256:... loaded AT [last error: ...]`.
fn describe(tenant: &TenantInfo) -> String {
    let policy = &tenant.policy;
    let mut line = format!(
        "{}: {} {} ({}), loaded {}",
        tenant.name,
        policy.name,
        policy.version,
        policy
            .sha256
            .as_deref()
            .map_or_else(|| "built in".to_owned(), |s| format!("sha256 {s}")),
        policy.loaded_at
    );
    if let Some(err) = &tenant.last_error {
        line.push_str(&format!("; last load failed: {err}"));
    }
    if let Some(shadow) = &tenant.shadow {
        line.push_str(&format!(
            "; shadow {} {} {} (sha256 {}), loaded {}",
            shadow.id, shadow.name, shadow.version, shadow.sha256, shadow.loaded_at
        ));
    }
    line
}
