//! A client that writes down what it does: each call times the request,
//! bounds it by a client-side limit and records it in the [`History`].

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use lockbroker_api::{Lease, ReleaseResponse};

use crate::{Client, ClientError, Reply};

use super::{History, Op, Outcome, Request};

/// A broker client bound to a history. Cheap to clone and to make: a load
/// driver may make one per request to alternate between brokers.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    history: Arc<History>,
    /// How long an answer may take beyond the request's own `wait_ms`.
    timeout: Duration,
}

impl Recorder {
    pub fn new(client: Client, history: Arc<History>, timeout: Duration) -> Recorder {
        Recorder {
            client,
            history,
            timeout,
        }
    }

    pub fn history(&self) -> &Arc<History> {
        &self.history
    }

    /// Acquires `key` for `owner` and records it.
    pub async fn acquire(&self, key: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> Outcome {
        let request = Request::Acquire { ttl_ms, wait_ms };
        let limit = self.timeout + Duration::from_millis(wait_ms);
        self.exchange(key, owner, request, limit, || {
            self.client.acquire(key, owner, ttl_ms, wait_ms)
        })
        .await
    }

    /// Releases `key` and records it.
    pub async fn release(&self, key: &str, owner: &str, token: u64) -> Outcome {
        let request = Request::Release { token };
        self.exchange(key, owner, request, self.timeout, || {
            self.client.release(key, owner, token)
        })
        .await
    }

    /// Renews `key`'s lease and records it.
    pub async fn renew(&self, key: &str, owner: &str, token: u64, ttl_ms: u64) -> Outcome {
        let request = Request::Renew { token, ttl_ms };
        self.exchange(key, owner, request, self.timeout, || {
            self.client.renew(key, owner, token, ttl_ms)
        })
        .await
    }

    async fn exchange<F, Fut>(
        &self,
        key: &str,
        owner: &str,
        request: Request,
        limit: Duration,
        send: F,
    ) -> Outcome
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Reply, ClientError>>,
    {
        let sent = Instant::now();
        let outcome = match tokio::time::timeout(limit, send()).await {
            Ok(Ok(reply)) => outcome_of(request, &reply),
            Ok(Err(ClientError::Timeout(_))) | Err(_) => Outcome::Timeout,
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
        };
        self.history.record(Op {
            key: key.to_owned(),
            owner: owner.to_owned(),
            request,
            sent,
            answered: Instant::now(),
            outcome: outcome.clone(),
        });
        outcome
    }
}

/// The answer as the checks need it: a 2xx body read as what `request`
/// answers with (a [`Lease`] or a [`ReleaseResponse`]); an error body has
/// none of those fields.
fn outcome_of(request: Request, reply: &Reply) -> Outcome {
    let (token, hold_count, released) = match request {
        Request::Acquire { .. } | Request::Renew { .. } => reply
            .try_parse::<Lease>()
            .map_or((None, None, None), |lease| {
                (Some(lease.token), Some(lease.hold_count), None)
            }),
        Request::Release { .. } => reply
            .try_parse::<ReleaseResponse>()
            .map_or((None, None, None), |r| {
                (None, Some(r.hold_count), Some(r.released))
            }),
    };
    Outcome::Reply {
        status: reply.status,
        token,
        hold_count,
        released,
    }
}
