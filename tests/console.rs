//! The console (`/ui/`) against a real broker and MariaDB: its files are
//! served with the right types and a restrictive CSP and reference nothing
//! but each other; and, in a real browser (Debian's chromium driven by
//! `tests/ui/console.mjs` through playwright-core), it lists a tenant's
//! leases live, shows a key's page, lists the tenant's sessions (by name,
//! live) and shows one with its leases and closes it, draws contention
//! (the overview's charts, checked in a screenshot, the hot keys, a key's
//! queue and history, the wait-for graph with a cycle), and lets the admin
//! see tenants, force-release a lock, and see a tenant's policy versions
//! and shadow report, promote the shadow and roll back. `scripts/ui-deps`
//! installs the browser and the node packages; without them this test
//! fails, it never skips.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use lockbroker_api::{
    Contention, EndReason, ErrorCode, LockEventKind, LockStatus, Page, PolicyLoadedBy,
    PolicyVersions, Session, WaitsFor,
};
use lockbroker_tests::{dist, Broker, Client, Proxy, ADMIN, KEY};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The longest the browser script may take (it waits on conditions, each
/// for at most 15 s).
const BROWSER_RUN: Duration = Duration::from_secs(240);

/// The files the page loads, by what references them: their paths under
/// `/ui/` (`src=`/`href=` in HTML, `url(...)` in CSS, `from '...'` in JS).
fn references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (open, close) in [
        ("src=\"", '"'),
        ("href=\"", '"'),
        ("url(", ')'),
        ("from '", '\''),
        ("import('", '\''),
    ] {
        for (at, _) in text.match_indices(open) {
            let rest = &text[at + open.len()..];
            found.push(rest[..rest.find(close).unwrap_or(rest.len())].to_owned());
        }
    }
    // In-page links (`#/...`) navigate the console itself.
    found.retain(|r| !r.starts_with('#'));
    found
}

