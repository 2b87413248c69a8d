//! The feed of every change, for event streams (`GET /v1/events`). Every
//! change of a lock, semaphore or rwlock is an event of the history
//! (`lock_events`), written by the transaction that makes it, through any
//! broker; each broker follows that table ([`Engine::run_feed`]) and hands
//! the events, in id order, to its own open streams.
//!
//! Ids are given out when a transaction inserts its events, just before it
//! commits, so a later id can become visible before an earlier one. The
//! feed keeps order: an event waits until every id below it is seen, or
//! for [`GAP_HOLD`] at most (an id that never shows was rolled back, or on
//! Galera belongs to another node's sequence). Ids passed over so are
//! looked for again for [`LATE_WINDOW`]: one that commits late still
//! reaches the streams, out of order. A stream that connects catches up
//! from the table up to the feed's horizon, then follows the feed.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use chrono::NaiveDateTime;
use tokio::{
    sync::{broadcast, watch},
    time::Instant,
};

use super::{Engine, EngineError};
use crate::store::{
    history::{self, EndCause, EventKind, FeedRow, DEADLOCK_KIND, SESSION_KIND},
    Kind,
};

use super::deadlock::CycleLink;

/// How often the feed looks for new events while streams are open.
const POLL: Duration = Duration::from_millis(100);
/// How long an event waits for an id below it that has not shown.
const GAP_HOLD: Duration = Duration::from_millis(250);
/// How long an id passed over is looked for again.
const LATE_WINDOW: Duration = Duration::from_secs(3);
/// At most this many ids passed over are looked for again.
const MAX_DOUBTFUL: usize = 512;
/// Events read per statement.
const BATCH: u32 = 1000;
/// Events a slow stream may lag behind before it must catch up again.
const BUFFER: usize = 4096;

/// One change of a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Increasing in the order the feed hands events on.
    pub id: u64,
    pub tenant: String,
    /// The key's kind; `None`: a session's end (`storage_key` its id).
    pub kind: Option<Kind>,
    pub storage_key: String,
    pub event: EventKind,
    pub owner: String,
    pub token: u64,
    /// By the database clock.
    pub at: NaiveDateTime,
    /// The session the lease was held in (or that ended).
    pub session: Option<String>,
    /// Why a session's end released it (or why the session ended).
    pub reason: Option<EndCause>,
    /// A `deadlock` event's cycle: its first step is the refused wait.
    pub cycle: Option<Vec<CycleLink>>,
}

impl Event {
    pub(super) fn of(row: FeedRow) -> Option<Event> {
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        let cycle = row.cycle.as_deref().and_then(CycleLink::decode);
        Some(Event {
            id: row.id,
            tenant: text(row.tenant),
            kind: match row.kind {
                0 => Some(Kind::Lock),
                2 => Some(Kind::Semaphore),
                3 => Some(Kind::RwLock),
                SESSION_KIND => None,
                // The refused wait's key's kind.
                DEADLOCK_KIND => Some(cycle.as_ref()?.first()?.kind),
                _ => return None,
            },
            storage_key: text(row.lock_key),
            event: EventKind::from_code(row.event)?,
            owner: text(row.owner),
            token: row.token,
            at: row.at,
            session: row.session.map(text),
            reason: row.reason.and_then(EndCause::from_code),
            cycle,
        })
    }
}

/// This broker's feed on one database.
pub(super) struct Feed {
    tx: broadcast::Sender<Arc<Event>>,
    /// Every event up to this id has been handed on (or passed over).
    horizon: AtomicU64,
    /// Open streams, by tenant.
    streams: Mutex<HashMap<String, usize>>,
}

impl Default for Feed {
    fn default() -> Feed {
        Feed {
            tx: broadcast::channel(BUFFER).0,
            horizon: AtomicU64::new(0),
            streams: Mutex::default(),
        }
    }
}

/// An open stream's place in the feed. Dropping it closes the stream's
/// slot in its tenant's count.
pub struct Subscription {
    /// The feed's events from `horizon` on (those up to it are caught up
    /// from the table, [`Engine::events_of`]).
    pub live: broadcast::Receiver<Arc<Event>>,
    pub horizon: u64,
    _slot: Slot,
}

impl Subscription {
    /// Starts over from the feed's horizon now (after the stream fell
    /// behind the feed's buffer): the events up to it are caught up again.
    pub fn resubscribe(&mut self, engine: &Engine) {
        self.live = engine.feed.tx.subscribe();
        self.horizon = engine.feed.horizon.load(Ordering::Acquire);
    }
}

struct Slot {
    engine: Engine,
    tenant: String,
}

/// The gauge of a tenant's open event streams on this broker.
const OPEN_STREAMS: &str = "lockbroker_event_streams_open";

impl Drop for Slot {
    fn drop(&mut self) {
        let mut streams = self.engine.feed.streams.lock().expect("streams");
        if let Some(n) = streams.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
        }
        self.engine
            .metrics
            .add_gauge(OPEN_STREAMS, &[("tenant", &self.tenant)], -1);
    }
}

