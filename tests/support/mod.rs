//! What every end-to-end test shares: a fresh database per test on the real
//! MariaDB, a broker started in-process on port 0 (or as a separate
//! process), clients for it — and, for fault tests, the means to break
//! things and to judge what clients saw:
//!
//! - [`Client`] (`client.rs`): one request per call, typed requests in,
//!   every answer back as a [`Reply`] to read into the API's types;
//! - [`eventually`]: wait for a condition, never for a time;
//! - [`PrivateMariaDb`] (`mariadb.rs`): a MariaDB server of the test's own,
//!   to `kill -9`, stop and start again (the shared one is never touched);
//! - [`Proxy`] (`proxy.rs`): a TCP proxy that cuts, resets or silently
//!   pauses connections;
//! - [`History`] and [`Recorder`] (`history/`): what clients saw, checked
//!   for overlapping holds, token order and uncommitted releases;
//! - [`run_clients`] (`load.rs`): a bounded acquire/hold/release load that
//!   records into a history;
//! - [`GaleraCluster`] (`galera.rs`): a three-node Galera cluster on
//!   loopback (`scripts/galera`), to kill nodes of;
//! - [`dist`] and [`PolicyDir`] (`policies.rs`): built policy components
//!   and a policy directory of a test's own to deploy them to.
//!
//! The shared server is `LOCKBROKER_TEST_DATABASE_URL` (default
//! `mysql://root@127.0.0.1:3306`); each test's database is named
//! `lbt_<pid>_<n>` and dropped when the test stops its broker.

mod certs;
mod client;
mod conformance;
mod eventually;
mod galera;
pub mod history;
mod load;
mod mariadb;
mod policies;
mod proxy;
pub mod rings;
mod sse;

use std::{
    path::PathBuf,
    process::Stdio,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use lockbroker::{config::TenantConfig, Config, Server};
use sqlx::{Connection, MySqlConnection};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    net::TcpListener,
    process::ChildStdout,
};

pub use certs::Certs;
pub use client::{encode_key, Client, ClientError, Reply};
pub use conformance::{Conformance, LIMITED_KEY, LIMITED_PER_S};
pub use eventually::{eventually, eventually_some, POLL_EVERY};
pub use galera::GaleraCluster;
pub use history::{History, Outcome, Recorder, Release503, Report, Violation};
pub use load::{run_clients, run_clients_with, Load};
pub use mariadb::PrivateMariaDb;
pub use policies::{active_version, dist, put_policy, tenant_info, PolicyDir};
pub use proxy::{Fault, Proxy};
pub use sse::{SseEvent, SseStream};

/// The test tenants: `default` (key `dev-key`) and `other` (key `other-key`).
pub const KEY: &str = "dev-key";
pub const OTHER_KEY: &str = "other-key";
pub const ADMIN: &str = "admin-token";

/// The MariaDB server the tests use, without a database name.
pub fn server_url() -> String {
    std::env::var("LOCKBROKER_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
        .trim_end_matches('/')
        .to_owned()
}

/// A database name no other test (or test run) uses.
pub fn fresh_db_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "lbt_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Drops a test database.
pub async fn drop_db(name: &str) {
    if let Ok(mut conn) = MySqlConnection::connect(&server_url()).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
            .execute(&mut conn)
            .await;
    }
}

/// A direct connection to a test database, to look behind the broker.
pub async fn db_conn(name: &str) -> MySqlConnection {
    MySqlConnection::connect(&format!("{}/{name}", server_url()))
        .await
        .expect("connect to the test database")
}

/// A config for a test: port 0, database `db` on the shared server, two
/// tenants.
pub fn config(db: &str) -> Config {
    config_at(&server_url(), db)
}

/// [`config`] with database `db` on another server (`mysql://...` without
/// a database name), e.g. a [`PrivateMariaDb`] or a [`Proxy`] in front of
/// one.
pub fn config_at(server: &str, db: &str) -> Config {
    let mut config = Config::dev();
    config.dev_defaults = false;
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.database_url = format!("{}/{db}", server.trim_end_matches('/')).into();
    config.admin_token = Some(ADMIN.try_into().unwrap());
    config.max_connections = 16;
    config.tenants.push(TenantConfig::new("other", OTHER_KEY));
    config.validate().expect("test config is valid");
    config
}

/// An in-process broker on its own database.
pub struct Broker {
    pub db: String,
    pub config: Config,
    server: Option<Server>,
    url: String,
}

impl Broker {
    /// A broker on a fresh database with the test tenants.
    pub async fn start() -> Broker {
        let db = fresh_db_name();
        Broker::start_with(db.clone(), config(&db)).await
    }

    /// A broker on a fresh database of the shared server that it reaches
    /// through a new [`Proxy`] (to put faults between the two), with
    /// `db_timeout_ms`.
    pub async fn behind_proxy(db_timeout_ms: u64) -> (Proxy, Broker) {
        let proxy = Proxy::start(&server_host_port()).await;
        let db = fresh_db_name();
        let server = format!("mysql://{}@{}", server_userinfo(), proxy.addr);
        let mut config = config_at(&server, &db);
        config.db_timeout_ms = db_timeout_ms;
        (proxy, Broker::start_with(db, config).await)
    }

