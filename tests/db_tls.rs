//! TLS to the database: a private MariaDB with a certificate of a test CA
//! and `require_secure_transport=ON` (a plain TCP session is refused), and
//! brokers whose `database_url` asks for `ssl-mode` as the MySQL clients
//! spell it. With `VERIFY_IDENTITY` and the right CA the broker works end
//! to end, and so it does under `PREFERRED`, `REQUIRED` (encrypted, the
//! certificate not checked) and `VERIFY_CA`; `DISABLED` and a wrong CA
//! under `VERIFY_CA` are startup errors that say why.

use lockbroker::{Config, Server};
use lockbroker_tests::{config, fresh_db_name, Broker, Certs, PrivateMariaDb};
use serde_json::json;

/// A private MariaDB that takes TLS sessions only (its certificate signed
/// by the CA `good`), and the certificates (a CA `wrong` as well).
async fn tls_server() -> (PrivateMariaDb, Certs) {
    let certs = Certs::new();
    certs
        .ca("good")
        .ca("wrong")
        .signed("server", "127.0.0.1", "good");
    let options = [
        format!("--ssl-ca={}", certs.file("good.pem")),
        format!("--ssl-cert={}", certs.file("server.pem")),
        format!("--ssl-key={}", certs.file("server.key")),
        "--require-secure-transport=ON".to_owned(),
    ];
    (PrivateMariaDb::start_with(&options).await, certs)
}

/// A config for database `db` on `server` with `params` in the URL.
fn config_with(server: &PrivateMariaDb, db: &str, params: &str) -> Config {
    let mut config = config(db);
    config.database_url = format!("{}/{db}?{params}", server.url()).into();
    config
}

/// The startup error of a broker with `config`, as a chain of causes.
async fn refused(config: Config) -> String {
    match Server::start(config).await {
        Ok(_) => panic!("the broker started"),
        Err(err) => format!("{err:#}"),
    }
}

#[tokio::test]
async fn a_broker_reaches_a_tls_only_server_by_its_ca_and_never_in_plain_text() {
    let (server, certs) = tls_server().await;
    let (ca, wrong) = (certs.file("good.pem"), certs.file("wrong.pem"));

    let db = fresh_db_name();
    let params = format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}");
    let broker = Broker::start_with(db.clone(), config_with(&server, &db, &params)).await;
    let c = broker.client();
    let lease = c.acquire("k", "w", 10_000, 0).await.unwrap();
    assert_eq!(lease.status, 200, "{lease:?}");
    let token = lease.json()["token"].as_u64().unwrap();
    let reply = c
        .post(
            "/v1/locks/k/release",
            &json!({"owner": "w", "token": token}),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    broker.stop().await;

    // The other modes that encrypt work too (the server takes nothing
    // else): without checking the certificate, or checking its CA only.
    for params in [
        "ssl-mode=PREFERRED".to_owned(),
        "ssl-mode=REQUIRED".to_owned(),
        format!("ssl-mode=VERIFY_CA&ssl-ca={ca}"),
    ] {
        let db = fresh_db_name();
        let broker = Broker::start_with(db.clone(), config_with(&server, &db, &params)).await;
        let lease = broker.client().acquire("k", "w", 10_000, 0).await.unwrap();
        assert_eq!(lease.status, 200, "{params}: {lease:?}");
        broker.stop().await;
    }

    // The server refuses a plain session (MariaDB answers it as access
    // denied; MySQL names the insecure transport): a startup error that
    // names the server, never a silent plain session.
    let err = refused(config_with(&server, &db, "ssl-mode=DISABLED")).await;
    assert!(err.contains(&server.host_port()), "{err}");
    assert!(
        err.contains("Access denied") || err.contains("insecure transport"),
        "{err}"
    );
    // A CA that did not sign the server's certificate.
    let params = format!("ssl-mode=VERIFY_CA&ssl-ca={wrong}");
    let err = refused(config_with(&server, &db, &params)).await;
    assert!(err.to_lowercase().contains("certificate"), "{err}");
}
