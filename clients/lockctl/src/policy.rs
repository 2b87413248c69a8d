//! `lockctl policy upload FILE --tenant T` and `lockctl policy status
//! [--tenant T]`: the admin API's policy calls, with the admin token.

use std::{path::Path, process::ExitCode};

use lockbroker_client::{api::TenantInfo, Client};

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
