//! Policy components for tests: the ones `scripts/build-plugins` puts in
//! `plugins/dist`, and a policy directory of a test's own to deploy them to
//! (a broker's `policy_dir`: watched, and written by admin uploads).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{PolicyVersions, TenantInfo, TenantList};

use crate::{config, fresh_db_name, Broker, Client, Reply};

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

    /// A broker on a fresh database whose `default` tenant has the policy
    /// file `p.wasm` here (installed from `default.wasm`: keys named as
    /// sent), each policy call bounded by `deadline_ms`.
    pub async fn broker(&self, deadline_ms: u64) -> Broker {
        self.install("default.wasm", "p.wasm");
        let db = fresh_db_name();
        let mut cfg = config(&db);
        cfg.policy_dir = self.0.clone();
        cfg.tenants[0].policy = Some("p.wasm".into());
        cfg.policy_deadline_ms = deadline_ms;
        Broker::start_with(db, cfg).await
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

/// `PUT /v1/admin/tenants/{tenant}/policy{query}` with `bytes` (a
/// component), through `admin`.
pub async fn put_policy(admin: &Client, tenant: &str, query: &str, bytes: Vec<u8>) -> Reply {
    admin
        .send(
            Method::PUT,
            &format!("/v1/admin/tenants/{tenant}/policy{query}"),
            &[("content-type", "application/wasm")],
            Bytes::from(bytes),
            Duration::ZERO,
        )
        .await
        .unwrap()
}

/// The id of the one version marked active in `v`.
///
/// # Panics
/// None or several are.
pub fn active_version(v: &PolicyVersions) -> &str {
    let mut on = v.versions.iter().filter(|v| v.active);
    let one = on.next().expect("one version is active");
    assert!(on.next().is_none(), "only one version is active: {v:?}");
    &one.id
}

/// Tenant `name` as `GET /v1/admin/tenants` lists it.
pub async fn tenant_info(admin: &Client, name: &str) -> TenantInfo {
    let list: TenantList = admin.get("/v1/admin/tenants").await.unwrap().ok();
    list.tenants.into_iter().find(|t| t.name == name).unwrap()
}
