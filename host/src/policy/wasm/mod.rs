//! The WebAssembly host: one shared wasmtime [`Engine`], components
//! compiled once and cached on disk (`cache`), validated by a self-check
//! before they are put in force.
//!
//! A component that imports nothing is linked against an empty linker and
//! its stores carry no WASI. One that imports only WASI 0.2 interfaces
//! (Python's and other toolchains' guests do, whatever their code does)
//! gets a locked-down WASI with nothing in it (`wasi`). Any other import
//! is refused at load, named. Each call runs under an epoch deadline (a
//! ticker thread advances the epoch every millisecond) and a memory limit;
//! see `instance`. Both limits may differ per tenant ([`LoadOptions`]).

mod bindings;
mod cache;
mod check;
mod guest_log;
mod instance;
mod wasi;

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use wasmtime::{component::Linker, Engine};

pub use cache::Source;
pub use check::{check, Latency, Report, CALLS};
pub use guest_log::TARGET as GUEST_LOG_TARGET;
pub use instance::WasmPolicy;

use super::{now_rfc3339, Loaded};

/// How often the epoch advances: the granularity of call deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(1);

/// The import prefix of the interfaces the locked-down WASI provides.
const WASI_PREFIX: &str = "wasi:";

/// Epoch ticks since the host started, counted by the thread that advances
/// the engine's epoch. Calls are timed with it rather than with a clock:
/// reading it is one atomic load (a clock read costs 40–70 ns on this kind
/// of VM, three per call before), and it counts in the unit the deadline is
/// enforced in. When the ticker thread is descheduled, ticks (and with them
/// deadlines and the slow mark) run late, never early.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ticks(Arc<AtomicU64>);

impl Ticks {
    /// Ticks so far.
    pub(crate) fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn advance(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a component was not put in force. The message goes to the admin.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

/// Limits every policy call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub deadline: Duration,
    pub memory_bytes: usize,
}

/// What a load is for: the tenant (its WASI output is tagged with it) and
/// the limits its calls run under.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub tenant: String,
    pub limits: Limits,
}

/// A component compiled, linked and self-checked, with what was learnt on
/// the way (`lockbroker policy check` prints it).
pub struct Prepared {
    pub loaded: Loaded,
    /// The component's imports, by name; empty for a pure policy.
    pub imports: Vec<String>,
    /// Whether it was given the locked-down WASI.
    pub wasi: bool,
    pub source: Source,
    /// Time to compile (or deserialize) the component.
    pub compile_time: Duration,
    /// Time to link, instantiate and self-check it.
    pub check_time: Duration,
}

/// The shared engine, linkers, compile cache and default limits.
pub struct WasmHost {
    engine: Engine,
    /// For components that import nothing.
    linker: Linker<instance::StoreState>,
    /// For components that import WASI.
    wasi_linker: Linker<instance::StoreState>,
    cache: cache::Cache,
    limits: Limits,
    ticks: Ticks,
}

