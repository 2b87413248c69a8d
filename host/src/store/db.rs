//! One database: a server, or several that hold the same data (the nodes of
//! a Galera cluster, a primary and its standbys), listed in the same order
//! on every broker.
//!
//! The broker writes through one server at a time: the first in the list
//! that answers. When it fails (refuses connections, does not answer in
//! time, or is a Galera node that is not ready), the broker moves on to the
//! next one in list order, wrapping around, and stays there until that one
//! fails in turn. Brokers with the same list therefore end up on the same
//! server, which on Galera keeps every row lock on one node.

use std::{
    str::FromStr,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use anyhow::Context as _;
use sqlx::{migrate::MigrateDatabase, mysql::MySqlConnectOptions, ConnectOptions, MySql};
use tokio::time::Instant;

use super::{
    pool::{Conn, ConnectError, Pool, Setup},
    MIGRATOR,
};

/// The servers of one database, and which one is in use.
pub struct Db {
    urls: Vec<String>,
    servers: Vec<Pool>,
    current: AtomicUsize,
}

impl Db {
    /// A database on `urls` (in failover order), at most `max_connections`
    /// per server. Nothing is connected yet.
    ///
    /// # Errors
    /// A URL is not a MySQL URL.
    pub fn new(urls: &[String], max_connections: u32, setup: Setup) -> anyhow::Result<Db> {
        anyhow::ensure!(!urls.is_empty(), "database_url lists no server");
        let servers = urls
            .iter()
            .map(|url| {
                let options = MySqlConnectOptions::from_str(url)
                    .with_context(|| format!("invalid database_url {}", redact(url)))?
                    .log_statements(tracing::log::LevelFilter::Trace)
                    .log_slow_statements(tracing::log::LevelFilter::Debug, Duration::from_secs(1));
                Ok(Pool::new(options, max_connections, setup))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Db {
            urls: urls.to_vec(),
            servers,
            current: AtomicUsize::new(0),
        })
    }

    /// The most connections the broker opens to the server in use.
    pub fn max_connections(&self) -> usize {
        self.servers.first().map_or(1, Pool::max)
    }

    /// Whether any of the servers was found to be a Galera node (known
    /// once a connection to it opened: `prepare` opens one).
    pub fn galera(&self) -> bool {
        self.servers.iter().any(Pool::galera)
    }

    /// Finds the first server that answers (in list order, within
    /// `patience` for the whole list), creates the database there if it is
    /// missing and runs the migrations. That server is then in use.
    ///
    /// # Errors
    /// No server answered, or a migration failed.
    pub async fn prepare(&self, patience: Duration) -> anyhow::Result<()> {
        let mut last_error = None;
        for (i, url) in self.urls.iter().enumerate() {
            match tokio::time::timeout(patience, prepare_one(url, &self.servers[i])).await {
                Ok(Ok(())) => {
                    self.current.store(i, Ordering::Release);
                    return Ok(());
                }
                Ok(Err(err)) => {
                    tracing::warn!(server = self.servers[i].name(), "{err:#}");
                    last_error = Some(err);
                }
                Err(_) => {
                    tracing::warn!(server = self.servers[i].name(), "no answer");
                    last_error = Some(anyhow::anyhow!(
                        "{} did not answer within {patience:?}",
                        self.servers[i].name()
                    ));
                }
            }
        }
        Err(last_error.expect("at least one server"))
    }

    /// A connection to the server in use, or, if it fails, to the next one
    /// that answers (which is then in use), by `deadline`.
    ///
    /// # Errors
    /// [`ConnectError`] of the last server tried.
    pub async fn acquire(&self, deadline: Instant) -> Result<Conn, ConnectError> {
        let n = self.servers.len();
        let start = self.current.load(Ordering::Acquire);
        let mut last = ConnectError::TimedOut;
        for step in 0..n {
            let i = (start + step) % n;
            // With servers left to try, one may not take all of the time.
            let left = deadline.saturating_duration_since(Instant::now());
            let until = if step + 1 < n {
                Instant::now() + left / 2
            } else {
                deadline
            };
            match self.servers[i].acquire(until).await {
                Ok(conn) => {
                    if step > 0 {
                        self.switch(start, i, "the database server failed");
                    }
                    return Ok(conn);
                }
                Err(ConnectError::Closed) => return Err(ConnectError::Closed),
                // All connections busy: the server is fine, just loaded.
                Err(ConnectError::Busy) => return Err(ConnectError::Busy),
                Err(err) => {
                    self.servers[i].note_failure();
                    last = err;
                }
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        Err(last)
    }

    /// Moves from server `from` to `to` because `why`, unless another task
    /// did already.
    fn switch(&self, from: usize, to: usize, why: &str) {
        if self
            .current
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!(
                from = self.servers[from].name(),
                to = self.servers[to].name(),
                "moved to another database server: {why}"
            );
        }
    }

    /// The pool of each server, in failover order (for metrics).
    pub fn pools(&self) -> &[Pool] {
        &self.servers
    }

    /// `host:port` of the server in use.
    pub fn current(&self) -> &str {
        self.servers[self.current.load(Ordering::Acquire)].name()
    }

    /// Moves to `server` (`host:port` as listed) if it is in the list and
    /// answers by `deadline`; whether the broker now writes through it.
    pub async fn move_to(&self, server: &str, deadline: Instant) -> bool {
        let Some(to) = self.servers.iter().position(|p| p.name() == server) else {
            return false;
        };
        let from = self.current.load(Ordering::Acquire);
        if from == to {
            return true;
        }
        match self.servers[to].acquire(deadline).await {
            Ok(mut conn) => {
                conn.done();
                self.switch(from, to, "the longest-running broker writes through it");
                true
            }
            Err(_) => false,
        }
    }

    /// Records that a connection to `server` failed: its idle connections
    /// are dropped, and the next acquire finds out whether it still answers.
    pub fn note_failure(&self, server: &str) {
        if let Some(pool) = self.servers.iter().find(|p| p.name() == server) {
            pool.note_failure();
        }
    }

    /// The URLs, with passwords hidden, for logs.
    pub fn describe(&self) -> String {
        self.urls
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Closes every pool: idle connections now, busy ones when let go.
    pub fn close(&self) {
        for pool in &self.servers {
            pool.close();
        }
    }
}

async fn prepare_one(url: &str, pool: &Pool) -> anyhow::Result<()> {
    if !MySql::database_exists(url)
        .await
        .context("cannot reach the database server")?
    {
        tracing::info!(server = pool.name(), "creating the database");
        MySql::create_database(url)
            .await
            .context("cannot create the database")?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conn = pool.acquire(deadline).await?;
    if all_applied(&mut conn).await {
        conn.done();
        return Ok(());
    }
    if let Err(err) = MIGRATOR.run(&mut *conn).await {
        // Error 1419: creating `lockbroker_token_valid` on a server that
        // logs binaries needs SUPER (or log_bin_trust_function_creators).
        let hint = if err.to_string().contains("1419") {
            ": creating the function lockbroker_token_valid needs SUPER on a server with binary \
             logging; run `lockbroker migrate` once as a user with SUPER, or set \
             log_bin_trust_function_creators = 1 (README, \"Multi-locks, fencing and force-release\")"
        } else {
            ""
        };
        return Err(anyhow::Error::new(err).context(format!("cannot run the migrations{hint}")));
    }
    conn.done();
    Ok(())
}

/// Whether the database's migrations are exactly this build's, all
/// applied (`_sqlx_migrations`: the same versions, checksums, each done).
/// Then nothing is run: the migrator's first statement, a `CREATE TABLE IF
/// NOT EXISTS` of its own table, needs `CREATE` even when the table
/// exists, and a broker whose user may only read and write the tables
/// (the migrations run by `lockbroker migrate` as another user) must
/// start. Anything else (no table yet, a migration missing, one this
/// build does not know, a changed checksum) goes to the migrator, which
/// applies or refuses as before.
async fn all_applied(conn: &mut Conn) -> bool {
    let applied: Vec<(i64, Vec<u8>, bool)> = match conn
        .fetch_all(
            "SELECT version, checksum, success FROM _sqlx_migrations",
            (),
        )
        .await
    {
        Ok(rows) => rows,
        Err(_) => return false,
    };
    let ours: Vec<_> = MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    applied.len() == ours.len()
        && ours.iter().all(|m| {
            applied.iter().any(|(version, checksum, done)| {
                *version == m.version && *done && checksum.as_slice() == &*m.checksum
            })
        })
}

/// A URL with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("mysql://lb:secret@db1:3306/x"),
            "mysql://lb:***@db1:3306/x"
        );
        assert_eq!(redact("mysql://root@db1/x"), "mysql://root@db1/x");
        assert_eq!(redact("mysql://db1/x"), "mysql://db1/x");
    }
}
