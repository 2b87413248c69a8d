//! A bound, serving, stoppable broker: [`Server::start`] builds the
//! [`App`] from a config, serves it over HTTP ([`crate::http`]) and runs
//! each database's background tasks (wake-ups, heartbeat, reaper), the
//! policy watcher and config reloads on SIGHUP until [`Server::shutdown`].

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

use crate::{app::App, config::Config, engine, http, reconfigure::Trigger};

/// How long background tasks get to stop once the server has drained.
const STOP_TASKS_WITHIN: Duration = Duration::from_secs(2);

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
        // First: SIGHUP's default action ends the process, and a reload
        // may come while the policies load (`systemctl reload`).
        let hangup = hangups();
        let listen = config.listen;
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let addr = listener.local_addr()?;
        config.advertise_url = Some(config.advertise_url_for(addr));
        let (stop, stopped) = watch::channel(false);
        let app = Arc::new(App::build(config, stopped.clone()).await?);
        let tenants: Vec<_> = app.live().tenants.iter().cloned().collect();
        let reap_every = Duration::from_millis(app.config.reaper_interval_ms.max(1));
        let retention =
            Duration::from_secs(app.config.history_retention_hours.saturating_mul(3600));
        let mut background = Vec::new();
        for (i, engine) in app.engines.iter().enumerate() {
            engine.set_scopes(
                tenants
                    .iter()
                    .filter(|t| t.database == i)
                    .map(engine::Scope::of),
            );
            background.push(tokio::spawn(engine.clone().run_waker(stopped.clone())));
            background.push(tokio::spawn(engine.clone().run_heartbeat(stopped.clone())));
            background.push(tokio::spawn(engine.clone().run_feed(stopped.clone())));
            background.push(tokio::spawn(engine.clone().run_reaper(
                reap_every,
                retention,
                stopped.clone(),
            )));
        }
        if let Some(tls) = &app.tls {
            background.push(tokio::spawn(tls.clone().watch(stopped.clone())));
        }
        let task = tokio::spawn(http::serve(listener, app.clone(), stopped.clone()));
        let policies = tenants.iter().map(|t| t.policy.clone()).collect();
        let watcher = app.reloader.load_all(policies).await;
        background.push(tokio::spawn(watcher.run(stopped.clone())));
        background.push(tokio::spawn(reload_on_hangup(app.clone(), hangup, stopped)));
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

/// SIGHUPs from now on (none if no handler can be installed).
fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup())
        .inspect_err(|err| {
            tracing::warn!(error = %err, "no SIGHUP handler: reload with POST /v1/admin/reload");
        })
        .ok()
}

/// Reloads the config on each SIGHUP (`ExecReload` of the systemd unit),
/// until `stop`. The outcome is logged (target `lockbroker::audit`).
async fn reload_on_hangup(
    app: Arc<App>,
    hangup: Option<tokio::signal::unix::Signal>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(mut hangup) = hangup else {
        return;
    };
    loop {
        tokio::select! {
            _ = hangup.recv() => {
                // The outcome is logged and kept for GET /v1/admin/reload.
                let _ = app.reload(Trigger::Sighup).await;
            }
            () = crate::shutdown::stopped(&mut stop) => return,
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
