//! What clients saw, and whether it is consistent with mutual exclusion.
//!
//! Clients record every lock operation with client-side times (an `Instant`
//! just before sending, another when the answer or the failure came) in a
//! [`History`], most easily through a [`Recorder`]. After the run:
//!
//! - [`History::check`] (in `check.rs`) checks, per key, that no two grants
//!   overlap in time and that fencing tokens increase in the order grants
//!   were observed;
//! - [`History::check_committed`] (in `committed.rs`) looks at the
//!   database: a release answered `200 released: true` must have
//!   committed, so its lease must not still be live there.
//!
//! Both only use what a client can know, so they hold for any correct
//! broker, whatever faults were injected: a request that failed or timed
//! out may or may not have taken effect, and the checks assume neither.

mod check;
mod committed;
mod record;

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

pub use check::{GrantSeen, HoldSeen, Release503, Report, Tally, Violation};
pub use record::Recorder;

/// The tenant whose keys the checks read in the database.
pub const DEFAULT_TENANT: &str = "default";

/// What was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Acquire { ttl_ms: u64, wait_ms: u64 },
    Release { token: u64 },
    Renew { token: u64, ttl_ms: u64 },
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An HTTP answer, with the fields the checks need from its body.
    Reply {
        status: u16,
        /// A grant's `token` (acquire, renew).
        token: Option<u64>,
        /// A grant's or a release's `hold_count`.
        hold_count: Option<u32>,
        /// A release's `released`.
        released: Option<bool>,
    },
    /// No answer within the client-side limit.
    Timeout,
    /// No answer: the connection was refused, reset or closed.
    Failed(String),
}

impl Outcome {
    /// The HTTP status, if the broker answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Reply { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The token of a `200` grant (acquire or renew).
    pub fn granted(&self) -> Option<u64> {
        match self {
            Outcome::Reply {
                status: 200, token, ..
            } => *token,
            _ => None,
        }
    }

    /// Whether this is a `200` release that freed the lock.
    pub fn freed(&self) -> bool {
        matches!(
            self,
            Outcome::Reply {
                status: 200,
                released: Some(true),
                ..
            }
        )
    }
}

/// One operation as a client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub key: String,
    pub owner: String,
    pub request: Request,
    /// Just before the request was sent.
    pub sent: Instant,
    /// When the answer (or the failure) arrived.
    pub answered: Instant,
    pub outcome: Outcome,
}

/// Every operation of a run, in the order they were recorded. Shared by
/// the clients behind an `Arc`.
#[derive(Debug)]
pub struct History {
    /// Times in reports are shown relative to this.
    origin: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

impl History {
    pub fn new() -> History {
        History {
            origin: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    pub fn record(&self, op: Op) {
        self.ops.lock().expect("history lock").push(op);
    }

    /// A copy of what was recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("history lock").clone()
    }

    pub fn len(&self) -> usize {
        self.ops.lock().expect("history lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long after the history began `at` was, for reports.
    pub fn offset(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }
}
