//! Config reload (SIGHUP, `POST /v1/admin/reload`): the config file is read
//! again, checked whole, and what can change live is put in force at once —
//! tenants added, removed or changed (keys, limits, policy files), the
//! admin and metrics tokens, the TLS files. Settings read only at start
//! (the listen address, databases, pools, timeouts) are reported as
//! needing a restart and keep their running values.
//!
//! A new config is refused whole (and the old one kept) when it does not
//! parse or validate, when a TLS file does not load, or when a policy file
//! it newly names does not load. Reloads take turns. Requests in flight
//! hold the tenant they authenticated as, so they finish under the config
//! they started with; a removed tenant's leases stay in the database
//! (expiring as usual) and are served again if it comes back.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use crate::{
    app::{App, Live},
    config::{Config, DatabaseUrl, TenantConfig},
    engine::Scope,
    policy::{reload, Loaded, TenantPolicy},
    tenant::{Tenant, Tenants},
};

/// What asked for a reload (in the audit log and `GET /v1/admin/reload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Sighup,
    Api,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Sighup => "sighup",
            Trigger::Api => "api",
        }
    }
}

/// A reload that was taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// What changed and is in force, in words.
    pub changed: Vec<String>,
    /// What changed in the file but needs a restart (not applied).
    pub needs_restart: Vec<String>,
}

/// Why a new config was refused (the old one stays in force, whole).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The last reload, for `GET /v1/admin/reload`.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub at: String,
    pub by: Trigger,
    pub result: Result<Outcome, String>,
}

/// Pushes to `$out` the name of each field of `$new` (a `$ty`) compared
/// that differs from `$old`'s. Every field of `$ty` is named, compared or
/// ignored, so a field added later must be classed before the code
/// compiles.
macro_rules! differing {
    ($out:ident: $new:ident vs $old:ident, $ty:ident { $($field:ident),* $(,)? }
        ignoring { $($skip:ident),* $(,)? }) => {{
        let $ty { $($field,)* $($skip: _,)* } = $new;
        $(
            if *$field != $old.$field {
                $out.push(stringify!($field).into());
            }
        )*
    }};
}

/// Settings of `new` that differ from the `running` config's but are only
/// read at start.
pub fn needs_restart(running: &Config, new: &Config) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    differing!(out: new vs running, Config {
        listen,
        database_url,
        db_timeout_ms,
        group_commit,
        policy_dir,
        max_connections,
        policy_deadline_ms,
        policy_memory_bytes,
        max_policy_bytes,
        reaper_interval_ms,
        history_retention_hours,
        cache_dir,
        header_read_timeout_ms,
        log_format,
        otlp_endpoint,
        otlp_service_name,
    } ignoring {
        // Live, or compared below.
        admin_token,
        metrics_token,
        tenants,
        advertise_url,
        tls,
        dev_defaults,
        source,
    });
    // A broker without one advertises the address it bound, which is what
    // the running config holds then.
    if new.advertise_url.is_some() && new.advertise_url != running.advertise_url {
        out.push("advertise_url".into());
    }
    match (&new.tls, &running.tls) {
        (Some(new), Some(old)) if new.peer_ca_file != old.peer_ca_file => {
            out.push("tls.peer_ca_file".into());
        }
        (Some(_), None) | (None, Some(_)) => out.push("tls".into()),
        _ => {}
    }
    out
}

/// The settings of a tenant that differ between `old` and `new` (the same
/// tenant), by their config names.
pub fn tenant_changes(old: &TenantConfig, new: &TenantConfig) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    if !old.keys().eq(new.keys()) {
        out.push("api_keys");
    }
    differing!(out: new vs old, TenantConfig {
        policy,
        max_ttl_ms,
        max_waiters,
        max_held,
        max_requests_per_s,
        max_requests_burst,
        max_streams,
        max_sessions,
        database_url,
        policy_deadline_ms,
        policy_memory_bytes,
        lock_delay_ms,
        min_hold_ms,
    } ignoring {
        name,
        api_key,
        api_keys,
    });
    out
}

