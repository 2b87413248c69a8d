//! Building the broker from its config: [`App`] is what every request
//! shares (tenants, the engine of each database, the policy loader, push
//! wake-ups, metrics). [`crate::server`] runs it.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::Context as _;
use tokio::sync::watch;

use crate::{
    config::Config,
    engine::{self, Engine, Push, Settings},
    metrics::Metrics,
    policy::{
        reload::{self, Reloader},
        wasm::{Limits, WasmHost},
        Loaded, TenantPolicy,
    },
    reconfigure::Attempt,
    store::{db::Db, pool::Setup},
    tenant::{Tenant, Tenants},
    tls::Tls,
};

/// How long a start waits for each database server to answer.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Everything a request needs.
pub struct App {
    /// The config the broker started with: what a reload cannot change
    /// (listen address, databases, pools, timeouts) is read from here.
    pub config: Config,
    /// What a config reload replaces: a request takes it once and keeps
    /// it ([`App::live`]).
    live: RwLock<Arc<Live>>,
    /// The last reload, held while one is under way (reloads take turns).
    pub(crate) reloads: tokio::sync::Mutex<Option<Attempt>>,
    /// One engine per database (the top-level one first, then each shard
    /// a tenant names); a tenant's `database` is its index here.
    pub engines: Vec<Engine>,
    pub metrics: Arc<Metrics>,
    pub reloader: Arc<Reloader>,
    /// Push wake-ups between brokers: this process's secret and its
    /// client to the others.
    pub push: Arc<Push>,
    /// The listener's TLS, with `[tls]`.
    pub tls: Option<Arc<Tls>>,
}

impl App {
    /// Connects to every database (creating and migrating it), says this
    /// broker is alive there (and, with `config.advertise_url`, where it
    /// takes push wake-ups). A tenant with a policy file starts with the
    /// stand-in of a policy being loaded ([`reload::loading`]): its file is
    /// loaded by [`Reloader::load_all`] ([`crate::Server::start`] does it).
    ///
    /// # Errors
    /// A database cannot be reached or migrated, or the WebAssembly engine
    /// cannot be set up.
    pub async fn build(config: Config, stop: watch::Receiver<bool>) -> anyhow::Result<App> {
        if config.dev_defaults {
            tracing::warn!(
                "no --config given: using the development defaults (tenant \"default\" with the API key and admin token docs/02-quickstart.md gives); do not use them in production"
            );
        }
        let tls = match &config.tls {
            Some(files) => Some(Arc::new(
                Tls::load(files).context("cannot load the [tls] files")?,
            )),
            None => None,
        };
        let metrics = Arc::new(Metrics::default());
        let (databases, of_tenant) = config.databases();
        let broker = engine::broker_name();
        let push = Arc::new(
            Push::new(config.advertise_url.clone(), config.tls.as_ref())
                .context("cannot set up push wake-ups")?,
        );
        let mut engines = Vec::new();
        for urls in &databases {
            let db = open(&config, &urls.0).await?;
            let engine = Engine::new(
                db,
                metrics.clone(),
                stop.clone(),
                Settings {
                    db_timeout: config.db_timeout(),
                    group_commit: config.group_commit,
                },
                broker.clone(),
            );
            engine.enable_push(push.clone());
            engine
                .heartbeat()
                .await
                .context("cannot register this broker in the database")?;
            engines.push(engine);
        }
        let host = WasmHost::new(
            Limits {
                deadline: config.policy_deadline(),
                memory_bytes: config.policy_memory_bytes,
            },
            config.cache_dir.clone(),
        )?;
        let reloader = Arc::new(Reloader::new(Arc::new(host), &config, metrics.clone()));
        let mut tenants = Vec::new();
        for (t, database) in config.tenants.iter().zip(of_tenant) {
            let loaded = match t.policy {
                Some(_) => reload::loading(),
                None => Loaded::builtin(),
            };
            let policy = TenantPolicy::new(&t.name, t.policy.clone(), loaded, metrics.clone());
            tenants.push(Tenant::new(t, Arc::new(policy), database));
        }
        Ok(App {
            live: RwLock::new(Arc::new(Live::new(Tenants::new(tenants), config.clone()))),
            reloads: tokio::sync::Mutex::default(),
            reloader,
            engines,
            metrics,
            push,
            tls,
            config,
        })
    }

    /// The tenants and tokens in force now. A request takes them once, so
    /// a reload meanwhile does not change them under it.
    pub fn live(&self) -> Arc<Live> {
        self.live.read().expect("live config lock").clone()
    }

