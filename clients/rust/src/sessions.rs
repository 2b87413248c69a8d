//! `/v1/sessions`: the typed calls of sessions ([`Sessions`], from
//! [`Client::sessions`]), one per endpoint, with the API's types. A
//! [`Session`](crate::Session) that keeps itself alive is built on them
//! (`session.rs`).

use std::time::Duration;

use hyper::Method;
use lockbroker_api::{
    CreateSessionRequest, Page, Session as SessionInfo, SessionClosed, SessionKeepalive,
    SessionStatus, LIST_MAX_LIMIT,
};

use crate::{
    client::{Client, Idempotent},
    error::Result,
    transport::segment,
};

/// The session calls of a [`Client`]: `client.sessions().status(id)`.
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    client: &'a Client,
}

impl Client {
    /// The session calls.
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { client: self }
    }
}

impl Sessions<'_> {
    /// `/v1/sessions/{id}{action}`.
    fn path(id: &str, action: &str) -> String {
        format!("/v1/sessions/{}{action}", segment(id))
    }

    /// `POST /v1/sessions`: opens a session. Not sent twice: a second try
    /// would open a second session (the first would run out by itself).
    ///
    /// # Errors
    /// `bad_request` for a TTL out of 1 s..1 h, a lock-delay over 60 s or
    /// a name over 512 bytes; `quota_exceeded` (429) when the tenant has
    /// its `max_sessions`; every error of [`Error`](crate::Error).
    pub async fn open(&self, request: &CreateSessionRequest) -> Result<SessionInfo> {
        self.client
            .post("/v1/sessions", request, Duration::ZERO, Idempotent::No)
            .await
    }

    /// `POST /v1/sessions/{id}/keepalive`: the session (and every lease in
    /// it) lives another TTL from now.
    ///
    /// # Errors
    /// `session_not_found` (404) once it has ended (closed, expired):
    /// every lease of it is gone.
    pub async fn keepalive(&self, id: &str) -> Result<SessionKeepalive> {
        self.client
            .post(
                &Self::path(id, "/keepalive"),
                &serde_json::json!({}),
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `DELETE /v1/sessions/{id}`: ends the session and releases every
    /// lease in it. Not sent twice: a second try would answer 404 for a
    /// close that worked.
    ///
    /// # Errors
    /// `session_not_found` (404) when it had already ended.
    pub async fn close(&self, id: &str) -> Result<SessionClosed> {
        self.client
            .call(
                Method::DELETE,
                &Self::path(id, ""),
                None::<&()>,
                Duration::ZERO,
                Idempotent::No,
            )
            .await
    }

    /// `GET /v1/sessions/{id}`: the session and every lease held in it.
    ///
    /// # Errors
    /// `session_not_found` (404) once it has ended.
    pub async fn status(&self, id: &str) -> Result<SessionStatus> {
        self.client.get(&Self::path(id, "")).await
    }

    /// `GET /v1/sessions?prefix=&limit=&cursor=`: one page of the tenant's
    /// live sessions whose name starts with `prefix`, by name then id;
    /// `limit` 1 to 1000 (`None`: the broker's 100); `cursor`: the previous
    /// page's `next`.
    ///
    /// # Errors
    /// `bad_request` for a `limit` out of range or a malformed cursor.
    pub async fn list(
        &self,
        prefix: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Page<SessionInfo>> {
        let mut query = format!("?prefix={}", segment(prefix));
        if let Some(limit) = limit {
            query.push_str(&format!("&limit={limit}"));
        }
        if let Some(cursor) = cursor {
            query.push_str(&format!("&cursor={}", segment(cursor)));
        }
        self.client.get(&format!("/v1/sessions{query}")).await
    }

    /// The first `max` live sessions whose name starts with `prefix`,
    /// following the pages' cursors.
    ///
    /// # Errors
    /// As [`Sessions::list`].
    pub async fn list_all(&self, prefix: &str, max: usize) -> Result<Vec<SessionInfo>> {
        let mut items = Vec::new();
        let mut cursor = None;
        while items.len() < max {
            let left = u32::try_from(max - items.len()).unwrap_or(u32::MAX);
            let page = self
                .list(prefix, Some(left.min(LIST_MAX_LIMIT)), cursor.as_deref())
                .await?;
            items.extend(page.items);
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        items.truncate(max);
        Ok(items)
    }
}