/// What the feed knows between polls.
#[derive(Default)]
struct Following {
    /// Seen, waiting for the ids below them (with when first seen).
    pending: BTreeMap<u64, (Event, Instant)>,
    /// Ids passed over as gaps, with when.
    doubtful: VecDeque<(u64, Instant)>,
}

impl Engine {
    /// Opens a stream of `tenant`'s events, one of at most `max_streams`
    /// of the tenant on this broker.
    ///
    /// # Errors
    /// [`EngineError::TooManyStreams`].
    pub fn subscribe_events(
        &self,
        tenant: &str,
        max_streams: usize,
    ) -> Result<Subscription, EngineError> {
        let mut streams = self.feed.streams.lock().expect("streams");
        let open = streams.entry(tenant.to_owned()).or_default();
        if *open >= max_streams {
            return Err(EngineError::TooManyStreams);
        }
        *open += 1;
        self.metrics
            .add_gauge(OPEN_STREAMS, &[("tenant", tenant)], 1);
        let slot = Slot {
            engine: self.clone(),
            tenant: tenant.to_owned(),
        };
        Ok(Subscription {
            live: self.feed.tx.subscribe(),
            horizon: self.feed.horizon.load(Ordering::Acquire),
            _slot: slot,
        })
    }

    /// `tenant`'s events with ids after `after` up to `until`, oldest
    /// first, at most [`BATCH`] (a stream catching up calls again from the
    /// last one).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub async fn events_of(
        &self,
        tenant: &str,
        after: u64,
        until: u64,
    ) -> Result<Vec<Event>, EngineError> {
        let budget = self.budget();
        let rows = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let rows = history::of_tenant(&mut conn, tenant, (after, until), BATCH).await?;
                conn.done();
                Ok(rows)
            })
            .await?;
        Ok(rows.into_iter().filter_map(Event::of).collect())
    }

    /// The lowest id of the events still kept (`None`: none are).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub async fn oldest_event(&self) -> Result<Option<u64>, EngineError> {
        Ok(self.event_ids().await?.0)
    }

    async fn event_ids(&self) -> Result<(Option<u64>, Option<u64>), EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let ids = history::ids(&mut conn).await?;
            conn.done();
            Ok(ids)
        })
        .await
    }

    /// Follows the history table until `stop`, handing new events to this
    /// broker's streams in id order. Idle (one read a second, to keep its
    /// place) while no stream is open.
    pub async fn run_feed(self, mut stop: watch::Receiver<bool>) {
        let mut following = Following::default();
        let mut idle_since: Option<Instant> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = crate::shutdown::stopped(&mut stop) => return,
            }
            let result = if self.feed.tx.receiver_count() > 0 {
                idle_since = None;
                self.follow(&mut following).await
            } else if idle_since.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                idle_since = Some(Instant::now());
                following = Following::default();
                self.event_ids().await.map(|(_, newest)| {
                    let newest = newest.unwrap_or(0);
                    self.feed.horizon.fetch_max(newest, Ordering::AcqRel);
                })
            } else {
                Ok(())
            };
            if let Err(err) = result {
                tracing::debug!(error = %err, "the event feed could not read the history");
            }
        }
    }

    /// One poll: reads what is new (and the ids passed over lately), hands
    /// on what is in order or has waited long enough.
    async fn follow(&self, following: &mut Following) -> Result<(), EngineError> {
        let horizon = self.feed.horizon.load(Ordering::Acquire);
        let doubtful: Vec<u64> = following.doubtful.iter().map(|(id, _)| *id).collect();
        let budget = self.budget();
        let (rows, late) = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let rows = history::after(&mut conn, horizon, BATCH).await?;
                let late = history::with_ids(&mut conn, &doubtful).await?;
                conn.done();
                Ok((rows, late))
            })
            .await?;
        let now = Instant::now();
        for event in late.into_iter().filter_map(Event::of) {
            following.doubtful.retain(|(id, _)| *id != event.id);
            self.publish(event);
        }
        for event in rows.into_iter().filter_map(Event::of) {
            following.pending.entry(event.id).or_insert((event, now));
        }
        let mut horizon = horizon;
        while let Some(entry) = following.pending.first_entry() {
            let (id, waited) = (*entry.key(), entry.get().1.elapsed());
            if id > horizon + 1 && waited < GAP_HOLD {
                break;
            }
            for gap in (horizon + 1..id).rev().take(MAX_DOUBTFUL) {
                following.doubtful.push_back((gap, now));
            }
            let (event, _) = entry.remove();
            horizon = id;
            self.feed.horizon.store(id, Ordering::Release);
            self.publish(event);
        }
        while following.doubtful.len() > MAX_DOUBTFUL
            || following
                .doubtful
                .front()
                .is_some_and(|(_, at)| at.elapsed() > LATE_WINDOW)
        {
            following.doubtful.pop_front();
        }
        Ok(())
    }

    fn publish(&self, event: Event) {
        // No stream open: nobody to tell.
        let _ = self.feed.tx.send(Arc::new(event));
    }
}