/// Whether a change of these settings takes a new load of the tenant's
/// policy (another file, or other limits to compile it under).
fn reloads_policy(changes: &[&str]) -> bool {
    changes
        .iter()
        .any(|c| matches!(*c, "policy" | "policy_deadline_ms" | "policy_memory_bytes"))
}

impl App {
    /// Reads the config file again and puts what can change live in force
    /// (see the module). Reloads take turns.
    ///
    /// # Errors
    /// [`Refused`] with the reason; nothing changed.
    pub async fn reload(&self, by: Trigger) -> Result<Outcome, Refused> {
        let mut last = self.reloads.lock().await;
        let result = self.reload_now().await;
        let at = crate::policy::now_rfc3339();
        match &result {
            Ok(outcome) => tracing::info!(
                target: "lockbroker::audit",
                action = "reload",
                by = by.as_str(),
                changed = ?outcome.changed,
                needs_restart = ?outcome.needs_restart,
                "config reloaded"
            ),
            Err(err) => tracing::warn!(
                target: "lockbroker::audit",
                action = "reload",
                by = by.as_str(),
                error = %err,
                "config reload refused; the config in force stays"
            ),
        }
        self.audit("reload", result.is_ok());
        *last = Some(Attempt {
            at,
            by,
            result: result
                .as_ref()
                .map(Clone::clone)
                .map_err(ToString::to_string),
        });
        result
    }

    /// The last reload since start, if any.
    pub async fn last_reload(&self) -> Option<Attempt> {
        self.reloads.lock().await.clone()
    }

    async fn reload_now(&self) -> Result<Outcome, Refused> {
        let path: PathBuf = self.config.source.clone().ok_or_else(|| {
            Refused("the broker was started without a config file: nothing to reload".into())
        })?;
        let new = Config::load(Some(&path)).map_err(|err| Refused(err.to_string()))?;
        let live = self.live();
        let mut outcome = Outcome {
            needs_restart: needs_restart(&self.config, &new),
            ..Outcome::default()
        };

        // TLS: the files of the new config must load before anything
        // changes; they are re-read on every reload (rotated in place).
        if let (Some(_), Some(files)) = (&self.tls, &new.tls) {
            crate::tls::check(files).map_err(|err| Refused(format!("[tls]: {err:#}")))?;
            if live.config.tls.as_ref() != Some(files) {
                outcome.changed.push("tls files".into());
            }
        }

        let tenants = self.reconfigured_tenants(&live, &new, &mut outcome).await?;
        for (what, old, now) in [
            ("admin_token", &live.config.admin_token, &new.admin_token),
            (
                "metrics_token",
                &live.config.metrics_token,
                &new.metrics_token,
            ),
        ] {
            if old != now {
                outcome.changed.push(what.into());
            }
        }

        // Taken: from here on nothing fails.
        for (t, config) in tenants.iter().zip(&new.tenants) {
            t.held.set_max(config.max_held);
        }
        for (i, engine) in self.engines.iter().enumerate() {
            engine.set_scopes(tenants.iter().filter(|t| t.database == i).map(Scope::of));
        }
        self.reloader.retarget(
            new.tenants
                .iter()
                .map(|t| (t.name.clone(), reload::load_options(&self.config, t)))
                .collect(),
            tenants.iter().map(|t| t.policy.clone()),
        );
        if let (Some(tls), Some(files)) = (&self.tls, &new.tls) {
            tls.retarget(files.clone());
        }
        self.set_live(Live::new(Tenants::of(tenants), new));
        Ok(outcome)
    }

