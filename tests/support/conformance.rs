//! What every client's conformance suite runs against
//! (`clients/CONFORMANCE.md`): two brokers on one fresh database — one over
//! plain HTTP, one over HTTPS with mutual TLS — with the tenants the
//! scenarios need, handed to a client's own test runner as environment
//! variables.

use std::time::Duration;

use lockbroker::config::{TenantConfig, TlsConfig};

use crate::{config, fresh_db_name, Broker, Certs, ADMIN, KEY, OTHER_KEY};

/// The key of tenant `limited`, whose rate is [`LIMITED_PER_S`] a second
/// (burst as much): enough for a scenario to meet a `429 rate_limited`.
pub const LIMITED_KEY: &str = "limited-key";
pub const LIMITED_PER_S: u32 = 2;

/// The brokers of one conformance run.
pub struct Conformance {
    plain: Broker,
    tls: Broker,
    certs: Certs,
}

impl Conformance {
    /// Starts both brokers, with certificates made for this run: a CA
    /// `ca` that signed the broker's certificate (for 127.0.0.1 and
    /// localhost), a CA `clients-ca` that signed `client`'s, and a CA
    /// `stranger-ca` that signed `stranger`'s (refused by the broker).
    pub async fn start() -> Conformance {
        let certs = Certs::new();
        certs
            .ca("ca")
            .signed("server", "lockbroker", "ca")
            .ca("clients-ca")
            .signed("client", "conformance-client", "clients-ca")
            .ca("stranger-ca")
            .signed("stranger", "stranger", "stranger-ca");
        let db = fresh_db_name();
        let mut plain = config(&db);
        let mut limited = TenantConfig::new("limited", LIMITED_KEY);
        limited.max_requests_per_s = Some(LIMITED_PER_S);
        limited.max_requests_burst = Some(LIMITED_PER_S);
        plain.tenants.push(limited);
        plain.validate().expect("conformance config is valid");
        let mut tls = plain.clone();
        tls.tls = Some(TlsConfig {
            cert_file: certs.path("server.pem"),
            key_file: certs.path("server.key"),
            client_ca_file: Some(certs.path("clients-ca.pem")),
            peer_ca_file: Some(certs.path("ca.pem")),
        });
        let plain = Broker::start_with(db.clone(), plain).await;
        // The same database: `stop` shuts the second down keeping it.
        let tls = Broker::start_with(db.clone(), tls).await;
        Conformance { plain, tls, certs }
    }

    /// What a client's test runner is given:
    ///
    /// - `LOCKBROKER_URL`, `LOCKBROKER_API_KEY` (tenant `default`),
    ///   `LOCKBROKER_OTHER_API_KEY` (tenant `other`),
    ///   `LOCKBROKER_LIMITED_API_KEY` (tenant `limited`, rate-limited),
    ///   `LOCKBROKER_ADMIN_TOKEN`;
    /// - `LOCKBROKER_TLS_URL` (`https://127.0.0.1:PORT`, mutual TLS, same
    ///   database and tenants), `LOCKBROKER_TEST_CA_FILE` (the broker's
    ///   CA), `LOCKBROKER_TEST_CLIENT_CERT` / `LOCKBROKER_TEST_CLIENT_KEY`
    ///   (accepted), `LOCKBROKER_TEST_STRANGER_CERT` /
    ///   `LOCKBROKER_TEST_STRANGER_KEY` (signed by another CA: refused).
    ///
    /// The TLS files are under `_TEST_` names so that a client reading
    /// `LOCKBROKER_CA_FILE` and friends from its environment does not
    /// apply them to the plain broker; a scenario sets them itself.
    pub fn env(&self) -> Vec<(String, String)> {
        let file = |name: &str| self.certs.file(name);
        [
            ("LOCKBROKER_URL", self.plain.url().to_owned()),
            ("LOCKBROKER_API_KEY", KEY.to_owned()),
            ("LOCKBROKER_OTHER_API_KEY", OTHER_KEY.to_owned()),
            ("LOCKBROKER_LIMITED_API_KEY", LIMITED_KEY.to_owned()),
            ("LOCKBROKER_ADMIN_TOKEN", ADMIN.to_owned()),
            (
                "LOCKBROKER_TLS_URL",
                self.tls.url().replace("http://", "https://"),
            ),
            ("LOCKBROKER_TEST_CA_FILE", file("ca.pem")),
            ("LOCKBROKER_TEST_CLIENT_CERT", file("client.pem")),
            ("LOCKBROKER_TEST_CLIENT_KEY", file("client.key")),
            ("LOCKBROKER_TEST_STRANGER_CERT", file("stranger.pem")),
            ("LOCKBROKER_TEST_STRANGER_KEY", file("stranger.key")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Runs `cmd` (a client's test runner) with [`Conformance::env`] to
    /// its end within `limit`, killing it if it overruns; prints what it
    /// wrote (cargo shows it for a failing test) and returns it.
    pub async fn run(
        &self,
        what: &str,
        cmd: &mut tokio::process::Command,
        limit: Duration,
    ) -> std::process::Output {
        cmd.envs(self.env());
        run(what, cmd, limit).await
    }

    /// Stops both brokers and drops the database.
    pub async fn stop(self) {
        self.tls.shutdown().await;
        self.plain.stop().await;
    }
}

/// Runs `cmd` to its end within `limit` (killed if it overruns), printing
/// what it wrote.
///
/// # Panics
/// It cannot start, or overruns.
pub async fn run(
    what: &str,
    cmd: &mut tokio::process::Command,
    limit: Duration,
) -> std::process::Output {
    let child = cmd.kill_on_drop(true).output();
    let out = tokio::time::timeout(limit, child)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{what} could not start: {e}"));
    println!(
        "--- {what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
