//! Push wake-ups across brokers: when this broker hands a lease to a
//! waiter queued on another broker, it tells that broker to look now
//! (`POST /internal/v1/wake` with the waiter ids) instead of leaving it to
//! the other broker's next poll ([`super::queue::WAKE_TICK`]).
//!
//! The push is only a hint. The woken broker runs its usual wake pass,
//! which claims the grant in the database before answering its client, so
//! delivery is exactly what it is without pushes: a push that is lost,
//! late, refused or sent to a dead broker changes nothing but the latency
//! (the poll finds the grant), and a forged one can only make a broker
//! look early. Pushes are sent after the handoff committed, from a task of
//! their own, so they never delay the answer to the client that freed the
//! lease.
//!
//! Where to push and with what: each broker's heartbeat row carries its
//! advertised internal URL and a random secret of its process, the bearer
//! token its wake route accepts ([`Push`]). The database is the root of
//! trust: whoever may read `brokers` may wake a broker, nobody else. Each
//! engine keeps a directory of the live brokers of its database (and
//! whether each takes pushes: one without a URL, say of an older version,
//! is polled for), refreshed every second by the heartbeat loop and read
//! on a miss ([`Wake`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client as HyperClient},
    rt::{TokioExecutor, TokioTimer},
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};

use super::{heat::KeyHeat, held_here::MemoryWaiter, Engine, EngineError};
use crate::{config::TlsConfig, tls};

/// The TLS of pushes to other brokers (see [`Push::new`]).
fn peer_tls(tls: Option<&TlsConfig>) -> anyhow::Result<rustls::ClientConfig> {
    let roots = match tls.and_then(|t| t.peer_ca_file.as_deref()) {
        Some(ca) => tls::roots(ca)?,
        None => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            roots
        }
    };
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    Ok(match tls {
        Some(own) => builder.with_client_auth_cert(
            tls::certificates(&own.cert_file)?,
            tls::private_key(&own.key_file)?,
        )?,
        None => builder.with_no_client_auth(),
    })
}
use crate::{
    secret::{self, Secret},
    store::brokers::{self, Contact, PeerRow},
};

/// The path of the wake route, on every broker.
pub const WAKE_PATH: &str = "/internal/v1/wake";
/// The path of the route that shows a broker's waiters in memory.
pub const WAITING_PATH: &str = "/internal/v1/waiting";
/// The path of the route that shows how hot a broker saw each key.
pub const HEAT_PATH: &str = "/internal/v1/heat";
/// The whole exchange of one look at a peer's waiters (a person waits for
/// the answer; a broker that does not answer by then is left out).
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// The whole exchange of one push: a push later than a few polls is
/// worthless, and the poll is there anyway.
const PUSH_TIMEOUT: Duration = Duration::from_millis(250);
/// Time to open a connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Pushes in flight at once from this process; beyond, a push is skipped
/// (the poll delivers). Bounds the connections opened to peers too.
const MAX_IN_FLIGHT: usize = 64;
/// Idle keep-alive connections kept per peer, for the next push.
const IDLE_PER_PEER: usize = 8;
/// How long an idle connection to a peer is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The body of a push: waiters of the receiving broker that were granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeRequest {
    pub waiters: Vec<u64>,
}

/// The answer to a push: how many of those waiters still wait here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeReply {
    pub waiting: usize,
}

/// A look at a broker's waiters in memory: those of `tenant`'s locks whose
/// storage key starts with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingRequest {
    pub tenant: String,
    pub prefix: String,
}

/// Its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingReply {
    pub waiters: Vec<MemoryWaiter>,
}

/// A look at how hot a broker saw `tenant`'s keys that start with
/// `prefix` over the last `window_s` seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeatRequest {
    pub tenant: String,
    pub prefix: String,
    pub window_s: u64,
}

/// Its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeatReply {
    pub keys: Vec<KeyHeat>,
}

/// This process's side of push wake-ups, shared by its engines (one per
/// database): its secret, its advertised URL, and the HTTP client it
/// pushes with (keep-alive connections, bounded in number).
pub struct Push {
    secret: String,
    digest: Secret,
    url: Option<String>,
    client: HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
    in_flight: Arc<Semaphore>,
}

