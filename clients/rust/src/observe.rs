//! `GET /v1/elections/{name}/observe` as [`LeaderEvents`]: the leadership
//! now, then each change of leader, across broken connections. The broker
//! has no ids for these events: a new connection starts with the
//! leadership at that moment, which the stream yields only if it differs
//! from the last one it yielded (a change made while it was away), so a
//! reconnection never repeats what was seen.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use futures_core::Stream;
use lockbroker_api::{ElectionEvent, ElectionStatus};

use crate::{
    client::Client,
    error::{Error, Result},
    sse::{self, EventBody, RawEvent},
};

/// The leader changes of one election, as they stream in (from
/// [`Elections::observe`](crate::Elections::observe)): call
/// [`LeaderEvents::next`], or use it as a [`Stream`].
///
/// When the connection ends or breaks, the next call opens it again (as
/// often as the client's [`RetryPolicy`](crate::RetryPolicy) allows in a
/// row, waiting between tries); it yields an error only when that fails,
/// and calling it again then tries anew. It never ends by itself.
pub struct LeaderEvents {
    next: Pin<Box<dyn Future<Output = (Observer, Result<ElectionEvent>)> + Send>>,
}

/// The state of a [`LeaderEvents`] between events.
struct Observer {
    client: Client,
    path: String,
    body: Option<EventBody<ElectionEvent>>,
    /// The leader and term last yielded.
    last: Option<(Option<String>, Option<u64>)>,
}

impl LeaderEvents {
    /// Opens the stream at `path` (`/v1/elections/{name}/observe`).
    pub(crate) async fn open(client: &Client, path: String) -> Result<LeaderEvents> {
        let mut observer = Observer {
            client: client.clone(),
            path,
            body: None,
            last: None,
        };
        observer.open().await?;
        Ok(LeaderEvents {
            next: Box::pin(next_of(observer)),
        })
    }

    /// The next change of leader (the first: the leadership when the stream
    /// opened). `None` never comes: the stream reconnects; the `Option` is
    /// a [`Stream`]'s.
    ///
    /// # Errors
    /// When the stream cannot be opened again, or the broker sent something
    /// that is not an event.
    pub async fn next(&mut self) -> Option<Result<ElectionEvent>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for LeaderEvents {
    type Item = Result<ElectionEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let (observer, event) = std::task::ready!(self.next.as_mut().poll(cx));
        self.next = Box::pin(next_of(observer));
        Poll::Ready(Some(event))
    }
}

/// The next event, with the observer to take the one after from.
async fn next_of(mut observer: Observer) -> (Observer, Result<ElectionEvent>) {
    let event = observer.next().await;
    (observer, event)
}

impl Observer {
    async fn open(&mut self) -> Result<()> {
        let response = self.client.open_stream(&self.path, None).await?;
        self.body = Some(EventBody::new(response.into_body(), leader_event));
        Ok(())
    }

    async fn next(&mut self) -> Result<ElectionEvent> {
        let mut reconnects = 0;
        loop {
            if self.body.is_none() {
                self.open().await?;
            }
            let body = self.body.as_mut().expect("just opened");
            let why = match body.next().await {
                Some(Ok(ElectionEvent::Leader(now))) => {
                    let seen = (now.leader.clone(), now.term);
                    if self.last.as_ref() == Some(&seen) {
                        // The first event of a new connection, unchanged.
                        continue;
                    }
                    self.last = Some(seen);
                    return Ok(ElectionEvent::Leader(now));
                }
                Some(Err(Error::Connect(why))) => why,
                Some(Err(err)) => {
                    self.body = None;
                    return Err(err);
                }
                None => "the broker ended the stream".to_owned(),
            };
            self.body = None;
            reconnects += 1;
            let policy = self.client.retry_policy();
            if reconnects >= policy.attempts.max(1) {
                return Err(Error::Connect(why));
            }
            tokio::time::sleep(policy.delay(reconnects, None)).await;
        }
    }
}

/// A `leader` event of `observe`; other kinds are skipped.
fn leader_event(raw: &RawEvent) -> Option<Result<ElectionEvent>> {
    (raw.name == "leader").then(|| sse::data::<ElectionStatus>(raw).map(ElectionEvent::Leader))
}