impl WasmHost {
    /// An engine with epoch interruption and its ticker thread. The ticker
    /// stops when the engine is dropped. `limits` are the defaults of
    /// [`WasmHost::load`].
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
            // so many instances of many tenants fit (a larger memory, a
            // Python guest's, moves when it grows past this).
            .memory_reservation(64 << 20)
            .memory_guard_size(64 << 10)
            .memory_reservation_for_growth(1 << 20);
        let engine = Engine::new(&config).map_err(|e| LoadError(format!("wasm engine: {e:#}")))?;
        let weak = engine.weak();
        let ticks = Ticks::default();
        let ticker = ticks.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => {
                        ticker.advance();
                        engine.increment_epoch();
                    }
                    None => break,
                }
            })
            .map_err(|e| LoadError(format!("epoch ticker: {e}")))?;
        let wasi_linker =
            wasi::linker(&engine).map_err(|e| LoadError(format!("WASI linker: {e:#}")))?;
        Ok(WasmHost {
            cache: cache::Cache::new(&engine, cache_dir),
            linker: Linker::new(&engine),
            wasi_linker,
            engine,
            limits,
            ticks,
        })
    }

    /// The default limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Where compiled components are cached, if anywhere.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache.dir()
    }

    /// [`WasmHost::load_with`] with the default limits, for no tenant.
    ///
    /// # Errors
    /// As [`WasmHost::load_with`].
    pub fn load(&self, bytes: &[u8]) -> Result<Loaded, LoadError> {
        self.load_with(bytes, &self.default_options())
    }

    /// Compiles (or loads from the cache), validates and self-checks a
    /// component. Slow (milliseconds; seconds for a large uncached
    /// component): call it off the request path.
    ///
    /// # Errors
    /// Not a component, imports something other than WASI 0.2, exports the
    /// wrong world, or traps or overruns in its self-check.
    pub fn load_with(&self, bytes: &[u8], options: &LoadOptions) -> Result<Loaded, LoadError> {
        self.prepare(bytes, options).map(|p| p.loaded)
    }

    /// As [`WasmHost::load_with`], with what was learnt on the way.
    ///
    /// # Errors
    /// As [`WasmHost::load_with`].
    pub fn prepare(&self, bytes: &[u8], options: &LoadOptions) -> Result<Prepared, LoadError> {
        let started = Instant::now();
        let sha256 = hex(&Sha256::digest(bytes));
        let (component, source) = self.cache.compile(&self.engine, bytes, &sha256)?;
        let compile_time = started.elapsed();
        let imports: Vec<String> = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let foreign: Vec<&str> = imports
            .iter()
            .map(String::as_str)
            .filter(|name| !name.starts_with(WASI_PREFIX))
            .collect();
        if !foreign.is_empty() {
            return Err(LoadError(format!(
                "the component imports {}: a policy may import nothing but WASI 0.2 (build for wasm32-unknown-unknown or wasm32-wasip2)",
                foreign.join(", ")
            )));
        }
        let wasi = !imports.is_empty();
        let linker = if wasi {
            &self.wasi_linker
        } else {
            &self.linker
        };
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError(format!("cannot link the component: {e:#}")))?;
        let pre = bindings::PolicyPre::new(pre).map_err(|e| {
            LoadError(format!(
                "the component does not export the lockbroker:policy@0.1.0 world: {e:#}"
            ))
        })?;
        let output = wasi.then(|| wasi::Output {
            tenant: Arc::from(options.tenant.as_str()),
            limit: Arc::default(),
        });
        let policy = WasmPolicy::new(
            self.engine.clone(),
            pre,
            options,
            output,
            self.ticks.clone(),
        );
        let descriptor = policy
            .self_check()
            .map_err(|e| LoadError(format!("the self-check failed: {e}")))?;
        Ok(Prepared {
            loaded: Loaded {
                policy: Arc::new(policy),
                descriptor,
                sha256: Some(sha256),
                loaded_at: now_rfc3339(),
                stand_in: false,
                loading: false,
                from_cache: source == Source::Cache,
            },
            imports,
            wasi,
            source,
            compile_time,
            check_time: started.elapsed() - compile_time,
        })
    }

    /// Reads and loads a file with the default limits.
    ///
    /// # Errors
    /// As [`WasmHost::load`], or the file cannot be read.
    pub fn load_file(&self, path: &Path) -> Result<Loaded, LoadError> {
        self.load(&read(path)?)
    }

    /// Options for no tenant in particular, with the default limits.
    pub fn default_options(&self) -> LoadOptions {
        LoadOptions {
            tenant: "-".into(),
            limits: self.limits,
        }
    }
}

/// The bytes of a component file.
///
/// # Errors
/// The file cannot be read, in words.
pub fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|e| LoadError(format!("cannot read {}: {e}", path.display())))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
