//! The fault-injection helpers themselves, proven against real sockets and
//! real MariaDB servers: `eventually` fails in time, the proxy's faults do
//! what they say, a private MariaDB survives `kill -9` and restarts, and
//! the load driver's history is checked clean on a healthy broker and
//! through faults. (The checker's ability to fail is proven on synthetic
//! histories by its unit tests, in `support/history/check.rs`.)

use std::{
    io::ErrorKind,
    sync::Arc,
    time::{Duration, Instant},
};

use lockbroker_tests::{
    config_at, db_conn, eventually, eventually_some, fresh_db_name, history::Op, run_clients,
    run_clients_with, Broker, Fault, History, Load, PrivateMariaDb, Proxy, Release503,
};
use sqlx::{Connection, MySqlConnection};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Long enough to say "nothing arrived" on a machine that is not stalled.
const QUIET: Duration = Duration::from_millis(300);
const SOON: Duration = Duration::from_secs(5);

// ---- eventually ----

#[tokio::test]
async fn eventually_returns_as_soon_as_the_condition_holds() {
    let started = Instant::now();
    let mut tries = 0;
    eventually("the third try", SOON, || {
        tries += 1;
        let done = tries >= 3;
        async move { done }
    })
    .await;
    assert_eq!(tries, 3);
    let value = eventually_some("a value", SOON, || async { Some(7) }).await;
    assert_eq!(value, 7);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
#[should_panic(expected = "the moon turns green: not true within")]
async fn eventually_fails_with_the_tests_words() {
    eventually(
        "the moon turns green",
        Duration::from_millis(50),
        || async { false },
    )
    .await;
}

#[tokio::test]
async fn eventually_is_bounded_even_when_a_check_hangs() {
    let started = Instant::now();
    let waiting = tokio::spawn(eventually(
        "a hung check",
        Duration::from_millis(100),
        std::future::pending::<bool>,
    ));
    let err = waiting.await.expect_err("it panics");
    assert!(err.is_panic());
    assert!(started.elapsed() < Duration::from_secs(2));
}

// ---- proxy, against plain sockets ----

/// A connection through the proxy: the client's end and the upstream's.
async fn pair(proxy: &Proxy, upstream: &TcpListener) -> (TcpStream, TcpStream) {
    let client = TcpStream::connect(proxy.addr).await.expect("connect");
    let (server, _) = tokio::time::timeout(SOON, upstream.accept())
        .await
        .expect("the proxy connects upstream")
        .expect("accept");
    (client, server)
}

async fn upstream() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// Reads exactly `want` bytes, bounded.
async fn receive(stream: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut buf = vec![0; want];
    tokio::time::timeout(SOON, stream.read_exact(&mut buf))
        .await
        .expect("bytes arrive")
        .expect("read");
    buf
}

/// Asserts that nothing arrives for a while (the stream stays open).
async fn nothing_arrives(stream: &mut TcpStream) {
    let mut buf = [0; 64];
    let read = tokio::time::timeout(QUIET, stream.read(&mut buf)).await;
    assert!(read.is_err(), "something arrived: {read:?}");
}

/// What the next read of a stream says, bounded.
async fn next_read(stream: &mut TcpStream) -> std::io::Result<usize> {
    let mut buf = [0; 64];
    tokio::time::timeout(SOON, stream.read(&mut buf))
        .await
        .expect("the stream ends")
}

#[tokio::test]
async fn proxy_forwards_both_ways() {
    let (listener, addr) = upstream().await;
    let proxy = Proxy::start(&addr).await;
    let (mut client, mut server) = pair(&proxy, &listener).await;
    client.write_all(b"ping").await.unwrap();
    assert_eq!(receive(&mut server, 4).await, b"ping");
    server.write_all(b"pong").await.unwrap();
    assert_eq!(receive(&mut client, 4).await, b"pong");
    assert_eq!(proxy.connections(), 1);
    drop(client);
    assert_eq!(next_read(&mut server).await.unwrap(), 0, "close is relayed");
    assert_eq!(proxy.connections(), 1, "half-closed, still relayed");
    drop(server);
    eventually("the connection is gone", SOON, || async {
        proxy.connections() == 0
    })
    .await;
}

#[tokio::test]
async fn pause_holds_every_byte_until_restore() {
    let (listener, addr) = upstream().await;
    let proxy = Proxy::start(&addr).await;
    let (mut client, mut server) = pair(&proxy, &listener).await;

    proxy.pause();
    assert_eq!(proxy.fault(), Fault::Pause);
    client.write_all(b"up").await.unwrap();
    server.write_all(b"down").await.unwrap();
    // A connection opened during the pause is accepted, not forwarded.
    let mut late = TcpStream::connect(proxy.addr).await.unwrap();
    late.write_all(b"late").await.unwrap();
    nothing_arrives(&mut server).await;
    nothing_arrives(&mut client).await;
    assert!(
        tokio::time::timeout(QUIET, listener.accept())
            .await
            .is_err(),
        "the late connection reached upstream during the pause"
    );
    assert_eq!(proxy.connections(), 2);

    proxy.restore();
    assert_eq!(receive(&mut server, 2).await, b"up");
    assert_eq!(receive(&mut client, 4).await, b"down");
    let (mut late_server, _) = tokio::time::timeout(SOON, listener.accept())
        .await
        .expect("the late connection goes upstream on restore")
        .unwrap();
    assert_eq!(receive(&mut late_server, 4).await, b"late");
}

#[tokio::test]
async fn cut_closes_every_connection_and_new_ones() {
    let (listener, addr) = upstream().await;
    let proxy = Proxy::start(&addr).await;
    let (mut client, mut server) = pair(&proxy, &listener).await;

    proxy.cut();
    assert_eq!(next_read(&mut client).await.unwrap(), 0, "client sees FIN");
    assert_eq!(next_read(&mut server).await.unwrap(), 0, "server sees FIN");
    eventually("cut connections are gone", SOON, || async {
        proxy.connections() == 0
    })
    .await;
    let mut refused = TcpStream::connect(proxy.addr).await.unwrap();
    assert!(matches!(next_read(&mut refused).await, Ok(0)));

    proxy.restore();
    let (mut client, mut server) = pair(&proxy, &listener).await;
    client.write_all(b"again").await.unwrap();
    assert_eq!(receive(&mut server, 5).await, b"again");
}

#[tokio::test]
async fn reset_resets_both_sides_and_new_connections() {
    let (listener, addr) = upstream().await;
    let proxy = Proxy::start(&addr).await;
    let (mut client, mut server) = pair(&proxy, &listener).await;

    proxy.reset();
    let err = next_read(&mut client).await.expect_err("client sees RST");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    let err = next_read(&mut server).await.expect_err("server sees RST");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    let mut refused = TcpStream::connect(proxy.addr).await.unwrap();
    let err = next_read(&mut refused)
        .await
        .expect_err("a new one is reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    eventually("reset connections are gone", SOON, || async {
        proxy.connections() == 0
    })
    .await;

    proxy.restore();
    let (mut client, mut server) = pair(&proxy, &listener).await;
    server.write_all(b"back").await.unwrap();
    assert_eq!(receive(&mut client, 4).await, b"back");
}

