//! `/v1/elections/{name}`: the typed calls ([`Elections`]), the leadership
//! guard builder ([`ElectionBuilder`], from [`Client::election`]) and the
//! stream of leader changes ([`LeaderEvents`], from
//! [`Elections::observe`]).

use std::{
    collections::VecDeque,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use futures_core::Stream;
use hyper::{
    body::{Body, Incoming},
    Method,
};
use lockbroker_api::{
    CampaignRequest, ElectionEvent, ElectionRenewRequest, ElectionStatus, ErrorCode, Leadership,
    ResignRequest, ResignResponse,
};
use tokio::time::Instant;

use crate::{
    client::{Client, Idempotent},
    error::{Error, Result},
    guard::{sealed::Renewable, Grant, Guard},
    options::{lease_options, millis, LeaseOptions},
    sse,
    transport::segment,
};

/// A leadership held: [`Guard`] over a [`Leadership`]; its token is the
/// term.
pub type LeaderGuard = Guard<Leadership>;

/// The election calls of a [`Client`], one per endpoint.
#[derive(Clone, Copy)]
pub struct Elections<'a> {
    client: &'a Client,
}

impl Client {
    /// The election calls.
    pub fn elections(&self) -> Elections<'_> {
        Elections { client: self }
    }

    /// A guard builder for leading the election `name`:
    /// `client.election("scheduler").campaign().await?`.
    pub fn election(&self, name: impl Into<String>) -> ElectionBuilder {
        ElectionBuilder {
            client: self.clone(),
            name: name.into(),
            options: LeaseOptions::default(),
        }
    }
}

fn path(name: &str, action: &str) -> String {
    format!("/v1/elections/{}{action}", segment(name))
}

