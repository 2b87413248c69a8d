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
//! let client = lockbroker_client::Client::from_env()?; // LOCKBROKER_URL, LOCKBROKER_API_KEY, ...
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
//! - [`Client`] (`client.rs`): one broker, one key, a connection pool, and
//!   the one place where a call is timed, retried and decoded. Every call
//!   has a deadline, its wait plus the client's [slack](ClientBuilder::slack)
//!   ([`DEFAULT_SLACK`]), that its retries fit in: on 503 and on
//!   connections that could not be made (a bounded number of times, with
//!   growing, jittered delays or the broker's `retry_after_ms`), and on
//!   429 `rate_limited` / `quota_exceeded` once the broker's
//!   `retry_after_ms` (or `Retry-After`) has passed; never on another 4xx
//!   ([`RetryPolicy`], `retry.rs`). When the next wait would pass the
//!   deadline the call fails at once with the broker's last answer (a 429
//!   with its [`retry_after`](Error::retry_after)). A request that must
//!   not be sent twice (an acquire, a release) whose connection broke
//!   after it went out is [`Error::OutcomeUnknown`], not retried.
//!   `transport.rs` is the HTTP exchange (hyper, rustls for `https://`);
//!   `tls.rs` its settings: a [CA file](ClientBuilder::ca_file) or the
//!   system's roots, and a [client certificate](ClientBuilder::client_cert)
//!   for mutual TLS.
//! - One generic model for every lease kind, over the API's [`LeaseKind`]
//!   ([`Lock`], [`Semaphore`], [`RwLock`], [`Election`]), as kube-rs serves
//!   every Kubernetes kind through one `Api<K>`:
//!   - [`Leases<K>`](Leases) (`leases.rs`): the typed calls, written once:
//!     acquire, renew, release, status, [`list`](Leases::list), history;
//!     [`Client::locks`], [`Client::semaphores`], [`Client::rwlocks`],
//!     [`Client::elections`] are its shorthands, and a kind's own calls
//!     ([`Locks::validate`], [`Elections::observe`]) sit beside them.
//!   - [`LeaseBuilder<K>`](LeaseBuilder) (`builder.rs`): who holds, for how
//!     long, how long to wait; [`Client::lock`], [`Client::semaphore`],
//!     [`Client::read_lock`] / [`Client::write_lock`],
//!     [`Client::election`], [`Client::multilock`] start one. An acquire
//!     cancelled (its future dropped) or ending with an unknown outcome
//!     gives back what it may have been granted (`pending.rs`).
//!   - [`Guard<K>`](Guard) (`guard.rs`): the one guard: renewal every
//!     third of the TTL, [`Guard::lost`], [`Guard::release`], release on
//!     drop; [`Renewable`] is what its task needs (renew, release),
//!     [`Guarded`] what acquiring adds.
//!   - [`Session`] (`session.rs`): many leases of every kind kept alive
//!     by one keepalive ([`Client::session`]; [`Session::lock`],
//!     [`Session::semaphore`], [`Session::read_lock`] /
//!     [`Session::write_lock`], [`Session::multilock`],
//!     [`Session::election`] take the [`Client`]'s builder of the kind),
//!     with one lost signal; the session is itself kept by a [`Guard`] (a
//!     keepalive is its renewal, a close its release), and its leases are
//!     guards that follow it instead of renewing. [`Sessions`]
//!     (`sessions.rs`): the typed calls of `/v1/sessions`.
//!   - `kinds.rs`: what each kind adds ([`Kind`]: its acquire body, its
//!     "taken" refusal, where its status shows a holder); `multilock.rs`:
//!     several locks as one lease ([`MultiLock`], [`MultiLocks`]).
//! - [`Client::events`] (`events.rs`): every change of the tenant's leases
//!   under a prefix, resumed with `Last-Event-ID` when the connection
//!   ends; [`Elections::observe`] (`observe.rs`): the changes of leader,
//!   reconnecting too; `sse.rs` parses Server-Sent Events for both.
//!   [`Admin`] for tenants, policies and force-release.
//! - [`Error`] (`error.rs`): every failure, with the API's [`ErrorCode`]
//!   when the broker refused.
//!
//! The conformance scenarios every client implements
//! (`clients/CONFORMANCE.md`) are `tests/rust_conformance.rs`; the
//! crate's README lists which test covers which.
//!
//! # HTTPS and mutual TLS
//!
//! ```no_run
//! # fn main() -> Result<(), lockbroker_client::Error> {
//! // Or Client::from_env() with LOCKBROKER_URL, LOCKBROKER_API_KEY,
//! // LOCKBROKER_CA_FILE, LOCKBROKER_CLIENT_CERT and LOCKBROKER_CLIENT_KEY.
//! let client = lockbroker_client::Client::builder("https://broker.internal:7443")
//!     .api_key("team-a-key")
//!     .ca_file("/etc/lockbroker/tls/ca.pem") // trusted instead of the system's roots
//!     .client_cert("/etc/lockbroker/tls/me.pem", "/etc/lockbroker/tls/me.key")
//!     .build()?; // Error::TlsFile names a file it cannot read or use
//! # drop(client);
//! # Ok(())
//! # }
//! ```
//!
//! A broker that refuses the certificate (or whose own is not trusted)
//! fails the call with [`Error::Tls`], at once: it is not retried.
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
//!
//! # Listing and events
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockbroker_client::Error> {
//! use lockbroker_client::{Client, Event, Semaphore};
//!
//! let client = Client::from_env()?;
//! // Every live lock under `jobs/` (the pages followed), then one page of
//! // semaphores: every kind is listed by the same calls.
//! for lock in client.locks().list_all("jobs/", 1000).await? {
//!     println!("{} held by {:?}", lock.storage_key, lock.owner);
//! }
//! let page = client.leases::<Semaphore>().list("pools/", Some(50), None).await?;
//! println!("{} semaphores, more: {}", page.items.len(), page.next.is_some());
//! // Each change under `jobs/` from now on, resumed if the connection ends.
//! let mut events = client.events("jobs/", None).await?;
//! while let Event::Change(change) = events.next().await? {
//!     println!("{:?} {} by {}", change.event, change.storage_key, change.owner);
//! }
//! # Ok(())
//! # }
//! ```

mod admin;
mod builder;
mod client;
mod error;
mod events;
mod guard;
mod kinds;
mod leases;
mod multilock;
mod observe;
mod owner;
mod pending;
mod retry;
mod session;
mod sessions;
mod sse;
mod tls;
mod transport;

pub use admin::Admin;
pub use builder::{
    ElectionBuilder, LeaseBuilder, LockBuilder, RwLockBuilder, SemaphoreBuilder, DEFAULT_WAIT,
};
pub use client::{Client, ClientBuilder, DEFAULT_SLACK};
pub use error::{ApiError, Error, LostReason, Result};
pub use events::{Event, EventStream, Events};
pub use guard::{Guard, Guarded, Renewable};
pub use kinds::{Kind, Recorded};
pub use leases::{Elections, Leases, Locks, RwLocks, Semaphores};
pub use multilock::{MultiLock, MultiLockBuilder, MultiLockGuard, MultiLocks};
pub use observe::LeaderEvents;
pub use owner::host_name;
pub use retry::RetryPolicy;
pub use session::{Session, SessionBuilder, SessionLeaseBuilder, DEFAULT_SESSION_TTL};
pub use sessions::Sessions;

pub use futures_core::Stream;
pub use lockbroker_api as api;
pub use lockbroker_api::{
    CycleStep, Election, ElectionEvent, ErrorCode, LeaseKind, Lock, RwLock, Semaphore,
};
/// The TLS library, for [`ClientBuilder::tls_config`].
pub use rustls;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;

/// A held lock.
pub type LockGuard = Guard<Lock>;
/// A held semaphore permit.
pub type PermitGuard = Guard<Semaphore>;
/// A held read or write lease of a rwlock.
pub type RwLockGuard = Guard<RwLock>;
/// A leadership held; its token is the term.
pub type LeaderGuard = Guard<Election>;