/// `GET /ui/{file}` without credentials: 200 with `content_type`, the
/// console's CSP, and the body.
async fn served(c: &Client, file: &str, content_type: &str) -> String {
    let reply = c.get(&format!("/ui/{file}")).await.unwrap();
    assert_eq!(reply.status, 200, "/ui/{file}: {reply:?}");
    let header = |name: &str| {
        reply
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("content-type"), content_type, "/ui/{file}");
    assert!(
        header("content-security-policy").starts_with("default-src 'self';"),
        "/ui/{file}: {}",
        header("content-security-policy")
    );
    assert_eq!(header("x-content-type-options"), "nosniff", "/ui/{file}");
    reply.text()
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_and_loads_only_its_own_files() {
    let broker = Broker::start().await;
    let c = broker.client_with(None);

    let redirect = c.get("/ui").await.unwrap();
    assert_eq!(redirect.status, 301, "{redirect:?}");
    assert_eq!(redirect.headers["location"], "/ui/");

    let html = served(&c, "", "text/html; charset=utf-8").await;
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(
        !html.contains("<style") && !html.contains(" style=") && !html.contains("<script>"),
        "no inline styles or scripts: the CSP would refuse them"
    );
    // Every file the page loads, transitively, is one of the console's own.
    let mut pending = vec![(String::new(), html)];
    let mut seen = Vec::new();
    while let Some((from, text)) = pending.pop() {
        for reference in references(&text) {
            assert!(
                !reference.contains("//") && !reference.starts_with('/'),
                "/ui/{from} references {reference:?}: only the console's own files may be"
            );
            let file = reference.trim_start_matches("./").to_owned();
            if seen.contains(&file) {
                continue;
            }
            let content_type = match file.rsplit('.').next() {
                Some("js") => "text/javascript; charset=utf-8",
                Some("css") => "text/css; charset=utf-8",
                Some("svg") => "image/svg+xml",
                _ => panic!("/ui/{from} references {file:?}, of no known type"),
            };
            let text = served(&c, &file, content_type).await;
            seen.push(file.clone());
            pending.push((file, text));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        ["api.js", "app.js", "contention.js", "icon.svg", "style.css"]
    );

    for (path, status) in [("/ui/nothing.js", 404), ("/ui/a/app.js", 404)] {
        assert_eq!(c.get(path).await.unwrap().status, status, "{path}");
    }
    let post = c.post("/ui/", &json!({})).await.unwrap();
    assert_eq!(post.status, 405, "{post:?}");
    broker.stop().await;
}

/// `POST path` with `body`, expecting 200.
async fn post(c: &Client, path: &str, body: Value) -> Value {
    let reply = c.post(path, &body).await.unwrap();
    assert_eq!(reply.status, 200, "{path}: {reply:?}");
    reply.parse()
}

/// `POST /v1/sessions` for a session named `name` (long-lived: the
/// browser script takes its time); its id.
async fn open_session(c: &Client, name: &str) -> String {
    let body = json!({"ttl_ms": 600_000, "name": name});
    let reply = c.post("/v1/sessions", &body).await.unwrap();
    assert_eq!(reply.status, 201, "{reply:?}");
    reply.parse::<Session>().id
}

#[tokio::test]
async fn the_console_shows_a_tenants_leases_live_and_the_admin_force_releases() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ui");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "tests/ui has no node_modules: run scripts/ui-deps (scripts/test does)"
    );
    let broker = Broker::start().await;
    let c = broker.client();
    let ttl = json!(120_000);
    for (key, owner) in [
        ("job-1", "worker-7"),
        ("job-2", "worker-8"),
        ("other-1", "worker-9"),
    ] {
        post(
            &c,
            &format!("/v1/locks/{key}/acquire"),
            json!({"owner": owner, "ttl_ms": ttl}),
        )
        .await;
    }
    // One more than a page of the console (50): paging follows the cursor.
    for n in 0..=50 {
        let body = json!({"owner": "pager", "ttl_ms": ttl});
        post(&c, &format!("/v1/locks/page-{n:02}/acquire"), body).await;
    }
    let semaphore = json!({"owner": "sem-holder", "permits": 3, "ttl_ms": ttl});
    post(&c, "/v1/semaphores/pool-1/acquire", semaphore).await;
    let reader = json!({"owner": "reader-1", "mode": "read", "ttl_ms": ttl});
    post(&c, "/v1/rwlocks/table-1/acquire", reader).await;
    let campaign = json!({"candidate": "node-1", "ttl_ms": ttl});
    post(&c, "/v1/elections/leader-1/campaign", campaign).await;
    // Sessions: nightly-batch holds two locks (no ttl_ms: they live as
    // long as it), nightly-report none; adhoc-1 is outside the name filter.
    let batch = open_session(&c, "nightly-batch").await;
    for key in ["batch-a", "batch-b"] {
        let lock = post(
            &c,
            &format!("/v1/locks/{key}/acquire"),
            json!({"session": batch}),
        )
        .await;
        assert_eq!(
            lock["owner"],
            batch.as_str(),
            "owned by the session: {lock}"
        );
    }
    open_session(&c, "nightly-report").await;
    let adhoc = open_session(&c, "adhoc-1").await;

    // The page goes through a proxy, so that its event stream can be cut.
    let proxy = Proxy::start(broker.url().trim_start_matches("http://")).await;
    let page_url = format!("http://{}", proxy.addr);
    let status = tokio::time::timeout(
        BROWSER_RUN,
        run_script(&dir, &page_url, broker.url(), &proxy),
    )
    .await
    .expect("the browser script finishes in time");
    assert!(
        status.success(),
        "tests/ui/console.mjs failed ({status}); its output is above"
    );

    // The script force-released job-2 through the console: the broker
    // agrees, and recorded it.
    let job2: Value = c.status("job-2").await.unwrap().ok();
    assert_eq!(job2["held"], false, "{job2}");
    let (events, _) = c.history("locks", "job-2").await;
    assert_eq!(events[0].0, LockEventKind::ForceReleased, "{events:?}");
    // It closed nightly-batch through the console: the session is gone and
    // both its locks were released by that close.
    let gone = c.get(&format!("/v1/sessions/{batch}")).await.unwrap();
    assert_eq!(gone.status, 404, "{gone:?}");
    assert_eq!(gone.code(), Some(ErrorCode::SessionNotFound), "{gone:?}");
    for key in ["batch-a", "batch-b"] {
        let lock: LockStatus = c.status(key).await.unwrap().ok();
        assert!(!lock.held, "{key}: {lock:?}");
        let (_, history) = c.history("locks", key).await;
        let last = &history.events[0];
        assert_eq!(last.event, LockEventKind::Released, "{key}: {history:?}");
        assert_eq!(
            last.reason,
            Some(EndReason::SessionClosed),
            "{key}: {history:?}"
        );
        assert_eq!(
            last.session.as_deref(),
            Some(batch.as_str()),
            "{key}: {history:?}"
        );
    }
    // The script closed the other nightly sessions through the API, and
    // left adhoc-1 and one it opened open.
    let open: Page<Session> = c.get("/v1/sessions").await.unwrap().ok();
    let names: Vec<_> = open.items.iter().map(|s| s.name.as_deref()).collect();
    assert_eq!(names, [Some("adhoc-1"), Some("elsewhere")], "{open:?}");
    assert_eq!(open.items[0].id, adhoc);
    // It made contention on hot-1 (rounds of a holder, a refused try and a
    // handoff; then a holder, a refused try and three waiters, handed it
    // in turn) and a cycle of two owners (broken since), and left nothing
    // held or waiting.
    let hot: Contention = c
        .get("/v1/contention?prefix=hot-&window_s=300")
        .await
        .unwrap()
        .ok();
    let hot1 = &hot.keys[0];
    assert_eq!(hot1.storage_key, "hot-1", "{hot:?}");
    assert!(
        hot1.handoffs >= 4 && hot1.refusals >= 2 && hot1.waiters == 0 && hot1.holders.is_empty(),
        "{hot:?}"
    );
    let graph: WaitsFor = c.get("/v1/waits-for").await.unwrap().ok();
    assert!(
        graph.edges.is_empty() && graph.cycles.is_empty(),
        "{graph:?}"
    );
    // It promoted the shadow, then rolled back: the built-in policy is in
    // force again, the promoted version kept.
    let admin = broker.client_with(Some(ADMIN));
    let versions: PolicyVersions = admin
        .get("/v1/admin/tenants/default/policy/versions")
        .await
        .unwrap()
        .ok();
    let by: Vec<_> = versions
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.loaded_by, v.active))
        .collect();
    assert_eq!(
        by,
        [
            ("builtin", PolicyLoadedBy::Rollback, true),
            ("rename", PolicyLoadedBy::Promote, false)
        ]
    );
    broker.stop().await;
}

