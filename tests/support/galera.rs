//! A MariaDB Galera cluster of the test's own, on loopback, made and broken
//! with `scripts/galera` (which installs `galera-4` if it is missing).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

/// Bound on `up` (three nodes join one after the other by rsync).
const UP_WITHIN: Duration = Duration::from_secs(240);
/// Bound on the other commands (a restart waits until the node is synced).
const COMMAND_WITHIN: Duration = Duration::from_secs(150);

/// A running cluster; `down` when dropped.
pub struct GaleraCluster {
    dir: PathBuf,
    /// `mysql://root@127.0.0.1:PORT` per node, node 1 first.
    pub urls: Vec<String>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/galera")
}

async fn run(args: &[&str], within: Duration) -> String {
    let child = tokio::process::Command::new(script())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("run scripts/galera");
    let output = tokio::time::timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("scripts/galera {args:?} did not finish in {within:?}"))
        .expect("scripts/galera ran");
    assert!(
        output.status.success(),
        "scripts/galera {args:?} failed: {:?}",
        output.status
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

impl GaleraCluster {
    /// Starts a three-node cluster; returns once every node is synced.
    pub async fn up() -> GaleraCluster {
        let dir = std::env::temp_dir().join(format!("lbt-galera-{}", super::fresh_db_name()));
        let out = run(&["up", dir.to_str().expect("utf-8 path")], UP_WITHIN).await;
        let urls: Vec<String> = out.lines().map(str::to_owned).collect();
        assert_eq!(urls.len(), 3, "three node URLs: {out}");
        GaleraCluster { dir, urls }
    }

    fn dir(&self) -> &str {
        self.dir.to_str().expect("utf-8 path")
    }

    /// `kill -9` of node `n` (1-based).
    pub async fn kill(&self, n: usize) {
        run(&["kill", self.dir(), &n.to_string()], COMMAND_WITHIN).await;
    }

    /// Restarts node `n`; returns once it is synced again.
    pub async fn start(&self, n: usize) {
        run(&["start", self.dir(), &n.to_string()], COMMAND_WITHIN).await;
    }

    /// `127.0.0.1:PORT` of node `n` (1-based).
    pub fn host_port(&self, n: usize) -> String {
        self.urls[n - 1]
            .rsplit('@')
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    /// The database `db` on the nodes, in `order` (1-based node numbers),
    /// as a TOML array for `database_url`.
    pub fn toml_list(&self, db: &str, order: &[usize]) -> String {
        let urls: Vec<String> = order
            .iter()
            .map(|n| format!("\"{}/{db}\"", self.urls[n - 1]))
            .collect();
        format!("[{}]", urls.join(", "))
    }
}

impl Drop for GaleraCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(script())
            .arg("down")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .status();
    }
}