impl Push {
    /// Push wake-ups with a fresh random secret; `url` is where the other
    /// brokers reach this one (`None`: they cannot, and poll instead).
    /// Pushes to an `https://` broker trust `tls.peer_ca_file` (else the
    /// system's roots) and present this broker's own certificate, for
    /// peers that ask for one (mutual TLS).
    ///
    /// # Errors
    /// The CA file or this broker's certificate cannot be read.
    pub fn new(url: Option<String>, tls: Option<&TlsConfig>) -> anyhow::Result<Push> {
        let secret: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.enforce_http(false);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(peer_tls(tls)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = HyperClient::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(IDLE_PER_PEER)
            .build(connector);
        Ok(Push {
            digest: Secret::try_from(secret.as_str()).expect("a random, non-empty secret"),
            secret,
            url,
            client,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        })
    }

    /// The advertised URL, if any.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// True when `bearer` is this process's secret (in constant time).
    pub fn accepts(&self, bearer: &str) -> bool {
        self.digest.matches(&secret::digest(bearer))
    }

    /// What the heartbeat row says about reaching this broker.
    fn contact(&self) -> Option<Contact<'_>> {
        self.url.as_deref().map(|url| Contact {
            url,
            secret: &self.secret,
        })
    }

    /// Sends one push to `peer`; how it went (a `result` label).
    async fn send(&self, peer: &Peer, ids: Vec<u64>) -> Sent {
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            return Sent::Busy;
        };
        let body = serde_json::to_vec(&WakeRequest { waiters: ids }).expect("serializes");
        match self.call(&peer.uri, &peer.bearer, body, PUSH_TIMEOUT).await {
            Some((status, _)) if status.is_success() => Sent::Ok,
            Some(_) => Sent::Refused,
            None => Sent::Failed,
        }
    }

    /// Asks `peer` `ask` at its internal route `path`; `None` when it
    /// does not answer well in time.
    async fn ask<Q: Serialize, A: DeserializeOwned>(
        &self,
        peer: &Peer,
        path: &str,
        ask: &Q,
    ) -> Option<A> {
        let _permit = self.in_flight.clone().try_acquire_owned().ok()?;
        let body = serde_json::to_vec(ask).expect("serializes");
        let uri: Uri = format!("{}{path}", peer.base).parse().ok()?;
        let (status, body) = self.call(&uri, &peer.bearer, body, ASK_TIMEOUT).await?;
        if !status.is_success() {
            return None;
        }
        serde_json::from_slice(&body).ok()
    }

    /// One POST of `body` (JSON) to `uri` with `bearer`, within `limit`:
    /// the status and the whole answer (read to the end, so the connection
    /// goes back to the pool), or `None`.
    async fn call(
        &self,
        uri: &Uri,
        bearer: &str,
        body: Vec<u8>,
        limit: Duration,
    ) -> Option<(hyper::StatusCode, Bytes)> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(header::AUTHORIZATION, bearer)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .ok()?;
        let exchange = async {
            let response = self.client.request(request).await.ok()?;
            let status = response.status();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, body))
        };
        tokio::time::timeout(limit, exchange).await.ok().flatten()
    }
}

/// How a push went: the `result` label of `lockbroker_wake_pushes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The peer took it.
    Ok,
    /// The peer answered with an error (its secret is not the one read).
    Refused,
    /// No answer in time, or no connection.
    Failed,
    /// Too many pushes in flight: skipped.
    Busy,
    /// The peer is not a live broker that takes pushes.
    NoPeer,
}

impl Sent {
    fn label(self) -> &'static str {
        match self {
            Sent::Ok => "ok",
            Sent::Refused => "refused",
            Sent::Failed => "failed",
            Sent::Busy => "busy",
            Sent::NoPeer => "no_peer",
        }
    }
}

/// A broker to push to, as its heartbeat row says.
#[derive(Debug, Clone)]
struct Peer {
    uri: Uri,
    /// Its base URL (no trailing slash).
    base: String,
    /// `Bearer <its secret>`.
    bearer: String,
}

impl Peer {
    /// The peer of a row, if it has a secret and an `http://` base URL.
    fn of(row: &PeerRow) -> Option<Peer> {
        let url = std::str::from_utf8(row.url.as_deref()?).ok()?;
        let url = url.trim_end_matches('/');
        let secret = std::str::from_utf8(row.secret.as_deref()?).ok()?;
        // The push client speaks both (https with `peer_ca_file`).
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return None;
        }
        Some(Peer {
            uri: format!("{url}{WAKE_PATH}").parse().ok()?,
            base: url.to_owned(),
            bearer: format!("Bearer {secret}"),
        })
    }
}

/// How a grant reached one of this broker's waiters: the `via` label of
/// `lockbroker_wakeups_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// This broker made the handoff and delivered it in-process.
    Local,
    /// Another broker's push made this broker look.
    Push,
    /// This broker's own poll found it.
    Poll,
}

impl Via {
    pub(super) fn label(self) -> &'static str {
        match self {
            Via::Local => "local",
            Via::Push => "push",
            Via::Poll => "poll",
        }
    }
}

