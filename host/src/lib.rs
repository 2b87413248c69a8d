//! lockbroker: a distributed lock broker over HTTP, stored in MySQL, with
//! per-tenant WebAssembly policy plugins.
//!
//! How a request flows: [`http`] authenticates it against the [`tenant`]s,
//! asks the tenant's [`policy`] for the storage key, and hands it to the
//! [`engine`], which grants, renews and releases leases as short
//! transactions through [`store`]. [`app`] builds all of that from a
//! [`config`] and runs it; [`metrics`] counts what happens and
//! [`telemetry`] sets up the logs. Clients live in their own crates
//! (`clients/`).

pub mod app;
pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tenant;

pub use app::{App, Server};
pub use config::Config;
