//! TLS to the database: a private MariaDB with a certificate of a test CA
//! and `require_secure_transport=ON` (a plain TCP session is refused), and
//! brokers whose `database_url` asks for `ssl-mode` as the MySQL clients
//! spell it. With `VERIFY_IDENTITY` and the right CA the broker works end
//! to end; `DISABLED` and a wrong CA under `VERIFY_CA` are startup errors
//! that say why.

use std::{path::Path, process::Command};

use lockbroker::{Config, Server};
use lockbroker_tests::{config, fresh_db_name, Broker, PrivateMariaDb};
use serde_json::json;

/// Runs `openssl args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`{name}-ca.pem`) in `dir`.
fn ca(dir: &Path, name: &str) {
    let (key, cert) = (format!("{name}-ca.key"), format!("{name}-ca.pem"));
    openssl(dir, &["genrsa", "-out", &key, "2048"]);
    let subject = format!("/CN={name} test CA");
    openssl(
        dir,
        &[
            "req", "-x509", "-new", "-key", &key, "-days", "2", "-subj", &subject, "-out", &cert,
        ],
    );
}

/// The server's key and certificate, signed by the CA `good`, for
/// 127.0.0.1 and localhost.
fn server_cert(dir: &Path) {
    openssl(dir, &["genrsa", "-out", "server.key", "2048"]);
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "server.key",
            "-subj",
            "/CN=127.0.0.1",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "good-ca.pem",
            "-CAkey",
            "good-ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    );
}

/// A private MariaDB that takes TLS sessions only, and the directory of
/// its certificates.
async fn tls_server() -> (PrivateMariaDb, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    ca(dir.path(), "good");
    ca(dir.path(), "wrong");
    server_cert(dir.path());
    // mariadbd may run as `mysql`: it must read them.
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let path = file.unwrap().path();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
    }
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let file = |name: &str| dir.path().join(name).display().to_string();
    let options = [
        format!("--ssl-ca={}", file("good-ca.pem")),
        format!("--ssl-cert={}", file("server.pem")),
        format!("--ssl-key={}", file("server.key")),
        "--require-secure-transport=ON".to_owned(),
    ];
    (PrivateMariaDb::start_with(&options).await, dir)
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
    let ca = certs.path().join("good-ca.pem").display().to_string();
    let wrong = certs.path().join("wrong-ca.pem").display().to_string();

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

/// A directory removed when dropped.
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("lbt-tls-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir(&path).unwrap();
            Dir(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
