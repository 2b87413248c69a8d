//! Compiled components cached on disk, so that a restart (or a reload of a
//! version seen before) skips compiling: a componentize-js policy takes
//! about 10 s to compile and under a second to load from here.
//!
//! Layout: `CACHE_DIR/wasmtime-<engine>/<sha256 of the component>.cwasm`,
//! where `<engine>` hashes [`Engine::precompile_compatibility_hash`] (the
//! wasmtime version and every engine setting that matters), so artifacts
//! of another wasmtime or another configuration are never even looked at.
//!
//! Loading an artifact is `unsafe` (wasmtime trusts it as machine code), so
//! the broker deserializes only files it wrote itself: the directories are
//! created private (0700), and a file is used only if it is owned by the
//! broker's user and writable by nobody else, in a directory writable by
//! nobody else. Anything else is ignored and recompiled. Writes go to a
//! temporary file of their own, then are renamed into place.

use std::{
    hash::{Hash, Hasher},
    os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
};

use wasmtime::{component::Component, Engine};

use super::LoadError;

/// Where a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Compiled now (and written to the cache, if there is one).
    Compiled,
    /// Deserialized from the cache.
    Cache,
}

/// The compile cache of one engine.
pub struct Cache {
    dir: Option<PathBuf>,
}

impl Cache {
    /// A cache under `root` for `engine`'s artifacts; `None`: no cache.
    pub fn new(engine: &Engine, root: Option<PathBuf>) -> Cache {
        Cache {
            dir: root.map(|root| root.join(compatibility_key(engine))),
        }
    }

    /// The directory this engine's artifacts live in.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The compiled component: from the cache if this engine compiled the
    /// same bytes before, else compiled now and cached.
    ///
    /// # Errors
    /// The bytes are not a valid component.
    pub fn compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<(Component, Source), LoadError> {
        let cached = self
            .dir
            .as_ref()
            .map(|dir| dir.join(format!("{sha256}.cwasm")));
        if let Some(path) = cached.as_ref().filter(|p| p.exists()) {
            match trusted(path) {
                // SAFETY: the file is one this broker's user wrote, in a
                // directory only it can write, under a name that includes
                // this engine's compatibility hash: what `serialize` wrote
                // for this very engine configuration.
                Ok(()) => match unsafe { Component::deserialize_file(engine, path) } {
                    Ok(component) => return Ok((component, Source::Cache)),
                    Err(err) => {
                        tracing::warn!(path = %path.display(), error = %err, "ignoring a bad cache entry")
                    }
                },
                Err(why) => {
                    tracing::warn!(path = %path.display(), why, "ignoring a cache entry the broker may not have written")
                }
            }
        }
        let component = Component::new(engine, bytes)
            .map_err(|e| LoadError(format!("not a valid WebAssembly component: {e:#}")))?;
        if let Some(path) = cached {
            if let Err(err) = write_atomically(&path, &component) {
                tracing::warn!(path = %path.display(), error = %err, "cannot cache a compiled policy");
            }
        }
        Ok((component, Source::Compiled))
    }
}

/// Whether `path` (and its directory) can only have been written by us.
fn trusted(path: &Path) -> Result<(), &'static str> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let dir = path.parent().ok_or("no directory")?;
    for (meta, what) in [
        (std::fs::symlink_metadata(path), "file"),
        (std::fs::metadata(dir), "directory"),
    ] {
        let meta = meta.map_err(|_| "cannot stat it")?;
        if meta.uid() != me {
            return Err(if what == "file" {
                "the file belongs to another user"
            } else {
                "the directory belongs to another user"
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err("others may write it");
        }
        if what == "file" && !meta.is_file() {
            return Err("not a regular file");
        }
    }
    Ok(())
}

fn write_atomically(path: &Path, component: &Component) -> anyhow::Result<()> {
    let bytes = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let dir = path.parent().expect("cache files live in a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // A temporary file of its own per write: two loads at once (an upload
    // while the watcher reloads, or two brokers sharing the directory)
    // must never rename one policy's bytes to the other's name.
    let mut tmp = tempfile::Builder::new()
        .prefix(".compiling-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    tmp.persist(path)?;
    Ok(())
}

/// A directory name that changes whenever compiled artifacts would not load.
pub(super) fn compatibility_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("wasmtime-{:016x}", hasher.finish())
}
