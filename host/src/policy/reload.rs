//! Tenant policies from files: the first load at start, hot reload when a
//! file in `policy_dir` changes, and uploads through the admin API.
//!
//! A new version is compiled and self-checked off the request path, then
//! swapped in atomically ([`TenantPolicy::swap`]); requests in flight keep
//! the version they started with. A version that fails to load leaves the
//! old one in force and its error visible in `GET /v1/admin/tenants`.
//! A large component (a componentize-js or -py one takes seconds to
//! compile) is compiled on the blocking pool while the old version serves;
//! the compiled artifact is cached on disk, so a restart or a return to a
//! version seen before takes milliseconds. A load served from that cache
//! is counted in `lockbroker_policy_cache_hits_total` and logged.
//!
//! Each version put in force is kept ([`super::versions`]): a rollback
//! ([`Reloader::rollback`]) swaps a kept compiled version back in, in the
//! tenant's turn, and writes its bytes to the tenant's file (so a restart
//! and the watcher agree), as an upload does.
//!
//! An upload may load a shadow candidate instead ([`Reloader::shadow`]):
//! validated and compiled the same way, then run beside the policy in
//! force ([`super::shadow`]); a promote ([`Reloader::promote`]) puts it in
//! force as an upload would, in the tenant's turn.
//!
//! Loads of different tenants run at once (at most [`LOADS_AT_ONCE`]
//! compiling), at start and on reload: a component that takes many seconds
//! to compile holds up neither the other tenants' first loads nor their
//! reloads. Loads of one tenant take turns (reloads, uploads), so the
//! version written last is the one that ends up in force. At start a
//! tenant with a policy file has a stand-in until its file has loaded: its
//! requests get 503 (naming fails closed; see [`NamingError::Loading`]).
//!
//! The directory is polled (every [`POLL`]), which needs no platform
//! notification API and sees a change within a second; files are compared
//! by size, mtime and inode, then by sha256 before anything is recompiled.
//!
//! [`NamingError::Loading`]: super::NamingError::Loading

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, SystemTime},
};

use tokio::{
    sync::{watch, Semaphore},
    task::JoinSet,
};

use super::{
    now_rfc3339,
    versions::{write_atomically, Record},
    wasm::{Limits, LoadError, LoadOptions, WasmHost},
    Builtin, Descriptor, Loaded, LoadedBy, Policy, PolicyFault, Shadow, TenantPolicy,
};
use crate::{
    config::{Config, TenantConfig},
    metrics::Metrics,
};

/// How often `policy_dir` is looked at.
pub const POLL: Duration = Duration::from_millis(200);

/// The name a tenant's policy shows while its file has never loaded.
pub const NOT_LOADED: &str = "not-loaded";

/// The name a tenant's policy shows while its first load is under way.
pub const LOADING: &str = "loading";

/// How many components compile at once, at least. Compiling is CPU-bound
/// (and wasmtime spreads one compile over the cores), so more at once
/// gains nothing; but a few at once keep one big component from holding
/// up every other tenant. The bound is the larger of this and the cores.
pub const LOADS_AT_ONCE: usize = 4;

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

/// The stand-in for a tenant whose file never loaded (naming fails closed
/// with `err`).
fn not_loaded(err: &LoadError) -> Loaded {
    Loaded::native(NotLoaded(err.0.clone()), true)
}

/// Stands in for a tenant's policy while its first load is under way:
/// naming is refused before it is asked ([`Loaded::loading`]); fairness
/// and backoff (for waiters queued through other brokers) are the
/// built-in ones, which is no fault of the policy.
struct Loading;

impl Policy for Loading {
    fn describe(&self) -> Result<Descriptor, PolicyFault> {
        Ok(Descriptor {
            name: LOADING.into(),
            version: String::new(),
        })
    }
    fn storage_key(&self, _: &str, _: &str) -> Result<Result<String, String>, PolicyFault> {
        Err(PolicyFault::BadAnswer("the policy is still loading".into()))
    }
    fn pick_next(&self, key: &str, waiters: &[super::Waiter]) -> Result<u32, PolicyFault> {
        Builtin.pick_next(key, waiters)
    }
    fn next_delay(&self, contention: &super::Contention) -> Result<super::Decision, PolicyFault> {
        Builtin.next_delay(contention)
    }
}

