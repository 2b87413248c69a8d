//! The HTTPS listener (`[tls]`) against real TLS clients (`curl`,
//! `openssl s_client`): the API over https with the broker's CA; mutual
//! TLS refusing a client without a certificate of the client CA in the
//! handshake; new certificate files taken without a restart, a broken one
//! logged and the old one kept.

use std::time::Duration;

use tokio::process::Command;

use lockbroker::{config::TlsConfig, Config};
use lockbroker_tests::{config, eventually, fresh_db_name, Broker, Certs, KEY};

/// A broker serving https with `certs`' `server` certificate.
async fn https_broker(certs: &Certs, client_ca: Option<&str>) -> Broker {
    let db = fresh_db_name();
    let mut config: Config = config(&db);
    config.tls = Some(TlsConfig {
        cert_file: certs.path("server.pem"),
        key_file: certs.path("server.key"),
        client_ca_file: client_ca.map(|ca| certs.path(ca)),
        peer_ca_file: Some(certs.path("ca.pem")),
    });
    Broker::start_with(db, config).await
}

/// A broker serving https with a certificate named `cn` of the CA `ca`;
/// its certificates and https URL.
async fn serving(cn: &str) -> (Certs, Broker, String) {
    let certs = Certs::new();
    certs.ca("ca").signed("server", cn, "ca");
    let broker = https_broker(&certs, None).await;
    let url = https(&broker);
    (certs, broker, url)
}

/// `https://127.0.0.1:PORT` of `broker`.
fn https(broker: &Broker) -> String {
    broker.url().replace("http://", "https://")
}

/// `curl` with `args`: its exit code and what it printed. (Not blocking:
/// the broker answers on this test's runtime.)
async fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .output()
        .await
        .expect("curl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// The subject of the certificate `url`'s server presents, as curl
/// reports it (`CN=...`).
async fn presented_cn(certs: &Certs, url: &str) -> String {
    let (_, out) = curl(&[
        "--verbose",
        "--cacert",
        &certs.file("ca.pem"),
        &format!("{url}/healthz"),
    ])
    .await;
    out.lines()
        .find_map(|line| line.trim_start_matches(['*', ' ']).strip_prefix("subject:"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn the_api_is_served_over_https_and_not_in_plain_text() {
    let (certs, broker, url) = serving("first").await;
    let auth = format!("Authorization: Bearer {KEY}");
    let ca = certs.file("ca.pem");
    let (code, out) = curl(&[
        "--cacert",
        &ca,
        "-H",
        &auth,
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"owner": "w"}"#,
        &format!("{url}/v1/locks/k/acquire"),
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(r#""token":1"#), "{out}");
    // The same JSON errors.
    let (code, out) = curl(&["--cacert", &ca, &format!("{url}/v1/locks/k")]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("unauthenticated"), "{out}");
    // Plain HTTP to the TLS port gets no answer; a client that does not
    // trust the CA refuses the broker.
    let (code, _) = curl(&[&format!("{}/healthz", broker.url())]).await;
    assert_ne!(code, 0);
    let (code, out) = curl(&[&format!("{url}/healthz")]).await;
    assert_ne!(code, 0, "{out}");
}

#[tokio::test]
async fn with_a_client_ca_a_client_needs_its_certificate_to_shake_hands() {
    let certs = Certs::new();
    certs
        .ca("ca")
        .ca("clients")
        .ca("other")
        .signed("server", "broker", "ca")
        .signed("client", "worker", "clients")
        .signed("stranger", "stranger", "other");
    let broker = https_broker(&certs, Some("clients.pem")).await;
    let healthz = format!("{}/healthz", https(&broker));
    let ca = certs.file("ca.pem");
    let (code, out) = curl(&["--cacert", &ca, &healthz]).await;
    assert_ne!(code, 0, "no certificate: {out}");
    let (cert, key) = (certs.file("stranger.pem"), certs.file("stranger.key"));
    let (code, out) = curl(&["--cacert", &ca, "--cert", &cert, "--key", &key, &healthz]).await;
    assert_ne!(code, 0, "another CA's certificate: {out}");
    let (cert, key) = (certs.file("client.pem"), certs.file("client.key"));
    let (code, out) = curl(&["--cacert", &ca, "--cert", &cert, "--key", &key, &healthz]).await;
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn new_certificate_files_are_taken_without_a_restart_and_broken_ones_are_not() {
    let (certs, _broker, url) = serving("first").await;
    assert!(presented_cn(&certs, &url).await.contains("first"));

    // A renewed certificate, written over the old files.
    certs.signed("renewed", "second", "ca");
    std::fs::copy(certs.path("renewed.key"), certs.path("server.key")).unwrap();
    std::fs::copy(certs.path("renewed.pem"), certs.path("server.pem")).unwrap();
    eventually(
        "the renewed certificate is presented",
        Duration::from_secs(10),
        || async { presented_cn(&certs, &url).await.contains("second") },
    )
    .await;

    // A broken file: logged, and the renewed certificate stays in force
    // (watched over several of the watcher's checks).
    std::fs::write(certs.path("server.pem"), "not a certificate").unwrap();
    let until = std::time::Instant::now() + 3 * lockbroker::tls::CHECK_EVERY;
    while std::time::Instant::now() < until {
        assert!(presented_cn(&certs, &url).await.contains("second"));
        let (code, out) =
            curl(&["--cacert", &certs.file("ca.pem"), &format!("{url}/healthz")]).await;
        assert_eq!(code, 0, "{out}");
    }
}
