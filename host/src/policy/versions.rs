//! A tenant's policy versions: the last [`KEPT`] it had in force, compiled,
//! so that a rollback is a swap (no compiling, no failed request), and the
//! record of them on disk, so that a rollback survives a restart.
//!
//! A version is named by its component's content: `id` is the first
//! [`SHORT_ID`] hex digits of its sha256 (`builtin` for the built-in
//! policy), shown with the name and version the component gives itself.
//! The list is ordered by when each version was last put in force, newest
//! first; the previous version (a rollback's default) is the newest one not
//! in force.
//!
//! On disk (tenants with a `policy` file only): the file itself holds the
//! version in force (an upload and a rollback both rewrite it, so a restart
//! loads what was in force, by content, not by file times), and
//! `<policy_dir>/.versions/<tenant>/` holds each kept version's bytes
//! (`<sha256>.wasm`) and the list (`versions.json`). After a restart the
//! kept versions are listed at once and compiled when first rolled back to
//! (from the compile cache: milliseconds).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use super::Loaded;

/// How many versions a tenant keeps, the one in force included.
pub const KEPT: usize = 5;

/// Hex digits of the sha256 in a version's id.
pub const SHORT_ID: usize = 12;

/// The id of the built-in policy's version.
pub const BUILTIN_ID: &str = "builtin";

/// The id of the component whose sha256 is `sha256`.
pub fn short_id(sha256: &str) -> String {
    sha256.chars().take(SHORT_ID).collect()
}

/// How a version was put in force (last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadedBy {
    /// The broker's start (its policy file, or the built-in policy).
    Startup,
    /// A change of the policy file (hot reload, or a config reload).
    File,
    /// `PUT /v1/admin/tenants/{tenant}/policy`.
    Upload,
    /// `POST /v1/admin/tenants/{tenant}/policy/rollback`.
    Rollback,
    /// `POST /v1/admin/tenants/{tenant}/policy/promote`.
    Promote,
}

/// One kept version.
#[derive(Clone, Serialize, Deserialize)]
pub struct Version {
    pub id: String,
    /// None for the built-in policy.
    pub sha256: Option<String>,
    pub name: String,
    pub version: String,
    /// When it was last put in force, RFC 3339.
    pub loaded_at: String,
    pub loaded_by: LoadedBy,
    /// The compiled policy; none for a version read back from disk and not
    /// compiled since.
    #[serde(skip)]
    pub compiled: Option<Arc<Loaded>>,
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("loaded_by", &self.loaded_by)
            .field("compiled", &self.compiled.is_some())
            .finish_non_exhaustive()
    }
}

impl Version {
    /// Whether `id` names this version: its id, or its whole sha256.
    pub fn is(&self, id: &str) -> bool {
        self.id == id || self.sha256.as_deref() == Some(id)
    }
}

/// A tenant's kept versions, newest first.
#[derive(Debug, Default, Clone)]
pub struct Versions {
    kept: Vec<Version>,
}

impl Versions {
    /// Records that `loaded` (not a stand-in) was put in force `by`: it
    /// goes first, once; the oldest beyond [`KEPT`] are dropped.
    pub fn record(&mut self, loaded: &Arc<Loaded>, by: LoadedBy) {
        let id = loaded.id();
        self.kept.retain(|v| v.id != id);
        self.kept.insert(
            0,
            Version {
                id,
                sha256: loaded.sha256.clone(),
                name: loaded.descriptor.name.clone(),
                version: loaded.descriptor.version.clone(),
                loaded_at: loaded.loaded_at.clone(),
                loaded_by: by,
                compiled: Some(loaded.clone()),
            },
        );
        self.kept.truncate(KEPT);
    }

    /// Records that `loaded` was put in force at start: a version kept
    /// from before the restart stays where it was (it was in force then
    /// too) and gets its compiled policy; another is recorded `startup`.
    pub fn record_start(&mut self, loaded: &Arc<Loaded>) {
        let id = loaded.id();
        match self.kept.iter_mut().find(|v| v.id == id) {
            Some(kept) => kept.compiled = Some(loaded.clone()),
            None => self.record(loaded, LoadedBy::Startup),
        }
    }

    /// The kept versions, newest first.
    pub fn list(&self) -> &[Version] {
        &self.kept
    }

    /// The version `id` names (its id or its sha256).
    pub fn find(&self, id: &str) -> Option<&Version> {
        self.kept.iter().find(|v| v.is(id))
    }

    /// The newest version that is not `active`'s.
    pub fn previous(&self, active: &str) -> Option<&Version> {
        self.kept.iter().find(|v| v.id != active)
    }

    /// Keeps `id`'s compiled policy (compiled from its bytes on disk).
    pub fn compiled(&mut self, id: &str, loaded: &Arc<Loaded>) {
        if let Some(v) = self.kept.iter_mut().find(|v| v.id == id) {
            v.compiled = Some(loaded.clone());
        }
    }

    /// Versions read back from disk (not compiled), replacing these.
    pub fn restore(&mut self, mut kept: Vec<Version>) {
        kept.truncate(KEPT);
        self.kept = kept;
    }
}

/// A tenant's record of its versions on disk:
/// `<policy_dir>/.versions/<tenant>/`.
#[derive(Debug, Clone)]
pub struct Record {
    dir: PathBuf,
}

/// The file of the list in a [`Record`].
const LIST: &str = "versions.json";

