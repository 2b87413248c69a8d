//! The connections to one database server, pooled.
//!
//! Why not sqlx's `Pool`: it takes back a connection whose statement was
//! cut short (a dropped future leaves it mid-protocol or mid-transaction,
//! holding row locks), and it pings every connection it takes back, with no
//! bound on the ping: on a silent network cut the ping hangs and holds the
//! connection's slot until TCP gives up. Here a connection goes back to the
//! pool only when its user marks it clean (a statement outside a
//! transaction that completed, a `COMMIT` or `ROLLBACK` that answered).
//! Any other way out (an error, a timeout, a dropped future) closes its
//! socket, so the server rolls back whatever it had open and nothing half
//! done is ever reused.
//!
//! Each new connection is set up for the lock engine (see [`Setup`]) and
//! learns its server-side id, so that an ambiguous commit can be settled by
//! killing the old session first.

use std::{
    ops::{Deref, DerefMut},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use sqlx::{
    mysql::{MySqlConnectOptions, MySqlRow},
    ConnectOptions, Connection, Executor, MySqlConnection, Row,
};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

/// A connection idle longer than this is pinged before it is handed out:
/// the server or a firewall may have dropped it meanwhile.
const PING_IDLE_AFTER: Duration = Duration::from_secs(30);
/// Idle connections beyond this age are closed instead of kept.
const MAX_IDLE: Duration = Duration::from_secs(300);

/// How every connection is set up after connecting.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// `innodb_lock_wait_timeout`, in whole seconds (at least 1): a waiting
    /// `FOR UPDATE` gives up (1205) before the caller's own deadline.
    pub lock_wait_timeout_s: u64,
    /// MariaDB's `idle_transaction_timeout`, in whole seconds: the server
    /// ends a session that sits in an open transaction that long, so a
    /// broker cut off mid-transaction cannot keep row locks for hours.
    pub idle_transaction_timeout_s: u64,
}

/// A pool of connections to one server.
#[derive(Clone)]
pub struct Pool(Arc<Inner>);

struct Inner {
    /// `host:port`, for logs and metrics.
    name: String,
    options: MySqlConnectOptions,
    setup: Setup,
    /// Connections allowed at once (`slots`' size), for metrics.
    max: usize,
    slots: Arc<Semaphore>,
    idle: Mutex<Vec<Idle>>,
    /// When a connection of this pool last failed: connections that sat
    /// idle since before then are suspect and closed, not handed out.
    failed_at: Mutex<Option<Instant>>,
    closed: AtomicBool,
    /// A connection found the server to be a Galera node.
    galera: AtomicBool,
}

struct Idle {
    conn: MySqlConnection,
    session: Session,
    since: Instant,
}

/// Who a connection is on its server.
#[derive(Debug, Clone, Copy)]
struct Session {
    /// `CONNECTION_ID()`.
    id: u64,
    /// When the server started (Unix seconds, ±1): session ids start over
    /// when it restarts.
    server_started: i64,
    /// A Galera node (`wsrep_on`).
    galera: bool,
}

/// Why no connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Every connection is in use and none came free in time: the server
    /// is fine, the broker is loaded.
    #[error("every database connection is busy")]
    Busy,
    #[error("the server did not answer within the deadline")]
    TimedOut,
    #[error("the pool is closed")]
    Closed,
    #[error("cannot connect to {server}: {source}")]
    Connect {
        server: String,
        #[source]
        source: sqlx::Error,
    },
    /// A Galera node that is not synced with its cluster (`wsrep_ready`
    /// off): it refuses statements until it is.
    #[error("{server} is a Galera node that is not ready")]
    NotReady { server: String },
}

impl Pool {
    /// A pool of at most `max` connections; none is opened yet.
    pub fn new(options: MySqlConnectOptions, max: u32, setup: Setup) -> Pool {
        let name = format!("{}:{}", options.get_host(), options.get_port());
        Pool(Arc::new(Inner {
            name,
            options,
            setup,
            max: max as usize,
            slots: Arc::new(Semaphore::new(max as usize)),
            idle: Mutex::new(Vec::new()),
            failed_at: Mutex::new(None),
            closed: AtomicBool::new(false),
            galera: AtomicBool::new(false),
        }))
    }

