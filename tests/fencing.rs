//! Fencing: `POST /v1/locks/{key}/validate`, the `lockbroker_token_valid`
//! SQL function (which must agree with it, and hold back grants while a
//! writer's transaction relies on it), and an operator's force-release.

use std::time::Duration;

use lockbroker_tests::Client;
use lockbroker_tests::{db_conn, eventually, Broker, ADMIN};
use serde_json::{json, Value};
use sqlx::{MySqlConnection, Row};

/// How long a test waits for a condition (a lease's expiry by the database
/// clock, a waiter's arrival).
const WAIT: Duration = Duration::from_secs(10);

async fn validate(c: &Client, key: &str, token: u64) -> Value {
    let reply = c
        .post(
            &format!("/v1/locks/{key}/validate"),
            &json!({ "token": token }),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.json()
}

/// The SQL function, as a writer in the same server calls it.
async fn sql_valid(db: &mut MySqlConnection, storage_key: &str, token: u64) -> bool {
    let row = sqlx::query("SELECT lockbroker_token_valid(?, ?, ?) AS v")
        .bind("default")
        .bind(storage_key)
        .bind(token)
        .fetch_one(db)
        .await
        .unwrap();
    let v: i64 = row.try_get("v").unwrap();
    assert!(v == 0 || v == 1, "{v}");
    v == 1
}

/// Waits until the lease ending at `expires_at` (as the broker answered
/// it) has ended by the database clock.
async fn until_expired_by_db(db_name: &str, expires_at: &str) {
    let expires = chrono::DateTime::parse_from_rfc3339(expires_at)
        .unwrap()
        .naive_utc();
    eventually("the lease expired by the database clock", WAIT, || async {
        let mut db = db_conn(db_name).await;
        let now: chrono::NaiveDateTime = sqlx::query_scalar("SELECT NOW(6)")
            .fetch_one(&mut db)
            .await
            .unwrap();
        now > expires
    })
    .await;
}

#[tokio::test]
async fn validate_follows_the_live_grant_and_the_sql_function_agrees() {
    let broker = Broker::start().await;
    let c = broker.client();
    let mut db = db_conn(&broker.db).await;

    // Never held: nothing is valid.
    assert_eq!(
        validate(&c, "ledger", 1).await,
        json!({"valid": false, "token": null})
    );
    assert!(!sql_valid(&mut db, "ledger", 1).await);

    let grant = c.acquire("ledger", "w1", 1_500, 0).await.unwrap();
    assert_eq!(grant.status, 200);
    let t1 = grant.json()["token"].as_u64().unwrap();
    assert_eq!(
        validate(&c, "ledger", t1).await,
        json!({"valid": true, "token": t1})
    );
    assert!(sql_valid(&mut db, "ledger", t1).await);
    // Another token of the same key, and the same token of another key
    // (or of the key in another case: bytes compare), are not valid.
    assert_eq!(
        validate(&c, "ledger", t1 + 1).await,
        json!({"valid": false, "token": t1})
    );
    assert!(!sql_valid(&mut db, "ledger", t1 + 1).await);
    assert!(!sql_valid(&mut db, "Ledger", t1).await);

    // Right after expiry (by the database clock), before anyone else took
    // it: no longer valid, and nobody holds it.
    until_expired_by_db(&broker.db, grant.json()["expires_at"].as_str().unwrap()).await;
    assert_eq!(
        validate(&c, "ledger", t1).await,
        json!({"valid": false, "token": null})
    );
    assert!(!sql_valid(&mut db, "ledger", t1).await);

    // Re-granted: the new token is valid, the old one stays invalid.
    let again = c.acquire("ledger", "w2", 30_000, 0).await.unwrap();
    let t2 = again.json()["token"].as_u64().unwrap();
    assert!(t2 > t1);
    assert_eq!(
        validate(&c, "ledger", t1).await,
        json!({"valid": false, "token": t2})
    );
    assert!(!sql_valid(&mut db, "ledger", t1).await);
    assert_eq!(
        validate(&c, "ledger", t2).await,
        json!({"valid": true, "token": t2})
    );
    assert!(sql_valid(&mut db, "ledger", t2).await);

    // Released: nothing is valid.
    let released = c.release("ledger", "w2", t2).await.unwrap();
    assert_eq!(released.status, 200);
    assert_eq!(
        validate(&c, "ledger", t2).await,
        json!({"valid": false, "token": null})
    );
    assert!(!sql_valid(&mut db, "ledger", t2).await);

    // Bad bodies are 400.
    let bad = c
        .post("/v1/locks/ledger/validate", &json!({"token": "x"}))
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    let missing = c
        .post("/v1/locks/ledger/validate", &json!({}))
        .await
        .unwrap();
    assert_eq!(missing.status, 400);
    broker.stop().await;
}

/// A writer that checked its token with the SQL function inside its
/// transaction holds the lease where it is until it commits: a grant to
/// someone else must wait, even after the lease expired meanwhile.
#[tokio::test]
async fn the_sql_function_fences_grants_until_the_writer_commits() {
    let broker = Broker::start().await;
    let c = broker.client();
    let grant = c.acquire("orders-42", "w1", 1_000, 0).await.unwrap();
    let t1 = grant.json()["token"].as_u64().unwrap();

    let mut writer = db_conn(&broker.db).await;
    sqlx::query("BEGIN").execute(&mut writer).await.unwrap();
    assert!(sql_valid(&mut writer, "orders-42", t1).await);

    until_expired_by_db(&broker.db, grant.json()["expires_at"].as_str().unwrap()).await;
    // The lease is over by the clock, but the writer's transaction still
    // relies on it: no new grant.
    let blocked = c.acquire("orders-42", "w2", 30_000, 0).await.unwrap();
    assert_eq!(blocked.status, 409, "{:?}", blocked.body);

    sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
    let next = c.acquire("orders-42", "w2", 30_000, 0).await.unwrap();
    assert_eq!(next.status, 200, "{:?}", next.body);
    assert!(next.json()["token"].as_u64().unwrap() > t1);
    broker.stop().await;
}

#[tokio::test]
async fn force_release_hands_the_lock_on_with_a_greater_token() {
    let broker = Broker::start().await;
    let c = broker.client();
    let admin = broker.client_with(Some(ADMIN));
    let path = "/v1/admin/tenants/default/locks/stuck%20job/release";

    let held = c.acquire("stuck job", "w1", 60_000, 0).await.unwrap();
    let t1 = held.json()["token"].as_u64().unwrap();

    // A waiter queues behind the stuck holder.
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("stuck job", "w2", 60_000, 20_000).await })
    };
    eventually("the waiter is queued", WAIT, || async {
        c.status("stuck job").await.unwrap().json()["waiters"] == 1
    })
    .await;

    // A tenant's key may not; an unknown tenant is 404.
    let forbidden = c.post(path, &json!({})).await.unwrap();
    assert_eq!(forbidden.status, 403);
    let unknown = admin
        .post("/v1/admin/tenants/nobody/locks/x/release", &json!({}))
        .await
        .unwrap();
    assert_eq!(unknown.status, 404);

    let forced = admin.post(path, &json!({})).await.unwrap();
    assert_eq!(forced.status, 200, "{:?}", forced.body);
    assert_eq!(
        forced.json(),
        json!({"tenant": "default", "key": "stuck job", "storage_key": "stuck job",
               "owner": "w1", "token": t1, "handed_off": true})
    );
    // The waiter got it by handoff, with a greater token.
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.status, 200, "{:?}", got.body);
    let t2 = got.json()["token"].as_u64().unwrap();
    assert!(t2 > t1);
    // The old holder's lease is gone.
    let renew = c.renew("stuck job", "w1", t1, 60_000).await.unwrap();
    assert_eq!(renew.code(), Some(lockbroker_api::ErrorCode::LeaseLost));
    let release = c.release("stuck job", "w1", t1).await.unwrap();
    assert_eq!(release.code(), Some(lockbroker_api::ErrorCode::LeaseLost));
    assert_eq!(validate(&c, "stuck%20job", t1).await["valid"], false);

    // Without waiters it is freed; the next grant's token is greater still.
    let forced = admin.post(path, &json!({})).await.unwrap();
    assert_eq!(forced.json()["token"], t2);
    assert_eq!(forced.json()["handed_off"], false);
    assert_eq!(c.status("stuck job").await.unwrap().json()["held"], false);
    let none = admin.post(path, &json!({})).await.unwrap();
    assert_eq!(none.status, 404, "{:?}", none.body);
    assert_eq!(none.code(), Some(lockbroker_api::ErrorCode::NotFound));
    let next = c.acquire("stuck job", "w3", 60_000, 0).await.unwrap();
    assert!(next.json()["token"].as_u64().unwrap() > t2);

    // GET is not the way.
    let get = admin.get(path).await.unwrap();
    assert_eq!(get.status, 405);
    broker.stop().await;
}
