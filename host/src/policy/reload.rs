//! Tenant policies from files: the first load at start, hot reload when a
//! file in `policy_dir` changes, and uploads through the admin API.
//!
//! A new version is compiled and self-checked off the request path, then
//! swapped in atomically ([`TenantPolicy::swap`]); requests in flight keep
//! the version they started with. A version that fails to load leaves the
//! old one in force and its error visible in `GET /v1/admin/tenants`.
//!
//! The directory is polled (every [`POLL`]), which needs no platform
//! notification API and sees a change within a second; files are compared
//! by size, mtime and inode, then by sha256 before anything is recompiled.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use tokio::sync::watch;

use super::{
    wasm::{LoadError, WasmHost},
    Descriptor, Loaded, Policy, PolicyFault,
};
use crate::{metrics::Metrics, tenant::Tenant};

/// How often `policy_dir` is looked at.
pub const POLL: Duration = Duration::from_millis(200);

/// The name a tenant's policy shows while its file has never loaded.
pub const NOT_LOADED: &str = "not-loaded";

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        inode: meta.ino(),
    })
}

/// Stands in for a tenant whose policy file has never loaded: naming fails
/// closed (500 `policy_error`), fairness and backoff fall back.
struct NotLoaded(String);

impl Policy for NotLoaded {
    fn describe(&self) -> Result<Descriptor, PolicyFault> {
        Ok(not_loaded_descriptor())
    }
    fn storage_key(&self, _: &str, _: &str) -> Result<Result<String, String>, PolicyFault> {
        Err(PolicyFault::BadAnswer(format!(
            "the policy is not loaded: {}",
            self.0
        )))
    }
    fn pick_next(&self, _: &str, _: &[super::Waiter]) -> Result<u32, PolicyFault> {
        Err(PolicyFault::BadAnswer("the policy is not loaded".into()))
    }
    fn next_delay(&self, _: &super::Contention) -> Result<super::Decision, PolicyFault> {
        Err(PolicyFault::BadAnswer("the policy is not loaded".into()))
    }
}

fn not_loaded_descriptor() -> Descriptor {
    Descriptor {
        name: NOT_LOADED.into(),
        version: String::new(),
    }
}

/// Loads and reloads tenants' policy files.
pub struct Reloader {
    host: Arc<WasmHost>,
    dir: PathBuf,
    metrics: Arc<Metrics>,
}

impl Reloader {
    pub fn new(host: Arc<WasmHost>, dir: PathBuf, metrics: Arc<Metrics>) -> Reloader {
        Reloader { host, dir, metrics }
    }

    /// The policy a tenant starts with: the built-in one, its file's, or
    /// (when the file does not load) a stand-in that fails closed, with the
    /// error recorded.
    pub async fn initial(&self, file: Option<&str>) -> Result<Loaded, (Loaded, LoadError)> {
        let Some(file) = file else {
            return Ok(Loaded::builtin());
        };
        let path = self.dir.join(file);
        let host = self.host.clone();
        match blocking(move || host.load_file(&path)).await {
            Ok(loaded) => Ok(loaded),
            Err(err) => {
                let stand_in = Loaded {
                    policy: Arc::new(NotLoaded(err.0.clone())),
                    descriptor: not_loaded_descriptor(),
                    sha256: None,
                    loaded_at: super::now_rfc3339(),
                    stand_in: true,
                };
                Err((stand_in, err))
            }
        }
    }

    /// Validates `bytes` and, if they pass, puts them in force for `tenant`.
    /// An upload for a tenant with a policy file also replaces that file
    /// (atomically), so it survives a restart and the watcher agrees.
    ///
    /// # Errors
    /// Why the component was refused; the old policy stays in force.
    pub async fn upload(&self, tenant: &Tenant, bytes: Vec<u8>) -> Result<Arc<Loaded>, LoadError> {
        let host = self.host.clone();
        let (loaded, bytes) = blocking(move || host.load(&bytes).map(|l| (l, bytes)))
            .await
            .inspect_err(|err| {
                self.failed(tenant, err);
            })?;
        if let Some(file) = &tenant.policy_file {
            let path = self.dir.join(file);
            if let Err(err) = write_atomically(&path, &bytes) {
                let err = LoadError(format!("cannot write {}: {err}", path.display()));
                self.failed(tenant, &err);
                return Err(err);
            }
        }
        Ok(self.put_in_force(tenant, loaded))
    }

    fn put_in_force(&self, tenant: &Tenant, loaded: Loaded) -> Arc<Loaded> {
        tracing::info!(
            tenant = %tenant.name,
            policy = %loaded.descriptor.name,
            version = %loaded.descriptor.version,
            sha256 = loaded.sha256.as_deref().unwrap_or("builtin"),
            "policy in force"
        );
        self.metrics.inc(
            "lockbroker_policy_loads_total",
            &[("tenant", &tenant.name), ("result", "ok")],
        );
        tenant.policy.swap(loaded);
        tenant.policy.current()
    }

    fn failed(&self, tenant: &Tenant, err: &LoadError) {
        tracing::warn!(tenant = %tenant.name, error = %err, "policy not loaded; the previous one stays in force");
        self.metrics.inc(
            "lockbroker_policy_loads_total",
            &[("tenant", &tenant.name), ("result", "error")],
        );
        tenant.policy.set_error(err.0.clone());
    }

    /// Reloads a tenant's file if its content differs from the policy in force.
    async fn reload(&self, tenant: &Tenant, path: &Path) {
        let bytes = match tokio::fs::read(path).await {
            Ok(bytes) => bytes,
            Err(err) => {
                let err = LoadError(format!("cannot read {}: {err}", path.display()));
                return self.failed(tenant, &err);
            }
        };
        let sha = super::wasm::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        if tenant.policy.current().sha256.as_deref() == Some(sha.as_str()) {
            return;
        }
        let host = self.host.clone();
        match blocking(move || host.load(&bytes)).await {
            Ok(loaded) => {
                self.put_in_force(tenant, loaded);
            }
            Err(err) => self.failed(tenant, &err),
        }
    }

    /// Watches the tenants' files until `stop`, reloading what changes.
    pub async fn watch(
        self: Arc<Self>,
        tenants: Vec<Arc<Tenant>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let files: Vec<(Arc<Tenant>, PathBuf)> = tenants
            .into_iter()
            .filter_map(|t| {
                let path = self.dir.join(t.policy_file.as_ref()?);
                Some((t, path))
            })
            .collect();
        if files.is_empty() {
            return;
        }
        let mut seen: HashMap<PathBuf, Option<Stamp>> =
            files.iter().map(|(_, p)| (p.clone(), stamp(p))).collect();
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            let mut changed = Vec::new();
            for (path, last) in &mut seen {
                let now = stamp(path);
                if now != *last {
                    *last = now;
                    if now.is_some() {
                        changed.push(path.clone());
                    }
                }
            }
            for (tenant, path) in files.iter().filter(|(_, p)| changed.contains(p)) {
                self.reload(tenant, path).await;
            }
        }
    }
}

/// Runs slow work (compiling, self-checks) on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LoadError> + Send + 'static,
) -> Result<T, LoadError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(LoadError(format!("policy load panicked: {e}"))))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.upload-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
