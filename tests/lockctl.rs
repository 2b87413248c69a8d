//! `lockctl` as a user runs it: a separate process talking to a broker.

use std::process::Output;

use lockbroker_tests::{bin, Broker, KEY};

async fn lockctl(broker: &Broker, args: &[&str]) -> Output {
    tokio::process::Command::new(bin("lockctl"))
        .args(args)
        .env("LOCKBROKER_URL", broker.url())
        .env("LOCKBROKER_API_KEY", KEY)
        .env_remove("LOCKBROKER_OWNER")
        .output()
        .await
        .expect("run lockctl")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "lockctl printed no JSON: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test]
async fn acquire_status_renew_release() {
    let broker = Broker::start().await;
    let out = lockctl(
        &broker,
        &["acquire", "cli-job", "--owner", "me", "--ttl-ms", "60000"],
    )
    .await;
    assert!(out.status.success());
    let token = json(&out)["token"].as_u64().unwrap();
    let t = token.to_string();

    let out = lockctl(&broker, &["acquire", "cli-job", "--owner", "you"]).await;
    assert_eq!(out.status.code(), Some(1), "refused: exit 1");
    assert_eq!(json(&out)["error"]["code"], "lock_held");

    let out = lockctl(&broker, &["status", "cli-job"]).await;
    assert_eq!(json(&out)["owner"], "me");
    let out = lockctl(
        &broker,
        &["renew", "cli-job", "--owner", "me", "--token", &t],
    )
    .await;
    assert!(out.status.success());
    let out = lockctl(
        &broker,
        &["release", "cli-job", "--owner", "me", "--token", &t],
    )
    .await;
    assert!(out.status.success());
    assert_eq!(json(&out)["released"], true);
    let out = lockctl(
        &broker,
        &["release", "cli-job", "--owner", "me", "--token", &t],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["code"], "lease_lost");

    // A wrong key and an unreachable broker are told apart.
    let out = tokio::process::Command::new(bin("lockctl"))
        .args(["status", "x"])
        .env("LOCKBROKER_URL", broker.url())
        .env("LOCKBROKER_API_KEY", "wrong")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["code"], "unauthenticated");
    let out = tokio::process::Command::new(bin("lockctl"))
        .args(["status", "x"])
        .env("LOCKBROKER_URL", "http://127.0.0.1:1")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    broker.stop().await;
}

#[tokio::test]
async fn run_holds_the_lock_while_the_command_runs() {
    let broker = Broker::start().await;
    // The command checks, from inside, that the lock is held, and that the
    // lease outlives its 600 ms TTL because lockctl renews it.
    let script = format!(
        "sleep 1.2; {} status held-job | grep -q '\"held\":true' && exit 7",
        bin("lockctl").display()
    );
    let out = lockctl(
        &broker,
        &[
            "run", "held-job", "--ttl-ms", "600", "--", "sh", "-c", &script,
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(7),
        "exit status of the command: {out:?}"
    );
    let status = broker.client().status("held-job").await.unwrap();
    assert_eq!(status.body["held"], false, "released after the command");

    // A held lock: run waits up to --wait-ms, then gives up with 75.
    broker
        .client()
        .acquire("busy", "other", 60_000, 0)
        .await
        .unwrap();
    let out = lockctl(&broker, &["run", "busy", "--wait-ms", "200", "--", "true"]).await;
    assert_eq!(out.status.code(), Some(75));
    broker.stop().await;
}

#[tokio::test]
async fn run_stops_the_command_when_the_lease_is_lost() {
    let broker = Broker::start().await;
    let c = broker.client();
    let runner = {
        let url = broker.url().to_owned();
        tokio::spawn(async move {
            tokio::process::Command::new(bin("lockctl"))
                .args([
                    "run", "lost", "--owner", "runner", "--ttl-ms", "900", "--", "sleep", "30",
                ])
                .env("LOCKBROKER_URL", url)
                .env("LOCKBROKER_API_KEY", KEY)
                .output()
                .await
                .unwrap()
        })
    };
    // Wait for the grant, then steal the lease behind lockctl's back by
    // expiring it in the database.
    let mut token = None;
    for _ in 0..50 {
        let s = c.status("lost").await.unwrap();
        if s.body["held"] == true {
            token = s.body["token"].as_u64();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(token.is_some(), "lockctl run took the lock");
    let mut db = lockbroker_tests::db_conn(&broker.db).await;
    sqlx::query("UPDATE locks SET expires_at = NOW(6) - INTERVAL 1 SECOND")
        .execute(&mut db)
        .await
        .unwrap();
    let thief = c.acquire("lost", "thief", 60_000, 0).await.unwrap();
    assert_eq!(thief.status, 200);
    let started = std::time::Instant::now();
    let out = runner.await.unwrap();
    assert_eq!(out.status.code(), Some(76), "{out:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "sleep 30 was stopped"
    );
    broker.stop().await;
}