/// What a tenant with a policy file starts with, until [`Reloader::load_all`]
/// has loaded (or failed to load) the file.
pub fn loading() -> Loaded {
    Loaded {
        loading: true,
        ..Loaded::native(Loading, true)
    }
}

/// One tenant's turn at loading: its loads run one at a time, and at most
/// one reload waits for its turn (it reads the file only once it has it,
/// so it sees every change made while it waited).
#[derive(Default)]
struct Turn {
    lock: tokio::sync::Mutex<()>,
    queued: AtomicBool,
}

/// Loads and reloads tenants' policy files.
pub struct Reloader {
    host: Arc<WasmHost>,
    dir: PathBuf,
    metrics: Arc<Metrics>,
    /// Each tenant's load options (its limits), by tenant name: replaced
    /// by a config reload ([`Reloader::retarget`]).
    options: Mutex<HashMap<String, LoadOptions>>,
    /// The policy files watched, with the policy each one is for: set by
    /// [`Reloader::load_all`], replaced by a config reload.
    files: Mutex<Vec<(Arc<TenantPolicy>, PathBuf)>>,
    /// Each tenant's turn, by tenant name.
    turns: Mutex<HashMap<String, Arc<Turn>>>,
    /// Compiles under way, at most the bound of [`LOADS_AT_ONCE`].
    slots: Arc<Semaphore>,
}

impl Reloader {
    /// A reloader for the tenants of `config`, each with its own limits.
    pub fn new(host: Arc<WasmHost>, config: &Config, metrics: Arc<Metrics>) -> Reloader {
        let options = config
            .tenants
            .iter()
            .map(|t| (t.name.clone(), load_options(config, t)))
            .collect();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Reloader {
            host,
            dir: config.policy_dir.clone(),
            metrics,
            options: Mutex::new(options),
            files: Mutex::default(),
            turns: Mutex::default(),
            slots: Arc::new(Semaphore::new(LOADS_AT_ONCE.max(cores))),
        }
    }

    fn turn(&self, tenant: &str) -> Arc<Turn> {
        self.turns
            .lock()
            .expect("turns lock")
            .entry(tenant.to_owned())
            .or_default()
            .clone()
    }

    fn options(&self, tenant: &str) -> LoadOptions {
        self.options
            .lock()
            .expect("options lock")
            .get(tenant)
            .cloned()
            .unwrap_or_else(|| LoadOptions {
                tenant: tenant.to_owned(),
                ..self.host.default_options()
            })
    }

    /// Compiles and self-checks `bytes` for `tenant` on the blocking pool
    /// once a slot is free, counting a load served from the compile cache.
    async fn load(&self, tenant: &str, bytes: Vec<u8>) -> Result<(Loaded, Vec<u8>), LoadError> {
        self.load_with(tenant, bytes, self.options(tenant)).await
    }