    /// `host:port` of the server.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether a connection of this pool found its server to be a Galera
    /// node.
    pub fn galera(&self) -> bool {
        self.0.galera.load(Ordering::Relaxed)
    }

    /// Connections handed out now (or being opened for a user).
    /// The most connections it opens.
    pub fn max(&self) -> usize {
        self.0.max
    }

    pub fn in_use(&self) -> usize {
        self.0.max.saturating_sub(self.0.slots.available_permits())
    }

    /// Connections kept open for the next user.
    pub fn idle(&self) -> usize {
        self.0.idle.lock().expect("pool lock").len()
    }

    /// A connection, by `deadline`: an idle one that is not suspect, or a
    /// new one.
    ///
    /// # Errors
    /// [`ConnectError`]: the deadline passed, the server refused or did not
    /// answer, or the pool is closed.
    pub async fn acquire(&self, deadline: Instant) -> Result<Conn, ConnectError> {
        let inner = &self.0;
        if inner.closed.load(Ordering::Acquire) {
            return Err(ConnectError::Closed);
        }
        let permit = tokio::time::timeout_at(deadline, inner.slots.clone().acquire_owned())
            .await
            .map_err(|_| ConnectError::Busy)?
            .map_err(|_| ConnectError::Closed)?;
        while let Some(idle) = self.take_idle() {
            if idle.since.elapsed() < PING_IDLE_AFTER {
                return Ok(self.wrap(idle.conn, idle.session, permit, deadline));
            }
            let mut conn = idle.conn;
            if let Ok(Ok(())) = tokio::time::timeout_at(deadline, conn.ping()).await {
                return Ok(self.wrap(conn, idle.session, permit, deadline));
            }
        }
        let (conn, session) = tokio::time::timeout_at(deadline, self.connect())
            .await
            .map_err(|_| ConnectError::TimedOut)??;
        Ok(self.wrap(conn, session, permit, deadline))
    }

    fn wrap(
        &self,
        conn: MySqlConnection,
        session: Session,
        permit: OwnedSemaphorePermit,
        deadline: Instant,
    ) -> Conn {
        Conn {
            conn: Some(conn),
            session,
            clean: false,
            deadline,
            pool: self.0.clone(),
            _permit: permit,
            events: Vec::new(),
            queued: String::new(),
            tx: Tx::None,
            span: tracing::Span::none(),
        }
    }

    /// The most recently used idle connection that is neither suspect nor
    /// too old; the others are closed on the way.
    fn take_idle(&self) -> Option<Idle> {
        let failed_at = *self.0.failed_at.lock().expect("pool lock");
        let mut idle = self.0.idle.lock().expect("pool lock");
        while let Some(candidate) = idle.pop() {
            let suspect = failed_at.is_some_and(|failed| candidate.since <= failed);
            if !suspect && candidate.since.elapsed() < MAX_IDLE {
                return Some(candidate);
            }
        }
        None
    }

    /// Opens and sets up a new connection.
    async fn connect(&self) -> Result<(MySqlConnection, Session), ConnectError> {
        let inner = &self.0;
        let failed = |source| ConnectError::Connect {
            server: inner.name.clone(),
            source,
        };
        let mut conn = inner.options.connect().await.map_err(failed)?;
        let (session, ready) = setup(&mut conn, inner.setup).await.map_err(failed)?;
        if session.galera {
            inner.galera.store(true, Ordering::Relaxed);
        }
        super::keepalive::apply(inner.options.get_port());
        if !ready {
            self.note_failure();
            return Err(ConnectError::NotReady {
                server: inner.name.clone(),
            });
        }
        Ok((conn, session))
    }

    /// Records that a connection of this server failed (I/O error, timeout,
    /// a server going away): the connections idle since are not trusted.
    pub fn note_failure(&self) {
        note_failure(&self.0);
    }

    /// Closes the idle connections and refuses new acquires. Connections in
    /// use are closed when their users let go of them.
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.slots.close();
        self.0.idle.lock().expect("pool lock").clear();
    }
}

