//! lockbroker: a distributed lock broker over HTTP, stored in MySQL, with
//! per-tenant WebAssembly policy plugins.
//!
//! How a request flows: [`http`] authenticates it against the [`tenant`]s,
//! asks the tenant's [`policy`] for the storage key, and hands it to the
//! [`engine`], which grants, renews and releases leases as short
//! transactions through [`store`]. [`app`] builds all of that from a
//! [`config`] and runs it; [`metrics`] counts what happens; [`client`] is
//! the Rust client that `lockctl` and the tests use.

pub mod app;
pub mod client;
pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod shutdown;
pub mod store;
pub mod tenant;

pub use app::{App, Server};
pub use config::Config;