/// Runs `console.mjs` with the page at `page_url` and the API at
/// `api_url`, echoing what it prints; its lines `@@ cut` and `@@ restore`
/// break and mend the page's connections through `proxy`, answered `ok`.
async fn run_script(
    dir: &Path,
    page_url: &str,
    api_url: &str,
    proxy: &Proxy,
) -> std::process::ExitStatus {
    // Pictures of the main views, kept for review (`LB_SCREENSHOTS`
    // chooses where; by default a folder in the temp dir, named here).
    let pictures = std::env::var_os("LB_SCREENSHOTS").map_or_else(
        || std::env::temp_dir().join(format!("lbt-console-{}", std::process::id())),
        std::path::PathBuf::from,
    );
    std::fs::create_dir_all(&pictures).expect("a folder for the screenshots");
    eprintln!("console: screenshots in {}", pictures.display());
    let mut child = tokio::process::Command::new("node")
        .arg("console.mjs")
        .current_dir(dir)
        .env("LB_SCREENSHOTS", &pictures)
        .env("LB_URL", page_url)
        .env("LB_API", api_url)
        .env("LB_KEY", KEY)
        .env("LB_ADMIN", ADMIN)
        .env("LB_SHADOW_WASM", dist("fixtures/rename.wasm"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (scripts/ui-deps installs what the test needs)");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    while let Some(line) = lines.next_line().await.expect("read the script's output") {
        println!("{line}");
        match line.as_str() {
            "@@ cut" => proxy.cut(),
            "@@ restore" => proxy.restore(),
            _ => continue,
        }
        stdin.write_all(b"ok\n").await.expect("answer the script");
    }
    child.wait().await.expect("wait for node")
}