fn note_failure(inner: &Inner) {
    *inner.failed_at.lock().expect("pool lock") = Some(Instant::now());
    inner.idle.lock().expect("pool lock").clear();
}

/// The error of a statement that did not answer by its deadline.
pub fn timed_out() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the database did not answer within db_timeout_ms",
    ))
}

/// Sets a new connection up: READ COMMITTED (a `SKIP LOCKED` scan under
/// REPEATABLE READ keeps locks on what it read until commit), a lock-wait
/// timeout within the caller's deadline, MariaDB's idle-transaction
/// timeout, and on Galera causal reads (`wsrep_sync_wait = 7`: reads,
/// updates, deletes and inserts first wait until this node has applied
/// everything the cluster committed before, so a broker on another node
/// never decides on a stale row). Returns who the session is, and whether
/// the server is ready (a Galera node must be synced).
async fn setup(conn: &mut MySqlConnection, setup: Setup) -> sqlx::Result<(Session, bool)> {
    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    let row: MySqlRow = conn
        .fetch_one("SELECT CONNECTION_ID(), @@version, UNIX_TIMESTAMP()")
        .await?;
    let id: u64 = row.try_get(0)?;
    let version: String = row.try_get(1)?;
    let now: i64 = row.try_get(2)?;
    let uptime: i64 = variable(conn, "SHOW GLOBAL STATUS LIKE 'Uptime'")
        .await?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mariadb = version.contains("MariaDB");
    let wsrep_on = variable(conn, "SHOW VARIABLES LIKE 'wsrep_on'").await?;
    let galera = wsrep_on.is_some_and(|v| v.eq_ignore_ascii_case("ON"));
    let session = Session {
        id,
        server_started: now - uptime,
        galera,
    };
    let mut set = format!(
        "SET SESSION innodb_lock_wait_timeout = {}",
        setup.lock_wait_timeout_s.max(1)
    );
    if mariadb {
        set += &format!(
            ", SESSION idle_transaction_timeout = {}",
            setup.idle_transaction_timeout_s.max(1)
        );
    }
    if galera {
        set += ", SESSION wsrep_sync_wait = 7";
    }
    conn.execute(set.as_str()).await?;
    let ready = if galera {
        variable(conn, "SHOW STATUS LIKE 'wsrep_ready'")
            .await?
            .is_some_and(|v| v.eq_ignore_ascii_case("ON"))
    } else {
        true
    };
    Ok((session, ready))
}

/// The value column of a one-row `SHOW ... LIKE` answer.
async fn variable(conn: &mut MySqlConnection, show: &str) -> sqlx::Result<Option<String>> {
    let row = conn.fetch_optional(show).await?;
    row.map(|row| {
        // SHOW answers VARBINARY on some servers, VARCHAR on others.
        row.try_get::<String, _>(1).or_else(|_| {
            row.try_get::<Vec<u8>, _>(1)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        })
    })
    .transpose()
}

/// A connection taken from a [`Pool`], with the deadline of the work it
/// was taken for: every statement run through it ([`Conn::run`]) fails
/// with a timeout (an I/O error of kind `TimedOut`) past that deadline. It
/// goes back to the pool when dropped only if it was marked clean after its
/// last use; otherwise its socket is closed.
pub struct Conn {
    conn: Option<MySqlConnection>,
    session: Session,
    clean: bool,
    deadline: Instant,
    pool: Arc<Inner>,
    _permit: OwnedSemaphorePermit,
    /// History events of the open transaction, appended just before its
    /// commit (`history::append`, by the engine's commit), so that they
    /// exist exactly when the changes they describe do; a rollback drops
    /// them.
    events: Vec<super::history::NewEvent>,
    /// Statements not sent yet, each ending in `;`: the `BEGIN` of a
    /// transaction until its first statement, and writes whose answer
    /// nobody reads (`Conn::defer`) until the next statement or the
    /// `COMMIT`. They go with that statement as one text query (values
    /// written as literals, `query::Literal`): a transaction of a read, a
    /// write, its history and its commit is two round trips, not five.
    /// The server stops at the first statement that fails, so what follows
    /// it (a `COMMIT`) never runs.
    queued: String,
    tx: Tx,
    /// The transaction's span (`db.transaction`, when tracing is on): from
    /// `begin` to its commit or rollback, or to the drop that ends it.
    span: tracing::Span,
}