    /// The tenants of `new`: each one kept from `live` carries over what it
    /// has (held estimate, rate bucket, its policy unless the file or its
    /// limits changed); a new one, or a changed policy, is loaded before
    /// anything is put in force.
    async fn reconfigured_tenants(
        &self,
        live: &Live,
        new: &Config,
        outcome: &mut Outcome,
    ) -> Result<Vec<Arc<Tenant>>, Refused> {
        let (databases, _) = self.config.databases();
        let database_of = |t: &TenantConfig| -> Option<usize> {
            let url: &DatabaseUrl = t.database_url.as_ref().unwrap_or(&self.config.database_url);
            databases.iter().position(|d| d == url)
        };
        let before: HashMap<&str, (&Arc<Tenant>, &TenantConfig)> = live
            .tenants
            .iter()
            .zip(&live.config.tenants)
            .map(|(t, c)| (c.name.as_str(), (t, c)))
            .collect();
        let mut out = Vec::new();
        for config in &new.tenants {
            let name = &config.name;
            let options = reload::load_options(&self.config, config);
            let Some((tenant, was)) = before.get(name.as_str()) else {
                let Some(database) = database_of(config) else {
                    outcome
                        .needs_restart
                        .push(format!("tenant {name} added (on a database not connected)"));
                    continue;
                };
                let policy = self.new_policy(config, options).await?;
                out.push(Arc::new(Tenant::new(config, policy, database)));
                outcome.changed.push(format!("tenant {name} added"));
                continue;
            };
            let mut changes = tenant_changes(was, config);
            if changes.contains(&"database_url") {
                outcome
                    .needs_restart
                    .push(format!("tenant {name}: database_url"));
                changes.retain(|c| *c != "database_url");
            }
            let policy = if reloads_policy(&changes) {
                self.new_policy(config, options).await?
            } else {
                tenant.policy.clone()
            };
            out.push(Arc::new(tenant.reconfigured(config, was, policy)));
            if !changes.is_empty() {
                outcome
                    .changed
                    .push(format!("tenant {name}: {}", changes.join(", ")));
            }
        }
        for config in &live.config.tenants {
            if !new.tenants.iter().any(|t| t.name == config.name) {
                outcome
                    .changed
                    .push(format!("tenant {} removed", config.name));
            }
        }
        Ok(out)
    }

    /// A tenant's policy as `config` names it, loaded (the built-in one
    /// without a file).
    async fn new_policy(
        &self,
        config: &TenantConfig,
        options: crate::policy::wasm::LoadOptions,
    ) -> Result<Arc<TenantPolicy>, Refused> {
        let loaded = match config.policy {
            Some(_) => reload::loading(),
            None => Loaded::builtin(),
        };
        let policy = Arc::new(TenantPolicy::new(
            &config.name,
            config.policy.clone(),
            loaded,
            self.metrics.clone(),
        ));
        self.reloader
            .load_new(&policy, options)
            .await
            .map_err(|err| {
                Refused(format!(
                    "tenant {}: policy {}: {}",
                    config.name,
                    config.policy.as_deref().unwrap_or("builtin"),
                    err.0
                ))
            })?;
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let config = Config::from_toml(text).unwrap();
        config.validate().unwrap();
        config
    }

    const BASE: &str = r#"
listen = "127.0.0.1:7420"
admin_token = "a"
[[tenant]]
name = "t"
api_key = "k"
"#;

    #[test]
    fn restart_only_settings_are_named() {
        let old = config(BASE);
        assert!(needs_restart(&old, &config(BASE)).is_empty());
        let new = config(&BASE.replace("7420", "7421").replace(
            "admin_token = \"a\"",
            "admin_token = \"b\"\ndatabase_url = \"mysql://x@h/db\"\nmax_connections = 3",
        ));
        assert_eq!(
            needs_restart(&old, &new),
            ["listen", "database_url", "max_connections"]
        );
    }

    #[test]
    fn tenant_settings_that_changed_are_named() {
        let old = &config(BASE).tenants[0];
        let new = config(&format!(
            "{BASE}api_keys = [\"k2\"]\nmax_held = 5\nmax_requests_per_s = 9\npolicy = \"p.wasm\""
        ));
        let changes = tenant_changes(old, &new.tenants[0]);
        assert_eq!(
            changes,
            ["api_keys", "policy", "max_held", "max_requests_per_s"]
        );
        assert!(reloads_policy(&changes));
        assert!(!reloads_policy(&["max_held", "api_keys"]));
        assert!(tenant_changes(old, old).is_empty());
    }
}
