//! Config reload without a restart (`POST /v1/admin/reload`, SIGHUP):
//! tenants added and removed (a removed tenant's leases come back with
//! it), keys rotated and limits changed while an unchanged tenant's load
//! runs without a failed request; an invalid config refused whole; settings
//! that need a restart reported, not applied; every reload audited; and no
//! key or token in the broker's log.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use lockbroker::Config;
use lockbroker_api::ErrorCode;
use lockbroker_tests::{
    eventually, fresh_db_name, server_url, Broker, BrokerProcess, Client, ADMIN, KEY, OTHER_KEY,
};
use serde_json::Value;

/// A config file in a directory of the test's own, removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new() -> ConfigFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lbt-reload-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        ConfigFile(dir.join("lockbroker.toml"))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, text: &str) {
        // Whole or not at all, as an editor or a deploy tool would.
        let tmp = self.0.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.0).unwrap();
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A broker's config on database `db` with `tenants` (TOML tables).
fn config_text(db: &str, top: &str, tenants: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"{}/{db}\"\nadmin_token = \"{ADMIN}\"\nmax_connections = 16\n{top}\n{tenants}",
        server_url()
    )
}

fn tenant(name: &str, keys: &[&str], extra: &str) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "[[tenant]]\nname = \"{name}\"\napi_keys = [{}]\n{extra}\n",
        keys.join(", ")
    )
}