/// Where the connection's transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tx {
    None,
    /// `BEGIN` is queued, not sent: nothing to roll back yet.
    Unsent,
    Open,
}

impl Conn {
    /// Notes `event` for the open transaction (see `events`).
    pub fn note(&mut self, event: super::history::NewEvent) {
        self.events.push(event);
    }

    /// The events noted since the last take, for the caller to append
    /// before committing.
    pub fn take_events(&mut self) -> Vec<super::history::NewEvent> {
        std::mem::take(&mut self.events)
    }

    /// The server-side id of this session (`CONNECTION_ID()`), for `KILL`.
    pub fn id(&self) -> u64 {
        self.session.id
    }

    /// When the server started (Unix seconds, ±1 s).
    pub fn server_started(&self) -> i64 {
        self.session.server_started
    }

    /// `host:port` of the server.
    pub fn server(&self) -> &str {
        &self.pool.name
    }

    /// The deadline of every statement run through this connection.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Runs one statement (`f` is handed the raw connection) by the
    /// deadline. A connection that breaks or does not answer in time marks
    /// its server as failed, so that the connections idle since are not
    /// trusted; the connection itself is closed when dropped.
    ///
    /// # Errors
    /// The statement's error, or a `TimedOut` I/O error past the deadline.
    pub async fn run<'c, T, F>(
        &'c mut self,
        f: impl FnOnce(&'c mut MySqlConnection) -> F,
    ) -> sqlx::Result<T>
    where
        F: std::future::Future<Output = sqlx::Result<T>> + 'c,
    {
        let Conn {
            conn,
            clean,
            deadline,
            pool,
            ..
        } = self;
        *clean = false;
        let conn = conn.as_mut().expect("connection present until drop");
        let result = match tokio::time::timeout_at(*deadline, f(conn)).await {
            Ok(result) => result,
            Err(_) => Err(timed_out()),
        };
        if let Err(err) = &result {
            if matches!(
                super::classify(err),
                super::Failure::Disconnected | super::Failure::NotReady
            ) {
                note_failure(pool);
            }
        }
        result
    }

    /// Starts a transaction. Its `BEGIN` is sent with the first statement
    /// (see `queued`), so this costs no round trip, except on Galera (see
    /// [`Conn::batches`]), where it is sent at once.
    ///
    /// # Errors
    /// On Galera, the `BEGIN`'s.
    pub async fn begin(&mut self) -> sqlx::Result<()> {
        self.span = tracing::info_span!(
            "db.transaction",
            server.address = self.pool.name.as_str(),
            lockbroker.outcome = tracing::field::Empty,
        );
        self.events.clear();
        self.queued.clear();
        self.clean = false;
        if !self.batches() {
            self.tx = Tx::Open;
            return self.run(|c| c.execute("BEGIN")).await.map(|_| ());
        }
        self.queued.push_str("BEGIN;\n");
        self.tx = Tx::Unsent;
        Ok(())
    }

    /// Whether the connection's server is a Galera node.
    pub(super) fn on_galera(&self) -> bool {
        self.session.galera
    }

    /// Whether statements of a transaction may travel together (`queued`).
    ///
    /// Not on a Galera node: there a transaction that a replicated write
    /// set aborts (a brute-force abort) between two statements of one
    /// multi-statement packet is rolled back, yet the packet's `COMMIT`
    /// answers OK, and the statements after the abort run on their own
    /// (measured on MariaDB 10.11 with Galera 26.4: a few such phantom
    /// commits in every 4,000 contended transactions whose writes went with
    /// their `COMMIT`, none with every statement sent alone; the test
    /// `galera::a_commit_is_reported_only_if_it_happened`). One server
    /// cannot abort a transaction that is not waiting, so it never happens
    /// there.
    fn batches(&self) -> bool {
        !self.on_galera()
    }

