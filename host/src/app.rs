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
    policy::{Loaded, TenantPolicy},
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
        let tenants = config
            .tenants
            .iter()
            .map(|t| {
                let policy = TenantPolicy::new(&t.name, Loaded::builtin(), metrics.clone());
                Tenant::new(t, policy)
            })
            .collect();
        Ok(App {
            admin_digest: config.admin_token.as_deref().map(tenant::digest),
            tenants: Tenants::new(tenants),
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