    /// [`Reloader::load`] with `options`.
    async fn load_with(
        &self,
        tenant: &str,
        bytes: Vec<u8>,
        options: LoadOptions,
    ) -> Result<(Loaded, Vec<u8>), LoadError> {
        let host = self.host.clone();
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LoadError("the broker is stopping".into()))?;
        let loaded = blocking(move || {
            // Held until the compile ends, also if the caller stops waiting.
            let _slot = slot;
            host.load_with(&bytes, &options).map(|l| (l, bytes))
        })
        .await?;
        if loaded.0.from_cache {
            self.metrics
                .inc("lockbroker_policy_cache_hits_total", &[("tenant", tenant)]);
        }
        Ok(loaded)
    }

    /// Validates `bytes` and, if they pass, puts them in force for `tenant`.
    /// An upload for a tenant with a policy file also replaces that file
    /// (atomically), so it survives a restart and the watcher agrees.
    ///
    /// # Errors
    /// Why the component was refused; the old policy stays in force.
    pub async fn upload(
        &self,
        policy: &TenantPolicy,
        bytes: Vec<u8>,
    ) -> Result<Arc<Loaded>, LoadError> {
        let turn = self.turn(policy.tenant());
        let _turn = turn.lock.lock().await;
        let (loaded, bytes) = self.load(policy.tenant(), bytes).await.inspect_err(|err| {
            self.failed(policy, err);
        })?;
        if let Some(file) = policy.file() {
            let path = self.dir.join(file);
            if let Err(err) = write_atomically(&path, &bytes) {
                let err = LoadError(format!("cannot write {}: {err}", path.display()));
                self.failed(policy, &err);
                return Err(err);
            }
        }
        Ok(self.put_in_force(policy, loaded, LoadedBy::Upload, Some(&bytes)))
    }

    /// Puts a kept version of `policy` back in force: `to` (its id or
    /// sha256), else the previous one. The version kept compiled is swapped
    /// in at once (one compiled from its kept bytes after a restart); the
    /// tenant's policy file, if any, gets its bytes, so it stays in force
    /// after a restart.
    ///
    /// # Errors
    /// [`RollbackError::NotFound`] when no such version is kept;
    /// [`RollbackError::Load`] when it must be compiled and cannot be, or
    /// the file cannot be written. The policy in force stays.
    pub async fn rollback(
        &self,
        policy: &TenantPolicy,
        to: Option<&str>,
    ) -> Result<Arc<Loaded>, RollbackError> {
        let turn = self.turn(policy.tenant());
        let _turn = turn.lock.lock().await;
        let active = policy.current();
        let active_id = (!active.stand_in).then(|| active.id());
        let target = policy.with_versions(|v| match to {
            Some(id) => v
                .find(id)
                .cloned()
                .ok_or_else(|| RollbackError::NotFound(format!("no version {id:?} is kept"))),
            None => v
                .previous(active_id.as_deref().unwrap_or(""))
                .cloned()
                .ok_or_else(|| RollbackError::NotFound("no previous version is kept".into())),
        })?;
        if active_id.as_deref() == Some(target.id.as_str()) {
            return Ok(active);
        }
        let record = self.record(policy.tenant());
        let bytes = match (&target.sha256, policy.file()) {
            (Some(sha), Some(_)) => Some(record.bytes(sha).map_err(|err| {
                LoadError(format!(
                    "the bytes of version {} are gone: {err}",
                    target.id
                ))
            })?),
            _ => None,
        };
        let compiled = match (target.compiled.clone(), bytes.clone()) {
            (Some(compiled), _) => compiled,
            (None, Some(bytes)) => {
                let (loaded, _) = self.load(policy.tenant(), bytes).await?;
                if loaded.sha256 != target.sha256 {
                    return Err(LoadError(format!(
                        "the kept bytes of version {} are damaged",
                        target.id
                    ))
                    .into());
                }
                let loaded = Arc::new(loaded);
                policy.with_versions(|v| v.compiled(&target.id, &loaded));
                loaded
            }
            (None, None) => {
                return Err(LoadError(format!("version {} is not kept compiled", target.id)).into())
            }
        };
        if let (Some(file), Some(bytes)) = (policy.file(), &bytes) {
            let path = self.dir.join(file);
            write_atomically(&path, bytes)
                .map_err(|err| LoadError(format!("cannot write {}: {err}", path.display())))?;
        }
        let loaded = Loaded {
            loaded_at: now_rfc3339(),
            ..(*compiled).clone()
        };
        Ok(self.put_in_force(policy, loaded, LoadedBy::Rollback, None))
    }

    /// Validates `bytes` as [`Reloader::upload`] does and, if they pass,
    /// loads them as `policy`'s shadow candidate (replacing any), which
    /// runs beside the policy in force and decides nothing. Nothing is
    /// written: a shadow does not survive a restart.
    ///
    /// # Errors
    /// Why the component was refused; the shadow before, if any, stays.
    pub async fn shadow(
        &self,
        policy: &TenantPolicy,
        bytes: Vec<u8>,
    ) -> Result<Arc<Shadow>, LoadError> {
        let turn = self.turn(policy.tenant());
        let _turn = turn.lock.lock().await;
        let (loaded, bytes) = self.load(policy.tenant(), bytes).await?;
        let shadow = Shadow::start(policy.tenant(), loaded, bytes, self.metrics.clone())
            .map_err(|err| LoadError(format!("cannot start the shadow: {err}")))?;
        let shadow = Arc::new(shadow);
        let candidate = shadow.candidate();
        tracing::info!(
            tenant = %policy.tenant(),
            policy = %candidate.descriptor.name,
            version = %candidate.descriptor.version,
            sha256 = candidate.sha256.as_deref().unwrap_or(""),
            "shadow policy loaded"
        );
        policy.set_shadow(Some(shadow.clone()));
        Ok(shadow)
    }

    /// Puts `policy`'s shadow candidate in force, as an upload of its
    /// bytes would (kept as a version `promote`, written to the tenant's
    /// file if any), and ends the shadow.
    ///
    /// # Errors
    /// [`PromoteError::NoShadow`] without a shadow; [`PromoteError::Load`]
    /// when the policy file cannot be written (the shadow goes on).
    pub async fn promote(&self, policy: &TenantPolicy) -> Result<Arc<Loaded>, PromoteError> {
        let turn = self.turn(policy.tenant());
        let _turn = turn.lock.lock().await;
        let shadow = policy
            .shadow()
            .ok_or_else(|| PromoteError::NoShadow(policy.tenant().to_owned()))?;
        if let Some(file) = policy.file() {
            let path = self.dir.join(file);
            write_atomically(&path, shadow.bytes())
                .map_err(|err| LoadError(format!("cannot write {}: {err}", path.display())))?;
        }
        policy.set_shadow(None);
        let loaded = Loaded {
            loaded_at: now_rfc3339(),
            ..(**shadow.candidate()).clone()
        };
        Ok(self.put_in_force(policy, loaded, LoadedBy::Promote, Some(shadow.bytes())))
    }

    /// `tenant`'s record of its versions on disk.
    fn record(&self, tenant: &str) -> Record {
        Record::new(&self.dir, tenant)
    }

    /// Reads `policy`'s record of its versions (a tenant with a file),
    /// before its first load.
    fn restore(&self, policy: &TenantPolicy) {
        if policy.file().is_some() {
            let kept = self.record(policy.tenant()).load();
            policy.with_versions(|v| v.restore(kept));
        }
    }

    /// Puts `loaded` in force `by`, keeping it (and `bytes`, its
    /// component, for a tenant with a file) as a version.
    fn put_in_force(
        &self,
        policy: &TenantPolicy,
        loaded: Loaded,
        by: LoadedBy,
        bytes: Option<&[u8]>,
    ) -> Arc<Loaded> {
        tracing::info!(
            tenant = %policy.tenant(),
            policy = %loaded.descriptor.name,
            version = %loaded.descriptor.version,
            sha256 = loaded.sha256.as_deref().unwrap_or("builtin"),
            from_cache = loaded.from_cache,
            by = ?by,
            "policy in force"
        );
        self.metrics.inc(
            "lockbroker_policy_loads_total",
            &[("tenant", policy.tenant()), ("result", "ok")],
        );
        let loaded = policy.install(loaded, by);
        if policy.file().is_some() {
            let record = self.record(policy.tenant());
            let kept = match (&loaded.sha256, bytes) {
                (Some(sha), Some(bytes)) => record.keep_bytes(sha, bytes),
                _ => Ok(()),
            };
            if let Err(err) = kept.and_then(|()| record.save(&policy.versions())) {
                tracing::warn!(tenant = %policy.tenant(), %err, "cannot record the policy's versions; a rollback may not survive a restart");
            }
        }
        loaded
    }

    /// Records a failed load. The policy in force stays, unless it is the
    /// stand-in of a first load: then the tenant fails closed until a
    /// version loads.
    fn failed(&self, policy: &TenantPolicy, err: &LoadError) {
        self.metrics.inc(
            "lockbroker_policy_loads_total",
            &[("tenant", policy.tenant()), ("result", "error")],
        );
        if policy.is_loading() {
            tracing::error!(tenant = %policy.tenant(), error = %err, "policy not loaded: the tenant's requests fail closed until it loads");
            policy.swap(not_loaded(err));
        } else {
            tracing::warn!(tenant = %policy.tenant(), error = %err, "policy not loaded; the previous one stays in force");
        }
        policy.set_error(err.0.clone());
    }

    /// Reloads a tenant's file if its content differs from the policy in
    /// force, in the tenant's turn.
    async fn reload(&self, policy: &TenantPolicy, path: &Path) {
        let turn = self.turn(policy.tenant());
        let _turn = turn.lock.lock().await;
        self.reload_now(policy, path).await;
    }

    /// [`Reloader::reload`] once the caller has the tenant's turn.
    async fn reload_now(&self, policy: &TenantPolicy, path: &Path) {
        let bytes = match tokio::fs::read(path).await {
            Ok(bytes) => bytes,
            Err(err) => {
                let err = LoadError(format!("cannot read {}: {err}", path.display()));
                return self.failed(policy, &err);
            }
        };
        let sha = super::wasm::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        if policy.current().sha256.as_deref() == Some(sha.as_str()) {
            return;
        }
        let by = if policy.is_loading() {
            LoadedBy::Startup
        } else {
            LoadedBy::File
        };
        match self.load(policy.tenant(), bytes).await {
            Ok((loaded, bytes)) => {
                self.put_in_force(policy, loaded, by, Some(&bytes));
            }
            Err(err) => self.failed(policy, &err),
        }
    }

    /// Loads every tenant's policy file, all at once (compiles bounded by
    /// [`LOADS_AT_ONCE`]), each put in force as soon as it is ready; returns
    /// when each has loaded or failed, with the watcher of those files.
    /// Tenants without a file keep the built-in policy.
    pub async fn load_all(self: &Arc<Self>, policies: Vec<Arc<TenantPolicy>>) -> Watcher {
        let files: Vec<(Arc<TenantPolicy>, PathBuf)> = policies
            .into_iter()
            .filter_map(|t| {
                let path = self.dir.join(t.file()?);
                Some((t, path))
            })
            .collect();
        // Before reading: a change made while they load is seen later.
        let seen = files.iter().map(|(_, p)| (p.clone(), stamp(p))).collect();
        let mut loads = JoinSet::new();
        for (policy, path) in &files {
            self.restore(policy);
            let (this, policy, path) = (self.clone(), policy.clone(), path.clone());
            loads.spawn(async move { this.reload(&policy, &path).await });
        }
        while let Some(done) = loads.join_next().await {
            if let Err(err) = done {
                tracing::error!(error = %err, "a policy load task failed");
            }
        }
        *self.files.lock().expect("files lock") = files;
        Watcher {
            reloader: self.clone(),
            seen,
        }
    }

    /// Loads `policy`'s file with `options` and puts it in force, for a
    /// tenant a config reload adds or whose policy it changes; nothing is
    /// recorded on failure (the reload is refused whole, and `policy` is
    /// not used).
    ///
    /// # Errors
    /// The file cannot be read or the component was refused.
    pub async fn load_new(
        &self,
        policy: &TenantPolicy,
        options: LoadOptions,
    ) -> Result<(), LoadError> {
        let Some(file) = policy.file() else {
            return Ok(());
        };
        let path = self.dir.join(file);
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|err| LoadError(format!("cannot read {}: {err}", path.display())))?;
        let (loaded, bytes) = self.load_with(policy.tenant(), bytes, options).await?;
        self.restore(policy);
        self.put_in_force(policy, loaded, LoadedBy::Startup, Some(&bytes));
        Ok(())
    }

    /// After a config reload: the tenants' load options and the policies
    /// whose files are watched, from now on.
    pub fn retarget(
        &self,
        options: HashMap<String, LoadOptions>,
        policies: impl IntoIterator<Item = Arc<TenantPolicy>>,
    ) {
        let files = policies
            .into_iter()
            .filter_map(|t| {
                let path = self.dir.join(t.file()?);
                Some((t, path))
            })
            .collect();
        *self.options.lock().expect("options lock") = options;
        *self.files.lock().expect("files lock") = files;
    }

    fn watched(&self) -> Vec<(Arc<TenantPolicy>, PathBuf)> {
        self.files.lock().expect("files lock").clone()
    }

    /// Reloads `tenant` from `path` in a task of `tasks`, unless a reload
    /// of it already waits for its turn (that one will read the change).
    fn schedule(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        policy: &Arc<TenantPolicy>,
        path: &Path,
    ) {
        let turn = self.turn(policy.tenant());
        if turn.queued.swap(true, Ordering::SeqCst) {
            return;
        }
        let (this, policy, path) = (self.clone(), policy.clone(), path.to_owned());
        tasks.spawn(async move {
            let _turn = turn.lock.lock().await;
            // From here on, a change is either read below or schedules anew.
            turn.queued.store(false, Ordering::SeqCst);
            this.reload_now(&policy, &path).await;
        });
    }
}

