//! `lockctl` as a user runs it: a separate process talking to a broker.

use std::{process::Output, time::Duration};

use lockbroker_api::{
    ElectionEvent, ElectionStatus, ErrorBody, ErrorCode, Lease, LockEventKind, LockHistory,
    LockStatus, ReleaseResponse, ResourceKind, RwLockStatus, SemaphoreStatus, StreamEvent,
    TenantInfo,
};
use lockbroker_tests::{bin, eventually, eventually_some, Broker, Conformance, Proxy, KEY};
use serde::de::DeserializeOwned;

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

/// What lockctl printed, read as `T` (it prints the API's documents).
fn parsed<T: DeserializeOwned>(out: &Output) -> T {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "lockctl printed no {}: {e}: {} / {}",
            std::any::type_name::<T>(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The code of the API error lockctl printed.
fn code(out: &Output) -> ErrorCode {
    parsed::<ErrorBody>(out).error.code
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
    let token = parsed::<Lease>(&out).token;
    let t = token.to_string();

    let out = lockctl(&broker, &["acquire", "cli-job", "--owner", "you"]).await;
    assert_eq!(out.status.code(), Some(1), "refused: exit 1");
    assert_eq!(code(&out), ErrorCode::LockHeld);

    let out = lockctl(&broker, &["status", "cli-job"]).await;
    assert_eq!(parsed::<LockStatus>(&out).owner.as_deref(), Some("me"));
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
    assert!(parsed::<ReleaseResponse>(&out).released);
    let out = lockctl(
        &broker,
        &["release", "cli-job", "--owner", "me", "--token", &t],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(code(&out), ErrorCode::LeaseLost);

    // The history of what just happened, newest first (the refused
    // acquire and release are not in it).
    let out = lockctl(&broker, &["history", "cli-job"]).await;
    assert!(out.status.success());
    let events: Vec<_> = parsed::<LockHistory>(&out)
        .events
        .into_iter()
        .map(|e| (e.event, e.owner, e.token))
        .collect();
    assert_eq!(
        events,
        vec![
            (LockEventKind::Released, "me".to_owned(), token),
            (LockEventKind::Granted, "me".to_owned(), token),
        ]
    );
    let out = lockctl(&broker, &["history", "cli-job", "--limit", "1"]).await;
    assert_eq!(parsed::<LockHistory>(&out).events.len(), 1);
    let out = lockctl(&broker, &["history", "cli-job", "--limit", "0"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(code(&out), ErrorCode::BadRequest);

    // A wrong key and an unreachable broker are told apart.
    let out = tokio::process::Command::new(bin("lockctl"))
        .args(["status", "x"])
        .env("LOCKBROKER_URL", broker.url())
        .env("LOCKBROKER_API_KEY", "wrong")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(code(&out), ErrorCode::Unauthenticated);
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
    let status: LockStatus = broker.client().status("held-job").await.unwrap().ok();
    assert!(!status.held, "released after the command");

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
async fn session_run_holds_every_lock_in_one_session_while_the_command_runs() {
    let broker = Broker::start().await;
    let c = rust_client(&broker);
    // The command checks, from inside, that both locks are held in a
    // session, past the session's 1 s TTL because lockctl keeps it alive.
    let l = bin("lockctl").display().to_string();
    let script = format!(
        "sleep 1.5; for k in job-a job-b; do s=$({l} status $k) || exit 1; \
         echo \"$s\" | grep -q '\"held\":true' || exit 2; \
         echo \"$s\" | grep -q '\"session\":\"' || exit 3; done; exit 7"
    );
    let out = lockctl(
        &broker,
        &[
            "session", "run", "--ttl", "1s", "--name", "nightly", "--lock", "job-b", "--lock",
            "job-a", "--", "sh", "-c", &script,
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(7),
        "exit status of the command: {out:?}"
    );
    // Closed after the command: every lock free, the session gone.
    for key in ["job-a", "job-b"] {
        let status = c.locks().status(key).await.unwrap();
        assert!(!status.held, "released after the command: {status:?}");
    }
    assert!(c
        .sessions()
        .list("nightly", None, None)
        .await
        .unwrap()
        .items
        .is_empty());

    // A lock that cannot be had within --wait-ms: 75, and the lock taken
    // before it is released with the session.
    broker
        .client()
        .acquire("busy-b", "other", 60_000, 0)
        .await
        .unwrap();
    let out = lockctl(
        &broker,
        &[
            "session",
            "run",
            "--lock",
            "free-a",
            "--lock",
            "busy-b",
            "--wait-ms",
            "200",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(!c.locks().status("free-a").await.unwrap().held);

    // A bad --ttl is a usage error.
    let out = lockctl(
        &broker,
        &["session", "run", "--ttl", "15", "--lock", "x", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    broker.stop().await;
}

#[tokio::test]
async fn session_run_stops_the_command_when_the_session_is_lost() {
    let broker = Broker::start().await;
    let c = rust_client(&broker);
    let runner = {
        let url = broker.url().to_owned();
        tokio::spawn(async move {
            tokio::process::Command::new(bin("lockctl"))
                .args([
                    "session", "run", "--ttl", "3s", "--lock", "lost-a", "--lock", "lost-b", "--",
                    "sleep", "30",
                ])
                .env("LOCKBROKER_URL", url)
                .env("LOCKBROKER_API_KEY", KEY)
                .output()
                .await
                .unwrap()
        })
    };
    // Wait for both grants, then close the session behind lockctl's back.
    let session = eventually_some(
        "lockctl session run takes both locks",
        Duration::from_secs(10),
        || async {
            let a = c.locks().status("lost-a").await.ok()?;
            let b = c.locks().status("lost-b").await.ok()?;
            (a.held && b.held && a.session == b.session).then_some(a.session?)
        },
    )
    .await;
    let closed = c.sessions().close(&session).await.unwrap();
    assert_eq!(closed.released, 2);
    let started = std::time::Instant::now();
    let out = runner.await.unwrap();
    assert_eq!(out.status.code(), Some(76), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "sleep 30 was stopped"
    );
    broker.stop().await;
}

#[tokio::test]
async fn rw_holds_a_read_or_write_lease_while_the_command_runs() {
    let broker = Broker::start().await;
    // From inside a read held past its 600 ms TTL (lockctl renews it):
    // the rwlock shows a reader, a second reader gets in, a writer waits
    // out its --wait-ms and gives up with 75.
    let l = bin("lockctl").display().to_string();
    let script = format!(
        "sleep 1.2; {l} status --rwlock cfg | grep -q '\"readers\":\\[{{' || exit 1; \
         {l} rw read cfg --wait-ms 0 -- true || exit 2; \
         {l} rw write cfg --wait-ms 200 -- true; [ $? -eq 75 ] && exit 7"
    );
    let out = lockctl(
        &broker,
        &[
            "rw", "read", "cfg", "--ttl-ms", "600", "--", "sh", "-c", &script,
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(7),
        "exit status of the command: {out:?}"
    );
    let out = lockctl(&broker, &["status", "--rwlock", "cfg"]).await;
    let status: RwLockStatus = parsed(&out);
    assert!(
        status.readers.is_empty() && status.writer.is_none(),
        "{status:?}"
    );

    // A write excludes a reader: `rw read` exits 75, the write is released
    // after its command.
    let script = format!("{l} rw read cfg --wait-ms 100 -- true; [ $? -eq 75 ] && exit 9");
    let out = lockctl(&broker, &["rw", "write", "cfg", "--", "sh", "-c", &script]).await;
    assert_eq!(out.status.code(), Some(9), "{out:?}");
    let out = lockctl(
        &broker,
        &["rw", "write", "cfg", "--wait-ms", "0", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
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
    let holder = eventually_some(
        "lockctl run takes the lock",
        Duration::from_secs(10),
        || async {
            let status: LockStatus = c.status("lost").await.ok()?.try_parse()?;
            status.owner.filter(|_| status.held)
        },
    )
    .await;
    assert_eq!(holder, "runner");
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

/// A client of the new crate, for setting the scene.
fn rust_client(broker: &Broker) -> lockbroker_client::Client {
    lockbroker_client::Client::new(broker.url(), KEY).unwrap()
}

/// `node-1` leads the election `name`.
async fn lead(c: &lockbroker_client::Client, name: &str) -> lockbroker_client::LeaderGuard {
    c.election(name)
        .candidate("node-1")
        .campaign()
        .await
        .unwrap()
}

#[tokio::test]
async fn json_everywhere_and_status_of_semaphores_and_elections() {
    let broker = Broker::start().await;
    let c = rust_client(&broker);
    let permit = c.semaphore("pool", 2).acquire().await.unwrap();
    let leader = lead(&c, "sched").await;

    let out = lockctl(&broker, &["status", "--semaphore", "pool", "--json"]).await;
    assert!(out.status.success(), "{out:?}");
    let s: SemaphoreStatus = parsed(&out);
    assert_eq!(s.permits, Some(2));
    assert_eq!(s.holders[0].token, permit.token());

    let out = lockctl(&broker, &["--json", "status", "--election", "sched"]).await;
    assert!(out.status.success(), "{out:?}");
    let e: ElectionStatus = parsed(&out);
    assert_eq!(e.leader.as_deref(), Some("node-1"));
    assert_eq!(e.term, Some(leader.token()));

    // A lock's status, with and without --json: the same document.
    let plain: LockStatus = parsed(&lockctl(&broker, &["status", "free"]).await);
    let flagged: LockStatus = parsed(&lockctl(&broker, &["status", "free", "--json"]).await);
    assert_eq!(plain, flagged);
    assert!(!plain.held);

    // Exactly one of KEY, --semaphore, --election.
    let out = lockctl(&broker, &["status"]).await;
    assert_eq!(out.status.code(), Some(2));
    let out = lockctl(&broker, &["status", "k", "--election", "e"]).await;
    assert_eq!(out.status.code(), Some(2));

    // lockctl's own failures are JSON too with --json.
    let out = tokio::process::Command::new(bin("lockctl"))
        .args(["--json", "status", "x"])
        .env("LOCKBROKER_URL", "http://127.0.0.1:1")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    // lockctl's own code, not one of the API's: read as plain JSON.
    let own: serde_json::Value = parsed(&out);
    assert_eq!(own["error"]["code"], "unreachable");
    permit.release().await.unwrap();
    leader.release().await.unwrap();
    broker.stop().await;
}

/// A running lockctl's stdout, line by line.
type Lines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// The next line of a child's stdout, read as `T`, within 10 s.
async fn next_line<T: DeserializeOwned>(lines: &mut Lines) -> T {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .expect("the output goes on");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The next line of a child's stdout, as an election event, within 10 s.
async fn next_event(lines: &mut Lines) -> ElectionStatus {
    let ElectionEvent::Leader(status) = next_line(lines).await;
    status
}

#[tokio::test]
async fn watch_prints_each_change_of_leader() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let broker = Broker::start().await;
    let c = rust_client(&broker);
    let mut watcher = tokio::process::Command::new(bin("lockctl"))
        .args(["watch", "sched", "--json", "--count", "3"])
        .env("LOCKBROKER_URL", broker.url())
        .env("LOCKBROKER_API_KEY", KEY)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let first = next_event(&mut lines).await;
    assert_eq!(first.leader, None);

    let leader = lead(&c, "sched").await;
    let second = next_event(&mut lines).await;
    assert_eq!(second.leader.as_deref(), Some("node-1"));
    assert_eq!(second.term, Some(leader.token()));
    leader.release().await.unwrap();
    assert_eq!(next_event(&mut lines).await.leader, None);
    let status = tokio::time::timeout(Duration::from_secs(10), watcher.wait())
        .await
        .expect("watch exits after --count events")
        .unwrap();
    assert!(status.success());

    // Without --json: one line for people per event.
    let out = lockctl(&broker, &["watch", "sched", "--count", "1"]).await;
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "sched: no leader"
    );
    broker.stop().await;
}

#[tokio::test]
async fn policy_status_and_upload() {
    let broker = Broker::start().await;
    let admin = |args: &[&str]| {
        tokio::process::Command::new(bin("lockctl"))
            .args(args)
            .env("LOCKBROKER_URL", broker.url())
            .env("LOCKBROKER_ADMIN_TOKEN", lockbroker_tests::ADMIN)
            .output()
    };
    let out = admin(&["policy", "status", "--tenant", "default", "--json"])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let before: TenantInfo = parsed(&out);
    assert_eq!(before.name, "default");
    assert_eq!(before.policy.name, "builtin");
    let out = admin(&["policy", "status"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("default: builtin") && text.contains("other: builtin"),
        "{text}"
    );

    // An invalid component is refused and the old policy stays.
    let garbage = lockbroker_tests::tempfile_like::TempFile::new("wasm", b"not a component");
    let path = garbage.path().to_str().unwrap();
    let out = admin(&["policy", "upload", path, "--tenant", "default", "--json"])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(code(&out), ErrorCode::InvalidPolicy);

    // A real one is swapped in; status then shows it.
    let component =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/priority.wasm");
    assert!(
        component.exists(),
        "{} is missing: run scripts/build-plugins",
        component.display()
    );
    let out = admin(&[
        "policy",
        "upload",
        component.to_str().unwrap(),
        "--tenant",
        "default",
        "--json",
    ])
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let uploaded: TenantInfo = parsed(&out);
    assert_eq!(uploaded.policy.name, "priority");
    assert!(uploaded.policy.sha256.is_some());
    let out = admin(&["--json", "policy", "status", "--tenant", "default"])
        .await
        .unwrap();
    assert_eq!(
        parsed::<TenantInfo>(&out).policy.sha256,
        uploaded.policy.sha256
    );

    // The tenant's key is not the admin token; no token at all is usage.
    let out = tokio::process::Command::new(bin("lockctl"))
        .args(["policy", "status"])
        .env("LOCKBROKER_URL", broker.url())
        .env("LOCKBROKER_ADMIN_TOKEN", KEY)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = tokio::process::Command::new(bin("lockctl"))
        .args(["policy", "status"])
        .env("LOCKBROKER_URL", broker.url())
        .env_remove("LOCKBROKER_ADMIN_TOKEN")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    broker.stop().await;
}

/// Each line lockctl printed, read as `T` (`--json` of `ls`, `events`).
fn json_lines<T: DeserializeOwned>(out: &Output) -> Vec<T> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[tokio::test]
async fn ls_lists_what_is_held_under_a_prefix() {
    let broker = Broker::start().await;
    let c = rust_client(&broker);
    let a = c.lock("ls/a").owner("alice").acquire().await.unwrap();
    let b = c.lock("ls/b").owner("bob").acquire().await.unwrap();
    let carol = c.lock("ls/c").owner("carol").acquire().await.unwrap();
    let other = c.lock("other/x").owner("olga").acquire().await.unwrap();
    b.release().await.unwrap();

    let out = lockctl(&broker, &["ls", "ls/", "--json"]).await;
    assert!(out.status.success(), "{out:?}");
    let listed: Vec<_> = json_lines::<LockStatus>(&out)
        .into_iter()
        .map(|s| (s.storage_key, s.owner, s.token))
        .collect();
    let held =
        |key: &str, owner: &str, token| (key.to_owned(), Some(owner.to_owned()), Some(token));
    assert_eq!(
        listed,
        [
            held("ls/a", "alice", a.token()),
            held("ls/c", "carol", carol.token())
        ]
    );
    let out = lockctl(&broker, &["ls", "ls/", "--limit", "1", "--json"]).await;
    let first: Vec<LockStatus> = json_lines(&out);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].storage_key, "ls/a");

    // The table, every prefix: a heading, then a row per live lock.
    let out = lockctl(&broker, &["ls"]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["KEY", "OWNER", "TOKEN", "EXPIRES", "WAITERS"]);
    for row in &rows[1..] {
        assert_eq!(row.len(), 5, "{row:?}");
        // `2026-11-21T10:00:00.000Z`, by the database clock.
        assert!(row[3].len() == 24 && row[3].ends_with('Z'), "{row:?}");
        assert_eq!(row[4], "0", "no waiters: {row:?}");
    }
    let seen: Vec<_> = rows[1..].iter().map(|r| [r[0], r[1], r[2]]).collect();
    let (a, carol, other) = (a.token(), carol.token(), other.token());
    assert_eq!(
        seen,
        [
            ["ls/a", "alice", &a.to_string()],
            ["ls/c", "carol", &carol.to_string()],
            ["other/x", "olga", &other.to_string()]
        ]
    );

    // Semaphores (and the other kinds) by a flag; one kind at a time.
    let permit = c
        .semaphore("ls/pool", 2)
        .owner("sam")
        .acquire()
        .await
        .unwrap();
    let out = lockctl(&broker, &["ls", "--semaphores", "ls/", "--json"]).await;
    let pools: Vec<SemaphoreStatus> = json_lines(&out);
    assert_eq!(pools.len(), 1, "{out:?}");
    assert_eq!(
        (
            pools[0].holders[0].owner.as_str(),
            pools[0].holders[0].token
        ),
        ("sam", permit.token())
    );
    let out = lockctl(&broker, &["ls", "--semaphores"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let pool = format!("sam#{}", permit.grant().unwrap().slot);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ls/pool") && l.contains(&pool)),
        "{text}"
    );
    let reader = c.read_lock("ls/cfg").owner("rita").acquire().await.unwrap();
    let out = lockctl(&broker, &["ls", "--rwlocks", "ls/", "--json"]).await;
    let rw: Vec<RwLockStatus> = json_lines(&out);
    assert_eq!(rw.len(), 1, "{out:?}");
    assert_eq!(rw[0].readers[0].token, reader.token());
    let out = lockctl(&broker, &["ls", "--rwlocks"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rita(read)"), "{text}");
    let leader = c.election("ls/lead").owner("lena").acquire().await.unwrap();
    let out = lockctl(&broker, &["ls", "--elections", "ls/"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let row: Vec<_> = text
        .lines()
        .nth(1)
        .expect("a row")
        .split_whitespace()
        .collect();
    let term = leader.token().to_string();
    assert_eq!(row[..3], ["ls/lead", "lena", term.as_str()], "{text}");
    let out = lockctl(&broker, &["ls", "--semaphores", "--rwlocks"]).await;
    assert_eq!(out.status.code(), Some(2));
    broker.stop().await;
}

#[tokio::test]
async fn events_prints_the_changes_made_after_it_starts() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let broker = Broker::start().await;
    let c = rust_client(&broker);
    // Through a proxy, to break its connection.
    let proxy = Proxy::start(broker.url().trim_start_matches("http://")).await;
    let mut follower = tokio::process::Command::new(bin("lockctl"))
        .args(["events", "ev/", "--json"])
        .env("LOCKBROKER_URL", format!("http://{}", proxy.addr))
        .env("LOCKBROKER_API_KEY", KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    // It says so on stderr once the stream is open: every change from then
    // on is in it.
    let mut notes = BufReader::new(follower.stderr.take().unwrap()).lines();
    let note = tokio::time::timeout(Duration::from_secs(10), notes.next_line())
        .await
        .expect("lockctl opens the stream in time")
        .unwrap()
        .expect("a note on stderr");
    assert!(note.contains("following the events"), "{note}");

    // Not under the prefix: not printed.
    let other = c.lock("other/x").acquire().await.unwrap();
    let lock = c.lock("ev/a").owner("me").acquire().await.unwrap();
    let granted: StreamEvent = next_line(&mut lines).await;
    assert_eq!(
        (granted.event, granted.kind, granted.storage_key.as_str()),
        (LockEventKind::Granted, ResourceKind::Lock, "ev/a")
    );
    assert_eq!(
        (granted.owner.as_str(), granted.token),
        ("me", lock.token())
    );
    let token = lock.token();
    lock.release().await.unwrap();
    let released: StreamEvent = next_line(&mut lines).await;
    assert_eq!(
        (
            released.event,
            released.storage_key.as_str(),
            released.token
        ),
        (LockEventKind::Released, "ev/a", token)
    );

    // The connection breaks; a change made meanwhile is printed once
    // lockctl is through again (it resumes after the last event printed).
    proxy.cut();
    eventually(
        "the proxy closed the stream",
        Duration::from_secs(10),
        || async { proxy.connections() == 0 },
    )
    .await;
    let mut direct = c.events("ev/b", None).await.unwrap();
    let meanwhile = c.lock("ev/b").acquire().await.unwrap();
    // Once another stream has it, the broker's feed is past it: a stream
    // opened from now on (not resumed) would not have it.
    let _granted = tokio::time::timeout(Duration::from_secs(10), direct.next())
        .await
        .expect("the grant in time")
        .unwrap();
    proxy.restore();
    let resumed: StreamEvent = next_line(&mut lines).await;
    assert_eq!(
        (resumed.storage_key.as_str(), resumed.token),
        ("ev/b", meanwhile.token())
    );
    drop(follower);

    // --after: from the broker's history; one line for people per event.
    let after = granted.id.to_string();
    let out = lockctl(
        &broker,
        &["events", "ev/", "--after", &after, "--count", "1"],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "{} released lock ev/a owner=me token={token} at={}",
            released.id, released.at
        )
    );
    other.release().await.unwrap();
    meanwhile.release().await.unwrap();
    broker.stop().await;
}

/// lockctl run with `vars` as its only `LOCKBROKER_*` variables.
async fn lockctl_with(vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(bin("lockctl"));
    for (name, _) in std::env::vars() {
        if name.starts_with("LOCKBROKER_") {
            command.env_remove(name);
        }
    }
    command
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .await
        .expect("run lockctl")
}

/// The conformance run's variables (`clients/CONFORMANCE.md`).
fn vars(conformance: &Conformance) -> std::collections::HashMap<String, String> {
    conformance.env().into_iter().collect()
}

#[tokio::test]
async fn https_with_a_ca_file_and_a_client_certificate() {
    let conformance = Conformance::start().await;
    let v = vars(&conformance);
    let var = |name: &str| v[name].as_str();
    let (url, key, ca) = (
        var("LOCKBROKER_TLS_URL"),
        var("LOCKBROKER_API_KEY"),
        var("LOCKBROKER_TEST_CA_FILE"),
    );
    let (cert, cert_key) = (
        var("LOCKBROKER_TEST_CLIENT_CERT"),
        var("LOCKBROKER_TEST_CLIENT_KEY"),
    );
    // From the environment, as every client reads it.
    let env = [
        ("LOCKBROKER_URL", url),
        ("LOCKBROKER_API_KEY", key),
        ("LOCKBROKER_CA_FILE", ca),
        ("LOCKBROKER_CLIENT_CERT", cert),
        ("LOCKBROKER_CLIENT_KEY", cert_key),
    ];
    let out = lockctl_with(&env, &["acquire", "tls-job", "--owner", "me"]).await;
    assert!(out.status.success(), "{out:?}");
    let token = parsed::<Lease>(&out).token.to_string();
    let out = lockctl_with(&env, &["status", "tls-job"]).await;
    assert_eq!(parsed::<LockStatus>(&out).owner.as_deref(), Some("me"));
    // From flags.
    let flags = [
        "--url",
        url,
        "--ca-file",
        ca,
        "--client-cert",
        cert,
        "--client-key",
        cert_key,
    ];
    let release = [
        &flags[..],
        &["release", "tls-job", "--owner", "me", "--token", &token],
    ]
    .concat();
    let out = lockctl_with(&[("LOCKBROKER_API_KEY", key)], &release).await;
    assert!(out.status.success(), "{out:?}");
    assert!(parsed::<ReleaseResponse>(&out).released);

    // Refused in the handshake: no certificate, the stranger's, or the
    // broker's not trusted (no CA file). Unreachable: exit 3.
    let stranger = (
        var("LOCKBROKER_TEST_STRANGER_CERT"),
        var("LOCKBROKER_TEST_STRANGER_KEY"),
    );
    for (what, env) in [
        ("no client certificate", vec![("LOCKBROKER_CA_FILE", ca)]),
        (
            "the stranger's certificate",
            vec![
                ("LOCKBROKER_CA_FILE", ca),
                ("LOCKBROKER_CLIENT_CERT", stranger.0),
                ("LOCKBROKER_CLIENT_KEY", stranger.1),
            ],
        ),
        (
            "no CA file",
            vec![
                ("LOCKBROKER_CLIENT_CERT", cert),
                ("LOCKBROKER_CLIENT_KEY", cert_key),
            ],
        ),
    ] {
        let env = [
            &env[..],
            &[("LOCKBROKER_URL", url), ("LOCKBROKER_API_KEY", key)],
        ]
        .concat();
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            lockctl_with(&env, &["status", "tls-job"]),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: a hang"));
        assert_eq!(out.status.code(), Some(3), "{what}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("TLS"), "{what}: {stderr}");
    }

    // Files that cannot be used are named: usage, exit 2.
    let missing = format!("{ca}.missing");
    for (what, env, named) in [
        (
            "a missing CA file",
            vec![("LOCKBROKER_CA_FILE", missing.as_str())],
            missing.as_str(),
        ),
        (
            "a certificate without its key",
            vec![("LOCKBROKER_CLIENT_CERT", cert)],
            cert,
        ),
        (
            "a key that is a certificate",
            vec![
                ("LOCKBROKER_CLIENT_CERT", cert),
                ("LOCKBROKER_CLIENT_KEY", ca),
            ],
            ca,
        ),
    ] {
        let env = [&env[..], &[("LOCKBROKER_URL", url)]].concat();
        let out = lockctl_with(&env, &["status", "tls-job"]).await;
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{what}: {stderr}");
    }
    conformance.stop().await;
}

#[tokio::test]
async fn a_429_says_why_and_how_long_to_wait() {
    let conformance = Conformance::start().await;
    let v = vars(&conformance);
    let (url, limited) = (
        v["LOCKBROKER_URL"].as_str(),
        v["LOCKBROKER_LIMITED_API_KEY"].as_str(),
    );
    let once = lockbroker_client::Client::builder(url)
        .api_key(limited)
        .retry(lockbroker_client::RetryPolicy::never())
        .build()
        .unwrap();
    let env = [("LOCKBROKER_URL", url), ("LOCKBROKER_API_KEY", limited)];
    // A deadline shorter than the broker's hint (tried until the hint is
    // longer: a token that refills sooner is simply waited out).
    let out = eventually_some("lockctl meets a 429", Duration::from_secs(20), || async {
        // Empty the tenant's bucket, then ask.
        while once.locks().status("limited").await.is_ok() {}
        let out = lockctl_with(&env, &["--timeout-ms", "50", "status", "limited"]).await;
        (!out.status.success()).then_some(out)
    })
    .await;
    assert_eq!(out.status.code(), Some(1), "refused: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rate_limited (429)"), "{stderr}");
    let wait: u64 = stderr
        .split("retry after ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no wait in {stderr}"));
    assert!(wait > 0, "{stderr}");
    // The JSON error, with the broker's retry_after_ms.
    let printed: serde_json::Value = parsed(&out);
    assert_eq!(printed["error"]["code"], "rate_limited");
    assert_eq!(printed["error"]["retry_after_ms"], wait);
    // `--help` says so.
    let help = lockctl_with(&[], &["--help"]).await;
    let help = String::from_utf8_lossy(&help.stdout);
    for part in ["429", "LOCKBROKER_CA_FILE", "--client-cert", "--timeout-ms"] {
        assert!(help.contains(part), "{part}: {help}");
    }
    conformance.stop().await;
}