async fn reload(admin: &Client) -> (u16, Value) {
    let reply = admin
        .send(
            hyper::Method::POST,
            "/v1/admin/reload",
            &[],
            bytes::Bytes::new(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    (reply.status, reply.json())
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// The status of an acquire of a fresh key with `key` as the bearer.
async fn acquire_as(url: &str, key: &str, lock: &str) -> u16 {
    Client::new(url, Some(key))
        .unwrap()
        .acquire(lock, "o", 60_000, 0)
        .await
        .unwrap()
        .status
}

#[tokio::test]
async fn reload_applies_tenants_keys_and_limits_and_refuses_a_bad_config() {
    let db = fresh_db_name();
    let file = ConfigFile::new();
    let default = |extra: &str| tenant("default", &[KEY], extra);
    let other = tenant("other", &[OTHER_KEY], "");
    file.write(&config_text(&db, "", &(default("") + &other)));
    let config = Config::load(Some(file.path())).unwrap();
    let broker = Broker::start_with(db.clone(), config).await;
    let url = broker.url().to_owned();
    let admin = broker.client_with(Some(ADMIN));

    // Before any reload: the file, and no attempt yet.
    let status = admin.get("/v1/admin/reload").await.unwrap();
    assert_eq!(status.status, 200, "{}", status.text());
    let status = status.json();
    assert_eq!(status["file"], file.path().display().to_string());
    assert!(status["last"].is_null(), "{status}");

    // `other` holds a lock, then is removed; `third` comes; `default`
    // gets a second key and a quota of one lease.
    assert_eq!(acquire_as(&url, OTHER_KEY, "kept").await, 200);
    file.write(&config_text(
        &db,
        "",
        &(tenant("default", &[KEY, "new-key"], "max_held = 1")
            + &tenant("third", &["third-key"], "")),
    ));
    let (code, body) = reload(&admin).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["reloaded"], true);
    let mut changed = strings(&body["changed"]);
    changed.sort();
    assert_eq!(
        changed,
        [
            "tenant default: api_keys, max_held",
            "tenant other removed",
            "tenant third added"
        ],
        "{body}"
    );
    assert!(strings(&body["needs_restart"]).is_empty(), "{body}");
    assert_eq!(acquire_as(&url, "new-key", "one").await, 200);
    let over = Client::new(&url, Some(KEY))
        .unwrap()
        .acquire("two", "o", 60_000, 0)
        .await
        .unwrap();
    assert_eq!(over.status, 429, "{}", over.text());
    assert_eq!(over.code(), Some(ErrorCode::QuotaExceeded));
    assert_eq!(acquire_as(&url, "third-key", "t").await, 200);
    assert_eq!(acquire_as(&url, OTHER_KEY, "x").await, 401);
    let tenants = admin.get("/v1/admin/tenants").await.unwrap().json();
    let names: Vec<&str> = tenants["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "third"]);

    // `other` comes back: its lease is still there.
    file.write(&config_text(
        &db,
        "",
        &(default("") + &tenant("third", &["third-key"], "") + &other),
    ));
    let (code, body) = reload(&admin).await;
    assert_eq!(code, 200, "{body}");
    let status = Client::new(&url, Some(OTHER_KEY))
        .unwrap()
        .status("kept")
        .await
        .unwrap();
    assert_eq!(status.json()["owner"], "o", "{}", status.text());
    // An admin ending it is audited too.
    let forced = admin
        .send(
            hyper::Method::POST,
            "/v1/admin/tenants/other/locks/kept/release",
            &[],
            bytes::Bytes::new(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(forced.status, 200, "{}", forced.text());
    assert_eq!(
        admin
            .counter("lockbroker_admin_actions_total{action=\"force_release\",result=\"ok\"}")
            .await,
        1
    );

    // An invalid config is refused whole: the one in force stays.
    file.write(&config_text(
        &db,
        "",
        &(default("max_held = 0") + &tenant("fourth", &["fourth-key"], "")),
    ));
    let (code, body) = reload(&admin).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_config");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_held"),
        "{body}"
    );
    assert_eq!(acquire_as(&url, "fourth-key", "f").await, 401);
    assert_eq!(acquire_as(&url, "third-key", "t2").await, 200);
    let last = admin.get("/v1/admin/reload").await.unwrap().json()["last"].clone();
    assert_eq!(last["reloaded"], false, "{last}");
    assert_eq!(last["by"], "api");
    assert!(
        last["error"].as_str().unwrap().contains("max_held"),
        "{last}"
    );

    // What needs a restart is said, and not applied.
    file.write(&config_text(&db, "", &(default("") + &other)).replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:1\"\nreaper_interval_ms = 50",
    ));
    let (code, body) = reload(&admin).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        strings(&body["needs_restart"]),
        ["listen", "reaper_interval_ms"]
    );
    assert_eq!(acquire_as(&url, KEY, "still-here").await, 200);

    // Audited: counted by result.
    assert_eq!(
        admin
            .counter("lockbroker_admin_actions_total{action=\"reload\",result=\"ok\"}")
            .await,
        3
    );
    assert_eq!(
        admin
            .counter("lockbroker_admin_actions_total{action=\"reload\",result=\"error\"}")
            .await,
        1
    );
    broker.stop().await;
}

/// Sends SIGHUP and waits until the reload it asked for is counted (the
/// `n`th since start); that reload, as `GET /v1/admin/reload` shows it.
async fn hang_up(broker: &BrokerProcess, admin: &Client, metrics: &Client, n: u64) -> Value {
    broker.signal("HUP").await;
    eventually("the reload is counted", Duration::from_secs(10), || async {
        let counted = |result: &str| {
            format!("lockbroker_admin_actions_total{{action=\"reload\",result=\"{result}\"}}")
        };
        metrics.counter(&counted("ok")).await + metrics.counter(&counted("error")).await >= n
    })
    .await;
    admin.get("/v1/admin/reload").await.unwrap().json()["last"].clone()
}

/// `default`'s own keys, taken and given back by `n` clients until `stop`:
/// every answer must be 200 (its config never changes). How many rounds.
fn steady_load(
    url: &str,
    n: usize,
    stop: Arc<AtomicBool>,
    failures: Arc<Mutex<Vec<String>>>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..n)
        .map(|i| {
            let client = Client::new(url, Some(KEY)).unwrap();
            let (stop, failures) = (stop.clone(), failures.clone());
            tokio::spawn(async move {
                let key = format!("steady-{i}");
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) {
                    let got = client.acquire(&key, "steady", 30_000, 0).await;
                    let token = match got {
                        Ok(r) if r.status == 200 => r.json()["token"].as_u64().unwrap(),
                        other => {
                            failures.lock().unwrap().push(format!("acquire: {other:?}"));
                            continue;
                        }
                    };
                    match client.release(&key, "steady", token).await {
                        Ok(r) if r.status == 200 => rounds += 1,
                        other => failures.lock().unwrap().push(format!("release: {other:?}")),
                    }
                }
                rounds
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_keys_and_onboards_tenants_under_load_and_logs_no_secret() {
    const METRICS: &str = "metrics-secret-token";
    let db = fresh_db_name();
    let (broker, log) =
        BrokerProcess::start_logged(&db, &format!("metrics_token = \"{METRICS}\""), &[]).await;
    let started = std::fs::read_to_string(broker.config_path()).unwrap();
    let url = broker.url.clone();
    let admin = Client::new(&url, Some(ADMIN)).unwrap();
    let metrics = admin.with_bearer(Some(METRICS));
    let write = |tenants: &str| {
        let path = broker.config_path();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{started}{tenants}")).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    };
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let load = steady_load(&url, 8, stop.clone(), failures.clone());

    // Onboard a team with one key.
    write(&tenant("rotating", &["key-1"], ""));
    let last = hang_up(&broker, &admin, &metrics, 1).await;
    assert_eq!(last["by"], "sighup", "{last}");
    assert_eq!(strings(&last["changed"]), ["tenant rotating added"]);
    assert_eq!(acquire_as(&url, "key-1", "r1").await, 200);

    // Rotate: the new key next to the old, then the old one gone.
    write(&tenant("rotating", &["key-1", "key-2"], ""));
    hang_up(&broker, &admin, &metrics, 2).await;
    assert_eq!(acquire_as(&url, "key-2", "r2").await, 200);
    assert_eq!(acquire_as(&url, "key-1", "r3").await, 200);
    write(&tenant("rotating", &["key-2"], ""));
    hang_up(&broker, &admin, &metrics, 3).await;
    assert_eq!(acquire_as(&url, "key-1", "r4").await, 401);
    assert_eq!(acquire_as(&url, "key-2", "r5").await, 200);

    // A broken file is refused; everything keeps working.
    write("[[tenant]\nname = ");
    let last = hang_up(&broker, &admin, &metrics, 4).await;
    assert_eq!(last["reloaded"], false, "{last}");
    assert_eq!(acquire_as(&url, "key-2", "r6").await, 200);

    // Offboard the team.
    write("");
    let last = hang_up(&broker, &admin, &metrics, 5).await;
    assert_eq!(strings(&last["changed"]), ["tenant rotating removed"]);
    assert_eq!(acquire_as(&url, "key-2", "r7").await, 401);

    stop.store(true, Ordering::Relaxed);
    let mut rounds = 0;
    for task in load {
        rounds += task.await.unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} failed requests of the unchanged tenant, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(rounds >= 8, "the load ran ({rounds} rounds)");

    // Audited in the log; no key, token or digest of one in it.
    assert_eq!(metrics.get("/metrics").await.unwrap().status, 200);
    let unknown = Client::new(&url, Some("not-a-key-of-anyone"))
        .unwrap()
        .acquire("x", "o", 1000, 0)
        .await
        .unwrap();
    assert_eq!(unknown.status, 401);
    broker.stop().await;
    let lines = log.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("lockbroker::audit") && l.contains("config reloaded")),
        "an audit line per reload"
    );
    for secret in [KEY, ADMIN, METRICS, "key-1", "key-2", "not-a-key-of-anyone"] {
        let digest = lockbroker::secret::digest_text(secret);
        let hex = digest.trim_start_matches("sha256:");
        for line in &lines {
            assert!(
                !line.contains(secret) && !line.contains(hex),
                "a secret ({secret}) or its digest in the log: {line}"
            );
        }
    }
    lockbroker_tests::drop_db(&db).await;
}
