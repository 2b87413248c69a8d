//! The Rust client of lockbroker: typed calls for every endpoint of the
//! HTTP API (the types are [`lockbroker_api`]'s), and guards that hold a
//! lease, renew it in the background and release it when dropped.
//!
//! ```no_run
//! # async fn work(_token: u64) {}
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockbroker_client::Error> {
//! use std::time::Duration;
//!
//! let client = lockbroker_client::Client::from_env()?; // LOCKBROKER_URL, LOCKBROKER_API_KEY
//! let guard = client.lock("nightly-report").ttl(Duration::from_secs(30)).acquire().await?;
//! tokio::select! {
//!     () = work(guard.token()) => guard.release().await?,
//!     lost = guard.lost() => eprintln!("stopped: {lost}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The layout:
//! - [`Client`] (`client.rs`): one broker, one key, a connection pool;
//!   every call is bounded by its wait plus [`DEFAULT_SLACK`], and retried
//!   on 503 and on connections that could not be made ([`RetryPolicy`],
//!   `retry.rs`), never on a 4xx. `transport.rs` is the HTTP exchange
//!   (hyper, rustls with the system's roots for `https://`).
//! - One module per resource, each with its typed calls and its guard
//!   builder: [`Locks`] / [`Client::lock`] → [`LockGuard`],
//!   [`Semaphores`] / [`Client::semaphore`] → [`PermitGuard`],
//!   [`Elections`] / [`Client::election`] → [`LeaderGuard`], plus
//!   [`Elections::observe`], a [`Stream`](futures_core::Stream) of leader
//!   changes (`sse.rs` parses the events); [`MultiLocks`] /
//!   [`Client::multilock`] → [`MultiLockGuard`] (several keys, all or
//!   none); [`RwLocks`] / [`Client::read_lock`], [`Client::write_lock`]
//!   → [`RwLockGuard`] (many readers or one writer); [`Admin`] for
//!   tenants, policies and force-release.
//! - [`Guard`] (`guard.rs`): the one guard implementation behind the three
//!   guards: renewal every third of the TTL, [`Guard::lost`],
//!   [`Guard::release`], release on drop.
//! - [`Error`] (`error.rs`): every failure, with the API's [`ErrorCode`]
//!   when the broker refused.
//!
//! Guards need a tokio runtime (they spawn their renewal task). A guard
//! dropped without [`Guard::release`] is released by that task, in the
//! background: if the runtime stops first, the lease simply runs out.
//!
//! # Fencing
//!
//! A lease can be lost without the holder noticing at once (a pause, a
//! partition). Pass [`Guard::token`] to whatever the lock protects and have
//! it refuse tokens older than one it has seen; stop work on
//! [`Guard::lost`].
//!
//! # Semaphores and elections
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockbroker_client::Error> {
//! let client = lockbroker_client::Client::new("http://127.0.0.1:7420", "dev-key")?;
//! // One of 4 permits, tried once.
//! if let Some(permit) = client.semaphore("encoders", 4).try_acquire().await? {
//!     println!("slot {}", permit.grant().map_or(0, |g| g.slot));
//!     permit.release().await?;
//! }
//! // Lead until resigning; observe changes of leader meanwhile.
//! let mut changes = client.elections().observe("scheduler").await?;
//! let leader = client.election("scheduler").candidate("node-2").campaign().await?;
//! println!("term {}", leader.token());
//! while let Some(event) = changes.next().await {
//!     let lockbroker_client::ElectionEvent::Leader(now) = event?;
//!     if now.term == Some(leader.token()) {
//!         break;
//!     }
//! }
//! leader.release().await?; // resigns
//! # Ok(())
//! # }
//! ```

mod admin;
mod client;
mod elections;
mod error;
mod guard;
mod locks;
mod multilock;
mod options;
mod owner;
mod retry;
mod rwlocks;
mod semaphores;
mod sse;
mod transport;

pub use admin::Admin;
pub use client::{Client, ClientBuilder, DEFAULT_SLACK};
pub use elections::{ElectionBuilder, Elections, LeaderEvents, LeaderGuard};
pub use error::{ApiError, Error, LostReason, Result};
pub use guard::{Grant, Guard};
pub use locks::{LockBuilder, LockGuard, Locks};
pub use multilock::{MultiLockBuilder, MultiLockGuard, MultiLockGuardExt, MultiLocks};
pub use options::DEFAULT_WAIT;
pub use owner::host_name;
pub use retry::RetryPolicy;
pub use rwlocks::{RwLockBuilder, RwLockGuard, RwLocks};
pub use semaphores::{PermitGuard, SemaphoreBuilder, Semaphores};

pub use lockbroker_api as api;
pub use lockbroker_api::{ElectionEvent, ErrorCode};
/// The TLS library, for [`ClientBuilder::tls_config`].
pub use rustls;
