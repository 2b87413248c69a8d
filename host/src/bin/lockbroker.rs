//! `lockbroker serve|migrate [--config FILE]`: the broker process;
//! `lockbroker policy check FILE.wasm`: would the broker take this policy?
//! `lockbroker config check FILE`: would it start with this config?
//! `lockbroker hash-key`: the `sha256:` digest a config may hold instead of
//! a secret.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};

#[path = "lockbroker/policy_check.rs"]
mod policy_check;
use lockbroker::{
    telemetry::{LogFormat, Otlp},
    Config, Server,
};

#[derive(Parser)]
#[command(
    version,
    about = "A distributed lock broker over HTTP, stored in MySQL"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Log lines as text or one JSON object per line (default: the
    /// config's `log_format`, `LOCKBROKER_LOG_FORMAT`, else text).
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
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
    /// Policy components.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Read a secret (an API key, the admin or metrics token) on stdin and
    /// print its digest `sha256:<hex>`, which the config may hold instead.
    HashKey,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Parse and validate a config (with the LOCKBROKER_* environment
    /// overrides) without starting: exit 0, or 2 with the reason.
    Check {
        /// The TOML config.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Load a component exactly as the broker would (imports, exports,
    /// self-check, limits, compile cache), print what it is, the storage
    /// keys of sample keys and its call latency; exit 1 with the reason if
    /// the broker would refuse it or its calls fail.
    Check {
        /// The component (.wasm).
        file: PathBuf,
        /// Load it with this tenant's limits (and tag its output with it).
        #[arg(long, default_value = "default")]
        tenant: String,
        /// A sample client key to name (repeatable).
        #[arg(long = "key")]
        keys: Vec<String>,
        /// The broker's config (limits, cache_dir); default: the defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// How long `serve` keeps trying to reach the database at start.
const STARTUP_PATIENCE: Duration = Duration::from_secs(30);

/// How long the runtime waits for leftover tasks once the broker stopped.
const EXIT_WITHIN: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = command_config(&cli);
    // `--log-format`, else the config's (file, then environment), else text.
    let format = cli
        .log_format
        .unwrap_or_else(|| config.as_ref().map(|c| c.log_format).unwrap_or_default());
    // Only `serve` exports spans, when the config says where.
    let serves = matches!(cli.command, None | Some(Command::Serve { .. }));
    let otlp = config.as_ref().filter(|_| serves).and_then(|c| {
        Some(Otlp {
            endpoint: c.otlp_endpoint.as_deref()?,
            service_name: &c.otlp_service_name,
        })
    });
    // Kept to the end: dropping it sends the last spans.
    let _telemetry = match lockbroker::telemetry::init(format, otlp) {
        Ok(telemetry) => telemetry,
        Err(err) => {
            eprintln!("{err:#}");
            return ExitCode::FAILURE;
        }
    };
    let command = cli.command.unwrap_or(Command::Serve { config: None });
    // Outside any async runtime: a WASI policy's host calls run their own.
    if let Command::Policy {
        command:
            PolicyCommand::Check {
                file,
                tenant,
                keys,
                config,
            },
    } = command
    {
        return policy_check::run(&file, &tenant, &keys, config.as_deref());
    }
    match command {
        Command::Config {
            command: ConfigCommand::Check { file },
        } => return config_check(&file),
        Command::HashKey => return hash_key(),
        _ => {}
    }
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
    let code = runtime.block_on(run(command));
    // Whatever is left (a detached operation on a hung connection, a
    // policy call) must not keep the process alive.
    runtime.shutdown_timeout(EXIT_WITHIN);
    code
}

async fn run(command: Command) -> ExitCode {
    let result = match command {
        Command::Serve { config } => serve(config).await,
        Command::Migrate { config } => migrate(config).await,
        Command::Policy { .. } | Command::Config { .. } | Command::HashKey => {
            unreachable!("handled before the runtime starts")
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The config `cli`'s command will read (the file, else the development
/// defaults, with the environment), for its log format and tracing; none if
/// it does not load, which the command itself reports once logging is set
/// up.
fn command_config(cli: &Cli) -> Option<Config> {
    let path = match &cli.command {
        None | Some(Command::Config { .. } | Command::HashKey) => None,
        Some(
            Command::Serve { config }
            | Command::Migrate { config }
            | Command::Policy {
                command: PolicyCommand::Check { config, .. },
            },
        ) => config.as_deref(),
    };
    Config::load(path).ok()
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

/// Exit code of a config or secret that cannot be used.
const UNUSABLE: u8 = 2;

fn config_check(file: &std::path::Path) -> ExitCode {
    match Config::load(Some(file)) {
        Ok(config) => {
            println!(
                "{}: ok ({} tenant(s))",
                file.display(),
                config.tenants.len()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{}: {err}", file.display());
            ExitCode::from(UNUSABLE)
        }
    }
}

/// The secret is the whole of stdin but for one line ending, so that
/// `echo key | lockbroker hash-key` and a file without one agree.
fn hash_key() -> ExitCode {
    let mut text = String::new();
    if let Err(err) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
        eprintln!("cannot read the secret from stdin: {err}");
        return ExitCode::from(UNUSABLE);
    }
    let secret = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if secret.is_empty() {
        eprintln!("no secret on stdin");
        return ExitCode::from(UNUSABLE);
    }
    println!("{}", lockbroker::secret::digest_text(secret));
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
