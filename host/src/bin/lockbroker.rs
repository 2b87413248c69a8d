//! `lockbroker serve|migrate [--config FILE]`: the broker process.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use lockbroker::{Config, Server};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    version,
    about = "A distributed lock broker over HTTP, stored in MySQL"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (the default).
    Serve {
        /// TOML config; without it, the development defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Create the database if missing, run the migrations, and exit.
    Migrate {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// How long `serve` keeps trying to reach the database at start.
const STARTUP_PATIENCE: Duration = Duration::from_secs(30);

/// How long the runtime waits for leftover tasks once the broker stopped.
const EXIT_WITHIN: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run());
    // Whatever is left (a detached operation on a hung connection, a
    // policy call) must not keep the process alive.
    runtime.shutdown_timeout(EXIT_WITHIN);
    code
}

async fn run() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_env("LOCKBROKER_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Serve { config: None }) {
        Command::Serve { config } => serve(config).await,
        Command::Migrate { config } => migrate(config).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref())?;
    let started = tokio::time::Instant::now();
    let server = loop {
        match Server::start(config.clone()).await {
            Ok(server) => break server,
            Err(err) if started.elapsed() < STARTUP_PATIENCE => {
                tracing::warn!("{err:#}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(err) => return Err(err),
        }
    };
    println!("lockbroker listening on http://{}", server.addr());
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests");
    server.shutdown().await;
    Ok(())
}

async fn migrate(path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = Config::load(path.as_deref())?;
    lockbroker::app::migrate(&config).await?;
    println!("migrations applied");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