    pub(crate) fn set_live(&self, live: Live) {
        *self.live.write().expect("live config lock") = Arc::new(live);
    }

    /// Counts an admin action (`lockbroker_admin_actions_total`); its
    /// audit log line is written where the action is.
    pub fn audit(&self, action: &str, ok: bool) {
        self.metrics.inc(
            "lockbroker_admin_actions_total",
            &[
                ("action", action),
                ("result", if ok { "ok" } else { "error" }),
            ],
        );
    }

    /// The engine on the database that holds `tenant`'s locks: from the
    /// tenant the request holds, so a reload meanwhile cannot send it to
    /// another database.
    pub fn engine(&self, tenant: &Tenant) -> &Engine {
        &self.engines[tenant.database]
    }

    /// A push wake-up for waiters `ids` from another broker: each engine
    /// with one of them waiting looks for its grants now. How many of
    /// them wait on this broker.
    pub fn woken(&self, ids: &[u64]) -> usize {
        self.engines.iter().map(|engine| engine.woken(ids)).sum()
    }

    /// This broker's waiters in memory that `ask` names, from every
    /// engine (`POST /internal/v1/waiting`).
    pub fn waiting_here(&self, ask: &crate::engine::WaitingRequest) -> crate::engine::WaitingReply {
        let waiters = self
            .engines
            .iter()
            .flat_map(|e| e.waiting_here(ask).waiters);
        crate::engine::WaitingReply {
            waiters: waiters.collect(),
        }
    }

    /// How hot this broker saw the keys `ask` names, from every engine
    /// (`POST /internal/v1/heat`).
    pub fn heat_here(&self, ask: &crate::engine::HeatRequest) -> crate::engine::HeatReply {
        let keys = self.engines.iter().flat_map(|e| e.heat_here(ask).keys);
        crate::engine::HeatReply {
            keys: keys.collect(),
        }
    }

    /// Ready when every database answers and every tenant has a policy of
    /// its own in force (not a stand-in: one still loading, or one for a
    /// file that failed to load).
    ///
    /// # Errors
    /// What is not ready, in words.
    pub async fn ready(&self) -> Result<(), String> {
        for engine in &self.engines {
            if !engine.ping().await {
                return Err(format!(
                    "the database {} does not answer",
                    engine.db().describe()
                ));
            }
        }
        let live = self.live();
        let (loading, failed): (Vec<&Arc<Tenant>>, Vec<&Arc<Tenant>>) = live
            .tenants
            .iter()
            .filter(|t| !t.policy.is_loaded())
            .partition(|t| t.policy.is_loading());
        let names = |tenants: Vec<&Arc<Tenant>>| {
            tenants
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut why = Vec::new();
        if !failed.is_empty() {
            why.push(format!(
                "the policy of tenant(s) {} did not load",
                names(failed)
            ));
        }
        if !loading.is_empty() {
            why.push(format!(
                "the policy of tenant(s) {} is still loading",
                names(loading)
            ));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }
}

/// What a config reload replaces whole.
pub struct Live {
    pub tenants: Tenants,
    /// The config they came from; its admin and metrics tokens are in
    /// force. (Its settings that need a restart may differ from
    /// [`App::config`]'s, which are the ones in force.)
    pub config: Config,
    /// When it was read, UTC with milliseconds.
    pub loaded_at: String,
}

impl Live {
    pub fn new(tenants: Tenants, config: Config) -> Live {
        Live {
            tenants,
            config,
            loaded_at: crate::policy::now_rfc3339(),
        }
    }
}

/// Opens a database on `urls`, creating and migrating it on the first
/// server that answers.
async fn open(config: &Config, urls: &[String]) -> anyhow::Result<Db> {
    let seconds = config.db_timeout_ms.div_ceil(1000);
    let setup = Setup {
        // A waiting FOR UPDATE gives up (and is retried) within the budget.
        lock_wait_timeout_s: (seconds / 2).max(1),
        // Longer than any transaction of ours may take.
        idle_transaction_timeout_s: seconds + 1,
    };
    let db = Db::new(urls, config.max_connections, setup)?;
    db.prepare(CONNECT_PATIENCE)
        .await
        .with_context(|| format!("cannot use the database {}", db.describe()))?;
    Ok(db)
}

/// Runs the migrations on every database of `config` (`lockbroker migrate`).
///
/// # Errors
/// A database cannot be reached or migrated.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    for urls in config.databases().0 {
        open(config, &urls.0).await?.close();
    }
    Ok(())
}