    /// A broker with `config` (whose database is `db`).
    pub async fn start_with(db: String, config: Config) -> Broker {
        let server = Server::start(config.clone()).await.expect("broker starts");
        let url = format!("http://{}", server.addr());
        Broker {
            db,
            config,
            server: Some(server),
            url,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }

    /// A client with the `default` tenant's key.
    pub fn client(&self) -> Client {
        self.client_with(Some(KEY))
    }

    /// A client with any bearer token (or none).
    pub fn client_with(&self, bearer: Option<&str>) -> Client {
        Client::new(&self.url, bearer).expect("valid url")
    }

    /// Stops the broker gracefully and starts a new one on the same
    /// database, on a port of its own: [`Broker::url`] changes, so take new
    /// clients after a restart. (Binding the old port again would race
    /// with any other process that got it in between.)
    pub async fn restart(&mut self) {
        let server = self.server.take().expect("running");
        server.shutdown().await;
        let server = Server::start(self.config.clone())
            .await
            .expect("broker restarts");
        self.url = format!("http://{}", server.addr());
        self.server = Some(server);
    }

    /// Stops the broker and drops its database.
    pub async fn stop(self) {
        let db = self.db.clone();
        self.shutdown().await;
        drop_db(&db).await;
    }

    /// Stops the broker and keeps its database (another broker on it
    /// drops it).
    pub async fn shutdown(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
    }
}

/// The path of one of the workspace's binaries (built by `scripts/test`
/// with `cargo build --bins` before the tests run).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` first (scripts/test does)",
        path.display()
    );
    path
}

/// `lockctl ARGS` against the broker at `url` with the admin token (the
/// tests of its admin commands); its output once it exits.
pub fn lockctl_admin(
    url: &str,
    args: &[&str],
) -> impl std::future::Future<Output = std::io::Result<std::process::Output>> {
    let mut command = tokio::process::Command::new(bin("lockctl"));
    command
        .args(args)
        .env("LOCKBROKER_URL", url)
        .env("LOCKBROKER_ADMIN_TOKEN", ADMIN);
    async move { command.output().await }
}

/// A broker running as its own process, for tests that need several.
pub struct BrokerProcess {
    child: tokio::process::Child,
    pub url: String,
    /// Kept open: a broker that writes to its stdout later must not meet a
    /// closed pipe.
    _stdout: Lines<BufReader<ChildStdout>>,
    _config: tempfile_like::TempFile,
}

/// How long a broker process may take to bind and say so; the database is
/// up, so this is start-up and migrations on a busy machine.
const PROCESS_STARTS_WITHIN: Duration = Duration::from_secs(20);

impl BrokerProcess {
    /// Starts `lockbroker serve` on database `db` of the shared server,
    /// with `extra_toml` in its config, and waits for it to be ready.
    pub async fn start(db: &str, extra_toml: &str) -> BrokerProcess {
        let url = format!("\"{}/{db}\"", server_url());
        BrokerProcess::start_on(&url, extra_toml).await
    }

    /// Starts `lockbroker serve` with `database_url = {database_url}` (a
    /// TOML string or array) and `extra_toml` (top-level keys), and waits
    /// for it to be ready.
    ///
    /// The broker binds port 0 and prints the address it got: no port is
    /// picked for it that someone else could take first.
    pub async fn start_on(database_url: &str, extra_toml: &str) -> BrokerProcess {
        BrokerProcess::launch(database_url, extra_toml, &[], None).await
    }

    /// Starts `lockbroker serve` on database `db` of the shared server with
    /// `extra_toml`, extra command-line `args` (e.g. `--log-format json`)
    /// and `LOCKBROKER_LOG=info`, and collects what it writes to stderr
    /// (its log) into the returned [`LogLines`].
    pub async fn start_logged(
        db: &str,
        extra_toml: &str,
        args: &[&str],
    ) -> (BrokerProcess, LogLines) {
        let url = format!("\"{}/{db}\"", server_url());
        let log = LogLines::default();
        let broker = BrokerProcess::launch(&url, extra_toml, args, Some(log.clone())).await;
        (broker, log)
    }