    /// Commits, with the statements still queued; on success the
    /// connection is clean again. A transaction that sent nothing has
    /// nothing to commit.
    ///
    /// # Errors
    /// A server error means the transaction was rolled back (e.g. a Galera
    /// certification failure, or a queued write that failed: the `COMMIT`
    /// after it never ran) and the connection is clean only after a
    /// conflict; any other error leaves the outcome unknown and the
    /// connection is closed on drop.
    pub async fn commit(&mut self) -> sqlx::Result<()> {
        if self.tx == Tx::Unsent && self.queued == "BEGIN;\n" {
            self.queued.clear();
            self.tx = Tx::None;
            self.clean = true;
            self.end_span(true, "commit");
            return Ok(());
        }
        self.tx = Tx::None;
        let committed = self.statement("COMMIT").await;
        self.end_span(committed.is_ok(), "commit");
        match committed {
            Ok(()) => {
                self.clean = true;
                Ok(())
            }
            Err(err) => {
                // A conflict at COMMIT (a Galera certification failure)
                // rolled the transaction back; the session is fine.
                if super::classify(&err) == super::Failure::Conflict {
                    self.clean = true;
                }
                Err(err)
            }
        }
    }

    /// Rolls back (what was queued is dropped unsent); on success the
    /// connection is clean again.
    ///
    /// # Errors
    /// The connection failed: it is closed on drop.
    pub async fn rollback(&mut self) -> sqlx::Result<()> {
        self.events.clear();
        self.queued.clear();
        let was = std::mem::replace(&mut self.tx, Tx::None);
        let rolled_back = match was {
            Tx::Unsent => Ok(()),
            _ => self.statement("ROLLBACK").await,
        };
        self.end_span(rolled_back.is_ok(), "rollback");
        rolled_back?;
        self.clean = true;
        Ok(())
    }

    /// Ends the transaction's span, saying how it ended: `outcome` if its
    /// statement went through (`ok`), else `failed`.
    fn end_span(&mut self, ok: bool, outcome: &'static str) {
        let outcome = if ok { outcome } else { "failed" };
        self.span.record("lockbroker.outcome", outcome);
        self.span = tracing::Span::none();
    }

    /// Whether statements wait to go with the next one.
    pub(super) fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Whether a write whose answer nobody reads may wait to go with the
    /// next statement: inside a transaction (begun, sent or not), where
    /// statements may travel together ([`Conn::batches`]).
    pub(super) fn may_defer(&self) -> bool {
        self.tx != Tx::None && self.batches()
    }

    /// Queues `sql` (complete, values written in) to go with the next
    /// statement.
    pub(super) fn queue(&mut self, sql: &str) {
        self.queued.push_str(sql.trim());
        self.queued.push_str(";\n");
    }

    /// The queued statements followed by `sql`, as one text; from now on
    /// the transaction is open on the server.
    pub(super) fn take_queued_with(&mut self, sql: &str) -> String {
        if self.tx == Tx::Unsent {
            self.tx = Tx::Open;
        }
        let mut text = std::mem::take(&mut self.queued);
        text.push_str(sql.trim());
        text
    }

    /// A statement without parameters, in the text protocol (with what is
    /// queued before it).
    pub async fn statement(&mut self, sql: &str) -> sqlx::Result<()> {
        if self.has_queued() {
            let text = self.take_queued_with(sql);
            return self.run_text(text).await.map(|_| ());
        }
        self.run(|c| c.execute(sql)).await.map(|_| ())
    }

    /// Marks the connection clean after statements outside a transaction
    /// that all completed.
    pub fn done(&mut self) {
        self.clean = true;
    }
}

impl Deref for Conn {
    type Target = MySqlConnection;
    fn deref(&self) -> &MySqlConnection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl DerefMut for Conn {
    /// Any use may leave the connection mid-statement until its user says
    /// otherwise.
    fn deref_mut(&mut self) -> &mut MySqlConnection {
        self.clean = false;
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.clean && !self.pool.closed.load(Ordering::Acquire) {
            self.pool.idle.lock().expect("pool lock").push(Idle {
                conn,
                session: self.session,
                since: Instant::now(),
            });
        }
        // Otherwise `conn` is dropped here: its socket closes at once and
        // the server rolls back what the session had open.
    }
}
