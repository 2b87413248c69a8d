//! Building the broker from its config, and running it: [`App`] is what
//! every request shares; [`Server`] is a bound, serving, stoppable broker.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

use crate::{
    config::Config,
    engine::{self, Engine, Push, Settings},
    http,
    metrics::Metrics,
    policy::{
        reload::{self, Reloader},
        wasm::{Limits, WasmHost},
        Loaded, TenantPolicy,
    },
    store::{db::Db, pool::Setup},
    tenant::{self, SecretDigest, Tenant, Tenants},
};

/// How long a start waits for each database server to answer.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
/// How long background tasks get to stop once the server has drained.
const STOP_TASKS_WITHIN: Duration = Duration::from_secs(2);

/// Everything a request needs.
pub struct App {
    pub config: Config,
    pub tenants: Tenants,
    /// One engine per database (the top-level one first, then each shard
    /// a tenant names); a tenant's `database` is its index here.
    pub engines: Vec<Engine>,
    pub metrics: Arc<Metrics>,
    pub admin_digest: Option<SecretDigest>,
    pub reloader: Arc<Reloader>,
    /// Push wake-ups between brokers: this process's secret and its
    /// client to the others.
    pub push: Arc<Push>,
}

impl App {
    /// Connects to every database (creating and migrating it), says this
    /// broker is alive there (and, with `config.advertise_url`, where it
    /// takes push wake-ups). A tenant with a policy file starts with the
    /// stand-in of a policy being loaded ([`reload::loading`]): its file is
    /// loaded by [`Reloader::load_all`] ([`Server::start`] does it).
    ///
    /// # Errors
    /// A database cannot be reached or migrated, or the WebAssembly engine
    /// cannot be set up.
    pub async fn build(config: Config, stop: watch::Receiver<bool>) -> anyhow::Result<App> {
        if config.dev_defaults {
            tracing::warn!(
                "no --config given: using the development defaults (tenant \"default\" with API key \"dev-key\", admin token \"dev-admin\"); do not use them in production"
            );
        }
        let metrics = Arc::new(Metrics::default());
        let (databases, of_tenant) = config.databases();
        let broker = engine::broker_name();
        let push = Arc::new(Push::new(config.advertise_url.clone()));
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
            let policy = TenantPolicy::new(&t.name, loaded, metrics.clone());
            tenants.push(Tenant::new(t, policy, database));
        }
        Ok(App {
            admin_digest: config.admin_token.as_deref().map(tenant::digest),
            tenants: Tenants::new(tenants),
            reloader,
            engines,
            metrics,
            push,
            config,
        })
    }

    /// The engine on the database that holds the locks of the tenant
    /// named `tenant` (the top-level database for a name not configured).
    pub fn engine(&self, tenant: &str) -> &Engine {
        let database = self.tenants.get(tenant).map_or(0, |t| t.database);
        &self.engines[database]
    }

    /// A push wake-up for waiters `ids` from another broker: each engine
    /// with one of them waiting looks for its grants now. How many of
    /// them wait on this broker.
    pub fn woken(&self, ids: &[u64]) -> usize {
        self.engines.iter().map(|engine| engine.woken(ids)).sum()
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
        let (loading, failed): (Vec<&Arc<Tenant>>, Vec<&Arc<Tenant>>) = self
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

/// A running broker.
pub struct Server {
    addr: SocketAddr,
    app: Arc<App>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds `config.listen` (port 0 picks a free port), builds the app
    /// (advertising the bound address, see [`Config::advertise_url_for`]),
    /// starts serving, then loads every tenant's policy (all at once: a
    /// slow one delays no other) and starts watching their files. Ready
    /// when this returns. While the policies load, `/healthz` answers,
    /// `/readyz` says which are still loading, tenants whose policy is in
    /// force are served, and the others get 503 (`Retry-After`).
    ///
    /// # Errors
    /// As [`App::build`], or the address cannot be bound.
    pub async fn start(mut config: Config) -> anyhow::Result<Server> {
        let listen = config.listen;
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr()?;
        config.advertise_url = Some(config.advertise_url_for(addr));
        let (stop, stopped) = watch::channel(false);
        let app = Arc::new(App::build(config, stopped.clone()).await?);
        let tenants: Vec<_> = app.tenants.iter().cloned().collect();
        let reap_every = Duration::from_millis(app.config.reaper_interval_ms.max(1));
        let retention =
            Duration::from_secs(app.config.history_retention_hours.saturating_mul(3600));
        let mut background = Vec::new();
        for (i, engine) in app.engines.iter().enumerate() {
            let own: Vec<_> = tenants
                .iter()
                .filter(|t| t.database == i)
                .map(engine::Scope::of)
                .collect();
            background.push(tokio::spawn(engine.clone().run_waker(stopped.clone())));
            background.push(tokio::spawn(engine.clone().run_heartbeat(stopped.clone())));
            background.push(tokio::spawn(engine.clone().run_reaper(
                own,
                reap_every,
                retention,
                stopped.clone(),
            )));
        }
        let task = tokio::spawn(http::serve(listener, app.clone(), stopped.clone()));
        let watcher = app.reloader.load_all(tenants).await;
        background.push(tokio::spawn(watcher.run(stopped)));
        tracing::info!(%addr, advertise_url = app.push.url().unwrap_or(""), "lockbroker ready");
        Ok(Server {
            addr,
            app,
            stop,
            task,
            background,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Stops accepting, lets in-flight requests finish (waiting acquires
    /// answer 503 at once), stops the background tasks, says this broker
    /// is gone and closes the databases. Bounded in time whatever state
    /// the database connections are in.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        join_within(self.background, STOP_TASKS_WITHIN).await;
        for engine in &self.app.engines {
            let _ = tokio::time::timeout(STOP_TASKS_WITHIN, engine.depart()).await;
            engine.db().close();
        }
    }
}

/// Waits for every task for at most `within` in all, then aborts the rest.
async fn join_within(tasks: Vec<JoinHandle<()>>, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    for mut task in tasks {
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "a background task failed"),
            Err(_) => {
                tracing::warn!("a background task did not stop in time");
                task.abort();
            }
        }
    }
}
