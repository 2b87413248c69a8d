//! Leases and tokens live in the database: they survive broker restarts;
//! when the database goes away the broker says 503 and grants nothing.

use std::time::Duration;

use lockbroker_api::{ErrorCode, Lease, LockStatus};
use lockbroker_tests::{
    config, drop_db, eventually, eventually_some, fresh_db_name, server_host_port, server_userinfo,
    Broker, BrokerProcess, Client, Proxy, Reply,
};

fn token(r: &Reply) -> u64 {
    r.ok::<Lease>().token
}

async fn status(c: &Client, key: &str) -> LockStatus {
    c.status(key).await.unwrap().ok()
}

#[tokio::test]
async fn restart_keeps_leases_and_continues_tokens() {
    let mut broker = Broker::start().await;
    let c = broker.client();
    let held_token = token(&c.acquire("kept", "a", 60_000, 0).await.unwrap());
    let mut last = 0;
    for _ in 0..3 {
        last = token(&c.acquire("cycled", "b", 60_000, 0).await.unwrap());
        c.release("cycled", "b", last).await.unwrap();
    }

    broker.restart().await;
    let c = broker.client();
    let kept = status(&c, "kept").await;
    assert!(kept.held);
    assert_eq!(kept.owner.as_deref(), Some("a"));
    assert_eq!(kept.token, Some(held_token));
    assert_eq!(c.acquire("kept", "z", 1000, 0).await.unwrap().status, 409);
    let renewed = c.renew("kept", "a", held_token, 60_000).await.unwrap();
    assert_eq!(renewed.status, 200, "the lease is renewable after restart");

    let g = c.acquire("cycled", "b", 60_000, 0).await.unwrap();
    assert_eq!(token(&g), last + 1);
    broker.stop().await;
}

#[tokio::test]
async fn two_brokers_on_one_database_share_tokens() {
    let first = Broker::start().await;
    let second = Broker::start_with(first.db.clone(), first.config.clone()).await;
    let (a, b) = (first.client(), second.client());
    let mut last = 0;
    for i in 0..6 {
        let c = if i % 2 == 0 { &a } else { &b };
        let granted = token(&c.acquire("both", "w", 60_000, 0).await.unwrap());
        assert!(granted > last);
        last = granted;
        let other = if i % 2 == 0 { &b } else { &a };
        assert_eq!(
            other.acquire("both", "x", 1000, 0).await.unwrap().status,
            409
        );
        c.release("both", "w", granted).await.unwrap();
    }
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn database_down_means_503_and_nothing_granted() {
    let proxy = Proxy::start(&server_host_port()).await;
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.database_url = format!("mysql://{}@{}/{db}", server_userinfo(), proxy.addr).into();
    let broker = Broker::start_with(db.clone(), cfg).await;
    let c = broker.client();
    let g = c.acquire("dd", "a", 60_000, 0).await.unwrap();
    assert_eq!(g.status, 200);
    let token = token(&g);

    proxy.cut();
    for reply in [
        c.acquire("dd2", "a", 60_000, 0).await.unwrap(),
        c.release("dd", "a", token).await.unwrap(),
        c.renew("dd", "a", token, 60_000).await.unwrap(),
        c.status("dd").await.unwrap(),
    ] {
        assert_eq!(reply.status, 503, "{reply:?}");
        assert_eq!(reply.code(), Some(ErrorCode::Unavailable));
    }
    let ready = broker.client_with(None).get("/readyz").await.unwrap();
    assert_eq!(ready.status, 503);

    proxy.restore();
    // The pool reconnects; the lease is still there, untouched.
    let after: LockStatus = eventually_some(
        "broker recovers when the database returns",
        // A try that met the dead connection may take db_timeout_ms (2 s).
        Duration::from_secs(10),
        || async {
            let reply = c.status("dd").await.ok().filter(|s| s.status == 200)?;
            reply.try_parse()
        },
    )
    .await;
    assert_eq!(after.owner.as_deref(), Some("a"));
    assert_eq!(after.token, Some(token));
    assert!(!status(&c, "dd2").await.held, "nothing was granted");
    broker.stop().await;
    drop_db(&db).await;
}

#[tokio::test]
async fn shutdown_answers_waiters_and_stops_accepting() {
    let broker = Broker::start().await;
    let c = broker.client();
    c.acquire("sd", "holder", 60_000, 0).await.unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("sd", "waiter", 60_000, 60_000).await })
    };
    eventually("the waiter is queued", Duration::from_secs(5), || async {
        c.status("sd")
            .await
            .ok()
            .and_then(|r| r.try_parse::<LockStatus>())
            .is_some_and(|s| s.waiters == 1)
    })
    .await;
    let url = broker.url().to_owned();
    let db = broker.db.clone();
    let started = std::time::Instant::now();
    broker.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "drained promptly"
    );
    let reply = waiter.await.unwrap().expect("the waiter got an answer");
    assert_eq!(reply.status, 503);
    assert_eq!(reply.code(), Some(ErrorCode::Unavailable));
    let after = Client::new(&url, None).unwrap();
    assert!(after.get("/healthz").await.is_err(), "no new connections");
    drop_db(&db).await;
}

