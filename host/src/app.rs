//! Building the broker from its config, and running it: [`App`] is what
//! every request shares; [`Server`] is a bound, serving, stoppable broker.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

use crate::{
    config::Config,
    engine::Engine,
    http,
    metrics::Metrics,
    policy::{
        reload::Reloader,
        wasm::{Limits, WasmHost},
        TenantPolicy,
    },
    store,
    tenant::{self, SecretDigest, Tenant, Tenants},
};

/// Everything a request needs.
pub struct App {
    pub config: Config,
    pub tenants: Tenants,
    pub engine: Engine,
    pub metrics: Arc<Metrics>,
    pub admin_digest: Option<SecretDigest>,
    pub reloader: Arc<Reloader>,
}

impl App {
    /// Connects to the database (creating and migrating it), and loads every
    /// tenant's policy.
    ///
    /// # Errors
    /// The database cannot be reached or migrated, or a policy cannot load.
    pub async fn build(config: Config, stop: watch::Receiver<bool>) -> anyhow::Result<App> {
        if config.dev_defaults {
            tracing::warn!(
                "no --config given: using the development defaults (tenant \"default\" with API key \"dev-key\", admin token \"dev-admin\"); do not use them in production"
            );
        }
        let metrics = Arc::new(Metrics::default());
        let pool = store::connect(&config.database_url, config.max_connections).await?;
        let host = WasmHost::new(
            Limits {
                deadline: config.policy_deadline(),
                memory_bytes: config.policy_memory_bytes,
            },
            config.cache_dir.clone(),
        )?;
        let reloader = Arc::new(Reloader::new(
            Arc::new(host),
            config.policy_dir.clone(),
            metrics.clone(),
        ));
        let mut tenants = Vec::new();
        for t in &config.tenants {
            let (loaded, error) = match reloader.initial(t.policy.as_deref()).await {
                Ok(loaded) => (loaded, None),
                Err((stand_in, err)) => {
                    tracing::error!(tenant = %t.name, error = %err, "policy not loaded: the tenant's requests fail closed until it loads");
                    (stand_in, Some(err.0))
                }
            };
            let policy = TenantPolicy::new(&t.name, loaded, metrics.clone());
            if let Some(error) = error {
                policy.set_error(error);
            }
            tenants.push(Tenant::new(t, policy));
        }
        Ok(App {
            admin_digest: config.admin_token.as_deref().map(tenant::digest),
            tenants: Tenants::new(tenants),
            reloader,
            engine: Engine::new(pool, metrics.clone(), stop),
            metrics,
            config,
        })
    }
}

/// A running broker.
pub struct Server {
    addr: SocketAddr,
    app: Arc<App>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Server {
    /// Builds the app, binds `config.listen` (port 0 picks a free port) and
    /// starts serving. Ready when this returns.
    ///
    /// # Errors
    /// As [`App::build`], or the address cannot be bound.
    pub async fn start(config: Config) -> anyhow::Result<Server> {
        let listen = config.listen;
        let (stop, stopped) = watch::channel(false);
        let app = Arc::new(App::build(config, stopped.clone()).await?);
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr()?;
        let tenants: Vec<_> = app.tenants.iter().cloned().collect();
        tokio::spawn(app.reloader.clone().watch(tenants.clone(), stopped.clone()));
        tokio::spawn(app.engine.clone().run_waker(stopped.clone()));
        let reap_every = std::time::Duration::from_millis(app.config.reaper_interval_ms.max(1));
        tokio::spawn(
            app.engine
                .clone()
                .run_reaper(tenants, reap_every, stopped.clone()),
        );
        let task = tokio::spawn(http::serve(listener, app.clone(), stopped));
        tracing::info!(%addr, "lockbroker ready");
        Ok(Server {
            addr,
            app,
            stop,
            task,
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
    /// answer 503 at once), and closes the database pool.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.app.engine.pool().close().await;
    }
}
