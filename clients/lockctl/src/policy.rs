//! `lockctl policy upload FILE --tenant T`, `lockctl policy status
//! [--tenant T]`, `lockctl policy versions --tenant T` and `lockctl policy
//! rollback --tenant T [VERSION]`: the admin API's policy calls, with the
//! admin token.

use std::{path::Path, process::ExitCode};

use lockbroker_client::{
    api::{PolicyVersions, TenantInfo},
    Client,
};

use crate::output::{envelope, Output, EXIT_USAGE};

pub async fn upload(client: &Client, out: Output, file: &Path, tenant: &str) -> ExitCode {
    let wasm = match tokio::fs::read(file).await {
        Ok(wasm) => wasm,
        Err(err) => {
            let message = format!("cannot read {}: {err}", file.display());
            if out.json_flag {
                out.json(&envelope("usage", &message));
            }
            eprintln!("lockctl: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match client.admin().upload_policy(tenant, wasm).await {
        Ok(info) if out.json_flag => out.json(&info),
        Ok(info) => out.human(&describe(&info)),
        Err(err) => return out.fail("policy upload", &err, false),
    }
    ExitCode::SUCCESS
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
    line
}
