//! lockbroker: a distributed lock broker over HTTP, stored in MySQL, with
//! per-tenant WebAssembly policy plugins.
//!
//! How a request flows: [`http`] authenticates it against the [`tenant`]s,
//! asks the tenant's [`policy`] for the storage key, and hands it to the
//! [`engine`], which grants, renews and releases leases as short
//! transactions through [`store`]. Every lease kind (locks, semaphores,
//! rwlocks, elections) goes through one generic set of handlers
//! (`http::resource`) over the wire description of the kind in the
//! `lockbroker_api` crate.
//!
//! Layers call only downward: [`server`] → [`http`] → [`app`] → [`engine`]
//! → [`store`], with [`tenant`] and [`policy`] beside the engine. [`app`]
//! builds what every request shares from a [`config`], and
//! [`reconfigure`] replaces what can change live when the config file is
//! reloaded; [`server`] binds the listener and runs it with the background
//! tasks; [`metrics`] counts what happens and [`telemetry`] sets up the
//! logs and traces. Clients live in their own crates (`clients/`).

pub mod app;
pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod quota;
pub mod reconfigure;
pub mod secret;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod tls;
pub mod ui;

pub use app::App;
pub use config::Config;
pub use server::Server;
