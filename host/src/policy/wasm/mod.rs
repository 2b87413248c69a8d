//! The WebAssembly host: one shared wasmtime [`Engine`], components
//! compiled once and cached on disk by sha256, validated by a self-check
//! before they are put in force.
//!
//! Guests import nothing: the linker is empty, so a component that needs
//! WASI, a clock or anything else fails to load with the import named.
//! Each call runs under an epoch deadline (a ticker thread advances the
//! epoch every millisecond) and a memory limit; see `instance`.

mod bindings;
mod instance;

use std::{
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use sha2::{Digest, Sha256};
use wasmtime::{
    component::{Component, Linker},
    Engine,
};

pub use instance::WasmPolicy;

use super::{now_rfc3339, Loaded};

/// How often the epoch advances: the granularity of call deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Why a component was not put in force. The message goes to the admin.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

/// Limits every policy call runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub memory_bytes: usize,
}

/// The shared engine, compile cache and limits.
pub struct WasmHost {
    engine: Engine,
    linker: Linker<instance::StoreState>,
    cache_dir: Option<PathBuf>,
    limits: Limits,
}

impl WasmHost {
    /// An engine with epoch interruption and its ticker thread. The ticker
    /// stops when the engine is dropped.
    ///
    /// # Errors
    /// The engine cannot be configured (unsupported platform).
    pub fn new(limits: Limits, cache_dir: Option<PathBuf>) -> Result<WasmHost, LoadError> {
        let mut config = wasmtime::Config::new();
        config
            .epoch_interruption(true)
            .parallel_compilation(true)
            .max_wasm_stack(512 * 1024)
            // Policies are small: reserve little address space per memory,
            // so many instances of many tenants fit.
            .memory_reservation(64 << 20)
            .memory_guard_size(64 << 10)
            .memory_reservation_for_growth(1 << 20);
        let engine = Engine::new(&config).map_err(|e| LoadError(format!("wasm engine: {e:#}")))?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            })
            .map_err(|e| LoadError(format!("epoch ticker: {e}")))?;
        let cache_dir = cache_dir.map(|dir| dir.join(compatibility_key(&engine)));
        Ok(WasmHost {
            linker: Linker::new(&engine),
            engine,
            cache_dir,
            limits,
        })
    }

    /// Compiles (or loads from the cache), validates and self-checks a
    /// component. Slow (milliseconds): call it off the request path.
    ///
    /// # Errors
    /// Not a component, imports something, exports the wrong world, or
    /// traps or overruns in its self-check.
    pub fn load(&self, bytes: &[u8]) -> Result<Loaded, LoadError> {
        let sha256 = hex(&Sha256::digest(bytes));
        let component = self.compile(bytes, &sha256)?;
        let imports: Vec<String> = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        if !imports.is_empty() {
            return Err(LoadError(format!(
                "the component imports {}, but policies get no imports (build for wasm32-unknown-unknown, without WASI)",
                imports.join(", ")
            )));
        }
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError(format!("cannot link the component: {e:#}")))?;
        let pre = bindings::PolicyPre::new(pre).map_err(|e| {
            LoadError(format!(
                "the component does not export the lockbroker:policy@0.1.0 world: {e:#}"
            ))
        })?;
        let policy = WasmPolicy::new(self.engine.clone(), pre, self.limits);
        let descriptor = policy
            .self_check()
            .map_err(|e| LoadError(format!("the self-check failed: {e}")))?;
        Ok(Loaded {
            policy: Arc::new(policy),
            descriptor,
            sha256: Some(sha256),
            loaded_at: now_rfc3339(),
            stand_in: false,
        })
    }

    /// Reads and loads a file.
    ///
    /// # Errors
    /// As [`WasmHost::load`], or the file cannot be read.
    pub fn load_file(&self, path: &Path) -> Result<Loaded, LoadError> {
        let bytes = std::fs::read(path)
            .map_err(|e| LoadError(format!("cannot read {}: {e}", path.display())))?;
        self.load(&bytes)
    }

    /// The compiled component: from the cache if this engine compiled the
    /// same bytes before, else compiled now and cached.
    fn compile(&self, bytes: &[u8], sha256: &str) -> Result<Component, LoadError> {
        let cached = self
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{sha256}.cwasm")));
        if let Some(path) = cached.as_ref().filter(|p| p.exists()) {
            // SAFETY: the cache holds only what `serialize` wrote for an
            // engine with this compatibility hash (the directory name).
            match unsafe { Component::deserialize_file(&self.engine, path) } {
                Ok(component) => return Ok(component),
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "ignoring a bad cache entry")
                }
            }
        }
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| LoadError(format!("not a valid WebAssembly component: {e:#}")))?;
        if let Some(path) = cached {
            if let Err(err) = write_atomically(&path, &component) {
                tracing::warn!(path = %path.display(), error = %err, "cannot cache a compiled policy");
            }
        }
        Ok(component)
    }
}

fn write_atomically(path: &Path, component: &Component) -> anyhow::Result<()> {
    let bytes = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let dir = path.parent().expect("cache files live in a directory");
    std::fs::create_dir_all(dir)?;
    // A temporary file of its own per write: two loads at once (an upload
    // while the watcher reloads, or two brokers sharing the directory)
    // must never rename one policy's bytes to the other's name.
    let mut tmp = tempfile::Builder::new()
        .prefix(".compiling-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    tmp.persist(path)?;
    Ok(())
}

/// A directory name that changes whenever compiled artifacts would not load.
fn compatibility_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("wasmtime-{:016x}", hasher.finish())
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