/// One engine's side of push wake-ups: the process's [`Push`] once it is
/// enabled, the live brokers of this database, and the nudge that makes
/// the wake loop look now.
#[derive(Default)]
pub(super) struct Wake {
    push: OnceLock<Arc<Push>>,
    /// Live brokers by name; `None` for one that takes no pushes.
    peers: Mutex<HashMap<Vec<u8>, Option<Peer>>>,
    /// Notified by a push received; the wake loop looks at once. Holds one
    /// permit, so a push arriving during a pass makes another pass.
    pub(super) nudge: Notify,
    /// The waiters of this engine that pushes named since the wake loop
    /// last looked: one whose row is gone (its session ended, and the
    /// broker that ended it took it out of the queue) stops waiting.
    pub(super) pushed: Mutex<Vec<u64>>,
}

impl Engine {
    /// Pushes this engine's handoffs to other brokers' waiters, and
    /// advertises `push`'s URL and secret in the heartbeat. Without it
    /// the engine neither pushes nor advertises (its waiters are polled
    /// for). Once; later calls change nothing.
    pub fn enable_push(&self, push: Arc<Push>) {
        let _ = self.wake.push.set(push);
    }

    /// What this broker's heartbeat row says about reaching it.
    pub(super) fn contact(&self) -> Option<Contact<'_>> {
        self.wake.push.get().and_then(|push| push.contact())
    }

    /// A push received for `ids`: if any of them waits on this engine,
    /// the wake loop looks now (for their grants, or for their rows gone).
    /// How many wait here.
    pub fn woken(&self, ids: &[u64]) -> usize {
        let here: Vec<u64> = {
            let local = self.local.lock().expect("local waiters");
            ids.iter()
                .copied()
                .filter(|id| local.contains_key(id))
                .collect()
        };
        if !here.is_empty() {
            self.wake.pushed.lock().expect("pushed").extend(&here);
            self.wake.nudge.notify_one();
        }
        here.len()
    }

    /// Tells the brokers of `granted` (broker name, waiter id; after the
    /// handoffs committed, or after the waiters were taken out of the
    /// queue) to look now, one push per broker, from a task of its own.
    /// Nothing when pushes are not enabled.
    pub(super) fn push_wakeups(&self, granted: Vec<(Vec<u8>, u64)>) {
        if granted.is_empty() {
            return;
        }
        let Some(push) = self.wake.push.get().cloned() else {
            return;
        };
        let mut by_broker: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
        for (broker, id) in granted {
            by_broker.entry(broker).or_default().push(id);
        }
        for (broker, ids) in by_broker {
            let (engine, push) = (self.clone(), push.clone());
            tokio::spawn(async move {
                let sent = match engine.peer(&broker).await {
                    Some(peer) => push.send(&peer, ids).await,
                    None => Sent::NoPeer,
                };
                if sent == Sent::Refused {
                    // Perhaps stale: read its row again next time.
                    engine.wake.peers.lock().expect("peers").remove(&broker);
                }
                engine
                    .metrics
                    .inc("lockbroker_wake_pushes_total", &[("result", sent.label())]);
            });
        }
    }

    /// Broker `name` as a push target: from the directory, or read from
    /// its heartbeat row on a miss.
    async fn peer(&self, name: &[u8]) -> Option<Peer> {
        if let Some(known) = self.wake.peers.lock().expect("peers").get(name) {
            return known.clone();
        }
        let mut conn = self.conn(self.budget()).await.ok()?;
        let row = brokers::peer(&mut conn, name, self.alive_us()).await.ok()?;
        conn.done();
        // Not alive: not remembered (nothing is handed to its waiters).
        let peer = Peer::of(&row?);
        self.wake
            .peers
            .lock()
            .expect("peers")
            .insert(name.to_vec(), peer.clone());
        peer
    }

    /// The waiters in memory of `tenant`'s locks whose storage key starts
    /// with `prefix`, on this broker and on each live broker (asked), each
    /// with its broker's name; and whether every broker answered.
    pub(super) async fn waiting_everywhere(
        &self,
        tenant: &str,
        prefix: &str,
    ) -> (Vec<(String, MemoryWaiter)>, bool) {
        let ask = WaitingRequest {
            tenant: tenant.to_owned(),
            prefix: prefix.to_owned(),
        };
        let (answers, complete) = self
            .ask_everyone::<_, WaitingReply>(WAITING_PATH, &ask, self.waiting_here(&ask))
            .await;
        let found = answers
            .into_iter()
            .flat_map(|(name, reply)| reply.waiters.into_iter().map(move |w| (name.clone(), w)))
            .collect();
        (found, complete)
    }

    /// How hot this broker and each live broker (asked) saw `tenant`'s
    /// keys that start with `prefix` over the last `window_s` seconds; and
    /// whether every broker answered.
    pub(super) async fn heat_everywhere(
        &self,
        tenant: &str,
        prefix: &str,
        window_s: u64,
    ) -> (Vec<KeyHeat>, bool) {
        let ask = HeatRequest {
            tenant: tenant.to_owned(),
            prefix: prefix.to_owned(),
            window_s,
        };
        let (answers, complete) = self
            .ask_everyone::<_, HeatReply>(HEAT_PATH, &ask, self.heat_here(&ask))
            .await;
        let found = answers.into_iter().flat_map(|(_, r)| r.keys).collect();
        (found, complete)
    }

    /// `ask` answered by this broker (`here`, under its own name) and by
    /// every live broker, at `path`, at once; and whether every one
    /// answered (a broker that takes no calls, or did not answer within
    /// [`ASK_TIMEOUT`], is left out).
    async fn ask_everyone<Q: Serialize, A: DeserializeOwned>(
        &self,
        path: &str,
        ask: &Q,
        here: A,
    ) -> (Vec<(String, A)>, bool) {
        let mut found = vec![(self.broker.to_string(), here)];
        let Some(push) = self.wake.push.get().cloned() else {
            return (found, true);
        };
        // The live brokers as the database says now (the directory is
        // read once a second: a broker started since would be missed).
        if self.refresh_peers().await.is_err() {
            return (found, false);
        }
        let peers: Vec<(Vec<u8>, Option<Peer>)> = self
            .wake
            .peers
            .lock()
            .expect("peers")
            .iter()
            .map(|(name, peer)| (name.clone(), peer.clone()))
            .collect();
        let asks = peers.iter().map(|(name, peer)| {
            let push = &push;
            async move {
                let answer = match peer {
                    Some(peer) => push.ask::<Q, A>(peer, path, ask).await,
                    // It cannot be reached: what it keeps is not known.
                    None => None,
                };
                (String::from_utf8_lossy(name).into_owned(), answer)
            }
        });
        let mut complete = true;
        for (name, answer) in futures_util::future::join_all(asks).await {
            match answer {
                Some(answer) => found.push((name, answer)),
                None => complete = false,
            }
        }
        (found, complete)
    }

    /// This broker's waiters in memory that `ask` names (the internal
    /// route's answer).
    pub fn waiting_here(&self, ask: &WaitingRequest) -> WaitingReply {
        WaitingReply {
            waiters: self.held_here.queues_of(&ask.tenant, &ask.prefix),
        }
    }

    /// How hot this broker saw the keys `ask` names (the internal route's
    /// answer).
    pub fn heat_here(&self, ask: &HeatRequest) -> HeatReply {
        let window = Duration::from_secs(ask.window_s);
        HeatReply {
            keys: self.heat.of(&ask.tenant, &ask.prefix, window),
        }
    }

    /// Reads the live brokers that take pushes into the directory (with
    /// each heartbeat, when pushes are enabled).
    pub(super) async fn refresh_peers(&self) -> Result<(), EngineError> {
        if self.wake.push.get().is_none() {
            return Ok(());
        }
        let mut conn = self.conn(self.budget()).await?;
        let rows = brokers::peers(&mut conn, self.alive_us()).await?;
        conn.done();
        let peers = rows
            .iter()
            .filter(|row| row.name != self.broker.as_bytes())
            .map(|row| (row.name.clone(), Peer::of(row)))
            .collect();
        *self.wake.peers.lock().expect("peers") = peers;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(url: &str) -> PeerRow {
        PeerRow {
            name: b"b".to_vec(),
            url: Some(url.as_bytes().to_vec()),
            secret: Some(b"s3cret".to_vec()),
        }
    }

    #[test]
    fn peers_are_http_or_https_base_urls() {
        let peer = Peer::of(&row("http://10.0.0.5:7420/")).unwrap();
        assert_eq!(peer.uri, "http://10.0.0.5:7420/internal/v1/wake");
        assert_eq!(peer.bearer, "Bearer s3cret");
        assert!(Peer::of(&row("http://[::1]:7420")).is_some());
        let tls = Peer::of(&row("https://b.example:7420")).unwrap();
        assert_eq!(tls.uri, "https://b.example:7420/internal/v1/wake");
        assert!(Peer::of(&row("ftp://10.0.0.5:7420")).is_none());
        assert!(Peer::of(&row("not a url")).is_none());
        let no_push = PeerRow {
            url: None,
            ..row("http://10.0.0.5:7420")
        };
        assert!(Peer::of(&no_push).is_none());
    }

    #[test]
    fn a_push_accepts_only_its_own_secret() {
        let (a, b) = (
            Push::new(None, None).unwrap(),
            Push::new(Some("http://x:1".into()), None).unwrap(),
        );
        assert!(a.accepts(&a.secret));
        assert!(!a.accepts(&b.secret));
        assert!(!a.accepts(""));
        assert_eq!(a.secret.len(), 64);
        assert!(a.contact().is_none());
        assert_eq!(b.contact().unwrap().url, "http://x:1");
    }
}
