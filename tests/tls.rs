//! The HTTPS listener (`[tls]`) against real TLS clients (`curl`,
//! `openssl s_client`): the API over https with the broker's CA; mutual
//! TLS refusing a client without a certificate of the client CA in the
//! handshake; new certificate files taken without a restart (also under
//! a load of the Rust client, with no failed request), a broken one logged
//! and the old one kept; push wake-ups between brokers over mutual TLS.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::process::Command;

use lockbroker::{config::TlsConfig, Config};
use lockbroker_tests::{config, eventually, fresh_db_name, Broker, Certs, KEY};

/// A broker serving https with `certs`' `server` certificate.
async fn https_broker(certs: &Certs, client_ca: Option<&str>) -> Broker {
    https_broker_on(fresh_db_name(), certs, client_ca).await
}

/// [`https_broker`] on database `db` (another broker's, for two).
async fn https_broker_on(db: String, certs: &Certs, client_ca: Option<&str>) -> Broker {
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
    // The certificate's expiry is a gauge (the test CA signs for 2 days).
    let (code, out) = curl(&["--cacert", &ca, &format!("{url}/metrics")]).await;
    assert_eq!(code, 0, "{out}");
    let expiry: i64 = out
        .lines()
        .find_map(|l| l.strip_prefix("lockbroker_tls_certificate_expiry_timestamp_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no expiry gauge in {out}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let in_two_days = now + 2 * 86_400;
    assert!(
        (expiry - in_two_days).abs() < 600,
        "{expiry} vs {in_two_days}"
    );
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

/// A Rust client of `url` trusting `certs`' CA, presenting `server`'s
/// certificate (the test brokers' client CA is their own CA).
fn rust_client(certs: &Certs, url: &str) -> lockbroker_client::Client {
    lockbroker_client::Client::builder(url)
        .api_key(KEY)
        .ca_file(certs.path("ca.pem"))
        .client_cert(certs.path("server.pem"), certs.path("server.key"))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_with_no_failed_request() {
    let (certs, broker, url) = serving("first").await;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::new()));
    // Half the clients keep their connections, half shake hands anew for
    // every pair (a fresh client each time): rotation meets both.
    let load: Vec<_> = (0..8)
        .map(|i| {
            let (stop, failures, certs_dir) =
                (stop.clone(), failures.clone(), certs.dir().to_owned());
            let url = url.clone();
            tokio::spawn(async move {
                let kept = lockbroker_client::Client::builder(&url)
                    .api_key(KEY)
                    .ca_file(certs_dir.join("ca.pem"))
                    .build()
                    .unwrap();
                let mut pairs = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let client = if i % 2 == 0 {
                        kept.clone()
                    } else {
                        lockbroker_client::Client::builder(&url)
                            .api_key(KEY)
                            .ca_file(certs_dir.join("ca.pem"))
                            .build()
                            .unwrap()
                    };
                    let pair = async {
                        let guard = client
                            .lock(format!("rotating-{i}"))
                            .ttl(Duration::from_secs(30))
                            .acquire()
                            .await?;
                        guard.release().await
                    };
                    match pair.await {
                        Ok(()) => pairs += 1,
                        Err(err) => failures.lock().unwrap().push(err.to_string()),
                    }
                }
                pairs
            })
        })
        .collect();

    // Three renewals of the certificate, each taken (new handshakes see
    // it) while the load runs.
    for (n, cn) in ["second", "third", "fourth"].into_iter().enumerate() {
        let name = format!("renewed-{n}");
        certs.signed(&name, cn, "ca");
        // Each file replaced whole (a rename), the key first: the watcher
        // may meet the new key with the old certificate, which does not
        // load and is not taken; the certificate comes next.
        for ext in ["key", "pem"] {
            let staged = certs.path(&format!("{name}.staged.{ext}"));
            std::fs::copy(certs.path(&format!("{name}.{ext}")), &staged).unwrap();
            std::fs::rename(&staged, certs.path(&format!("server.{ext}"))).unwrap();
        }
        eventually(
            "the renewed certificate is presented",
            Duration::from_secs(10),
            || async { presented_cn(&certs, &url).await.contains(cn) },
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut pairs = 0;
    for task in load {
        pairs += task.await.unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} failed pairs during rotation, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(pairs >= 16, "the load ran ({pairs} pairs)");
    broker.stop().await;
}

#[tokio::test]
async fn push_wake_ups_travel_between_brokers_over_mutual_tls() {
    let certs = Certs::new();
    certs.ca("ca").signed("server", "broker", "ca");
    let db = fresh_db_name();
    let a = https_broker_on(db.clone(), &certs, Some("ca.pem")).await;
    let b = https_broker_on(db.clone(), &certs, Some("ca.pem")).await;
    let (ca, cb) = (
        rust_client(&certs, &https(&a)),
        rust_client(&certs, &https(&b)),
    );
    // Pushed over https by a, presenting its certificate; taken by b.
    let metric = |url: String, series: &'static str| {
        let certs = &certs;
        async move {
            let (code, text) = curl(&[
                "--cacert",
                &certs.file("ca.pem"),
                "--cert",
                &certs.file("server.pem"),
                "--key",
                &certs.file("server.key"),
                &format!("{url}/metrics"),
            ])
            .await;
            assert_eq!(code, 0, "{text}");
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        }
    };
    // A push races b's own poll (every 10 ms) for the handoff: on a busy
    // machine the poll can win a few rounds, so rounds go on until one
    // push was taken (or 30 rounds).
    for round in 0..30 {
        let held = ca
            .lock("pushed")
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let waiter = {
            let cb = cb.clone();
            tokio::spawn(async move {
                cb.lock("pushed")
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
            })
        };
        eventually("the waiter is queued", Duration::from_secs(10), || async {
            ca.locks()
                .status("pushed")
                .await
                .is_ok_and(|s| s.waiters == 1)
        })
        .await;
        let token = held.token();
        held.release().await.unwrap();
        let next = waiter.await.unwrap().unwrap();
        assert!(next.token() > token, "round {round}: handed on");
        next.release().await.unwrap();
        let taken = metric(https(&b), "lockbroker_wakeups_total{via=\"push\"}").await;
        if round >= 4 && taken >= 1.0 {
            break;
        }
    }
    let sent = metric(https(&a), "lockbroker_wake_pushes_total{result=\"ok\"}").await;
    let failed = metric(https(&a), "lockbroker_wake_pushes_total{result=\"failed\"}").await;
    let pushed = metric(https(&b), "lockbroker_wakeups_total{via=\"push\"}").await;
    assert_eq!(failed, 0.0, "no push failed");
    assert!(
        sent >= 1.0 && pushed >= 1.0,
        "pushes sent {sent}, taken {pushed}"
    );
    b.shutdown().await;
    a.stop().await;
}
