//! Leader election: a lease in its own namespace, where the leader is the
//! holder and the term is the fencing token. The bodies are the lock's
//! ([`crate::lease`]) with `candidate` for `owner` and `term` for `token`.

use serde::{Deserialize, Serialize};

use crate::LeaseTerms;

/// `POST /v1/elections/{name}/campaign`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CampaignRequest {
    /// Identifies the candidate: 1 to 128 bytes of UTF-8, compared byte for
    /// byte. Any characters are accepted, control characters included.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub candidate: String,
    /// `wait_ms` is how long to wait for the leadership; `priority` orders
    /// waiting candidates for fairness policies that use it.
    #[serde(flatten)]
    pub terms: LeaseTerms,
}

impl CampaignRequest {
    /// A campaign with the defaults: NOWAIT, default TTL.
    pub fn new(candidate: impl Into<String>) -> CampaignRequest {
        CampaignRequest {
            candidate: candidate.into(),
            terms: LeaseTerms::default(),
        }
    }
}

/// `POST /v1/elections/{name}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElectionRenewRequest {
    /// The leader (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub candidate: String,
    /// The term being renewed.
    pub term: u64,
    /// New lease length from now, in milliseconds: 100 to the tenant's
    /// `max_ttl_ms`. Absent or null: 30000 (or `max_ttl_ms` if smaller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, default = 30000))]
    pub ttl_ms: Option<u64>,
}

/// `POST /v1/elections/{name}/resign`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResignRequest {
    /// The leader (1 to 128 bytes).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub candidate: String,
    /// The term being resigned.
    pub term: u64,
}

/// The leadership won or renewed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Leadership {
    /// The election's name as the client sent it (decoded).
    pub name: String,
    /// The leading candidate.
    pub leader: String,
    /// The term: the election's fencing token, strictly increasing with
    /// every new leadership and never repeated.
    pub term: u64,
    /// Lease length granted, in milliseconds.
    pub ttl_ms: u64,
    /// End of the lease by the database clock, UTC with milliseconds.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
}

/// The answer to a resignation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResignResponse {
    /// True: the leadership ended and the election is open.
    pub resigned: bool,
}

/// Who leads an election now: `GET /v1/elections/{name}`, and the data of
/// each `leader` event of `observe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElectionStatus {
    /// The election's name (decoded; in a listing, its storage key).
    pub name: String,
    /// The storage key the tenant's naming policy mapped the name to.
    pub storage_key: String,
    /// The leader; null when nobody leads.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub leader: Option<String>,
    /// The current term; null when nobody leads.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub term: Option<u64>,
    /// End of the leader's lease (database clock, UTC); null when nobody
    /// leads.
    #[cfg_attr(feature = "openapi", schema(required = true, format = DateTime))]
    pub expires_at: Option<String>,
}

/// The data of one `leader` event: the same shape as [`ElectionStatus`].
pub type LeaderEvent = ElectionStatus;

/// One Server-Sent Event of `GET /v1/elections/{name}/observe`: its
/// `event:` line is the tag and its `data:` line the content as one line of
/// JSON. The stream starts with the current leadership and sends one event
/// per change of leader (every new term, every vacancy); comment lines
/// (`: keep-alive`) keep an idle stream open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "event", content = "data", rename_all = "snake_case")]
pub enum ElectionEvent {
    /// The leadership changed (or, first, what it is now).
    Leader(ElectionStatus),
}

impl ElectionEvent {
    /// The event's name, its `event:` line.
    pub fn name(&self) -> &'static str {
        match self {
            ElectionEvent::Leader(_) => "leader",
        }
    }
}
