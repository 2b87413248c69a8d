//! The database user a broker runs as needs only `SELECT, INSERT, UPDATE,
//! DELETE` on its tables once the migrations are applied (by `lockbroker
//! migrate`, or a first start, as a user allowed to create tables): a
//! broker started as such a user comes up and serves, and one that would
//! have to migrate says so instead of starting.

use lockbroker_tests::{config_at, drop_db, fresh_db_name, server_url, Broker, KEY};
use sqlx::{Connection, MySqlConnection};

/// A user on the shared server allowed only to read and write `db`'s
/// tables; dropped by [`drop_user`].
async fn user_for(db: &str) -> (String, String) {
    let user = format!("{db}_rw");
    let password = "rw-only";
    let mut root = MySqlConnection::connect(&server_url()).await.unwrap();
    for sql in [
        format!("DROP USER IF EXISTS '{user}'@'127.0.0.1'"),
        format!("CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.* TO '{user}'@'127.0.0.1'"),
    ] {
        sqlx::query(&sql).execute(&mut root).await.unwrap();
    }
    let url = server_url().replacen("root@", &format!("{user}:{password}@"), 1);
    assert_ne!(url, server_url(), "the test server's URL names root");
    (user, url)
}

async fn drop_user(user: &str) {
    let mut root = MySqlConnection::connect(&server_url()).await.unwrap();
    sqlx::query(&format!("DROP USER IF EXISTS '{user}'@'127.0.0.1'"))
        .execute(&mut root)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_user_that_may_only_read_and_write_runs_a_migrated_database() {
    let db = fresh_db_name();
    // Migrated once as root (a first start), then stopped.
    Broker::start_with(db.clone(), config_at(&server_url(), &db))
        .await
        .shutdown()
        .await;
    let (user, url) = user_for(&db).await;

    let broker = Broker::start_with(db.clone(), config_at(&url, &db)).await;
    let client = broker.client_with(Some(KEY));
    let acquired = client.acquire("job", "me", 30_000, 0).await.unwrap();
    assert_eq!(acquired.status, 200, "{}", acquired.text());
    let token = acquired.json()["token"].as_u64().unwrap();
    let released = client.release("job", "me", token).await.unwrap();
    assert_eq!(released.status, 200, "{}", released.text());
    broker.stop().await;

    drop_user(&user).await;
    drop_db(&db).await;
}

#[tokio::test]
async fn a_database_that_needs_migrating_is_refused_with_the_reason() {
    let db = fresh_db_name();
    // The database exists, empty: the migrations have never run.
    let mut root = MySqlConnection::connect(&server_url()).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE `{db}`"))
        .execute(&mut root)
        .await
        .unwrap();
    let (user, url) = user_for(&db).await;

    let refused = lockbroker::Server::start(config_at(&url, &db)).await;
    let err = format!("{:#}", refused.err().expect("the broker refuses to start"));
    assert!(err.contains("cannot run the migrations"), "{err}");
    assert!(err.contains("command denied"), "{err}");

    drop_user(&user).await;
    drop_db(&db).await;
}
