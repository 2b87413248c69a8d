//! `GET /v1/events`: every change of the tenant's locks, semaphores and
//! rwlocks under a prefix, made through any broker ([`Events`], from
//! [`Client::events`]). The stream resumes where it left off when its
//! connection ends, with `Last-Event-ID`, as a browser's `EventSource`
//! does.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use futures_core::Stream;
use lockbroker_api::StreamEvent;

use crate::{
    client::Client,
    error::{Error, Result},
    sse::{self, EventBody, RawEvent},
    transport::segment,
};

/// One item of [`Events`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A lease was granted, released, expired, handed off or
    /// force-released.
    Change(StreamEvent),
    /// The broker's history no longer reaches back to where the stream
    /// resumed: changes were missed, and what follows starts at the oldest
    /// change it kept.
    Reset,
}

/// The changes of the tenant's leases under a prefix, as they happen: call
/// [`Events::next`], or turn it into a [`Stream`] with
/// [`Events::into_stream`]. When the connection ends or breaks, `next`
/// opens it again after the last event received (`Last-Event-ID`), so
/// nothing the broker still keeps is missed.
pub struct Events {
    client: Client,
    path: String,
    last_id: Option<u64>,
    body: Option<EventBody<Event>>,
}

impl Client {
    /// Opens `GET /v1/events?prefix=`: the changes of the tenant's locks,
    /// semaphores and rwlocks whose storage key starts with `prefix`
    /// (matched literally), made after `after` (an event id), or from now
    /// on. Once this returns, every later change is in the stream.
    ///
    /// # Errors
    /// `too_many_streams` (429) when the tenant has its most streams open
    /// on the broker; every error of [`Error`].
    pub async fn events(&self, prefix: &str, after: Option<u64>) -> Result<Events> {
        let mut events = Events {
            client: self.clone(),
            path: format!("/v1/events?prefix={}", segment(prefix)),
            last_id: after,
            body: None,
        };
        events.open().await?;
        Ok(events)
    }
}

impl Events {
    /// The next event, reconnecting as often as the client's
    /// [`RetryPolicy`](crate::RetryPolicy) allows in a row when the stream
    /// ends or breaks without one.
    ///
    /// # Errors
    /// When the stream cannot be opened again (calling `next` again tries
    /// anew), or the broker sent something that is not an event.
    pub async fn next(&mut self) -> Result<Event> {
        let mut reconnects = 0;
        loop {
            if self.body.is_none() {
                self.open().await?;
            }
            let body = self.body.as_mut().expect("just opened");
            let why = match body.next().await {
                Some(Ok(event)) => {
                    if let Event::Change(change) = &event {
                        self.last_id = Some(change.id);
                    }
                    return Ok(event);
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

    /// The id of the last change received (or the `after` it was opened
    /// with): where a new stream would resume.
    pub fn last_id(&self) -> Option<u64> {
        self.last_id
    }

    /// The events as a [`Stream`] (for `futures::StreamExt`, `select!`
    /// over several streams, ...); it never ends by itself.
    pub fn into_stream(self) -> EventStream {
        EventStream {
            next: Box::pin(next_of(self)),
        }
    }

    async fn open(&mut self) -> Result<()> {
        let response = self.client.open_stream(&self.path, self.last_id).await?;
        self.body = Some(EventBody::new(response.into_body(), event));
        Ok(())
    }
}

/// A change or a reset; events of other names are skipped.
fn event(raw: &RawEvent) -> Option<Result<Event>> {
    match raw.name.as_str() {
        "reset" => Some(Ok(Event::Reset)),
        "granted" | "released" | "expired" | "handed_off" | "force_released" => {
            Some(sse::data(raw).map(Event::Change))
        }
        _ => None,
    }
}

/// [`Events`] as a [`Stream`]; from [`Events::into_stream`].
pub struct EventStream {
    next: Pin<Box<dyn Future<Output = (Events, Result<Event>)> + Send>>,
}

/// The next event, with the stream to take the one after from.
async fn next_of(mut events: Events) -> (Events, Result<Event>) {
    let event = events.next().await;
    (events, event)
}

impl Stream for EventStream {
    type Item = Result<Event>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let (events, event) = std::task::ready!(self.next.as_mut().poll(cx));
        self.next = Box::pin(next_of(events));
        Poll::Ready(Some(event))
    }
}