    async fn launch(
        database_url: &str,
        extra_toml: &str,
        args: &[&str],
        log: Option<LogLines>,
    ) -> BrokerProcess {
        let text = format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = {database_url}\nadmin_token = \"{ADMIN}\"\n{extra_toml}\n[[tenant]]\nname = \"default\"\napi_key = \"{KEY}\"\n"
        );
        let config = tempfile_like::TempFile::new("toml", text.as_bytes());
        let kept = kept_log();
        let mut command = tokio::process::Command::new(bin("lockbroker"));
        command
            .arg("serve")
            .arg("--config")
            .arg(config.path())
            .args(args)
            .env(
                "LOCKBROKER_LOG",
                // `LBT_BROKER_LOG` lets a run that chases a failure see more.
                std::env::var("LBT_BROKER_LOG").unwrap_or_else(|_| {
                    if log.is_some() || kept.is_some() {
                        "info"
                    } else {
                        "warn"
                    }
                    .to_owned()
                }),
            )
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if log.is_some() || kept.is_some() {
            command.stderr(Stdio::piped());
        }
        let mut child = command.spawn().expect("spawn lockbroker");
        if let Some(stderr) = child.stderr.take() {
            let mut lines = BufReader::new(stderr).lines();
            tokio::spawn(async move {
                let mut kept = kept;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(file) = &mut kept {
                        use std::io::Write as _;
                        let _ = writeln!(file, "{line}");
                    }
                    match &log {
                        Some(log) => log.0.lock().expect("log lines").push(line),
                        // What the test would have shown at the warn level.
                        None if line.contains("WARN") || line.contains("ERROR") => {
                            eprintln!("{line}");
                        }
                        None => {}
                    }
                }
            });
        }
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let url = match tokio::time::timeout(PROCESS_STARTS_WITHIN, listening_url(&mut stdout))
            .await
        {
            Ok(Some(url)) => url,
            Ok(None) => panic!(
                "lockbroker process stopped before listening: {:?} (its stderr is above)",
                tokio::time::timeout(Duration::from_secs(5), child.wait()).await
            ),
            Err(_) => panic!("lockbroker process did not listen within {PROCESS_STARTS_WITHIN:?}"),
        };
        let client = Client::new(&url, None).unwrap();
        eventually(
            "the lockbroker process is ready",
            PROCESS_STARTS_WITHIN,
            || async { client.get("/readyz").await.is_ok_and(|r| r.status == 200) },
        )
        .await;
        BrokerProcess {
            child,
            url,
            _stdout: stdout,
            _config: config,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url, Some(KEY)).unwrap()
    }

    /// The config file the broker was started with (a test may rewrite
    /// it, then reload).
    pub fn config_path(&self) -> &std::path::Path {
        self._config.path()
    }

    /// Sends `signal` (e.g. `"HUP"`) to the process.
    pub async fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the broker runs");
        let status = tokio::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .await
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Kills the process with SIGKILL (a crash) and reaps it.
    pub async fn kill9(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("broker exits after SIGTERM")
            .expect("wait for broker")
    }
}

/// With `LBT_LOG_DIR` set (`scripts/test` sets it), a new file there for
/// a broker process's log (at info level), so that the logs of a whole
/// test run can be searched afterwards (for secrets: `scripts/test`).
fn kept_log() -> Option<std::fs::File> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = PathBuf::from(std::env::var_os("LBT_LOG_DIR")?);
    std::fs::create_dir_all(&dir).ok()?;
    let name = format!(
        "broker-{}-{}.log",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    std::fs::File::create(dir.join(name)).ok()
}

/// What a [`BrokerProcess::start_logged`] broker wrote to stderr, line by
/// line, as it arrives.
#[derive(Clone, Default)]
pub struct LogLines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl LogLines {
    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().expect("log lines").clone()
    }
}

/// The URL in `lockbroker serve`'s `lockbroker listening on http://ADDR`
/// line, or `None` if its stdout ends first.
async fn listening_url(stdout: &mut Lines<BufReader<ChildStdout>>) -> Option<String> {
    while let Ok(Some(line)) = stdout.next_line().await {
        if let Some(url) = line.strip_prefix("lockbroker listening on ") {
            return Some(url.trim().to_owned());
        }
    }
    None
}

/// A port that was free a moment ago: only for servers that cannot bind
/// port 0 and say which port they got, and then with a retry when the port
/// was taken in between (as [`PrivateMariaDb`] does). A broker binds port 0.
pub async fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// Temporary files without another dependency.
pub mod tempfile_like {
    use std::path::{Path, PathBuf};

    /// A file removed on drop.
    pub struct TempFile(PathBuf);

    impl TempFile {
        pub fn new(ext: &str, contents: &[u8]) -> TempFile {
            let path = std::env::temp_dir().join(format!("{}.{ext}", super::fresh_db_name()));
            std::fs::write(&path, contents).expect("write temp file");
            TempFile(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// The host:port of the test MariaDB server.
pub fn server_host_port() -> String {
    let url = server_url();
    let rest = url.split("://").nth(1).unwrap_or("127.0.0.1:3306");
    let host = rest.rsplit('@').next().unwrap_or(rest);
    host.split('/').next().unwrap_or(host).to_owned()
}

/// The user part (`root` or `user:pass`) of the test server URL.
pub fn server_userinfo() -> String {
    let url = server_url();
    let rest = url.split("://").nth(1).unwrap_or("");
    match rest.rsplit_once('@') {
        Some((user, _)) => user.to_owned(),
        None => "root".into(),
    }
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// A file of the repository, `relative` to its root, as text.
pub fn repo_file(relative: &str) -> String {
    std::fs::read_to_string(repo_root().join(relative))
        .unwrap_or_else(|err| panic!("{relative}: {err}"))
}
