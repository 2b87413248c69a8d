//! Policy components for tests: the ones `scripts/build-plugins` puts in
//! `plugins/dist`, and a policy directory of a test's own to deploy them to
//! (a broker's `policy_dir`: watched, and written by admin uploads).

use std::path::{Path, PathBuf};

use crate::fresh_db_name;

/// A built component from `plugins/dist`.
///
/// # Panics
/// It is missing (`scripts/build-plugins` makes it).
pub fn dist(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/dist")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-plugins",
        path.display()
    );
    path
}

/// A policy directory of its own for one test, removed at the end.
pub struct PolicyDir(pub PathBuf);

impl PolicyDir {
    /// A fresh empty directory, named after `prefix`.
    pub fn new(prefix: &str) -> PolicyDir {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", fresh_db_name()));
        std::fs::create_dir_all(&dir).unwrap();
        PolicyDir(dir)
    }

    /// Puts `component` (of `plugins/dist`) in place as `file`, atomically
    /// (as a deploy would).
    pub fn install(&self, component: &str, file: &str) {
        let tmp = self.0.join(format!(".{file}.tmp"));
        std::fs::copy(dist(component), &tmp).unwrap();
        std::fs::rename(&tmp, self.0.join(file)).unwrap();
    }

    /// Puts `bytes` in place as `file`, atomically.
    pub fn write(&self, file: &str, bytes: &[u8]) {
        let tmp = self.0.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, self.0.join(file)).unwrap();
    }
}

impl Drop for PolicyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