#[tokio::test]
async fn a_cut_is_not_missed_when_restore_follows_at_once() {
    let (listener, addr) = upstream().await;
    let proxy = Proxy::start(&addr).await;
    let (mut client, _server) = pair(&proxy, &listener).await;
    proxy.cut();
    proxy.restore();
    assert_eq!(next_read(&mut client).await.unwrap(), 0);
}

// ---- a private MariaDB ----

async fn one_row(conn: &mut MySqlConnection) -> Vec<(String,)> {
    sqlx::query_as("SELECT v FROM t.kept")
        .fetch_all(conn)
        .await
        .expect("read the table")
}

#[tokio::test]
async fn private_mariadb_survives_kill9_and_restarts() {
    let started = Instant::now();
    let mut db = PrivateMariaDb::start().await;
    eprintln!(
        "private MariaDB on port {} answered after {:?}",
        db.port(),
        started.elapsed()
    );
    let dir = db.dir().to_owned();
    let first_pid = db.pid().expect("runs");
    let mut conn = db.connect().await;
    for sql in [
        "CREATE DATABASE t",
        "CREATE TABLE t.kept (v VARCHAR(16)) ENGINE=InnoDB",
        "INSERT INTO t.kept VALUES ('committed')",
    ] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }

    db.kill9().await;
    assert_eq!(db.pid(), None);
    assert!(
        !std::path::Path::new(&format!("/proc/{first_pid}")).exists(),
        "the killed server is reaped"
    );
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err());
    assert!(MySqlConnection::connect(&db.url()).await.is_err());

    let again = Instant::now();
    db.start_again().await;
    eprintln!("restarted after kill -9 in {:?}", again.elapsed());
    let mut conn = db.connect().await;
    assert_eq!(one_row(&mut conn).await, vec![("committed".to_owned(),)]);

    db.stop().await;
    assert!(MySqlConnection::connect(&db.url()).await.is_err());
    db.start_again().await;
    let mut conn = db.connect().await;
    assert_eq!(one_row(&mut conn).await.len(), 1);
    conn.close().await.unwrap();

    let pid = db.pid().unwrap();
    drop(db);
    assert!(!dir.exists(), "drop removes the directory");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_mariadbs_run_side_by_side() {
    let started = Instant::now();
    let (a, b, c) = tokio::join!(
        PrivateMariaDb::start(),
        PrivateMariaDb::start(),
        PrivateMariaDb::start()
    );
    eprintln!("three private MariaDBs in {:?}", started.elapsed());
    let mut ports = vec![a.port(), b.port(), c.port()];
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3);
    for db in [&a, &b, &c] {
        let mut conn = db.connect().await;
        let (socket,): (String,) = sqlx::query_as("SELECT @@socket")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(socket.starts_with(&*db.dir().to_string_lossy()));
    }
}

// ---- the proxy in front of a private MariaDB ----