impl Record {
    /// `tenant`'s record under `policy_dir`.
    pub fn new(policy_dir: &Path, tenant: &str) -> Record {
        Record {
            dir: policy_dir.join(".versions").join(tenant),
        }
    }

    fn bytes_path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.wasm"))
    }

    /// Keeps the bytes of the component `sha256` (once).
    ///
    /// # Errors
    /// The directory or file cannot be written.
    pub fn keep_bytes(&self, sha256: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.bytes_path(sha256);
        if path.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        write_atomically(&path, bytes)
    }

    /// The kept bytes of the component `sha256`.
    ///
    /// # Errors
    /// They are gone (or unreadable).
    pub fn bytes(&self, sha256: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.bytes_path(sha256))
    }

    /// Writes `versions` as the list, and drops the bytes of versions no
    /// longer kept.
    ///
    /// # Errors
    /// The list cannot be written.
    pub fn save(&self, versions: &Versions) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let json = serde_json::to_vec_pretty(versions.list()).map_err(std::io::Error::other)?;
        write_atomically(&self.dir.join(LIST), &json)?;
        let kept: Vec<String> = versions
            .list()
            .iter()
            .filter_map(|v| v.sha256.as_ref().map(|s| format!("{s}.wasm")))
            .collect();
        for entry in std::fs::read_dir(&self.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".wasm") && !kept.contains(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    /// The list as last saved (empty if none, or unreadable: logged).
    pub fn load(&self) -> Vec<Version> {
        let path = self.dir.join(LIST);
        match std::fs::read(&path) {
            Ok(json) => serde_json::from_slice(&json).unwrap_or_else(|err| {
                tracing::warn!(path = %path.display(), %err, "policy versions record unreadable; starting a new one");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        }
    }
}

/// Writes `bytes` to `path` by a rename, so a reader sees the old or the
/// new content whole.
///
/// # Errors
/// The file cannot be written or renamed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.upload-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Builtin, Descriptor};

    fn loaded(sha: &str) -> Arc<Loaded> {
        Arc::new(Loaded {
            sha256: Some(format!("{sha}{}", "0".repeat(64 - sha.len()))),
            descriptor: Descriptor {
                name: format!("p-{sha}"),
                version: "1".into(),
            },
            ..Loaded::native(Builtin, false)
        })
    }

    fn ids(v: &Versions) -> Vec<String> {
        v.list().iter().map(|v| v.id.clone()).collect()
    }

    #[test]
    fn newest_first_once_each_at_most_kept() {
        let mut v = Versions::default();
        for sha in ["a", "b", "c", "d", "e", "f"] {
            v.record(&loaded(sha), LoadedBy::Upload);
        }
        assert_eq!(ids(&v).len(), KEPT);
        assert_eq!(ids(&v)[0], "f00000000000");
        assert!(v.find("a00000000000").is_none(), "the oldest was dropped");
        // Put in force again: it moves first, not twice.
        v.record(&loaded("c"), LoadedBy::Rollback);
        assert_eq!(ids(&v)[..2], ["c00000000000", "f00000000000"]);
        assert_eq!(ids(&v).len(), KEPT);
        assert_eq!(v.list()[0].loaded_by, LoadedBy::Rollback);
        // The previous version: the newest not in force.
        assert_eq!(v.previous("c00000000000").unwrap().id, "f00000000000");
        // Found by id or whole sha256.
        let sha = loaded("d").sha256.clone().unwrap();
        assert_eq!(v.find(&sha).unwrap().id, "d00000000000");
    }

    #[test]
    fn a_start_keeps_a_version_from_before_in_its_place() {
        let mut v = Versions::default();
        v.record(&loaded("a"), LoadedBy::Upload);
        v.record(&loaded("b"), LoadedBy::Upload);
        v.record(&loaded("a"), LoadedBy::Rollback);
        let mut restored = Versions::default();
        restored.restore(
            v.list()
                .iter()
                .map(|k| Version {
                    compiled: None,
                    ..k.clone()
                })
                .collect(),
        );
        restored.record_start(&loaded("a"));
        assert_eq!(ids(&restored), ids(&v));
        assert_eq!(restored.list()[0].loaded_by, LoadedBy::Rollback);
        assert!(restored.list()[0].compiled.is_some());
        assert!(restored.list()[1].compiled.is_none());
        // A file changed while the broker was down: a new version.
        restored.record_start(&loaded("c"));
        assert_eq!(restored.list()[0].loaded_by, LoadedBy::Startup);
    }

    #[test]
    fn the_record_round_trips_and_drops_bytes_no_longer_kept() {
        let dir = std::env::temp_dir().join(format!("lb-versions-{}", std::process::id()));
        let record = Record::new(&dir, "t");
        let mut v = Versions::default();
        for sha in ["a", "b", "c", "d", "e", "f"] {
            let l = loaded(sha);
            record
                .keep_bytes(l.sha256.as_deref().unwrap(), sha.as_bytes())
                .unwrap();
            v.record(&l, LoadedBy::Upload);
            record.save(&v).unwrap();
        }
        let back = record.load();
        assert_eq!(
            back.iter().map(|v| v.id.clone()).collect::<Vec<_>>(),
            ids(&v)
        );
        let a = loaded("a").sha256.clone().unwrap();
        let f = loaded("f").sha256.clone().unwrap();
        assert!(record.bytes(&a).is_err(), "dropped with its version");
        assert_eq!(record.bytes(&f).unwrap(), b"f");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
