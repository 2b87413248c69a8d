//! Tenants and who they are: bearer keys compared in constant time.
//!
//! Keys are kept only as digests ([`Secret`]), and every comparison
//! touches every key of every tenant (no early exit), so response times
//! say nothing about which tenant or byte matched.

use std::sync::Arc;

use crate::{
    config::TenantConfig,
    policy::{Delays, TenantPolicy},
    quota::{Held, Rate},
    secret::{self, Secret},
};

/// One tenant: its limits and its policy.
pub struct Tenant {
    pub name: String,
    pub max_ttl_ms: u64,
    pub max_waiters: u64,
    /// Its live leases against `max_held` (shared with the tenant as it
    /// was before a config reload: the estimate carries over).
    pub held: Arc<Held>,
    /// Its API keys, as digests.
    keys: Vec<Secret>,
    /// Its requests against `max_requests_per_s`, if limited (the bucket
    /// carries over a config reload that leaves the rate as it was).
    pub rate: Option<Arc<Rate>>,
    /// Event streams it may have open on this broker at once.
    pub max_streams: usize,
    /// Its live sessions, at most (counted in the database).
    pub max_sessions: u64,
    /// Its policy (and the policy's file in `policy_dir`, if any).
    pub policy: Arc<TenantPolicy>,
    /// Which of the broker's databases holds this tenant's locks.
    pub database: usize,
    /// Lock-delay and minimum hold of this tenant's locks, as configured;
    /// a policy exporting `timing` may override them per key (see
    /// `engine::delay`).
    pub delays: Delays,
}

impl std::fmt::Debug for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenant").field("name", &self.name).finish()
    }
}

impl Tenant {
    pub fn new(config: &TenantConfig, policy: Arc<TenantPolicy>, database: usize) -> Tenant {
        Tenant {
            database,
            name: config.name.clone(),
            keys: config.keys().cloned().collect(),
            max_ttl_ms: config.max_ttl_ms,
            max_waiters: config.max_waiters,
            held: Arc::new(Held::new(config.max_held)),
            rate: config
                .rate()
                .map(|(per_s, burst)| Arc::new(Rate::new(per_s, burst))),
            max_streams: config.max_streams,
            max_sessions: config.max_sessions,
            policy,
            delays: Delays {
                lock_delay_ms: config.lock_delay_ms,
                min_hold_ms: config.min_hold_ms,
            },
        }
    }
}

impl Tenant {
    /// This tenant as `config` (a reloaded config; `was` the one before)
    /// has it, with `policy`: its held-lease estimate carries over (the
    /// caller sets the new `max_held` once the reload is taken), and its
    /// rate bucket when the rate is unchanged. Requests in flight keep the
    /// tenant they started with.
    pub fn reconfigured(
        &self,
        config: &TenantConfig,
        was: &TenantConfig,
        policy: Arc<TenantPolicy>,
    ) -> Tenant {
        let rate = match (config.rate(), &self.rate) {
            (now, Some(bucket)) if now == was.rate() => Some(bucket.clone()),
            (now, _) => now.map(|(per_s, burst)| Arc::new(Rate::new(per_s, burst))),
        };
        Tenant {
            database: self.database,
            name: config.name.clone(),
            keys: config.keys().cloned().collect(),
            max_ttl_ms: config.max_ttl_ms,
            max_waiters: config.max_waiters,
            held: self.held.clone(),
            rate,
            max_streams: config.max_streams,
            max_sessions: config.max_sessions,
            policy,
            delays: Delays {
                lock_delay_ms: config.lock_delay_ms,
                min_hold_ms: config.min_hold_ms,
            },
        }
    }
}

/// All tenants: fixed for a request, replaced whole by a config reload.
#[derive(Debug, Default)]
pub struct Tenants {
    list: Vec<Arc<Tenant>>,
}

impl Tenants {
    pub fn new(list: Vec<Tenant>) -> Tenants {
        Tenants {
            list: list.into_iter().map(Arc::new).collect(),
        }
    }

    /// Tenants already shared (some carried over a reload).
    pub fn of(list: Vec<Arc<Tenant>>) -> Tenants {
        Tenants { list }
    }

    /// The tenant whose API key is `bearer`, comparing against all of them.
    pub fn authenticate(&self, bearer: &str) -> Option<Arc<Tenant>> {
        let presented = secret::digest(bearer);
        let mut found = None;
        for tenant in &self.list {
            if Secret::any_matches(&tenant.keys, &presented) {
                found = Some(tenant.clone());
            }
        }
        found
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.list.iter().find(|t| t.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.list.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{metrics::Metrics, policy::Loaded};

    fn tenant(name: &str, key: &str) -> Tenant {
        let config = TenantConfig {
            max_ttl_ms: 1000,
            max_waiters: 10,
            ..TenantConfig::new(name, key)
        };
        let policy = TenantPolicy::new(name, None, Loaded::builtin(), Arc::new(Metrics::default()));
        Tenant::new(&config, Arc::new(policy), 0)
    }

    #[test]
    fn authenticates_by_key() {
        let tenants = Tenants::new(vec![tenant("a", "key-a"), tenant("b", "key-b")]);
        assert_eq!(tenants.authenticate("key-b").unwrap().name, "b");
        assert_eq!(tenants.authenticate("key-a").unwrap().name, "a");
        assert!(tenants.authenticate("key-c").is_none());
        assert!(tenants.authenticate("").is_none());
        assert!(tenants.authenticate("key-a ").is_none());
        assert!(!format!("{:?}", tenants).contains("key-a"));
    }
}