#[tokio::test]
async fn proxy_faults_against_mariadb() {
    let mut db = PrivateMariaDb::start().await;
    let proxy = Proxy::start(&db.host_port()).await;
    let url = format!("mysql://root@{}", proxy.addr);
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();

    // Pause: a query hangs, and completes once restored.
    proxy.pause();
    let query = tokio::spawn(async move {
        let r: (i64,) = sqlx::query_as("SELECT 42").fetch_one(&mut conn).await?;
        Ok::<_, sqlx::Error>((r.0, conn))
    });
    let mut query = query;
    assert!(
        tokio::time::timeout(QUIET, &mut query).await.is_err(),
        "a query went through a pause"
    );
    proxy.restore();
    let (answer, mut conn) = tokio::time::timeout(SOON, query)
        .await
        .expect("the query completes after restore")
        .unwrap()
        .unwrap();
    assert_eq!(answer, 42);

    // Reset: the connection fails at once, a new one works after restore.
    proxy.reset();
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err());
    assert!(MySqlConnection::connect(&url).await.is_err());
    proxy.restore();
    let mut conn = MySqlConnection::connect(&url).await.unwrap();

    // The server dies behind the proxy, then comes back.
    db.kill9().await;
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err());
    db.start_again().await;
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut conn).await.unwrap();
}

// ---- the load driver and the checker on real brokers ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_on_a_healthy_broker_checks_clean() {
    let broker = Broker::start().await;
    let history = Arc::new(History::new());
    let url = broker.url().to_owned();
    run_clients(
        8,
        Duration::from_secs(2),
        &["h-a", "h-b", "h-c"],
        move |_, _| lockbroker_tests::Client::new(&url, Some(lockbroker_tests::KEY)).unwrap(),
        history.clone(),
    )
    .await;
    let mut conn = db_conn(&broker.db).await;
    let report = history
        .check_with_database(&mut conn, Release503::NothingHappened)
        .await;
    eprintln!("{report}");
    report.assert_clean();
    assert!(report.grants > 50, "the load ran: {report}");
    assert!(report.releases.get("200 released") > 50);
    assert_eq!(report.unavailable + report.timeouts + report.failures, 0);
    broker.stop().await;
}

/// Grants answered after `since`.
fn grants_since(history: &History, since: Instant) -> usize {
    history
        .ops()
        .iter()
        .filter(|op: &&Op| op.sent > since && op.outcome.granted().is_some())
        .count()
}

/// Requests sent after `since` that got no `200`/`409`: the fault showed.
fn troubles_since(history: &History, since: Instant) -> usize {
    history
        .ops()
        .iter()
        .filter(|op| op.sent > since && !matches!(op.outcome.status(), Some(200 | 409)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_through_database_faults_checks_clean() {
    let mut db = PrivateMariaDb::start().await;
    let proxy = Proxy::start(&db.host_port()).await;
    let name = fresh_db_name();
    let server = format!("mysql://root@{}", proxy.addr);
    let first = Broker::start_with(name.clone(), config_at(&server, &name)).await;
    let second = Broker::start_with(name.clone(), config_at(&server, &name)).await;
    let urls = [first.url().to_owned(), second.url().to_owned()];
    let history = Arc::new(History::new());
    let load = Load {
        timeout: Duration::from_secs(1),
        ..Load::default()
    };
    let driver = {
        let history = history.clone();
        tokio::spawn(async move {
            run_clients_with(
                &load,
                8,
                Duration::from_secs(12),
                &["f-a", "f-b", "f-c"],
                // Each client alternates between the two brokers.
                move |task, n| {
                    let url = &urls[(task + n as usize) % 2];
                    lockbroker_tests::Client::new(url, Some(lockbroker_tests::KEY)).unwrap()
                },
                history,
            )
            .await;
        })
    };
    let h = &history;
    let flowing = |what: &'static str| async move {
        let since = Instant::now();
        eventually(what, Duration::from_secs(10), || async move {
            grants_since(h, since) >= 10
        })
        .await;
    };
    let noticed = |what: &'static str| async move {
        let since = Instant::now();
        eventually(what, Duration::from_secs(10), || async move {
            troubles_since(h, since) >= 3
        })
        .await;
    };

    flowing("grants before any fault").await;
    proxy.pause();
    noticed("clients notice the pause").await;
    proxy.restore();
    flowing("grants after the pause").await;
    proxy.reset();
    noticed("clients notice the reset").await;
    proxy.restore();
    flowing("grants after the reset").await;
    db.kill9().await;
    noticed("clients notice the crash").await;
    db.start_again().await;
    flowing("grants after the crash").await;

    tokio::time::timeout(Duration::from_secs(30), driver)
        .await
        .expect("the load ends")
        .unwrap();
    let mut conn = MySqlConnection::connect(&format!("{}/{name}", db.url()))
        .await
        .unwrap();
    // A release whose commit could not be settled while the database was
    // away is answered 503 although it may have committed: read as "may
    // have committed" (its client stopped using the lock), the run must be
    // clean.
    let report = history
        .check_with_database(&mut conn, Release503::MayHaveCommitted)
        .await;
    eprintln!("{report}");
    report.assert_clean();
    assert!(report.unavailable + report.timeouts > 0, "{report}");
    first.stop().await;
    second.stop().await;
}