#[tokio::test]
async fn broker_process_exits_cleanly_on_sigterm() {
    let db = fresh_db_name();
    let broker = BrokerProcess::start(&db, "").await;
    let c = broker.client();
    let g = c.acquire("proc", "a", 60_000, 0).await.unwrap();
    assert_eq!(g.status, 200);
    let exit = broker.stop().await;
    assert!(exit.success(), "{exit:?}");
    // A new process finds the lease where the old one left it.
    let again = BrokerProcess::start(&db, "").await;
    let s = status(&again.client(), "proc").await;
    assert_eq!(s.owner.as_deref(), Some("a"));
    assert!(again.stop().await.success());
    drop_db(&db).await;
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = fresh_db_name();
    let mut cfg = config(&db);
    cfg.header_read_timeout_ms = 300;
    let broker = Broker::start_with(db, cfg).await;
    let addr = broker.url().trim_start_matches("http://").to_owned();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    let closed_after = started.elapsed();
    assert!(read.is_ok(), "the connection was not closed");
    assert!(closed_after < Duration::from_secs(3), "{closed_after:?}");
    // Other clients are served meanwhile and after.
    assert_eq!(broker.client().get("/healthz").await.unwrap().status, 200);
    broker.stop().await;
}

#[tokio::test]
async fn migrate_creates_the_database_and_exits() {
    let db = fresh_db_name();
    let config = lockbroker_tests::tempfile_like::TempFile::new(
        "toml",
        format!(
            "database_url = \"{}/{db}\"\n[[tenant]]\nname = \"t\"\napi_key = \"k\"\n",
            lockbroker_tests::server_url()
        )
        .as_bytes(),
    );
    let out = tokio::process::Command::new(lockbroker_tests::bin("lockbroker"))
        .arg("migrate")
        .arg("--config")
        .arg(config.path())
        .env("LOCKBROKER_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut conn = lockbroker_tests::db_conn(&db).await;
    let tables: Vec<(String,)> = sqlx::query_as("SHOW TABLES")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let names: Vec<&str> = tables.iter().map(|t| t.0.as_str()).collect();
    for table in [
        "locks",
        "waiters",
        "semaphores",
        "semaphore_slots",
        "election_terms",
    ] {
        assert!(names.contains(&table), "{table} in {names:?}");
    }
    // Running it again is harmless.
    let again = tokio::process::Command::new(lockbroker_tests::bin("lockbroker"))
        .args(["migrate", "--config"])
        .arg(config.path())
        .env("LOCKBROKER_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(again.status.success());
    drop_db(&db).await;
}

#[tokio::test]
async fn a_bad_config_is_refused_at_start() {
    let config = lockbroker_tests::tempfile_like::TempFile::new("toml", b"listen = 7\n");
    let out = tokio::process::Command::new(lockbroker_tests::bin("lockbroker"))
        .args(["serve", "--config"])
        .arg(config.path())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid config"), "{stderr}");
}