impl Elections<'_> {
    /// `POST /v1/elections/{name}/campaign`.
    ///
    /// # Errors
    /// `lock_held` when another candidate leads past `wait_ms`.
    pub async fn campaign(&self, name: &str, request: &CampaignRequest) -> Result<Leadership> {
        let wait = Duration::from_millis(request.terms.wait_ms.unwrap_or(0));
        self.client
            .call(
                Method::POST,
                &path(name, "/campaign"),
                Some(request),
                wait,
                Idempotent::No,
            )
            .await
    }

    /// `POST /v1/elections/{name}/renew`.
    ///
    /// # Errors
    /// `lease_lost` once the term ended.
    pub async fn renew(&self, name: &str, request: &ElectionRenewRequest) -> Result<Leadership> {
        self.client
            .call(
                Method::POST,
                &path(name, "/renew"),
                Some(request),
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `POST /v1/elections/{name}/resign`.
    ///
    /// # Errors
    /// `lease_lost` when the term is not the candidate's.
    pub async fn resign(&self, name: &str, request: &ResignRequest) -> Result<ResignResponse> {
        self.client
            .call(
                Method::POST,
                &path(name, "/resign"),
                Some(request),
                Duration::ZERO,
                Idempotent::No,
            )
            .await
    }

    /// `GET /v1/elections/{name}`: who leads now.
    ///
    /// # Errors
    /// Every error of [`Error`].
    pub async fn status(&self, name: &str) -> Result<ElectionStatus> {
        self.client
            .call(
                Method::GET,
                &path(name, ""),
                None::<&()>,
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `GET /v1/elections/{name}/observe`: the leadership now, then one
    /// event per change of leader, as a [`Stream`]. The stream ends (after
    /// an error item if the connection broke) when the broker closes it; it
    /// does not reconnect by itself: open it again, the first event tells
    /// the leadership at that moment.
    ///
    /// # Errors
    /// When the stream cannot be opened (as any call).
    pub async fn observe(&self, name: &str) -> Result<LeaderEvents> {
        let response = self.client.open_stream(&path(name, "/observe")).await?;
        Ok(LeaderEvents {
            body: response.into_body(),
            parser: sse::Parser::default(),
            ready: VecDeque::new(),
            done: false,
        })
    }
}

/// The leader changes of one election, as they stream in: a
/// [`Stream`] of [`ElectionEvent`]s (use `futures::StreamExt`, or
/// [`LeaderEvents::next`] without it). Keep-alive comments are skipped, and
/// so are events of kinds this client does not know.
pub struct LeaderEvents {
    body: Incoming,
    parser: sse::Parser,
    ready: VecDeque<ElectionEvent>,
    done: bool,
}

/// Body frames read in one poll before yielding to other tasks.
const FRAMES_PER_POLL: usize = 64;

impl LeaderEvents {
    /// The next event; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Result<ElectionEvent>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    fn take(&mut self, chunk: &[u8]) -> Result<()> {
        let events = self.parser.feed(chunk).map_err(|_| Error::Unexpected {
            status: 200,
            detail: format!("an event longer than {} bytes", sse::MAX_EVENT_BYTES),
        })?;
        for raw in events {
            if raw.name != "leader" {
                continue;
            }
            let data: ElectionStatus =
                serde_json::from_str(&raw.data).map_err(|e| Error::Unexpected {
                    status: 200,
                    detail: format!("a leader event that is not one ({e}): {}", raw.data),
                })?;
            self.ready.push_back(ElectionEvent::Leader(data));
        }
        Ok(())
    }
}

impl Stream for LeaderEvents {
    type Item = Result<ElectionEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        for _ in 0..FRAMES_PER_POLL {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.done = true,
                Poll::Ready(Some(Err(err))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(Error::Connect(format!(
                        "the event stream broke: {err}"
                    )))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(chunk) = frame.data_ref() {
                        if let Err(err) = this.take(chunk) {
                            this.done = true;
                            return Poll::Ready(Some(Err(err)));
                        }
                    }
                }
            }
        }
        // Many frames without an event: let other tasks run, then go on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Builds a [`LeaderGuard`]; from [`Client::election`].
#[must_use]
pub struct ElectionBuilder {
    client: Client,
    name: String,
    options: LeaseOptions,
}

lease_options!(ElectionBuilder, "candidate");

impl ElectionBuilder {
    /// The candidate's name: the same as [`owner`](Self::owner).
    pub fn candidate(self, candidate: impl Into<String>) -> ElectionBuilder {
        self.owner(candidate)
    }

    /// Waits up to `wait` to lead, and guards the leadership (renewing the
    /// term; releasing it resigns).
    ///
    /// # Errors
    /// `lock_held` when another candidate still leads after the wait.
    pub async fn campaign(self) -> Result<LeaderGuard> {
        let wait = self.options.wait;
        self.request(wait).await
    }

    /// Tries once: `None` when another candidate leads.
    ///
    /// # Errors
    /// Every error of [`Error`] but `lock_held`.
    pub async fn try_campaign(self) -> Result<Option<LeaderGuard>> {
        match self.request(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.code() == Some(ErrorCode::LockHeld) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn request(self, wait: Duration) -> Result<LeaderGuard> {
        let candidate = self
            .options
            .owner
            .clone()
            .unwrap_or_else(|| self.client.unique_owner());
        let request = CampaignRequest {
            candidate,
            terms: lockbroker_api::LeaseTerms {
                ttl_ms: self.options.ttl_ms(),
                wait_ms: Some(millis(wait)),
                ..Default::default()
            },
        };
        let sent = Instant::now();
        let leadership = self
            .client
            .elections()
            .campaign(&self.name, &request)
            .await?;
        Ok(Guard::start(
            self.client,
            leadership,
            sent,
            Instant::now(),
            !wait.is_zero(),
        ))
    }
}

impl Grant for Leadership {
    fn token(&self) -> u64 {
        self.term
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl Renewable for Leadership {
    async fn renew(&self, client: &Client) -> Result<Leadership> {
        let request = ElectionRenewRequest {
            candidate: self.leader.clone(),
            term: self.term,
            ttl_ms: Some(self.ttl_ms),
        };
        client.elections().renew(&self.name, &request).await
    }

    async fn release(&self, client: &Client) -> Result<()> {
        let request = ResignRequest {
            candidate: self.leader.clone(),
            term: self.term,
        };
        client
            .elections()
            .resign(&self.name, &request)
            .await
            .map(drop)
    }
}
