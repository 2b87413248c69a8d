//! A MariaDB server of a test's own, to kill and restart. The shared server
//! on 3306 must never be stopped, so a test that needs the database to
//! crash (`kill -9`), shut down or come back starts one of these.
//!
//! Start-up is fast because the expensive part, `mariadb-install-db`
//! (about 2.6 s here), runs once per machine: it fills a template data
//! directory under the temp dir, named after the server binary and the
//! options, that every instance copies (about 0.1 s for 22 MB) before it
//! starts its server (about 0.3 s). The template appears by one atomic
//! `rename`, so test processes that race to build it each build their own
//! and all but the first throw theirs away.
//!
//! Each instance lives in `<tmp>/lbt-mariadb-<test pid>-<n>/` (data dir,
//! socket, pid file, error log), so instances of parallel tests and test
//! processes never share a path; ports come from [`free_port`] and a start
//! that loses the port to someone else tries another one. A test process
//! that dies without dropping its instances leaves servers behind: the
//! next process that starts an instance kills those (by the pid in their
//! pid file, after checking the process runs on that very directory) and
//! removes their directories.

use std::{
    collections::hash_map::DefaultHasher,
    ffi::OsStr,
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use sqlx::{Connection, MySqlConnection};
use tokio::sync::OnceCell;

use super::free_port;

const SERVER: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "mariadb-install-db";
/// Every instance directory starts with this, followed by `<pid>-<n>`.
const INSTANCE_PREFIX: &str = "lbt-mariadb-";
const TEMPLATE_PREFIX: &str = "lbt-mariadb-template-";

/// Options that keep a throwaway server small and quick to start. They are
/// passed to `mariadb-install-db` too (it hands them to the server it
/// bootstraps), so the template's redo log already has the size the
/// instances run with and no start has to resize it. Durability settings
/// stay at their defaults: tests kill these servers to see what survives.
const SMALL: &[&str] = &[
    "--innodb-buffer-pool-size=16M",
    "--innodb-log-file-size=4M",
    "--skip-log-bin",
    // 127.0.0.1 is then matched as an address: no reverse lookup on each
    // connection, and `mariadb-install-db` writes `root@127.0.0.1`.
    "--skip-name-resolve",
    "--loose-feedback=OFF",
];

/// Bounds of every wait in this module.
const READY_WITHIN: Duration = Duration::from_secs(30);
const EXIT_WITHIN: Duration = Duration::from_secs(30);
const PORT_TRIES: u32 = 5;

/// A private MariaDB server. Dropping it kills the server and removes its
/// directory.
pub struct PrivateMariaDb {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Server options of this instance beyond [`SMALL`].
    options: Vec<String>,
}

/// Why a start failed in a way that another port may fix.
struct PortTaken;

impl PrivateMariaDb {
    /// Copies the template data directory, starts a server on a free
    /// loopback port and waits until it answers as `root` over TCP.
    ///
    /// # Panics
    /// When the template cannot be built or the server does not answer
    /// within 30 s (the message carries the server's error log).
    pub async fn start() -> PrivateMariaDb {
        PrivateMariaDb::start_with(&[]).await
    }

    /// [`PrivateMariaDb::start`] with more server `options` (e.g.
    /// `--ssl-cert=...`).
    pub async fn start_with(options: &[String]) -> PrivateMariaDb {
        sweep_orphans().await;
        let template = template().await;
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "{INSTANCE_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the instance directory");
        let data = dir.join("data");
        run(
            "cp",
            [OsStr::new("-a"), template.as_os_str(), data.as_os_str()],
        )
        .await;
        give_to_server_user(&dir).await;
        let mut db = PrivateMariaDb {
            dir,
            port: 0,
            child: None,
            options: options.to_vec(),
        };
        for _ in 0..PORT_TRIES {
            db.port = free_port().await;
            if db.launch().await.is_ok() {
                return db;
            }
        }
        panic!("no free port for a private MariaDB after {PORT_TRIES} tries");
    }

    /// `mysql://root@127.0.0.1:PORT`, without a database name.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`, for a [`Proxy`](super::Proxy) in front of it.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The instance's directory (`data/`, `sock`, `pid`, `err.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's error log so far, to explain a failure.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("err.log")).unwrap_or_default()
    }

    /// A connection as root, without a database.
    ///
    /// # Panics
    /// When the server does not accept it.
    pub async fn connect(&self) -> MySqlConnection {
        MySqlConnection::connect(&self.url())
            .await
            .expect("connect to the private MariaDB")
    }

    /// Kills the server with SIGKILL, as a crash or the OOM killer would,
    /// and waits until it is gone.
    ///
    /// # Panics
    /// When it is not running.
    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("the private MariaDB runs");
        child.kill().expect("SIGKILL the private MariaDB");
        wait_exit(&mut child, "after SIGKILL").await;
    }

    /// Asks the server to shut down (SIGTERM: it flushes and exits cleanly)
    /// and waits until it is gone.
    ///
    /// # Panics
    /// When it is not running or does not exit within 30 s.
    pub async fn stop(&mut self) {
        let mut child = self.child.take().expect("the private MariaDB runs");
        signal(child.id(), "TERM");
        let status = wait_exit(&mut child, "after SIGTERM").await;
        assert!(
            status.success(),
            "the private MariaDB exited with {status} after SIGTERM:\n{}",
            tail(&self.error_log())
        );
    }

    /// Starts the server again on the same data directory and port, after
    /// [`kill9`](Self::kill9) or [`stop`](Self::stop), and waits until it
    /// answers (after a kill, InnoDB recovers from its redo log first).
    ///
    /// # Panics
    /// When it already runs, or someone took the port meanwhile, or it
    /// does not answer within 30 s.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "the private MariaDB already runs");
        if self.launch().await.is_err() {
            panic!(
                "port {} was taken while the private MariaDB was down",
                self.port
            );
        }
    }

    /// Spawns the server on `self.port` and waits until this very server
    /// answers.
    async fn launch(&mut self) -> Result<(), PortTaken> {
        let log = self.dir.join("err.log");
        // A fresh log per start, so that a port conflict is read from this
        // start's lines only.
        let _ = std::fs::remove_file(&log);
        let socket = self.dir.join("sock");
        let mut server = Command::new(SERVER);
        server
            .arg("--no-defaults") // must come first
            .args(run_as())
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .args(SMALL)
            .args(&self.options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = server.spawn().expect("spawn mariadbd");
        let started = Instant::now();
        let url = self.url();
        let socket = socket.display().to_string();
        // A poll loop rather than `eventually`: it has three outcomes (up,
        // exited because the port was taken, exited otherwise), and on a
        // timeout it must kill the server it started and show its log.
        while started.elapsed() < READY_WITHIN {
            if let Ok(Some(status)) = child.try_wait() {
                let log = self.error_log();
                if log.contains("Address already in use") {
                    return Err(PortTaken);
                }
                panic!(
                    "the private MariaDB exited at start with {status}:\n{}",
                    tail(&log)
                );
            }
            // The server that answers must be this one: the port may have
            // gone to another instance between `free_port` and our bind.
            if answers_as(&url, &socket).await {
                self.child = Some(child);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the private MariaDB did not answer within {READY_WITHIN:?}:\n{}",
            tail(&self.error_log())
        );
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL ends it at once: a blocking wait here is short.
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the server at `url` accepts root and is the one whose socket is
/// `socket`.
async fn answers_as(url: &str, socket: &str) -> bool {
    let attempt = async {
        let mut conn = MySqlConnection::connect(url).await.ok()?;
        let (ours,): (String,) = sqlx::query_as("SELECT @@socket")
            .fetch_one(&mut conn)
            .await
            .ok()?;
        let _ = conn.close().await;
        Some(ours == socket)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Some(true))
    )
}

/// `--user=mysql` when running as root: mariadbd refuses to run as root
/// and drops to this user, which must own the data directory. Anyone else
/// runs it as themselves.
fn run_as() -> Option<&'static str> {
    is_root().then_some("--user=mysql")
}

fn is_root() -> bool {
    // The effective uid is the second number of `Uid:`.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

async fn give_to_server_user(path: &Path) {
    if is_root() {
        run("chown", [OsStr::new("mysql:mysql"), path.as_os_str()]).await;
    }
}

/// The template data directory, built on first use on this machine.
async fn template() -> &'static Path {
    static TEMPLATE: OnceCell<PathBuf> = OnceCell::const_new();
    TEMPLATE.get_or_init(build_template).await
}

async fn build_template() -> PathBuf {
    let tmp = std::env::temp_dir();
    let path = tmp.join(format!("{TEMPLATE_PREFIX}{:016x}", template_key()));
    if path.join("data").is_dir() {
        return path.join("data");
    }
    let building = tmp.join(format!("{TEMPLATE_PREFIX}building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir(&building).expect("create the template directory");
    give_to_server_user(&building).await;
    let out = tokio::process::Command::new(INSTALL_DB)
        .arg("--no-defaults")
        .args(run_as())
        .arg(format!("--datadir={}", building.join("data").display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .args(SMALL)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run mariadb-install-db");
    assert!(
        out.status.success(),
        "mariadb-install-db failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Whoever renames first wins; the others use the winner's.
    if std::fs::rename(&building, &path).is_err() {
        let _ = std::fs::remove_dir_all(&building);
        assert!(path.join("data").is_dir(), "no template at {path:?}");
    }
    path.join("data")
}

/// Names the template after what shapes its contents: the server binary
/// and the options. A new MariaDB package gets a new template.
fn template_key() -> u64 {
    let mut hasher = DefaultHasher::new();
    if let Ok(meta) = std::fs::metadata(SERVER) {
        meta.len().hash(&mut hasher);
        meta.modified().ok().hash(&mut hasher);
    }
    SMALL.hash(&mut hasher);
    is_root().hash(&mut hasher);
    hasher.finish()
}

/// Kills the servers and removes the directories of test processes that
/// died without cleaning up (once per test process).
async fn sweep_orphans() {
    static SWEPT: OnceCell<()> = OnceCell::const_new();
    SWEPT.get_or_init(|| async { sweep_orphans_now() }).await;
}

fn sweep_orphans_now() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = if let Some(rest) = name.strip_prefix(&format!("{TEMPLATE_PREFIX}building-")) {
            rest.parse::<u32>().ok()
        } else if name.starts_with(TEMPLATE_PREFIX) {
            None
        } else if let Some(rest) = name.strip_prefix(INSTANCE_PREFIX) {
            rest.split('-').next().and_then(|pid| pid.parse().ok())
        } else {
            None
        };
        let Some(owner) = owner else { continue };
        if owner == std::process::id() || Path::new(&format!("/proc/{owner}")).exists() {
            continue; // its test process still runs
        }
        let dir = entry.path();
        let server = std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok());
        if let Some(server) = server {
            // Only a mariadbd that runs on this very directory.
            let cmdline = std::fs::read(format!("/proc/{server}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains(SERVER) && cmdline.contains(&*dir.to_string_lossy()) {
                signal(server, "KILL");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Sends a signal by name with kill(1) (no libc dependency for this).
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Waits (polling, bounded) until `child` has exited, and reaps it. Not
/// `eventually`: on a timeout the server must be killed, not left running.
async fn wait_exit(child: &mut Child, when: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    while started.elapsed() < EXIT_WITHIN {
        if let Some(status) = child.try_wait().expect("wait for mariadbd") {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the private MariaDB did not exit within {EXIT_WITHIN:?} {when}");
}

/// Runs a helper program to completion and panics if it fails.
async fn run<const N: usize>(program: &str, args: [&OsStr; N]) {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The last lines of a log, enough to explain a failure.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}