/// Watches the tenants' policy files after their first load
/// ([`Reloader::load_all`]), as a config reload changes them.
pub struct Watcher {
    reloader: Arc<Reloader>,
    /// Each file's stamp when last looked at.
    seen: HashMap<PathBuf, Option<Stamp>>,
}

impl Watcher {
    /// Reloads what changes until `stop`, each tenant in a task of its own:
    /// a slow compile delays no other tenant's reload. Reloads under way
    /// when it stops are abandoned (the policy in force stays).
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut reloads = JoinSet::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            while let Some(done) = reloads.try_join_next() {
                if let Err(err) = done {
                    tracing::error!(error = %err, "a policy reload task failed");
                }
            }
            let files = self.reloader.watched();
            // A file a config reload added was loaded just before: watched
            // from its state now.
            for (_, path) in &files {
                if !self.seen.contains_key(path) {
                    self.seen.insert(path.clone(), stamp(path));
                }
            }
            // By path first: tenants may share a file.
            let mut changed = Vec::new();
            for (path, last) in &mut self.seen {
                let now = stamp(path);
                if now != *last {
                    *last = now;
                    if now.is_some() {
                        changed.push(path.clone());
                    }
                }
            }
            for (policy, path) in files.iter().filter(|(_, p)| changed.contains(p)) {
                self.reloader.schedule(&mut reloads, policy, path);
            }
        }
    }
}

/// A tenant's load options: its own limits, else the top-level ones.
pub fn load_options(config: &Config, tenant: &TenantConfig) -> LoadOptions {
    LoadOptions {
        tenant: tenant.name.clone(),
        limits: Limits {
            deadline: config.tenant_policy_deadline(tenant),
            memory_bytes: config.tenant_policy_memory_bytes(tenant),
        },
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

/// Why a promote was refused (the policy in force stays).
#[derive(Debug, Clone, thiserror::Error)]
pub enum PromoteError {
    /// The tenant has no shadow candidate.
    #[error("no shadow policy is loaded for tenant {0:?}")]
    NoShadow(String),
    /// The policy file could not be written.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Why a rollback was refused (the policy in force stays).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RollbackError {
    /// No such version is kept (or no previous one).
    #[error("{0}")]
    NotFound(String),
    /// The version had to be compiled from its kept bytes and could not
    /// be, or the policy file could not be written.
    #[error(transparent)]
    Load(#[from] LoadError),
}
